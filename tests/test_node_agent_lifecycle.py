"""The node agent's socket over its life, with ``podnet apiserver``, ``podnet run`` and
``podnet node`` as separate processes (the node bed, :mod:`podnet.testing.nodebed`):

- an update's new agent on the same socket path takes it over once ready, and keeps it
  when the old agent stops; the old one answers what it had begun;
- a burst of connects beyond the old listen backlog (256) is answered, every one;
- a connection that sends nothing is closed after the read timeout;
- a socket directory another user owns is refused, naming it;
- an IPAM DEL that comes while its ADD waits leaves no grant: the address is released
  once the pod is gone, not after the unplug timeout.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    POD_CIDR,
    AgentClient,
    Host,
    NodeNamespace,
    Stack,
    Underlay,
    node_object,
    pod,
    reference_config,
)
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.2)


def read_line(proc: subprocess.Popen[str], timeout: float = 90.0) -> str:
    """The next line ``proc`` prints, waited for at most ``timeout`` s."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from the process within {timeout:g} s"
    return proc.stdout.readline().strip()


def started(stack: Stack, node: NodeNamespace, name: str | None = None, **options: Any
            ) -> subprocess.Popen[str]:
    """An agent of :data:`NODE`, once it says it serves (its records listed)."""
    proc = stack.agent(NODE, netns=node.netns, name=name, **options)
    line = read_line(proc)
    assert line.endswith(f"serving on {stack.socket}"), line
    return proc


