"""Clients nobody here wrote, against the API emulator: kopf (an operator), lightkube and
kr8s. Each runs its ordinary CRUD, watch and patch paths over HTTP, and each assertion is
what a real kube-apiserver answers (the upstream behaviour is named in the docstrings).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kopf
import kr8s
import pytest
from kr8s.objects import ConfigMap as Kr8sConfigMap
from kr8s.objects import Pod as Kr8sPod
from kr8s.objects import new_class
from kubernetes import client
from lightkube import Client as LightkubeClient
from lightkube import KubeConfig
from lightkube.core.exceptions import ApiError as LightkubeApiError
from lightkube.generic_resource import create_namespaced_resource
from lightkube.models.core_v1 import Container, PodSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, Pod
from lightkube.types import PatchType

from podnet.core.cluster.port import POD, POD_NETWORK
from podnet.sim.apiserver import ApiServer
from podnet.testing.waiting import wait_for

# a client that hangs is a failure here, not a stuck CI run
pytestmark = pytest.mark.timeout(60)

NS = "default"
GROUP, VERSION = "podnet.io", "v1alpha1"
PN_SPEC = {"podName": "p", "podUid": "uid-1", "nodeName": "n1", "provider": "reference"}
KOPF_FINALIZER = "kopf.zalando.org/KopfFinalizerMarker"


@pytest.fixture
def server() -> Iterator[ApiServer]:
    # the kubelet stand-in confirms terminating pods at once: finalizers still hold them
    with ApiServer(bookmark_interval=0.2, kubelet_finish_after=0) as srv:
        yield srv


@pytest.fixture
def kubeconfig(server: ApiServer, tmp_path: Path) -> Path:
    return server.write_kubeconfig(tmp_path / "kubeconfig")


def pod_body(name: str, node: str | None = "n1", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "demo:1"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
            "spec": spec}


def exists(server: ApiServer, kind: Any, name: str) -> bool:
    return server.peek(kind, name, NS) is not None


# --- kopf -------------------------------------------------------------------------------


class _Operator:
    """A minimal kopf operator: pod handlers (create, delete: kopf's finalizer) and a
    PodNetwork handler that writes status. ``kopf.operator`` runs on a thread of this
    process, as ``kopf run`` would run it (a second interpreter would cost seconds);
    standalone, so no peering; logged in to the emulator by a login handler, so this
    process's kubeconfig is not touched."""

    def __init__(self, server: ApiServer) -> None:
        self.registry = kopf.OperatorRegistry()
        self.seen: list[tuple[str, str]] = []
        self.release_delete = threading.Event()
        self.delete_started = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        reg = self.registry

        @kopf.on.login(registry=reg)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return kopf.ConnectionInfo(server=server.url)

        @kopf.on.create("pods", registry=reg)
        def pod_created(name: str, **_: Any) -> None:
            self.seen.append(("created", name))

        @kopf.on.delete("pods", registry=reg)
        def pod_deleted(name: str, **_: Any) -> None:
            self.seen.append(("deleting", name))
            self.delete_started.set()
            self.release_delete.wait(30)
            self.seen.append(("deleted", name))

        @kopf.on.create(GROUP, VERSION, "podnetworks", registry=reg)
        def network_created(name: str, patch: kopf.Patch, **_: Any) -> dict[str, str]:
            patch.status["phase"] = "Allocated"
            patch.status["ip"] = "10.1.0.7"
            self.seen.append(("network", name))
            return {"note": "routed"}  # kopf writes it to status.network_created

        settings = kopf.OperatorSettings()
        settings.watching.server_timeout = 30
        self._thread = threading.Thread(
            target=lambda: asyncio.run(kopf.operator(
                registry=reg, settings=settings, standalone=True, clusterwide=True,
                stop_flag=self._stop, ready_flag=self._ready)),
            name="kopf-operator", daemon=True)

    def __enter__(self) -> _Operator:
        self._thread.start()
        assert self._ready.wait(15), "kopf did not start"
        return self

    def __exit__(self, *_: object) -> None:
        self.release_delete.set()
        self._stop.set()
        self._thread.join(15)
        assert not self._thread.is_alive(), "kopf did not stop"


def test_kopf_pod_handlers_hold_deletion_with_their_finalizer(server: ApiServer) -> None:
    """kopf adds its finalizer before running the creation handler, and removes it only
    once the deletion handler succeeded (kopf docs, "Handlers", deletion). The server's
    part (kubernetes.io "Finalizers"): a delete of an object with finalizers only sets
    ``deletionTimestamp``; the object stays, readable, until the last finalizer is
    removed, and the patch that removes it deletes it. kopf's patches carry a JSON-patch
    ``test`` of the resourceVersion, which must hold on the emulator as on etcd."""
    with _Operator(server) as op, client.ApiClient(
            client.Configuration(host=server.url)) as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(NS, pod_body("web"))
        wait_for("kopf's creation handler", lambda: ("created", "web") in op.seen, 15, 0.05)
        assert core.read_namespaced_pod("web", NS).metadata.finalizers == [KOPF_FINALIZER]

        core.delete_namespaced_pod("web", NS)
        assert op.delete_started.wait(15), "kopf's deletion handler did not run"
        held = core.read_namespaced_pod("web", NS)
        assert held.metadata.deletion_timestamp is not None
        assert held.metadata.finalizers == [KOPF_FINALIZER]
        # the kubelet stand-in confirmed the pod already (grace 0): only kopf holds it
        assert held.metadata.deletion_grace_period_seconds == 0

        op.release_delete.set()
        wait_for("the pod to go", lambda: not exists(server, POD, "web"), 15, 0.05)
        assert op.seen == [("created", "web"), ("deleting", "web"), ("deleted", "web")]


def test_kopf_status_patch_on_a_custom_resource_lands_and_unknown_fields_are_pruned(
        server: ApiServer) -> None:
    """kopf writes a handler's ``patch.status`` and its return value with a merge patch of
    the status subresource. kubernetes.io "Extend the Kubernetes API with
    CustomResourceDefinitions" (field pruning): fields the structural schema does not
    declare are dropped from what is stored (and named in a warning), the declared ones are
    kept; the write is not refused. So the PodNetwork's phase and ip land, and kopf's
    ``status.network_created`` (not in the schema) is pruned, as on a real cluster."""
    with _Operator(server) as op, client.ApiClient(
            client.Configuration(host=server.url)) as api:
        objects = client.CustomObjectsApi(api)
        objects.create_namespaced_custom_object(GROUP, VERSION, NS, "podnetworks", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork",
            "metadata": {"name": "pn1"}, "spec": PN_SPEC})

        def status() -> dict[str, Any]:
            found = server.peek(POD_NETWORK, "pn1", NS) or {}
            return dict(found.get("status") or {})

        wait_for("kopf's status patch", lambda: bool(status()), 15, 0.05)
        assert status() == {"phase": "Allocated", "ip": "10.1.0.7"}
        assert op.seen == [("network", "pn1")]
        stored = objects.get_namespaced_custom_object(GROUP, VERSION, NS, "podnetworks", "pn1")
        # kopf's own bookkeeping went into annotations, as the server stores them
        assert "kopf.zalando.org/last-handled-configuration" in stored["metadata"]["annotations"]
        assert stored["metadata"]["generation"] == 1  # status writes do not bump it


