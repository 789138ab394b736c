"""Waiting is not failing: a pod network waiting for its node's pool to fill waits once,
without a transition, and is served in the order it arrived; an attempt that still finds
no address (a provider's PoolEmpty) is a wait too: no ERROR span, no failure count, no
Warning Event, and the record says it waits only once the wait lasts."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import EVENT, NAMESPACE, NODE, POD, POD_NETWORK, Obj
from podnet.core.engine import Engine, EngineOptions
from podnet.core.errors import ErrorKind, PoolEmpty, ProviderError
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.core.pool import NodePool
from podnet.core.reconcile.nodepool import THROTTLED_READ_SAID_AFTER
from podnet.core.reconcile.podnetwork import (
    WAIT_SAID_AFTER,
    WAIT_SAID_AFTER_GROWING,
    WAITING_FOR_ADDRESS,
)
from podnet.core.tracing import ATTR_WAITING, EVENT_WAITING, Tracing
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import PoolEntry
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = "default"


class ChoosyProvider(ReferenceProvider):
    """The reference provider, finding no address it could take on its first
    ``refusals`` allocations (a constraint core's pre-check cannot see)."""

    refusals = 0

    @hookimpl
    def podnet_allocate(self, context: Any) -> Any:
        if self.refusals:
            self.refusals -= 1
            raise PoolEmpty("no idle address in the pod's placement group")
        return super().podnet_allocate(context)


class Rig:
    def __init__(self, policy: PoolPolicy) -> None:
        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.cluster.create(NAMESPACE, {"metadata": {"name": NS}})
        self.exporter = InMemorySpanExporter()
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        pm = new_plugin_manager()
        self.plugin = ChoosyProvider(ReferenceCloud(), policy=policy)
        pm.register(self.plugin, name="reference")
        self.engine = Engine(self.cluster, pm, clock=self.clock,
                             tracing=Tracing(tracer_provider),
                             options=EngineOptions(default_provider="reference"))
        self.engine.start()

    def settle(self, advance: float = 0.0) -> None:
        self.engine.run_until_idle(advance=advance)

    def node(self, i: int) -> str:
        return str(self.cluster.create(NODE, node_obj(i))["metadata"]["name"])

    def pod(self, name: str, node: str) -> Obj:
        return self.cluster.create(POD, pod_obj(name, node))

    def record(self, pod: str) -> Obj:
        (found,) = [r for r in self.cluster.list(POD_NETWORK).items
                    if r["spec"]["podName"] == pod]
        return found

    def transition_spans(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans()
                if s.attributes is not None and "podnet.machine" in s.attributes]

    def warnings(self) -> list[Obj]:
        return [e for e in self.cluster.list(EVENT).items if e.get("type") == "Warning"]


def phase_of(record: Obj) -> str:
    """The record's phase as the engine reads it: no status yet (a create's status is
    dropped, as upstream drops a custom resource's) is Pending."""
    return str(record.get("status", {}).get("phase", "Pending"))


def ready(record: Obj) -> dict[str, Any] | None:
    conditions = record.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), None)


