"""NetworkPolicy on a node, in nftables: the table ``inet podnet``, rendered whole from
the resolved policies (``podnet.hookspecs.netpol``) and the pods this host plugged, and
put in place by ``nft -j -f -`` (JSON in) in one transaction.

The table (see :func:`render`):

- a base chain ``forward`` on the forward hook (policy accept): ``ct state
  established,related accept`` first (replies and related ICMP always pass, and a change
  never cuts a flow: the conntrack entries outlive every table); IPv6 neighbour discovery
  (a bridge hands it to the IPv6 hooks like any packet); traffic from or to the members'
  node addresses; then the egress dispatch (by the packet's input interface, and by its
  source address) and the ingress dispatch (by output interface, and by destination
  address) to the members' chains;
- per member restricted in a direction, a chain named after its host interface,
  ``in_<host interface>`` (to the pod) and ``out_<host interface>`` (from the pod): one rule
  per allowed clause, family and protocol (peers as a named set, ports as an anonymous
  set of numbers and ranges), and ``drop`` at the end (a drop, not a reject: a prober or a
  client sees a timeout). An allowed egress packet returns to the base chain, where the
  ingress of its destination (a member of this host too) still judges it;
- per peer clause and family a named interval set ``peer4_<digest>`` / ``peer6_<digest>``
  of its CIDRs (clauses with equal peers share one).

Why both interface and address dispatch: on a routed veth (the ENI dataplanes) the
forward hook sees the pod's host end as the input or output interface; on a bridge (the
reference dataplane's ``pnbr-*``) the kernel's bridge netfilter passes bridged IPv4 and
IPv6 through the same inet hook with the *bridge* as both interfaces, so only the
addresses say whose the packet is. Traffic between a pod and its own node (kubelet
probes) never reaches the forward hook (the node sends through output and receives
through input), so it passes as the API wants.

Every change replaces the whole table in one ``nft -j -f -`` batch (``add table``,
``delete table``, then everything): the kernel commits it atomically, so no packet sees a
half table, neither the allowed set of one render and the chains of another. Run it in
the caller's network namespace, or in one given by path (tests). It imports nothing of
podnet but the provider contract and :mod:`podnet.linux.netns`.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs.netpol import PolicyPort, PolicyRule, Protocol, ResolvedPolicy
from podnet.linux.netns import run_in_netns

FAMILY = "inet"
TABLE = "podnet"
#: the base chain (``fwd`` would be a keyword of nft's grammar)
BASE_CHAIN = "forward"
INGRESS_PREFIX = "in_"
EGRESS_PREFIX = "out_"
#: a rule's comment is at most 128 bytes (nft's limit is the kernel's userdata, 256)
COMMENT_MAX = 128
#: ICMPv6 that must pass whatever the policy: neighbour and router discovery
_IPV6_DISCOVERY = ("nd-router-solicit", "nd-router-advert", "nd-neighbor-solicit",
                   "nd-neighbor-advert", "nd-redirect")
_L4 = {Protocol.TCP: "tcp", Protocol.UDP: "udp", Protocol.SCTP: "sctp"}

Command = dict[str, Any]
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class NftablesError(RuntimeError):
    """``nft`` refused a batch or could not be run; the kernel's table is as it was."""


@attrs.frozen
class HostPort:
    """Where a member is plugged on this host: its host interface and its addresses
    (the record's, plain or with a prefix)."""

    host_interface: str
    addresses: tuple[str, ...] = ()


@attrs.frozen
class Table:
    """The table as rendered: the commands that make it (after the delete), and what it
    holds, for the agent's report and the bench."""

    commands: tuple[Command, ...]
    #: the policies rendered: those with a member plugged on this host (key -> generation)
    policies: Mapping[str, int]
    #: member key -> rules of its chains (both directions; 0 when it is not restricted)
    member_rules: Mapping[str, int]
    #: member key -> its host interface, for the members with a chain
    chains: Mapping[str, str]

    @property
    def rules(self) -> int:
        return sum(1 for command in self.commands if "rule" in command.get("add", {}))

    def document(self) -> str:
        """The batch ``nft -j -f -`` reads: the table replaced in one transaction."""
        return json.dumps({"nftables": [*_replace_prelude(), *self.commands]},
                          separators=(",", ":"))


