"""A histogram of seconds kept by its owner under the owner's lock, exported at scrape time.

prometheus_client's Histogram takes a lock of its own on every observation; the work queue
observes twice per key under the lock it already holds, so it keeps these instead.
"""

from __future__ import annotations

from bisect import bisect_left

#: controller-runtime's work queue buckets: 10 ns to 1000 s by tens, so dashboards made
#: for its ``workqueue_*`` family read podnet's too
QUEUE_BUCKETS: tuple[float, ...] = tuple(10.0 ** e for e in range(-8, 4))
#: remote calls (API server, cloud APIs): 0.5 ms to 10 s
CALL_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class DurationHistogram:
    """Bucket counts and the sum of observed seconds. Not thread-safe: its owner observes
    and snapshots under a lock of its own."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...] = QUEUE_BUCKETS) -> None:
        self.bounds = bounds
        #: observations per bucket alone (not cumulative), +Inf last
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: a value equal to a bound belongs to that bound's bucket (le)
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.sum += seconds

    def snapshot(self) -> tuple[list[tuple[str, int]], float]:
        """Cumulative ``(le, count)`` pairs, ``+Inf`` last, and the sum: the shape
        prometheus_client's HistogramMetricFamily takes."""
        buckets: list[tuple[str, int]] = []
        total = 0
        for bound, count in zip((*map(repr, map(float, self.bounds)), "+Inf"), self.counts,
                                strict=True):
            total += count
            buckets.append((bound, total))
        return buckets, self.sum
