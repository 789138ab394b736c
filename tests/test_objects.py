"""Lean views of Pods and Nodes, and the pod predicates built on them."""

from __future__ import annotations

import copy
import sys
from datetime import UTC, datetime
from typing import Any

import attrs
import pytest

from podnet.core.models import NodeInfo, OwnerReference, PodInfo
from podnet.core.objects import (
    node_info,
    pod_info,
    pod_is_sticky,
    pod_is_terminal,
    statefulset_ordinal,
    vm_of,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-2",
        "generateName": "web-",
        "namespace": "shop",
        "uid": "0d9e7c36-8f1e-4b4e-9a44-2a3c1d7e5f60",
        "resourceVersion": "884213",
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "deletionTimestamp": "2026-01-01T00:10:00Z",
        "deletionGracePeriodSeconds": 30,
        "labels": {
            "app": "web",
            "controller-revision-hash": "web-6c9f7d8b5",
            "statefulset.kubernetes.io/pod-name": "web-2",
        },
        "annotations": {
            "podnet.io/ip-pool": "web-pool",
            "podnet.io/security-groups": "sg-web",
            "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
            "kubernetes.io/psp": "restricted",
        },
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": "web",
                "uid": "5b1a4f0e-0000-4000-8000-00000000abcd",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update"}],
    },
    "spec": {
        "nodeName": "node-a",
        "restartPolicy": "Always",
        "hostNetwork": False,
        "containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-2"}}],
        "serviceAccountName": "default",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
    },
    "status": {
        "phase": "Running",
        "podIP": "10.0.0.7",
        "hostIP": "192.168.0.10",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0}],
    },
}

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "node-a",
        "uid": "node-uid-1",
        "labels": {"kubernetes.io/hostname": "node-a", "topology.kubernetes.io/zone": "z1"},
        "annotations": {
            "podnet.io/max-idle": "8",
            "node.alpha.kubernetes.io/ttl": "0",
        },
    },
    "spec": {"podCIDR": "10.244.1.0/24", "providerID": "ecs://cn-hz.i-0123"},
    "status": {
        "addresses": [
            {"type": "Hostname", "address": "node-a"},
            {"type": "InternalIP", "address": "192.168.0.10"},
            {"type": "ExternalIP", "address": "203.0.113.10"},
            {"type": "InternalIP", "address": "fd00::10"},
        ],
        "capacity": {"pods": "110"},
    },
}


def test_pod_info_keeps_what_podnet_needs() -> None:
    info = pod_info(POD)
    assert info == PodInfo(
        namespace="shop",
        name="web-2",
        uid="0d9e7c36-8f1e-4b4e-9a44-2a3c1d7e5f60",
        node_name="node-a",
        phase="Running",
        restart_policy="Always",
        reason=None,
        deletion_timestamp=datetime(2026, 1, 1, 0, 10, tzinfo=UTC),
        deletion_grace_period_seconds=30,
        labels={
            "app": "web",
            "controller-revision-hash": "web-6c9f7d8b5",
            "statefulset.kubernetes.io/pod-name": "web-2",
        },
        annotations={"podnet.io/ip-pool": "web-pool", "podnet.io/security-groups": "sg-web"},
        owner_references=(
            OwnerReference(
                "apps/v1", "StatefulSet", "web", "5b1a4f0e-0000-4000-8000-00000000abcd", True, True
            ),
        ),
        host_network=False,
    )
    assert info.key == "shop/web-2"


def test_pod_info_of_a_fresh_pod() -> None:
    info = pod_info({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {}})
    assert info == PodInfo(namespace="ns", name="p", uid="u")
    assert info.node_name is None
    assert info.phase == "Pending"


def test_pod_info_host_network_and_reason() -> None:
    pod = copy.deepcopy(POD)
    pod["spec"]["hostNetwork"] = True
    pod["status"] = {"phase": "Failed", "reason": "Evicted"}
    info = pod_info(pod)
    assert info.host_network is True
    assert (info.phase, info.reason) == ("Failed", "Evicted")


def test_pod_info_does_not_alias_input() -> None:
    pod = copy.deepcopy(POD)
    info = pod_info(pod)
    pod["metadata"]["labels"]["app"] = "changed"
    pod["metadata"]["annotations"]["podnet.io/ip-pool"] = "changed"
    assert info.labels["app"] == "web"
    assert info.annotations["podnet.io/ip-pool"] == "web-pool"


def test_repeated_strings_are_shared() -> None:
    first = pod_info(copy.deepcopy(POD))
    other = copy.deepcopy(POD)
    other["metadata"]["name"] = "web-3"
    other["metadata"]["uid"] = "another"
    second = pod_info(other)
    assert first.namespace is second.namespace
    assert first.node_name is second.node_name
    assert first.phase is second.phase
    label_key = next(iter(first.labels))
    assert label_key is next(iter(second.labels))
    assert first.labels["app"] is second.labels["app"]
    # siblings point at one owner record
    assert first.owner_references[0] is second.owner_references[0]
    assert first.namespace is sys.intern("shop")


def test_node_info() -> None:
    info = node_info(NODE)
    assert info == NodeInfo(
        name="node-a",
        uid="node-uid-1",
        pod_cidr="10.244.1.0/24",
        provider_id="ecs://cn-hz.i-0123",
        labels={"kubernetes.io/hostname": "node-a", "topology.kubernetes.io/zone": "z1"},
        annotations={"podnet.io/max-idle": "8"},
        internal_ips=("192.168.0.10", "fd00::10"),
        deletion_timestamp=None,
    )


