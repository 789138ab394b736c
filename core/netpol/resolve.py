"""A policy resolved against pods and namespaces: :func:`resolve` turns a
:class:`~podnet.core.netpol.wire.PolicySpec` into the
:class:`~podnet.hookspecs.netpol.ResolvedPolicy` dataplanes program — its members with
their addresses, and per direction the allowed clauses with peers as CIDRs and named
ports as numbers.

What it reads comes through a :class:`PolicyView` (the controller's caches, or the node
agent's informers). The semantics are the API's:

- members: the pods of the policy's namespace its ``podSelector`` matches, except
  host-network pods, pods that are done (``Succeeded``/``Failed``) and pods whose default
  network has no address yet (waiting, not failing: they join once they have one);
- a peer ``podSelector`` alone is the policy's namespace; ``namespaceSelector`` alone is
  every pod of the matching namespaces; both is the matching pods of the matching
  namespaces; pods are peers by their default network's addresses (a host prefix), and
  host-network pods are never peers by a selector (their address is their node's);
- a port by name resolves against the destination's container ports of that name and
  protocol: per member for ingress (a clause per number, limited to the members that
  have it), per peer pod for egress (a clause per number, with the peer pods that have
  it); a named port never matches an ``ipBlock`` peer.

Everything comes out sorted, so equal inputs give equal outputs.

The requeue helpers (:class:`PolicyIndex`) say which policies a change of a pod or a
namespace can change: a policy whose resolution cannot depend on the change is not
named.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Protocol as TypingProtocol

from podnet.core.netpol.wire import (
    EGRESS,
    INGRESS,
    NAMESPACE_NAME_LABEL,
    PeerSpec,
    PolicySpec,
    PortSpec,
    RuleSpec,
    Selector,
)
from podnet.hookspecs.models import PodInfo
from podnet.hookspecs.netpol import (
    FindingReason,
    PolicyFinding,
    PolicyMember,
    PolicyPort,
    PolicyRule,
    ResolvedPolicy,
)

#: pod phases with no network left: neither members nor peers
_DONE = frozenset({"Succeeded", "Failed"})


class PolicyView(TypingProtocol):
    """What resolution reads: pods, namespaces, addresses (core's caches or an agent's)."""

    def pods(self) -> Iterable[PodInfo]:
        """Every pod."""
        ...

    def pods_in(self, namespace: str) -> Iterable[PodInfo]:
        """The pods of one namespace (an index: resolution asks per namespace)."""
        ...

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """A namespace's labels; None when there is no such namespace."""
        ...

    def namespaces(self) -> Iterable[str]:
        """Every namespace's name."""
        ...

    def addresses_of(self, pod: PodInfo) -> tuple[str, ...]:
        """The pod's default-network addresses from its PodNetwork record (``()`` when
        it has none yet)."""
        ...

    def provider_of(self, pod: PodInfo) -> str | None:
        """The provider of the pod's default-network record, if it has one."""
        ...

    def node_addresses(self, node: str) -> tuple[str, ...]:
        """The node's own addresses (``InternalIP``)."""
        ...


def eligible(pod: PodInfo) -> bool:
    """Whether a pod can be a member or a peer by a selector at all."""
    return not pod.host_network and pod.phase not in _DONE


def selects(spec: PolicySpec, pod: PodInfo,
            namespace_labels: Mapping[str, str] | None = None) -> bool:
    """Whether ``spec`` selects ``pod`` as a member (its addresses aside).
    ``namespace_labels`` is accepted for symmetry with :func:`peer_matches`: a member is
    always of the policy's own namespace."""
    del namespace_labels
    return (pod.namespace == spec.namespace and eligible(pod)
            and spec.pod_selector.matches(pod.labels))


def namespace_view(name: str, labels: Mapping[str, str] | None) -> Mapping[str, str]:
    """A namespace's labels as selectors see them (with its name label)."""
    if labels is not None and labels.get(NAMESPACE_NAME_LABEL) == name:
        return labels
    return {**(labels or {}), NAMESPACE_NAME_LABEL: name}


def peer_matches(spec: PolicySpec, peer: PeerSpec, pod: PodInfo,
                 namespace_labels: Mapping[str, str] | None) -> bool:
    """Whether ``pod`` (in a namespace labelled ``namespace_labels``) is a pod of
    ``peer`` (its addresses aside)."""
    if not peer.selects_pods or not eligible(pod):
        return False
    if peer.namespace_selector is None:
        if pod.namespace != spec.namespace:
            return False
    elif not peer.namespace_selector.matches(namespace_view(pod.namespace, namespace_labels)):
        return False
    return peer.pod_selector is None or peer.pod_selector.matches(pod.labels)


