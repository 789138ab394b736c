"""The OVN provider's addresses: its subnets and routers as the IPAM uses them, the
in-memory IPAM (rebuilt from Northbound on a start), and how an allocation, a port's
addresses and a router's NAT rules are made of them."""


from __future__ import annotations

import ipaddress
import random
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs

from podnet.hookspecs.annotations import annotation_field as _field
from podnet.hookspecs.errors import InvalidRequest
from podnet.hookspecs.models import (
    PodNetwork,
    WorkloadInfo,
    statefulset_ordinal,
)
from podnet.hookspecs.networks import address_range
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
)
from podnet.plugins.ovn.config import (
    ORDINAL,
    PG_UNSAFE,
    IPAddress,
    IPNetwork,
    OvnRouterConfig,
    OvnSubnetConfig,
    gateways_of,
    networks_of,
)
from podnet.plugins.ovn.rows import (
    ExternalNet,
    RouterLink,
)

if TYPE_CHECKING:
    pass


def port_name(pn: PodNetwork) -> str:
    """The logical switch port of a record: named after its key (stable for sticky pods)."""
    return f"{pn.metadata.namespace}/{pn.metadata.name}"


def pg_name(prefix: str, name: str) -> str:
    """A port group name OVN accepts (letters, digits, underscores)."""
    return f"{prefix}_{PG_UNSAFE.sub('_', name)}"


@attrs.frozen
class Ranges:
    """Address ranges (an ``excludeIPs`` list, an IP pool, a ``vipsRange``) as integer
    spans per family: a /16 or an IPv6 /64 excluded is one span, not a set of addresses."""

    #: (IP version, first, last), in the order written
    spans: tuple[tuple[int, int, int], ...] = ()

    @classmethod
    def of(cls, items: Iterable[str]) -> Ranges:
        """From entries as :func:`~podnet.hookspecs.networks.address_range` reads them
        (an address, ``FIRST..LAST`` or a CIDR); raises its ``ValueError``."""
        spans = []
        for item in items:
            lo, hi = address_range(item)
            spans.append((lo.version, int(lo), int(hi)))
        return cls(tuple(spans))

    def __bool__(self) -> bool:
        return bool(self.spans)

    def __contains__(self, ip: object) -> bool:
        return self.end_of(ip) is not None

    def end_of(self, ip: object) -> int | None:
        """The last address (an integer) of the span holding ``ip``, else ``None``."""
        try:
            addr = ip if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address) \
                else ipaddress.ip_address(str(ip))
        except ValueError:
            return None
        value = int(addr)
        for version, lo, hi in self.spans:
            if version == addr.version and lo <= value <= hi:
                return hi
        return None


class Blocked:
    """What no pod may take as its own address on a subnet, each with the reason said when
    a request names it: single addresses (the gateways, the node's) and ranges (the
    subnet's exclusions, its VIPs range, its pools' addresses for a random pick)."""

    def __init__(self, addresses: Mapping[str, str] | None = None,
                 ranges: Sequence[tuple[Ranges, str]] = ()) -> None:
        self.addresses: dict[str, str] = dict(addresses or {})
        self.ranges = [(r, why) for r, why in ranges if r]

    def reason(self, ip: str) -> str | None:
        found = self.addresses.get(ip)
        if found is not None:
            return found
        return next((why for r, why in self.ranges if ip in r), None)

    def __contains__(self, ip: object) -> bool:
        return self.reason(str(ip)) is not None

    def plus(self, addresses: Iterable[str], why: str) -> Blocked:
        return Blocked({**self.addresses, **{a: why for a in addresses}}, self.ranges)

    def end_of(self, addr: IPAddress) -> int | None:
        """The last address of a blocked range holding ``addr`` (to skip the range)."""
        ends = [end for r, _ in self.ranges if (end := r.end_of(addr)) is not None]
        return max(ends) if ends else None


