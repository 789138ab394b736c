"""Security groups: rules from ``providers.ovn.security_groups``, written as ACLs on the
groups' port groups (no ovsdbapp here: this is pure parsing and match building).

Every group is read on its own: a bad group is kept as a :class:`BadGroup` naming the
field that is wrong, so only the pods naming it fail (an ``InvalidRequest``), and the
others keep working.

The ACLs, in the spirit of Kube-OVN's: a group's ingress rules are ``to-lport`` on
``outport == @sg_<name>``, its egress rules ``from-lport`` on ``inport == @sg_<name>``,
all ``allow-related`` (replies and related ICMP pass through conntrack). Each group's
port group also gets a drop of all other IP traffic, both ways, at a lower priority.
What a member must always have passes without an ACL of podnet's: ARP is not IP (the
drop never sees it), OVN's own ACL stage lets IPv6 ND and MLD through above every ACL
once ACLs are stateful, and podnet's pods get static addresses (no DHCP).

OVN puts every port group's ACLs into one table per switch, ordered by priority: a
member of several groups gets what any of them allows, and a member of any group loses
the rest (Kube-OVN puts members in one deny-all group; a drop per group does the same
without a second membership per port).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Mapping, Sequence

import attrs

__all__ = [
    "ACL_GROUP",
    "PRIORITY_ALLOW",
    "PRIORITY_DENY",
    "Acl",
    "BadGroup",
    "Rule",
    "SecurityGroup",
    "group_acls",
    "parse_groups",
    "port_group_of",
]

#: the ACLs' priorities: a group's rules above the drop of the rest
PRIORITY_DENY = 2000
PRIORITY_ALLOW = 2010
#: external_ids key on podnet's ACLs: the security group (port group) that wrote it
ACL_GROUP = "podnet/sg"

_PG_SAFE = re.compile(r"[^A-Za-z0-9_]")
_PROTOCOLS = ("tcp", "udp", "icmp", "all")
_RULE_KEYS = {"ingress": {"protocol", "port", "from", "groups"},
              "egress": {"protocol", "port", "to", "groups"}}
_GROUP_KEYS = {"ingress", "egress"}


def port_group_of(name: str) -> str:
    """The port group of security group ``name`` (letters, digits, underscores)."""
    return f"sg_{_PG_SAFE.sub('_', name)}"


@attrs.frozen
class Acl:
    """One ACL as podnet writes it (what an existing row is compared by)."""

    direction: str
    priority: int
    match: str
    action: str


@attrs.frozen
class Rule:
    """One allow rule: traffic of ``protocol`` (to ``ports``, a range) from (ingress) or to
    (egress) ``cidrs`` and the members of ``groups``; neither: anywhere."""

    protocol: str = "all"
    ports: tuple[int, int] | None = None
    cidrs: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@attrs.frozen
class SecurityGroup:
    """A checked group. A direction left out of the config is not restricted by this
    group (``None``); an empty list allows nothing that way."""

    name: str
    ingress: tuple[Rule, ...] | None = None
    egress: tuple[Rule, ...] | None = None

    @property
    def port_group(self) -> str:
        return port_group_of(self.name)

    def peers(self) -> set[str]:
        """The security groups its rules name as peers (their port groups must exist:
        northd makes their address sets ``$sg_<name>_ip4``/``_ip6`` from them)."""
        return {g for rules in (self.ingress or (), self.egress or ()) for r in rules
                for g in r.groups}


@attrs.frozen
class BadGroup:
    """A group whose config is wrong: the key path and what is wrong with it."""

    name: str
    field: str
    message: str


class _Bad(ValueError):
    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


def parse_groups(raw: object, prefix: str, where: Mapping[str, str] | None = None
                 ) -> dict[str, SecurityGroup | BadGroup]:
    """Each group of ``security_groups`` checked on its own (``prefix``: the section's
    key, ``providers.ovn.security_groups``; ``where``: the field of a group declared
    elsewhere, ``securitygroup[web].spec`` for a SecurityGroup object). Not a mapping at
    all: ``ValueError``."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("expected security group name -> {ingress: [...], egress: [...]}")
    where = where or {}

    def field(name: str) -> str:
        return where.get(name, f"{prefix}.{name}")

    out: dict[str, SecurityGroup | BadGroup] = {}
    for name, body in raw.items():
        name = str(name)
        try:
            out[name] = _group(name, body)
        except _Bad as bad:
            out[name] = BadGroup(name, f"{field(name)}{bad.path}", bad.message)
    # two names OVN would see as one port group ('.' and '-' become '_'): neither is used
    by_pg: dict[str, list[str]] = {}
    for name in out:
        by_pg.setdefault(port_group_of(name), []).append(name)
    for pg, names in by_pg.items():
        if len(names) > 1:
            for name in names:
                others = ", ".join(n for n in names if n != name)
                out[name] = BadGroup(name, field(name), f"its port group {pg} is "
                                     f"also that of {others} (OVN names allow letters, "
                                     "digits and '_' only)")
    # a peer must be a group that is defined (its port group and address sets exist)
    for name, group in list(out.items()):
        if not isinstance(group, SecurityGroup):
            continue
        for direction in ("ingress", "egress"):
            for i, r in enumerate(getattr(group, direction) or ()):
                for g in r.groups:
                    if g not in out:
                        out[name] = BadGroup(name, f"{field(name)}.{direction}[{i}].groups",
                                             f"unknown security group {g!r}")
    return out


