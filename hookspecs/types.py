"""Values passed through the provider hooks.

Frozen attrs classes: a provider receives them, returns them, never mutates them.
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

import attrs

from podnet.hookspecs.errors import InvalidRequest, PoolEmpty
from podnet.hookspecs.models import (
    NodeInfo,
    NodeNetwork,
    PodInfo,
    PodNetwork,
    Route,
    WorkloadInfo,
)
from podnet.hookspecs.netpol import Enforcement
from podnet.hookspecs.networks import IPPoolInfo, SubnetInfo
from podnet.hookspecs.policy import PoolPolicy


@attrs.frozen
class ProviderInfo:
    """What a provider says about itself when it registers."""

    name: str
    version: str
    #: True when addresses come from per-node pools that core keeps (cloud providers);
    #: False when the provider does its own address management (an overlay's IPAM).
    uses_node_pool: bool = True
    #: True when the provider creates and disposes interfaces (ENI machines run).
    manages_interfaces: bool = False
    policy: PoolPolicy = PoolPolicy()
    #: controller kinds whose pods keep their address across restarts (sticky), e.g.
    #: ("StatefulSet", "VirtualMachineInstance"); their records are owned by the workload
    sticky_kinds: tuple[str, ...] = ()
    description: str = ""
    #: who enforces NetworkPolicy for its pods: the node agent in nftables (the default)
    #: or the provider through ``podnet_network_policy`` (since 0.8.0)
    network_policy: Enforcement = Enforcement.NODE


@attrs.frozen
class CloudInterface:
    """An interface as the provider's inventory reports it."""

    id: str
    mac: str | None = None
    subnet: str | None = None
    primary: bool = False
    trunk: bool = False
    #: secondary addresses on it (never the primary address: that one is not poolable)
    ips: tuple[str, ...] = ()
    #: False: core never puts pod addresses on it, never counts it toward
    #: ``max_interfaces``, never disposes it; addresses it reports are ignored (e.g. an
    #: ECS instance's primary ENI, which Terway never uses for pods)
    pooled: bool = True
    #: IPv6 addresses on it, for a dual-stack inventory (:attr:`Inventory.dual_stack`);
    #: reported as the cloud has them, unpaired: core pairs them with ``ips``
    ipv6: tuple[str, ...] = ()
    #: True: the provider made it for this node's pool (the ECS provider: an ENI with its
    #: tag), so every address on it is podnet's, and it is not being rolled back. A
    #: rebuild takes an address on it that no record names and the last recorded pool
    #: does not list (a crash between a grow or its making and the pool's write) as idle
    #: after the reuse cooldown, not as a suspect. Default False: such addresses are
    #: suspects
    made: bool = False


@attrs.frozen
class Inventory:
    """What the cloud (or overlay) says is attached to a node, and its physical limits."""

    interfaces: tuple[CloudInterface, ...] = ()
    #: how many pooled interfaces the node can have (interfaces with ``pooled=False`` are
    #: not counted)
    max_interfaces: int = 1
    ips_per_interface: int = 0
    #: True: every pod address is an IPv4/IPv6 pair on one interface. Core pairs each
    #: interface's ``ips`` with its ``ipv6``: pairs the records name first, then the rest
    #: in order; an address left without its partner is an invalid half, never handed
    #: out and given back through ``podnet_pool_shrink``.
    dual_stack: bool = False

    @property
    def capacity(self) -> int:
        return self.max_interfaces * self.ips_per_interface

    def all_ips(self) -> dict[str, CloudInterface]:
        """Every (IPv4) address of the pooled interfaces -> its interface."""
        return {ip: itf for itf in self.interfaces if itf.pooled for ip in itf.ips}

    def all_ipv6(self) -> dict[str, CloudInterface]:
        """Every IPv6 address of the pooled interfaces (dual stack only) -> its interface."""
        if not self.dual_stack:
            return {}
        return {ip: itf for itf in self.interfaces if itf.pooled for ip in itf.ipv6}


@attrs.frozen
class NodeContext:
    """A node as a provider sees it: the Node, its NodeNetwork record, its inventory."""

    node: NodeInfo
    network: NodeNetwork | None = None
    inventory: Inventory | None = None
    #: the Ready Subnets of the node's provider whose ``nodeSelector`` matches the node
    #: (a pool provider grows the node's pool in their cloud subnets). Since 0.7.
    subnets: tuple[SubnetInfo, ...] = ()
    #: the call reads for a report (``podnet audit``), not to build or use the pool:
    #: change nothing in the cloud (e.g. make no interface the pool build would). Since 0.9.
    read_only: bool = False


