"""The OVN provider's config section (``providers.ovn``: subnets, routers and their
external networks, attachment networks, security groups, the Northbound connection) and
the names and defaults the provider writes and reads Northbound with."""


from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from podnet.hookspecs.annotations import is_ip, show
from podnet.hookspecs.models import (
    DEFAULT_NETWORK,
)
from podnet.hookspecs.sections import (
    between,
    invalid,
    one_of,
    rule,
    section,
    text,
)

if TYPE_CHECKING:
    pass


NAME = "ovn"


NETWORKS_ANNOTATION = "podnet.io/networks"
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

EXT_POD = "pod"
EXT_NAMESPACE = "namespace"
EXT_SUBNET = "subnet"
EXT_NODE = "node"
EXT_IP = "podnet/ip"
EXT_IPV6 = "podnet/ipv6"
EXT_MAC = "podnet/mac"
ORDINAL = re.compile(r"-(\d+)$")
PG_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


#: where Open vSwitch keeps its database socket on a host (the node agent's default)
DEFAULT_OVS_DB = "unix:/var/run/openvswitch/db.sock"

#: how long a transaction's leader waits for company: it commits once this long passes
#: with no caller arriving (at most 8 times as long), which gathers a burst's ports into a
#: few transactions (6x faster than one ovn-nbctl per port at 1,000, against 4.5x at 0)
DEFAULT_BATCH_WINDOW = 0.002
#: the pod interface's MTU when the config names none: a 1500 underlay less the 100 bytes
#: Kube-OVN sets aside for Geneve (its encapsulation needs 58 on IPv4, more with options)
DEFAULT_MTU = 1400
#: the smallest MTU IPv6 allows (a subnet with IPv6 must not go below it)
IPV6_MIN_MTU = 1280


# --- the config section ----------------------------------------------------------------


def _cidr_list(value: object) -> tuple[str, ...]:
    """One CIDR, or one IPv4 and one IPv6 (a list, or ``"v4,v6"``)."""
    if isinstance(value, str):
        value = [c.strip() for c in value.split(",") if c.strip()]
    if not isinstance(value, list | tuple) or not 1 <= len(value) <= 2:
        raise ValueError("expected one CIDR, or one IPv4 and one IPv6")
    versions: set[int] = set()
    for c in value:
        try:
            net = ipaddress.ip_network(c, strict=True)
        except (ValueError, TypeError) as exc:
            raise ValueError(str(exc)) from None
        if net.version in versions:
            raise ValueError(f"two IPv{net.version} CIDRs")
        if net.prefixlen > (30 if net.version == 4 else 126):
            raise ValueError(f"{net} is too small")
        versions.add(net.version)
    return tuple(str(c) for c in value)


def _gateway_text(value: str) -> str:
    for g in value.split(","):
        if not is_ip(g.strip()):
            raise ValueError(f"{g.strip()!r} is not an IP address")
    return value


def excluded_ips(item: object) -> set[str]:
    """The addresses of an ``exclude_ips`` entry: one address or a range ``a..b``."""
    try:
        if not isinstance(item, str):
            raise ValueError
        if ".." not in item:
            return {str(ipaddress.ip_address(item))}
        lo_s, hi_s = item.split("..", 1)
        lo, hi = ipaddress.ip_address(lo_s), ipaddress.ip_address(hi_s)
        if lo.version != hi.version or int(hi) < int(lo) or int(hi) - int(lo) > 65536:
            raise ValueError
        return {str(ipaddress.ip_address(i)) for i in range(int(lo), int(hi) + 1)}
    except ValueError:
        raise ValueError(f"{item!r} is not an address or a range a..b") from None


def _exclude_list(value: object) -> tuple[str, ...]:
    items = value or []
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of addresses or ranges a..b, got {show(value)}")
    for item in items:
        excluded_ips(item)
    return tuple(items)


