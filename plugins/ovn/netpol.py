"""NetworkPolicy as OVN rows (pure: no ovsdbapp here): a :class:`ResolvedPolicy` becomes a
port group holding its members' logical switch ports, an address set per rule and family
for its peers, and ACLs; the security groups' port groups are composed with it so that a
port under both layers gets only what both allow.

OVN 23.03 has one ACL stage per direction, where the highest-priority ACL that matches
decides (no ``tier`` column, no ``pass`` action: both came in 23.06). The layers are
priority bands; for a port under a security group and a policy, the policy's clauses are
written once more ANDed with every security group rule (``outport == @np_… && outport ==
@sg_…`` matches only the ports in both groups) above a drop of the rest for those ports:

========  ================  =================================================================
priority  action            match
========  ================  =================================================================
2050      allow-related     policy clause AND security group rule, on ports in both groups
2045      drop              ports in the policy's group and in a security group restricting
                            that direction
2030      allow-related     policy clause (peers, ports, the members' node addresses)
2020      drop              the policy's members, IP (the direction is restricted)
2010      allow-related     security group rule (``secgroups.py``)
2000      drop              the security group's members, IP
========  ================  =================================================================

A port under policies only stops at 2030/2020 (the union of its policies' clauses); under
security groups only, at 2010/2000; under both, at 2050/2045: what a clause of one of its
policies and a rule of one of its groups both allow. The products depend on the security
groups' rules, not on who is a member (OVN intersects the two port groups), so they are
written again only when a group's rules change (:func:`policy_acls` from the clauses each
clause ACL carries as JSON in its external_ids).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from collections.abc import Iterable, Mapping, Sequence

import attrs

from podnet.hookspecs.netpol import (
    FindingReason,
    PolicyFinding,
    PolicyPort,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)
from podnet.plugins.ovn.secgroups import BadGroup, Rule, SecurityGroup, port_group_of

__all__ = [
    "NP_CLAUSE",
    "NP_GROUPS",
    "NP_KEY",
    "NP_SETS",
    "PRIORITY_ALLOW",
    "PRIORITY_BOTH_ALLOW",
    "PRIORITY_BOTH_DROP",
    "PRIORITY_DROP",
    "Clause",
    "PolicyAcl",
    "PolicyRows",
    "groups_digest",
    "policy_acls",
    "policy_port_group",
    "policy_rows",
]

PRIORITY_BOTH_ALLOW = 2050
PRIORITY_BOTH_DROP = 2045
PRIORITY_ALLOW = 2030
PRIORITY_DROP = 2020
#: external_ids on a policy's port group, address sets and ACLs: the policy's key
NP_KEY = "podnet/np"
#: on a policy's port group: the names of its address sets, comma-separated
NP_SETS = "podnet/np-sets"
#: on a policy's port group: a digest of the security groups its products were made from
#: (the sync re-makes the products of the port groups whose digest is not the groups')
NP_GROUPS = "podnet/np-groups"
#: on a clause ACL (priority 2030): the clause as JSON (the products are made from it)
NP_CLAUSE = "podnet/np-clause"

INGRESS = "to-lport"
EGRESS = "from-lport"
_SIDE = {INGRESS: ("outport", "src"), EGRESS: ("inport", "dst")}
_PROTOCOLS = {Protocol.TCP: "tcp", Protocol.UDP: "udp", Protocol.SCTP: "sctp"}


def policy_port_group(key: str) -> str:
    """The port group of policy ``key`` (``namespace/name``): a digest, as OVN names are
    letters, digits and ``_`` and a key may be 317 characters."""
    return "np_" + hashlib.sha256(key.encode()).hexdigest()[:20]


@attrs.frozen
class Clause:
    """One allowed kind of traffic of a policy, in one direction: to (ingress) or from
    (egress) ``ports`` (logical switch port names; ``None``: every member), from or to
    ``peer`` (an address set ``$name`` or an inline set; ``None``: anywhere) of ``family``
    (4, 6; ``None``: any), ``protocol`` (``tcp``, ``udp``, ``sctp``; ``None``: any) to
    destination ports ``low``..``high`` (``None``: any)."""

    direction: str
    ports: tuple[str, ...] | None = None
    family: int | None = None
    peer: str | None = None
    protocol: str | None = None
    low: int | None = None
    high: int | None = None

    def to_json(self) -> str:
        return json.dumps(attrs.asdict(self), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Clause:
        raw = json.loads(text)
        ports = raw.get("ports")
        return cls(direction=raw["direction"],
                   ports=None if ports is None else tuple(ports),
                   family=raw.get("family"), peer=raw.get("peer"),
                   protocol=raw.get("protocol"), low=raw.get("low"), high=raw.get("high"))


@attrs.frozen
class PolicyAcl:
    """One ACL of a policy's port group (``clause``: the JSON of the clause it allows, on
    the 2030 ACLs only)."""

    direction: str
    priority: int
    match: str
    action: str
    clause: str = ""


@attrs.frozen
class PolicyRows:
    """What NB holds for one policy."""

    key: str
    port_group: str
    #: logical switch ports of the members, sorted
    ports: tuple[str, ...]
    #: address set name -> addresses, sorted by name
    address_sets: tuple[tuple[str, tuple[str, ...]], ...]
    acls: tuple[PolicyAcl, ...]
    findings: tuple[PolicyFinding, ...] = ()
    #: members left out (no logical switch port of theirs in NB yet)
    missing: tuple[str, ...] = ()
    #: :func:`groups_digest` of the security groups the products were made from
    groups: str = ""


def groups_digest(groups: Iterable[SecurityGroup | BadGroup]) -> str:
    """A digest of the security groups' names and rules (what the products depend on)."""
    text = repr(sorted(repr(g) for g in groups))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --- matches -------------------------------------------------------------------------------


