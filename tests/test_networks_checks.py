"""Core's own checks of Subnet, IPPool and SecurityGroup objects, without a cluster: each
malformed field is refused naming the object's field (what the CRD's CEL rules may not
have refused: an object stored before a rule existed, or by an API server that does not
run them), across objects the later of two is refused naming the other, and a pod
network's Subnet and pool are chosen by the plan's order."""

from __future__ import annotations

import ipaddress
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from podnet.core.models import ObjectMeta, PodNetwork, PodNetworkSpec, PodNetworkStatus
from podnet.core.networks.catalog import Parameters, evaluate
from podnet.core.networks.checks import Declared, declared, overlaps
from podnet.core.networks.select import choose
from podnet.core.networks.usage import Usage
from podnet.hookspecs.networks import (
    NETWORK_FINALIZER,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SubnetInfo,
)

API = "podnet.io/v1alpha1"


def subnet(name: str = "blue", created: str = "2026-01-01T00:00:00Z", **spec: Any
           ) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Subnet",
            "metadata": {"name": name, "uid": f"u-{name}", "generation": 1,
                         "creationTimestamp": created, "finalizers": [NETWORK_FINALIZER]},
            "spec": {"provider": "p", "cidrBlock": "10.0.0.0/24", **spec}}


def pool(name: str = "db", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "IPPool",
            "metadata": {"name": name, "uid": f"u-{name}", "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z",
                         "finalizers": [NETWORK_FINALIZER]},
            "spec": {"subnet": "blue", "addresses": ["10.0.0.10"], **spec}}


def group(name: str = "web", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "SecurityGroup", "metadata": {"name": name},
            "spec": spec}


BAD_SUBNETS: list[tuple[dict[str, Any], str]] = [
    ({"cidrBlock": "10.0.0.1/24"}, "spec.cidrBlock"),
    ({"cidrBlock": "10.0.0.0/33"}, "spec.cidrBlock"),
    ({"cidrBlock": "banana"}, "spec.cidrBlock"),
    ({"cidrBlock": ""}, "spec.cidrBlock"),
    ({"cidrBlock": "10.0.0.0/24,10.1.0.0/24"}, "spec.cidrBlock"),
    ({"cidrBlock": "10.0.0.0/24,fd00::/64,fd01::/64"}, "spec.cidrBlock"),
    ({"cidrBlock": "fd00::1/64"}, "spec.cidrBlock"),
    ({"cidrBlock": 10}, "spec.cidrBlock"),
    ({"provider": ""}, "spec.provider"),
    ({"provider": None}, "spec.provider"),
    ({"gateway": "10.1.0.1"}, "spec.gateway"),
    ({"gateway": "nope"}, "spec.gateway"),
    ({"gateway": "10.0.0.0"}, "spec.gateway"),
    ({"gateway": "10.0.0.255"}, "spec.gateway"),
    ({"gateway": "10.0.0.1,10.0.0.2"}, "spec.gateway"),
    ({"gateway": "fd00::1"}, "spec.gateway"),
    ({"gateway": 1}, "spec.gateway"),
    ({"excludeIPs": ["10.0.0.9..10.0.0.2"]}, "spec.excludeIPs[0]"),
    ({"excludeIPs": ["10.0.0.2", "10.1.0.2"]}, "spec.excludeIPs[1]"),
    ({"excludeIPs": ["10.0.0.0/16"]}, "spec.excludeIPs[0]"),
    ({"excludeIPs": ["10.0.0.2..fd00::1"]}, "spec.excludeIPs[0]"),
    ({"excludeIPs": ["x"]}, "spec.excludeIPs[0]"),
    ({"excludeIPs": "10.0.0.2"}, "spec.excludeIPs"),
    ({"excludeIPs": [3]}, "spec.excludeIPs[0]"),
    ({"namespaces": [""]}, "spec.namespaces[0]"),
    ({"namespaces": "team-a"}, "spec.namespaces"),
    ({"namespaceSelector": {"matchLabels": {"a": 1}}},
     "spec.namespaceSelector.matchLabels[a]"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Has"}]}},
     "spec.namespaceSelector.matchExpressions[0].operator"),
    ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}},
     "spec.namespaceSelector.matchExpressions[0].values"),
    ({"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Exists",
                                             "values": ["x"]}]}},
     "spec.nodeSelector.matchExpressions[0].values"),
    ({"nodeSelector": {"matchExpressions": [{"operator": "Exists"}]}},
     "spec.nodeSelector.matchExpressions[0].key"),
    ({"nodeSelector": {"labels": {}}}, "spec.nodeSelector.labels"),
    ({"default": "yes"}, "spec.default"),
    ({"parameters": []}, "spec.parameters"),
    ({"cidr": "10.0.0.0/24"}, "spec.cidr"),
]


