"""Reading a NetworkPolicy object (podnet.core.netpol.wire): the API's defaults, and every
unreadable part a finding naming its field that matches nothing."""

from __future__ import annotations

from typing import Any

import pytest

from podnet.core.netpol.wire import (
    EVERYTHING,
    PeerSpec,
    PortSpec,
    RuleSpec,
    Selector,
    parse_cidr,
    read_policy,
)
from podnet.core.objects import pod_info
from podnet.hookspecs.models import NamedPort
from podnet.hookspecs.netpol import FindingReason, Protocol


def policy(spec: dict[str, Any], name: str = "p", namespace: str = "x") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "uid": "u1", "generation": 3},
            "spec": spec}


def fields(spec: dict[str, Any]) -> dict[str, FindingReason]:
    return {f.field: f.reason for f in read_policy(policy(spec)).findings}


def test_identity_and_defaults() -> None:
    got = read_policy(policy({"podSelector": {}}))
    assert (got.key, got.uid, got.generation) == ("x/p", "u1", 3)
    assert got.pod_selector == EVERYTHING
    # policyTypes absent, no egress rules: Ingress only, denying all
    assert got.ingress == () and got.egress is None
    assert got.findings == ()


@pytest.mark.parametrize(("spec", "ingress", "egress"), [
    ({"egress": [{}]}, (), (RuleSpec(),)),
    ({"egress": []}, (), None),
    ({"policyTypes": [], "egress": [{}]}, (), (RuleSpec(),)),
    ({"policyTypes": ["Egress"], "ingress": [{}]}, None, ()),
    ({"policyTypes": ["Ingress", "Egress"]}, (), ()),
])
def test_policy_types_given_or_defaulted(spec: dict[str, Any], ingress: Any, egress: Any) -> None:
    got = read_policy(policy({"podSelector": {}, **spec}))
    assert (got.ingress, got.egress) == (ingress, egress)


def test_empty_from_and_ports_mean_any() -> None:
    got = read_policy(policy({"podSelector": {}, "ingress": [{"from": [], "ports": []}]}))
    assert got.ingress == (RuleSpec(peers=None, ports=None),)


def test_peers_and_ports_read() -> None:
    got = read_policy(policy({
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{
            "from": [
                {"podSelector": {"matchLabels": {"role": "web"}}},
                {"namespaceSelector": {"matchExpressions": [
                    {"key": "team", "operator": "In", "values": ["a", "b"]}]}},
                {"namespaceSelector": {}, "podSelector": {}},
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}},
            ],
            "ports": [{"port": 80}, {"protocol": "UDP", "port": 53, "endPort": 60},
                      {"port": "http"}, {"protocol": "SCTP"}],
        }],
    }))
    assert got.findings == ()
    assert got.pod_selector == Selector((("app", "In", frozenset({"db"})),))
    rule = got.ingress[0]  # type: ignore[index]
    assert rule.peers[0] == PeerSpec(pod_selector=Selector((("role", "In", frozenset({"web"})),)))  # type: ignore[index]
    assert rule.peers[1].namespace_selector.matches({"team": "b"})  # type: ignore[index,union-attr]
    assert not rule.peers[1].namespace_selector.matches({"team": "c"})  # type: ignore[index,union-attr]
    assert rule.peers[2] == PeerSpec(EVERYTHING, EVERYTHING)  # type: ignore[index]
    # the except cut out: the fewest prefixes covering 10/8 minus 10.1/16
    cidrs = rule.peers[3].cidrs  # type: ignore[index]
    assert cidrs is not None and "10.1.0.0/16" not in cidrs and len(cidrs) == 8
    assert "10.0.0.0/16" in cidrs and "10.128.0.0/9" in cidrs
    assert rule.ports == (PortSpec(Protocol.TCP, 80), PortSpec(Protocol.UDP, 53, 60),
                          PortSpec(Protocol.TCP, name="http"), PortSpec(Protocol.SCTP))