def chain_names(host_interface: str) -> tuple[str, str]:
    """A member's ingress and egress chains."""
    return INGRESS_PREFIX + host_interface, EGRESS_PREFIX + host_interface


def _table() -> dict[str, str]:
    return {"family": FAMILY, "name": TABLE}


def _replace_prelude() -> list[Command]:
    # "add" is a no-op on an existing table and makes the "delete" valid on none
    return [{"add": {"table": _table()}}, {"delete": {"table": _table()}},
            {"add": {"table": _table()}}]


def _rule(chain: str, expr: list[Command], comment: str | None = None) -> Command:
    rule: dict[str, Any] = {"family": FAMILY, "table": TABLE, "chain": chain, "expr": expr}
    if comment:
        rule["comment"] = _cut(comment)
    return {"add": {"rule": rule}}


def _cut(text: str) -> str:
    data = text.encode()
    if len(data) <= COMMENT_MAX:
        return text
    return data[:COMMENT_MAX - 3].decode(errors="ignore") + "..."


def _match(left: Command, right: Any, op: str = "==") -> Command:
    return {"match": {"op": op, "left": left, "right": right}}


def _payload(protocol: str, field: str) -> Command:
    return {"payload": {"protocol": protocol, "field": field}}


def _meta(key: str) -> Command:
    return {"meta": {"key": key}}


def _element(net: Network) -> Any:
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return {"prefix": {"addr": str(net.network_address), "len": net.prefixlen}}


@functools.lru_cache(maxsize=8192)
def _peer_networks(cidrs: tuple[str, ...]) -> tuple[tuple[Network, ...], tuple[Network, ...]]:
    """:func:`_networks` of a clause's peers, kept: every member a clause applies to has
    the same peers, and the table is rendered again on every change."""
    v4, v6 = _networks(cidrs)
    return tuple(v4), tuple(v6)


def _networks(cidrs: Iterable[str]) -> tuple[list[Network], list[Network]]:
    """The CIDRs by family, overlaps merged (an interval set refuses overlapping
    elements)."""
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for cidr in cidrs:
        net = ipaddress.ip_network(cidr, strict=False)
        if isinstance(net, ipaddress.IPv4Network):
            v4.append(net)
        else:
            v6.append(net)
    return (list(ipaddress.collapse_addresses(v4)), list(ipaddress.collapse_addresses(v6)))


def _host(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_interface(address).ip


def _ports_by_protocol(ports: Sequence[PolicyPort]) -> dict[str, list[tuple[int, int]] | None]:
    """protocol name -> merged (first, last) ranges, or None for every port."""
    out: dict[str, list[tuple[int, int]] | None] = {}
    for port in ports:
        name = _L4[Protocol(port.protocol)]
        if port.port is None:
            out[name] = None
            continue
        have = out.setdefault(name, [])
        if have is not None:
            have.append((port.port, port.end_port if port.end_port is not None else port.port))
    for name, ranges in out.items():
        if ranges is not None:
            merged: list[tuple[int, int]] = []
            for first, last in sorted(ranges):
                if merged and first <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], last))
                else:
                    merged.append((first, last))
            out[name] = merged
    return dict(sorted(out.items()))


@functools.lru_cache(maxsize=8192)
def _set_name(family: int, nets: tuple[Network, ...]) -> str:
    text = ",".join(str(n) for n in nets)
    return f"peer{family}_{hashlib.blake2s(text.encode(), digest_size=5).hexdigest()}"


