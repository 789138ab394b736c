"""The reference provider: podnet's provider contract, implemented with no cloud at all.

Copy this file to start a provider of your own. Every hook a pool provider implements is
here, in the order the engine calls them, each answering only for its own provider name.

Addresses come from each node's ``spec.podCIDR``. A small in-process "cloud"
(:class:`ReferenceCloud`, in ``plugins/reference/cloud.py``) plays the part of the real
API: it keeps which addresses are attached to which interface of which node, survives
controller restarts (tests keep the same instance across them), can be slowed down and
made to fail, and counts calls.

Subnet objects: the reference cloud also keeps shared subnets, as a VPC does. A Subnet of
this provider takes no parameters; ``podnet_subnet_parameters`` puts it into the cloud
(its block, gateway and excluded addresses), and the pools of the nodes core hands it for
(``NodeContext.subnets``) grow from that one block: an address is on one node at a time,
never the gateway, the block's network or broadcast address or an excluded one. As an ENI
is in one VPC subnet, each interface is in one subnet: ``eth0`` in the node's podCIDR (a
node without one: in the Subnet of its first grow), a new interface in the Subnet core
names, else the node's first one with free addresses. A pod network on a Subnet gets its
block's prefix and its gateway (the node's bridge holds the gateway too).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import (
    ConfigError,
    ErrorKind,
    InvalidRequest,
    PoolEmpty,
    ProviderError,
)
from podnet.hookspecs.models import NodeInfo, Route
from podnet.hookspecs.networks import (
    Networks,
    SubnetInfo,
    SubnetRealization,
    address_range,
)
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import between, config_key, read_section, section, text
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CloudInterface,
    Inventory,
    NodeContext,
    NodeFinding,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    Subnet,
    VerifyResult,
)
from podnet.linux.hooks import DataplaneHooks
from podnet.plugins.reference.cloud import ERROR_KINDS as ERROR_KINDS
from podnet.plugins.reference.cloud import ReferenceCloud as ReferenceCloud
from podnet.plugins.reference.cloud import ReferenceCloudError as ReferenceCloudError
from podnet.plugins.reference.cloud import SharedSubnet
from podnet.plugins.reference.dataplane import BridgeDataplane

NAME = "reference"
#: the MTU of the pod interfaces on the reference bridge network
MTU = 1500
__version__ = "0.1.0"


@section()
@attrs.frozen
class ReferenceConfig:
    """The section ``providers.reference``: the stand-in cloud's behaviour."""

    latency_ms: float = attrs.field(default=0.0, metadata=between(0, 60_000))
    fault_rate: float = attrs.field(default=0.0, metadata=between(0, 1))
    seed: int = attrs.field(default=0, metadata=between(0, 2**32))
    #: None: as the cloud was made
    max_interfaces: int | None = attrs.field(default=None, metadata=between(1, 64))
    ips_per_interface: int | None = attrs.field(default=None, metadata=between(1, 4096))
    #: where the cloud keeps its state, to outlive the controller process
    state_file: str | None = attrs.field(default=None, metadata=text())


