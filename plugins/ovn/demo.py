"""The OVN provider on a throwaway Northbound server, for ``podnet demo --provider ovn``.

:data:`DEMO` is what the demo runs (see :mod:`podnet.hookspecs.demo`): :func:`build`
starts an ``ovsdb-server`` with the OVN Northbound schema in a temporary folder (stopped
and removed at interpreter exit), and a provider connected to it over a unix socket. When
ovsdb-server is not installed it raises :class:`NbServerMissing`, whose message says how
to install it (Debian ``ovn-central``).
"""

from __future__ import annotations

import atexit
from collections import Counter
from typing import Any

from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings
from podnet.plugins.ovn.nbserver import NbServer, NbServerMissing
from podnet.plugins.ovn.provider import OvnProvider

__all__ = ["DEMO", "SUBNETS", "NbServerMissing", "build"]

#: the demo's default Subnet (room for any demo size), declared as an object (the demo
#: creates it in its cluster; core hands it to the provider)
SUBNETS: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "ovn-default"},
     "spec": {"provider": "ovn", "cidrBlock": "10.16.0.0/16", "default": True,
              "parameters": {"logicalSwitch": "ovn-default", "gatewayType": "distributed"}}},
)


def build(settings: DemoSettings) -> DemoCloud:
    """The NB server and the provider connected to it.

    ``calls()`` counts NB transactions (``ovn_transactions``), the pod networks whose
    commands shared a transaction with others (``ovn_batched``) and the provider's hook
    calls. Only ``settings.seed`` applies: cloud latency, rate and faults do not apply to
    a real NB server.
    """
    server = NbServer().start()
    atexit.register(server.close)
    # no subnet in its config: the Subnet objects serve (:data:`SUBNETS`, and the mixed
    # cluster's overlay, which the demo declares)
    plugin = OvnProvider(server.remote, (), seed=settings.seed)
    plugin.nb_server = server  # type: ignore[attr-defined]  # kept alive with the plugin

    def calls() -> Counter[str]:
        out = Counter(plugin.calls)
        client = plugin.client
        out["ovn_transactions"] = client.transactions
        out["ovn_batched"] = client.batcher.batched
        return out

    # an overlay needs nothing from the node: setup_node keeps it as it is
    return DemoCloud(plugin, plugin.nb_addresses, calls)


#: in the mixed demo, the clouds serve the nodes; OVN serves the overlay attachments
DEMO = DemoProvider(build, serves_nodes=False, subnets=SUBNETS)
