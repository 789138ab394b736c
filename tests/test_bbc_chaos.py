"""The chaos machine against the BBC provider on its loopback simulator.

``PODNET_CHAOS_EXAMPLES`` sets the example count (default 200, the kit's CI default; the
tight machine runs half as many). Every hook is a real HTTP call through bce-python-sdk:
measured here, 200 + 100 examples take about 45 s.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Mapping
from typing import Any

import attrs

from podnet.core.cluster.port import NODE_NETWORK, ApiError
from podnet.plugins.bbc.demo import provider_for, register_nodes, start_simulator
from podnet.plugins.bbc.provider import BbcProvider, default_policy
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.testing.chaos import EXAMPLES_ENV, chaos_settings, make_chaos_machine
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

NODES = 3
#: examples when PODNET_CHAOS_EXAMPLES is not set
DEFAULT_EXAMPLES = 200

_SIM: BbcSimulator | None = None


def _simulator() -> BbcSimulator:
    """One simulator for the module, emptied for each example."""
    global _SIM
    if _SIM is None:
        _SIM = start_simulator()
        atexit.register(_SIM.stop)
    return _SIM


def _provider(ip_cap: int = 40, cloud_cap: int | None = None, **policy: Any) -> BbcProvider:
    sim = _simulator()
    sim.reset()
    register_nodes(sim, [World.node_name(i) for i in range(NODES)],
                   ip_cap=cloud_cap if cloud_cap is not None else ip_cap)
    provider = provider_for(sim, ip_cap=ip_cap,
                            policy=attrs.evolve(default_policy(), **policy) if policy else None)
    provider.sim = sim  # type: ignore[attr-defined]
    return provider


def _addresses(plugin: Any) -> Mapping[str, str]:
    sim: BbcSimulator = plugin.sim
    return sim.addresses()


def _fault_rate(plugin: Any, rate: float) -> None:
    sim: BbcSimulator = plugin.sim
    sim.fault_rate = rate


def _forget(plugin: Any, _node: str, addresses: list[str]) -> None:
    sim: BbcSimulator = plugin.sim
    sim.forget(addresses)


def _examples() -> int:
    return int(os.environ.get(EXAMPLES_ENV, str(DEFAULT_EXAMPLES)))


BbcChaos = make_chaos_machine(_provider, _addresses, cloud_fault_rate=_fault_rate,
                              cloud_forget=_forget,
                              nodes=NODES, name="BbcChaos")
TestBbcChaos = BbcChaos.TestCase
TestBbcChaos.settings = chaos_settings(_examples())

#: a small pool, and instances that refuse more addresses (ExceedLimitException) before
#: the cap the provider was told (as a memory limit does): halving, backoff and shrink
TightBbcChaos = make_chaos_machine(
    lambda: _provider(ip_cap=12, cloud_cap=9, min_idle=1, max_idle=2, batch_size=2,
                      max_batch_size=4, reuse_cooldown=0.0),
    _addresses, cloud_fault_rate=_fault_rate, nodes=NODES, pods=8, name="TightBbcChaos")
TestTightBbcChaos = TightBbcChaos.TestCase
TestTightBbcChaos.settings = chaos_settings(max(1, _examples() // 2))


def test_a_node_registered_again_then_deleted_in_its_records_gap_keeps_its_addresses(
) -> None:
    """Found by the machine: node-0000 deleted and registered again before the controller
    saw it; its old record, marked by the garbage collector, was let go and the new one's
    create failed; the Node deleted again with the controller killed at the next
    inventory: no record named the node's addresses, and the restarted controller never
    learnt of them. Now the record of a machine that still runs is not let go: being
    deleted, it keeps recording the pool until the node leaves."""
    state = BbcChaos()
    try:
        state.populate(up=1, running=1)
        state.settle(seconds=0.0)
        state.delete_node(i=0)
        state.add_node(i=0)
        state.cluster.faults.fail_next("create", NODE_NETWORK,
                                       ApiError("injected server error"), times=1)
        state.settle(seconds=0.0)
        state.node_deleted(i=0, kill="node_inventory", pods_on_it=0, steps=1, when="before")
        state.every_cloud_address_has_a_record()
        state.teardown()
    finally:
        state.world.close()
