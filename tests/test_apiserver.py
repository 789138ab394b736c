"""The API server emulator against the official client, kubectl and its own CLI."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from podnet.core import models
from podnet.core.cluster.port import NODE, POD, POD_NETWORK, VMI
from podnet.core.convert import to_wire
from podnet.sim import schema
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster
from podnet.sim.resources import human_duration

GROUP, VERSION = "podnet.io", "v1alpha1"
MERGE = "application/merge-patch+json"
REPO = Path(__file__).resolve().parent.parent


def request(
    server: ApiServer,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body))
    sent = {"Content-Type": "application/json"} | (headers or {})
    conn.request(method, path, body=data, headers=sent)
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None, resp


def pod(name: str, node: str = "n1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **meta},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "demo"}]},
    }


def pn(name: str, node: str = "n1", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodNetwork",
        "metadata": {"name": name, **meta},
        "spec": {"podName": name, "podUid": "uid-1", "nodeName": node, "provider": "reference"},
    }


def create_pn(api: client.ApiClient, body: dict[str, Any], ns: str = "default") -> Any:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        GROUP, VERSION, ns, "podnetworks", body
    )


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


# --- discovery --------------------------------------------------------------------------


def test_discovery_lists_kinds_verbs_and_short_names(server: ApiServer) -> None:
    code, version, _ = request(server, "GET", "/version")
    assert code == 200 and version["major"] == "1" and version["gitVersion"].startswith("v1.")
    _, core, _ = request(server, "GET", "/api/v1")
    by_name = {r["name"]: r for r in core["resources"]}
    assert {"pods", "pods/status", "nodes", "nodes/status", "namespaces", "events"} <= set(by_name)
    assert by_name["pods"]["shortNames"] == ["po"] and by_name["pods"]["namespaced"] is True
    assert by_name["nodes"]["namespaced"] is False and "watch" in by_name["nodes"]["verbs"]
    assert by_name["pods/status"]["verbs"] == ["get", "patch", "update"]
    _, groups, _ = request(server, "GET", "/apis")
    versions = {v["groupVersion"] for g in groups["groups"] for v in g["versions"]}
    assert versions == {"coordination.k8s.io/v1", "podnet.io/v1alpha1", "apps/v1",
                        "events.k8s.io/v1", "k8s.cni.cncf.io/v1", "networking.k8s.io/v1",
                        "kubevirt.io/v1"}
    _, ours, _ = request(server, "GET", "/apis/podnet.io/v1alpha1")
    res = {r["name"]: r for r in ours["resources"]}
    assert res["podnetworks"]["shortNames"] == ["pn"] and res["podnetworks"]["namespaced"]
    assert res["nodenetworks"]["shortNames"] == ["nn"] and not res["nodenetworks"]["namespaced"]
    assert res["podnetworks"]["categories"] == ["podnet"]
    assert {"podnetworks/status", "nodenetworks/status"} <= set(res)
    assert {r: (res[r]["shortNames"], res[r]["namespaced"]) for r in
            ("subnets", "ippools", "securitygroups")} == {
        "subnets": (["pnsubnet"], False), "ippools": (["pnippool"], False),
        "securitygroups": (["pnsg"], False)}
    assert {"subnets/status", "ippools/status", "securitygroups/status"} <= set(res)
    code, _, _ = request(server, "GET", "/apis/podnet.io/v2")
    assert code == 404


def test_openapi_declares_server_side_field_validation(server: ApiServer) -> None:
    _, index, _ = request(server, "GET", "/openapi/v3")
    url = index["paths"]["apis/podnet.io/v1alpha1"]["serverRelativeURL"]
    _, doc, _ = request(server, "GET", url)
    op = doc["paths"]["/apis/podnet.io/v1alpha1/namespaces/{namespace}/podnetworks/{name}"]["patch"]
    assert op["x-kubernetes-group-version-kind"]["kind"] == "PodNetwork"
    assert "fieldValidation" in {p["name"] for p in op["parameters"]}


# --- the official client ----------------------------------------------------------------


def test_core_pods_and_nodes_round_trip(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    node = core.create_node({"metadata": {"name": "n1", "labels": {"zone": "a"}}})
    assert node.metadata.uid and node.metadata.resource_version
    created = core.create_namespaced_pod("default", pod("web"))
    assert created.metadata.namespace == "default" and created.spec.node_name == "n1"
    assert core.read_namespaced_pod("web", "default").metadata.uid == created.metadata.uid
    listed = core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["web"]
    assert int(listed.metadata.resource_version) >= int(created.metadata.resource_version)
    assert [n.metadata.name for n in core.list_node(label_selector="zone=a").items] == ["n1"]
    assert core.list_node(label_selector="zone=b").items == []
    deleted = core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    assert deleted.metadata.name == "web"
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("web", "default")
    assert err.value.status == 404 and status_of(err.value)["reason"] == "NotFound"
    core.delete_node("n1")
    assert core.list_node().items == []


def test_generate_name_is_honoured(api: client.ApiClient) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "web-"}
    made = client.CoreV1Api(api).create_namespaced_pod("default", body)
    assert made.metadata.name.startswith("web-") and len(made.metadata.name) == len("web-") + 5


def test_custom_objects_create_get_list_patch_and_status(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    created = create_pn(api, pn("web", labels={"podnet.io/node": "n1"}))
    assert created["metadata"]["generation"] == 1 and "status" not in created
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert got["spec"]["podUid"] == "uid-1"
    listed = co.list_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", label_selector="podnet.io/node=n1"
    )
    assert listed["kind"] == "PodNetworkList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["web"]
    patched = co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", "web",
        {"metadata": {"labels": {"x": "y"}}, "spec": {"sticky": True}},
        _content_type=MERGE,
    )
    assert patched["spec"]["sticky"] is True and patched["metadata"]["generation"] == 2
    status_body = {**patched, "status": {"phase": "Allocated", "ip": "10.0.0.5"}}
    updated = co.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", "podnetworks", "web", status_body
    )
    assert updated["status"] == {"phase": "Allocated", "ip": "10.0.0.5"}
    assert updated["metadata"]["generation"] == 2  # status writes leave generation alone
    # the main resource ignores status; the status subresource ignores the rest
    spec_change = {**updated, "spec": {**updated["spec"], "network": "blue"}, "status": {}}
    after = co.replace_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", "web", spec_change
    )
    assert after["spec"]["network"] == "blue" and after["status"]["phase"] == "Allocated"
    routed = co.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", "podnetworks", "web",
        {"status": {"phase": "Routed"}, "spec": {"network": "red"}},
        _content_type=MERGE,
    )
    assert routed["status"]["phase"] == "Routed" and routed["spec"]["network"] == "blue"


def test_strategic_patch_of_custom_object_is_415_as_upstream(api: client.ApiClient) -> None:
    # a real API server refuses strategic merge for custom resources; the client's default
    # for them is a merge patch
    co = client.CustomObjectsApi(api)
    create_pn(api, pn("web"))
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object(
            GROUP, VERSION, "default", "podnetworks", "web", {"spec": {"sticky": True}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    out = co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", "web", {"spec": {"sticky": True}}
    )
    assert out["spec"]["sticky"] is True
    # built-in kinds take it, and the client sends a dict patch to them as strategic
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("web", finalizers=["a/b"]))
    out = core.patch_namespaced_pod("web", "default", {"metadata": {"finalizers": ["c/d"]}})
    assert out.metadata.finalizers == ["a/b", "c/d"]  # merged as a set: strategic


def test_stale_resource_version_is_409(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    first = create_pn(api, pn("web"))
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", "web", {"spec": {"sticky": True}},
        _content_type=MERGE,
    )
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web", first)
    assert err.value.status == 409 and status_of(err.value)["reason"] == "Conflict"
    core = client.CoreV1Api(api)
    old = core.create_namespaced_pod("default", pod("web"))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_pod("web", "default", old)
    assert err.value.status == 409


def test_watch_sees_added_modified_deleted(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("web"))
    core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    w = watch.Watch()
    seen = []
    for ev in w.stream(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2):
        seen.append((ev["type"], ev["object"].metadata.name))
        if ev["type"] == "DELETED":
            w.stop()
    assert seen == [("ADDED", "web"), ("MODIFIED", "web"), ("DELETED", "web")]


def test_watch_streams_live_events_for_custom_objects(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    rv = co.list_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks")["metadata"][
        "resourceVersion"
    ]

    def write() -> None:
        time.sleep(0.2)
        create_pn(api, pn("web"))

    writer = threading.Thread(target=write)
    writer.start()
    w = watch.Watch()
    got = None
    for ev in w.stream(
        co.list_namespaced_custom_object, GROUP, VERSION, "default", "podnetworks",
        resource_version=rv, timeout_seconds=3,
    ):
        got = ev
        w.stop()
    writer.join()
    assert got is not None and got["type"] == "ADDED"
    assert got["object"]["metadata"]["name"] == "web"


def test_watch_from_compacted_resource_version_is_410(
    server: ApiServer, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("web"))
    code, _, _ = request(server, "POST", "/_podnet/faults", {"compact": True})
    assert code == 200
    # the official client turns the stream's ERROR event (code 410) into ApiException 410
    with pytest.raises(ApiException) as err:
        list(
            watch.Watch().stream(
                core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=2
            )
        )
    assert err.value.status == 410
    # on the wire: 200, then one ERROR event carrying a Status, as upstream
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}")
    resp = conn.getresponse()
    assert resp.status == 200
    events = [json.loads(line) for line in resp.read().splitlines()]
    conn.close()
    assert [e["type"] for e in events] == ["ERROR"]
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"


def test_watch_without_resource_version_starts_with_current_objects(server: ApiServer) -> None:
    server.cluster.create(POD, pod("web") | {"metadata": {"name": "web", "namespace": "default"}})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/api/v1/pods?watch=true&timeoutSeconds=0.3")
    resp = conn.getresponse()
    events = [json.loads(line) for line in resp.read().splitlines()]
    conn.close()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "web")]
    # the legacy /watch/ path, down to one object
    server.cluster.create(POD, pod("other") | {"metadata": {"name": "b", "namespace": "default"}})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/api/v1/watch/namespaces/default/pods/web?timeoutSeconds=0.3")
    events = [json.loads(line) for line in conn.getresponse().read().splitlines()]
    conn.close()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "web")]


def test_watch_bookmarks_when_idle_and_on_request(server: ApiServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    rv = server.cluster.resource_version
    conn.request(
        "GET",
        f"/apis/podnet.io/v1alpha1/podnetworks?watch=1&resourceVersion={rv}"
        "&allowWatchBookmarks=true&timeoutSeconds=0.7",
    )
    resp = conn.getresponse()
    assert resp.getheader("Transfer-Encoding") == "chunked"
    started = time.monotonic()
    events = [json.loads(line) for line in resp.read().splitlines()]
    conn.close()
    assert 0.5 < time.monotonic() - started < 3
    assert events and {e["type"] for e in events} == {"BOOKMARK"}
    assert events[0]["object"]["kind"] == "PodNetwork"
    assert events[0]["object"]["metadata"]["resourceVersion"] == rv
    # and on request, through the admin endpoint
    slow = ApiServer(server.cluster, bookmark_interval=60).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", slow.port, timeout=5)
        conn.request(
            "GET",
            f"/api/v1/nodes?watch=1&resourceVersion={rv}&allowWatchBookmarks=1&timeoutSeconds=0.6",
        )
        resp = conn.getresponse()
        time.sleep(0.2)
        assert request(slow, "POST", "/_podnet/bookmark")[0] == 200
        marks = [json.loads(line) for line in resp.read().splitlines()]
        conn.close()
        assert [m["type"] for m in marks] == ["BOOKMARK"]
    finally:
        slow.stop()


def test_finalizer_holds_delete_until_removed_by_json_patch(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    create_pn(api, pn("web", finalizers=[models.FINALIZER]))
    held = co.delete_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert held["metadata"]["deletionTimestamp"]
    still = co.get_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert still["metadata"]["deletionTimestamp"] and still["metadata"]["finalizers"]
    co.patch_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", "web",
        [{"op": "remove", "path": "/metadata/finalizers"}],
        # the client's default for custom objects is a merge patch, whatever the body
        _content_type="application/json-patch+json",
    )
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert err.value.status == 404


def test_deleting_a_pod_collects_its_podnetwork(api: client.ApiClient) -> None:
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    owner = core.create_namespaced_pod("default", pod("web"))
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": owner.metadata.uid}
    create_pn(api, pn("web", ownerReferences=[ref]))
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as err:
        co.get_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert err.value.status == 404


def test_delete_preconditions(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("web"))
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod(
            "web", "default", body=client.V1DeleteOptions(preconditions={"uid": "nope"})
        )
    assert err.value.status == 409
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod(
            "web", "default", body=client.V1DeleteOptions(preconditions={"resourceVersion": "1"})
        )
    assert err.value.status == 409
    core.read_namespaced_pod("web", "default")  # still there


def test_pod_delete_without_grace_holds_the_pod(api: client.ApiClient) -> None:
    """kubernetes.io "Termination of Pods" and the pod strategy's ``CheckGracefulDelete``:
    with no ``gracePeriodSeconds`` the pod's ``spec.terminationGracePeriodSeconds`` is taken
    (30 when unset); the answer is the pod marked with ``deletionTimestamp`` and
    ``deletionGracePeriodSeconds``, and it stays until deleted with grace 0."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("web"))
    quick = pod("quick")
    quick["spec"]["terminationGracePeriodSeconds"] = 3
    core.create_namespaced_pod("default", quick)
    out = core.delete_namespaced_pod("web", "default")
    assert out.metadata.deletion_timestamp is not None
    assert out.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("quick", "default")
    assert core.read_namespaced_pod("quick", "default").metadata.deletion_grace_period_seconds == 3
    assert core.read_namespaced_pod("web", "default").metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("web", "default", grace_period_seconds=0)
    assert [p.metadata.name for p in core.list_namespaced_pod("default").items] == ["quick"]