@attrs.define
class Subnet:
    name: str
    v4: ipaddress.IPv4Network | None
    v6: ipaddress.IPv6Network | None
    gateway: str | None
    gateway6: str | None
    excluded: Ranges = attrs.field(factory=Ranges)
    namespaces: tuple[str, ...] = ()
    gateway_type: str = "distributed"
    router: str | None = None
    ip_pools: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    default: bool = False
    #: the subnet's own MTU; ``None``: the provider's
    mtu: int | None = None
    #: its logical switch (a config subnet's and, by default, a Subnet object's name)
    switch: str = ""
    #: a Subnet object's ``vipsRange``: pods' VIPs come from it, pods' own addresses never
    vips_range: Ranges = attrs.field(factory=Ranges)
    #: the addresses of the Subnet's IPPool objects, each with its pool's name: a random
    #: pick leaves them to the pools' pods
    pooled: tuple[tuple[Ranges, str], ...] = ()
    #: made from a Subnet object (else from the config section)
    from_object: bool = False
    #: read back from a record and its port in NB (a subnet neither served nor retired
    #: when the controller started): serves that record's route and verify only, and
    #: leaves the switch's router link as it is (the record knows its own prefix, not
    #: the subnet's, which may have been widened)
    recovered: bool = False

    def __attrs_post_init__(self) -> None:
        if not self.switch:
            self.switch = self.name

    def networks(self) -> list[IPNetwork]:
        return [n for n in (self.v4, self.v6) if n is not None]

    def describe(self) -> str:
        what = "Subnet" if self.from_object else "subnet"
        return f"{what} {self.name} ({', '.join(str(n) for n in self.networks())})"

    def router_link(self) -> RouterLink | None:
        """The ports connecting the subnet's switch to its router (``None``: no router):
        the router port holds each family's gateway with the subnet's prefix length."""
        if not self.router or self.recovered:
            return None
        pairs = ((self.gateway, self.v4), (self.gateway6, self.v6))
        networks = [f"{ipaddress.ip_address(gw)}/{net.prefixlen}" for gw, net in pairs
                    if gw and net is not None]
        return RouterLink(self.router, self.switch, networks)


@attrs.define
class Router:
    name: str
    external_ip: str | None = None
    external_gateway: str = "100.64.0.1"
    #: its external network (``None``: none configured, NAT has no way out)
    external: ExternalNet | None = None


def router_of(cfg: OvnRouterConfig) -> Router:
    ext = cfg.external
    if ext is None:
        return Router(cfg.name, cfg.external_ip, cfg.external_gateway or "100.64.0.1")
    net = ExternalNet(cfg.name, ext.address, ext.gateway, ext.network_name, ext.chassis)
    return Router(cfg.name, cfg.external_ip or str(ipaddress.ip_interface(ext.address).ip),
                  ext.gateway, net)


@attrs.define
class Held:
    """One address the IPAM holds: the port that has it (``None``: nobody we know), and
    whether it is one of that port's VIPs (``podnet.io/vips``, a virtual port of its own)."""

    port: str | None
    vip: bool = False


_V = TypeVar("_V")


class Owned(dict[str, _V], Generic[_V]):
    """A dict that also knows each owner's keys (the owner of a value: ``owner_of``), so
    a port's addresses are found without a scan of every address held (a scan per
    allocate and release made a burst of 1,000 pods quadratic, under the provider's
    lock). Every way of writing keeps the index: item assignment and deletion, ``pop``,
    ``setdefault``, ``update``, ``clear``."""

    def __init__(self, owner_of: Any) -> None:
        super().__init__()
        self._owner_of = owner_of
        self._keys: dict[Any, set[str]] = {}

    def keys_of(self, owner: Any) -> list[str]:
        """The keys whose value ``owner`` owns (a copy: safe to delete them meanwhile)."""
        return list(self._keys.get(owner, ()))

    def _unindex(self, key: str, value: _V) -> None:
        owner = self._owner_of(value)
        keys = self._keys.get(owner)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._keys[owner]

    def __setitem__(self, key: str, value: _V) -> None:
        if key in self:
            self._unindex(key, dict.__getitem__(self, key))
        dict.__setitem__(self, key, value)
        self._keys.setdefault(self._owner_of(value), set()).add(key)

    def __delitem__(self, key: str) -> None:
        self._unindex(key, dict.__getitem__(self, key))
        dict.__delitem__(self, key)

    def pop(self, key: str, *default: Any) -> Any:
        if key in self:
            value = dict.__getitem__(self, key)
            del self[key]
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def setdefault(self, key: str, default: _V) -> _V:
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def clear(self) -> None:
        dict.clear(self)
        self._keys.clear()

    def popitem(self) -> tuple[str, _V]:
        key, value = dict.popitem(self)
        self._unindex(key, value)
        return key, value

    def __ior__(self, other: Any) -> Owned[_V]:  # type: ignore[override,misc]
        self.update(other)
        return self


