"""The expected verdict of one connection under a set of NetworkPolicies.

Written from the ``networking.k8s.io/v1`` API's documented semantics, on the policies'
JSON as ``kubectl`` applies them, and on nothing of podnet: it never calls core's resolver,
so a truth table that agrees with this oracle checks core and the dataplane together.

The semantics (the API's):

- a policy selects the pods of its own namespace its ``podSelector`` matches (``{}``:
  all); host-network pods are never selected;
- ``policyTypes`` absent: ``Ingress``, plus ``Egress`` when ``spec.egress`` is non-empty;
- a pod no policy selects for a direction is open that way; a selected pod allows only
  what the union of its policies' rules that direction allow (an empty rule list: none);
- a connection from S to D passes when S's egress allows it and D's ingress allows it;
- a rule without ``from``/``to`` (or with an empty list) allows any peer; without
  ``ports`` (or with an empty list) every port of every protocol;
- a peer: ``podSelector`` alone matches pods of the policy's namespace,
  ``namespaceSelector`` alone every pod of the namespaces it matches, both together the
  pods matching the first in namespaces matching the second; ``ipBlock`` matches an
  address in its CIDR and in none of its ``except`` blocks (a host-network pod, whose
  address is its node's, is matched by ``ipBlock`` only);
- a port: ``protocol`` defaults to TCP; a number, a range ``port..endPort``, or a name
  resolved against the destination pod's container ports (ingress: the selected pod's,
  egress: the peer pod's; a container port of that name and protocol; a peer matched by
  ``ipBlock`` has no container ports, so a name never matches it); no ``port``: every
  port of that protocol;
- traffic between a pod and its own node's addresses always passes;
- a connection from a pod to itself never leaves its namespace: not judged here (the
  matrix leaves the diagonal out).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from podnet.testing.netpol.matrix import Matrix, Verdict

__all__ = [
    "Cluster", "ContainerPort", "Pod", "allowed", "egress_allows", "expected",
    "ingress_allows", "policy_types", "selector_matches", "selects",
]

Policy = Mapping[str, Any]


@attrs.frozen
class ContainerPort:
    """A named container port of a pod."""

    name: str
    port: int
    protocol: str = "TCP"


@attrs.frozen
class Pod:
    """What the oracle knows of a pod: where it is, its labels, its named ports, its
    addresses (both families of a dual-stack pod; a host-network pod's are its node's)."""

    namespace: str
    name: str
    labels: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    ports: tuple[ContainerPort, ...] = ()
    addresses: tuple[str, ...] = ()
    node: str = ""
    host_network: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def address(self, family: int) -> str | None:
        """Its address of IP version ``family`` (4 or 6), None when it has none."""
        for a in self.addresses:
            if ipaddress.ip_address(a).version == family:
                return a
        return None

    def named_port(self, name: str, protocol: str) -> int | None:
        """The number of its container port ``name`` of ``protocol``, None when it has no
        such port (none of that name, or one of another protocol)."""
        for p in self.ports:
            if p.name == name:
                return p.port if p.protocol == protocol else None
        return None


@attrs.frozen
class Cluster:
    """The pods, the namespaces' labels and the nodes' own addresses."""

    pods: tuple[Pod, ...]
    namespaces: Mapping[str, Mapping[str, str]] = attrs.field(hash=False)
    node_addresses: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, hash=False)

    def pod(self, key: str) -> Pod:
        for p in self.pods:
            if p.key == key:
                return p
        raise KeyError(key)


# --- selectors --------------------------------------------------------------------------


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector (``matchLabels`` and ``matchExpressions``, all ANDed)
    matches ``labels``; ``{}`` matches everything. An operator the API does not know
    matches nothing."""
    if selector is None:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op = expr.get("key"), expr.get("operator")
        values = list(expr.get("values") or ())
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            ok = False
        if not ok:
            return False
    return True


def _namespace(policy: Policy) -> str:
    return str(policy.get("metadata", {}).get("namespace", "default"))


def _spec(policy: Policy) -> Mapping[str, Any]:
    return policy.get("spec") or {}


def policy_types(policy: Policy) -> frozenset[str]:
    """The directions a policy restricts: its ``policyTypes``, or the API's default."""
    spec = _spec(policy)
    given = spec.get("policyTypes")
    if given:
        return frozenset(given)
    return frozenset(["Ingress", *(["Egress"] if spec.get("egress") else [])])


def selects(policy: Policy, pod: Pod) -> bool:
    """Whether ``policy`` selects ``pod`` (host-network pods never)."""
    if pod.host_network or pod.namespace != _namespace(policy):
        return False
    return selector_matches(_spec(policy).get("podSelector") or {}, pod.labels)


# --- peers and ports ----------------------------------------------------------------------


def _in_block(block: Mapping[str, Any], address: str | None) -> bool:
    if address is None:
        return False
    ip = ipaddress.ip_address(address)
    cidr = ipaddress.ip_network(block["cidr"], strict=False)
    excepts = [ipaddress.ip_network(e, strict=False) for e in block.get("except") or ()]
    if any(e.version != cidr.version or e == cidr or not e.subnet_of(cidr)  # type: ignore[arg-type]
           for e in excepts):
        # the API server refuses an except that is not a strict subset of its block; one
        # stored anyway matches nothing (what cannot be read never opens traffic)
        return False
    if ip.version != cidr.version or ip not in cidr:
        return False
    return not any(ip in e for e in excepts)


