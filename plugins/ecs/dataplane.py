"""The ECS provider's dataplane on a node: the shared ENI dataplane (:mod:`podnet.linux.eni`:
a routed veth per pod, a rule from the pod's address to a table per ENI), each ENI's MAC
asked of the cloud (DescribeNetworkInterfaces, once per ENI). ECS records carry the pod
interface's own MAC (or none: one is derived from the address).

A vSwitch's IPv6 CIDR is a /64 whose first host is its gateway (the SDK's DescribeVSwitches
answer does not carry the IPv6 CIDR): :func:`ipv6_gateway` derives it from a pod's
address."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from podnet.hookspecs.models import PodNetwork
from podnet.linux.eni import (
    GATEWAY,
    GATEWAY6,
    ORPHAN_RULE,
    POD_ROUTES,
    POD_ROUTES_DUAL,
    PROTO,
    RULE_PRIORITY,
    TABLE_BASE,
    EniDataplane,
    table_of,
    veth_names,
)

__all__ = ["GATEWAY", "GATEWAY6", "ORPHAN_RULE", "POD_ROUTES", "POD_ROUTES_DUAL", "PROTO",
           "RULE_PRIORITY", "TABLE_BASE", "EniDataplane", "ecs_dataplane", "ipv6_gateway",
           "table_of", "veth_names"]

#: the prefix length of a vSwitch's IPv6 CIDR
VSWITCH_IPV6_PREFIX = 64


def ipv6_gateway(address: str) -> str:
    """The IPv6 gateway of the vSwitch holding ``address``: its /64's first host."""
    net = ipaddress.IPv6Network(f"{address}/{VSWITCH_IPV6_PREFIX}", strict=False)
    return str(net.network_address + 1)


def ecs_dataplane(provider: str, mac_of: Callable[[PodNetwork], str | None]
                  ) -> EniDataplane:
    return EniDataplane(provider, mac_of)