@attrs.frozen
class PoolEntry:
    """One pool address. On a dual-stack node (:attr:`Inventory.dual_stack`) ``address``
    is the IPv4 half and ``ipv6`` the IPv6 half of a pair; an entry core gives back
    (``podnet_pool_shrink``) without ``ipv6`` there is an invalid half, of either family
    (``address`` may then be an IPv6 address)."""

    address: str
    interface: str | None = None
    subnet: str | None = None
    ipv6: str | None = None


class CloudLimiter(Protocol):
    """A provider's client-side rate limiter, as handed to ``podnet_cloud_limiter``: one
    token bucket per cloud API (action). Core's implementation is
    :class:`podnet.core.ratelimit.CloudLimiter`.
    """

    def acquire(self, api: str) -> float:
        """Take one token of ``api``'s bucket, waiting on core's clock for its slot;
        returns the seconds waited. May raise a ``ProviderError`` of kind ``throttled``
        instead of waiting, for the first request of a pool read or grow on an engine
        worker (see ``podnet_cloud_limiter``): let it propagate."""
        ...

    def observe(self, api: str, seconds: float, error: str | None = None) -> None:
        """Report one request of ``api`` (the name given to :meth:`acquire`) once it
        answered or failed: its latency in seconds (the request alone, not the wait for
        its token) and, when it failed, its kind (an
        :class:`~podnet.hookspecs.errors.ErrorKind` value such as ``throttled``).
        Core exports them per API name (``podnet_cloud_api_request_duration_seconds``,
        ``podnet_cloud_api_errors_total``), which the hook's own timing cannot: one
        hook may send several requests.

        .. versionadded:: 0.4.0
        """
        ...


@attrs.frozen
class Subnet:
    """One subnet a pool provider serves on a node (:class:`AddressSpace`)."""

    #: the id pool entries and requests name it by (``PoolEntry.subnet``,
    #: ``podnet.io/subnets``): a vSwitch id, a subnet id, a CIDR
    id: str
    #: its IPv4 CIDR; ``None`` while the provider cannot read it (then no requested
    #: address is placed in it, and pool entries are matched to it by ``id`` only)
    cidr: str | None = None
    #: its gateway, never handed to a pod
    gateway: str | None = None
    #: False: the provider cannot add a requested address here that the pool does not
    #: already hold (core refuses such a request, naming it)
    takes_static: bool = True
    #: free addresses as the provider last saw them, ``None`` when it does not say: of
    #: several requested subnets without an idle address, core asks to grow the one with
    #: most (ties and ``None``: the pod's order)
    free: int | None = None

    @classmethod
    def first_host_gateway(cls, id: str, cidr: str | None, **kwargs: Any) -> Subnet:
        """A subnet whose gateway is its CIDR's first host, as most clouds have it."""
        gateway = None
        if cidr:
            gateway = next((str(h) for h in ipaddress.ip_network(cidr, strict=False).hosts()),
                           None)
        return cls(id=id, cidr=cidr, gateway=gateway, **kwargs)