def _namespace_list(value: object) -> tuple[str, ...]:
    items = value or []
    if not isinstance(items, list | tuple) or not all(isinstance(n, str) for n in items):
        raise ValueError("expected a list of namespace names")
    return tuple(items)


def _ip_pools(value: object) -> dict[str, tuple[str, ...]]:
    pools = value or {}
    if not isinstance(pools, Mapping):
        raise ValueError("expected name -> list of addresses")
    out: dict[str, tuple[str, ...]] = {}
    for pool, ips in pools.items():
        if not isinstance(ips, list | tuple) or not all(
                isinstance(i, str) and is_ip(i) for i in ips):
            raise invalid("expected a list of addresses", str(pool))
        out[str(pool)] = tuple(ips)
    return out


def _subnet_name(name: str) -> str:
    if not name or any(c.isspace() for c in name):
        raise ValueError("expected a subnet name without whitespace")
    return name


def _ip(value: str) -> str:
    if not is_ip(value):
        raise ValueError(f"expected an IP address, got {show(value)}")
    return value


def networks_of(cfg: OvnSubnetConfig) -> list[IPNetwork]:
    return [ipaddress.ip_network(c) for c in cfg.cidrs or cfg.cidr or ()]


def gateways_of(cfg: OvnSubnetConfig) -> list[IPAddress]:
    return [ipaddress.ip_address(g.strip()) for g in (cfg.gateway or "").split(",")
            if g.strip()]


def _check_subnet(cfg: OvnSubnetConfig) -> None:
    if cfg.cidrs is None and cfg.cidr is None:
        raise invalid("expected one CIDR, or one IPv4 and one IPv6", "cidr")
    networks = networks_of(cfg)
    for g in gateways_of(cfg):
        if not any(g.version == n.version and g in n for n in networks):
            raise invalid(f"{g} is outside the subnet", "gateway")
    if cfg.mtu is not None and cfg.mtu < IPV6_MIN_MTU and any(n.version == 6
                                                              for n in networks):
        raise invalid(f"an IPv6 subnet needs at least {IPV6_MIN_MTU}, got {cfg.mtu}", "mtu")


@section(check=_check_subnet)
@attrs.frozen
class OvnSubnetConfig:
    """One entry of ``providers.ovn.subnets``."""

    name: str = attrs.field(metadata=rule(_subnet_name))
    #: one CIDR, or one IPv4 and one IPv6 (``cidrs`` is the same key, plural)
    cidr: tuple[str, ...] | None = attrs.field(default=None, metadata=rule(parse=_cidr_list))
    cidrs: tuple[str, ...] | None = attrs.field(default=None, metadata=rule(parse=_cidr_list))
    #: ``v4`` or ``v4,v6``; default: each network's first address
    gateway: str | None = attrs.field(default=None, metadata=rule(_gateway_text))
    exclude_ips: tuple[str, ...] = attrs.field(default=(), metadata=rule(parse=_exclude_list))
    namespaces: tuple[str, ...] = attrs.field(default=(),
                                              metadata=rule(parse=_namespace_list))
    gateway_type: str = attrs.field(default="distributed",
                                    metadata=one_of("distributed", "centralized"))
    router: str | None = None
    default: bool = False
    ip_pools: dict[str, tuple[str, ...]] = attrs.field(factory=dict,
                                                       metadata=rule(parse=_ip_pools))
    #: the pod interface's MTU on this subnet; default: the provider's ``mtu``
    mtu: int | None = attrs.field(default=None, metadata=between(68, 65535))


def _interface(value: str) -> str:
    """``ADDRESS/PREFIXLEN``: the router's address on its external network."""
    try:
        iface = ipaddress.ip_interface(value)
    except (ValueError, TypeError):
        raise ValueError(f"expected ADDRESS/PREFIXLEN, got {show(value)}") from None
    if "/" not in value or iface.ip == iface.network.network_address:
        raise ValueError(f"expected ADDRESS/PREFIXLEN (a host's address), got {show(value)}")
    return value


