"""The OVN provider serving networks declared as objects (Subnet, IPPool, SecurityGroup):
its hooks with :class:`~podnet.hookspecs.networks.Networks` values (the parameters
checked, the table rebuilt, the config section as objects), then against a real
Northbound server: a Subnet given at run time serves pods on its own logical switch,
widened, excluded, removed under running pods (nothing a pod holds is freed or moved),
IP pools with the StatefulSet ordinal rule, VIPs from ``vipsRange``, SecurityGroup rules
changed under a member, and the table changed while allocations run."""

from __future__ import annotations

import ipaddress
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import (
    NetworkRequest,
    NodeInfo,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.networks import (
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SubnetInfo,
)
from podnet.hookspecs.types import AllocateContext, Allocation, NodeContext, PodNetworkContext
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.plugins.ovn.provider import OvnProvider

pytest_plugins = ["podnet.testing"]

CONFIG_SUBNETS = [
    {"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True,
     "ip_pools": {"gold": ["10.16.5.10", "10.16.5.11"]}},
    {"name": "legacy", "cidr": "10.17.0.0/24", "namespaces": ["old"], "router": "lr1",
     "gateway_type": "centralized", "mtu": 1300, "exclude_ips": ["10.17.0.2..10.17.0.9"]},
]
ROUTERS = [{"name": "lr1"}, {"name": "lr-out", "external": {
    "address": "203.0.113.2/24", "gateway": "203.0.113.254", "network_name": "physnet",
    "chassis": ["chassis-1"]}}]
NODE = NodeContext(node=NodeInfo(name="node-1", uid="u-node-1", internal_ips=("10.40.0.7",)))


def subnet(name: str, cidrs: str = "10.40.0.0/24", **kw: Any) -> SubnetInfo:
    nets = tuple(c.strip() for c in cidrs.split(","))
    gateways = kw.pop("gateways", tuple(str(ipaddress.ip_network(c).network_address + 1)
                                        for c in nets))
    return SubnetInfo(name=name, provider="ovn", cidrs=nets, gateways=gateways, **kw)


def record(name: str, *, namespace: str = "team-a", sts: bool = False,
           **requests: Any) -> PodNetwork:
    owners = (OwnerReference("apps/v1", "StatefulSet", "web", "u-web", True),) if sts else ()
    return PodNetwork(
        metadata=ObjectMeta(name=f"{name}.default", namespace=namespace, uid=f"u-{name}",
                            owner_references=owners),
        spec=PodNetworkSpec(pod_name=name, pod_uid=f"u-{name}", node_name="node-1",
                            provider="ovn", sticky=sts, requests=NetworkRequest(**requests)))


def allocate(plugin: OvnProvider, pn: PodNetwork, info: SubnetInfo | None = None,
             pool: IPPoolInfo | None = None) -> Allocation:
    got = plugin.podnet_allocate(AllocateContext(pod_network=pn, node=NODE, subnet=info,
                                                 ip_pool=pool))
    assert got is not None
    return got


def recorded(pn: PodNetwork, a: Allocation) -> PodNetwork:
    """The record as core keeps it once the allocation is written."""
    return attrs.evolve(pn, status=PodNetworkStatus(
        phase=Phase.ALLOCATED, ip=a.ip, ipv6=a.ipv6, mac=a.mac, subnet=a.subnet,
        gateway=a.gateway, interface=a.interface, prefix_length=a.prefix_length,
        mtu=a.mtu))


def routed(plugin: OvnProvider, pn: PodNetwork, info: SubnetInfo | None = None,
           pool: IPPoolInfo | None = None) -> PodNetwork:
    """Allocate and route ``pn`` as core would: the routed record."""
    rec = recorded(pn, allocate(plugin, pn, info, pool))
    plugin.podnet_route(PodNetworkContext(pod_network=rec, node=NODE))
    return attrs.evolve(rec, status=attrs.evolve(rec.status, phase=Phase.ROUTED))


def wait_until(predicate: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def ctx(pn: PodNetwork) -> PodNetworkContext:
    return PodNetworkContext(pod_network=pn, node=NODE)


# --- the hooks alone: no Northbound needed ----------------------------------------------


@pytest.fixture
def bare() -> OvnProvider:
    return OvnProvider(None, CONFIG_SUBNETS, routers=ROUTERS, seed=3,
                       security_groups={"web": {"ingress": [{"protocol": "tcp", "port": 80}]},
                                        "db": {"egress": []}})


def test_parameters_default_to_the_subnets_name_and_a_distributed_gateway(
        bare: OvnProvider) -> None:
    got = bare.podnet_subnet_parameters(provider="ovn", subnet=subnet("blue"))
    assert got is not None
    assert got.summary == "switch blue, distributed"
    assert got.details == {"logicalSwitch": "blue", "gatewayType": "distributed"}


def test_every_parameter_is_read_and_shown(bare: OvnProvider) -> None:
    info = subnet("blue", "10.40.0.0/24,fd00:40::/120", parameters={
        "logicalSwitch": "ls-blue", "gatewayType": "centralized", "router": "lr1",
        "mtu": 1400, "vipsRange": ["10.40.0.200..10.40.0.220", "fd00:40::f0/124"]})
    got = bare.podnet_subnet_parameters(provider="ovn", subnet=info)
    assert got is not None
    assert got.summary == "switch ls-blue, centralized, router lr1, mtu 1400"
    assert got.details["vipsRange"] == ["10.40.0.200..10.40.0.220", "fd00:40::f0/124"]


def test_a_switch_another_subnet_uses_is_refused_naming_it(bare: OvnProvider) -> None:
    bare.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(
        subnet("red", "10.41.0.0/24", parameters={"logicalSwitch": "shared"}),)))
    with pytest.raises(InvalidRequest) as info:
        bare.podnet_subnet_parameters(provider="ovn", subnet=subnet(
            "blue", parameters={"logicalSwitch": "shared"}))
    assert info.value.field == "spec.parameters.logicalSwitch"
    assert "Subnet blue" in str(info.value) and "already used by Subnet red" in str(info.value)
    # a config subnet's switch too, unless the object replaces that subnet (same name)
    with pytest.raises(InvalidRequest, match="already used by config subnet legacy"):
        bare.podnet_subnet_parameters(provider="ovn", subnet=subnet(
            "blue", parameters={"logicalSwitch": "legacy"}))
    assert bare.podnet_subnet_parameters(provider="ovn", subnet=subnet(
        "legacy", "10.17.0.0/24")) is not None
    # red itself, again (a resync): its own switch is no conflict
    assert bare.podnet_subnet_parameters(provider="ovn", subnet=subnet(
        "red", "10.41.0.0/24", parameters={"logicalSwitch": "shared"})) is not None


