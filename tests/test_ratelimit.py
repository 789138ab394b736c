from __future__ import annotations

import threading

import pytest

from podnet.core.clock import FakeClock
from podnet.core.policy import QUEUE_ITEM_BACKOFF, QUEUE_RATE, Backoff, RateLimit
from podnet.core.ratelimit import ItemBackoff, MaxOfRateLimiter, TokenBucket


def test_bucket_burst_is_free_then_debt_is_spaced_one_over_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [bucket.reserve() for _ in range(4)]
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert bucket.waits == 4
    assert bucket.waited_seconds == pytest.approx(1.0)


def test_bucket_reserve_many_tokens_at_once() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=2, clock=clock)
    assert bucket.reserve(2) == 0.0
    assert bucket.reserve(3) == pytest.approx(1.5)


def test_try_acquire_never_waits_and_refills_over_fake_time() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=2, clock=clock)
    assert bucket.try_acquire()
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.advance(0.05)
    assert not bucket.try_acquire()
    clock.advance(0.05)
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    # Refill never exceeds the burst.
    clock.advance(100.0)
    assert bucket.available() == pytest.approx(2.0)
    assert bucket.waits == 0


def test_try_acquire_fails_while_in_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=1, clock=clock)
    bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)
    clock.advance(0.1)
    # The debt is repaid, but no token has been saved yet.
    assert not bucket.try_acquire()
    clock.advance(0.1)
    assert bucket.try_acquire()


def test_acquire_advances_fake_clock_by_the_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, burst=1, clock=clock)
    start = clock.monotonic()
    assert bucket.acquire() == 0.0
    assert clock.monotonic() == start
    assert bucket.acquire() == pytest.approx(0.25)
    assert clock.monotonic() == pytest.approx(start + 0.25)
    assert bucket.acquire() == pytest.approx(0.25)
    assert clock.monotonic() == pytest.approx(start + 0.5)
    assert bucket.waits == 2
    assert bucket.waited_seconds == pytest.approx(0.5)


def test_bucket_from_policy_and_validation() -> None:
    clock = FakeClock()
    bucket = TokenBucket.from_policy(RateLimit(rate=5.0, burst=7), clock)
    assert (bucket.rate, bucket.burst) == (5.0, 7)
    assert bucket.available() == 7.0
    with pytest.raises(ValueError):
        TokenBucket(rate=0.0, burst=1, clock=clock)
    with pytest.raises(ValueError):
        TokenBucket(rate=1.0, burst=0, clock=clock)
    with pytest.raises(ValueError):
        bucket.reserve(0)


def test_bucket_is_thread_safe() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=50, clock=clock)
    results: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            wait = bucket.reserve()
            with lock:
                results.append(wait)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    # 200 reservations on a frozen clock: 50 free, then 150 distinct slots 0.1 s apart.
    assert sorted(results) == pytest.approx([0.0] * 50 + [0.1 * i for i in range(1, 151)])


def test_item_backoff_grows_and_caps() -> None:
    backoff = ItemBackoff(QUEUE_ITEM_BACKOFF)
    delays = [backoff.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert backoff.failures("a") == 5
    for _ in range(40):
        last = backoff.when("a")
    assert last == 1000.0
    # Keys are independent.
    assert backoff.when("b") == pytest.approx(0.005)


def test_item_backoff_forget_resets() -> None:
    backoff = ItemBackoff(Backoff(base=1.0, factor=3.0, cap=100.0))
    assert [backoff.when("k") for _ in range(3)] == [1.0, 3.0, 9.0]
    backoff.forget("k")
    assert backoff.failures("k") == 0
    assert backoff.when("k") == 1.0
    backoff.forget("never-seen")


def test_max_of_takes_the_slower_limit() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemBackoff(Backoff(base=0.01, factor=2.0, cap=10.0)),
        TokenBucket(rate=1.0, burst=2, clock=clock),
    )
    # Burst free: per-item backoff decides.
    assert limiter.when("a") == pytest.approx(0.01)
    assert limiter.when("b") == pytest.approx(0.01)
    # Bucket empty: its debt (1 s, then 2 s) dominates the tiny per-item delay.
    assert limiter.when("c") == pytest.approx(1.0)
    assert limiter.when("a") == pytest.approx(2.0)
    assert limiter.failures("a") == 2
    limiter.forget("a")
    assert limiter.failures("a") == 0
    # Time repays the debt; a key with a long backoff is then limited by its own delay.
    clock.advance(100.0)
    for _ in range(9):
        limiter.item.when("d")
    assert limiter.when("d") == pytest.approx(5.12)


def test_default_limiter_matches_controller_runtime() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter.default(clock)
    assert limiter.item.backoff == QUEUE_ITEM_BACKOFF
    assert (limiter.bucket.rate, limiter.bucket.burst) == (QUEUE_RATE.rate, QUEUE_RATE.burst)
    assert limiter.when("x") == pytest.approx(0.005)


@pytest.mark.parametrize("backoff", [QUEUE_ITEM_BACKOFF, Backoff(base=2.0, factor=2.0, cap=60.0),
                                     Backoff(base=1e-300, factor=1e10, cap=1e300)])
@pytest.mark.parametrize("failures", [1024, 1025, 5000, 10**9])
def test_backoff_saturates_at_its_cap_for_any_failure_count(backoff: Backoff,
                                                            failures: int) -> None:
    # a key failing for hours passes 1,024 failures; 2.0 ** 1024 overflows a float
    assert backoff.delay(failures) == backoff.cap


def test_backoff_below_the_cap_is_unchanged_and_never_decreases() -> None:
    backoff = Backoff(base=0.005, factor=2.0, cap=1000.0)
    delays = [backoff.delay(n) for n in range(1, 2000)]
    assert delays[:3] == [0.005, 0.01, 0.02]
    assert delays == sorted(delays) and delays[-1] == 1000.0


def test_a_key_failing_thousands_of_times_keeps_getting_a_capped_delay() -> None:
    limiter = MaxOfRateLimiter.default(FakeClock())
    delays = [limiter.when("k") for _ in range(3000)]
    assert limiter.failures("k") == 3000
    assert max(delays[-1000:]) >= QUEUE_ITEM_BACKOFF.cap
    # the shared bucket's debt grows linearly with the retries: no overflow there either
    assert delays[-1] == pytest.approx(max(QUEUE_ITEM_BACKOFF.cap, (3000 - QUEUE_RATE.burst)
                                           / QUEUE_RATE.rate))
