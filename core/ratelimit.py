"""Rate limiters for the work queue and cloud calls: a token bucket and per-key backoff.

Everything reads a ``Clock``, so on a ``FakeClock`` waits advance fake time instead of blocking.

A cloud call's wait for its token need not hold a worker: on a thread that defers
(:func:`defer_cloud_waits`, the engine's workers), the first call inside a
:func:`deferrable` scope whose token is not there yet reserves its slot and raises
:class:`CloudWait`; the caller requeues for the slot, and the worker serves other keys
meanwhile (one node's pool read waiting for its bucket does not hold back another node's
grow, whose bucket has tokens).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Hashable, Iterator, Mapping
from typing import Self

from podnet.core.clock import Clock
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.histogram import CALL_BUCKETS, DurationHistogram
from podnet.core.policy import QUEUE_ITEM_BACKOFF, QUEUE_RATE, Backoff, RateLimit

# Float drift in ``elapsed * rate`` must not make a fully refilled token look missing.
_EPSILON = 1e-9


class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; reservations may run into debt.

    Debt is what makes ``reserve`` useful to a queue: every caller gets its own slot in the
    future, spaced ``1/rate`` apart, instead of all retrying at the same instant.
    """

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self.rate = float(rate)
        self.burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._last = clock.monotonic()
        #: metrics: seconds callers were told to wait, and how many reservations had to wait
        self.waited_seconds = 0.0
        self.waits = 0

    @classmethod
    def from_policy(cls, policy: RateLimit, clock: Clock) -> Self:
        return cls(policy.rate, policy.burst, clock)

    def _refill_locked(self) -> None:
        now = self._clock.monotonic()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate)

    def available(self) -> float:
        """Tokens in the bucket now; negative while in debt."""
        with self._lock:
            self._refill_locked()
            return self._tokens

    def reserve(self, n: int = 1) -> float:
        """Take ``n`` tokens now and return the seconds to wait before using them (0 if free)."""
        _check_n(n)
        with self._lock:
            self._refill_locked()
            self._tokens -= n
            wait = 0.0 if self._tokens >= -_EPSILON else -self._tokens / self.rate
            if wait > 0:
                self.waited_seconds += wait
                self.waits += 1
            return wait

    def try_acquire(self, n: int = 1) -> bool:
        """Take ``n`` tokens only if they are there right now; never waits, never owes."""
        _check_n(n)
        with self._lock:
            self._refill_locked()
            if self._tokens + _EPSILON < n:
                return False
            self._tokens -= n
            return True

    def acquire(self, n: int = 1) -> float:
        """Reserve ``n`` tokens and sleep on the clock until they are usable; returns the wait."""
        wait = self.reserve(n)
        # Sleep outside the lock so other callers can queue up their own reservations.
        if wait > 0:
            self._clock.sleep(wait)
        return wait


def _check_n(n: int) -> None:
    if n < 1:
        raise ValueError(f"token count must be >= 1, got {n!r}")


class ItemBackoff:
    """Per-key exponential backoff: the n-th consecutive failure waits ``backoff.delay(n)``."""

    def __init__(self, backoff: Backoff) -> None:
        self.backoff = backoff
        self._lock = threading.Lock()
        self._failures: dict[Hashable, int] = {}

    def when(self, key: Hashable) -> float:
        """Count one more failure for ``key`` and return how long it should wait."""
        with self._lock:
            n = self._failures.get(key, 0) + 1
            self._failures[key] = n
        return self.backoff.delay(n)

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._failures.pop(key, None)

    def failures(self, key: Hashable) -> int:
        with self._lock:
            return self._failures.get(key, 0)