def host_prefix(address: str) -> str:
    """An address (or an address with its prefix length) as its host prefix."""
    bare = address.split("/", 1)[0]
    return f"{bare}/128" if ":" in bare else f"{bare}/32"


def named_port(pod: PodInfo, name: str, protocol: str) -> int | None:
    """The number of ``pod``'s container port named ``name`` for ``protocol`` (as the
    API's own lookup: name and protocol both match, the first such port wins)."""
    for p in pod.named_ports:
        if p.name == name and p.protocol == protocol:
            return p.port
    return None


class _Resolution:
    """One resolve call: memoizes addresses and namespace labels."""

    def __init__(self, spec: PolicySpec, view: PolicyView) -> None:
        self.spec = spec
        self.view = view
        #: by the pod object's identity (a key is formatted on each read): the pod is
        #: kept with its answer, so an identity is never reused within a resolution
        self._addresses: dict[int, tuple[PodInfo, tuple[str, ...]]] = {}
        self._ns_labels: dict[str, Mapping[str, str]] = {}
        self.findings: list[PolicyFinding] = []

    def addresses(self, pod: PodInfo) -> tuple[str, ...]:
        got = self._addresses.get(id(pod))
        if got is None or got[0] is not pod:
            got = self._addresses[id(pod)] = (pod, self.view.addresses_of(pod))
        return got[1]

    def ns_labels(self, name: str) -> Mapping[str, str]:
        got = self._ns_labels.get(name)
        if got is None:
            got = self._ns_labels[name] = namespace_view(name, self.view.namespace_labels(name))
        return got

    def members(self) -> tuple[list[PodInfo], tuple[PolicyMember, ...]]:
        spec, view = self.spec, self.view
        pods: list[PodInfo] = []
        members: list[PolicyMember] = []
        node_addresses: dict[str, tuple[str, ...]] = {}
        for pod in view.pods_in(spec.namespace):
            if not selects(spec, pod) or not pod.node_name:
                continue
            addresses = self.addresses(pod)
            provider = view.provider_of(pod) if addresses else None
            if not addresses or provider is None:
                continue  # not plumbed yet: it joins once it has an address
            node = pod.node_name
            if node not in node_addresses:
                node_addresses[node] = tuple(sorted(view.node_addresses(node)))
            pods.append(pod)
            members.append(PolicyMember(
                key=pod.key, addresses=tuple(sorted(addresses)), node=node,
                provider=provider, node_addresses=node_addresses[node]))
        order = sorted(range(len(members)), key=lambda i: members[i].key)
        return [pods[i] for i in order], tuple(members[i] for i in order)

    def peer_pods(self, peers: tuple[PeerSpec, ...] | None) -> list[PodInfo]:
        """The pods (with addresses) that are peers of a rule; every eligible pod for
        ``None`` (any peer)."""
        spec, view = self.spec, self.view
        found: dict[str, PodInfo] = {}
        if peers is None:
            for pod in view.pods():
                if eligible(pod) and self.addresses(pod):
                    found[pod.key] = pod
            return [found[k] for k in sorted(found)]
        seen: set[int] = set()
        for peer in peers:
            if not peer.selects_pods:
                continue
            if peer.namespace_selector is None:
                namespaces: Iterable[str] = (spec.namespace,)
            elif peer.namespace_selector.everything:
                namespaces = view.namespaces()
            else:
                sel = peer.namespace_selector
                namespaces = [n for n in view.namespaces() if sel.matches(self.ns_labels(n))]
            pod_sel = peer.pod_selector
            for ns in namespaces:
                for pod in view.pods_in(ns):
                    if id(pod) in seen or not eligible(pod):
                        continue
                    if pod_sel is not None and not pod_sel.matches(pod.labels):
                        continue
                    if self.addresses(pod):
                        seen.add(id(pod))
                        found[pod.key] = pod
        return [found[k] for k in sorted(found)]

    def peer_cidrs(self, peers: tuple[PeerSpec, ...] | None,
                   pods: list[PodInfo]) -> tuple[str, ...] | None:
        if peers is None:
            return None
        out: set[str] = set()
        for peer in peers:
            if peer.cidrs is not None and peer.valid:
                out.update(peer.cidrs)
        for pod in pods:
            out.update(host_prefix(a) for a in self.addresses(pod))
        return tuple(sorted(out))

    def rule(self, direction: str, index: int, rule: RuleSpec,
             members: list[PodInfo]) -> list[PolicyRule]:
        if rule.allows_nothing:
            return []
        field = f"spec.{direction.lower()}[{index}]"
        numbered = [p for p in rule.ports or () if p.name is None]
        named = [(i, p) for i, p in enumerate(rule.ports or ()) if p.name is not None]
        needs_pods = named and direction == EGRESS
        pods = (self.peer_pods(rule.peers)
                if rule.peers is not None or needs_pods else [])
        selected_pods = pods if rule.peers is not None else []
        cidrs = self.peer_cidrs(rule.peers, selected_pods)
        out: list[PolicyRule] = []
        if rule.ports is None or numbered:
            out.append(PolicyRule(peers=cidrs, ports=tuple(_policy_port(p) for p in numbered)))
        if not named:
            return out
        if direction == INGRESS:
            # per member: the clause's peers, on the member's own port of that name
            by_members: dict[tuple[str, ...], set[PolicyPort]] = defaultdict(set)
            for i, port in named:
                by_number: dict[int, list[str]] = defaultdict(list)
                for pod in members:
                    number = named_port(pod, port.name or "", port.protocol)
                    if number is not None:
                        by_number[number].append(pod.key)
                self._unresolved(by_number, members, port, f"{field}.ports[{i}].port",
                                 "member")
                for number, keys in by_number.items():
                    by_members[tuple(sorted(keys))].add(PolicyPort(port.protocol, number))
            for member_keys in sorted(by_members):
                out.append(PolicyRule(peers=cidrs, ports=_sorted_ports(by_members[member_keys]),
                                      members=member_keys))
        else:
            # per peer pod: the pods that have a port of that name, on its number
            by_peers: dict[tuple[str, ...], set[PolicyPort]] = defaultdict(set)
            for i, port in named:
                by_number_pods: dict[int, list[PodInfo]] = defaultdict(list)
                for pod in pods:
                    number = named_port(pod, port.name or "", port.protocol)
                    if number is not None:
                        by_number_pods[number].append(pod)
                self._unresolved(by_number_pods, pods, port, f"{field}.ports[{i}].port",
                                 "peer pod")
                for number, peer_pods in by_number_pods.items():
                    prefixes = tuple(sorted({host_prefix(a) for p in peer_pods
                                             for a in self.addresses(p)}))
                    by_peers[prefixes].add(PolicyPort(port.protocol, number))
            for prefixes in sorted(by_peers):
                out.append(PolicyRule(peers=prefixes, ports=_sorted_ports(by_peers[prefixes])))
        return out

    def _unresolved(self, found: Mapping[int, object], pods: list[PodInfo], port: PortSpec,
                    field: str, what: str) -> None:
        if found or not pods:
            return
        names = ", ".join(p.key for p in pods[:3]) + (" ..." if len(pods) > 3 else "")
        self.findings.append(PolicyFinding(
            field, FindingReason.UNRESOLVED_NAMED_PORT,
            f"no {what} ({names}) has a {port.protocol} container port named "
            f"{port.name!r}: the port matches nothing"))


