"""The event correlator: the client counts repeated Events; the server stores what it gets."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from podnet.core.clock import FakeClock
from podnet.core.cluster.events import EventCorrelator, reference
from podnet.core.cluster.eventsender import EventSender
from podnet.core.cluster.port import EVENT, POD_NETWORK, ApiError, Obj
from podnet.sim.memory import InMemoryCluster

NS = "default"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> InMemoryCluster:
    return InMemoryCluster(clock)


def correlator(store: InMemoryCluster, cache_size: int = 16) -> EventCorrelator:
    """A client of ``store`` of its own, as another replica's recorder is."""
    return EventCorrelator(
        lambda event: store.create(EVENT, event),
        lambda namespace, name, patch: store.patch(EVENT, name, patch, namespace),
        store.clock,
        cache_size=cache_size,
    )


def record(store: InMemoryCluster, name: str) -> Obj:
    return store.create(POD_NETWORK, {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"podName": name, "podUid": "u", "nodeName": "n1", "provider": "reference"},
    })


def counts(store: InMemoryCluster, involved: Obj) -> list[tuple[str, int]]:
    return [(e["reason"], e["count"]) for e in store.events_for(involved)]


def test_a_repeat_moves_last_timestamp_and_keeps_the_first(
    store: InMemoryCluster, clock: FakeClock
) -> None:
    pn = record(store, "a")
    events = correlator(store)
    events.record(pn, "Allocated", "got 10.0.0.5")
    clock.advance(30)
    events.record(pn, "Allocated", "got 10.0.0.5")
    [event] = store.events_for(pn)
    assert event["count"] == 2
    assert (event["firstTimestamp"], event["lastTimestamp"]) == (
        "2026-01-01T00:00:00Z", "2026-01-01T00:00:30Z")


def test_each_client_counts_only_the_events_it_wrote(store: InMemoryCluster) -> None:
    """Two recorders on one server make two Events: the server merges nothing."""
    pn = record(store, "a")
    first, second = correlator(store), correlator(store)
    first.record(pn, "Allocated", "got 10.0.0.5")
    second.record(pn, "Allocated", "got 10.0.0.5")
    assert counts(store, pn) == [("Allocated", 1), ("Allocated", 1)]
    first.record(pn, "Allocated", "got 10.0.0.5")
    assert sorted(counts(store, pn)) == [("Allocated", 1), ("Allocated", 2)]


def test_a_different_reason_message_or_type_is_another_event(store: InMemoryCluster) -> None:
    pn = record(store, "a")
    events = correlator(store)
    events.record(pn, "Allocated", "got 10.0.0.5")
    events.record(pn, "Allocated", "got 10.0.0.6")
    events.record(pn, "Routed", "got 10.0.0.5")
    events.record(pn, "Allocated", "got 10.0.0.5", type="Warning")
    assert len(store.events_for(pn)) == 4
    other = record(store, "b")
    events.record(other, "Allocated", "got 10.0.0.5")
    assert counts(store, other) == [("Allocated", 1)]


def test_the_least_recently_seen_key_is_forgotten_first(store: InMemoryCluster) -> None:
    pn = record(store, "a")
    events = correlator(store, cache_size=2)
    for reason in ("A", "B", "A", "C", "A", "B"):  # C pushes B out; A stays, being used
        events.record(pn, reason, "x")
    assert sorted(counts(store, pn)) == [("A", 3), ("B", 1), ("B", 1), ("C", 1)]


def test_a_failed_create_is_not_remembered(store: InMemoryCluster) -> None:
    pn = record(store, "a")
    events = correlator(store)
    store.faults.fail_next("create", EVENT, ApiError("injected"))
    with pytest.raises(ApiError):
        events.record(pn, "Allocated", "got 10.0.0.5")
    events.record(pn, "Allocated", "got 10.0.0.5")
    assert counts(store, pn) == [("Allocated", 1)]


