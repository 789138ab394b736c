"""The in-memory API server behaves like the real one where controllers get it wrong."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from podnet.core.clock import FakeClock
from podnet.core.cluster.patch import json_patch, merge_patch
from podnet.core.cluster.port import (
    EVENT,
    LEASE,
    NODE,
    POD,
    POD_NETWORK,
    AlreadyExists,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    NotFound,
    Obj,
)
from podnet.sim.memory import InMemoryCluster

FIN = "podnet.io/release"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(clock: FakeClock) -> InMemoryCluster:
    return InMemoryCluster(clock)


def pod(name: str, ns: str = "default", node: str = "n1", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "x"}]},
        "status": {"phase": "Running"},
    }


def pod_with(name: str, owners: list[Obj] | None = None, **meta: Any) -> Obj:
    """A pod carrying extra metadata: built-in kinds take strategic-merge patches."""
    obj = pod(name)
    obj["metadata"].update(podnet(name, owners=owners, **meta)["metadata"])
    return obj


def podnet(name: str, ns: str = "default", owners: list[Obj] | None = None, **meta: Any) -> Obj:
    refs = [
        {
            "apiVersion": o["apiVersion"],
            "kind": o["kind"],
            "name": o["metadata"]["name"],
            "uid": o["metadata"]["uid"],
        }
        for o in owners or []
    ]
    return {
        "metadata": {"name": name, "namespace": ns, "ownerReferences": refs, **meta},
        "spec": {"podName": name, "nodeName": "n1"},
        "status": {"phase": "Pending"},
    }


def rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


def exists(cluster: InMemoryCluster, kind: Any, name: str, ns: str | None = "default") -> bool:
    try:
        cluster.get(kind, name, ns)
    except NotFound:
        return False
    return True


# --- create / get / list ---------------------------------------------------------------


def test_create_fills_server_fields_and_copies(cluster: InMemoryCluster) -> None:
    src = pod("a")
    before = int(cluster.resource_version)
    made = cluster.create(POD, src)
    meta = made["metadata"]
    assert made["apiVersion"] == "v1" and made["kind"] == "Pod"
    assert meta["uid"] and "generation" not in meta  # v1.32's pod strategy keeps none
    assert meta["creationTimestamp"] == "2026-01-01T00:00:00Z"
    assert rv(made) == before + 1
    assert "uid" not in src["metadata"]  # the caller's dict is untouched
    made["spec"]["nodeName"] = "elsewhere"
    src["spec"]["nodeName"] = "elsewhere"
    assert cluster.get(POD, "a", "default")["spec"]["nodeName"] == "n1"


def test_create_rules(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    with pytest.raises(AlreadyExists):
        cluster.create(POD, pod("a"))
    with pytest.raises(Invalid):
        cluster.create(POD, {"metadata": {"namespace": "default"}})
    with pytest.raises(Invalid):
        cluster.create(POD, {"metadata": {"name": "b"}})  # namespaced kind, no namespace
    with pytest.raises(Invalid):
        cluster.create(POD, {"metadata": {"name": "b", "namespace": "x", "resourceVersion": "4"}})
    with pytest.raises(Invalid):
        cluster.create(
            POD,
            {
                "metadata": {
                    "name": "b",
                    "namespace": "x",
                    "deletionTimestamp": "2026-01-01T00:00:00Z",
                }
            },
        )
    node = cluster.create(NODE, {"metadata": {"name": "n1", "namespace": "ignored"}})
    assert "namespace" not in node["metadata"]
    assert cluster.get(NODE, "n1")["metadata"]["name"] == "n1"


def test_generate_name(cluster: InMemoryCluster) -> None:
    a = cluster.create(POD, {"metadata": {"generateName": "web-", "namespace": "d"}})
    b = cluster.create(POD, {"metadata": {"generateName": "web-", "namespace": "d"}})
    for made in (a, b):
        name = made["metadata"]["name"]
        assert name.startswith("web-") and len(name) == 9
        assert name[4:].isalnum() and name[4:] == name[4:].lower()
    assert a["metadata"]["name"] != b["metadata"]["name"]


def test_one_resource_version_counter_across_kinds(cluster: InMemoryCluster) -> None:
    base = int(cluster.resource_version)
    p = cluster.create(POD, pod("a"))
    n = cluster.create(NODE, {"metadata": {"name": "n1"}})
    q = cluster.create(POD_NETWORK, podnet("a"))
    assert [rv(p), rv(n), rv(q)] == [base + 1, base + 2, base + 3]
    listed = cluster.list(POD)
    assert listed.resource_version == str(base + 3)
    assert [i["metadata"]["name"] for i in listed.items] == ["a"]
    assert cluster.resource_version == str(base + 3)


def test_list_is_ordered_by_namespace_then_name(cluster: InMemoryCluster) -> None:
    for ns, name in [("b", "x"), ("a", "z"), ("a", "y"), ("b", "a")]:
        cluster.create(POD, pod(name, ns))
    keys = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in cluster.list(POD).items]
    assert keys == [("a", "y"), ("a", "z"), ("b", "a"), ("b", "x")]
    assert [i["metadata"]["name"] for i in cluster.list(POD, namespace="b").items] == ["a", "x"]
    assert cluster.list(POD, namespace="nope").items == []


def test_get_missing_is_not_found(cluster: InMemoryCluster) -> None:
    with pytest.raises(NotFound):
        cluster.get(POD, "missing", "default")


# --- update / status subresource -------------------------------------------------------


def test_update_requires_current_resource_version(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    first = dict(made, spec={**made["spec"], "nodeName": "n2"})
    updated = cluster.update(POD_NETWORK, first)
    assert rv(updated) > rv(made)
    assert updated["metadata"]["generation"] == 2
    with pytest.raises(Conflict):
        cluster.update(POD_NETWORK, first)  # stale now
    missing_rv = {
        **updated,
        "metadata": {k: v for k, v in updated["metadata"].items() if k != "resourceVersion"},
    }
    with pytest.raises(Invalid, match=r"metadata\.resourceVersion"):
        cluster.update(POD_NETWORK, missing_rv)  # a custom resource: 422, as upstream
    with pytest.raises(NotFound):
        cluster.update(
            POD_NETWORK,
            podnet("ghost")
            | {"metadata": {"name": "ghost", "namespace": "default", "resourceVersion": "1"}},
        )


def test_update_keeps_server_owned_metadata(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    forged = {
        **made,
        "metadata": {
            **made["metadata"],
            "uid": "forged",
            "creationTimestamp": "1999-01-01T00:00:00Z",
            "labels": {"k": "v"},
        },
    }
    updated = cluster.update(POD_NETWORK, forged)
    assert updated["metadata"]["uid"] == made["metadata"]["uid"]
    assert updated["metadata"]["creationTimestamp"] == made["metadata"]["creationTimestamp"]
    assert updated["metadata"]["labels"] == {"k": "v"}
    assert updated["metadata"]["generation"] == 1  # metadata is not spec


def test_noop_update_keeps_resource_version(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    version = made["metadata"]["resourceVersion"]
    assert cluster.update(POD_NETWORK, made)["metadata"]["resourceVersion"] == version
    assert cluster.resource_version == version


def test_update_ignores_status_and_update_status_only_status(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    changed = {**made, "spec": {**made["spec"], "nodeName": "n9"}, "status": {"phase": "Routed"}}
    after = cluster.update(POD_NETWORK, changed)
    assert after["spec"]["nodeName"] == "n9"
    assert "status" not in after  # dropped on create, and update cannot write it
    status_write = {**after, "spec": {"nodeName": "ignored"}, "status": {"phase": "Allocated"}}
    after2 = cluster.update_status(POD_NETWORK, status_write)
    assert after2["status"] == {"phase": "Allocated"}
    assert after2["spec"]["nodeName"] == "n9"
    assert after2["metadata"]["generation"] == after["metadata"]["generation"]
    with pytest.raises(Conflict):
        cluster.update_status(POD_NETWORK, status_write)  # stale
    patched = cluster.patch(
        POD_NETWORK,
        "a",
        {"status": {"ip": "10.0.0.5"}, "spec": {"nodeName": "x"}},
        "default",
        subresource="status",
    )
    assert patched["status"] == {"phase": "Allocated", "ip": "10.0.0.5"}
    assert patched["spec"]["nodeName"] == "n9"
    main = cluster.patch(POD_NETWORK, "a", {"status": {"phase": "Releasing"}}, "default")
    assert main["status"]["phase"] == "Allocated"


def test_kind_without_status_subresource(cluster: InMemoryCluster) -> None:
    lease = cluster.create(
        LEASE, {"metadata": {"name": "l", "namespace": "d"}, "spec": {"holderIdentity": "a"}}
    )
    with pytest.raises(NotFound):
        cluster.update_status(LEASE, lease)
    lease["spec"]["holderIdentity"] = "b"
    assert cluster.update(LEASE, lease)["spec"]["holderIdentity"] == "b"


# --- patch -----------------------------------------------------------------------------


def test_merge_patch_rfc7386(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a", app="web", tier="fe"))
    out = cluster.patch(POD, "a", {"metadata": {"labels": {"tier": None, "new": "1"}}}, "default")
    assert out["metadata"]["labels"] == {"app": "web", "new": "1"}
    assert merge_patch({"a": [1, 2], "b": {"c": 1}}, {"a": [3], "b": None}) == {"a": [3]}


def test_json_patch_operations_and_escapes(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    out = cluster.patch(
        POD,
        "a",
        [
            {"op": "add", "path": "/metadata/annotations", "value": {}},
            {"op": "add", "path": "/metadata/annotations/podnet.io~1ip", "value": "10.0.0.1"},
            {"op": "add", "path": "/metadata/annotations/a~0b", "value": "tilde"},
            {"op": "test", "path": "/metadata/annotations/podnet.io~1ip", "value": "10.0.0.1"},
            {"op": "copy", "from": "/spec/nodeName", "path": "/metadata/annotations/node"},
            {"op": "move", "from": "/metadata/annotations/a~0b", "path": "/metadata/annotations/c"},
            {"op": "replace", "path": "/spec/containers/0/image", "value": "y"},
            {"op": "add", "path": "/spec/containers/-", "value": {"name": "side", "image": "z"}},
            {"op": "remove", "path": "/metadata/labels"},
        ],
        "default",
        patch_type="json",
    )
    assert out["metadata"]["annotations"] == {
        "podnet.io/ip": "10.0.0.1",
        "node": "n1",
        "c": "tilde",
    }
    assert [c["name"] for c in out["spec"]["containers"]] == ["app", "side"]
    assert out["spec"]["containers"][0]["image"] == "y"
    assert "labels" not in out["metadata"]


def test_json_patch_failures_change_nothing(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD, pod("a"))
    bad_test = [
        {"op": "replace", "path": "/spec/nodeName", "value": "n2"},
        {"op": "test", "path": "/spec/nodeName", "value": "n1"},
    ]
    with pytest.raises(Invalid):
        cluster.patch(POD, "a", bad_test, "default", patch_type="json")
    with pytest.raises(Invalid):
        cluster.patch(POD, "a", [{"op": "remove", "path": "/nope"}], "default", patch_type="json")
    assert cluster.get(POD, "a", "default") == made
    # JSON equality: true is not 1
    with pytest.raises(Invalid):
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": True}])


def test_patch_resource_version_is_a_precondition(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD, pod("a"))
    cluster.patch(POD, "a", {"metadata": {"labels": {"x": "1"}}}, "default")
    with pytest.raises(Conflict):
        cluster.patch(
            POD,
            "a",
            {
                "metadata": {
                    "resourceVersion": made["metadata"]["resourceVersion"],
                    "labels": {"x": "2"},
                }
            },
            "default",
        )
    current = cluster.get(POD, "a", "default")["metadata"]["resourceVersion"]
    out = cluster.patch(
        POD, "a", {"metadata": {"resourceVersion": current, "labels": {"x": "2"}}}, "default"
    )
    assert out["metadata"]["labels"] == {"x": "2"}


def test_strategic_merge_lists(cluster: InMemoryCluster) -> None:
    owner1 = cluster.create(POD, pod("o1"))
    owner2 = cluster.create(POD, pod("o2"))
    cluster.create(POD, pod_with("a", owners=[owner1]))
    ref2 = {"apiVersion": "v1", "kind": "Pod", "name": "o2", "uid": owner2["metadata"]["uid"]}
    out = cluster.patch(
        POD,
        "a",
        {"metadata": {"ownerReferences": [ref2]}},
        "default",
        patch_type="strategic",
    )
    assert [r["name"] for r in out["metadata"]["ownerReferences"]] == ["o1", "o2"]
    cluster.update_status(
        POD,
        {
            **owner1,
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
        "o1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        "default",
        patch_type="strategic",
        subresource="status",
    )
    assert got["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "PodScheduled", "status": "True"},
    ]


def test_patch_cannot_rename(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    with pytest.raises(Invalid):
        cluster.patch(POD, "a", {"metadata": {"name": "b"}}, "default")


# --- finalizers and deletion -----------------------------------------------------------


def test_delete_without_finalizers_removes_with_new_rv(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    w = cluster.watch(POD_NETWORK, made["metadata"]["resourceVersion"])
    cluster.delete(POD_NETWORK, "a", "default")
    assert not exists(cluster, POD_NETWORK, "a")
    [ev] = w.poll()
    assert ev.type == "DELETED" and rv(ev.object) == rv(made) + 1
    with pytest.raises(NotFound):
        cluster.delete(POD_NETWORK, "a", "default")


def test_finalizer_holds_object_until_json_patch_removes_it(
    cluster: InMemoryCluster, clock: FakeClock
) -> None:
    made = cluster.create(POD_NETWORK, podnet("a", finalizers=[FIN]))
    w = cluster.watch(POD_NETWORK, made["metadata"]["resourceVersion"])
    clock.advance(5)
    cluster.delete(POD_NETWORK, "a", "default")
    held = cluster.get(POD_NETWORK, "a", "default")
    assert held["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:05Z"
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    cluster.delete(POD_NETWORK, "a", "default")  # again: nothing changes
    assert cluster.get(POD_NETWORK, "a", "default") == held
    # custom resources take no strategic-merge patch at all (415, as upstream)
    with pytest.raises(ApiError) as refused:
        cluster.patch(
            POD_NETWORK, "a", {"metadata": {"finalizers": []}}, "default", patch_type="strategic"
        )
    assert refused.value.code == 415
    # the trap, on a built-in kind: a strategic dict patch that omits the finalizer keeps it
    cluster.create(POD, pod_with("p", finalizers=[FIN]))
    kept = cluster.patch(
        POD, "p", {"metadata": {"finalizers": []}}, "default", patch_type="strategic"
    )
    assert kept["metadata"]["finalizers"] == [FIN]
    with pytest.raises(Invalid):  # no new finalizers on an object being deleted
        cluster.patch(POD_NETWORK, "a", {"metadata": {"finalizers": [FIN, "x/y"]}}, "default")
    cluster.patch(
        POD_NETWORK,
        "a",
        [
            {"op": "test", "path": "/metadata/finalizers/0", "value": FIN},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ],
        "default",
        patch_type="json",
    )
    assert not exists(cluster, POD_NETWORK, "a")
    assert [e.type for e in w.poll()] == ["MODIFIED", "DELETED"]


def test_finalizer_removed_by_guarded_update(cluster: InMemoryCluster) -> None:
    cluster.create(POD_NETWORK, podnet("a", finalizers=[FIN, "other/x"]))
    cluster.delete(POD_NETWORK, "a", "default")
    held = cluster.get(POD_NETWORK, "a", "default")
    one = cluster.update(
        POD_NETWORK, {**held, "metadata": {**held["metadata"], "finalizers": ["other/x"]}}
    )
    with pytest.raises(Conflict):  # the stale copy cannot resurrect or drop anything
        cluster.update(POD_NETWORK, {**held, "metadata": {**held["metadata"], "finalizers": []}})
    assert exists(cluster, POD_NETWORK, "a")
    cluster.update(POD_NETWORK, {**one, "metadata": {**one["metadata"], "finalizers": []}})
    assert not exists(cluster, POD_NETWORK, "a")


def test_strategic_finalizers_merge_as_union(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod_with("a", finalizers=[FIN]))
    out = cluster.patch(
        POD,
        "a",
        {"metadata": {"finalizers": ["other/x"]}},
        "default",
        patch_type="strategic",
    )
    assert out["metadata"]["finalizers"] == [FIN, "other/x"]
    merged = cluster.patch(POD, "a", {"metadata": {"finalizers": ["other/x"]}}, "default")
    assert merged["metadata"]["finalizers"] == ["other/x"]  # a merge patch replaces lists


def test_client_cannot_clear_deletion_timestamp(cluster: InMemoryCluster) -> None:
    cluster.create(POD_NETWORK, podnet("a", finalizers=[FIN]))
    cluster.delete(POD_NETWORK, "a", "default")
    held = cluster.get(POD_NETWORK, "a", "default")
    meta = {k: v for k, v in held["metadata"].items() if k != "deletionTimestamp"}
    after = cluster.update(POD_NETWORK, {**held, "metadata": meta, "spec": {"nodeName": "n2"}})
    assert after["metadata"]["deletionTimestamp"] == held["metadata"]["deletionTimestamp"]


def test_strategic_delete_directive_removes_finalizer(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod_with("a", finalizers=[FIN]))
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    cluster.patch(
        POD,
        "a",
        {"metadata": {"$deleteFromPrimitiveList/finalizers": [FIN]}},
        "default",
        patch_type="strategic",
    )
    assert not exists(cluster, POD, "a")


def test_delete_uid_precondition(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD, pod("a"))
    with pytest.raises(Conflict):
        cluster.delete(POD, "a", "default", uid="not-it")
    cluster.delete(POD, "a", "default", uid=made["metadata"]["uid"], grace_period_seconds=0)
    assert not exists(cluster, POD, "a")


def test_pod_graceful_deletion(cluster: InMemoryCluster, clock: FakeClock) -> None:
    cluster.create(POD, pod("a"))
    cluster.delete(POD, "a", "default", grace_period_seconds=30)
    held = cluster.get(POD, "a", "default")
    assert held["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:30Z"
    assert held["metadata"]["deletionGracePeriodSeconds"] == 30
    cluster.delete(POD, "a", "default")  # still inside the grace period
    assert exists(cluster, POD, "a")
    clock.advance(30)
    cluster.delete(POD, "a", "default")
    assert not exists(cluster, POD, "a")

    cluster.create(POD, pod("b"))
    cluster.delete(POD, "b", "default", grace_period_seconds=30)
    cluster.delete(POD, "b", "default", grace_period_seconds=0)  # the kubelet confirms
    assert not exists(cluster, POD, "b")

    cluster.create(POD, pod("c"))
    cluster.delete(POD, "c", "default")  # no grace given: the pod's own, 30 by default
    held = cluster.get(POD, "c", "default")
    assert held["metadata"]["deletionGracePeriodSeconds"] == 30
    assert cluster.finish_terminating("default", "c") == 1  # the kubelet stand-in
    assert not exists(cluster, POD, "c")


def test_pod_default_grace_follows_the_pod(cluster: InMemoryCluster) -> None:
    """Upstream's pod strategy (``CheckGracefulDelete`` in pkg/registry/core/pod/strategy.go)
    takes ``spec.terminationGracePeriodSeconds`` when the delete gives none, and 0 for a
    pod no node runs or one already terminal: those go at once."""
    short = pod("short")
    short["spec"]["terminationGracePeriodSeconds"] = 5
    cluster.create(POD, short)
    cluster.delete(POD, "short", "default")
    assert cluster.get(POD, "short", "default")["metadata"]["deletionGracePeriodSeconds"] == 5
    unscheduled = pod("unscheduled")
    unscheduled["spec"].pop("nodeName", None)
    cluster.create(POD, unscheduled)
    cluster.delete(POD, "unscheduled", "default")
    assert not exists(cluster, POD, "unscheduled")
    done = pod("done") | {"status": {"phase": "Succeeded"}}
    cluster.create(POD, done)
    cluster.delete(POD, "done", "default")
    assert not exists(cluster, POD, "done")


def test_kubelet_stand_in_confirms_after_its_delay(clock: FakeClock) -> None:
    """The stand-in plays the kubelet's part of pod termination (kubernetes.io, "Termination
    of Pods": the kubelet stops the containers, then the pod is deleted from the API
    server): a terminating pod is deleted with grace 0 ``kubelet_finish_after`` seconds
    after it was marked, never later than its grace period; 0 confirms at once."""
    later = InMemoryCluster(clock, kubelet_finish_after=2)
    later.create(POD, pod("a"))
    later.delete(POD, "a", "default")
    clock.advance(1)
    assert exists(later, POD, "a")
    clock.advance(1)
    later.kubelet_tick()
    assert not exists(later, POD, "a")

    at_once = InMemoryCluster(clock, kubelet_finish_after=0)
    at_once.create(POD, pod_with("b", finalizers=[FIN]))
    w = at_once.watch(POD, at_once.resource_version, "default")
    at_once.delete(POD, "b", "default")
    held = at_once.get(POD, "b", "default")  # confirmed, the finalizer holds it
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    events = w.poll(1)
    assert [e.type for e in events] == ["MODIFIED", "MODIFIED"]
    assert events[0].object["metadata"]["deletionGracePeriodSeconds"] == 30


def test_graceful_pod_with_finalizer_waits_for_both(cluster: InMemoryCluster) -> None:
    made = cluster.create(
        POD, pod("a") | {"metadata": {"name": "a", "namespace": "default", "finalizers": [FIN]}}
    )
    assert made["metadata"]["finalizers"] == [FIN]
    cluster.delete(POD, "a", "default", grace_period_seconds=10)
    cluster.patch(POD, "a", {"metadata": {"finalizers": None}}, "default")
    assert exists(cluster, POD, "a")  # still terminating
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    assert not exists(cluster, POD, "a")


# --- garbage collection ----------------------------------------------------------------


def test_owner_gc_cascades(cluster: InMemoryCluster) -> None:
    owner = cluster.create(POD, pod("a"))
    pn = cluster.create(POD_NETWORK, podnet("a", owners=[owner]))
    lease = cluster.create(
        LEASE,
        {
            "metadata": {
                "name": "l",
                "namespace": "default",
                "ownerReferences": [
                    {
                        "apiVersion": pn["apiVersion"],
                        "kind": "PodNetwork",
                        "name": "a",
                        "uid": pn["metadata"]["uid"],
                    }
                ],
            }
        },
    )
    unrelated = cluster.create(POD_NETWORK, podnet("b"))
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    assert not exists(cluster, POD_NETWORK, "a")
    assert not exists(cluster, LEASE, lease["metadata"]["name"])
    assert exists(cluster, POD_NETWORK, unrelated["metadata"]["name"])


def test_dependent_with_two_owners_waits_for_both(cluster: InMemoryCluster) -> None:
    o1 = cluster.create(POD, pod("o1"))
    o2 = cluster.create(POD, pod("o2"))
    cluster.create(POD_NETWORK, podnet("shared", owners=[o1, o2]))
    cluster.delete(POD, "o1", "default", grace_period_seconds=0)
    assert exists(cluster, POD_NETWORK, "shared")
    cluster.delete(POD, "o2", "default", grace_period_seconds=0)
    assert not exists(cluster, POD_NETWORK, "shared")


def test_gc_respects_dependent_finalizers(cluster: InMemoryCluster) -> None:
    owner = cluster.create(POD, pod("a"))
    cluster.create(POD_NETWORK, podnet("a", owners=[owner], finalizers=[FIN]))
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    held = cluster.get(POD_NETWORK, "a", "default")
    assert held["metadata"]["deletionTimestamp"]
    cluster.patch(POD_NETWORK, "a", {"metadata": {"finalizers": None}}, "default")
    assert not exists(cluster, POD_NETWORK, "a")


# --- selectors -------------------------------------------------------------------------


def test_label_selectors(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a", app="web", tier="fe"))
    cluster.create(POD, pod("b", app="web", tier="be"))
    cluster.create(POD, pod("c", app="db"))

    def names(sel: str) -> list[str]:
        return [i["metadata"]["name"] for i in cluster.list(POD, label_selector=sel).items]

    assert names("app=web") == ["a", "b"]
    assert names("app==web,tier=be") == ["b"]
    assert names("tier!=fe") == ["b", "c"]  # a missing label satisfies !=
    assert names("tier") == ["a", "b"]
    assert names("!tier") == ["c"]
    assert names("app in (db, web), tier notin (be)") == ["a", "c"]
    assert names("") == ["a", "b", "c"]
    for bad in ("app=web,", "app in web", "=x", "a b"):
        with pytest.raises(Invalid):
            cluster.list(POD, label_selector=bad)


def test_field_selectors(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a", node="n1"))
    cluster.create(POD, pod("b", node="n2"))
    cluster.create(POD, pod("c", ns="other", node="n1"))

    def names(sel: str) -> list[str]:
        return [i["metadata"]["name"] for i in cluster.list(POD, field_selector=sel).items]

    assert names("spec.nodeName=n1") == ["a", "c"]
    assert names("spec.nodeName!=n1") == ["b"]
    assert names("spec.nodeName==n1,metadata.namespace=other") == ["c"]
    assert names("metadata.name=b") == ["b"]
    assert names("status.phase=Running") == ["a", "b", "c"]
    with pytest.raises(Invalid, match=r"spec\.bogus"):
        cluster.list(POD, field_selector="spec.bogus=1")


# --- watch -----------------------------------------------------------------------------


def test_watch_replays_from_resource_version(cluster: InMemoryCluster) -> None:
    a = cluster.create(POD, pod("a"))
    mark = cluster.list(POD).resource_version
    cluster.create(POD_NETWORK, podnet("a"))  # another kind: not in a pod watch
    cluster.create(POD, pod("b"))
    from_mark = cluster.watch(POD, mark)
    assert [(e.type, e.object["metadata"]["name"]) for e in from_mark.poll()] == [("ADDED", "b")]
    # "0": any version, so the current objects first, as upstream
    assert [e.object["metadata"]["name"] for e in cluster.watch(POD, "0").poll()] == ["a", "b"]
    everything = cluster.watch(POD, str(rv(a) - 1))
    assert [e.object["metadata"]["name"] for e in everything.poll()] == ["a", "b"]
    live = cluster.watch(POD, cluster.resource_version, namespace="default")
    cluster.patch(POD, "a", {"metadata": {"labels": {"x": "y"}}}, "default")
    cluster.create(POD, pod("z", ns="other"))
    [ev] = live.poll()
    assert ev.type == "MODIFIED" and ev.object["metadata"]["labels"] == {"x": "y"}
    ev.object["metadata"]["labels"]["x"] = "mutated"  # events are copies
    assert cluster.get(POD, "a", "default")["metadata"]["labels"] == {"x": "y"}


def test_watch_gone_after_compaction_or_overflow(clock: FakeClock) -> None:
    cluster = InMemoryCluster(clock, history=3)
    versions = [rv(cluster.create(POD, pod(f"p{i}"))) for i in range(5)]
    with pytest.raises(Gone):  # only the last three writes are kept
        cluster.watch(POD, str(versions[0]))
    assert len(cluster.watch(POD, str(versions[1])).poll()) == 3
    cluster.faults.compact()
    with pytest.raises(Gone):
        cluster.watch(POD, str(versions[3]))
    current = cluster.watch(POD, cluster.resource_version)
    cluster.create(POD, pod("late"))
    assert [e.object["metadata"]["name"] for e in current.poll()] == ["late"]


def test_bookmarks(cluster: InMemoryCluster) -> None:
    with_marks = cluster.watch(POD, "0")
    without = cluster.watch(POD, "0", allow_bookmarks=False)
    cluster.create(NODE, {"metadata": {"name": "n"}})
    cluster.bookmark()
    [ev] = with_marks.poll()
    assert ev.type == "BOOKMARK"
    assert ev.object == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": cluster.resource_version},
    }
    assert without.poll() == []


def test_object_leaving_selector_is_deleted_for_that_watch(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a", app="web"))
    now = cluster.resource_version
    by_label = cluster.watch(POD, now, label_selector="app=web")
    by_node = cluster.watch(POD, now, field_selector="spec.nodeName=n1")
    cluster.patch(POD, "a", {"metadata": {"labels": {"app": "db"}}}, "default")
    [ev] = by_label.poll()
    assert ev.type == "DELETED"
    assert ev.object["metadata"]["labels"] == {"app": "web"}  # last content that matched
    assert ev.object["metadata"]["resourceVersion"] == cluster.resource_version
    assert by_node.poll()[0].type == "MODIFIED"
    cluster.patch(POD, "a", {"metadata": {"labels": {"app": "web"}}}, "default")
    assert [e.type for e in by_label.poll()] == ["ADDED"]


def test_watch_wakes_on_write_from_another_thread(cluster: InMemoryCluster) -> None:
    w = cluster.watch(POD, "0")
    t = threading.Thread(target=lambda: cluster.create(POD, pod("a")))
    t.start()
    events = w.poll(timeout=10)
    t.join()
    assert [e.type for e in events] == ["ADDED"]


def test_watch_stop_timeout_and_iteration(cluster: InMemoryCluster) -> None:
    w = cluster.watch(POD, "0")
    cluster.create(POD, pod("a"))
    w.stop()
    assert w.closed
    cluster.create(POD, pod("b"))  # after stop: not delivered
    assert [e.object["metadata"]["name"] for e in w] == ["a"]
    expired = cluster.watch(POD, "0", timeout_seconds=0)
    assert expired.closed and expired.poll(timeout=5) == []


# --- events ----------------------------------------------------------------------------


def test_events_are_deduplicated(cluster: InMemoryCluster, clock: FakeClock) -> None:
    pn = cluster.create(POD_NETWORK, podnet("a"))
    cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
    clock.advance(7)
    cluster.emit_event(pn, "Allocated", "got 10.0.0.5")
    cluster.emit_event(pn, "Failed", "boom", type="Warning")
    events = cluster.events_for(pn)
    assert [(e["reason"], e["count"]) for e in events] == [("Allocated", 2), ("Failed", 1)]
    first = events[0]
    assert first["firstTimestamp"] == "2026-01-01T00:00:00Z"
    assert first["lastTimestamp"] == "2026-01-01T00:00:07Z"
    assert first["involvedObject"] == {
        "apiVersion": "podnet.io/v1alpha1",
        "kind": "PodNetwork",
        "name": "a",
        "namespace": "default",
        "uid": pn["metadata"]["uid"],
        "resourceVersion": pn["metadata"]["resourceVersion"],
    }
    assert first["source"] == {"component": "podnet"}
    assert first["metadata"]["namespace"] == "default"
    assert cluster.events_for("a", reason="Failed")[0]["type"] == "Warning"
    node = cluster.create(NODE, {"metadata": {"name": "n1"}})
    cluster.emit_event(node, "Ready", "eni attached")
    [node_event] = cluster.events_for(node)
    assert node_event["metadata"]["namespace"] == "default"
    assert "namespace" not in node_event["involvedObject"]
    assert len(cluster.list(EVENT).items) == 3


# --- faults and stats ------------------------------------------------------------------


def test_conflict_rate_fails_every_write(cluster: InMemoryCluster) -> None:
    made = cluster.create(POD_NETWORK, podnet("a"))
    cluster.faults.conflict_rate = 1.0
    with pytest.raises(Conflict):
        cluster.update(POD_NETWORK, {**made, "spec": {"nodeName": "n2"}})
    with pytest.raises(Conflict):
        cluster.update_status(POD_NETWORK, {**made, "status": {"phase": "Routed"}})
    with pytest.raises(Conflict):
        cluster.patch(POD_NETWORK, "a", {"spec": {"nodeName": "n3"}}, "default")
    assert cluster.get(POD_NETWORK, "a", "default") == made
    cluster.faults.clear()
    assert cluster.patch(POD_NETWORK, "a", {"spec": {"nodeName": "n3"}}, "default")


def test_error_rate_and_fail_next(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    cluster.faults.error_rate = 1.0
    with pytest.raises(ApiError) as info:
        cluster.get(POD, "a", "default")
    assert info.value.code == 500
    cluster.faults.clear()
    cluster.faults.fail_next("get", POD_NETWORK, NotFound("planned"))
    cluster.faults.fail_next("list", None, ApiError("boom"), times=2)
    cluster.get(POD, "a", "default")  # another kind: unaffected
    for _ in range(2):
        with pytest.raises(ApiError, match="boom"):
            cluster.list(POD)
    assert cluster.list(POD).items
    with pytest.raises(NotFound, match="planned"):
        cluster.get(POD_NETWORK, "x", "default")
    with pytest.raises(NotFound, match="not found"):
        cluster.get(POD_NETWORK, "x", "default")  # only once
    with pytest.raises(ValueError):
        cluster.faults.fail_next("frobnicate", None, ApiError("x"))
    assert cluster.stats[("list", "pods")] == 3
    assert cluster.stats[("get", "podnetworks")] == 2


def test_drop_watches_closes_them(cluster: InMemoryCluster) -> None:
    a = cluster.watch(POD, "0")
    b = cluster.watch(NODE, "0")
    cluster.create(POD, pod("x"))
    assert cluster.faults.drop_watches() == 2
    assert a.closed and b.closed
    assert [e.type for e in a.poll()] == ["ADDED"]  # what was queued is still handed out
    cluster.create(POD, pod("y"))
    assert a.poll() == []


def test_seeded_clusters_are_reproducible(clock: FakeClock) -> None:
    def run() -> list[str]:
        c = InMemoryCluster(clock, seed=7)
        return [
            c.create(POD, {"metadata": {"generateName": "p-", "namespace": "d"}})["metadata"][k]
            for k in ("uid", "name")
        ]

    assert run() == run()


def test_concurrent_creates_get_unique_versions(cluster: InMemoryCluster) -> None:
    def worker(i: int) -> None:
        for j in range(50):
            cluster.create(POD, pod(f"p{i}-{j}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    items = cluster.list(POD).items
    assert len(items) == 200
    assert len({rv(i) for i in items}) == 200
