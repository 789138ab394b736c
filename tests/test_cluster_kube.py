"""KubeCluster specifics: informers over real HTTP watches, and errors.

The shared behaviour of both adapters is in ``test_cluster_contract.py``; here the
informer runs over :class:`KubeCluster` against the API server emulator and must survive
dropped watch connections and 410 Gone exactly as it does in memory.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from podnet.core.cluster.informer import Informer
from podnet.core.cluster.kube import KubeCluster, KubeWatch
from podnet.core.cluster.port import (
    NODE,
    POD,
    POD_NETWORK,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    ListResult,
    NotFound,
    Obj,
)
from podnet.core.errors import ConfigError
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster

NS = "default"


@attrs.frozen
class Emulated:
    store: InMemoryCluster
    server: ApiServer
    kube: KubeCluster

    def admin(self, spec: Obj) -> Obj:
        """POST the emulator's fault endpoint, as a chaos run would."""
        req = urllib.request.Request(
            f"{self.server.url}/_podnet/faults",
            data=json.dumps(spec).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            answer: Obj = json.loads(resp.read())
        return answer


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Emulated]:
    store = InMemoryCluster()
    with ApiServer(store, bookmark_interval=0.5) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        with KubeCluster.from_kubeconfig(str(kubeconfig)) as kube:
            yield Emulated(store, server, kube)


def pod(name: str, node: str = "n1", **labels: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": NS, "labels": dict(labels)},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "demo"}]},
    }


def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def raw(obj: Obj) -> Obj:
    return obj


Seen = dict[str, list[tuple[str, str]]]


def recorder(informer: Informer[Obj]) -> Seen:
    """Every handler call per key, as (event, resourceVersion)."""
    seen: Seen = defaultdict(list)

    def handle(event: str, key: str, old: Obj | None, new: Obj | None) -> None:
        # a DELETED handler sees the last cached version: its own version is not passed
        seen[key].append((event, new["metadata"]["resourceVersion"] if new else "-"))

    informer.add_handler(handle)
    return seen


def count_lists(kube: KubeCluster) -> list[int]:
    """Count the adapter's list calls (the store's own stats also count our checks)."""
    calls = [0]
    real = kube.list

    def counted(*args: Any, **kwargs: Any) -> ListResult:
        calls[0] += 1
        return real(*args, **kwargs)

    kube.list = counted
    return calls


def converged(informer: Informer[Obj], store: InMemoryCluster) -> bool:
    live = {f"{NS}/{o['metadata']['name']}": o for o in store.list(POD).items}
    cached = {k: informer.get(k) for k in informer.keys()}  # noqa: SIM118
    return cached == live


# --- the informer over HTTP -------------------------------------------------------------


def test_informer_survives_dropped_watches_without_losing_events(emu: Emulated) -> None:
    lists = count_lists(emu.kube)
    informer: Informer[Obj] = Informer(emu.kube, POD, raw)
    seen = recorder(informer)
    informer.start()
    stop = threading.Event()
    runner = threading.Thread(target=informer.run, args=(stop, 0.05), daemon=True)
    runner.start()
    expected: Seen = defaultdict(list)

    def wrote(obj: Obj, event: str) -> None:
        meta = obj["metadata"]
        expected[f"{NS}/{meta['name']}"].append((event, meta["resourceVersion"]))

    drops = 0
    try:
        for i in range(60):
            made = emu.store.create(POD, pod(f"p{i}", app="web"))
            wrote(made, "ADDED")
            if i % 3 == 0:
                patched = emu.store.patch(POD, f"p{i}", {"metadata": {"labels": {"i": str(i)}}}, NS)
                wrote(patched, "MODIFIED")
            if i % 5 == 4:
                emu.store.delete(POD, f"p{i - 2}", NS, grace_period_seconds=0)
                expected[f"{NS}/p{i - 2}"].append(("DELETED", "-"))
            if i % 10 == 9:
                drops += emu.admin({"dropWatches": True}).get("droppedWatches", 0)
                time.sleep(0.05)  # let the informer notice, re-watch, and catch up
        until(lambda: converged(informer, emu.store))
    finally:
        stop.set()
        runner.join(5)
        informer.stop()
    assert drops >= 3  # the informer's watch really was cut, several times
    assert dict(seen) == dict(expected)  # every change, once, in order
    assert lists == [1]  # resumed from its version each time, never re-listed
    assert emu.store.stats[("watch", "pods")] > drops


