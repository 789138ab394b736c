"""The caches the controllers read: one informer per kind, with the indexes they look
things up by, and the records that do not parse.

Reads only: writes go through :class:`~podnet.core.records.RecordWriter`, which feeds
them back in here (``assume``) so the next read sees them.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import attrs

from podnet.core.attachments import MULTUS_NETWORKS, NadInfo, read_nad, selected_networks
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import (
    IP_POOL,
    LEASE,
    NAD,
    NAMESPACE,
    NETWORK_POLICY,
    NODE,
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    SECURITY_GROUP,
    STATEFUL_SET,
    SUBNET,
    VMI,
    Cluster,
    Kind,
    Obj,
)
from podnet.core.convert import (
    META_ATTRS,
    RecordError,
    from_wire,
    metadata_as_answered,
    read_time,
    salvage_pod_network,
)
from podnet.core.models import (
    LABEL_VM,
    AgentReport,
    NodeInfo,
    NodeNetwork,
    ObjectMeta,
    Phase,
    PodInfo,
    PodNetwork,
    PodNetworkStatus,
    WorkloadInfo,
)
from podnet.core.netpol.status import AgentPolicyReport
from podnet.core.netpol.wire import StoredPolicy, stored_policy
from podnet.core.networks.checks import Declared, declared
from podnet.core.objects import (
    LABEL_AGENT_NODE,
    POD_FIELDS,
    MigrationState,
    agent_lease_name,
    agent_policy_report,
    agent_report,
    is_migration_target,
    is_statefulset,
    namespace_annotations,
    node_info,
    pod_info,
    record_finished,
    statefulset_info,
    vm_of,
    vmi_migration,
    vmi_of,
)
from podnet.core.values import evolve
from podnet.hookspecs.networks import (
    IP_POOL_KIND,
    SECURITY_GROUP_KIND,
    SUBNET_KIND,
    SubnetInfo,
)
from podnet.hookspecs.types import NodeContext

M = TypeVar("M", PodNetwork, NodeNetwork)
_NO_OFFSET = timedelta(0)
#: what a PodNetwork without ``status`` on the wire reads as
_DEFAULT_STATUS = PodNetworkStatus()


def _whole(t: datetime) -> bool:
    """Whether ``t`` reads back from the wire as itself: whole seconds, in UTC."""
    return not t.microsecond and t.utcoffset() == _NO_OFFSET


@attrs.frozen
class NamespaceInfo:
    """The view of a Namespace: its ``podnet.io/*`` annotations (usually none) and its
    labels (a Subnet's ``namespaceSelector`` reads them)."""

    annotations: dict[str, str] = attrs.field(factory=dict)
    labels: dict[str, str] = attrs.field(factory=dict)


def namespace_info(obj: Obj) -> NamespaceInfo:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return NamespaceInfo(annotations=namespace_annotations(obj), labels={
        sys.intern(k): sys.intern(v) for k, v in labels.items()
        if isinstance(k, str) and isinstance(v, str)})


def pod_key_of(pn: PodNetwork) -> str:
    """The queue key (``namespace/name``) of the pod a record belongs to; interned, as
    the pods' cache keys are, so what holds it (the queue, an index) holds no copy."""
    return sys.intern(f"{pn.metadata.namespace}/{pn.spec.pod_name}")


class Caches:
    """The informers, their indexes, and the unreadable records.

    ``on_unreadable`` is told the key (``plural/namespace/name``) of each record that
    stops parsing (once per error): the engine queues its report.
    """

    def __init__(self, cluster: Cluster, on_unreadable: Callable[[str], None], *,
                 agent_namespace: str = "kube-system", network_policy: bool = True) -> None:
        self._on_unreadable = on_unreadable
        #: records that do not parse, by key, with the error: reported, not used
        self.unreadable: dict[str, tuple[Kind, Obj, RecordError]] = {}
        self._reported: dict[str, str] = {}
        self.pods: Informer[PodInfo] = Informer(cluster, POD, pod_info, name="pods",
                                                fields=POD_FIELDS)
        self.nodes: Informer[NodeInfo] = Informer(cluster, NODE, node_info, name="nodes")
        self.pod_networks: Informer[PodNetwork] = Informer(
            cluster, POD_NETWORK, lambda o: self._read(POD_NETWORK, PodNetwork, o),
            name="podnetworks",
        )
        self.node_networks: Informer[NodeNetwork] = Informer(
            cluster, NODE_NETWORK, lambda o: self._read(NODE_NETWORK, NodeNetwork, o),
            name="nodenetworks",
        )
        #: Namespace -> its ``podnet.io/*`` annotations (for ``AllocateContext``) and labels
        self.namespaces: Informer[NamespaceInfo] = Informer(
            cluster, NAMESPACE, namespace_info, name="namespaces")
        #: the networks an operator declares, each with its spec checked by itself;
        #: optional (a cluster without their CRDs runs as before: nothing is listed)
        self.subnets: Informer[Declared] = Informer(
            cluster, SUBNET, lambda o: declared(SUBNET_KIND, o), name="subnets",
            optional=True)
        self.ip_pools: Informer[Declared] = Informer(
            cluster, IP_POOL, lambda o: declared(IP_POOL_KIND, o), name="ippools",
            optional=True)
        self.security_groups: Informer[Declared] = Informer(
            cluster, SECURITY_GROUP, lambda o: declared(SECURITY_GROUP_KIND, o),
            name="securitygroups", optional=True)
        #: the Ready Subnets a node's pods may use (``NodeContext.subnets``): set by the
        #: networks' reconciler while a provider has Subnet objects (None: none has)
        self.subnets_of_node: Callable[[NodeInfo], tuple[SubnetInfo, ...]] | None = None
        #: StatefulSet (``namespace/name``) -> uid, replicas (for held sticky records)
        self.statefulsets: Informer[WorkloadInfo] = Informer(
            cluster, STATEFUL_SET, statefulset_info, name="statefulsets")
        #: the node agents' reports (their Leases in podnet's namespace), by
        #: ``namespace/name``; ``agent_report_of`` finds a node's
        self.agent_reports: Informer[AgentReport] = Informer(
            cluster, LEASE, agent_report, namespace=agent_namespace,
            label_selector=LABEL_AGENT_NODE, name="agentreports")
        self.agent_namespace = agent_namespace
        #: NetworkAttachmentDefinitions (``namespace/name``) as podnet reads them
        #: (``core.attachments``): whose each is, the Subnet it names
        self.nads: Informer[NadInfo] = Informer(cluster, NAD, read_nad, name="nads",
                                                optional=True)
        #: KubeVirt's VirtualMachineInstances (``namespace/name``) that say how their last
        #: live migration went (the others stay out); optional: a cluster without
        #: KubeVirt lists nothing, and the pods alone tell a migration's course
        self.vmis: Informer[MigrationState] = Informer(cluster, VMI, vmi_migration,
                                                       name="vmis", optional=True)
        #: NetworkPolicies, read (``core.netpol.wire``), with the status core wrote on
        #: them; optional (a cluster that does not serve the kind lists nothing), and not
        #: listed at all when NetworkPolicy is left to another engine
        self.network_policies: Informer[StoredPolicy] = Informer(
            cluster, NETWORK_POLICY, stored_policy, name="networkpolicies", optional=True)
        #: what each node agent says of the policies it programmed (its report Lease's
        #: ``podnet.io/network-policies``), by ``namespace/name`` of the Lease
        self.agent_policy_reports: Informer[AgentPolicyReport] = Informer(
            cluster, LEASE, agent_policy_report, namespace=agent_namespace,
            label_selector=LABEL_AGENT_NODE, name="agentpolicyreports")
        self.pods.add_index("node", lambda p: [p.node_name] if p.node_name else [])
        self.pods.add_index("vm", lambda p: [f"{p.namespace}/{vm}"]
                            if (vm := vm_of(p)) is not None else [])
        # pods by the NADs their Multus annotation names: a NAD's change requeues them
        self.pods.add_index("nad", lambda p: selected_networks(p.annotations, p.namespace)
                            if MULTUS_NETWORKS in p.annotations else [])
        self.pod_networks.add_index("pod", lambda pn: [pod_key_of(pn)])
        self.pod_networks.add_index("node", lambda pn: [pn.spec.node_name])
        # sticky records by their StatefulSet, and records waiting for an address by
        # namespace: few of either, so the indexes stay small
        self.pod_networks.add_index("statefulset", _statefulset_of)
        self.pod_networks.add_index(
            "vm", lambda pn: [f"{pn.metadata.namespace}/{pn.metadata.labels[LABEL_VM]}"]
            if LABEL_VM in pn.metadata.labels else [])
        self.pod_networks.add_index(
            "pending", lambda pn: [pn.metadata.namespace or ""]
            if pn.status.phase is Phase.PENDING else [])
        #: what must be listed before the engine starts: pools are rebuilt from these;
        #: the other caches (namespaces, statefulsets) may sync later
        self.required: list[Informer[Any]] = [
            self.nodes, self.node_networks, self.pod_networks, self.pods,
        ]
        self.networks: list[Informer[Declared]] = [self.subnets, self.ip_pools,
                                                   self.security_groups]
        self.all: list[Informer[Any]] = [*self.required, self.namespaces, self.statefulsets,
                                         self.agent_reports, self.nads, self.vmis,
                                         *self.networks]
        if network_policy:
            self.all += [self.network_policies, self.agent_policy_reports]

    def node_context(self, node_name: str) -> NodeContext:
        """What a provider is told about a node: the cached Node (a bare one if it is
        gone) and its NodeNetwork."""
        node = self.nodes.get(node_name) or NodeInfo(name=node_name, uid="")
        subnets = self.subnets_of_node
        return NodeContext(node=node, network=self.node_networks.get(node_name),
                           subnets=subnets(node) if subnets is not None else ())

    def context(self, node: NodeInfo, network: NodeNetwork | None) -> NodeContext:
        """What a provider is told about ``node`` and its record ``network``, with the
        Subnets its pods may use."""
        subnets = self.subnets_of_node
        return NodeContext(node=node, network=network,
                           subnets=subnets(node) if subnets is not None else ())

    def migration_of(self, pod: PodInfo) -> MigrationState | None:
        """What KubeVirt says of the live migration ``pod`` is the target of: its VMI's
        ``status.migrationState`` when that is this migration's. None: KubeVirt's kind
        is not served (or not listed yet), or says nothing of it yet; the pods decide."""
        if not is_migration_target(pod):
            return None
        state = self.vmis.get(f"{pod.namespace}/{vmi_of(pod)}")
        return state if state is not None and state.is_of(pod) else None

    def agent_policy_report_of(self, node_name: str) -> AgentPolicyReport | None:
        """What the node's agent last said of its NetworkPolicies; None: nothing."""
        return self.agent_policy_reports.get(
            f"{self.agent_namespace}/{agent_lease_name(node_name)}")

    def agent_report_of(self, node_name: str) -> AgentReport | None:
        """The node's agent's last report; None when the node has none (no agent)."""
        return self.agent_reports.get(f"{self.agent_namespace}/{agent_lease_name(node_name)}")

    # --- records that do not parse -----------------------------------------------------

    def _read(self, kind: Kind, cls: type[M], obj: Obj) -> M | None:
        """Informer transform: a record that does not parse is reported on the object
        itself, and nothing acts on it. A PodNetwork is kept in the cache as an
        :class:`UnreadablePodNetwork` (the addresses its raw status names stay owned); a
        NodeNetwork stays out."""
        if kind == POD_NETWORK and record_finished(obj):
            return None  # its release is done: as good as deleted (the cache drops it)
        try:
            model = from_wire(cls, obj)
        except RecordError as exc:
            key = _record_key(kind, obj)
            # our own condition patch brings the object back here: report each error once
            if self._reported.get(key) != str(exc):
                self._reported[key] = str(exc)
                self.unreadable[key] = (kind, obj, exc)
                self._on_unreadable(key)
            if kind == POD_NETWORK:
                salvaged: Any = salvage_pod_network(obj, exc)
                return salvaged  # type: ignore[no-any-return]
            return None
        if self._reported:  # the key is built only when a record was reported (rare)
            self._reported.pop(_record_key(kind, obj), None)
        return model

    def as_written(self, obj: Obj, sent: PodNetwork, wire: Obj) -> PodNetwork | None:
        """What reading ``obj`` (the API server's answer to writing ``sent``, whose wire
        form is ``wire``) gives, without parsing it all again: ``sent`` with the answer's
        metadata (only what the server changed in it is read), when the answer carries
        the very spec and status sent, or no status at all (a create: the status
        subresource drops it, and the record reads with the default status), and what
        is kept of ``sent`` reads back as itself (its times whole seconds in UTC, as the
        wire keeps them). None when that is not certain: the answer is then read as any
        other."""
        if "metadata" not in obj or record_finished(obj):
            return None
        status_kept = True
        for k in wire:
            if k == "metadata":
                continue
            if k not in obj:
                if k != "status":
                    return None
                status_kept = False
            elif obj[k] != wire[k]:
                return None
        if len(obj) != len(wire) - (not status_kept):
            return None  # a key the record did not send
        if status_kept:
            status = sent.status
            if status.last_transition_time is not None and not _whole(
                    status.last_transition_time):
                return None
            for c in status.conditions:
                if c.last_transition_time is not None and not _whole(c.last_transition_time):
                    return None
        meta = obj.get("metadata") or {}
        key = f"{POD_NETWORK.plural}/{meta.get('namespace')}/{meta.get('name')}"
        if key in self._reported:
            return None  # it did not parse before: read in full, which clears that
        sent_meta, rv = wire["metadata"], meta.get("resourceVersion")
        if not meta.keys() >= sent_meta.keys():
            return None  # the server took something away: read it as it is
        for t, k in ((sent.metadata.creation_timestamp, "creationTimestamp"),
                     (sent.metadata.deletion_timestamp, "deletionTimestamp")):
            if t is not None and meta.get(k) == sent_meta.get(k) and not _whole(t):
                return None
        if (isinstance(rv, str) and "resourceVersion" in sent_meta
                and meta == {**sent_meta, "resourceVersion": rv}):
            # an update's answer: only the version is new
            read_meta: ObjectMeta | None = evolve(sent.metadata, resource_version=rv)
        else:
            read_meta = _created_metadata(sent.metadata, sent_meta, meta)
        if read_meta is None:
            try:
                read_meta = metadata_as_answered(sent.metadata, sent_meta, meta)
            except RecordError:
                return None
        if status_kept:
            return evolve(sent, metadata=read_meta)
        return evolve(sent, metadata=read_meta, status=_DEFAULT_STATUS)

    def unreadable_keys(self, kind: Kind) -> set[str]:
        """Keys (``namespace/name``) of records of ``kind`` that exist but do not parse."""
        prefix = f"{kind.plural}/"
        return {key[len(prefix):] for key in list(self._reported) if key.startswith(prefix)}


#: what a create's answer adds to the metadata sent, each as the type the converter takes
#: as it is (a string, a string, an int, a timestamp's text)
_ADDED_BY_CREATE = {"uid": str, "resourceVersion": str, "generation": int,
                    "creationTimestamp": str}


def _created_metadata(sent: ObjectMeta, sent_wire: Obj, answer: Obj) -> ObjectMeta | None:
    """``metadata_as_answered`` of a create's usual answer, without the converter: what
    the server added read as it reads it (keys podnet does not read left out, as it
    leaves them). None when anything else is new, or not of its plain type."""
    added: dict[str, Any] = {}
    for k, v in answer.items():
        if k in sent_wire and sent_wire[k] == v:
            continue
        plain = _ADDED_BY_CREATE.get(k)
        if plain is None:
            if k in META_ATTRS:
                return None  # a field podnet reads changed: the converter reads it
            continue  # managedFields and the like
        if v.__class__ is not plain:
            return None
        added[META_ATTRS[k]] = v
    created = added.get("creation_timestamp")
    if created is not None:
        try:
            added["creation_timestamp"] = read_time(created)
        except Exception:  # not a timestamp: the converter says why
            return None
    return evolve(sent, **added) if added else sent


def _record_key(kind: Kind, obj: Obj) -> str:
    """``plural/namespace/name``: what an unreadable record is reported under."""
    meta = obj.get("metadata", {})
    return "/".join(p for p in (kind.plural, meta.get("namespace"), meta.get("name")) if p)


def _statefulset_of(pn: PodNetwork) -> list[str]:
    """``namespace/name`` of the apps/v1 StatefulSet owning a sticky record (none for
    others: look-alikes of other API groups are not in the cache)."""
    if not pn.spec.sticky:
        return []
    return [f"{pn.metadata.namespace}/{o.name}" for o in pn.metadata.owner_references
            if is_statefulset(o)]
