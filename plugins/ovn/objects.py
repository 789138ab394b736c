"""The OVN provider's networks declared as objects (Subnet, IPPool, SecurityGroup of
:mod:`podnet.hookspecs.networks`): a Subnet's OVN parameters checked, a Subnet object made
into the IPAM's :class:`~podnet.plugins.ovn.ipam.Subnet`, a SecurityGroup object into the
rules :mod:`~podnet.plugins.ovn.secgroups` reads, and the config section's networks as
objects (the migration). No ovsdbapp here: pure checking and conversion."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs.errors import InvalidRequest
from podnet.hookspecs.networks import (
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SubnetInfo,
    address_range,
)
from podnet.plugins.ovn.config import IPV6_MIN_MTU, OvnConfig, gateways_of, networks_of
from podnet.plugins.ovn.ipam import Ranges, Subnet
from podnet.plugins.ovn.secgroups import SecurityGroup, parse_groups

__all__ = ["PARAMETERS", "SubnetParameters", "check_parameters", "config_networks",
           "group_body", "subnet_from_info"]

#: the keys of a Subnet's ``spec.parameters`` the OVN provider reads
PARAMETERS = ("logicalSwitch", "gatewayType", "router", "mtu", "vipsRange")
GATEWAY_TYPES = ("distributed", "centralized")
#: a logical switch name: what OVN and ovn-nbctl take without quoting, as Kubernetes
#: names are (letters, digits, '.', '_', '-', ':'), at most 253 characters
_SWITCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,252}")


@attrs.frozen
class SubnetParameters:
    """A Subnet's OVN parameters, checked (``spec.parameters``)."""

    #: the logical switch its pods' ports are on (default: the Subnet's name)
    logical_switch: str
    gateway_type: str = "distributed"
    #: the logical router its switch is linked to (for EIP / SNAT); one of the config's
    router: str | None = None
    #: the pod interface's MTU; ``None``: the provider's ``mtu``
    mtu: int | None = None
    #: where pods' VIPs come from (``podnet.io/vips``); never a pod's own address
    vips_range: tuple[str, ...] = ()

    def details(self) -> dict[str, Any]:
        """As shown in the Subnet's ``status.provider.details``."""
        out: dict[str, Any] = {"logicalSwitch": self.logical_switch,
                               "gatewayType": self.gateway_type}
        if self.router:
            out["router"] = self.router
        if self.mtu is not None:
            out["mtu"] = self.mtu
        if self.vips_range:
            out["vipsRange"] = list(self.vips_range)
        return out

    def summary(self) -> str:
        """``switch blue, distributed`` (``, router lr1``, ``, mtu 1300``)."""
        parts = [f"switch {self.logical_switch}", self.gateway_type]
        if self.router:
            parts.append(f"router {self.router}")
        if self.mtu is not None:
            parts.append(f"mtu {self.mtu}")
        return ", ".join(parts)


def _bad(subnet: SubnetInfo, key: str, message: str) -> InvalidRequest:
    return InvalidRequest(f"spec.parameters.{key}", f"Subnet {subnet.name}: {message}")