def _quoted(names: Iterable[str]) -> str:
    return "{" + ", ".join(json.dumps(n) for n in names) + "}"


def _l4(protocol: str | None, low: int | None, high: int | None) -> str:
    if protocol is None:
        return ""
    if low is None or high is None:
        return protocol
    if low == high:
        return f"{protocol} && {protocol}.dst == {low}"
    return f"{protocol} && {protocol}.dst >= {low} && {protocol}.dst <= {high}"


def _body(family: int | None, peer: str | None, protocol: str | None, low: int | None,
          high: int | None, side: str) -> list[str]:
    parts = [f"ip{family}" if family else ("" if protocol else "ip")]
    if peer is not None:
        parts.append(f"ip{family}.{side} == {peer}")
    parts.append(_l4(protocol, low, high))
    return [p for p in parts if p]


def _port_part(clause: Clause, port_group: str) -> list[str]:
    field, _ = _SIDE[clause.direction]
    if clause.ports is None:
        return [f"{field} == @{port_group}"]
    return [f"{field} == {_quoted(clause.ports)}"]


def clause_match(clause: Clause, port_group: str) -> str:
    _, side = _SIDE[clause.direction]
    return " && ".join([*_port_part(clause, port_group),
                        *_body(clause.family, clause.peer, clause.protocol, clause.low,
                               clause.high, side)])


# --- security group rules, for the products ---------------------------------------------


@attrs.frozen
class _Term:
    """One security group rule of one family, as the parts a product needs."""

    family: int | None
    peer: str | None
    protocol: str | None
    low: int | None
    high: int | None


def _sg_terms(rule: Rule) -> list[_Term]:
    peers: list[tuple[int | None, str | None]] = []
    for version in (4, 6):
        nets = [c for c in rule.cidrs if ipaddress.ip_network(c).version == version]
        if nets:
            peers.append((version, nets[0] if len(nets) == 1 else "{" + ", ".join(nets) + "}"))
        for g in rule.groups:
            peers.append((version, f"${port_group_of(g)}_ip{version}"))
    if not rule.cidrs and not rule.groups:
        peers.append((None, None))
    low, high = rule.ports if rule.ports else (None, None)
    out = []
    for family, peer in peers:
        if rule.protocol == "all":
            out.append(_Term(family, peer, None, None, None))
        elif rule.protocol == "icmp":
            for version in (4, 6) if family is None else (family,):
                out.append(_Term(version, peer, f"icmp{version}", None, None))
        else:
            out.append(_Term(family, peer, rule.protocol, low, high))
    return out