class MaxOfRateLimiter:
    """The slower of a per-key backoff and one shared bucket (controller-runtime's default).

    The per-key backoff keeps one hot key from spinning; the bucket caps the overall retry rate
    when many keys fail at once.
    """

    def __init__(self, item: ItemBackoff, bucket: TokenBucket) -> None:
        self.item = item
        self.bucket = bucket

    @classmethod
    def default(cls, clock: Clock) -> Self:
        """Per item 5 ms doubling to 1000 s, overall 10/s with a burst of 100."""
        return cls(ItemBackoff(QUEUE_ITEM_BACKOFF), TokenBucket.from_policy(QUEUE_RATE, clock))

    def when(self, key: Hashable) -> float:
        # Both are always consulted: the failure count and the bucket slot must both advance.
        return max(self.item.when(key), self.bucket.reserve())

    def forget(self, key: Hashable) -> None:
        self.item.forget(key)

    def failures(self, key: Hashable) -> int:
        return self.item.failures(key)


#: a token this far off or farther is not slept for on a thread that defers
DEFER_AFTER = 0.02
#: a slot reserved for a deferred call is kept this long past its time, for a caller that
#: comes back late (one that never does costs its bucket that one token)
_SLOT_KEPT = 60.0


class CloudWait(ProviderError):
    """The first cloud call of a :func:`deferrable` scope would wait ``retry_after``
    seconds for its token: its slot is reserved for the scope's owner, and nothing was
    called. A wait, not a failure (kind ``throttled``): the caller comes back then."""

    def __init__(self, api: str, retry_after: float) -> None:
        super().__init__(ErrorKind.THROTTLED, f"the {api} call waits {retry_after:.2f} s "
                         "for its turn under the client-side rate limit")
        self.api = api
        self.retry_after = retry_after


class _Deferral(threading.local):
    #: this thread has other keys to serve: it defers rather than sleeps on a token
    enabled = False
    #: whose scope is open, and whether nothing was called in it yet
    owner: Hashable | None = None
    fresh = False


_deferral = _Deferral()


def defer_cloud_waits() -> None:
    """From now on, this thread (a worker among others) defers the first call of each
    :func:`deferrable` scope whose token is not there yet, instead of sleeping."""
    _deferral.enabled = True


@contextlib.contextmanager
def deferring_cloud_waits() -> Iterator[None]:
    """:func:`defer_cloud_waits` for the block only (a thread that drives an engine by
    hand, as the test kit's machines do, and goes on to other work after it)."""
    before = _deferral.enabled
    _deferral.enabled = True
    try:
        yield
    finally:
        _deferral.enabled = before


@contextlib.contextmanager
def deferrable(owner: Hashable) -> Iterator[None]:
    """A scope whose first cloud call may be deferred (:class:`CloudWait`) on a thread
    that defers, its slot kept for ``owner`` (the same scope when it comes back). Only
    the first: once something was called, the scope's later calls wait for their tokens,
    so nothing is left half-done."""
    if not _deferral.enabled:
        yield
        return
    saved = _deferral.owner, _deferral.fresh
    _deferral.owner, _deferral.fresh = owner, True
    try:
        yield
    finally:
        _deferral.owner, _deferral.fresh = saved


