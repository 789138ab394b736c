"""Lean read views of the built-in objects the engine caches: Pods, Nodes, Namespaces,
StatefulSets, and the Leases the node agents report in.

The engine must hold 100,000 pods (and everything else) in under 1 GiB, so a view keeps
only the fields podnet acts on: annotations are cut down to ``podnet.io/*`` keys, and
strings repeated across many objects (namespaces, node names, phases, owner kinds,
label keys and values) are interned so each distinct one is stored once. Owner
references are shared too: the pods of one ReplicaSet point at a single record.
"""

from __future__ import annotations

import hashlib
import json
import sys
import weakref
from collections.abc import Collection, Mapping
from datetime import datetime
from typing import Any, Final

import attrs

from podnet.core.annotations import PREFIX
from podnet.core.attachments import MULTUS_NETWORKS
from podnet.core.clock import format_micro_time
from podnet.core.cluster.port import Fields
from podnet.core.convert import converter
from podnet.core.models import (
    FINALIZER,
    LABEL_MIGRATION_JOB,
    AgentReport,
    Condition,
    NodeInfo,
    OwnerReference,
    PodInfo,
    PodNetwork,
    WorkloadInfo,
)
from podnet.core.netpol.status import (
    AGENT_REPORT_ANNOTATION,
    AgentPolicyReport,
    read_agent_report,
)
from podnet.hookspecs.models import NamedPort

# the provider contract's (providers read it there); core's modules import it from here
from podnet.hookspecs.models import statefulset_ordinal as statefulset_ordinal

#: Pod phases after which no container of the pod runs again.
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_intern = sys.intern
_owners: weakref.WeakValueDictionary[tuple[str, str, str, str, bool, bool], OwnerReference] = (
    weakref.WeakValueDictionary()
)


def _opt(value: Any) -> str | None:
    return None if value is None else _intern(str(value))


def _time(value: Any) -> datetime | None:
    # The converter's parser, so Pods and PodNetworks read timestamps the same way.
    return None if value is None else converter.structure(value, datetime)


def _labels(raw: Mapping[str, Any] | None) -> dict[str, str]:
    if not raw:
        return {}
    return {_intern(k): _intern(str(v)) for k, v in raw.items()}


def _podnet_annotations(raw: Mapping[str, Any] | None) -> dict[str, str]:
    if not raw:
        return {}
    return {_intern(k): str(v) for k, v in raw.items() if k.startswith(PREFIX)}


def _pod_annotations(raw: Mapping[str, Any] | None) -> dict[str, str]:
    """A pod's annotations podnet reads: its own, and the Multus attachments it may
    serve (``core.attachments``)."""
    if not raw:
        return {}
    return {_intern(k): str(v) for k, v in raw.items()
            if k.startswith(PREFIX) or k == MULTUS_NETWORKS}


def _owner(raw: Mapping[str, Any]) -> OwnerReference:
    key = (
        _intern(raw.get("apiVersion", "")),
        _intern(raw.get("kind", "")),
        _intern(raw.get("name", "")),
        _intern(raw.get("uid", "")),
        bool(raw.get("controller", False)),
        bool(raw.get("blockOwnerDeletion", False)),
    )
    ref = _owners.get(key)
    if ref is None:
        ref = OwnerReference(*key)
        _owners[key] = ref
    return ref


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    return meta


#: what :func:`pod_info` reads of a Pod: a list of pods need not build the rest (its
#: managedFields, volumes, env and status are most of a pod's bytes)
POD_FIELDS: Final[Fields] = {
    "metadata": {"name": True, "namespace": True, "uid": True, "resourceVersion": True,
                 "deletionTimestamp": True, "deletionGracePeriodSeconds": True,
                 "labels": True, "annotations": True, "ownerReferences": True,
                 "finalizers": True},
    "spec": {"nodeName": True, "restartPolicy": True, "hostNetwork": True,
             "containers": [{"ports": True}],
             "initContainers": [{"ports": True, "restartPolicy": True}]},
    "status": {"phase": True, "reason": True},
}


