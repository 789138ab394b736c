"""One contract for the Cluster port, run against both adapters so they cannot drift.

``memory``: the in-memory adapter, called directly. ``kube``: :class:`KubeCluster` (the
official client) over loopback HTTP to the API server emulator, from the kubeconfig the
emulator wrote. Each backend also exposes the :class:`InMemoryCluster` holding the state,
for what the port does not offer (compaction, bookmarks on demand).

Tests marked ``xfail(strict=True)`` on one backend pin a known difference between the
adapters; when it is fixed the test passes and the mark must go.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import (
    EVENT,
    NAMESPACE,
    NODE,
    POD,
    POD_NETWORK,
    AlreadyExists,
    ApiError,
    Cluster,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    Kind,
    NotFound,
    Obj,
    Watch,
    WatchEvent,
)
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster

FIN = "podnet.io/release"
NS = "default"


@attrs.frozen
class Backend:
    name: str
    cluster: Cluster
    store: InMemoryCluster  # the state behind ``cluster``


@pytest.fixture(params=["memory", "kube"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    store = InMemoryCluster(require_namespaces=True)
    for ns in (NS, "other"):
        store.create(NAMESPACE, {"metadata": {"name": ns}})
    if request.param == "memory":
        yield Backend("memory", store, store)
        return
    # bookmarks only on demand: timed ones would interleave with the events under test
    with ApiServer(store, bookmark_interval=600) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        with KubeCluster.from_kubeconfig(str(kubeconfig)) as cluster:
            yield Backend("kube", cluster, store)


@pytest.fixture
def cluster(backend: Backend) -> Cluster:
    return backend.cluster


def known_difference(request: pytest.FixtureRequest, backend: Backend, on: str, why: str) -> None:
    """Expect this test to fail on backend ``on``; strict, so a fix must drop the call."""
    if backend.name == on:
        request.node.add_marker(pytest.mark.xfail(strict=True, reason=why))


# --- builders and helpers ---------------------------------------------------------------


def pod(name: str, node: str = "n1", ns: str = NS, **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "demo"}]},
    }


def podnet(name: str, owner: Obj | None = None, **meta: Any) -> Obj:
    """A PodNetwork the emulator's CRD schema accepts (no status: it is a subresource)."""
    metadata: Obj = {"name": name, "namespace": NS, **meta}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {
        "apiVersion": POD_NETWORK.api_version,
        "kind": POD_NETWORK.kind,
        "metadata": metadata,
        "spec": {"podName": name, "podUid": "uid-1", "nodeName": "n1", "provider": "reference"},
    }


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def names(items: list[Obj]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in items)


def exists(cluster: Cluster, kind: Kind, name: str) -> bool:
    try:
        cluster.get(kind, name, NS)
    except NotFound:
        return False
    return True


def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    # a real cluster's garbage collector is asynchronous; don't assume it is done
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def collect(
    w: Watch, count: int, timeout: float = 5.0, bookmarks: bool = False
) -> list[WatchEvent]:
    """Poll until ``count`` events (bookmarks skipped unless asked for) or the timeout."""
    got: list[WatchEvent] = []
    end = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < end:
        got += [e for e in w.poll(0.1) if bookmarks or e.type != "BOOKMARK"]
    return got


def summary(events: list[WatchEvent]) -> list[tuple[str, str]]:
    return [(e.type, e.object["metadata"].get("name", "")) for e in events]


# --- create / get / list ----------------------------------------------------------------


