"""The emulator validates built-in objects as kube-apiserver does, and publishes the
schemas it validates with as ``/openapi/v2`` and ``/openapi/v3``: driven by the official
client and kubectl, each test names where upstream (kubernetes/kubernetes) answers so."""

from __future__ import annotations

import http.client
import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podnet.sim.apiserver import ApiServer
from podnet.sim.builtin_schema import schemas
from podnet.sim.openapi import PROTOBUF_V2

REPO = Path(__file__).resolve().parent.parent
KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def core(server: ApiServer) -> Iterator[client.CoreV1Api]:
    with client.ApiClient(client.Configuration(host=server.url)) as api:
        yield client.CoreV1Api(api)


@pytest.fixture
def ns(core: client.CoreV1Api, request: pytest.FixtureRequest) -> Iterator[str]:
    name = "t-" + request.node.name.removeprefix("test_").replace("_", "-")[:50].strip("-")
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_namespace(name, grace_period_seconds=0)


def send(server: ApiServer, method: str, path: str, body: Any,
         ctype: str = "application/json") -> tuple[int, Any, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request(method, path, body=json.dumps(body), headers={"Content-Type": ctype})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None, resp


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "app", "image": "demo:1"}], **spec}}


def refused(call: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as info:
        call()
    return info.value.status, json.loads(info.value.body)


def causes(status: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in status["details"]["causes"]]


# --- the schema file -------------------------------------------------------------------


def test_the_vendored_schema_is_what_the_script_writes() -> None:
    """sim/openapi-v1.32.json is generated from kubernetes-validate's copy of upstream's
    api/openapi-spec/swagger.json (v1.32.0) by scripts/gen_builtin_openapi.py."""
    spec = importlib.util.spec_from_file_location(
        "gen_builtin_openapi", REPO / "scripts" / "gen_builtin_openapi.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    shipped = (REPO / "sim" / "openapi-v1.32.json").read_text(encoding="utf-8")
    assert gen.render() == shipped, "run scripts/gen_builtin_openapi.py"
    loaded = schemas()
    assert loaded.version == "v1.32.0"
    pod_spec = loaded.definitions["io.k8s.api.core.v1.PodSpec"]
    assert pod_spec["properties"]["containers"]["x-kubernetes-patch-merge-key"] == "name"


# --- validation.go ---------------------------------------------------------------------


def test_a_pod_breaking_validation_go_is_422_with_every_cause(
        server: ApiServer, ns: str) -> None:
    """ValidatePodCreate -> ValidatePodSpec (pkg/apis/core/validation/validation.go):
    validateContainers (name Required, Duplicate across init and regular containers, image
    Required), validateRestartPolicy and validateDNSPolicy (NotSupported, upstream's value
    order), validateContainerPorts (protocol from sets.List: sorted); ValidateLabels
    (apimachinery metav1 validation): the error names the map, not the key."""
    body = pod("bad", restartPolicy="Sometimes", dnsPolicy="Cluster",
               initContainers=[{"name": "app", "image": "init"}],
               containers=[{"name": "app", "image": "demo:1",
                            "ports": [{"containerPort": 80, "protocol": "HTTP"}]},
                           {"image": "x"}, {"name": "side"}])
    body["metadata"]["labels"] = {"team": "a b", "x" * 64: "v"}
    path = f"/api/v1/namespaces/{ns}/pods"
    code, status, _ = send(server, "POST", path, body)
    assert code == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Pod" and status["details"]["name"] == "bad"
    found = causes(status)
    assert ("spec.containers[0].name", "FieldValueDuplicate") in found
    assert ("spec.containers[1].name", "FieldValueRequired") in found
    assert ("spec.containers[2].image", "FieldValueRequired") in found
    assert ("spec.containers[0].ports[0].protocol", "FieldValueNotSupported") in found
    assert ("spec.restartPolicy", "FieldValueNotSupported") in found
    assert ("spec.dnsPolicy", "FieldValueNotSupported") in found
    assert found.count(("metadata.labels", "FieldValueInvalid")) == 2
    by_field = {c["field"]: c["message"] for c in status["details"]["causes"]}
    assert by_field["spec.restartPolicy"] == (
        'Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"')
    assert by_field["spec.containers[0].ports[0].protocol"] == (
        'Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"')
    assert by_field["spec.containers[0].name"] == 'Duplicate value: "app"'
    assert status["message"].startswith('Pod "bad" is invalid: [')
    code, status, _ = send(server, "POST", path, pod("empty", containers=[]))
    assert (code, causes(status)) == (422, [("spec.containers", "FieldValueRequired")])


def test_names_labels_and_annotations_follow_apimachinery(
        core: client.CoreV1Api, ns: str) -> None:
    """NameIsDNSSubdomain for pods, ValidateNamespaceName (a DNS label) for namespaces
    (IsDNS1123Subdomain / IsDNS1123Label with RegexError's wording); IsValidLabelValue
    (63 characters); ValidateAnnotations' total of 256 KiB (TotalAnnotationSizeLimitB,
    field.TooLong)."""
    code, status = refused(lambda: core.create_namespaced_pod(ns, pod("Web_1")))
    assert (code, causes(status)) == (422, [("metadata.name", "FieldValueInvalid")])
    assert "a lowercase RFC 1123 subdomain must consist of" in status["message"]
    assert "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]" in (
        json.dumps(status["message"]))
    code, status = refused(lambda: core.create_namespace({"metadata": {"name": "a.b"}}))
    assert (code, causes(status)) == (422, [("metadata.name", "FieldValueInvalid")])
    assert "RFC 1123 label" in status["message"]
    body = pod("long-label")
    body["metadata"]["labels"] = {"app": "v" * 64}
    code, status = refused(lambda: core.create_namespaced_pod(ns, body))
    assert status["details"]["causes"][0]["message"].endswith(
        ": must be no more than 63 characters")
    body = pod("big")
    body["metadata"]["annotations"] = {"a": "x" * (256 * 1024)}
    code, status = refused(lambda: core.create_namespaced_pod(ns, body))
    assert (code, causes(status)) == (422, [("metadata.annotations", "FieldValueTooLong")])
    assert status["details"]["causes"][0]["message"] == (
        "Too long: may not be more than 262144 bytes")
    body["metadata"]["annotations"] = {"a": "x" * (256 * 1024 - 1)}
    assert core.create_namespaced_pod(ns, body).metadata.name == "big"


def test_a_value_of_the_wrong_type_is_a_400_decoding_error(
        server: ApiServer, ns: str) -> None:
    """The create handler's transformDecodeError (staging/src/k8s.io/apiserver/pkg/
    endpoints/handlers/create.go): 400 "<Kind> in version "v1" cannot be handled as a
    <Kind>: " and the JSON decoder's UnmarshalTypeError (Go struct, JSON path without
    indexes, Go type). A patched object that does not decode: the patcher's 422 on
    ``patch`` (handlers/patch.go, applyPatchToCurrentObject)."""
    path = f"/api/v1/namespaces/{ns}/pods"
    code, status, _ = send(server, "POST", path,
                           pod("p", terminationGracePeriodSeconds="30"))
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into '
        "Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64")
    bad = pod("p")
    bad["spec"]["containers"][0]["image"] = 7
    code, status, _ = send(server, "POST", path, bad)
    assert code == 400 and status["message"].endswith(
        "cannot unmarshal number into Go struct field Container.spec.containers.image of type "
        "string")
    assert send(server, "POST", path, pod("p"))[0] == 201
    code, status, _ = send(server, "PATCH", f"{path}/p",
                           {"spec": {"activeDeadlineSeconds": True}},
                           "application/merge-patch+json")
    assert (code, status["reason"]) == (422, "Invalid")
    assert causes(status) == [("patch", "FieldValueInvalid")]
    assert status["message"].endswith(
        "json: cannot unmarshal bool into Go struct field PodSpec.spec.activeDeadlineSeconds "
        "of type int64")


def test_unknown_fields_are_pruned_with_a_warning_or_refused_when_strict(
        server: ApiServer, core: client.CoreV1Api, ns: str) -> None:
    """Built-in objects decode into Go structs: unknown fields are dropped, named in a
    299 warning with fieldValidation Warn (the default), a strict decoding error (400) with
    Strict (handlers/create.go; the paths are kjson's, with list indexes). Unknown keys in
    a status write are pruned the same way."""
    path = f"/api/v1/namespaces/{ns}/pods"
    body = pod("p")
    body["spec"]["bogus"] = 1
    body["spec"]["containers"][0]["extra"] = "x"
    code, stored, resp = send(server, "POST", path, body)
    assert code == 201
    assert resp.headers.get_all("Warning") == [  # in the body's order
        '299 - "unknown field \\"spec.containers[0].extra\\""',
        '299 - "unknown field \\"spec.bogus\\""',
    ]
    assert "bogus" not in stored["spec"] and "extra" not in stored["spec"]["containers"][0]
    body["metadata"]["name"] = "q"
    code, status, _ = send(server, "POST", path + "?fieldValidation=Strict", body)
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown '
        'field "spec.containers[0].extra", unknown field "spec.bogus"')
    code, patched, resp = send(server, "PATCH", f"{path}/p/status",
                               {"status": {"phase": "Running", "madeUp": True}},
                               "application/merge-patch+json")
    assert code == 200 and patched["status"]["phase"] == "Running"
    assert "madeUp" not in patched["status"]
    assert resp.headers.get("Warning") == '299 - "unknown field \\"status.madeUp\\""'
    assert "madeUp" not in core.read_namespaced_pod_status("p", ns).to_dict()["status"]


