"""The controller's /healthz, /readyz and /metrics port lets a silent connection go after
its read timeout: each connection holds a thread, and the port is on the host network."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from podnet.app import host as host_module
from podnet.app.host import Host
from podnet.core.clock import SystemClock
from podnet.core.config import Config
from podnet.core.plugin import new_plugin_manager
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, int]]:
    monkeypatch.setattr(host_module, "HTTP_READ_TIMEOUT", 0.5, raising=False)
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    h = Host(InMemoryCluster(clock=SystemClock()), pm, Config(default_provider="reference"),
             leader_elect=False)
    address = h.serve("127.0.0.1:0")
    try:
        yield address
    finally:
        h.stop.set()
        assert h._server is not None
        h._server.shutdown()
        h._server.server_close()


def test_a_silent_connection_is_closed_and_others_are_answered(served: tuple[str, int]
                                                                ) -> None:
    with socket.create_connection(served, timeout=60) as silent:
        assert silent.recv(1) == b"", "a silent connection got an answer"
    with socket.create_connection(served, timeout=60) as asking:
        asking.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := asking.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.0 200"), answer
