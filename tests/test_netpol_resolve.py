"""Resolving a NetworkPolicy (podnet.core.netpol.resolve) against pods and namespaces:
examples for each part of the API, a property test against a brute-force reading of the
policy's JSON, and the requeue index.

``PODNET_CHAOS_EXAMPLES`` sets the property test's example count (default 200).
"""

from __future__ import annotations

import ipaddress
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from podnet.core.netpol.resolve import PolicyIndex, PolicyView, resolve, selects
from podnet.core.netpol.wire import read_policy
from podnet.hookspecs.models import NamedPort, PodInfo
from podnet.hookspecs.netpol import (
    FindingReason,
    PolicyMember,
    PolicyPort,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)

EXAMPLES = int(os.environ.get("PODNET_CHAOS_EXAMPLES", "200"))


class MemoryView:
    """A PolicyView over plain dicts; counts what resolution asks for."""

    def __init__(self, pods: Iterable[PodInfo], addresses: Mapping[str, tuple[str, ...]],
                 namespaces: Mapping[str, Mapping[str, str]],
                 providers: Mapping[str, str] | None = None) -> None:
        self._pods = sorted(pods, key=lambda p: p.key)
        self._by_ns: dict[str, list[PodInfo]] = defaultdict(list)
        for pod in self._pods:
            self._by_ns[pod.namespace].append(pod)
        self._addresses = dict(addresses)
        self._namespaces = dict(namespaces)
        self._providers = dict(providers or {})
        self.calls: dict[str, int] = defaultdict(int)

    def pods(self) -> Iterable[PodInfo]:
        self.calls["pods"] += 1
        return iter(self._pods)

    def pods_in(self, namespace: str) -> Iterable[PodInfo]:
        self.calls["pods_in"] += 1
        return iter(self._by_ns.get(namespace, ()))

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._namespaces.get(name)

    def namespaces(self) -> Iterable[str]:
        return sorted(self._namespaces)

    def addresses_of(self, pod: PodInfo) -> tuple[str, ...]:
        self.calls["addresses_of"] += 1
        return self._addresses.get(pod.key, ())

    def provider_of(self, pod: PodInfo) -> str | None:
        return self._providers.get(pod.key, "reference") if pod.key in self._addresses else None

    def node_addresses(self, node: str) -> tuple[str, ...]:
        return (f"192.168.0.{int(node.removeprefix('n')) + 1}",)


#: MemoryView is a PolicyView (the type checker says so)
_view_is_a_policy_view: PolicyView = MemoryView((), {}, {})


def pod(ns: str, name: str, labels: dict[str, str] | None = None, node: str = "n0",
        host_network: bool = False, ports: tuple[NamedPort, ...] = (),
        phase: str = "Running") -> PodInfo:
    return PodInfo(namespace=ns, name=name, uid=f"{ns}-{name}", node_name=node, phase=phase,
                   labels=labels or {}, host_network=host_network, named_ports=ports)


def policy(spec: dict[str, Any], namespace: str = "x", name: str = "p") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": "u", "generation": 1},
            "spec": spec}


# --- a small world: namespaces x, y, z with pods a, b, c each --------------------------

WORLD_PODS = [pod(ns, n, {"pod": n}, node=f"n{i % 2}",
                  ports=(NamedPort("serve-80", 80), NamedPort("serve-81-udp", 81, "UDP"))
                  if n != "c" else (NamedPort("serve-80", 8080),))
              for ns in "xyz" for i, n in enumerate("abc")]
WORLD_ADDRESSES = {p.key: (f"10.0.{'xyz'.index(p.namespace)}.{'abc'.index(p.name) + 1}",)
                   for p in WORLD_PODS}
WORLD_NAMESPACES = {"x": {"ns": "x"}, "y": {"ns": "y"}, "z": {"ns": "z"}}


def world(**changes: Any) -> MemoryView:
    return MemoryView(changes.get("pods", WORLD_PODS),
                      changes.get("addresses", WORLD_ADDRESSES),
                      changes.get("namespaces", WORLD_NAMESPACES))


def resolved(spec: dict[str, Any], view: MemoryView | None = None) -> ResolvedPolicy:
    return resolve(read_policy(policy(spec)), view or world())


