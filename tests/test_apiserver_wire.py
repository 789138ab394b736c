"""The emulator on the wire as kube-apiserver: protobuf bodies, content negotiation,
server-side tables of the built-in kinds, evictions, services and the objects a new
cluster's controllers make. Each test drives real kubectl (or the official client) and
names, in its docstring, where upstream (kubernetes/kubernetes) behaves so."""

from __future__ import annotations

import http.client
import ipaddress
import json
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from podnet.core.cluster.port import EVENT, LEASE, NODE, POD
from podnet.sim import protobuf
from podnet.sim.apiserver import ApiServer
from podnet.sim.kinds import SERVICE_ACCOUNT

KUBECTL = shutil.which("kubectl")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
def kubectl(server: ApiServer, tmp_path: Path) -> Any:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def run(*args: str, timeout: str = "5s", check: bool = True,
            stderr: bool = False) -> str:
        cmd = [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
               str(tmp_path / "cache"), f"--request-timeout={timeout}", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        if check and done.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed: {done.stderr}")
        return done.stdout + (done.stderr if stderr else "")

    return run


def request(server: ApiServer, method: str, path: str, body: bytes | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request(method, path, body=body, headers=headers or {})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    return resp.status, json.loads(raw) if raw else None


def envelope(api_version: str, kind: str, msg: Any) -> bytes:
    """A body as client-go's protobuf serializer writes it: the magic, then a
    runtime.Unknown holding the object's message."""
    unknown = protobuf.message_class("k8s.io.apimachinery.pkg.runtime.Unknown")()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = api_version, kind
    unknown.raw = msg.SerializeToString()
    return protobuf.MAGIC + unknown.SerializeToString()


def running_pod(name: str, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "demo"}]},
            "status": {"phase": "Running", "podIP": "10.1.0.9", **status}}


# --- protobuf bodies ------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_create_sends_protobuf_and_the_objects_are_stored(
        kubectl: Any, core: client.CoreV1Api) -> None:
    """kubectl's typed clients send ``application/vnd.kubernetes.protobuf`` and do not fall
    back after a 415; kube-apiserver decodes the body (the ``k8s\\x00`` prefix and a
    runtime.Unknown: k8s.io/apimachinery/pkg/runtime/serializer/protobuf/protobuf.go,
    ``Serializer.Decode``) as any other (apiserver/pkg/endpoints/handlers/create.go)."""
    out = kubectl("create", "namespace", "team", "-v=8", stderr=True)
    assert "Content-Type: application/vnd.kubernetes.protobuf" in out
    assert "namespace/team created" in out
    kubectl("create", "configmap", "settings", "-n", "team", "--from-literal=mode=fast",
            "--from-literal=level=3")
    kubectl("create", "secret", "generic", "token", "-n", "team", "--from-literal=key=s3cret")
    kubectl("create", "serviceaccount", "robot", "-n", "team")
    assert core.read_namespace("team").status.phase == "Active"
    assert core.read_namespaced_config_map("settings", "team").data == {
        "mode": "fast", "level": "3"}
    secret = core.read_namespaced_secret("token", "team")
    assert (secret.type, secret.data) == ("Opaque", {"key": "czNjcmV0"})  # bytes: base64
    robot = core.read_namespaced_service_account("robot", "team")
    assert robot.metadata.name == "robot" and robot.automount_service_account_token is None


