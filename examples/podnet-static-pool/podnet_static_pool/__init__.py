"""``static-pool``: a podnet provider that hands out pod addresses from fixed ranges.

A third-party plugin, packaged on its own and discovered through the ``podnet.plugins``
entry point. It is the smallest useful pool provider:

- the operator lists address ranges (CIDRs) in the provider's config section, and how
  many addresses one node may hold (``per_node``);
- each node gets a share of those ranges on demand (``podnet_pool_grow``) and gives idle
  ones back (``podnet_pool_shrink``); core keeps the per-node pools and decides when;
- the ranges are the subnets a pod may ask for (``podnet.io/subnets``): the provider
  lists them (``podnet_address_space``), and core resolves the request against them and
  the node's pool before ``podnet_allocate``;
- there are no interfaces to create: every node has one pseudo-interface, ``static0``,
  and ``manages_interfaces`` is ``False``, so the engine never runs the ENI machine;
- "routing" a pod network means writing ``address -> pod network`` into the backend's
  route table, and "releasing" it removes that entry again.

The backend (:class:`StaticBackend`) stands in for whatever really records assignments
(an IPAM service, a database, a router's API). It lives outside the plugin object, so a
controller restarting in the same process (the tests do that) finds it as it was. This
module imports only ``podnet.hookspecs`` and the public parts of ``podnet.core``
(``models``, ``errors``, ``policy``, ``sections``), never the engine.
"""

from __future__ import annotations

import ipaddress
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import between, cidrs, read_section, section
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CloudInterface,
    Inventory,
    NodeContext,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    Subnet,
    VerifyResult,
)

__version__ = "0.2.0"
__all__ = [
    "BACKEND",
    "INTERFACE",
    "NAME",
    "StaticBackend",
    "StaticPoolError",
    "StaticPoolProvider",
    "plugin",
]

NAME = "static-pool"
#: the one pseudo-interface every node has
INTERFACE = "static0"
DEFAULT_RANGES: tuple[str, ...] = ("172.30.0.0/16",)
DEFAULT_PER_NODE = 32
MAX_PER_NODE = 4096

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class StaticPoolError(Exception):
    """What the backend raises. ``code`` is mapped to a kind by ``podnet_classify_error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


#: the backend's error codes and the kinds core acts on
ERROR_KINDS: dict[str, ErrorKind] = {
    "Throttled": ErrorKind.THROTTLED,
    "NodeFull": ErrorKind.QUOTA_EXCEEDED,
    "RangesExhausted": ErrorKind.SUBNET_EXHAUSTED,
    "Unavailable": ErrorKind.TRANSIENT,
}


def _usable(network: Network) -> Iterator[str]:
    """Addresses of ``network`` a pod may get: the first host is kept for the gateway."""
    hosts = network.hosts()
    if network.num_addresses >= 4:
        next(hosts, None)
    for host in hosts:
        yield str(host)


def _gateway(network: Network) -> str | None:
    if network.num_addresses < 4:
        return None
    return str(next(network.hosts()))


class StaticBackend:
    """A registry of address assignments and routes, shared across controller restarts.

    Every method is one "API call": counted in ``calls``, and failing with the next code
    queued in ``faults[api]`` when a test queued one.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        #: address -> node holding it, in the order they were assigned
        self.assigned: dict[str, str] = {}
        #: address -> ``namespace/name`` of the pod network it is routed to
        self.routes: dict[str, str] = {}
        self.calls: Counter[str] = Counter()
        #: error codes to raise on the next calls of one API, for tests: api -> codes
        self.faults: dict[str, list[str]] = {}

    def _call(self, api: str) -> None:
        self.calls[api] += 1
        queued = self.faults.get(api)
        if queued:
            raise StaticPoolError(queued.pop(0), f"{api} failed (injected)")

    def held_by(self, node: str) -> list[str]:
        self._call("HeldBy")
        with self.lock:
            return [ip for ip, holder in self.assigned.items() if holder == node]

    def assign(self, node: str, count: int, ranges: Sequence[Network],
               per_node: int) -> list[str]:
        """Give ``node`` up to ``count`` free addresses of ``ranges``; at least one."""
        self._call("Assign")
        with self.lock:
            held = sum(1 for holder in self.assigned.values() if holder == node)
            room = min(count, per_node - held)
            if room <= 0:
                raise StaticPoolError("NodeFull", f"node {node} holds {held} addresses "
                                      f"(per_node is {per_node})")
            out: list[str] = []
            for network in ranges:
                for ip in _usable(network):
                    if len(out) == room:
                        break
                    if ip not in self.assigned:
                        out.append(ip)
            if not out:
                names = ", ".join(str(n) for n in ranges)
                raise StaticPoolError("RangesExhausted", f"no free address left in {names}")
            for ip in out:
                self.assigned[ip] = node
            return out

    def unassign(self, node: str, addresses: Sequence[str]) -> list[str]:
        """Take addresses back from ``node``. One it does not hold counts as taken back."""
        self._call("Unassign")
        with self.lock:
            for ip in addresses:
                if self.assigned.get(ip) == node:
                    del self.assigned[ip]
                    self.routes.pop(ip, None)
            return list(addresses)

    def route(self, address: str, key: str) -> None:
        self._call("Route")
        with self.lock:
            self.routes[address] = key

    def unroute(self, address: str, key: str) -> None:
        """Remove the route of ``address`` if it still leads to ``key`` (never another's)."""
        self._call("Unroute")
        with self.lock:
            if self.routes.get(address) == key:
                del self.routes[address]

    def route_of(self, address: str) -> str | None:
        with self.lock:
            return self.routes.get(address)

    def all_addresses(self) -> dict[str, str]:
        """Ground truth for tests: every assigned address -> the node holding it."""
        with self.lock:
            return dict(self.assigned)