def test_members_are_the_selected_pods_with_addresses() -> None:
    extra = [pod("x", "host", {"pod": "a"}, host_network=True),
             pod("x", "new", {"pod": "a"}), pod("x", "done", {"pod": "a"}, phase="Succeeded")]
    addresses = {**WORLD_ADDRESSES, "x/host": ("192.168.0.1",), "x/done": ("10.0.0.99",)}
    got = resolved({"podSelector": {"matchLabels": {"pod": "a"}}},
                   world(pods=WORLD_PODS + extra, addresses=addresses))
    assert got.members == (PolicyMember("x/a", ("10.0.0.1",), "n0", "reference",
                                        ("192.168.0.1",)),)
    assert (got.key, got.uid, got.generation) == ("x/p", "u", 1)
    assert got.ingress == () and got.egress is None


def test_default_deny_and_allow_all() -> None:
    assert resolved({"podSelector": {}}).ingress == ()
    assert resolved({"podSelector": {}, "ingress": [{}]}).ingress == (PolicyRule(),)
    got = resolved({"podSelector": {}, "policyTypes": ["Egress"]})
    assert got.ingress is None and got.egress == ()
    assert [m.key for m in got.members] == ["x/a", "x/b", "x/c"]


def test_peer_selectors() -> None:
    def peers(peer: dict[str, Any]) -> tuple[str, ...] | None:
        return resolved({"podSelector": {}, "ingress": [{"from": [peer]}]}).ingress[0].peers  # type: ignore[index]

    assert peers({"podSelector": {"matchLabels": {"pod": "b"}}}) == ("10.0.0.2/32",)
    assert peers({"namespaceSelector": {"matchLabels": {"ns": "y"}}}) == (
        "10.0.1.1/32", "10.0.1.2/32", "10.0.1.3/32")
    assert peers({"namespaceSelector": {"matchExpressions": [
        {"key": "ns", "operator": "In", "values": ["y", "z"]}]},
        "podSelector": {"matchLabels": {"pod": "c"}}}) == ("10.0.1.3/32", "10.0.2.3/32")
    # the API server's own namespace label works without being on the object
    assert peers({"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "z"}}, "podSelector": {"matchLabels": {"pod": "a"}}}) == (
        "10.0.2.1/32",)
    assert peers({"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.0.0/24"]}}) == (
        "10.0.1.0/24", "10.0.128.0/17", "10.0.16.0/20", "10.0.2.0/23", "10.0.32.0/19",
        "10.0.4.0/22", "10.0.64.0/18", "10.0.8.0/21")
    # selectors matching no pod: a rule that allows nothing, said as no peer
    assert peers({"podSelector": {"matchLabels": {"pod": "none"}}}) == ()


def test_host_network_pods_are_never_peers_by_selector() -> None:
    pods = [*WORLD_PODS, pod("y", "h", {"pod": "a"}, host_network=True)]
    got = resolved({"podSelector": {}, "ingress": [{"from": [{
        "namespaceSelector": {}, "podSelector": {"matchLabels": {"pod": "a"}}}]}]},
        world(pods=pods, addresses={**WORLD_ADDRESSES, "y/h": ("192.168.0.9",)}))
    assert got.ingress[0].peers == ("10.0.0.1/32", "10.0.1.1/32", "10.0.2.1/32")  # type: ignore[index]


def test_dual_stack_peer_is_both_host_prefixes() -> None:
    addresses = {**WORLD_ADDRESSES, "y/a": ("fd00::5", "10.0.1.1")}
    got = resolved({"podSelector": {}, "ingress": [{"from": [{
        "namespaceSelector": {"matchLabels": {"ns": "y"}},
        "podSelector": {"matchLabels": {"pod": "a"}}}]}]}, world(addresses=addresses))
    assert got.ingress[0].peers == ("10.0.1.1/32", "fd00::5/128")  # type: ignore[index]


def test_numbered_ports_and_ranges() -> None:
    got = resolved({"podSelector": {}, "ingress": [{"ports": [
        {"port": 80}, {"protocol": "UDP", "port": 1000, "endPort": 2000}, {"protocol": "SCTP"}]}]})
    assert got.ingress == (PolicyRule(None, (
        PolicyPort(Protocol.TCP, 80), PolicyPort(Protocol.UDP, 1000, 2000),
        PolicyPort(Protocol.SCTP))),)


def test_ingress_named_port_resolves_per_member() -> None:
    got = resolved({"podSelector": {}, "ingress": [{"ports": [
        {"port": 81}, {"port": "serve-80"}, {"port": "serve-81-udp", "protocol": "UDP"}]}]})
    assert got.ingress == (
        PolicyRule(None, (PolicyPort(Protocol.TCP, 81),)),
        PolicyRule(None, (PolicyPort(Protocol.TCP, 80), PolicyPort(Protocol.UDP, 81)),
                   members=("x/a", "x/b")),
        PolicyRule(None, (PolicyPort(Protocol.TCP, 8080),), members=("x/c",)),
    )
    assert got.findings == ()