def test_kubelet_stand_in_finishes_terminating_pods() -> None:
    """The ``kubelet_finish_after`` stand-in does the kubelet's part of "Termination of
    Pods" (kubernetes.io): the watch sees the pod marked (MODIFIED with a
    deletionTimestamp), then DELETED, as with a kubelet that stops containers quickly."""
    with ApiServer(kubelet_finish_after=0.2) as srv, client.ApiClient(
            client.Configuration(host=srv.url)) as api_client:
        core = client.CoreV1Api(api_client)
        rv = core.create_namespaced_pod("default", pod("web")).metadata.resource_version
        core.delete_namespaced_pod("web", "default")
        seen = []
        for ev in watch.Watch().stream(core.list_namespaced_pod, "default",
                                       resource_version=rv, timeout_seconds=5):
            seen.append((ev["type"], ev["object"].metadata.deletion_grace_period_seconds))
            if ev["type"] == "DELETED":
                break
    assert seen == [("MODIFIED", 30), ("DELETED", 0)]


def test_kubelet_finish_after_must_be_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    from podnet.sim.apiserver import main

    with pytest.raises(SystemExit) as done:
        main(["--kubelet-finish-after", "-1"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--kubelet-finish-after" in err and "'-1'" in err


def test_graceful_pod_delete_answers_the_terminating_pod(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("web"))
    out = core.delete_namespaced_pod("web", "default", grace_period_seconds=30)
    assert out.metadata.deletion_timestamp is not None
    assert core.read_namespaced_pod("web", "default").metadata.deletion_grace_period_seconds == 30


def test_crd_schema_rejects_bad_records_naming_the_field(api: client.ApiClient) -> None:
    co = client.CustomObjectsApi(api)
    missing = pn("web")
    del missing["spec"]["podUid"]
    with pytest.raises(ApiException) as err:
        create_pn(api, missing)
    body = status_of(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert "spec.podUid" in body["message"]
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.podUid"}
    ]
    created = create_pn(api, pn("web"))
    bogus = {**created, "status": {"phase": "Bogus"}}
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object_status(
            GROUP, VERSION, "default", "podnetworks", "web", bogus
        )
    assert err.value.status == 422
    assert "status.phase" in status_of(err.value)["message"]
    assert '"Bogus"' in status_of(err.value)["message"]
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object_status(
            GROUP, VERSION, "default", "podnetworks", "web", {"status": {"ip": "10.0.0.300"}},
            _content_type=MERGE,
        )
    assert err.value.status == 422 and "status.ip" in status_of(err.value)["message"]
    with pytest.raises(ApiException) as err:
        co.patch_namespaced_custom_object(
            GROUP, VERSION, "default", "podnetworks", "web", {"spec": {"sticky": "yes"}},
            _content_type=MERGE,
        )
    assert err.value.status == 422 and "spec.sticky" in status_of(err.value)["message"]
    # an unknown field is no error by default: pruned (see the fieldValidation tests)
    other = create_pn(api, pn("other") | {"spec": {**pn("other")["spec"], "colour": "red"}})
    assert "colour" not in other["spec"]
    # nothing bad was stored
    got = co.get_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web")
    assert "status" not in got and "sticky" not in got["spec"]


def test_unknown_fields_are_pruned_with_a_warning_by_default(server: ApiServer) -> None:
    """kubernetes.io API concepts, "Field validation": without ``fieldValidation`` the
    server's default is ``Warn``: unknown fields are dropped and each is named in a
    ``Warning`` header; ``Strict`` fails the request with 400 BadRequest and a strict
    decoding error naming the field."""
    body = pn("web")
    body["spec"]["colour"] = "red"
    path = "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks"
    code, out, resp = request(server, "POST", path, body)
    assert code == 201 and "colour" not in out["spec"]
    assert resp.getheader("Warning") == '299 - "unknown field \\"spec.colour\\""'
    body["metadata"]["name"] = "strict"
    code, out, _ = request(server, "POST", path + "?fieldValidation=Strict", body)
    assert (code, out["reason"]) == (400, "BadRequest")
    assert out["message"] == ('PodNetwork in version "v1alpha1" cannot be handled as a '
                              'PodNetwork: strict decoding error: unknown field "spec.colour"')


def test_put_without_resource_version(api: client.ApiClient) -> None:
    """Upstream's update: a built-in kind's strategy allows an unconditional update (a PUT
    without ``metadata.resourceVersion`` is taken, last write wins); the custom resource
    strategy does not, and answers 422 Invalid on ``metadata.resourceVersion``."""
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    made = core.create_namespaced_pod("default", pod("web"))
    body = api.sanitize_for_serialization(made)
    body["metadata"].pop("resourceVersion")
    body["metadata"]["labels"] = {"edited": "yes"}
    replaced = core.replace_namespaced_pod("web", "default", body)
    assert replaced.metadata.labels == {"edited": "yes"}
    assert int(replaced.metadata.resource_version) > int(made.metadata.resource_version)
    record = create_pn(api, pn("web"))
    record["metadata"].pop("resourceVersion")
    with pytest.raises(ApiException) as err:
        co.replace_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks", "web",
                                            record)
    assert err.value.status == 422
    assert "metadata.resourceVersion" in status_of(err.value)["message"]


def test_field_validation_ignore_prunes_unknown_fields(server: ApiServer) -> None:
    body = pn("web")
    body["spec"]["colour"] = "red"
    path = "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks"
    code, out, resp = request(server, "POST", path + "?fieldValidation=Warn", body)
    assert code == 201 and "colour" not in out["spec"]
    assert "spec.colour" in (resp.getheader("Warning") or "")
    patch = {"spec": {"shade": "blue", "sticky": True}}
    code, out, _ = request(
        server, "PATCH", path + "/web?fieldValidation=Ignore", patch, {"Content-Type": MERGE}
    )
    assert code == 200 and out["spec"]["sticky"] is True and "shade" not in out["spec"]


def test_crd_accepts_what_the_engine_writes(api: client.ApiClient) -> None:
    # every field of the records, as podnet.core.convert writes them, passes the schema
    t = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    cond = models.Condition("Ready", "True", "Routed", "ok", t)
    record = models.PodNetwork(
        metadata=models.ObjectMeta(name="web.default", namespace="default"),
        spec=models.PodNetworkSpec(
            pod_name="web", pod_uid="u", node_name="n1", provider="reference", sticky=True,
            requests=models.NetworkRequest(
                subnets=("s1",), ip_address="10.0.0.9", mac_address="02:00:00:00:00:01",
                security_groups=("sg",), port_security=True, vips=("10.0.0.10",),
                eip="1.2.3.4", snat=True,
            ),
        ),
        status=models.PodNetworkStatus(
            phase=models.Phase.ROUTED, ip="10.0.0.9", ipv6="fd00::9", mac="02:00:00:00:00:01",
            subnet="s1", gateway="10.0.0.1", interface="eni-1", conditions=(cond,),
            last_transition_time=t, traceparent="00-" + "1" * 32 + "-" + "2" * 16 + "-01",
        ),
    )
    wire = to_wire(record)
    created = create_pn(api, wire)
    assert "status" not in created  # dropped on create, as upstream: /status writes it
    co = client.CustomObjectsApi(api)
    done = co.replace_namespaced_custom_object_status(
        GROUP, VERSION, "default", "podnetworks", "web.default",
        {**created, "status": wire["status"]},
    )
    assert done["status"] == wire["status"] and done["spec"] == wire["spec"]
    node = models.NodeNetwork(
        metadata=models.ObjectMeta(name="n1"),
        spec=models.NodeNetworkSpec(
            provider="reference", instance_id="i-1", subnets=("s1",),
            pool=models.PoolBounds(min_idle=1, max_idle=4),
        ),
        status=models.NodeNetworkStatus(
            interfaces=(
                models.InterfaceStatus(
                    id="eni-1", state=models.InterfaceState.INHIBITED, mac="02:00:00:00:00:02",
                    subnet="s1", primary=True, trunk=False, inhibited_until=t,
                    ips=(models.IpStatus("10.0.0.9", "default/web.default", "s1"),
                         models.IpStatus("10.0.0.11")),
                ),
            ),
            last_inventory_sync=t,
            conditions=(cond,),
        ),
    )
    nwire = to_wire(node)
    made = co.create_cluster_custom_object(GROUP, VERSION, "nodenetworks", nwire)
    out = co.replace_cluster_custom_object_status(
        GROUP, VERSION, "nodenetworks", "n1", {**made, "status": nwire["status"]}
    )
    assert out["status"] == nwire["status"]


def test_field_selector_on_pods_and_unsupported_ones(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("a", "n1"))
    core.create_namespaced_pod("default", pod("b", "n2"))
    picked = core.list_namespaced_pod("default", field_selector="spec.nodeName=n2")
    assert [p.metadata.name for p in picked.items] == ["b"]
    everywhere = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=n2")
    assert [p.metadata.name for p in everywhere.items] == ["a"]
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="spec.nodeName=n1")  # nodes have no such field
    assert err.value.status == 400
    # podnetworks: what the CRD's selectableFields declare
    create_pn(api, pn("x", "n1"))
    create_pn(api, pn("y", "n2"))
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, "default", "podnetworks", field_selector="spec.nodeName=n1"
    )
    assert [i["metadata"]["name"] for i in found["items"]] == ["x"]


