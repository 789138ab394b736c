"""The demo interface: what a provider ships so that ``podnet demo`` can run it.

Not a hook: the demo needs a provider together with a stand-in for its cloud (a
simulator, a throwaway server) and a way to read that stand-in's ground truth, before any
plugin manager exists. A provider that takes part has a demo module (the built-in ones:
``podnet.plugins.<name>.demo``) defining ``DEMO``, a :class:`DemoProvider`. The
application's demo (``podnet.app.demo``) keeps the registry of those modules by provider
name, imports the module of each provider a run needs, refuses a ``DEMO`` that is not a
:class:`DemoProvider`, and calls its ``build`` once per run.

See docs/writing-a-provider.md, section 11.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

__all__ = ["DemoCloud", "DemoProvider", "DemoSettings", "DemoUnavailable", "keep_node"]


class DemoUnavailable(RuntimeError):
    """A provider's stand-in cannot run on this host (a program it needs is not
    installed); the message says what to install. ``build`` raises it."""


@attrs.frozen
class DemoSettings:
    """The demo's knobs a stand-in cloud may honour (each may ignore what does not apply:
    a real Northbound server has no latency to add)."""

    seed: int = 0
    #: added to every cloud call
    cloud_latency_ms: float = 0.0
    #: calls per second per API the cloud itself allows (``None``: no limit of its own)
    cloud_rate: float | None = None
    #: the share of cloud calls the stand-in fails, as its cloud would
    fault_rate: float = 0.0


def keep_node(node: dict[str, Any]) -> dict[str, Any]:
    """The :attr:`DemoCloud.setup_node` of a stand-in that needs nothing from a Node."""
    return node


@attrs.frozen
class DemoCloud:
    """One provider on its stand-in cloud, built for one demo run (kept running until
    the process exits)."""

    #: the plugin to register (an object or a module holding ``@hookimpl`` functions)
    plugin: object
    #: every address the stand-in cloud holds now -> the name of the node it is on
    ground_truth: Callable[[], Mapping[str, str]]
    #: calls made to the stand-in so far, by API name
    calls: Callable[[], Mapping[str, int]]
    #: called with each demo Node (a dict) before it is created; returns the Node as this
    #: cloud's nodes look (instance id, labels), after registering its instance
    setup_node: Callable[[dict[str, Any]], dict[str, Any]] = keep_node
    #: the stand-in cloud's attached ENIs (dicts: ``id``, ``instance``, ``mac``,
    #: ``gateway``, ``addresses``), for a simulated VPC the demo's ENI nodes plug into;
    #: None: the cloud has none
    attached: Callable[[], list[dict[str, Any]]] | None = None


@attrs.frozen
class DemoProvider:
    """What a provider's demo module declares as ``DEMO``."""

    #: starts the stand-in cloud and the provider talking to it
    build: Callable[[DemoSettings], DemoCloud]
    #: the provider serves nodes (a pool provider); ``False``: only attachment networks
    #: (the mixed demo then gives it no node)
    serves_nodes: bool = True
    #: the cloud APIs that change something, for the demo's count of write calls
    write_apis: tuple[str, ...] = ()
    #: the fewest calls a perfect controller could make for a burst of pods (pods per
    #: node -> API -> (calls, whether it writes)); for one-provider runs' lower bound
    min_calls: Callable[[Sequence[int]], Mapping[str, tuple[int, bool]]] | None = None
    #: the Subnet objects (``podnet.io/v1alpha1``, each ``{"metadata": {"name": ...},
    #: "spec": {...}}``) the demo creates in its cluster before any pod, as an operator
    #: declares a provider's networks; empty: the provider needs none
    subnets: tuple[Mapping[str, Any], ...] = ()