def _peer_matches(peer: Mapping[str, Any], policy_ns: str, other: Pod, address: str | None,
                  cluster: Cluster) -> tuple[bool, bool]:
    """Whether ``peer`` matches ``other`` (at ``address``), and whether it matched it as
    a pod (a selector) rather than by ``ipBlock``."""
    if "ipBlock" in peer:
        return _in_block(peer["ipBlock"], address), False
    if other.host_network:
        return False, False
    pod_sel = peer.get("podSelector")
    ns_sel = peer.get("namespaceSelector")
    if ns_sel is None:
        ns_ok = other.namespace == policy_ns
    else:
        ns_ok = selector_matches(ns_sel, cluster.namespaces.get(other.namespace, {}))
    ok = ns_ok and selector_matches(pod_sel, other.labels)
    return ok, ok


def _port_matches(entry: Mapping[str, Any], port: int, protocol: str,
                  named_from: Pod | None) -> bool:
    """Whether a ``ports`` entry allows ``port``/``protocol``; a name is resolved against
    ``named_from`` (None: no pod to resolve it against, the name matches nothing)."""
    if entry.get("protocol", "TCP") != protocol:
        return False
    given = entry.get("port")
    if given is None:
        return True
    if isinstance(given, str):
        if named_from is None:
            return False
        number = named_from.named_port(given, protocol)
        return number is not None and number == port
    end = entry.get("endPort")
    if end is None:
        return port == int(given)
    return int(given) <= port <= int(end)


def _rule_allows(rule: Mapping[str, Any], peers_key: str, policy_ns: str, member: Pod,
                 other: Pod, other_address: str | None, port: int, protocol: str,
                 ingress: bool, cluster: Cluster) -> bool:
    peers = rule.get(peers_key) or []
    if peers:
        hits = [_peer_matches(p, policy_ns, other, other_address, cluster) for p in peers]
        if not any(ok for ok, _ in hits):
            return False
        as_pod = any(ok and pod for ok, pod in hits)
    else:
        as_pod = True  # any peer: a pod peer is a pod
    entries = rule.get("ports") or []
    if not entries:
        return True
    # a name resolves against the destination: the member for ingress, the peer for
    # egress (and then only where the peer matched as a pod)
    named_from = member if ingress else (other if as_pod and not other.host_network else None)
    return any(_port_matches(e, port, protocol, named_from) for e in entries)


def _node_traffic(member: Pod, other_address: str | None, cluster: Cluster) -> bool:
    return other_address is not None and other_address in cluster.node_addresses.get(
        member.node, ())


def _direction_allows(policies: Iterable[Policy], cluster: Cluster, member: Pod, other: Pod,
                      other_address: str | None, port: int, protocol: str,
                      ingress: bool) -> bool:
    kind, rules_key, peers_key = (("Ingress", "ingress", "from") if ingress
                                  else ("Egress", "egress", "to"))
    chosen = [p for p in policies if kind in policy_types(p) and selects(p, member)]
    if not chosen:
        return True
    if _node_traffic(member, other_address, cluster):
        return True
    return any(_rule_allows(rule, peers_key, _namespace(p), member, other, other_address,
                            port, protocol, ingress, cluster)
               for p in chosen for rule in _spec(p).get(rules_key) or ())


def ingress_allows(policies: Iterable[Policy], cluster: Cluster, src: Pod, dst: Pod,
                   port: int, protocol: str, family: int = 4) -> bool:
    """Whether ``dst``'s ingress lets a new connection from ``src`` in."""
    return _direction_allows(list(policies), cluster, dst, src, src.address(family), port,
                             protocol, ingress=True)


def egress_allows(policies: Iterable[Policy], cluster: Cluster, src: Pod, dst: Pod,
                  port: int, protocol: str, family: int = 4) -> bool:
    """Whether ``src``'s egress lets a new connection to ``dst`` out."""
    return _direction_allows(list(policies), cluster, src, dst, dst.address(family), port,
                             protocol, ingress=False)


def allowed(policies: Sequence[Policy], cluster: Cluster, src: Pod, dst: Pod, port: int,
            protocol: str, family: int = 4) -> bool:
    """Whether a new connection from ``src`` to ``dst`` on ``port``/``protocol`` over IP
    version ``family`` passes: ``src``'s egress and ``dst``'s ingress both allow it."""
    return (egress_allows(policies, cluster, src, dst, port, protocol, family)
            and ingress_allows(policies, cluster, src, dst, port, protocol, family))


def expected(policies: Sequence[Policy], cluster: Cluster, ports: Sequence[tuple[int, str]],
             family: int = 4, pods: Sequence[str] | None = None) -> Matrix:
    """The expected truth table over ``pods`` (keys; default: every pod with an address
    of ``family``) and ``ports`` (``(port, protocol)``)."""
    keys = list(pods) if pods is not None else [
        p.key for p in cluster.pods if p.address(family) is not None]
    m = Matrix.of(keys, ports)
    for src, dst, port, protocol in m.judged():
        ok = allowed(policies, cluster, cluster.pod(src), cluster.pod(dst), port, protocol,
                     family)
        m[(src, dst, port, protocol)] = Verdict.PASS if ok else Verdict.DROP
    return m