# --- lightkube --------------------------------------------------------------------------


@pytest.fixture
def lightkube(kubeconfig: Path) -> Iterator[LightkubeClient]:
    with LightkubeClient(config=KubeConfig.from_file(kubeconfig), field_manager="tests") as client:
        yield client


def _lk_pod(name: str, **labels: str) -> Pod:
    return Pod(metadata=ObjectMeta(name=name, labels=labels),
               spec=PodSpec(containers=[Container(name="app", image="demo:1")]))


def test_lightkube_crud_list_by_label_and_defaults(lightkube: LightkubeClient) -> None:
    """Create answers the stored pod with the API's defaults (``SetDefaults_PodSpec``:
    restartPolicy Always, terminationGracePeriodSeconds 30; the pod strategy's
    ``PrepareForCreate``: phase Pending); a list with a label selector returns only the
    matching objects; a ConfigMap round-trips through create, replace and get; get of a
    deleted object is 404 NotFound."""
    made = lightkube.create(_lk_pod("a", app="web"), namespace=NS)
    assert made.status is not None and made.status.phase == "Pending"
    assert made.spec is not None and made.spec.restartPolicy == "Always"
    assert made.spec.terminationGracePeriodSeconds == 30
    lightkube.create(_lk_pod("b", app="db"), namespace=NS)
    picked = [p.metadata.name for p in lightkube.list(Pod, namespace=NS, labels={"app": "web"})
              if p.metadata]
    assert picked == ["a"]

    cm = lightkube.create(ConfigMap(metadata=ObjectMeta(name="conf"), data={"k": "v"}),
                          namespace=NS)
    assert cm.data is not None and cm.metadata is not None
    cm.data["k2"] = "v2"
    replaced = lightkube.replace(cm)
    assert replaced.metadata is not None and cm.metadata.resourceVersion is not None
    assert int(replaced.metadata.resourceVersion or 0) > int(cm.metadata.resourceVersion)
    assert lightkube.get(ConfigMap, "conf", namespace=NS).data == {"k": "v", "k2": "v2"}
    lightkube.delete(ConfigMap, "conf", namespace=NS)
    with pytest.raises(LightkubeApiError) as gone:
        lightkube.get(ConfigMap, "conf", namespace=NS)
    assert gone.value.status.code == 404 and gone.value.status.reason == "NotFound"