def test_errors_are_status_objects(server: ApiServer) -> None:
    code, body, _ = request(server, "GET", "/api/v1/namespaces/default/pods/nope")
    assert code == 404
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == 404
    assert body["reason"] == "NotFound" and "nope" in body["message"]
    code, body, _ = request(server, "GET", "/api/v1/widgets")
    assert code == 404 and body["kind"] == "Status"
    code, body, _ = request(server, "POST", "/api/v1/namespaces/default/pods", pod("web"))
    assert code == 201
    code, body, _ = request(server, "POST", "/api/v1/namespaces/default/pods", pod("web"))
    assert code == 409 and body["reason"] == "AlreadyExists"
    code, body, _ = request(
        server, "PATCH", "/api/v1/namespaces/default/pods/web", b"x: 1",
        {"Content-Type": "application/apply-patch+yaml"},
    )
    # server-side apply is served, and needs a field manager (test_apiserver_apply.py)
    assert code == 422 and body["details"]["kind"] == "PatchOptions"
    code, body, _ = request(server, "PUT", "/api/v1/namespaces/default/pods")
    assert code == 405 and body["reason"] == "MethodNotAllowed"
    code, body, _ = request(server, "POST", "/api/v1/namespaces/default/pods", pod("Bad_Name"))
    assert code == 422 and "metadata.name" in body["message"]
    elsewhere = pod("x", namespace="y")
    code, body, _ = request(server, "POST", "/api/v1/namespaces/other/pods", elsewhere)
    assert code == 400 and body["reason"] == "BadRequest"
    code, body, _ = request(
        server, "PATCH", "/api/v1/namespaces/default/pods/web", b"{nope", {"Content-Type": MERGE}
    )
    assert code == 400
    code, body, _ = request(server, "PATCH", "/api/v1/namespaces/default/pods/web", {})
    assert code == 415  # application/json is no patch format