def _product(clause: Clause, term: _Term, side: str) -> list[str] | None:
    """The body of ``clause`` AND ``term`` (``None``: they share no packet)."""
    if clause.family and term.family and clause.family != term.family:
        return None
    family = clause.family or term.family
    if clause.protocol and term.protocol and clause.protocol != term.protocol:
        return None
    protocol = clause.protocol or term.protocol
    low = high = None
    if clause.low is not None or term.low is not None:
        lows = [x for x in (clause.low, term.low) if x is not None]
        highs = [x for x in (clause.high, term.high) if x is not None]
        low, high = max(lows), min(highs)
        if low > high:
            return None
    parts = [f"ip{family}" if family else ("" if protocol else "ip")]
    for peer in (clause.peer, term.peer):
        if peer is not None:
            parts.append(f"ip{family}.{side} == {peer}")
    parts.append(_l4(protocol, low, high))
    return [p for p in parts if p]


def policy_acls(port_group: str, clauses: Sequence[Clause], restricted: Iterable[str],
                groups: Iterable[SecurityGroup | BadGroup]) -> list[PolicyAcl]:
    """The ACLs of a policy's port group: the drop of each restricted direction, the
    clauses above it, and for the ports also in a security group the products of the
    clauses and the group's rules above a drop of the rest (a group whose rules are bad:
    the drop only; its members get nothing of the policy through it)."""
    out: list[PolicyAcl] = []
    seen: set[tuple[str, int, str]] = set()

    def add(acl: PolicyAcl) -> None:
        if (acl.direction, acl.priority, acl.match) not in seen:
            seen.add((acl.direction, acl.priority, acl.match))
            out.append(acl)

    restricted = set(restricted)
    groups = sorted(groups, key=lambda g: g.name)
    for direction in (INGRESS, EGRESS):
        if direction not in restricted:
            continue
        field, side = _SIDE[direction]
        add(PolicyAcl(direction, PRIORITY_DROP, f"{field} == @{port_group} && ip", "drop"))
        mine = [c for c in clauses if c.direction == direction]
        for c in mine:
            add(PolicyAcl(direction, PRIORITY_ALLOW, clause_match(c, port_group),
                          "allow-related", c.to_json()))
        for group in groups:
            sg = port_group_of(group.name)
            rules = None if isinstance(group, BadGroup) else (
                group.ingress if direction == INGRESS else group.egress)
            if isinstance(group, BadGroup) or rules is not None:
                add(PolicyAcl(direction, PRIORITY_BOTH_DROP,
                              f"{field} == @{port_group} && {field} == @{sg} && ip", "drop"))
            if isinstance(group, BadGroup):
                continue
            terms = [t for r in (rules if rules is not None else (Rule(),))
                     for t in _sg_terms(r)]
            for c in mine:
                for t in terms:
                    body = _product(c, t, side)
                    if body is not None:
                        match = " && ".join([*_port_part(c, port_group), f"{field} == @{sg}",
                                             *body])
                        add(PolicyAcl(direction, PRIORITY_BOTH_ALLOW, match, "allow-related"))
    return out


# --- a resolved policy -------------------------------------------------------------------------


def _ports_of(rule_index: int, where: str, ports: Sequence[PolicyPort]
              ) -> tuple[list[tuple[str, int | None, int | None]], list[PolicyFinding]]:
    """(protocol, low, high) of each port OVN can match; a port it cannot is a finding
    and left out (a rule whose ports are all left out allows nothing: never all ports)."""
    out: list[tuple[str, int | None, int | None]] = []
    findings = []
    for j, p in enumerate(ports):
        field = f"spec.{where}[{rule_index}].ports[{j}]"
        protocol = _PROTOCOLS.get(p.protocol) if isinstance(p.protocol, Protocol) else None
        if protocol is None:
            findings.append(PolicyFinding(f"{field}.protocol", FindingReason.UNSUPPORTED_FIELD,
                                          f"protocol {p.protocol!r} is not one OVN ACLs "
                                          "match here (TCP, UDP, SCTP); this port allows "
                                          "nothing"))
            continue
        low, high = p.port, p.end_port if p.end_port is not None else p.port
        if low is None and p.end_port is not None:
            findings.append(PolicyFinding(f"{field}.endPort", FindingReason.INVALID_VALUE,
                                          "endPort without port; this port allows nothing"))
            continue
        if low is not None and not (1 <= low <= (high or 0) <= 65535):
            findings.append(PolicyFinding(f"{field}.port", FindingReason.INVALID_VALUE,
                                          f"port range {low}-{high} is not within 1-65535 "
                                          "in order; this port allows nothing"))
            continue
        out.append((protocol, low, high))
    return out, findings


