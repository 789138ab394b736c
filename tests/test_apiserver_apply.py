"""Server-side apply, ``metadata.managedFields`` and ``metadata.generation`` in the API
emulator, driven by kubectl 1.32, the official client and lightkube; each test names
where upstream (kubernetes/kubernetes, sigs.k8s.io/structured-merge-diff) answers so."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podnet.core.cluster.port import STATEFUL_SET
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
GROUP, VERSION = "podnet.io", "v1alpha1"


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server: ApiServer) -> Iterator[client.ApiClient]:
    with client.ApiClient(client.Configuration(host=server.url)) as api:
        yield api


@pytest.fixture
def ns(api: client.ApiClient, request: pytest.FixtureRequest) -> Iterator[str]:
    core = client.CoreV1Api(api)
    name = "a-" + request.node.name.removeprefix("test_").replace("_", "-")[:50].strip("-")
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name, grace_period_seconds=0)


@pytest.fixture(scope="module")
def kubeconfig(server: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "config"
    server.write_kubeconfig(path)
    return path


def send(server: ApiServer, method: str, path: str, body: Any, ctype: str = APPLY,
         ) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"Content-Type": ctype})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None
            ) -> subprocess.CompletedProcess[str]:
    assert KUBECTL is not None
    return subprocess.run([KUBECTL, "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=30)


def config_map(name: str, ns: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns}, "data": data}


def managers(obj: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(e["manager"], e["operation"]): e["fieldsV1"]
            for e in obj["metadata"].get("managedFields", [])}


# --- kubectl apply --server-side -------------------------------------------------------


@needs_kubectl
def test_kubectl_server_side_apply_conflicts_force_and_removal(kubeconfig: Path, ns: str,
                                                               api: client.ApiClient) -> None:
    """kubectl apply --server-side: the first apply creates the object and records an
    Apply entry (fieldmanager.Apply; FieldsV1 as SMD's fieldpath serialises a set); a
    second manager changing a field the first owns fails with upstream's 409 message
    (fieldmanager/internal/conflict.go); --force-conflicts takes the field over; a field
    the manager stops applying goes when no one else owns it and stays when someone does
    (SMD merge/update.go, Updater.prune)."""
    manifest = json.dumps(config_map("conf", ns, a="1", b="2", c="3"))
    done = kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=manifest)
    assert done.returncode == 0, done.stderr
    core = client.CoreV1Api(api)
    made = core.api_client.sanitize_for_serialization(core.read_namespaced_config_map("conf", ns))
    entry = made["metadata"]["managedFields"][0]
    assert (entry["manager"], entry["operation"], entry["apiVersion"],
            entry["fieldsType"]) == ("kubectl", "Apply", "v1", "FieldsV1")
    assert entry["fieldsV1"] == {"f:data": {"f:a": {}, "f:b": {}, "f:c": {}}} and entry["time"]

    other = json.dumps(config_map("conf", ns, a="changed", c="3"))
    refused = kubectl(kubeconfig, "apply", "--server-side", "--field-manager", "other",
                      "-f", "-", stdin=other)
    assert refused.returncode == 1
    assert 'Apply failed with 1 conflict: conflict with "kubectl": .data.a' in refused.stderr
    forced = kubectl(kubeconfig, "apply", "--server-side", "--field-manager", "other",
                     "--force-conflicts", "-f", "-", stdin=other)
    assert forced.returncode == 0, forced.stderr
    shown = kubectl(kubeconfig, "get", "configmap", "conf", "-n", ns, "-o", "json",
                    "--show-managed-fields")
    owners = managers(json.loads(shown.stdout))
    assert owners[("kubectl", "Apply")] == {"f:data": {"f:b": {}, "f:c": {}}}
    assert owners[("other", "Apply")] == {"f:data": {"f:a": {}, "f:c": {}}}
    # kubectl no longer applies b (only it owns b) nor c (co-owned with "other")
    dropped = json.dumps(config_map("conf", ns))
    done = kubectl(kubeconfig, "apply", "--server-side", "-f", "-", stdin=dropped)
    assert done.returncode == 0, done.stderr
    assert core.read_namespaced_config_map("conf", ns).data == {"a": "changed", "c": "3"}
    hidden = kubectl(kubeconfig, "get", "configmap", "conf", "-n", ns, "-o", "json")
    assert "managedFields" not in json.loads(hidden.stdout)["metadata"]  # kubectl strips


@needs_kubectl
def test_updates_are_recorded_and_an_apply_conflicts_with_an_updater(
        kubeconfig: Path, ns: str, server: ApiServer) -> None:
    """Every write records its manager as an Update (fieldmanager.UpdateNoErrors); kubectl
    names it (``kubectl-create``, ``kubectl-label``), another client's defaults to its
    User-Agent up to the first "/" (prefixFromUserAgent); an apply over an updater's field
    names it with its apiVersion (conflict.go printManager); an update takes fields over
    from an applier without a conflict (Updater.Update forces)."""
    done = kubectl(kubeconfig, "create", "configmap", "made", "-n", ns, "--from-literal=k=v")
    assert done.returncode == 0, done.stderr
    done = kubectl(kubeconfig, "label", "configmap", "made", "-n", ns, "team=a")
    assert done.returncode == 0, done.stderr
    got = json.loads(kubectl(kubeconfig, "get", "cm", "made", "-n", ns, "-o", "json",
                             "--show-managed-fields").stdout)
    owners = managers(got)
    assert owners[("kubectl-create", "Update")] == {"f:data": {".": {}, "f:k": {}}}
    assert owners[("kubectl-label", "Update")] == {
        "f:metadata": {"f:labels": {".": {}, "f:team": {}}}}
    status, body = send(server, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/made"
                        "?fieldManager=mine",
                        config_map("made", ns, k="other"))
    assert status == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Apply failed with 1 conflict: conflict with "kubectl-create" '
                               "using v1: .data.k")
    assert body["details"]["causes"] == [{"type": "FieldManagerConflict",
                                          "message": 'conflict with "kubectl-create" using v1',
                                          "field": ".data.k"}]
    status, _ = send(server, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/made"
                     "?fieldManager=mine", config_map("made", ns, extra="1"))
    assert status == 200
    # a merge patch by a client without a manager: its User-Agent's product
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("PATCH", f"/api/v1/namespaces/{ns}/configmaps/made",
                 body=json.dumps({"data": {"extra": "2"}}),
                 headers={"Content-Type": MERGE, "User-Agent": "tool/1.0 (linux)"})
    patched = json.loads(conn.getresponse().read())
    conn.close()
    owners = managers(patched)
    assert owners[("tool", "Update")] == {"f:data": {"f:extra": {}}}
    assert ("mine", "Apply") not in owners  # it owned only extra, now the updater's


def test_apply_options_are_validated(server: ApiServer, ns: str) -> None:
    """ValidatePatchOptions (apimachinery meta/v1/validation): an apply without a
    fieldManager, and ``force`` on another patch type, are 422 on PatchOptions; an apply
    of another version is 400 (fieldmanager's "Incorrect version specified"); an apply
    carrying a stale resourceVersion is the update's 409 (the patcher's precondition)."""
    path = f"/api/v1/namespaces/{ns}/configmaps/opts"
    status, body = send(server, "PATCH", path, config_map("opts", ns, a="1"))
    assert status == 422 and body["details"]["kind"] == "PatchOptions"
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                               "Required value: is required for apply patch")
    status, body = send(server, "PATCH", path + "?force=true", {"data": {}}, MERGE)
    assert status == 422
    assert body["message"] == ('PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: '
                               "may not be specified for non-apply patch")
    wrong = {**config_map("opts", ns), "apiVersion": "v2"}
    status, body = send(server, "PATCH", path + "?fieldManager=m", wrong)
    assert status == 400 and body["message"] == (
        "Incorrect version specified in apply patch. Specified patch version: v2, "
        "expected: v1")
    # YAML bodies, as kubectl sends them; a new object is 201 Created
    yaml_body = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: opts\n  namespace: {ns}\n"
    status, body = send(server, "PATCH", path + "?fieldManager=m",
                        (yaml_body + "data:\n  a: '1'\n").encode())
    assert status == 201 and body["data"] == {"a": "1"}
    # a resourceVersion in the configuration is a precondition (the update's 409)
    stale = config_map("opts", ns, a="2")
    stale["metadata"]["resourceVersion"] = "1"
    status, body = send(server, "PATCH", path + "?fieldManager=m", stale)
    assert status == 409 and "the object has been modified" in body["message"]


def test_list_types_merge_as_the_schema_says(server: ApiServer, ns: str) -> None:
    """SMD merges by the schema's markers: ``metadata.finalizers`` is a set (each
    manager's items kept, ``v:`` elements), ``spec.containers`` a map keyed by name
    (``k:{"name":...}``), ``spec.tolerations`` atomic (one manager owns the whole list,
    so another's apply conflicts on ``.spec.tolerations``) (vendored v1.32 OpenAPI's
    x-kubernetes-list-type markers)."""
    path = f"/api/v1/namespaces/{ns}/pods/web"
    base = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "finalizers": ["x.io/a"]},
            "spec": {"containers": [{"name": "app", "image": "demo:1"}],
                     "tolerations": [{"key": "k", "operator": "Exists"}]}}
    status, made = send(server, "PATCH", path + "?fieldManager=one", base)
    assert status == 201, made
    fields = managers(made)[("one", "Apply")]
    assert fields["f:metadata"] == {"f:finalizers": {'v:"x.io/a"': {}}}
    assert fields["f:spec"]["f:containers"] == {
        'k:{"name":"app"}': {".": {}, "f:image": {}, "f:name": {}}}
    assert fields["f:spec"]["f:tolerations"] == {}
    second = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "web", "finalizers": ["x.io/b"]}}
    status, both = send(server, "PATCH", path + "?fieldManager=two", second)
    assert status == 200 and both["metadata"]["finalizers"] == ["x.io/a", "x.io/b"]
    status, body = send(server, "PATCH", path + "?fieldManager=two",
                        {**second, "spec": {"tolerations": [{"key": "other"}]}})
    assert status == 409 and body["details"]["causes"][0]["field"] == ".spec.tolerations"
    # "one" stops applying its finalizer: it goes, "two"'s stays
    status, after = send(server, "PATCH", path + "?fieldManager=one",
                         {**base, "metadata": {"name": "web"}})
    assert status == 200 and after["metadata"]["finalizers"] == ["x.io/b"]
    send(server, "PATCH", path + "?fieldManager=two",
         {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"}})
    client_gone = send(server, "DELETE", path + "?gracePeriodSeconds=0", {}, "application/json")
    assert client_gone[0] == 200


def test_lightkube_apply_and_managed_fields_reset(server: ApiServer, ns: str,
                                                 kubeconfig: Path) -> None:
    """lightkube's ``PatchType.APPLY`` (its Client.apply); a client writing
    ``managedFields: [{}]`` strips them all, then the write's own changes are recorded;
    ``[]`` changes nothing (the server-side apply documentation, "Clearing
    managedFields")."""
    from lightkube import Client, KubeConfig
    from lightkube.models.meta_v1 import ObjectMeta
    from lightkube.resources.core_v1 import ConfigMap

    with Client(config=KubeConfig.from_file(kubeconfig), field_manager="lk") as lk:
        applied = lk.apply(ConfigMap(metadata=ObjectMeta(name="lk", namespace=ns),
                                     data={"k": "v"}))
        assert applied.metadata.managedFields[0].manager == "lk"
        assert applied.metadata.managedFields[0].operation == "Apply"
    path = f"/api/v1/namespaces/{ns}/configmaps/lk"
    status, kept = send(server, "PATCH", path, {"metadata": {"managedFields": []}}, MERGE)
    assert status == 200 and [e["manager"] for e in kept["metadata"]["managedFields"]] == ["lk"]
    status, stripped = send(server, "PATCH", path, {"metadata": {"managedFields": [{}]}},
                            MERGE)
    assert status == 200 and "managedFields" not in stripped["metadata"]
    # a reset with other changes: the writer then owns what it changed
    status, again = send(server, "PATCH", path + "?fieldManager=edit",
                         {"metadata": {"managedFields": [{}]}, "data": {"k": "w"}}, MERGE)
    assert status == 200 and managers(again) == {("edit", "Update"): {"f:data": {"f:k": {}}}}


def test_official_client_apply_to_a_custom_resource_and_its_status(
        api: client.ApiClient, ns: str) -> None:
    """Apply works on custom resources by their structural schema, on the main resource
    and on ``/status`` (the status entry records ``subresource: status``; a main-resource
    apply owns no status and a status apply no spec: the custom resource strategies'
    GetResetFields); generation bumps on a spec change and not on status
    (customResourceStrategy.PrepareForUpdate)."""
    co = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork",
            "metadata": {"name": "web", "namespace": ns},
            "spec": {"podName": "web", "podUid": "uid-1", "nodeName": "n1",
                     "provider": "reference"}}
    co.patch_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "web", body,
                                      field_manager="ctl", _content_type=APPLY)
    # (the apply that creates is answered 201, which this client method does not decode)
    made = co.get_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "web")
    assert made["metadata"]["generation"] == 1
    assert "f:status" not in managers(made)[("ctl", "Apply")]
    status_cfg = {**body, "status": {"phase": "Allocated", "ip": "10.0.0.5"}}
    done = co.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, "podnetworks", "web", status_cfg, field_manager="agent",
        _content_type=APPLY)
    assert done["status"]["phase"] == "Allocated" and done["metadata"]["generation"] == 1
    entry = next(e for e in done["metadata"]["managedFields"] if e["manager"] == "agent")
    assert entry["subresource"] == "status" and list(entry["fieldsV1"]) == ["f:status"]
    with pytest.raises(ApiException) as info:
        co.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, "podnetworks", "web",
            {**body, "status": {"phase": "Failed"}}, field_manager="other",
            _content_type=APPLY)
    assert info.value.status == 409
    assert json.loads(info.value.body)["message"] == (
        'Apply failed with 1 conflict: conflict with "agent" with subresource "status": '
        ".status.phase")
    changed = co.patch_namespaced_custom_object(
        GROUP, VERSION, ns, "podnetworks", "web",
        {**body, "spec": {**body["spec"], "sticky": True}}, field_manager="ctl",
        _content_type=APPLY)
    assert changed["metadata"]["generation"] == 2 and changed["status"]["phase"] == "Allocated"


