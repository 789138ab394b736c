"""Prometheus metrics of one engine, on a registry of its own (never the global one).

Durations are observed as they happen (reconciles, provider calls); everything else is
read from the engine's own state at scrape time, so metrics cost nothing between scrapes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import (
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from podnet.core.histogram import CALL_BUCKETS
from podnet.core.models import AgentReport, Phase, PodNetwork
from podnet.core.objects import AGENT_LEASE_SECONDS, ready_condition
from podnet.core.probes import process_registry
from podnet.core.version import podnet_version

if TYPE_CHECKING:
    from podnet.core.clock import Clock
    from podnet.core.fence import Fence
    from podnet.core.pool import Pools
    from podnet.core.ratelimit import CloudLimiter, TokenBucket
    from podnet.core.workqueue import QueueStats


class _Queue(Protocol):
    name: str

    def stats(self) -> QueueStats: ...
    def pending_delayed(self) -> int: ...
    def processing(self) -> int: ...


class _Counts(Protocol):
    @property
    def transitions(self) -> Mapping[str, int]: ...
    @property
    def failed_transitions(self) -> Mapping[str, int]: ...
    @property
    def waited_transitions(self) -> Mapping[str, int]: ...
    @property
    def conflicted_transitions(self) -> Mapping[str, int]: ...
    @property
    def writes(self) -> Mapping[str, int]: ...


class _Gates(Protocol):
    """The provider gateway's rate limits: core's bucket per provider, and the per-API
    limiters of providers that limit themselves."""

    def buckets(self) -> Mapping[str, TokenBucket]: ...
    @property
    def cloud_limiters(self) -> Mapping[str, CloudLimiter]: ...


class _Informer(Protocol):
    def add_handler(self, fn: Callable[[str, str, Any, Any], None]) -> None: ...
    def values(self) -> list[Any]: ...
    def keys(self) -> list[str]: ...


class _Caches(Protocol):
    @property
    def pod_networks(self) -> _Informer: ...
    @property
    def node_networks(self) -> _Informer: ...
    @property
    def agent_reports(self) -> _Informer: ...


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
    @property
    def caches(self) -> _Caches: ...
    @property
    def clock(self) -> Clock: ...
    def workers_alive(self) -> int: ...


_BUCKETS = CALL_BUCKETS


class Metrics:
    """The registry ``/metrics`` renders, and what observes durations into it.

    Every name is listed, with what it is for, in the README ("Metrics"). Counters end in
    ``_total``, durations are ``_seconds`` histograms, and no label value stands for the
    sum of the others, so ``sum()`` over any label never double counts.
    """

    def __init__(self) -> None:
        # which version each replica runs (the agent's podnet_agent_build_info says its)
        self.registry = process_registry("podnet_build_info", "controller", podnet_version())
        self.reconcile_seconds = Histogram(
            "podnet_reconcile_duration_seconds", "Time spent in one reconcile.",
            ["controller", "outcome"], buckets=_BUCKETS, registry=self.registry,
        )
        self.provider_call_seconds = Histogram(
            "podnet_provider_hook_duration_seconds",
            "Latency of provider hook calls (outcome ok, error, or waiting: no idle "
            "address yet, or the call put off to its turn under the rate limit).",
            ["provider", "hook", "outcome"], buckets=_BUCKETS,
            registry=self.registry,
        )
        self.kube_requests = Counter(
            "podnet_kube_api_requests_total",
            "Requests to the Kubernetes API server by verb and HTTP status code "
            "(code \"error\": no answer).", ["verb", "code"], registry=self.registry,
        )
        self.kube_request_seconds = Histogram(
            "podnet_kube_api_request_duration_seconds",
            "Latency of requests to the Kubernetes API server until the answer's headers "
            "(a watch: until it opened).", ["verb"], buckets=_BUCKETS,
            registry=self.registry,
        )

        self.events_dropped = Counter(
            "podnet_events_dropped_total",
            "Events not written because the queue of Events waiting to be sent was full "
            "(Events are best effort; the records are written regardless).",
            registry=self.registry,
        )

    def attach(self, engine: EngineState) -> None:
        """Read ``engine`` at scrape time; before it starts, so that its PodNetworks are
        counted from their first list on."""
        tally = PodNetworkTally(engine.clock)
        engine.caches.pod_networks.add_handler(tally.changed)
        self.registry.register(_EngineCollector(engine))
        self.registry.register(_RecordCollector(engine, tally))

    def attach_leader(self, lease: str, leading: Callable[[], bool]) -> None:
        """``podnet_leader{lease}``: 1 while ``leading()`` says this replica leads."""
        self.registry.register(_LeaderCollector(lease, leading))

    def reconcile(self, controller: str, seconds: float, outcome: str) -> None:
        self.reconcile_seconds.labels(controller, outcome).observe(seconds)

    def provider_call(self, provider: str, hook: str, seconds: float, outcome: str) -> None:
        self.provider_call_seconds.labels(provider, hook, outcome).observe(seconds)

    def kube_request(self, verb: str, code: str, seconds: float) -> None:
        self.kube_requests.labels(verb, code).inc()
        self.kube_request_seconds.labels(verb).observe(seconds)

    def event_dropped(self) -> None:
        self.events_dropped.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _ready(pn: PodNetwork) -> str:
    """The ``ready`` label: the Ready condition's status, lower case; ``unknown`` before
    the controller first wrote one."""
    cond = ready_condition(pn)
    return cond.status.lower() if cond is not None and cond.status in (
        "True", "False") else "unknown"


class PodNetworkTally:
    """PodNetworks counted by phase and readiness, and since when each one that should
    be ready is not, kept up to date by the records' informer (one dict update per
    change), so a scrape reads a few numbers instead of every record."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}
        #: record key -> when it was last seen becoming not ready (seconds since the
        #: epoch), for records of pods that are there (not Releasing) and not ready
        self.not_ready_since: dict[str, float] = {}
        #: node -> its records: the nodes podnet serves (whose agent should report)
        self.per_node: dict[str, int] = {}

    def changed(self, _event: str, key: str, old: PodNetwork | None,
                new: PodNetwork | None) -> None:
        with self._lock:
            if old is not None:
                self._count((str(old.status.phase), _ready(old)), -1)
                self._count_node(old.spec.node_name, -1)
            if new is None:
                self.not_ready_since.pop(key, None)
                return
            ready = _ready(new)
            self._count((str(new.status.phase), ready), 1)
            self._count_node(new.spec.node_name, 1)
            if ready == "true" or new.status.phase is Phase.RELEASING:
                self.not_ready_since.pop(key, None)
                return
            cond = ready_condition(new)
            since = (cond.last_transition_time if cond is not None else None) or \
                new.metadata.creation_timestamp
            if since is not None:
                self.not_ready_since[key] = since.timestamp()
            elif key not in self.not_ready_since:
                # written by us and not answered yet: from when it is first seen
                self.not_ready_since[key] = self.clock.now().timestamp()

    def _count(self, label: tuple[str, str], by: int) -> None:
        n = self.counts.get(label, 0) + by
        if n:
            self.counts[label] = n
        else:
            del self.counts[label]

    def _count_node(self, node: str, by: int) -> None:
        if not node:
            return
        n = self.per_node.get(node, 0) + by
        if n:
            self.per_node[node] = n
        else:
            del self.per_node[node]

    def snapshot(self) -> tuple[dict[tuple[str, str], int], float | None, set[str]]:
        """(counts by (phase, ready), the oldest not-ready time or None, the nodes)."""
        with self._lock:
            oldest = min(self.not_ready_since.values(), default=None)
            return dict(self.counts), oldest, set(self.per_node)