@attrs.frozen
class _Clause:
    peers: tuple[str, ...] | None
    ports: tuple[PolicyPort, ...]


class _Renderer:
    def __init__(self) -> None:
        self.sets: dict[str, Command] = {}
        self.chains: list[Command] = []
        self.rules: list[Command] = []

    def peer_set(self, family: int, nets: tuple[Network, ...]) -> str:
        name = _set_name(family, nets)
        if name not in self.sets:
            self.sets[name] = {"add": {"set": {
                "family": FAMILY, "table": TABLE, "name": name,
                "type": "ipv4_addr" if family == 4 else "ipv6_addr", "flags": ["interval"],
                "elem": [_element(n) for n in nets]}}}
        return name

    def ports_match(self, by_protocol: dict[str, list[tuple[int, int]] | None]
                    ) -> list[Command]:
        """The ports of a clause as one match: ``meta l4proto P th dport N`` for one
        protocol and port, ``meta l4proto P th dport @ports_<digest>`` for one protocol's
        several, ``meta l4proto . th dport @ports_<digest>`` for several protocols (one
        rule, not one per protocol); none for every port of every protocol. The named
        sets are shared by every member's rule of a clause: nft's time to read a table
        grows with its sets and rules."""
        if not by_protocol:
            return []
        if len(by_protocol) == 1:
            ((name, ranges),) = by_protocol.items()
            out = [_match(_meta("l4proto"), name)]
            if ranges is None:
                return out
            if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
                return [*out, _match(_payload("th", "dport"), ranges[0][0])]
            elements: list[Any] = [first if first == last else {"range": [first, last]}
                                   for first, last in ranges]
            return [*out, _match(_payload("th", "dport"),
                                 "@" + self.named_set("ports", "inet_service", elements))]
        pairs: list[Any] = []
        for name, protocol_ranges in by_protocol.items():
            for first, last in (protocol_ranges if protocol_ranges is not None
                                else [(0, 65535)]):
                port: Any = first if first == last else {"range": [first, last]}
                pairs.append({"concat": [name, port]})
        ref = self.named_set("ports", ["inet_proto", "inet_service"], pairs)
        return [_match({"concat": [_meta("l4proto"), _payload("th", "dport")]}, "@" + ref)]

    def named_set(self, prefix: str, kind: Any, elements: list[Any]) -> str:
        text = json.dumps([kind, elements], separators=(",", ":"))
        name = f"{prefix}_{hashlib.blake2s(text.encode(), digest_size=5).hexdigest()}"
        if name not in self.sets:
            self.sets[name] = {"add": {"set": {
                "family": FAMILY, "table": TABLE, "name": name, "type": kind,
                "flags": ["interval"], "elem": elements}}}
        return name

    def clause_rules(self, chain: str, clause: _Clause, ingress: bool, comment: str) -> int:
        """The rules of one allowed clause in a member's chain; how many."""
        verdict: Command = {"accept": None} if ingress else {"return": None}
        field = "saddr" if ingress else "daddr"
        matches: list[list[Command]] = []
        if clause.peers is None:
            matches.append([])
        else:
            v4, v6 = _peer_networks(clause.peers)
            if v4:
                matches.append([_match(_payload("ip", field), "@" + self.peer_set(4, v4))])
            if v6:
                matches.append([_match(_payload("ip6", field), "@" + self.peer_set(6, v6))])
        ports = self.ports_match(_ports_by_protocol(clause.ports))
        for peer_match in matches:
            self.rules.append(_rule(chain, [*peer_match, *ports, verdict], comment))
        return len(matches)


