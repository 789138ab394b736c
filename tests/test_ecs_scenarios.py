"""Scenarios from the ECS issue, on the loopback simulator and a fake clock.

vSwitch exhaustion (Terway: an ENI whose vSwitch has no address left is blocked 10 min):
the pod network stays Pending with a condition naming the vSwitch, the ENI is inhibited
(``eni.inhibit``), another configured vSwitch takes over, and once the window has passed
the ENI recovers (``eni.recover``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from podnet.core.cluster.port import POD, POD_NETWORK
from podnet.core.models import InterfaceState, Phase
from podnet.core.policy import PoolPolicy
from podnet.core.reconcile.podnetwork import WAIT_SAID_AFTER
from podnet.plugins.ecs.demo import KIT_POLICY, EcsWorld, instance_id_for
from podnet.plugins.ecs.provider import POLICY, EcsProvider
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

#: Terway's windows, no gathering wait (the driver settles without moving the clock)
SCENARIO_POLICY = attrs.evolve(POLICY, aggregation_window=0.0)


@pytest.fixture
def vswitches() -> list[str]:
    return ["vsw-sim-a"]


@pytest.fixture
def policy() -> PoolPolicy:
    return SCENARIO_POLICY


@pytest.fixture
def ecs(vswitches: list[str], policy: PoolPolicy) -> Iterator[EcsWorld]:
    world = EcsWorld(nodes=2, policy=policy, vswitches_in_cloud={
        "vsw-sim-a": "10.0.0.0/24", "vsw-sim-b": "10.1.0.0/24"}, vswitches=vswitches)
    yield world
    world.close()


@pytest.fixture
def provider_plugin(ecs: EcsWorld) -> EcsProvider:
    return ecs.plugin


@pytest.fixture
def ground_truth(ecs: EcsWorld) -> Any:
    return ecs.addresses


def conditions_of(world: World, pod: str) -> list[str]:
    with world.quiet():
        return [c.get("message", "") for pn in world.cluster.list(POD_NETWORK,
                                                                  world.namespace).items
                if pn["spec"].get("podName") == pod
                for c in (pn.get("status") or {}).get("conditions") or ()]


def eni_triggers(hook_calls: HookRecorder) -> list[str]:
    return [e.trigger for e in hook_calls.transitions("eni", ok=True)]


def on_a_secondary_eni_with_no_idle_left(world: World) -> None:
    """Node 0 with a pod on a secondary ENI podnet made (the primary ENI holds no pod),
    and its idle addresses taken by more pods: the next pod needs a grow on that ENI."""
    world.add_node(0)
    world.settle()
    world.add_pod("first", 0)
    policy = world.policy()
    world.settle(advance=policy.min_ip_lifetime + 2 * policy.refill_period)
    pool = world.engine.pools.find(world.provider, World.node_name(0))
    assert pool is not None
    [eni] = pool.pooled_interfaces()
    assert len(pool.ipv4_on(eni.id)) < pool.ips_per_interface  # trimmed to max_idle
    for i in range(pool.idle_count()):
        world.add_pod(f"fill{i}", 0)
    world.settle(advance=1)
    assert pool.idle_count() == 0 and len(pool.pooled_interfaces()) == 1


def test_exhausted_vswitch_keeps_pods_pending_then_recovers(
        world: World, ecs: EcsWorld, hook_calls: HookRecorder) -> None:
    on_a_secondary_eni_with_no_idle_left(world)
    ecs.sim.exhaust("vsw-sim-a")
    world.add_pod("p0", 0)
    world.settle(advance=30)
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.PENDING
    assert any("vsw-sim-a" in m for m in conditions_of(world, "p0")), conditions_of(world, "p0")
    assert "inhibit" in eni_triggers(hook_calls)
    assert "recover" not in eni_triggers(hook_calls)
    # the vSwitch has addresses again; the ENI stays blocked until its window has passed
    ecs.sim.exhaust("vsw-sim-a", dry=False)
    world.settle(advance=SCENARIO_POLICY.inhibit_exhausted + 30)
    assert "recover" in eni_triggers(hook_calls)
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.ROUTED
    world.assert_converged()


@pytest.mark.parametrize("vswitches", [["vsw-sim-a", "vsw-sim-b"]])
def test_another_configured_vswitch_takes_over(
        world: World, ecs: EcsWorld, hook_calls: HookRecorder) -> None:
    on_a_secondary_eni_with_no_idle_left(world)
    ecs.sim.exhaust("vsw-sim-a")
    world.add_pod("p0", 0)
    world.settle(advance=30)
    assert "inhibit" in eni_triggers(hook_calls)
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.ROUTED, conditions_of(world,
                                                                                     "p0")
    assert record.status.subnet == "vsw-sim-b"
    made = [e for e in ecs.sim.enis_of("i-node0000") if e.kind == "Secondary"]
    assert sorted(e.vswitch for e in made) == ["vsw-sim-a", "vsw-sim-b"]
    assert all(e.security_groups == ["sg-sim-1"] for e in made)
    world.assert_converged()


@pytest.mark.parametrize("policy", [attrs.evolve(SCENARIO_POLICY, max_idle=0)])
def test_release_keeps_idle_then_last_address_disposes_the_eni(
        world: World, ecs: EcsWorld, hook_calls: HookRecorder) -> None:
    """Pod addresses go on secondary ENIs only (9 each on this type), a new one when
    those are full; once all are released and given back (no idle kept here), the empty
    ENIs are detached and deleted, never the primary."""
    world.add_node(0)
    world.settle()
    for i in range(12):
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    enis = ecs.sim.enis_of("i-node0000")
    assert sorted(e.kind for e in enis) == ["Primary", "Secondary", "Secondary"]
    primary = next(e for e in enis if e.kind == "Primary")
    assert primary.secondary == []  # never an address on the primary ENI
    for i in range(12):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    kinds = sorted(e.kind for e in ecs.sim.enis_of("i-node0000"))
    assert kinds == ["Primary"], kinds
    assert "gone" in eni_triggers(hook_calls)
    assert ecs.addresses() == {}
    world.assert_converged()


def test_kit_policy_is_the_providers_but_warm() -> None:
    assert KIT_POLICY.aggregation_window == 0.0 and POLICY.aggregation_window == 0.3
    assert (POLICY.min_idle, POLICY.max_idle, POLICY.max_batch_size) == (0, 5, 10)
    assert (POLICY.inhibit_exhausted, POLICY.inhibit_quota) == (600.0, 60.0)


#: create/delete cycles of the churn test (PODNET_ECS_CYCLES overrides; 1,000 take ~7 s)
#: (at 1,000 the engine bug below showed: stale waiters grew a node's pool to capacity)
CYCLES = int(os.environ.get("PODNET_ECS_CYCLES", "1000"))


@pytest.mark.parametrize("policy", [KIT_POLICY])
def test_churn_with_throttling_leaks_nothing(world: World, ecs: EcsWorld) -> None:
    """Pods created and deleted over and over while a fifth of the cloud calls answer
    Throttling: in the end no address is leaked and no ENI is left beyond the pool's
    needs (simulator ground truth)."""
    for n in range(2):
        world.add_node(n)
    world.settle()
    ecs.sim.throttle_rate = 0.2
    live: list[str] = []
    for i in range(CYCLES):
        name = f"c{i}"
        world.add_pod(name, i % 2)
        live.append(name)
        if len(live) > 12:
            world.delete_pod(live.pop(0))
        world.settle(advance=0.5)
    for name in live:
        world.delete_pod(name)
    ecs.sim.clear_faults()
    world.settle(advance=world.gc_grace())
    world.assert_converged()
    held = ecs.addresses()
    policy = world.policy()
    for n in range(2):
        node = World.node_name(n)
        assert sum(1 for v in held.values() if v == node) <= policy.max_idle
        enis = ecs.sim.enis_of(f"i-node{n:04d}")
        assert all(e.status == "InUse" for e in enis)
        # every ENI left holds an idle address (empty ones are disposed), primary aside
        assert all(e.secondary for e in enis if e.kind == "Secondary")


def test_pods_deleted_while_waiting_leave_no_demand(world: World, ecs: EcsWorld) -> None:
    world.add_node(0)
    world.settle()
    ecs.sim.exhaust("vsw-sim-a")
    for i in range(10):
        world.add_pod(f"w{i}", 0)
    world.settle(advance=30)
    for i in range(10):
        world.delete_pod(f"w{i}")
    world.settle(advance=30)
    ecs.sim.exhaust("vsw-sim-a", dry=False)
    world.settle(advance=world.gc_grace() + SCENARIO_POLICY.inhibit_exhausted)
    world.assert_converged()
    pool = world.engine.pools.find(world.provider, World.node_name(0))
    assert pool is not None and not pool.waiting, pool.waiting
    assert pool.idle_count() <= world.policy().max_idle


@pytest.mark.parametrize("policy", [attrs.evolve(SCENARIO_POLICY, max_idle=0)])
def test_tiny_node_capacity_is_its_secondary_enis(world: World, ecs: EcsWorld,
                                                  hook_calls: HookRecorder) -> None:
    """Terway's count: tiny instances have 4 ENIs of 3 secondary addresses; 3 secondary
    ENIs (EniQuantity - 1) hold the pods, the primary ENI none: capacity 9. Full ENIs get
    a new ENI, never an address on the primary; the 10th pod waits at capacity; emptied
    ENIs go, the primary stays."""
    iid = "i-tiny0000"
    ecs.plugin.podnet_configure("ecs", {**ecs.config, "instance_type": "ecs.sim.tiny",
                                        "instance_ids": {World.node_name(0): iid}})
    ecs.sim.add_instance(iid, "ecs.sim.tiny", "vsw-sim-a")
    world.add_node(0)
    world.settle()
    pool = world.engine.pools.find(world.provider, World.node_name(0))
    assert pool is not None and pool.capacity == 3 * 3
    for i in range(10):
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    enis = ecs.sim.enis_of(iid)
    primary = [e for e in enis if e.kind == "Primary"]
    assert len(primary) == 1 and primary[0].secondary == []
    assert sorted(len(e.secondary) for e in enis if e.kind == "Secondary") == [3, 3, 3]
    assert ecs.sim.calls["CreateNetworkInterface"] == 3
    record = world.record_of("p9")
    assert record is not None and record.status.phase is Phase.PENDING
    world.settle(advance=WAIT_SAID_AFTER)  # a wait is said once it lasts
    assert any("capacity" in m or "interfaces" in m for m in conditions_of(world, "p9"))
    for i in range(10):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    assert [e.kind for e in ecs.sim.enis_of(iid)] == ["Primary"]
    assert "gone" in eni_triggers(hook_calls)
    world.assert_converged()


@pytest.mark.parametrize("policy", [attrs.evolve(SCENARIO_POLICY, max_idle=0)])
def test_an_eni_detached_but_not_deleted_when_the_controller_stopped_is_deleted_after(
        world: World, ecs: EcsWorld) -> None:
    """Disposal is detach then delete. The controller stops between the two (here: the
    delete keeps failing, then a restart): the node no longer lists the detached ENI, yet
    the next run still deletes it, because the record said it was being disposed."""
    world.add_node(0)
    world.settle()
    for i in range(10):
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    ecs.sim.fail_next("DeleteNetworkInterface", "ServiceUnavailable", times=1000)
    for i in range(10):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    stranded = [e for e in ecs.sim.enis_of("i-node0000")
                if e.kind == "Secondary" and e.status == "Available"]
    assert stranded, "no ENI was left detached: the scenario did not happen"
    with ecs.sim.lock:
        ecs.sim.scripted.pop("DeleteNetworkInterface", None)
    world.restart()
    world.settle(advance=world.gc_grace())
    assert [e.kind for e in ecs.sim.enis_of("i-node0000")] == ["Primary"]
    world.assert_converged()


def test_a_deleted_node_leaves_no_view_of_its_instance(world: World, ecs: EcsWorld) -> None:
    """Issue 13, 11d: the provider's view of a node's ENIs (``_seen``) goes with the node
    (``podnet_node_removed``), not kept for the life of the process."""
    for i in range(2):
        world.add_node(i)
        world.add_pod(f"p{i}", i)
    world.settle(advance=1)
    gone, kept = (instance_id_for(World.node_name(i)) for i in range(2))
    assert {gone, kept} <= ecs.plugin.remembered()
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    assert world.engine.pools.find(world.provider, World.node_name(0)) is None
    remembered = ecs.plugin.remembered()
    assert gone not in remembered and World.node_name(0) not in remembered
    assert kept in remembered


def test_a_static_address_on_a_cold_node_fits_once_the_new_eni_is_trimmed(
        world: World, ecs: EcsWorld) -> None:
    """A node's first pod asks for an address by name: the first ENI is created for it
    filled to a batch (9 of the 9 an ENI holds besides its primary address), so the
    address does not fit until idle addresses beyond max_idle are given back, which the
    pod's failed attempt must not hold up by staying a waiter of the pool."""
    world.add_node(0)
    world.settle()
    world.add_pod("static", 0, annotations={"podnet.io/ip-address": "10.0.0.77"})
    policy = world.policy()
    world.settle(advance=policy.min_ip_lifetime + 4 * policy.refill_period)
    record = world.record_of("static")
    assert record is not None and record.status.phase is Phase.ROUTED, conditions_of(
        world, "static")
    assert record.status.ip == "10.0.0.77"


