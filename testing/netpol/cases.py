"""The named policy cases of the truth table, over the upstream suite's world: namespaces
``x``, ``y``, ``z`` (labelled ``ns=<name>``) with pods ``a``, ``b``, ``c`` each (labelled
``pod=<name>``), every pod serving TCP and UDP (and SCTP where the kernel has it) on 80
and 81.

Every pod has the container ports ``serve-<port>-<protocol>`` for those; two names resolve
differently per pod, for the named-port cases: ``web`` is 80/TCP on ``a``, 81/TCP on
``b`` and missing on ``c``; ``dns`` is 81/UDP on ``a``, 80/UDP on ``c`` and missing on ``b``.

A :class:`Case` is a list of NetworkPolicy objects (JSON, as ``kubectl`` applies them),
built from the pods' addresses where an ``ipBlock`` needs them, and optional label
changes of pods and namespaces applied with it (and undone after it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from podnet.testing.netpol.oracle import Cluster, ContainerPort, Pod

__all__ = [
    "CASES", "NAMESPACES", "PODS", "PORTS", "Case", "base_cluster", "container_ports",
    "pod_object", "relabelled",
]

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")
PORTS = (80, 81)

Policy = dict[str, Any]
#: labels to merge over a pod's or namespace's (None removes the key)
LabelChange = Mapping[str, str | None]


def container_ports(pod: str) -> tuple[ContainerPort, ...]:
    """The named container ports of pod ``pod`` (``a``, ``b`` or ``c``), in every
    namespace."""
    served = tuple(ContainerPort(f"serve-{port}-{proto.lower()}", port, proto)
                   for port in PORTS for proto in ("TCP", "UDP", "SCTP"))
    varying = {"a": (ContainerPort("web", 80), ContainerPort("dns", 81, "UDP")),
               "b": (ContainerPort("web", 81),),
               "c": (ContainerPort("dns", 80, "UDP"),)}[pod]
    return served + varying


def base_cluster(addresses: Mapping[str, Sequence[str]], nodes: Mapping[str, str] | None = None,
                 node_addresses: Mapping[str, tuple[str, ...]] | None = None) -> Cluster:
    """The world before any case: ``addresses`` maps each pod key (``x/a``) to its
    addresses, ``nodes`` to its node."""
    pods = tuple(Pod(namespace=ns, name=name, labels={"pod": name},
                     ports=container_ports(name), addresses=tuple(addresses[f"{ns}/{name}"]),
                     node=(nodes or {}).get(f"{ns}/{name}", ""))
                 for ns in NAMESPACES for name in PODS)
    return Cluster(pods=pods, namespaces={ns: {"ns": ns} for ns in NAMESPACES},
                   node_addresses=dict(node_addresses or {}))


def pod_object(namespace: str, name: str, node: str,
               labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The running Pod of pod ``name`` of ``namespace``, bound to ``node``, with its
    labels and named container ports."""
    ports = [{"name": p.name, "containerPort": p.port, "protocol": p.protocol}
             for p in container_ports(name)]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": dict(labels or {"pod": name})},
            "spec": {"nodeName": node,
                     "containers": [{"name": "c", "image": "busybox", "ports": ports}]},
            "status": {"phase": "Running"}}


def _merge(labels: Mapping[str, str], change: LabelChange) -> dict[str, str]:
    out = dict(labels)
    for key, value in change.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def relabelled(cluster: Cluster, pods: Mapping[str, LabelChange],
               namespaces: Mapping[str, LabelChange]) -> Cluster:
    """``cluster`` with the label changes of a case applied."""
    return Cluster(
        pods=tuple(attrs.evolve(p, labels=_merge(p.labels, pods[p.key])) if p.key in pods
                   else p for p in cluster.pods),
        namespaces={ns: _merge(labels, namespaces.get(ns, {}))
                    for ns, labels in cluster.namespaces.items()},
        node_addresses=cluster.node_addresses)


@attrs.frozen
class Case:
    """One named case: its policies (built from the world, for ``ipBlock``s), and the
    label changes applied with them."""

    name: str
    build: Callable[[Cluster], list[Policy]]
    pod_labels: Mapping[str, LabelChange] = attrs.field(factory=dict)
    namespace_labels: Mapping[str, LabelChange] = attrs.field(factory=dict)
    #: which item of the API it covers
    covers: str = ""

    def policies(self, cluster: Cluster) -> list[Policy]:
        return self.build(cluster)

    def cluster(self, base: Cluster) -> Cluster:
        """The world the case's policies apply to: ``base`` with its label changes."""
        return relabelled(base, self.pod_labels, self.namespace_labels)

    def __str__(self) -> str:
        return self.name


# --- building blocks ------------------------------------------------------------------------