def test_informer_relists_after_gone_and_fires_deletes(emu: Emulated) -> None:
    for i in range(10):
        emu.store.create(POD, pod(f"p{i}"))
    lists = count_lists(emu.kube)
    informer: Informer[Obj] = Informer(emu.kube, POD, raw)
    seen = recorder(informer)
    informer.start()
    assert len(informer) == 10
    seen.clear()
    watch = informer._watch  # private: wait for the cut before writing
    assert isinstance(watch, KubeWatch)
    emu.admin({"dropWatches": True})
    until(lambda: watch.closed)
    # while nobody watches: deletes, a create, an update; then history is compacted
    for i in range(5):
        emu.store.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    emu.store.create(POD, pod("q0"))
    emu.store.patch(POD, "p5", {"metadata": {"labels": {"v": "2"}}}, NS)
    emu.admin({"compact": True})
    until(lambda: informer.pump(0.1) >= 0 and converged(informer, emu.store))
    assert lists == [2]  # 410 Gone: re-listed once
    events = {key: [e for e, _ in calls] for key, calls in seen.items()}
    assert events == {
        **{f"{NS}/p{i}": ["DELETED"] for i in range(5)},
        f"{NS}/q0": ["ADDED"],
        f"{NS}/p5": ["MODIFIED"],
    }
    # and it follows the cluster again from the fresh list
    emu.store.create(POD, pod("q1"))
    until(lambda: informer.pump(0.1) >= 0 and f"{NS}/q1" in informer)
    informer.stop()


# --- adapter specifics ------------------------------------------------------------------


def test_watch_stop_is_prompt_and_ends_the_reader(emu: Emulated) -> None:
    w = emu.kube.watch(POD, emu.store.resource_version, timeout_seconds=600)
    assert w.poll(0.05) == []
    started = time.monotonic()
    w.stop()
    w.join(2)
    assert time.monotonic() - started < 1.0
    assert w.closed and w.poll(0) == []
    # the pool still serves requests afterwards
    emu.kube.create(POD, pod("a"))
    assert [o["metadata"]["name"] for o in emu.kube.list(POD).items] == ["a"]


def test_watch_is_idle_only_while_open_with_nothing_to_poll(emu: Emulated) -> None:
    w = emu.kube.watch(POD, emu.store.resource_version, timeout_seconds=600)
    try:
        assert w.idle and w.poll(0) == []
        emu.kube.create(POD, pod("a"))
        until(lambda: not w.idle)  # the reader thread queued the event
        assert [ev.object["metadata"]["name"] for ev in w.poll(0)] == ["a"]
        assert w.idle
    finally:
        w.stop()
    assert not w.idle  # ended: a pump must look, and re-watch


def test_watch_timeout_is_jittered_whole_seconds(emu: Emulated) -> None:
    sent: list[str] = []
    real = emu.kube.api_client.call_api

    def spy(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(url)
        return real(method, url, *args, **kwargs)

    emu.kube.api_client.call_api = spy
    for _ in range(3):
        emu.kube.watch(POD, "1").stop()
    timeouts = [int(u.split("timeoutSeconds=")[1].split("&")[0]) for u in sent]
    assert all(300 <= t <= 600 for t in timeouts)
    assert all("allowWatchBookmarks=true" in u and "watch=1" in u for u in sent)


def test_http_errors_map_to_port_errors(emu: Emulated) -> None:
    emu.store.faults.fail_next("get", POD, ApiError("injected", code=500))
    with pytest.raises(ApiError) as info:
        emu.kube.get(POD, "a", NS)
    assert info.value.code == 500 and type(info.value) is ApiError
    with pytest.raises(NotFound):
        emu.kube.get(POD, "a", NS)
    # the emulator checks the CRD schema: 422 names the field
    with pytest.raises(Invalid, match="provider"):
        emu.kube.create(
            POD_NETWORK,
            {
                "metadata": {"name": "x", "namespace": NS},
                "spec": {"podName": "x", "podUid": "u", "nodeName": "n1"},
            },
        )
    emu.admin({"failNext": {"op": "update", "resource": "pods", "code": 409, "times": 1}})
    made = emu.kube.create(POD, pod("a"))
    with pytest.raises(Conflict):
        emu.kube.update(POD, made)
    emu.admin({"failNext": {"op": "watch", "resource": "pods", "code": 410, "times": 1}})
    with pytest.raises(Gone):
        emu.kube.watch(POD, made["metadata"]["resourceVersion"]).poll(5)


def test_unreachable_server_is_an_api_error(tmp_path: Path) -> None:
    server = ApiServer().start()
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    server.stop()
    with KubeCluster.from_kubeconfig(str(kubeconfig)) as kube:
        with pytest.raises(ApiError) as info:
            kube.list(POD)
        assert info.value.code == 503 and "unreachable" in str(info.value)
        with pytest.raises(ApiError):
            kube.watch(POD, "1")


def test_bad_kubeconfig_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="kubeconfig"):
        KubeCluster.from_kubeconfig(str(tmp_path / "missing"))