def _chassis_list(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, list | tuple) or not value
            or not all(isinstance(c, str) and c.strip() for c in value)):
        raise ValueError("expected a non-empty list of chassis names (highest priority first)")
    if len(set(value)) != len(value):
        raise ValueError("a chassis is named twice")
    return tuple(value)


def _cidr(value: str) -> str:
    try:
        ipaddress.ip_network(value, strict=True)
    except (ValueError, TypeError) as exc:
        raise ValueError(str(exc)) from None
    return value


def _check_external(cfg: OvnExternalConfig) -> None:
    iface = ipaddress.ip_interface(cfg.address)
    if cfg.cidr is not None and ipaddress.ip_network(cfg.cidr) != iface.network:
        raise invalid(f"{cfg.address} is not in {cfg.cidr}", "address")
    gateway = ipaddress.ip_address(cfg.gateway)
    if gateway.version != iface.version or gateway not in iface.network:
        raise invalid(f"{cfg.gateway} is not on the external network {iface.network}",
                      "gateway")
    if gateway == iface.ip:
        raise invalid(f"{cfg.gateway} is the router's own address", "gateway")


@section(check=_check_external)
@attrs.frozen
class OvnExternalConfig:
    """A router's ``external``: the network its NAT leaves by."""

    #: the router's address there, with the network's prefix length
    address: str = attrs.field(metadata=rule(_interface))
    #: the next hop out (the physical network's router)
    gateway: str = attrs.field(metadata=rule(_ip))
    #: what the chassis' ``ovn-bridge-mappings`` map to a bridge
    network_name: str = attrs.field(metadata=text(strip=True))
    #: where the gateway port (and so the NAT) runs, highest priority first
    chassis: tuple[str, ...] = attrs.field(metadata=rule(parse=_chassis_list))
    #: optional: the network, checked against ``address``
    cidr: str | None = attrs.field(default=None, metadata=rule(_cidr))


def _check_router(cfg: OvnRouterConfig) -> None:
    ext = cfg.external
    if ext is None:
        return
    if cfg.external_gateway is not None and cfg.external_gateway != ext.gateway:
        raise invalid(f"{cfg.external_gateway} differs from external.gateway {ext.gateway} "
                      "(leave it out: it defaults to it)", "external_gateway")
    if cfg.external_ip is not None and (ipaddress.ip_address(cfg.external_ip).version
                                        != ipaddress.ip_interface(ext.address).version):
        raise invalid(f"{cfg.external_ip} is not of external.address's family",
                      "external_ip")


@section(check=_check_router)
@attrs.frozen
class OvnRouterConfig:
    """One entry of ``providers.ovn.routers``."""

    name: str = attrs.field(metadata=text())
    #: default: ``external.address``'s address (when there is an ``external``)
    external_ip: str | None = attrs.field(default=None, metadata=rule(_ip))
    #: default: ``external.gateway``, else 100.64.0.1
    external_gateway: str | None = attrs.field(default=None, metadata=rule(_ip))
    #: the external network; without it NAT rules are written but translate nothing
    external: OvnExternalConfig | None = None


def _remote(value: str) -> str:
    if not value.startswith(("unix:", "tcp:", "ssl:")):
        raise ValueError("expected unix:PATH, tcp:HOST:PORT or ssl:...")
    return value


def _nonempty(subnets: tuple[OvnSubnetConfig, ...]) -> tuple[OvnSubnetConfig, ...]:
    if not subnets:
        raise ValueError("expected a non-empty list of subnets")
    return subnets


def _backoff(value: tuple[int, ...]) -> tuple[int, ...]:
    """``[MIN, MAX]`` milliseconds, 10 <= MIN <= MAX <= 60,000."""
    if len(value) != 2:
        raise ValueError(f"expected [MIN, MAX] in milliseconds, got {list(value)}")
    if not 10 <= value[0] <= value[1] <= 60_000:
        raise ValueError(f"expected 10 <= MIN <= MAX <= 60000, got {list(value)}")
    return value