# --- fidelity leftovers ----------------------------------------------------------------


def test_generation_only_where_the_strategy_keeps_it(api: client.ApiClient, ns: str) -> None:
    """v1.32's registry strategies: pods get no ``metadata.generation`` (podStrategy sets
    it from v1.33), nor configmaps or namespaces; custom resources do, and a delete held by
    a finalizer bumps it (registry/generic/registry/store.go, BeforeDelete's graceful
    path); the apps workloads bump it on spec changes (statefulset strategy)."""
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made = core.create_namespaced_pod(ns, {"metadata": {"name": "p", "generation": 5},
                                           "spec": {"containers": [{"name": "a",
                                                                    "image": "i"}]}})
    assert made.metadata.generation is None
    relabeled = core.patch_namespaced_pod("p", ns, {"metadata": {"labels": {"a": "b"}}})
    assert relabeled.metadata.generation is None
    assert core.create_namespaced_config_map(
        ns, {"metadata": {"name": "c"}}).metadata.generation is None
    assert core.read_namespace(ns).metadata.generation is None
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork",
            "metadata": {"name": "held", "finalizers": ["podnet.io/x"]},
            "spec": {"podName": "held", "podUid": "u", "nodeName": "n1",
                     "provider": "reference"}}
    co.create_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", body)
    co.delete_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "held")
    held = co.get_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "held")
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["generation"] == 2
    co.patch_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "held",
                                      {"metadata": {"finalizers": None}},
                                      _content_type=MERGE)
    store = InMemoryCluster()
    sts = store.create(STATEFUL_SET, {"metadata": {"name": "db", "namespace": "default"},
                                      "spec": {"replicas": 1}})
    assert sts["metadata"]["generation"] == 1
    sts["spec"]["replicas"] = 2
    assert store.update(STATEFUL_SET, sts)["metadata"]["generation"] == 2