def test_connect_picks_the_kubeconfig_as_every_command_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A named file first; else, outside a pod, $KUBECONFIG; in a pod, its service account."""
    monkeypatch.setattr(KubeCluster, "in_cluster", classmethod(lambda cls, **_: "in-cluster"))
    with pytest.raises(ConfigError, match="no such file"):
        KubeCluster.connect(str(tmp_path / "missing"))
    store = InMemoryCluster()
    store.create(NODE, {"metadata": {"name": "n1"}})
    with ApiServer(store) as server:
        named = str(server.write_kubeconfig(tmp_path / "named"))
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
        with KubeCluster.connect(named) as kube:
            assert [n["metadata"]["name"] for n in kube.list(NODE).items] == ["n1"]
        assert KubeCluster.connect() == "in-cluster"  # type: ignore[comparison-overlap]
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
        monkeypatch.setenv("KUBECONFIG", named)
        with KubeCluster.connect() as kube:
            assert [n["metadata"]["name"] for n in kube.list(NODE).items] == ["n1"]


def test_list_follows_continue_tokens_and_survives_their_expiry(
    emu: Emulated, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the emulator always answers whole lists, so pages are played back here
    pages = {
        "": {"metadata": {"continue": "t1", "resourceVersion": "7"}, "items": [{"a": 1}]},
        "t1": {"metadata": {"continue": "t2", "resourceVersion": "7"}, "items": [{"b": 1}]},
        "t2": {"metadata": {"resourceVersion": "7"}, "items": [{"c": 1}]},
    }
    queries: list[dict[str, Any]] = []
    expire = {"t2"}

    def call(method: str, path: str, *, query: Any = None, **_: Any) -> Any:
        q = dict(query or [])
        queries.append(q)
        token = q.get("continue", "")
        if token in expire:
            expire.clear()
            raise Gone("continue token expired")
        if "limit" not in q:  # the unpaged fallback
            return {"metadata": {"resourceVersion": "9"}, "items": [{"a": 2}, {"z": 1}]}
        return pages[token]

    monkeypatch.setattr(emu.kube, "_call", call)
    result = emu.kube.list(POD, label_selector="app=web")
    assert result == ListResult(
        [{"a": 2, "kind": "Pod", "apiVersion": "v1"}, {"z": 1, "kind": "Pod", "apiVersion": "v1"}],
        "9",
    )
    assert [q.get("continue") for q in queries] == [None, "t1", "t2", None]
    assert all(q["labelSelector"] == "app=web" for q in queries)
    again = emu.kube.list(POD)
    assert [next(iter(o)) for o in again.items] == ["a", "b", "c"]
    assert again.resource_version == "7"


# --- decoding -------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [
    b'{"items":[{"metadata":{"name":"p","annotations":{"a":"\\u00e9t\\u00e9 \\ud83d\\ude00"}}}]}',
    # integers of any size, as Python's own: a 64-bit decoder would refuse or round them
    b'{"spec":{"big":123456789012345678901234567890,"neg":-9223372036854775809}}',
    b'{"f":1.5,"e":1e-7,"t":true,"n":null,"l":[1,"x",[]]}',
    b'{"a":1,"a":2}',  # the last of duplicate keys, as json.loads keeps it
    b'{"items":[' + b",".join(b'{"n":%d,"s":"%s"}' % (i, b"x" * 100) for i in range(12000))
    + b"]}",  # past the size decoded with the collector paused
])
def test_answers_decode_to_what_json_loads_gives(body: bytes) -> None:
    from podnet.core.cluster.kube import _loads

    assert _loads(body) == json.loads(body)


def test_an_undecodable_answer_is_a_value_error() -> None:
    # what the callers catch (a watch skips the line; an error answer is read as text)
    from podnet.core.cluster.kube import _loads

    for body in (b'{"a":', b"\xff", b'{"a":1} x'):
        with pytest.raises(ValueError):
            _loads(body)


# --- lists of the parts a reader uses ---------------------------------------------------------


def busy_pod(name: str, **meta: Any) -> Obj:
    """A pod as controllers and kubelets leave it: most of its bytes are parts podnet does
    not read (managedFields, env, volumes, most of its status)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": "4",
            "labels": {"app": "web", "kubevirt.io/domain": "vm1"},
            "annotations": {"podnet.io/networks": "blue", "k8s.v1.cni.cncf.io/networks": "nad-a",
                            "example.com/other": "x"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                                 "uid": "rs", "controller": True, "blockOwnerDeletion": True}],
            "finalizers": ["example.com/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Update",
                               "fieldsV1": {"f:spec": {"f:containers": {}}}}],
            **meta,
        },
        "spec": {
            "nodeName": "n1", "restartPolicy": "OnFailure", "hostNetwork": False,
            "containers": [{"name": "app", "image": "demo", "env": [{"name": "E", "value": "1"}],
                            "ports": [{"name": "http", "containerPort": 8080},
                                      {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                      {"containerPort": 9090}]}],
            "initContainers": [
                {"name": "proxy", "image": "p", "restartPolicy": "Always",
                 "ports": [{"name": "admin", "containerPort": 15000}]},
                {"name": "setup", "image": "s", "ports": [{"name": "once", "containerPort": 1}]},
            ],
            "volumes": [{"name": "v", "emptyDir": {}}],
        },
        "status": {"phase": "Failed", "reason": "Evicted", "podIP": "10.0.0.9",
                   "conditions": [{"type": "Ready", "status": "False"}]},
    }


