"""What a pod network's record, its pod and their Events say: the conditions' names and
wording, the reasons of a release and of an address problem, and how spans and transition
events name a record."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from podnet.core.cluster.port import POD
from podnet.core.ledger import Problem, ProblemKind
from podnet.core.machines import state_of
from podnet.core.models import Condition, PodInfo, PodNetwork
from podnet.core.objects import pod_is_terminal
from podnet.core.reconcile.requests import REQUESTS_APPLIED
from podnet.core.tracing import ATTR_INTERFACE, ATTR_IP, ATTR_NAMESPACE, ATTR_NODE, ATTR_POD
from podnet.core.transition import Subject

#: False while a pod has ``podnet.io/`` annotations podnet does not know (ignored)
ANNOTATIONS = "AnnotationsRecognized"
#: span attribute: why a record changes without its pod asking (repair, readdress)
ATTR_DRIFT = "podnet.drift"
#: the Ready reason of a pod network waiting for its node's pool
WAITING_FOR_ADDRESS = "WaitingForAddress"


def condition_of(pn: PodNetwork, kind: str) -> Condition | None:
    return next((c for c in pn.status.conditions if c.type == kind), None)


def frozen_said(pn: PodNetwork) -> bool:
    """Whether the record says some of its pod's requests are not applied."""
    said = condition_of(pn, REQUESTS_APPLIED)
    return said is not None and said.status == "False"


def pod_ref(pod: PodInfo) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": POD.kind,
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def problem_wording(pn: PodNetwork, problem: Problem) -> tuple[str, str]:
    """(Event reason, message) of what the ledger found wrong with a record's claim."""
    address, holder, node = problem.address, problem.holder, problem.node
    kind = problem.kind
    if kind is ProblemKind.CONFLICT:
        return "AddressConflict", f"address {address} is recorded by {pn.key} but held by {holder}"
    if kind is ProblemKind.HELD_IN_POOL:
        return ("AddressConflict",
                f"address {address} is recorded by {pn.key} but held by {holder} on node {node}")
    if kind is ProblemKind.IDLE_IN_POOL:
        return ("AddressConflict",
                f"address {address} is recorded by {pn.key} but idle in node {node}'s pool")
    if kind is ProblemKind.LOST:
        return "AddressLost", f"the cloud no longer has address {address}"
    return ("AddressLost", f"node {node} does not have address {address}, which {pn.key} "
            "records")


def release_reason(pn: PodNetwork, pod: PodInfo | None) -> str:
    if pn.metadata.deletion_timestamp is not None:
        return "record deleted"
    if pod is None:
        return f"pod {pn.metadata.namespace}/{pn.spec.pod_name} is gone"
    if pod.uid != pn.spec.pod_uid:
        return f"pod {pod.key} was replaced (uid {pod.uid})"
    if pod_is_terminal(pod):
        return f"pod {pod.key} is {pod.phase}"
    return f"pod {pod.key} no longer runs on a served node"


_NO_ATTRIBUTES: Mapping[str, str | int | bool | None] = MappingProxyType({})


def subject_of(pn: PodNetwork, drift: str | None = None, *, traced: bool = True) -> Subject:
    """A pod network as its transitions' spans and events name it. ``traced=False``: its
    spans are not recorded, so their attributes are not built (twice per pod network)."""
    spec, status = pn.spec, pn.status
    return Subject(
        pn.key, spec.provider, state_of(status.phase), status.traceparent,
        {
            ATTR_POD: spec.pod_name,
            ATTR_NAMESPACE: pn.metadata.namespace,
            ATTR_NODE: spec.node_name,
            ATTR_IP: status.ip,
            ATTR_INTERFACE: status.interface,
            ATTR_DRIFT: drift,
        } if traced else _NO_ATTRIBUTES,
        {"ip": status.ip, "node": spec.node_name},
    )


def settled_subject(pn: PodNetwork) -> Subject:
    """A pod network as the event of its transition names it once the transition is
    done (the span has its attributes already)."""
    status = pn.status
    return Subject(pn.key, pn.spec.provider, state_of(status.phase), status.traceparent,
                   _NO_ATTRIBUTES, {"ip": status.ip, "node": pn.spec.node_name})

