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

__all__ = ["DEMO", "NETWORKS", "SUBNETS", "NbServerMissing", "build"]

#: the demo's default subnet (room for any demo size), and the attachment network's
SUBNETS: list[dict[str, Any]] = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True,
            "gateway_type": "distributed"},
           {"name": "ovn-overlay", "cidr": "10.20.0.0/16", "gateway_type": "distributed"}]
#: attachment networks (``podnet.io/networks``) this provider serves -> subnet
NETWORKS = {"overlay": "ovn-overlay"}


def build(settings: DemoSettings) -> DemoCloud:
    """The NB server and the provider connected to it.

    ``calls()`` counts NB transactions (``ovn_transactions``), the pod networks whose
    commands shared a transaction with others (``ovn_batched``) and the provider's hook
    calls. Only ``settings.seed`` applies: cloud latency, rate and faults do not apply to
    a real NB server.
    """
    server = NbServer().start()
    atexit.register(server.close)
    plugin = OvnProvider(server.remote, SUBNETS, seed=settings.seed, networks=NETWORKS)
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
DEMO = DemoProvider(build, serves_nodes=False)
