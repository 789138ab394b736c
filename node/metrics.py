"""The node agent's Prometheus metrics (``/metrics`` of ``podnet node --health-listen``),
on a registry of its own.

CNI requests are counted where they are answered: :func:`instrumented` wraps the
agent's public CNI methods (``NodeAgent.add``, ``delete``, ``check``, ``gc``, ``status``,
``ipam_add``, ``ipam_del``, ``ipam_check``), so every way a request reaches them (the
plugin's exec request, the older per-verb routes) counts once. Everything else is read
from the agent at scrape time. Every name, with what it is for, is in docs/node.md
("Watching the agent").
"""

from __future__ import annotations

import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from podnet.core.models import AgentReport
from podnet.core.probes import process_registry
from podnet.core.version import podnet_version
from podnet.node.protocol import CniError


class _Table(Protocol):
    @property
    def policies(self) -> Mapping[str, Any]: ...
    @property
    def chains(self) -> Mapping[str, Any]: ...
    @property
    def rules(self) -> int: ...


class _Policy(Protocol):
    @property
    def enforce(self) -> bool: ...
    @property
    def table(self) -> _Table | None: ...


class _Reporter(Protocol):
    @property
    def writes(self) -> Mapping[str, int]: ...
    @property
    def failures(self) -> Mapping[str, int]: ...
    @property
    def last_write(self) -> float | None: ...
    @property
    def conflict(self) -> str | None: ...
    @property
    def written(self) -> AgentReport | None: ...


class _Loops(Protocol):
    def ages(self) -> dict[str, float]: ...


class AgentState(Protocol):
    """What the metrics read of a node agent at scrape time (``NodeAgent`` has it all):
    a protocol, so that the module the agent imports imports no agent."""

    @property
    def reporter(self) -> _Reporter: ...
    @property
    def policy(self) -> _Policy: ...
    @property
    def loops(self) -> _Loops: ...
    @property
    def ready(self) -> bool: ...


#: seconds: a STATUS answers in well under a millisecond, an ADD may wait for its record
#: up to the ADD timeout (30 s by default)
REQUEST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0, 60.0)
#: seconds an nft transaction of the NetworkPolicy table takes
PROGRAM_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: the ``plugin`` label: which of the two plugins' requests
CNI, IPAM = "podnet-cni", "podnet-ipam"
#: the ``result`` of a request that raised something other than a CNI error (the agent
#: answers it as error 11)
INTERNAL = "internal"


class _Request:
    __slots__ = ("command", "container", "plugin", "started")

    def __init__(self, plugin: str, command: str, container: str) -> None:
        self.plugin = plugin
        self.command = command
        self.container = container
        self.started = time.monotonic()


class AgentMetrics:
    """The registry ``/metrics`` renders, what observes requests and NetworkPolicy
    programming into it, and the requests in flight (liveness reads them)."""

    def __init__(self, version: str | None = None) -> None:
        self.version = version or podnet_version()
        self.registry = process_registry("podnet_agent_build_info", "agent", self.version)
        self.requests = Counter(
            "podnet_agent_cni_requests_total",
            "CNI requests answered, by plugin (podnet-cni, podnet-ipam), command and result "
            "(ok, or the CNI error code answered; internal: an unexpected failure).",
            ["plugin", "command", "result"], registry=self.registry)
        self.request_seconds = Histogram(
            "podnet_agent_cni_request_duration_seconds",
            "Time a CNI request took in the agent, its wait for the record included.",
            ["plugin", "command", "result"], buckets=REQUEST_BUCKETS, registry=self.registry)
        self.programs = Counter(
            "podnet_agent_netpol_programs_total",
            "NetworkPolicy table renders, by outcome: applied (the kernel's table "
            "changed), unchanged, removed (no member here: no table), failed.",
            ["outcome"], registry=self.registry)
        self.program_seconds = Histogram(
            "podnet_agent_netpol_program_duration_seconds",
            "Time one render of the NetworkPolicy table took, its nft transaction included.",
            ["outcome"], buckets=PROGRAM_BUCKETS, registry=self.registry)
        self._in_flight: dict[int, _Request] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def attach(self, agent: AgentState) -> None:
        """What is read of ``agent`` at scrape time."""
        self.registry.register(_AgentCollector(agent, self))

    # --- requests -----------------------------------------------------------------------

    def request(self, plugin: str, command: str, body: Mapping[str, Any] | None
                ) -> _Timed:
        container = body.get("containerId") if isinstance(body, Mapping) else None
        return _Timed(self, plugin, command, container if isinstance(container, str) else "")

    def _begin(self, request: _Request) -> int:
        with self._lock:
            key = next(self._ids)
            self._in_flight[key] = request
        return key

    def _end(self, key: int, result: str) -> None:
        with self._lock:
            request = self._in_flight.pop(key)
        seconds = time.monotonic() - request.started
        self.requests.labels(request.plugin, request.command, result).inc()
        self.request_seconds.labels(request.plugin, request.command, result).observe(seconds)

    def in_flight(self) -> dict[tuple[str, str], int]:
        with self._lock:
            requests = list(self._in_flight.values())
        out: dict[tuple[str, str], int] = {}
        for r in requests:
            out[r.plugin, r.command] = out.get((r.plugin, r.command), 0) + 1
        return out

    def stuck_requests(self, add_timeout: float, bound: float) -> list[str]:
        """The requests running past their bound: an ADD's is the ADD timeout (its wait
        for the record) and ``bound``; every other request's is ``bound``."""
        now = time.monotonic()
        with self._lock:
            requests = list(self._in_flight.values())
        out = []
        for r in sorted(requests, key=lambda r: r.started):
            limit = bound + (add_timeout if r.command == "ADD" else 0.0)
            if now - r.started > limit:
                of = f" of container {r.container}" if r.container else ""
                out.append(f"{r.plugin} {r.command}{of} has run for {now - r.started:.0f} s "
                           f"(bound {limit:g} s)")
        return out

    # --- NetworkPolicy --------------------------------------------------------------------

    def programmed(self, outcome: str, seconds: float) -> None:
        self.programs.labels(outcome).inc()
        self.program_seconds.labels(outcome).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _Timed:
    """One request, timed and counted by its result; in flight meanwhile."""

    def __init__(self, metrics: AgentMetrics, plugin: str, command: str, container: str
                 ) -> None:
        self.metrics = metrics
        self.request = _Request(plugin, command, container)
        self.key = -1

    def __enter__(self) -> None:
        self.key = self.metrics._begin(self.request)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 _tb: Any) -> None:
        if exc is None:
            result = "ok"
        elif isinstance(exc, CniError):
            result = str(exc.code)
        else:
            result = INTERNAL
        self.metrics._end(self.key, result)


