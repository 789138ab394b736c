"""The plugin meets an agent whose listen backlog is full (a burst of sandboxes): a unix
socket's connect fails at once with EAGAIN then, and the plugin connects again within its
timeout instead of answering error 11."""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

#: the plugin's request in a process of its own, saying each connect it tries (an audit
#: hook: the interpreter's own report of the call)
_ASK = textwrap.dedent("""
    import sys
    from podnet.cni.plugin import AgentUnreachable, agent_request
    PATH = sys.argv[1]
    def said(event, args):
        if event == "socket.connect" and args[1] == PATH:
            print("connect", flush=True)
    sys.addaudithook(said)
    try:
        print("answer", agent_request(PATH, "GET", "/v1/cni/status", None, 60.0), flush=True)
    except AgentUnreachable as exc:
        print("unreachable", exc, flush=True)
""")


def next_line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"the plugin said nothing within {timeout:g} s"
    return proc.stdout.readline().strip()


def test_the_plugin_connects_again_while_the_agents_backlog_is_full(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    fillers: list[socket.socket] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(0)
        proc = None
        try:
            while True:  # connects that wait in the backlog until it is full
                filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                filler.setblocking(False)
                try:
                    filler.connect(path)
                except BlockingIOError:
                    filler.close()
                    break
                fillers.append(filler)
            proc = subprocess.Popen([sys.executable, "-c", _ASK, path],
                                    stdout=subprocess.PIPE, text=True)
            assert next_line(proc) == "connect"
            second = next_line(proc)
            assert second == "connect", f"the plugin gave up: {second}"
            # the agent takes the waiting connections: the fillers', then the plugin's
            for _ in fillers:
                server.accept()[0].close()
            conn, _ = server.accept()
            with conn:
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                assert request.startswith(b"GET /v1/cni/status ")
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            answer = next_line(proc)
            while answer == "connect":
                answer = next_line(proc)
            assert answer == "answer (200, b'{}')"
        finally:
            for filler in fillers:
                filler.close()
            if proc is not None:
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
