"""The plugin meets an agent whose listen backlog is full (a burst of sandboxes): a unix
socket's connect fails at once with EAGAIN then, and the plugin connects again within its
timeout instead of answering error 11."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
from pathlib import Path

from podnet.testing.cni import plugin_path, read_exec_request


def test_the_plugin_connects_again_while_the_agents_backlog_is_full(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    fillers: list[socket.socket] = []
    config = {"cniVersion": "1.1.0", "name": "n", "agentSocket": path, "agentTimeout": 60}
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
            proc = subprocess.Popen([str(plugin_path())], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, env={"CNI_COMMAND": "STATUS"})
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(config).encode())
            proc.stdin.close()
            # time for its first connects to meet the full backlog (a plugin that took
            # EAGAIN for an absent agent has answered error 11 by now, and fails below)
            threading.Event().wait(0.3)
            # the agent takes the waiting connections: the fillers', then the plugin's
            for _ in fillers:
                server.accept()[0].close()
            conn, _ = server.accept()
            with conn:
                request = read_exec_request(conn.makefile("rb"))
                assert request.target == "/v1/cni/exec"
                assert request.environ["CNI_COMMAND"] == "STATUS"
                conn.sendall(b"HTTP/1.1 200 OK\r\nCNI-Exit-Code: 0\r\nContent-Length: 0\r\n\r\n")
            assert proc.stdout is not None
            out = proc.stdout.read()
            assert (proc.wait(60), out) == (0, b""), out
        finally:
            for filler in fillers:
                filler.close()
            if proc is not None:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
