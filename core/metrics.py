"""Prometheus metrics of one engine, on a registry of its own (never the global one).

Durations are observed as they happen (reconciles, provider calls); everything else is
read from the engine's own state at scrape time, so metrics cost nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from podnet.core.fence import Fence
    from podnet.core.pool import Pools
    from podnet.core.ratelimit import CloudLimiter, TokenBucket


class _Queue(Protocol):
    def __len__(self) -> int: ...
    def pending_delayed(self) -> int: ...


class _Counts(Protocol):
    @property
    def transitions(self) -> Mapping[str, int]: ...
    @property
    def failed_transitions(self) -> Mapping[str, int]: ...
    @property
    def waited_transitions(self) -> Mapping[str, int]: ...
    @property
    def writes(self) -> Mapping[str, int]: ...


class _Gates(Protocol):
    """The provider gateway's rate limits: core's bucket per provider, and the per-API
    limiters of providers that limit themselves."""

    def buckets(self) -> Mapping[str, TokenBucket]: ...
    @property
    def cloud_limiters(self) -> Mapping[str, CloudLimiter]: ...


class EngineState(Protocol):
    """What the metrics read of an engine at scrape time (the Engine has all of it): a
    protocol, so that the module the engine imports imports no engine."""

    @property
    def queue(self) -> _Queue: ...
    @property
    def pools(self) -> Pools: ...
    @property
    def stats(self) -> _Counts: ...
    @property
    def fence(self) -> Fence: ...
    @property
    def gateway(self) -> _Gates: ...
    def workers_alive(self) -> int: ...


_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reconcile_seconds = Histogram(
            "podnet_reconcile_duration_seconds", "Time spent in one reconcile.",
            ["controller", "outcome"], buckets=_BUCKETS, registry=self.registry,
        )
        self.provider_call_seconds = Histogram(
            "podnet_provider_call_duration_seconds", "Latency of provider hook calls.",
            ["provider", "api", "outcome"], buckets=_BUCKETS, registry=self.registry,
        )

    def attach(self, engine: EngineState) -> None:
        self.registry.register(_EngineCollector(engine))

    def reconcile(self, controller: str, seconds: float, outcome: str) -> None:
        self.reconcile_seconds.labels(controller, outcome).observe(seconds)

    def provider_call(self, provider: str, api: str, seconds: float, ok: bool) -> None:
        self.provider_call_seconds.labels(provider, api, "ok" if ok else "error").observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _EngineCollector(Collector):
    def __init__(self, engine: EngineState) -> None:
        self.engine = engine

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        e = self.engine
        depth = GaugeMetricFamily("podnet_queue_depth", "Keys ready to be reconciled.")
        depth.add_metric([], len(e.queue))
        yield depth
        alive = GaugeMetricFamily("podnet_worker_threads_alive",
                                  "Reconcile worker threads running.")
        alive.add_metric([], e.workers_alive())
        yield alive
        delayed = GaugeMetricFamily("podnet_queue_delayed", "Keys waiting for a requeue time.")
        delayed.add_metric([], e.queue.pending_delayed())
        yield delayed
        pool = GaugeMetricFamily("podnet_pool_addresses", "Addresses in node pools.",
                                 labels=["provider", "node", "state"])
        for p in e.pools.all():
            owned = p.owned()
            pool.add_metric([p.provider, p.node, "total"], p.total())
            pool.add_metric([p.provider, p.node, "allocated"], owned)
            pool.add_metric([p.provider, p.node, "idle"], p.total() - owned)
            pool.add_metric([p.provider, p.node, "suspect"], len(p.suspects))
        yield pool
        transitions = CounterMetricFamily("podnet_transitions", "Transitions by trigger.",
                                          labels=["transition", "outcome"])
        for name, count in e.stats.transitions.items():
            transitions.add_metric([name, "ok"], count)
        for name, count in e.stats.failed_transitions.items():
            transitions.add_metric([name, "error"], count)
        # found no address to take: waits, not errors (an alert on "error" stays quiet)
        for name, count in e.stats.waited_transitions.items():
            transitions.add_metric([name, "waiting"], count)
        yield transitions
        waiters = GaugeMetricFamily("podnet_pod_networks_waiting",
                                    "Pod networks waiting for an address of their node's "
                                    "pool.", labels=["provider"])
        per_provider: dict[str, int] = {}
        for p in e.pools.all():
            per_provider[p.provider] = per_provider.get(p.provider, 0) + len(p.waiting)
        for provider, count in sorted(per_provider.items()):
            waiters.add_metric([provider], count)
        yield waiters
        writes = CounterMetricFamily("podnet_record_writes", "Writes to the API server.",
                                     labels=["write"])
        for name, count in e.stats.writes.items():
            writes.add_metric([name], count)
        yield writes
        fenced = CounterMetricFamily(
            "podnet_fenced_writes", "Writes (API and provider) refused because this "
            "replica's lease might have expired.", labels=["write"])
        for name, count in e.fence.refused.items():
            fenced.add_metric([name], count)
        yield fenced
        waited = CounterMetricFamily("podnet_rate_limiter_wait_seconds",
                                     "Time spent waiting for cloud-call tokens.",
                                     labels=["provider"])
        core_gate = e.gateway.buckets()
        for provider, limiter in e.gateway.cloud_limiters.items():
            gate = core_gate.get(provider)
            waited.add_metric([provider], limiter.waited_seconds
                              + (gate.waited_seconds if gate is not None else 0.0))
        yield waited
