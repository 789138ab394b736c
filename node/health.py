"""Watching the node agent: ``/healthz``, ``/readyz`` and ``/metrics`` on a node-local
listener (``podnet node --health-listen``), and the loops' turns liveness is judged by.

- **Liveness** (``/healthz``): 500 naming what is stuck, when one of the agent's loops
  (the records' watch, the reporter, the socket's accept loop, the NetworkPolicy
  programmer and its watches, the follower of dropped attachments) has not turned within
  its bound, or a CNI request has run past its own (an ADD: its wait for the record and
  the bound). Each loop says each turn (:meth:`Loop.turn`); an idle loop turns too (each
  waits on a short timeout), so a loop that does not is blocked or dead. Waiting for an
  API server that does not answer is not stuck: the loops go on turning meanwhile.
- **Readiness** (``/readyz``): 200 only once the API server answered, the agent's records
  are listed, its socket is served at its path, its first report is written and is its
  own (no agent of another host holds it) and the dataplane's state could be read for the
  last report; the body names each thing missing.
- **Metrics** (``/metrics``): :mod:`podnet.node.metrics`.

The listener is loopback (``127.0.0.1:9254`` by default) or a unix socket (``unix:PATH``):
the agent runs on the host network, so anything else is reachable from outside the node
and only bound when configured so.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Protocol

from podnet.core.probes import probe_handler

if TYPE_CHECKING:
    from podnet.node.metrics import AgentMetrics


class _Records(Protocol):
    @property
    def has_synced(self) -> bool: ...


class _Reporter(Protocol):
    @property
    def conflict(self) -> str | None: ...
    @property
    def compute_failure(self) -> str | None: ...
    @property
    def written(self) -> object | None: ...


class WatchedAgent(Protocol):
    """What the listener reads of a node agent (``NodeAgent`` has it all): a protocol,
    so that the module the agent imports imports no agent."""

    @property
    def add_timeout(self) -> float: ...
    @property
    def loops(self) -> Loops: ...
    @property
    def records(self) -> _Records: ...
    @property
    def reporter(self) -> _Reporter: ...

log = logging.getLogger("podnet.node")

#: the listener's default: loopback, beside the kubelet's and the controller's ports
DEFAULT_HEALTH_LISTEN = "127.0.0.1:9254"
#: seconds a loop may go without turning (and a request, other than an ADD's wait, may
#: run) before liveness fails. A turn is short (an API call, a netlink dump, an nft run),
#: but one API call to a server that accepts and never answers may take 4 x 60 s (the
#: client's read timeout, and three retries of a GET): waiting is not stuck
DEFAULT_STUCK_AFTER = 300.0


class Loop:
    """One of the agent's loops, as liveness sees it: when it last turned."""

    def __init__(self, name: str, bound: float) -> None:
        self.name = name
        self.bound = bound
        self.turned = time.monotonic()

    def turn(self) -> None:
        self.turned = time.monotonic()


class Loops:
    """The agent's loops, each with its bound: what ``/healthz`` reads."""

    def __init__(self, stuck_after: float = DEFAULT_STUCK_AFTER) -> None:
        self.stuck_after = stuck_after
        self._loops: dict[str, Loop] = {}
        self._lock = threading.Lock()
        #: set when the agent stops: its loops end on purpose
        self.stopped = False

    def add(self, name: str, period: float = 0.0) -> Loop:
        """A loop starting now (its first turn counts from now) that turns at least every
        ``period`` seconds while idle: stuck once a turn is ``stuck_after`` late. A loop
        of the same name started again replaces the old one."""
        loop = Loop(name, self.stuck_after + period)
        with self._lock:
            self._loops[name] = loop
        return loop

    def remove(self, name: str) -> None:
        """A loop that ended on purpose (a watch no longer needed): no longer watched."""
        with self._lock:
            self._loops.pop(name, None)

    def ages(self) -> dict[str, float]:
        """Seconds since each loop last turned, by name."""
        now = time.monotonic()
        with self._lock:
            return {name: now - loop.turned for name, loop in sorted(self._loops.items())}

    def stuck(self) -> list[str]:
        """Why each loop past its bound is stuck, one sentence each."""
        if self.stopped:
            return []
        now = time.monotonic()
        with self._lock:
            loops = sorted(self._loops.values(), key=lambda loop: loop.name)
        return [f"loop {loop.name} has not turned for {now - loop.turned:.0f} s "
                f"(bound {loop.bound:g} s)" for loop in loops if now - loop.turned > loop.bound]


class Watch:
    """What the listener answers from: the agent once it exists (before: the API server
    it waits for), the socket's state, and the metrics."""

    def __init__(self, metrics: AgentMetrics) -> None:
        self.metrics = metrics
        #: where the listener serves (``HOST:PORT`` or ``unix:PATH``), once it does
        self.where: str | None = None
        self.agent: WatchedAgent | None = None
        #: why the API server is not reached yet (None once it answered)
        self.api_problem: str | None = "the API server was not asked yet"
        #: why the CNI socket is not served at its path (None while it is)
        self.socket_problem: Callable[[], str | None] = lambda: "the socket is not served yet"

    def waiting_for_api(self, why: str | None) -> None:
        self.api_problem = why

    def unhealthy(self) -> str | None:
        """Why the agent should be restarted: a loop or a request stuck."""
        agent = self.agent
        if agent is None:
            return None  # starting, or waiting for the API server: not stuck
        problems = agent.loops.stuck() + self.metrics.stuck_requests(agent.add_timeout,
                                                                      agent.loops.stuck_after)
        return "; ".join(problems) or None

    def not_ready(self) -> str | None:
        """What is missing before the agent may be sent pods, each thing named."""
        if self.api_problem is not None:
            return self.api_problem
        agent = self.agent
        if agent is None:
            return "the agent is starting"
        missing = []
        if not agent.records.has_synced:
            missing.append("its PodNetworks are not listed yet")
        served = self.socket_problem()
        if served is not None:
            missing.append(served)
        reporter = agent.reporter
        if reporter.conflict is not None:
            missing.append(reporter.conflict)
        elif reporter.written is None:
            missing.append("its first report is not written yet")
        if reporter.compute_failure is not None:
            missing.append(f"the dataplane's state cannot be read: {reporter.compute_failure}")
        return "; ".join(missing) or None