@attrs.frozen
class AddressSpace:
    """What a pool provider serves on one node (``podnet_address_space``): core resolves
    a pod's static address, IP pool and subnets against it and the node's pool."""

    subnets: tuple[Subnet, ...] = ()
    #: a static address may be asked for (``podnet.io/ip-address``)
    static: bool = True
    #: a list of addresses may be asked for (``podnet.io/ip-pool``); named pools never
    ip_pools: bool = True
    #: a static ``<IPv4>,<IPv6>`` pair may be asked for: one the node's pool holds idle
    pairs: bool = False

    def subnet(self, id: str | None) -> Subnet | None:
        return next((s for s in self.subnets if s.id == id), None) if id else None

    def subnet_of(self, address: str) -> Subnet | None:
        """The subnet whose CIDR holds ``address`` (None: none known does)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return None
        for s in self.subnets:
            if s.cidr:
                net = ipaddress.ip_network(s.cidr, strict=False)
                if ip.version == net.version and ip in net:
                    return s
        return None


class PoolView(Protocol):
    """The node's idle addresses, as handed to ``podnet_allocate``.

    ``take`` reserves an entry for the pod network being allocated; core commits the
    reservation only once the record is written, and returns it to the pool otherwise.
    """

    def idle(self, subnet: str | None = None) -> Sequence[PoolEntry]: ...

    def take(self, address: str | None = None, subnet: str | None = None) -> PoolEntry: ...

    def owner_of(self, address: str) -> str | None: ...


@attrs.frozen
class ResolvedRequest:
    """A pool provider's pod network request, resolved by core (``podnet_allocate``).

    Core has checked the static address, IP pool or subnets the pod asked for against
    the node's pool and the provider's :class:`AddressSpace`, once for every provider,
    and either reserved a pool entry (``entry``) or found a requested address the pool
    does not hold (``address``): the provider then adds that one to the node, in
    ``subnet``, and answers with it.
    """

    #: the pool entry core reserved for the pod network
    entry: PoolEntry | None = None
    #: the requested address to add to the node (``entry`` is then ``None``)
    address: str | None = None
    #: the subnet of the address, when core read the provider's address space for it
    subnet: Subnet | None = None
    #: the request field that chose the address (``metadata.annotations[...]``);
    #: ``None`` for a plain request
    field: str | None = None

    def refuse(self, message: str) -> InvalidRequest:
        """The provider's own refusal of what was asked (its cloud will not have the
        address there), naming the request's field as core's refusals do."""
        return InvalidRequest(self.field or "spec.requests", message)


@attrs.frozen
class AllocateContext:
    pod_network: PodNetwork
    node: NodeContext
    pod: PodInfo | None = None
    #: ``None`` for providers that do not use node pools
    pool: PoolView | None = None
    #: the ``podnet.io/*`` annotations of the pod's Namespace (empty when it has none);
    #: core allocates only once its Namespace cache is synced. Read-only.
    namespace_annotations: Mapping[str, str] = attrs.field(factory=dict)
    #: the pod network's request as core resolved it against ``pool`` (pool providers
    #: only; ``None`` for providers that do not use node pools). Since 0.3.
    request: ResolvedRequest | None = None
    #: the Subnet object core chose for the pod network (the pod's ``podnet.io/subnets``,
    #: its Namespace's, a Subnet listing or selecting the namespace, the provider's
    #: default; each only where its ``nodeSelector`` takes the node); ``None`` when the
    #: provider has no Subnet objects (its config file's networks serve). Since 0.7.
    subnet: SubnetInfo | None = None
    #: the IPPool object the pod names in ``podnet.io/ip-pool`` (or its namespace must
    #: use), checked to lie in ``subnet``; ``None``: none. Since 0.7.
    ip_pool: IPPoolInfo | None = None
    #: the keys (``namespace/name``) of the NetworkPolicies that select the pod, for a
    #: provider that enforces them itself (``Enforcement.PROVIDER``; empty for the others
    #: and for attachment networks): a port made here joins what those policies programmed,
    #: so the pod is restricted from its first packet. Since 0.8.
    network_policies: tuple[str, ...] = ()

    def check_in_subnet(self, wait_in: Callable[[], str | None]) -> None:
        """For a pool provider: a pod network on a Subnet (``subnet``) gets an address of
        its block only. A pool entry core reserved outside it is handed back (the pod
        network waits, :class:`PoolEmpty`, for one in the Subnet's cloud subnet
        ``wait_in()``, which the pool then grows); a requested address outside it,
        excluded from it or its gateway is refused naming the request's field. Since 0.7.
        """
        subnet, request = self.subnet, self.request
        if subnet is None or request is None:
            return
        if request.entry is not None and not subnet.contains(request.entry.address):
            raise PoolEmpty(f"{request.entry.address} is not in {subnet.describe()}, the "
                            "pod network's Subnet: waiting for an address of it",
                            subnet=wait_in())
        address = request.address if request.entry is None else None
        if address is not None and not subnet.contains(address):
            raise request.refuse(f"{address} is not in {subnet.describe()}, the pod "
                                 "network's Subnet")
        if address is not None and (subnet.excludes(address) or address in subnet.gateways):
            raise request.refuse(f"{address} is excluded from {subnet.describe()} (its "
                                 "excludeIPs or gateway)")


@attrs.frozen
class Allocation:
    """The address chosen for one pod network. Recorded before anything relies on it."""

    ip: str
    ipv6: str | None = None
    mac: str | None = None
    subnet: str | None = None
    gateway: str | None = None
    interface: str | None = None
    #: the subnet's CIDR (IPv4), when the provider knows it: core refuses an answer naming
    #: its network or broadcast address (and, always, the gateway). Since 0.2.
    cidr: str | None = None
    #: the prefix length of ``ip`` on the pod's interface; ``None``: ``cidr``'s (or 32
    #: without one). Since 0.3.
    prefix_length: int | None = None
    #: the prefix length of ``ipv6`` and its gateway (dual stack). Since 0.3.
    ipv6_prefix_length: int | None = None
    ipv6_gateway: str | None = None
    #: the routes the pod's interface gets (``()``: a default route via ``gateway``,
    #: when there is one, is what core records). Since 0.3.
    routes: tuple[Route, ...] = ()
    #: the interface's MTU; ``None``: the provider does not say (the kernel's default).
    #: Since 0.3.
    mtu: int | None = None


@attrs.frozen
class PodNetworkContext:
    """One recorded pod network, for route / verify / release."""

    pod_network: PodNetwork
    node: NodeContext | None = None
    pod: PodInfo | None = None
    #: the record's StatefulSet as core's cache sees it (``exists=False``: deleted), for
    #: ``podnet_hold_address``; ``None`` when core does not know (another owner kind,
    #: another hook, or its StatefulSet cache not synced yet)
    workload: WorkloadInfo | None = None
    #: on route: the NetworkPolicies that select the pod, as
    #: :attr:`AllocateContext.network_policies` (since 0.8.0)
    network_policies: tuple[str, ...] = ()


@attrs.frozen
class RouteResult:
    """Routing done; ``interface`` overrides the recorded one when the provider chose it."""

    interface: str | None = None


@attrs.frozen
class VerifyResult:
    ok: bool
    reason: str = ""


@attrs.frozen
class ReleaseResult:
    """Release done. ``return_to_pool`` hands the address back to the node pool (core
    then keeps it idle or deletes it in the cloud); ``False`` when the provider freed it
    itself."""

    return_to_pool: bool = True


@attrs.frozen
class TransitionEvent:
    """Broadcast after every transition attempt, successful or not."""

    machine: str
    trigger: str
    source: str
    dest: str | None
    object_key: str
    provider: str
    ok: bool
    error: str | None = None
    at: datetime | None = None
    attributes: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class NetworkAttachment:
    """An extra network a pod attaches to, and the provider that serves it."""

    network: str
    provider: str


@attrs.frozen
class NodeFinding:
    """Something a provider's periodic check found wrong on a node (``podnet_node_check``).

    Core reports each distinct finding once, as a Warning Event on the Node and on its
    NodeNetwork, and again only after it cleared and came back.
    """

    #: the Event's reason, CamelCase (e.g. ``"SecurityGroupDrift"``)
    reason: str
    #: what is wrong, for people: name the object and what differs
    message: str
    #: the interface concerned, if any
    interface: str | None = None


# --- the dataplane on a node (the node agent's hooks; since 0.3.0) -----------------------


@attrs.frozen
class PlugContext:
    """One interface to create in a pod's network namespace (``podnet_plug``,
    ``podnet_check_plug``): the record it carries out, and where it goes."""

    #: the Routed record: its status has the address, prefix, gateway, routes, MAC, MTU
    pod_network: PodNetwork
    #: the runtime's id of the pod's sandbox
    container_id: str
    #: the interface's name inside the pod (``eth0`` for the default network, ``net1``...)
    if_name: str
    #: the path of the pod's network namespace (``None`` when the runtime gave none:
    #: ``podnet_check_plug`` then has nothing to look at)
    netns: str | None
    pod: PodInfo | None = None


@attrs.frozen
class PlugResult:
    """The interface ``podnet_plug`` made (or found already made)."""

    #: its name inside the pod, its MAC and the namespace it is in
    name: str
    mac: str
    sandbox: str
    #: the host side of it (a veth's other end), when there is one
    host_interface: str | None = None


@attrs.frozen
class UnplugContext:
    """One interface to remove (``podnet_unplug``). The record may be gone already (a
    leftover found at start, an attachment the runtime's GC no longer lists): then
    ``pod_network`` is ``None`` and ``provider`` and ``network`` say whose it is."""

    provider: str
    network: str
    container_id: str
    if_name: str
    #: ``None`` or a path that no longer exists when the sandbox is gone already
    netns: str | None = None
    pod_network: PodNetwork | None = None


#: how :func:`owner_digest` marks a record key it stands for
OWNER_DIGEST_PREFIX = "#"


def owner_digest(key: str) -> str:
    """A short stand-in (25 characters) for a record's key, for a dataplane whose mark has
    no room for the key itself (a link alias holds 255 bytes; a key may be 317
    characters): the node agent takes it back to the key of the record it names.
    Keys never start with ``#``."""
    return OWNER_DIGEST_PREFIX + hashlib.blake2s(key.encode(), digest_size=12).hexdigest()


@attrs.frozen
class Plug:
    """An interface a provider's dataplane has plugged on this host
    (``podnet_plugs``)."""

    container_id: str
    if_name: str
    network: str
    #: the key (``namespace/name``) of the PodNetwork it was plugged for, or its
    #: :func:`owner_digest` when that is what the dataplane could keep
    owner: str | None = None
    host_interface: str | None = None


@attrs.frozen
class CheckResult:
    """``podnet_check_plug``'s verdict: the interface as the record says it should be."""

    ok: bool
    reason: str = ""