def test_a_protobuf_pod_keeps_set_pointers_and_drops_go_zero_values(server: ApiServer,
                                                                    core: client.CoreV1Api
                                                                    ) -> None:
    """The Go types behind the messages: a pointer field sent at its zero
    (``terminationGracePeriodSeconds: 0``, ``automountServiceAccountToken: false``) is a
    set value, a value-typed field at its zero is ``omitempty`` (``stdin: false``), the
    zero Time is null, IntOrString and Quantity keep their JSON forms
    (k8s.io/api/core/v1/types.go; apimachinery meta/v1/time_proto.go,
    util/intstr/intstr.go, api/resource/quantity_proto.go)."""
    pod = protobuf.message_class("k8s.io.api.core.v1.Pod")()
    pod.metadata.name = "pb"
    pod.metadata.labels["app"] = "web"
    pod.metadata.creationTimestamp.SetInParent()  # gogo writes the zero Time as empty
    pod.spec.terminationGracePeriodSeconds = 0
    pod.spec.automountServiceAccountToken = False
    pod.spec.nodeName = "n1"
    container = pod.spec.containers.add()
    container.name, container.image, container.stdin = "app", "demo", False
    container.resources.limits["cpu"].string = "250m"
    port = container.ports.add()
    port.containerPort, port.protocol = 8080, "TCP"
    probe = container.readinessProbe.handler.httpGet  # inline in JSON
    probe.path, probe.port.type, probe.port.strVal = "/ready", 1, "http"
    code, body = request(server, "POST", "/api/v1/namespaces/default/pods",
                         envelope("v1", "Pod", pod),
                         {"Content-Type": protobuf.CONTENT_TYPE, "Accept": "application/json"})
    assert code == 201, body
    stored = server.peek(POD, "pb", "default")
    assert stored is not None
    spec, app = stored["spec"], stored["spec"]["containers"][0]
    assert spec["terminationGracePeriodSeconds"] == 0
    assert spec["automountServiceAccountToken"] is False
    assert "stdin" not in app and "hostNetwork" not in spec
    assert app["resources"] == {"limits": {"cpu": "250m"}}
    assert app["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert app["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert stored["metadata"]["labels"] == {"app": "web"}
    assert core.read_namespaced_pod("pb", "default").spec.node_name == "n1"


def test_a_protobuf_lease_and_node_are_read_with_their_times(server: ApiServer) -> None:
    """coordination/v1 and core/v1 messages as client-go's leader election and a kubelet
    send them: MicroTime in RFC 3339 with microseconds, Time to the second
    (apimachinery meta/v1 micro_time.go and time.go ``MarshalJSON``), a pointer int32
    at its value (k8s.io/api/coordination/v1/types.go)."""
    lease = protobuf.message_class("k8s.io.api.coordination.v1.Lease")()
    lease.metadata.name = "podnet-controller"
    lease.spec.holderIdentity = "a"
    lease.spec.leaseDurationSeconds = 15
    lease.spec.renewTime.seconds, lease.spec.renewTime.nanos = 1_700_000_000, 123_456_000
    headers = {"Content-Type": protobuf.CONTENT_TYPE}
    code, body = request(server, "POST",
                         "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
                         envelope("coordination.k8s.io/v1", "Lease", lease), headers)
    assert code == 201, body
    assert body["spec"] == {"holderIdentity": "a", "leaseDurationSeconds": 15,
                            "renewTime": "2023-11-14T22:13:20.123456Z"}
    node = protobuf.message_class("k8s.io.api.core.v1.Node")()
    node.metadata.name = "n1"
    ready = node.status.conditions.add()
    ready.type, ready.status = "Ready", "True"
    ready.lastHeartbeatTime.seconds = 1_700_000_000
    node.status.capacity["pods"].string = "110"
    code, body = request(server, "POST", "/api/v1/nodes", envelope("v1", "Node", node),
                         headers)
    assert code == 201, body
    stored = server.peek(NODE, "n1", None)
    assert stored is not None and stored["status"]["capacity"] == {"pods": "110"}
    assert stored["status"]["conditions"][0]["lastHeartbeatTime"] == "2023-11-14T22:13:20Z"


def test_protobuf_for_a_custom_resource_is_415_and_a_bad_body_400(server: ApiServer) -> None:
    """Custom resources have no protobuf form: apiextensions-apiserver answers 415
    UnsupportedMediaType (customresource_handler.go serves JSON and YAML only); a body
    that is no protobuf envelope fails decoding, 400 BadRequest
    (handlers/create.go, ``transformDecodeError``)."""
    cr = protobuf.message_class("k8s.io.api.core.v1.ConfigMap")()
    cr.metadata.name = "x"
    headers = {"Content-Type": protobuf.CONTENT_TYPE}
    code, body = request(server, "POST",
                         "/apis/podnet.io/v1alpha1/namespaces/default/podnetworks",
                         envelope("podnet.io/v1alpha1", "PodNetwork", cr), headers)
    assert (code, body["reason"]) == (415, "UnsupportedMediaType")
    code, body = request(server, "POST", "/api/v1/namespaces/default/configmaps",
                         b"not protobuf", headers)
    assert (code, body["reason"]) == (400, "BadRequest")


def test_an_accept_without_json_is_406(server: ApiServer) -> None:
    """Content negotiation: an Accept naming no media type the server can write is 406
    NotAcceptable, "only the following media types are accepted: ..."
    (k8s.io/apiserver/pkg/endpoints/handlers/negotiation/negotiate.go,
    ``NegotiateOutputMediaType`` and ``errNotAcceptable``). The emulator writes JSON only;
    kubectl's ``Accept`` lists JSON after protobuf, so it is answered."""
    code, body = request(server, "GET", "/api/v1/namespaces",
                         headers={"Accept": protobuf.CONTENT_TYPE})
    assert (code, body["reason"]) == (406, "NotAcceptable")
    assert body["message"].startswith("only the following media types are accepted:")
    code, _ = request(server, "GET", "/api/v1/namespaces",
                      headers={"Accept": f"{protobuf.CONTENT_TYPE},application/json"})
    assert code == 200


# --- evictions ------------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_drain_cordons_and_evicts(server: ApiServer, kubectl: Any) -> None:
    """kubectl drain finds ``pods/eviction`` in discovery and evicts each pod (a protobuf
    policy/v1 Eviction): staging/src/k8s.io/kubectl/pkg/drain/drain.go
    (``CheckEvictionSupport``, ``EvictPod``). Without a PodDisruptionBudget the eviction
    deletes the pod with its deleteOptions and answers 201 Success
    (pkg/registry/core/pod/storage/eviction.go, ``EvictionREST.Create``)."""
    server.cluster.create(NODE, {"metadata": {"name": "n1"}, "status": {
        "conditions": [{"type": "Ready", "status": "True"}]}})
    for name in ("a", "b"):
        server.cluster.create(POD, running_pod(name))
    out = kubectl("drain", "n1", "--force", "--grace-period=0", "--timeout=10s", "-v=8",
                  stderr=True, timeout="10s")
    assert "/api/v1/namespaces/default/pods/a/eviction" in out
    assert "pod/a evicted" in out and "pod/b evicted" in out and "node/n1 drained" in out
    assert kubectl("get", "pods", "-o", "name") == ""
    assert kubectl("get", "nodes", "--no-headers").split()[1] == "Ready,SchedulingDisabled"
    code, body = request(server, "POST", "/api/v1/namespaces/default/pods/gone/eviction",
                         json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                                     "metadata": {"name": "gone"}}).encode(),
                         {"Content-Type": "application/json"})
    assert (code, body["reason"]) == (404, "NotFound")


