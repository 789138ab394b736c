"""The node agent's four dataplane hooks, handed to a provider's ``dataplane`` object.

A provider whose dataplane is an object with ``plug``, ``unplug``, ``check`` and
``plugs`` (``podnet.linux.eni.EniDataplane``, the reference bridge network) inherits
:class:`DataplaneHooks` instead of writing the four hookimpls that only pass the call on.
Routing (each call reaches the record's own provider) is the gateway's, as for any hook.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import CheckResult, Plug, PlugContext, PlugResult, UnplugContext


class Dataplane(Protocol):
    def plug(self, context: PlugContext) -> PlugResult: ...

    def unplug(self, context: UnplugContext) -> None: ...

    def check(self, context: PlugContext) -> CheckResult: ...

    def plugs(self) -> list[Plug]: ...


class DataplaneHooks:
    """``podnet_plug``, ``podnet_unplug``, ``podnet_check_plug`` and ``podnet_plugs``,
    answered by ``self.dataplane``."""

    dataplane: Dataplane

    @hookimpl
    def podnet_plug(self, context: PlugContext) -> PlugResult | None:
        return self.dataplane.plug(context)

    @hookimpl
    def podnet_unplug(self, context: UnplugContext) -> None:
        self.dataplane.unplug(context)

    @hookimpl
    def podnet_check_plug(self, context: PlugContext) -> CheckResult | None:
        return self.dataplane.check(context)

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> Sequence[Plug] | None:
        return self.dataplane.plugs()
