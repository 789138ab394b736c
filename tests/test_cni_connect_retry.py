"""The plugin meets an agent whose listen backlog is full (a burst of sandboxes): a unix
socket's connect fails at once with EAGAIN then, and the plugin connects again within its
timeout instead of answering error 11."""

from __future__ import annotations

import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from podnet.cni.plugin import agent_request
from podnet.testing.waiting import wait_for


def test_the_plugin_connects_again_while_the_agents_backlog_is_full(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    attempts: list[object] = []

    def count_connects(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and args[1] == path:
            attempts.append(args[0])

    sys.addaudithook(count_connects)  # for the process's life: it counts this path only
    fillers: list[socket.socket] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(0)
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
            attempts.clear()
            with ThreadPoolExecutor(1) as pool:
                asked = pool.submit(agent_request, path, "GET", "/v1/cni/status", None, 60.0)
                wait_for("the plugin's second connect", lambda: len(attempts) >= 2
                         or asked.done(), 30, interval=0.05)
                assert len(attempts) >= 2, f"the plugin gave up: {asked.exception()!r}"
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
                assert asked.result(timeout=30) == (200, b"{}")
        finally:
            for filler in fillers:
                filler.close()
