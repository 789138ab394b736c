"""Dual stack on BBC (``ipStack: dual``) and several subnets on the machine's one ENI.

BBC adds IPv6 secondary addresses with ``batchAddIp`` and ``allocateMultiIpv6Addr: true``
(the count then counts IPv6 ones), from the IPv6 CIDR of the ENI's subnet only; IPv4 ones
may come from other subnets (``batchAddIpCrossSubnet``). Each pod gets a pair. The
simulator's ground truth holds both families, so the harness's leak check covers both.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterator, Mapping

import pytest
from baidubce.exception import BceHttpClientError, BceServerError
from baidubce.http import http_methods

from podnet.core.errors import ConfigError, ErrorKind, ProviderError
from podnet.core.models import Phase, PodNetwork
from podnet.hookspecs.types import NodeContext, PoolEntry
from podnet.plugins.bbc.api import BbcApi, classify
from podnet.plugins.bbc.credentials import error_code
from podnet.plugins.bbc.demo import (
    PRIMARY_SUBNET,
    SUBNETS,
    SUBNETS_V6,
    provider_for,
    register_nodes,
    start_simulator,
)
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.replies import parse_port
from podnet.plugins.bbc.sim import API_ADD, API_ADD_CROSS, API_DEL, BbcSimulator
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

NODE = World.node_name(0)
V6_A = ipaddress.ip_network(SUBNETS_V6[PRIMARY_SUBNET])


def _server_error(call: Callable[[], object]) -> BceServerError:
    with pytest.raises(BceHttpClientError) as info:
        call()
    inner = info.value.last_error
    assert isinstance(inner, BceServerError)
    return inner


# --- the simulator: BBC's IPv6 form of batchAddIp ------------------------------------------


@pytest.fixture
def sim() -> Iterator[BbcSimulator]:
    s = BbcSimulator()
    s.add_subnet("sbn-a", "10.1.0.0/24", ipv6_cidr="fd00:1::/64")
    s.add_subnet("sbn-v4", "10.2.0.0/24")
    s.add_instance("i-1", "sbn-a", ip_cap=5, ipv6_cap=3)
    s.add_instance("i-4", "sbn-v4", ip_cap=5)
    s.start()
    yield s
    s.stop()


def test_ipv6_addresses_come_from_the_enis_subnet_and_are_listed_apart(
        sim: BbcSimulator) -> None:
    api = BbcApi(sim.endpoint, "ak", "sk")
    v6 = api.add_ipv6("i-1", count=2)
    assert len(v6) == 2 and all(ipaddress.ip_address(a) in ipaddress.ip_network("fd00:1::/64")
                                for a in v6)
    assert "fd00:1::1" not in v6  # the subnet's IPv6 gateway is never handed out
    v4 = api.add_ips("i-1", count=1)
    port = api.port("i-1")
    assert [ip.address for ip in port.secondary()] == v4
    assert [ip.address for ip in port.secondary_ipv6()] == v6
    assert port.held() == {*v4, *v6}
    assert sim.addresses() == {a: "i-1" for a in (*v4, *v6)}
    assert api.subnet("sbn-a").ipv6_cidr == "fd00:1::/64"
    assert api.subnet("sbn-v4").ipv6_cidr is None
    # a named IPv6 address, and the delete of either family in one call
    assert api.add_ipv6("i-1", ips=["fd00:1::99"]) == ["fd00:1::99"]
    api.delete_ips("i-1", [v4[0], v6[0], "fd00:1::99"])
    assert set(sim.addresses()) == {v6[1]}


def test_ipv6_quota_exhaustion_and_a_subnet_without_ipv6_answer_bbcs_codes(
        sim: BbcSimulator) -> None:
    api = BbcApi(sim.endpoint, "ak", "sk")
    # the IPv6 cap is its own: IPv4 addresses do not use it up
    api.add_ips("i-1", count=4)
    api.add_ipv6("i-1", count=3)
    err = _server_error(lambda: api.bbc._send_request(
        http_methods.PUT, b"/instance/batchAddIp",
        '{"instanceId": "i-1", "allocateMultiIpv6Addr": true, '
        '"secondaryPrivateIpAddressCount": 1}'))
    assert err.code == "ExceedLimitException" and err.status_code == 400
    with pytest.raises(BceHttpClientError) as info:
        api.add_ipv6("i-1", count=1)
    assert classify(info.value) is ErrorKind.QUOTA_EXCEEDED
    with pytest.raises(BceHttpClientError) as info:
        api.add_ipv6("i-4", count=1)  # sbn-v4 has no IPv6 CIDR
    assert error_code(info.value) == ("BadRequest", 400)
    api.delete_ips("i-1", [ip.address for ip in api.port("i-1").secondary_ipv6()][:1])
    sim.subnets["sbn-a"].free6 = 0
    with pytest.raises(BceHttpClientError) as info:
        api.add_ipv6("i-1", count=1)
    assert classify(info.value) is ErrorKind.SUBNET_EXHAUSTED
    assert len(api.port("i-1").secondary_ipv6()) == 2


def test_a_vpc_port_reply_with_a_wrong_family_names_the_field() -> None:
    good = {"eniId": "eni-1", "subnetId": "sbn-a", "macAddress": "fa:00:00:00:00:01",
            "privateIpSet": [{"privateIpAddress": "10.0.0.2", "primary": True}],
            "ipv6PrivateIpSet": [{"privateIpAddress": "fd00::5", "primary": False}]}
    assert [ip.address for ip in parse_port(good).secondary_ipv6()] == ["fd00::5"]
    for key, bad in (("ipv6PrivateIpSet", [{"privateIpAddress": "10.0.0.9"}]),
                     ("privateIpSet", [{"privateIpAddress": "fd00::9"}]),
                     ("ipv6PrivateIpSet", "fd00::9")):
        with pytest.raises(ProviderError) as info:
            parse_port({**good, key: bad})
        assert info.value.field is not None and info.value.field.startswith(f"vpcPort.{key}")


# --- the provider, hook by hook -------------------------------------------------------------


@pytest.fixture
def demo_sim() -> Iterator[BbcSimulator]:
    s = start_simulator()
    register_nodes(s, ["node-0000"])
    yield s
    s.stop()


def _ctx(p: BbcProvider) -> NodeContext:
    from podnet.core.models import NodeInfo

    node = NodeInfo(name="node-0000", uid="u", provider_id="cce://node-0000")
    inventory = p.podnet_node_inventory(provider="bbc", node=NodeContext(node=node))
    return NodeContext(node=node, inventory=inventory)


def test_dual_grow_makes_pairs_ipv4_across_subnets_ipv6_from_the_enis(
        demo_sim: BbcSimulator) -> None:
    p = provider_for(demo_sim, subnets=["sbn-demo-b"], ip_stack="dual")
    ctx = _ctx(p)
    assert ctx.inventory is not None and ctx.inventory.dual_stack
    got = p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=3, subnet=None)
    assert got is not None and len(got) == 3
    for e in got:
        assert ipaddress.ip_address(e.address) in ipaddress.ip_network(SUBNETS["sbn-demo-b"])
        assert e.subnet == "sbn-demo-b"
        assert e.ipv6 is not None and ipaddress.ip_address(e.ipv6) in V6_A
    assert demo_sim.calls[API_ADD_CROSS] == 1 and demo_sim.calls[API_ADD] == 1
    inv = _ctx(p).inventory
    assert inv is not None
    (itf,) = inv.interfaces
    assert set(itf.ips) == {e.address for e in got}
    assert set(itf.ipv6) == {e.ipv6 for e in got}
    # a pair goes whole, in one call; a half (no ipv6) goes alone
    gone = p.podnet_pool_shrink(provider="bbc", node=ctx, entries=[got[0], PoolEntry(
        got[1].ipv6 or "")])
    assert gone is not None and demo_sim.calls[API_DEL] == 1
    assert set(demo_sim.addresses()) == {got[1].address, got[2].address, got[2].ipv6}


def test_a_failed_ipv6_add_gives_the_ipv4_halves_back(demo_sim: BbcSimulator) -> None:
    p = provider_for(demo_sim, subnets=["sbn-demo-b"], ip_stack="dual")
    ctx = _ctx(p)
    free_b = demo_sim.free_ips("sbn-demo-b")
    demo_sim.script(API_ADD, "InternalError", status=500)
    with pytest.raises(Exception) as info:
        p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=2, subnet=None)
    assert p.podnet_classify_error(provider="bbc", error=info.value) is not ErrorKind.FATAL
    assert demo_sim.addresses() == {}  # no half left on the ENI
    assert demo_sim.free_ips("sbn-demo-b") == free_b  # given back to the subnet it came from


def test_dual_on_a_subnet_without_ipv6_names_the_key_and_adds_nothing() -> None:
    s = BbcSimulator()
    s.add_subnet("sbn-v4", "10.9.0.0/24")
    s.add_instance("node-0000", "sbn-v4")
    s.start()
    try:
        p = provider_for(s, ip_stack="dual")
        ctx = _ctx(p)
        with pytest.raises(ProviderError) as info:
            p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=1, subnet=None)
        assert info.value.kind is ErrorKind.FATAL
        assert info.value.field == "providers.bbc.ipStack"
        assert "sbn-v4" in str(info.value)
        assert s.calls[API_ADD] == 0 and s.addresses() == {}
    finally:
        s.stop()


def test_ip_stack_is_checked_as_config() -> None:
    p = BbcProvider()
    p.podnet_configure(provider="bbc", config={"ipStack": "dual"})
    assert p.dual
    with pytest.raises(ConfigError) as info:
        p.podnet_configure(provider="bbc", config={"ipStack": "ipv6"})
    assert "ipStack" in str(info.value)


# --- the whole controller: records, pools, GC --------------------------------------------


@pytest.fixture
def bbc_sim() -> Iterator[BbcSimulator]:
    s = start_simulator()
    register_nodes(s, [World.node_name(i) for i in range(2)])
    yield s
    s.stop()


@pytest.fixture
def provider_plugin(bbc_sim: BbcSimulator) -> BbcProvider:
    return provider_for(bbc_sim, ip_stack="dual", subnets=[PRIMARY_SUBNET, "sbn-demo-b"])


@pytest.fixture
def ground_truth(bbc_sim: BbcSimulator) -> Callable[[], Mapping[str, str]]:
    return bbc_sim.addresses


def _routed(world: World) -> list[PodNetwork]:
    return [pn for pn in world.records() if pn.status.phase is Phase.ROUTED]


def test_dual_stack_pods_get_both_addresses_in_their_records(world: World,
                                                             bbc_sim: BbcSimulator) -> None:
    world.add_node(0)
    world.settle()
    for i in range(5):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=1)
    routed = _routed(world)
    assert len(routed) == 5
    held = bbc_sim.addresses()
    for pn in routed:
        assert pn.status.ipv6 is not None, pn.key
        assert ipaddress.ip_address(pn.status.ipv6) in V6_A
        assert held[pn.status.ip] == held[pn.status.ipv6] == NODE
        assert pn.status.ipv6_gateway == str(next(V6_A.hosts()))
        assert pn.status.ipv6_prefix_length == 128
    assert len({pn.status.ipv6 for pn in routed}) == 5
    for i in range(5):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    world.assert_converged()


def test_an_exhausted_subnet_moves_the_pool_to_the_next_and_release_returns_there(
        world: World, bbc_sim: BbcSimulator) -> None:
    """Several subnets on one ENI: the emptier one first is skipped once the cloud says it
    is empty, the records name the subnet each address came from, and a delete gives
    each address back to its own subnet."""
    with bbc_sim.lock:  # the ENI's own subnet has room for nothing more
        a = bbc_sim.subnets[PRIMARY_SUBNET]
        a.used.update(str(h) for h in list(a.network.hosts())[:a.network.num_addresses - 3])
    free_b = bbc_sim.free_ips("sbn-demo-b")
    world.add_node(0)
    world.settle()
    for i in range(3):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=1)
    routed = _routed(world)
    assert len(routed) == 3
    for pn in routed:
        assert pn.status.subnet == "sbn-demo-b", pn.key
        assert ipaddress.ip_address(pn.status.ip) in ipaddress.ip_network(SUBNETS["sbn-demo-b"])
        assert pn.status.ipv6 is not None and ipaddress.ip_address(pn.status.ipv6) in V6_A
    assert bbc_sim.free_ips("sbn-demo-b") < free_b
    for i in range(3):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    world.assert_converged()
    assert bbc_sim.free_ips("sbn-demo-b") + sum(
        1 for ip in bbc_sim.addresses() if ":" not in ip) == free_b


def test_a_static_pair_is_served_from_the_idle_pool_and_a_static_ipv4_alone_is_refused(
        world: World, bbc_sim: BbcSimulator) -> None:
    world.add_node(0)
    world.settle()
    world.add_pod("p0", 0)
    world.settle(advance=1)
    pool = world.engine.pools.find(world.provider, NODE)
    assert pool is not None
    idle = pool.idle_addresses(float("inf"))[-1]
    assert idle.ipv6 is not None
    world.add_pod("fixed", 0, {"podnet.io/ip-address": f"{idle.address},{idle.ipv6}"})
    world.add_pod("alone", 0, {"podnet.io/ip-address": "10.128.0.200"})
    world.settle(advance=1)
    got = {pn.spec.pod_name: (pn.status.ip, pn.status.ipv6) for pn in _routed(world)}
    assert got["fixed"] == (idle.address, idle.ipv6)
    assert "alone" not in got  # its IPv6 partner would be chosen outside the pool
    assert "10.128.0.200" not in bbc_sim.addresses()
    world.delete_pod("alone")
    world.settle(advance=world.gc_grace())
    world.assert_converged()


def test_verify_sees_a_lost_ipv6_half_and_route_puts_it_back(
        world: World, bbc_sim: BbcSimulator, provider_plugin: BbcProvider) -> None:
    from podnet.core.models import NodeInfo
    from podnet.hookspecs.types import PodNetworkContext

    world.add_node(0)
    world.settle()
    world.add_pod("p0", 0)
    world.settle(advance=1)
    record = world.record_of("p0")
    assert record is not None and record.status.ipv6 is not None
    node = NodeContext(node=NodeInfo(name=NODE, uid="u", provider_id=f"cce://{NODE}"))
    context = PodNetworkContext(pod_network=record, node=node)
    verdict = provider_plugin.podnet_verify(context)
    assert verdict is not None and verdict.ok
    bbc_sim.forget([record.status.ipv6])  # the IPv4 half stays
    verdict = provider_plugin.podnet_verify(context)
    assert verdict is not None and not verdict.ok and record.status.ipv6 in verdict.reason
    provider_plugin.podnet_route(context)
    assert bbc_sim.addresses()[record.status.ipv6] == NODE
    verdict = provider_plugin.podnet_verify(context)
    assert verdict is not None and verdict.ok
