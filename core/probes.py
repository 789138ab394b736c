"""The HTTP handler of a process's probes and metrics: ``/healthz``, ``/readyz`` and
``/metrics``, the same for the controller (``podnet run --listen``) and the node agent
(``podnet node --health-listen``); each binds it where its own flags say. Also the
registry both start their metrics from."""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, disable_created_metrics

#: seconds a probe's connection may stay silent before it is closed
HTTP_READ_TIMEOUT = 10.0
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Answer = tuple[int, str, bytes]


def _check(problem: str | None, failing: int) -> Answer:
    if problem is None:
        return 200, "text/plain", b"ok\n"
    return failing, "text/plain", f"{problem}\n".encode()


def process_registry(build_info: str, component: str, version: str) -> CollectorRegistry:
    """A registry with the standard ``process_*`` family and ``build_info`` (1, labelled
    with ``component``'s ``version`` and its Python's), and no ``*_created`` series."""
    # no *_created series beside every counter and histogram: a scrape twice the size
    # for a start time process_start_time_seconds already gives
    disable_created_metrics()  # type: ignore[no-untyped-call]
    registry = CollectorRegistry(auto_describe=True)
    ProcessCollector(registry=registry)  # CPU, memory, open fds, start time
    Gauge(build_info, f"1, labelled with the {component}'s version and its Python's.",
          ["version", "python"], registry=registry).labels(
        version, platform.python_version()).set(1)
    return registry


def probe_handler(unhealthy: Callable[[], str | None], not_ready: Callable[[], str | None],
                  metrics: Callable[[], bytes], log: logging.Logger, *,
                  unhealthy_status: int = 500, read_timeout: float = HTTP_READ_TIMEOUT
                  ) -> type[BaseHTTPRequestHandler]:
    """A handler answering ``/healthz`` (``unhealthy()``: None, or why the process should
    be restarted, answered with ``unhealthy_status``), ``/readyz`` (``not_ready()``: None,
    or what is missing, 503) and ``/metrics`` (the Prometheus text ``metrics()`` renders).
    A route that raises answers 500 naming the exception: a scrape never takes the
    listener down."""
    routes: dict[str, Callable[[], Answer]] = {
        "/healthz": lambda: _check(unhealthy(), unhealthy_status),
        "/readyz": lambda: _check(not_ready(), 503),
        "/metrics": lambda: (200, METRICS_TYPE, metrics()),
    }

    class Handler(BaseHTTPRequestHandler):
        timeout = read_timeout

        def address_string(self) -> str:
            return str(self.client_address[0]) if self.client_address else "unix"

        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            try:
                code, ctype, body = route() if route else (404, "text/plain", b"not found\n")
            except Exception as exc:
                log.exception("%s failed", self.path)
                code, ctype, body = 500, "text/plain", f"{type(exc).__name__}: {exc}\n".encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s: " + format, self.path, *args)

    return Handler
