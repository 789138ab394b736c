"""``podnet-cni`` run as a container runtime runs it (``podnet.testing.cni.run_cni``: a new
process, the ``CNI_*`` environment, the config on stdin), its exit status and stdout
checked against the CNI specification 1.1.0.

The node agent is built beside the plugin, so the plugin talks here to ``ProtocolTestPeer``:
a small real HTTP server on a unix socket speaking the plugin <-> agent protocol of
docs/node.md, and nothing more (it plumbs nothing). It is the protocol's test peer, not an
agent.
"""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.cni import PLUGIN_FILE, CniResult, plugin_argv, pod_args, run_cni

VERSIONS = ["0.3.1", "0.4.0", "1.0.0", "1.1.0"]
CONTAINER = "c0ffee01"

#: what the peer answers for an ADD: a 1.1.0 result, dual stack, with 1.1.0-only fields
RESULT = {
    "cniVersion": "1.1.0",
    "interfaces": [{"name": "eth0", "mac": "02:00:0a:00:00:05", "sandbox": "", "mtu": 1450}],
    "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1", "interface": 0},
            {"address": "fd00::5/64", "gateway": "fd00::1", "interface": 0}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1", "priority": 100},
               {"dst": "::/0", "gw": "fd00::1"}],
    "dns": {},
}


class ProtocolTestPeer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The agent's side of the protocol, as data: attachments keyed by (container, ifname),
    the requests it received, and answers a test may force per path."""

    daemon_threads = True

    def __init__(self, path: str) -> None:
        self.path = path
        self.requests: list[tuple[str, str, Any]] = []
        self.attachments: dict[tuple[str, str], dict[str, Any]] = {}
        #: path -> (HTTP status, body object) answered instead of the protocol's behaviour
        self.forced: dict[str, tuple[int, Any]] = {}
        super().__init__(path, _PeerHandler)
        os.chmod(path, 0o600)

    def answer(self, method: str, target: str, body: Any) -> tuple[int, Any]:
        self.requests.append((method, target, body))
        if target in self.forced:
            return self.forced[target]
        if method == "GET" and target == "/v1/cni/status":
            return 200, {}
        if method != "POST" or not isinstance(body, dict):
            return 400, {"code": 7, "msg": f"{method} {target}: not a protocol request"}
        key = (body.get("containerId"), body.get("ifName"))
        if target == "/v1/cni/add":
            result = json.loads(json.dumps(RESULT))
            result["interfaces"][0]["name"] = body["ifName"]
            result["interfaces"][0]["sandbox"] = body["netns"]
            self.attachments[key] = result  # type: ignore[index]
            return 200, result
        if target == "/v1/cni/del":
            self.attachments.pop(key, None)  # type: ignore[arg-type]
            return 200, {}
        if target == "/v1/cni/check":
            if key in self.attachments:
                return 200, {}
            return 500, {"code": 3, "msg": f"containerId {key[0]}: no attachment {key[1]}"}
        if target == "/v1/cni/gc":
            valid = {(a["containerID"], a["ifname"]) for a in body["validAttachments"]}
            for gone in [k for k in self.attachments if k not in valid]:
                del self.attachments[gone]
            return 200, {}
        return 404, {"code": 4, "msg": f"{target}: unknown"}


class _PeerHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: ProtocolTestPeer

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        status, answer = self.server.answer(self.command, self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def log_message(self, format: str, *args: Any) -> None:  # the socket has no address
        pass


@pytest.fixture
def sockdir() -> Iterator[Path]:
    # short: a unix socket's path is limited to 107 bytes, pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="pncni"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def peer(sockdir: Path) -> Iterator[ProtocolTestPeer]:
    server = ProtocolTestPeer(str(sockdir / "agent.sock"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def netns(sockdir: Path) -> Path:
    """Stands for a network namespace's path: the plugin passes it on, it never enters it."""
    path = sockdir / "netns-a"
    path.touch()
    return path


def conf(socket: str, version: str = "1.1.0", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": version, "name": "podnet", "type": "podnet-cni",
            "agentSocket": socket, **extra}


def env(netns: Path | str | None, container: str = CONTAINER, **extra: str | None
        ) -> dict[str, str | None]:
    return {"CNI_CONTAINERID": container, "CNI_NETNS": None if netns is None else str(netns),
            "CNI_ARGS": pod_args(), **extra}