@pytest.mark.parametrize(("spec", "field"), BAD_SUBNETS)
def test_a_malformed_subnet_is_refused_naming_its_field(spec: dict[str, Any], field: str) -> None:
    d = declared("Subnet", subnet(**spec))
    assert d.info is None and d.problem is not None
    assert d.problem.field == field, d.problem
    assert d.problem.message.startswith(field)


def test_a_gateway_outside_the_block_has_its_own_reason() -> None:
    d = declared("Subnet", subnet(gateway="10.9.0.1"))
    assert d.problem is not None and d.problem.reason == "GatewayOutside"


BAD_POOLS: list[tuple[dict[str, Any], str]] = [
    ({"addresses": []}, "spec.addresses"),
    ({"addresses": "10.0.0.1"}, "spec.addresses"),
    ({"addresses": ["x"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1", "10.0.0.9..10.0.0.1"]}, "spec.addresses[1]"),
    ({"addresses": ["10.0.0.1/24"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1..fd00::2"]}, "spec.addresses[0]"),
    ({"addresses": [None]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.256"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1.."]}, "spec.addresses[0]"),
    ({"addresses": ["..10.0.0.1"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.0/33"]}, "spec.addresses[0]"),
    ({"addresses": [{"ip": "10.0.0.1"}]}, "spec.addresses[0]"),
    ({"subnet": ""}, "spec.subnet"),
    ({"subnet": None}, "spec.subnet"),
    ({"subnet": 3}, "spec.subnet"),
    ({"subnet": ["blue"]}, "spec.subnet"),
    ({"namespaces": [""]}, "spec.namespaces[0]"),
    ({"namespaces": "a"}, "spec.namespaces"),
    ({"namespaces": [1]}, "spec.namespaces[0]"),
    ({"namespace": ["a"]}, "spec.namespace"),
    ({"addresses": ["10.0.0.1"], "cidr": "x"}, "spec.cidr"),
    ({"addresses": ["10.0.0.1, 10.0.0.2"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1-10.0.0.2"]}, "spec.addresses[0]"),
    ({"addresses": ["fd00::/129"]}, "spec.addresses[0]"),
    ({"addresses": ["fd00::1/64"]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1", ""]}, "spec.addresses[1]"),
    ({"addresses": [True]}, "spec.addresses[0]"),
    ({"addresses": [1.5]}, "spec.addresses[0]"),
    ({"addresses": ["10.0.0.1/"]}, "spec.addresses[0]"),
    ({"addresses": ["::ffff:10.0.0.1..10.0.0.1"]}, "spec.addresses[0]"),
]


@pytest.mark.parametrize(("spec", "field"), BAD_POOLS)
def test_a_malformed_pool_is_refused_naming_its_field(spec: dict[str, Any], field: str) -> None:
    d = declared("IPPool", pool(**spec))
    assert d.info is None and d.problem is not None
    assert d.problem.field == field, d.problem


BAD_GROUPS: list[tuple[dict[str, Any], str]] = [
    ({"ingress": [{"protocol": "sctp"}]}, "spec.ingress[0].protocol"),
    ({"ingress": [{"protocol": "tcp", "port": "0"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "tcp", "port": "65536"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "tcp", "port": "90-80"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "tcp", "port": "http"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "icmp", "port": "80"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "all", "port": "80"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"port": "80"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "tcp", "port": 80}]}, "spec.ingress[0].port"),
    ({"ingress": [{"protocol": "tcp", "port": "1-2-3"}]}, "spec.ingress[0].port"),
    ({"ingress": [{"from": ["10.0.0.0/33"]}]}, "spec.ingress[0].from[0]"),
    ({"ingress": [{"from": ["x"]}]}, "spec.ingress[0].from[0]"),
    ({"ingress": [{"from": "10.0.0.0/8"}]}, "spec.ingress[0].from"),
    ({"ingress": [{"to": ["10.0.0.0/8"]}]}, "spec.ingress[0].to"),
    ({"ingress": [{"groups": [""]}]}, "spec.ingress[0].groups[0]"),
    ({"ingress": [{"groups": "web"}]}, "spec.ingress[0].groups"),
    ({"ingress": {"protocol": "tcp"}}, "spec.ingress"),
    ({"ingress": [{}, {"protocol": "udp", "port": "-1"}]}, "spec.ingress[1].port"),
    ({"egress": [{"protocol": "sctp"}]}, "spec.egress[0].protocol"),
    ({"egress": [{"from": ["10.0.0.0/8"]}]}, "spec.egress[0].from"),
    ({"egress": [{"to": ["nope"]}]}, "spec.egress[0].to[0]"),
    ({"egress": [{"protocol": "udp", "port": "70000"}]}, "spec.egress[0].port"),
    ({"egress": [{"protocol": "udp", "port": "53-"}]}, "spec.egress[0].port"),
    ({"egress": [{"groups": [1]}]}, "spec.egress[0].groups[0]"),
    ({"egress": [{"protocol": "icmp", "port": "1-2"}]}, "spec.egress[0].port"),
    ({"egress": "all"}, "spec.egress"),
    ({"egress": [None]}, "spec.egress[0]"),
    ({"rules": []}, "spec.rules"),
    ({"ingress": [{"protocol": "TCP"}]}, "spec.ingress[0].protocol"),
    ({"ingress": [{"protocol": "tcp", "ports": "80"}]}, "spec.ingress[0].ports"),
]


@pytest.mark.parametrize(("spec", "field"), BAD_GROUPS)
def test_a_malformed_group_is_refused_naming_its_field(spec: dict[str, Any], field: str) -> None:
    d = declared("SecurityGroup", group(**spec))
    assert d.info is None and d.problem is not None
    assert d.problem.field == field, d.problem


def test_a_direction_left_out_is_not_restricted_and_an_empty_one_allows_nothing() -> None:
    d = declared("SecurityGroup", group(ingress=[{"protocol": "tcp", "port": "80"}]))
    assert isinstance(d.info, SecurityGroupInfo)
    assert d.info.ingress == (SecurityRule("tcp", (80, 80)),)
    assert d.info.egress == (SecurityRule(),)  # left out: everything allowed that way
    shut = declared("SecurityGroup", group(ingress=[], egress=[]))
    assert isinstance(shut.info, SecurityGroupInfo)
    assert shut.info.ingress == () and shut.info.egress == ()


def test_a_spec_that_reads_gets_its_defaults() -> None:
    d = declared("Subnet", subnet(cidrBlock="10.0.0.0/24,fd00::/64", gateway="10.0.0.254",
                                  excludeIPs=["10.0.0.2..10.0.0.9", "fd00::5"]))
    assert isinstance(d.info, SubnetInfo)
    assert d.info.gateways == ("10.0.0.254", "fd00::1")
    assert d.info.excludes("10.0.0.5") and d.info.excludes("fd00::5")
    assert not d.info.excludes("10.0.0.10")


def _eval(*objs: Declared, params: bool = True) -> Any:
    subnets = [d for d in objs if d.kind == "Subnet"]
    answers = {d.name: Parameters(d.uid, d.generation) for d in subnets} if params else {}
    return evaluate(subnets, [d for d in objs if d.kind == "IPPool"],
                    [d for d in objs if d.kind == "SecurityGroup"], answers, ["p", "q"])


def test_the_later_of_two_overlapping_subnets_names_the_earlier() -> None:
    ev = _eval(declared("Subnet", subnet("b", "2026-01-01T00:00:02Z", cidrBlock="10.0.0.0/25")),
               declared("Subnet", subnet("a", "2026-01-01T00:00:01Z", cidrBlock="10.0.0.0/16")),
               declared("Subnet", subnet("c", "2026-01-01T00:00:03Z", cidrBlock="10.0.0.0/25",
                                         provider="q")))
    assert ev.subnets["a"][1].ready and ev.subnets["c"][1].ready  # another provider's
    verdict = ev.subnets["b"][1]
    assert verdict.reason == "Overlaps" and "Subnet a (10.0.0.0/16)" in verdict.message
    assert [s.name for s in ev.networks("p").subnets] == ["a"]


def test_same_time_subnets_are_ordered_by_name() -> None:
    ev = _eval(declared("Subnet", subnet("y")), declared("Subnet", subnet("x")))
    assert ev.subnets["x"][1].ready and ev.subnets["y"][1].reason == "Overlaps"


def test_a_subnet_waits_for_its_provider_to_check_its_parameters() -> None:
    ev = _eval(declared("Subnet", subnet()), params=False)
    assert ev.subnets["blue"][1].reason == "Pending" and ev.networks("p").subnets == ()


def test_pools_outside_overlapping_or_without_a_subnet() -> None:
    ev = _eval(declared("Subnet", subnet()),
               declared("IPPool", pool("a", addresses=["10.0.0.10..10.0.0.20"])),
               declared("IPPool", pool("b", addresses=["10.0.0.15"])),
               declared("IPPool", pool("c", addresses=["10.0.1.1"])),
               declared("IPPool", pool("d", subnet="gone")))
    assert ev.pools["a"][1].ready
    assert ev.pools["b"][1].reason == "Overlaps" and "IPPool a" in ev.pools["b"][1].message
    assert ev.pools["c"][1].reason == "OutsideSubnet"
    assert ev.pools["d"][1].reason == "SubnetNotFound"
    assert [p.name for p in ev.networks("p").pools] == ["a"]


def _choose(ev: Any, **kw: Any) -> Any:
    args: dict[str, Any] = dict(provider="p", namespace="ns", pod_subnets=(), pod_pool=(),
                                namespace_annotations={}, namespace_labels={}, node="n1",
                                node_labels={})
    args.update(kw)
    return choose(ev, ev.networks("p"), **args)


def test_the_subnet_a_pod_network_takes_follows_the_order() -> None:
    ev = _eval(
        declared("Subnet", subnet("dflt", "2026-01-01T00:00:01Z", cidrBlock="10.1.0.0/24",
                                  default=True)),
        declared("Subnet", subnet("listed", "2026-01-01T00:00:02Z", cidrBlock="10.2.0.0/24",
                                  namespaces=["ns"])),
        declared("Subnet", subnet("named", "2026-01-01T00:00:03Z", cidrBlock="10.3.0.0/24")),
        declared("Subnet", subnet("byns", "2026-01-01T00:00:04Z", cidrBlock="10.4.0.0/24")),
        declared("Subnet", subnet("edge", "2026-01-01T00:00:05Z", cidrBlock="10.5.0.0/24",
                                  namespaceSelector={"matchLabels": {"t": "x"}},
                                  nodeSelector={"matchLabels": {"zone": "edge"}})))
    assert _choose(ev).subnet.name == "listed"
    assert _choose(ev, namespace="other").subnet.name == "dflt"
    assert _choose(ev, pod_subnets=("cloud-id", "named")).subnet.name == "named"
    assert _choose(ev, namespace_annotations={"podnet.io/subnets": "byns"}).subnet.name == "byns"
    assert _choose(ev, namespace="o", namespace_labels={"t": "x"}).subnet.name == "dflt"
    assert _choose(ev, namespace="o", namespace_labels={"t": "x"},
                   node_labels={"zone": "edge"}).subnet.name == "edge"
    # a name that is no Subnet object keeps its meaning: the provider's own subnet id
    assert _choose(ev, pod_subnets=("vsw-123",)).subnet.name == "listed"
    assert _choose(ev, provider="q").subnet is None  # q has no Subnet objects


def test_no_subnet_selecting_is_a_wait_and_a_named_unusable_one_a_refusal() -> None:
    ev = _eval(declared("Subnet", subnet("a", cidrBlock="10.1.0.0/24", namespaces=["x"])),
               declared("Subnet", subnet("bad", cidrBlock="10.1.0.0/25")))
    waited = _choose(ev)
    assert waited.wait is not None and waited.invalid is None
    refused = _choose(ev, pod_subnets=("bad",))
    assert refused.invalid is not None
    assert refused.invalid.field == "metadata.annotations[podnet.io/subnets]"
    assert "Subnet bad is not Ready (Overlaps" in str(refused.invalid)


def test_usage_counts_what_records_hold() -> None:
    info = declared("Subnet", subnet(cidrBlock="10.0.0.0/28",
                                     excludeIPs=["10.0.0.8..10.0.0.9"])).info
    assert isinstance(info, SubnetInfo)
    usage = Usage()
    usage.track("p", [])

    def record(name: str, ip: str) -> PodNetwork:
        return PodNetwork(metadata=ObjectMeta(name=name, namespace="ns"),
                          spec=PodNetworkSpec(pod_name=name, pod_uid="u", node_name="n",
                                              provider="p"),
                          status=PodNetworkStatus(ip=ip))

    for name, ip in (("a", "10.0.0.2"), ("b", "10.0.0.8"), ("c", "10.9.0.1")):
        usage.update(None, record(name, ip))
    use = usage.subnet_usage(info, [info])
    # 16 addresses: network, broadcast, gateway reserved; 2 excluded; a and b held
    assert use.counts[4] == (16 - 3 - 2 - 1, 2, 3, 2)
    assert [o.line for o in use.outside] == ["ns/b 10.0.0.8 excluded"]
    assert [k for k, _ in use.holders] == ["ns/a", "ns/b"]
    assert Networks().subnet("x") is None


@settings(deadline=None)  # a loaded CI machine took 470 ms over one example once
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(9, 16), st.sampled_from("pq")),
                min_size=1, max_size=12))
def test_the_overlap_sweep_finds_what_every_pair_compared_finds(
        blocks: list[tuple[int, int, str]]) -> None:
    subnets = []
    for i, (n, prefix, provider) in enumerate(blocks):
        cidr = str(ipaddress.ip_network(f"10.{n}.0.0/{prefix}", strict=False))
        subnets.append(declared("Subnet", subnet(f"s{i}", f"2026-01-01T00:00:{i:02d}Z",
                                                 cidrBlock=cidr, provider=provider)))
    found = {name: p.message for name, p in overlaps(subnets).items()}
    expected = {}
    for i, d in enumerate(subnets):
        for other in subnets[:i]:
            a, b = d.info, other.info
            assert isinstance(a, SubnetInfo) and isinstance(b, SubnetInfo)
            if a.provider == b.provider and a.networks()[0].overlaps(b.networks()[0]):
                expected[d.name] = f"Subnet {other.name} ("
                break
    assert set(found) == set(expected)
    for name, start in expected.items():
        assert start in found[name]


def test_a_subnet_serves_only_once_its_finalizer_is_on() -> None:
    raw = subnet()
    del raw["metadata"]["finalizers"]
    d = declared("Subnet", raw)
    answers = {"blue": Parameters(d.uid, d.generation)}
    ev = evaluate([d], [], [], answers, ["p"])
    assert ev.subnets["blue"][1].reason == "Pending" and ev.networks("p").subnets == ()
    ev = evaluate([d], [], [], answers, ["p"], finalized={d.uid})
    assert ev.subnets["blue"][1].ready