def _show(value: object) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def check_parameters(subnet: SubnetInfo, *, routers: Collection[str], provider_mtu: int,
                     switches: Mapping[str, str], reserved: Mapping[str, str]
                     ) -> SubnetParameters:
    """``subnet``'s ``spec.parameters`` checked against the provider's config.

    ``routers``: the routers a Subnet may name; ``switches``: the logical switches other
    subnets use -> who uses it (``Subnet red``, ``config subnet ovn-default``);
    ``reserved``: switch names podnet keeps for itself -> why (a router's external
    switch). :raise InvalidRequest: naming ``spec.parameters.<key>`` and the Subnet.
    """
    params = subnet.parameters
    if not isinstance(params, Mapping):
        raise InvalidRequest("spec.parameters", f"Subnet {subnet.name}: expected a mapping "
                             f"of {', '.join(PARAMETERS)}, got {_show(params)}")
    for key in params:
        if key not in PARAMETERS:
            hint = {"logical_switch": "logicalSwitch", "gateway_type": "gatewayType",
                    "vips_range": "vipsRange", "vips": "vipsRange",
                    "logicalRouter": "router"}.get(str(key))
            raise _bad(subnet, str(key), "unknown parameter"
                       + (f" (did you mean {hint}?)" if hint else "")
                       + f"; the OVN provider reads {', '.join(PARAMETERS)}")
    switch = params.get("logicalSwitch", subnet.name)
    if not isinstance(switch, str) or not _SWITCH.fullmatch(switch):
        raise _bad(subnet, "logicalSwitch", f"{_show(switch)} is not a logical switch name "
                   "(letters, digits, '.', '_', '-', ':', starting with a letter or digit, "
                   "at most 253 characters)")
    if switch in reserved:
        raise _bad(subnet, "logicalSwitch", f"switch {switch} is {reserved[switch]}")
    if switch in switches:
        raise _bad(subnet, "logicalSwitch", f"switch {switch} is already used by "
                   f"{switches[switch]}")
    gateway_type = params.get("gatewayType", "distributed")
    if gateway_type not in GATEWAY_TYPES:
        raise _bad(subnet, "gatewayType", f"{_show(gateway_type)} is not one of "
                   f"{', '.join(GATEWAY_TYPES)}")
    router = params.get("router")
    if router is not None:
        if not isinstance(router, str) or not router:
            raise _bad(subnet, "router", f"expected a router's name, got {_show(router)}")
        if router not in routers:
            known = ", ".join(sorted(routers)) or "none"
            raise _bad(subnet, "router", f"unknown router {router!r}; the config's routers "
                       f"(providers.ovn.routers): {known}")
    mtu = params.get("mtu")
    has_v6 = any(":" in c for c in subnet.cidrs)
    if mtu is not None:
        if isinstance(mtu, bool) or not isinstance(mtu, int):
            raise _bad(subnet, "mtu", f"expected an integer 68..65535, got {_show(mtu)}")
        if not 68 <= mtu <= 65535:
            raise _bad(subnet, "mtu", f"{mtu} is out of range 68..65535")
        if has_v6 and mtu < IPV6_MIN_MTU:
            raise _bad(subnet, "mtu", f"the Subnet has IPv6, which needs an MTU of at least "
                       f"{IPV6_MIN_MTU}; got {mtu}")
    elif has_v6 and provider_mtu < IPV6_MIN_MTU:
        raise _bad(subnet, "mtu", f"the Subnet has IPv6, which needs an MTU of at least "
                   f"{IPV6_MIN_MTU}, and the provider's mtu is {provider_mtu}: set mtu")
    vips = _vips_range(subnet, params.get("vipsRange"))
    return SubnetParameters(switch, gateway_type, router, mtu, vips)