def test_fault_injection_endpoint(server: ApiServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod("default", pod("web"))
    code, rates, _ = request(server, "POST", "/_podnet/faults", {"conflictRate": 1.0})
    assert code == 200 and rates["conflictRate"] == 1.0
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_pod("web", "default", {"metadata": {"labels": {"a": "b"}}})
    assert err.value.status == 409
    request(server, "POST", "/_podnet/faults", {"clear": True, "errorRate": 1.0})
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default")
    assert err.value.status == 500
    request(server, "POST", "/_podnet/faults", {"clear": True})
    fail = {"failNext": {"op": "get", "resource": "pods", "code": 404, "times": 1}}
    assert request(server, "POST", "/_podnet/faults", fail)[0] == 200
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("web", "default")
    assert err.value.status == 404
    assert core.read_namespaced_pod("web", "default").metadata.name == "web"
    # dropWatches ends an open stream, as an API server restart would
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", f"/api/v1/pods?watch=1&resourceVersion={server.cluster.resource_version}")
    resp = conn.getresponse()
    time.sleep(0.1)
    code, out, _ = request(server, "POST", "/_podnet/faults", {"dropWatches": True})
    assert code == 200 and out["droppedWatches"] >= 1
    assert resp.read() == b""  # the stream ended cleanly, with no events
    conn.close()
    code, _, _ = request(server, "POST", "/_podnet/faults", {"errorRate": 2})
    assert code == 400


def test_table_output_uses_the_crd_printer_columns(server: ApiServer) -> None:
    table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    request(server, "POST", "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks", pn("web"))
    request(
        server, "PATCH", "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks/web/status",
        {"status": {"phase": "Routed", "ip": "10.0.0.7", "conditions": [
            {"type": "Other", "status": "False"}, {"type": "Ready", "status": "True"}]}},
        {"Content-Type": MERGE},
    )
    _, out, _ = request(
        server, "GET", "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks",
        headers={"Accept": table},
    )
    assert out["kind"] == "Table"
    names = [c["name"] for c in out["columnDefinitions"] if c["priority"] == 0]
    assert names == ["Name", "Ready", "Phase", "IP", "Node", "Age"]
    cells = out["rows"][0]["cells"]
    # Ready: the status of the condition of that type (a JSONPath filter), not the first
    assert cells[:5] == ["web", "True", "Routed", "10.0.0.7", "n1"] and cells[-1].endswith("s")
    assert out["rows"][0]["object"]["metadata"]["name"] == "web"
    _, out, _ = request(server, "GET", "/api/v1/namespaces/default/pods", headers={"Accept": table})
    # built-ins have upstream's printer columns (tests/test_apiserver_wire.py has them all)
    assert [c["name"] for c in out["columnDefinitions"]][:3] == ["Name", "Ready", "Status"]


def test_stop_ends_open_watches(api: client.ApiClient) -> None:
    srv = ApiServer().start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)
    conn.request("GET", "/api/v1/pods?watch=1")
    resp = conn.getresponse()
    started = time.monotonic()
    srv.stop()
    assert resp.read() == b""
    assert time.monotonic() - started < 2
    conn.close()