def test_named_port_needs_its_protocol() -> None:
    # serve-81-udp is a UDP port: as TCP (the default) it resolves on no member
    got = resolved({"podSelector": {}, "ingress": [{"ports": [{"port": "serve-81-udp"}]}]})
    assert got.ingress == ()
    assert [(f.field, f.reason) for f in got.findings] == [
        ("spec.ingress[0].ports[0].port", FindingReason.UNRESOLVED_NAMED_PORT)]


def test_egress_named_port_resolves_per_peer_pod_and_never_on_an_ip_block() -> None:
    got = resolved({"podSelector": {"matchLabels": {"pod": "a"}}, "egress": [{
        "to": [{"namespaceSelector": {"matchLabels": {"ns": "y"}}},
               {"ipBlock": {"cidr": "172.16.0.0/12"}}],
        "ports": [{"port": "serve-80"}]}]})
    assert got.ingress == () and got.egress == (
        PolicyRule(("10.0.1.1/32", "10.0.1.2/32"), (PolicyPort(Protocol.TCP, 80),)),
        PolicyRule(("10.0.1.3/32",), (PolicyPort(Protocol.TCP, 8080),)),
    )
    # to any peer: every pod with that port
    got = resolved({"podSelector": {}, "policyTypes": ["Egress"], "egress": [{
        "ports": [{"port": "serve-80"}, {"port": 53, "protocol": "UDP"}]}]})
    assert got.egress == (
        PolicyRule(None, (PolicyPort(Protocol.UDP, 53),)),
        PolicyRule(tuple(sorted(f"10.0.{n}.{i}/32" for n in range(3) for i in (1, 2))),
                   (PolicyPort(Protocol.TCP, 80),)),
        PolicyRule(("10.0.0.3/32", "10.0.1.3/32", "10.0.2.3/32"),
                   (PolicyPort(Protocol.TCP, 8080),)),
    )


def test_findings_carry_through_and_match_nothing() -> None:
    got = resolved({"podSelector": {}, "ingress": [
        {"from": [{"ipBlock": {"cidr": "010.0.0.0/33"}}]},
        {"from": [{"podSelector": {"matchLabels": {"pod": "b"}}}]}]})
    assert got.ingress == (PolicyRule(("10.0.0.2/32",)),)
    assert [f.field for f in got.findings] == ["spec.ingress[0].from[0].ipBlock.cidr"]


def test_output_is_deterministic() -> None:
    spec = {"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {}}],
                                            "ports": [{"port": "serve-80"}]}]}
    forward = resolved(spec, world())
    backward = resolved(spec, MemoryView(list(reversed(WORLD_PODS)), WORLD_ADDRESSES,
                                         WORLD_NAMESPACES))
    assert forward == backward


def test_each_pod_is_asked_for_its_addresses_once() -> None:
    # a policy whose rules name the same pods several times asks for each pod's addresses
    # once per resolution, and lists a namespace per peer rather than every pod per peer
    view = world()
    resolve(read_policy(policy({"podSelector": {}, "ingress": [
        {"from": [{"namespaceSelector": {}}, {"podSelector": {}}]},
        {"from": [{"namespaceSelector": {}}], "ports": [{"port": "serve-80"}]}],
        "egress": [{"ports": [{"port": "serve-80"}]}]})), view)
    assert view.calls["addresses_of"] == len(WORLD_PODS)
    assert view.calls["pods"] == 1


def test_selects() -> None:
    spec = read_policy(policy({"podSelector": {"matchLabels": {"pod": "a"}}}))
    assert selects(spec, pod("x", "a", {"pod": "a"}), {})
    assert not selects(spec, pod("y", "a", {"pod": "a"}), {})
    assert not selects(spec, pod("x", "a", {"pod": "a"}, host_network=True), {})
    assert not selects(spec, pod("x", "a", {"pod": "b"}), {})


# --- requeue ------------------------------------------------------------------------------