def parse_health_listen(value: str) -> tuple[str, int] | str | None:
    """``HOST:PORT`` -> (host, port); ``unix:PATH`` -> the path; "" -> None (no listener).

    :raises ValueError: saying what is wrong with ``value``."""
    if not value:
        return None
    if value.startswith("unix:"):
        path = value[len("unix:"):]
        if not path:
            raise ValueError("unix: needs a path (unix:/run/podnet/health.sock)")
        return path
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT or unix:PATH, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


class _TcpServer(ThreadingHTTPServer):
    daemon_threads = True


class _Tcp6Server(_TcpServer):
    address_family = socket.AF_INET6


class _UnixServer(ThreadingHTTPServer):
    address_family = socket.AF_UNIX
    daemon_threads = True

    def server_bind(self) -> None:
        path = str(self.server_address)
        if os.path.exists(path) and not os.path.isdir(path):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
                probe.settimeout(2.0)
                try:
                    probe.connect(path)
                except OSError:  # an earlier agent's, left behind: nobody listens on it
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)
                else:
                    raise OSError(errno.EADDRINUSE, os.strerror(errno.EADDRINUSE), path)
        old = os.umask(0o177)  # root only, as the CNI socket
        try:
            self.socket.bind(self.server_address)
        finally:
            os.umask(old)
        self.server_name, self.server_port = "podnet-node-health", 0


#: seconds between attempts to bind a busy address
BIND_RETRY_PERIOD = 2.0


class HealthServer:
    """The listener on ``where`` (:func:`parse_health_listen`'s answer), serving in a
    thread of its own until :meth:`close`."""

    def __init__(self, where: tuple[str, int] | str, handler: type[BaseHTTPRequestHandler]
                 ) -> None:
        self._address = where
        self._handler = handler
        self.server: ThreadingHTTPServer | None = None
        #: what it listens on: ``HOST:PORT`` (the port bound) or ``unix:PATH``; what it
        #: was told until it is bound
        self.where = f"unix:{where}" if isinstance(where, str) else _host_port(*where)
        self._closing = threading.Event()
        self._lock = threading.Lock()

    def bind(self) -> None:
        """Bind and serve.

        :raises OSError: the address cannot be bound (busy, not this host's)."""
        where = self._address
        server: ThreadingHTTPServer
        if isinstance(where, str):
            server = _UnixServer(where, self._handler)  # type: ignore[arg-type]
        else:
            server = (_Tcp6Server if ":" in where[0] else _TcpServer)(where, self._handler)
            self.where = _host_port(str(server.server_address[0]),
                                    int(server.server_address[1]))
        with self._lock:
            if self._closing.is_set():
                server.server_close()
                return
            self.server = server
        threading.Thread(target=server.serve_forever, name="podnet-node-health",
                         daemon=True).start()

    def bind_when_free(self, period: float = BIND_RETRY_PERIOD) -> None:
        """Bind in a thread, trying every ``period`` seconds until the address is free
        (or :meth:`close`)."""
        def attempts() -> None:
            while not self._closing.wait(period):
                try:
                    self.bind()
                except OSError as exc:
                    if exc.errno != errno.EADDRINUSE:
                        log.error("health listener %s: %s", self.where, exc.strerror or exc)
                        return
                    continue
                log.warning("health listener %s: bound", self.where)
                return

        threading.Thread(target=attempts, name="podnet-node-health-bind", daemon=True).start()

    def close(self) -> None:
        with self._lock:
            self._closing.set()
            server, self.server = self.server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self.where.startswith("unix:"):
            with contextlib.suppress(OSError):
                os.unlink(self.where[len("unix:"):])


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def serve(listen: str, watch: Watch, *, wait_if_busy: bool = False) -> HealthServer | None:
    """Serve ``/healthz``, ``/readyz`` and ``/metrics`` on ``listen`` (None when empty).

    ``wait_if_busy``: an address in use (an update's old agent, rolled with surge, still
    serves there) is bound once it is free, in a thread, rather than refused.

    :raises ValueError: a malformed value.
    :raises OSError: the address cannot be bound (busy, not this host's)."""
    where = parse_health_listen(listen)
    if where is None:
        return None
    # liveness answers 500: the kubelet restarts on any failure; readiness 503: not yet
    health = HealthServer(where, probe_handler(watch.unhealthy, watch.not_ready,
                                               watch.metrics.render, log))
    try:
        health.bind()
    except OSError as exc:
        if not (wait_if_busy and exc.errno == errno.EADDRINUSE):
            raise
        log.warning("health listener %s: the address is in use (an update's old agent?): "
                    "bound once it is free, tried every %g s", health.where,
                    BIND_RETRY_PERIOD)
        health.bind_when_free()
    return health