def test_create_fills_server_fields_and_get_returns_it(cluster: Cluster) -> None:
    made = cluster.create(POD, pod("a", app="web"))
    assert made["apiVersion"] == "v1" and made["kind"] == "Pod"
    meta = made["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and int(meta["resourceVersion"]) > 0
    assert meta["namespace"] == NS and meta["labels"] == {"app": "web"}
    assert cluster.get(POD, "a", NS) == made
    # a cluster-scoped kind ignores a namespace
    node = cluster.create(NODE, {"metadata": {"name": "n1", "labels": {"zone": "a"}}})
    assert "namespace" not in node["metadata"]
    assert cluster.get(NODE, "n1", "ignored") == node


def test_get_and_writes_of_a_missing_object_are_not_found(cluster: Cluster) -> None:
    with pytest.raises(NotFound):
        cluster.get(POD, "nope", NS)
    with pytest.raises(NotFound):
        cluster.get(NODE, "nope")
    with pytest.raises(NotFound):
        cluster.delete(POD, "nope", NS)
    with pytest.raises(NotFound):
        cluster.patch(POD, "nope", {"metadata": {"labels": {"a": "b"}}}, NS)
    ghost = {**pod("nope"), "metadata": {"name": "nope", "namespace": NS, "resourceVersion": "5"}}
    with pytest.raises(NotFound):
        cluster.update(POD, ghost)


def test_namespaced_object_needs_a_namespace(cluster: Cluster) -> None:
    with pytest.raises(Invalid):
        cluster.create(POD, {"metadata": {"name": "a"}, "spec": {"containers": []}})
    with pytest.raises(Invalid):
        cluster.get(POD, "a")


def test_create_of_an_existing_name_is_already_exists(cluster: Cluster) -> None:
    cluster.create(POD, pod("a"))
    with pytest.raises(AlreadyExists) as info:
        cluster.create(POD, pod("a", node="n2"))
    assert isinstance(info.value, Conflict) and info.value.code == 409
    cluster.create(POD, pod("a", ns="other"))  # another namespace: another object


def test_generate_name(cluster: Cluster) -> None:
    made = cluster.create(POD, {**pod(""), "metadata": {"generateName": "w-", "namespace": NS}})
    name = made["metadata"]["name"]
    assert name.startswith("w-") and len(name) > 2
    assert cluster.get(POD, name, NS)["metadata"]["uid"] == made["metadata"]["uid"]


def test_list_with_label_and_field_selectors(cluster: Cluster) -> None:
    cluster.create(POD, pod("a", node="n1", app="web", tier="front"))
    cluster.create(POD, pod("b", node="n2", app="web"))
    cluster.create(POD, pod("c", node="n1", app="db"))
    last = cluster.create(POD, pod("d", node="n1", ns="other", app="web"))
    everything = cluster.list(POD)
    assert names(everything.items) == ["a", "b", "c", "d"]
    assert int(everything.resource_version) >= rv(last)
    assert all(o["kind"] == "Pod" and o["apiVersion"] == "v1" for o in everything.items)
    assert names(cluster.list(POD, NS).items) == ["a", "b", "c"]
    assert names(cluster.list(POD, label_selector="app=web").items) == ["a", "b", "d"]
    assert names(cluster.list(POD, NS, label_selector="app in (web,db),!tier").items) == [
        "b",
        "c",
    ]
    assert names(cluster.list(POD, field_selector="spec.nodeName=n1").items) == ["a", "c", "d"]
    both = cluster.list(POD, NS, label_selector="app=web", field_selector="spec.nodeName=n1")
    assert names(both.items) == ["a"]
    assert names(cluster.list(POD, field_selector="spec.nodeName!=n1").items) == ["b"]
    assert cluster.list(POD, "empty").items == []


# --- updates and the status subresource -------------------------------------------------


def test_update_with_a_stale_resource_version_conflicts(cluster: Cluster) -> None:
    made = cluster.create(POD, pod("a"))
    fresh = {**made, "metadata": {**made["metadata"], "labels": {"v": "1"}}}
    updated = cluster.update(POD, fresh)
    assert rv(updated) > rv(made)
    stale = {**made, "metadata": {**made["metadata"], "labels": {"v": "2"}}}
    with pytest.raises(Conflict) as info:
        cluster.update(POD, stale)
    assert not isinstance(info.value, AlreadyExists) and info.value.code == 409
    assert cluster.get(POD, "a", NS)["metadata"]["labels"] == {"v": "1"}


def test_update_status_changes_only_status_and_update_leaves_it(cluster: Cluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    assert "status" not in made
    # status written through the subresource; the spec change in the body is ignored
    body = {**made, "spec": {**made["spec"], "nodeName": "n9"}, "status": {"phase": "Allocated"}}
    with_status = cluster.update_status(POD_NETWORK, body)
    assert with_status["status"] == {"phase": "Allocated"}
    assert with_status["spec"]["nodeName"] == "n1"
    assert rv(with_status) > rv(made)
    # an update changes the spec; the status in its body is ignored
    body = {**with_status, "spec": {**with_status["spec"], "network": "blue"}}
    body["status"] = {"phase": "Releasing"}
    updated = cluster.update(POD_NETWORK, body)
    assert updated["spec"]["network"] == "blue"
    assert updated["status"] == {"phase": "Allocated"}
    # status writes are guarded by resourceVersion too
    with pytest.raises(Conflict):
        cluster.update_status(POD_NETWORK, {**with_status, "status": {"phase": "Routed"}})
    assert cluster.get(POD_NETWORK, "a", NS) == updated


def test_create_drops_status_of_a_kind_with_a_status_subresource(cluster: Cluster) -> None:
    """kubernetes.io "Custom Resources" (status subresource): a create ignores the status
    stanza; status is written through /status only."""
    made = cluster.create(POD_NETWORK, {**podnet("a"), "status": {"phase": "Routed"}})
    assert "status" not in made
    assert "status" not in cluster.get(POD_NETWORK, "a", NS)


# --- patches ----------------------------------------------------------------------------


def test_merge_and_json_patches(cluster: Cluster) -> None:
    cluster.create(POD_NETWORK, podnet("a", labels={"keep": "1", "drop": "1"}))
    merged = cluster.patch(
        POD_NETWORK,
        "a",
        {"metadata": {"labels": {"drop": None, "new": "1"}}, "spec": {"network": "blue"}},
        NS,
        patch_type="merge",
    )
    assert merged["metadata"]["labels"] == {"keep": "1", "new": "1"}
    assert merged["spec"]["network"] == "blue"
    patched = cluster.patch(
        POD_NETWORK,
        "a",
        [
            {"op": "test", "path": "/spec/network", "value": "blue"},
            {"op": "replace", "path": "/spec/network", "value": "green"},
            {"op": "add", "path": "/metadata/labels/x~1y", "value": "z"},
        ],
        NS,
        patch_type="json",
    )
    assert patched["spec"]["network"] == "green"
    assert patched["metadata"]["labels"]["x/y"] == "z"
    assert rv(patched) > rv(merged)
    # a failed test operation changes nothing
    with pytest.raises(Invalid):
        cluster.patch(
            POD_NETWORK,
            "a",
            [
                {"op": "replace", "path": "/spec/network", "value": "red"},
                {"op": "test", "path": "/spec/network", "value": "blue"},
            ],
            NS,
            patch_type="json",
        )
    assert cluster.get(POD_NETWORK, "a", NS) == patched
    # a dict is not a json patch (the official client would send it as strategic merge)
    with pytest.raises(Invalid):
        cluster.patch(POD_NETWORK, "a", {"spec": {"network": "x"}}, NS, patch_type="json")


def test_status_patch_goes_through_the_subresource(cluster: Cluster) -> None:
    cluster.create(POD_NETWORK, podnet("a"))
    out = cluster.patch(
        POD_NETWORK,
        "a",
        {"spec": {"network": "ignored"}, "status": {"phase": "Allocated", "ip": "10.0.0.5"}},
        NS,
        subresource="status",
    )
    assert out["status"] == {"phase": "Allocated", "ip": "10.0.0.5"}
    assert "network" not in out["spec"]
    # and a main-resource patch cannot touch status
    out = cluster.patch(POD_NETWORK, "a", {"status": {"phase": "Routed"}}, NS)
    assert out["status"]["phase"] == "Allocated"


def test_patch_resource_version_is_a_precondition(cluster: Cluster) -> None:
    made = cluster.create(POD, pod("a"))
    cluster.patch(POD, "a", {"metadata": {"labels": {"v": "1"}}}, NS)
    stale = {"metadata": {"resourceVersion": made["metadata"]["resourceVersion"], "labels": {}}}
    with pytest.raises(Conflict):
        cluster.patch(POD, "a", stale, NS)


def test_strategic_patch_merges_lists_by_key(cluster: Cluster) -> None:
    two = pod("a")
    two["spec"]["containers"].append({"name": "side", "image": "s"})
    made = cluster.create(POD, two)
    # a pod's containers cannot be added or removed (ValidatePodUpdate), their images can:
    # the patch names one container by its merge key, the other stays
    out = cluster.patch(POD, "a", {"spec": {"containers": [{"name": "side", "image": "s2"}]}},
                        NS, "strategic")
    # (over HTTP the containers also carry the API's defaults)
    assert [{k: c[k] for k in ("name", "image")} for c in out["spec"]["containers"]] == [
        {"name": "app", "image": "demo"}, {"name": "side", "image": "s2"}]
    cluster.update_status(
        POD,
        {
            **out,
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False"},
                    {"type": "PodScheduled", "status": "True"},
                ]
            },
        },
    )
    got = cluster.patch(
        POD,
        "a",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        NS,
        patch_type="strategic",
        subresource="status",
    )
    assert got["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]
    assert got["metadata"]["uid"] == made["metadata"]["uid"]


def test_strategic_patch_of_a_custom_resource_is_refused(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    backend.cluster.create(POD_NETWORK, podnet("a"))
    with pytest.raises(ApiError) as info:  # 415 Unsupported Media Type, as upstream
        backend.cluster.patch(POD_NETWORK, "a", {"spec": {"network": "x"}}, NS, "strategic")
    assert info.value.code == 415


# --- deletion, finalizers, preconditions, garbage collection ----------------------------


def test_finalizer_trap_and_json_patch_release(cluster: Cluster) -> None:
    made = cluster.create(
        POD, {**pod("a"), "metadata": {**pod("a")["metadata"], "finalizers": [FIN]}}
    )
    w = cluster.watch(POD, made["metadata"]["resourceVersion"])
    try:
        cluster.delete(POD, "a", NS, grace_period_seconds=0)
        held = cluster.get(POD, "a", NS)
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["finalizers"] == [FIN]
        # the trap: a strategic-merge dict patch merges finalizers as a union
        kept = cluster.patch(POD, "a", {"metadata": {"finalizers": []}}, NS, "strategic")
        assert kept["metadata"]["finalizers"] == [FIN]
        # no new finalizers on an object being deleted
        with pytest.raises(Invalid):
            cluster.patch(POD, "a", {"metadata": {"finalizers": [FIN, "x/y"]}}, NS, "merge")
        cluster.patch(
            POD,
            "a",
            [
                {"op": "test", "path": "/metadata/finalizers/0", "value": FIN},
                {"op": "remove", "path": "/metadata/finalizers/0"},
            ],
            NS,
            patch_type="json",
        )
        assert not exists(cluster, POD, "a")
        assert [e.type for e in collect(w, 2)] == ["MODIFIED", "DELETED"]
    finally:
        w.stop()


def test_finalizer_removed_by_guarded_update(cluster: Cluster) -> None:
    cluster.create(POD_NETWORK, podnet("a", finalizers=[FIN, "other.io/x"]))
    cluster.delete(POD_NETWORK, "a", NS)
    held = cluster.get(POD_NETWORK, "a", NS)
    assert held["metadata"]["deletionTimestamp"]
    # the merge patch form works too: a list is replaced whole
    one = cluster.patch(POD_NETWORK, "a", {"metadata": {"finalizers": [FIN]}}, NS)
    assert one["metadata"]["finalizers"] == [FIN]
    with pytest.raises(Conflict):  # the stale version we read before
        cluster.update(POD_NETWORK, {**held, "metadata": {**held["metadata"], "finalizers": []}})
    cluster.update(POD_NETWORK, {**one, "metadata": {**one["metadata"], "finalizers": []}})
    assert not exists(cluster, POD_NETWORK, "a")


def test_delete_uid_precondition(cluster: Cluster) -> None:
    made = cluster.create(POD, pod("a"))
    with pytest.raises(Conflict):
        cluster.delete(POD, "a", NS, uid="00000000-0000-4000-8000-000000000000")
    assert exists(cluster, POD, "a")
    cluster.delete(POD, "a", NS, uid=made["metadata"]["uid"], grace_period_seconds=0)
    assert not exists(cluster, POD, "a")


def test_deleting_an_owner_deletes_its_dependents(cluster: Cluster) -> None:
    owner = cluster.create(POD, pod("a"))
    cluster.create(POD_NETWORK, podnet("a", owner=owner))
    cluster.create(POD_NETWORK, podnet("b"))
    cluster.delete(POD, "a", NS, grace_period_seconds=0)
    assert eventually(lambda: not exists(cluster, POD_NETWORK, "a"))
    assert exists(cluster, POD_NETWORK, "b")


def test_orphan_delete_keeps_dependents_and_strips_the_reference(cluster: Cluster) -> None:
    """kubernetes.io "Garbage Collection", orphan cascading deletion: the owner goes, its
    dependents stay, with the ownerReferences to it removed (others kept)."""
    owner = cluster.create(POD, pod("a"))
    other = cluster.create(POD, pod("b"))
    cluster.create(POD_NETWORK, podnet("a", owner=owner))
    shared = podnet("s", owner=owner)
    shared["metadata"]["ownerReferences"].append(
        {**shared["metadata"]["ownerReferences"][0], "name": "b", "uid": other["metadata"]["uid"]})
    cluster.create(POD_NETWORK, shared)
    cluster.delete(POD, "a", NS, grace_period_seconds=0, propagation_policy="Orphan")
    assert not exists(cluster, POD, "a")
    kept = cluster.get(POD_NETWORK, "a", NS)
    assert "ownerReferences" not in kept["metadata"]
    assert "deletionTimestamp" not in kept["metadata"]
    refs = cluster.get(POD_NETWORK, "s", NS)["metadata"]["ownerReferences"]
    assert [r["name"] for r in refs] == ["b"]


def test_foreground_delete_holds_the_owner_until_blocking_dependents_go(
        cluster: Cluster) -> None:
    """kubernetes.io "Garbage Collection", foreground cascading deletion: the owner is
    marked (deletionTimestamp, the ``foregroundDeletion`` finalizer), the dependents are
    deleted, and the owner goes when those with ``blockOwnerDeletion`` are gone."""
    owner = cluster.create(POD, pod("a"))
    dep = podnet("a", owner=owner, finalizers=[FIN])
    dep["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    cluster.create(POD_NETWORK, dep)
    cluster.delete(POD, "a", NS, grace_period_seconds=0, propagation_policy="Foreground")
    held = cluster.get(POD, "a", NS)
    assert held["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert held["metadata"]["deletionTimestamp"]
    assert cluster.get(POD_NETWORK, "a", NS)["metadata"]["deletionTimestamp"]
    cluster.patch(POD_NETWORK, "a", {"metadata": {"finalizers": None}}, NS)
    assert eventually(lambda: not exists(cluster, POD, "a"))


def test_boolean_field_selector_matches_an_unset_field(cluster: Cluster) -> None:
    """Upstream's node field set formats ``spec.unschedulable`` with strconv.FormatBool, so
    a node that does not say is ``false``: ``spec.unschedulable=false`` selects it (as
    ``kubectl drain`` and the scheduler's informers rely on)."""
    cluster.create(NODE, {"metadata": {"name": "plain"}})
    cluster.create(NODE, {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}})
    open_ = cluster.list(NODE, field_selector="spec.unschedulable=false").items
    assert [n["metadata"]["name"] for n in open_] == ["plain"]
    shut = cluster.list(NODE, field_selector="spec.unschedulable!=false").items
    assert [n["metadata"]["name"] for n in shut] == ["cordoned"]


# --- namespaces -------------------------------------------------------------------------


def test_create_into_a_missing_namespace_is_not_found(cluster: Cluster) -> None:
    """Upstream's NamespaceLifecycle admission answers a create into a namespace that does
    not exist with 404 NotFound, ``namespaces "<name>" not found``."""
    with pytest.raises(NotFound, match='namespaces "nowhere" not found'):
        cluster.create(POD, pod("a", ns="nowhere"))


def test_namespace_delete_terminates_its_contents_then_goes(cluster: Cluster) -> None:
    """kubernetes.io "Namespaces" / the namespace controller: a deleted namespace is
    ``status.phase: Terminating`` while its contents are deleted, and goes when it is
    empty; NamespaceLifecycle answers a create into it 403 Forbidden, "unable to create new
    content in namespace <ns> because it is being terminated"."""
    cluster.create(NAMESPACE, {"metadata": {"name": "doomed"}})
    assert cluster.get(NAMESPACE, "doomed")["status"]["phase"] == "Active"
    cluster.create(POD, pod("a", ns="doomed"))
    cluster.create(POD_NETWORK, {**podnet("a"), "metadata": {
        "name": "a", "namespace": "doomed", "finalizers": [FIN]}})
    cluster.delete(NAMESPACE, "doomed")
    held = cluster.get(NAMESPACE, "doomed")
    assert held["status"]["phase"] == "Terminating" and held["metadata"]["deletionTimestamp"]
    with pytest.raises(Forbidden, match="unable to create new content in namespace doomed "
                                        "because it is being terminated"):
        cluster.create(POD, pod("b", ns="doomed"))
    assert cluster.get(POD, "a", "doomed")["metadata"]["deletionTimestamp"]  # its grace
    cluster.delete(POD, "a", "doomed", grace_period_seconds=0)  # the kubelet confirms
    assert exists(cluster, NAMESPACE, "doomed")  # the record's finalizer holds it
    cluster.patch(POD_NETWORK, "a", {"metadata": {"finalizers": None}}, "doomed")
    assert eventually(lambda: not exists(cluster, NAMESPACE, "doomed"))


# --- watches ----------------------------------------------------------------------------


def test_watch_from_a_list_sees_changes_in_order(cluster: Cluster) -> None:
    cluster.create(POD, pod("before"))
    listed = cluster.list(POD, NS)
    cluster.create(POD, pod("a"))
    w = cluster.watch(POD, listed.resource_version, NS)
    try:
        cluster.create(POD_NETWORK, podnet("a"))  # another kind: not in this watch
        cluster.patch(POD, "a", {"metadata": {"labels": {"x": "y"}}}, NS)
        cluster.create(POD, pod("other-ns", ns="other"))  # another namespace
        cluster.delete(POD, "a", NS, grace_period_seconds=0)
        events = collect(w, 3)
        assert summary(events) == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
        assert events[1].object["metadata"]["labels"] == {"x": "y"}
        versions = [rv(e.object) for e in events]
        assert versions == sorted(versions) and versions[0] > int(listed.resource_version)
        assert all(e.object["kind"] == "Pod" for e in events)
        assert w.poll(0.2) == [] and not w.closed
    finally:
        w.stop()
    assert w.closed


def test_watch_with_selectors_and_leaving_them(cluster: Cluster) -> None:
    cluster.create(POD, pod("a", app="web"))
    start = cluster.list(POD).resource_version
    by_label = cluster.watch(POD, start, label_selector="app=web")
    by_node = cluster.watch(POD, start, field_selector="spec.nodeName=n1")
    try:
        cluster.create(POD, pod("b", node="n2", app="db"))
        cluster.patch(POD, "a", {"metadata": {"labels": {"app": "db"}}}, NS)
        [left] = collect(by_label, 1)
        assert left.type == "DELETED" and left.object["metadata"]["name"] == "a"
        assert left.object["metadata"]["labels"] == {"app": "web"}  # last content that matched
        assert summary(collect(by_node, 1)) == [("MODIFIED", "a")]
        cluster.patch(POD, "a", {"metadata": {"labels": {"app": "web"}}}, NS)
        assert summary(collect(by_label, 1)) == [("ADDED", "a")]
    finally:
        by_label.stop()
        by_node.stop()


def test_watch_from_a_compacted_version_is_gone(backend: Backend) -> None:
    cluster = backend.cluster
    old = cluster.list(POD).resource_version
    cluster.create(POD, pod("a"))
    backend.store.faults.compact()
    # the memory adapter refuses at once; over HTTP the 410 is the stream's first event
    with pytest.raises(Gone) as info:
        w = cluster.watch(POD, old)
        try:
            collect(w, 1, timeout=5)
        finally:
            w.stop()
    assert info.value.code == 410
    # a fresh list gives a version to watch from
    fresh = cluster.list(POD)
    w = cluster.watch(POD, fresh.resource_version)
    try:
        cluster.create(POD, pod("b"))
        assert summary(collect(w, 1)) == [("ADDED", "b")]
    finally:
        w.stop()


def test_bookmarks_carry_the_current_version(backend: Backend) -> None:
    cluster = backend.cluster
    w = cluster.watch(POD, cluster.list(POD).resource_version)
    try:
        cluster.create(POD, pod("a"))
        cluster.create(NODE, {"metadata": {"name": "n1"}})  # moves the version, no pod event
        assert summary(collect(w, 1)) == [("ADDED", "a")]
        backend.store.bookmark()
        [mark] = collect(w, 1, bookmarks=True)
        assert mark.type == "BOOKMARK"
        assert mark.object["kind"] == "Pod" and mark.object["apiVersion"] == "v1"
        assert mark.object["metadata"]["resourceVersion"] == backend.store.resource_version
    finally:
        w.stop()


def test_watch_ends_at_its_timeout(cluster: Cluster) -> None:
    w = cluster.watch(POD, cluster.list(POD).resource_version, timeout_seconds=1)
    cluster.create(POD, pod("a"))
    assert [e.object["metadata"]["name"] for e in w] == ["a"]  # iteration ends when closed
    assert w.closed and w.poll(0.1) == []


def test_watch_from_zero_starts_with_current_objects(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    backend.cluster.create(POD, pod("a"))
    w = backend.cluster.watch(POD, "0")
    try:
        assert summary(collect(w, 1, timeout=1)) == [("ADDED", "a")]
    finally:
        w.stop()


# --- events -----------------------------------------------------------------------------


def test_emit_event_records_the_involved_object(cluster: Cluster) -> None:
    pn = cluster.create(POD_NETWORK, podnet("a"))
    cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
    cluster.emit_event(pn, "Allocated", "got 10.0.0.5")  # the same again: counted
    cluster.emit_event(pn, "Failed", "boom", type="Warning")
    node = cluster.create(NODE, {"metadata": {"name": "n1"}})
    cluster.emit_event(node, "Seen", "a cluster-scoped object")
    events = cluster.list(EVENT, NS).items
    about = {e["reason"]: e for e in events if e["involvedObject"]["uid"] == pn["metadata"]["uid"]}
    assert set(about) == {"Allocated", "Failed"}
    allocated = about["Allocated"]
    assert allocated["involvedObject"] == {
        "apiVersion": "podnet.io/v1alpha1",
        "kind": "PodNetwork",
        "name": "a",
        "namespace": NS,
        "uid": pn["metadata"]["uid"],
        "resourceVersion": pn["metadata"]["resourceVersion"],
    }
    assert allocated["message"] == "got 10.0.0.5" and allocated["type"] == "Normal"
    assert allocated["count"] == 2
    assert allocated["metadata"]["name"].startswith("a.")
    assert allocated["source"] == {"component": "podnet"}
    assert allocated["reportingComponent"] == "podnet"
    assert allocated["firstTimestamp"] and allocated["lastTimestamp"]
    assert about["Failed"]["type"] == "Warning" and about["Failed"]["count"] == 1
    [seen] = [e for e in events if e["reason"] == "Seen"]
    assert seen["involvedObject"]["kind"] == "Node" and "namespace" not in seen["involvedObject"]


def _event(name: str, reason: str, message: str) -> Obj:
    return {
        "metadata": {"generateName": f"{name}.", "namespace": NS},
        "involvedObject": {"kind": "PodNetwork", "name": name, "namespace": NS, "uid": "u-1"},
        "reason": reason, "message": message, "type": "Normal", "count": 1,
        "source": {"component": "podnet"},
    }


def test_identical_events_are_counted_by_the_client(backend: Backend) -> None:
    """The client de-duplicates, as client-go's recorder does: the second occurrence
    reaches the server as a patch of the first Event, not as a second Event."""
    pn = backend.cluster.create(POD_NETWORK, podnet("a"))
    w = backend.store.watch(EVENT, backend.store.resource_version)
    try:
        backend.cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
        backend.cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
        seen = collect(w, 2)
    finally:
        w.stop()
    assert [e.type for e in seen] == ["ADDED", "MODIFIED"]
    assert seen[0].object["metadata"]["name"] == seen[1].object["metadata"]["name"]
    [event] = backend.store.events_for(pn)
    assert event["count"] == 2
    assert event["firstTimestamp"] <= event["lastTimestamp"]


def test_the_server_stores_identical_events_as_given(cluster: Cluster) -> None:
    """The server merges nothing: two Events created alike are two Events."""
    first = cluster.create(EVENT, _event("a", "Allocated", "got 10.0.0.5"))
    second = cluster.create(EVENT, _event("a", "Allocated", "got 10.0.0.5"))
    assert first["metadata"]["name"] != second["metadata"]["name"]
    stored = [e for e in cluster.list(EVENT, NS).items if e["reason"] == "Allocated"]
    assert sorted(e["count"] for e in stored) == [1, 1]


def test_an_expired_event_is_recorded_anew(backend: Backend) -> None:
    pn = backend.cluster.create(POD_NETWORK, podnet("a"))
    backend.cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
    [gone] = backend.store.events_for(pn)
    backend.store.delete(EVENT, gone["metadata"]["name"], NS)  # the server's Event TTL
    backend.cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
    [event] = backend.store.events_for(pn)
    assert event["metadata"]["name"] != gone["metadata"]["name"]
    assert event["count"] == 1