def _group(name: str, body: object) -> SecurityGroup:
    if not name or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise _Bad("", "a security group's name is letters, digits, '.', '_' and '-'")
    if body is None:
        body = {}
    if not isinstance(body, Mapping):
        raise _Bad("", "expected {ingress: [rules], egress: [rules]}")
    for key in body:
        if key not in _GROUP_KEYS:
            raise _Bad(f".{key}", "unknown key; expected ingress or egress")
    found: dict[str, tuple[Rule, ...] | None] = {}
    for direction in ("ingress", "egress"):
        if direction not in body:
            found[direction] = None
            continue
        rules = body[direction]
        if rules is None:
            rules = []
        if not isinstance(rules, list | tuple):
            raise _Bad(f".{direction}", "expected a list of rules")
        found[direction] = tuple(_rule(direction, r, f".{direction}[{i}]")
                                 for i, r in enumerate(rules))
    return SecurityGroup(name, found["ingress"], found["egress"])


def _rule(direction: str, body: object, path: str) -> Rule:
    if not isinstance(body, Mapping):
        raise _Bad(path, "expected a rule {protocol, port, "
                   f"{'from' if direction == 'ingress' else 'to'}, groups}}")
    for key in body:
        if key not in _RULE_KEYS[direction]:
            other = "egress rules say 'to'" if key == "from" else (
                "ingress rules say 'from'" if key == "to" else "")
            raise _Bad(f"{path}.{key}", "unknown key" + (f" ({other})" if other else "")
                       + f"; expected one of {', '.join(sorted(_RULE_KEYS[direction]))}")
    protocol = body.get("protocol", "all")
    if protocol not in _PROTOCOLS:
        raise _Bad(f"{path}.protocol", f"unknown protocol {protocol!r}; expected "
                   f"{', '.join(_PROTOCOLS)}")
    ports = None
    if "port" in body:
        if protocol not in ("tcp", "udp"):
            raise _Bad(f"{path}.port", f"a port needs protocol tcp or udp, not {protocol}")
        ports = _ports(body["port"], f"{path}.port")
    peer = "from" if direction == "ingress" else "to"
    cidrs = _cidrs(body.get(peer), f"{path}.{peer}")
    groups = _names(body.get("groups"), f"{path}.groups")
    return Rule(protocol, ports, cidrs, groups)