def test_binds_loopback_and_serves_a_given_cluster() -> None:
    cluster = InMemoryCluster()
    cluster.create(NODE, {"metadata": {"name": "n9"}})
    with ApiServer(cluster) as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        _, nodes, _ = request(srv, "GET", "/api/v1/nodes")
        assert [n["metadata"]["name"] for n in nodes["items"]] == ["n9"]
        # a given cluster is served as it is: no namespace is added to it
        _, spaces, _ = request(srv, "GET", "/api/v1/namespaces")
        assert spaces["items"] == []
    assert cluster.count(POD_NETWORK) == 0


# --- schema and helpers -------------------------------------------------------------


def test_schema_validator_subset() -> None:
    s: dict[str, Any] = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["a"],
                "properties": {
                    "a": {"type": "integer", "minimum": 0},
                    "tags": {"type": "object", "additionalProperties": {"type": "string"}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "maybe": {"type": "string", "nullable": True},
                    "items": {
                        "type": "array",
                        "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["k"],
                        "items": {"type": "object", "properties": {"k": {"type": "string"}}},
                    },
                },
            }
        },
    }
    ok = schema.validate(
        s, {"spec": {"a": 1, "tags": {"x": "y"}, "free": {"any": [1]}, "maybe": None}}
    )
    assert ok.errors == [] and ok.value["spec"]["maybe"] is None
    bad = schema.validate(
        s, {"spec": {"a": True, "tags": {"x": 1}, "items": [{"k": "1"}, {"k": "1"}]}}
    )
    assert [(e.field, e.reason) for e in bad.errors] == [
        ("spec.a", "FieldValueTypeInvalid"),
        ("spec.tags[x]", "FieldValueTypeInvalid"),
        ("spec.items[1]", "FieldValueDuplicate"),
    ]
    assert [e.field for e in schema.validate(s, {"spec": {"a": -1}}).errors] == ["spec.a"]
    assert [e.field for e in schema.validate(s, {"spec": {}}).errors] == ["spec.a"]
    pruned = schema.validate(s, {"spec": {"a": 1, "b": 2}, "extra": 1}, prune=True)
    assert pruned.errors == [] and pruned.value == {"spec": {"a": 1}}
    assert pruned.unknown == ["spec.b", "extra"]
    assert schema.find_path({"a": [{"b": 1}, {"b": 2}]}, ".a[*].b") == [1, 2]
    assert schema.find_path({"a": [{"b": 1}]}, ".a[3].b") == []


def test_crd_files_match_models_and_install_form() -> None:
    crds = {c.plural: c for c in schema.load_crds()}
    assert set(crds) == {"podnetworks", "nodenetworks", "subnets", "ippools", "securitygroups",
                         "network-attachment-definitions", "virtualmachineinstances",
                         "virtualmachineinstancemigrations"}
    assert crds["podnetworks"].ref == POD_NETWORK
    assert crds["virtualmachineinstances"].ref == VMI  # the kind core reads
    assert crds["podnetworks"].schema["properties"]["status"]["properties"]["phase"]["enum"] == [
        p.value for p in models.Phase
    ]
    for name in (*schema.CRD_FILES, *schema.EXTERNAL_CRD_FILES):
        # sim/crds/ is the one source; tests/test_chart.py checks the copies that
        # scripts/render_deploy.py writes into the chart and deploy/crds/
        doc = yaml.safe_load((REPO / "sim" / "crds" / name).read_text())
        assert doc["apiVersion"] == "apiextensions.k8s.io/v1"


def test_human_duration_matches_upstream() -> None:
    assert [human_duration(s) for s in (5, 119, 125, 600, 3 * 3600 + 60, 50 * 3600)] == [
        "5s", "119s", "2m5s", "10m", "3h1m", "2d2h"
    ]


# --- kubectl ------------------------------------------------------------------------------

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")

OBJECTS = """\
apiVersion: v1
kind: Node
metadata:
  name: n1
---
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  nodeName: n1
  containers:
  - name: app
    image: demo
---
apiVersion: podnet.io/v1alpha1
kind: PodNetwork
metadata:
  name: web.default
  finalizers: [podnet.io/release]
spec:
  podName: web
  podUid: u-1
  nodeName: n1
  provider: reference
---
apiVersion: podnet.io/v1alpha1
kind: NodeNetwork
metadata:
  name: n1
spec:
  provider: reference
"""


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Any:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, timeout: str = "5s", check: bool = True) -> str:
        cmd = [
            str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
            f"--request-timeout={timeout}", *args,
        ]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr}")
        return done.stdout

    return run