def test_lightkube_patches_strategic_merge_and_json(lightkube: LightkubeClient) -> None:
    """The three patch types (kubernetes.io "Update API Objects in Place Using kubectl
    patch"): a strategic merge patch merges ``containers`` by name (patchMergeKey), so a
    container named in the patch is updated in place and the others stay; a merge patch
    (RFC 7386) replaces a list whole; a JSON patch (RFC 6902) applies its operations, and a
    failing ``test`` answers 422 without writing."""
    pod = _lk_pod("a")
    assert pod.spec is not None
    pod.spec.containers.append(Container(name="side", image="side:1"))
    lightkube.create(pod, namespace=NS)
    strategic = lightkube.patch(
        Pod, "a", {"spec": {"containers": [{"name": "app", "image": "demo:2"}]}},
        namespace=NS, patch_type=PatchType.STRATEGIC)
    assert strategic.spec is not None
    assert [(c.name, c.image) for c in strategic.spec.containers] == [
        ("app", "demo:2"), ("side", "side:1")]
    merged = lightkube.patch(Pod, "a", {"metadata": {"labels": {"tier": "x"},
                                                     "finalizers": ["example.com/keep"]}},
                             namespace=NS, patch_type=PatchType.MERGE)
    assert merged.metadata is not None and merged.metadata.labels == {"tier": "x"}
    merged = lightkube.patch(Pod, "a", {"metadata": {"finalizers": ["example.com/other"]}},
                             namespace=NS, patch_type=PatchType.MERGE)
    assert merged.metadata is not None and merged.metadata.finalizers == ["example.com/other"]
    ops = [{"op": "add", "path": "/metadata/labels/j", "value": "1"},
           {"op": "remove", "path": "/metadata/finalizers"}]
    patched = lightkube.patch(Pod, "a", ops, namespace=NS, patch_type=PatchType.JSON)
    assert patched.metadata is not None
    assert patched.metadata.labels == {"tier": "x", "j": "1"}
    assert patched.metadata.finalizers is None
    with pytest.raises(LightkubeApiError) as failed:
        lightkube.patch(Pod, "a", [{"op": "test", "path": "/metadata/labels/j", "value": "2"},
                                   {"op": "add", "path": "/metadata/labels/k", "value": "1"}],
                        namespace=NS, patch_type=PatchType.JSON)
    assert failed.value.status.code == 422
    assert lightkube.get(Pod, "a", namespace=NS).metadata.labels == {"tier": "x", "j": "1"}


