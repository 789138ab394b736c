"""The API emulator's store where it used to take shortcuts: pod defaulting on every
write, consistent ``continue`` pages, foreground deletion down an owner chain. Driven
through the official client; each docstring names the upstream behaviour asserted."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from podnet.sim.apiserver import ApiServer

NS = "default"
MERGE = "application/merge-patch+json"


def pod(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "app", "image": "demo:1"}]}}


# --- defaults ---------------------------------------------------------------------------


def test_a_put_is_defaulted_as_a_create_is(core: client.CoreV1Api) -> None:
    """Upstream defaults every object it decodes (the ``SetDefaults_*`` functions run in
    the codec on create, update and patch alike), so a PUT that leaves the defaulted
    fields out stores them again: here it changes nothing, and an update that changes
    nothing keeps the resourceVersion (the storage's ``GuaranteedUpdate`` writes nothing
    when the new object equals the stored one)."""
    made = core.create_namespaced_pod(NS, pod("a"))
    body = pod("a")
    body["metadata"]["resourceVersion"] = made.metadata.resource_version
    put = core.replace_namespaced_pod("a", NS, body)
    assert put.spec.restart_policy == "Always" and put.spec.dns_policy == "ClusterFirst"
    assert put.spec.containers[0].termination_message_policy == "File"
    assert put.spec.containers[0].image_pull_policy == "IfNotPresent"
    assert put.metadata.resource_version == made.metadata.resource_version


def test_a_put_that_changes_nothing_a_second_later_keeps_the_resource_version(
        core: client.CoreV1Api) -> None:
    """managedFields' time moves only when the write took fields: the fields the server
    sets itself (uid, creationTimestamp), absent from a PUT's body, are no change, so
    the same PUT in a later second is still no write (a loaded CI run found it)."""
    made = core.create_namespaced_pod(NS, pod("later"))
    time.sleep(1.1)  # managedFields' times have seconds
    body = pod("later")
    body["metadata"]["resourceVersion"] = made.metadata.resource_version
    put = core.replace_namespaced_pod("later", NS, body)
    assert put.metadata.resource_version == made.metadata.resource_version
    assert put.metadata.managed_fields == made.metadata.managed_fields


def test_a_merge_patch_result_is_defaulted(core: client.CoreV1Api) -> None:
    """A merge patch (RFC 7386) replaces the containers list whole; the patched object is
    decoded, so defaulted again (``SetDefaults_Container``), before it is stored: the
    image changes, the defaults stay."""
    core.create_namespaced_pod(NS, pod("a"))
    patched = core.patch_namespaced_pod(
        "a", NS, {"spec": {"containers": [{"name": "app", "image": "demo:2"}]}},
        _content_type=MERGE)
    container = patched.spec.containers[0]
    assert container.image == "demo:2" and container.termination_message_policy == "File"
    assert container.termination_message_path == "/dev/termination-log"
    assert patched.spec.termination_grace_period_seconds == 30


# --- continue pages ---------------------------------------------------------------------


def test_continue_pages_show_the_list_at_the_first_pages_resource_version(
        core: client.CoreV1Api) -> None:
    """kubernetes.io "API Concepts" (retrieving large results sets in chunks): every page
    of a chunked list is served from the same resourceVersion, the first page's, "as if
    the whole list had been returned at once" (etcd read at that revision): an object
    deleted, changed or created between pages shows as it was then, and each page reports
    that resourceVersion."""
    for i in range(5):
        core.create_namespaced_pod(NS, pod(f"p{i}", v="1"))
    first = core.list_namespaced_pod(NS, limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    core.delete_namespaced_pod("p2", NS)  # unscheduled: gone at once
    core.patch_namespaced_pod("p3", NS, {"metadata": {"labels": {"v": "2"}}})
    core.create_namespaced_pod(NS, pod("p5", v="1"))
    second = core.list_namespaced_pod(NS, limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p2", "p3"]
    assert second.items[1].metadata.labels == {"v": "1"}
    assert second.metadata.resource_version == first.metadata.resource_version
    last = core.list_namespaced_pod(NS, limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in last.items] == ["p4"] and not last.metadata._continue
    assert last.metadata.resource_version == first.metadata.resource_version
    # a new list sees today's objects
    assert [p.metadata.name for p in core.list_namespaced_pod(NS).items] == [
        "p0", "p1", "p3", "p4", "p5"]


def test_a_continue_token_past_compaction_is_expired(
        server: ApiServer, core: client.CoreV1Api) -> None:
    """Once etcd compacted the first page's revision, the next page cannot be served
    consistently: 410 ``Expired`` (kubernetes.io "API Concepts")."""
    for i in range(3):
        core.create_namespaced_pod(NS, pod(f"p{i}"))
    first = core.list_namespaced_pod(NS, limit=1)
    core.delete_namespaced_pod("p1", NS)
    server.cluster.faults.compact()
    with pytest.raises(ApiException) as expired:
        core.list_namespaced_pod(NS, limit=1, _continue=first.metadata._continue)
    assert expired.value.status == 410


# --- foreground deletion ----------------------------------------------------------------


def test_foreground_deletion_goes_down_an_owner_chain_and_up_again(
        core: client.CoreV1Api) -> None:
    """kubernetes.io "Garbage Collection" (foreground cascading deletion) and upstream's
    garbage collector (``attemptToDeleteItem``): a dependent of an owner waiting for its
    dependents is itself deleted in the foreground when it has dependents. So with a
    StatefulSet owning a pod owning a PodNetwork (each reference ``blockOwnerDeletion``)
    all three are held, the StatefulSet and the pod by ``foregroundDeletion``, until the
    leaf goes; then the pod goes, then the StatefulSet."""
    apps = client.AppsV1Api(core.api_client)
    objects = client.CustomObjectsApi(core.api_client)
    owner = apps.create_namespaced_stateful_set(NS, {
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "demo"}]}}}})

    def ref(kind: str, api_version: str, meta: Any) -> dict[str, Any]:
        return {"apiVersion": api_version, "kind": kind, "name": meta.name, "uid": meta.uid,
                "blockOwnerDeletion": True}

    body = pod("db-0")
    body["metadata"]["ownerReferences"] = [ref("StatefulSet", "apps/v1", owner.metadata)]
    dep = core.create_namespaced_pod(NS, body)
    objects.create_namespaced_custom_object("podnet.io", "v1alpha1", NS, "podnetworks", {
        "apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
        "metadata": {"name": "db-0", "finalizers": ["podnet.io/release"],
                     "ownerReferences": [ref("Pod", "v1", dep.metadata)]},
        "spec": {"podName": "db-0", "podUid": dep.metadata.uid, "nodeName": "n1",
                 "provider": "reference"}})

    apps.delete_namespaced_stateful_set("db", NS, propagation_policy="Foreground")
    held = apps.read_namespaced_stateful_set("db", NS)
    assert held.metadata.finalizers == ["foregroundDeletion"]
    middle = core.read_namespaced_pod("db-0", NS)
    assert middle.metadata.deletion_timestamp is not None
    assert middle.metadata.finalizers == ["foregroundDeletion"]
    leaf = objects.get_namespaced_custom_object("podnet.io", "v1alpha1", NS, "podnetworks",
                                                "db-0")
    assert leaf["metadata"]["deletionTimestamp"]

    objects.patch_namespaced_custom_object("podnet.io", "v1alpha1", NS, "podnetworks", "db-0",
                                           {"metadata": {"finalizers": None}})
    assert core.list_namespaced_pod(NS).items == []
    assert apps.list_namespaced_stateful_set(NS).items == []


def test_foreground_deletion_without_dependents_is_seen_as_upstream_does(
        core: client.CoreV1Api) -> None:
    """Upstream's registry adds ``foregroundDeletion`` on a foreground delete whatever the
    dependents, and the garbage collector removes it when none block: a watch sees the
    object marked (MODIFIED, with the finalizer) and then DELETED."""
    core.create_namespaced_config_map(NS, {"metadata": {"name": "conf"}, "data": {"k": "v"}})
    rv = core.list_namespaced_config_map(NS).metadata.resource_version
    core.delete_namespaced_config_map("conf", NS, propagation_policy="Foreground")
    seen: list[tuple[str, list[str] | None]] = []
    stream = watch.Watch()
    for ev in stream.stream(core.list_namespaced_config_map, NS, resource_version=rv,
                            timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.finalizers))
        if ev["type"] == "DELETED":
            stream.stop()
    assert seen == [("MODIFIED", ["foregroundDeletion"]), ("DELETED", None)]


def test_a_list_at_an_exact_resource_version(server: ApiServer, core: client.CoreV1Api) -> None:
    """kubernetes.io "API Concepts" (resource versions, semantics for get and list):
    ``resourceVersionMatch=Exact`` returns the data at exactly that resourceVersion, 410
    Expired once it is compacted; the option is checked as upstream's
    ``ValidateListOptions`` does (422: forbidden without a resourceVersion, or with "0")."""
    core.create_namespaced_pod(NS, pod("a", v="1"))
    rv = core.list_namespaced_pod(NS).metadata.resource_version
    core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"v": "2"}}})
    core.create_namespaced_pod(NS, pod("b"))
    then = core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
    assert [(p.metadata.name, p.metadata.labels) for p in then.items] == [("a", {"v": "1"})]
    assert then.metadata.resource_version == rv
    now = core.list_namespaced_pod(NS, resource_version=rv,
                                   resource_version_match="NotOlderThan")
    assert [p.metadata.name for p in now.items] == ["a", "b"]
    for bad, rule in ((None, "unless resourceVersion is provided"), ("0", 'resourceVersion "0"')):
        with pytest.raises(ApiException) as refused:
            core.list_namespaced_pod(NS, resource_version=bad, resource_version_match="Exact")
        assert refused.value.status == 422 and rule in json.loads(refused.value.body)["message"]
    server.cluster.faults.compact()
    with pytest.raises(ApiException) as expired:
        core.list_namespaced_pod(NS, resource_version=rv, resource_version_match="Exact")
    assert expired.value.status == 410
    assert json.loads(expired.value.body)["reason"] == "Expired"
