"""Core's Namespace and StatefulSet caches: what providers get in their contexts, when
held sticky records are looked at again, and a start that a failing list of either
does not fail."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.core.cluster.informer import Informer
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import NAMESPACE, POD, STATEFUL_SET, ApiError, Cluster
from podnet.core.models import Phase, WorkloadInfo
from podnet.core.objects import namespace_annotations, statefulset_info
from podnet.hookspecs import hookimpl
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]


def _statefulset(world: World, name: str, replicas: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": name}}}
    if replicas is not None:
        spec["replicas"] = replicas
    with world.quiet():
        sts: dict[str, Any] = world.cluster.create(
            STATEFUL_SET, {"metadata": {"name": name, "namespace": world.namespace},
                           "spec": spec})
    return sts


def _sts_pod(world: World, sts: dict[str, Any], name: str, node: int,
             api_version: str = "apps/v1") -> None:
    meta = sts["metadata"]
    with world.quiet():
        world.cluster.create(POD, {
            "metadata": {"name": name, "namespace": world.namespace,
                         "ownerReferences": [{"apiVersion": api_version, "kind": "StatefulSet",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "spec": {"nodeName": world.node_name(node),
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}})


def test_lean_views() -> None:
    ns = {"metadata": {"name": "team", "annotations": {"podnet.io/subnets": "a",
                                                       "other.io/x": "y"}}}
    assert namespace_annotations(ns) == {"podnet.io/subnets": "a"}
    assert namespace_annotations({"metadata": {"name": "bare"}}) == {}
    sts = {"metadata": {"name": "db", "namespace": "n", "uid": "u"},
           "spec": {"replicas": 0, "ordinals": {"start": 5}}}
    assert statefulset_info(sts) == WorkloadInfo(kind="StatefulSet", namespace="n", name="db",
                                                 uid="u", replicas=0, ordinal_start=5)
    assert statefulset_info({"metadata": {"name": "d", "namespace": "n"}}).replicas == 1
    info = WorkloadInfo(kind="StatefulSet", namespace="n", name="db", replicas=2,
                        ordinal_start=1)
    assert [info.wants_ordinal(i) for i in range(4)] == [False, True, True, False]


def test_allocate_gets_the_namespace_podnet_annotations(world: World,
                                                        hook_calls: HookRecorder) -> None:
    with world.quiet():
        world.cluster.patch(NAMESPACE, world.namespace, {"metadata": {"annotations": {
            "podnet.io/subnets": "blue", "example.com/owner": "team"}}})
    world.add_node(0)
    world.add_pod("p", 0)
    world.settle()
    (call,) = hook_calls.of("podnet_allocate")
    assert dict(call.kwargs["context"].namespace_annotations) == {"podnet.io/subnets": "blue"}


def test_a_failing_namespace_list_fails_no_start_and_allocation_waits_for_it(
        world: World, hook_calls: HookRecorder) -> None:
    world.cluster.faults.fail_next("list", NAMESPACE, ApiError("injected"), times=3)
    world.cluster.faults.fail_next("list", STATEFUL_SET, ApiError("injected"), times=1)
    engine = world.start()
    assert engine.started and engine.pods.has_synced
    assert not engine.namespaces.has_synced and not engine.statefulsets.has_synced
    world.add_node(0)
    world.add_pod("p", 0)
    world.step(1)
    assert hook_calls.of("podnet_allocate") == []  # the namespace's annotations unknown
    world.settle(advance=10)
    assert engine.namespaces.has_synced and engine.statefulsets.has_synced
    pn = world.record_of("p")
    assert pn is not None and pn.status.phase is Phase.ROUTED
    world.assert_converged()


class _Holder:
    """A plugin answering podnet_hold_address from the workload core passes."""

    def __init__(self) -> None:
        self.seen: list[WorkloadInfo | None] = []

    @hookimpl
    def podnet_hold_address(self, context: Any) -> bool | None:
        workload = context.workload
        self.seen.append(workload)
        if workload is None:
            return None
        return workload.exists and workload.wants_ordinal(
            int(context.pod_network.spec.pod_name.rsplit("-", 1)[1]))


def test_a_statefulset_change_looks_again_at_its_held_records(
        world: World, plugin_manager: Any) -> None:
    holder = _Holder()
    plugin_manager.register(holder, name="holder")
    world.add_node(0)
    db = _statefulset(world, "db", 3)
    other = _statefulset(world, "other", 1)
    for i in range(3):
        _sts_pod(world, db, f"db-{i}", 0)
    _sts_pod(world, other, "other-0", 0)
    # a look-alike of another API group (OpenKruise's): sticky, but not in core's cache
    kruise = {"metadata": {"name": "kr", "uid": "kruise-uid"}}
    _sts_pod(world, kruise, "kr-0", 0, api_version="apps.kruise.io/v1beta1")
    world.settle()
    world.delete_pod("db-2")
    world.delete_pod("other-0")
    world.delete_pod("kr-0")
    world.settle(advance=1)
    assert {pn.spec.pod_name for pn in world.records()
            if pn.status.phase is Phase.RELEASING} == {"db-2", "other-0", "kr-0"}
    assert None in holder.seen, "core claimed to know the look-alike's StatefulSet"
    world.settle(advance=3 * world.policy().sticky_hold)
    held = {pn.spec.pod_name: pn for pn in world.records()
            if pn.status.phase is Phase.RELEASING}
    assert set(held) == {"db-2", "other-0"}, "held past sticky_hold: their owners want them"
    assert holder.seen[-1] is not None and holder.seen[-1].uid in (
        db["metadata"]["uid"], other["metadata"]["uid"])
    engine = world.engine
    reconciles = engine.stats.reconciles["pod"]
    with world.quiet():
        world.cluster.patch(STATEFUL_SET, "db", {"spec": {"replicas": 2}}, world.namespace)
    world.settle()
    assert {pn.spec.pod_name for pn in world.records()
            if pn.status.phase is Phase.RELEASING} == {"other-0"}
    # only db's held record was looked at again (and once more when it was gone), not
    # every pod
    assert engine.stats.reconciles["pod"] - reconciles <= 2
    with world.quiet():
        world.cluster.delete(STATEFUL_SET, "other", world.namespace)
    world.settle()
    assert not [pn for pn in world.records() if pn.status.phase is Phase.RELEASING]
    world.assert_converged()


@pytest.fixture(params=["memory", "kube"])
def api(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Cluster,
                                                                          InMemoryCluster]]:
    """The in-memory adapter, or the official client against the emulator over HTTP."""
    store = InMemoryCluster()
    if request.param == "memory":
        yield store, store
        return
    with ApiServer(store, bookmark_interval=600) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        with KubeCluster.from_kubeconfig(str(kubeconfig)) as cluster:
            yield cluster, store


def _pump_until(informer: Informer[Any], done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 10
    while not done():
        assert time.monotonic() < deadline, f"informer {informer.name} never caught up"
        informer.pump(timeout=0.05)


def test_both_adapters_list_and_watch_namespaces_and_statefulsets(
        api: tuple[Cluster, InMemoryCluster]) -> None:
    cluster, store = api
    store.create(NAMESPACE, {"metadata": {"name": "team", "annotations": {
        "podnet.io/subnets": "a", "x.io/y": "z"}}})
    store.create(STATEFUL_SET, {"metadata": {"name": "db", "namespace": "team"},
                                "spec": {"replicas": 3}})
    namespaces = Informer(cluster, NAMESPACE, namespace_annotations)
    statefulsets = Informer(cluster, STATEFUL_SET, statefulset_info)
    try:
        namespaces.start()
        statefulsets.start()
        assert namespaces.get("team") == {"podnet.io/subnets": "a"}
        db = statefulsets.get("team/db")
        assert db is not None and db.replicas == 3 and db.uid
        store.patch(NAMESPACE, "team", {"metadata": {"annotations": {
            "podnet.io/subnets": "b"}}})
        store.patch(STATEFUL_SET, "db", {"spec": {"replicas": 1}}, "team")
        _pump_until(namespaces, lambda: namespaces.get("team") == {"podnet.io/subnets": "b"})
        _pump_until(statefulsets, lambda: getattr(statefulsets.get("team/db"), "replicas",
                                                  None) == 1)
        store.delete(STATEFUL_SET, "db", "team")
        _pump_until(statefulsets, lambda: statefulsets.get("team/db") is None)
    finally:
        namespaces.stop()
        statefulsets.stop()