def pod_info(obj: Mapping[str, Any]) -> PodInfo:
    """The view of a Pod as the API server returns it (camelCase JSON)."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    grace = meta.get("deletionGracePeriodSeconds")
    return PodInfo(
        namespace=_intern(meta.get("namespace") or "default"),
        name=meta["name"],
        uid=meta.get("uid", ""),
        node_name=_opt(spec.get("nodeName")),
        phase=_intern(status.get("phase") or "Pending"),
        restart_policy=_intern(spec.get("restartPolicy") or "Always"),
        reason=_opt(status.get("reason")),
        deletion_timestamp=_time(meta.get("deletionTimestamp")),
        deletion_grace_period_seconds=None if grace is None else int(grace),
        labels=_labels(meta.get("labels")),
        annotations=_pod_annotations(meta.get("annotations")),
        owner_references=tuple(_owner(r) for r in meta.get("ownerReferences") or ()),
        host_network=bool(spec.get("hostNetwork", False)),
        named_ports=_named_ports(spec) if _has_ports(spec) else (),
    )


def _has_ports(spec: Mapping[str, Any]) -> bool:
    """Whether a pod may have named ports: a container with ``ports``, or a sidecar (the
    common pod has neither; this runs for every pod event, so it calls next to nothing)."""
    if "initContainers" in spec:
        return True
    containers = spec.get("containers")
    if containers.__class__ is list:
        for container in containers:
            if container.__class__ is dict and "ports" in container:
                return True
    return False


def _named_ports(spec: Mapping[str, Any]) -> tuple[NamedPort, ...]:
    """The pod's named container ports, as the API resolves a port name: its containers'
    then its sidecars' (init containers with ``restartPolicy: Always``); the others run to
    completion before the pod serves. Lean: it runs for every pod event."""
    out: list[NamedPort] | None = None
    for group, sidecars in ((spec.get("containers"), False),
                            (spec.get("initContainers"), True)):
        if not group or group.__class__ is not list:
            continue
        for container in group:
            if container.__class__ is not dict:
                continue
            ports = container.get("ports")
            if not ports or ports.__class__ is not list or (
                    sidecars and container.get("restartPolicy") != "Always"):
                continue
            for port in ports:
                if port.__class__ is not dict:
                    continue
                name, number = port.get("name"), port.get("containerPort")
                if name and name.__class__ is str and number.__class__ is int:
                    if out is None:
                        out = []
                    out.append(NamedPort(_intern(name), number,
                                         _intern(str(port.get("protocol") or "TCP"))))
    return tuple(out) if out else ()


def node_info(obj: Mapping[str, Any]) -> NodeInfo:
    """The view of a Node: identity, pod CIDR, provider id and InternalIP addresses."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    status: Mapping[str, Any] = obj.get("status") or {}
    addresses = status.get("addresses") or ()
    return NodeInfo(
        name=_intern(meta["name"]),
        uid=meta.get("uid", ""),
        pod_cidr=spec.get("podCIDR"),
        provider_id=spec.get("providerID"),
        labels=_labels(meta.get("labels")),
        annotations=_podnet_annotations(meta.get("annotations")),
        internal_ips=tuple(
            a["address"] for a in addresses if a.get("type") == "InternalIP" and a.get("address")
        ),
        deletion_timestamp=_time(meta.get("deletionTimestamp")),
        uninitialized=any(isinstance(t, Mapping) and t.get("key") == TAINT_UNINITIALIZED
                          for t in spec.get("taints") or ()),
    )


#: the taint a cloud controller manager removes once it has initialized a node (set its
#: labels and providerID)
TAINT_UNINITIALIZED = "node.cloudprovider.kubernetes.io/uninitialized"