def test_a_pod_update_may_change_only_what_validate_pod_update_allows(
        core: client.CoreV1Api, ns: str) -> None:
    """ValidatePodUpdate (validation.go): images, activeDeadlineSeconds (only lower),
    tolerations (additions only: validateOnlyAddedTolerations) may change; anything else,
    spec.nodeName included (set only through the binding subresource), is Forbidden on
    ``spec`` with "pod updates may not change fields other than ..."; containers may not
    be added (ValidateContainerUpdates)."""
    core.create_namespaced_pod(ns, pod("p", nodeName="n1", activeDeadlineSeconds=60,
                                       tolerations=[{"key": "a", "operator": "Exists"}]))
    done = core.patch_namespaced_pod("p", ns, {"spec": {
        "containers": [{"name": "app", "image": "demo:2"}],
        "activeDeadlineSeconds": 30,
        "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}],
    }})
    assert done.spec.containers[0].image == "demo:2" and len(done.spec.tolerations) == 2
    code, status = refused(lambda: core.patch_namespaced_pod(
        "p", ns, {"spec": {"nodeName": "n2"}}))
    assert (code, causes(status)) == (422, [("spec", "FieldValueForbidden")])
    assert status["details"]["causes"][0]["message"].startswith(
        "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
        "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
        "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to "
        "be set to 1 if it was previously negative)")
    code, status = refused(lambda: core.patch_namespaced_pod(
        "p", ns, {"spec": {"terminationGracePeriodSeconds": 5}}))
    assert causes(status) == [("spec", "FieldValueForbidden")]
    code, status = refused(lambda: core.patch_namespaced_pod(
        "p", ns, {"spec": {"activeDeadlineSeconds": 90}}))
    assert causes(status) == [("spec.activeDeadlineSeconds", "FieldValueInvalid")]
    assert "must be less than or equal to previous value" in status["message"]
    current = core.read_namespaced_pod("p", ns)
    current.spec.tolerations = []
    code, status = refused(lambda: core.replace_namespaced_pod("p", ns, current))
    assert causes(status) == [("spec.tolerations", "FieldValueForbidden")]
    code, status = refused(lambda: core.patch_namespaced_pod("p", ns, {"spec": {
        "containers": [{"name": "app", "image": "demo:2"}, {"name": "two", "image": "x"}]}}))
    assert causes(status) == [("spec.containers", "FieldValueForbidden")]
    assert "pod updates may not add or remove containers" in status["message"]