class ReferenceProvider(DataplaneHooks):
    """The plugin. One instance per controller; the cloud may outlive it."""

    def __init__(self, cloud: ReferenceCloud | None = None, *, name: str = NAME,
                 policy: PoolPolicy | None = None,
                 sticky_kinds: tuple[str, ...] = ("StatefulSet",)) -> None:
        self.cloud = cloud or ReferenceCloud()
        self.name = name
        self.sticky_kinds = sticky_kinds
        self.policy = policy or PoolPolicy(min_idle=2, max_idle=8, batch_size=4,
                                           max_batch_size=16, reuse_cooldown=0.0)
        #: what ``podnet_node_check`` reports, by node name (for tests: set and clear it)
        self.findings: dict[str, list[NodeFinding]] = {}
        #: raised by ``podnet_node_check`` when set (for tests)
        self.check_error: Exception | None = None
        #: the node side: a bridge per network, a veth pair per pod interface
        self.dataplane = BridgeDataplane()
        #: the Ready Subnets core last handed over (podnet_networks_changed)
        self.networks = Networks()

    # 1. registration and configuration

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=True, manages_interfaces=True,
            policy=self.policy, sticky_kinds=self.sticky_kinds,
            description="addresses from each node's podCIDR; no cloud",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        cfg = read_section(ReferenceConfig, provider, config)
        self.cloud.latency = cfg.latency_ms / 1000
        self.cloud.fault_rate = cfg.fault_rate
        self.cloud.random.seed(cfg.seed)
        if cfg.max_interfaces is not None:
            self.cloud.max_interfaces = cfg.max_interfaces
        if cfg.ips_per_interface is not None:
            self.cloud.ips_per_interface = cfg.ips_per_interface
        if cfg.state_file is not None:
            try:
                self.cloud.persist_to(cfg.state_file)
            except (OSError, ValueError, KeyError) as exc:
                raise ConfigError(config_key(provider, "state_file"),
                                  f"unusable: {exc}") from None

    # Subnet objects: shared subnets of the cloud

    @hookimpl
    def podnet_subnet_parameters(self, provider: str, subnet: SubnetInfo
                                 ) -> SubnetRealization | None:
        """No parameters; the Subnet is put into the cloud as a shared subnet (its block,
        gateway and exclusions), again at each generation."""
        for key in subnet.parameters or {}:
            raise InvalidRequest(f"spec.parameters.{key}", f"Subnet {subnet.name}: unknown "
                                 f"parameter {key!r}: the {self.name} provider takes none")
        shared = _shared(subnet)
        self.cloud.put_subnet(shared)
        # the cloud subnet is the Subnet itself: its pool entries name it (cloudSubnets)
        return SubnetRealization(details={"cidr": shared.cidr, "gateway": shared.gateway,
                                          "cloudSubnets": [subnet.name]},
                                 summary=f"shared subnet {shared.cidr}")

    @hookimpl
    def podnet_networks_changed(self, provider: str, networks: Networks) -> None:
        self.networks = networks

    def _in_shared(self, node: NodeContext, wanted: str | None, call: Any) -> tuple[Any, str]:
        """``call(subnet)`` in the node's Subnets (the one core named, else each in turn
        until one has room); ``(answer, subnet name)``. A Subnet the cloud lost (a cloud
        without its state file, restarted) is put into it again."""
        chosen = [s for s in node.subnets if s.name == wanted] or list(node.subnets)
        last: Exception | None = None
        for subnet in chosen:
            try:
                try:
                    return call(subnet.name), subnet.name
                except ReferenceCloudError as exc:
                    if exc.code != "NotFound" or f"subnet {subnet.name} " not in str(exc):
                        raise
                    self.cloud.put_subnet(_shared(subnet))
                    return call(subnet.name), subnet.name
            except ReferenceCloudError as exc:
                if exc.code != "SubnetExhausted":
                    raise
                last = exc
        assert last is not None
        raise last

    # 3. inventory

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        n = node.node
        shared = bool(node.subnets)
        interfaces = self.cloud.describe(n.name, n.pod_cidr, shared)
        max_itf, per = self.cloud.capacity(n.name, n.pod_cidr, shared)
        # each interface is in one subnet: a Subnet's (by its name) or the podCIDR
        bound = self.cloud.interface_subnets(n.name)
        return Inventory(
            interfaces=tuple(
                # every interface but eth0 is one podnet_interface_create made
                CloudInterface(id=itf, subnet=bound.get(itf, n.pod_cidr), primary=itf == "eth0",
                               ips=tuple(ips), mac=_mac_for(f"{n.name}/{itf}"),
                               made=itf != "eth0")
                for itf, ips in sorted(interfaces.items())
            ),
            max_interfaces=max_itf, ips_per_interface=per,
        )

    @hookimpl
    def podnet_unknown_machines(self, provider: str, known: Sequence[NodeInfo]
                                ) -> Sequence[NodeInfo] | None:
        names = {n.name for n in known}  # a node is its name here
        return [NodeInfo(name=name, uid="") for name in self.cloud.machines()
                if name not in names]

    # 4. pool and interfaces

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        itf = interface.id if interface else "eth0"
        n = node.node
        # the interface's own subnet, as on a cloud; the first interface of a node without
        # a podCIDR goes into one of its Subnets at its first grow
        bound = self.cloud.interface_subnets(n.name).get(itf)
        if bound is None and node.subnets and not n.pod_cidr:
            added, bound = self._in_shared(node, subnet, lambda name: self.cloud.add(
                n.name, n.pod_cidr, itf, count, subnet=name))
        elif bound is not None:
            added, bound = self._in_shared(node, bound, lambda name: self.cloud.add(
                n.name, n.pod_cidr, itf, count, subnet=name))
        else:
            added = self.cloud.add(n.name, n.pod_cidr, itf, count)
        return [PoolEntry(ip, itf, bound or n.pod_cidr) for ip in added]

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        return self.cloud.remove(node.node.name, [e.address for e in entries])

    @hookimpl
    def podnet_interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                                ip_count: int) -> CloudInterface | None:
        n = node.node
        where = n.pod_cidr
        if node.subnets:
            # a new interface goes into the Subnet core named, else the node's first with
            # free addresses
            (itf, ips), where = self._in_shared(node, subnet, lambda name: (
                self.cloud.create_interface(n.name, n.pod_cidr, ip_count, subnet=name)))
        else:
            itf, ips = self.cloud.create_interface(n.name, n.pod_cidr, ip_count)
        return CloudInterface(id=itf, subnet=where, ips=tuple(ips),
                              mac=_mac_for(f"{n.name}/{itf}"))

    @hookimpl
    def podnet_interface_dispose(self, provider: str, node: NodeContext,
                                 interface: CloudInterface) -> bool | None:
        if interface.primary or interface.trunk:
            raise ProviderError(ErrorKind.FATAL, f"{interface.id} is never disposed")
        self.cloud.delete_interface(node.node.name, interface.id)
        return True

    # periodic node check (read only)

    @hookimpl
    def podnet_node_check(self, provider: str, node: NodeContext
                          ) -> Sequence[NodeFinding] | None:
        if self.check_error is not None:
            raise self.check_error
        # a real provider reads the cloud here and compares it with what it configured
        return list(self.findings.get(node.node.name, ()))

    # 5. one pod network

    @hookimpl
    def podnet_address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        cidr = node.node.pod_cidr
        # a node's own subnet is its podCIDR, by that name too; its Subnets' by their names
        own = (Subnet.first_host_gateway(cidr, cidr),) if cidr else ()
        return AddressSpace(subnets=own + tuple(
            Subnet(id=s.name, cidr=shared.cidr, gateway=shared.gateway)
            for s in node.subnets for shared in (_shared(s),)))

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        node = context.node.node
        request = context.request
        assert request is not None, "the reference provider uses node pools"
        subnet = context.subnet
        if subnet is not None:
            # its block only: an entry outside is handed back, the pod network waiting for
            # one of the Subnet (its cloud subnet is itself); an address outside refused
            if request.entry is not None and not subnet.contains(request.entry.address):
                raise PoolEmpty(f"{request.entry.address} is not in {subnet.describe()}, "
                                "the pod network's Subnet: waiting for an address of it",
                                subnet=subnet.name)
            if request.address is not None and not subnet.contains(request.address):
                raise request.refuse(f"{request.address} is not in {subnet.describe()}, "
                                     "the pod network's Subnet")
            if request.address is not None and (subnet.excludes(request.address)
                                                or request.address in subnet.gateways):
                raise request.refuse(f"{request.address} is excluded from "
                                     f"{subnet.describe()} (its excludeIPs or gateway)")
        if request.entry is not None:
            entry = request.entry
        else:
            # a requested address the pool does not hold: attach it (idempotent: already
            # attached is fine), in the pod network's Subnet when it has one
            assert request.address is not None
            where = subnet.name if subnet is not None and subnet.contains(
                request.address) else None
            itf = self._interface_in(context.node, where)
            added = self.cloud.add(node.name, node.pod_cidr, itf, 1,
                                   address=request.address, subnet=where)
            entry = PoolEntry(added[0], itf, where or node.pod_cidr)
        if subnet is None or not subnet.contains(entry.address):
            subnet = self.networks.subnet(entry.subnet or "")
        shared = _shared(subnet) if subnet is not None and subnet.contains(entry.address) \
            else None
        cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None
        gateway: str | None
        if shared is not None:
            cidr, gateway = shared.network, shared.gateway
        elif node.pod_cidr:
            cidr, gateway = _bridge_network(node.pod_cidr)
        else:
            cidr = gateway = None
        mac = pn.spec.requests.mac_address or _mac_for(entry.address)
        # what the pod's interface gets on the node's bridge network: its subnet's prefix
        # (the Subnet's, else the podCIDR's), a default route via the gateway the bridge
        # holds, Ethernet's MTU
        return Allocation(ip=entry.address, mac=mac,
                          subnet=shared.name if shared else node.pod_cidr, gateway=gateway,
                          interface=entry.interface, cidr=str(cidr) if cidr else None,
                          prefix_length=cidr.prefixlen if cidr is not None else None,
                          routes=(Route(dst="0.0.0.0/0" if ":" not in gateway else "::/0",
                                        gw=gateway),) if gateway else (),
                          mtu=MTU)

    def _interface_in(self, node: NodeContext, subnet: str | None) -> str:
        """An interface of the node in ``subnet`` (None: its podCIDR) for a requested
        address: a first interface not yet in any subnet takes one on a node without a
        podCIDR."""
        bound = self.cloud.interface_subnets(node.node.name)
        if subnet is None:
            return "eth0"
        found = next((itf for itf, s in sorted(bound.items()) if s == subnet), None)
        if found is not None:
            return found
        if not node.node.pod_cidr and "eth0" not in bound:
            return "eth0"
        raise PoolEmpty(f"no interface of node {node.node.name} in Subnet {subnet}",
                        subnet=subnet)

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        if pn.status.ip is None:
            raise ProviderError(ErrorKind.FATAL, "route without an address", field="status.ip")
        self.cloud.set_route(pn.status.ip, pn.key)
        return RouteResult()

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        pn = context.pod_network
        routed_to = self.cloud.route_of(pn.status.ip or "")
        if routed_to != pn.key:
            return VerifyResult(ok=False, reason=f"route for {pn.status.ip} is {routed_to}")
        return VerifyResult(ok=True)

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        pn = context.pod_network
        if pn.status.ip is not None:
            self.cloud.delete_route(pn.status.ip, pn.key)
        return ReleaseResult(return_to_pool=True)

    # 6. the dataplane on a node (the node agent): a bridge network of veth pairs; its
    # four hooks come from DataplaneHooks (self.dataplane)

    # 7. errors

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        if not isinstance(error, ReferenceCloudError):
            return None
        return ERROR_KINDS.get(error.code, ErrorKind.TRANSIENT)