#: a node agent's report is the Lease ``podnet-node-<node>`` in podnet's namespace, with
#: this label naming the node and these annotations (JSON lists) holding what it says
AGENT_LEASE_PREFIX = "podnet-node-"
LABEL_AGENT_NODE = "podnet.io/agent-node"
ANNOTATION_PLUGGED = "podnet.io/plugged"
ANNOTATION_UNPLUGGED = "podnet.io/unplugged"
#: the digest of what the report says, by its writer: a report edited by hand (its lists
#: changed, the digest not) acknowledges nothing
ANNOTATION_REPORT_DIGEST = "podnet.io/report-digest"
#: seconds an agent's report stays its writer's after its last renewal: another agent
#: of the node's name does not take it over before (``spec.leaseDurationSeconds``)
AGENT_LEASE_SECONDS = 60
#: on a PodNetwork: the hosts whose node agent made (or began to make) an interface for
#: it, written by the agent before it plugs (comma-separated host ids). Durable, unlike a
#: report: a record that names a host waits for that host's own word before its address
#: is reused (``podnet.core.unplug``)
ANNOTATION_PLUGGED_ON = "podnet.io/plugged-on"


def agent_lease_name(node: str) -> str:
    return AGENT_LEASE_PREFIX + node


def _json_list(raw: Any) -> frozenset[str]:
    try:
        value = json.loads(raw) if isinstance(raw, str) else []
    except ValueError:
        return frozenset()  # a report nobody can read says nothing was unplugged
    return frozenset(v for v in value if isinstance(v, str)) if isinstance(value, list) else (
        frozenset())


def release_token(pn: PodNetwork) -> str:
    """What a node agent reports for a Releasing record it holds no interface for: the
    record's uid and when it turned Releasing. One Releasing episode of one record: a
    sticky record taken back by its pod and released again later is another, which an
    old report does not acknowledge."""
    since = pn.status.last_transition_time
    return f"{pn.metadata.uid or pn.key}@{format_micro_time(since) if since else ''}"


def holder_host(holder: str) -> str:
    """The host part of a report's writer (``<host id>/<agent instance>``): the host whose
    interfaces the report describes. An agent restarted on the same host is another
    instance of the same host; an agent elsewhere under the node's name is another host."""
    return holder.rpartition("/")[0] if "/" in holder else holder


def plugged_on(pn: PodNetwork) -> frozenset[str]:
    """The hosts whose agent made (or began to make) an interface for ``pn``
    (:data:`ANNOTATION_PLUGGED_ON`); empty for a record no agent of this version plugged."""
    raw = pn.metadata.annotations.get(ANNOTATION_PLUGGED_ON, "")
    return frozenset(h for h in raw.split(",") if h)


#: the type of the PodNetwork condition that says whether its pod's network is ready
READY = "Ready"


def ready_condition(pn: PodNetwork) -> Condition | None:
    """``pn``'s :data:`READY` condition, None before the controller first wrote one."""
    for c in pn.status.conditions:
        if c.type == READY:
            return c
    return None


def report_digest(holder: str, plugged: Collection[str], unplugged: Collection[str]) -> str:
    """What the writer of a report signs its lists with (:data:`ANNOTATION_REPORT_DIGEST`):
    a check against edits by hand, not against a forger who can write Leases."""
    text = json.dumps([holder, sorted(plugged), sorted(unplugged)], separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def agent_report(obj: Mapping[str, Any]) -> AgentReport | None:
    """The view of a node agent's Lease; None for a Lease that is no agent's report.

    A report whose digest does not match its lists (edited by hand) is read as one that
    acknowledges nothing (``edited``); a report of an agent that writes no digest (before
    0.4) is read as it is."""
    meta = _meta(obj)
    node = (meta.get("labels") or {}).get(LABEL_AGENT_NODE)
    if not isinstance(node, str) or meta.get("name") != agent_lease_name(node):
        return None
    annotations = meta.get("annotations") or {}
    spec: Mapping[str, Any] = obj.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    plugged = _json_list(annotations.get(ANNOTATION_PLUGGED))
    unplugged = _json_list(annotations.get(ANNOTATION_UNPLUGGED))
    digest = annotations.get(ANNOTATION_REPORT_DIGEST)
    edited = digest is not None and digest != report_digest(holder, plugged, unplugged)
    duration = spec.get("leaseDurationSeconds")
    return AgentReport(
        node=_intern(node), holder=holder, plugged=plugged,
        unplugged=frozenset() if edited else unplugged,
        renew_time=_time(spec.get("renewTime")),
        lease_seconds=duration if isinstance(duration, int) else None,
        edited=edited)


def agent_policy_report(obj: Mapping[str, Any]) -> AgentPolicyReport | None:
    """What a node agent's Lease says of the NetworkPolicies it programmed (its
    ``podnet.io/network-policies`` annotation); None for a Lease that is no agent's
    report, or whose agent says nothing of policies."""
    meta = _meta(obj)
    node = (meta.get("labels") or {}).get(LABEL_AGENT_NODE)
    if not isinstance(node, str) or meta.get("name") != agent_lease_name(node):
        return None
    text = (meta.get("annotations") or {}).get(AGENT_REPORT_ANNOTATION)
    if not isinstance(text, str):
        return None
    report = read_agent_report(text)
    return AgentPolicyReport(programmed=report.programmed, failed=report.failed,
                             node=_intern(node))


def agent_report_lease(report: AgentReport, namespace: str, renew_time: str) -> dict[str, Any]:
    """The Lease a node agent writes for ``report`` (``renew_time`` in RFC 3339, micro)."""
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {
            "name": agent_lease_name(report.node), "namespace": namespace,
            "labels": {LABEL_AGENT_NODE: report.node},
            "annotations": {
                ANNOTATION_PLUGGED: json.dumps(sorted(report.plugged)),
                ANNOTATION_UNPLUGGED: json.dumps(sorted(report.unplugged)),
                ANNOTATION_REPORT_DIGEST: report_digest(report.holder, report.plugged,
                                                        report.unplugged)},
        },
        "spec": {"holderIdentity": report.holder, "renewTime": renew_time,
                 "leaseDurationSeconds": report.lease_seconds or AGENT_LEASE_SECONDS},
    }