def test_an_eviction_with_a_grace_period_leaves_the_pod_terminating(server: ApiServer) -> None:
    """The eviction's deleteOptions are the delete's: without a grace of 0 the pod is marked
    with its grace period and kept Terminating (eviction.go deletes through the pod
    registry: pkg/registry/core/pod/strategy.go ``CheckGracefulDelete``); the answer is
    201 with a Success Status (handlers/create.go sets the code of a returned Status)."""
    server.cluster.create(POD, running_pod("web"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "web"},
                "deleteOptions": {"gracePeriodSeconds": 5}}
    code, body = request(server, "POST", "/api/v1/namespaces/default/pods/web/eviction",
                         json.dumps(eviction).encode(), {"Content-Type": "application/json"})
    assert (code, body["status"], body["code"]) == (201, "Success", 201)
    stored = server.peek(POD, "web", "default")
    assert stored is not None and stored["metadata"]["deletionGracePeriodSeconds"] == 5
    wrong = eviction | {"metadata": {"name": "other"}}
    code, body = request(server, "POST", "/api/v1/namespaces/default/pods/web/eviction",
                         json.dumps(wrong).encode(), {"Content-Type": "application/json"})
    assert code == 400 and "does not match" in body["message"]


# --- tables -------------------------------------------------------------------------------


def header(out: str) -> list[str]:
    """The column names of kubectl's table (names may hold one space: LAST SEEN)."""
    return [c.strip() for c in re.split(r"\s{2,}", out.splitlines()[0]) if c.strip()]