def agent_state(report: AgentReport | None, now: datetime) -> str:
    """``live`` while the agent's report was renewed within its Lease's duration,
    ``stale`` once not (the agent is down or cut off from the API server), ``missing``
    without a report (as ``podnet status`` says)."""
    if report is None:
        return "missing"
    if report.renew_time is None:
        return "stale"
    age = (now - report.renew_time).total_seconds()
    return "live" if age < (report.lease_seconds or AGENT_LEASE_SECONDS) else "stale"


class _RecordCollector(Collector):
    """What the records say: PodNetworks by phase and readiness, and the node agents."""

    def __init__(self, engine: EngineState, tally: PodNetworkTally) -> None:
        self.engine = engine
        self.tally = tally

    def collect(self) -> Iterator[Metric]:
        counts, oldest, served = self.tally.snapshot()
        now = self.engine.clock.now()
        records = GaugeMetricFamily(
            "podnet_pod_networks", "PodNetworks by phase and readiness (ready: the Ready "
            "condition's status, unknown before it is written).", labels=["phase", "ready"])
        for (phase, ready), n in sorted(counts.items()):
            records.add_metric([phase, ready], n)
        yield records
        longest = GaugeMetricFamily(
            "podnet_pod_networks_longest_not_ready_seconds",
            "Seconds the PodNetwork not ready the longest (of a pod that is there: not "
            "Releasing) has been so; 0 when every one is ready.")
        longest.add_metric([], max(0.0, now.timestamp() - oldest) if oldest is not None
                           else 0.0)
        yield longest
        caches = self.engine.caches
        reports: dict[str, AgentReport] = {r.node: r for r in caches.agent_reports.values()
                                            if r is not None}
        agents = GaugeMetricFamily(
            "podnet_node_agents",
            "1 per node podnet serves (it has a NodeNetwork or PodNetworks) or whose agent "
            "reports live, labelled with its agent's state: live, stale (its report not "
            "renewed in time) or missing (no report).", labels=["node", "state"])
        served |= set(caches.node_networks.keys())
        states = {node: agent_state(report, now) for node, report in reports.items()}
        # a stale report of a node podnet no longer serves (deleted, say) is no agent
        # anyone waits for
        for node in sorted(served | {n for n, s in states.items() if s == "live"}):
            agents.add_metric([node, states.get(node, "missing")], 1)
        yield agents