# --- VERSION and the start ---------------------------------------------------------------


def test_version_answers_the_supported_versions() -> None:
    result = run_cni("VERSION", {"cniVersion": "1.1.0"})
    assert result.exit_code == 0
    assert result.output == {"cniVersion": "1.1.0", "supportedVersions": VERSIONS}


def test_the_three_ways_to_run_it_agree() -> None:
    console = Path(sys.executable).parent / "podnet-cni"
    for argv in ([str(console)], [sys.executable, "-m", "podnet.cni"], plugin_argv()):
        result = run_cni("VERSION", {"cniVersion": "1.0.0"}, argv=argv)
        assert result.ok and result.output["supportedVersions"] == VERSIONS, argv


def test_the_single_file_runs_without_site_packages_and_imports_only_the_stdlib() -> None:
    assert PLUGIN_FILE.read_text().startswith("#!/usr/bin/env python3\n")
    assert os.access(PLUGIN_FILE, os.X_OK)
    # -S: no site-packages at all, as on a bare host; -X importtime lists every import
    done = subprocess.run([sys.executable, "-S", "-X", "importtime", str(PLUGIN_FILE)],
                          env={"CNI_COMMAND": "VERSION"}, input=b"{}", capture_output=True,
                          check=True)
    assert json.loads(done.stdout)["cniVersion"] == "1.1.0"
    imported = {line.split("|")[-1].strip().split(".")[0]
                for line in done.stderr.decode().splitlines() if line.startswith("import time:")}
    imported.discard("imported package")
    assert imported and imported <= set(sys.stdlib_module_names) | {"encodings"}, (
        imported - set(sys.stdlib_module_names))


def test_run_as_a_module_it_loads_no_engine_client_or_sdk() -> None:
    probe = (
        "import runpy, sys, json\n"
        "try:\n"
        "    runpy.run_module('podnet.cni', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", probe], env={"CNI_COMMAND": "VERSION"},
                          input=b"{}", capture_output=True, check=True)
    modules = json.loads(done.stderr)
    podnet = {m for m in modules if m.startswith("podnet")}
    assert podnet <= {"podnet", "podnet.cni", "podnet.cni.plugin", "podnet.cni.__main__"}
    for heavy in ("kubernetes", "urllib3", "opentelemetry", "pluggy", "attrs", "yaml",
                  "transitions", "baidubce", "alibabacloud_ecs20140526", "ovsdbapp",
                  "http.client", "ssl"):
        assert heavy not in modules, heavy


# --- ADD, DEL, CHECK -------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_add_converts_the_result_to_the_requested_version(
        peer: ProtocolTestPeer, netns: Path, version: str) -> None:
    result = run_cni("ADD", conf(peer.path, version), env(netns))
    assert result.exit_code == 0, result
    out = result.output
    assert out["cniVersion"] == version
    assert set(out) <= {"cniVersion", "interfaces", "ips", "routes", "dns"}
    assert out["interfaces"][0]["name"] == "eth0"
    assert out["interfaces"][0]["sandbox"] == str(netns)
    assert [ip["address"] for ip in out["ips"]] == ["10.0.0.5/24", "fd00::5/64"]
    assert all(ip["interface"] == 0 for ip in out["ips"])
    if version in ("0.3.1", "0.4.0"):
        assert [ip["version"] for ip in out["ips"]] == ["4", "6"]
    else:
        assert all("version" not in ip for ip in out["ips"])
    if version == "1.1.0":
        assert out["interfaces"][0]["mtu"] == 1450 and out["routes"][0]["priority"] == 100
    else:
        assert "mtu" not in out["interfaces"][0] and "priority" not in out["routes"][0]
    (method, target, body), = peer.requests
    assert (method, target) == ("POST", "/v1/cni/add")
    assert body == {"cniVersion": version, "containerId": CONTAINER, "netns": str(netns),
                    "ifName": "eth0", "podNamespace": "default", "podName": "pod-a",
                    "podUid": "uid-a", "network": "podnet",
                    "config": conf(peer.path, version)}