@needs_kubectl
def test_kubectl_get_pods_has_the_real_columns_and_cells(server: ApiServer,
                                                         kubectl: Any) -> None:
    """pkg/printers/internalversion/printers.go ``printPod``: READY counts ready running
    containers, RESTARTS sums restarts and says when the last was, STATUS is a waiting or
    terminated container's reason over the phase, Init:i/n while an init container runs,
    Terminating once deletionTimestamp is set; -o wide adds IP, NODE, NOMINATED NODE and
    READINESS GATES (priority 1)."""
    cluster = server.cluster
    now = cluster.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    running = {"name": "app", "ready": True, "restartCount": 2, "state": {"running": {}},
               "lastState": {"terminated": {"exitCode": 1, "finishedAt": now}}}
    cluster.create(POD, running_pod("web", containerStatuses=[running]))
    crashing = {"name": "app", "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    cluster.create(POD, running_pod("crash", containerStatuses=[crashing]))
    init = running_pod("init", phase="Pending", initContainerStatuses=[
        {"name": "setup", "ready": False, "restartCount": 0, "state": {"running": {}}}])
    init["spec"]["initContainers"] = [{"name": "setup", "image": "demo"}]
    cluster.create(POD, init)
    gated = running_pod("gated", conditions=[{"type": "example.com/ok", "status": "True"}])
    gated["spec"]["readinessGates"] = [{"conditionType": "example.com/ok"},
                                       {"conditionType": "example.com/other"}]
    cluster.create(POD, gated)
    out = kubectl("get", "pods", "--sort-by=.metadata.name")
    assert header(out) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["web"][1:4] == ["1/1", "Running", "2"] and rows["web"][4].startswith("(")
    assert rows["crash"][1:4] == ["0/1", "CrashLoopBackOff", "0"]
    assert rows["init"][1:3] == ["0/1", "Init:0/1"]
    wide = kubectl("get", "pods", "-o", "wide", "--sort-by=.metadata.name")
    assert header(wide) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE",
                            "NOMINATED NODE", "READINESS GATES"]
    gated_row = next(line.split() for line in wide.splitlines() if line.startswith("gated"))
    assert gated_row[-4:] == ["10.1.0.9", "n1", "<none>", "1/2"]
    kubectl("delete", "pod", "web", "--wait=false")
    assert kubectl("get", "pod", "web", "--no-headers").split()[2] == "Terminating"