@needs_kubectl
def test_kubectl_create_get_delete(server: ApiServer, kubectl: Any, tmp_path: Path) -> None:
    manifest = tmp_path / "objects.yaml"
    manifest.write_text(OBJECTS)
    out = kubectl("create", "-f", str(manifest))
    assert "pod/web created" in out and "podnetwork.podnet.io/web.default created" in out
    assert "node/n1 created" in out and "nodenetwork.podnet.io/n1 created" in out
    request(
        server, "PATCH",
        "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks/web.default/status",
        {"status": {"phase": "Routed", "ip": "10.0.0.7", "conditions": [
            {"type": "Ready", "status": "True", "reason": "Routed", "observedGeneration": 1}]}},
        {"Content-Type": MERGE},
    )
    pods = kubectl("get", "pods").splitlines()
    assert pods[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert pods[1].split()[:4] == ["web", "0/1", "Pending", "0"]
    table = kubectl("get", "pn").splitlines()
    assert table[0].split() == ["NAME", "READY", "PHASE", "IP", "NODE", "AGE"]
    assert table[1].split()[:5] == ["web.default", "True", "Routed", "10.0.0.7", "n1"]
    generation = kubectl("get", "pn", "web.default", "-o",
                         "jsonpath={.status.conditions[0].observedGeneration}")
    assert generation == "1"  # the schema keeps it (an unknown field would be pruned)
    listed = json.loads(kubectl("get", "pn", "-o", "json"))
    assert [i["spec"]["podUid"] for i in listed["items"]] == ["u-1"]
    nn = kubectl("get", "nn").splitlines()
    assert nn[0].split() == ["NAME", "READY", "PROVIDER", "INTERFACES", "AGE"]
    assert nn[1].split()[:2] == ["n1", "reference"] and len(nn[1].split()) == 3  # no interfaces
    request(server, "PATCH", "/apis/podnet.io/v1alpha1/nodenetworks/n1/status",
            {"status": {"conditions": [{"type": "PoolReady", "status": "False",
                                        "reason": "PoolError"}]}}, {"Content-Type": MERGE})
    assert kubectl("get", "nn").splitlines()[1].split()[:3] == ["n1", "False", "reference"]
    assert "web.default" in kubectl("get", "podnet")  # the CRDs' category
    # a bad record is refused with the field named
    bad = tmp_path / "bad.yaml"
    bad.write_text(OBJECTS.split("---\n")[2].replace("  podUid: u-1\n", "").replace(
        "web.default", "bad"))
    with pytest.raises(AssertionError, match=r"spec\.podUid"):
        kubectl("create", "-f", str(bad))
    # the finalizer holds the record after delete
    assert "deleted" in kubectl("delete", "pn", "web.default", "--wait=false")
    stamp = kubectl("get", "pn", "web.default", "-o", "jsonpath={.metadata.deletionTimestamp}")
    assert stamp.endswith("Z") and len(stamp) == 20
    assert 'pod "web" force deleted' in kubectl("delete", "pod", "web", "--grace-period=0",
                                                "--force")
    assert kubectl("get", "pods", "-o", "name") == ""


@needs_kubectl
def test_kubectl_delete_leaves_the_pod_terminating(server: ApiServer, kubectl: Any) -> None:
    """kubernetes.io "Termination of Pods": a deleted pod is marked with its grace period
    (``terminationGracePeriodSeconds``, 30 by default) and shown Terminating until the kubelet
    has stopped it and deleted it from the API server (with grace 0). No kubelet runs
    here: the pod stays until the stand-in (``POST /_podnet/kubelet``) plays its part."""
    server.cluster.create(POD, pod("web") | {"metadata": {"name": "web",
                                                          "namespace": "default"}})
    kubectl("delete", "pod", "web", "--wait=false")
    table = kubectl("get", "pod", "web", "--no-headers")
    assert table.split()[:3] == ["web", "0/1", "Terminating"]
    grace = kubectl("get", "pod", "web", "-o", "jsonpath={.metadata.deletionGracePeriodSeconds}")
    assert grace == "30"
    # a second delete without a grace period changes nothing
    kubectl("delete", "pod", "web", "--wait=false")
    assert kubectl("get", "pods", "-o", "name") == "pod/web\n"
    code, body, _ = request(server, "POST", "/_podnet/kubelet", {"namespace": "default"})
    assert (code, body) == (200, {"finished": 1})
    assert kubectl("get", "pods", "-o", "name") == ""


@needs_kubectl
def test_kubectl_watch_is_bounded_and_prints_existing(server: ApiServer, tmp_path: Path
                                                       ) -> None:
    request(server, "POST", "/api/v1/namespaces/default/pods", pod("web"))
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    started = time.monotonic()
    proc = subprocess.Popen(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
         "--request-timeout=1s", "get", "pods", "-w"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        header, first = proc.stdout.readline(), proc.stdout.readline()
        # the list is printed: a pod made now is after its resourceVersion, where the watch
        # starts (made at a fixed time instead, it raced a slow kubectl into the list)
        request(server, "POST", "/api/v1/namespaces/default/pods", pod("late"))
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert time.monotonic() - started < 10
    assert header.split()[0] == "NAME" and first.split()[0] == "web", header + first
    assert any(line.split()[0] == "late" for line in rest.splitlines()), rest


# --- the command line ---------------------------------------------------------------------


def test_cli_prints_url_and_writes_a_working_kubeconfig(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc.yaml"
    code = (
        "import sys; from podnet.sim.apiserver import main; "
        f"sys.exit(main(['--port', '0', '--kubeconfig-out', {str(kubeconfig)!r}]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), proc.stderr.read() if proc.stderr else ""
        conf = yaml.safe_load(kubeconfig.read_text())
        assert conf["clusters"][0]["cluster"]["server"] == url
        assert conf["current-context"] == conf["contexts"][0]["name"]
        api_client = config.new_client_from_config(config_file=str(kubeconfig))
        with api_client:
            spaces = client.CoreV1Api(api_client).list_namespace()
            # a new cluster's namespaces (kube-apiserver's system namespaces and the
            # node lease one)
            assert sorted(n.metadata.name for n in spaces.items) == [
                "default", "kube-node-lease", "kube-public", "kube-system"]
            made = create_pn(api_client, pn("web"))
            assert made["metadata"]["namespace"] == "default"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_listens_on_the_address_it_is_given_and_only_there(tmp_path: Path) -> None:
    """``--address`` (``--host`` is its older name): the URL and the kubeconfig name it,
    and the server answers there, not on 127.0.0.1 (another address of the loopback)."""
    kubeconfig = tmp_path / "kc.yaml"
    code = (
        "import sys; from podnet.sim.apiserver import main; "
        f"sys.exit(main(['--address', '127.0.0.2', '--port', '0', '--kubeconfig-out', "
        f"{str(kubeconfig)!r}]))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.2:"), proc.stderr.read() if proc.stderr else ""
        port = int(url.rsplit(":", 1)[1])
        conf = yaml.safe_load(kubeconfig.read_text())
        assert conf["clusters"][0]["cluster"]["server"] == url
        conn = http.client.HTTPConnection("127.0.0.2", port, timeout=10)
        conn.request("GET", "/api")
        assert conn.getresponse().status == 200
        conn.close()
        with pytest.raises(ConnectionRefusedError):
            http.client.HTTPConnection("127.0.0.1", port, timeout=10).connect()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_audit_log_records_each_write_with_its_user_agent(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    with ApiServer(audit_log=log) as srv, client.ApiClient(
            client.Configuration(host=srv.url)) as api_client:
        api_client.user_agent = "podnet/replica-a"
        core = client.CoreV1Api(api_client)
        core.create_namespaced_pod("default", pod("web"))
        core.read_namespaced_pod("web", "default")  # a read: not in the log
        with pytest.raises(ApiException):
            core.create_namespaced_pod("default", pod("web"))
        core.delete_namespaced_pod("web", "default")
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["verb"], e["code"]) for e in entries] == [("POST", 201), ("POST", 409),
                                                          ("DELETE", 200)]
    assert {e["userAgent"] for e in entries} == {"podnet/replica-a"}
    assert entries[2]["requestURI"] == "/api/v1/namespaces/default/pods/web"


# --- garbage collection by propagation policy --------------------------------------------


def sts_with_pod(api: client.ApiClient, pod_name: str = "db-0") -> tuple[Any, Any]:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    owner = apps.create_namespaced_stateful_set("default", {
        "metadata": {"name": "db"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "db"}},
                 "serviceName": "db",
                 "template": {"metadata": {"labels": {"app": "db"}},
                              "spec": {"containers": [{"name": "db", "image": "demo"}]}}}})
    ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
           "uid": owner.metadata.uid, "controller": True, "blockOwnerDeletion": True}
    dep = core.create_namespaced_pod("default", pod(pod_name, ownerReferences=[ref]))
    return owner, dep


