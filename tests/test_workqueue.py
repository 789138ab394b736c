from __future__ import annotations

import random
import threading
import time

import pytest

from podnet.core.clock import FakeClock, SystemClock
from podnet.core.policy import Backoff
from podnet.core.ratelimit import ItemBackoff, MaxOfRateLimiter, TokenBucket
from podnet.core.workqueue import WorkQueue


def _queue(clock: FakeClock | None = None) -> tuple[WorkQueue[str], FakeClock]:
    clock = clock or FakeClock()
    return WorkQueue[str](clock), clock


def test_add_dedupes_waiting_keys() -> None:
    q, _ = _queue()
    for _ in range(3):
        q.add("a")
    assert len(q) == 1
    assert q.adds == 1
    assert q.get_nowait() == "a"
    assert q.get_nowait() is None


def test_fifo_order() -> None:
    q, _ = _queue()
    keys = [f"k{i}" for i in range(10)]
    for k in keys:
        q.add(k)
    q.add("k3")  # a duplicate keeps its original place
    assert [q.get_nowait() for _ in keys] == keys


def test_key_being_processed_is_held_until_done() -> None:
    q, _ = _queue()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    q.add("a")
    assert q.get_nowait() is None
    assert len(q) == 0
    assert not q.is_idle()
    q.done("a")
    assert q.get_nowait() == "a"
    q.done("a")
    assert q.get_nowait() is None
    assert q.is_idle()


def test_done_without_readd_does_not_requeue() -> None:
    q, _ = _queue()
    q.add("a")
    assert q.get_nowait() == "a"
    q.done("a")
    q.done("a")  # a stray done is harmless
    assert q.get_nowait() is None
    assert q.is_idle()


def test_workers_never_process_a_key_concurrently() -> None:
    q: WorkQueue[str] = WorkQueue(SystemClock())
    keys = ["a", "b", "c"]
    in_flight: set[str] = set()
    guard = threading.Lock()
    violations: list[str] = []
    processed: list[str] = []
    stop = threading.Event()

    def worker() -> None:
        while True:
            key = q.get(timeout=0.05)
            if key is None:
                if q.shutting_down:
                    return
                continue
            with guard:
                if key in in_flight:
                    violations.append(key)
                in_flight.add(key)
            # Re-add while holding the key, the case that must not hand it to another worker.
            q.add(key)
            time.sleep(random.random() * 0.001)
            with guard:
                in_flight.discard(key)
                processed.append(key)
            q.done(key)

    def producer() -> None:
        while not stop.is_set():
            q.add(random.choice(keys))

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(6)]
    producers = [threading.Thread(target=producer, daemon=True) for _ in range(2)]
    for t in workers + producers:
        t.start()
    time.sleep(0.3)
    stop.set()
    for t in producers:
        t.join(timeout=5)
    q.shutdown()
    for t in workers:
        t.join(timeout=5)
    assert not any(t.is_alive() for t in workers + producers)
    assert violations == []
    assert processed


def test_add_rate_limited_backs_off_and_next_due_follows() -> None:
    q, clock = _queue()
    start = clock.monotonic()
    expected = 0.0
    for n, delay in enumerate([0.005, 0.01, 0.02, 0.04], start=1):
        q.add_rate_limited("a")
        assert q.num_requeues("a") == n
        assert q.pending_delayed() == 1
        due = q.next_due()
        assert due == pytest.approx(clock.monotonic() + delay)
        assert q.get_nowait() is None
        assert due is not None
        clock.advance(due - clock.monotonic())
        expected += delay
        assert q.get_nowait() == "a"
        q.done("a")
        assert q.next_due() is None
    assert clock.monotonic() - start == pytest.approx(expected)
    assert q.retries == 4


def test_forget_resets_backoff() -> None:
    q, clock = _queue()
    for _ in range(5):
        q.add_rate_limited("a")
    assert q.num_requeues("a") == 5
    q.forget("a")
    assert q.num_requeues("a") == 0
    q.add_rate_limited("b")
    q.add_rate_limited("a")
    due = q.next_due()
    assert due == pytest.approx(clock.monotonic() + 0.005)