def _vips_range(subnet: SubnetInfo, value: object) -> tuple[str, ...]:
    """``vipsRange``: one entry or a list, each an address, ``FIRST..LAST`` or a CIDR
    inside the Subnet's block, holding neither a gateway nor an excluded address."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise _bad(subnet, "vipsRange", "expected an address, a range FIRST..LAST or a "
                   f"CIDR, or a non-empty list of them, got {_show(value)}")
    networks = subnet.networks()
    # each block's gateway (its first host when the spec names none)
    gateways = [ipaddress.ip_address(subnet.gateway(n.version) or str(n.network_address + 1))
                for n in networks]
    excluded = Ranges.of(subnet.excluded)
    for i, item in enumerate(items):
        key = f"vipsRange[{i}]" if not isinstance(value, str) else "vipsRange"
        if not isinstance(item, str):
            raise _bad(subnet, key, f"expected an address, a range or a CIDR, got "
                       f"{_show(item)}")
        try:
            lo, hi = address_range(item)
        except ValueError as exc:
            raise _bad(subnet, key, str(exc)) from None
        net = next((n for n in networks if n.version == lo.version), None)
        if net is None or lo not in net or hi not in net:
            raise _bad(subnet, key, f"{item!r} is outside the Subnet's cidrBlock "
                       f"{', '.join(subnet.cidrs)}")
        if lo == net.network_address or (net.version == 4 and hi == net.broadcast_address):
            raise _bad(subnet, key, f"{item!r} holds {net}'s network or broadcast address")
        for gw in gateways:
            if gw.version == lo.version and int(lo) <= int(gw) <= int(hi):
                raise _bad(subnet, key, f"{item!r} holds the gateway {gw}")
        for version, elo, ehi in excluded.spans:
            if version == lo.version and int(lo) <= ehi and elo <= int(hi):
                raise _bad(subnet, key, f"{item!r} overlaps excludeIPs "
                           f"({ipaddress.ip_address(elo)}..{ipaddress.ip_address(ehi)})")
    return tuple(items)


def subnet_from_info(info: SubnetInfo, params: SubnetParameters,
                     pools: Sequence[IPPoolInfo] = (),
                     ip_pools: Mapping[str, tuple[str, ...]] | None = None) -> Subnet:
    """The IPAM's view of a Subnet object (``params`` checked by
    :func:`check_parameters`); ``pools``: its IPPool objects, whose addresses a random
    pick leaves alone; ``ip_pools``: the named pools of the config subnet of the same
    name it replaces (pods naming them keep working after the migration)."""
    v4 = info.network(4)
    v6 = info.network(6)
    gw4 = info.gateway(4) or (str(v4.network_address + 1) if v4 else None)
    gw6 = info.gateway(6) or (str(v6.network_address + 1) if v6 else None)
    return Subnet(
        name=info.name, v4=v4 if isinstance(v4, ipaddress.IPv4Network) else None,
        v6=v6 if isinstance(v6, ipaddress.IPv6Network) else None,
        gateway=gw4, gateway6=gw6, excluded=Ranges.of(info.excluded),
        namespaces=info.namespaces, gateway_type=params.gateway_type, router=params.router,
        ip_pools=dict(ip_pools or {}), default=info.default, mtu=params.mtu,
        switch=params.logical_switch, vips_range=Ranges.of(params.vips_range),
        pooled=tuple((ranges, f"an address of IPPool {p.name}") for p in pools
                     if p.subnet == info.name and (ranges := _pool_ranges(p))),
        from_object=True)


def _pool_ranges(pool: IPPoolInfo) -> Ranges:
    """A pool's addresses as ranges; one core should not have passed (an entry that is
    not an address) reserves nothing, rather than keeping its Subnet from serving."""
    try:
        return Ranges.of(pool.addresses)
    except ValueError:
        return Ranges()


# --- security groups -----------------------------------------------------------------------


def _rule_body(rule: SecurityRule, peer: str) -> dict[str, Any]:
    body: dict[str, Any] = {"protocol": rule.protocol}
    if rule.ports is not None:
        low, high = rule.ports
        body["port"] = low if low == high else f"{low}-{high}"
    if rule.cidrs:
        body[peer] = list(rule.cidrs)
    if rule.groups:
        body["groups"] = list(rule.groups)
    return body


def group_body(group: SecurityGroupInfo) -> dict[str, Any]:
    """A SecurityGroup object as the config's rules (``{ingress: [...], egress: [...]}``):
    one reader (:func:`~podnet.plugins.ovn.secgroups.parse_groups`) checks both. A
    direction of ``None`` is left out (not restricted by the group); ``()`` allows
    nothing that way."""
    body: dict[str, Any] = {}
    for direction, peer in (("ingress", "from"), ("egress", "to")):
        rules = getattr(group, direction)
        if rules is not None:
            body[direction] = [_rule_body(r, peer) for r in rules]
    return body


# --- the config section as objects (the migration) ----------------------------------------


def config_networks(provider: str, cfg: OvnConfig, groups: Mapping[str, Any],
                    declared: bool) -> Networks | None:
    """The section's subnets (``declared``: the section names some; the built-in
    ``ovn-default`` is not migrated), their ``ip_pools`` and the security groups, as the
    objects declaring them now.

    An IP pool becomes an IPPool named as the pool (so ``podnet.io/ip-pool: gold`` keeps
    naming it); where two subnets have a pool of one name, each is named
    ``<subnet>-<pool>``. A security group's direction left out (not restricted) becomes
    one rule allowing everything that way (the same ACLs). Groups the section gets wrong
    are not migrated (pods naming them keep failing as before)."""
    subnets: list[SubnetInfo] = []
    pools: list[IPPoolInfo] = []
    if declared:
        default = next((s.name for s in cfg.subnets if s.default),
                       cfg.subnets[0].name if cfg.subnets else None)
        counts: dict[str, int] = {}
        for s in cfg.subnets:
            for pool in s.ip_pools:
                counts[pool] = counts.get(pool, 0) + 1
        for s in cfg.subnets:
            params: dict[str, Any] = {"logicalSwitch": s.name, "gatewayType": s.gateway_type}
            if s.router:
                params["router"] = s.router
            if s.mtu is not None:
                params["mtu"] = s.mtu
            nets = networks_of(s)
            gws = {g.version: str(g) for g in gateways_of(s)}
            subnets.append(SubnetInfo(
                name=s.name, provider=provider, cidrs=tuple(str(n) for n in nets),
                gateways=tuple(gws.get(n.version, str(n.network_address + 1)) for n in nets),
                excluded=tuple(s.exclude_ips), namespaces=s.namespaces,
                default=s.name == default, parameters=params))
            for pool, members in s.ip_pools.items():
                name = pool if counts[pool] == 1 else f"{s.name}-{pool}"
                pools.append(IPPoolInfo(name=name, subnet=s.name, addresses=tuple(members)))
    found: list[SecurityGroupInfo] = []
    for name, group in parse_groups(groups, f"providers.{provider}.security_groups").items():
        if not isinstance(group, SecurityGroup):
            continue
        ways = [tuple(SecurityRule(r.protocol, r.ports, r.cidrs, r.groups) for r in rules)
                if rules is not None else (SecurityRule(),)
                for rules in (group.ingress, group.egress)]
        found.append(SecurityGroupInfo(name=name, ingress=ways[0], egress=ways[1]))
    if not subnets and not pools and not found:
        return None
    return Networks(subnets=tuple(subnets), pools=tuple(pools), security_groups=tuple(found))
