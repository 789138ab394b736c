"""Dual stack on ECS (``ip_stack: dual``): IPv4 and IPv6 in pairs from one ENI, as Terway
assigns them. A half pair is invalid: never handed out, given back to the cloud.

The simulator's ground truth (``EcsWorld.addresses``) holds IPv6 addresses too, so the
harness's leak check covers both halves.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from podnet.core.errors import ConfigError, ErrorKind, ProviderError
from podnet.core.models import NodeInfo, Phase
from podnet.core.policy import PoolPolicy
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ecs.demo import EcsWorld
from podnet.plugins.ecs.provider import POLICY, EcsProvider
from podnet.plugins.ecs.sim import Eni
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

NODE = World.node_name(0)
INSTANCE = "i-node0000"
DUAL_POLICY = attrs.evolve(POLICY, aggregation_window=0.0)


@pytest.fixture
def policy() -> PoolPolicy:
    return DUAL_POLICY


@pytest.fixture
def ecs(policy: PoolPolicy) -> Iterator[EcsWorld]:
    world = EcsWorld(nodes=2, policy=policy, ipv6=True, ip_stack="dual",
                     vswitches_in_cloud={"vsw-sim-a": "10.0.0.0/24"})
    yield world
    world.close()


@pytest.fixture
def provider_plugin(ecs: EcsWorld) -> EcsProvider:
    return ecs.plugin


@pytest.fixture
def ground_truth(ecs: EcsWorld) -> Any:
    return ecs.addresses


def secondaries(ecs: EcsWorld) -> list[Eni]:
    return [e for e in ecs.sim.enis_of(INSTANCE) if e.kind == "Secondary"]


def eni_of(ecs: EcsWorld, address: str) -> Eni:
    [eni] = [e for e in ecs.sim.enis_of(INSTANCE) if address in (*e.secondary, *e.ipv6)]
    return eni


def pairs(world: World) -> dict[str, tuple[str | None, str | None]]:
    """pod -> (IPv4, IPv6) of its routed record."""
    return {pn.spec.pod_name: (pn.status.ip, pn.status.ipv6) for pn in world.records()
            if pn.status.phase is Phase.ROUTED}


def assert_all_paired(world: World, ecs: EcsWorld) -> None:
    """Every record holds a whole pair, both halves on one ENI; no half is in the pool."""
    for pn in world.records():
        if pn.status.ip is None:
            continue
        assert pn.status.ipv6 is not None, f"{pn.key} holds {pn.status.ip} without IPv6"
        assert ipaddress.ip_address(pn.status.ipv6).version == 6
        eni = eni_of(ecs, pn.status.ip)
        assert pn.status.ipv6 in eni.ipv6, (pn.key, pn.status.ipv6, eni)
        assert pn.status.interface == eni.id
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    for pn in world.records():
        if pn.status.ip is not None and pn.spec.node_name == NODE:
            # the engine's pool pairs them as the record does
            assert pool.addresses[pn.status.ip].ipv6 == pn.status.ipv6, pn.key
    for a in pool.idle_addresses(float("inf")):
        assert a.ipv6 is not None and not a.half


def bring_up(world: World, pods: int) -> list[str]:
    world.add_node(0)
    world.settle()
    names = [f"p{i}" for i in range(pods)]
    for name in names:
        world.add_pod(name, 0)
    world.settle(advance=1)
    return names


def test_pods_get_a_pair_from_one_eni(world: World, ecs: EcsWorld) -> None:
    bring_up(world, 3)
    got = pairs(world)
    assert len(got) == 3
    assert_all_paired(world, ecs)
    # never on the primary ENI
    [primary] = [e for e in ecs.sim.enis_of(INSTANCE) if e.kind == "Primary"]
    assert primary.secondary == [] and primary.ipv6 == []
    # the NodeNetwork records both halves
    nn = world.engine.node_networks.get(NODE)
    assert nn is not None
    recorded = {ip.address: ip.ipv6 for itf in nn.status.interfaces for ip in itf.ips}
    for ip, ip6 in got.values():
        assert ip is not None and recorded[ip] == ip6
    world.assert_converged()


@pytest.mark.parametrize("policy", [attrs.evolve(DUAL_POLICY, max_idle=0)])
def test_release_unassigns_both_halves(world: World, ecs: EcsWorld) -> None:
    names = bring_up(world, 3)
    held = pairs(world)
    for name in names:
        world.delete_pod(name)
    world.settle(advance=world.gc_grace())
    truth = ecs.addresses()
    for ip, ip6 in held.values():
        assert ip not in truth and ip6 not in truth
    assert ecs.sim.calls["UnassignIpv6Addresses"] >= 1
    assert truth == {}  # no idle kept: the ENI went too
    world.assert_converged()


def filled_eni(world: World) -> None:
    """A pod on a secondary ENI trimmed to max_idle, the idle pairs taken by more pods:
    the next pod needs a grow on that ENI (AssignPrivateIpAddresses, then
    AssignIpv6Addresses)."""
    world.add_node(0)
    world.settle()
    world.add_pod("first", 0)
    world.settle(advance=2 * world.policy().refill_period)
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    for i in range(pool.idle_count()):
        world.add_pod(f"fill{i}", 0)
    world.settle(advance=1)
    assert pool.idle_count() == 0


@pytest.mark.parametrize("rollback_fails", [False, True])
def test_ipv6_assign_failing_leaves_no_half_pair(world: World, ecs: EcsWorld,
                                                 rollback_fails: bool) -> None:
    filled_eni(world)
    calls = dict(ecs.sim.calls)
    ecs.sim.fail_next("AssignIpv6Addresses", "InternalError")
    if rollback_fails:
        # the provider's own give-back fails too: core reads the inventory again and
        # finds IPv4 addresses without a partner (GC sweeps what nobody owns)
        ecs.sim.fail_next("UnassignPrivateIpAddresses", "InternalError")
    world.add_pod("p0", 0)
    world.settle(advance=30)
    assert ecs.sim.calls["AssignPrivateIpAddresses"] > calls.get("AssignPrivateIpAddresses", 0)
    assert ecs.sim.calls["AssignIpv6Addresses"] > calls.get("AssignIpv6Addresses", 0)
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.ROUTED
    assert_all_paired(world, ecs)
    world.settle(advance=world.gc_grace())
    world.assert_converged()  # nothing leaked: every cloud address is owned or pooled
    assert_all_paired(world, ecs)
    # the pool holds no half: every IPv4 address on the ENIs has its IPv6 partner
    for eni in secondaries(ecs):
        assert len(eni.secondary) == len(eni.ipv6), eni


def test_restart_pairs_by_the_records_then_in_order(world: World, ecs: EcsWorld) -> None:
    bring_up(world, 4)
    world.delete_pod("p1")  # an idle pair, recorded in the NodeNetwork
    world.settle(advance=1)
    before = pairs(world)
    [eni] = secondaries(ecs)
    # the cloud lists the IPv6 addresses in another order: zipping them in order would
    # pair them differently
    with ecs.sim.lock:
        eni.ipv6.reverse()
    world.restart()
    world.settle(advance=1)
    assert pairs(world) == before  # no routed pod's pair changed
    assert_all_paired(world, ecs)
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    # an idle pair the NodeNetwork does not name any more is zipped: still whole
    nn = world.engine.node_networks.get(NODE)
    assert nn is not None
    world.add_pod("p9", 0)
    world.settle(advance=1)
    assert_all_paired(world, ecs)
    assert len({ip6 for _, ip6 in pairs(world).values()}) == len(pairs(world))
    world.assert_converged()


def test_a_half_found_on_restart_is_never_handed_out_and_given_back(
        world: World, ecs: EcsWorld, hook_calls: HookRecorder) -> None:
    bring_up(world, 1)
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    idle = pool.idle_addresses(float("inf"))
    assert idle and idle[0].ipv6 is not None
    half, its_v6 = idle[0].address, idle[0].ipv6
    ecs.sim.drop_ipv6(its_v6)  # behind the controller's back: a half pair now
    world.restart()
    # pods want every idle pair and more while the rebuilt pool holds the half
    for i in range(len(idle) + 1):
        world.add_pod(f"q{i}", 0)
    world.settle(advance=1)
    assert_all_paired(world, ecs)  # nobody got the half
    # given back through podnet_pool_shrink, as a half: no IPv6 with it
    shrunk = [e for c in hook_calls.of("pool_shrink") for e in c.kwargs["entries"]]
    assert any(e.address == half and e.ipv6 is None for e in shrunk), shrunk
    # (the simulator hands out its lowest free addresses: the same two may come back
    # later, assigned anew as one whole pair)
    world.settle(advance=world.gc_grace())
    assert_all_paired(world, ecs)
    world.assert_converged()


def test_dual_on_an_instance_type_without_ipv6_names_the_key() -> None:
    world = EcsWorld(nodes=1, ipv6=True, ip_stack="dual", instance_type="ecs.sim.tiny")
    try:
        node = NodeContext(node=NodeInfo(name=World.node_name(0), uid="u"))
        with pytest.raises(ProviderError) as info:
            world.plugin.podnet_node_inventory("ecs", node)
        assert info.value.kind is ErrorKind.FATAL
        assert info.value.field == "providers.ecs.ip_stack"
        assert "providers.ecs.ip_stack" in str(info.value) and "IPv6" in str(info.value)
        with pytest.raises(ConfigError) as bad:
            world.plugin.podnet_configure("ecs", {**world.config, "ip_stack": "ipv6"})
        assert bad.value.key == "providers.ecs.ip_stack"
    finally:
        world.close()


def test_ipv4_stack_ignores_ipv6_on_the_enis(ecs: EcsWorld) -> None:
    ecs.plugin.podnet_configure("ecs", {**ecs.config, "ip_stack": "ipv4"})
    node = NodeContext(node=NodeInfo(name=World.node_name(0), uid="u"))
    itf = ecs.plugin.podnet_interface_create("ecs", node, None, 2)
    assert itf is not None and itf.ipv6 == ()
    inv = ecs.plugin.podnet_node_inventory("ecs", node)
    assert inv is not None and not inv.dual_stack
    assert all(i.ipv6 == () for i in inv.interfaces)


def test_pool_rebuild_pairs_records_first_then_zips_and_keeps_halves_out() -> None:
    """Core's rule on its own: the records' pairs, then the idle addresses in order; an
    address podnet knows left without a partner is a half, one it does not know a
    suspect; an IPv6 address a record names is never paired with another address."""
    from podnet.core.pool import NodePool
    from podnet.hookspecs.types import CloudInterface, Inventory

    v4 = [f"10.0.0.{i}" for i in range(1, 6)]
    v6 = [f"2408::{i}" for i in range(1, 6)]
    inventory = Inventory(interfaces=(
        CloudInterface(id="eni-p", primary=True, pooled=False, ips=("10.9.9.9",),
                       ipv6=("2408::99",)),
        # the cloud lists them in another order than they were paired
        CloudInterface(id="eni-1", ips=tuple(v4), ipv6=(v6[4], v6[3], v6[2], v6[0])),
    ), max_interfaces=2, ips_per_interface=9, dual_stack=True)
    pool = NodePool("n", "ecs")
    owners = {v4[0]: "ns/a", v4[1]: "ns/b"}
    # a's pair; b's IPv6 (v6[1]) is gone from the cloud; v4[2] was idle with v6[2];
    # v4[3] and v4[4] were in the last recorded pool without a pair
    pairs = {v4[0]: v6[0], v4[1]: v6[1], v4[2]: v6[2]}
    pooled = set(v4) | {v6[2]}
    lost = pool.rebuild(inventory, owners, pooled, 0.0, pairs)
    assert lost == []
    got = {a.address: (a.ipv6, a.owner, a.half) for a in pool.addresses.values()}
    assert got[v4[0]] == (v6[0], "ns/a", False)  # by the record
    assert got[v4[1]] == (None, "ns/b", False)  # owned: kept, even without its IPv6
    assert got[v4[2]] == (v6[2], None, False)  # by the recorded pool
    # the rest zipped in the cloud's order
    assert got[v4[3]] == (v6[4], None, False)
    assert got[v4[4]] == (v6[3], None, False)
    assert "10.9.9.9" not in got and "2408::99" not in pool.suspects  # not pooled
    assert pool.total() == 5 and pool.capacity == 18
    # a record gone: its address idle again, but without an IPv6 half it is a half
    assert pool.give_back(v4[1], "ns/b", 0.0)
    assert got[v4[1]][0] is None and pool.addresses[v4[1]].half
    assert v4[1] not in {a.address for a in pool.idle_addresses(0.0)}
    assert [a.address for a in pool.halves()] == [v4[1]]
    # an IPv6 address nobody knows is a suspect; one podnet recorded is a half
    again = Inventory(interfaces=(CloudInterface(id="eni-1", ips=(v4[0],),
                                                 ipv6=(v6[0], "2408::77", v6[2])),),
                      max_interfaces=2, ips_per_interface=9, dual_stack=True)
    pool.rebuild(again, {v4[0]: "ns/a"}, {v4[0], v6[2]}, 1.0, {v4[0]: v6[0]})
    assert "2408::77" in pool.suspects
    assert pool.addresses[v6[2]].half and pool.total() == 1


def _rebuilt_after_a_hand_edit(**halves: Any) -> Any:
    """A pool rebuilt where the winner holds 10.0.0.1 with 2408::1 and the loser named
    10.0.0.1 with 2408::2, the last recorded pool pairing 2408::2 with 10.0.0.2 (the
    loser's before the edit); ``halves``: the rebuild's ``held6`` or ``owned6``."""
    from podnet.core.pool import NodePool
    from podnet.hookspecs.types import CloudInterface, Inventory

    inventory = Inventory(interfaces=(
        CloudInterface(id="eni-1", ips=("10.0.0.1", "10.0.0.2"),
                       ipv6=("2408::1", "2408::2")),
    ), max_interfaces=2, ips_per_interface=9, dual_stack=True)
    pool = NodePool("n", "ecs")
    pool.rebuild(inventory, {"10.0.0.1": "ns/winner"},
                 {"10.0.0.1", "10.0.0.2", "2408::1", "2408::2"}, 0.0,
                 {"10.0.0.1": "2408::1", "10.0.0.2": "2408::2"}, **halves)
    return pool


def test_pool_rebuild_holds_the_ipv6_half_of_a_record_that_lost_its_ipv4() -> None:
    """Two records name one IPv4 address (a hand edit); the loser's IPv6 half is still
    its pod's: not paired with its old IPv4 partner (the last recorded pool's pair),
    not idle, not a half to give back, but a suspect GC leaves alone while named."""
    pool = _rebuilt_after_a_hand_edit(held6={"2408::2"})
    assert pool.addresses["10.0.0.1"].ipv6 == "2408::1"
    assert pool.addresses["10.0.0.2"].ipv6 is None and pool.addresses["10.0.0.2"].half
    assert "2408::2" not in pool.addresses and "2408::2" in pool.suspects
    assert all(a.address != "2408::2" for a in pool.halves())
    assert pool.expired_suspects(PoolPolicy(leaked_ip_expiry=0.0), 10.0, {"2408::2"}) == []


def test_a_leaving_pool_holds_such_an_ipv6_half_for_its_record() -> None:
    """The same hand edit on a node that left: no GC will look at its suspects again, so
    the loser's IPv6 half is held in the pool for the loser (an invalid half, never
    handed out) and goes back when the loser lets it go."""
    pool = _rebuilt_after_a_hand_edit(owned6={"2408::2": "ns/loser"})
    held = pool.addresses["2408::2"]
    assert held.owner == "ns/loser" and held.half and "2408::2" not in pool.suspects
    assert pool.addresses["10.0.0.2"].ipv6 is None
    assert all(a.address != "2408::2" for a in pool.idle_addresses(float("inf")))
    assert pool.give_back("2408::2", "ns/loser", 0.0)
    assert [a.address for a in pool.halves() if a.address == "2408::2"] == ["2408::2"]


def test_a_static_pair_is_served_when_the_node_holds_it_idle(world: World,
                                                            ecs: EcsWorld) -> None:
    bring_up(world, 1)
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    idle = pool.idle_addresses(float("inf"))[-1]
    assert idle.ipv6 is not None
    world.add_pod("fixed", 0, {"podnet.io/ip-address": f"{idle.address},{idle.ipv6}"})
    world.add_pod("bad", 0, {"podnet.io/ip-address": f"{idle.address},2408:4005:300:a00::ff"})
    world.settle(advance=1)
    assert pairs(world)["fixed"] == (idle.address, idle.ipv6)
    assert "bad" not in pairs(world)
    world.delete_pod("bad")
    world.settle(advance=1)
    assert_all_paired(world, ecs)


def test_verify_sees_a_lost_ipv6_half(world: World, ecs: EcsWorld) -> None:
    from podnet.hookspecs.types import PodNetworkContext

    bring_up(world, 1)
    record = world.record_of("p0")
    assert record is not None and record.status.ipv6 is not None
    node = NodeContext(node=NodeInfo(name=NODE, uid="u"))
    context = PodNetworkContext(pod_network=record, node=node)
    ecs.plugin.verify_cache_ttl = 0.0
    verdict = ecs.plugin.podnet_verify(context)
    assert verdict is not None and verdict.ok
    ecs.sim.drop_ipv6(record.status.ipv6)
    verdict = ecs.plugin.podnet_verify(context)
    assert verdict is not None and not verdict.ok and record.status.ipv6 in verdict.reason


def test_audit_compares_both_halves(world: World, ecs: EcsWorld) -> None:
    """``podnet audit`` on a dual-stack node: an IPv6 nobody holds is a leak, a record's
    IPv6 gone from the cloud is lost, like their IPv4 counterparts."""
    from podnet.app.audit import audit
    from podnet.app.records import read_records
    from podnet.core.cluster.port import NODE as NODE_KIND

    bring_up(world, 2)
    nodes = {n["metadata"]["name"]: n for n in world.cluster.list(NODE_KIND).items}

    def run() -> Any:
        return audit(read_records(world.cluster), nodes, world.engine.providers)

    report = run()
    assert report.clean, report
    record = world.record_of("p0")
    assert record is not None and record.status.ip and record.status.ipv6
    eni = eni_of(ecs, record.status.ip)
    used = {a for e in ecs.sim.enis_of(INSTANCE) for a in e.ipv6}
    stray = next(str(ipaddress.ip_address(record.status.ipv6) + n) for n in range(1, 999)
                 if str(ipaddress.ip_address(record.status.ipv6) + n) not in used)
    eni.ipv6.append(stray)  # assigned behind podnet's back
    ecs.sim.drop_ipv6(record.status.ipv6)
    report = run().as_json()
    assert report["unowned"] == [
        {"node": NODE, "provider": world.provider, "ip": stray, "interface": eni.id}]
    assert report["lost"] == [{"pod_network": record.key, "node": NODE,
                               "ip": record.status.ipv6}]
    assert report["misplaced"] == [] and report["errors"] == []