# --- issue 13, item 7: addresses no pod may have, and never the primary ENI ---------------


def invalid_request(world: World, pod: str) -> str:
    """The Ready condition's message of the pod's record, which must be InvalidRequest."""
    record = world.record_of(pod)
    assert record is not None and record.status.phase is Phase.PENDING, record
    [ready] = [c for c in record.status.conditions if c.type == "Ready"]
    assert ready.reason == "InvalidRequest", ready
    return ready.message


def test_a_static_request_for_the_vswitch_gateway_network_or_broadcast_is_refused(
        world: World, ecs: EcsWorld) -> None:
    """vsw-sim-a is 10.0.0.0/24, its gateway 10.0.0.1: none of the three goes to a pod,
    and none is asked of the cloud (the check comes before any call)."""
    world.add_node(0)
    world.add_pod("first", 0)  # a secondary ENI in vsw-sim-a, where an assign would go
    world.settle(advance=1)
    assigns = ecs.sim.calls["AssignPrivateIpAddresses"]
    reserved = {"gw": "10.0.0.1", "net": "10.0.0.0", "bcast": "10.0.0.255"}
    for name, address in reserved.items():
        world.add_pod(name, 0, annotations={"podnet.io/ip-address": address})
    world.settle(advance=30)
    for name, address in reserved.items():
        message = invalid_request(world, name)
        assert "podnet.io/ip-address" in message and address in message, message
    assert ecs.sim.calls["AssignPrivateIpAddresses"] == assigns
    assert not set(reserved.values()) & set(ecs.addresses())
    record = world.record_of("first")
    assert record is not None and record.status.phase is Phase.ROUTED