@needs_kubectl
def test_kubectl_get_of_the_other_kinds_has_the_real_columns(server: ApiServer,
                                                             kubectl: Any) -> None:
    """printers.go: ``printNode`` (STATUS from the Ready condition and
    SchedulingDisabled, ROLES from node-role.kubernetes.io/ labels, VERSION; wide:
    INTERNAL-IP EXTERNAL-IP OS-IMAGE KERNEL-VERSION CONTAINER-RUNTIME),
    ``printNamespace``, ``printConfigMap`` (DATA), ``printLease`` (HOLDER),
    ``printService`` (TYPE CLUSTER-IP EXTERNAL-IP PORT(S); wide: SELECTOR)."""
    server.cluster.create(NODE, {
        "metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True"}],
                   "addresses": [{"type": "InternalIP", "address": "192.0.2.5"}],
                   "nodeInfo": {"kubeletVersion": "v1.32.0", "osImage": "Debian"}}})
    nodes = kubectl("get", "nodes", "-o", "wide")
    assert header(nodes) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP",
                             "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"]
    cells = nodes.splitlines()[1].split()
    assert cells[:3] == ["n1", "Ready,SchedulingDisabled", "control-plane"]
    assert cells[4:] == ["v1.32.0", "192.0.2.5", "<none>", "Debian", "<unknown>", "<unknown>"]
    namespaces = kubectl("get", "namespaces")
    assert header(namespaces) == ["NAME", "STATUS", "AGE"]
    assert any(line.split()[:2] == ["kube-system", "Active"] for line in namespaces.splitlines())
    kubectl("create", "configmap", "settings", "--from-literal=a=1", "--from-literal=b=2")
    cms = kubectl("get", "configmaps")
    assert header(cms) == ["NAME", "DATA", "AGE"] and cms.splitlines()[1].split()[1] == "2"
    server.cluster.create(LEASE, {"metadata": {"name": "podnet", "namespace": "kube-system"},
                                  "spec": {"holderIdentity": "controller-a"}})
    leases = kubectl("get", "leases", "-n", "kube-system")
    assert header(leases) == ["NAME", "HOLDER", "AGE"]
    assert leases.splitlines()[1].split()[:2] == ["podnet", "controller-a"]
    services = kubectl("get", "services", "-o", "wide")
    assert header(services) == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE",
                                "SELECTOR"]
    assert services.splitlines()[1].split()[:5] == [
        "kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]


@needs_kubectl
def test_kubectl_get_events_has_the_real_columns(server: ApiServer, kubectl: Any) -> None:
    """printers.go ``printEvent``: LAST SEEN TYPE REASON OBJECT MESSAGE, and with -o wide
    SUBOBJECT SOURCE FIRST SEEN COUNT NAME (no NAME column first, no AGE); a singleton
    event without a count counts 1; OBJECT is kind/name lower-cased."""
    server.cluster.create(EVENT, {
        "metadata": {"name": "web.1", "namespace": "default"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
        "reason": "Routed", "message": "10.1.0.9 routed ", "type": "Normal",
        "source": {"component": "podnet", "host": "n1"},
        "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:00:00Z"})
    out = kubectl("get", "events")
    assert header(out) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert out.splitlines()[1].split()[1:] == ["Normal", "Routed", "pod/web", "10.1.0.9",
                                               "routed"]
    wide = kubectl("get", "events", "-o", "wide")
    assert header(wide) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "SUBOBJECT", "SOURCE",
                            "MESSAGE", "FIRST SEEN", "COUNT", "NAME"]
    assert wide.splitlines()[1].split()[-2:] == ["1", "web.1"]
    assert "podnet, n1" in wide


@needs_kubectl
def test_kubectl_get_pods_watch_prints_table_rows_as_they_change(server: ApiServer,
                                                                 kubectl: Any) -> None:
    """A watch with as=Table sends each change as a Table row (apiserver
    handlers/watch.go transforms each event's object as the list's), so ``kubectl get pods
    -w`` shows the pod going Terminating."""
    server.cluster.create(POD, running_pod("web"))

    def later() -> None:
        deadline = time.monotonic() + 5
        while not server._watches and time.monotonic() < deadline:
            time.sleep(0.02)  # kubectl has listed and watches
        server.cluster.delete(POD, "web", "default")

    deleter = threading.Thread(target=later)
    deleter.start()
    out = kubectl("get", "pods", "-w", timeout="2s", check=False)
    deleter.join()
    statuses = [line.split()[2] for line in out.splitlines()[1:] if line.startswith("web")]
    assert statuses[0] == "Running" and "Terminating" in statuses[1:]


def test_a_table_watch_sends_the_column_definitions_once(server: ApiServer) -> None:
    """Only the first event's Table carries columnDefinitions: the watch handler renders
    later ones with NoHeaders (kubernetes/kubernetes PR 71548, handlers/watch.go)."""
    server.cluster.create(POD, running_pod("a"))
    server.cluster.create(POD, running_pod("b"))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("GET", "/api/v1/namespaces/default/pods?watch=1&timeoutSeconds=1",
                 headers={"Accept": TABLE})
    events = [json.loads(line) for line in conn.getresponse().read().splitlines() if line]
    conn.close()
    tables = [e["object"] for e in events if e["type"] == "ADDED"]
    assert [t["rows"][0]["cells"][0] for t in tables] == ["a", "b"]
    assert [c["name"] for c in tables[0]["columnDefinitions"]][:3] == ["Name", "Ready",
                                                                       "Status"]
    assert tables[1]["columnDefinitions"] is None


# --- services, service accounts -------------------------------------------------------------


def test_services_get_a_cluster_ip_from_the_service_cidr(server: ApiServer,
                                                         core: client.CoreV1Api) -> None:
    """pkg/registry/core/service/ipallocator: a ClusterIP is allocated from the service
    CIDR, dynamic ones above the static band; a requested one must be in the range and
    free (422 otherwise); node ports come from 30000-32767; kube-apiserver keeps the
    ``kubernetes`` service on the range's first address
    (pkg/controlplane/controller/kubernetesservice). On update, an omitted ClusterIP is
    kept and a changed one refused (service/strategy.go ``patchAllocatedValues``,
    validation ``ValidateServiceUpdate``)."""
    cidr = ipaddress.ip_network("10.96.0.0/12")
    kube = core.read_namespaced_service("kubernetes", "default")
    assert kube.spec.cluster_ip == "10.96.0.1" and kube.spec.ports[0].port == 443
    made = [core.create_namespaced_service("default", {
        "metadata": {"name": f"s{i}"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}) for i in range(3)]
    ips = [s.spec.cluster_ip for s in made]
    assert len(set(ips)) == 3 and all(ipaddress.ip_address(ip) in cidr for ip in ips)
    assert "10.96.0.1" not in ips
    assert made[0].spec.ports[0].target_port == 80 and made[0].spec.ports[0].protocol == "TCP"
    assert made[0].spec.type == "ClusterIP" and made[0].spec.session_affinity == "None"
    with pytest.raises(ApiException) as taken:
        core.create_namespaced_service("default", {"metadata": {"name": "dup"},
                                                   "spec": {"clusterIP": ips[0],
                                                            "ports": [{"port": 80}]}})
    assert taken.value.status == 422 and "already allocated" in taken.value.body
    with pytest.raises(ApiException) as outside:
        core.create_namespaced_service("default", {"metadata": {"name": "far"},
                                                   "spec": {"clusterIP": "192.0.2.1",
                                                            "ports": [{"port": 80}]}})
    assert outside.value.status == 422 and "not in the valid range" in outside.value.body
    node_port = core.create_namespaced_service("default", {
        "metadata": {"name": "np"}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}})
    assert 30000 <= node_port.spec.ports[0].node_port <= 32767
    headless = core.create_namespaced_service("default", {
        "metadata": {"name": "hl"}, "spec": {"clusterIP": "None", "ports": [{"port": 80}]}})
    assert headless.spec.cluster_ip == "None"
    body = made[1].to_dict()
    replaced = core.replace_namespaced_service("s1", "default", {
        "metadata": {"name": "s1", "resourceVersion": body["metadata"]["resource_version"]},
        "spec": {"ports": [{"port": 81}]}})
    assert replaced.spec.cluster_ip == ips[1]
    dropped = core.patch_namespaced_service("s1", "default", [
        {"op": "remove", "path": "/spec/clusterIP"}, {"op": "remove", "path": "/spec/clusterIPs"}])
    assert dropped.spec.cluster_ip == ips[1]
    with pytest.raises(ApiException) as patched:
        core.patch_namespaced_service("s1", "default", {"spec": {"clusterIP": "10.96.0.78",
                                                                 "clusterIPs": ["10.96.0.78"]}})
    assert patched.value.status == 422 and "may not change once set" in patched.value.body
    with pytest.raises(ApiException) as changed:
        core.replace_namespaced_service("s1", "default", {
            "metadata": {"name": "s1"}, "spec": {"clusterIP": "10.96.0.77", "clusterIPs": [
                "10.96.0.77"], "ports": [{"port": 81}]}})
    assert changed.value.status == 422
    core.delete_namespaced_service("s0", "default")
    again = core.create_namespaced_service("default", {
        "metadata": {"name": "again"}, "spec": {"clusterIP": ips[0], "ports": [{"port": 80}]}})
    assert again.spec.cluster_ip == ips[0]  # a deleted service's address is free again


@needs_kubectl
def test_every_namespace_gets_a_default_service_account(server: ApiServer, kubectl: Any,
                                                        core: client.CoreV1Api) -> None:
    """kube-controller-manager's serviceaccount controller makes a ``default``
    ServiceAccount in each active namespace and makes it again when it is deleted
    (pkg/controller/serviceaccount/serviceaccounts_controller.go, ``syncNamespace``)."""
    listed = {(sa.metadata.namespace, sa.metadata.name)
              for sa in core.list_service_account_for_all_namespaces().items}
    assert {("default", "default"), ("kube-system", "default")} <= listed
    kubectl("create", "namespace", "team")
    assert core.read_namespaced_service_account("default", "team").metadata.name == "default"
    kubectl("delete", "serviceaccount", "default", "-n", "team")
    assert server.peek(SERVICE_ACCOUNT, "default", "team") is not None


@needs_kubectl
def test_discovery_lists_the_new_kinds(kubectl: Any, server: ApiServer) -> None:
    """``kubectl api-resources`` reads /api and /apis (discovery,
    apiserver/pkg/endpoints/discovery): services are served and pods/eviction is a
    policy/v1 subresource of pods."""
    out = kubectl("api-resources")
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:]}
    assert rows["services"][1:] == ["svc", "v1", "true", "Service"]
    assert rows["serviceaccounts"][1:] == ["sa", "v1", "true", "ServiceAccount"]
    _, body = request(server, "GET", "/api/v1")
    eviction = next(r for r in body["resources"] if r["name"] == "pods/eviction")
    assert (eviction["group"], eviction["version"], eviction["kind"]) == (
        "policy", "v1", "Eviction")