def test_a_serving_subnets_switch_does_not_change(bare: OvnProvider) -> None:
    bare.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(
        subnet("red", "10.41.0.0/24"),)))
    with pytest.raises(InvalidRequest) as info:
        bare.podnet_subnet_parameters(provider="ovn", subnet=subnet(
            "red", "10.41.0.0/24", parameters={"logicalSwitch": "red2"}))
    assert info.value.field == "spec.parameters.logicalSwitch"
    assert "differs from switch red" in str(info.value)


def test_networks_changed_merges_objects_over_the_config_and_retires_the_removed(
        bare: OvnProvider) -> None:
    assert set(bare.subnets) == {"ovn-default", "legacy"}
    blue = subnet("blue", parameters={"logicalSwitch": "ls-blue", "router": "lr1"},
                  excluded=("10.40.0.2..10.40.0.9",))
    over = subnet("legacy", "10.17.0.0/23", parameters={"gatewayType": "distributed"})
    pool = IPPoolInfo(name="blue-pool", subnet="blue", addresses=("10.40.0.64/28",))
    bare.podnet_networks_changed(provider="ovn", networks=Networks(
        subnets=(blue, over), pools=(pool,), revision=1))
    assert set(bare.subnets) == {"ovn-default", "legacy", "blue"}
    assert bare.subnets["blue"].switch == "ls-blue" and bare.subnets["blue"].router == "lr1"
    assert "10.40.0.5" in bare.subnets["blue"].excluded
    assert "10.40.0.70" in bare.subnets["blue"].pooled[0][0]
    # the object wins over the config's subnet of its name, and keeps its named pools
    legacy = bare.subnets["legacy"]
    assert str(legacy.v4) == "10.17.0.0/23" and legacy.gateway_type == "distributed"
    assert legacy.from_object and legacy.ip_pools == {}
    assert bare.pools == {"blue-pool": pool}
    # blue removed: it serves no new pod, but its pods' records still find it
    bare.podnet_networks_changed(provider="ovn", networks=Networks(revision=2))
    assert set(bare.subnets) == {"ovn-default", "legacy"}
    assert bare.retired["blue"].switch == "ls-blue"
    assert str(bare.subnets["legacy"].v4) == "10.17.0.0/24"  # the config's again
    # back: it serves again
    bare.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    assert "blue" in bare.subnets and "blue" not in bare.retired


def test_a_newcomer_never_takes_a_serving_subnets_switch(bare: OvnProvider) -> None:
    red = subnet("red", "10.41.0.0/24", parameters={"logicalSwitch": "shared"})
    bare.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(red,)))
    # both reached core's Ready set before either was checked against the other
    alpha = subnet("alpha", parameters={"logicalSwitch": "shared"})
    bare.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(alpha, red)))
    assert "alpha" not in bare.subnets and bare.subnets["red"].switch == "shared"


def test_what_core_should_not_have_passed_leaves_only_that_object_out(
        bare: OvnProvider) -> None:
    good = subnet("good", "10.41.0.0/24")
    broken = subnet("broken", excluded=("10.40.0.9..nope",))
    odd_pool = IPPoolInfo(name="odd", subnet="good", addresses=("not-an-address",))
    bare.podnet_networks_changed(provider="ovn", networks=Networks(
        subnets=(broken, good), pools=(odd_pool,)))
    assert "good" in bare.subnets and "broken" not in bare.subnets
    assert bare.subnets["good"].pooled == ()