def static_on_a_node_with_only_its_primary_eni(world: World, ecs: EcsWorld) -> str:
    world.add_node(0)
    world.settle()
    iid = instance_id_for(World.node_name(0))
    assert [e.kind for e in ecs.sim.enis_of(iid)] == ["Primary"]
    world.add_pod("static", 0, annotations={"podnet.io/ip-address": "10.0.0.77"})
    world.settle(advance=120)
    return iid


def test_a_static_address_never_goes_onto_the_primary_eni(world: World, ecs: EcsWorld) -> None:
    """The node has only its primary ENI in the address's vSwitch: the address is not
    put there (pods go on secondary ENIs only); the record waits for a secondary ENI."""
    iid = static_on_a_node_with_only_its_primary_eni(world, ecs)
    enis = ecs.sim.enis_of(iid)
    [primary] = [e for e in enis if e.kind == "Primary"]
    assert primary.secondary == [], "a pod address on the primary ENI"
    record = world.record_of("static")
    assert record is not None
    assert record.status.interface != primary.id
    if record.status.phase is Phase.ROUTED:
        [holder] = [e for e in enis if "10.0.0.77" in e.secondary]
        assert holder.kind == "Secondary" and record.status.interface == holder.id
    else:
        assert record.status.phase is Phase.PENDING and conditions_of(world, "static")
        assert "10.0.0.77" not in ecs.addresses()