@pytest.mark.parametrize(("text", "want"), [
    ("10.0.0.0/8", "10.0.0.0/8"),
    # the API's lenient parser: leading zeros are decimal, host bits are dropped
    ("010.000.0.0/8", "10.0.0.0/8"),
    ("10.0.0.1/24", "10.0.0.0/24"),
    ("fd00::1/64", "fd00::/64"),
    ("10.0.0.0", None),
    ("10.0.0.0/33", None),
    ("256.0.0.0/8", None),
    ("bogus", None),
    (42, None),
])
def test_cidrs_read_as_the_api_server_does(text: Any, want: str | None) -> None:
    got = parse_cidr(text)
    assert (None if got is None else str(got)) == want


def test_host_bits_and_leading_zeros_are_no_finding() -> None:
    got = read_policy(policy({"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "010.0.0.1/8", "except": ["10.0.0.0/9"]}}]}]}))
    assert got.findings == ()
    assert got.ingress[0].peers[0].cidrs == ("10.128.0.0/9",)  # type: ignore[index]


def test_nested_and_several_excepts() -> None:
    got = read_policy(policy({"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "10.0.0.0/24",
                     "except": ["10.0.0.0/26", "10.0.0.0/28", "10.0.0.128/25"]}}]}]}))
    assert got.ingress[0].peers[0].cidrs == ("10.0.0.64/26",)  # type: ignore[index]


@pytest.mark.parametrize(("spec", "field", "reason"), [
    ({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]},
     "spec.ingress[0].from[0].ipBlock.cidr", FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{"podSelector": {}}, {"ipBlock": {"cidr": "nope"}}]}]},
     "spec.ingress[0].from[1].ipBlock.cidr", FindingReason.INVALID_VALUE),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.1.0.0/24"]}}]}]},
     "spec.egress[0].to[0].ipBlock.except[0]", FindingReason.INVALID_VALUE),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/16"]}}]}]},
     "spec.egress[0].to[0].ipBlock.except[0]", FindingReason.INVALID_VALUE),
    ({"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/16", "except": ["fd00::/64"]}}]}]},
     "spec.egress[0].to[0].ipBlock.except[0]", FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{"podSelector": {"matchExpressions": [
        {"key": "a", "operator": "Equals", "values": ["b"]}]}}]}]},
     "spec.ingress[0].from[0].podSelector.matchExpressions[0].operator",
     FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{"namespaceSelector": {"matchExpressions": [
        {"key": "a", "operator": "In"}]}}]}]},
     "spec.ingress[0].from[0].namespaceSelector.matchExpressions[0].values",
     FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"port": "http", "endPort": 90}]}]},
     "spec.ingress[0].ports[0].endPort", FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"port": 90, "endPort": 80}]}]},
     "spec.ingress[0].ports[0].endPort", FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"endPort": 80}]}]},
     "spec.ingress[0].ports[0].endPort", FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"port": 0}]}]},
     "spec.ingress[0].ports[0].port", FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"port": "Not_A_Name"}]}]},
     "spec.ingress[0].ports[0].port", FindingReason.INVALID_VALUE),
    ({"ingress": [{"ports": [{"protocol": "ICMP"}]}]},
     "spec.ingress[0].ports[0].protocol", FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}, "podSelector": {}}]}]},
     "spec.ingress[0].from[0]", FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{}]}]}, "spec.ingress[0].from[0]", FindingReason.INVALID_VALUE),
    ({"ingress": [{"from": [{"serviceSelector": {}}]}]},
     "spec.ingress[0].from[0].serviceSelector", FindingReason.UNSUPPORTED_FIELD),
    ({"ingress": [{"from": [{"podSelector": {}}], "action": "Deny"}]},
     "spec.ingress[0].action", FindingReason.UNSUPPORTED_FIELD),
    ({"ingress": [{"ports": [{"port": 80, "portRange": "1-2"}]}]},
     "spec.ingress[0].ports[0].portRange", FindingReason.UNSUPPORTED_FIELD),
    ({"priority": 10}, "spec.priority", FindingReason.UNSUPPORTED_FIELD),
    ({"policyTypes": ["Ingress", "Sideways"]}, "spec.policyTypes[1]",
     FindingReason.INVALID_VALUE),
])
def test_findings_name_the_field(spec: dict[str, Any], field: str,
                                 reason: FindingReason) -> None:
    assert fields({"podSelector": {}, **spec}) == {field: reason}