F = TypeVar("F", bound=Callable[..., Any])


def instrumented(plugin: str, command: str) -> Callable[[F], F]:
    """A NodeAgent CNI method, counted and timed in its agent's ``metrics`` under
    ``plugin`` and ``command``, and in flight while it runs."""
    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            body = args[0] if args else kwargs.get("body")
            with self.metrics.request(plugin, command, body):
                return fn(self, *args, **kwargs)
        return counted  # type: ignore[return-value]
    return wrap


class _AgentCollector(Collector):
    def __init__(self, agent: AgentState, metrics: AgentMetrics) -> None:
        self.agent = agent
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        agent, reporter = self.agent, self.agent.reporter
        ready = GaugeMetricFamily("podnet_agent_ready",
                                  "1 while the agent may plug (records listed, its report "
                                  "written and its own), else 0.")
        ready.add_metric([], 1 if agent.ready else 0)
        yield ready
        in_flight = GaugeMetricFamily("podnet_agent_cni_requests_in_flight",
                                      "CNI requests being answered now.",
                                      labels=["plugin", "command"])
        for (plugin, command), n in sorted(self.metrics.in_flight().items()):
            in_flight.add_metric([plugin, command], n)
        yield in_flight
        written = reporter.written
        plugged = GaugeMetricFamily(
            "podnet_agent_plugged_pod_networks",
            "PodNetworks this host holds an interface or an IPAM grant for (or is plugging), "
            "as its last report said.")
        plugged.add_metric([], len(written.plugged) if written is not None else 0)
        yield plugged
        unplugged = GaugeMetricFamily(
            "podnet_agent_reported_unplugged_pod_networks",
            "Releasing PodNetworks its last report said this host holds no interface for "
            "(their addresses may be given to other pods).")
        unplugged.add_metric([], len(written.unplugged) if written is not None else 0)
        yield unplugged
        yield from self._report(reporter)
        yield from self._policy(agent)
        loops = GaugeMetricFamily(
            "podnet_agent_loop_last_turn_age_seconds",
            "Seconds since each of the agent's loops last turned (liveness fails past the "
            "bound).", labels=["loop"])
        for name, age in agent.loops.ages().items():
            loops.add_metric([name], age)
        yield loops

    @staticmethod
    def _report(reporter: _Reporter) -> Iterator[Metric]:
        yield _by_label("podnet_agent_report_writes",
                        "Writes of the node's report Lease, by verb (create, update): what "
                        "the handshake and the heartbeat cost.",
                        "verb", ("create", "update"), reporter.writes)
        yield _by_label("podnet_agent_report_failures",
                        "Report passes that failed, by stage: compute (the dataplane's state "
                        "could not be read) or write (the API server refused or did not "
                        "answer).",
                        "stage", ("compute", "write"), reporter.failures)
        age = GaugeMetricFamily(
            "podnet_agent_report_last_write_age_seconds",
            "Seconds since the report Lease was last written (renewed at least every "
            "third of its duration); absent before the first write.")
        if reporter.last_write is not None:
            age.add_metric([], time.monotonic() - reporter.last_write)
        yield age
        conflict = GaugeMetricFamily(
            "podnet_agent_report_conflict",
            "1 while an agent of another host holds this node's report (this agent stays "
            "not ready), else 0.")
        conflict.add_metric([], 1 if reporter.conflict is not None else 0)
        yield conflict

    @staticmethod
    def _policy(agent: AgentState) -> Iterator[Metric]:
        policy = agent.policy
        table = policy.table
        enforced = GaugeMetricFamily("podnet_agent_netpol_enforced",
                                     "1 when this agent enforces NetworkPolicy (podnet node "
                                     "--network-policy podnet), else 0.")
        enforced.add_metric([], 1 if policy.enforce else 0)
        yield enforced
        for name, help_, value in (
                ("podnet_agent_netpol_policies", "NetworkPolicies in this node's table.",
                 len(table.policies) if table else 0),
                ("podnet_agent_netpol_members", "Pods of this node a NetworkPolicy "
                 "restricts (a chain each).", len(table.chains) if table else 0),
                ("podnet_agent_netpol_rules", "Rules in this node's NetworkPolicy table.",
                 table.rules if table else 0)):
            gauge = GaugeMetricFamily(name, help_)
            gauge.add_metric([], value)
            yield gauge


def _by_label(name: str, help_: str, label: str, keys: tuple[str, ...],
              counts: Mapping[str, int]) -> CounterMetricFamily:
    """A counter with one sample per key (0 for a key not counted yet, so that every
    series exists from the first scrape)."""
    family = CounterMetricFamily(name, help_, labels=[label])
    for key in keys:
        family.add_metric([key], counts.get(key, 0))
    return family
