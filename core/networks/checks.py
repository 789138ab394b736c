"""What one Subnet, IPPool or SecurityGroup must be by itself, and what a set of them
must be together: pure functions, no cluster and no clock.

The CRDs' schemas and CEL rules refuse most of this at admission, but an object may have
been stored before a rule existed, or by an API server that does not run them: every
rule is checked again here. A problem is a :class:`Problem` naming the field and the
reason the object's ``Ready`` condition carries (``InvalidSpec``, ``GatewayOutside``,
``Overlaps``, ``OutsideSubnet``, ...).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import attrs

from podnet.core.convert import RecordError, from_wire
from podnet.core.networks import wire
from podnet.hookspecs.networks import (
    IP_POOL_KIND,
    SECURITY_GROUP_KIND,
    SUBNET_KIND,
    IPAddress,
    IPNetwork,
    IPPoolInfo,
    SecurityGroupInfo,
    SecurityRule,
    SelectorTerm,
    SubnetInfo,
    address_range,
)

NetworkInfo = SubnetInfo | IPPoolInfo | SecurityGroupInfo


@attrs.frozen
class Problem:
    """Why an object is not usable: its ``Ready`` condition's reason and message."""

    reason: str
    message: str
    field: str | None = None


class SpecError(ValueError):
    def __init__(self, field: str, message: str, reason: str = "InvalidSpec") -> None:
        super().__init__(f"{field}: {message}")
        self.problem = Problem(reason, f"{field}: {message}", field)


@attrs.frozen
class Declared:
    """One networks object as the cache keeps it: who it is, its spec checked by itself
    (``info``, or the ``problem`` that keeps it from being read) and its raw status."""

    kind: str
    name: str
    uid: str = ""
    generation: int = 0
    resource_version: str = ""
    created: datetime | None = None
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    status: Mapping[str, Any] = attrs.field(factory=dict)
    info: NetworkInfo | None = None
    problem: Problem | None = None
    #: a Subnet whose spec does not read, as far as its provider and blocks do: what
    #: records may still hold in it (its finalizer stays while they do)
    footprint: SubnetInfo | None = None

    @property
    def order(self) -> tuple[str, str]:
        """Older first (creationTimestamp, then name): the later of two is refused."""
        return (self.created.isoformat() if self.created else "", self.name)

    @property
    def describe(self) -> str:
        return f"{self.kind} {self.name}"


_WIRE: dict[str, type] = {SUBNET_KIND: wire.Subnet, IP_POOL_KIND: wire.IPPool,
                          SECURITY_GROUP_KIND: wire.SecurityGroup}


def declared(kind: str, obj: Mapping[str, Any]) -> Declared:
    """Read one object of ``kind`` (the informer's transform): never raises; what does not
    read is kept with its problem, so its status can say so."""
    meta = obj.get("metadata") or {}
    try:
        model: Any = from_wire(_WIRE[kind], obj)
    except RecordError as exc:
        raw = obj.get("status")
        return Declared(
            kind=kind, name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
            generation=_int(meta.get("generation")),
            resource_version=str(meta.get("resourceVersion") or ""),
            deleting=bool(meta.get("deletionTimestamp")),
            finalizers=tuple(f for f in meta.get("finalizers") or () if isinstance(f, str)),
            status=raw if isinstance(raw, Mapping) else {},
            problem=Problem("InvalidSpec", str(exc), exc.field),
            footprint=_footprint(kind, obj))
    m = model.metadata
    head = dict(kind=kind, name=m.name, uid=m.uid or "", generation=m.generation or 0,
                resource_version=m.resource_version or "", created=m.creation_timestamp,
                deleting=m.deletion_timestamp is not None, finalizers=m.finalizers,
                status=model.status)
    try:
        if kind == SUBNET_KIND:
            info: NetworkInfo = subnet_info(model)
        elif kind == IP_POOL_KIND:
            info = pool_info(model)
        else:
            info = group_info(model)
    except SpecError as exc:
        return Declared(**head, problem=exc.problem, footprint=_footprint(kind, obj))
    return Declared(**head, info=info)


