"""``podnet run``: the controller host.

Loads plugins and the config file, serves ``/healthz``, ``/readyz`` and ``/metrics`` on
127.0.0.1 unless told otherwise, campaigns for the Lease, and runs the engine only while
leading. SIGTERM (or SIGINT) stops taking new work, lets in-flight reconciles finish,
hands the Lease back, and exits 0. A replica that loses the Lease exits too (non-zero), so
its supervisor restarts it as a fresh candidate — as controller-runtime does.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

import pluggy

from podnet.core.cluster.port import ApiError, Cluster
from podnet.core.config import Config, parse_listen
from podnet.core.engine import Engine, EngineOptions
from podnet.core.errors import one_line
from podnet.core.fence import Fence
from podnet.core.leader import LeaderElector
from podnet.core.metrics import Metrics
from podnet.core.probes import probe_handler
from podnet.core.tracing import Tracing

if TYPE_CHECKING:  # the kubernetes client is imported by who connects, not by this module
    from podnet.core.cluster.kube import KubeCluster

log = logging.getLogger("podnet.host")

#: seconds between probes of an API server that does not answer (yet)
API_RETRY_PERIOD = 2.0
#: a connection to /healthz, /readyz or /metrics that sends nothing this long is closed:
#: the port is on the host network, and a silent connection holds a thread
HTTP_READ_TIMEOUT = 10.0  # (tests shorten it)


def quiet_http_retries() -> None:
    """urllib3 warns on every retry of every request (about 90 lines a minute while the
    API server is down); podnet says once what it retries instead."""
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)


def wait_for_api(cluster: KubeCluster, stop: threading.Event, *,
                 retry_period: float = API_RETRY_PERIOD,
                 waiting: Callable[[str | None], None] = lambda _: None) -> bool:
    """Probe the API server until it answers, as controller-runtime's clients retry a
    server that is briefly down: one line when it does not answer, one when it does.

    ``waiting`` is told why it waits, each attempt, and None once it answers.

    :return: False when ``stop`` came first.
    :raises ConfigError: when the address or the credentials are wrong (no retry helps).
    """
    failing = False
    while True:
        try:
            cluster.probe()
        except ApiError as exc:
            waiting(f"API server {cluster.server} does not answer: {one_line(exc)}")
            if not failing:
                log.warning("API server %s does not answer (%s): retrying every %g s",
                            cluster.server, one_line(exc), retry_period)
                failing = True
            if stop.wait(retry_period):
                return False
            continue
        waiting(None)
        if failing:
            log.warning("API server %s answers again", cluster.server)
        return True


class Host:
    def __init__(self, cluster: Cluster, pm: pluggy.PluginManager, config: Config, *,
                 identity: str | None = None, tracing: Tracing | None = None,
                 leader_elect: bool | None = None) -> None:
        self.cluster = cluster
        self.config = config
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        le = config.leader_election
        self.leader_elect = le.enabled if leader_elect is None else leader_elect
        # the elector renews on the raw cluster; the engine writes only through the fence
        # the elector keeps open while the Lease is surely ours
        self.fence = Fence(open_forever=not self.leader_elect)
        self.elector = LeaderElector(
            cluster, namespace=le.namespace, name=le.name, identity=self.identity,
            lease_duration=le.lease_duration, renew_deadline=le.renew_deadline,
            retry_period=le.retry_period, fence=self.fence,
        )
        self.engine = Engine(
            cluster, pm, tracing=tracing,
            options=EngineOptions.from_config(config, freeze_gc=True), fence=self.fence,
        )
        self.metrics = Metrics()
        self.engine.metrics = self.metrics
        self.metrics.attach(self.engine)
        self.stop = threading.Event()
        self._engine_stop = threading.Event()
        self._engine_thread: threading.Thread | None = None
        self.leading = False
        self.metrics.attach_leader(f"{le.namespace}/{le.name}", lambda: self.leading)
        self.lost_lease = False
        self.failed = False
        self._server: ThreadingHTTPServer | None = None
        #: why the API server is not reached yet (checked before campaigning)
        self.api_problem: str | None = None

    # --- health and metrics ---------------------------------------------------------------

    def ready(self) -> bool:
        """Ready when it can do its job: a standby is ready to take over; a leader once
        its caches are synced, while its workers run and drain the queue."""
        return self.not_ready() is None

    def wait_for_api(self, cluster: KubeCluster) -> bool:
        """:func:`wait_for_api`, not ready meanwhile (a standby that cannot reach the API
        server cannot take over)."""
        def waiting(why: str | None) -> None:
            self.api_problem = why

        return wait_for_api(cluster, self.stop, waiting=waiting)

    def not_ready(self) -> str | None:
        if self.api_problem is not None:
            return self.api_problem
        if not self.leading:
            return None
        if not (self.engine.started and all(i.has_synced for i in self.engine.informers)):
            return "caches not synced"
        return self.engine.health_problem()

    def unhealthy(self) -> str | None:
        """Why the process should be restarted: its engine's workers died or stalled (a
        standby, or a leader still syncing, is healthy)."""
        return self.engine.health_problem() if self.leading else None

    def serve(self, listen: str) -> tuple[str, int]:
        host, port = parse_listen("listen", listen)
        handler = probe_handler(self.unhealthy, self.not_ready, self.metrics.render, log,
                                unhealthy_status=503, read_timeout=HTTP_READ_TIMEOUT)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, name="http", daemon=True).start()
        bound = self._server.server_address
        log.info("serving /healthz /readyz /metrics on %s:%s", bound[0], bound[1])
        return str(bound[0]), int(bound[1])

    # --- leading ----------------------------------------------------------------------

    def _start_engine(self) -> None:
        self.leading = True
        log.info("leading: starting the engine")
        # listed on the engine's thread: the elector goes on renewing meanwhile (a first
        # list of 100,000 pods outlasts the renew deadline, and the fence with it)
        self._engine_thread = threading.Thread(target=self._lead, name="engine", daemon=True)
        self._engine_thread.start()

    def _lead(self) -> None:
        try:
            # before the first list, so the objects it makes are served from the start
            self.engine.migrate_networks()
        except Exception as exc:
            # the API server refused more than an object, or the lease went: the config's
            # networks serve as before this time, and the next start as leader tries again
            log.warning("migration of the config's networks to objects failed: %s", exc)
        try:
            self.engine.start()
        except Exception:
            log.exception("the engine could not start")
            self.failed = True
            self.stop.set()
            return
        log.info("caches synced: reconciling with %d workers", self.engine.options.workers)
        self.engine.run(self._engine_stop)
        log.info("engine stopped")

    def _stop_engine(self) -> None:
        if not self.stop.is_set():
            self.lost_lease = True
        self._engine_stop.set()
        if self._engine_thread is not None:
            self._engine_thread.join(timeout=30)
        self.leading = False
        refused = sum(self.fence.refused.values())
        if refused:
            log.warning("%d writes refused: the lease might have expired when they were due",
                        refused)

    def run(self) -> int:
        le = self.config.leader_election
        log.info("starting %s: providers %s; %s", self.identity,
                 ", ".join(self.engine.providers.names()) or "none",
                 f"campaigning for the lease {le.namespace}/{le.name}" if self.leader_elect
                 else "leader election off")
        code = self._run()
        why = ("lost the lease" if self.lost_lease else "the engine failed" if self.failed
               else "stopped")
        log.log(logging.WARNING if code else logging.INFO, "exiting %d: %s", code, why)
        return code

    def _run(self) -> int:
        if self.leader_elect:
            self.elector.run(self.stop, self._start_engine, self._stop_engine)
            if self.leading:
                self._stop_engine()
        else:
            self._start_engine()
            self.stop.wait()
            self._stop_engine()
        if self._server is not None:
            self._server.shutdown()
        return 1 if self.lost_lease or self.failed else 0

    def install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: Any) -> None:
            log.info("signal %d: finishing in-flight work", signum)
            self.stop.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
