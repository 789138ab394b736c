"""The OVN provider: pod addresses from its own IPAM, written as logical switch ports,
port groups, NAT rules and routes into a real OVN Northbound database through ovsdbapp.

The Northbound database is the IPAM's durable memory: ``allocate`` writes the port with
its address before the engine records it, so an address survives a controller crash in
NB, and a restarted controller rebuilds its IPAM from the ports it finds there. An address
in NB that no record claims stays held (never handed to a second pod) until its port goes.
``route`` completes the port (port security, security groups, the node's group for a
distributed gateway, VIPs, EIP/SNAT with a source route); ``release`` removes it all.
"""

from __future__ import annotations

import ipaddress
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.annotations import SUBNETS, check_references, is_ip, show
from podnet.hookspecs.annotations import annotation_field as _field
from podnet.hookspecs.errors import ConfigError, ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import (
    DEFAULT_NETWORK,
    NodeInfo,
    PodInfo,
    PodNetwork,
    PodNetworkStatus,
    WorkloadInfo,
    statefulset_ordinal,
)
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import (
    between,
    config_key,
    invalid,
    one_of,
    read_section,
    rule,
    section,
    text,
)
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
    CheckResult,
    NetworkAttachment,
    Plug,
    PlugContext,
    PlugResult,
    PodNetworkContext,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    UnplugContext,
    VerifyResult,
)
from podnet.plugins.ovn.rows import (
    GROUPS,
    KEY,
    OWNER,
    OWNER_VALUE,
    ROLE,
    ROLE_VIP,
    VIPS,
    ExternalNet,
    RouterLink,
    vip_port_name,
)
from podnet.plugins.ovn.secgroups import (
    Acl,
    BadGroup,
    SecurityGroup,
    acls_by_port_group,
    parse_groups,
    port_group_of,
)

if TYPE_CHECKING:
    from podnet.plugins.ovn.dataplane import OvsDataplane
    from podnet.plugins.ovn.nb import NbClient, PortSpec

NAME = "ovn"
__version__ = "0.1.0"

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
_ORDINAL = re.compile(r"-(\d+)$")
_PG_SAFE = re.compile(r"[^A-Za-z0-9_]")


#: where Open vSwitch keeps its database socket on a host (the node agent's default)
DEFAULT_OVS_DB = "unix:/var/run/openvswitch/db.sock"

#: how long a transaction's leader waits for company: 2 ms gathers a burst's ports into a
#: few transactions (6x faster than one ovn-nbctl per port at 1,000, against 4.5x at 0)
DEFAULT_BATCH_WINDOW = 0.002
#: the pod interface's MTU when the config names none: a 1500 underlay less the 100 bytes
#: Kube-OVN sets aside for Geneve (its encapsulation needs 58 on IPv4, more with options)
DEFAULT_MTU = 1400
#: the smallest MTU IPv6 allows (a subnet with IPv6 must not go below it)
IPV6_MIN_MTU = 1280


def port_name(pn: PodNetwork) -> str:
    """The logical switch port of a record: named after its key (stable for sticky pods)."""
    return f"{pn.metadata.namespace}/{pn.metadata.name}"


def pg_name(prefix: str, name: str) -> str:
    """A port group name OVN accepts (letters, digits, underscores)."""
    return f"{prefix}_{_PG_SAFE.sub('_', name)}"


@attrs.define
class Subnet:
    name: str
    v4: ipaddress.IPv4Network | None
    v6: ipaddress.IPv6Network | None
    gateway: str | None
    gateway6: str | None
    excluded: set[str]
    namespaces: tuple[str, ...] = ()
    gateway_type: str = "distributed"
    router: str | None = None
    ip_pools: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    default: bool = False
    #: the subnet's own MTU; ``None``: the provider's
    mtu: int | None = None

    def networks(self) -> list[IPNetwork]:
        return [n for n in (self.v4, self.v6) if n is not None]

    def describe(self) -> str:
        return f"subnet {self.name} ({', '.join(str(n) for n in self.networks())})"

    def router_link(self) -> RouterLink | None:
        """The ports connecting the subnet's switch to its router (``None``: no router):
        the router port holds each family's gateway with the subnet's prefix length."""
        if not self.router:
            return None
        pairs = ((self.gateway, self.v4), (self.gateway6, self.v6))
        networks = [f"{ipaddress.ip_address(gw)}/{net.prefixlen}" for gw, net in pairs
                    if gw and net is not None]
        return RouterLink(self.router, self.name, networks)


@attrs.define
class Router:
    name: str
    external_ip: str | None = None
    external_gateway: str = "100.64.0.1"
    #: its external network (``None``: none configured, NAT has no way out)
    external: ExternalNet | None = None


def _router(cfg: OvnRouterConfig) -> Router:
    ext = cfg.external
    if ext is None:
        return Router(cfg.name, cfg.external_ip, cfg.external_gateway or "100.64.0.1")
    net = ExternalNet(cfg.name, ext.address, ext.gateway, ext.network_name, ext.chassis)
    return Router(cfg.name, cfg.external_ip or str(ipaddress.ip_interface(ext.address).ip),
                  ext.gateway, net)


@attrs.define
class _Held:
    """One address the IPAM holds: the port that has it (``None``: nobody we know), and
    whether it is one of that port's VIPs (``podnet.io/vips``, a virtual port of its own)."""

    port: str | None
    vip: bool = False


