"""The records podnet keeps, as frozen attrs value classes.

They are part of the provider contract (hooks receive them) and so are defined in
:mod:`podnet.hookspecs.models`; this module re-exports every name under its old path.
Providers may import either.
"""

from __future__ import annotations

from podnet.hookspecs.models import (
    API_VERSION,
    DEFAULT_NETWORK,
    FINALIZER,
    GROUP,
    LABEL_NODE,
    LABEL_POD,
    LABEL_VM,
    VERSION,
    AgentReport,
    Condition,
    InterfaceState,
    InterfaceStatus,
    IpStatus,
    NetworkRequest,
    NodeInfo,
    NodeNetwork,
    NodeNetworkSpec,
    NodeNetworkStatus,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodInfo,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
    PoolBounds,
    Route,
    WorkloadInfo,
    set_condition,
)

__all__ = [
    "API_VERSION",
    "DEFAULT_NETWORK",
    "FINALIZER",
    "GROUP",
    "LABEL_NODE",
    "LABEL_POD",
    "LABEL_VM",
    "VERSION",
    "AgentReport",
    "Condition",
    "InterfaceState",
    "InterfaceStatus",
    "IpStatus",
    "NetworkRequest",
    "NodeInfo",
    "NodeNetwork",
    "NodeNetworkSpec",
    "NodeNetworkStatus",
    "ObjectMeta",
    "OwnerReference",
    "Phase",
    "PodInfo",
    "PodNetwork",
    "PodNetworkSpec",
    "PodNetworkStatus",
    "PoolBounds",
    "Route",
    "WorkloadInfo",
    "set_condition",
]