def test_rate_limited_keys_share_the_bucket() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemBackoff(Backoff(base=0.001, factor=2.0, cap=1.0)),
        TokenBucket(rate=10.0, burst=1, clock=clock),
    )
    q: WorkQueue[str] = WorkQueue(clock, limiter)
    q.add_rate_limited("a")
    q.add_rate_limited("b")
    q.add_rate_limited("c")
    assert q.pending_delayed() == 3
    clock.advance(0.1)
    assert [q.get_nowait(), q.get_nowait()] == ["a", "b"]
    assert q.get_nowait() is None
    clock.advance(0.15)
    assert q.get_nowait() == "c"


def test_add_after_earliest_due_wins() -> None:
    q, clock = _queue()
    now = clock.monotonic()
    q.add_after("a", 10.0)
    q.add_after("a", 2.0)
    q.add_after("a", 5.0)
    assert q.pending_delayed() == 1
    assert q.next_due() == pytest.approx(now + 2.0)
    clock.advance(2.0)
    assert q.get_nowait() == "a"
    q.done("a")
    # The superseded later entries do not come back.
    clock.advance(20.0)
    assert q.get_nowait() is None
    assert q.pending_delayed() == 0
    assert q.next_due() is None


def test_add_after_non_positive_delay_adds_now() -> None:
    q, _ = _queue()
    q.add_after("a", 0.0)
    q.add_after("b", -1.0)
    assert q.pending_delayed() == 0
    assert [q.get_nowait(), q.get_nowait()] == ["a", "b"]


def test_add_all_after_schedules_each_key_as_add_after_does() -> None:
    q, clock = _queue()
    now = clock.monotonic()
    q.add_after("b", 2.0)
    q.add_all_after(["a", "b", "c"], 5.0)  # b's earlier due time wins
    assert q.pending_delayed() == 3
    assert q.next_due() == pytest.approx(now + 2.0)
    clock.advance(2.0)
    assert q.get_nowait() == "b" and q.get_nowait() is None
    clock.advance(3.0)
    assert sorted([q.get_nowait(), q.get_nowait()]) == ["a", "c"]
    q.add_all_after(["d", "e"], 0.0)  # not later: now, in order
    assert [q.get_nowait(), q.get_nowait()] == ["d", "e"]


def test_delayed_keys_become_ready_in_due_order() -> None:
    q, clock = _queue()
    q.add_after("late", 3.0)
    q.add_after("early", 1.0)
    q.add("now")
    assert len(q) == 1
    assert q.is_idle() is False
    clock.advance(5.0)
    assert len(q) == 3
    assert [q.get_nowait() for _ in range(3)] == ["now", "early", "late"]


def test_a_key_back_for_its_slot_goes_before_the_keys_ready_then() -> None:
    q, clock = _queue()
    q.add_after("node", 1.0, first=True)
    for i in range(3):
        q.add(f"pod{i}")
    clock.advance(1.0)
    assert [q.get_nowait() for _ in range(4)] == ["node", "pod0", "pod1", "pod2"]
    # only the time it was put off for goes first: a plain add of it later does not
    q.done("node")
    q.add("pod3")
    q.add("node")
    assert [q.get_nowait() for _ in range(2)] == ["pod3", "node"]


def test_keys_back_for_their_slots_go_first_in_the_order_of_their_slots() -> None:
    q, clock = _queue()
    q.add("pod0")
    for i, node in enumerate(("a", "b", "c")):
        q.add_after(node, 1.0 + i / 10, first=True)
    clock.advance(0.5)
    q.add("pod1")
    clock.advance(1.0)
    assert [q.get_nowait() for _ in range(5)] == ["a", "b", "c", "pod0", "pod1"]
    q.add_after("d", 1.0, first=True)
    q.add("pod2")
    clock.advance(1.0)
    q.add_after("e", 0.0, first=True)
    assert [q.get_nowait() for _ in range(3)] == ["d", "e", "pod2"]