def test_node_info_minimal_and_deleting() -> None:
    info = node_info(
        {"metadata": {"name": "n", "uid": "u", "deletionTimestamp": "2026-01-01T00:00:00+00:00"}}
    )
    assert info == NodeInfo(name="n", uid="u", deletion_timestamp=datetime(2026, 1, 1, tzinfo=UTC))


def _pod(phase: str, restart_policy: str = "Always", reason: str | None = None) -> PodInfo:
    return PodInfo(
        namespace="ns", name="p", uid="u", phase=phase, restart_policy=restart_policy, reason=reason
    )


@pytest.mark.parametrize(
    ("phase", "policy", "reason", "terminal"),
    [
        ("Pending", "Always", None, False),
        ("Running", "Always", None, False),
        ("Running", "Never", None, False),
        ("Unknown", "Never", None, False),
        ("Succeeded", "Never", None, True),
        ("Succeeded", "OnFailure", None, True),
        ("Succeeded", "Always", None, True),  # e.g. graceful node shutdown: never runs again
        ("Failed", "Never", None, True),
        ("Failed", "OnFailure", None, True),
        ("Failed", "Always", "Evicted", True),
        ("Failed", "Always", "Shutdown", True),
    ],
)
def test_pod_is_terminal(phase: str, policy: str, reason: str | None, terminal: bool) -> None:
    assert pod_is_terminal(_pod(phase, policy, reason)) is terminal


def test_deleting_pod_is_not_terminal_by_itself() -> None:
    pod = attrs.evolve(_pod("Running"), deletion_timestamp=datetime(2026, 1, 1, tzinfo=UTC))
    assert not pod_is_terminal(pod)


def _owned(*refs: OwnerReference) -> PodInfo:
    return PodInfo(namespace="ns", name="p-0", uid="u", owner_references=refs)


STICKY = ("StatefulSet", "VirtualMachineInstance")


@pytest.mark.parametrize(
    ("refs", "kinds", "expected"),
    [
        ((), STICKY, False),
        ((OwnerReference("apps/v1", "StatefulSet", "web", "s1", True, True),), STICKY, True),
        (
            (OwnerReference("kubevirt.io/v1", "VirtualMachineInstance", "vm", "v1", True),),
            STICKY,
            True,
        ),
        # what the provider declares decides: a VM's pod is not sticky where it says not
        (
            (OwnerReference("kubevirt.io/v1", "VirtualMachineInstance", "vm", "v1", True),),
            ("StatefulSet",),
            False,
        ),
        ((OwnerReference("apps/v1", "ReplicaSet", "web-6c9f", "r1", True, True),), STICKY, False),
        ((OwnerReference("batch/v1", "Job", "once", "j1", True),), STICKY, False),
        # an owner that is not the controller does not make the pod sticky
        ((OwnerReference("apps/v1", "StatefulSet", "web", "s1", False),), STICKY, False),
        # the kind alone: a look-alike of another API group is sticky as well
        ((OwnerReference("apps.kruise.io/v1beta1", "StatefulSet", "web", "k1", True),), STICKY,
         True),
        (
            (
                OwnerReference("v1", "ConfigMap", "cm", "c1"),
                OwnerReference("apps/v1", "StatefulSet", "web", "s1", True),
            ),
            STICKY,
            True,
        ),
    ],
)
def test_pod_is_sticky(refs: tuple[OwnerReference, ...], kinds: tuple[str, ...],
                       expected: bool) -> None:
    assert pod_is_sticky(_owned(*refs), kinds) is expected


def test_vm_of_names_the_controlling_vmi_in_a_label_value() -> None:
    def vmi(name: str, controller: bool = True) -> OwnerReference:
        return OwnerReference("kubevirt.io/v1", "VirtualMachineInstance", name, "v1",
                              controller)

    assert vm_of(_owned(vmi("db-vm"))) == "db-vm"
    assert vm_of(_owned(vmi("db-vm", controller=False))) is None
    assert vm_of(_owned(OwnerReference("apps/v1", "StatefulSet", "web", "s1", True))) is None
    long = "vm." + "a" * 100 + ".example"
    label = vm_of(_owned(vmi(long)))
    assert label is not None and len(label) <= 63 and label.startswith(long[:52])
    assert label == vm_of(_owned(vmi(long)))  # stable: the pod's next start finds it
    assert label != vm_of(_owned(vmi(long + "x")))


def test_sticky_from_a_real_pod() -> None:
    assert pod_is_sticky(pod_info(POD), ("StatefulSet",))


@pytest.mark.parametrize(
    ("name", "ordinal"),
    [
        ("web-0", 0),
        ("web-2", 2),
        ("web-12", 12),
        ("my-db-cluster-3", 3),
        ("web-1-7", 7),
        ("web", None),
        ("web-", None),
        ("-3", None),
        ("web-03", None),
        ("web-x", None),
        ("web-6c9f7d8b5-x2vqz", None),
        ("", None),
    ],
)
def test_statefulset_ordinal(name: str, ordinal: int | None) -> None:
    assert statefulset_ordinal(name) == ordinal