def _shared(subnet: SubnetInfo) -> SharedSubnet:
    """The cloud's shared subnet of a Subnet: its IPv4 block (else its IPv6 one), that
    family's gateway (default: the first host), its exclusions of that family."""
    net = subnet.network(4) or subnet.network(6)
    if net is None:
        raise InvalidRequest("spec.cidrBlock", f"Subnet {subnet.name}: no block")
    gateway = subnet.gateway(net.version) or str(next(net.hosts()))
    excluded = tuple(e for e in subnet.excluded if address_range(e)[0].version == net.version)
    return SharedSubnet(name=subnet.name, cidr=str(net), gateway=gateway, excluded=excluded)


def _mac_for(seed: str) -> str:
    """A stable locally administered unicast MAC derived from ``seed``."""
    import hashlib

    digest = hashlib.blake2s(seed.encode(), digest_size=5).digest()
    return "0a:" + ":".join(f"{b:02x}" for b in digest)


#: what the host registers as the built-in ``reference`` plugin
plugin = ReferenceProvider()


@functools.lru_cache(maxsize=1024)
def _bridge_network(pod_cidr: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]:
    """A node's podCIDR and its bridge's gateway (the first host), parsed once a node."""
    cidr = ipaddress.ip_network(pod_cidr)
    return cidr, str(next(cidr.hosts()))