def test_a_key_back_for_its_slot_that_is_ready_already_moves_to_the_front() -> None:
    q, clock = _queue()
    q.add_after("node", 1.0, first=True)
    q.add("pod0")
    q.add("node")  # woken meanwhile: behind pod0
    q.add("pod1")
    clock.advance(1.0)
    assert [q.get_nowait() for _ in range(3)] == ["node", "pod0", "pod1"]
    assert q.get_nowait() is None


def test_a_key_back_for_its_slot_while_it_runs_goes_first_once_done() -> None:
    q, clock = _queue()
    q.add("node")
    assert q.get_nowait() == "node"
    q.add_after("node", 1.0, first=True)
    q.add("pod0")
    clock.advance(1.0)
    assert q.get_nowait() == "pod0"
    q.done("node")
    q.add("pod1")
    assert [q.get_nowait() for _ in range(2)] == ["node", "pod1"]


def test_an_earlier_plain_due_time_wins_over_a_slot_and_is_not_first() -> None:
    q, clock = _queue()
    q.add_after("node", 2.0, first=True)
    q.add_after("node", 1.0)
    q.add("pod0")
    clock.advance(1.0)
    assert [q.get_nowait() for _ in range(2)] == ["pod0", "node"]


def test_delayed_key_that_is_already_waiting_is_deduped() -> None:
    q, clock = _queue()
    q.add("a")
    q.add_after("a", 1.0)
    clock.advance(1.0)
    assert q.get_nowait() == "a"
    assert q.get_nowait() is None


def test_is_idle_ignores_delayed_keys() -> None:
    q, _ = _queue()
    assert q.is_idle()
    q.add_after("a", 1.0)
    assert q.is_idle()
    assert len(q) == 0
    assert q.depth == 0


def test_get_times_out() -> None:
    q: WorkQueue[str] = WorkQueue(SystemClock())
    assert q.get(timeout=0.01) is None


def test_get_wakes_for_a_delayed_key_on_a_real_clock() -> None:
    q: WorkQueue[str] = WorkQueue(SystemClock())
    q.add_after("a", 0.02)
    assert q.get(timeout=5.0) == "a"


def test_get_wakes_when_another_thread_adds() -> None:
    q: WorkQueue[str] = WorkQueue(SystemClock())
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5.0)))
    t.start()
    q.add("a")
    t.join(timeout=5.0)
    assert got == ["a"]


def test_wake_lets_a_blocked_getter_see_fake_time() -> None:
    q, clock = _queue()
    q.add_after("a", 100.0)
    got: list[str | None] = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5.0)))
    t.start()
    clock.advance(100.0)
    q.wake()
    t.join(timeout=5.0)
    assert got == ["a"]


def test_shutdown_wakes_a_blocked_getter() -> None:
    q: WorkQueue[str] = WorkQueue(SystemClock())
    got: list[str | None] = ["unset"]
    entered = threading.Event()

    def getter() -> None:
        entered.set()
        got[0] = q.get()

    t = threading.Thread(target=getter, daemon=True)
    t.start()
    assert entered.wait(timeout=5.0)
    q.shutdown()
    t.join(timeout=5.0)
    assert not t.is_alive()
    assert got == [None]
    assert q.shutting_down


def test_shutdown_drains_ready_keys_and_ignores_new_adds() -> None:
    q, clock = _queue()
    q.add("a")
    q.add_after("b", 1.0)
    q.shutdown()
    q.add("c")
    q.add_after("d", 1.0)
    q.add_rate_limited("e")
    assert q.num_requeues("e") == 0
    clock.advance(2.0)
    assert q.get(timeout=1.0) == "a"
    assert q.get(timeout=1.0) is None
    assert q.get_nowait() is None
    assert q.pending_delayed() == 0