def test_concurrent_repeats_make_one_event(store: InMemoryCluster) -> None:
    pn = record(store, "a")

    def emit() -> None:
        for _ in range(25):
            store.emit_event(pn, "Allocated", "got 10.0.0.5")

    threads = [threading.Thread(target=emit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts(store, pn) == [("Allocated", 100)]


def test_the_milestones_of_a_pod_network_are_normal_events() -> None:
    """Routed (the address and its route are written at once) and Released: one Normal
    Event each, on the record, naming the address; counted as event writes, apart from
    the record writes."""
    from podnet.plugins.reference import provider as reference
    from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
    from podnet.testing.harness import EngineFactory, World, build_plugin_manager

    clock = FakeClock()
    store = InMemoryCluster(clock=clock)
    cloud = ReferenceCloud()
    engines = EngineFactory(store, build_plugin_manager(ReferenceProvider(cloud=cloud)), clock,
                            provider=reference.NAME)
    world = World(store, clock, engines, cloud.all_addresses)
    try:
        node = world.add_node(0)
        world.add_pod("web", 0)
        world.settle(advance=30)
        pn = world.record_of("web")
        assert pn is not None and pn.status.ip
        raw = store.get(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)
        said = [(e["type"], e["reason"], e["message"]) for e in store.events_for(raw)]
        where = f"on node {node}, interface {pn.status.interface}"
        assert said == [("Normal", "Routed", f"{pn.status.ip} routed {where}")]
        writes = world.engine.stats.writes
        assert writes["events"] == 1
        assert writes["status.podnetworks"] == 1  # the milestone added no record write
        world.delete_pod("web")
        world.settle(advance=30)
        assert world.record_of("web") is None
        released = store.events_for(raw, reason="Released")
        assert [(e["type"], e["message"]) for e in released] == [
            ("Normal", f"{pn.status.ip} released {where}")]
    finally:
        world.close()


# --- the sender thread (eventsender.py) ---------------------------------------------------


def test_queued_events_are_sent_in_order_and_still_counted(store: InMemoryCluster) -> None:
    """What the sender thread hands the correlator is what ``record`` would have written:
    the repeat is a count, the others are Events of their own, in the order given."""
    pn = record(store, "a")
    events = correlator(store)
    sender = EventSender(events.record_reference)
    for reason in ("Allocated", "Routed", "Allocated"):
        assert sender.submit(reference(pn), reason, "got 10.0.0.5", "Normal")
    assert sender.flush(10)
    assert sender.pending() == 0
    assert counts(store, pn) == [("Allocated", 2), ("Routed", 1)]
    sender.close()


def test_a_full_queue_drops_and_counts_and_close_sends_what_is_queued(
    store: InMemoryCluster,
) -> None:
    pn = record(store, "a")
    events = correlator(store)
    gate = threading.Event()
    started = threading.Event()

    def slow(ref: Obj, reason: str, message: str, type: str) -> None:
        started.set()
        gate.wait(10)  # the API server is slow: the first Event is in flight
        events.record_reference(ref, reason, message, type)  # type: ignore[arg-type]

    sender = EventSender(slow, capacity=2)
    dropped: list[int] = []
    sender.on_drop = lambda: dropped.append(1)
    ref = reference(pn)
    assert sender.submit(ref, "First", "m", "Normal")
    assert started.wait(10)
    assert sender.submit(ref, "Second", "m", "Normal")
    assert sender.submit(ref, "Third", "m", "Normal")
    assert not sender.submit(ref, "Fourth", "m", "Warning")  # the queue holds two
    assert (sender.dropped, len(dropped)) == (1, 1)
    assert not sender.flush(0.05)
    gate.set()
    sender.close(timeout=10)
    assert counts(store, pn) == [("First", 1), ("Second", 1), ("Third", 1)]
    # after close an Event is written on the caller's thread, never lost to a stopped one
    assert sender.submit(ref, "Late", "m", "Normal")
    assert [r for r, _ in counts(store, pn)][-1] == "Late"


def test_a_refused_event_does_not_stop_the_sender(store: InMemoryCluster) -> None:
    pn = record(store, "a")
    events = correlator(store)

    def refuse_one(ref: Obj, reason: str, message: str, type: str) -> None:
        if reason == "Refused":
            raise ApiError("no", code=500)
        events.record_reference(ref, reason, message, type)  # type: ignore[arg-type]

    sender = EventSender(refuse_one)
    sender.submit(reference(pn), "Refused", "m", "Normal")
    sender.submit(reference(pn), "Routed", "m", "Normal")
    assert sender.flush(10)
    sender.close()
    assert counts(store, pn) == [("Routed", 1)]


def test_a_cluster_client_with_an_event_queue_sends_from_its_thread(tmp_path: Path) -> None:
    """``podnet run``'s client: emit_event returns at once; the Events reach the API
    server (emulator over HTTP), counted by the client as before, by ``close``."""
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.cluster.port import NAMESPACE
    from podnet.sim.apiserver import ApiServer

    backing = InMemoryCluster()
    backing.create(NAMESPACE, {"metadata": {"name": NS}})
    with ApiServer(backing) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        cluster = KubeCluster.from_kubeconfig(str(kubeconfig))
        sender = cluster.queue_events()
        try:
            pn = cluster.create(POD_NETWORK, {
                "apiVersion": POD_NETWORK.api_version, "kind": POD_NETWORK.kind,
                "metadata": {"name": "a", "namespace": NS},
                "spec": {"podName": "a", "podUid": "u", "nodeName": "n1",
                         "provider": "reference"},
            })
            for reason in ("Routed", "Routed", "Released"):
                cluster.emit_event(pn, reason, "10.0.0.5")
        finally:
            cluster.close()
        assert sender.pending() == 0
        assert counts(backing, pn) == [("Routed", 2), ("Released", 1)]