def test_security_group_objects_join_the_configs_and_a_bad_one_names_its_field(
        bare: OvnProvider) -> None:
    good = SecurityGroupInfo(name="api", ingress=(SecurityRule("tcp", (8000, 8080),
                                                                groups=("web",)),),
                             egress=(SecurityRule(),))
    bad = SecurityGroupInfo(name="broken", ingress=(SecurityRule("tcp", (80, 80),
                                                                  groups=("nope",)),))
    web = SecurityGroupInfo(name="web", ingress=(SecurityRule("icmp"),))
    bare.podnet_networks_changed(provider="ovn", networks=Networks(
        security_groups=(good, bad, web)))
    groups = bare.security_groups
    assert set(groups) == {"api", "broken", "web", "db"}
    api = groups["api"]
    assert api.ingress[0].ports == (8000, 8080) and api.ingress[0].groups == ("web",)
    assert groups["web"].ingress[0].protocol == "icmp"  # the object wins
    assert groups["broken"].field == "securitygroup[broken].spec.ingress[0].groups"
    with pytest.raises(InvalidRequest) as info:
        bare._groups_of(record("p", security_groups=("broken",)))
    assert info.value.field == "securitygroup[broken].spec.ingress[0].groups"
    assert "unknown security group 'nope'" in str(info.value)
    with pytest.raises(InvalidRequest, match="SecurityGroup objects"):
        bare._groups_of(record("p", security_groups=("ghost",)))


def test_config_networks_are_the_sections_subnets_pools_and_groups(bare: OvnProvider) -> None:
    got = bare.podnet_config_networks(provider="ovn")
    assert got is not None
    default, legacy = got.subnets
    assert default.name == "ovn-default" and default.default and default.cidrs == (
        "10.16.0.0/16",) and default.gateways == ("10.16.0.1",)
    assert default.parameters == {"logicalSwitch": "ovn-default",
                                  "gatewayType": "distributed"}
    assert legacy.namespaces == ("old",) and legacy.excluded == ("10.17.0.2..10.17.0.9",)
    assert legacy.parameters == {"logicalSwitch": "legacy", "gatewayType": "centralized",
                                 "router": "lr1", "mtu": 1300}
    assert not legacy.default
    assert got.pools == (IPPoolInfo(name="gold", subnet="ovn-default",
                                    addresses=("10.16.5.10", "10.16.5.11")),)
    web, db = sorted(got.security_groups, key=lambda g: g.name, reverse=True)
    assert web.ingress == (SecurityRule("tcp", (80, 80)),)
    assert web.egress == (SecurityRule(),)  # left out: not restricted, the same ACLs
    assert db.egress == () and db.ingress == (SecurityRule(),)
    # what it declares passes its own check: the migration's objects are served as is
    for info in got.subnets:
        assert bare.podnet_subnet_parameters(provider="ovn", subnet=info) is not None


def test_config_networks_name_a_shared_pool_name_after_its_subnet() -> None:
    plugin = OvnProvider(None, [
        {"name": "a", "cidr": "10.1.0.0/24", "ip_pools": {"gold": ["10.1.0.5"]}},
        {"name": "b", "cidr": "10.2.0.0/24", "ip_pools": {"gold": ["10.2.0.5"],
                                                           "jade": ["10.2.0.6"]}}])
    got = plugin.podnet_config_networks(provider="ovn")
    assert got is not None
    assert [p.name for p in got.pools] == ["a-gold", "b-gold", "jade"]
    assert got.subnets[0].default  # the first, as the section made it


def test_a_section_declaring_nothing_migrates_nothing() -> None:
    assert OvnProvider(None).podnet_config_networks(provider="ovn") is None


# --- against a real Northbound server -------------------------------------------------------

_MISSING = ovsdb_server_available()
nb = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    if _MISSING is not None:
        pytest.skip(_MISSING)
    with NbServer() as server:
        yield server


@pytest.fixture
def plugin(nb_server: NbServer) -> Iterator[OvnProvider]:
    nb_server.restart_fresh()
    made = OvnProvider(nb_server.remote, CONFIG_SUBNETS, routers=ROUTERS[:1], seed=5,
                       security_groups={"web": {"ingress": [{"protocol": "tcp",
                                                             "port": 80}]}})
    yield made
    made.close()


def nbctl(server: NbServer, *args: str) -> str:
    return subprocess.run(["ovn-nbctl", f"--db={server.remote}", *args], check=True,
                          capture_output=True, text=True, timeout=30).stdout


