"""The truth table's oracle (:mod:`podnet.testing.netpol.oracle`) on its own: the API's
documented semantics case by case, then invariants over random policies (hypothesis;
``PODNET_CHAOS_EXAMPLES`` examples each, 100 by default): no policy allows everything; a
policy changes nothing for the pods it does not select; for a pod it is the first to
select it never allows more; policies are additive; their order does not matter; a
namespace's policies leave connections between other namespaces alone. And the cases
cover every item of the API the issue lists.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podnet.testing.netpol.cases import (
    CASES,
    NAMESPACES,
    PODS,
    base_cluster,
    covering,
    netpol,
)
from podnet.testing.netpol.matrix import Verdict, render
from podnet.testing.netpol.oracle import (
    Cluster,
    Pod,
    allowed,
    egress_allows,
    expected,
    ingress_allows,
    policy_types,
    selector_matches,
)

EXAMPLES = int(os.environ.get("PODNET_CHAOS_EXAMPLES", "100"))
PORTS = [(80, "TCP"), (81, "TCP"), (80, "UDP"), (81, "UDP"), (80, "SCTP")]

ADDRESSES = {f"{ns}/{p}": (f"10.60.{i}.{j + 10}", f"fd60::{i}:{j + 10}")
             for i, ns in enumerate(NAMESPACES) for j, p in enumerate(PODS)}
WORLD = base_cluster(ADDRESSES, {k: f"node-{i % 2}" for i, k in enumerate(ADDRESSES)},
                     {"node-0": ("192.168.60.1",), "node-1": ("192.168.60.2",)})


def verdict(policies: list[dict[str, Any]], src: str, dst: str, port: int = 80,
            protocol: str = "TCP", family: int = 4, world: Cluster = WORLD) -> bool:
    return allowed(policies, world, world.pod(src), world.pod(dst), port, protocol, family)


# --- the semantics, case by case ---------------------------------------------------------------


def test_policy_types_default_to_ingress_and_to_egress_when_egress_rules_are_given() -> None:
    assert policy_types(netpol("x", "p", {"podSelector": {}})) == {"Ingress"}
    assert policy_types(netpol("x", "p", {"podSelector": {}, "egress": []})) == {"Ingress"}
    assert policy_types(netpol("x", "p", {"podSelector": {}, "egress": [{}]})) == {
        "Ingress", "Egress"}
    assert policy_types(netpol("x", "p", {"podSelector": {}, "policyTypes": ["Egress"],
                                          "ingress": [{}]})) == {"Egress"}


@pytest.mark.parametrize(("selector", "labels", "matches"), [
    ({}, {}, True),
    ({"matchLabels": {"pod": "a"}}, {"pod": "a", "x": "1"}, True),
    ({"matchLabels": {"pod": "a"}}, {"pod": "b"}, False),
    ({"matchExpressions": [{"key": "pod", "operator": "In", "values": ["a", "b"]}]},
     {"pod": "b"}, True),
    ({"matchExpressions": [{"key": "pod", "operator": "In", "values": ["a"]}]}, {}, False),
    # NotIn matches a pod without the key at all
    ({"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]}, {}, True),
    ({"matchExpressions": [{"key": "pod", "operator": "NotIn", "values": ["a"]}]},
     {"pod": "a"}, False),
    ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"tier": ""}, True),
    ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "x"}, False),
    # matchLabels and matchExpressions are ANDed
    ({"matchLabels": {"pod": "a"},
      "matchExpressions": [{"key": "tier", "operator": "Exists"}]}, {"pod": "a"}, False),
    ({"matchExpressions": [{"key": "pod", "operator": "Bogus"}]}, {"pod": "a"}, False),
])
def test_label_selectors(selector: dict[str, Any], labels: dict[str, str], matches: bool
                         ) -> None:
    assert selector_matches(selector, labels) is matches


def test_ingress_and_egress_must_both_allow() -> None:
    deny_in_y = netpol("y", "deny", {"podSelector": {}})
    deny_out_x = netpol("x", "deny", {"podSelector": {}, "policyTypes": ["Egress"]})
    assert not verdict([deny_in_y], "x/a", "y/a")
    assert verdict([deny_in_y], "y/a", "x/a")  # y's egress is open
    assert not verdict([deny_out_x], "x/a", "y/a")
    assert verdict([deny_out_x], "y/a", "x/a")


def test_peers_pod_namespace_both_and_either() -> None:
    def into_xa(peers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [netpol("x", "p", {"podSelector": {"matchLabels": {"pod": "a"}},
                                  "ingress": [{"from": peers}]})]

    pod_b = {"podSelector": {"matchLabels": {"pod": "b"}}}
    ns_y = {"namespaceSelector": {"matchLabels": {"ns": "y"}}}
    alone = into_xa([pod_b])  # the policy's own namespace only
    assert verdict(alone, "x/b", "x/a") and not verdict(alone, "y/b", "x/a")
    both = into_xa([{**pod_b, **ns_y}])
    assert verdict(both, "y/b", "x/a") and not verdict(both, "y/c", "x/a")
    assert not verdict(both, "x/b", "x/a")
    either = into_xa([pod_b, ns_y])
    assert verdict(either, "x/b", "x/a") and verdict(either, "y/c", "x/a")
    assert not verdict(either, "z/b", "x/a")
    everywhere = into_xa([{"namespaceSelector": {}, **pod_b}])
    assert all(verdict(everywhere, f"{ns}/b", "x/a") for ns in NAMESPACES)


def test_ports_number_range_name_and_protocol() -> None:
    def ports(entries: list[dict[str, Any]], ns: str = "x") -> list[dict[str, Any]]:
        return [netpol(ns, "p", {"podSelector": {}, "ingress": [{"ports": entries}]})]

    tcp80 = ports([{"port": 80}])
    assert verdict(tcp80, "y/a", "x/a", 80, "TCP")
    assert not verdict(tcp80, "y/a", "x/a", 80, "UDP")
    assert not verdict(tcp80, "y/a", "x/a", 81, "TCP")
    span = ports([{"port": 80, "endPort": 81, "protocol": "UDP"}])
    assert verdict(span, "y/a", "x/a", 81, "UDP") and not verdict(span, "y/a", "x/a", 81)
    any_udp = ports([{"protocol": "UDP"}])
    assert verdict(any_udp, "y/a", "x/b", 81, "UDP") and not verdict(any_udp, "y/a", "x/b")
    # web: 80/TCP on a, 81/TCP on b, none on c (resolved on the member, ingress)
    web = ports([{"port": "web"}])
    assert verdict(web, "y/c", "x/a", 80) and not verdict(web, "y/c", "x/a", 81)
    assert verdict(web, "y/c", "x/b", 81) and not verdict(web, "y/c", "x/b", 80)
    assert not verdict(web, "y/a", "x/c", 80) and not verdict(web, "y/a", "x/c", 81)
    # a name of a UDP port does not match TCP
    assert not verdict(ports([{"port": "serve-80-udp"}]), "y/a", "x/a", 80, "TCP")
    assert verdict(ports([{"port": "serve-80-udp", "protocol": "UDP"}]), "y/a", "x/a", 80,
                   "UDP")


def test_an_egress_name_resolves_on_the_peer_and_never_on_an_ip_block() -> None:
    to_web = netpol("x", "p", {"podSelector": {"matchLabels": {"pod": "a"}},
                               "policyTypes": ["Egress"], "egress": [{"ports": [
                                   {"port": "web"}]}]})
    assert verdict([to_web], "x/a", "y/a", 80) and verdict([to_web], "x/a", "y/b", 81)
    assert not verdict([to_web], "x/a", "y/b", 80) and not verdict([to_web], "x/a", "y/c", 80)
    blocks = [{"ipBlock": {"cidr": str(n)}} for n in covering(WORLD)]
    by_block = netpol("x", "p", {"podSelector": {"matchLabels": {"pod": "a"}},
                                 "policyTypes": ["Egress"], "egress": [{
                                     "to": blocks, "ports": [{"port": "web"}]}]})
    assert not verdict([by_block], "x/a", "y/a", 80)
    # ingress from a block on the member's named port: the member has the name
    into = netpol("x", "p", {"podSelector": {"matchLabels": {"pod": "a"}}, "ingress": [{
        "from": blocks, "ports": [{"port": "web"}]}]})
    assert verdict([into], "y/c", "x/a", 80) and not verdict([into], "y/c", "x/a", 81)


def test_ip_blocks_with_except_per_family() -> None:
    block = netpol("x", "p", {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {
        "cidr": "10.60.0.0/16", "except": ["10.60.1.11/32"]}}]}]})
    assert verdict([block], "y/a", "x/a") and not verdict([block], "y/b", "x/a")
    # a v4 block says nothing of IPv6: the v6 connection is denied
    assert not verdict([block], "y/a", "x/a", family=6)


def test_node_traffic_and_host_network_pods() -> None:
    node = Pod("kube-system", "probe", host_network=True, addresses=("192.168.60.1",),
               node="node-0", labels={"pod": "a"})
    world = Cluster(pods=(*WORLD.pods, node), namespaces=WORLD.namespaces,
                    node_addresses=WORLD.node_addresses)
    deny = [netpol("x", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})]
    xa = world.pod("x/a")  # on node-0
    xb = world.pod("x/b")  # on node-1
    assert allowed(deny, world, node, xa, 80, "TCP") and allowed(deny, world, xa, node, 80, "TCP")
    assert not allowed(deny, world, node, xb, 80, "TCP")
    # a host-network pod is never selected and matched as a peer by ipBlock only
    assert allowed([netpol("kube-system", "deny", {"podSelector": {}})], world, xb, node, 80,
                   "TCP")
    by_label = [netpol("x", "p", {"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "a"}}}]}]})]
    assert not ingress_allows(by_label, world, node, xb, 80, "TCP")
    by_block = [netpol("x", "p", {"podSelector": {}, "ingress": [{"from": [
        {"ipBlock": {"cidr": "192.168.60.0/24"}}]}]})]
    assert ingress_allows(by_block, world, node, xb, 80, "TCP")


# --- invariants over random policies ---------------------------------------------------------

_KEYS = st.sampled_from(["pod", "ns", "tier"])
_VALUES = st.sampled_from(["a", "b", "c", "x", "y", "z", "nobody"])


@st.composite
def selectors(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["all", "labels", "expression"]))
    if kind == "all":
        return {}
    if kind == "labels":
        return {"matchLabels": {draw(_KEYS): draw(_VALUES)}}
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
    expr: dict[str, Any] = {"key": draw(_KEYS), "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(st.lists(_VALUES, min_size=1, max_size=2, unique=True))
    return {"matchExpressions": [expr]}


@st.composite
def peers(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["pod", "ns", "both", "block"]))
    if kind == "block":
        cidr = draw(st.sampled_from(["10.60.0.0/16", "10.60.1.0/24", "fd60::/64", "0.0.0.0/0"]))
        block: dict[str, Any] = {"cidr": cidr}
        if cidr != "fd60::/64" and draw(st.booleans()):
            block["except"] = [draw(st.sampled_from(["10.60.1.10/32", "10.60.2.0/24"]))]
        return {"ipBlock": block}
    out = {}
    if kind in ("pod", "both"):
        out["podSelector"] = draw(selectors())
    if kind in ("ns", "both"):
        out["namespaceSelector"] = draw(selectors())
    return out


@st.composite
def port_entries(draw: st.DrawFn) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if draw(st.booleans()):
        entry["protocol"] = draw(st.sampled_from(["TCP", "UDP", "SCTP"]))
    kind = draw(st.sampled_from(["none", "number", "range", "name"]))
    if kind == "number":
        entry["port"] = draw(st.sampled_from([80, 81]))
    elif kind == "range":
        entry["port"] = draw(st.sampled_from([79, 80, 81]))
        entry["endPort"] = entry["port"] + draw(st.integers(0, 2))
    elif kind == "name":
        entry["port"] = draw(st.sampled_from(["web", "dns", "serve-80-tcp", "serve-81-udp"]))
    return entry


@st.composite
def rules(draw: st.DrawFn, peers_key: str) -> dict[str, Any]:
    rule: dict[str, Any] = {}
    if draw(st.booleans()):
        rule[peers_key] = draw(st.lists(peers(), max_size=2))
    if draw(st.booleans()):
        rule["ports"] = draw(st.lists(port_entries(), max_size=2))
    return rule


@st.composite
def policies(draw: st.DrawFn, namespace: str | None = None) -> dict[str, Any]:
    ns = namespace or draw(st.sampled_from(NAMESPACES))
    spec: dict[str, Any] = {"podSelector": draw(selectors())}
    if draw(st.booleans()):
        spec["policyTypes"] = draw(st.sampled_from(
            [["Ingress"], ["Egress"], ["Ingress", "Egress"]]))
    if draw(st.booleans()):
        spec["ingress"] = draw(st.lists(rules("from"), max_size=2))
    if draw(st.booleans()):
        spec["egress"] = draw(st.lists(rules("to"), max_size=2))
    return netpol(ns, f"p{draw(st.integers(0, 999))}", spec)


def _cells(family_too: bool = False) -> Iterator[tuple[Pod, Pod, int, str, int]]:
    for src, dst in itertools.permutations(WORLD.pods, 2):
        for port, protocol in PORTS:
            for family in ((4, 6) if family_too else (4,)):
                yield src, dst, port, protocol, family


def _selected(ps: list[dict[str, Any]], pod: Pod, kind: str) -> bool:
    from podnet.testing.netpol.oracle import selects

    return any(kind in policy_types(p) and selects(p, pod) for p in ps)


SETTINGS = settings(max_examples=EXAMPLES, deadline=None)


def test_no_policy_allows_everything() -> None:
    for src, dst, port, protocol, family in _cells(family_too=True):
        assert allowed([], WORLD, src, dst, port, protocol, family)


@SETTINGS
@given(st.lists(policies(), max_size=3), policies())
def test_a_policy_never_opens_a_pod_it_is_the_first_to_select(
        before: list[dict[str, Any]], added: dict[str, Any]) -> None:
    after = [*before, added]
    for src, dst, port, protocol, family in _cells():
        args = (WORLD, src, dst, port, protocol, family)
        was_in, now_in = ingress_allows(before, *args), ingress_allows(after, *args)
        was_out, now_out = egress_allows(before, *args), egress_allows(after, *args)
        if not _selected(before, dst, "Ingress"):
            assert was_in and (now_in or _selected([added], dst, "Ingress"))
        if not _selected(before, src, "Egress"):
            assert was_out and (now_out or _selected([added], src, "Egress"))
        # a pod the added policy does not select that way is as it was
        if not _selected([added], dst, "Ingress"):
            assert now_in == was_in
        if not _selected([added], src, "Egress"):
            assert now_out == was_out


@SETTINGS
@given(st.lists(policies(), min_size=1, max_size=3), st.lists(policies(), min_size=1,
                                                              max_size=3))
def test_policies_are_additive(one: list[dict[str, Any]], other: list[dict[str, Any]]) -> None:
    both = [*one, *other]
    for src, dst, port, protocol, family in _cells():
        args = (WORLD, src, dst, port, protocol, family)
        if _selected(one, dst, "Ingress") and _selected(other, dst, "Ingress"):
            assert ingress_allows(both, *args) == (ingress_allows(one, *args)
                                                   or ingress_allows(other, *args))
        if _selected(one, src, "Egress") and _selected(other, src, "Egress"):
            assert egress_allows(both, *args) == (egress_allows(one, *args)
                                                  or egress_allows(other, *args))


@SETTINGS
@given(st.lists(policies(), max_size=4))
def test_the_order_of_policies_does_not_matter(ps: list[dict[str, Any]]) -> None:
    ports = PORTS[:2]
    forward = expected(ps, WORLD, ports)
    backward = expected(list(reversed(ps)), WORLD, ports)
    assert forward.mismatches(backward) == [], render(forward, backward)


@SETTINGS
@given(st.sampled_from(NAMESPACES), st.data())
def test_a_namespaces_policies_leave_other_namespaces_alone(
        namespace: str, data: st.DataObject) -> None:
    ps = data.draw(st.lists(policies(namespace), min_size=1, max_size=3))
    for src, dst, port, protocol, family in _cells():
        if namespace not in (src.namespace, dst.namespace):
            assert allowed(ps, WORLD, src, dst, port, protocol, family)


# --- the cases ---------------------------------------------------------------------------------


def _walk(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, value
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _walk(v, (*path, str(k)))
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, path)


def test_the_cases_cover_every_item_of_the_api() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES), "case names repeat"
    seen: set[str] = set()
    for case in CASES:
        world = case.cluster(WORLD)
        ps = case.policies(world)
        if len(ps) > 1:
            seen.add("several policies")
        if case.pod_labels:
            seen.add("pod labels changed")
        if case.namespace_labels:
            seen.add("namespace labels changed")
        for p in ps:
            spec = p["spec"]
            if "policyTypes" not in spec:
                seen.add("policyTypes defaulted")
            seen.update(f"policyTypes {t}" for t in spec.get("policyTypes", ()))
            if spec["podSelector"] == {}:
                seen.add("empty podSelector")
            for direction, peers_key in (("ingress", "from"), ("egress", "to")):
                if direction in spec and spec[direction] == []:
                    seen.add(f"empty {direction} list")
                for rule in spec.get(direction) or ():
                    for peer in rule.get(peers_key) or ():
                        kinds = sorted(k for k in peer if k != "except")
                        seen.add(f"{direction} peer {'+'.join(kinds)}")
                        if "except" in peer.get("ipBlock", {}):
                            seen.add("ipBlock except")
                    for entry in rule.get("ports") or ():
                        seen.add(f"protocol {entry.get('protocol', 'TCP')}")
                        if isinstance(entry.get("port"), str):
                            seen.add(f"{direction} named port")
                        if "endPort" in entry:
                            seen.add("endPort")
                        if "port" not in entry:
                            seen.add("protocol without port")
        for _, value in _walk(ps):
            if isinstance(value, Mapping) and "operator" in value:
                seen.add(f"operator {value['operator']}")
    wanted = {
        "several policies", "pod labels changed", "namespace labels changed",
        "policyTypes defaulted", "policyTypes Ingress", "policyTypes Egress",
        "empty podSelector", "empty ingress list",
        "ingress peer podSelector", "ingress peer namespaceSelector",
        "ingress peer namespaceSelector+podSelector", "ingress peer ipBlock",
        "egress peer podSelector", "egress peer namespaceSelector",
        "egress peer namespaceSelector+podSelector", "egress peer ipBlock",
        "ipBlock except", "protocol TCP", "protocol UDP", "protocol SCTP",
        "ingress named port", "egress named port", "endPort", "protocol without port",
        "operator In", "operator NotIn", "operator Exists", "operator DoesNotExist",
    }
    assert wanted <= seen, sorted(wanted - seen)


def test_every_case_differs_from_no_policy_but_the_ones_that_must_not() -> None:
    """A case whose matrix is everything-allowed proves little: only the cases about
    allowing everything may be."""
    open_by_design = {"no-policy", "allow-all-ingress", "allow-all-egress",
                      "deny-then-allow-all-additive", "select-no-pod", "ingress-empty-from-list",
                      "ingress-from-all-namespaces", "egress-types-ignore-ingress-rules"}
    for case in CASES:
        world = case.cluster(WORLD)
        m = expected(case.policies(world), world, PORTS[:4])
        assert (m.count(Verdict.DROP) == 0) == (case.name in open_by_design), case.name