def test_a_finding_never_opens_traffic() -> None:
    # the only peer unreadable: the rule allows nothing (not "any peer")
    got = read_policy(policy({"podSelector": {}, "ingress": [
        {"from": [{"ipBlock": {"cidr": "nope"}}]}]}))
    assert got.ingress == (RuleSpec(peers=()),)
    assert got.ingress[0].allows_nothing  # type: ignore[index]
    # the only port unreadable: the rule allows nothing (not "every port")
    got = read_policy(policy({"podSelector": {}, "ingress": [{"ports": [{"port": -1}]}]}))
    assert got.ingress[0].allows_nothing  # type: ignore[index]
    # an unknown field on a rule: the rule allows nothing
    got = read_policy(policy({"podSelector": {}, "ingress": [{"deny": True}]}))
    assert got.ingress[0].allows_nothing  # type: ignore[index]
    # one readable peer of two: that peer is kept
    got = read_policy(policy({"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "nope"}}, {"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}))
    assert got.ingress[0].peers == (PeerSpec(cidrs=("10.0.0.0/8",)),)  # type: ignore[index]
    # the direction stays restricted when its rules are not a list
    got = read_policy(policy({"podSelector": {}, "policyTypes": ["Egress"], "egress": "all"}))
    assert got.egress == () and got.ingress is None
    # an unreadable podSelector selects no pod, with a finding
    got = read_policy(policy({"podSelector": {"matchLabels": {"a": 1}}}))
    assert not got.pod_selector.valid and not got.pod_selector.matches({"a": "1"})
    assert {f.field for f in got.findings} == {"spec.podSelector.matchLabels",
                                               "spec.podSelector"}


@pytest.mark.parametrize("obj", [
    {}, {"spec": None}, {"spec": []}, {"metadata": "x", "spec": {"ingress": [None, 3]}},
    {"spec": {"podSelector": "app=x", "ingress": [{"from": "all", "ports": {"port": 1}}]}},
    {"spec": {"egress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": "10.1.0.0/16"}}]}]}},
    {"spec": {"ingress": [{"from": [{"podSelector": {"matchExpressions": [None]}}]}]}},
])
def test_never_raises(obj: dict[str, Any]) -> None:
    got = read_policy(obj)
    assert got.findings or got.name == ""


def test_selector_semantics() -> None:
    sel = Selector((("a", "In", frozenset({"1"})), ("b", "NotIn", frozenset({"2"})),
                    ("c", "Exists", frozenset()), ("d", "DoesNotExist", frozenset())))
    assert sel.matches({"a": "1", "c": ""})
    assert sel.matches({"a": "1", "b": "3", "c": "x"})
    assert not sel.matches({"a": "1", "b": "2", "c": "x"})
    assert not sel.matches({"a": "1", "c": "x", "d": "y"})
    assert not sel.matches({"a": "2", "c": "x"})
    assert not sel.matches({"a": "1"})


def test_pod_named_ports_include_sidecars_only() -> None:
    pod = pod_info({"metadata": {"name": "p", "namespace": "x"}, "spec": {
        "containers": [{"name": "app", "ports": [
            {"name": "http", "containerPort": 8080},
            {"containerPort": 9090},
            {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}],
        "initContainers": [
            {"name": "proxy", "restartPolicy": "Always",
             "ports": [{"name": "admin", "containerPort": 15000}]},
            {"name": "setup", "ports": [{"name": "once", "containerPort": 1}]}]}})
    assert pod.named_ports == (NamedPort("http", 8080), NamedPort("dns", 53, "UDP"),
                               NamedPort("admin", 15000))
    assert pod_info({"metadata": {"name": "q"}, "spec": {}}).named_ports == ()