def _footprint(kind: str, obj: Mapping[str, Any]) -> SubnetInfo | None:
    """A Subnet's provider and blocks read leniently, when they are readable at all."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec")
    if kind != SUBNET_KIND or not isinstance(spec, Mapping):
        return None
    provider, cidrs = spec.get("provider"), spec.get("cidrBlock")
    if not (isinstance(provider, str) and provider and isinstance(cidrs, str)):
        return None
    try:
        nets = parse_cidrs(cidrs)
    except SpecError:
        return None
    return SubnetInfo(name=str(meta.get("name") or ""), provider=provider,
                      cidrs=tuple(str(n) for n in nets))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- one Subnet ---------------------------------------------------------------------------


def _selector(sel: wire.LabelSelector | None, field: str) -> SelectorTerm | None:
    if sel is None:
        return None
    for i, req in enumerate(sel.match_expressions):
        if req.operator in ("In", "NotIn") and not req.values:
            raise SpecError(f"{field}.matchExpressions[{i}].values",
                            f"operator {req.operator} needs at least one value")
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            raise SpecError(f"{field}.matchExpressions[{i}].values",
                            f"operator {req.operator} takes no values")
    return SelectorTerm(match_labels=dict(sel.match_labels), match_expressions=tuple(
        (r.key, r.operator, r.values) for r in sel.match_expressions))


def parse_cidrs(text: str, field: str = "spec.cidrBlock") -> list[IPNetwork]:
    """``cidrBlock``: one CIDR, or one of each family comma-separated; host bits zero."""
    parts = [p.strip() for p in text.split(",")]
    if not 1 <= len(parts) <= 2:
        raise SpecError(field, f"{text!r}: one CIDR, or one IPv4 and one IPv6 CIDR")
    nets = []
    for part in parts:
        try:
            nets.append(ipaddress.ip_network(part, strict=True))
        except ValueError as exc:
            raise SpecError(field, f"{part!r} is not a CIDR ({exc})") from None
    if len(nets) == 2 and nets[0].version == nets[1].version:
        raise SpecError(field, f"{text!r}: two CIDRs must be of two families")
    return nets


def first_host(net: IPNetwork) -> IPAddress:
    if net.num_addresses <= 2:
        return net.network_address
    return net.network_address + 1


def subnet_info(obj: wire.Subnet) -> SubnetInfo:
    """A Subnet's spec checked by itself. :raise SpecError: naming the field."""
    spec = obj.spec
    nets = parse_cidrs(spec.cidr_block)
    by_version = {n.version: n for n in nets}
    gateways: list[str] = []
    if spec.gateway:
        seen: set[int] = set()
        for part in (p.strip() for p in spec.gateway.split(",")):
            try:
                gw = ipaddress.ip_address(part)
            except ValueError:
                raise SpecError("spec.gateway", f"{part!r} is not an address") from None
            net = by_version.get(gw.version)
            if gw.version in seen:
                raise SpecError("spec.gateway", "one gateway per family")
            seen.add(gw.version)
            if net is None or gw not in net:
                raise SpecError("spec.gateway", f"{gw} is outside cidrBlock {spec.cidr_block}",
                                reason="GatewayOutside")
            if net.num_addresses > 2 and gw in (net.network_address, net.broadcast_address) \
                    and net.version == 4:
                raise SpecError("spec.gateway", f"{gw} is the network or broadcast address "
                                f"of {net}")
            gateways.append(str(gw))
        for v, net in by_version.items():
            if v not in seen:
                gateways.append(str(first_host(net)))
    else:
        gateways = [str(first_host(n)) for n in nets]
    for i, item in enumerate(spec.exclude_ips):
        field = f"spec.excludeIPs[{i}]"
        try:
            lo, hi = address_range(item)
        except ValueError as exc:
            raise SpecError(field, str(exc)) from None
        net = by_version.get(lo.version)
        if net is None or lo not in net or hi not in net:
            raise SpecError(field, f"{item!r} is outside cidrBlock {spec.cidr_block}")
    for i, ns in enumerate(spec.namespaces):
        if not ns:
            raise SpecError(f"spec.namespaces[{i}]", "must not be empty")
    return SubnetInfo(
        name=obj.metadata.name, provider=spec.provider, cidrs=tuple(str(n) for n in nets),
        gateways=tuple(gateways), excluded=spec.exclude_ips, namespaces=spec.namespaces,
        namespace_selector=_selector(spec.namespace_selector, "spec.namespaceSelector"),
        node_selector=_selector(spec.node_selector, "spec.nodeSelector"),
        default=spec.default, parameters=dict(spec.parameters),
        generation=obj.metadata.generation or 0, uid=obj.metadata.uid or "")


