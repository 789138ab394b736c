"""Subnet objects on the reference provider: a Subnet is a shared subnet of the reference
cloud (no parameters), which the pools of the nodes core hands it for grow from, one
address on one node at a time, never its gateway, network, broadcast or excluded
addresses; a pod network on it gets its prefix and gateway; and, on real namespaces, two
pods on a Subnet given at run time ping each other through the bridge dataplane."""

from __future__ import annotations

import ipaddress
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import (
    NodeInfo,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.networks import Networks, SelectorTerm, SubnetInfo
from podnet.hookspecs.types import (
    AllocateContext,
    NodeContext,
    PlugContext,
    PoolEntry,
    ResolvedRequest,
    UnplugContext,
)
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceCloudError, ReferenceProvider
from podnet.testing.netns import netns_unavailable


def blue(**kw: Any) -> SubnetInfo:
    base: dict[str, Any] = {"name": "blue", "provider": "reference",
                            "cidrs": ("10.50.0.0/28",), "gateways": ("10.50.0.1",)}
    return SubnetInfo(**{**base, **kw})


def node(name: str, *subnets: SubnetInfo, pod_cidr: str | None = None) -> NodeContext:
    return NodeContext(node=NodeInfo(name=name, uid=f"u-{name}", pod_cidr=pod_cidr),
                       subnets=subnets)


@pytest.fixture
def plugin() -> ReferenceProvider:
    p = ReferenceProvider(ReferenceCloud(ips_per_interface=64))
    return p


def ready(p: ReferenceProvider, *subnets: SubnetInfo) -> None:
    """As core makes a Subnet usable: its parameters hook, then the Ready set."""
    for s in subnets:
        assert p.podnet_subnet_parameters("reference", s) is not None
    p.podnet_networks_changed("reference", Networks(subnets=subnets, revision=1))


def test_a_subnet_takes_no_parameters_and_is_put_into_the_cloud(plugin) -> None:
    answer = plugin.podnet_subnet_parameters("reference", blue())
    assert answer is not None and answer.details == {
        "cidr": "10.50.0.0/28", "gateway": "10.50.0.1", "cloudSubnets": ["blue"]}
    assert "blue" in plugin.cloud.subnets and plugin.cloud.calls["PutSubnet"] == 1
    with pytest.raises(InvalidRequest) as info:
        plugin.podnet_subnet_parameters("reference", blue(name="red", parameters={"x": 1}))
    assert info.value.field == "spec.parameters.x" and "Subnet red" in str(info.value)
    assert "red" not in plugin.cloud.subnets  # nothing half-done


def test_nodes_share_the_block_and_never_get_its_gateway_or_excluded_addresses(plugin) -> None:
    s = blue(gateways=("10.50.0.14",), excluded=("10.50.0.2..10.50.0.4", "10.50.0.9"))
    ready(plugin, s)
    a, b = node("a", s), node("b", s)  # no podCIDR: the Subnet is all they use
    got_a = plugin.podnet_pool_grow("reference", a, None, 3, None)
    got_b = plugin.podnet_pool_grow("reference", b, None, 3, None)
    assert got_a is not None and got_b is not None
    assert [e.address for e in got_a] == ["10.50.0.1", "10.50.0.5", "10.50.0.6"]
    assert [e.address for e in got_b] == ["10.50.0.7", "10.50.0.8", "10.50.0.10"]
    assert {e.subnet for e in (*got_a, *got_b)} == {"blue"}
    # the rest: .11 .12 .13 (never .14, the gateway, nor .15, the broadcast address)
    more = plugin.podnet_pool_grow("reference", a, None, 10, None)
    assert more is not None and [e.address for e in more] == [
        "10.50.0.11", "10.50.0.12", "10.50.0.13"]
    with pytest.raises(ReferenceCloudError) as info:
        plugin.podnet_pool_grow("reference", b, None, 1, None)
    assert info.value.code == "SubnetExhausted"
    assert plugin.podnet_classify_error("reference", info.value) is ErrorKind.SUBNET_EXHAUSTED
    inv = plugin.podnet_node_inventory("reference", a)
    assert inv is not None and len(inv.interfaces[0].ips) == 6


def test_an_exclusion_added_later_holds_for_new_addresses_and_keeps_held_ones(plugin) -> None:
    ready(plugin, blue())
    first = plugin.podnet_pool_grow("reference", node("a", blue()), None, 2, None)
    assert first is not None and [e.address for e in first] == ["10.50.0.2", "10.50.0.3"]
    narrowed = blue(excluded=("10.50.0.3..10.50.0.6",))
    ready(plugin, narrowed)
    more = plugin.podnet_pool_grow("reference", node("b", narrowed), None, 2, None)
    assert more is not None and [e.address for e in more] == ["10.50.0.7", "10.50.0.8"]
    assert plugin.cloud.all_addresses()["10.50.0.3"] == "a"  # never taken away


def test_an_interface_is_in_one_subnet_and_a_new_one_goes_where_there_is_room(plugin) -> None:
    small = blue(name="small", cidrs=("10.51.0.0/30",), gateways=("10.51.0.1",))
    ready(plugin, small, blue())
    n = node("a", small, blue())
    # the first interface of a node without a podCIDR goes into its first Subnet
    got = plugin.podnet_pool_grow("reference", n, None, 2, None)
    assert got is not None and [(e.address, e.subnet) for e in got] == [("10.51.0.2", "small")]
    # and stays there, as an ENI stays in its VPC subnet
    with pytest.raises(ReferenceCloudError) as info:
        plugin.podnet_pool_grow("reference", n, None, 1, None)
    assert info.value.code == "SubnetExhausted"
    # a new interface: the full Subnet gets none, the next one does
    created = plugin.podnet_interface_create("reference", n, None, 2)
    assert created is not None and (created.id, created.subnet) == ("eth1", "blue")
    assert created.ips == ("10.50.0.2", "10.50.0.3")
    named = plugin.podnet_interface_create("reference", n, "blue", 1)
    assert named is not None and (named.subnet, named.ips) == ("blue", ("10.50.0.4",))
    inv = plugin.podnet_node_inventory("reference", n)
    assert inv is not None and [(i.id, i.subnet) for i in inv.interfaces] == [
        ("eth0", "small"), ("eth1", "blue"), ("eth2", "blue")]
    grown = plugin.podnet_pool_grow("reference", n, inv.interfaces[1], 1, "blue")
    assert grown is not None and [(e.interface, e.subnet) for e in grown] == [("eth1", "blue")]
    with pytest.raises(ReferenceCloudError) as info:
        plugin.cloud.add("a", None, "eth1", 1, subnet="small")
    assert info.value.code == "Conflict" and "eth1" in str(info.value)


def test_a_node_with_no_subnet_grows_from_its_pod_cidr_as_before(plugin) -> None:
    ready(plugin, blue())
    got = plugin.podnet_pool_grow("reference", node("a", pod_cidr="10.60.0.0/24"), None, 2,
                                  None)
    assert got is not None and [(e.address, e.subnet) for e in got] == [
        ("10.60.0.2", "10.60.0.0/24"), ("10.60.0.3", "10.60.0.0/24")]
    with pytest.raises(ProviderError) as info:
        plugin.podnet_pool_grow("reference", node("b"), None, 1, None)
    assert info.value.field == "spec.podCIDR"


def test_a_cloud_that_lost_the_subnet_gets_it_again(plugin) -> None:
    s = blue()
    plugin.podnet_networks_changed("reference", Networks(subnets=(s,)))
    got = plugin.podnet_pool_grow("reference", node("a", s), None, 1, None)
    assert got is not None and got[0].address == "10.50.0.2"
    assert plugin.cloud.calls["PutSubnet"] == 1


def pending(name: str = "web", node_name: str = "a") -> PodNetwork:
    return PodNetwork(metadata=ObjectMeta(name=f"{name}-default", namespace="default"),
                      spec=PodNetworkSpec(pod_name=name, pod_uid=f"u-{name}",
                                          node_name=node_name, provider="reference"))


def test_a_pod_network_on_the_subnet_gets_its_prefix_and_gateway(plugin) -> None:
    s = blue(cidrs=("10.50.0.0/24",))
    ready(plugin, s)
    n = node("a", s, pod_cidr="10.60.0.0/24")
    # eth0 is in the podCIDR: the Subnet's addresses come on an interface of its own
    created = plugin.podnet_interface_create("reference", n, None, 1)
    assert created is not None and created.subnet == "blue"
    entry = PoolEntry(created.ips[0], created.id, created.subnet)
    got = plugin.podnet_allocate(AllocateContext(
        pod_network=pending(), node=n, request=ResolvedRequest(entry=entry), subnet=s))
    assert got is not None
    assert (got.ip, got.cidr, got.prefix_length, got.gateway, got.subnet) == (
        "10.50.0.2", "10.50.0.0/24", 24, "10.50.0.1", "blue")
    assert got.routes[0].gw == "10.50.0.1"
    # no Subnet: the podCIDR's, as before
    [plain] = plugin.podnet_pool_grow("reference", node("a", pod_cidr="10.60.0.0/24"), None,
                                      1, None) or []
    got = plugin.podnet_allocate(AllocateContext(
        pod_network=pending("db"), node=node("a", pod_cidr="10.60.0.0/24"),
        request=ResolvedRequest(entry=plain)))
    assert got is not None and (got.cidr, got.gateway) == ("10.60.0.0/24", "10.60.0.1")
    space = plugin.podnet_address_space("reference", n)
    assert space is not None and [(x.id, x.cidr, x.gateway) for x in space.subnets] == [
        ("10.60.0.0/24", "10.60.0.0/24", "10.60.0.1"), ("blue", "10.50.0.0/24", "10.50.0.1")]


@pytest.mark.parametrize(("address", "error", "words"), [
    ("10.50.0.1", InvalidRequest, "excluded from Subnet blue"),   # the gateway
    ("10.50.0.7", InvalidRequest, "excluded from Subnet blue"),   # excluded
    ("10.50.0.3", ReferenceCloudError, "is on node b"),           # another node's
])
def test_a_static_address_the_subnet_cannot_give_is_refused(plugin, address, error,
                                                            words) -> None:
    s = blue(excluded=("10.50.0.7",))
    ready(plugin, s)
    plugin.podnet_pool_grow("reference", node("b", s), None, 2, None)
    with pytest.raises(error) as info:
        plugin.podnet_allocate(AllocateContext(
            pod_network=pending(), node=node("a", s),
            request=ResolvedRequest(address=address, field="x"), subnet=s))
    assert words in str(info.value)
    if error is InvalidRequest:
        assert info.value.field == "x"
    else:
        assert info.value.code == "Conflict"
    assert plugin.cloud.describe("a", None, True) == {"eth0": []}  # nothing half-done
    assert plugin.cloud.interface_subnets("a") == {}
    # the cloud refuses them too, whoever asks
    for refused in ("10.50.0.1", "10.50.0.7"):
        with pytest.raises(ReferenceCloudError, match="not an address of subnet blue"):
            plugin.cloud.add("a", None, "eth0", 1, address=refused, subnet="blue")


def test_a_static_address_of_the_subnet_goes_on_an_interface_in_it(plugin) -> None:
    s = blue(cidrs=("10.50.0.0/24",))
    ready(plugin, s)
    n = node("a", s, pod_cidr="10.60.0.0/24")
    ask = AllocateContext(pod_network=pending(), node=n,
                          request=ResolvedRequest(address="10.50.0.77", field="x"), subnet=s)
    with pytest.raises(ProviderError) as info:
        plugin.podnet_allocate(ask)  # eth0 is in the podCIDR: the pool grows first
    assert info.value.kind is ErrorKind.POOL_EMPTY and "Subnet blue" in str(info.value)
    plugin.podnet_interface_create("reference", n, "blue", 1)
    got = plugin.podnet_allocate(ask)
    assert got is not None and (got.ip, got.interface, got.subnet) == (
        "10.50.0.77", "eth1", "blue")


def test_the_shared_subnets_outlive_the_controller_in_the_state_file(tmp_path) -> None:
    path = str(tmp_path / "cloud.json")
    first = ReferenceProvider(ReferenceCloud())
    first.podnet_configure("reference", {"state_file": path})
    s = blue(excluded=("10.50.0.2",))
    ready(first, s)
    first.podnet_pool_grow("reference", node("a", s), None, 1, None)
    second = ReferenceProvider(ReferenceCloud())
    second.podnet_configure("reference", {"state_file": path})
    assert second.cloud.subnets["blue"].excluded == ("10.50.0.2",)
    got = second.podnet_pool_grow("reference", node("b", s), None, 1, None)
    assert got is not None and got[0].address == "10.50.0.4"  # .3 is a's
    assert second.cloud.calls["PutSubnet"] == 0


def test_an_ipv6_subnet_serves_its_block(plugin) -> None:
    s = blue(cidrs=("fd00:50::/120",), gateways=("fd00:50::1",))
    ready(plugin, s)
    n = node("a", s)
    [entry] = plugin.podnet_pool_grow("reference", n, None, 1, None) or []
    assert ipaddress.ip_address(entry.address) in ipaddress.ip_network("fd00:50::/120")
    got = plugin.podnet_allocate(AllocateContext(
        pod_network=pending(), node=n, request=ResolvedRequest(entry=entry), subnet=s))
    assert got is not None and got.routes[0].dst == "::/0" and got.prefix_length == 120


# --- packets -------------------------------------------------------------------------

WHY = netns_unavailable()


@pytest.fixture
def host() -> Iterator[Any]:
    from podnet.testing.nodebed import Host

    h = Host()
    try:
        yield h
    finally:
        h.cleanup()


@pytest.mark.skipif(WHY is not None, reason=WHY or "")
def test_two_pods_on_a_subnet_given_at_run_time_ping_each_other(host) -> None:
    """The provider starts with no Subnet; one arrives (its parameters hook, then the
    Ready set), the node's pool grows from it, two pod networks are allocated on it and
    plugged by the bridge dataplane into namespaces of their own: they ping each other
    and their gateway, the Subnet's, which the node's bridge holds."""
    from podnet.plugins.reference.dataplane import bridge_name
    from podnet.testing.nodebed import ping

    network = f"s{uuid.uuid4().hex[:8]}"
    plugin = ReferenceProvider(ReferenceCloud())
    plugin.podnet_networks_changed("reference", Networks())  # the first list: nothing
    s = blue(name="green", cidrs=("10.52.7.0/24",), gateways=("10.52.7.254",),
             excluded=("10.52.7.1..10.52.7.9",),
             node_selector=SelectorTerm(match_labels={"pool": "green"}))
    ready(plugin, s)
    n = node("bed", s)
    entries = plugin.podnet_pool_grow("reference", n, None, 2, None) or []
    plugged: list[UnplugContext] = []
    try:
        pods = []
        for entry, name in zip(entries, ("one", "two"), strict=True):
            pn = pending(name, "bed")
            pn = PodNetwork(metadata=pn.metadata,
                            spec=PodNetworkSpec(pod_name=name, pod_uid=f"u-{name}",
                                                node_name="bed", provider="reference",
                                                network=network))
            got = plugin.podnet_allocate(AllocateContext(
                pod_network=pn, node=n, request=ResolvedRequest(entry=entry), subnet=s))
            assert got is not None
            routed = PodNetwork(metadata=pn.metadata, spec=pn.spec, status=PodNetworkStatus(
                phase=Phase.ROUTED, ip=got.ip, mac=got.mac, subnet=got.subnet,
                gateway=got.gateway, prefix_length=got.prefix_length, routes=got.routes,
                mtu=got.mtu))
            ns_name, path = host.netns()
            cid = host.container()
            plugin.podnet_plug(PlugContext(pod_network=routed, container_id=cid,
                                           if_name="eth0", netns=path))
            plugged.append(UnplugContext(provider="reference", network=network,
                                         container_id=cid, if_name="eth0", netns=path))
            pods.append((ns_name, got.ip))
        (one, ip_one), (two, ip_two) = pods
        assert (ip_one, ip_two) == ("10.52.7.10", "10.52.7.11")
        assert ping(one, ip_two) and ping(two, ip_one)
        assert ping(one, "10.52.7.254")
    finally:
        for ctx in plugged:
            plugin.podnet_unplug(ctx)
        subprocess.run(["ip", "link", "del", bridge_name(network)], check=False,
                       capture_output=True)


def test_a_pool_entry_outside_the_pod_networks_subnet_is_handed_back_to_wait(plugin) -> None:
    """Core reserved an entry of the podCIDR for a pod network on Subnet blue: not taken;
    the pod network waits for an address of blue (PoolEmpty naming it), which the pool
    then grows; a requested address outside blue is refused."""
    s = blue(cidrs=("10.50.0.0/24",))
    ready(plugin, s)
    n = node("a", s, pod_cidr="10.60.0.0/24")
    [outside] = plugin.podnet_pool_grow("reference", node("a", pod_cidr="10.60.0.0/24"),
                                        None, 1, None) or []
    with pytest.raises(ProviderError) as info:
        plugin.podnet_allocate(AllocateContext(
            pod_network=pending(), node=n, request=ResolvedRequest(entry=outside), subnet=s))
    assert info.value.kind is ErrorKind.POOL_EMPTY and info.value.subject == "blue"
    with pytest.raises(InvalidRequest) as refused:
        plugin.podnet_allocate(AllocateContext(
            pod_network=pending(), node=n,
            request=ResolvedRequest(address="10.60.0.9", field="metadata.annotations[x]"),
            subnet=s))
    assert refused.value.field == "metadata.annotations[x]" and "Subnet blue" in str(
        refused.value)


# --- a property: never an address twice, never one a pod may not have -----------------


def test_a_shared_subnet_never_hands_an_address_twice_or_one_excluded() -> None:
    """Random grows, new interfaces, requested addresses, give-backs and exclusion
    changes on four nodes sharing one small Subnet (``$PODNET_CHAOS_EXAMPLES`` histories,
    50 by default): every address is on one node at most, and every address handed out
    was, when handed out, inside the block and neither its gateway, network, broadcast
    nor excluded."""
    import os

    from hypothesis import HealthCheck, settings
    from hypothesis import strategies as st
    from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

    block = ipaddress.ip_network("10.53.0.0/27")
    hosts = [str(h) for h in block.hosts()]

    class SharedSubnetMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.plugin = ReferenceProvider(ReferenceCloud(max_interfaces=2,
                                                           ips_per_interface=8))
            self.subnet = blue(cidrs=(str(block),), gateways=("10.53.0.30",))
            ready(self.plugin, self.subnet)

        def node(self, i: int) -> NodeContext:
            return node(f"n{i}", self.subnet)

        def check(self, addresses: list[str]) -> None:
            for a in addresses:
                assert a in hosts and a != "10.53.0.30", a
                assert not self.subnet.excludes(a), (a, self.subnet.excluded)

        @rule(i=st.integers(0, 3), count=st.integers(1, 6), new=st.booleans())
        def grow(self, i: int, count: int, new: bool) -> None:
            try:
                if new:
                    made = self.plugin.podnet_interface_create("reference", self.node(i),
                                                               None, count)
                    self.check(list(made.ips) if made else [])
                else:
                    got = self.plugin.podnet_pool_grow("reference", self.node(i), None,
                                                       count, None) or []
                    self.check([e.address for e in got])
            except ReferenceCloudError as exc:
                assert exc.code in ("SubnetExhausted", "QuotaExceeded"), exc

        @rule(i=st.integers(0, 3), k=st.integers(0, 29))
        def request(self, i: int, k: int) -> None:
            address = hosts[k]
            ask = AllocateContext(pod_network=pending(), node=self.node(i), subnet=self.subnet,
                                  request=ResolvedRequest(address=address, field="x"))
            try:
                got = self.plugin.podnet_allocate(ask)
            except (ReferenceCloudError, ProviderError):
                return  # refused (taken, excluded, the gateway) or no interface in it yet
            assert got is not None
            self.check([got.ip])

        @rule(i=st.integers(0, 3), data=st.data())
        def give_back(self, i: int, data: st.DataObject) -> None:
            held = plugin_addresses(self.plugin, f"n{i}")
            if held:
                gone = data.draw(st.lists(st.sampled_from(held), unique=True))
                self.plugin.podnet_pool_shrink("reference", self.node(i),
                                               [PoolEntry(a) for a in gone])

        @rule(lo=st.integers(0, 28), width=st.integers(0, 5))
        def exclude(self, lo: int, width: int) -> None:
            hi = min(lo + width, 28)
            self.subnet = blue(cidrs=(str(block),), gateways=("10.53.0.30",),
                               excluded=(f"{hosts[lo]}..{hosts[hi]}",))
            ready(self.plugin, self.subnet)

        @invariant()
        def one_node_each(self) -> None:
            seen: dict[str, str] = {}
            for name, n in self.plugin.cloud.nodes.items():
                for ips in n.interfaces.values():
                    for a in ips:
                        assert a not in seen, f"{a} on {seen[a]} and {name}"
                        seen[a] = name

    def plugin_addresses(p: ReferenceProvider, name: str) -> list[str]:
        n = p.cloud.nodes.get(name)
        return sorted(a for ips in (n.interfaces.values() if n else ()) for a in ips)

    SharedSubnetMachine.TestCase.settings = settings(
        max_examples=int(os.environ.get("PODNET_CHAOS_EXAMPLES", "50")),
        stateful_step_count=30, deadline=None,
        suppress_health_check=[HealthCheck.too_slow])
    SharedSubnetMachine.TestCase().runTest()