def _ports(value: object, path: str) -> tuple[int, int]:
    """``80`` or ``"8000-8080"``."""
    try:
        if isinstance(value, bool):
            raise ValueError
        if isinstance(value, int):
            low = high = value
        elif isinstance(value, str):
            low_s, _, high_s = value.partition("-")
            low = int(low_s)
            high = int(high_s) if high_s else low
        else:
            raise ValueError
    except ValueError:
        raise _Bad(path, f"expected a port (80) or a range (8000-8080), got {value!r}"
                   ) from None
    if not 1 <= low <= high <= 65535:
        raise _Bad(path, f"port {value!r} is out of range 1-65535")
    return low, high


def _cidrs(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise _Bad(path, "expected a CIDR or a non-empty list of CIDRs")
    out = []
    for item in items:
        try:
            out.append(str(ipaddress.ip_network(str(item), strict=True)))
        except ValueError as exc:
            raise _Bad(path, f"{item!r} is not a CIDR ({exc})") from None
    return tuple(out)


def _names(value: object, path: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) and i for i in items):
        raise _Bad(path, "expected a list of security group names")
    return tuple(items)


# --- the ACLs ----------------------------------------------------------------------------


def _l4(protocol: str, ports: tuple[int, int] | None, family: int | None) -> str:
    """The protocol part of a match (``""``: any IP traffic)."""
    if protocol == "all":
        return ""
    if protocol == "icmp":
        return {4: "icmp4", 6: "icmp6", None: "(icmp4 || icmp6)"}[family]
    if ports is None:
        return protocol
    low, high = ports
    if low == high:
        return f"{protocol} && {protocol}.dst == {low}"
    return f"{protocol} && {protocol}.dst >= {low} && {protocol}.dst <= {high}"


def _rule_matches(rule: Rule, port: str, side: str) -> list[str]:
    """The matches of one rule: ``port`` is ``outport == @pg`` or ``inport == @pg``,
    ``side`` the peer's address (``src`` for ingress, ``dst`` for egress)."""
    peers: list[tuple[int | None, str]] = []
    for version in (4, 6):
        nets = [c for c in rule.cidrs if ipaddress.ip_network(c).version == version]
        if nets:
            listed = nets[0] if len(nets) == 1 else "{" + ", ".join(nets) + "}"
            peers.append((version, f"ip{version}.{side} == {listed}"))
        for g in rule.groups:
            peers.append((version, f"ip{version}.{side} == ${port_group_of(g)}_ip{version}"))
    if not rule.cidrs and not rule.groups:
        peers.append((None, ""))
    out = []
    for family, peer in peers:
        parts = [port, f"ip{family}" if family else "ip", peer,
                 _l4(rule.protocol, rule.ports, family)]
        out.append(" && ".join(p for p in parts if p))
    return out


def group_acls(group: SecurityGroup) -> list[Acl]:
    """The ACLs of one group's port group, in a stable order, without duplicates: the
    drop of what no rule allows, and its rules above it."""
    return list(_group_acls(group))


@functools.lru_cache(maxsize=256)
def _group_acls(group: SecurityGroup) -> tuple[Acl, ...]:
    """``group_acls``, made once per group as configured (a group is a frozen value):
    allocate and route each asked for every pod's groups' rules again."""
    pg = group.port_group
    out: list[Acl] = [
        Acl("to-lport", PRIORITY_DENY, f"outport == @{pg} && ip", "drop"),
        Acl("from-lport", PRIORITY_DENY, f"inport == @{pg} && ip", "drop"),
    ]
    for direction, rules, port, side in (
            ("to-lport", group.ingress, f"outport == @{pg}", "src"),
            ("from-lport", group.egress, f"inport == @{pg}", "dst")):
        if rules is None:  # not restricted this way by this group
            rules = (Rule(),)
        for r in rules:
            for match in _rule_matches(r, port, side):
                acl = Acl(direction, PRIORITY_ALLOW, match, "allow-related")
                if acl not in out:
                    out.append(acl)
    return tuple(out)


def acls_by_port_group(groups: Sequence[SecurityGroup]) -> dict[str, list[Acl]]:
    """The ACLs of these groups, by port group."""
    return {g.port_group: group_acls(g) for g in groups}