def netpol(namespace: str, name: str, spec: Mapping[str, Any]) -> Policy:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace}, "spec": dict(spec)}


def labels(**match: str) -> dict[str, Any]:
    return {"matchLabels": dict(match)}


def expression(key: str, operator: str, *values: str) -> dict[str, Any]:
    expr: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expr["values"] = list(values)
    return {"matchExpressions": [expr]}


A = labels(pod="a")
ALL: dict[str, Any] = {}


def _pod_addresses(cluster: Cluster, *keys: str) -> list[str]:
    return [a for k in keys for a in cluster.pod(k).addresses]


def covering(cluster: Cluster) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Per family, the smallest prefix holding every pod address (the pods' network)."""
    out = []
    for version in (4, 6):
        ips = [ipaddress.ip_address(a) for p in cluster.pods for a in p.addresses
               if ipaddress.ip_address(a).version == version]
        if not ips:
            continue
        bits = 32 if version == 4 else 128
        net = ipaddress.ip_network(f"{ips[0]}/{bits}")
        while not all(ip in net for ip in ips):
            net = net.supernet()
        out.append(net)
    return out


def host_prefix(address: str) -> str:
    return f"{address}/{32 if ipaddress.ip_address(address).version == 4 else 128}"


def ip_blocks(cluster: Cluster, *, excepted: Sequence[str] = ()) -> list[dict[str, Any]]:
    """``ipBlock`` peers covering every pod, one per family, the addresses of the pods
    ``excepted`` (keys) cut out."""
    out = []
    for net in covering(cluster):
        cut = [host_prefix(a) for a in _pod_addresses(cluster, *excepted)
               if ipaddress.ip_address(a).version == net.version]
        block: dict[str, Any] = {"cidr": str(net)}
        if cut:
            block["except"] = cut
        out.append({"ipBlock": block})
    return out


def only_blocks(cluster: Cluster, *keys: str) -> list[dict[str, Any]]:
    """``ipBlock`` peers holding exactly the addresses of pods ``keys``."""
    return [{"ipBlock": {"cidr": host_prefix(a)}} for a in _pod_addresses(cluster, *keys)]


def static(*policies: Policy) -> Callable[[Cluster], list[Policy]]:
    return lambda _cluster: list(policies)


def deny_ingress(ns: str, name: str = "deny-ingress") -> Policy:
    return netpol(ns, name, {"podSelector": {}})


def deny_egress(ns: str, name: str = "deny-egress") -> Policy:
    return netpol(ns, name, {"podSelector": {}, "policyTypes": ["Egress"]})


def into_a(*rules: Mapping[str, Any], name: str = "into-a") -> Policy:
    """A policy on x/a allowing ``rules`` in."""
    return netpol("x", name, {"podSelector": A, "policyTypes": ["Ingress"],
                              "ingress": [dict(r) for r in rules]})


def out_of_a(*rules: Mapping[str, Any], name: str = "out-of-a") -> Policy:
    """A policy on x/a allowing ``rules`` out."""
    return netpol("x", name, {"podSelector": A, "policyTypes": ["Egress"],
                              "egress": [dict(r) for r in rules]})


# --- the cases -----------------------------------------------------------------------------


def _cases() -> list[Case]:
    c: list[Case] = []

    def case(name: str, covers: str, *policies: Policy, **labels: Any) -> None:
        c.append(Case(name, static(*policies), covers=covers, **labels))

    def built(name: str, covers: str, build: Callable[[Cluster], list[Policy]]) -> None:
        c.append(Case(name, build, covers=covers))

    case("no-policy", "pods no policy selects are open")
    case("deny-all-ingress", "podSelector {}, policyTypes defaulted, no rules: default deny",
         deny_ingress("x"))
    case("deny-all-ingress-explicit", "policyTypes [Ingress], ingress []",
         netpol("x", "deny", {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": []}))
    case("deny-all-egress", "policyTypes [Egress] only, no rules: default deny egress",
         deny_egress("x"))
    case("deny-all-both", "policyTypes [Ingress, Egress], no rules: deny all",
         netpol("x", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))
    case("allow-all-ingress", "ingress [{}]: allow all",
         netpol("x", "allow", {"podSelector": {}, "ingress": [{}]}))
    case("allow-all-egress", "egress [{}] with policyTypes [Egress]: allow all out",
         netpol("x", "allow", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [{}]}))
    case("deny-then-allow-all-additive", "several policies: union (allow-all wins)",
         deny_ingress("x"), netpol("x", "allow", {"podSelector": {}, "ingress": [{}]}))
    case("select-one-pod", "podSelector matchLabels selects one pod",
         netpol("x", "deny-a", {"podSelector": A}))
    case("select-no-pod", "a podSelector that matches nothing changes nothing",
         netpol("x", "deny-none", {"podSelector": labels(pod="nobody")}))
    case("ingress-from-pod-same-namespace", "from podSelector alone: the policy's namespace",
         into_a({"from": [{"podSelector": labels(pod="b")}]}))
    case("ingress-from-all-pods-same-namespace", "from podSelector {}",
         into_a({"from": [{"podSelector": ALL}]}))
    case("ingress-from-namespace", "from namespaceSelector alone: all its pods",
         into_a({"from": [{"namespaceSelector": labels(ns="y")}]}))
    case("ingress-from-all-namespaces", "from namespaceSelector {}",
         into_a({"from": [{"namespaceSelector": ALL}]}))
    case("ingress-from-pod-and-namespace", "podSelector and namespaceSelector in one peer",
         into_a({"from": [{"namespaceSelector": labels(ns="y"),
                           "podSelector": labels(pod="b")}]}))
    case("ingress-from-pod-or-namespace", "two peers: either",
         into_a({"from": [{"namespaceSelector": labels(ns="y")},
                          {"podSelector": labels(pod="b")}]}))
    case("ingress-from-pod-in-all-namespaces", "namespaceSelector {} with a podSelector",
         into_a({"from": [{"namespaceSelector": ALL, "podSelector": labels(pod="b")}]}))
    case("ingress-empty-from-list", "from [] is any peer",
         into_a({"from": []}))
    case("ingress-port-80", "port by number, protocol defaulted to TCP",
         into_a({"ports": [{"port": 80}]}))
    case("ingress-udp-81", "UDP by number", into_a({"ports": [{"protocol": "UDP", "port": 81}]}))
    case("ingress-udp-any-port", "a protocol without a port: all its ports",
         into_a({"ports": [{"protocol": "UDP"}]}))
    case("ingress-tcp-any-port", "TCP without a port",
         into_a({"ports": [{"protocol": "TCP"}]}))
    case("ingress-end-port-80-81", "port..endPort covering both",
         into_a({"ports": [{"port": 80, "endPort": 81}]}))
    case("ingress-end-port-81-90", "port..endPort from 81",
         into_a({"ports": [{"protocol": "TCP", "port": 81, "endPort": 90}]}))
    case("ingress-two-ports", "several ports in a rule: either",
         into_a({"ports": [{"port": 80}, {"protocol": "UDP", "port": 81}]}))
    case("ingress-from-pod-on-port", "peers and ports in one rule: both",
         into_a({"from": [{"podSelector": labels(pod="b")}], "ports": [{"port": 81}]}))
    case("ingress-named-port", "port by name (the same on every pod)",
         netpol("x", "named", {"podSelector": {}, "ingress": [{"ports": [
             {"port": "serve-81-tcp"}]}]}))
    case("ingress-named-port-per-pod", "a name resolved per selected pod, missing on one",
         netpol("x", "web", {"podSelector": {}, "ingress": [{"ports": [{"port": "web"}]}]}))
    case("ingress-named-port-udp", "a UDP name resolved per pod",
         netpol("x", "dns", {"podSelector": {}, "ingress": [{"ports": [
             {"protocol": "UDP", "port": "dns"}]}]}))
    case("ingress-named-port-wrong-protocol", "a name whose container port has another "
         "protocol matches nothing", into_a({"ports": [{"port": "serve-80-udp"}]}))
    case("egress-to-pod-same-namespace", "to podSelector alone",
         out_of_a({"to": [{"podSelector": labels(pod="b")}]}))
    case("egress-to-namespace", "to namespaceSelector alone",
         out_of_a({"to": [{"namespaceSelector": labels(ns="y")}]}))
    case("egress-to-pod-and-namespace", "to both selectors in one peer",
         out_of_a({"to": [{"namespaceSelector": labels(ns="y"),
                           "podSelector": labels(pod="b")}]}))
    case("egress-port-81", "egress port by number", out_of_a({"ports": [{"port": 81}]}))
    case("egress-end-port-udp", "egress UDP port..endPort",
         netpol("x", "udp-out", {"podSelector": {}, "policyTypes": ["Egress"], "egress": [
             {"ports": [{"protocol": "UDP", "port": 80, "endPort": 81}]}]}))
    case("egress-named-port-per-peer", "egress port by name: resolved on each peer pod",
         out_of_a({"ports": [{"port": "web"}]}))
    case("egress-named-port-to-selected-peers", "egress to selected peers on a named port",
         out_of_a({"to": [{"namespaceSelector": ALL,
                           "podSelector": expression("pod", "In", "b", "c")}],
                   "ports": [{"port": "serve-80-tcp"}, {"protocol": "UDP", "port": "dns"}]}))
    built("ingress-ipblock-except", "ipBlock with except: a pod's address cut out",
          lambda w: [into_a({"from": ip_blocks(w, excepted=["y/b"])})])
    built("ingress-ipblock-one-pod", "ipBlock holding one pod's address only",
          lambda w: [into_a({"from": only_blocks(w, "z/c")})])
    built("egress-ipblock-except", "egress to an ipBlock with except",
          lambda w: [out_of_a({"to": ip_blocks(w, excepted=["z/c", "y/a"])})])
    built("egress-ipblock-port", "egress to an ipBlock on one port",
          lambda w: [out_of_a({"to": ip_blocks(w), "ports": [{"port": 80}]})])
    built("egress-ipblock-named-port", "a name never matches an ipBlock peer (egress)",
          lambda w: [out_of_a({"to": ip_blocks(w), "ports": [{"port": "web"}]})])
    built("ingress-ipblock-named-port", "ingress from an ipBlock on the member's named port",
          lambda w: [into_a({"from": ip_blocks(w), "ports": [{"port": "web"}]})])
    case("match-expressions-in", "podSelector matchExpressions In",
         netpol("x", "in", {"podSelector": expression("pod", "In", "a", "b")}))
    case("match-expressions-notin", "matchExpressions NotIn, pod and namespace selectors",
         into_a({"from": [{"namespaceSelector": expression("ns", "NotIn", "x"),
                           "podSelector": expression("pod", "NotIn", "a")}]}))
    case("match-expressions-exists", "matchExpressions Exists / DoesNotExist",
         netpol("y", "tier", {"podSelector": expression("tier", "Exists"), "ingress": [
             {"from": [{"namespaceSelector": ALL,
                        "podSelector": expression("tier", "DoesNotExist")}]}]}),
         pod_labels={"y/b": {"tier": "db"}, "z/a": {"tier": "web"}})
    case("additive-two-policies", "two policies on one pod: the union of their rules",
         into_a({"from": [{"podSelector": labels(pod="b")}]}, name="from-b"),
         into_a({"from": [{"namespaceSelector": labels(ns="z")}]}, name="from-z"))
    case("additive-ingress-and-egress", "an Ingress policy and an Egress policy on one pod",
         into_a({"from": [{"namespaceSelector": labels(ns="y")}]}),
         out_of_a({"to": [{"namespaceSelector": labels(ns="z")}]}))
    case("ingress-and-egress-one-policy", "one policy with both directions",
         netpol("x", "both", {"podSelector": A, "policyTypes": ["Ingress", "Egress"],
                              "ingress": [{"from": [{"namespaceSelector": labels(ns="y")}]}],
                              "egress": [{"to": [{"namespaceSelector": labels(ns="z")}]}]}))
    case("other-namespace-policy", "a policy selects only pods of its own namespace",
         netpol("z", "deny-a", {"podSelector": A, "policyTypes": ["Ingress", "Egress"]}))
    case("deny-all-in-another-namespace", "deny all in y: x and z still talk",
         netpol("y", "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}))
    case("egress-types-ignore-ingress-rules", "policyTypes [Egress]: its ingress rules ignored",
         netpol("x", "egress-only", {"podSelector": {}, "policyTypes": ["Egress"],
                                     "ingress": [{"from": [{"podSelector": labels(pod="z")}]}],
                                     "egress": [{}]}))
    case("default-types-with-egress", "policyTypes absent with egress rules: both",
         netpol("x", "isolate", {"podSelector": {}, "egress": [{"to": [{"podSelector": {}}]}]}))
    case("default-deny-egress-everywhere", "deny egress in every namespace",
         *(deny_egress(ns) for ns in NAMESPACES))
    case("deny-all-everywhere", "deny both ways in every namespace",
         *(netpol(ns, "deny", {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]})
           for ns in NAMESPACES))
    case("default-deny-one-allowed-pair", "a default-deny namespace with one allowed pair",
         deny_ingress("x"),
         netpol("x", "b-from-y-a", {"podSelector": labels(pod="b"), "ingress": [{
             "from": [{"namespaceSelector": labels(ns="y"), "podSelector": A}],
             "ports": [{"port": 80}]}]}))
    case("namespace-relabelled", "a namespace's labels decide namespaceSelector",
         into_a({"from": [{"namespaceSelector": labels(ns="y")}]}),
         namespace_labels={"z": {"ns": "y"}, "y": {"ns": "yy"}})
    case("pod-relabelled", "a pod's labels decide podSelector",
         into_a({"from": [{"podSelector": labels(pod="b")}]}),
         pod_labels={"x/c": {"pod": "b"}})
    case("sctp-only", "SCTP by protocol (TCP and UDP denied)",
         into_a({"ports": [{"protocol": "SCTP"}]}))
    return c


CASES: tuple[Case, ...] = tuple(_cases())