@needs_kubectl
def test_orphan_delete_keeps_dependents_without_the_owner(api: client.ApiClient,
                                                          kubectl: Any) -> None:
    """kubernetes.io "Garbage Collection" (cascading deletion, orphan): the owner is deleted
    and its dependents stay, their ownerReferences to it removed (``kubectl delete
    --cascade=orphan`` sends ``propagationPolicy: Orphan``)."""
    sts_with_pod(api)
    kubectl("delete", "statefulset", "db", "--cascade=orphan")
    kept = client.CoreV1Api(api).read_namespaced_pod("db-0", "default")
    assert kept.metadata.owner_references is None
    assert kept.metadata.deletion_timestamp is None
    assert client.AppsV1Api(api).list_namespaced_stateful_set("default").items == []


def test_foreground_delete_waits_for_blocking_dependents(api: client.ApiClient) -> None:
    """kubernetes.io "Garbage Collection" (foreground cascading deletion): the owner enters
    deletion in progress (deletionTimestamp, the ``foregroundDeletion`` finalizer), its
    dependents are deleted, and the owner goes once those with ``blockOwnerDeletion: true``
    are gone. The pod dependent waits out its grace period (no kubelet here)."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sts_with_pod(api)
    apps.delete_namespaced_stateful_set(
        "db", "default", body=client.V1DeleteOptions(propagation_policy="Foreground"))
    held = apps.read_namespaced_stateful_set("db", "default")
    assert held.metadata.finalizers == ["foregroundDeletion"]
    assert held.metadata.deletion_timestamp is not None
    assert core.read_namespaced_pod("db-0", "default").metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("db-0", "default", grace_period_seconds=0)  # the kubelet
    assert apps.list_namespaced_stateful_set("default").items == []


def test_foreground_delete_does_not_wait_for_non_blocking_dependents(
        api: client.ApiClient) -> None:
    """A dependent without ``blockOwnerDeletion`` is deleted but does not hold the owner
    (kubernetes.io "Garbage Collection": only blocking dependents keep it)."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    owner, _ = sts_with_pod(api)
    ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
           "uid": owner.metadata.uid}
    core.delete_namespaced_pod("db-0", "default", grace_period_seconds=0)
    core.create_namespaced_pod("default", pod("loose", ownerReferences=[ref]))
    apps.delete_namespaced_stateful_set("db", "default", propagation_policy="Foreground")
    assert apps.list_namespaced_stateful_set("default").items == []
    assert core.read_namespaced_pod("loose", "default").metadata.deletion_timestamp is not None


