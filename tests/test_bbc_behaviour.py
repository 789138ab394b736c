"""BBC behaviour on a fake clock (issue 6): batch halving and backoff on quota errors, the
short-circuit at the cap, leaked-address GC, node deletion, a restart in a burst."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pytest

from podnet.core.clock import FakeClock
from podnet.core.models import Phase
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import CloudInterface, NodeContext, PoolEntry
from podnet.plugins.bbc.demo import instance_of, register_nodes, start_simulator
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.sim import API_ADD, API_DEL, BbcSimulator
from podnet.testing.harness import FaultInjector, World

pytest_plugins = ["podnet.testing"]


class RecordingBbc(BbcProvider):
    """The BBC provider, noting when each grow was asked for and how many addresses."""

    clock: FakeClock | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.grows: list[tuple[float, int]] = []

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        if provider == self.name and self.clock is not None:
            self.grows.append((self.clock.monotonic(), count))
        return super().podnet_pool_grow(provider, node, interface, count, subnet)


@pytest.fixture
def bbc_sim() -> Iterator[BbcSimulator]:
    sim = start_simulator()
    register_nodes(sim, [World.node_name(i) for i in range(3)])
    yield sim
    sim.stop()


@pytest.fixture
def provider_plugin(bbc_sim: BbcSimulator, fake_clock: FakeClock) -> RecordingBbc:
    plugin = RecordingBbc(endpoint=bbc_sim.endpoint, access_key_id="ak",
                          secret_access_key="sk")
    plugin.clock = fake_clock
    return plugin


@pytest.fixture
def ground_truth(bbc_sim: BbcSimulator) -> Callable[[], Mapping[str, str]]:
    return bbc_sim.addresses


def _ready(world: World) -> None:
    world.add_node(0)
    world.settle()


def test_quota_errors_halve_the_batch_then_back_off(world: World, bbc_sim: BbcSimulator,
                                                    provider_plugin: RecordingBbc) -> None:
    _ready(world)
    bbc_sim.script(API_ADD, "ExceedLimitException", times=6)
    world.add_pod("p0", 0)
    world.settle(advance=200)
    grows = provider_plugin.grows
    assert [count for _, count in grows] == [4, 2, 1, 1, 1, 1, 1]
    start = grows[0][0]
    # halving is immediate; at batch 1 the waits grow 2 s x 2
    assert [round(t - start) for t, _ in grows] == [0, 0, 0, 2, 6, 14, 30]
    world.assert_converged()
    # success cleared the backoff and the halved batch: the next grow asks for the demand
    # (5), not for 1, and without waiting out a backoff
    added_at = world.clock.monotonic()
    for i in range(1, 6):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    assert grows[-1][1] == 5 and grows[-1][0] - added_at < 1
    world.assert_converged()


def test_backoff_cap_is_shared_by_the_tries(world: World, bbc_sim: BbcSimulator,
                                            provider_plugin: RecordingBbc) -> None:
    """The cap is 60 s / (log2(batch 4) + 1) / 1 subnet = 20 s, as CCE's BBC IPAM has it."""
    _ready(world)
    bbc_sim.script(API_ADD, "VmMemoryCanNotAttachMoreIpException", times=10)
    world.add_pod("p0", 0)
    world.settle(advance=600)
    times = [t for t, _ in provider_plugin.grows]
    gaps = [round(b - a) for a, b in itertools.pairwise(times)]
    assert gaps[2:] == [2, 4, 8, 16, 20, 20, 20, 20]
    world.assert_converged()


def test_exhausted_subnet_short_circuits_without_a_write(world: World, bbc_sim: BbcSimulator,
                                                         provider_plugin: RecordingBbc) -> None:
    """At the cap, the provider reads the subnet first and fails fast, no write call."""
    bbc_sim.add_subnet("sbn-tiny", "10.200.0.0/29")  # 5 usable addresses
    bbc_sim.add_instance("tiny-0", "sbn-tiny")
    filler = bbc_sim.add_outside("tiny-0")
    others = [bbc_sim.add_outside("tiny-0") for _ in range(3)]
    assert bbc_sim.free_ips("sbn-tiny") == 0
    # node 0 is instance tiny-0 (its providerID's tail)
    world.add_node(0)
    node = world.cluster.get(*_node(world, 0))
    node["spec"]["providerID"] = "cce://tiny-0"
    world.cluster.update(_node(world, 0)[0], node)
    world.settle()
    world.add_pod("p0", 0)
    world.settle(advance=120)
    writes = bbc_sim.calls[API_ADD]
    assert writes == 1, "after the first refusal, the subnet is checked before any write"
    assert len(provider_plugin.grows) > 3
    pn = world.record_of("p0")
    assert pn is not None and pn.status.phase is Phase.PENDING
    messages = [c.message for c in pn.status.conditions]
    assert any("sbn-tiny has no free IP (checked before calling)" in m for m in messages), \
        messages
    # an address comes free: the next attempt adds it, the pod is routed
    bbc_sim.remove_instance("tiny-0")
    bbc_sim.add_instance("tiny-0", "sbn-tiny")
    for ip in others:
        bbc_sim.add_outside("tiny-0", ip)
    del filler
    world.settle(advance=120)
    assert bbc_sim.calls[API_ADD] == writes + 1
    pn = world.record_of("p0")
    assert pn is not None and pn.status.phase is Phase.ROUTED