class Ipam:
    """Addresses and MACs in use, per subnet; rebuilt from the NB ports."""

    def __init__(self, seed: int | None = None) -> None:
        self.used: dict[str, _Held] = {}
        self.macs: dict[str, str] = {}
        self.random = random.Random(seed)

    def owner(self, ip: str) -> str | None:
        held = self.used.get(ip)
        return None if held is None else (held.port or "a port podnet does not own")

    def take(self, port: str, ips: Sequence[str], mac: str | None) -> None:
        for ip in ips:
            self.used[ip] = _Held(port)
        if mac:
            self.macs[mac] = port

    def take_vips(self, port: str, vips: Sequence[str]) -> None:
        for ip in vips:
            self.used[ip] = _Held(port, vip=True)

    def vips_of(self, port: str) -> set[str]:
        return {ip for ip, h in self.used.items() if h.port == port and h.vip}

    def drop_vips(self, port: str, keep: Collection[str] = ()) -> None:
        """Free the port's VIPs not in ``keep`` (its own addresses stay)."""
        for ip in self.vips_of(port) - set(keep):
            del self.used[ip]

    def free(self, port: str) -> None:
        for ip in [ip for ip, h in self.used.items() if h.port == port]:
            del self.used[ip]
        for mac in [m for m, p in self.macs.items() if p == port]:
            del self.macs[mac]

    def random_free(self, network: IPNetwork, blocked: set[str]) -> str | None:
        first = int(network.network_address) + 1
        last = int(network.broadcast_address) - (1 if network.version == 4 else 0)
        size = last - first + 1
        if size <= 0:
            return None
        start = self.random.randrange(size)
        limit = min(size, 1 << 20)
        for step in range(limit):
            addr = ipaddress.ip_address(first + (start + step) % size)
            ip = str(addr)
            if ip not in self.used and ip not in blocked:
                return ip
        return None

    def new_mac(self) -> str:
        while True:
            digits = [self.random.randrange(256) for _ in range(5)]
            mac = "0a:" + ":".join(f"{b:02x}" for b in digits)
            if mac not in self.macs:
                return mac


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


def _excluded(item: object) -> set[str]:
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
        _excluded(item)
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


def _networks(cfg: OvnSubnetConfig) -> list[IPNetwork]:
    return [ipaddress.ip_network(c) for c in cfg.cidrs or cfg.cidr or ()]


def _gateways(cfg: OvnSubnetConfig) -> list[IPAddress]:
    return [ipaddress.ip_address(g.strip()) for g in (cfg.gateway or "").split(",")
            if g.strip()]


def _check_subnet(cfg: OvnSubnetConfig) -> None:
    if cfg.cidrs is None and cfg.cidr is None:
        raise invalid("expected one CIDR, or one IPv4 and one IPv6", "cidr")
    networks = _networks(cfg)
    for g in _gateways(cfg):
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
            if s.mtu is None and any(n.version == 6 for n in _networks(s)):
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