def _security_groups(value: object) -> dict[str, Any]:
    """The raw groups: each is checked on its own (``parse_groups``), so one bad group
    fails only the pods naming it; the section's shape is checked here."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("expected security group name -> {ingress: [rules], "
                         "egress: [rules]}")
    return {str(k): v for k, v in value.items()}


def _check_config(cfg: OvnConfig) -> None:
    names = [s.name for s in cfg.subnets]
    routers = [r.name for r in cfg.routers]
    if len(set(routers)) != len(routers):
        raise invalid("router names must be unique", "routers")
    for i, r in enumerate(cfg.routers):
        if r.external is not None and f"ext-{r.name}" in names:
            raise invalid(f"a subnet is named ext-{r.name}, the name of router {r.name}'s "
                          "external switch", "routers", i, "external")
    if len(set(names)) != len(names):
        raise invalid("subnet names must be unique", "subnets")
    if sum(s.default for s in cfg.subnets) > 1:
        raise invalid("only one subnet may be the default", "subnets")
    if cfg.mtu < IPV6_MIN_MTU:
        for s in cfg.subnets:
            if s.mtu is None and any(n.version == 6 for n in networks_of(s)):
                raise invalid(f"subnet {s.name} has IPv6, which needs an MTU of at least "
                              f"{IPV6_MIN_MTU}; got {cfg.mtu}", "mtu")
    for net, sub in cfg.networks.items():
        if sub not in names:
            raise invalid(f"unknown subnet {sub!r}", "networks", net)
        if net == DEFAULT_NETWORK:
            raise invalid("the default network is implicit", "networks", net)


@section(check=_check_config)
@attrs.frozen
class OvnConfig:
    """The section ``providers.ovn``."""

    remote: str | None = attrs.field(default=None, metadata=rule(_remote))
    subnets: tuple[OvnSubnetConfig, ...] = attrs.field(default=(), metadata=rule(_nonempty))
    routers: tuple[OvnRouterConfig, ...] = ()
    timeout: float = attrs.field(default=10.0, metadata=between(0.1, 300))
    #: how long a NetworkPolicy change waits for every chassis to install its flows
    #: (NB_Global.hv_cfg) before it is reported waiting (asked again soon); 0: not at all
    flows_timeout: float = attrs.field(default=2.0, metadata=between(0, 60))
    batch_window_ms: float = attrs.field(default=DEFAULT_BATCH_WINDOW * 1000,
                                         metadata=between(0, 1000))
    seed: int | None = attrs.field(default=None, metadata=between(0, 2**32))
    #: attachment network -> the subnet serving it
    networks: dict[str, str] = attrs.field(factory=dict)
    #: security group name -> {ingress: [rules], egress: [rules]} (see secgroups.py)
    security_groups: dict[str, Any] = attrs.field(factory=dict,
                                                  metadata=rule(parse=_security_groups))
    #: [MIN, MAX] between reconnect attempts
    reconnect_backoff_ms: tuple[int, ...] | None = attrs.field(default=None,
                                                               metadata=rule(_backoff))
    #: the node agent's side: the local Open vSwitch database, the integration bridge,
    #: and how long a plug waits for ovn-controller to install the port
    ovs_db: str = attrs.field(default=DEFAULT_OVS_DB, metadata=rule(_remote))
    integration_bridge: str = attrs.field(default="br-int", metadata=text())
    bind_timeout: float = attrs.field(default=20.0, metadata=between(0.1, 300))
    #: the pod interface's MTU (a subnet's ``mtu`` comes first): room for Geneve's
    #: overhead on a 1500 underlay, as Kube-OVN leaves
    mtu: int = attrs.field(default=DEFAULT_MTU, metadata=between(68, 65535))
