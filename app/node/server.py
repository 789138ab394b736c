"""The protocol's server: HTTP/1.1 on a unix socket only root may open, and ``run``,
the ``podnet node`` command's body."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import socketserver
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from podnet.app.node.agent import NodeAgent
from podnet.app.node.protocol import DEFAULT_NAMESPACE, INVALID, TRY_AGAIN, CniError
from podnet.core.cluster.port import Cluster
from podnet.core.errors import ConfigError
from podnet.core.plugin import Providers
from podnet.core.tracing import (
    Tracing,
)

log = logging.getLogger("podnet.node")




class UnixHTTPServer(ThreadingHTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True
    #: the listen backlog: a runtime starts many sandboxes at once, and a full backlog
    #: fails a unix socket's connect at once (EAGAIN), not after a wait (the default is 5)
    request_queue_size = 256

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name = "podnet-node"
        self.server_port = 0


def _handler(agent: NodeAgent) -> type[BaseHTTPRequestHandler]:
    routes = {
        ("POST", "/v1/cni/add"): agent.add,
        ("POST", "/v1/cni/del"): agent.delete,
        ("POST", "/v1/cni/check"): agent.check,
        ("POST", "/v1/cni/gc"): agent.gc,
        ("POST", "/v1/ipam/add"): agent.ipam_add,
        ("POST", "/v1/ipam/del"): agent.ipam_del,
        ("POST", "/v1/ipam/check"): agent.ipam_check,
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def address_string(self) -> str:
            return "unix"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s " + format, self.address_string(), *args)

        def _answer(self, status: int, body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            try:
                if method == "GET" and self.path == "/v1/cni/status":
                    self._answer(200, agent.status())
                    return
                if method == "GET" and self.path == "/v1/agent/report":
                    self._answer(200, agent.report_body())
                    return
                fn = routes.get((method, self.path))
                if fn is None:
                    raise CniError(INVALID, f"{method} {self.path}: no such request",
                                   status=404)
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError as exc:
                    raise CniError(INVALID, f"body: not JSON: {exc}") from None
                if not isinstance(body, dict):
                    raise CniError(INVALID, "body: not a JSON object")
                self._answer(200, fn(body))
            except CniError as exc:
                self._answer(exc.status, exc.body())
            except Exception as exc:
                log.exception("%s %s failed", method, self.path)
                self._answer(500, {"code": TRY_AGAIN, "msg": f"podnet node agent: {exc}",
                                   "details": type(exc).__name__})

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler


def listen(agent: NodeAgent, path: str) -> UnixHTTPServer:
    """The protocol's server on a unix socket at ``path``: its directory 0700, the
    socket 0600 (root only)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    old = os.umask(0o177)
    try:
        server = UnixHTTPServer(path, _handler(agent))  # type: ignore[arg-type]
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    return server


def run(cluster: Cluster, providers: Providers, *, node: str, socket_path: str,
        add_timeout: float, namespace: str = DEFAULT_NAMESPACE, tracing: Tracing | None = None,
        stop: threading.Event | None = None) -> int:
    """Start the agent, serve until ``stop`` (or a signal's KeyboardInterrupt)."""
    try:
        # the socket's directory keeps the agent's state (its IPAM grants) too
        agent = NodeAgent(cluster, providers, node, add_timeout=add_timeout,
                          namespace=namespace, tracing=tracing,
                          state_dir=os.path.dirname(socket_path) or ".")
        server = listen(agent, socket_path)
    except OSError as exc:  # its directory cannot be made or written (a file, read-only)
        where = exc.filename or socket_path
        raise ConfigError("socket", f"{where}: {exc.strerror or exc}") from None
    thread = threading.Thread(target=server.serve_forever, name="podnet-node-http",
                              daemon=True)
    thread.start()  # STATUS answers "not ready" until the records are listed
    try:
        agent.start()
        print(f"podnet node {node}: serving on {socket_path}", flush=True)
        log.info("node agent of %s: records listed, serving on %s", node, socket_path)
        (stop or threading.Event()).wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
        agent.stop()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        log.info("node agent of %s: stopped", node)
    return 0
