"""The records podnet keeps, as frozen attrs value classes.

These are the shapes of the two custom resources (group ``podnet.io``, version
``v1alpha1``) and of the requests parsed from pod annotations. They carry no wire rules:
field names here are Python's, and ``podnet.core.convert`` alone maps them to and from
the camelCase JSON the API server stores. Providers may import this module.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from datetime import datetime

import attrs

GROUP = "podnet.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
FINALIZER = "podnet.io/release"
DEFAULT_NETWORK = "default"

#: Label put on every PodNetwork so list/watch can be narrowed to one node or pod.
LABEL_NODE = "podnet.io/node"
LABEL_POD = "podnet.io/pod"
#: on a KubeVirt VM's sticky records: the VirtualMachineInstance's name (the VM's pods
#: change names, and the VMI its uid, each time the VM starts)
LABEL_VM = "podnet.io/vm"
#: KubeVirt's label on a live migration's target virt-launcher pod (the
#: VirtualMachineInstanceMigration's uid); the source pod never has it
LABEL_MIGRATION_JOB = "kubevirt.io/migrationJobUID"
#: on a VM's record while a live migration runs: the source pod (still running the VM)
#: and its node. The record serves the target pod meanwhile; a provider binds the port on
#: both nodes (see the OVN provider's ``requested-chassis``)
ANNOTATION_MIGRATION_SOURCE = "podnet.io/migration-source"
ANNOTATION_MIGRATION_SOURCE_NODE = "podnet.io/migration-source-node"
#: the source node as a label too (the same key and value as the annotation), so the
#: source node's agent finds the records it still holds an interface of while they name
#: the target's node
LABEL_MIGRATION_SOURCE_NODE = ANNOTATION_MIGRATION_SOURCE_NODE


class Phase(enum.StrEnum):
    """PodNetwork phases; the machine state lives here, in ``status.phase``."""

    PENDING = "Pending"
    ALLOCATED = "Allocated"
    ROUTED = "Routed"
    RELEASING = "Releasing"


class InterfaceState(enum.StrEnum):
    """ENI machine states, as recorded in NodeNetwork status."""

    INITIALIZING = "Initializing"
    READY = "Ready"
    INHIBITED = "Inhibited"
    DISPOSING = "Disposing"


@attrs.frozen
class OwnerReference:
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False
    block_owner_deletion: bool = False


@attrs.frozen
class ObjectMeta:
    """The part of Kubernetes metadata podnet reads and writes."""

    name: str
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] = attrs.field(factory=dict)
    annotations: dict[str, str] = attrs.field(factory=dict)
    finalizers: tuple[str, ...] = ()
    owner_references: tuple[OwnerReference, ...] = ()


@attrs.frozen
class Condition:
    """A Kubernetes-style condition: one per ``type``, replaced, never appended twice."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    #: the object's ``metadata.generation`` the condition was written for (since 0.4.0;
    #: absent on older records)
    observed_generation: int | None = None


def set_condition(
    conditions: Sequence[Condition], new: Condition
) -> tuple[Condition, ...]:
    """``conditions`` with ``new`` in place of the one of its type (last), the one rule
    every condition writer follows: ``lastTransitionTime`` is kept unless the status
    changes (a new reason or message alone is no transition)."""
    out = []
    for c in conditions:
        if c.type == new.type:
            if c.status == new.status:
                new = attrs.evolve(new, last_transition_time=c.last_transition_time)
            continue
        out.append(c)
    out.append(new)
    return tuple(out)


# --- requests parsed from pod annotations -------------------------------------------


@attrs.frozen
class NetworkRequest:
    """What a pod asked for through ``podnet.io/*`` annotations, already validated.

    Empty fields mean "no preference": the provider's defaults apply.
    """

    subnets: tuple[str, ...] = ()
    ip_address: str | None = None
    ip_pool: tuple[str, ...] = ()
    mac_address: str | None = None
    security_groups: tuple[str, ...] = ()
    port_security: bool = False
    vips: tuple[str, ...] = ()
    eip: str | None = None
    snat: bool = False