@nb
def test_a_subnet_given_at_run_time_serves_pods_on_its_own_switch(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.40.0.0/24", parameters={"logicalSwitch": "ls-blue",
                                                      "router": "lr1", "mtu": 1350})
    # before: core has no Subnet object; the config's default serves
    first = routed(plugin, record("before"))
    assert first.status.subnet == "ovn-default"
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("a"), blue)
    st = pn.status
    assert st.subnet == "blue" and ipaddress.ip_address(st.ip) in ipaddress.ip_network(
        "10.40.0.0/24") and st.ip not in ("10.40.0.1", "10.40.0.7")
    assert st.mtu == 1350 and st.gateway == "10.40.0.1" and st.prefix_length == 24
    # the port is on the Subnet's logical switch, linked to its router by ports named
    # after the switch
    assert "team-a/a.default" in nbctl(nb_server, "lsp-list", "ls-blue")
    assert nbctl(nb_server, "get", "Logical_Router_Port", "lr1-ls-blue",
                 "networks").strip() == '["10.40.0.1/24"]'
    assert plugin.podnet_verify(ctx(pn)).ok
    plugin.podnet_release(ctx(pn))
    assert "team-a/a.default" not in nbctl(nb_server, "lsp-list", "ls-blue")


@nb
def test_a_dual_stack_subnet_object_gives_both_families(plugin: OvnProvider) -> None:
    dual = subnet("dual-obj", "10.52.0.0/24,fd00:52::/120",
                  excluded=("fd00:52::/121",), parameters={"mtu": 1400})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(dual,)))
    pn = routed(plugin, record("d"), dual)
    got = allocate(plugin, record("d"), dual)  # again: the same answer
    assert got.ipv6 is not None and ipaddress.ip_address(got.ipv6) in ipaddress.ip_network(
        "fd00:52::80/121")  # the excluded half never
    assert (got.ip, got.ipv6) == (pn.status.ip, pn.status.ipv6)
    assert got.ipv6_gateway == "fd00:52::1" and got.ipv6_prefix_length == 120
    assert got.mtu == 1400 and plugin.podnet_verify(ctx(pn)).ok


@nb
def test_a_widened_subnet_serves_the_new_range_and_moves_nobody(plugin: OvnProvider) -> None:
    small = subnet("tiny", "10.42.0.0/29")  # 10.42.0.2..6: five addresses for pods
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(small,)))
    held = [routed(plugin, record(f"p{i}"), small) for i in range(5)]
    with pytest.raises(ProviderError) as full:
        allocate(plugin, record("p5"), small)
    assert full.value.kind is ErrorKind.SUBNET_EXHAUSTED
    wide = subnet("tiny", "10.42.0.0/28", gateways=("10.42.0.1",), generation=2)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(wide,)))
    got = allocate(plugin, record("p5"), wide)
    assert 7 <= int(ipaddress.ip_address(got.ip)) - int(ipaddress.ip_address("10.42.0.0")) <= 14
    for pn in held:  # the first five keep theirs, their ports as they were
        assert plugin.podnet_verify(ctx(pn)).ok
        assert plugin.ipam.owner(pn.status.ip) == pn.status.interface


@nb
def test_added_exclusions_are_never_handed_out_and_a_holder_keeps_its_address(
        plugin: OvnProvider) -> None:
    blue = subnet("blue", "10.43.0.0/28")
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    holder = routed(plugin, record("holder"), blue)
    ip = holder.status.ip
    # exclude everything but one address, the holder's among them
    others = [str(ipaddress.ip_address("10.43.0.0") + i) for i in range(2, 15)]
    keep = next(a for a in others if a != ip)
    excluded = tuple(a for a in others if a != keep)
    narrow = attrs.evolve(blue, excluded=excluded, generation=2)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(narrow,)))
    assert allocate(plugin, record("new"), narrow).ip == keep
    with pytest.raises(ProviderError) as full:
        allocate(plugin, record("newer"), narrow)
    assert full.value.kind is ErrorKind.SUBNET_EXHAUSTED
    # the holder's address is excluded now, and still its: verify and route are fine,
    # nobody else may ask for it
    assert plugin.podnet_verify(ctx(holder)).ok
    plugin.podnet_route(ctx(holder))
    assert plugin.ipam.owner(ip) == holder.status.interface
    with pytest.raises(InvalidRequest, match="an excluded address"):
        allocate(plugin, record("thief", ip_address=ip), narrow)
    plugin.podnet_release(ctx(holder))
    assert plugin.ipam.owner(ip) is None


@nb
def test_a_removed_subnet_gets_no_pod_and_its_pods_keep_working(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.44.0.0/24", parameters={"logicalSwitch": "ls-gone",
                                                      "router": "lr1"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("stays", vips=("10.44.0.77",)), blue)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks())
    assert "blue" not in plugin.subnets
    # a new pod: core passes no Subnet (none left): the config's rules place it
    assert allocate(plugin, record("new")).subnet == "ovn-default"
    with pytest.raises(InvalidRequest, match="unknown subnet 'blue'"):
        allocate(plugin, record("asks", subnets=("blue",)))
    # the pod on it: verify ok, a repair's route writes nothing new, release cleans up
    assert plugin.podnet_verify(ctx(pn)).ok
    plugin.podnet_route(ctx(pn))
    assert plugin.podnet_verify(ctx(pn)).ok
    assert "ls-gone-vip-10.44.0.77" in nbctl(nb_server, "lsp-list", "ls-gone")
    plugin.podnet_release(ctx(pn))
    # the VIP's virtual port is named after the switch, and goes with the pod
    listed = nbctl(nb_server, "lsp-list", "ls-gone")
    assert "stays" not in listed and "vip" not in listed, listed
    assert plugin.ipam.owner(pn.status.ip) is None and plugin.ipam.owner("10.44.0.77") is None


