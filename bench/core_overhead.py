"""The engine's own cost: CPU per pod network on the warm path (P3, P7) and memory at scale (P4).

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md.

P3  One pod at a time on an in-memory cluster with a FakeClock: create the pod (the API
    server's work, not measured), then ``engine.run_until_idle()`` (measured with
    ``time.thread_time``). Pools are filled to a large ``min_idle`` first, and the clock
    never moves during the measured window, so no pool grow, refill, verify or GC runs in
    it: what is measured is pending -> allocated -> routed of one pod network from an idle
    address. Run untraced, then traced (OTLP/JSON file exporter, batch processor); the
    exporter thread's CPU is added to the traced throughput.

P4  2,000 nodes and 100,000 pods with Routed PodNetwork records in the in-memory cluster
    (and their addresses in the reference cloud), then an Engine started on it and run
    until idle: caches listed, every pool rebuilt, every pod reconciled once. RSS is read
    before and after each stage so the cluster's (API server stand-in) share is separate.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import ipaddress
import json
import math
import os
import platform
import pstats
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK, Kind, Obj
from podnet.core.convert import to_wire
from podnet.core.engine import Engine, EngineOptions
from podnet.core.ledger import address_seal
from podnet.core.models import (
    FINALIZER,
    LABEL_NODE,
    LABEL_POD,
    Condition,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.core.objects import pod_info
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy, RateLimit
from podnet.core.reconcile.podnetwork import record_name
from podnet.core.tracing import Tracing, make_tracer_provider, read_trace_file
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

PROVIDER = "reference"
MIB = 1024 * 1024

TARGETS = {
    "p3_median_ms": 1.0,
    "p3_p99_ms": 5.0,
    #: GOALS P3 as raised: the engine's own share (the API server stand-in's removed)
    "p3_engine_only_median_ms": 0.25,
    "p3_engine_only_p99_ms": 2.0,
    "p7_traced_ratio": 0.85,
    "p4_rss_mib": 1024.0,
}

#: the engine's write counter's key for Events (each one create or one count patch)
EVENT_WRITES = "events"
#: P3 layout: pods per node in the measured window (kubelet's default max-pods is 110)
P3_PODS_PER_NODE = 100
#: idle addresses beyond the pods a node will get, so no pool ever runs dry
P3_SPARE = 10
#: P3's wall clock: a quarter past a whole second, as a production clock reads
P3_WALL_START = datetime(2026, 1, 1, 0, 0, 0, 250_000, tzinfo=UTC)
#: P4: one interface holding this many addresses per node (a /24 has 252 usable)
P4_IPS_PER_NODE = 250


def log(message: str) -> None:
    print(f"[core_overhead] {message}", file=sys.stderr, flush=True)


def rss_kib() -> dict[str, int]:
    """VmRSS and VmHWM (peak) of this process, in KiB, from /proc/self/status."""
    out = {"rss": 0, "hwm": 0}
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    out["rss"] = int(line.split()[1])
                elif line.startswith("VmHWM:"):
                    out["hwm"] = int(line.split()[1])
    except OSError:  # not Linux: report zeros rather than fail the CPU half
        pass
    return out


def settled_rss_kib() -> int:
    gc.collect()
    return rss_kib()["rss"]


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def ms(seconds: float) -> float:
    return round(seconds * 1000, 4)


# --- instrumentation -----------------------------------------------------------------------


class MeteredCluster(InMemoryCluster):
    """The in-memory API server, counting the CPU its calls (and watch polls) take.

    Lets the report split each pod's CPU into the API server stand-in's share (which a real
    deployment pays in another process, and replaces with HTTP + JSON in this one) and the
    engine's own. Nested calls are counted once.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.cpu = 0.0
        self.calls: Counter[str] = Counter()
        #: count only while set (the benchmark's own pod creates are not the engine's)
        self.active = False
        self._depth = 0

    @contextmanager
    def _metered(self, op: str) -> Iterator[None]:
        if not self.active:
            yield
            return
        self.calls[op] += 1
        if self._depth:
            yield
            return
        self._depth += 1
        start = time.thread_time()
        try:
            yield
        finally:
            self.cpu += time.thread_time() - start
            self._depth -= 1

    def create(self, kind: Kind, obj: Obj) -> Obj:
        with self._metered("create"):
            return super().create(kind, obj)

    def update(self, kind: Kind, obj: Obj) -> Obj:
        with self._metered("update"):
            return super().update(kind, obj)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        with self._metered("update_status"):
            return super().update_status(kind, obj)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        with self._metered("get"):
            return super().get(kind, name, namespace)

    def delete(self, *args: Any, **kwargs: Any) -> None:
        with self._metered("delete"):
            super().delete(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Obj:
        with self._metered("patch"):
            return super().patch(*args, **kwargs)

    def emit_event(self, *args: Any, **kwargs: Any) -> None:
        with self._metered("emit_event"):
            super().emit_event(*args, **kwargs)

    def list(self, *args: Any, **kwargs: Any) -> Any:
        with self._metered("list"):
            return super().list(*args, **kwargs)

    def watch(self, *args: Any, **kwargs: Any) -> Any:
        with self._metered("watch"):
            return _MeteredWatch(self, super().watch(*args, **kwargs))


class _MeteredWatch:
    """A MemoryWatch whose ``poll`` (the watch delivery, one copy per event) is metered."""

    def __init__(self, cluster: MeteredCluster, inner: Any) -> None:
        self._cluster = cluster
        self._inner = inner

    def poll(self, timeout: float = 0.0) -> Any:
        with self._cluster._metered("watch.poll"):
            return self._inner.poll(timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class GcMeter:
    """Python's cyclic collector while active: collections per generation and pause times
    (these explain the P3 maxima: a full collection walks every tracked object)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.total = 0.0
        self.longest = 0.0
        self._started = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        pause = time.perf_counter() - self._started
        self.count[info["generation"]] += 1
        self.total += pause
        self.longest = max(self.longest, pause)

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def report(self) -> dict[str, Any]:
        return {"collections": dict(zip(("gen0", "gen1", "gen2"), self.count, strict=True)),
                "pause_ms_total": ms(self.total), "pause_ms_max": ms(self.longest)}


class SpanCounter(SpanProcessor):
    """Counts spans ended, to compare with what the exporter wrote (drops show up)."""

    def __init__(self) -> None:
        self.ended = 0

    def on_end(self, span: ReadableSpan) -> None:
        self.ended += 1


# --- P3: CPU per pod network, warm path ------------------------------------------------------


class Profiler(Protocol):
    """What ``p3_run`` turns on around each measured pass: a ``cProfile.Profile`` or a
    :class:`CallCounter`."""

    def enable(self) -> None: ...

    def disable(self) -> None: ...


def p3_policy(idle: int) -> PoolPolicy:
    """Pools filled to ``idle`` in one grow call per node and never trimmed."""
    return PoolPolicy(
        min_idle=idle, max_idle=idle, batch_size=idle, max_batch_size=idle,
        reuse_cooldown=0.0, cloud_rate=RateLimit(rate=1_000_000.0, burst=1_000_000),
    )


def p3_build(pods: int, warmup: int, trace_file: str | None, seed: int, metered: bool
             ) -> tuple[Engine, InMemoryCluster, SdkTracerProvider | None, SpanCounter, int]:
    """An engine with every pool holding enough idle addresses for all pods to come."""
    nodes = max(1, math.ceil((pods + warmup) / P3_PODS_PER_NODE))
    idle = P3_PODS_PER_NODE + P3_SPARE
    # a wall clock between whole seconds, as a real one reads: the wire keeps whole
    # seconds, and a time written with its microseconds would not read back as sent
    clock = FakeClock(start=P3_WALL_START)
    cluster = (MeteredCluster if metered else InMemoryCluster)(clock=clock, seed=seed)
    cloud = ReferenceCloud(seed=seed, max_interfaces=1, ips_per_interface=idle)
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(cloud, policy=p3_policy(idle)), name=PROVIDER)
    counter = SpanCounter()
    tracer_provider = None
    if trace_file is not None:
        tracer_provider = make_tracer_provider(trace_file=trace_file, batch=True)
        if isinstance(tracer_provider, SdkTracerProvider):
            tracer_provider.add_span_processor(counter)
        else:
            counter = tracer_provider  # the lean provider counts the spans it ended
    engine = Engine(cluster, pm, clock=clock, tracing=Tracing(tracer_provider),
                    options=EngineOptions(default_provider=PROVIDER, seed=seed, freeze_gc=True))
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    for i in range(nodes):
        cluster.create(NODE, node_obj(i))
    engine.start()
    engine.run_until_idle()
    for _ in range(10):  # each node pass grows once; a few more passes if one fell short
        now = clock.monotonic()
        short = [p for p in engine.pools.all()
                 if not p.synced or len(p.idle_addresses(now)) < idle]
        if not short:
            break
        for pool in short:
            engine.enqueue_node(pool.node)
        engine.run_until_idle()
    else:
        raise RuntimeError("P3: pools did not fill to min_idle; the warm path is not warm")
    return engine, cluster, tracer_provider, counter, nodes


def _spans_in(path: str | None) -> int:
    return len(read_trace_file(path)) if path and os.path.exists(path) else 0


def p3_run(pods: int, warmup: int, *, traced: bool, seed: int, metered: bool = False,
           profiler: Profiler | None = None) -> dict[str, Any]:
    """One P3 pass. ``metered``: split each pod's CPU into API server and engine shares
    (the metering itself costs about 0.1 ms per pod, so headline figures run without it)."""
    with tempfile.TemporaryDirectory(prefix="podnet-bench-") as tmp:
        trace_file = os.path.join(tmp, "trace.jsonl") if traced else None
        engine, cluster, tp, counter, nodes = p3_build(pods, warmup, trace_file, seed, metered)
        meter = cluster if isinstance(cluster, MeteredCluster) else None
        node_names = [f"node-{i:04d}" for i in range(nodes)]
        total = pods + warmup

        def one(i: int) -> tuple[float, float, float, int]:
            cluster.create(POD, pod_obj(f"pod-{i:06d}", node_names[i % nodes]))
            k0 = 0.0
            if meter is not None:
                k0, meter.active = meter.cpu, True
            if profiler is not None:
                profiler.enable()
            w0, c0 = time.perf_counter(), time.thread_time()
            steps = engine.run_until_idle()
            c1, w1 = time.thread_time(), time.perf_counter()
            if meter is not None:
                meter.active = False
            if profiler is not None:
                profiler.disable()
            return c1 - c0, w1 - w0, (meter.cpu - k0) if meter is not None else 0.0, steps

        for i in range(warmup):  # first calls: lazy imports, generated converters
            one(i)
        if tp is not None:
            tp.force_flush()
        spans_before = counter.ended
        exported_before = _spans_in(trace_file)
        calls_before = Counter(engine.stats.provider_calls)
        writes_before = Counter(engine.stats.writes)
        cpu: list[float] = []
        wall: list[float] = []
        api: list[float] = []
        steps = 0
        gc.collect()
        t0, p0 = time.thread_time(), time.process_time()
        with GcMeter() as gc_meter:
            for i in range(warmup, total):
                c, w, k, s = one(i)
                cpu.append(c)
                wall.append(w)
                api.append(k)
                steps += s
        f0 = time.perf_counter()
        if tp is not None:
            tp.force_flush()  # the batch exporter's backlog belongs to this window
        flush_wall = time.perf_counter() - f0
        t1, p1 = time.thread_time(), time.process_time()
        other_threads_cpu = max(0.0, (p1 - p0) - (t1 - t0))
        spans = counter.ended - spans_before
        exported = _spans_in(trace_file) - exported_before
        if tp is not None:
            tp.shutdown()

        routed = sum(1 for pn in cluster.list(POD_NETWORK, NAMESPACE_NAME).items
                     if pn.get("status", {}).get("phase") == Phase.ROUTED.value)
        if routed != total:
            raise RuntimeError(f"P3: {routed} of {total} pod networks routed")
        calls = Counter(engine.stats.provider_calls)
        calls.subtract(calls_before)
        writes = Counter(engine.stats.writes)
        writes.subtract(writes_before)
        grows = sum(v for k, v in calls.items() if k.endswith(".pool_grow"))

    cpu_sorted, engine_sorted = sorted(cpu), sorted(c - k for c, k in zip(cpu, api, strict=True))
    controller_cpu = sum(cpu) + other_threads_cpu
    out: dict[str, Any] = {
        "median_ms": ms(percentile(cpu_sorted, 50)),
        "p99_ms": ms(percentile(cpu_sorted, 99)),
        "mean_ms": ms(sum(cpu) / len(cpu)),
        "max_ms": ms(cpu_sorted[-1]),
        "pods_per_s": round(pods / controller_cpu, 1),
        "pods_per_s_wall": round(pods / (sum(wall) + flush_wall), 1),
        "wall_median_ms": ms(percentile(sorted(wall), 50)),
        "exporter_thread_ms_per_pod": ms(other_threads_cpu / pods),
        "steps_per_pod": round(steps / pods, 2),
        # record writes (P8's budget) by verb and kind; Events are API writes too, but of
        # their own: counted apart, so the record figure keeps its meaning
        "writes_per_pod": {k: round(v / pods, 2) for k, v in sorted(writes.items())
                           if v and k != EVENT_WRITES},
        "record_writes_per_pod": round(
            sum(v for k, v in writes.items() if k != EVENT_WRITES) / pods, 2),
        "event_writes_per_pod": round(writes[EVENT_WRITES] / pods, 2),
        "provider_calls_per_pod": {k: round(v / pods, 2) for k, v in sorted(calls.items()) if v},
        "pool_grow_calls": grows,
        "nodes": nodes,
        "python_gc": gc_meter.report(),
    }
    if meter is not None:
        out["api_server_median_ms"] = ms(percentile(sorted(api), 50))
        out["api_server_share"] = round(sum(api) / sum(cpu), 3)
        out["engine_only_median_ms"] = ms(percentile(engine_sorted, 50))
        out["engine_only_p99_ms"] = ms(percentile(engine_sorted, 99))
        out["api_server_calls_per_pod"] = {
            k: round(v / total, 2) for k, v in sorted(meter.calls.items())}  # warm-up too
    if traced:
        out["spans_per_pod"] = round(spans / pods, 2)
        out["spans_exported"] = exported
        out["spans_dropped"] = spans - exported
    return out


def p3(pods: int, seed: int) -> dict[str, Any]:
    warmup = min(50, max(5, pods // 20))
    log(f"P3: {pods} pods (+{warmup} warm-up), untraced")
    untraced = p3_run(pods, warmup, traced=False, seed=seed)
    gc.collect()
    log(f"P3: {pods} pods (+{warmup} warm-up), traced")
    traced = p3_run(pods, warmup, traced=True, seed=seed)
    gc.collect()
    log(f"P3: {pods} pods (+{warmup} warm-up), untraced, API server share metered")
    split = p3_run(pods, warmup, traced=False, seed=seed, metered=True)
    untraced_median = untraced["median_ms"]
    return {
        "pods": pods,
        "warmup_pods": warmup,
        "pods_per_node": P3_PODS_PER_NODE,
        "cpu_clock": "time.thread_time around engine.run_until_idle(), per pod network",
        "untraced": untraced,
        "traced": traced,
        "traced_ratio": round(traced["pods_per_s"] / untraced["pods_per_s"], 3),
        "traced_ratio_wall": round(traced["pods_per_s_wall"] / untraced["pods_per_s_wall"], 3),
        # the in-memory API server runs in this process: what of a pod's CPU is its work
        # (writes, watch delivery), from a separate metered pass
        "api_server": {
            "share": split["api_server_share"],
            "metered_median_ms": split["median_ms"],
            "api_server_median_ms": split["api_server_median_ms"],
            # per pod, its CPU less its own API server share, in the metered pass (the
            # metering adds to both sides of that difference)
            "engine_only_median_ms": split["engine_only_median_ms"],
            "engine_only_p99_ms": split["engine_only_p99_ms"],
            "engine_only_median_ms_est": round(
                untraced_median * (1 - split["api_server_share"]), 4),
            "calls_per_pod": split["api_server_calls_per_pod"],
        },
    }


def p3_profile(pods: int, seed: int, traced: bool, top: int = 15) -> str:
    """cProfile of the measured warm path only (run_until_idle per pod), as text."""

    profiler = cProfile.Profile()
    warmup = min(50, max(5, pods // 20))
    p3_run(pods, warmup, traced=traced, seed=seed, profiler=profiler)
    mode = "traced" if traced else "untraced"
    return profile_text(profiler, f"P3 warm path, {mode}, {pods} pods", top)


#: the in-memory cluster's modules: the API server stand-in's share
_STAND_IN = (os.path.join("sim", "memory.py"), *(os.path.join("core", "cluster", f"{m}.py")
                                                for m in ("patch", "events", "selectors")))


class CallCounter:
    """Counts every Python and C call while enabled (a ``sys.setprofile`` hook), each given
    to the part it runs in: a podnet module, or a library by its top-level package. A call
    into the standard library or a builtin counts for its caller's part, and everything
    under a call into the in-memory cluster for the stand-in. Passed to ``p3_run`` as its
    profiler. Slow, but the load cannot move it."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._stack: list[str] = []
        self._root = os.path.dirname(os.path.dirname(os.path.abspath(
            sys.modules["podnet.core"].__file__ or "")))
        self._parts: dict[str, str | None] = {}

    def _part(self, filename: str) -> str | None:
        part = self._parts.get(filename, "")
        if part != "":
            return part
        found: str | None = None
        if filename.startswith("<attrs generated"):
            found = "attrs"
        elif filename.startswith("<cattrs generated"):
            found = "cattrs"
        elif "site-packages" in filename:
            found = filename.split("site-packages" + os.sep, 1)[1].split(os.sep, 1)[0]
            found = found.removesuffix(".py")
        elif filename.startswith(self._root + os.sep):
            rel = filename[len(self._root) + 1:]
            found = ("api_server_stand_in" if rel.endswith(_STAND_IN)
                     else "podnet." + rel.removesuffix(".py").replace(os.sep, "."))
        self._parts[filename] = found
        return found

    def _hook(self, frame: Any, event: str, _arg: Any) -> None:
        stack = self._stack
        if event == "call" or event == "c_call":
            caller = stack[-1] if stack else "podnet.core.engine"
            part = None
            if caller != "api_server_stand_in" and event == "call":
                part = self._part(frame.f_code.co_filename)
            part = part or caller
            stack.append(part)
            self.calls[part] += 1
        elif stack:  # return, c_return, c_exception
            stack.pop()

    def enable(self) -> None:
        self._stack.clear()
        sys.setprofile(self._hook)

    def disable(self) -> None:
        sys.setprofile(None)
        self._stack.clear()


def p3_count_calls(pods: int, seed: int) -> dict[str, Any]:
    """Calls per pod network on the warm path (warm-up pods included), by part."""
    warmup = min(50, max(5, pods // 20))
    counter = CallCounter()
    p3_run(pods, warmup, traced=False, seed=seed, profiler=counter)
    total = pods + warmup
    stand_in = counter.calls["api_server_stand_in"]
    return {
        "pods": pods,
        "warmup_pods": warmup,
        "calls_per_pod": round(sum(counter.calls.values()) / total, 1),
        "outside_api_server_per_pod": round((sum(counter.calls.values()) - stand_in) / total, 1),
        "by_part": {k: round(v / total, 1) for k, v in counter.calls.most_common()
                    if v / total >= 0.5},
    }


def profile_text(profiler: cProfile.Profile, title: str, top: int = 15) -> str:
    """The top ``top`` functions by cumulative and by own time, with paths relative to the
    repository, site-packages and the standard library."""
    import io
    import sysconfig

    import podnet.core

    buf = io.StringIO()
    stats = pstats.Stats(profiler, stream=buf)
    for key in ("cumulative", "tottime"):
        buf.write(f"\n=== {title}: top {top} by {key} ===\n")
        stats.sort_stats(key).print_stats(top)
    text = buf.getvalue()
    roots = {os.path.dirname(os.path.dirname(os.path.abspath(podnet.core.__file__))),
             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]}
    for root in sorted(roots, key=len, reverse=True):
        text = text.replace(root + os.sep, "")
    return text


# --- P4: memory at scale ---------------------------------------------------------------------


def _traceparent(rng: random.Random) -> str:
    return f"00-{rng.getrandbits(128):032x}-{rng.getrandbits(64):016x}-01"


def p4_records(cluster: InMemoryCluster, cloud: ReferenceCloud, pods: int, nodes: int,
               rng: random.Random, progress: Callable[[int], None]) -> None:
    """Nodes, pods, and one Routed PodNetwork per pod, shaped as the engine writes them."""
    now = cluster.clock.now()
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    per_node = [pods // nodes + (1 if n < pods % nodes else 0) for n in range(nodes)]
    addresses: list[list[str]] = []
    cidrs: list[str] = []
    gateways: list[str] = []
    for n in range(nodes):
        node = cluster.create(NODE, node_obj(n))
        name, cidr = node["metadata"]["name"], node["spec"]["podCIDR"]
        cidrs.append(cidr)
        gateways.append(str(ipaddress.ip_network(cidr)[1]))
        # the cloud holds the addresses the records name: the rebuild finds them attached
        addresses.append(cloud.add(name, cidr, "eth0", per_node[n]) if per_node[n] else [])
    condition = Condition(type="Ready", status="True", reason=Phase.ROUTED.value,
                          last_transition_time=now)
    for i in range(pods):
        n = i % nodes
        node_name = f"node-{n:04d}"
        pod = pod_info(cluster.create(POD, pod_obj(f"pod-{i:06d}", node_name)))
        ip = addresses[n][i // nodes]
        record = PodNetwork(
            metadata=ObjectMeta(
                name=record_name(pod, "default", False),
                namespace=pod.namespace,
                labels={LABEL_NODE: node_name, LABEL_POD: pod.name},
                finalizers=(FINALIZER,),
                owner_references=(OwnerReference(api_version="v1", kind="Pod",
                                                 name=pod.name, uid=pod.uid),),
            ),
            spec=PodNetworkSpec(pod_name=pod.name, pod_uid=pod.uid, node_name=node_name,
                                provider=PROVIDER),
            status=PodNetworkStatus(
                phase=Phase.ROUTED, ip=ip, mac="0a:" + ":".join(
                    f"{b:02x}" for b in rng.getrandbits(40).to_bytes(5, "big")),
                subnet=cidrs[n], gateway=gateways[n], interface="eth0",
                conditions=(condition,), last_transition_time=now,
                traceparent=_traceparent(rng),
            ),
        )
        wire = to_wire(record)
        created = cluster.create(POD_NETWORK, wire)
        # the seal the allocation writes with the address names the uid the create gave
        seal = address_seal(created["metadata"].get("uid"), ip, None)
        created["status"] = {**wire["status"], "addressSeal": seal}
        cluster.update_status(POD_NETWORK, created)
        if (i + 1) % 20_000 == 0:
            progress(i + 1)


def p4(pods: int, nodes: int, seed: int) -> dict[str, Any]:
    if pods / nodes > P4_IPS_PER_NODE - 10:
        raise SystemExit(f"--p4-pods/--p4-nodes: at most {P4_IPS_PER_NODE - 10} pods per node")
    rng = random.Random(seed)
    base = settled_rss_kib()
    log(f"P4: building the in-memory cluster: {nodes} nodes, {pods} pods and pod networks")
    started = time.perf_counter()
    clock = FakeClock()  # never advanced: nothing delayed comes due while it settles
    cluster = InMemoryCluster(clock=clock, seed=seed)
    cloud = ReferenceCloud(seed=seed, max_interfaces=1, ips_per_interface=P4_IPS_PER_NODE)
    p4_records(cluster, cloud, pods, nodes, rng,
               lambda done: log(f"P4:   {done} pod networks written"))
    build_s = time.perf_counter() - started
    after_cluster = settled_rss_kib()

    log("P4: starting the engine (list every cache, rebuild every pool, reconcile every pod)")
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(cloud), name=PROVIDER)
    engine = Engine(cluster, pm, clock=clock,
                    options=EngineOptions(default_provider=PROVIDER, seed=seed))
    started, clock_at_start = time.perf_counter(), clock.monotonic()
    engine.start()
    listed_s = time.perf_counter() - started
    after_list = settled_rss_kib()
    steps = engine.run_until_idle()
    settle_s = time.perf_counter() - started - listed_s
    after_engine = settled_rss_kib()
    peak = rss_kib()["hwm"]
    gc_started = time.perf_counter()
    gc.collect()  # the pause a full collection costs with everything cached
    full_gc_s = time.perf_counter() - gc_started
    tracked = len(gc.get_objects())

    pools = engine.pools.all()
    owned = sum(p.owned() for p in pools)
    synced = sum(1 for p in pools if p.synced)
    if len(engine.pod_networks) != pods or owned != pods or synced != nodes:
        raise RuntimeError(f"P4: caches {len(engine.pod_networks)} pod networks, {owned} owned "
                           f"addresses, {synced} synced pools; expected {pods}/{pods}/{nodes}")
    engine_kib = after_engine - after_cluster
    return {
        "pod_networks": pods,
        "nodes": nodes,
        "rss_mib_baseline": round(base / 1024, 1),
        "rss_mib_cluster": round((after_cluster - base) / 1024, 1),
        "rss_mib_engine": round(engine_kib / 1024, 1),
        "rss_mib_engine_after_list": round((after_list - after_cluster) / 1024, 1),
        "rss_mib_total": round(after_engine / 1024, 1),
        "rss_mib_total_without_cluster": round((after_engine - (after_cluster - base)) / 1024, 1),
        "rss_mib_peak": round(peak / 1024, 1),
        "kib_per_pod_network": round(engine_kib / pods, 2),
        "kib_per_pod_network_cluster": round((after_cluster - base) / pods, 2),
        "kib_per_pod_network_total": round(after_engine / pods, 2),
        "engine": {
            "cached_pods": len(engine.pods),
            "cached_pod_networks": len(engine.pod_networks),
            "cached_nodes": len(engine.nodes),
            "synced_pools": synced,
            "steps": steps,
            "writes": dict(sorted(engine.stats.writes.items())),
            "provider_calls": dict(sorted(engine.stats.provider_calls.items())),
            "delayed_keys": engine.queue.pending_delayed(),
            # the client-side cloud rate limit sleeps on the FakeClock: startup's grow calls
            # at the provider's cloud_rate move it (and with it GC's first inventory resync)
            "fake_clock_advanced_s": round(clock.monotonic() - clock_at_start, 1),
        },
        # the whole process (the cluster's objects included): what a gen-2 pass walks
        "python_gc": {"full_collection_ms": ms(full_gc_s), "tracked_objects": tracked},
        "seconds": {
            "build_cluster": round(build_s, 1),
            "start_list": round(listed_s, 1),
            "run_until_idle": round(settle_s, 1),
        },
        "note": "RSS after gc.collect(); cluster = in-memory API server stand-in and the "
                "reference cloud, measured before the engine existed; engine = the rest",
    }


# --- main ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: 200 pods for P3, 10,000 pod networks on 200 nodes")
    parser.add_argument("--p3-pods", type=int, default=None, help="pods measured (2000)")
    parser.add_argument("--p4-pods", type=int, default=None, help="pod networks (100000)")
    parser.add_argument("--p4-nodes", type=int, default=None, help="nodes (2000)")
    parser.add_argument("--only", choices=("p3", "p4"), default=None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", choices=("untraced", "traced"), default=None,
                        help="also profile the P3 warm path (separate pass) and print the "
                             "top 15 by cumulative and by own time to stderr")
    parser.add_argument("--count-calls", action="store_true",
                        help="also count the P3 warm path's calls per pod network by part "
                             "(separate pass, slow; JSON under p3_calls)")
    args = parser.parse_args(argv)
    p3_pods = args.p3_pods or (200 if args.quick else 2000)
    p4_pods = args.p4_pods or (10_000 if args.quick else 100_000)
    p4_nodes = args.p4_nodes or (200 if args.quick else 2000)
    if p3_pods < 1 or p4_pods < 1 or p4_nodes < 1:
        parser.error("counts must be positive")

    report: dict[str, Any] = {
        "benchmark": "core_overhead",
        "env": {"python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "quick": args.quick},
    }
    met: dict[str, bool] = {}
    # P4 first: its RSS readings are then not inflated by P3's leftovers in the heap
    if args.only in (None, "p4"):
        report["p4"] = p4(p4_pods, p4_nodes, args.seed)
        met["p4_rss_total"] = report["p4"]["rss_mib_total"] <= TARGETS["p4_rss_mib"]
        met["p4_rss_without_cluster"] = (
            report["p4"]["rss_mib_total_without_cluster"] <= TARGETS["p4_rss_mib"])
    if args.only in (None, "p3"):
        if "p4" in report:
            log("P3 runs in the same process after P4; P4's heap is released first")
        report["p3"] = p3(p3_pods, args.seed)
        met["p3_median"] = report["p3"]["untraced"]["median_ms"] <= TARGETS["p3_median_ms"]
        met["p3_engine_only_median"] = (report["p3"]["api_server"]["engine_only_median_ms_est"]
                                        <= TARGETS["p3_engine_only_median_ms"])
        met["p3_engine_only_p99"] = (report["p3"]["api_server"]["engine_only_p99_ms"]
                                     <= TARGETS["p3_engine_only_p99_ms"])
        met["p3_p99"] = report["p3"]["untraced"]["p99_ms"] <= TARGETS["p3_p99_ms"]
        met["p3_traced_median"] = report["p3"]["traced"]["median_ms"] <= TARGETS["p3_median_ms"]
        met["p3_traced_p99"] = report["p3"]["traced"]["p99_ms"] <= TARGETS["p3_p99_ms"]
        met["p7_traced_ratio"] = report["p3"]["traced_ratio"] >= TARGETS["p7_traced_ratio"]
    report["targets"] = TARGETS
    report["met"] = met
    if args.profile is not None:
        log(f"profiling the P3 warm path ({args.profile})")
        print(p3_profile(p3_pods, args.seed, args.profile == "traced"), file=sys.stderr)
    if args.count_calls:
        log("counting the P3 warm path's calls")
        report["p3_calls"] = p3_count_calls(min(p3_pods, 200), args.seed)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