def _member_clauses(policies: Sequence[ResolvedPolicy], ports: Mapping[str, HostPort]
                    ) -> tuple[dict[tuple[str, bool], dict[_Clause, list[str]]],
                               dict[str, int], set[str]]:
    """(member key, ingress?) -> its allowed clauses (with the policies that allow each),
    for the members this host plugged; the policies that have such a member; the
    members' node addresses."""
    chains: dict[tuple[str, bool], dict[_Clause, list[str]]] = {}
    rendered: dict[str, int] = {}
    node_addresses: set[str] = set()
    for policy in sorted(policies, key=lambda p: p.key):
        for member in policy.members:
            if member.key not in ports:
                continue
            rendered[policy.key] = policy.generation
            node_addresses.update(member.node_addresses)
            for ingress, rules in ((True, policy.ingress), (False, policy.egress)):
                if rules is None:
                    continue
                # restricted, whatever it allows (no rule: nothing)
                clauses = chains.setdefault((member.key, ingress), {})
                for rule in rules:
                    if not _applies(rule, member.key) or rule.peers == ():
                        continue
                    clause = _Clause(rule.peers, rule.ports)
                    clauses.setdefault(clause, [])
                    if policy.key not in clauses[clause]:
                        clauses[clause].append(policy.key)
    return chains, rendered, node_addresses


def _applies(rule: PolicyRule, key: str) -> bool:
    return rule.members is None or key in rule.members


def render(policies: Iterable[ResolvedPolicy], ports: Mapping[str, HostPort]) -> Table:
    """The whole table for the members this host plugged (``ports``: member key -> where;
    a member of a policy not in it is another host's and left out). Deterministic: equal
    inputs give equal commands, whatever their order."""
    policies = list(policies)
    chains, rendered, node_addresses = _member_clauses(policies, ports)
    out = _Renderer()
    base = BASE_CHAIN
    out.chains.append({"add": {"chain": {
        "family": FAMILY, "table": TABLE, "name": base, "type": "filter", "hook": "forward",
        "prio": 0, "policy": "accept"}}})
    base_rules: list[Command] = [
        _rule(base, [_match({"ct": {"key": "state"}}, ["established", "related"], "in"),
                     {"accept": None}]),
        _rule(base, [_match(_meta("nfproto"), "ipv6"), _match(_meta("l4proto"), "ipv6-icmp"),
                     _match(_payload("icmpv6", "type"), {"set": list(_IPV6_DISCOVERY)}),
                     {"accept": None}]),
    ]
    node4, node6 = _networks(node_addresses)
    for family, nets in ((4, node4), (6, node6)):
        if not nets:
            continue
        name = f"node{family}"
        out.sets[name] = {"add": {"set": {
            "family": FAMILY, "table": TABLE, "name": name,
            "type": "ipv4_addr" if family == 4 else "ipv6_addr", "flags": ["interval"],
            "elem": [_element(n) for n in nets]}}}
        proto = "ip" if family == 4 else "ip6"
        for field in ("saddr", "daddr"):
            base_rules.append(_rule(base, [_match(_payload(proto, field), "@" + name),
                                           {"accept": None}], "the node's own traffic"))
    member_rules: dict[str, int] = dict.fromkeys(
        sorted({key for key, _ in chains}), 0)
    interfaces: dict[str, str] = {}
    # dispatch: (ingress?, key kind) -> [(key, chain)]
    dispatch: dict[tuple[bool, str], list[tuple[Any, str]]] = {}
    taken: set[tuple[bool, str, str]] = set()
    for (key, ingress), clauses in sorted(chains.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        port = ports[key]
        interfaces[key] = port.host_interface
        chain = chain_names(port.host_interface)[0 if ingress else 1]
        out.chains.append({"add": {"chain": {"family": FAMILY, "table": TABLE, "name": chain}}})
        count = 0
        for clause, by in clauses.items():
            count += out.clause_rules(chain, clause, ingress, ", ".join(by))
        out.rules.append(_rule(chain, [{"drop": None}], f"{key}: what no policy allows"))
        member_rules[key] += count + 1
        dispatch.setdefault((ingress, "if"), []).append((port.host_interface, chain))
        for address in port.addresses:
            ip = _host(address)
            kind = "ip" if ip.version == 4 else "ip6"
            # one address, one member: an address two records name (a stale one) goes to
            # the first, by key
            if (ingress, kind, str(ip)) in taken:
                continue
            taken.add((ingress, kind, str(ip)))
            dispatch.setdefault((ingress, kind), []).append((str(ip), chain))
    for ingress in (False, True):  # egress first: an allowed one returns to the ingress
        for kind in ("if", "ip", "ip6"):
            entries = dispatch.get((ingress, kind))
            if not entries:
                continue
            if kind == "if":
                key_expr = _meta("oifname" if ingress else "iifname")
            else:
                key_expr = _payload(kind, "daddr" if ingress else "saddr")
            base_rules.append(_rule(base, [{"vmap": {"key": key_expr, "data": {"set": [
                [value, {"jump": {"target": chain}}] for value, chain in sorted(entries)]}}}]))
    commands = (*[out.sets[name] for name in sorted(out.sets)], *out.chains, *base_rules,
                *out.rules)
    return Table(commands=tuple(commands), policies=dict(sorted(rendered.items())),
                 member_rules=member_rules, chains=dict(sorted(interfaces.items())))


# --- the kernel -------------------------------------------------------------------------


def _nft_binary() -> str:
    found = shutil.which("nft") or next(
        (p for p in ("/usr/sbin/nft", "/sbin/nft") if os.path.exists(p)), None)
    if found is None:
        raise NftablesError("nft: not found (install nftables: the node agent enforces "
                            "NetworkPolicy with it)")
    return found


def _run(args: list[str], stdin: str | None, netns: str | None) -> subprocess.CompletedProcess[str]:
    argv = [_nft_binary(), *args]

    def call() -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True,
                              timeout=60, check=False)

    try:
        # a child forked by a thread that joined the namespace is in that namespace
        return run_in_netns(netns, call) if netns else call()
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NftablesError(f"nft {' '.join(args)}: {exc}") from exc