# --- one IPPool -----------------------------------------------------------------------------


def pool_info(obj: wire.IPPool) -> IPPoolInfo:
    """An IPPool's spec checked by itself. :raise SpecError: naming the field."""
    spec = obj.spec
    if not spec.addresses:
        raise SpecError("spec.addresses", "must name at least one address")
    for i, item in enumerate(spec.addresses):
        try:
            address_range(item)
        except ValueError as exc:
            raise SpecError(f"spec.addresses[{i}]", str(exc)) from None
    for i, ns in enumerate(spec.namespaces):
        if not ns:
            raise SpecError(f"spec.namespaces[{i}]", "must not be empty")
    return IPPoolInfo(name=obj.metadata.name, subnet=spec.subnet, addresses=spec.addresses,
                      namespaces=spec.namespaces, generation=obj.metadata.generation or 0,
                      uid=obj.metadata.uid or "")


# --- one SecurityGroup ------------------------------------------------------------------------


def _ports(protocol: str, port: str | None, field: str) -> tuple[int, int] | None:
    if port is None or port == "":
        return None
    if protocol not in ("tcp", "udp"):
        raise SpecError(field, f"a port is for tcp or udp, not {protocol}")
    lo_s, dash, hi_s = port.partition("-")
    try:
        if dash and not hi_s:
            raise ValueError(port)
        lo, hi = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise SpecError(field, f"{port!r} is not a port or a range LOW-HIGH") from None
    if not (1 <= lo <= 65535 and 1 <= hi <= 65535):
        raise SpecError(field, f"{port!r}: ports are 1 to 65535")
    if hi < lo:
        raise SpecError(field, f"{port!r}: the range is backwards")
    return lo, hi


def _rules(rules: Sequence[wire.IngressRule | wire.EgressRule] | None, side: str
           ) -> tuple[SecurityRule, ...]:
    if rules is None:
        # a direction the group leaves out is not restricted, as in the config file's
        # groups: one rule allowing everything (an empty list allows nothing)
        return (SecurityRule(),)
    out = []
    for i, rule in enumerate(rules):
        field = f"spec.{side}[{i}]"
        peers = rule.from_ if isinstance(rule, wire.IngressRule) else rule.to
        peer_key = "from" if isinstance(rule, wire.IngressRule) else "to"
        for j, cidr in enumerate(peers):
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise SpecError(f"{field}.{peer_key}[{j}]", f"{cidr!r} is not a CIDR") from None
        for j, group in enumerate(rule.groups):
            if not group:
                raise SpecError(f"{field}.groups[{j}]", "must not be empty")
        out.append(SecurityRule(protocol=rule.protocol,
                                ports=_ports(rule.protocol, rule.port, f"{field}.port"),
                                cidrs=peers, groups=rule.groups))
    return tuple(out)


def group_info(obj: wire.SecurityGroup) -> SecurityGroupInfo:
    return SecurityGroupInfo(name=obj.metadata.name, ingress=_rules(obj.spec.ingress, "ingress"),
                             egress=_rules(obj.spec.egress, "egress"),
                             generation=obj.metadata.generation or 0, uid=obj.metadata.uid or "")


# --- across objects ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _parsed(cidrs: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