def _node(world: World, i: int) -> tuple[Any, str]:
    from podnet.core.cluster.port import NODE

    return NODE, world.node_name(i)


def test_node_at_its_cap_makes_no_call(world: World, bbc_sim: BbcSimulator) -> None:
    _ready(world)
    for i in range(40):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=30)
    calls = bbc_sim.calls[API_ADD]
    world.add_pod("p40", 0)
    world.settle(advance=120)
    assert bbc_sim.calls[API_ADD] == calls
    pn = world.record_of("p40")
    assert pn is not None and pn.status.phase is Phase.PENDING
    assert any("capacity of 40" in c.message for c in pn.status.conditions)


def test_outside_address_is_deleted_after_the_expiry_not_before(
        world: World, bbc_sim: BbcSimulator) -> None:
    _ready(world)
    world.add_pod("p0", 0)
    world.settle()
    leaked = bbc_sim.add_outside(world.node_name(0))
    policy = world.policy()
    world.settle(advance=policy.leaked_ip_expiry - 1)
    assert leaked in bbc_sim.addresses(), "deleted before the expiry"
    world.settle(advance=1 + 2 * policy.gc_period)
    assert leaked not in bbc_sim.addresses()
    assert bbc_sim.calls[API_DEL] >= 1
    world.assert_converged()


def test_outside_address_a_pod_turns_out_to_use_is_kept(world: World,
                                                        bbc_sim: BbcSimulator) -> None:
    _ready(world)
    ip = bbc_sim.add_outside(world.node_name(0))
    world.settle(advance=world.policy().gc_period + 1)  # now a suspect
    world.add_pod("web", 0, annotations={"podnet.io/ip-address": ip})
    world.settle()
    pn = world.record_of("web")
    assert pn is not None and pn.status.phase is Phase.ROUTED and pn.status.ip == ip
    world.settle(advance=world.gc_grace() + 60)
    assert bbc_sim.addresses().get(ip) == world.node_name(0)
    world.assert_converged()


def test_deleted_node_leaves_no_state(world: World, bbc_sim: BbcSimulator,
                                      provider_plugin: RecordingBbc) -> None:
    _ready(world)
    world.add_node(1)
    for i in range(3):
        world.add_pod(f"p{i}", 0)
    world.add_pod("other", 1)
    world.settle()
    gone = instance_of(world.node_name(0))
    assert gone in provider_plugin.remembered()
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    engine = world.engine
    assert engine.pools.find(world.provider, world.node_name(0)) is None
    # the provider was told (podnet_node_removed): nothing kept about the node's instance
    remembered = provider_plugin.remembered()
    assert gone not in remembered and world.node_name(0) not in remembered
    assert instance_of(world.node_name(1)) in remembered
    assert all(pn.spec.node_name != world.node_name(0) for pn in world.records())
    assert world.record_of("other") is not None
    world.assert_converged()


def test_restart_in_a_burst_makes_no_duplicate(world: World, bbc_sim: BbcSimulator,
                                              fault_injector: FaultInjector) -> None:
    _ready(world)
    for i in range(20):
        world.add_pod(f"p{i}", 0)
    world.step(15)
    world.restart()
    fault_injector.crash("pool_grow", when="after")  # and a grow whose answer is lost
    world.settle()
    assert world.crashes == 1
    world.assert_no_double_owner()
    world.settle(advance=world.gc_grace())
    world.assert_converged()
    ips = [pn.status.ip for pn in world.records()]
    assert len(ips) == len(set(ips)) == 20
    policy = world.policy()
    assert len(bbc_sim.addresses()) <= 20 + policy.max_idle


def test_a_static_request_for_the_subnets_network_gateway_or_broadcast_is_refused(
        world: World, bbc_sim: BbcSimulator) -> None:
    """Issue 13, item 7: sbn-demo-a is 10.128.0.0/14, its gateway 10.128.0.1. None of the
    three goes to a pod, and none is asked of the cloud (checked before any call)."""
    _ready(world)
    world.add_pod("first", 0)
    world.settle(advance=1)
    adds = bbc_sim.calls[API_ADD]
    reserved = {"net": "10.128.0.0", "gw": "10.128.0.1", "bcast": "10.131.255.255"}
    for name, address in reserved.items():
        world.add_pod(name, 0, annotations={"podnet.io/ip-address": address})
    world.settle(advance=30)
    for name, address in reserved.items():
        record = world.record_of(name)
        assert record is not None and record.status.phase is Phase.PENDING, record
        [ready] = [c for c in record.status.conditions if c.type == "Ready"]
        assert ready.reason == "InvalidRequest", ready
        assert "podnet.io/ip-address" in ready.message and address in ready.message
    assert bbc_sim.calls[API_ADD] == adds
    assert not set(reserved.values()) & set(bbc_sim.addresses())
    record = world.record_of("first")
    assert record is not None and record.status.phase is Phase.ROUTED