# --- events.k8s.io/v1 -------------------------------------------------------------------------


@needs_kubectl
def test_events_k8s_io_v1_is_core_events_under_other_names(server: ApiServer, kubectl: Any,
                                                           core: client.CoreV1Api) -> None:
    """events.k8s.io/v1 Events are core/v1's in one store, converted field by field:
    note/message, regarding/involvedObject, reportingController/reportingComponent,
    deprecatedCount/count... (pkg/apis/events/v1/conversion.go,
    ``Convert_v1_Event_To_core_Event`` and back); both versions print with ``printEvent``
    and both are listed by discovery."""
    with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        events = client.EventsV1Api(api_client)
        made = events.create_namespaced_event("default", {
            "metadata": {"name": "web.1"}, "eventTime": "2024-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "web", "namespace": "default"},
            "note": "routed 10.1.0.9", "reason": "Routed", "type": "Normal",
            "action": "Route", "reportingController": "podnet.io/controller",
            "reportingInstance": "n1"})
        assert made.note == "routed 10.1.0.9" and made.regarding.name == "web"
        old = core.read_namespaced_event("web.1", "default")
        assert (old.message, old.involved_object.name, old.reporting_component) == (
            "routed 10.1.0.9", "web", "podnet.io/controller")
        core.patch_namespaced_event("web.1", "default", {"count": 3})
        assert events.read_namespaced_event("web.1", "default").deprecated_count == 3
        events.patch_namespaced_event("web.1", "default", {"note": "again"})
        assert core.read_namespaced_event("web.1", "default").message == "again"
        listed = events.list_namespaced_event("default").items
        assert [e.metadata.name for e in listed] == ["web.1"]
    rows = {line.split()[0]: line.split() for line in kubectl("api-resources").splitlines()}
    assert "events.k8s.io/v1" in kubectl("api-resources", "--api-group=events.k8s.io")
    assert rows["events"][0] == "events"
    out = kubectl("get", "events.v1.events.k8s.io")
    assert out.splitlines()[1].split()[1:4] == ["Normal", "Routed", "pod/web"]