def test_background_delete_collects_dependents(api: client.ApiClient) -> None:
    """Background (the default for these kinds): the owner goes at once, its dependents
    are deleted after it (a pod one is marked Terminating with its grace period)."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    sts_with_pod(api)
    apps.delete_namespaced_stateful_set("db", "default")
    assert apps.list_namespaced_stateful_set("default").items == []
    dep = core.read_namespaced_pod("db-0", "default")
    assert dep.metadata.deletion_grace_period_seconds == 30


def test_unknown_propagation_policy_is_invalid(server: ApiServer) -> None:
    """An unsupported propagationPolicy is a 422 naming the field and the values."""
    server.cluster.create(POD, pod("web") | {"metadata": {"name": "web",
                                                          "namespace": "default"}})
    code, body, _ = request(server, "DELETE", "/api/v1/namespaces/default/pods/web",
                            {"propagationPolicy": "Sideways"})
    assert code == 422 and "propagationPolicy" in body["message"]


# --- namespace lifecycle ----------------------------------------------------------------


def test_create_into_missing_namespace_answers_404(api: client.ApiClient) -> None:
    """NamespaceLifecycle admission: 404 NotFound, ``namespaces "<ns>" not found``."""
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(api).create_namespaced_pod("nowhere", pod("web"))
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (404, "NotFound")
    assert body["message"] == 'namespaces "nowhere" not found'


@needs_kubectl
def test_kubectl_sees_a_deleted_namespace_terminating(server: ApiServer, api: client.ApiClient,
                                                      kubectl: Any) -> None:
    """kubernetes.io "Namespaces": a deleted namespace shows Terminating while its pods end
    (here: until the kubelet stand-in confirms them), then goes; a create into it is 403
    Forbidden (NamespaceLifecycle: "unable to create new content in namespace <ns> because
    it is being terminated")."""
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": "doomed"}})
    core.create_namespaced_pod("doomed", pod("web"))
    kubectl("delete", "namespace", "doomed", "--wait=false")
    assert kubectl("get", "namespace", "doomed", "--no-headers").split()[:2] == [
        "doomed", "Terminating"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("doomed", pod("late"))
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (403, "Forbidden")
    assert body["message"] == ('pods "late" is forbidden: unable to create new content in '
                               "namespace doomed because it is being terminated")
    code, done, _ = request(server, "POST", "/_podnet/kubelet", {"namespace": "doomed"})
    assert (code, done) == (200, {"finished": 1})
    assert "doomed" not in kubectl("get", "namespaces", "-o", "name")


# --- what a new pod is stored as ---------------------------------------------------------


def test_new_pod_gets_upstream_defaults_and_a_pending_status(api: client.ApiClient) -> None:
    """The pod API's defaults (pkg/apis/core/v1/defaults.go: ``SetDefaults_PodSpec``,
    ``SetDefaults_Container``) and the pod strategy's ``PrepareForCreate``: the status sent
    is replaced by ``phase: Pending`` with the QoS class (BestEffort without requests or
    limits, Guaranteed when limits equal requests)."""
    core = client.CoreV1Api(api)
    body = pod("web") | {"status": {"phase": "Running", "podIP": "10.0.0.9"}}
    body["spec"]["containers"].append({"name": "pinned", "image": "registry/app:1.2"})
    made = core.create_namespaced_pod("default", body)
    spec = made.spec
    assert (spec.restart_policy, spec.dns_policy, spec.scheduler_name) == (
        "Always", "ClusterFirst", "default-scheduler")
    assert spec.termination_grace_period_seconds == 30
    assert spec.enable_service_links is True
    first, second = spec.containers
    assert (first.termination_message_path, first.termination_message_policy) == (
        "/dev/termination-log", "File")
    assert (first.image_pull_policy, second.image_pull_policy) == ("Always", "IfNotPresent")
    assert (made.status.phase, made.status.qos_class, made.status.pod_ip) == (
        "Pending", "BestEffort", None)
    sized = pod("sized")
    sized["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    assert core.create_namespaced_pod("default", sized).status.qos_class == "Guaranteed"
    sized = pod("burst")
    sized["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    assert core.create_namespaced_pod("default", sized).status.qos_class == "Burstable"


# --- paging -------------------------------------------------------------------------------


def test_list_pages_with_limit_and_continue(server: ApiServer, api: client.ApiClient) -> None:
    """kubernetes.io API concepts, "Retrieving large results sets in chunks": ``limit``
    caps a page, ``metadata.continue`` asks for the next, the last page has none;
    ``remainingItemCount`` counts what is left; a token older than the compacted history
    answers 410 Expired."""
    core = client.CoreV1Api(api)
    for i in range(5):
        core.create_namespaced_pod("default", pod(f"p{i}"))
    first = core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    names, token = [], first.metadata._continue
    while token:
        page = core.list_namespaced_pod("default", limit=2, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert names == ["p2", "p3", "p4"]
    core.create_namespaced_pod("default", pod("later"))  # history moves on, then compacts
    request(server, "POST", "/_podnet/faults", {"compact": True})
    with pytest.raises(ApiException) as err:
        core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    body = status_of(err.value)
    assert (err.value.status, body["reason"]) == (410, "Expired")
    assert body["message"].startswith("The provided continue parameter is too old")
    code, bad, _ = request(server, "GET", "/api/v1/namespaces/default/pods?continue=nonsense")
    assert code == 400 and bad["message"].startswith("continue key is not valid")


@needs_kubectl
def test_kubectl_get_reads_every_chunk(server: ApiServer, kubectl: Any) -> None:
    """kubectl asks in chunks (``--chunk-size``) and follows the continue tokens."""
    for i in range(5):
        server.cluster.create(POD, pod(f"p{i}") | {"metadata": {"name": f"p{i}",
                                                                "namespace": "default"}})
    out = kubectl("get", "pods", "--chunk-size=2", "-o", "name")
    assert out.split() == [f"pod/p{i}" for i in range(5)]


# --- dry run ------------------------------------------------------------------------------


@needs_kubectl
def test_dry_run_all_checks_and_stores_nothing(server: ApiServer, api: client.ApiClient,
                                               kubectl: Any, tmp_path: Path) -> None:
    """kubernetes.io API concepts, "Dry-run": with ``dryRun=All`` a write goes through
    every stage and answers what it would store, and nothing is persisted; a bad object is
    still refused. ``kubectl --dry-run=server`` sends it."""
    core, co = client.CoreV1Api(api), client.CustomObjectsApi(api)
    rv = core.list_namespaced_pod("default").metadata.resource_version
    would = core.create_namespaced_pod("default", pod("web"), dry_run="All")
    assert would.metadata.name == "web" and would.status.phase == "Pending"
    assert core.list_namespaced_pod("default").items == []
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod("kube")))
    assert "pod/kube created (server dry run)" in kubectl("create", "-f", str(manifest),
                                                           "--dry-run=server")
    assert kubectl("get", "pods", "-o", "name") == ""
    core.create_namespaced_pod("default", pod("real"))
    patched = core.patch_namespaced_pod("real", "default", {"metadata": {"labels": {"a": "b"}}},
                                        dry_run="All")
    assert patched.metadata.labels == {"a": "b"}
    assert core.read_namespaced_pod("real", "default").metadata.labels is None
    core.delete_namespaced_pod("real", "default", dry_run="All", grace_period_seconds=0)
    assert core.read_namespaced_pod("real", "default").metadata.deletion_timestamp is None
    with pytest.raises(ApiException) as err:
        co.create_namespaced_custom_object(GROUP, VERSION, "default", "podnetworks",
                                           pn("bad") | {"spec": {"podName": "x"}}, dry_run="All")
    assert err.value.status == 422
    assert int(server.cluster.resource_version) == int(rv) + 1  # only the one real create


# --- configuration kinds -------------------------------------------------------------------


@needs_kubectl
def test_configmaps_secrets_and_serviceaccounts_are_served(api: client.ApiClient,
                                                           kubectl: Any, tmp_path: Path) -> None:
    """core/v1 ConfigMap, Secret and ServiceAccount, as kubectl and the client use them; a
    Secret's ``stringData`` is write-only, folded into ``data`` as base64, and its type
    defaults to Opaque (kubernetes.io "Secrets"). (kubectl's imperative ``create
    configmap`` sends protobuf: tests/test_apiserver_wire.py.)"""
    core = client.CoreV1Api(api)
    manifest = tmp_path / "config.yaml"
    manifest.write_text(yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
         "data": {"mode": "fast"}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "podnet"}}]))
    kubectl("create", "-f", str(manifest))
    assert core.read_namespaced_config_map("settings", "default").data == {"mode": "fast"}
    assert kubectl("get", "cm", "settings", "--no-headers").split()[:2] == ["settings", "1"]
    core.create_namespaced_secret("default", {"metadata": {"name": "token"},
                                              "stringData": {"key": "s3cret"}})
    stored = core.read_namespaced_secret("token", "default")
    assert (stored.type, stored.data, stored.string_data) == (
        "Opaque", {"key": "czNjcmV0"}, None)
    assert kubectl("get", "secret", "token", "--no-headers").split()[:3] == [
        "token", "Opaque", "1"]
    # and the namespace's own "default", which the serviceaccount controller makes
    assert [a.metadata.name for a in core.list_namespaced_service_account("default").items] == [
        "default", "podnet"]
