"""Subnet objects on ECS, through the official SDK against the simulator: the vSwitches a
Subnet names are read back (zone, CIDR) and refused when they disagree; the Ready set is
kept; a node's new ENIs go into its Subnets' vSwitches of its zone; the config's
vSwitches become Subnets (the migration)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from alibabacloud_ecs20140526 import models as m
from alibabacloud_ecs20140526.client import Client
from alibabacloud_tea_openapi import models as open_api_models

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.networks import Networks, SubnetInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ecs.demo import provider_config
from podnet.plugins.ecs.provider import EcsProvider
from podnet.plugins.ecs.sim import EcsSimulator

REGION = "cn-hangzhou"
K, J = "cn-hangzhou-k", "cn-hangzhou-j"


@pytest.fixture
def sim() -> Iterator[EcsSimulator]:
    s = EcsSimulator()
    # the configured vSwitch (zone k), and two Subnet-only ones in each of zones k and j
    s.add_vswitch("vsw-conf", "10.0.0.0/16", zone=K)
    s.add_vswitch("vsw-k1", "10.40.1.0/24", zone=K)
    s.add_vswitch("vsw-k2", "10.40.2.0/24", zone=K)
    s.add_vswitch("vsw-j1", "10.40.9.0/24", zone=J)
    s.add_vswitch("vsw-far", "10.99.0.0/24", zone=K)
    s.add_instance("i-k", "ecs.g7.large", "vsw-conf")
    s.add_instance("i-j", "ecs.g7.large", "vsw-j1")
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def plugin(sim: EcsSimulator) -> Iterator[EcsProvider]:
    p = EcsProvider()
    p.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-conf"]))
    try:
        yield p
    finally:
        p.close()


def subnet(params: Any, cidr: str = "10.40.0.0/16", name: str = "blue") -> SubnetInfo:
    return SubnetInfo(name=name, provider="ecs", cidrs=(cidr,), parameters=params)


def node(instance: str, **labels: str) -> NodeContext:
    return NodeContext(node=NodeInfo(name=f"n-{instance}", uid="u",
                                     provider_id=f"{REGION}.{instance}", labels=labels))


def test_parameters_are_read_back_with_each_vswitch_zone_and_cidr(plugin, sim) -> None:
    answer = plugin.podnet_subnet_parameters(
        "ecs", subnet({"vSwitchIds": {K: ["vsw-k1", "vsw-k2"], J: ["vsw-j1"]}}))
    assert answer is not None
    assert answer.summary == "3 vSwitches"
    assert [(v["id"], v["zone"], v["cidr"]) for v in answer.details["vSwitches"]] == [
        ("vsw-k1", K, "10.40.1.0/24"), ("vsw-k2", K, "10.40.2.0/24"),
        ("vsw-j1", J, "10.40.9.0/24")]
    # the ids its pool entries and ENIs carry as their subnet
    assert answer.details["cloudSubnets"] == ["vsw-k1", "vsw-k2", "vsw-j1"]
    assert sim.calls["DescribeVSwitches"] == 1  # one read, every page of it
    assert sim.calls["CreateNetworkInterface"] == 0


@pytest.mark.parametrize(("params", "field", "words"), [
    ({"vSwitchIds": {K: ["vsw-nope"]}}, f"spec.parameters.vSwitchIds.{K}[0]", "does not exist"),
    ({"vSwitchIds": {J: ["vsw-k1"]}}, f"spec.parameters.vSwitchIds.{J}[0]", f"in zone {K}"),
    ({"vSwitchIds": {K: ["vsw-k1", "vsw-far"]}}, f"spec.parameters.vSwitchIds.{K}[1]",
     "10.99.0.0/24 is not inside cidrBlock 10.40.0.0/16"),
])
def test_a_vswitch_the_cloud_disagrees_with_is_refused_naming_its_place(
        plugin, sim, params, field, words) -> None:
    with pytest.raises(InvalidRequest) as info:
        plugin.podnet_subnet_parameters("ecs", subnet(params))
    assert info.value.field == field
    assert words in str(info.value) and "Subnet blue" in str(info.value)


@pytest.mark.parametrize("code", ["InternalError", "ServiceUnavailable", "Throttling"])
def test_a_cloud_that_cannot_answer_is_transient_not_a_refusal(plugin, sim, code) -> None:
    sim.fail_next("DescribeVSwitches", code)
    with pytest.raises(ProviderError) as info:
        plugin.podnet_subnet_parameters("ecs", subnet({"vSwitchIds": {K: ["vsw-k1"]}}))
    assert not isinstance(info.value, InvalidRequest)
    assert info.value.kind in (ErrorKind.TRANSIENT, ErrorKind.THROTTLED)
    # and the next try reads it
    assert plugin.podnet_subnet_parameters("ecs", subnet({"vSwitchIds": {K: ["vsw-k1"]}}))


def test_a_vswitch_beyond_the_first_page_is_found(sim, plugin) -> None:
    for i in range(120):
        sim.add_vswitch(f"vsw-p{i:03d}", f"10.41.{i}.0/24", zone=K)
    answer = plugin.podnet_subnet_parameters(
        "ecs", subnet({"vSwitchIds": {K: ["vsw-p119"]}}, "10.41.0.0/16"))
    assert answer is not None and answer.details["vSwitches"][0]["cidr"] == "10.41.119.0/24"
    assert sim.calls["DescribeVSwitches"] == 3  # 125 vSwitches, 50 a page


def test_a_configured_vswitch_beyond_the_first_page_gets_enis(sim) -> None:
    for i in range(60):
        sim.add_vswitch(f"vsw-p{i:03d}", f"10.41.{i}.0/24", zone=K)
    p = EcsProvider()
    p.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-p059"]))
    try:
        made = p.podnet_interface_create("ecs", node("i-k"), None, 2)
    finally:
        p.close()
    assert made is not None and made.subnet == "vsw-p059"


def test_new_enis_go_into_the_node_subnets_vswitches_of_its_zone(plugin, sim) -> None:
    blue = subnet({"vSwitchIds": {K: ["vsw-k2"], J: ["vsw-j1"]}})
    plugin.podnet_networks_changed("ecs", Networks(subnets=(blue,), revision=1))
    assert plugin.networks.subnet("blue") == blue
    k = plugin.podnet_interface_create("ecs", NodeContext(
        node=node("i-k").node, subnets=(blue,)), None, 2)
    j = plugin.podnet_interface_create("ecs", NodeContext(
        node=node("i-j").node, subnets=(blue,)), None, 2)
    assert k is not None and j is not None
    assert (k.subnet, j.subnet) == ("vsw-k2", "vsw-j1")  # the zone from the instance's ENIs
    assert all(ip.startswith("10.40.2.") for ip in k.ips)
    # the zone label wins over the ENIs' zone
    labelled = NodeContext(node=node("i-j", **{"topology.kubernetes.io/zone": K}).node,
                           subnets=(blue,))
    assert plugin.node_vswitches(labelled) == ["vsw-k2"]
    # no Subnet given: the configured vSwitches, as before
    plain = plugin.podnet_interface_create("ecs", node("i-k"), None, 1)
    assert plain is not None and plain.subnet == "vsw-conf"


def test_a_node_whose_zone_has_no_vswitch_in_its_subnets_gets_no_eni(plugin, sim) -> None:
    blue = subnet({"vSwitchIds": {K: ["vsw-k1"]}})
    with pytest.raises(ProviderError) as info:
        plugin.podnet_interface_create("ecs", NodeContext(node=node("i-j").node,
                                                          subnets=(blue,)), None, 2)
    assert J in str(info.value) and "Subnet blue" in str(info.value)
    assert sim.calls["CreateNetworkInterface"] == 0


def test_the_address_space_and_allocation_know_the_subnets_vswitches(plugin, sim) -> None:
    blue = subnet({"vSwitchIds": {K: ["vsw-k1"]}})
    answer = plugin.podnet_subnet_parameters("ecs", blue)
    assert answer is not None
    realized = SubnetInfo(name="blue", provider="ecs", cidrs=blue.cidrs,
                          parameters=blue.parameters, realized=answer.details)
    plugin.podnet_networks_changed("ecs", Networks(subnets=(realized,)))
    space = plugin.podnet_address_space("ecs", NodeContext(node=node("i-k").node,
                                                           subnets=(realized,)))
    assert space is not None
    assert [(s.id, s.cidr, s.gateway) for s in space.subnets] == [
        ("vsw-k1", "10.40.1.0/24", "10.40.1.1")]


def test_the_configured_vswitches_become_one_subnet_per_zone(sim) -> None:
    p = EcsProvider()
    p.podnet_configure("ecs", provider_config(
        sim, vswitches=["vsw-k1", "vsw-k2", "vsw-j1", "vsw-gone"]))
    try:
        nets = p.podnet_config_networks("ecs")
    finally:
        p.close()
    assert nets is not None
    by_name = {s.name: s for s in nets.subnets}
    assert sorted(by_name) == [f"ecs-{J}", f"ecs-{K}"]
    k, j = by_name[f"ecs-{K}"], by_name[f"ecs-{J}"]
    assert k.cidrs == ("10.40.0.0/22",) and j.cidrs == ("10.40.9.0/24",)
    assert k.parameters == {"vSwitchIds": {K: ["vsw-k1", "vsw-k2"]}}
    assert k.default and j.default
    assert k.node_selector is not None
    assert k.node_selector.matches({"topology.kubernetes.io/zone": K})
    assert not k.node_selector.matches({"topology.kubernetes.io/zone": J})
    # each is what its own parameters hook accepts
    p2 = EcsProvider()
    p2.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-conf"]))
    try:
        for s in nets.subnets:
            assert p2.podnet_subnet_parameters("ecs", s) is not None
    finally:
        p2.close()


def test_one_zone_is_one_subnet_for_every_node_and_overlapping_zones_share_one(sim) -> None:
    sim.add_vswitch("vsw-j2", "10.40.3.0/24", zone=J)
    p = EcsProvider()
    try:
        p.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-conf"]))
        nets = p.podnet_config_networks("ecs")
        assert nets is not None
        [only] = nets.subnets
        assert only.node_selector is None and only.cidrs == ("10.0.0.0/16",)
        # k's 10.40.0.0/22 holds j's 10.40.3.0/24: one Subnet lists both zones
        p.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-k1", "vsw-k2",
                                                                 "vsw-j2"]))
        nets = p.podnet_config_networks("ecs")
        assert nets is not None
        [both] = nets.subnets
        assert both.parameters == {"vSwitchIds": {K: ["vsw-k1", "vsw-k2"], J: ["vsw-j2"]}}
        assert both.node_selector is None and both.cidrs == ("10.40.0.0/22",)
    finally:
        p.close()


# --- the simulator's DescribeVSwitches, through the SDK ---------------------------------


@pytest.fixture
def client(sim: EcsSimulator) -> Client:
    return Client(open_api_models.Config(access_key_id="k", access_key_secret="s",
                                         region_id=REGION, endpoint=sim.endpoint,
                                         protocol="http"))


def test_describe_vswitches_pages_and_filters_as_ecs_does(client, sim) -> None:
    body = client.describe_vswitches(m.DescribeVSwitchesRequest(region_id=REGION)).body
    assert body.total_count == 5 and body.page_size == 10 and body.page_number == 1
    ids = [v.v_switch_id for v in body.v_switches.v_switch]
    assert ids == sorted(ids)
    page2 = client.describe_vswitches(m.DescribeVSwitchesRequest(
        region_id=REGION, page_size=2, page_number=2)).body
    assert [v.v_switch_id for v in page2.v_switches.v_switch] == ids[2:4]
    zone_j = client.describe_vswitches(m.DescribeVSwitchesRequest(
        region_id=REGION, zone_id=J)).body
    assert [(v.v_switch_id, v.zone_id, v.cidr_block) for v in zone_j.v_switches.v_switch] \
        == [("vsw-j1", J, "10.40.9.0/24")]
    none = client.describe_vswitches(m.DescribeVSwitchesRequest(
        region_id=REGION, v_switch_id="vsw-nope")).body
    assert none.total_count == 0 and none.v_switches.v_switch == []


@pytest.mark.parametrize(("request_kw", "code"), [
    ({"page_size": 51}, "InvalidParameter"),
    ({"page_size": 0}, "InvalidParameter"),
    ({"page_number": 0}, "InvalidParameter"),
    ({"region_id": None}, "MissingParameter"),
])
def test_describe_vswitches_refuses_what_ecs_refuses(client, request_kw, code) -> None:
    from Tea.exceptions import TeaException

    kw = {"region_id": REGION, **request_kw}
    with pytest.raises(TeaException) as info:
        client.describe_vswitches(m.DescribeVSwitchesRequest(**kw))
    assert info.value.code == code


def test_a_config_without_vswitches_serves_nodes_through_their_subnets_only(sim) -> None:
    """Since Subnet objects name the vSwitches, the config's ``vswitches`` may be empty
    (before: refused at start); a node no Subnet takes then gets no ENI, the message
    naming the key."""
    p = EcsProvider()
    p.podnet_configure("ecs", provider_config(sim, vswitches=[]))
    try:
        with pytest.raises(ProviderError) as info:
            p.podnet_interface_create("ecs", node("i-k"), None, 2)
        assert info.value.field == "providers.ecs.vswitches" and "no Subnet" in str(info.value)
        assert sim.calls["CreateNetworkInterface"] == 0
        blue = subnet({"vSwitchIds": {K: ["vsw-k1"]}})
        made = p.podnet_interface_create("ecs", NodeContext(node=node("i-k").node,
                                                            subnets=(blue,)), None, 2)
        assert made is not None and made.subnet == "vsw-k1"
        assert p.podnet_config_networks("ecs") is None  # nothing to migrate
    finally:
        p.close()


def test_a_pool_entry_outside_the_pod_networks_subnet_is_handed_back_to_wait(plugin,
                                                                              sim) -> None:
    from podnet.hookspecs.models import ObjectMeta, PodNetwork, PodNetworkSpec
    from podnet.hookspecs.types import AllocateContext, PoolEntry, ResolvedRequest

    blue = subnet({"vSwitchIds": {K: ["vsw-k2"], J: ["vsw-j1"]}})
    n = NodeContext(node=node("i-k").node, subnets=(blue,))
    pn = PodNetwork(metadata=ObjectMeta(name="web-default", namespace="default"),
                    spec=PodNetworkSpec(pod_name="web", pod_uid="u", node_name="n-i-k",
                                        provider="ecs"))
    outside = PoolEntry("10.0.0.9", "eni-x", "vsw-conf")
    with pytest.raises(ProviderError) as info:
        plugin.podnet_allocate(AllocateContext(pod_network=pn, node=n, subnet=blue,
                                               request=ResolvedRequest(entry=outside)))
    # it waits for an address of the Subnet's vSwitch in the node's zone
    assert info.value.kind is ErrorKind.POOL_EMPTY and info.value.subject == "vsw-k2"
    with pytest.raises(InvalidRequest):
        plugin.podnet_allocate(AllocateContext(
            pod_network=pn, node=n, subnet=blue,
            request=ResolvedRequest(address="10.0.0.9", field="metadata.annotations[x]")))
    # inside the block but excluded, or its gateway: refused too
    fenced = SubnetInfo(name="blue", provider="ecs", cidrs=blue.cidrs, gateways=("10.40.0.1",),
                        excluded=("10.40.2.5..10.40.2.9",), parameters=blue.parameters)
    for address in ("10.40.2.7", "10.40.0.1"):
        with pytest.raises(InvalidRequest, match="excluded from Subnet blue") as info:
            plugin.podnet_allocate(AllocateContext(
                pod_network=pn, node=n, subnet=fenced,
                request=ResolvedRequest(address=address, field="metadata.annotations[x]")))
        assert info.value.field == "metadata.annotations[x]"
    assert sim.calls["AssignPrivateIpAddresses"] == 0


def test_a_subnet_object_named_for_a_new_eni_stands_for_its_vswitches(plugin, sim) -> None:
    blue = subnet({"vSwitchIds": {K: ["vsw-k2"], J: ["vsw-j1"]}})
    made = plugin.podnet_interface_create("ecs", NodeContext(node=node("i-k").node,
                                                             subnets=(blue,)), "blue", 1)
    assert made is not None and made.subnet == "vsw-k2"
    # a vSwitch named: that one, as before
    made = plugin.podnet_interface_create("ecs", NodeContext(node=node("i-k").node,
                                                             subnets=(blue,)), "vsw-k1", 1)
    assert made is not None and made.subnet == "vsw-k1"
