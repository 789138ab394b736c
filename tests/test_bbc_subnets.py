"""Subnet objects on BBC, through bce-python-sdk against the simulator: the VPC subnets a
Subnet names are read back (CIDR, zone) and refused when they disagree; the Ready set is
kept; a node's pool grows in its Subnets' subnets; the config's subnets become Subnets
(the migration); the simulator's subnet list pages and filters."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceHttpClientError
from baidubce.retry.retry_policy import NoRetryPolicy
from baidubce.services.subnet.subnet_client import SubnetClient

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import NodeInfo, NodeNetwork, NodeNetworkSpec, ObjectMeta
from podnet.hookspecs.networks import Networks, SubnetInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.bbc.demo import provider_for
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.sim import API_ADD_CROSS, API_SUBNET, BbcSimulator

A, B = "cn-bj-a", "cn-bj-b"


@pytest.fixture
def sim() -> Iterator[BbcSimulator]:
    s = BbcSimulator()
    s.add_subnet("sbn-primary", "10.64.0.0/24", zone=A)
    s.add_subnet("sbn-a1", "10.70.1.0/24", zone=A)
    s.add_subnet("sbn-a2", "10.70.2.0/24", zone=A)
    s.add_subnet("sbn-b1", "10.70.9.0/24", zone=B)
    s.add_subnet("sbn-far", "10.99.0.0/24", zone=A)
    s.add_instance("i-1", "sbn-primary")
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def plugin(sim: BbcSimulator) -> BbcProvider:
    return provider_for(sim, subnets=["sbn-primary"])


def subnet(params: Any, cidr: str = "10.70.0.0/16", name: str = "blue") -> SubnetInfo:
    return SubnetInfo(name=name, provider="bbc", cidrs=(cidr,), parameters=params)


def node(*subnets: SubnetInfo, spec_subnets: tuple[str, ...] = ()) -> NodeContext:
    info = NodeInfo(name="n1", uid="u1", provider_id="cce://i-1")
    record = NodeNetwork(metadata=ObjectMeta(name="n1"),
                         spec=NodeNetworkSpec(provider="bbc",
                                              subnets=spec_subnets))
    return NodeContext(node=info, network=record, subnets=subnets)


def test_parameters_are_read_back_with_each_subnet_cidr_and_zone(plugin, sim) -> None:
    answer = plugin.podnet_subnet_parameters("bbc", subnet({"subnetIds": ["sbn-a1", "sbn-b1"]}))
    assert answer is not None and answer.summary == "2 subnets"
    assert [(s["id"], s["cidr"], s["zone"]) for s in answer.details["subnets"]] == [
        ("sbn-a1", "10.70.1.0/24", A), ("sbn-b1", "10.70.9.0/24", B)]
    assert answer.details["subnets"][0]["availableIPs"] == 253
    assert answer.details["cloudSubnets"] == ["sbn-a1", "sbn-b1"]
    assert sim.calls[API_SUBNET] == 2


@pytest.mark.parametrize(("ids", "field", "words"), [
    (["sbn-a1", "sbn-nope"], "spec.parameters.subnetIds[1]", "sbn-nope does not exist"),
    (["sbn-far"], "spec.parameters.subnetIds[0]",
     "10.99.0.0/24 is not inside cidrBlock 10.70.0.0/16"),
])
def test_a_subnet_the_cloud_disagrees_with_is_refused_naming_its_place(
        plugin, ids, field, words) -> None:
    with pytest.raises(InvalidRequest) as info:
        plugin.podnet_subnet_parameters("bbc", subnet({"subnetIds": ids}))
    assert info.value.field == field
    assert words in str(info.value) and "Subnet blue" in str(info.value)


@pytest.mark.parametrize(("status", "code", "kind"), [
    (500, "InternalError", ErrorKind.TRANSIENT),
    (503, "ServiceUnavailable", ErrorKind.TRANSIENT),
    (429, "RateLimit", ErrorKind.THROTTLED),
])
def test_a_cloud_that_cannot_answer_is_transient_not_a_refusal(plugin, sim, status, code,
                                                               kind) -> None:
    sim.script(API_SUBNET, code, status)
    with pytest.raises(ProviderError) as info:
        plugin.podnet_subnet_parameters("bbc", subnet({"subnetIds": ["sbn-a1"]}))
    assert not isinstance(info.value, InvalidRequest)
    assert info.value.kind is kind
    assert plugin.podnet_subnet_parameters("bbc", subnet({"subnetIds": ["sbn-a1"]}))


def test_the_pool_grows_in_the_node_subnets_subnets(plugin, sim) -> None:
    blue = subnet({"subnetIds": ["sbn-a2"]})
    plugin.podnet_networks_changed("bbc", Networks(subnets=(blue,), revision=1))
    assert plugin.networks.subnets == (blue,)
    inv = plugin.podnet_node_inventory("bbc", node(blue))
    assert inv is not None
    # the Subnets' subnets win over the record's spec.subnets and the config's
    got = plugin.podnet_pool_grow("bbc", node(blue, spec_subnets=("sbn-a1",)),
                                  inv.interfaces[0], 3, None)
    assert got is not None and {e.subnet for e in got} == {"sbn-a2"}
    assert all(e.address.startswith("10.70.2.") for e in got)
    assert sim.calls[API_ADD_CROSS] == 1
    space = plugin.podnet_address_space("bbc", node(blue))
    assert space is not None
    assert [(s.id, s.cidr) for s in space.subnets] == [
        ("sbn-primary", "10.64.0.0/24"), ("sbn-a2", "10.70.2.0/24")]
    # no Subnet handed: as before (the record's spec.subnets, then the config's)
    got = plugin.podnet_pool_grow("bbc", node(spec_subnets=("sbn-a1",)),
                                  inv.interfaces[0], 1, None)
    assert got is not None and {e.subnet for e in got} == {"sbn-a1"}


def test_a_node_in_a_zone_grows_in_its_subnets_of_that_zone(plugin) -> None:
    both = subnet({"subnetIds": ["sbn-a1", "sbn-b1"]})
    answer = plugin.podnet_subnet_parameters("bbc", both)
    assert answer is not None
    realized = SubnetInfo(name="blue", provider="bbc", cidrs=both.cidrs,
                          parameters=both.parameters, realized=answer.details)

    def in_zone(zone: str | None, s: SubnetInfo) -> NodeContext:
        labels = {"topology.kubernetes.io/zone": zone} if zone else {}
        return NodeContext(node=NodeInfo(name="n1", uid="u1", provider_id="cce://i-1",
                                         labels=labels), subnets=(s,))

    assert plugin.candidates(in_zone(B, realized)) == ("sbn-b1",)
    assert plugin.candidates(in_zone(A, realized)) == ("sbn-a1",)
    assert plugin.candidates(in_zone(None, realized)) == ("sbn-a1", "sbn-b1")
    with pytest.raises(ProviderError) as info:
        plugin.candidates(in_zone("cn-bj-z", realized))
    assert "cn-bj-z" in str(info.value) and "Subnet blue" in str(info.value)


def test_the_configured_subnets_become_one_subnet_per_zone(sim) -> None:
    p = provider_for(sim, subnets=["sbn-a1", "sbn-a2", "sbn-b1", "sbn-gone"])
    nets = p.podnet_config_networks("bbc")
    assert nets is not None
    by_name = {s.name: s for s in nets.subnets}
    assert sorted(by_name) == [f"bbc-{A}", f"bbc-{B}"]
    a, b = by_name[f"bbc-{A}"], by_name[f"bbc-{B}"]
    assert a.cidrs == ("10.70.0.0/22",) and a.parameters == {"subnetIds": ["sbn-a1", "sbn-a2"]}
    assert b.cidrs == ("10.70.9.0/24",) and a.default and b.default
    assert a.node_selector is not None
    assert a.node_selector.matches({"topology.kubernetes.io/zone": A})
    assert not a.node_selector.matches({"topology.kubernetes.io/zone": B})
    for s in nets.subnets:  # each is what the parameters hook accepts
        assert p.podnet_subnet_parameters("bbc", s) is not None
    assert provider_for(sim).podnet_config_networks("bbc") is None  # no subnets: none


def test_one_zone_makes_one_subnet_for_every_node(sim) -> None:
    nets = provider_for(sim, subnets=["sbn-primary"]).podnet_config_networks("bbc")
    assert nets is not None
    [only] = nets.subnets
    assert only.node_selector is None and only.cidrs == ("10.64.0.0/24",)
    assert only.gateways == ("10.64.0.1",)


# --- the simulator's subnet list, through the SDK ---------------------------------------


@pytest.fixture
def vpc(sim: BbcSimulator) -> SubnetClient:
    return SubnetClient(BceClientConfiguration(credentials=BceCredentials("ak", "sk"),
                                               endpoint=sim.endpoint,
                                               retry_policy=NoRetryPolicy()))


def test_list_subnets_pages_and_filters_as_bce_does(vpc) -> None:
    first = vpc.list_subnets(max_keys=2)
    assert [s.subnet_id for s in first.subnets] == ["sbn-a1", "sbn-a2"]
    assert first.is_truncated and first.next_marker == "sbn-b1"
    rest = vpc.list_subnets(marker=first.next_marker, max_keys=10)
    assert [s.subnet_id for s in rest.subnets] == ["sbn-b1", "sbn-far", "sbn-primary"]
    assert not rest.is_truncated
    in_b = vpc.list_subnets(zone_name=B)
    assert [(s.subnet_id, s.zone_name) for s in in_b.subnets] == [("sbn-b1", B)]
    one = vpc.get_subnet("sbn-a1")
    assert (one.subnet.cidr, one.subnet.zone_name) == ("10.70.1.0/24", A)


@pytest.mark.parametrize("kw", [{"max_keys": 0}, {"max_keys": 1001}, {"marker": "sbn-nope"}])
def test_list_subnets_refuses_a_bad_page(vpc, kw) -> None:
    with pytest.raises(BceHttpClientError) as info:
        vpc.list_subnets(**kw)
    assert info.value.last_error.status_code == 400


def test_get_subnet_of_an_unknown_id_is_no_such_object(vpc) -> None:
    with pytest.raises(BceHttpClientError) as info:
        vpc.get_subnet("sbn-nope")
    assert info.value.last_error.code == "NoSuchObject"
    assert info.value.last_error.status_code == 404


def test_a_pool_entry_outside_the_pod_networks_subnet_is_handed_back_to_wait(plugin,
                                                                              sim) -> None:
    from podnet.hookspecs.models import PodNetwork, PodNetworkSpec
    from podnet.hookspecs.types import AllocateContext, PoolEntry, ResolvedRequest

    blue = subnet({"subnetIds": ["sbn-a2"]})
    pn = PodNetwork(metadata=ObjectMeta(name="web-default", namespace="default"),
                    spec=PodNetworkSpec(pod_name="web", pod_uid="u", node_name="n1",
                                        provider="bbc"))
    outside = PoolEntry("10.64.0.9", "eni-x", "sbn-primary")
    with pytest.raises(ProviderError) as info:
        plugin.podnet_allocate(AllocateContext(pod_network=pn, node=node(blue), subnet=blue,
                                               request=ResolvedRequest(entry=outside)))
    assert info.value.kind is ErrorKind.POOL_EMPTY and info.value.subject == "sbn-a2"
    with pytest.raises(InvalidRequest):
        plugin.podnet_allocate(AllocateContext(
            pod_network=pn, node=node(blue), subnet=blue,
            request=ResolvedRequest(address="10.64.0.9", field="metadata.annotations[x]")))
    fenced = SubnetInfo(name="blue", provider="bbc", cidrs=blue.cidrs, gateways=("10.70.0.1",),
                        excluded=("10.70.2.5..10.70.2.9",), parameters=blue.parameters)
    for address in ("10.70.2.7", "10.70.0.1"):
        with pytest.raises(InvalidRequest, match="excluded from Subnet blue"):
            plugin.podnet_allocate(AllocateContext(
                pod_network=pn, node=node(fenced), subnet=fenced,
                request=ResolvedRequest(address=address, field="metadata.annotations[x]")))
    assert sim.calls["batchAddIp"] == 0


def test_a_subnet_object_named_for_growth_stands_for_its_subnets(plugin, sim) -> None:
    blue = subnet({"subnetIds": ["sbn-a2"]})
    inv = plugin.podnet_node_inventory("bbc", node(blue))
    assert inv is not None
    got = plugin.podnet_pool_grow("bbc", node(blue), inv.interfaces[0], 2, "blue")
    assert got is not None and {e.subnet for e in got} == {"sbn-a2"}
    got = plugin.podnet_pool_grow("bbc", node(blue), inv.interfaces[0], 1, "sbn-a1")
    assert got is not None and {e.subnet for e in got} == {"sbn-a1"}