def test_lightkube_watch_sees_added_modified_deleted(lightkube: LightkubeClient) -> None:
    """A watch from a list's resourceVersion (kubernetes.io "API Concepts", efficient
    detection of changes) delivers every later change in order: ADDED, MODIFIED, DELETED,
    each at a higher resourceVersion than the one before."""
    listed = lightkube.list(Pod, namespace=NS)
    assert list(listed) == []
    rv = listed.resourceVersion  # known once the list was read
    events: list[tuple[str, str, int]] = []

    def watch() -> None:
        for kind, obj in lightkube.watch(Pod, namespace=NS, resource_version=rv):
            assert obj.metadata is not None
            events.append((kind, obj.metadata.name or "", int(obj.metadata.resourceVersion or 0)))
            if kind == "DELETED":
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    lightkube.create(_lk_pod("w"), namespace=NS)
    lightkube.patch(Pod, "w", {"metadata": {"labels": {"seen": "yes"}}}, namespace=NS)
    lightkube.delete(Pod, "w", namespace=NS)  # unscheduled: no grace period (upstream)
    watcher.join(15)
    assert not watcher.is_alive(), f"the watch did not see the delete: {events}"
    assert [(k, n) for k, n, _ in events] == [("ADDED", "w"), ("MODIFIED", "w"),
                                              ("DELETED", "w")]
    rvs = [v for _, _, v in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3 and rvs[0] > int(rv or 0)


def test_lightkube_status_subresource_of_a_generic_resource(
        lightkube: LightkubeClient) -> None:
    """A custom resource with the status subresource (kubernetes.io "CustomResourceDefinitions",
    subresources): create drops a status sent with it, a patch of ``/status`` changes only
    the status (and not ``metadata.generation``), and a write of the main resource ignores
    status changes."""
    network = create_namespaced_resource(GROUP, VERSION, "PodNetwork", "podnetworks")
    made = lightkube.create(network(metadata=ObjectMeta(name="pn1"), spec=PN_SPEC,
                                    status={"phase": "Ready"}), namespace=NS)
    assert made.status is None
    patched = lightkube.patch(network.Status, "pn1",
                              {"status": {"phase": "Allocated", "ip": "10.1.0.9"},
                               "spec": {"podName": "ignored"}},
                              namespace=NS, patch_type=PatchType.MERGE)
    assert patched.status == {"phase": "Allocated", "ip": "10.1.0.9"}
    assert patched.spec == PN_SPEC and patched.metadata is not None
    assert patched.metadata.generation == 1
    main = lightkube.patch(network, "pn1", {"status": {"phase": "Ready"},
                                            "metadata": {"labels": {"a": "b"}}},
                           namespace=NS, patch_type=PatchType.MERGE)
    assert main.status == {"phase": "Allocated", "ip": "10.1.0.9"}
    current = lightkube.get(network.Status, "pn1", namespace=NS)
    assert current.status is not None
    current.status["mac"] = "02:00:00:00:00:01"
    replaced = lightkube.replace(current)
    assert replaced.status == {"phase": "Allocated", "ip": "10.1.0.9",
                               "mac": "02:00:00:00:00:01"}


def test_lightkube_wait_for_a_condition_and_delete_a_collection(
        lightkube: LightkubeClient) -> None:
    """``Client.wait`` watches one object (a ``metadata.name`` field selector, which
    upstream serves for every kind) until a condition holds: here the pod's Ready
    condition, written through ``pods/status`` as a kubelet writes it. A field selector on
    ``spec.nodeName`` picks a node's pods (upstream's pod field set has it);
    ``deletecollection`` with ``dryRun=All`` deletes nothing, with grace 0 deletes them
    all at once."""
    for name, node in (("a", "n1"), ("b", "n1"), ("c", "n2")):
        pod = _lk_pod(name)
        assert pod.spec is not None
        pod.spec.nodeName = node
        lightkube.create(pod, namespace=NS)
    on_n1 = [p.metadata.name for p in lightkube.list(Pod, namespace=NS,
                                                     fields={"spec.nodeName": "n1"})
             if p.metadata]
    assert on_n1 == ["a", "b"]

    def kubelet() -> None:
        lightkube.patch(Pod.Status, "a", {"status": {"conditions": [
            {"type": "Ready", "status": "True"}]}}, namespace=NS)

    timer = threading.Timer(0.2, kubelet)
    timer.start()
    ready = lightkube.wait(Pod, "a", for_conditions=["Ready"], namespace=NS)
    timer.join()
    assert ready.status is not None and ready.status.conditions is not None
    assert [(c.type, c.status) for c in ready.status.conditions] == [("Ready", "True")]

    def names() -> list[str]:
        return [p.metadata.name or "" for p in lightkube.list(Pod, namespace=NS) if p.metadata]

    lightkube.deletecollection(Pod, namespace=NS, grace_period=0, dry_run=True)
    assert names() == ["a", "b", "c"]
    lightkube.deletecollection(Pod, namespace=NS, grace_period=0)
    assert names() == []


# --- kr8s -------------------------------------------------------------------------------


@pytest.fixture
def kr8s_api(kubeconfig: Path) -> kr8s.Api:
    return kr8s.api(kubeconfig=str(kubeconfig), namespace=NS)


def _kr8s_pod(api: kr8s.Api, name: str, **labels: str) -> Kr8sPod:
    return Kr8sPod({"metadata": {"name": name, "labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "demo:1"}]}},
                   namespace=NS, api=api)


def test_kr8s_crud_patch_and_label_selectors(kr8s_api: kr8s.Api) -> None:
    """kr8s's sync objects over the same paths: create answers the defaulted pod (phase
    Pending, upstream's ``PrepareForCreate``); a label selector list picks the matching
    pod; kr8s patches with a merge patch by default (RFC 7386: the containers list is
    replaced whole) and the server defaults the result as it defaults every object it
    decodes (``SetDefaults_Container``: terminationMessagePolicy File comes back); a JSON
    patch applies its operation; a ConfigMap round-trips; a delete of a pod that no node
    runs removes it at once (upstream's ``CheckGracefulDelete`` gives it grace 0)."""
    assert kr8s_api.version()["major"] == "1"
    web = _kr8s_pod(kr8s_api, "web", app="web")
    web.create()
    assert web.raw["status"]["phase"] == "Pending"
    _kr8s_pod(kr8s_api, "db", app="db").create()
    picked = [p.name for p in kr8s_api.get("pods", namespace=NS, label_selector={"app": "web"})]
    assert picked == ["web"]

    web.patch({"spec": {"containers": [{"name": "app", "image": "demo:2"}]}})
    web.patch({"metadata": {"labels": {"m": "1"}}}, type="merge")
    web.patch([{"op": "replace", "path": "/metadata/labels/app", "value": "www"}], type="json")
    web.refresh()
    assert web.labels == {"app": "www", "m": "1"}
    assert [(c["name"], c["image"]) for c in web.raw["spec"]["containers"]] == [
        ("app", "demo:2")]
    assert web.raw["spec"]["containers"][0]["terminationMessagePolicy"] == "File"

    conf = Kr8sConfigMap({"metadata": {"name": "conf"}, "data": {"k": "v"}}, namespace=NS,
                         api=kr8s_api)
    conf.create()
    assert Kr8sConfigMap.get("conf", namespace=NS, api=kr8s_api).raw["data"] == {"k": "v"}
    conf.delete()
    web.delete()
    assert not web.exists()
    assert [p.name for p in kr8s_api.get("pods", namespace=NS)] == ["db"]


def test_kr8s_watch_and_custom_resource_status(kr8s_api: kr8s.Api, server: ApiServer) -> None:
    """kr8s's watch sees ADDED, MODIFIED and DELETED for one pod (kubernetes.io "API
    Concepts", watch); a custom resource class made by ``new_class`` is found by its
    plural and short name through discovery, and its status is written through the status
    subresource (a merge patch of ``/status``: only status changes)."""
    events: list[tuple[str, str]] = []
    since = server.cluster.resource_version  # what a list now would answer

    def watch() -> None:
        for kind, obj in kr8s_api.watch("pods", namespace=NS, since=since):
            events.append((kind, obj.name))
            if kind == "DELETED":
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    pod = _kr8s_pod(kr8s_api, "w")
    pod.create()
    pod.label(seen="yes")
    pod.delete()
    watcher.join(15)
    assert not watcher.is_alive(), f"the watch did not see the delete: {events}"
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]

    network_class = new_class("PodNetwork", version=f"{GROUP}/{VERSION}", namespaced=True)
    network = network_class({"metadata": {"name": "pn1"}, "spec": PN_SPEC}, namespace=NS,
                            api=kr8s_api)
    network.create()
    network.patch({"status": {"phase": "Allocated"}, "spec": {"podName": "ignored"}},
                  subresource="status", type="merge")
    network.refresh()
    assert network.raw["status"] == {"phase": "Allocated"}
    assert network.raw["spec"] == PN_SPEC
    assert [o.name for o in kr8s_api.get("pn", namespace=NS)] == ["pn1"]
    assert [o.name for o in kr8s_api.get("podnetworks", namespace=NS)] == ["pn1"]
