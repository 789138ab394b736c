"""Lease-based leader election through the cluster port, on a fake clock."""

from __future__ import annotations

import logging
import threading

import pytest

from podnet.core.clock import FakeClock
from podnet.core.cluster.port import LEASE
from podnet.core.leader import LeaderElector
from podnet.sim.memory import InMemoryCluster


def electors(clock: FakeClock, cluster: InMemoryCluster) -> tuple[LeaderElector, LeaderElector]:
    def make(identity: str) -> LeaderElector:
        return LeaderElector(cluster, namespace="kube-system", name="podnet", identity=identity,
                             lease_duration=15, renew_deadline=10, retry_period=2, clock=clock)
    return make("a"), make("b")


def test_exactly_one_leader_and_takeover_after_the_lease_expires() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a, b = electors(clock, cluster)
    assert a.try_acquire_or_renew() is True
    assert b.try_acquire_or_renew() is False
    for _ in range(10):  # a keeps renewing: b never gets it
        clock.advance(2)
        assert a.try_acquire_or_renew() is True
        assert b.try_acquire_or_renew() is False
    # a dies; b takes over only once lease_duration has passed since a's last renewal
    clock.advance(14)
    assert b.try_acquire_or_renew() is False
    clock.advance(2)
    assert b.try_acquire_or_renew() is True
    lease = cluster.get(LEASE, "podnet", "kube-system")
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1
    # a comes back: it must see it lost
    assert a.try_acquire_or_renew() is False
    assert a.leading is False


def test_a_lost_update_race_is_not_leadership() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a, _ = electors(clock, cluster)
    assert a.try_acquire_or_renew()
    cluster.faults.conflict_rate = 1.0
    clock.advance(2)
    assert a.try_acquire_or_renew() is False


def test_api_errors_keep_leadership_only_within_the_renew_deadline() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a, _ = electors(clock, cluster)
    assert a.try_acquire_or_renew()
    cluster.faults.error_rate = 1.0
    clock.advance(2)
    assert a.try_acquire_or_renew() is True
    clock.advance(9)
    assert a.try_acquire_or_renew() is False


def test_release_lets_the_next_replica_lead_at_once() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a, b = electors(clock, cluster)
    assert a.try_acquire_or_renew()
    a.release()
    clock.advance(1.5)
    assert b.try_acquire_or_renew() is True


def test_run_calls_back_on_start_and_on_stop() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a, _ = electors(clock, cluster)
    a.retry_period = 0.01
    events: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=a.run, args=(stop, lambda: events.append("start"),
                                                  lambda: events.append("stop")))
    thread.start()
    for _ in range(200):
        if events:
            break
        stop.wait(0.01)
    stop.set()
    thread.join(5)
    assert events == ["start", "stop"]
    assert cluster.get(LEASE, "podnet", "kube-system")["spec"]["holderIdentity"] is None


def test_bad_timings_are_refused() -> None:
    import pytest

    with pytest.raises(ValueError):
        LeaderElector(InMemoryCluster(), namespace="n", name="x", identity="a",
                      lease_duration=5, renew_deadline=10, retry_period=2)


def test_an_api_server_that_stops_answering_is_said_once_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    _, b = electors(clock, cluster)
    cluster.faults.error_rate = 1.0
    with caplog.at_level(logging.DEBUG, logger="podnet.leader"):
        for _ in range(5):
            assert b.try_acquire_or_renew() is False
            clock.advance(2)
        cluster.faults.error_rate = 0.0
        assert b.try_acquire_or_renew() is True
        cluster.faults.error_rate = 1.0
        clock.advance(2)
        b.try_acquire_or_renew()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert said[0].startswith("the lease kube-system/podnet cannot be read (")
    assert said[0].endswith("): retrying every 2 s")
    assert said[1:] == ["the lease kube-system/podnet can be read again", said[0]]