@nb
def test_an_ip_pool_object_gives_a_statefulset_pod_its_ordinal_and_others_leave_it(
        plugin: OvnProvider) -> None:
    blue = subnet("blue", "10.45.0.0/29")
    pool = IPPoolInfo(name="web-ips", subnet="blue", addresses=("10.45.0.4..10.45.0.6",))
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,),
                                                                    pools=(pool,)))
    assert allocate(plugin, record("web-1", sts=True), blue, pool).ip == "10.45.0.5"
    assert allocate(plugin, record("web-0", sts=True), blue, pool).ip == "10.45.0.4"
    # beyond the pool's length: the first free member
    assert allocate(plugin, record("web-7", sts=True), blue, pool).ip == "10.45.0.6"
    with pytest.raises(ProviderError) as full:
        allocate(plugin, record("other"), blue, pool)
    assert full.value.kind is ErrorKind.SUBNET_EXHAUSTED and "IPPool web-ips" in str(full.value)
    # pods without the pool take the Subnet's other addresses, never the pool's
    got = {allocate(plugin, record(f"free{i}"), blue).ip for i in range(2)}
    assert got == {"10.45.0.2", "10.45.0.3"}
    # the pool named by the annotation (core passed no IPPool: found by its name)
    plugin.podnet_release(ctx(recorded(record("web-0", sts=True),
                                       Allocation(ip="10.45.0.4", subnet="blue"))))
    assert allocate(plugin, record("named", ip_pool=("web-ips",)), blue).ip == "10.45.0.4"


@nb
def test_a_pool_member_the_subnet_excludes_is_refused_at_its_ordinal(
        plugin: OvnProvider) -> None:
    blue = subnet("blue", "10.46.0.0/24", excluded=("10.46.0.11",))
    pool = IPPoolInfo(name="p", subnet="blue", addresses=("10.46.0.10", "10.46.0.11"))
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,),
                                                                    pools=(pool,)))
    with pytest.raises(InvalidRequest) as info:
        allocate(plugin, record("web-1", sts=True), blue, pool)
    assert "ordinal 1 of IPPool p" in str(info.value) and "excluded" in str(info.value)
    assert info.value.field == "ippool[p].spec.addresses"


@nb
def test_vips_come_from_the_vips_range_and_pods_never_get_one_as_theirs(
        plugin: OvnProvider) -> None:
    blue = subnet("blue", "10.47.0.0/28", parameters={"vipsRange": "10.47.0.8..10.47.0.14"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    with pytest.raises(InvalidRequest, match="kept for VIPs"):
        allocate(plugin, record("static", ip_address="10.47.0.9"), blue)
    with pytest.raises(InvalidRequest, match="outside the vipsRange"):
        allocate(plugin, record("v1", vips=("10.47.0.3",)), blue)
    pn = routed(plugin, record("v2", vips=("10.47.0.9",)), blue)
    assert plugin.ipam.used["10.47.0.9"].vip and plugin.podnet_verify(ctx(pn)).ok
    # the pods' own addresses: 2..7 only (six, v2's among them)
    addresses = {pn.status.ip, *(allocate(plugin, record(f"p{i}"), blue).ip for i in range(5))}
    assert addresses == {f"10.47.0.{i}" for i in range(2, 8)}
    with pytest.raises(ProviderError) as full:
        allocate(plugin, record("p6"), blue)
    assert full.value.kind is ErrorKind.SUBNET_EXHAUSTED


@nb
def test_a_security_group_object_changed_under_a_member_is_seen_and_rewritten(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.48.0.0/24")
    sg = SecurityGroupInfo(name="app", ingress=(SecurityRule("tcp", (80, 80)),))
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(
        subnets=(blue,), security_groups=(sg,)))
    pn = routed(plugin, record("m", security_groups=("app",)), blue)
    assert plugin.podnet_verify(ctx(pn)).ok

    def acls() -> str:
        return nbctl(nb_server, "acl-list", "sg_app")

    assert "tcp.dst == 80" in acls()
    changed = attrs.evolve(sg, ingress=(SecurityRule("tcp", (443, 443)),), generation=2)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(
        subnets=(blue,), security_groups=(changed,)))
    # the member's verify (core requeues it) finds the group's rules rewritten
    assert plugin.podnet_verify(ctx(pn)).ok
    assert "tcp.dst == 443" in acls() and "tcp.dst == 80" not in acls()
    # a rule changed behind podnet's back is what verify sees, and route repairs
    nbctl(nb_server, "acl-del", "sg_app")
    # (once the provider's replica of NB has the deletion: it follows the server)
    wait_until(lambda: not plugin.podnet_verify(ctx(pn)).ok, "verify to see the ACLs gone")
    plugin.podnet_route(ctx(pn))
    assert plugin.podnet_verify(ctx(pn)).ok
    # the group gone: the member's verify says so, its port keeps the last rules
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    result = plugin.podnet_verify(ctx(pn))
    assert not result.ok and "unknown security group 'app'" in result.reason
    assert "tcp.dst == 443" in acls()


@nb
def test_changes_while_allocations_run_never_hand_out_an_address_twice(
        plugin: OvnProvider) -> None:
    versions = [subnet("busy", "10.49.0.0/26", generation=1),
                subnet("busy", "10.49.0.0/25", generation=2,
                       excluded=("10.49.0.2..10.49.0.20",)),
                subnet("busy", "10.49.0.0/24", generation=3)]
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=versions[:1]))
    stop = threading.Event()
    changes = [0]

    def churn() -> None:
        while not stop.is_set():
            for v in versions:
                plugin.podnet_networks_changed(provider="ovn", networks=Networks(
                    subnets=(v,), revision=changes[0]))
                changes[0] += 1

    got: list[str] = []
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        for i in range(15):
            try:
                got.append(allocate(plugin, record(f"w{n}-{i}"),
                                    versions[(n + i) % 3]).ip)
            except BaseException as exc:  # collected for the assertion
                errors.append(exc)

    churner = threading.Thread(target=churn)
    churner.start()
    workers = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stop.set()
    churner.join()
    assert errors == [] and len(got) == 60 and len(set(got)) == 60, (errors, got)
    print(f"{changes[0]} table changes during 60 allocations")
    assert changes[0] > 0