def test_a_static_address_on_a_node_with_only_its_primary_eni_ends_routed(
        world: World, ecs: EcsWorld) -> None:
    iid = static_on_a_node_with_only_its_primary_eni(world, ecs)
    record = world.record_of("static")
    assert record is not None and record.status.phase is Phase.ROUTED, conditions_of(
        world, "static")
    [holder] = [e for e in ecs.sim.enis_of(iid) if "10.0.0.77" in e.secondary]
    assert holder.kind == "Secondary" and record.status.interface == holder.id
    world.assert_converged()


@pytest.mark.parametrize("policy", [attrs.evolve(SCENARIO_POLICY, max_idle=0)])
def test_a_disposal_under_way_is_finished_while_pods_wait_for_its_slot(
        world: World, ecs: EcsWorld) -> None:
    """Every secondary ENI slot held by ENIs being disposed (detached, their delete
    refused): a pod then waits for a new ENI, which needs one of those slots. The
    disposals are finished although a pod waits, and the pod gets its address (before,
    disposing ran only when nothing waited: Pending for ever)."""
    iid = "i-tiny0000"
    ecs.plugin.podnet_configure("ecs", {**ecs.config, "instance_type": "ecs.sim.tiny",
                                        "instance_ids": {World.node_name(0): iid}})
    ecs.sim.add_instance(iid, "ecs.sim.tiny", "vsw-sim-a")
    ecs.node_of[iid] = World.node_name(0)  # the ground truth's node of its addresses
    world.add_node(0)
    world.settle()
    for i in range(9):
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    pool = world.engine.pools.find(world.provider, World.node_name(0))
    assert pool is not None and len(pool.pooled_interfaces()) == pool.max_interfaces == 3
    # the pods of one ENI go; its delete is refused: it stays Disposing, in its slot
    [victim, *_] = [e for e in ecs.sim.enis_of(iid) if e.kind == "Secondary"]
    on_victim = [f"p{i}" for i in range(9)
                 if (rec := world.record_of(f"p{i}")) is not None
                 and rec.status.ip in victim.secondary]
    assert len(on_victim) == 3
    ecs.sim.fail_next("DeleteNetworkInterface", "ServiceUnavailable", times=1000)
    for pod in on_victim:
        world.delete_pod(pod)
    world.settle(advance=world.gc_grace())
    assert pool.interfaces[victim.id].state is InterfaceState.DISPOSING
    assert len(pool.pooled_interfaces()) == pool.max_interfaces and pool.idle_count() == 0
    world.add_pod("late", 0)
    world.settle(advance=1)
    record = world.record_of("late")
    assert record is not None and record.status.phase is Phase.PENDING
    with ecs.sim.lock:
        ecs.sim.scripted.pop("DeleteNetworkInterface", None)
    world.settle(advance=SCENARIO_POLICY.refill_period)
    record = world.record_of("late")
    assert record is not None and record.status.phase is not Phase.PENDING, record.status
    world.assert_converged()