def test_a_cold_burst_calls_allocate_once_per_pod_in_arrival_order_without_errors() -> None:
    # an empty pool grown 4 addresses a call: 10 pods wait, most of them more than once
    rig = Rig(PoolPolicy(min_idle=0, max_idle=16, batch_size=4, max_batch_size=4,
                         reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    names = [f"web-{i:02d}" for i in range(10)]
    for name in names:
        rig.pod(name, node)
    rig.settle(advance=30)

    assert all(rig.record(n)["status"]["phase"] == "Routed" for n in names)
    stats = rig.engine.stats
    assert stats.provider_calls["reference.pool_grow"] >= 3  # the pool filled in steps
    assert stats.provider_calls["reference.allocate"] == len(names)
    assert stats.transitions["pod_network.allocate"] == len(names)
    assert not stats.failed_transitions
    assert not stats.waited_transitions  # nothing to take: no attempt at all
    spans = rig.transition_spans()
    assert [s for s in spans if s.status.status_code is StatusCode.ERROR] == []
    allocated = [s.attributes["k8s.pod.name"] for s in spans
                 if s.name == "pod_network.allocate" and s.attributes is not None]
    assert allocated == names, "served in the order they arrived"
    assert rig.warnings() == []


def test_a_provider_finding_no_address_waits_without_failing() -> None:
    rig = Rig(PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=8,
                         reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    rig.plugin.refusals = 3
    rig.pod("web", node)
    rig.settle()
    record = rig.record("web")
    assert phase_of(record) == "Pending"
    assert ready(record) is None, "a short wait is not written"
    assert rig.engine.stats.waited_transitions["pod_network.allocate"] >= 1
    rig.settle(advance=30)
    record = rig.record("web")
    assert record["status"]["phase"] == "Routed"

    stats = rig.engine.stats
    assert stats.waited_transitions["pod_network.allocate"] == 3
    assert not stats.failed_transitions
    spans = [s for s in rig.transition_spans() if s.name == "pod_network.allocate"]
    assert len(spans) == 4
    assert [s for s in spans if s.status.status_code is StatusCode.ERROR] == []
    for waited in spans[:3]:
        assert waited.attributes is not None
        assert waited.attributes[ATTR_WAITING] == "address"
        assert "error.type" not in waited.attributes
        assert [e.name for e in waited.events] == [EVENT_WAITING]
    assert spans[3].attributes is not None and ATTR_WAITING not in spans[3].attributes
    # the waits and the allocation are one lifecycle: one trace
    assert len({s.context.trace_id for s in spans if s.context is not None}) == 1
    assert rig.warnings() == []


def test_a_lasting_wait_is_said_once_as_waiting_for_address() -> None:
    rig = Rig(PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=8,
                         reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    rig.plugin.refusals = 1_000
    rig.pod("web", node)
    rig.settle(advance=WAIT_SAID_AFTER * 2)
    # the pool is healthy (it has addresses; the provider finds none it could take): a
    # wait that short is not said yet
    assert ready(rig.record("web")) is None
    rig.settle(advance=WAIT_SAID_AFTER_GROWING)
    record = rig.record("web")
    assert phase_of(record) == "Pending"
    condition = ready(record)
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("False", WAITING_FOR_ADDRESS)
    assert "placement group" in condition["message"]
    writes = rig.engine.stats.writes["status.podnetworks"]
    rig.settle(advance=WAIT_SAID_AFTER * 4)
    assert rig.engine.stats.writes["status.podnetworks"] == writes, "said once"
    assert not rig.engine.stats.failed_transitions
    assert rig.warnings() == []
    rig.plugin.refusals = 0
    rig.settle(advance=WAIT_SAID_AFTER * 2)
    record = rig.record("web")
    assert record["status"]["phase"] == "Routed"
    assert ready(record)["reason"] != WAITING_FOR_ADDRESS  # type: ignore[index]


def _pool(idle: list[tuple[str, str]]) -> NodePool:
    pool = NodePool("node-0", "reference")
    pool.add([PoolEntry(ip, "eth0", subnet) for ip, subnet in idle])
    return pool


def test_waiters_take_their_turn_in_the_order_they_arrived() -> None:
    pool = _pool([("10.0.0.1", "a")])
    pool.wait_for_address("ns/first", None, 0.0, queued=True)
    pool.wait_for_address("ns/second", None, 1.0, queued=True)
    assert pool.serves_next("ns/first", None, 2.0)
    assert not pool.serves_next("ns/second", None, 2.0)
    assert not pool.serves_next("ns/newcomer", None, 2.0)
    pool.reserve("ns/first", 2.0).take()  # its turn is over once it holds one
    pool.add([PoolEntry("10.0.0.2", "eth0", "a")])
    assert pool.serves_next("ns/second", None, 3.0)
    assert not pool.serves_next("ns/newcomer", None, 3.0)


def test_a_waiter_for_another_subnet_takes_no_turn_it_cannot_use() -> None:
    pool = _pool([("10.0.0.1", "a")])
    pool.wait_for_address("ns/wants-b", "b", 0.0, queued=True)
    pool.wait_for_address("ns/any", None, 1.0, queued=True)
    assert not pool.serves_next("ns/wants-b", "b", 2.0)
    assert pool.serves_next("ns/any", None, 2.0)
    # a static request's wait is demand for the pool, but takes nobody's turn
    pool.wait_for_address("ns/static", None, 3.0, queued=False)
    assert pool.serves_next("ns/any", None, 3.0)
    assert not pool.serves_next("ns/later", None, 3.0)


def test_only_news_asks_the_node_for_a_grow() -> None:
    pool = _pool([])
    assert pool.wait_for_address("ns/a", None, 0.0, queued=True)
    assert not pool.wait_for_address("ns/a", None, 1.0, queued=True)
    assert pool.wait_for_address("ns/a", "b", 2.0, queued=True)
    assert pool.waited("ns/a", 7.0) == 7.0
    pool.stop_waiting("ns/a")
    assert pool.waited("ns/a", 8.0) == 0.0


def test_metrics_show_waits_as_waiting_and_count_the_waiters() -> None:
    from podnet.core.metrics import Metrics

    rig = Rig(PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=8,
                         reuse_cooldown=0.0))
    metrics = Metrics()
    metrics.attach(rig.engine)
    node = rig.node(0)
    rig.settle()
    rig.plugin.refusals = 1_000
    rig.pod("web", node)
    rig.settle(advance=WAIT_SAID_AFTER)
    text = metrics.render().decode()
    assert 'outcome="error"' not in text
    assert 'outcome="waiting",transition="pod_network.allocate"' in text
    assert 'podnet_pod_networks_waiting{provider="reference"} 1.0' in text
    rig.plugin.refusals = 0
    rig.settle(advance=WAIT_SAID_AFTER * 2)
    text = metrics.render().decode()
    assert 'podnet_pod_networks_waiting{provider="reference"} 0.0' in text


def test_a_write_that_meets_a_newer_version_is_retried_not_failed() -> None:
    """A 409 Conflict on a transition's write (another writer moved the record on) is
    optimistic concurrency at work: the attempt is retried from a fresh read. Its span
    and its reconcile's are not ERROR, it counts as ``conflict``, not as a failure."""
    from podnet.core.cluster.port import Conflict
    from podnet.core.tracing import ATTR_RETRY, EVENT_RETRY, RETRY_CONFLICT

    rig = Rig(PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=8,
                         reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle(advance=1)
    rig.cluster.faults.fail_next("update_status", POD_NETWORK,
                                 Conflict("the object has been modified"), times=1)
    rig.pod("web", node)
    rig.settle(advance=5)
    assert rig.record("web")["status"]["phase"] == "Routed"

    stats = rig.engine.stats
    assert sum(stats.conflicted_transitions.values()) == 1
    assert not stats.failed_transitions
    assert not stats.reconcile_errors
    spans = rig.exporter.get_finished_spans()
    assert [s.name for s in spans if s.status.status_code is StatusCode.ERROR] == []
    retried = [s for s in spans if s.attributes and s.attributes.get(ATTR_RETRY)]
    assert {s.attributes[ATTR_RETRY] for s in retried if s.attributes} == {RETRY_CONFLICT}
    assert any(e.name == EVENT_RETRY for s in retried for e in s.events)
    assert rig.warnings() == []


class ThrottledReads(ReferenceProvider):
    """The reference provider whose node inventory the cloud throttles ``throttled``
    times (each read answered "slow down")."""

    throttled = 0

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: Any) -> Any:
        if self.throttled and provider == "reference":
            self.throttled -= 1
            raise ProviderError(ErrorKind.THROTTLED, "DescribeNetworkInterfaces: Throttling")
        return super().podnet_node_inventory(provider, node)


def _throttled_rig(throttled: int) -> tuple[Rig, ThrottledReads]:
    rig = Rig(PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=8,
                         reuse_cooldown=0.0))
    plugin = ThrottledReads(ReferenceCloud(), policy=rig.plugin.policy)
    plugin.throttled = throttled
    pm = new_plugin_manager()
    pm.register(plugin, name="reference")
    rig.engine = Engine(rig.cluster, pm, clock=rig.clock,
                        options=EngineOptions(default_provider="reference"))
    rig.engine.start()
    return rig, plugin


def test_a_throttled_pool_read_is_a_wait_not_a_problem_said_on_every_waiter() -> None:
    """A node's inventory read that the cloud throttles is read again soon: the pod
    networks waiting on it are not told (a write and two Events each) of what passes in
    a moment, and nothing fails."""
    rig, plugin = _throttled_rig(throttled=5)
    node = rig.node(0)
    names = [f"web-{i}" for i in range(3)]
    for name in names:
        rig.pod(name, node)
    rig.settle(advance=10)
    assert plugin.throttled == 0, "read again until it answered"
    for name in names:
        record = rig.record(name)
        assert record["status"]["phase"] == "Routed"
        assert ready(record)["reason"] != "PoolUnavailable"  # type: ignore[index]
    assert rig.engine.stats.writes["status.podnetworks"] == len(names)  # the Routed ones
    assert rig.warnings() == []


def test_a_pool_read_throttled_for_long_is_said_as_unavailable() -> None:
    rig, _ = _throttled_rig(throttled=1_000_000)
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle(advance=THROTTLED_READ_SAID_AFTER / 2)
    assert ready(rig.record("web")) is None, "a short throttle is not said"
    rig.settle(advance=THROTTLED_READ_SAID_AFTER)
    condition = ready(rig.record("web"))
    assert condition is not None and condition["reason"] == "PoolUnavailable"
    assert "throttled" in condition["message"].lower()
    assert "PoolUnavailable" in {e["reason"] for e in rig.warnings()}