def blocks_of(info: SubnetInfo) -> tuple[IPNetwork, ...]:
    """A Subnet's blocks, parsed once per distinct ``cidrs`` (every check of every pair
    would parse them again)."""
    return _parsed(info.cidrs)


def overlaps(subnets: Iterable[Declared]) -> dict[str, Problem]:
    """Subnets of one provider whose blocks overlap an older one's: name -> ``Overlaps``
    naming the oldest it overlaps (only Subnets whose spec reads take part). One sweep per
    provider and family over the blocks sorted by their first address: blocks are nested
    or apart, so the ones still open when a block starts are exactly those it overlaps."""
    ordered = sorted((d for d in subnets if isinstance(d.info, SubnetInfo)),
                     key=lambda d: d.order)
    rank = {d.name: i for i, d in enumerate(ordered)}
    lanes: dict[tuple[str, int], list[tuple[int, int, str, IPNetwork]]] = {}
    for d in ordered:
        info = d.info
        assert isinstance(info, SubnetInfo)
        for net in blocks_of(info):
            lanes.setdefault((info.provider, net.version), []).append(
                (int(net.network_address), int(net.broadcast_address), d.name, net))
    # name -> (rank of the oldest it overlaps, that one's name, its block, its own block)
    worst: dict[str, tuple[int, str, IPNetwork, IPNetwork]] = {}
    for lane in lanes.values():
        lane.sort(key=lambda b: (b[0], -b[1]))
        open_: list[tuple[int, int, str, IPNetwork]] = []
        for block in lane:
            open_ = [b for b in open_ if b[1] >= block[0]]
            for opened in open_:
                later, older = ((block, opened) if rank[block[2]] > rank[opened[2]]
                                else (opened, block))
                seen = worst.get(later[2])
                if later[2] != older[2] and (seen is None or rank[older[2]] < seen[0]):
                    worst[later[2]] = (rank[older[2]], older[2], older[3], later[3])
            open_.append(block)
    out: dict[str, Problem] = {}
    for name, (_, older_name, older_net, own_net) in worst.items():
        provider = ordered[rank[name]].info.provider  # type: ignore[union-attr]
        out[name] = Problem("Overlaps", f"cidrBlock {own_net} overlaps Subnet {older_name} "
                            f"({older_net}) of provider {provider}", "spec.cidrBlock")
    return out


def blocks_overlap(a: Sequence[IPNetwork], b: Sequence[IPNetwork]
                   ) -> tuple[IPNetwork, IPNetwork] | None:
    """The first pair of blocks of one family that overlap, or None."""
    for x in a:
        for y in b:
            if x.version == y.version and x.overlaps(y):
                return x, y
    return None


def pool_ranges(pool: IPPoolInfo) -> list[tuple[int, int, int]]:
    """(version, first, last) of each entry, as integers."""
    out: list[tuple[int, int, int]] = []
    for item in pool.addresses:
        lo, hi = address_range(item)
        out.append((lo.version, int(lo), int(hi)))
    return out


def pool_problem(pool: IPPoolInfo, subnet: SubnetInfo) -> Problem | None:
    """A pool entry outside its Subnet's block."""
    nets: dict[int, IPNetwork] = {n.version: n for n in subnet.networks()}
    for i, (version, lo, hi) in enumerate(pool_ranges(pool)):
        net = nets.get(version)
        if net is None or not (int(net.network_address) <= lo and hi <= int(
                net.broadcast_address)):
            return Problem("OutsideSubnet", f"spec.addresses[{i}]: {pool.addresses[i]!r} is "
                           f"outside Subnet {subnet.name} ({', '.join(subnet.cidrs)})",
                           f"spec.addresses[{i}]")
    return None


def pools_overlap(pool: IPPoolInfo, other: IPPoolInfo) -> bool:
    mine, theirs = pool_ranges(pool), pool_ranges(other)
    return any(v == w and lo <= hi2 and lo2 <= hi
               for v, lo, hi in mine for w, lo2, hi2 in theirs)
