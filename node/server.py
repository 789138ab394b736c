"""The protocol's server: HTTP/1.1 on a unix socket only root may open, and ``run``,
the ``podnet node`` command's body."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import secrets
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from podnet.core.cluster.port import Cluster
from podnet.core.errors import ConfigError
from podnet.core.plugin import Providers
from podnet.core.tracing import (
    Tracing,
)
from podnet.node.agent import NodeAgent
from podnet.node.cniexec import MAX_STDIN, exec_request, failure
from podnet.node.health import DEFAULT_STUCK_AFTER, Watch
from podnet.node.protocol import (
    DECODING_FAILURE,
    DEFAULT_NAMESPACE,
    INVALID,
    TRY_AGAIN,
    CniError,
)
from podnet.node.statedir import private_directory

log = logging.getLogger("podnet.node")

#: how long a connection may stay silent (a request's head or body not sent, an idle
#: keep-alive) before the agent closes it: the plugin writes its request at once
DEFAULT_READ_TIMEOUT = 30.0
#: at most this many connections are served at once (a thread each); more wait in the
#: listen backlog, whose full queue the plugin meets with a retry
MAX_HANDLERS = 1024
#: the listen backlog asked for (the kernel bounds it by net.core.somaxconn): a runtime
#: starts many sandboxes at once, and a full backlog fails a unix socket's connect at
#: once (EAGAIN) rather than after a wait
_BACKLOG = 4096


def _somaxconn() -> int:
    try:
        with open("/proc/sys/net/core/somaxconn") as f:
            return int(f.read())
    except (OSError, ValueError):
        return _BACKLOG


class UnixHTTPServer(ThreadingHTTPServer):
    """The protocol's HTTP server on a unix socket: a thread per connection, at most
    :data:`MAX_HANDLERS` at once; :meth:`drain` waits for the connections it accepted."""

    address_family = socket.AF_UNIX
    daemon_threads = True
    request_queue_size = min(_BACKLOG, _somaxconn())
    max_handlers = MAX_HANDLERS
    read_timeout = DEFAULT_READ_TIMEOUT
    #: called at each turn of the accept loop (liveness: a loop held, e.g. waiting for a
    #: free handler slot, stops turning)
    on_turn: Callable[[], None] = staticmethod(lambda: None)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._slots = threading.BoundedSemaphore(self.max_handlers)
        self._closing = threading.Event()
        #: connections accepted and not yet closed, under ``_idle``
        self._open = 0
        self._idle = threading.Condition()
        super().__init__(*args, **kwargs)

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name = "podnet-node"
        self.server_port = 0

    def service_actions(self) -> None:
        self.on_turn()

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        # a silent caller is let go, not waited for by a thread for ever
        conn.settimeout(self.read_timeout)
        return conn, address

    def process_request(self, request: Any, client_address: Any) -> None:
        # a thread for the connection once one of the slots is free: until then the
        # connections wait in the backlog, not in threads
        while not self._slots.acquire(timeout=0.5):
            if self._closing.is_set():
                self.shutdown_request(request)
                return
        with self._idle:
            self._open += 1
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._closed()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._closed()

    def _closed(self) -> None:
        self._slots.release()
        with self._idle:
            self._open -= 1
            self._idle.notify_all()

    def shutdown(self) -> None:
        """No more connections accepted (those accepted go on: :meth:`drain`)."""
        self._closing.set()
        super().shutdown()

    def drain(self, timeout: float) -> bool:
        """Wait, at most ``timeout`` s, until every accepted connection is answered and
        closed (a silent one, at the latest after the read timeout); whether all are."""
        with self._idle:
            return self._idle.wait_for(lambda: self._open == 0, timeout)


def _content_length(value: str | None) -> int:
    try:
        length = int(value or 0)
    except ValueError:
        length = -1
    if length < 0:
        raise CniError(INVALID, f"Content-Length: not a length: {value!r}")
    return length


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

        def _exec(self) -> None:
            """``POST /v1/cni/exec``: the plugin's invocation, run here; answered 200 with
            its exit code (``CNI-Exit-Code``) and its stdout as the body."""
            try:
                length = _content_length(self.headers.get("Content-Length"))
            except CniError as exc:
                code, out = failure(exc)
                self.close_connection = True  # the body's end is unknown
            else:
                if length > MAX_STDIN:
                    code, out = failure(CniError(
                        DECODING_FAILURE, f"network configuration (stdin): {length} bytes, "
                        f"more than the {MAX_STDIN} the agent reads"))
                    self.close_connection = True  # not read
                else:
                    try:
                        stdin = self.rfile.read(length)
                    except OSError:  # the read timeout, or the caller gone
                        self.close_connection = True
                        return
                    code, out = exec_request(self.headers.get("CNI-Program"),
                                             self.headers.get_all("CNI-Env") or [], stdin,
                                             agent)
            data = out.encode("utf-8")
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("CNI-Exit-Code", str(code))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _serve(self, method: str) -> None:
            if method == "POST" and self.path == "/v1/cni/exec":
                self._exec()
                return
            try:
                if method == "GET" and self.path == "/v1/cni/status":
                    self._answer(200, agent.status())
                    return
                if method == "GET" and self.path == "/v1/agent/report":
                    self._answer(200, agent.report_body())
                    return
                if method == "GET" and self.path == "/v1/ipam/pending":
                    self._answer(200, {"pending": agent.grants.pending_adds()})
                    return
                fn = routes.get((method, self.path))
                if fn is None:
                    raise CniError(INVALID, f"{method} {self.path}: no such request",
                                   status=404)
                length = _content_length(self.headers.get("Content-Length"))
                try:
                    data = self.rfile.read(length)
                except OSError:  # the read timeout, or the caller gone: no one to answer
                    self.close_connection = True
                    return
                try:
                    body = json.loads(data or b"{}")
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


def _serving(path: str) -> bool:
    """Whether an agent answers connections at ``path`` now (a full backlog is one)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(path)
        except BlockingIOError:
            return True
        except OSError:  # nothing there, a socket no process listens on, not a socket
            return False
    return True


