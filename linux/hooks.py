"""The node agent's four dataplane hooks, handed to a provider's ``dataplane`` object.

A provider whose dataplane is an object with ``plug``, ``unplug``, ``check`` and
``plugs`` (``podnet.linux.eni.EniDataplane``, the reference bridge network) inherits
:class:`DataplaneHooks` instead of writing the four hookimpls that only pass the call on.
Routing (each call reaches the record's own provider) is the gateway's, as for any hook.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import CheckResult, Plug, PlugContext, PlugResult, UnplugContext


class Dataplane(Protocol):
    """What every dataplane answers. A dataplane may offer more: each optional capability
    is a protocol of its own below, which the node agent looks for on the provider's
    ``dataplane`` object (absent: not offered), never asking whose class it is."""

    def plug(self, context: PlugContext) -> PlugResult: ...

    def unplug(self, context: UnplugContext) -> None: ...

    def check(self, context: PlugContext) -> CheckResult: ...

    def plugs(self) -> list[Plug]: ...


@runtime_checkable
class ReportsAnnotations(Protocol):
    """Optional: what the dataplane has in place on this host, as annotations of the node
    agent's report (its node's Lease), for ``podnet status`` and ``podnet audit``, which
    cannot see a node's netlink. Asked again at each report; an ``OSError`` (netlink
    unreadable now) keeps the last answer. It describes the host, not one provider's
    records: dataplanes of one class are asked once (``podnet.linux.eni.EniDataplane``
    answers the ENI summary)."""

    def report_annotations(self) -> Mapping[str, str]: ...


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