def _peers(rule_index: int, where: str, peers: Sequence[str]
           ) -> tuple[dict[int, list[str]], list[PolicyFinding]]:
    by_family: dict[int, list[str]] = {}
    findings = []
    for peer in peers:
        try:
            net = ipaddress.ip_network(peer, strict=False)
        except ValueError:
            findings.append(PolicyFinding(f"spec.{where}[{rule_index}]",
                                          FindingReason.INVALID_VALUE,
                                          f"peer {peer!r} is not a CIDR; it matches nothing"))
            continue
        by_family.setdefault(net.version, []).append(str(net))
    return {v: sorted(set(n)) for v, n in by_family.items()}, findings


def policy_rows(policy: ResolvedPolicy, ports: Mapping[str, str],
                groups: Iterable[SecurityGroup | BadGroup] = ()) -> PolicyRows:
    """The rows of ``policy`` in NB; ``ports``: member key -> its logical switch port
    (a member without one is left out, and said in ``missing``)."""
    pg = policy_port_group(policy.key)
    members = [m for m in policy.members if m.key in ports]
    member_ports = tuple(sorted({ports[m.key] for m in members}))
    missing = tuple(sorted(m.key for m in policy.members if m.key not in ports))
    address_sets: dict[str, tuple[str, ...]] = {}
    clauses: list[Clause] = []
    findings: list[PolicyFinding] = []
    restricted = []
    for where, direction, tag, rules in (("ingress", INGRESS, "in", policy.ingress),
                                         ("egress", EGRESS, "eg", policy.egress)):
        if rules is None:
            continue
        restricted.append(direction)

        def limited(keys: Iterable[str] | None) -> tuple[str, ...] | None:
            if keys is None:
                return None
            names = tuple(sorted({ports[k] for k in keys if k in ports}))
            return None if names == member_ports else names

        # traffic with the member's own node passes (kubelet probes)
        by_node: dict[tuple[str, ...], list[str]] = {}
        for m in members:
            if m.node_addresses:
                by_node.setdefault(tuple(sorted(m.node_addresses)), []).append(m.key)
        for addrs, keys in sorted(by_node.items()):
            scope = limited(keys)
            for version in (4, 6):
                nets = sorted({str(ipaddress.ip_network(a, strict=False)) for a in addrs
                               if ipaddress.ip_address(a.split("/")[0]).version == version})
                if nets and scope != ():
                    clauses.append(Clause(direction, scope, version,
                                          "{" + ", ".join(nets) + "}"))
        for i, rule in enumerate(rules):
            found = _rule_clauses(pg, where, direction, tag, i, rule, limited, address_sets)
            clauses.extend(found[0])
            findings.extend(found[1])
    unique = list(dict.fromkeys(clauses))
    groups = list(groups)
    acls = policy_acls(pg, unique, restricted, groups)
    return PolicyRows(policy.key, pg, member_ports, tuple(sorted(address_sets.items())),
                      tuple(acls), tuple(findings), missing, groups_digest(groups))


def _rule_clauses(pg: str, where: str, direction: str, tag: str, i: int, rule: PolicyRule,
                  limited: object, address_sets: dict[str, tuple[str, ...]]
                  ) -> tuple[list[Clause], list[PolicyFinding]]:
    assert callable(limited)
    scope = limited(rule.members)
    if scope == ():  # limited to members without a port yet
        return [], []
    ports, findings = _ports_of(i, where, rule.ports)
    if rule.ports and not ports:
        return [], findings
    l4: list[tuple[str | None, int | None, int | None]] = list(ports) or [(None, None, None)]
    peers: list[tuple[int | None, str | None]]
    if rule.peers is None:
        peers = [(None, None)]
    else:
        by_family, bad = _peers(i, where, rule.peers)
        findings.extend(bad)
        peers = []
        for version, nets in sorted(by_family.items()):
            name = f"{pg}_{tag}{i}_ip{version}"
            address_sets[name] = tuple(nets)
            peers.append((version, f"${name}"))
    out = [Clause(direction, scope, family, peer, protocol, low, high)
           for family, peer in peers for protocol, low, high in l4]
    return out, findings