class OvnProvider:
    """The plugin. Configure it (``podnet_configure``) or pass ``remote`` and subnets."""

    def __init__(self, remote: str | None = None, subnets: Sequence[Mapping[str, Any]] = (),
                 *, name: str = NAME, timeout: float = 10.0,
                 batch_window: float = DEFAULT_BATCH_WINDOW,
                 routers: Sequence[Mapping[str, Any]] = (), seed: int | None = None,
                 networks: Mapping[str, str] | None = None,
                 policy: PoolPolicy | None = None,
                 workload_exists: Callable[[str, str, str, str], bool | None] | None = None,
                 reconnect_backoff_ms: tuple[int, int] | None = None,
                 security_groups: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.remote = remote
        self.timeout = timeout
        #: (min, max) between reconnect attempts after the NB server went away
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.batch_window = batch_window
        self.policy = policy or PoolPolicy(reuse_cooldown=0.0)
        self.subnets: dict[str, Subnet] = {}
        #: attachment networks this provider serves (``podnet.io/networks``) -> subnet
        self.networks: dict[str, str] = {}
        self.routers: dict[str, Router] = {}
        self.ipam = Ipam(seed)
        #: ports podnet did not make -> the addresses of theirs the IPAM holds
        self._foreign: dict[str, list[str]] = {}
        self.lock = threading.RLock()
        self._client: NbClient | None = None
        self._synced = False
        #: the node agent's dataplane (made on first use: the controller never needs it)
        self._dataplane: OvsDataplane | None = None
        #: hook calls that did work, by hook (for the demo's summary)
        self.calls: Counter[str] = Counter()
        #: (kind, namespace, workload name, pod name) -> whether the workload still wants
        #: that pod (exists, and for a StatefulSet, has replicas above the pod's ordinal);
        #: None: cannot tell, core's sticky_hold window decides
        self.workload_exists = workload_exists
        #: security groups by name, each checked on its own (a bad one is a BadGroup)
        self.security_groups: dict[str, SecurityGroup | BadGroup] = {}
        #: the groups' ACLs are to be written and unused groups swept (at the next use of
        #: the client: after a start, a reconnect to a new NB, or a config change)
        self._sg_dirty = True
        #: the routers' external networks are to be written (and removed ones deleted)
        self._ext_dirty = True
        self.config = OvnConfig()
        self._configure({"subnets": list(subnets) or [_DEFAULT_SUBNET],
                         "routers": list(routers), "networks": dict(networks or {}),
                         "security_groups": dict(security_groups or {})},
                        initial=True)

    # --- the connection and the IPAM's rebuild ---------------------------------------------

    @property
    def client(self) -> NbClient:
        with self.lock:
            if self._client is None:
                if not self.remote:
                    raise ConfigError(config_key(self.name, "remote"),
                                      "no Northbound remote configured")
                try:
                    from podnet.plugins.ovn.nb import NbClient
                except ImportError as exc:  # pragma: no cover - a broken install
                    raise ConfigError(config_key(self.name), f"the OVN provider needs ovsdbapp and "
                                      f"ovs (pip install ovsdbapp): {exc}") from None
                self._client = NbClient(self.remote, self.timeout, self.batch_window,
                                        self.reconnect_backoff_ms)
            if not self._synced:
                self._rebuild(self._client)
                self._synced = True
            else:
                self._follow_foreign_ports(self._client)
            if self._sg_dirty:
                self._sync_security_groups(self._client)
                self._sg_dirty = False
            if self._ext_dirty:
                self._client.ensure_externals(self._externals())
                self._ext_dirty = False
            return self._client

    @property
    def dataplane(self) -> OvsDataplane:
        with self.lock:
            if self._dataplane is None:
                from podnet.plugins.ovn.dataplane import OvsDataplane

                cfg = self.config
                self._dataplane = OvsDataplane(cfg.ovs_db, cfg.integration_bridge,
                                               bind_timeout=cfg.bind_timeout,
                                               timeout=self.timeout)
            return self._dataplane

    def close(self) -> None:
        with self.lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            self._synced = False
            self._sg_dirty = True
            self._ext_dirty = True
            if self._dataplane is not None:
                self._dataplane.close()
            self._dataplane = None

    def _externals(self) -> list[ExternalNet]:
        """The routers' external networks, each with a ``snat`` rule to the router's
        ``external_ip`` for each of its subnets' CIDRs of the external family."""
        nets = []
        for router in self.routers.values():
            ext = router.external
            if ext is None:
                continue
            ext.snat = [(router.external_ip or "", str(net))
                        for s in self.subnets.values() if s.router == router.name
                        for net in s.networks() if net.version == ext.family]
            nets.append(ext)
        return nets

    def _repair_external(self, client: NbClient, routers: Sequence[str]) -> None:
        """A router's external network changed behind podnet's back (or NB lost it) is
        written again before a pod of it is routed (reads only when it is as it should)."""
        nets = [r.external for name in routers
                if (r := self.routers.get(name)) is not None and r.external is not None]
        if nets and not all(client.external_ok(e) for e in nets):
            with self.lock:
                client.ensure_externals(self._externals())

    def _rebuild(self, client: NbClient) -> None:
        """Every address on a port in NB is held: podnet's ports by their record, the
        others (router ports, someone else's) by nobody."""
        with client.reading():  # the notes and the replica as of one moment
            client.port_changes()  # what the rebuild reads supersedes the notes so far
            ports = client.ports()
            router_ports = client.rows("Logical_Router_Port")
        ipam = Ipam()
        ipam.random = self.ipam.random
        self._foreign = {}
        for lsp in ports:
            ext = dict(lsp.external_ids)
            vip = _virtual_ip(lsp)
            if ext.get(OWNER) == OWNER_VALUE:
                if vip and ext.get(ROLE) == ROLE_VIP and ext.get(KEY):
                    # a pod's VIP: held for the pod's port (named after the same key)
                    ipam.take_vips(ext[KEY], [vip])
                    continue
                for ips, mac in _port_addresses(lsp.addresses):
                    ipam.take(lsp.name, ips, mac)
            else:
                addresses = list(lsp.addresses) + ([f"virtual {vip}"] if vip else [])
                self._hold_foreign(ipam, lsp.name, addresses)
        # a router's own addresses (podnet's gateways among them) and MACs: never a pod's
        for lrp in router_ports:
            for network in lrp.networks:
                ipam.used.setdefault(str(network).split("/")[0], _Held(None))
            if lrp.mac:
                ipam.macs.setdefault(str(lrp.mac).lower(), f"router port {lrp.name}")
        self.ipam = ipam

    def _hold_foreign(self, ipam: Ipam, name: str, addresses: Sequence[str]) -> None:
        """Hold the addresses of a port podnet did not make (never handed to a pod)."""
        held = []
        for ips, mac in _port_addresses(addresses):
            ipam.take(f"foreign:{name}", ips, mac)
            for ip in ips:
                ipam.used[ip] = _Held(None)
            held.extend(ips)
        self._foreign[name] = held

    def _release_foreign(self, ipam: Ipam, name: str) -> None:
        for ip in self._foreign.pop(name, ()):
            held = ipam.used.get(ip)
            if held is not None and held.port is None:
                del ipam.used[ip]
        ipam.free(f"foreign:{name}")

    def _follow_foreign_ports(self, client: NbClient) -> None:
        """Apply the NB changes to ports others own since the last look: a port someone
        creates after podnet read NB must not have its address handed out."""
        for event, name, ext, addresses in client.port_changes():
            if ext.get(OWNER) == OWNER_VALUE:
                continue  # podnet's own: the records decide
            self._release_foreign(self.ipam, name)
            if event != "delete":
                self._hold_foreign(self.ipam, name, addresses)

    # --- configuration ---------------------------------------------------------------------

    def _configure(self, config: Mapping[str, Any], *, initial: bool = False) -> None:
        """Read a section: keys it leaves out keep their values (subnets, routers and
        networks are checked together as they result)."""
        base = None if initial else self.config
        cfg = read_section(OvnConfig, self.name, config, base)
        if "remote" in config:
            self.remote = cfg.remote
        if "timeout" in config:
            self.timeout = cfg.timeout
        if "batch_window_ms" in config:
            self.batch_window = cfg.batch_window_ms / 1000
        if "reconnect_backoff_ms" in config and cfg.reconnect_backoff_ms is not None:
            low, high = cfg.reconnect_backoff_ms
            self.reconnect_backoff_ms = (low, high)
        if "seed" in config and cfg.seed is not None:
            self.ipam.random.seed(cfg.seed)
        routers = {r.name: _router(r) for r in cfg.routers} \
            if initial or "routers" in config else {}
        if initial or "routers" in config:
            self._ext_dirty = True
        if initial or "subnets" in config:
            subnets = [_subnet(s) for s in cfg.subnets]
            if not any(s.default for s in subnets):
                subnets[0].default = True
            for s in subnets:
                if s.router and s.router not in routers:
                    routers[s.router] = Router(s.router)
            self.subnets = {s.name: s for s in subnets}
            self._ext_dirty = True  # the routers' snat rules follow their subnets
        self.routers = routers or self.routers
        if initial or "networks" in config:
            self.networks = dict(cfg.networks)
        if initial or "security_groups" in config:
            self.security_groups = parse_groups(cfg.security_groups,
                                                config_key(self.name, "security_groups"))
            self._sg_dirty = True
        if {"ovs_db", "integration_bridge", "bind_timeout"} & set(config):
            if self._dataplane is not None:
                self._dataplane.close()
            self._dataplane = None
        self.config = cfg

    # --- hooks: registration ---------------------------------------------------------------

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=False,
            manages_interfaces=False, policy=self.policy,
            sticky_kinds=("StatefulSet", "VirtualMachineInstance"),
            description="OVN overlay: logical switch ports in the Northbound DB",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        with self.lock:
            self._configure(config)

    @hookimpl
    def podnet_select_networks(self, pod: PodInfo, node: NodeInfo
                               ) -> Sequence[NetworkAttachment] | None:
        """The attachment networks of ``podnet.io/networks`` that this provider serves;
        core validates the annotation, and unplugs a network the pod no longer names."""
        raw = pod.annotations.get(NETWORKS_ANNOTATION, "")
        names = [n.strip() for n in raw.split(",") if n.strip()]
        mine = [NetworkAttachment(network=n, provider=self.name)
                for n in names if n in self.networks]
        return mine or None

    # --- allocate ----------------------------------------------------------------------------

    def _subnet_for(self, pn: PodNetwork, namespace_annotations: Mapping[str, str]
                    ) -> Subnet:
        req = pn.spec.requests
        if pn.spec.network != DEFAULT_NETWORK:
            attached = self.networks.get(pn.spec.network)
            if attached is None:
                raise InvalidRequest(_field("networks"), f"network {pn.spec.network!r} is not "
                                     f"served by provider {self.name}")
            return self.subnets[attached]
        if req.subnets:
            for name in req.subnets:
                if name not in self.subnets:
                    raise InvalidRequest(_field("subnets"), f"unknown subnet {name!r}; known: "
                                         f"{', '.join(sorted(self.subnets))}")
            return self.subnets[req.subnets[0]]
        chosen = self._namespace_subnet(pn.metadata.namespace or "", namespace_annotations)
        if chosen is not None:
            return chosen
        for s in self.subnets.values():
            if pn.metadata.namespace in s.namespaces:
                return s
        return next(s for s in self.subnets.values() if s.default)

    def _namespace_subnet(self, namespace: str, annotations: Mapping[str, str]
                          ) -> Subnet | None:
        """``podnet.io/subnets`` on the pod's Namespace (its first entry), if any."""
        raw = annotations.get(SUBNETS)
        if raw is None:
            return None
        field = f"namespace[{namespace}].metadata.annotations[{SUBNETS}]"
        try:
            if not raw.strip():
                raise ValueError(f"empty value {show(raw)}")
            names = check_references([p.strip() for p in raw.split(",")])
        except ValueError as exc:
            message = str(exc) if show(raw) in str(exc) else f"{exc} in {show(raw)}"
            raise InvalidRequest(field, f"Namespace {namespace}: {message}") from None
        for name in names:
            if name not in self.subnets:
                raise InvalidRequest(field, f"Namespace {namespace} names unknown subnet "
                                     f"{name!r}; known: {', '.join(sorted(self.subnets))}")
        return self.subnets[names[0]]

    def _blocked(self, subnet: Subnet, node: NodeInfo | None) -> dict[str, str]:
        blocked = {ip: "an excluded address" for ip in subnet.excluded}
        for gw in (subnet.gateway, subnet.gateway6):
            if gw:
                blocked[gw] = "the subnet's gateway"
        if node is not None:
            for ip in node.internal_ips:
                blocked[ip] = f"node {node.name}'s internal address"
        return blocked

    def _claim_vips(self, pn: PodNetwork, subnet: Subnet, node: NodeInfo | None, name: str,
                    own: Sequence[str]) -> list[str]:
        """Check the pod's VIPs (``podnet.io/vips``) and hold them in the IPAM for its
        port (call under ``self.lock``): each must be in the subnet and free, or already
        this port's VIP. :return: the VIPs newly taken (to give back if the write fails).
        """
        vips = list(pn.spec.requests.vips)
        blocked = self._blocked(subnet, node)
        for vip in vips:
            self._check_wanted(vip, subnet, blocked, "vips")
            if vip in own:
                raise InvalidRequest(_field("vips"), f"VIP {vip} is the pod's own address")
            held = self.ipam.used.get(vip)
            if held is not None and not (held.port == name and held.vip):
                owner = held.port or "a port podnet does not own"
                what = "a VIP of" if held.vip else "the address of"
                raise ProviderError(ErrorKind.CONFLICT, f"VIP {vip} is already {what} "
                                    f"{owner}", field=_field("vips"))
        new = [vip for vip in vips if vip not in self.ipam.vips_of(name)]
        self.ipam.take_vips(name, new)
        return new

    def _check_wanted(self, ip: str, subnet: Subnet, blocked: Mapping[str, str],
                      field: str) -> IPAddress:
        addr = ipaddress.ip_address(ip)
        net = subnet.v4 if addr.version == 4 else subnet.v6
        if net is None or addr not in net or addr in (net.network_address,) or (
                addr.version == 4 and addr == net.broadcast_address):
            raise InvalidRequest(_field(field), f"{ip} is outside {subnet.describe()}")
        if ip in blocked:
            raise InvalidRequest(_field(field), f"{ip} is {blocked[ip]} in {subnet.describe()}")
        return addr

    def _pick(self, pn: PodNetwork, ctx: AllocateContext, subnet: Subnet, name: str
              ) -> tuple[str | None, str | None]:
        req = pn.spec.requests
        blocked = self._blocked(subnet, ctx.node.node)
        v4: str | None = None
        v6: str | None = None
        if req.ip_address:
            for ip in req.ip_address.split(","):
                addr = self._check_wanted(ip.strip(), subnet, blocked, "ip-address")
                owner = self.ipam.owner(str(addr))
                if owner is not None and owner != name:
                    raise ProviderError(ErrorKind.CONFLICT, f"{addr} is already used by {owner}",
                                        field=_field("ip-address"))
                if addr.version == 4:
                    v4 = str(addr)
                else:
                    v6 = str(addr)
            return v4, v6
        if req.ip_pool:
            pool = list(req.ip_pool)
            if len(pool) == 1 and not is_ip(pool[0]):
                named = subnet.ip_pools.get(pool[0])
                if named is None:
                    raise InvalidRequest(_field("ip-pool"), f"no IP pool {pool[0]!r} in "
                                         f"{subnet.describe()}")
                pool = list(named)
            for ip in pool:
                self._check_wanted(ip, subnet, blocked, "ip-pool")
            ordinal = _ordinal(ctx, pn)
            candidates = pool
            if ordinal is not None and ordinal < len(pool):
                candidates = [pool[ordinal]]
            for ip in candidates:
                owner = self.ipam.owner(ip)
                if ip not in req.vips and (owner is None or owner == name):
                    v4, v6 = (ip, None) if ipaddress.ip_address(ip).version == 4 else (None, ip)
                    return v4, v6
            raise ProviderError(ErrorKind.SUBNET_EXHAUSTED,
                                f"every address of the IP pool is in use ({', '.join(pool)})",
                                field=_field("ip-pool"))
        # the pod's own VIPs are not free for it either (held once the address is chosen)
        avoid = set(blocked) | set(req.vips)
        if subnet.v4 is not None:
            v4 = self.ipam.random_free(subnet.v4, avoid)
            if v4 is None:
                raise ProviderError(ErrorKind.SUBNET_EXHAUSTED, f"{subnet.describe()} is full",
                                    subject=subnet.name)
        if subnet.v6 is not None:
            v6 = self.ipam.random_free(subnet.v6, avoid)
            if v6 is None:
                raise ProviderError(ErrorKind.SUBNET_EXHAUSTED, f"{subnet.describe()} is full",
                                    subject=subnet.name)
        return v4, v6

    def _external_ids(self, pn: PodNetwork, subnet: str, v4: str | None, v6: str | None,
                      mac: str, node: str) -> dict[str, str]:
        ext: dict[str, str] = {KEY: pn.key, OWNER: OWNER_VALUE, EXT_POD: pn.spec.pod_name,
               EXT_NAMESPACE: pn.metadata.namespace or "", EXT_SUBNET: subnet, EXT_NODE: node,
               EXT_MAC: mac}
        if v4:
            ext[EXT_IP] = v4
        if v6:
            ext[EXT_IPV6] = v6
        return ext

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        self.calls["allocate"] += 1
        client = self.client
        name = port_name(pn)
        with self.lock:
            existing = client.port(name)
            if existing is not None and existing.external_ids.get(KEY) == pn.key:
                found = self._allocation_of(existing)
                if found is not None:
                    return found
            subnet = self._subnet_for(pn, context.namespace_annotations)
            v4, v6 = self._pick(pn, context, subnet, name)
            mac = pn.spec.requests.mac_address
            if mac:
                mac = mac.lower()
                owner = self.ipam.macs.get(mac)
                if owner is not None and owner != name:
                    raise ProviderError(ErrorKind.CONFLICT, f"MAC {mac} is already used by "
                                        f"{owner}", field=_field("mac-address"))
            else:
                mac = self.ipam.new_mac()
            ips = [ip for ip in (v4, v6) if ip]
            self.ipam.free(name)
            self.ipam.take(name, ips, mac)
            try:
                # the VIPs are held with the address, and written with the port: NB
                # remembers them across a restart before anything else may take them
                vips = list(pn.spec.requests.vips)
                self._claim_vips(pn, subnet, context.node.node, name, ips)
            except BaseException:
                self.ipam.free(name)
                raise
        from podnet.plugins.ovn.nb import PortSpec

        allocation = _allocation(subnet, v4, v6, mac, name, self.config.mtu)
        routed = self._routed_port(pn, allocation)
        spec = PortSpec(name, subnet.name, [" ".join([mac, *ips])],
                        self._external_ids(pn, subnet.name, v4, v6, mac, pn.spec.node_name),
                        vips=vips) if routed is None else routed[0]
        try:
            if routed is None:
                client.ensure_infra(switches=[subnet.name])
            else:
                # the port as route makes it: the route that follows finds it in place and
                # writes nothing (one transaction per pod network instead of two). Its
                # groups and their rules first; checked in one read, which waits for the
                # transaction in flight, as each read does
                groups, acls = routed[1], routed[2]
                with client.reading():
                    ready = (client.infra_ok([subnet.name], groups)
                             and (not acls or client.acls_ok(acls)))
                if not ready:
                    client.ensure_infra(switches=[subnet.name], port_groups=groups)
                    if acls:
                        client.ensure_acls(acls)
            client.run([client.ensure_port(spec)])
        except BaseException:
            with self.lock:
                self.ipam.free(name)
            raise
        return allocation

    def _routed_port(self, pn: PodNetwork, allocation: Allocation
                     ) -> tuple[PortSpec, list[str], dict[str, list[Acl]]] | None:
        """The port as ``route`` will want it once the record holds ``allocation``, with
        the port groups it needs and their ACLs; None when route has more to do than the
        port (a router: NAT, routes, the subnet's link) or the request is one route must
        refuse (its error belongs to route, on the record)."""
        status = PodNetworkStatus(ip=allocation.ip, ipv6=allocation.ipv6,
                                  mac=allocation.mac, subnet=allocation.subnet)
        try:
            spec, groups, routers = self._desired(attrs.evolve(pn, status=status),
                                                  pn.spec.node_name)
            acls, peers = self._acls_of(pn)
        except (InvalidRequest, ProviderError):
            return None
        if routers or spec.router is not None:
            return None
        return spec, [*groups, *peers], acls

    @staticmethod
    def _routed_in_place(client: NbClient, spec: PortSpec, groups: Sequence[str],
                         acls: Mapping[str, Sequence[Acl]]) -> bool:
        """Whether NB (the replica, in one read) holds what route would write for a port
        without a router: the switch, the port groups (the port's and its peers') with
        their ACLs, and the port exactly as ``spec`` (exactly its podnet groups)."""
        assert spec.port_groups is not None
        with client.reading():
            if not client.infra_ok([spec.switch], groups):
                return False
            if acls and not client.acls_ok(acls):
                return False
            lsp = client.port(spec.name)
            if lsp is None or (lsp.external_ids.get(GROUPS, "")
                               != ",".join(sorted(set(spec.port_groups)))):
                return False
            return OvnProvider._compare(client, spec, spec.port_groups, None).ok

    def _allocation_of(self, lsp: Any) -> Allocation | None:
        ext = lsp.external_ids
        v4, v6, mac = ext.get(EXT_IP), ext.get(EXT_IPV6), ext.get(EXT_MAC)
        subnet = self.subnets.get(ext.get(EXT_SUBNET, ""))
        if not (v4 or v6) or subnet is None:
            return None
        self.ipam.take(lsp.name, [ip for ip in (v4, v6) if ip], mac)
        return _allocation(subnet, v4, v6, mac, lsp.name, self.config.mtu)

    # --- route / verify ------------------------------------------------------------------------

    def _desired(self, pn: PodNetwork, node: str) -> tuple[PortSpec, list[str], list[str]]:
        """The port as it should be, the port groups and the routers it needs."""
        st = pn.status
        req = pn.spec.requests
        subnet = self.subnets.get(st.subnet or "")
        if subnet is None:
            raise ProviderError(ErrorKind.FATAL, f"record {pn.key} names subnet "
                                f"{st.subnet!r}, which is not configured", field="status.subnet")
        ips = [ip for ip in (st.ip, st.ipv6) if ip]
        mac = st.mac or ""
        # as Kube-OVN: the addresses are the pod's own; its VIPs are virtual ports of their
        # own (this port their parent), which port security lets the pod send from
        entry = " ".join([mac, *ips])
        security = [" ".join([mac, *ips, *req.vips])] if req.port_security else []
        groups = [g.port_group for g in self._groups_of(pn)]
        nated = bool(req.eip or req.snat)
        if subnet.gateway_type == "distributed" and node and not nated:
            # an EIP/SNAT pod leaves its node's group (as Kube-OVN does): its traffic
            # takes the source route to the router's gateway, not the node's
            groups.append(pg_name("node", node))
        router = self.routers.get(subnet.router) if subnet.router else None
        if nated and router is None:
            raise InvalidRequest(_field("eip" if req.eip else "snat"),
                                 f"{subnet.describe()} has no router for NAT")
        v4 = st.ip if st.ip and ipaddress.ip_address(st.ip).version == 4 else None
        v6 = st.ipv6 or (st.ip if st.ip and not v4 else None)
        nats, routes = _nat_rules(req.eip, req.snat, router, v4, v6) if router else ([], [])
        from podnet.plugins.ovn.nb import PortSpec

        spec = PortSpec(
            port_name(pn), subnet.name, [entry],
            self._external_ids(pn, subnet.name, v4, v6, mac, node),
            port_security=security,
            port_groups=groups, router=router.name if router else None,
            nats=nats, routes=routes, vips=list(req.vips))
        return spec, groups, [router.name] if router else []

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        self.calls["route"] += 1
        if not pn.status.ip or not pn.status.mac:
            raise ProviderError(ErrorKind.FATAL, f"record {pn.key} has no address to route",
                                field="status.ip")
        client = self.client
        spec, groups, routers = self._desired(pn, pn.spec.node_name)
        subnet = self.subnets[spec.switch]
        own = [ip for ip in (pn.status.ip, pn.status.ipv6) if ip]
        node = context.node.node if context.node is not None else None
        with self.lock:
            self.ipam.take(spec.name, own, pn.status.mac)
            # VIPs added since the last route are checked and held before anything is
            # written; those the pod no longer lists are freed once their ports are gone
            taken = self._claim_vips(pn, subnet, node, spec.name, own)
        link = subnet.router_link() if routers else None
        try:
            # the peers' port groups before the rules naming their address sets, and the
            # rules before the port joins: a port never is in a group that lacks them
            acls, peers = self._acls_of(pn)
            if routers or not self._routed_in_place(client, spec, [*groups, *peers], acls):
                client.ensure_infra(switches=[spec.switch], routers=routers,
                                    port_groups=[*groups, *peers],
                                    links=[link] if link is not None else [])
                if acls:
                    client.ensure_acls(acls)
                self._repair_external(client, routers)
                client.run([client.ensure_port(spec)])
        except BaseException:
            with self.lock:
                for vip in taken:
                    self.ipam.used.pop(vip, None)
            raise
        with self.lock:
            self.ipam.drop_vips(spec.name, keep=pn.spec.requests.vips)
        return RouteResult(interface=spec.name)

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        pn = context.pod_network
        self.calls["verify"] += 1
        client = self.client
        try:
            self._groups_of(pn)
        except InvalidRequest as exc:
            # a group made bad (or undefined) under a running pod: the repair's route says
            # so on the pod; its port keeps the group's last rules meanwhile
            return VerifyResult(ok=False, reason=str(exc))
        spec, groups, routers = self._desired(pn, pn.spec.node_name)
        link = self.subnets[spec.switch].router_link() if routers else None
        acls, _ = self._acls_of(pn)
        with client.reading():  # the port, its groups and its router link as of one moment
            result = self._compare(client, spec, groups, link)
        if result.ok and acls and not client.acls_ok(acls):
            return VerifyResult(ok=False, reason="the ACLs of port groups "
                                f"{', '.join(sorted(acls))} differ from their security groups")
        return result

    @staticmethod
    def _compare(client: NbClient, spec: PortSpec, groups: Sequence[str],
                 link: RouterLink | None) -> VerifyResult:
        lsp = client.port(spec.name)
        if lsp is None:
            return VerifyResult(ok=False, reason=f"logical switch port {spec.name} is missing")
        if list(lsp.addresses) != spec.addresses:
            return VerifyResult(ok=False, reason=f"port {spec.name} has addresses "
                                f"{list(lsp.addresses)}, wants {spec.addresses}")
        if list(lsp.port_security) != spec.port_security:
            return VerifyResult(ok=False, reason=f"port {spec.name} has port security "
                                f"{list(lsp.port_security)}, wants {spec.port_security}")
        recorded = dict(lsp.external_ids)
        recorded.pop(GROUPS, None)
        had_vips = recorded.pop(VIPS, "")
        if recorded != spec.external_ids:
            return VerifyResult(ok=False, reason=f"port {spec.name}'s external_ids changed")
        wanted_vips = spec.vips or []
        if had_vips != ",".join(wanted_vips):
            return VerifyResult(ok=False, reason=f"port {spec.name} has VIPs {had_vips!r}, "
                                f"wants {','.join(wanted_vips)!r}")
        for vip in wanted_vips:
            name = vip_port_name(spec.switch, vip)
            vport = client.port(name)
            if (vport is None or _virtual_ip(vport) != vip
                    or vport.external_ids.get(KEY) != spec.external_ids[KEY]
                    or spec.name not in vport.options.get("virtual-parents", "").split(",")):
                return VerifyResult(ok=False, reason=f"virtual port {name} of VIP {vip} is "
                                    "missing or changed")
        missing = [g for g in groups if not client.in_port_group(g, lsp)]
        if missing:
            return VerifyResult(ok=False, reason=f"port {spec.name} is not in {missing}")
        # the subnet's way out: route re-makes it (shared, so the first repair mends it)
        if link is not None and not client.link_ok(link):
            return VerifyResult(ok=False, reason=f"router link {link.lrp}/{link.lsp} of "
                                f"subnet {spec.switch} is missing or changed")
        return VerifyResult(ok=True)

    # --- security groups ---------------------------------------------------------------------

    def _groups_of(self, pn: PodNetwork) -> list[SecurityGroup]:
        """The checked security groups the pod names (``podnet.io/security-groups``): an
        unknown or a bad one is the pod's ``InvalidRequest``, naming the group's key."""
        out = []
        for name in pn.spec.requests.security_groups:
            group = self.security_groups.get(name)
            if group is None:
                known = ", ".join(sorted(self.security_groups)) or "none"
                raise InvalidRequest(_field("security-groups"), f"unknown security group "
                                     f"{name!r}; defined in "
                                     f"{config_key(self.name, 'security_groups')}: {known}")
            if isinstance(group, BadGroup):
                raise InvalidRequest(group.field, f"security group {name} (named in "
                                     f"{_field('security-groups')}): {group.message}")
            out.append(group)
        return out

    def _acls_of(self, pn: PodNetwork) -> tuple[dict[str, list[Acl]], list[str]]:
        """The ACLs of the pod's groups by port group, and the port groups of the peers
        their rules name (northd makes the peers' address sets from them)."""
        groups = self._groups_of(pn)
        if not groups:
            return {}, []
        peers = sorted({port_group_of(p) for g in groups for p in g.peers()})
        return acls_by_port_group(groups), peers

    def _sync_security_groups(self, client: NbClient) -> None:
        """Every good group's ACLs as configured (a changed rule replaces the old ACL, a
        restart writes nothing that is there already); podnet's ``sg_`` port groups of
        groups no longer defined are deleted once they have no member (a group still
        holding pods keeps its last rules: fail closed, not open). A bad group's rows
        are left as they are."""
        good = [g for g in self.security_groups.values() if isinstance(g, SecurityGroup)]
        known = {port_group_of(n) for n in self.security_groups}
        # the peers' port groups too (a bad peer's: good rules name its address sets)
        client.ensure_infra(port_groups=sorted(
            {g.port_group for g in good} | {port_group_of(p) for g in good
                                            for p in g.peers()}))
        if good:
            client.ensure_acls(acls_by_port_group(good))
        stale = [pg.name for pg in client.rows("Port_Group")
                 if pg.name.startswith("sg_") and pg.name not in known
                 and pg.external_ids.get(OWNER) == OWNER_VALUE and not pg.ports]
        client.delete_empty_port_groups(stale)

    # --- release ---------------------------------------------------------------------------

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        pn = context.pod_network
        self.calls["release"] += 1
        client = self.client
        name = port_name(pn)
        client.run([client.delete_port(name, pn.key)])
        with self.lock:
            self.ipam.free(name)
        return ReleaseResult(return_to_pool=False)

    @hookimpl
    def podnet_sweep(self, provider: str, owners: Collection[str],
                     remove: Collection[str]) -> Sequence[str] | None:
        """podnet's ports (marked in external_ids) whose record is gone: those core says
        stayed orphans long enough are deleted with their routes and NAT, and their
        addresses freed; the others are reported. Without a Northbound remote there is
        nothing of podnet's to sweep: no answer, not an error."""
        if not self.remote:
            return None
        client = self.client
        self._sync_security_groups(client)  # and the groups no pod uses any more
        # a port's external ids name its record (a pod's port is also named after it,
        # port_name); candidates are pods' ports (a key, no type, no role) and their VIPs'
        # virtual ports (role vip), owned by the same record: the router links podnet
        # made carry traffic for every pod of their subnet
        orphans: dict[str, tuple[str, str | None]] = {}
        for lsp in client.ports():
            ext = lsp.external_ids
            key = ext.get(KEY)
            if ext.get(OWNER) != OWNER_VALUE or key is None or key in owners:
                continue
            if ROLE not in ext and not lsp.type:
                orphans[lsp.name] = (key, None)
            elif ext.get(ROLE) == ROLE_VIP and lsp.type == "virtual":
                orphans[lsp.name] = (key, _virtual_ip(lsp))
        doomed = [name for name in orphans if name in remove]
        if doomed:
            self.calls["sweep"] += len(doomed)
            client.run([client.delete_port(name, orphans[name][0]) for name in doomed])
            with self.lock:
                for name in doomed:
                    key, vip = orphans[name]
                    if vip is None:
                        self.ipam.free(name)
                    elif self.ipam.used.get(vip) == _Held(key, vip=True):
                        del self.ipam.used[vip]
        return [name for name in orphans if name not in remove]

    @hookimpl
    def podnet_hold_address(self, context: PodNetworkContext) -> bool | None:
        """Hold a StatefulSet pod's address while its StatefulSet (the same one: same
        uid) still counts the pod's ordinal among its replicas; release it at once when it
        scaled below the ordinal or is gone. ``workload_exists``, when given, is asked
        first; what core does not know is left to the ``sticky_hold`` window."""
        pn = context.pod_network
        owner = next((o for o in pn.metadata.owner_references), None)
        if owner is None:
            return None
        if self.workload_exists is not None:
            exists = self.workload_exists(owner.kind, pn.metadata.namespace or "", owner.name,
                                          pn.spec.pod_name)
            if exists is not None:
                return exists
        return _workload_wants(context.workload, owner.kind, owner.name, owner.uid,
                               pn.spec.pod_name)

    # --- the dataplane on a node (the node agent): ports of the integration bridge -------

    @hookimpl
    def podnet_plug(self, context: PlugContext) -> PlugResult | None:
        return self.dataplane.plug(context, self._lsp_of(context))

    @hookimpl
    def podnet_unplug(self, context: UnplugContext) -> None:
        self.dataplane.unplug(context)

    @hookimpl
    def podnet_check_plug(self, context: PlugContext) -> CheckResult | None:
        return self.dataplane.check(context, self._lsp_of(context))

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> Sequence[Plug] | None:
        return self.dataplane.plugs()

    @staticmethod
    def _lsp_of(context: PlugContext) -> str:
        """The record's logical switch port (allocate names it in ``status.interface``)."""
        pn = context.pod_network
        return pn.status.interface or port_name(pn)

    # --- errors ----------------------------------------------------------------------------

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        try:
            from ovsdbapp.exceptions import OvsdbAppException
        except ImportError:  # pragma: no cover - a broken install
            pass
        else:
            if isinstance(error, OvsdbAppException):
                return ErrorKind.TRANSIENT
        if isinstance(error, RuntimeError) and str(error).startswith(
                ("OVSDB Error", "OVS transaction timed out")):
            return ErrorKind.TRANSIENT
        if isinstance(error, TimeoutError | ConnectionError):
            return ErrorKind.TRANSIENT
        return None

    # --- ground truth, for tests and the demo ----------------------------------------------

    def nb_addresses(self) -> dict[str, str]:
        """The primary address (IPv4, or IPv6 on a v6-only subnet) of every podnet port in
        NB -> the node its external_ids name: what records carry in ``status.ip``."""
        out: dict[str, str] = {}
        for lsp in self.client.ports():
            ext = lsp.external_ids
            if ext.get(OWNER) != OWNER_VALUE:
                continue
            ip = ext.get(EXT_IP) or ext.get(EXT_IPV6)
            if ip:
                out[ip] = ext.get(EXT_NODE, "")
        return out


def _allocation(subnet: Subnet, v4: str | None, v6: str | None, mac: str | None,
                port: str, mtu: int) -> Allocation:
    """The record's address: the pod's interface gets the subnet's prefix, so pods of one
    logical switch reach each other directly, and everything else through the gateway
    (the subnet's router port, when it has a router)."""
    if v4 is None:  # an IPv6-only subnet: the IPv6 address is the primary one
        return Allocation(ip=v6 or "", mac=mac, subnet=subnet.name, gateway=subnet.gateway6,
                          interface=port, mtu=subnet.mtu or mtu,
                          prefix_length=subnet.v6.prefixlen if subnet.v6 else None)
    dual = v6 is not None and subnet.v6 is not None
    return Allocation(ip=v4, ipv6=v6, mac=mac, subnet=subnet.name, gateway=subnet.gateway,
                      interface=port, cidr=str(subnet.v4) if subnet.v4 else None,
                      prefix_length=subnet.v4.prefixlen if subnet.v4 else None,
                      ipv6_prefix_length=subnet.v6.prefixlen if dual and subnet.v6 else None,
                      ipv6_gateway=subnet.gateway6 if dual else None, mtu=subnet.mtu or mtu)


def _port_addresses(addresses: Sequence[str]) -> list[tuple[list[str], str]]:
    """(addresses, MAC) of each "MAC IP [IP ...]" entry; router, unknown and dynamic
    entries hold nothing; "virtual IP" (a virtual port's virtual-ip) holds the IP alone."""
    out = []
    for entry in addresses:
        parts = entry.split()
        if not parts or parts[0] in ("router", "unknown", "dynamic"):
            continue
        if parts[0] == "virtual":
            out.append(([p.split("/")[0] for p in parts[1:]], ""))
            continue
        out.append(([p.split("/")[0] for p in parts[1:]], parts[0]))
    return out


def _virtual_ip(lsp: Any) -> str | None:
    """The ``options:virtual-ip`` of a ``type=virtual`` port (a VIP), else ``None``."""
    if getattr(lsp, "type", "") != "virtual":
        return None
    return dict(lsp.options).get("virtual-ip") or None


def _nat_rules(eip: str | None, snat: bool, router: Router, v4: str | None, v6: str | None
               ) -> tuple[list[tuple[str, str, str]], list[tuple[str, str]]]:
    """The NAT rules and source routes of a pod on ``router``, as Kube-OVN writes them:
    ``eip`` a ``dnat_and_snat`` rule, ``snat`` a ``snat`` rule to the router's
    ``external_ip`` (with an eip, the eip's rule alone: it translates the pod's own
    connections to the eip). A rule
    translates the pod's address of the external address's family (a dual-stack pod's
    other address is not translated); a source route sends that address to the router's
    ``external_gateway``, which must be of the same family."""
    nats: list[tuple[str, str, str]] = []
    asked: list[tuple[str, str, str]] = []
    if eip:
        asked.append(("dnat_and_snat", eip, "eip"))
    if snat and not eip:
        # with an eip its dnat_and_snat rule is the pod's snat: a snat rule of the same
        # address next to it would leave OVN's choice between the two to chance
        if not router.external_ip:
            raise InvalidRequest(_field("snat"), f"router {router.name} has no "
                                 "external_ip and the pod names no eip")
        asked.append(("snat", router.external_ip, "snat"))
    routes: list[tuple[str, str]] = []
    gateway = ipaddress.ip_address(router.external_gateway)
    for kind, external, field in asked:
        version = ipaddress.ip_address(external).version
        logical = v4 if version == 4 else v6
        if logical is None:
            raise InvalidRequest(_field(field), f"{kind} address {external} is IPv{version} "
                                 f"and the pod has no IPv{version} address")
        if gateway.version != version:
            raise InvalidRequest(_field(field), f"{kind} address {external} is IPv{version} "
                                 f"but router {router.name}'s external_gateway {gateway} is "
                                 f"IPv{gateway.version}")
        nats.append((kind, external, logical))
        # with an external network the router's default route takes the pod out (a
        # source route would also take its traffic to the router's other subnets out)
        if router.external is None and (logical, str(gateway)) not in routes:
            routes.append((logical, str(gateway)))
    return nats, routes


_DEFAULT_SUBNET: Mapping[str, Any] = {"name": "ovn-default", "cidr": "10.16.0.0/16",
                                      "default": True}



def _workload_wants(workload: WorkloadInfo | None, kind: str, name: str, uid: str,
                    pod_name: str) -> bool | None:
    """Whether the record's owner still wants its pod back, from core's view of it."""
    if workload is None or workload.kind != kind or workload.name != name:
        return None
    if not workload.exists or (workload.uid and uid and workload.uid != uid):
        return False  # deleted, or replaced by another StatefulSet of the same name
    ordinal = statefulset_ordinal(pod_name)
    if ordinal is None:
        return None
    return workload.wants_ordinal(ordinal)


def _ordinal(ctx: AllocateContext, pn: PodNetwork) -> int | None:
    """A StatefulSet pod's ordinal (the number its name ends with)."""
    owners = ctx.pod.owner_references if ctx.pod is not None else pn.metadata.owner_references
    if not any(o.kind == "StatefulSet" for o in owners):
        return None
    match = _ORDINAL.search(pn.spec.pod_name)
    return int(match.group(1)) if match else None


def _subnet(cfg: OvnSubnetConfig) -> Subnet:
    """A subnet as the IPAM uses it, from its (checked) section."""
    v4: ipaddress.IPv4Network | None = None
    v6: ipaddress.IPv6Network | None = None
    for net in _networks(cfg):
        if isinstance(net, ipaddress.IPv4Network):
            v4 = net
        else:
            v6 = net
    gw4 = str(v4.network_address + 1) if v4 else None
    gw6 = str(v6.network_address + 1) if v6 else None
    for g in _gateways(cfg):
        if g.version == 4:
            gw4 = str(g)
        else:
            gw6 = str(g)
    excluded: set[str] = set()
    for item in cfg.exclude_ips:
        excluded.update(_excluded(item))
    return Subnet(name=cfg.name, v4=v4, v6=v6, gateway=gw4, gateway6=gw6, excluded=excluded,
                  namespaces=cfg.namespaces, gateway_type=cfg.gateway_type, router=cfg.router,
                  ip_pools=dict(cfg.ip_pools), default=cfg.default, mtu=cfg.mtu)


#: what the host registers as the built-in ``ovn`` plugin
plugin = OvnProvider()