def test_a_chained_add_keeps_the_previous_result(peer: ProtocolTestPeer, netns: Path) -> None:
    prev = {"cniVersion": "0.4.0",
            "interfaces": [{"name": "lo0", "sandbox": str(netns)}],
            "ips": [{"version": "4", "address": "192.168.9.9/32", "interface": 0}],
            "dns": {"nameservers": ["10.96.0.10"]}}
    result = run_cni("ADD", conf(peer.path, "0.4.0", prevResult=prev), env(netns))
    out = result.output
    assert [i["name"] for i in out["interfaces"]] == ["lo0", "eth0"]
    assert [(ip["address"], ip["interface"], ip["version"]) for ip in out["ips"]] == [
        ("192.168.9.9/32", 0, "4"), ("10.0.0.5/24", 1, "4"), ("fd00::5/64", 1, "6")]
    assert out["dns"] == {"nameservers": ["10.96.0.10"]}


def test_pod_identity_from_runtime_config(peer: ProtocolTestPeer, netns: Path) -> None:
    config = conf(peer.path, runtimeConfig={"podnet.io/pod": {
        "namespace": "ns1", "name": "web-0", "uid": "u-1"}})
    result = run_cni("ADD", config, env(netns, CNI_ARGS=None))
    assert result.ok, result
    body = peer.requests[-1][2]
    assert (body["podNamespace"], body["podName"], body["podUid"]) == ("ns1", "web-0", "u-1")


def test_del_is_idempotent_and_outputs_nothing(peer: ProtocolTestPeer, netns: Path) -> None:
    assert run_cni("ADD", conf(peer.path), env(netns)).ok
    for _ in range(2):
        result = run_cni("DEL", conf(peer.path), env(netns))
        assert (result.exit_code, result.stdout) == (0, "")
    assert peer.attachments == {}
    assert [t for _, t, _ in peer.requests] == ["/v1/cni/add", "/v1/cni/del", "/v1/cni/del"]


def test_del_with_the_netns_gone(peer: ProtocolTestPeer, sockdir: Path) -> None:
    gone = sockdir / "netns-gone"
    for netns in (str(gone), None):  # a path that no longer exists, or none given
        result = run_cni("DEL", conf(peer.path), env(netns))
        assert (result.exit_code, result.stdout) == (0, "")
    assert [b["netns"] for _, _, b in peer.requests] == [str(gone), None]


def test_del_with_the_agent_down(sockdir: Path, netns: Path) -> None:
    down = str(sockdir / "nobody.sock")
    # the namespace is gone: nothing is left in it, so the runtime may go on
    result = run_cni("DEL", conf(down), env(sockdir / "netns-gone"))
    assert (result.exit_code, result.stdout) == (0, "")
    # the namespace is still there: the runtime must try again
    run_cni("DEL", conf(down), env(netns)).check_error(11, down, "not reachable")


def test_check(peer: ProtocolTestPeer, netns: Path) -> None:
    assert run_cni("ADD", conf(peer.path), env(netns)).ok
    prev = json.loads(json.dumps(RESULT))
    result = run_cni("CHECK", conf(peer.path, prevResult=prev), env(netns))
    assert (result.exit_code, result.stdout) == (0, "")
    assert peer.requests[-1][2]["config"]["prevResult"] == prev
    # a container the agent does not know: the agent's error, passed through
    run_cni("CHECK", conf(peer.path), env(netns, container="other")).check_error(3, "other")


def test_check_is_not_defined_for_0_3_1(peer: ProtocolTestPeer, netns: Path) -> None:
    run_cni("CHECK", conf(peer.path, "0.3.1"), env(netns)).check_error(1, "CHECK", "0.3.1")
    assert peer.requests == []


# --- GC and STATUS ---------------------------------------------------------------------------


def test_gc_keeps_the_valid_attachments(peer: ProtocolTestPeer, netns: Path) -> None:
    for container in ("keep", "drop"):
        assert run_cni("ADD", conf(peer.path), env(netns, container=container)).ok
    valid = [{"containerID": "keep", "ifname": "eth0"}]
    result = run_cni("GC", {**conf(peer.path), "cni.dev/valid-attachments": valid},
                     {"CNI_IFNAME": None})
    assert (result.exit_code, result.stdout) == (0, "")
    assert set(peer.attachments) == {("keep", "eth0")}
    method, target, body = peer.requests[-1]
    assert (method, target, body["validAttachments"], body["network"]) == (
        "POST", "/v1/cni/gc", valid, "podnet")


