"""The ECS provider's dataplane on a node: the shared ENI dataplane (:mod:`podnet.linux.eni`:
a routed veth per pod, a rule from the pod's address to a table per ENI), each ENI's MAC
asked of the cloud (DescribeNetworkInterfaces, once per ENI). ECS records carry the pod
interface's own MAC (or none: one is derived from the address)."""

from __future__ import annotations

from collections.abc import Callable

from podnet.hookspecs.models import PodNetwork
from podnet.linux.eni import (
    GATEWAY,
    ORPHAN_RULE,
    POD_ROUTES,
    PROTO,
    RULE_PRIORITY,
    TABLE_BASE,
    EniDataplane,
    table_of,
    veth_names,
)

__all__ = ["GATEWAY", "ORPHAN_RULE", "POD_ROUTES", "PROTO", "RULE_PRIORITY", "TABLE_BASE",
           "EniDataplane", "ecs_dataplane", "table_of", "veth_names"]


def ecs_dataplane(provider: str, mac_of: Callable[[PodNetwork], str | None]
                  ) -> EniDataplane:
    return EniDataplane(provider, mac_of)
