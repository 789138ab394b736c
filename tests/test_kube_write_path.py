"""KubeCluster's writes: sent on the official client's own pool with its auth and headers.

Writes skip ``call_api`` (``core/cluster/kube.py``): these tests check that what the
client would have added is still on every write — the bearer token (refreshed by the
client's hook), the User-Agent, the kubeconfig host's path prefix — that the body is
the object as JSON, and that the pool is sized as asked. A plain HTTP server on
127.0.0.1 records each request as it came.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s_client

from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import POD, POD_NETWORK, ApiError, Conflict

Seen = list[dict[str, Any]]


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: Seen
    status = 200

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.server.seen.append({  # type: ignore[attr-defined]
            "method": self.command, "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body})
        status = self.server.status  # type: ignore[attr-defined]
        data = (json.dumps({"kind": "Status", "reason": "Conflict", "message": "taken"})
                if status == 409 else "{}").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET = _answer

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.seen = []  # type: ignore[attr-defined]
    server.status = 200  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _kube(server: ThreadingHTTPServer, prefix: str = "", token: str | None = None
          ) -> KubeCluster:
    configuration = k8s_client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    if token is not None:
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
    return KubeCluster(k8s_client.ApiClient(configuration))


def _pn(name: str) -> dict[str, Any]:
    return {"apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"podName": name, "podUid": "u-1", "nodeName": "n1",
                     "provider": "reference", "note": "é"}}


def test_every_write_carries_the_clients_token_user_agent_and_the_object(
        recorder: ThreadingHTTPServer) -> None:
    kube = _kube(recorder, token="t0k")
    kube.api_client.user_agent = "podnet/test"
    obj = _pn("a")
    kube.create(POD_NETWORK, obj)
    kube.update_status(POD_NETWORK, {**obj, "status": {"phase": "Routed"}})
    kube.patch(POD_NETWORK, "a", {"metadata": {"labels": {"x": "y"}}}, "ns")
    kube.patch(POD, "p", [{"op": "remove", "path": "/metadata/finalizers/0"}], "ns",
               patch_type="json")
    kube.delete(POD_NETWORK, "a", "ns", uid="u-1")
    seen: Seen = recorder.seen  # type: ignore[attr-defined]
    assert [(r["method"], r["path"]) for r in seen] == [
        ("POST", "/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks"),
        ("PUT", "/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks/a/status"),
        ("PATCH", "/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks/a"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p"),
        ("DELETE", "/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks/a"),
    ]
    for request in seen:
        assert request["headers"]["authorization"] == "Bearer t0k"
        assert request["headers"]["user-agent"] == "podnet/test"
        assert request["headers"]["accept"] == "application/json"
    assert [r["headers"]["content-type"] for r in seen] == [
        "application/json", "application/json", "application/merge-patch+json",
        "application/json-patch+json", "application/json"]
    assert json.loads(seen[0]["body"]) == obj
    assert json.loads(seen[1]["body"])["status"] == {"phase": "Routed"}
    assert json.loads(seen[3]["body"]) == [{"op": "remove", "path": "/metadata/finalizers/0"}]
    assert json.loads(seen[4]["body"])["preconditions"] == {"uid": "u-1"}


def test_a_refreshed_token_is_on_the_next_write(recorder: ThreadingHTTPServer) -> None:
    kube = _kube(recorder, token="first")
    tokens = iter(["second", "third"])

    def refresh(configuration: k8s_client.Configuration) -> None:
        configuration.api_key["authorization"] = next(tokens)

    kube.api_client.configuration.refresh_api_key_hook = refresh
    kube.create(POD_NETWORK, _pn("a"))
    kube.create(POD_NETWORK, _pn("b"))
    seen: Seen = recorder.seen  # type: ignore[attr-defined]
    assert [r["headers"]["authorization"] for r in seen] == ["Bearer second", "Bearer third"]


def test_writes_keep_the_hosts_path_prefix_as_reads_do(recorder: ThreadingHTTPServer) -> None:
    kube = _kube(recorder, prefix="/k8s/clusters/c-1")
    kube.create(POD_NETWORK, _pn("a"))
    kube.get(POD_NETWORK, "a", "ns")
    seen: Seen = recorder.seen  # type: ignore[attr-defined]
    assert [r["path"] for r in seen] == [
        "/k8s/clusters/c-1/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks",
        "/k8s/clusters/c-1/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks/a"]


def test_a_refused_write_is_the_ports_error_and_is_observed(
        recorder: ThreadingHTTPServer) -> None:
    kube = _kube(recorder)
    observed: list[tuple[str, str]] = []
    kube.on_request = lambda verb, status, _s: observed.append((verb, status))
    recorder.status = 409  # type: ignore[attr-defined]
    with pytest.raises(Conflict, match="taken"):
        kube.create(POD_NETWORK, _pn("a"))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        closed = free.getsockname()[1]  # nothing listens there once this closes
    kube.api_client.configuration.host = f"http://127.0.0.1:{closed}"
    gone = KubeCluster(k8s_client.ApiClient(kube.api_client.configuration))
    gone.on_request = kube.on_request
    with pytest.raises(ApiError) as info:
        gone.update(POD_NETWORK, _pn("a"))
    assert info.value.code == 503 and "unreachable" in str(info.value)
    assert observed == [("create", "409"), ("update", "error")]


def test_the_pool_holds_as_many_connections_as_asked(tmp_path: Path,
                                                     recorder: ThreadingHTTPServer) -> None:
    config = tmp_path / "kubeconfig"
    url = f"http://127.0.0.1:{recorder.server_address[1]}"
    config.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "c", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "c"}}]}))
    default = KubeCluster.connect(str(config))
    kube = KubeCluster.connect(str(config), connections=40)
    for cluster in (default, kube):
        cluster.create(POD_NETWORK, _pn("a"))
    sizes = [c.api_client.rest_client.pool_manager.connection_from_url(url).pool.maxsize
             for c in (default, kube)]
    assert sizes[0] != 40 and sizes[1] == 40


def test_writes_go_through_the_clients_proxy_when_it_has_one(
        recorder: ThreadingHTTPServer) -> None:
    configuration = k8s_client.Configuration()
    configuration.host = "http://api.cluster.test:6443"  # resolved by the proxy alone
    configuration.proxy = f"http://127.0.0.1:{recorder.server_address[1]}"
    kube = KubeCluster(k8s_client.ApiClient(configuration))
    kube.create(POD_NETWORK, _pn("a"))
    seen: Seen = recorder.seen  # type: ignore[attr-defined]
    # a plain-HTTP proxy is asked for the absolute URL
    assert [r["path"] for r in seen] == [
        "http://api.cluster.test:6443/apis/podnet.io/v1alpha1/namespaces/ns/podnetworks"]