def namespace_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """The view of a Namespace: only its ``podnet.io/*`` annotations (usually none)."""
    return _podnet_annotations(_meta(obj).get("annotations"))


def statefulset_info(obj: Mapping[str, Any]) -> WorkloadInfo:
    """The view of a StatefulSet: identity, ``spec.replicas`` and the first ordinal."""
    meta = _meta(obj)
    spec: Mapping[str, Any] = obj.get("spec") or {}
    replicas = spec.get("replicas")
    ordinals: Mapping[str, Any] = spec.get("ordinals") or {}
    return WorkloadInfo(
        kind="StatefulSet",
        namespace=_intern(meta.get("namespace") or "default"),
        name=_intern(meta["name"]),
        uid=meta.get("uid", ""),
        replicas=1 if replicas is None else int(replicas),
        ordinal_start=int(ordinals.get("start") or 0),
    )


def pod_is_terminal(pod: PodInfo) -> bool:
    """Whether the pod is done for good and its address can be released.

    Phase alone decides. ``restartPolicy`` governs restarting *containers* inside a
    running pod; once the kubelet records ``Succeeded`` or ``Failed`` the pod never runs
    again, whatever its policy (a pod under ``Always`` reaches these phases on eviction or
    graceful node shutdown, and stays there). An ``Evicted`` pod is ``Failed``, hence
    terminal. A deletion timestamp is not terminal by itself: the pod may still be running
    its grace period and needs its address until it stops.
    """
    return pod.phase in TERMINAL_PHASES


def pod_is_sticky(pod: PodInfo, sticky_kinds: Collection[str]) -> bool:
    """Whether the pod's controller is of one of ``sticky_kinds`` (what its provider
    declares: ``ProviderInfo.sticky_kinds``), so its address outlives the pod.

    Only the kind is compared, not the API group, so look-alike controllers with stable
    pod identity (such as OpenKruise's Advanced StatefulSet) are sticky as well.
    """
    for ref in pod.owner_references:
        if ref.controller:
            return ref.kind in sticky_kinds
    return False


def vm_of(pod: PodInfo) -> str | None:
    """The name of the KubeVirt ``VirtualMachineInstance`` controlling ``pod`` (its
    virt-launcher pod), or ``None``, as a label value (:func:`vm_label`)."""
    name = vmi_of(pod)
    return None if name is None else vm_label(name)


def vmi_of(pod: PodInfo) -> str | None:
    """The full name of the KubeVirt ``VirtualMachineInstance`` controlling ``pod``."""
    for ref in pod.owner_references:
        if ref.controller and ref.kind == "VirtualMachineInstance":
            return str(ref.name)
    return None