class CloudLimiter:
    """One provider's client-side buckets, one per cloud API (action), as clouds meter
    calls: each API has its own budget. ``default`` serves every API without an entry in
    ``overrides``. Providers get theirs from core (``podnet_cloud_limiter``) and take a
    token before each SDK request: ``acquire(api)`` waits on the clock for its slot.
    """

    def __init__(self, default: RateLimit, clock: Clock,
                 overrides: Mapping[str, RateLimit] | None = None) -> None:
        self.default = default
        self.overrides = dict(overrides or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}
        #: per API: the latency of its requests, and its failures by error kind
        self._latency: dict[str, DurationHistogram] = {}
        self._errors: dict[tuple[str, str], int] = {}
        #: (API, owner) -> the monotonic time of the slot a deferred call reserved
        self._slots: dict[tuple[str, Hashable], float] = {}
        #: put-off slots a call that holds its worker took once: not taken again
        self._moved: set[tuple[str, Hashable]] = set()
        self._slots_purged = clock.monotonic()
        #: calls put off to their slot (:class:`CloudWait`) and slots traded to a call
        #: that holds its worker, since start
        self.deferred = 0
        self.traded = 0

    def observe(self, api: str, seconds: float, error: str | None = None) -> None:
        """One request of ``api`` answered (``error`` None) or failed (``error``: its
        kind, e.g. ``throttled``), after ``seconds``: the per-API metrics."""
        with self._lock:
            histogram = self._latency.get(api)
            if histogram is None:
                histogram = self._latency[api] = DurationHistogram(CALL_BUCKETS)
            histogram.observe(seconds)
            if error is not None:
                self._errors[api, error] = self._errors.get((api, error), 0) + 1

    def requests(self) -> tuple[dict[str, tuple[list[tuple[str, int]], float]],
                                dict[tuple[str, str], int]]:
        """Per API its latency histogram's snapshot; per (API, kind) its failures."""
        with self._lock:
            return ({api: h.snapshot() for api, h in self._latency.items()},
                    dict(self._errors))

    def bucket(self, api: str) -> TokenBucket:
        with self._lock:
            bucket = self._buckets.get(api)
            if bucket is None:
                bucket = self._buckets[api] = TokenBucket.from_policy(
                    self.overrides.get(api, self.default), self._clock)
            return bucket

    def acquire(self, api: str) -> float:
        """Take one token of ``api``'s bucket, waiting for it; returns the wait.

        Raises :class:`CloudWait` instead of waiting for the first call of a
        :func:`deferrable` scope on a thread that defers; the call of that scope's owner
        that comes back takes the slot reserved for it."""
        deferral = _deferral
        if deferral.owner is None or not deferral.fresh:
            return self._acquire_holding(api)
        deferral.fresh = False
        key = (api, deferral.owner)
        now = self._clock.monotonic()
        with self._lock:
            slot = self._slots.pop(key, None)
        if slot is None:
            slot = now + self.bucket(api).reserve()
        wait = slot - now
        if wait >= DEFER_AFTER:
            with self._lock:
                if now >= self._slots_purged + _SLOT_KEPT:
                    self._slots_purged = now
                    for old in [k for k, t in self._slots.items() if t < now - _SLOT_KEPT]:
                        del self._slots[old]
                        self._moved.discard(old)
                self._slots[key] = slot
                self.deferred += 1
            raise CloudWait(api, wait)
        with self._lock:
            self._moved.discard(key)  # its slot taken: a later one may be traded again
        if wait > 0:
            self._clock.sleep(wait)
        return max(wait, 0.0)

    def _acquire_holding(self, api: str) -> float:
        """A call that waits for its token holding its worker (one inside a scope that
        called already: an ENI's attach poll) trades its slot for the earliest slot a
        put-off call holds, when that comes sooner: the put-off call has no worker while
        it waits, this one holds one, and behind the put-off slots every worker could be
        held so, no worker left to serve them when they come. The put-off call takes the
        later slot (it comes back and is put off once more); a slot is traded once."""
        now = self._clock.monotonic()
        wait = self.bucket(api).reserve()
        if wait >= DEFER_AFTER:
            mine = now + wait
            with self._lock:
                sooner = [(t, k) for k, t in self._slots.items()
                          if k[0] == api and now <= t < mine and k not in self._moved]
                if sooner:
                    slot, key = min(sooner, key=lambda item: item[0])
                    self._slots[key] = mine
                    self._moved.add(key)
                    self.traded += 1
                    wait = slot - now
        if wait > 0:
            self._clock.sleep(wait)
        return wait

    def buckets(self) -> dict[str, TokenBucket]:
        with self._lock:
            return dict(self._buckets)

    @property
    def waited_seconds(self) -> float:
        return sum(b.waited_seconds for b in self.buckets().values())