class _LeaderCollector(Collector):
    def __init__(self, lease: str, leading: Callable[[], bool]) -> None:
        self.lease = lease
        self.leading = leading

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily("podnet_leader", "1 while this replica holds the Lease "
                                  "and runs the engine, else 0.", labels=["lease"])
        gauge.add_metric([self.lease], 1 if self.leading() else 0)
        yield gauge


def _histogram(family: HistogramMetricFamily, labels: list[str],
               snapshot: tuple[list[tuple[str, int]], float]) -> None:
    buckets, total = snapshot
    family.add_metric(labels, buckets, total)


class _EngineCollector(Collector):
    def __init__(self, engine: EngineState) -> None:
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        e = self.engine
        yield from self._queue(e.queue)
        alive = GaugeMetricFamily("podnet_worker_threads_alive",
                                  "Reconcile worker threads running.")
        alive.add_metric([], e.workers_alive())
        yield alive
        active = GaugeMetricFamily("podnet_active_workers",
                                   "Reconcile workers busy with a key now.")
        active.add_metric([], e.queue.processing())
        yield active
        pool = GaugeMetricFamily(
            "podnet_pool_addresses", "Addresses in node pools, by state: allocated (a "
            "record owns it), idle (free to hand out), suspect (in the cloud, nobody's: "
            "deleted after the leaked-IP expiry).", labels=["provider", "node", "state"])
        capacity = GaugeMetricFamily(
            "podnet_pool_capacity_addresses",
            "Addresses a node's pool may hold at most (its interfaces' limits).",
            labels=["provider", "node"])
        for p in e.pools.all():
            owned = p.owned()
            pool.add_metric([p.provider, p.node, "allocated"], owned)
            pool.add_metric([p.provider, p.node, "idle"], p.total() - owned)
            pool.add_metric([p.provider, p.node, "suspect"], len(p.suspects))
            capacity.add_metric([p.provider, p.node], p.capacity)
        yield pool
        yield capacity
        transitions = CounterMetricFamily("podnet_transitions", "Transitions by trigger.",
                                          labels=["transition", "outcome"])
        for name, count in e.stats.transitions.items():
            transitions.add_metric([name, "ok"], count)
        for name, count in e.stats.failed_transitions.items():
            transitions.add_metric([name, "error"], count)
        # found no address to take: waits, not errors (an alert on "error" stays quiet)
        for name, count in e.stats.waited_transitions.items():
            transitions.add_metric([name, "waiting"], count)
        # a write that met a newer version, retried from a fresh read: not an error either
        for name, count in e.stats.conflicted_transitions.items():
            transitions.add_metric([name, "conflict"], count)
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
        yield from self._cloud_apis(e.gateway.cloud_limiters)

    @staticmethod
    def _queue(queue: _Queue) -> Iterator[Metric]:
        """The ``workqueue_*`` family as controller-runtime exports it."""
        name = [queue.name]
        stats = queue.stats()
        depth = GaugeMetricFamily("workqueue_depth", "Keys ready to be reconciled.",
                                  labels=["name"])
        depth.add_metric(name, stats.depth)
        adds = CounterMetricFamily("workqueue_adds", "Keys added to the queue (a key "
                                   "already waiting is not added again).", labels=["name"])
        adds.add_metric(name, stats.adds)
        retries = CounterMetricFamily("workqueue_retries", "Keys re-added after a failed "
                                      "reconcile, with backoff.", labels=["name"])
        retries.add_metric(name, stats.retries)
        queued = HistogramMetricFamily(
            "workqueue_queue_duration_seconds",
            "How long a key waited in the queue before a worker took it.", labels=["name"])
        _histogram(queued, name, stats.queue_duration)
        work = HistogramMetricFamily("workqueue_work_duration_seconds",
                                     "How long processing a key took.", labels=["name"])
        _histogram(work, name, stats.work_duration)
        unfinished = GaugeMetricFamily(
            "workqueue_unfinished_work_seconds",
            "Seconds the keys being processed now have been processed, summed: grows "
            "when a worker is stuck.", labels=["name"])
        unfinished.add_metric(name, stats.unfinished_work)
        longest = GaugeMetricFamily(
            "workqueue_longest_running_processor_seconds",
            "Seconds the longest-running key being processed has been processed.",
            labels=["name"])
        longest.add_metric(name, stats.longest_running)
        delayed = GaugeMetricFamily("podnet_workqueue_delayed_keys",
                                    "Keys waiting for their requeue time.", labels=["name"])
        delayed.add_metric(name, queue.pending_delayed())
        yield from (depth, adds, retries, queued, work, unfinished, longest, delayed)

    @staticmethod
    def _cloud_apis(limiters: Mapping[str, CloudLimiter]) -> Iterator[Metric]:
        """Per cloud API (the provider's action name), as providers report each request
        (``limiter.observe``)."""
        latency = HistogramMetricFamily(
            "podnet_cloud_api_request_duration_seconds",
            "Latency of cloud API requests, by provider and the cloud's API name.",
            labels=["provider", "api"])
        errors = CounterMetricFamily(
            "podnet_cloud_api_errors",
            "Failed cloud API requests, by provider, API name and error kind.",
            labels=["provider", "api", "kind"])
        for provider, limiter in sorted(limiters.items()):
            histograms, failures = limiter.requests()
            for api, snapshot in sorted(histograms.items()):
                _histogram(latency, [provider, api], snapshot)
            for (api, kind), count in sorted(failures.items()):
                errors.add_metric([provider, api, kind], count)
        yield latency
        yield errors
