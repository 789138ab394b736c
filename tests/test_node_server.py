"""The node agent's HTTP server on its unix socket holds at most ``max_handlers``
connections in threads: more wait (accepted, or in the listen backlog) until one ends."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from podnet.node.server import UnixHTTPServer


class Counting(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    active = 0
    most = 0

    def handle(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.active += 1
            cls.most = max(cls.most, cls.active)
        try:
            super().handle()
        finally:
            with cls.lock:
                cls.active -= 1

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_: object) -> None:
        pass


class OneAtATime(UnixHTTPServer):
    max_handlers = 1
    read_timeout = 5.0


def test_a_connection_beyond_the_bound_waits_for_a_free_thread(tmp_path: Path) -> None:
    path = str(tmp_path / "agent.sock")
    server = OneAtATime(path, Counting)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as held, \
                socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as waiting:
            held.settimeout(60)
            held.connect(path)
            # answered, and kept open (HTTP/1.1): its thread waits for the next request
            held.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert held.recv(4096).startswith(b"HTTP/1.1 200")
            waiting.settimeout(60)
            waiting.connect(path)
            waiting.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            # answered once the held connection's read timeout frees the one thread
            assert waiting.recv(4096).startswith(b"HTTP/1.1 200")
        assert Counting.most == 1
    finally:
        server.shutdown()
        server.server_close()