# --- packets: the OVN bed (NB, SB, northd, a chassis with ovn-controller) -----------------

_PLUG = """
import json, sys
from podnet.hookspecs.models import (ObjectMeta, Phase, PodNetwork, PodNetworkSpec,
                                     PodNetworkStatus)
from podnet.hookspecs.types import PlugContext, UnplugContext
from podnet.plugins.ovn.dataplane import OvsDataplane

dp = OvsDataplane(OVS_DB, bind_timeout=20)
for p in PODS:
    if ACTION == "plug":
        pn = PodNetwork(
            metadata=ObjectMeta(name=p["name"], namespace=p["namespace"]),
            spec=PodNetworkSpec(pod_name=p["pod"], pod_uid="u", node_name="node-1",
                                provider="ovn"),
            status=PodNetworkStatus(phase=Phase.ROUTED, ip=p["ip"], mac=p["mac"],
                                    gateway=p["gateway"], prefix_length=p["prefix"],
                                    interface=p["port"], mtu=p["mtu"]))
        dp.plug(PlugContext(pod_network=pn, container_id=p["cid"], if_name="eth0",
                            netns=p["netns"]), p["port"])
    else:
        dp.unplug(UnplugContext(provider="ovn", network="default", container_id=p["cid"],
                                if_name="eth0", netns=p["netns"]))
dp.close()
print("done")
"""


def _dataplane(bed: Any, action: str, pods: list[dict[str, Any]]) -> None:
    """Plug (or unplug) pods with the node agent's dataplane, in the chassis' namespace
    (where its host ends must be)."""
    from podnet.testing.nodebed import in_netns

    done = in_netns(bed.netns, f"OVS_DB = {bed.ovs_remote!r}\nACTION = {action!r}\n"
                    f"PODS = {pods!r}\n" + _PLUG, timeout=90)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr


def _connects(netns: str, address: str, port: int) -> str:
    """``ok`` (connected and answered), ``refused`` (an RST) or ``timeout`` (dropped)."""
    from podnet.testing.nodebed import in_netns

    done = in_netns(netns, f"""
        import socket
        try:
            c = socket.create_connection(({address!r}, {port}), timeout=3)
            c.sendall(b"x")
            c.recv(100)
        except ConnectionRefusedError:
            print("refused")
        except (TimeoutError, socket.timeout):
            print("timeout")
        else:
            print("ok")
    """, timeout=20)
    return done.stdout.strip()


class PodsOnTheBed:
    """Pods (network namespaces) whose records the provider routed, plugged into the
    bed's ``br-int``; :meth:`close` unplugs them, releases their ports and deletes the
    switches the test made, also after a failure."""

    def __init__(self, bed: Any, plugin: OvnProvider) -> None:
        from podnet.testing.nodebed import Host

        self.bed, self.plugin = bed, plugin
        self.host = Host(links=lambda container, interface: [])
        self.pods: dict[str, dict[str, Any]] = {}
        self.records: dict[str, PodNetwork] = {}
        self.switches: list[str] = []

    def add(self, pn: PodNetwork, info: SubnetInfo) -> dict[str, Any]:
        rec = routed(self.plugin, pn, info)
        self.records[pn.spec.pod_name] = rec
        netns, path = self.host.netns()
        st = rec.status
        pod = {"name": rec.metadata.name, "namespace": rec.metadata.namespace,
               "pod": pn.spec.pod_name, "ip": st.ip, "mac": st.mac, "gateway": st.gateway,
               "prefix": st.prefix_length, "port": st.interface, "mtu": st.mtu,
               "cid": self.host.container(), "netns": path, "ns": netns}
        _dataplane(self.bed, "plug", [pod])
        self.pods[pn.spec.pod_name] = pod
        return pod

    def close(self) -> None:
        steps = [lambda: _dataplane(self.bed, "unplug", list(self.pods.values())),
                 *(lambda r=r: self.plugin.podnet_release(ctx(r))
                   for r in self.records.values()),
                 *(lambda s=s: self.bed.nbctl("--if-exists", "ls-del", s)
                   for s in self.switches),
                 self.plugin.close, self.host.cleanup]
        for step in steps:
            try:
                step()
            except Exception as exc:  # every step runs, whatever failed before
                print(f"cleanup: {exc}")