def test_the_service_range_is_a_flag_and_a_bad_one_is_exit_2(tmp_path: Path) -> None:
    """kube-apiserver's ``--service-cluster-ip-range``; a range that is no CIDR is an
    operator mistake: one line naming the flag, exit 2."""
    done = subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "apiserver", "--port", "0",
         "--service-cluster-ip-range", "10.0.0.0/33"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--service-cluster-ip-range" in done.stderr
    assert "Traceback" not in done.stderr
    with ApiServer(service_cidr="10.100.0.0/16") as srv, client.ApiClient(
            client.Configuration(host=srv.url)) as api_client:
        svc = client.CoreV1Api(api_client).read_namespaced_service("kubernetes", "default")
        assert svc.spec.cluster_ip == "10.100.0.1"


def _kubectl_version() -> str:
    if KUBECTL is None:
        return ""
    done = subprocess.run([KUBECTL, "version", "--client", "-o", "json"], capture_output=True,
                          text=True, timeout=30)
    return str(json.loads(done.stdout or "{}").get("clientVersion", {}).get("gitVersion", ""))


@pytest.mark.skipif(not _kubectl_version().startswith("v1.32.4"),
                    reason="sim/protos was taken from kubectl v1.32.4")
def test_the_shipped_descriptors_are_kubectls_own() -> None:
    """sim/protos is what scripts/k8s_protos.py takes from the kubectl on PATH (the
    descriptors gogo-protobuf registers in every Kubernetes Go binary)."""
    script = Path(__file__).resolve().parent.parent / "scripts" / "k8s_protos.py"
    done = subprocess.run([sys.executable, str(script), "--check", str(KUBECTL)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