def http(method: str, target: str, body: Any = None) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    return (f"{method} {target} HTTP/1.1\r\nHost: podnet\r\nConnection: close\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode() + data


def answer(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """The HTTP answer on ``sock`` (the agent closes it after, as asked)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), data[:200]
    return int(head.split()[1]), json.loads(body or b"{}")


def cni_body(container_id: str, netns: str, pod_name: str) -> dict[str, Any]:
    return {"cniVersion": "1.1.0", "containerId": container_id, "netns": netns,
            "ifName": "eth0", "podNamespace": "default", "podName": pod_name, "podUid": None,
            "network": "podnet", "config": {"cniVersion": "1.1.0", "name": "podnet",
                                            "type": "podnet-cni"}}


def test_an_updates_new_agent_keeps_the_socket_when_the_old_one_stops(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    old = started(stack, node)
    # the update: a new agent on the same path, then the old one stops
    started(stack, node, name="agent-new")
    stack.stop("agent")
    assert old.returncode == 0
    assert os.path.exists(stack.socket), "the old agent took the new one's socket with it"
    client = AgentClient(stack.socket)
    assert client.status()[0] == 200
    stack.create([pod("b")])
    _, netns_b = host.netns()
    code, result = client.add(host.container(), netns_b, "b")
    assert code == 200, result


def test_an_agent_told_to_stop_answers_the_add_it_has_begun(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    old = started(stack, node)
    # an ADD the old agent has begun: it waits for a pod not created yet
    _, netns_late = host.netns()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as in_flight:
        in_flight.settimeout(120)
        in_flight.connect(stack.socket)
        in_flight.sendall(http("POST", "/v1/cni/add",
                               cni_body(host.container(), netns_late, "late")))
        # an update's new agent takes the path; the old one is told to stop meanwhile
        started(stack, node, name="agent-new")
        os.kill(old.pid, signal.SIGTERM)
        stack.create([pod("late")])
        code, result = answer(in_flight)
    assert code == 200, f"the old agent's ADD in flight was cut off: {code} {result}"
    assert old.wait(timeout=60) == 0
    assert AgentClient(stack.socket).status()[0] == 200


def test_an_agent_whose_socket_was_removed_serves_at_its_path_again(
        stack: Stack, node: NodeNamespace) -> None:
    """As an agent of an earlier version does when it stops after an update's new agent
    took its path over: it unlinks the path unasked."""
    started(stack, node)
    os.unlink(stack.socket)
    client = AgentClient(stack.socket)
    wait_for("the agent serving at its path again", client.ready)


def test_300_simultaneous_connects_are_all_answered(stack: Stack, node: NodeNamespace
                                                    ) -> None:
    agent = started(stack, node)
    conns: list[socket.socket] = []
    refused: list[str] = []
    # the agent stopped while they connect: every one waits in its listen backlog
    os.kill(agent.pid, signal.SIGSTOP)
    try:
        for _ in range(300):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(120)  # non-blocking underneath, as the plugin's: a full
            conns.append(sock)    # backlog is EAGAIN at once
            try:
                sock.connect(stack.socket)
                sock.sendall(http("GET", "/v1/cni/status"))
            except OSError as exc:
                refused.append(repr(exc))
    finally:
        os.kill(agent.pid, signal.SIGCONT)
    try:
        assert not refused, f"{len(refused)} of 300 connects failed: {refused[0]}"
        codes = [answer(sock)[0] for sock in conns]
    finally:
        for sock in conns:
            sock.close()
    assert codes == [200] * 300


def test_a_silent_connection_is_closed_after_the_read_timeout(
        stack: Stack, node: NodeNamespace) -> None:
    started(stack, node, args=["--read-timeout", "1"])
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as idle, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as half:
        for sock in (idle, half):
            sock.settimeout(60)
            sock.connect(stack.socket)
        # a head that promises a body never sent
        half.sendall(b"POST /v1/cni/add HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        assert idle.recv(1) == b"", "an idle connection got an answer"
        assert half.recv(1) == b"", "a request cut short got an answer"
    assert AgentClient(stack.socket).status()[0] == 200


def test_a_socket_directory_another_user_owns_is_refused(stack: Stack, node: NodeNamespace
                                                          ) -> None:
    directory = os.path.dirname(stack.socket)
    os.makedirs(directory, mode=0o755)
    os.chown(directory, 12345, 12345)
    proc = stack.agent(NODE, netns=node.netns)
    assert proc.wait(timeout=60) == 2
    stack.procs.pop(stack.agent_name(NODE))
    if proc.stdout is not None:
        proc.stdout.close()
    said = (stack.tmp / "agent.log").read_text()
    assert f"socket: {directory}: the directory belongs to uid 12345" in said, said
    assert os.stat(directory).st_uid == 12345 and not os.listdir(directory)


def test_an_ipam_del_while_its_add_waits_leaves_no_grant(
        stack_factory: Callable[..., Stack], underlay: Underlay, tmp_path: Path) -> None:
    config = reference_config(tmp_path)
    # an address still granted would wait this long: the release must not
    config["policies"]["reference"]["unplugTimeout"] = 600
    # debug logs: a failure prints their tails (handshake_state)
    stack = stack_factory(controller_config=config, controller_args=["-v"])
    node = underlay.add_node(NODE, POD_CIDR)
    stack.create([node_object(NODE, POD_CIDR, node.address)])
    started(stack, node, args=["-v"])
    client = AgentClient(stack.socket)
    container = uuid.uuid4().hex
    body = {"cniVersion": "1.1.0", "containerId": container, "ifName": "eth0",
            "podNamespace": "default", "podName": "a", "podUid": None, "network": "default"}
    with ThreadPoolExecutor(1) as pool:
        add = pool.submit(client.request, "POST", "/v1/ipam/add", body, 120)
        wait_for("the IPAM ADD waiting for pod a", lambda: client.request(
            "GET", "/v1/ipam/pending")[1]["pending"] == [
                {"containerId": container, "ifName": "eth0"}])
        assert client.request("POST", "/v1/ipam/del", body) == (200, {})
        stack.create([pod("a")])
        code, result = add.result(timeout=120)
    assert code != 200 and result["code"] == 11, (code, result)
    assert "a DEL came while this ADD waited" in result["msg"]
    grants = Path(os.path.dirname(stack.socket)) / "ipam"
    assert not [p.name for p in grants.iterdir()], "a grant outlived the DEL"

    wait_for("a's record", lambda: "a" in stack.records())
    # the cancelled ADD wrote no host onto the record: nothing of it waits for this host
    assert "podnet.io/plugged-on" not in stack.records()["a"]["metadata"].get(
        "annotations", {})
    stack.kubectl("delete", "pod", "a", "--wait=false")
    try:
        wait_for("a's address released without a grant to wait for",
                 lambda: "a" not in stack.records(), 90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{handshake_state(stack, client)}") from None


def handshake_state(stack: Stack, client: AgentClient) -> str:
    """What the release handshake of the bed's node looks like: its records, its report
    as the agent computes it and as the Lease says it, and the tails of the logs."""
    parts = [f"records: {json.dumps(stack.records(), indent=1)}"]
    try:
        parts.append(f"agent's report: {client.request('GET', '/v1/agent/report')}")
    except OSError as exc:
        parts.append(f"agent's report: unreadable: {exc}")
    parts.append("leases: " + stack.kubectl("get", "leases", "-A", "-o", "yaml"))
    for name in ("controller", "agent"):
        lines = (stack.tmp / f"{name}.log").read_text().splitlines()
        parts.append(f"{name}.log, last lines:\n" + "\n".join(lines[-40:]))
    return "\n".join(parts)