def test_index_names_the_policies_a_pod_change_can_change() -> None:
    index = PolicyIndex()
    index.put(read_policy(policy({"podSelector": {"matchLabels": {"pod": "a"}}}, "x", "members")))
    index.put(read_policy(policy({"podSelector": {}, "ingress": [{"from": [
        {"podSelector": {"matchLabels": {"pod": "b"}}}]}]}, "y", "local-peer")))
    index.put(read_policy(policy({"podSelector": {}, "ingress": [{"from": [
        {"namespaceSelector": {"matchLabels": {"ns": "x"}}}]}]}, "z", "ns-peer")))
    index.put(read_policy(policy({"podSelector": {"matchLabels": {"pod": "none"}},
                                  "egress": [{"ports": [{"port": "http"}]}]},
                                 "z", "named-any")))
    index.put(read_policy(policy({"podSelector": {"matchLabels": {"pod": "none"}}, "ingress": [
        {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]}, "x", "cidr-only")))
    x = {"ns": "x"}
    assert index.for_pod([pod("x", "a", {"pod": "a"})], x) == [
        "x/members", "z/named-any", "z/ns-peer"]
    # relabelled from a to c: the policy that had it as a member changes too
    assert index.for_pod([pod("x", "a", {"pod": "a"}), pod("x", "a", {"pod": "c"})], x) == [
        "x/members", "z/named-any", "z/ns-peer"]
    assert index.for_pod([pod("y", "q", {"pod": "b"})], {"ns": "y"}) == [
        "y/local-peer", "z/named-any"]
    assert index.for_pod([pod("y", "q", {"pod": "b"}, host_network=True)], {"ns": "y"}) == []
    assert index.for_pod([None, None], {}) == []
    assert index.for_namespace("w", {}, {"ns": "x"}) == ["z/ns-peer"]
    assert index.for_namespace("w", {"ns": "x"}, {"ns": "x", "more": "1"}) == []
    index.remove("z/ns-peer")
    assert index.for_namespace("w", {}, {"ns": "x"}) == []
    assert len(index) == 4 and "x/members" in index and index.keys()[0] == "x/cidr-only"


# --- the property: resolve against a brute-force reading of the JSON ----------------------

NAMESPACES = ("x", "y", "z")
LABEL_KEYS = ("app", "tier")
LABEL_VALUES = ("a", "b")
PORT_NAMES = (("http", 80, "TCP"), ("http", 8080, "TCP"), ("dns", 53, "UDP"), ("dns", 53, "TCP"),
              ("http", 80, "UDP"))
PROBE_PORTS = (53, 80, 81, 8080)
EXTERNAL = ("10.9.0.1", "10.9.1.1", "172.16.0.1")

labels_st = st.dictionaries(st.sampled_from(LABEL_KEYS), st.sampled_from(LABEL_VALUES),
                            max_size=2)


@st.composite
def selectors(draw: st.DrawFn) -> dict[str, Any]:
    # often empty or one term, so that a selector matches some of a few pods
    kind = draw(st.sampled_from(["empty", "empty", "label", "expression", "both"]))
    out: dict[str, Any] = {}
    if kind in ("label", "both"):
        key = draw(st.sampled_from(LABEL_KEYS))
        out["matchLabels"] = {key: draw(st.sampled_from(LABEL_VALUES))}
    if kind in ("expression", "both"):
        op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist"]))
        expr: dict[str, Any] = {"key": draw(st.sampled_from(LABEL_KEYS)), "operator": op}
        if op in ("In", "NotIn"):
            expr["values"] = draw(st.lists(st.sampled_from(LABEL_VALUES), min_size=1,
                                           max_size=2, unique=True))
        out["matchExpressions"] = [expr]
    return out


@st.composite
def peers(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["pod", "ns", "both", "ip"]))
    if kind == "ip":
        block: dict[str, Any] = {"cidr": draw(st.sampled_from(
            ["10.0.0.0/8", "10.9.0.0/16", "10.0.0.0/16", "0.0.0.0/0"]))}
        if draw(st.booleans()):
            net = ipaddress.ip_network(block["cidr"])
            subs = list(net.subnets(new_prefix=min(net.prefixlen + 8, 32)))[:2]
            block["except"] = [str(s) for s in draw(st.lists(st.sampled_from(subs),
                                                             max_size=2, unique=True))]
        return {"ipBlock": block}
    out = {}
    if kind in ("pod", "both"):
        out["podSelector"] = draw(selectors())
    if kind in ("ns", "both"):
        out["namespaceSelector"] = draw(selectors())
    return out