@pytest.fixture
def on_bed(ovn_bed: Any) -> Iterator[PodsOnTheBed]:
    from podnet.testing.netns import netns_unavailable

    missing = netns_unavailable()
    if missing is not None:
        pytest.skip(missing)
    suffix = __import__("uuid").uuid4().hex[:6]
    plugin = OvnProvider(ovn_bed.nb_remote, [{"name": f"pk-{suffix}", "cidr": "10.70.0.0/24",
                                              "default": True}], seed=11)
    made = PodsOnTheBed(ovn_bed, plugin)
    made.switches.append(f"pk-{suffix}")
    try:
        yield made
    finally:
        made.close()


@pytest.mark.slow
def test_packets_a_subnet_given_at_run_time_serves_two_pods_that_ping_each_other(
        on_bed: PodsOnTheBed) -> None:
    from podnet.testing.nodebed import ping

    plugin = on_bed.plugin
    first = on_bed.add(record("first"), None)  # the controller runs: the config serves
    assert first["ip"].startswith("10.70.0.")
    switch = f"ls-rt-{on_bed.switches[0][3:]}"
    on_bed.switches.append(switch)
    blue = subnet(f"rt-{switch[6:]}", "10.71.0.0/24", parameters={"logicalSwitch": switch})
    assert plugin.podnet_subnet_parameters(provider="ovn", subnet=blue) is not None
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    a = on_bed.add(record("a"), blue)
    b = on_bed.add(record("b"), blue)
    assert a["ip"].startswith("10.71.0.") and b["ip"].startswith("10.71.0.")
    assert on_bed.records["a"].status.subnet == blue.name
    assert ping(a["ns"], b["ip"]) and ping(b["ns"], a["ip"])
    # another switch, no router: the config's pod is not reached from the new Subnet
    assert not ping(a["ns"], first["ip"], count=2, timeout=1)


@pytest.mark.slow
def test_packets_a_security_group_objects_rules_changed_close_and_open_a_member(
        on_bed: PodsOnTheBed) -> None:
    from podnet.testing.nodebed import TcpServer

    plugin, bed = on_bed.plugin, on_bed.bed
    switch = f"ls-sg-{on_bed.switches[0][3:]}"
    on_bed.switches.append(switch)
    blue = subnet(f"sgnet-{switch[6:]}", "10.72.0.0/24", parameters={"logicalSwitch": switch})
    group = f"sg-{switch[6:]}"
    web = SecurityGroupInfo(name=group, ingress=(SecurityRule("tcp", (8080, 8080)),))
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(
        subnets=(blue,), security_groups=(web,)))
    m = on_bed.add(record("m", security_groups=(group,)), blue)
    o = on_bed.add(record("o"), blue)
    member = on_bed.records["m"]

    def change(rules: tuple[SecurityRule, ...], revision: int) -> None:
        """The object's new rules reach the provider; core requeues the member, whose
        verify (and repair) applies them; then ovn-controller has them in its flows."""
        plugin.podnet_networks_changed(provider="ovn", networks=Networks(
            subnets=(blue,), security_groups=(attrs.evolve(web, ingress=rules),),
            revision=revision))
        if not plugin.podnet_verify(ctx(member)).ok:
            plugin.podnet_route(ctx(member))
        assert plugin.podnet_verify(ctx(member)).ok
        bed.nbctl("--timeout=20", "--wait=hv", "sync")

    with TcpServer(m["ns"], m["ip"], port=8080):
        assert _connects(o["ns"], m["ip"], 8080) == "ok"
    change((SecurityRule("tcp", (9090, 9090)),), 2)
    with TcpServer(m["ns"], m["ip"], port=8080):
        assert _connects(o["ns"], m["ip"], 8080) == "timeout"  # dropped, not refused
        assert _connects(m["ns"], m["ip"], 8080) == "ok"  # the server is there
    change((SecurityRule("tcp", (8080, 8080)),), 3)
    with TcpServer(m["ns"], m["ip"], port=8080):
        assert _connects(o["ns"], m["ip"], 8080) == "ok"