def test_gc_without_the_list_removes_nothing(peer: ProtocolTestPeer) -> None:
    run_cni("GC", conf(peer.path)).check_error(7, "cni.dev/valid-attachments")
    run_cni("GC", {**conf(peer.path), "cni.dev/valid-attachments": [{"ifname": "eth0"}]}
            ).check_error(7, "cni.dev/valid-attachments[0]")
    assert peer.requests == []


def test_status(peer: ProtocolTestPeer, sockdir: Path) -> None:
    result = run_cni("STATUS", conf(peer.path))
    assert (result.exit_code, result.stdout) == (0, "")
    assert peer.requests == [("GET", "/v1/cni/status", None)]
    peer.forced["/v1/cni/status"] = (503, {"code": 50, "msg": "agent: caches not synced"})
    run_cni("STATUS", conf(peer.path)).check_error(50, "caches not synced")
    down = str(sockdir / "nobody.sock")
    run_cni("STATUS", conf(down)).check_error(50, down, "not reachable")


# --- bad input -------------------------------------------------------------------------------


def test_malformed_config_is_a_decoding_failure(peer: ProtocolTestPeer, netns: Path) -> None:
    run_cni("ADD", '{"cniVersion": "1.1.0", ', env(netns)).check_error(
        6, "network configuration", "not valid JSON")
    run_cni("ADD", "[1, 2]", env(netns)).check_error(6, "not a JSON object")
    assert peer.requests == []


@pytest.mark.parametrize("version", ["0.2.0", "1.2.0", "2.0.0"])
def test_unknown_cni_version(peer: ProtocolTestPeer, netns: Path, version: str) -> None:
    run_cni("ADD", conf(peer.path, version), env(netns)).check_error(1, "cniVersion", version)
    assert peer.requests == []


def test_missing_or_wrong_config_fields(peer: ProtocolTestPeer, netns: Path) -> None:
    config = conf(peer.path)
    del config["cniVersion"]
    run_cni("ADD", config, env(netns)).check_error(7, "cniVersion")
    config = conf(peer.path)
    del config["name"]
    run_cni("ADD", config, env(netns)).check_error(7, "name")
    run_cni("ADD", conf(42), env(netns)).check_error(7, "agentSocket")  # type: ignore[arg-type]
    run_cni("ADD", conf(peer.path, agentTimeout=0), env(netns)).check_error(7, "agentTimeout")
    assert peer.requests == []


def test_missing_environment_is_error_4(peer: ProtocolTestPeer, netns: Path) -> None:
    for command in ("ADD", "CHECK"):
        run_cni(command, conf(peer.path), env(None)).check_error(4, "CNI_NETNS")
    run_cni("ADD", conf(peer.path), env(netns, container="")).check_error(4, "CNI_CONTAINERID")
    run_cni("ADD", conf(peer.path), env(netns, container="a/b")).check_error(
        4, "CNI_CONTAINERID")
    run_cni("ADD", conf(peer.path), env(netns, CNI_IFNAME=None)).check_error(4, "CNI_IFNAME")
    run_cni("ADD", conf(peer.path), env(netns, CNI_IFNAME="x" * 16)).check_error(
        4, "CNI_IFNAME")
    run_cni("ADD", conf(peer.path), env(netns, CNI_ARGS="K8S_POD_NAME")).check_error(
        4, "CNI_ARGS")
    run_cni("ADD", conf(peer.path), env(netns, CNI_ARGS="FOO=1;K8S_POD_NAME=a")).check_error(
        4, "CNI_ARGS", "FOO")
    run_cni("FROB", conf(peer.path), env(netns)).check_error(4, "CNI_COMMAND", "FROB")
    run_cni("", conf(peer.path), env(netns)).check_error(4, "CNI_COMMAND")
    assert peer.requests == []


def test_missing_pod_identity_is_error_7(peer: ProtocolTestPeer, netns: Path) -> None:
    args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=default"
    run_cni("ADD", conf(peer.path), env(netns, CNI_ARGS=args)).check_error(
        7, "K8S_POD_NAME", "CNI_ARGS", "runtimeConfig.podnet.io/pod")
    args = "IgnoreUnknown=1;K8S_POD_NAME=a"
    run_cni("ADD", conf(peer.path), env(netns, CNI_ARGS=args)).check_error(
        7, "K8S_POD_NAMESPACE")
    assert peer.requests == []