def test_strict_patch_of_a_custom_resource_is_422_on_patch(api: client.ApiClient,
                                                           ns: str) -> None:
    """A patch whose result has an unknown field, with fieldValidation=Strict, is 422 on
    ``patch`` (handlers/patch.go applyPatchToCurrentObject: a strict decoding error of
    the patched object), as for the built-ins."""
    co = client.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork",
            "metadata": {"name": "s"},
            "spec": {"podName": "s", "podUid": "u", "nodeName": "n1", "provider": "reference"}}
    co.create_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", body)
    with pytest.raises(ApiException) as info:
        co.patch_namespaced_custom_object(GROUP, VERSION, ns, "podnetworks", "s",
                                          {"spec": {"colour": "red"}},
                                          field_validation="Strict", _content_type=MERGE)
    assert info.value.status == 422
    status = json.loads(info.value.body)
    assert status["details"]["causes"][0]["field"] == "patch"
    assert 'strict decoding error: unknown field "spec.colour"' in status["message"]


def test_several_conflicts_are_listed_by_manager(server: ApiServer, ns: str) -> None:
    """More than one conflict: "Apply failed with N conflicts: conflicts with <manager>:"
    then one "- <path>" line each, managers sorted (managedfields/internal/conflict.go,
    getConflictMessage), one FieldManagerConflict cause per field."""
    path = f"/api/v1/namespaces/{ns}/configmaps/many"
    assert send(server, "PATCH", path + "?fieldManager=first",
                config_map("many", ns, a="1", b="2"))[0] == 201
    status, body = send(server, "PATCH", path + "?fieldManager=second",
                        config_map("many", ns, a="x", b="y"))
    assert status == 409
    assert body["message"] == ('Apply failed with 2 conflicts: conflicts with "first":\n'
                               "- .data.a\n- .data.b")
    assert [c["field"] for c in body["details"]["causes"]] == [".data.a", ".data.b"]
    status, same = send(server, "PATCH", path + "?fieldManager=second",
                        config_map("many", ns, a="1"))
    assert status == 200  # the same value co-owns, without a conflict
    assert managers(same)[("second", "Apply")] == {"f:data": {"f:a": {}}}
