"""``podnet demo``: the engine on its embedded default, start to finish in one process.

An in-memory cluster, nodes with pod CIDRs, a burst of pods, optional churn (pods
deleted and recreated under the same names), then a check of the outcome against the
provider's ground truth: every pod routed, no address owned twice, nothing leaked.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from podnet.core.clock import SystemClock
from podnet.core.cluster.memory import InMemoryCluster
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import Phase
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import RateLimit
from podnet.core.tracing import Tracing, make_tracer_provider

NAMESPACE_NAME = "demo"


@attrs.frozen
class DemoOptions:
    provider: str = "reference"
    nodes: int = 20
    pods: int = 500
    churn: int = 0
    seed: int = 1
    cloud_latency_ms: float = 0.0
    cloud_rate: float | None = None
    fault_rate: float = 0.0
    trace_file: str | None = None
    workers: int = 4
    timeout_s: float = 600.0


@attrs.define
class DemoReport:
    pods: int = 0
    routed: int = 0
    released: int = 0
    leaked_ips: int = 0
    duplicate_ips: int = 0
    duration_s: float = 0.0
    transitions: dict[str, int] = attrs.field(factory=dict)
    cloud_calls: dict[str, int] = attrs.field(factory=dict)
    provider_calls: dict[str, int] = attrs.field(factory=dict)
    writes: dict[str, int] = attrs.field(factory=dict)
    settled: bool = False
    trace_file: str | None = None
    provider: str = ""
    #: the fewest cloud write calls a perfect controller could make (GOALS P1b), and the
    #: time the slowest rate-limited API needs for its fewest calls, plus one latency (P2)
    min_write_calls: int | None = None
    lower_bound_s: float | None = None

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


def node_obj(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"node-{i:04d}", "labels": {"kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": f"10.{64 + i // 256}.{i % 256}.0/24",
                 "providerID": f"demo://node-{i:04d}"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": f"192.168.{i // 256}.{i % 256}"}]},
    }


def pod_obj(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE_NAME, "labels": {"app": "demo"}},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "demo"}]},
        "status": {"phase": "Running"},
    }


DemoProvider = tuple[Any, Callable[[], Mapping[str, str]], Callable[[], Counter[str]],
                     Callable[[dict[str, Any]], dict[str, Any]]]


def demo_providers() -> list[str]:
    """Providers the demo can run: the reference one, and each built-in provider that
    ships a ``demo`` module (its simulator, in-process over loopback HTTP)."""
    import importlib.util

    names = ["reference"]
    for name in ("bbc", "ecs", "ovn"):
        try:
            found = importlib.util.find_spec(f"podnet.plugins.{name}.demo") is not None
        except ModuleNotFoundError:
            found = False
        if found:
            names.append(name)
    return names


def _build_provider(opts: DemoOptions) -> DemoProvider:
    """The provider plugin, its ground truth (address -> node), its call counts, and what
    it adds to each node (an instance id, labels) before the node is created."""
    if opts.provider == "reference":
        from podnet.testing.reference import ReferenceCloud, ReferenceProvider

        cloud = ReferenceCloud(latency=opts.cloud_latency_ms / 1000, fault_rate=opts.fault_rate,
                               seed=opts.seed)
        return (ReferenceProvider(cloud), cloud.all_addresses, lambda: cloud.calls,
                lambda node: node)
    if opts.provider not in demo_providers():
        raise ValueError(f"--provider: {opts.provider!r} is not available "
                         f"(available: {', '.join(demo_providers())})")
    import importlib

    module = importlib.import_module(f"podnet.plugins.{opts.provider}.demo")
    built: DemoProvider = module.build(opts)
    return built


def run_demo(opts: DemoOptions, progress: Callable[[str, int, int], None] | None = None
             ) -> DemoReport:
    plugin, ground_truth, calls, setup_node = _build_provider(opts)
    cluster = InMemoryCluster()
    pm = new_plugin_manager()
    pm.register(plugin, name=opts.provider)
    tracer_provider = make_tracer_provider(trace_file=opts.trace_file) if opts.trace_file else None
    policies: dict[str, dict[str, Any]] = {}
    if opts.cloud_rate and opts.provider == "reference":
        # the reference cloud has no server-side limit: podnet's own bucket plays it
        policies[opts.provider] = {"cloud_rate": RateLimit(
            rate=opts.cloud_rate, burst=max(1, int(opts.cloud_rate)))}
    engine = Engine(
        cluster, pm, clock=SystemClock(), tracing=Tracing(tracer_provider),
        options=EngineOptions(default_provider=opts.provider, workers=opts.workers,
                              seed=opts.seed, policies=policies),
    )
    report = DemoReport(provider=opts.provider, trace_file=opts.trace_file)
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    nodes = [cluster.create(NODE, setup_node(node_obj(i)))["metadata"]["name"]
             for i in range(opts.nodes)]
    engine.start()
    stop = threading.Event()
    runner = threading.Thread(target=engine.run, args=(stop,), name="engine", daemon=True)
    started = time.monotonic()
    runner.start()
    try:
        names = [f"pod-{i:05d}" for i in range(opts.pods)]
        for i, name in enumerate(names):
            cluster.create(POD, pod_obj(name, nodes[i % len(nodes)]))
        deadline = started + opts.timeout_s
        settled = _wait_settled(cluster, opts.pods, deadline, progress, "burst")
        if opts.churn and settled:
            for i, name in enumerate(names[: opts.churn]):
                cluster.delete(POD, name, NAMESPACE_NAME)
                cluster.create(POD, pod_obj(name, nodes[(i + 1) % len(nodes)]))
            settled = _wait_settled(cluster, opts.pods, deadline, progress, "churn")
        report.settled = settled
        report.duration_s = round(time.monotonic() - started, 3)
    finally:
        stop.set()
        runner.join(timeout=10)
        if tracer_provider is not None:
            tracer_provider.force_flush()
            tracer_provider.shutdown()
    _audit(report, cluster, engine, ground_truth())
    report.pods = opts.pods
    report.transitions = dict(sorted(engine.stats.transitions.items()))
    report.released = engine.stats.transitions.get("pod_network.finish", 0)
    report.cloud_calls = dict(sorted(calls().items()))
    report.provider_calls = dict(sorted(engine.stats.provider_calls.items()))
    report.writes = dict(sorted(engine.stats.writes.items()))
    _lower_bound(report, opts, len(nodes))
    return report


def _lower_bound(report: DemoReport, opts: DemoOptions, nodes: int) -> None:
    """From the provider's own count of the fewest calls (``demo.min_calls``), if any."""
    if opts.provider == "reference":
        return
    import importlib

    module = importlib.import_module(f"podnet.plugins.{opts.provider}.demo")
    min_calls = getattr(module, "min_calls", None)
    if min_calls is None:
        return
    per_node = [opts.pods // nodes + (1 if i < opts.pods % nodes else 0) for i in range(nodes)]
    calls: dict[str, tuple[int, bool]] = min_calls(per_node)
    report.min_write_calls = sum(n for n, write in calls.values() if write)
    if opts.cloud_rate:
        slowest = max(n for n, _ in calls.values()) / opts.cloud_rate
        report.lower_bound_s = round(slowest + opts.cloud_latency_ms / 1000, 3)


def _routed_for_live_pods(cluster: InMemoryCluster) -> tuple[int, int]:
    """(live pods with a routed default network, records not belonging to a live pod)."""
    pods = {p["metadata"]["name"]: p["metadata"]["uid"]
            for p in cluster.list(POD, NAMESPACE_NAME).items}
    routed, stray = 0, 0
    for pn in cluster.list(POD_NETWORK, NAMESPACE_NAME).items:
        spec, status = pn["spec"], pn.get("status", {})
        if pods.get(spec["podName"]) != spec["podUid"]:
            stray += 1
        elif status.get("phase") == Phase.ROUTED.value:
            routed += 1
    return routed, stray


def _wait_settled(cluster: InMemoryCluster, pods: int, deadline: float,
                  progress: Callable[[str, int, int], None] | None, stage: str) -> bool:
    while time.monotonic() < deadline:
        routed, stray = _routed_for_live_pods(cluster)
        if progress is not None:
            progress(stage, routed, pods)
        if routed == pods and stray == 0:
            return True
        time.sleep(0.1)
    return False


def _audit(report: DemoReport, cluster: InMemoryCluster, engine: Engine,
           cloud: Mapping[str, str]) -> None:
    owners: dict[str, list[str]] = {}
    for pn in cluster.list(POD_NETWORK).items:
        ip = pn.get("status", {}).get("ip")
        if ip:
            owners.setdefault(ip, []).append(pn["metadata"]["name"])
    routed, _ = _routed_for_live_pods(cluster)
    report.routed = routed
    report.duplicate_ips = sum(1 for o in owners.values() if len(o) > 1)
    pooled = {a.address for pool in engine.pools.all() for a in pool.addresses.values()}
    report.leaked_ips = sum(1 for ip in cloud if ip not in owners and ip not in pooled)