# --- PodNetwork -----------------------------------------------------------------------


@attrs.frozen
class PodNetworkSpec:
    pod_name: str
    pod_uid: str
    node_name: str
    provider: str
    network: str = DEFAULT_NETWORK
    #: Sticky pod networks (StatefulSet, VM) keep their address across pod restarts.
    sticky: bool = False
    requests: NetworkRequest = NetworkRequest()


@attrs.frozen
class Route:
    """A route the pod's interface gets: to ``dst`` (a CIDR), via ``gw`` (``None``: on
    link)."""

    dst: str
    gw: str | None = None


@attrs.frozen
class PodNetworkStatus:
    phase: Phase = Phase.PENDING
    ip: str | None = None
    ipv6: str | None = None
    mac: str | None = None
    subnet: str | None = None
    gateway: str | None = None
    interface: str | None = None
    #: what the pod's interface needs beside its address (since 0.3.0; absent on the
    #: wire for older records and providers that do not say): the prefix length of
    #: ``ip`` (and of ``ipv6``), the IPv6 gateway, the routes and the MTU
    prefix_length: int | None = None
    ipv6_prefix_length: int | None = None
    ipv6_gateway: str | None = None
    routes: tuple[Route, ...] = ()
    mtu: int | None = None
    conditions: tuple[Condition, ...] = ()
    last_transition_time: datetime | None = None
    #: W3C traceparent of the lifecycle's first transition: later ones join its trace.
    traceparent: str | None = None
    #: a digest of the record's uid and the addresses podnet gave it, written with them
    #: (absent on records an older podnet wrote): a hand edit of ``ip`` does not carry it
    #: along, so after a restart the record podnet gave an address to keeps it
    address_seal: str | None = None


@attrs.frozen
class PodNetwork:
    metadata: ObjectMeta
    spec: PodNetworkSpec
    status: PodNetworkStatus = PodNetworkStatus()
    api_version: str = API_VERSION
    kind: str = "PodNetwork"

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"


# --- NodeNetwork ----------------------------------------------------------------------


@attrs.frozen
class PoolBounds:
    """Idle-address bounds for one node; ``None`` means the provider's default."""

    min_idle: int | None = None
    max_idle: int | None = None


@attrs.frozen
class NodeNetworkSpec:
    provider: str
    instance_id: str | None = None
    subnets: tuple[str, ...] = ()
    pool: PoolBounds = PoolBounds()


@attrs.frozen
class IpStatus:
    """One address on an interface. ``owner`` (a PodNetwork's ``namespace/name``) is read
    from records older podnets wrote and written no more since 0.9.0: the PodNetwork that
    owns an address names it, and the pool's ``owner_of`` answers in the controller.

    On a dual-stack node ``address`` is the IPv4 half and ``ipv6`` the IPv6 half of a
    pair; an entry without ``ipv6`` there is an invalid half (of either family) waiting to
    be given back. Absent on the wire for single-stack nodes and older records.
    """

    address: str
    owner: str | None = None
    subnet: str | None = None
    ipv6: str | None = None


@attrs.frozen
class InterfaceStatus:
    id: str
    state: InterfaceState = InterfaceState.READY
    mac: str | None = None
    subnet: str | None = None
    primary: bool = False
    trunk: bool = False
    ips: tuple[IpStatus, ...] = ()
    inhibited_until: datetime | None = None
    #: False: holds no pod address (an ECS primary ENI); a record without it means True
    pooled: bool = True


@attrs.frozen
class NodeNetworkStatus:
    interfaces: tuple[InterfaceStatus, ...] = ()
    last_inventory_sync: datetime | None = None
    conditions: tuple[Condition, ...] = ()


@attrs.frozen
class NodeNetwork:
    metadata: ObjectMeta
    spec: NodeNetworkSpec
    status: NodeNetworkStatus = NodeNetworkStatus()
    api_version: str = API_VERSION
    kind: str = "NodeNetwork"