def _policy_port(p: PortSpec) -> PolicyPort:
    return PolicyPort(p.protocol, p.port, p.end_port)


def _port_order(p: PolicyPort) -> tuple[str, int, int]:
    return (p.protocol.value, p.port or 0, p.end_port or 0)


def _sorted_ports(ports: Iterable[PolicyPort]) -> tuple[PolicyPort, ...]:
    return tuple(sorted(ports, key=_port_order))


def resolve(spec: PolicySpec, view: PolicyView) -> ResolvedPolicy:
    """``spec`` resolved against ``view``: members, clauses and findings (the reading's
    and the named ports no pod has)."""
    res = _Resolution(spec, view)
    member_pods, members = res.members()
    directions: dict[str, tuple[PolicyRule, ...] | None] = {INGRESS: None, EGRESS: None}
    for direction, rules in spec.rules():
        clauses: list[PolicyRule] = []
        for i, rule in enumerate(rules):
            clauses.extend(res.rule(direction, i, rule, member_pods))
        directions[direction] = tuple(clauses)
    return ResolvedPolicy(
        namespace=spec.namespace, name=spec.name, uid=spec.uid, generation=spec.generation,
        members=members, ingress=directions[INGRESS], egress=directions[EGRESS],
        findings=spec.findings + tuple(res.findings))