@pytest.mark.parametrize("command", ["ADD", "CHECK", "GC"])
def test_agent_down_is_try_again_later(sockdir: Path, netns: Path, command: str) -> None:
    down = str(sockdir / "nobody.sock")
    config = {**conf(down), "cni.dev/valid-attachments": []}
    run_cni(command, config, env(netns)).check_error(11, down, "not reachable")


def test_agent_that_does_not_answer_is_try_again_later(sockdir: Path, netns: Path) -> None:
    import socket

    path = str(sockdir / "silent.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.bind(path)
        silent.listen(1)
        run_cni("ADD", conf(path, agentTimeout=0.3), env(netns)).check_error(
            11, path, "no answer within 0.3 s")


def test_agent_errors_are_passed_through(peer: ProtocolTestPeer, netns: Path) -> None:
    peer.forced["/v1/cni/add"] = (503, {"code": 11, "msg": "PodNetwork default/pod-a: not "
                                        "Routed within 30 s", "details": "phase Allocating"})
    out = run_cni("ADD", conf(peer.path, "1.0.0"), env(netns)).check_error(
        11, "PodNetwork default/pod-a")
    assert out == {"cniVersion": "1.0.0", "code": 11, "details": "phase Allocating",
                   "msg": "PodNetwork default/pod-a: not Routed within 30 s"}
    peer.forced["/v1/cni/add"] = (500, "boom")
    run_cni("ADD", conf(peer.path), env(netns)).check_error(11, peer.path, "HTTP 500")
    peer.forced["/v1/cni/add"] = (200, ["not", "a", "result"])
    run_cni("ADD", conf(peer.path), env(netns)).check_error(11, peer.path)


def test_the_driver_reports_what_the_runtime_sees() -> None:
    result = CniResult(1, '{"cniVersion": "1.1.0", "code": 7, "msg": "name: missing"}\n', "")
    assert result.error_code == 7 and not result.ok
    assert result.check_error(7, "name")["msg"] == "name: missing"


# --- the HTTP client against servers that keep the connection open -------------------------


def _raw_peer(path: str, answer: bytes) -> threading.Thread:
    """A server that reads one request, writes ``answer`` and keeps the connection open
    (the plugin must end its read by the answer's framing, not by the end of the stream)."""
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length")))
        while len(body) < length:
            body += conn.recv(65536)
        conn.sendall(answer)
        threading.Event().wait(5)  # hold the connection open past the plugin's exit
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_chunked_answer_on_a_kept_connection(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "chunked.sock")
    body = json.dumps(RESULT).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
    _raw_peer(path, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
              b"Content-Type: application/json\r\n\r\n" + chunks + b"0\r\n\r\n")
    result = run_cni("ADD", conf(path, agentTimeout=3), env(netns))
    assert result.ok, result
    assert result.output["ips"][0]["address"] == "10.0.0.5/24"


def test_a_sized_answer_on_a_kept_connection(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "sized.sock")
    body = json.dumps({"code": 11, "msg": "agent: busy"}).encode()
    _raw_peer(path, b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s"
              % (len(body), body))
    run_cni("ADD", conf(path, agentTimeout=3), env(netns)).check_error(11, "agent: busy")


def test_a_malformed_length(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "badlength.sock")
    _raw_peer(path, b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n{}")
    run_cni("ADD", conf(path, agentTimeout=3), env(netns)).check_error(
        11, path, "malformed HTTP answer")


def test_an_answer_that_is_not_http(sockdir: Path, netns: Path) -> None:
    path = str(sockdir / "garbage.sock")
    _raw_peer(path, b"SSH-2.0-nope\r\n\r\n")
    run_cni("ADD", conf(path, agentTimeout=3), env(netns)).check_error(
        11, path, "not an HTTP answer")


# --- the plugin's functions, in this process -------------------------------------------------


def test_cni_args_parsing() -> None:
    from podnet.cni import plugin

    assert plugin.parse_cni_args("") == {}
    assert plugin.parse_cni_args(" IgnoreUnknown=1 ; K8S_POD_NAME=a ;X=y=z;") == {
        "IgnoreUnknown": "1", "K8S_POD_NAME": "a", "X": "y=z"}
    assert plugin.parse_cni_args("IgnoreUnknown=true;FOO=") == {"IgnoreUnknown": "true",
                                                                "FOO": ""}
    for bad in ("=1", "K8S_POD_NAME", "FOO=1", "IgnoreUnknown=0;FOO=1"):
        with pytest.raises(plugin.CniError) as caught:
            plugin.parse_cni_args(bad)
        assert caught.value.code == 4 and "CNI_ARGS" in caught.value.msg


def test_cni_args_win_over_runtime_config() -> None:
    from podnet.cni import plugin

    config = {"runtimeConfig": {"podnet.io/pod": {"namespace": "rt", "name": "rt-pod",
                                                  "uid": "rt-uid"}}}
    assert plugin.pod_identity({"K8S_POD_NAME": "args-pod"}, config) == (
        "rt", "args-pod", "rt-uid")
    assert plugin.pod_identity({"K8S_POD_NAMESPACE": "ns", "K8S_POD_NAME": "p"}, {}) == (
        "ns", "p", None)
    with pytest.raises(plugin.CniError, match=r"runtimeConfig\.podnet\.io/pod"):
        plugin.pod_identity({}, {"runtimeConfig": {"podnet.io/pod": "web"}})


def test_conversion_keeps_what_each_version_defines() -> None:
    from podnet.cni import plugin

    full = {"cniVersion": "1.1.0", "extra": 1,
            "interfaces": [{"name": "eth0", "mac": "m", "mtu": 9000, "socketPath": "/s",
                            "pciID": "0000:00:01.0"}],
            "ips": [{"address": "fd00::2/64", "interface": 0}],
            "routes": [{"dst": "::/0", "table": 5, "scope": 0, "advmss": 1400}]}
    assert plugin.convert_result(full, "1.1.0") == {k: v for k, v in full.items()
                                                    if k != "extra"}
    assert plugin.convert_result(full, "1.0.0") == {
        "cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "mac": "m"}],
        "ips": [{"address": "fd00::2/64", "interface": 0}], "routes": [{"dst": "::/0"}]}
    assert plugin.convert_result(full, "0.3.1")["ips"] == [
        {"version": "6", "address": "fd00::2/64", "interface": 0}]
    # a 0.x result read back (a chained prevResult) loses its version fields first
    old = plugin.convert_result(full, "0.4.0")
    assert plugin.convert_result(old, "1.1.0")["ips"] == [
        {"address": "fd00::2/64", "interface": 0}]


def test_a_failure_of_the_plugin_itself_is_still_an_error_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from podnet.cni import plugin

    def broken(*args: Any) -> None:
        raise KeyError("ips")

    monkeypatch.setattr(plugin, "_dispatch", broken)
    status, out = plugin.run({"CNI_COMMAND": "ADD"}, b'{"cniVersion": "1.0.0", "name": "n"}')
    assert status == 1
    assert json.loads(out) == {"cniVersion": "1.0.0", "code": 100,
                               "msg": "podnet-cni internal error: KeyError: 'ips'"}


@pytest.mark.parametrize(("attachments", "names"), [
    ((("default", None),), ["eth0"]),
    ((("default", None), ("blue", None), ("red", None)), ["eth0", "net1", "net2"]),
    # a name the annotation gives is kept, and the numbered ones step around it
    ((("default", None), ("blue", "net1"), ("red", None)), ["eth0", "net1", "net2"]),
    ((("default", None), ("blue", None), ("red", "net1")), ["eth0", "net2", "net1"]),
    ((("default", None), ("blue", "data0"), ("red", None)), ["eth0", "data0", "net1"]),
])
def test_the_agent_names_a_pods_interfaces(attachments: Any, names: list[str]) -> None:
    from podnet.node import interface_names

    assert interface_names("eth0", attachments) == names


# --- podnet-ipam: the same file as another plugin's IPAM ------------------------------------

#: what the peer answers for an IPAM ADD: addresses and routes, no interfaces
IPAM_RESULT = {
    "cniVersion": "1.1.0",
    "ips": [{"address": "10.0.0.5/24", "gateway": "10.0.0.1"},
            {"address": "fd00::5/64", "gateway": "fd00::1"}],
    "routes": [{"dst": "0.0.0.0/0", "gw": "10.0.0.1"}],
    "dns": {},
}


def ipam_conf(socket: str, version: str = "1.0.0", **ipam: Any) -> dict[str, Any]:
    """A bridge plugin's configuration with podnet-ipam as its IPAM (the role the source
    file takes from it: type is not podnet-cni, there is an ipam section)."""
    return {"cniVersion": version, "name": "bridged", "type": "bridge", "bridge": "cni0",
            "ipam": {"type": "podnet-ipam", "agentSocket": socket, **ipam}}


@pytest.mark.parametrize("version", VERSIONS)
def test_ipam_add_asks_for_its_network_and_prints_an_ipam_result(
        peer: ProtocolTestPeer, version: str) -> None:
    peer.forced["/v1/ipam/add"] = (200, IPAM_RESULT)
    config = ipam_conf(peer.path, version, network="blue")
    result = run_cni("ADD", config, env(None))  # an IPAM plugin needs no netns
    assert result.ok, result
    out = result.output
    assert out["cniVersion"] == version
    assert set(out) == {"cniVersion", "ips", "routes", "dns"}
    assert [ip["address"] for ip in out["ips"]] == ["10.0.0.5/24", "fd00::5/64"]
    assert all("interface" not in ip for ip in out["ips"])
    if version in ("0.3.1", "0.4.0"):
        assert [ip["version"] for ip in out["ips"]] == ["4", "6"]
    else:
        assert all("version" not in ip for ip in out["ips"])
    (method, target, body), = peer.requests
    assert (method, target) == ("POST", "/v1/ipam/add")
    assert body == {"cniVersion": version, "containerId": CONTAINER, "netns": None,
                    "ifName": "eth0", "podNamespace": "default", "podName": "pod-a",
                    "podUid": "uid-a", "network": "blue", "config": config}


def test_ipam_network_is_default_unless_given(peer: ProtocolTestPeer, netns: Path) -> None:
    peer.forced["/v1/ipam/add"] = (200, IPAM_RESULT)
    assert run_cni("ADD", ipam_conf(peer.path), env(netns)).ok
    assert peer.requests[-1][2]["network"] == "default"


def test_ipam_del_check_gc(peer: ProtocolTestPeer, netns: Path, sockdir: Path) -> None:
    peer.forced["/v1/ipam/del"] = (200, {})
    peer.forced["/v1/ipam/check"] = (200, {})
    result = run_cni("DEL", ipam_conf(peer.path), env(netns))
    assert (result.exit_code, result.stdout) == (0, "")
    prev = {"cniVersion": "1.0.0", "ips": [{"address": "10.0.0.5/24", "interface": 0}]}
    result = run_cni("CHECK", {**ipam_conf(peer.path), "prevResult": prev}, env(netns))
    assert (result.exit_code, result.stdout) == (0, "")
    assert [t for _, t, _ in peer.requests] == ["/v1/ipam/del", "/v1/ipam/check"]
    assert peer.requests[-1][2]["config"]["prevResult"] == prev
    # GC: the IPAM role holds nothing on the host, so it asks nothing
    assert run_cni("GC", ipam_conf(peer.path, version="1.1.0")).ok
    assert len(peer.requests) == 2
    # the agent down: DEL releases nothing anyway, so it succeeds; ADD must be tried again
    down = str(sockdir / "nobody.sock")
    assert run_cni("DEL", ipam_conf(down), env(netns)).ok
    run_cni("ADD", ipam_conf(down), env(netns)).check_error(11, down)


def test_ipam_bad_section_names_the_field(peer: ProtocolTestPeer, netns: Path) -> None:
    # (an ipam that is no object makes the source file podnet-cni; under the name
    # podnet-ipam it is error 7 naming ipam: tests/test_cni_ipam.py)
    base = ipam_conf(peer.path)
    for section, field in (({"type": "podnet-ipam", "network": 5}, "ipam.network"),
                           ({"type": "podnet-ipam", "network": ""}, "ipam.network"),
                           ({"type": "podnet-ipam", "agentSocket": ""}, "ipam.agentSocket"),
                           ({"type": "podnet-ipam", "agentTimeout": 0}, "ipam.agentTimeout")):
        run_cni("ADD", {**base, "ipam": section}, env(netns)).check_error(7, field)
    assert peer.requests == []