#: how often (s) the agent looks whether its socket's path is still there
PATH_CHECK_PERIOD = 2.0

#: the name a server is bound under in its socket's directory before it is renamed to
#: the socket's path (short: a unix socket's path has a length limit)
_BOUND_NAME = re.compile(r"\.[0-9a-f]{6}~")


class SocketPath:
    """An agent's server at its socket path, which another agent (an update's new pod)
    may take over: the server is bound under a temporary name in the same directory and
    renamed to the path, which replaces an older agent's socket at once (a connect finds
    one or the other, never nothing); on stop the path is unlinked only while it is still
    this server's. Both steps hold an advisory lock on ``<path>.lock``, so an old agent
    that stops never unlinks the socket a new one has just put there."""

    def __init__(self, path: str, bound: str) -> None:
        self.path = path
        self.bound = bound
        st = os.stat(bound)
        self._identity = (st.st_dev, st.st_ino)
        self.placed = False

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(f"{self.path}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # the lock goes with it

    def _mine(self, path: str) -> bool:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def place(self, *, only_if_free: bool = False) -> bool:
        """Put the server at the path, replacing whatever is there (``only_if_free``:
        only when nothing is); whether it was put there."""
        with self._locked():
            if only_if_free and os.path.lexists(self.path):
                return False
            os.rename(self.bound, self.path)
            self.placed = True
            return True

    def gone(self) -> bool:
        """Whether the path was placed and nothing is there now (an agent of a version
        that unlinked the path unasked when it stopped, or a hand)."""
        return self.placed and not os.path.lexists(self.path)

    def release(self) -> bool:
        """Unlink the path if it is still this server's (or the temporary name, if it
        was never placed); whether it was."""
        with self._locked():
            where = self.path if self.placed else self.bound
            if self._mine(where):
                os.unlink(where)
                return True
            return False


def _remove_dead_bound_names(directory: str) -> None:
    """The temporary names of agents that died before they renamed theirs."""
    with contextlib.suppress(OSError):
        for name in os.listdir(directory):
            path = os.path.join(directory, name)
            # an hour old: not the name of an agent starting right now (bound, not yet
            # listening)
            if (_BOUND_NAME.fullmatch(name) and time.time() - os.lstat(path).st_mtime > 3600
                    and not _serving(path)):
                with contextlib.suppress(OSError):
                    os.unlink(path)


def bind(agent: NodeAgent, path: str, *, read_timeout: float = DEFAULT_READ_TIMEOUT
         ) -> tuple[UnixHTTPServer, SocketPath]:
    """The protocol's server, bound (mode 0600: root only) under a temporary name in the
    directory of ``path`` (which must be the agent's: :func:`private_directory`); its
    :class:`SocketPath` puts it at ``path``."""
    directory = os.path.dirname(path) or "."
    _remove_dead_bound_names(directory)
    bound = os.path.join(directory, f".{secrets.token_hex(3)}~")
    old = os.umask(0o177)
    try:
        server = UnixHTTPServer(bound, _handler(agent))
    finally:
        os.umask(old)
    server.read_timeout = read_timeout
    os.chmod(bound, 0o600)
    return server, SocketPath(path, bound)


def listen(agent: NodeAgent, path: str, *, read_timeout: float = DEFAULT_READ_TIMEOUT
           ) -> UnixHTTPServer:
    """The protocol's server on a unix socket at ``path``: its directory 0700 (made, or
    refused when another user's), the socket 0600 (root only)."""
    private_directory(os.path.dirname(path) or ".", "socket")
    server, where = bind(agent, path, read_timeout=read_timeout)
    where.place()
    return server


def _serve(server: UnixHTTPServer, agent: NodeAgent) -> None:
    server.on_turn = agent.loops.add("server", 0.5).turn
    threading.Thread(target=server.serve_forever, name="podnet-node-http",
                     daemon=True).start()


def _socket_problem(path: str, where: SocketPath) -> str | None:
    """Why the CNI socket is not served at ``path`` (None while it is)."""
    if not where.placed:
        return f"the socket {path} is another agent's still (this one takes it once ready)"
    if where.gone():
        return f"the socket {path} was removed (served again within {PATH_CHECK_PERIOD:g} s)"
    return None


def run(cluster: Cluster, providers: Providers, *, node: str, socket_path: str,
        add_timeout: float, namespace: str = DEFAULT_NAMESPACE, tracing: Tracing | None = None,
        stop: threading.Event | None = None,
        read_timeout: float = DEFAULT_READ_TIMEOUT, network_policy: bool = True,
        watch: Watch | None = None, stuck_after: float = DEFAULT_STUCK_AFTER) -> int:
    """Start the agent, serve until ``stop`` (or a signal's KeyboardInterrupt).

    When another agent serves at ``socket_path`` (an update's old pod), it keeps serving
    until this one is ready, which then takes the path over; when stopped, the agent
    answers the requests in flight (bounded by the ADD timeout) and unlinks the path only
    while it is its own. ``network_policy`` False: NetworkPolicy is another engine's (the
    agent removes its nftables table and programs none). ``watch``: what the health
    listener answers from (:mod:`podnet.node.health`), given the agent and the socket's
    state; ``stuck_after``: the bound of a loop's turn (liveness)."""
    directory = os.path.dirname(socket_path) or "."
    private_directory(directory, "socket")
    try:
        # the socket's directory keeps the agent's state (its IPAM grants) too
        agent = NodeAgent(cluster, providers, node, add_timeout=add_timeout,
                          namespace=namespace, tracing=tracing, state_dir=directory,
                          network_policy=network_policy,
                          metrics=watch.metrics if watch is not None else None,
                          stuck_after=stuck_after)
        server, where = bind(agent, socket_path, read_timeout=read_timeout)
        predecessor = _serving(socket_path)
        if not predecessor:
            where.place()  # at once: STATUS answers "not ready" until the records are listed
    except OSError as exc:  # its directory cannot be written (read-only), ...
        where_failed = exc.filename or socket_path
        raise ConfigError("socket", f"{where_failed}: {exc.strerror or exc}") from None
    servers = [(server, where)]
    if watch is not None:
        watch.socket_problem = lambda: _socket_problem(socket_path, servers[-1][1])
        watch.agent = agent
    _serve(server, agent)
    stopping = stop or threading.Event()
    try:
        agent.start()
        if predecessor:
            where.place()
            log.info("node agent of %s: took %s over from the agent serving there", node,
                     socket_path)
        print(f"podnet node {node}: serving on {socket_path}", flush=True)
        log.info("node agent of %s: records listed, serving on %s%s", node, socket_path,
                 f"; /healthz, /readyz, /metrics on {watch.where}"
                 if watch is not None and watch.where else "")
        while not stopping.wait(PATH_CHECK_PERIOD):
            if servers[-1][1].gone():
                # a bound socket cannot be named again: a new one, at the path unless
                # another agent's is there meanwhile; the old one answers what it had
                # accepted
                again, again_where = bind(agent, socket_path, read_timeout=read_timeout)
                if again_where.place(only_if_free=True):
                    log.warning("node agent of %s: %s was removed; serving there again",
                                node, socket_path)
                    servers.append((again, again_where))
                    _serve(again, agent)
                else:
                    again.server_close()
                    again_where.release()
    except KeyboardInterrupt:
        pass
    finally:
        for each, _ in servers:
            each.shutdown()
        # an update's new agent may have the path already: what this one has accepted, it
        # answers (an ADD waits at most its timeout)
        deadline = time.monotonic() + add_timeout + 5.0
        drained = [each.drain(max(deadline - time.monotonic(), 0.0)) for each, _ in servers]
        if not all(drained):
            log.warning("node agent of %s: stopping with requests still unanswered", node)
        for each, _ in servers:
            each.server_close()
        agent.stop()
        if not servers[-1][1].release():
            log.info("node agent of %s: %s is another agent's now, left in place", node,
                     socket_path)
        for _, each_where in servers[:-1]:
            each_where.release()
        log.info("node agent of %s: stopped", node)
    return 0
