"""The informer follows the cluster through drops, compaction and its own writes."""

from __future__ import annotations

import threading

import attrs
import pytest

from podnet.core.clock import FakeClock
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import POD, POD_NETWORK, ApiError, Obj
from podnet.sim.memory import InMemoryCluster


@attrs.frozen
class Lean:
    name: str
    node: str
    phase: str


def lean(obj: Obj) -> Lean | None:
    if obj["metadata"].get("labels", {}).get("skip"):
        return None  # not cached at all
    return Lean(obj["metadata"]["name"], obj["spec"]["nodeName"],
                obj.get("status", {}).get("phase", ""))


def pod(name: str, node: str = "n1", ns: str = "default", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": ns, "labels": dict(labels)},
        "spec": {"nodeName": node},
        "status": {"phase": "Running"},
    }


Seen = list[tuple[str, str, Lean | None, Lean | None]]


@pytest.fixture
def cluster() -> InMemoryCluster:
    return InMemoryCluster(FakeClock())


def recording(informer: Informer[Lean]) -> Seen:
    seen: Seen = []
    informer.add_handler(lambda ev, key, old, new: seen.append((ev, key, old, new)))
    return seen


def test_initial_sync_fires_added(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    cluster.create(POD, pod("b", ns="other"))
    cluster.create(POD, pod("c", skip="yes"))
    inf = Informer(cluster, POD, lean)
    seen = recording(inf)
    assert not inf.has_synced
    inf.start()
    assert inf.has_synced
    assert [(ev, key) for ev, key, _, _ in seen] == [("ADDED", "default/a"), ("ADDED", "other/b")]
    assert inf.last_resource_version == cluster.resource_version
    assert inf.get("default/a") == Lean("a", "n1", "Running")
    assert inf.get("default/c") is None and len(inf) == 2
    assert sorted(inf.keys()) == ["default/a", "other/b"]


def test_pump_applies_changes(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    seen = recording(inf)
    inf.start()
    cluster.create(POD, pod("a"))
    cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    cluster.patch(POD, "a", {"metadata": {"annotations": {"x": "y"}}}, "default")  # not in Lean
    assert inf.pump() == 3
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    assert inf.pump() == 1
    assert seen == [
        ("ADDED", "default/a", None, Lean("a", "n1", "Running")),
        ("MODIFIED", "default/a", Lean("a", "n1", "Running"), Lean("a", "n2", "Running")),
        ("DELETED", "default/a", Lean("a", "n2", "Running"), None),
    ]
    assert inf.last_resource_version == cluster.resource_version
    assert inf.pump() == 0


def test_pump_skips_an_idle_watch_and_sees_what_comes_and_when_it_ends(
    cluster: InMemoryCluster,
) -> None:
    watch = cluster.watch(POD, cluster.resource_version)
    assert watch.idle
    cluster.create(POD, pod("a"))
    assert not watch.idle and len(watch.poll(0)) == 1 and watch.idle
    watch.stop()
    assert not watch.idle
    inf = Informer(cluster, POD, lean)
    inf.start()
    assert inf.pump() == 0
    cluster.create(POD, pod("b"))
    assert inf.pump() == 1 and "default/b" in inf
    cluster.faults.drop_watches()
    cluster.create(POD, pod("c"))  # while no watch is open: the pump re-watches and sees it
    assert inf.pump() == 1 and "default/c" in inf


def test_cluster_scoped_keys_and_selectors(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a", app="web"))
    cluster.create(POD, pod("b", app="db"))
    inf = Informer(cluster, POD, lean, label_selector="app=web", namespace="default")
    seen = recording(inf)
    inf.start()
    assert inf.keys() == ["default/a"]
    cluster.patch(POD, "a", {"metadata": {"labels": {"app": "db"}}}, "default")
    inf.pump()
    assert seen[-1][0] == "DELETED" and len(inf) == 0


def test_indexes_follow_changes(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    cluster.create(POD, pod("a", node="n1"))
    inf.start()
    inf.add_index("node", lambda v: [v.node])  # added after sync: built from the cache
    cluster.create(POD, pod("b", node="n1"))
    cluster.create(POD, pod("c", node="n2"))
    inf.pump()
    assert [v.name for v in inf.by_index("node", "n1")] == ["a", "b"]
    cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    cluster.delete(POD, "b", "default", grace_period_seconds=0)
    inf.pump()
    assert inf.by_index("node", "n1") == []
    assert [v.name for v in inf.by_index("node", "n2")] == ["a", "c"]
    with pytest.raises(KeyError):
        inf.by_index("nope", "x")


def test_indexes_of_many_values_or_none_follow_changes(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    # a value's node and phase, the node twice (kept once), nothing while Pending
    inf.add_index("both", lambda v: [] if v.phase == "Pending" else [v.node, v.phase, v.node])
    cluster.create(POD, pod("a", node="n1"))
    inf.start()
    assert [v.name for v in inf.by_index("both", "n1")] == ["a"]
    assert [v.name for v in inf.by_index("both", "Running")] == ["a"]
    cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    inf.pump()
    assert inf.by_index("both", "n1") == []
    assert [v.name for v in inf.by_index("both", "n2")] == ["a"]
    assert [v.name for v in inf.by_index("both", "Running")] == ["a"]
    cluster.patch(POD, "a", {"status": {"phase": "Pending"}}, "default", subresource="status")
    inf.pump()
    assert inf.by_index("both", "n2") == [] and inf.by_index("both", "Running") == []
    cluster.patch(POD, "a", {"status": {"phase": "Failed"}}, "default", subresource="status")
    inf.pump()
    assert [v.name for v in inf.by_index("both", "Failed")] == ["a"]
    assert [v.name for v in inf.by_index("both", "n2")] == ["a"]


def test_rewatch_after_drop_loses_nothing(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    seen = recording(inf)
    inf.start()
    cluster.create(POD, pod("a"))
    cluster.faults.drop_watches()
    cluster.create(POD, pod("b"))  # happens while no watch is open
    inf.pump()  # drains what the dropped watch held, then re-watches from its RV
    cluster.create(POD, pod("c"))
    inf.pump()
    assert [key for _, key, _, _ in seen] == ["default/a", "default/b", "default/c"]
    assert cluster.stats[("watch", "pods")] == 2
    assert cluster.stats[("list", "pods")] == 1  # no re-list was needed


def test_relist_after_compaction_reconciles(cluster: InMemoryCluster) -> None:
    for name in ("keep", "change", "drop"):
        cluster.create(POD, pod(name))
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    cluster.faults.drop_watches()
    cluster.patch(POD, "change", {"status": {"phase": "Failed"}}, "default", subresource="status")
    cluster.delete(POD, "drop", "default", grace_period_seconds=0)
    cluster.create(POD, pod("new"))
    cluster.faults.compact()
    applied = inf.pump()
    assert applied == 3
    assert sorted((ev, key) for ev, key, _, _ in seen) == [
        ("ADDED", "default/new"),
        ("DELETED", "default/drop"),
        ("MODIFIED", "default/change"),
    ]
    assert sorted(inf.keys()) == ["default/change", "default/keep", "default/new"]
    assert cluster.stats[("list", "pods")] == 2
    cluster.create(POD, pod("after"))
    inf.pump()
    assert seen[-1][:2] == ("ADDED", "default/after")


def test_gone_from_the_watch_itself_relists(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    inf.start()
    cluster.faults.drop_watches()
    cluster.faults.fail_next("watch", POD, ApiError("unavailable"))
    cluster.create(POD, pod("a"))
    inf.pump()  # re-watch fails: whatever the error, the cache is re-listed
    assert inf.get("default/a") == Lean("a", "n1", "Running")
    cluster.faults.drop_watches()
    cluster.create(POD, pod("b"))
    cluster.faults.compact()
    cluster.faults.fail_next("list", POD, ApiError("unavailable"))
    inf.pump()  # Gone -> re-list fails: swallowed, retried next time
    assert inf.get("default/b") is None
    inf.pump()
    assert inf.get("default/b") == Lean("b", "n1", "Running")


def test_assume_then_late_watch_event_fires_once(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    older = cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")  # someone else
    mine = cluster.patch(POD, "a", {"spec": {"nodeName": "n3"}}, "default")
    assert inf.assume(mine)
    assert not inf.assume(mine)  # same version again
    assert not inf.assume(older)
    assert inf.pump() == 0  # both watch events are not newer than the cache
    assert [(ev, new) for ev, _, _, new in seen] == [("MODIFIED", Lean("a", "n3", "Running"))]
    assert inf.resource_version("default/a") == mine["metadata"]["resourceVersion"]


def test_forget_and_deleted_events(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    stale = cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    inf.assume(stale)
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    assert inf.forget("default/a")
    assert not inf.forget("default/a")
    assert not inf.assume(stale)  # a late copy cannot bring it back
    inf.pump()
    assert [ev for ev, *_ in seen] == ["MODIFIED", "DELETED"]
    cluster.create(POD, pod("a"))  # same name, new object
    inf.pump()
    assert seen[-1][0] == "ADDED"


def test_deleted_event_drops_key_whatever_its_version(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    live = cluster.get(POD, "a", "default")
    with_odd_rv = {**live, "metadata": {**live["metadata"], "resourceVersion": "0"}}
    assert inf._apply("DELETED", with_odd_rv)
    assert inf.get("default/a") is None and seen[-1][0] == "DELETED"


def test_bookmark_only_moves_the_resource_version(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    seen = recording(inf)
    inf.start()
    cluster.create(POD_NETWORK, {"metadata": {"name": "x", "namespace": "d"}, "spec": {}})
    cluster.bookmark()
    assert inf.pump() == 0
    assert inf.last_resource_version == cluster.resource_version
    assert seen == []


def test_handler_failure_does_not_stop_the_informer(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)

    def broken(*_: object) -> None:
        raise RuntimeError("handler bug")

    inf.add_handler(broken)
    seen = recording(inf)
    inf.start()
    cluster.create(POD, pod("a"))
    cluster.create(POD, pod("b"))
    assert inf.pump() == 2
    assert len(seen) == 2


def test_threaded_run_sees_created_object(cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    arrived = threading.Event()
    inf.add_handler(lambda ev, key, old, new: arrived.set() if key == "default/a" else None)
    stop = threading.Event()
    thread = threading.Thread(target=inf.run, args=(stop,), kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        cluster.create(POD, pod("a"))
        assert arrived.wait(10)
        assert inf.get("default/a") == Lean("a", "n1", "Running")
    finally:
        stop.set()
        inf.stop()
        thread.join(10)
    assert not thread.is_alive()


def test_server_restarting_with_lower_versions_is_followed(cluster: InMemoryCluster) -> None:
    # resourceVersions are opaque: a server restored from an older snapshot (here: one
    # restarted empty) hands out versions lower than the cached ones, and they count
    for name in ("a", "b", "gone"):
        cluster.create(POD, pod(name))
    for i in range(20):  # push the versions well past what the new server will reach
        cluster.patch(POD, "b", {"metadata": {"labels": {"n": str(i)}}}, "default")
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    cluster.faults.restart_empty()
    inf.pump()  # the watch dropped: re-watching from our version is refused
    # same names, new objects, lower versions ("a" even gets its old version again)
    cluster.create(POD, pod("a", node="n2"))
    cluster.create(POD, pod("b"))
    for _ in range(3):
        inf.pump()
    assert inf.get("default/a") == Lean("a", "n2", "Running")
    assert inf.get("default/gone") is None
    # the empty server was listed first: everything went, then came back
    assert [(ev, key) for ev, key, _, _ in seen] == [
        ("DELETED", "default/a"), ("DELETED", "default/b"), ("DELETED", "default/gone"),
        ("ADDED", "default/a"), ("ADDED", "default/b")]
    # and it keeps following the new history, the controller's own writes included
    mine = cluster.patch(POD, "b", {"spec": {"nodeName": "n3"}}, "default")
    assert inf.assume(mine, based_on=inf.resource_version("default/b"))
    cluster.patch(POD, "a", {"spec": {"nodeName": "n4"}}, "default")
    inf.pump()
    assert inf.get("default/b") == Lean("b", "n3", "Running")
    assert inf.get("default/a") == Lean("a", "n4", "Running")


def test_relist_replaces_whatever_the_versions(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    for i in range(10):
        cluster.patch(POD, "a", {"metadata": {"labels": {"n": str(i)}}}, "default")
    inf = Informer(cluster, POD, lean)
    inf.start()
    cluster.faults.restart_empty()
    cluster.create(POD, pod("a", node="n2"))
    cluster.faults.compact()  # the re-watch gets 410: a re-list
    for _ in range(3):
        inf.pump()
    assert inf.get("default/a") == Lean("a", "n2", "Running")


def test_writes_based_on_the_cached_version_apply_in_a_row(cluster: InMemoryCluster) -> None:
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    seen = recording(inf)
    first = cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    assert inf.assume(first, based_on=inf.resource_version("default/a"))
    second = cluster.patch(POD, "a", {"spec": {"nodeName": "n3"}}, "default")
    assert inf.assume(second, based_on=first["metadata"]["resourceVersion"])
    assert inf.get("default/a") == Lean("a", "n3", "Running")
    assert inf.pump() == 0  # both events echo writes already cached: no revert to n2
    assert [new for _, _, _, new in seen] == [Lean("a", "n2", "Running"),
                                              Lean("a", "n3", "Running")]
    third = cluster.patch(POD, "a", {"spec": {"nodeName": "n4"}}, "default")  # someone else
    inf.pump()
    assert inf.get("default/a") == Lean("a", "n4", "Running")
    assert inf.resource_version("default/a") == third["metadata"]["resourceVersion"]


def test_a_write_whose_event_the_stream_passed_before_it_was_assumed_is_not_applied(
        cluster: InMemoryCluster) -> None:
    """The writer's thread answered, then descheduled: the stream delivers its write and a
    later one of someone else before the writer feeds its answer back. The cache keeps the
    later version and goes on following the stream."""
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    read = inf.resource_version("default/a")
    mine = cluster.update(POD, {**cluster.get(POD, "a", "default"),
                                "spec": {"nodeName": "n2"}})
    cluster.patch(POD, "a", {"spec": {"nodeName": "n3"}}, "default")  # someone else
    inf.pump()
    assert inf.get("default/a") == Lean("a", "n3", "Running")
    assert not inf.assume(mine, based_on=read)
    assert inf.get("default/a") == Lean("a", "n3", "Running")
    later = cluster.patch(POD, "a", {"spec": {"nodeName": "n4"}}, "default")
    inf.pump()
    assert inf.get("default/a") == Lean("a", "n4", "Running")
    assert inf.resource_version("default/a") == later["metadata"]["resourceVersion"]


def test_a_create_whose_event_the_stream_passed_before_it_was_assumed_is_not_applied(
        cluster: InMemoryCluster) -> None:
    inf = Informer(cluster, POD, lean)
    inf.start()
    mine = cluster.create(POD, pod("a"))
    cluster.patch(POD, "a", {"spec": {"nodeName": "n3"}}, "default")  # someone else
    inf.pump()
    assert not inf.assume(mine, created=True)
    assert inf.get("default/a") == Lean("a", "n3", "Running")
    later = cluster.patch(POD, "a", {"spec": {"nodeName": "n4"}}, "default")
    inf.pump()
    assert inf.get("default/a") == Lean("a", "n4", "Running")
    assert inf.resource_version("default/a") == later["metadata"]["resourceVersion"]


def _finalized(cluster: InMemoryCluster, name: str) -> Obj:
    """A record with a finalizer, being deleted (the finalizer holds it)."""
    cluster.create(POD_NETWORK, {**pod(name), "metadata": {
        "name": name, "namespace": "default", "finalizers": ["podnet.io/release"]}})
    cluster.delete(POD_NETWORK, name, "default")
    held = cluster.get(POD_NETWORK, name, "default")
    assert held["metadata"].get("deletionTimestamp")
    return held


def _without_finalizers(obj: Obj) -> Obj:
    return {**obj, "metadata": {**obj["metadata"], "finalizers": []}}


def test_the_answer_of_a_write_that_deleted_its_object_never_brings_it_back(
        cluster: InMemoryCluster) -> None:
    """The last finalizer taken off a record being deleted: the server deletes it and
    answers with the object as it was. The stream's DELETED (at a later version) came
    before the writer fed its answer back: the answer must not cache the record again,
    where nothing would ever drop it (found by CI: a node's record that stayed in the
    cache made its leave give back, every gc period, addresses planted afterwards)."""
    held = _finalized(cluster, "a")
    inf = Informer(cluster, POD_NETWORK, lean)
    inf.start()
    seen = recording(inf)
    based_on = inf.resource_version("default/a")
    answer = cluster.update(POD_NETWORK, _without_finalizers(held))
    with pytest.raises(ApiError):
        cluster.get(POD_NETWORK, "a", "default")
    inf.pump()
    assert inf.get("default/a") is None
    assert not inf.assume(answer, based_on=based_on)
    assert inf.get("default/a") is None and [ev for ev, *_ in seen] == ["DELETED"]


def test_the_answer_of_a_write_that_deleted_its_object_drops_it_at_once(
        cluster: InMemoryCluster) -> None:
    """The same write answered before its DELETED arrives: the cache drops the record
    then, and the late DELETED changes nothing."""
    held = _finalized(cluster, "a")
    inf = Informer(cluster, POD_NETWORK, lean)
    inf.start()
    seen = recording(inf)
    based_on = inf.resource_version("default/a")
    answer = cluster.update(POD_NETWORK, _without_finalizers(held))
    assert not inf.assume(answer, based_on=based_on)
    assert inf.get("default/a") is None and [ev for ev, *_ in seen] == ["DELETED"]
    assert inf.pump() == 0 and inf.get("default/a") is None
    assert [ev for ev, *_ in seen] == ["DELETED"]


def test_a_deleted_event_ends_an_object_whatever_writes_of_ours_are_due(
        cluster: InMemoryCluster) -> None:
    """A write of ours assumed, its event still due, when the object is deleted by
    someone else: the DELETED is the object's end, not an event older than ours."""
    cluster.create(POD, pod("a"))
    inf = Informer(cluster, POD, lean)
    inf.start()
    read = inf.resource_version("default/a")
    mine = cluster.patch(POD, "a", {"spec": {"nodeName": "n2"}}, "default")
    other = cluster.patch(POD, "a", {"spec": {"nodeName": "n3"}}, "default")
    assert inf.assume(other)  # two of ours in flight, unordered: the first stays cached
    assert not inf.assume(mine, based_on=read)
    cluster.delete(POD, "a", "default", grace_period_seconds=0)
    inf.pump()
    assert inf.get("default/a") is None
    assert not inf.assume(other)  # and a late answer cannot bring it back
    assert inf.get("default/a") is None