# --- requeue ---------------------------------------------------------------------------


def pod_peers(spec: PolicySpec) -> list[tuple[str, RuleSpec, PeerSpec | None]]:
    """Each (direction, rule, peer) by which a pod can be a peer of ``spec``: selector
    peers, and ``None`` for an egress rule to any peer with a named port (every pod's
    named ports count)."""
    out: list[tuple[str, RuleSpec, PeerSpec | None]] = []
    for direction, rules in spec.rules():
        for rule in rules:
            if rule.allows_nothing:
                continue
            if rule.peers is None:
                if direction == EGRESS and any(p.name for p in rule.ports or ()):
                    out.append((direction, rule, None))
                continue
            out.extend((direction, rule, p) for p in rule.peers if p.selects_pods)
    return out


def affects(spec: PolicySpec, pod: PodInfo, namespace_labels: Mapping[str, str] | None) -> bool:
    """Whether ``pod`` (as it is, or was) can take part in ``spec``'s resolution: as a
    member, or as a peer."""
    if selects(spec, pod):
        return True
    for _, _, peer in pod_peers(spec):
        if peer is None:
            if eligible(pod):
                return True
        elif peer_matches(spec, peer, pod, namespace_labels):
            return True
    return False


def _selectors_of_namespaces(spec: PolicySpec) -> list[Selector]:
    return [p.namespace_selector for _, _, p in pod_peers(spec)
            if p is not None and p.namespace_selector is not None]


class PolicyIndex:
    """The policies core knows, indexed for requeue: which can change when a pod or a
    namespace changes. Not thread-safe: its owner serializes updates."""

    def __init__(self) -> None:
        self._specs: dict[str, PolicySpec] = {}
        #: policies whose members or same-namespace peers live in a namespace
        self._by_namespace: dict[str, set[str]] = defaultdict(set)
        #: policies with a peer by namespaceSelector, or to any pod by a named port
        self._cluster_wide: set[str] = set()

    def __len__(self) -> int:
        return len(self._specs)

    def __contains__(self, key: object) -> bool:
        return key in self._specs

    def get(self, key: str) -> PolicySpec | None:
        return self._specs.get(key)

    def keys(self) -> list[str]:
        return sorted(self._specs)

    def put(self, spec: PolicySpec) -> None:
        self.remove(spec.key)
        self._specs[spec.key] = spec
        self._by_namespace[spec.namespace].add(spec.key)
        if any(peer is None or peer.namespace_selector is not None
               for _, _, peer in pod_peers(spec)):
            self._cluster_wide.add(spec.key)

    def remove(self, key: str) -> None:
        spec = self._specs.pop(key, None)
        if spec is None:
            return
        keys = self._by_namespace.get(spec.namespace)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_namespace[spec.namespace]
        self._cluster_wide.discard(key)

    def selecting(self, pod: PodInfo) -> list[str]:
        """The policies that select ``pod`` as a member."""
        return sorted(k for k in self._by_namespace.get(pod.namespace, ())
                      if selects(self._specs[k], pod))

    def for_pod(self, pods: Iterable[PodInfo | None],
                namespace_labels: Mapping[str, str] | None) -> list[str]:
        """The policies a change of one pod can change: pass the pod as it was and as it
        is (None for either side of a create or delete)."""
        states = [p for p in pods if p is not None]
        if not states or not self._specs:
            return []
        candidates = set(self._cluster_wide)
        for pod in states:
            candidates |= self._by_namespace.get(pod.namespace, set())
        return sorted(k for k in candidates
                      if any(affects(self._specs[k], p, namespace_labels) for p in states))

    def for_namespace(self, name: str, old: Mapping[str, str] | None,
                      new: Mapping[str, str] | None) -> list[str]:
        """The policies a namespace's label change can change (a namespaceSelector whose
        answer differs)."""
        if not self._cluster_wide:
            return []
        before, after = namespace_view(name, old), namespace_view(name, new)
        out = []
        for key in self._cluster_wide:
            for sel in _selectors_of_namespaces(self._specs[key]):
                if sel.matches(before) != sel.matches(after):
                    out.append(key)
                    break
        return sorted(out)