@section()
@attrs.frozen
class StaticPoolConfig:
    """The section ``providers.static-pool``."""

    #: CIDRs, not overlapping; the first address of each is kept for the gateway
    ranges: tuple[str, ...] = attrs.field(default=DEFAULT_RANGES,
                                          metadata=cidrs(disjoint=True))
    #: addresses one node may hold
    per_node: int = attrs.field(default=DEFAULT_PER_NODE, metadata=between(1, MAX_PER_NODE))


class StaticPoolProvider:
    """The plugin: one instance per controller; the backend may outlive it."""

    def __init__(self, backend: StaticBackend | None = None, *, name: str = NAME,
                 policy: PoolPolicy | None = None,
                 ranges: Sequence[str] = DEFAULT_RANGES,
                 per_node: int = DEFAULT_PER_NODE) -> None:
        self.backend = backend if backend is not None else StaticBackend()
        self.name = name
        self.policy = policy or PoolPolicy(min_idle=1, max_idle=4, batch_size=4,
                                           max_batch_size=8, reuse_cooldown=5.0)
        cfg = read_section(StaticPoolConfig, name, {"ranges": list(ranges),
                                                     "per_node": per_node})
        self.ranges: tuple[Network, ...] = _networks(cfg)
        self.per_node = cfg.per_node

    # 1. registration and configuration

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=True,
            manages_interfaces=False, policy=self.policy, sticky_kinds=("StatefulSet",),
            description="addresses from fixed ranges, no interfaces",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        # read everything before changing anything: a bad section leaves the old one
        cfg = read_section(StaticPoolConfig, provider, config)
        self.ranges = _networks(cfg)
        self.per_node = cfg.per_node

    # 3. inventory

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        ips = self.backend.held_by(node.node.name)
        return Inventory(
            interfaces=(CloudInterface(id=INTERFACE, primary=True, ips=tuple(ips)),),
            max_interfaces=1, ips_per_interface=self.per_node,
        )

    # 4. the node pool

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        ranges = self.ranges
        if subnet is not None:
            ranges = tuple(r for r in self.ranges if str(r) == subnet)
            if not ranges:
                raise ProviderError(ErrorKind.FATAL, f"{subnet} is not a configured range",
                                    subject=subnet)
        added = self.backend.assign(node.node.name, count, ranges, self.per_node)
        # each entry names its range: a pod asking for that range finds it idle
        return [PoolEntry(ip, INTERFACE, str(network) if network else None)
                for ip, network in ((ip, self._range_of(ip)) for ip in added)]

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        return self.backend.unassign(node.node.name, [e.address for e in entries])

    # 5. one pod network

    @hookimpl
    def podnet_address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        """The ranges, as the subnets a pod may ask for; no fixed addresses, no pools."""
        return AddressSpace(
            subnets=tuple(Subnet(id=str(r), cidr=str(r), gateway=_gateway(r),
                                 takes_static=False) for r in self.ranges),
            static=False, ip_pools=False)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        request = context.request
        if request is None or request.entry is None:
            raise ProviderError(ErrorKind.FATAL, "static-pool allocates from node pools only")
        # core took an idle address, of the range asked for (podnet.io/subnets) if any;
        # when none fits it raised PoolEmpty, and the pool grows there before a retry
        entry = request.entry
        network = self._range_of(entry.address)
        return Allocation(
            ip=entry.address, interface=entry.interface or INTERFACE,
            subnet=str(network) if network is not None else None,
            gateway=_gateway(network) if network is not None else None,
        )

    def _range_of(self, address: str) -> Network | None:
        ip = ipaddress.ip_address(address)
        return next((r for r in self.ranges if ip in r), None)

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        if pn.status.ip is None:
            raise ProviderError(ErrorKind.FATAL, "route without an address", field="status.ip")
        self.backend.route(pn.status.ip, pn.key)  # setting it twice changes nothing
        return RouteResult()

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        pn = context.pod_network
        routed_to = self.backend.route_of(pn.status.ip or "")
        if routed_to != pn.key:
            return VerifyResult(ok=False, reason=f"{pn.status.ip} is routed to {routed_to}")
        return VerifyResult(ok=True)

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        pn = context.pod_network
        if pn.status.ip is not None:
            self.backend.unroute(pn.status.ip, pn.key)  # nothing to remove: also fine
        return ReleaseResult(return_to_pool=True)

    # 7. errors

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        if not isinstance(error, StaticPoolError):
            return None
        return ERROR_KINDS.get(error.code, ErrorKind.TRANSIENT)


def _networks(cfg: StaticPoolConfig) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(r) for r in cfg.ranges)


#: the backend of this process: a controller restarted in-process finds it unchanged
BACKEND = StaticBackend()
#: what the ``podnet.plugins`` entry point names
plugin = StaticPoolProvider(BACKEND)
