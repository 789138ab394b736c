"""A small provider for the tests of networks declared as objects: it serves pod
networks from the Subnet and IPPool core chose (``AllocateContext.subnet`` /
``.ip_pool``), keeps what ``podnet_networks_changed`` told it, and checks Subnet
parameters (``spec.parameters``: only ``{"zone": "..."}``; ``{"fail": "transient"}``
answers as a cloud that cannot answer now).

It has no node pools (``uses_node_pool=False``): its address management is its own, as
an overlay's is, so what it holds is exactly what core asked of it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, InvalidRequest, PoolEmpty, ProviderError
from podnet.hookspecs.networks import Networks, SubnetInfo, SubnetRealization
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
    PodNetworkContext,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
)

LAB = "lab"


class NetworkLab:
    """The ``lab`` provider (``name`` to run a second one)."""

    def __init__(self, name: str = LAB) -> None:
        self.name = name
        #: every set ``podnet_networks_changed`` handed over, in order
        self.published: list[Networks] = []
        #: pod network key -> its address
        self.held: dict[str, str] = {}
        #: the Subnet each allocation was made from (pod network key -> Subnet name)
        self.subnet_of: dict[str, str] = {}
        self.parameter_calls: list[tuple[str, int]] = []
        #: Subnets whose parameters the cloud refuses from now on (what it has changed)
        self.refuse: dict[str, str] = {}
        #: what the lab saw that must never happen: an allocation from a Subnet or pool
        #: that was not in the last set published to it, or from an excluded address
        self.violations: list[str] = []
        self._cursor: dict[str, int] = {}
        self._taken: set[str] = set()

    @property
    def networks(self) -> Networks:
        return self.published[-1] if self.published else Networks()

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, version="1.0", uses_node_pool=False)

    @hookimpl
    def podnet_subnet_parameters(self, provider: str, subnet: SubnetInfo
                                 ) -> SubnetRealization | None:
        self.parameter_calls.append((subnet.name, subnet.generation))
        params: Mapping[str, Any] = subnet.parameters
        if subnet.name in self.refuse:
            raise InvalidRequest("spec.parameters.zone", self.refuse[subnet.name])
        if params.get("fail") == "transient":
            raise ProviderError(ErrorKind.TRANSIENT, "the lab cannot answer now")
        unknown = sorted(set(params) - {"zone", "fail"})
        if unknown:
            raise InvalidRequest(f"spec.parameters.{unknown[0]}",
                                 f"unknown parameter {unknown[0]!r} (known: zone)")
        if "zone" in params:
            return SubnetRealization(details={"zone": params["zone"]},
                                     summary=f"zone {params['zone']}")
        return None

    @hookimpl
    def podnet_networks_changed(self, provider: str, networks: Networks) -> None:
        self.published.append(networks)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        subnet = context.subnet
        if subnet is None:
            raise InvalidRequest("subnet", f"the lab serves Subnet objects only ({pn.key})")
        taken = self._taken
        usable = self.networks.subnet(subnet.name)
        if usable is None or usable.cidrs != subnet.cidrs:
            self.violations.append(f"{pn.key}: {subnet.describe()} is not usable")
        if context.ip_pool is not None and self.networks.pool(context.ip_pool.name) is None:
            self.violations.append(f"{pn.key}: IPPool {context.ip_pool.name} is not usable")
        net = subnet.network(4)
        assert net is not None
        if pn.key in self.held and subnet.contains(self.held[pn.key]):
            ip = self.held[pn.key]
        elif pn.spec.requests.ip_address:
            ip = pn.spec.requests.ip_address
            if not subnet.contains(ip):
                raise InvalidRequest("ip_address", f"{ip} is outside {subnet.describe()}")
        elif context.ip_pool is not None:
            ip = next((c for c in context.ip_pool.members()
                       if c not in taken and c not in subnet.gateways
                       and not subnet.excludes(c)), "")
        else:
            ip = self._next_free(subnet, net, taken)
        if not ip:
            raise PoolEmpty(f"{subnet.describe()} is full")
        if subnet.excludes(ip) and pn.key not in self.held:
            self.violations.append(f"{pn.key}: {ip} is excluded by {subnet.describe()}")
        old = self.held.get(pn.key)
        if old is not None:
            self._taken.discard(old)
        self.held[pn.key] = ip
        self._taken.add(ip)
        self.subnet_of[pn.key] = subnet.name
        return Allocation(ip=ip, subnet=subnet.name, gateway=subnet.gateway(4),
                          cidr=str(net), prefix_length=net.prefixlen)

    def _next_free(self, subnet: SubnetInfo, net: ipaddress.IPv4Network | ipaddress.IPv6Network,
                   taken: set[str]) -> str:
        """The lowest free host address from where the last one was found (a cursor per
        Subnet: thousands of pods do not each walk the block), wrapping around once."""
        first, last = int(net.network_address) + 1, int(net.broadcast_address) - 1
        start = self._cursor.get(subnet.name, first)
        if not first <= start <= last:
            start = first
        n = start
        while True:
            ip = str(ipaddress.ip_address(n))
            if ip not in taken and ip not in subnet.gateways and not subnet.excludes(ip):
                self._cursor[subnet.name] = n
                return ip
            n = first if n >= last else n + 1
            if n == start:
                return ""

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        return RouteResult(interface="eth0")

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        self._taken.discard(self.held.pop(context.pod_network.key, ""))
        self.subnet_of.pop(context.pod_network.key, None)
        return ReleaseResult(return_to_pool=False)


def in_block(address: str, cidr: str) -> bool:
    return ipaddress.ip_address(address) in ipaddress.ip_network(cidr)