class Ipam:
    """Addresses and MACs in use, per subnet; rebuilt from the NB ports."""

    def __init__(self, seed: int | None = None) -> None:
        #: address -> who holds it; the index: a port's addresses (``keys_of``)
        self.used: Owned[Held] = Owned(lambda held: held.port)
        #: MAC -> the port that has it
        self.macs: Owned[str] = Owned(lambda port: port)
        self.random = random.Random(seed)

    def owner(self, ip: str) -> str | None:
        held = self.used.get(ip)
        return None if held is None else (held.port or "a port podnet does not own")

    def take(self, port: str, ips: Sequence[str], mac: str | None) -> None:
        for ip in ips:
            self.used[ip] = Held(port)
        if mac:
            self.macs[mac] = port

    def take_vips(self, port: str, vips: Sequence[str]) -> None:
        for ip in vips:
            self.used[ip] = Held(port, vip=True)

    def vips_of(self, port: str) -> set[str]:
        return {ip for ip in self.used.keys_of(port) if self.used[ip].vip}

    def drop_vips(self, port: str, keep: Collection[str] = ()) -> None:
        """Free the port's VIPs not in ``keep`` (its own addresses stay)."""
        for ip in self.vips_of(port) - set(keep):
            del self.used[ip]

    def free(self, port: str) -> None:
        for ip in self.used.keys_of(port):
            del self.used[ip]
        for mac in self.macs.keys_of(port):
            del self.macs[mac]

    def random_free(self, network: IPNetwork, blocked: Blocked) -> str | None:
        """A free address of ``network`` from a random start, skipping held and blocked
        ones (a blocked range in one step)."""
        first = int(network.network_address) + 1
        last = int(network.broadcast_address) - (1 if network.version == 4 else 0)
        size = last - first + 1
        if size <= 0:
            return None
        start = self.random.randrange(size)
        step = 0
        for _ in range(min(size, 1 << 20)):
            if step >= size:
                break
            value = first + (start + step) % size
            addr = ipaddress.ip_address(value)
            end = blocked.end_of(addr)
            if end is not None:  # past the blocked range (to the start, past the end)
                step += min(end, last) - value + 1
                continue
            ip = str(addr)
            if ip not in self.used and ip not in blocked.addresses:
                return ip
            step += 1
        return None

    def new_mac(self) -> str:
        while True:
            digits = [self.random.randrange(256) for _ in range(5)]
            mac = "0a:" + ":".join(f"{b:02x}" for b in digits)
            if mac not in self.macs:
                return mac


def allocation_of(subnet: Subnet, v4: str | None, v6: str | None, mac: str | None,
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


def port_addresses(addresses: Sequence[str]) -> list[tuple[list[str], str]]:
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


def virtual_ip(lsp: Any) -> str | None:
    """The ``options:virtual-ip`` of a ``type=virtual`` port (a VIP), else ``None``."""
    if getattr(lsp, "type", "") != "virtual":
        return None
    return dict(lsp.options).get("virtual-ip") or None


def nat_rules(eip: str | None, snat: bool, router: Router, v4: str | None, v6: str | None
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


DEFAULT_SUBNET: Mapping[str, Any] = {"name": "ovn-default", "cidr": "10.16.0.0/16",
                                      "default": True}



def workload_wants(workload: WorkloadInfo | None, kind: str, name: str, uid: str,
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


def statefulset_ordinal_of(ctx: AllocateContext, pn: PodNetwork) -> int | None:
    """A StatefulSet pod's ordinal (the number its name ends with)."""
    owners = ctx.pod.owner_references if ctx.pod is not None else pn.metadata.owner_references
    if not any(o.kind == "StatefulSet" for o in owners):
        return None
    match = ORDINAL.search(pn.spec.pod_name)
    return int(match.group(1)) if match else None


def subnet_of(cfg: OvnSubnetConfig) -> Subnet:
    """A subnet as the IPAM uses it, from its (checked) section."""
    v4: ipaddress.IPv4Network | None = None
    v6: ipaddress.IPv6Network | None = None
    for net in networks_of(cfg):
        if isinstance(net, ipaddress.IPv4Network):
            v4 = net
        else:
            v6 = net
    gw4 = str(v4.network_address + 1) if v4 else None
    gw6 = str(v6.network_address + 1) if v6 else None
    for g in gateways_of(cfg):
        if g.version == 4:
            gw4 = str(g)
        else:
            gw6 = str(g)
    return Subnet(name=cfg.name, v4=v4, v6=v6, gateway=gw4, gateway6=gw6,
                  excluded=Ranges.of(cfg.exclude_ips),
                  namespaces=cfg.namespaces, gateway_type=cfg.gateway_type, router=cfg.router,
                  ip_pools=dict(cfg.ip_pools), default=cfg.default, mtu=cfg.mtu)