def test_pod_ips_are_checked_and_pod_ip_is_the_first_of_pod_ips(
        server: ApiServer, ns: str) -> None:
    """validatePodIPs (validation.go, from ValidatePodStatusUpdate): each a valid IP, at
    most one per family, no duplicates; Convert_v1_PodStatus_To_core_PodStatus: podIP and
    podIPs[0] agree (podIP wins). A terminal phase stays terminal."""
    path = f"/api/v1/namespaces/{ns}/pods"
    assert send(server, "POST", path, pod("p", nodeName="n1"))[0] == 201
    status_path, merge = f"{path}/p/status", "application/merge-patch+json"
    code, status, _ = send(server, "PATCH", status_path,
                           {"status": {"podIPs": [{"ip": "10.0.0.300"}]}}, merge)
    assert (code, causes(status)) == (422, [("status.podIPs[0]", "FieldValueInvalid")])
    assert "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)" in status["message"]
    code, status, _ = send(server, "PATCH", status_path,
                           {"status": {"podIPs": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]}},
                           merge)
    assert (code, causes(status)) == (422, [("status.podIPs", "FieldValueInvalid")])
    assert "may specify no more than one IP for each IP family" in status["message"]
    code, done, _ = send(server, "PATCH", status_path, {"status": {
        "podIP": "10.0.0.5", "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}]}}, merge)
    assert code == 200 and [p["ip"] for p in done["status"]["podIPs"]] == ["10.0.0.5", "fd00::5"]
    code, done, _ = send(server, "PATCH", status_path, {"status": {"podIP": "10.0.0.9"}}, merge)
    assert done["status"]["podIPs"] == [{"ip": "10.0.0.9"}]
    send(server, "PATCH", status_path, {"status": {"phase": "Succeeded"}}, merge)
    code, status, _ = send(server, "PATCH", status_path, {"status": {"phase": "Running"}}, merge)
    assert (code, causes(status)) == (422, [("status.phase", "FieldValueForbidden")])


def test_node_and_lease_rules(core: client.CoreV1Api, server: ApiServer, ns: str) -> None:
    """ValidateNode / ValidateNodeUpdate (validation.go): podCIDRs valid, one per family,
    changed only from unset; taint effects from their enum. ValidateLeaseSpec
    (pkg/apis/coordination/validation/validation.go): leaseDurationSeconds > 0."""
    code, status = refused(lambda: core.create_node({"metadata": {"name": "bad-node"}, "spec": {
        "podCIDRs": ["10.1.0.0/33"], "taints": [{"key": "k", "effect": "Sometimes"}]}}))
    assert causes(status) == [("spec.podCIDRs[0]", "FieldValueInvalid"),
                              ("spec.taints[0].effect", "FieldValueNotSupported")]
    node = core.create_node({"metadata": {"name": "vn1"},
                             "spec": {"podCIDRs": ["10.1.0.0/24"]}})
    try:
        assert node.spec.pod_cidr == "10.1.0.0/24"  # the first of podCIDRs
        code, status = refused(lambda: core.patch_node(
            "vn1", {"spec": {"podCIDRs": ["10.2.0.0/24"], "podCIDR": "10.2.0.0/24"}}))
        assert causes(status) == [("spec.podCIDRs", "FieldValueForbidden")]
    finally:
        core.delete_node("vn1")
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    code, status, _ = send(server, "POST", path, {
        "metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 0}})
    assert (code, causes(status)) == (422, [("spec.leaseDurationSeconds", "FieldValueInvalid")])
    assert status["message"] == (
        'Lease.coordination.k8s.io "l" is invalid: spec.leaseDurationSeconds: Invalid value: '
        "0: must be greater than 0")


# --- openapi ---------------------------------------------------------------------------


def test_openapi_documents_are_served_as_upstream(server: ApiServer) -> None:
    """kube-openapi's handlers: /openapi/v2 as JSON or gnostic protobuf (406 otherwise),
    /openapi/v3 an index of group-versions (serverRelativeURL with a hash), each document
    holding the kinds by x-kubernetes-group-version-kind, the CRDs' schemas included."""
    def get(path: str, accept: str) -> tuple[int, str, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.request("GET", path, headers={"Accept": accept})
        resp = conn.getresponse()
        body = resp.read()
        conn.close()
        return resp.status, resp.headers.get("Content-Type", ""), body

    code, ctype, body = get("/openapi/v2", "application/json")
    v2 = json.loads(body)
    assert code == 200 and v2["swagger"] == "2.0"
    assert "io.k8s.api.core.v1.Pod" in v2["definitions"]
    assert v2["definitions"]["io.podnet.v1alpha1.PodNetwork"][
        "x-kubernetes-group-version-kind"] == [
        {"group": "podnet.io", "version": "v1alpha1", "kind": "PodNetwork"}]
    code, ctype, body = get("/openapi/v2", PROTOBUF_V2)
    assert code == 200 and ctype == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    assert body.startswith(b"\n\x032.0") and b"io.k8s.api.core.v1.PodSpec" in body
    assert get("/openapi/v2", "text/html")[0] == 406
    index = json.loads(get("/openapi/v3", "application/json")[2])["paths"]
    assert {"api/v1", "apis/coordination.k8s.io/v1", "apis/podnet.io/v1alpha1"} <= set(index)
    url = index["api/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/api/v1?hash=")
    doc = json.loads(get(url, "application/json")[2])
    pod_schema = doc["components"]["schemas"]["io.k8s.api.core.v1.Pod"]
    assert pod_schema["properties"]["spec"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.api.core.v1.PodSpec"}]
    assert "io.k8s.api.coordination.v1.Lease" not in doc["components"]["schemas"]


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Any:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
               str(tmp_path / "cache"), "--request-timeout=5s", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)

    return run


@needs_kubectl
def test_kubectl_explain_reads_the_published_schemas(kubectl: Any) -> None:
    """kubectl explain reads /openapi/v3 (kubectl's explain/v2, the default since 1.27)."""
    done = kubectl("explain", "pod")
    assert done.returncode == 0, done.stderr
    assert "KIND:       Pod" in done.stdout and "spec\t<PodSpec>" in done.stdout
    done = kubectl("explain", "pod.spec.containers")
    assert done.returncode == 0, done.stderr
    assert "FIELD: containers <[]Container>" in done.stdout and "image\t<string>" in done.stdout
    done = kubectl("explain", "podnetworks.spec")
    assert done.returncode == 0, done.stderr
    assert "nodeName" in done.stdout


@needs_kubectl
def test_kubectl_create_of_a_list_validates_client_side_against_openapi_v2(
        kubectl: Any, tmp_path: Path, core: client.CoreV1Api, ns: str) -> None:
    """A List has no PATCH operation in /openapi/v3, so kubectl validates it itself
    against /openapi/v2 (kubectl's pkg/validation, schemaValidation.validateList), as with
    a real server: an unknown field fails before anything is sent; a clean List is
    created."""
    items = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
         "data": {"k": "v"}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web"},
         "spec": {"containers": [{"name": "app", "image": "demo:1", "bogus": 1}]}},
    ]
    manifest = tmp_path / "list.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    done = kubectl("create", "-n", ns, "-f", str(manifest))
    assert done.returncode == 1
    assert ('ValidationError(Pod.spec.containers[0]): unknown field "bogus" in '
            "io.k8s.api.core.v1.Container") in done.stderr
    assert core.list_namespaced_config_map(ns).items == []
    del items[1]["spec"]["containers"][0]["bogus"]
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    done = kubectl("create", "-n", ns, "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    assert "configmap/cfg created" in done.stdout and "pod/web created" in done.stdout


@needs_kubectl
def test_kubectl_apply_validate_strict_is_refused_by_the_server(
        kubectl: Any, tmp_path: Path, ns: str) -> None:
    """kubectl apply --validate=strict sends fieldValidation=Strict (the server declares
    the parameter in /openapi/v3): a new object with an unknown field is 400 (a strict
    decoding error, handlers/create.go); an existing one patched with it is 422 on
    ``patch`` (handlers/patch.go). --validate=warn prints the server's warning."""
    manifest = tmp_path / "pod.json"
    body = pod("web")
    body["spec"]["containers"][0]["bogus"] = 1
    manifest.write_text(json.dumps(body))
    done = kubectl("apply", "-n", ns, "--validate=strict", "-f", str(manifest))
    assert done.returncode == 1
    assert ('Error from server (BadRequest): error when creating "' in done.stderr
            and 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
            'unknown field "spec.containers[0].bogus"' in done.stderr)
    done = kubectl("apply", "-n", ns, "--validate=warn", "-f", str(manifest))
    assert done.returncode == 0, done.stderr
    assert 'Warning: unknown field "spec.containers[0].bogus"' in done.stderr
    body["spec"]["containers"][0]["image"] = "demo:2"
    manifest.write_text(json.dumps(body))
    done = kubectl("apply", "-n", ns, "--validate=strict", "-f", str(manifest))
    assert done.returncode == 1
    assert 'strict decoding error: unknown field "spec.containers[0].bogus"' in done.stderr


def test_a_create_is_decoded_before_it_is_validated_and_all_causes_come_together(
        server: ApiServer, ns: str) -> None:
    """The create handler decodes first (a type error is 400 whatever else is wrong),
    then rest.BeforeCreate runs the strategy's Validate, whose field.ErrorList carries
    the name's error beside the spec's (ValidateObjectMeta + ValidatePodSpec)."""
    path = f"/api/v1/namespaces/{ns}/pods"
    body = pod("Bad_Name", containers=[])
    code, status, _ = send(server, "POST", path, body)
    assert (code, causes(status)) == (422, [("metadata.name", "FieldValueInvalid"),
                                            ("spec.containers", "FieldValueRequired")])
    body["spec"]["priority"] = "high"
    code, status, _ = send(server, "POST", path, body)
    assert (code, status["reason"]) == (400, "BadRequest")