@pytest.mark.parametrize("policy", [POLICY])
def test_the_pods_of_a_node_that_have_yet_to_ask_are_counted_as_coming(
        world: World, ecs: EcsWorld) -> None:
    """A node's first pod waits (the provider's aggregation window) while the node's
    other pods have no record yet, as in a burst: those are the pods a grow due now
    brings addresses for. Pods that will not ask the pool (host network, asking for
    something of their own, deleting, finished) are not counted."""
    world.add_node(0)
    world.settle()
    node = World.node_name(0)
    world.add_pod("first", 0)
    world.step(50)  # the pod's record waits; the pool's grow is not made yet
    record = world.record_of("first")
    assert record is not None and record.status.phase is Phase.PENDING
    for i in range(6):
        world.add_pod(f"later{i}", 0)
    world.add_pod("own-address", 0, annotations={"podnet.io/ip-pool": "elsewhere"})
    host = world.add_pod("host", 0)
    host["spec"]["hostNetwork"] = True
    world.cluster.update(POD, host)
    world.add_pod("done", 0)
    world.finish_pod("done")
    world.add_pod("leaving", 0)
    world.delete_pod("leaving", grace=30)
    world.engine.pump()  # the caches see the pods; none of them was reconciled yet
    pool = world.engine.pools.find(world.provider, node)
    assert pool is not None
    assert world.engine.nodepools._coming(world.engine.caches.nodes.get(node), pool) == 6