def vm_label(name: str) -> str:
    """A VMI's name as a label value, at most 63 characters: a longer name is cut to 52
    and a digest of the whole added."""
    if len(name) <= 63:
        return name
    return f"{name[:52]}-{hashlib.sha256(name.encode()).hexdigest()[:10]}"


def is_migration_target(pod: PodInfo) -> bool:
    """Whether ``pod`` is the target virt-launcher pod of a KubeVirt live migration: a pod
    of a VM that carries KubeVirt's migration-job label (the source pod does not)."""
    return bool(pod.labels.get(LABEL_MIGRATION_JOB)) and vm_of(pod) is not None


#: ``migrationState.abortStatus`` of an abort that ended with the VM on its source
ABORT_SUCCEEDED = "Succeeded"


@attrs.frozen
class MigrationState:
    """A KubeVirt VM's last live migration, as its VirtualMachineInstance's
    ``status.migrationState`` says (virt-controller's and virt-handler's word; kept
    after the migration ends, replaced by the next one's)."""

    #: ``migrationUid``: the VirtualMachineInstanceMigration's uid, which the target
    #: pod's ``kubevirt.io/migrationJobUID`` label carries
    uid: str
    target_pod: str | None = None
    source_pod: str | None = None
    source_node: str | None = None
    completed: bool = False
    failed: bool = False
    abort_status: str | None = None

    def is_of(self, pod: PodInfo) -> bool:
        """Whether this is the migration ``pod`` is the target of."""
        if self.uid:
            return pod.labels.get(LABEL_MIGRATION_JOB) == self.uid
        return self.target_pod == pod.name

    @property
    def ended_without_target(self) -> bool:
        """The migration failed, or was aborted: the VM stays in its source pod (an
        abort that succeeded also says ``completed``)."""
        return self.failed or self.abort_status == ABORT_SUCCEEDED

    @property
    def moved(self) -> bool:
        """The migration completed: the VM runs in the target pod alone."""
        return self.completed and not self.ended_without_target

    def left(self, pod: PodInfo) -> bool:
        """Whether ``pod`` (not the target) is the source this completed migration moved
        the VM away from, as far as the state names it."""
        return (self.moved and pod.name != self.target_pod
                and self.source_pod in (None, pod.name)
                and self.source_node in (None, pod.node_name))


def vmi_migration(obj: Mapping[str, Any]) -> MigrationState | None:
    """The ``status.migrationState`` of a VirtualMachineInstance as the API server returns
    it; None when it has none (never migrated) or the state names no migration."""
    state = (obj.get("status") or {}).get("migrationState")
    if not isinstance(state, Mapping):
        return None
    uid, target = state.get("migrationUid"), state.get("targetPod")
    if not uid and not target:
        return None
    return MigrationState(
        uid=_intern(str(uid or "")), target_pod=_opt(target),
        source_pod=_opt(state.get("sourcePod")), source_node=_opt(state.get("sourceNode")),
        completed=state.get("completed") is True, failed=state.get("failed") is True,
        abort_status=_opt(state.get("abortStatus")))


def is_statefulset(ref: OwnerReference) -> bool:
    """Whether an owner reference names an ``apps`` StatefulSet (the kind core caches)."""
    return ref.kind == "StatefulSet" and ref.api_version.split("/")[0] == "apps"


#: on a PodNetwork whose release is done, set in the write that takes podnet's finalizer
#: off where the pod's object outlives the release: the record is left to the garbage
#: collector (its owner reference), which takes it when the pod's object goes, and every
#: reader takes it as deleted (one write instead of the finalizer's removal and a delete)
LABEL_FINISHED = "podnet.io/finished"


def record_finished(obj: Mapping[str, Any]) -> bool:
    """Whether a PodNetwork object (as the API server has it) is finished: labelled so
    and without podnet's finalizer. A record still holding the finalizer is never
    finished, whatever its labels say (a label set by hand hides nothing podnet owns)."""
    meta = obj.get("metadata") or {}
    return (LABEL_FINISHED in (meta.get("labels") or ())
            and FINALIZER not in (meta.get("finalizers") or ()))