def apply(table: Table, *, netns: str | None = None) -> None:
    """Replace the table ``inet podnet`` by ``table`` in one transaction.

    :raises NftablesError: nft refused it (the kernel keeps the table it had)."""
    done = _run(["-j", "-f", "-"], table.document(), netns)
    if done.returncode != 0:
        raise NftablesError(f"nft -j -f -: {done.stderr.strip() or done.returncode}")


def remove(*, netns: str | None = None) -> None:
    """Delete the table (nothing when there is none)."""
    done = _run(["-j", "-f", "-"], json.dumps({"nftables": [
        {"add": {"table": _table()}}, {"delete": {"table": _table()}}]}), netns)
    if done.returncode != 0:
        raise NftablesError(f"nft -j -f -: {done.stderr.strip() or done.returncode}")


def read(*, netns: str | None = None) -> list[dict[str, Any]] | None:
    """The table as the kernel has it (``nft -j list table``'s objects, without the
    metainfo), or None when there is none."""
    done = _run(["-j", "list", "table", FAMILY, TABLE], None, netns)
    if done.returncode != 0:
        if "No such file or directory" in done.stderr:
            return None
        raise NftablesError(f"nft -j list table {FAMILY} {TABLE}: {done.stderr.strip()}")
    objects = json.loads(done.stdout).get("nftables", [])
    return [o for o in objects if "metainfo" not in o]


def listed_chains(listing: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """Chain name -> its rules' objects, from :func:`read`."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for obj in listing:
        if "chain" in obj:
            out.setdefault(obj["chain"]["name"], [])
        elif "rule" in obj:
            out.setdefault(obj["rule"]["chain"], []).append(obj["rule"])
    return out


def listed_comments(listing: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every rule comment of the table as read (the policies each rule is for)."""
    return {str(obj["rule"]["comment"]) for obj in listing
            if "rule" in obj and obj["rule"].get("comment")}