def test_a_pod_read_from_its_listed_parts_is_the_pod_read_whole() -> None:
    from podnet.core.cluster.kube import _list_decoder
    from podnet.core.objects import POD_FIELDS, pod_info

    page = {"metadata": {"resourceVersion": "5", "continue": "t"}, "items": [
        busy_pod("a"),
        busy_pod("b", deletionTimestamp="2026-12-07T01:02:03Z", deletionGracePeriodSeconds=30),
        {**busy_pod("c"), "spec": {"nodeName": "n2", "hostNetwork": True, "containers": []}},
        {"metadata": {"name": "d", "namespace": NS}},  # no spec, no status
    ]}
    body = json.dumps(page).encode()
    lean, whole = _list_decoder(POD_FIELDS)(body), json.loads(body)
    assert lean["metadata"] == whole["metadata"]
    assert [pod_info(o) for o in lean["items"]] == [pod_info(o) for o in whole["items"]]
    first = lean["items"][0]
    assert "managedFields" not in first["metadata"] and "volumes" not in first["spec"]
    assert first["spec"]["containers"][0] == {"ports": whole["items"][0]["spec"]["containers"][0][
        "ports"]}
    assert first["status"] == {"phase": "Failed", "reason": "Evicted"}


@pytest.mark.parametrize("body", [
    b'{"items":[{"metadata":{"name":"p"},"spec":{"containers":"odd"}}]}',
    b'{"items":[{"metadata":"odd"}]}',
    b'{"items":{"not":"a list"}}',
])
def test_a_list_whose_items_are_not_shaped_as_its_fields_say_is_read_whole(body: bytes) -> None:
    from podnet.core.cluster.kube import _list_decoder
    from podnet.core.objects import POD_FIELDS

    assert _list_decoder(POD_FIELDS)(body) == json.loads(body)


def test_the_pods_informer_lists_only_what_it_reads(emu: Emulated) -> None:
    from podnet.core.caches import Caches

    obj = busy_pod("a")
    for key in ("uid", "resourceVersion", "managedFields"):
        del obj["metadata"][key]
    created = emu.store.create(POD, obj)
    listed: list[Obj] = []
    pods = Caches(emu.kube, lambda _: None).pods
    transform = pods._transform
    pods._transform = lambda o: listed.append(o) or transform(o)
    pods.start()
    try:
        assert [o["metadata"]["name"] for o in listed] == ["a"]
        spec, meta = listed[0]["spec"], listed[0]["metadata"]
        assert "volumes" not in spec and "env" not in spec["containers"][0]
        assert listed[0]["kind"] == "Pod" and meta["uid"] == created["metadata"]["uid"]
        assert pods.get(f"{NS}/a") == transform(emu.store.get(POD, "a", NS))
        assert pods.resource_version(f"{NS}/a") == created["metadata"]["resourceVersion"]
    finally:
        pods.stop()