# --- read views of built-in objects ---------------------------------------------------
# The engine keeps only these few fields of Pods and Nodes in its caches (GOALS.md P4).


@attrs.frozen
class NamedPort:
    """A container port with a name: ``name`` is unique in the pod (the API's rule)."""

    name: str
    port: int
    #: ``TCP``, ``UDP`` or ``SCTP``
    protocol: str = "TCP"


@attrs.frozen
class PodInfo:
    namespace: str
    name: str
    uid: str
    node_name: str | None = None
    phase: str = "Pending"
    restart_policy: str = "Always"
    reason: str | None = None
    deletion_timestamp: datetime | None = None
    deletion_grace_period_seconds: int | None = None
    labels: dict[str, str] = attrs.field(factory=dict)
    #: the pod's ``podnet.io/*`` annotations, and Multus's ``k8s.v1.cni.cncf.io/networks``
    #: when it has one (since 0.7.0; core serves the NADs of podnet among them)
    annotations: dict[str, str] = attrs.field(factory=dict)
    owner_references: tuple[OwnerReference, ...] = ()
    host_network: bool = False
    #: its containers' named ports (``spec.containers[*].ports`` with a ``name``, then
    #: its sidecars': init containers with ``restartPolicy: Always``, as the API resolves a
    #: port name), for NetworkPolicy ports given by name (since 0.8.0)
    named_ports: tuple[NamedPort, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen
class NodeInfo:
    name: str
    uid: str
    pod_cidr: str | None = None
    provider_id: str | None = None
    labels: dict[str, str] = attrs.field(factory=dict)
    annotations: dict[str, str] = attrs.field(factory=dict)
    internal_ips: tuple[str, ...] = ()
    deletion_timestamp: datetime | None = None
    #: the cloud controller manager has not initialized it yet (its
    #: ``node.cloudprovider.kubernetes.io/uninitialized`` taint): the labels and the
    #: providerID it sets may still come
    uninitialized: bool = False


@attrs.frozen
class AgentReport:
    """What a node agent last reported about its node (its Lease, see
    ``podnet.core.objects.agent_report``): the records it has interfaces for, and the uids
    of the Releasing records it has seen and holds no interface for (since 0.3.0)."""

    node: str
    #: who wrote it: ``<host id>/<agent instance>`` (``podnet.core.objects.holder_host``)
    holder: str = ""
    plugged: frozenset[str] = frozenset()
    unplugged: frozenset[str] = frozenset()
    renew_time: datetime | None = None
    #: seconds it stays its writer's after ``renew_time`` (the Lease's duration)
    lease_seconds: int | None = None
    #: its lists do not match its writer's digest (edited by hand): ``unplugged`` is read
    #: as empty
    edited: bool = False


@attrs.frozen
class WorkloadInfo:
    """A pod's controller as core's cache sees it (StatefulSets, for now).

    ``exists=False`` means core's cache is synced and holds no such workload: it was
    deleted (or never existed).
    """

    kind: str
    namespace: str
    name: str
    uid: str = ""
    #: ``spec.replicas`` (the API's default, 1, when unset)
    replicas: int = 1
    #: ``spec.ordinals.start``: the first ordinal of a StatefulSet's pods
    ordinal_start: int = 0
    exists: bool = True

    def wants_ordinal(self, ordinal: int) -> bool:
        """Whether a pod with this ordinal is one the workload keeps at its current scale."""
        return self.exists and self.ordinal_start <= ordinal < self.ordinal_start + self.replicas


_ORDINAL = re.compile(r".+-(0|[1-9][0-9]*)")


def statefulset_ordinal(pod_name: str) -> int | None:
    """The ordinal of a StatefulSet pod name (``web-3`` -> 3), or ``None``.

    StatefulSet ordinals carry no leading zeros, so ``web-03`` is not one.
    """
    match = _ORDINAL.fullmatch(pod_name)
    return int(match.group(1)) if match else None