@st.composite
def ports(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.booleans()):
        out["protocol"] = draw(st.sampled_from(["TCP", "UDP"]))
    kind = draw(st.sampled_from(["none", "number", "range", "name", "name"]))
    if kind == "number":
        out["port"] = draw(st.sampled_from(PROBE_PORTS))
    elif kind == "range":
        out["port"] = draw(st.sampled_from((50, 80)))
        out["endPort"] = draw(st.sampled_from((80, 100)))
    elif kind == "name":
        out["port"] = draw(st.sampled_from(("http", "dns", "none")))
    return out


@st.composite
def rules(draw: st.DrawFn, peer_key: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        out[peer_key] = draw(st.lists(peers(), min_size=1, max_size=3))
    if draw(st.booleans()):
        out["ports"] = draw(st.lists(ports(), min_size=1, max_size=3))
    return out


@st.composite
def specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": draw(selectors())}
    if draw(st.integers(0, 3)):
        spec["ingress"] = draw(st.lists(rules("from"), min_size=1, max_size=3))
    if draw(st.booleans()):
        spec["egress"] = draw(st.lists(rules("to"), min_size=1, max_size=3))
    if draw(st.booleans()):
        spec["policyTypes"] = draw(st.lists(st.sampled_from(["Ingress", "Egress"]),
                                            min_size=1, max_size=2, unique=True))
    return spec


@attrs.frozen
class World:
    pods: tuple[PodInfo, ...]
    addresses: dict[str, tuple[str, ...]]
    namespaces: dict[str, dict[str, str]]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    pods, addresses = [], {}
    for n, ns in enumerate(NAMESPACES):
        for i in range(draw(st.integers(1, 4))):
            named = draw(st.lists(st.sampled_from(PORT_NAMES), max_size=2,
                                  unique_by=lambda p: p[0]))
            p = pod(ns, f"p{i}", draw(labels_st), node=f"n{i % 2}",
                    host_network=draw(st.integers(0, 9)) == 0,
                    ports=tuple(NamedPort(*x) for x in named))
            pods.append(p)
            if p.host_network:
                addresses[p.key] = (f"192.168.0.{i % 2 + 1}",)
            elif draw(st.integers(0, 5)) > 0:  # some not plumbed yet
                addresses[p.key] = (f"10.0.{n}.{i + 1}",)
    return World(tuple(pods), addresses,
                 {ns: draw(labels_st) for ns in NAMESPACES})


def _sel(raw: dict[str, Any] | None, labels: Mapping[str, str]) -> bool:
    if raw is None:
        return True
    for k, v in (raw.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in raw.get("matchExpressions") or ():
        have = labels.get(e["key"])
        ok = {"In": have in e.get("values", ()), "NotIn": have not in e.get("values", ()),
              "Exists": have is not None, "DoesNotExist": have is None}[e["operator"]]
        if not ok:
            return False
    return True


def _in_block(address: str, block: dict[str, Any]) -> bool:
    ip = ipaddress.ip_address(address)
    if ip not in ipaddress.ip_network(block["cidr"]):
        return False
    return not any(ip in ipaddress.ip_network(e) for e in block.get("except", ()))


class BruteForce:
    """The expected verdicts, read straight from the policy's JSON."""

    def __init__(self, spec: dict[str, Any], w: World) -> None:
        self.spec, self.w = spec, w
        types = spec.get("policyTypes") or (
            ["Ingress"] + (["Egress"] if spec.get("egress") else []))
        self.ingress = "Ingress" in types
        self.egress = "Egress" in types

    def ns_labels(self, ns: str) -> dict[str, str]:
        return {**self.w.namespaces[ns], "kubernetes.io/metadata.name": ns}

    def plumbed(self, p: PodInfo) -> bool:
        return not p.host_network and p.key in self.w.addresses

    def members(self) -> list[PodInfo]:
        return [p for p in self.w.pods if p.namespace == "x" and self.plumbed(p)
                and _sel(self.spec.get("podSelector"), p.labels)]

    def peer_has(self, peer: dict[str, Any], target: PodInfo | str) -> bool:
        if "ipBlock" in peer:
            address = target if isinstance(target, str) else self.w.addresses[target.key][0]
            return _in_block(address, peer["ipBlock"])
        if isinstance(target, str) or not self.plumbed(target):
            return False
        if "namespaceSelector" in peer:
            if not _sel(peer["namespaceSelector"], self.ns_labels(target.namespace)):
                return False
        elif target.namespace != "x":
            return False
        return _sel(peer.get("podSelector"), target.labels)

    def port_has(self, port: dict[str, Any], dst: PodInfo | str, number: int, proto: str,
                 dst_by_pod_peer: bool) -> bool:
        if port.get("protocol", "TCP") != proto:
            return False
        want = port.get("port")
        if want is None:
            return True
        if isinstance(want, str):
            if isinstance(dst, str) or not dst_by_pod_peer:
                return False
            return any(n.name == want and n.protocol == proto and n.port == number
                       for n in dst.named_ports)
        return want <= number <= port.get("endPort", want)

    def allows(self, direction: str, member: PodInfo, other: PodInfo | str, number: int,
               proto: str) -> bool:
        peer_key = "from" if direction == "ingress" else "to"
        dst = member if direction == "ingress" else other
        for rule in self.spec.get(direction) or ():
            peers_ = rule.get(peer_key) or None
            if peers_ is None:
                matched = [{"podSelector": {}, "namespaceSelector": {}}]  # any pod
                by_pod = not isinstance(other, str) and self.plumbed(other)
                peer_ok = True
            else:
                matched = [p for p in peers_ if self.peer_has(p, other)]
                by_pod = any("ipBlock" not in p for p in matched)
                peer_ok = bool(matched)
            if not peer_ok:
                continue
            # a named port on egress resolves on the destination pod, matched as a pod
            pod_peer = True if direction == "ingress" else by_pod
            rule_ports = rule.get("ports") or None
            if rule_ports is None or any(self.port_has(p, dst, number, proto, pod_peer)
                                         for p in rule_ports):
                return True
        return False


def _allowed(clauses: tuple[PolicyRule, ...], member: str, address: str, number: int,
             proto: str) -> bool:
    ip = ipaddress.ip_address(address)
    for c in clauses:
        if c.members is not None and member not in c.members:
            continue
        if c.peers is not None and not any(ip in ipaddress.ip_network(n) for n in c.peers):
            continue
        if not c.ports or any(
                p.protocol == proto and (p.port is None
                                         or p.port <= number <= (p.end_port or p.port))
                for p in c.ports):
            return True
    return False


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(specs(), worlds())
# a port name of another protocol than the container port's: it does not match
@example({"podSelector": {}, "ingress": [{"ports": [{"protocol": "UDP", "port": "http"}]}]},
         World((pod("x", "p0", ports=(NamedPort("http", 80),)), pod("x", "p1")),
               {"x/p0": ("10.0.0.1",), "x/p1": ("10.0.0.2",)}, {"x": {}, "y": {}, "z": {}}))
# one port name, two numbers: each member gets only its own
@example({"podSelector": {}, "ingress": [{"ports": [{"port": "http"}]}]},
         World((pod("x", "p0", ports=(NamedPort("http", 80),)),
                pod("x", "p1", ports=(NamedPort("http", 8080),))),
               {"x/p0": ("10.0.0.1",), "x/p1": ("10.0.0.2",)}, {"x": {}, "y": {}, "z": {}}))
# an except inside the block: the pods in it are not peers
@example({"podSelector": {}, "egress": [{"to": [
    {"ipBlock": {"cidr": "10.0.0.0/16", "except": ["10.0.1.0/24"]}}]}]},
         World((pod("x", "p0"), pod("y", "p0")),
               {"x/p0": ("10.0.0.1",), "y/p0": ("10.0.1.1",)}, {"x": {}, "y": {}, "z": {}}))
def test_resolve_matches_brute_force(spec: dict[str, Any], w: World) -> None:
    got = resolve(read_policy(policy(spec)),
                  MemoryView(w.pods, w.addresses, w.namespaces))
    expect = BruteForce(spec, w)
    members = expect.members()
    assert [m.key for m in got.members] == sorted(p.key for p in members)
    assert (got.ingress is not None, got.egress is not None) == (expect.ingress, expect.egress)
    assert not [f for f in got.findings if f.reason != FindingReason.UNRESOLVED_NAMED_PORT]
    others: list[PodInfo | str] = [p for p in w.pods if expect.plumbed(p)]
    others += EXTERNAL
    for member in members:
        for other in others:
            address = other if isinstance(other, str) else w.addresses[other.key][0]
            for number in PROBE_PORTS:
                for proto in ("TCP", "UDP"):
                    for direction, clauses in (("ingress", got.ingress),
                                               ("egress", got.egress)):
                        if clauses is None:
                            continue
                        want = expect.allows(direction, member, other, number, proto)
                        have = _allowed(clauses, member.key, address, number, proto)
                        assert have == want, (direction, member.key, other, number, proto,
                                              clauses)
