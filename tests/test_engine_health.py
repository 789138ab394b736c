"""No exception kills a worker, and health says when workers died or stopped draining
the queue: the engine on its real threads, with the host's /healthz and /readyz."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import pytest

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.app.host import Host
from podnet.core.clock import SystemClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.config import Config
from podnet.core.plugin import new_plugin_manager
from podnet.core.reconcile.result import Result
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = NAMESPACE_NAME


def _wait(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def host() -> Iterator[Host]:
    cluster = InMemoryCluster(clock=SystemClock())
    cluster.create(NAMESPACE, {"metadata": {"name": NS}})
    cluster.create(NODE, node_obj(0))
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    config = Config(default_provider="reference", workers=2, worker_stall_seconds=0.5)
    h = Host(cluster, pm, config, leader_elect=False)
    h.engine.options.freeze_gc = False  # many engines in one test process
    h.serve("127.0.0.1:0")
    runner = threading.Thread(target=h.run, daemon=True)
    runner.start()
    _wait("engine running", lambda: h.engine.workers_alive() == 2)
    try:
        yield h
    finally:
        h.stop.set()
        runner.join(timeout=30)


def _url(h: Host, path: str) -> str:
    assert h._server is not None
    host, port = h._server.server_address[:2]
    return f"http://{host!s}:{port}{path}"


def _routed(h: Host, name: str) -> bool:
    record = h.cluster.list(POD_NETWORK).items
    return any(r["spec"]["podName"] == name and r.get("status", {}).get("phase") == "Routed"
               for r in record)


def test_a_key_failing_past_1024_times_kills_no_worker(host: Host) -> None:
    e = host.engine
    key = ("broken", "x")

    def broken(_name: str) -> Result:
        raise RuntimeError("a reconciler bug")

    e._reconcilers["broken"] = broken
    # the key has failed for hours (a cloud that forgot its addresses): the next backoff
    # is 0.005 * 2 ** 1100, past what a float holds
    e.queue.limiter.item._failures[key] = 1100
    e.queue.add(key)
    _wait("the broken key retried", lambda: e.stats.reconcile_errors["broken"] >= 1)
    # the workers still reconcile what comes next, and health stays truthfully green
    for i in range(4):
        host.cluster.create(POD, pod_obj(f"p{i}", "node-0000"))
    _wait("new pods routed", lambda: all(_routed(host, f"p{i}") for i in range(4)))
    assert e.workers_alive() == 2
    assert e.health_problem() is None
    assert _get(_url(host, "/healthz")) == (200, "ok\n")
    assert _get(_url(host, "/readyz")) == (200, "ok\n")
    assert "podnet_worker_threads_alive 2.0" in _get(_url(host, "/metrics"))[1]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_worker_asked_to_exit_is_reported_dead(host: Host) -> None:
    e = host.engine

    def exits(_name: str) -> Result:
        raise SystemExit  # what asks a thread to stop is not swallowed

    e._reconcilers["exits"] = exits
    e.queue.add(("exits", "x"))
    _wait("a worker gone", lambda: e.workers_alive() == 1)
    code, body = _get(_url(host, "/healthz"))
    assert code == 503 and "threads died: worker-" in body
    assert _get(_url(host, "/readyz"))[0] == 503


def test_workers_that_stop_draining_the_queue_fail_health(host: Host) -> None:
    e = host.engine
    release = threading.Event()

    def stuck(_name: str) -> Result:
        release.wait(60)
        return Result()

    e._reconcilers["stuck"] = stuck
    e.queue.add(("stuck", "a"))
    e.queue.add(("stuck", "b"))  # both workers held
    e.queue.add(("stuck", "c"))  # ready, and nobody comes for it
    try:
        _wait("health failing", lambda: e.health_problem() is not None)
        code, body = _get(_url(host, "/healthz"))
        assert code == 503 and "keys ready and no worker took one" in body
        assert _get(_url(host, "/readyz"))[0] == 503
    finally:
        release.set()
    _wait("drained again", lambda: e.health_problem() is None and e.queue.is_idle())
    assert _get(_url(host, "/healthz")) == (200, "ok\n")