@nb
def test_a_controller_started_after_its_subnet_left_keeps_the_pods_ports_as_nb_has_them(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.50.0.0/24", parameters={"logicalSwitch": "ls-left",
                                                      "router": "lr1"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("stays"), blue)
    plain = routed(plugin, record("plain"), blue)
    plugin.close()
    # a new controller: blue is not Ready any more (deleted while held), so it never
    # reaches the provider; the records still name it
    later = OvnProvider(nb_server.remote, CONFIG_SUBNETS, routers=ROUTERS[:1], seed=6)
    try:
        later.podnet_networks_changed(provider="ovn", networks=Networks())
        assert "blue" not in later.subnets
        assert later.podnet_verify(ctx(pn)).ok
        before = nbctl(nb_server, "get", "Logical_Router_Port", "lr1-ls-left", "networks")
        later.podnet_route(ctx(pn))
        assert later.podnet_verify(ctx(pn)).ok and later.podnet_verify(ctx(plain)).ok
        recovered = later.retired["blue"]
        assert (recovered.switch, recovered.router, recovered.gateway_type) == (
            "ls-left", "lr1", "distributed")
        # the router link is left as it is (the record does not know the block)
        assert nbctl(nb_server, "get", "Logical_Router_Port", "lr1-ls-left",
                     "networks") == before
        assert later.ipam.owner(pn.status.ip) == pn.status.interface
        later.podnet_release(ctx(pn))
        later.podnet_release(ctx(plain))
        assert "team-a" not in nbctl(nb_server, "lsp-list", "ls-left")
    finally:
        later.close()


@nb
def test_a_subnet_core_hands_over_before_the_provider_heard_of_it_is_routed(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    early = subnet("early", "10.51.0.0/24", parameters={"logicalSwitch": "ls-early",
                                                        "router": "lr1"})
    pn = routed(plugin, record("first"), early)  # no podnet_networks_changed yet
    assert pn.status.subnet == "early" and plugin.podnet_verify(ctx(pn)).ok
    # the Subnet as core sees it, its router link made
    assert nbctl(nb_server, "get", "Logical_Router_Port", "lr1-ls-early",
                 "networks").strip() == '["10.51.0.1/24"]'
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(early,)))
    assert plugin.podnet_verify(ctx(pn)).ok


@nb
def test_a_removed_subnet_holds_its_switch_while_its_pods_ports_are_there(
        plugin: OvnProvider) -> None:
    blue = subnet("blue", "10.53.0.0/24", parameters={"logicalSwitch": "ls-r1"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("last"), blue)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks())
    green = subnet("green", "10.54.0.0/24", parameters={"logicalSwitch": "ls-r1"})
    again = subnet("blue", "10.55.0.0/24", parameters={"logicalSwitch": "ls-r2"})
    with pytest.raises(InvalidRequest, match="Subnet blue \\(removed; its pods' ports"):
        plugin.podnet_subnet_parameters(provider="ovn", subnet=green)
    with pytest.raises(InvalidRequest, match="differs from switch ls-r1"):
        plugin.podnet_subnet_parameters(provider="ovn", subnet=again)
    plugin.podnet_release(ctx(pn))
    # its last pod gone: the switch is free, and so is the name
    assert plugin.podnet_subnet_parameters(provider="ovn", subnet=green) is not None
    assert plugin.podnet_subnet_parameters(provider="ovn", subnet=again) is not None
    assert "blue" not in plugin.retired


@nb
def test_a_gateway_type_changed_under_running_pods_is_seen_by_verify_and_applied(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.56.0.0/24")
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("gw"), blue)
    uuid = nbctl(nb_server, "--bare", "--columns=_uuid", "find", "Logical_Switch_Port",
                 'name="team-a/gw.default"').strip()
    assert uuid in nbctl(nb_server, "get", "Port_Group", "node_node_1", "ports")
    central = attrs.evolve(blue, parameters={"gatewayType": "centralized"}, generation=2)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(central,)))
    got = plugin.podnet_verify(ctx(pn))
    assert not got.ok and "still in ['node_node_1']" in got.reason
    plugin.podnet_route(ctx(pn))
    assert plugin.podnet_verify(ctx(pn)).ok
    assert uuid not in nbctl(nb_server, "get", "Port_Group", "node_node_1", "ports")


@nb
def test_a_router_given_to_a_serving_subnet_is_linked_at_its_pods_next_verify(
        plugin: OvnProvider, nb_server: NbServer) -> None:
    blue = subnet("blue", "10.57.0.0/24", parameters={"logicalSwitch": "ls-late"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(blue,)))
    pn = routed(plugin, record("r"), blue)
    routed_now = attrs.evolve(blue, parameters={"logicalSwitch": "ls-late", "router": "lr1"},
                              generation=2)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(routed_now,)))
    got = plugin.podnet_verify(ctx(pn))
    assert not got.ok and "router link lr1-ls-late" in got.reason
    plugin.podnet_route(ctx(pn))
    assert plugin.podnet_verify(ctx(pn)).ok
    assert nbctl(nb_server, "get", "Logical_Router_Port", "lr1-ls-late",
                 "networks").strip() == '["10.57.0.1/24"]'
