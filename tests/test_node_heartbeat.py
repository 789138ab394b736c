"""The node agent's heartbeat: its report Lease is renewed every third of its duration
though nothing it says changes, and goes on being renewed after a pass that failed in a
way other than the API server's (a dataplane whose state cannot be read, a bug): a
reporter whose loop died would leave a live agent looking dead, and a dead one quiet."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import pytest

from podnet.core.cluster.port import LEASE, NAMESPACE
from podnet.core.models import AgentReport
from podnet.core.objects import agent_lease_name
from podnet.node import DEFAULT_NAMESPACE
from podnet.node.report import NodeReporter
from podnet.sim.memory import InMemoryCluster
from podnet.testing.waiting import wait_for as _wait_for

NODE_NAME = "node-b"
#: the Lease's duration in these tests: renewed every second
LEASE_SECONDS = 3


def wait_for(what: str, check: Callable[[], bool], timeout: float = 30.0) -> None:
    _wait_for(what, check, timeout, interval=0.05)


class Dataplane:
    """What the report says: always the same, or a failure when told to fail."""

    def __init__(self) -> None:
        self.failing: BaseException | None = None
        self.asked = 0

    def compute(self) -> AgentReport:
        self.asked += 1
        if self.failing is not None:
            failing, self.failing = self.failing, None
            raise failing
        return AgentReport(node=NODE_NAME, plugged=frozenset({"default/a"}))


@pytest.fixture
def cluster() -> InMemoryCluster:
    cluster = InMemoryCluster()
    cluster.create(NAMESPACE, {"metadata": {"name": DEFAULT_NAMESPACE}})
    return cluster


@pytest.fixture
def dataplane() -> Dataplane:
    return Dataplane()


@pytest.fixture
def reporter(cluster: InMemoryCluster, dataplane: Dataplane) -> Iterator[NodeReporter]:
    reporter = NodeReporter(cluster, NODE_NAME, DEFAULT_NAMESPACE, dataplane.compute,
                            batch=0.0, refresh=0.1, lease_seconds=LEASE_SECONDS)
    stop = threading.Event()
    thread = threading.Thread(target=reporter.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield reporter
    finally:
        stop.set()
        thread.join(timeout=10)


def renew_time(cluster: InMemoryCluster) -> str | None:
    try:
        lease = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
    except Exception:
        return None
    return lease["spec"].get("renewTime")


def renewed_after(cluster: InMemoryCluster, last: str | None) -> Callable[[], bool]:
    return lambda: (now := renew_time(cluster)) is not None and now != last


def test_the_lease_is_renewed_though_nothing_changes(
        cluster: InMemoryCluster, reporter: NodeReporter) -> None:
    wait_for("the first report", renewed_after(cluster, None))
    first = renew_time(cluster)
    lease = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
    wait_for("a renewal with nothing changed", renewed_after(cluster, first))
    again = cluster.get(LEASE, agent_lease_name(NODE_NAME), DEFAULT_NAMESPACE)
    assert again["metadata"]["annotations"] == lease["metadata"]["annotations"]
    assert again["spec"]["leaseDurationSeconds"] == LEASE_SECONDS
    assert reporter.writes["update"] >= 1
    # counted apart from the writes that said something new (the handshake's cost)
    assert reporter.renewals >= 1 and reporter.renewals <= reporter.writes["update"]


@pytest.mark.parametrize("failure", [RuntimeError("a bug"), ValueError("not a table"),
                                     OSError("netlink unreadable")])
def test_the_heartbeat_goes_on_after_a_pass_that_failed(
        cluster: InMemoryCluster, reporter: NodeReporter, dataplane: Dataplane,
        failure: BaseException) -> None:
    wait_for("the first report", renewed_after(cluster, None))
    dataplane.failing = failure
    last = renew_time(cluster)
    wait_for("the failing pass", lambda: dataplane.failing is None)
    wait_for("a renewal after the failure", renewed_after(cluster, last))
    assert reporter.failures["compute"] == 1
    assert reporter.compute_failure is None


def test_a_report_that_only_adds_plugged_records_waits_a_release_token_does_not(
        cluster: InMemoryCluster) -> None:
    """A burst of ADDs grows the report's plugged list at every pass: those passes are
    held back until ``hold`` after the last write (one write for many ADDs; nothing
    waits for them). A release token, a record no longer plugged, is written at once:
    the controller gives an address back on it."""
    says = [AgentReport(node=NODE_NAME, plugged=frozenset({"default/a"}))]
    reporter = NodeReporter(cluster, NODE_NAME, DEFAULT_NAMESPACE, lambda: says[-1],
                            batch=0.0, lease_seconds=LEASE_SECONDS * 100)
    assert reporter.flush(hold=60.0)  # the first report: nothing to hold it for
    says.append(AgentReport(node=NODE_NAME, plugged=frozenset({"default/a", "default/b"})))
    assert not reporter.flush(hold=60.0)
    assert not reporter.flush(hold=60.0)
    assert reporter.written is not None and reporter.written.plugged == {"default/a"}
    assert sum(reporter.writes.values()) == 1

    says.append(AgentReport(node=NODE_NAME, plugged=frozenset({"default/a", "default/b"}),
                            unplugged=frozenset({"token-of-c"})))
    assert reporter.flush(hold=60.0)
    says.append(AgentReport(node=NODE_NAME, plugged=frozenset({"default/b"}),
                            unplugged=frozenset({"token-of-c"})))
    assert reporter.flush(hold=60.0)
    assert reporter.written == AgentReport(
        node=NODE_NAME, holder=reporter.holder, plugged=frozenset({"default/b"}),
        unplugged=frozenset({"token-of-c"}))
    assert sum(reporter.writes.values()) == 3


def test_a_held_report_is_written_once_its_hold_ends(cluster: InMemoryCluster) -> None:
    says = [AgentReport(node=NODE_NAME, plugged=frozenset({"default/a"}))]
    reporter = NodeReporter(cluster, NODE_NAME, DEFAULT_NAMESPACE, lambda: says[-1],
                            batch=0.0, hold=0.3, lease_seconds=LEASE_SECONDS * 100)
    stop = threading.Event()
    thread = threading.Thread(target=reporter.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_for("the first report", lambda: reporter.written is not None)
        says.append(AgentReport(node=NODE_NAME,
                                plugged=frozenset({"default/a", "default/b"})))
        reporter.poke()
        wait_for("the held report written", lambda: reporter.written is not None
                 and reporter.written.plugged == {"default/a", "default/b"})
    finally:
        stop.set()
        thread.join(timeout=10)
