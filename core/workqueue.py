"""A work queue with controller-runtime semantics: dedupe, per-key exclusivity, delayed adds.

A key is in at most one of three states at a time as far as workers can see: waiting (ready
or delayed), being processed, or absent. Adding a key that is being processed only marks it
dirty, so it is handed out again after ``done`` and never to two workers at once.

Due times are read from ``clock.monotonic()``, so the queue runs on a ``FakeClock``: advance the
clock and ``get_nowait`` returns what became due. ``get(timeout)`` blocks on a real condition
variable; on a fake clock a runner should prefer ``get_nowait`` or call ``wake()`` after
advancing, since a blocked getter cannot see fake time move.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Hashable, Iterable
from typing import Generic, TypeVar

from podnet.core.clock import Clock
from podnet.core.histogram import DurationHistogram
from podnet.core.ratelimit import MaxOfRateLimiter

K = TypeVar("K", bound=Hashable)

# Rebuild the delayed heap once stale entries outnumber live ones by this much.
_COMPACT_RATIO = 4
_COMPACT_MIN = 64

class QueueStats:
    """What the ``workqueue_*`` metrics read of a queue, taken under its lock at once."""

    __slots__ = ("adds", "depth", "longest_running", "queue_duration", "retries",
                 "unfinished_work", "work_duration")

    def __init__(self, adds: int, retries: int, depth: int, unfinished_work: float,
                 longest_running: float, queue_duration: tuple[list[tuple[str, int]], float],
                 work_duration: tuple[list[tuple[str, int]], float]) -> None:
        self.adds = adds
        self.retries = retries
        self.depth = depth
        self.unfinished_work = unfinished_work
        self.longest_running = longest_running
        self.queue_duration = queue_duration
        self.work_duration = work_duration


class WorkQueue(Generic[K]):
    """Keys are any hashable except None, which ``get`` uses to mean "nothing"."""

    def __init__(
        self, clock: Clock, limiter: MaxOfRateLimiter | None = None, name: str = "queue"
    ) -> None:
        self.name = name
        self._clock = clock
        self.limiter = MaxOfRateLimiter.default(clock) if limiter is None else limiter
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[K] = deque()
        # Keys that need processing: those in _queue plus those re-added while processing.
        self._dirty: set[K] = set()
        # Keys being processed, with the (real, monotonic) time each was handed out.
        self._processing: dict[K, float] = {}
        # When each key in _queue went in (real time): its wait, once handed out.
        self._queued_at: dict[K, float] = {}
        # Live due time per delayed key; the heap may hold stale entries, skipped lazily.
        self._delayed: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        # Delayed keys that go to the front once due (their due time): a key coming back
        # for a slot reserved for it (a cloud call's) is not put behind what is ready then.
        self._first: dict[K, float] = {}
        # Keys re-added that way while being processed: to the front when done.
        self._front: set[K] = set()
        # How many keys at the front of _queue went there so (in the order they came).
        self._firsts = 0
        # Tie-breaker so the heap never compares keys (they need only be hashable).
        self._seq = itertools.count()
        self._shutting_down = False
        #: metrics: keys actually queued (after dedupe), and rate-limited re-adds
        self.adds = 0
        self.retries = 0
        #: seconds keys waited in the queue before a worker took them, and were processed
        #: (real time even on a FakeClock: these measure the process, not the model)
        self.queue_duration = DurationHistogram()
        self.work_duration = DurationHistogram()

    # -- adding ---------------------------------------------------------------------------

    def add(self, key: K) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: K, first: bool = False) -> None:
        if self._shutting_down:
            return
        if key in self._dirty:
            if first and key in self._processing:
                self._front.add(key)
            elif first:
                # ready already, maybe behind others: its turn is now
                at = self._queue.index(key)
                if at >= self._firsts:
                    del self._queue[at]
                    self._put_first(key)
            return
        self.adds += 1
        self._dirty.add(key)
        if key in self._processing:
            # done() re-queues it; handing it out now would let two workers hold it.
            if first:
                self._front.add(key)
            return
        if first:
            self._put_first(key)
        else:
            self._queue.append(key)
        self._queued_at[key] = time.monotonic()
        self._cond.notify()

    def _put_first(self, key: K) -> None:
        """Before the keys ready, after those that went first already."""
        self._queue.insert(self._firsts, key)
        self._firsts += 1

    def add_after(self, key: K, delay: float, *, first: bool = False) -> None:
        """Add ``key`` once ``delay`` seconds have passed; an earlier pending due time wins.
        ``first``: then it goes before the keys ready (it comes back for something
        reserved for it at that time, a rate limiter's slot)."""
        if not first:
            self.add_all_after((key,), delay)
            return
        with self._cond:
            if self._shutting_down:
                return
            if delay <= 0:
                self._promote_locked()  # keys whose slots came sooner go before it
                self._add_locked(key, first=True)
                return
            due = self._clock.monotonic() + delay
            current = self._delayed.get(key)
            if current is not None and current <= due:
                return
            self._delayed[key] = due
            self._first[key] = due
            heapq.heappush(self._heap, (due, next(self._seq), key))
            self._maybe_compact_locked()
            self._cond.notify()

    def add_all_after(self, keys: Iterable[K], delay: float) -> None:
        """:meth:`add_after` for each of ``keys``, under one lock, one getter woken (a
        restart schedules 150,000 verifies: one wake-up each kept the workers busy)."""
        if delay <= 0:
            for key in keys:
                self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            due = self._clock.monotonic() + delay
            for key in keys:
                current = self._delayed.get(key)
                if current is not None and current <= due:
                    continue
                self._delayed[key] = due
                heapq.heappush(self._heap, (due, next(self._seq), key))
            self._maybe_compact_locked()
            # a blocked getter may be sleeping toward a later due time: it recomputes
            self._cond.notify()

    def add_rate_limited(self, key: K) -> None:
        """Re-add ``key`` after the limiter's delay (its backoff grows with each call)."""
        if self._shutting_down:
            return
        delay = self.limiter.when(key)
        with self._cond:
            self.retries += 1
        self.add_after(key, delay)

    def forget(self, key: K) -> None:
        """Reset ``key``'s failure count (call after it was processed successfully)."""
        self.limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.limiter.failures(key)

    # -- taking ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None) -> K | None:
        """Block until a key is ready and return it; None on timeout or once shut down."""
        # The timeout bounds real blocking, so it is measured on real time even on a FakeClock.
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                key = self._pop_locked()
                if key is not None or self._shutting_down:
                    return key
                wait: float | None = None
                if deadline is not None:
                    wait = deadline - time.monotonic()
                    if wait <= 0:
                        return None
                due = self._next_due_locked()
                if due is not None:
                    # Sleep only until the next delayed key is due rather than polling.
                    until = max(0.0, due - self._clock.monotonic())
                    wait = until if wait is None else min(wait, until)
                self._cond.wait(wait)

    def get_nowait(self) -> K | None:
        with self._cond:
            return self._pop_locked()

    def _pop_locked(self) -> K | None:
        self._promote_locked()
        if not self._queue:
            return None
        key = self._queue.popleft()
        self._firsts = max(self._firsts - 1, 0)
        now = time.monotonic()
        self._processing[key] = now
        self.queue_duration.observe(now - self._queued_at.pop(key, now))
        self._dirty.discard(key)
        if self._queue:
            # Several keys may have become due at once; make sure another getter sees them.
            self._cond.notify()
        return key

    def done(self, key: K) -> None:
        """Processing of ``key`` finished; queue it again if it was re-added meanwhile."""
        with self._cond:
            started = self._processing.pop(key, None)
            if started is None:
                return
            now = time.monotonic()
            self.work_duration.observe(now - started)
            if key in self._dirty:
                if key in self._front:
                    self._put_first(key)
                else:
                    self._queue.append(key)
                self._queued_at[key] = now
                self._cond.notify()
            self._front.discard(key)

    # -- delayed keys ---------------------------------------------------------------------

    def _promote_locked(self) -> None:
        if not self._heap:
            return
        now = self._clock.monotonic()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._delayed.get(key) == due:
                del self._delayed[key]
                self._add_locked(key, first=self._first.pop(key, None) == due)

    def _next_due_locked(self) -> float | None:
        while self._heap:
            due, _, key = self._heap[0]
            if self._delayed.get(key) == due:
                return due
            heapq.heappop(self._heap)
        return None

    def _maybe_compact_locked(self) -> None:
        if len(self._heap) > max(_COMPACT_MIN, _COMPACT_RATIO * len(self._delayed)):
            self._heap = [(d, next(self._seq), k) for k, d in self._delayed.items()]
            heapq.heapify(self._heap)

    def next_due(self) -> float | None:
        """Monotonic time at which the earliest delayed key becomes ready, if any."""
        with self._cond:
            self._promote_locked()
            return self._next_due_locked()

    def pending_delayed(self) -> int:
        with self._cond:
            self._promote_locked()
            return len(self._delayed)

    def wake(self) -> None:
        """Make blocked getters re-check due times, e.g. after advancing a FakeClock."""
        with self._cond:
            self._cond.notify_all()

    # -- state ----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready to be handed out now (delayed keys count once they are due)."""
        with self._cond:
            self._promote_locked()
            return len(self._queue)

    @property
    def depth(self) -> int:
        return len(self)

    def processing(self) -> int:
        """Keys being processed now: the workers that are busy."""
        with self._cond:
            return len(self._processing)

    def stats(self) -> QueueStats:
        with self._cond:
            self._promote_locked()
            now = time.monotonic()
            running = [now - started for started in self._processing.values()]
            return QueueStats(
                adds=self.adds, retries=self.retries, depth=len(self._queue),
                unfinished_work=sum(running), longest_running=max(running, default=0.0),
                queue_duration=self.queue_duration.snapshot(),
                work_duration=self.work_duration.snapshot())

    def is_idle(self) -> bool:
        """Nothing ready and nothing being processed; delayed keys may still be pending."""
        with self._cond:
            self._promote_locked()
            return not self._queue and not self._processing

    @property
    def shutting_down(self) -> bool:
        with self._cond:
            return self._shutting_down

    def shutdown(self) -> None:
        """Stop accepting keys and wake every getter; ready keys can still be drained."""
        with self._cond:
            self._shutting_down = True
            # Delayed keys would be adds after shutdown, which are ignored anyway.
            self._delayed.clear()
            self._heap.clear()
            self._first.clear()
            self._cond.notify_all()

    def __repr__(self) -> str:
        with self._cond:
            return (
                f"WorkQueue({self.name!r}, ready={len(self._queue)}, "
                f"processing={len(self._processing)}, delayed={len(self._delayed)})"
            )
