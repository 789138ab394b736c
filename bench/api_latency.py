"""A pod burst against a loaded API server (goal P10): the emulator waits before each write.

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md.

The API emulator (``podnet.sim.apiserver.ApiServer``) serves an in-memory store from a
forked process of its own, with ``--write-latency`` (10 ms by default) before every
write and ``--read-latency`` before every read. The controller is an ``Engine`` on
``KubeCluster`` (the official client over HTTP), run by its worker threads as ``podnet
run`` does, with the reference provider. Every node's pool is filled first (warm pools:
enough idle addresses for every pod to come, never trimmed), then the burst's pods are
created inside the server process (the scheduler's and kubelets' work, not the
controller's), and the time runs until a ``podnet_transition`` listener has seen each
new pod's PodNetwork reach ``routed``.

The bound: ``1.25 * writes per pod * write latency * pods / workers``, the time the
controller's writes take when its ``workers`` writers are never idle, plus a quarter; and
10 s at most.

Then every pod is deleted (in the server process: its PodNetwork goes with it, by its
owner reference, once podnet's finalizer is off) and the run waits until each record's
``finish``: the writes of the whole life, release included (P8), not timed.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing
import os
import platform
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import threadprofile
from core_overhead import p3_policy

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import Phase
from podnet.core.objects import record_finished
from podnet.core.plugin import new_plugin_manager
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import TransitionEvent
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

PROVIDER = "reference"
TARGET_S = 10.0
BOUND_FACTOR = 1.25
#: idle addresses beyond the pods a node will get, so no pool runs dry
SPARE = 5


def log(message: str) -> None:
    print(f"[api_latency] {message}", file=sys.stderr, flush=True)


class Routed:
    """A ``podnet_transition`` listener: when every expected pod network is routed."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.expected = -1
        self.routed: set[str] = set()
        self.done = threading.Event()
        self.done_at = 0.0
        self.finished: set[str] = set()
        self.all_finished = threading.Event()

    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        if event.machine != "pod_network" or not event.ok:
            return
        with self.lock:
            if event.dest == "routed":
                self.routed.add(event.object_key)
                if len(self.routed) == self.expected:
                    self.done_at = time.perf_counter()
                    self.done.set()
            elif event.trigger == "finish":
                self.finished.add(event.object_key)
                if len(self.finished) == self.expected:
                    self.all_finished.set()


#: handed to the forked server process (a module global, as in bench/restart.py)
_FORK: dict[str, Any] = {}


def _serve(kubeconfig: str, write_latency: float, read_latency: float,
           conn: Connection, audit_log: str | None = None, confirm: bool = False) -> None:
    """The child: serve the store with the latencies; create the burst's pods when told."""
    from podnet.sim.apiserver import ApiServer

    store: InMemoryCluster = _FORK.pop("store")
    with ApiServer(store, write_latency=write_latency, read_latency=read_latency,
                   audit_log=Path(audit_log) if audit_log else None) as server:
        server.write_kubeconfig(kubeconfig)
        conn.send(("ready", server.url))
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return
            if message[0] == "create":
                for name, node in message[1]:
                    store.create(POD, pod_obj(name, node))
            elif message[0] == "delete":
                for name, _node in message[1]:
                    store.delete(POD, name, NAMESPACE_NAME)
                if confirm:
                    # the kubelets stop the pods and confirm (grace 0): the pods go, and the
                    # garbage collector deletes their records (held by podnet's finalizer)
                    store.finish_terminating(NAMESPACE_NAME)
            else:
                return
            conn.send(("done",))


def _process_cpu(pid: int | None) -> float:
    """A process' CPU seconds so far (user + system), from /proc; 0 where unreadable."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(pods: int, nodes: int, workers: int, write_latency: float, read_latency: float,
        seed: int, sync_events: bool = False, profile: bool = False,
        audit_log: str | None = None, kubelet: bool = False) -> dict[str, Any]:
    per_node = math.ceil(pods / nodes)
    idle = per_node + SPARE
    store = InMemoryCluster(seed=seed)
    store.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    for i in range(nodes):
        store.create(NODE, node_obj(i))
    names = [f"node-{i:04d}" for i in range(nodes)]
    burst = [(f"pod-{j:06d}", names[j % nodes]) for j in range(pods)]
    cloud = ReferenceCloud(seed=seed, max_interfaces=1, ips_per_interface=idle)

    with tempfile.TemporaryDirectory(prefix="podnet-p10-") as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        ctx = multiprocessing.get_context("fork")
        conn, child = ctx.Pipe()
        _FORK["store"] = store
        process = ctx.Process(target=_serve, name="podnet-apiserver", daemon=True,
                              args=(kubeconfig, write_latency, read_latency, child, audit_log,
                                    kubelet))
        process.start()
        _FORK.clear()
        del store
        child.close()
        kube: KubeCluster | None = None
        stop = threading.Event()
        engine_thread: threading.Thread | None = None
        events_dropped = 0
        burst_profile: threadprofile.Snapshot | None = None
        try:
            if not conn.poll(60):
                raise RuntimeError("the API server process did not start")
            conn.recv()
            # every thread the client and the engine start from here on is profiled
            profiles = threadprofile.install() if profile else None
            # as podnet run sizes it: every worker and every watch on a connection of its own
            kube = KubeCluster.from_kubeconfig(kubeconfig, connections=workers + 10)
            if not sync_events:
                kube.queue_events()  # as podnet run does: Events from a thread of their own
            pm = new_plugin_manager()
            pm.register(ReferenceProvider(cloud, policy=p3_policy(idle)), name=PROVIDER)
            listener = Routed()
            pm.register(listener, name="p10-bench")
            engine = Engine(kube, pm, options=EngineOptions(
                default_provider=PROVIDER, seed=seed, workers=workers, freeze_gc=True))
            engine.start()
            engine_thread = threading.Thread(target=engine.run, args=(stop,), name="engine",
                                             daemon=True)
            engine_thread.start()
            log(f"warming {nodes} pools to {idle} idle addresses each")
            deadline = time.perf_counter() + 120
            while not all(p.synced and len(p.idle_addresses(time.monotonic())) >= idle
                          for p in engine.pools.all()) or len(engine.pools.all()) < nodes:
                if time.perf_counter() > deadline:
                    raise RuntimeError("the pools did not fill")
                time.sleep(0.05)
            while not engine.is_idle():
                time.sleep(0.05)
            writes0 = Counter(engine.stats.writes)
            calls0 = Counter(engine.stats.provider_calls)
            listener.expected = pods
            log(f"burst: {pods} pods on {nodes} nodes, {write_latency * 1000:g} ms per write, "
                f"{read_latency * 1000:g} ms per read, {workers} workers")
            snap0 = profiles.snapshot() if profiles is not None else None
            load_before = os.getloadavg()[0]
            server_cpu0 = _process_cpu(process.pid)
            cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            conn.send(("create", burst))
            if not listener.done.wait(max(120.0, pods * 0.1)):
                raise RuntimeError(f"{len(listener.routed)} of {pods} routed in time")
            elapsed = listener.done_at - t0
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            server_cpu = _process_cpu(process.pid) - server_cpu0
            conn.recv()
            if profiles is not None and snap0 is not None:
                # settle: the last Events and watch deliveries belong to the burst
                while not engine.is_idle() or (kube.events is not None
                                               and kube.events.pending()):
                    time.sleep(0.05)
                time.sleep(0.5)
                burst_profile = threadprofile.window(snap0, profiles.snapshot())
            writes = Counter(engine.stats.writes)
            writes.subtract(writes0)
            calls = Counter(engine.stats.provider_calls)
            calls.subtract(calls0)
            grows = sum(v for k, v in calls.items() if k.endswith(".pool_grow"))
            final = kube.list(POD_NETWORK, NAMESPACE_NAME).items
            log("deleting every pod: each record released and removed")
            conn.send(("delete", burst))
            if not listener.all_finished.wait(max(120.0, pods * 0.1)):
                raise RuntimeError(f"{len(listener.finished)} of {pods} released in time")
            conn.recv()
            # a finished record stays while its pod's object does (no kubelet here
            # confirms the deletion): as good as deleted
            while any(not record_finished(o)
                      for o in kube.list(POD_NETWORK, NAMESPACE_NAME).items):
                if time.perf_counter() > deadline + 600:
                    raise RuntimeError("PodNetworks left after every finish")
                time.sleep(0.05)
            # the life's writes include the pools' catching up with the release: their
            # owners are written at most once a refill period, so wait one out
            time.sleep(p3_policy(idle).refill_period + 1.0)
            while not engine.is_idle():
                time.sleep(0.05)
            life = Counter(engine.stats.writes)
            life.subtract(writes0)
            if kube.events is not None:
                kube.events.flush(120)
                events_dropped = kube.events.dropped
        finally:
            stop.set()
            if engine_thread is not None:
                engine_thread.join(30)
            if kube is not None:
                kube.close()
            try:
                conn.send(("stop",))
            except OSError:
                pass
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join(5)

    not_routed = sum(1 for pn in final if pn.get("status", {}).get("phase") != Phase.ROUTED.value)
    ips = [pn.get("status", {}).get("ip") for pn in final]
    pn_writes = sum(v for k, v in writes.items() if k.endswith(".podnetworks"))
    all_writes = sum(v for k, v in writes.items() if k != "events")
    per_pod = all_writes / pods
    bound = BOUND_FACTOR * per_pod * write_latency * pods / workers
    controller_cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
    ok = not not_routed and len(final) == pods and len(set(ips)) == len(ips) and grows == 0
    return {
        "pods": pods,
        "nodes": nodes,
        "workers": workers,
        "events": "on the workers" if sync_events else "sender thread",
        "events_dropped": events_dropped,
        "write_latency_s": write_latency,
        "read_latency_s": read_latency,
        "duration_s": round(elapsed, 3),
        "writes_per_pod": round(per_pod, 3),
        "podnetwork_writes_per_pod": round(pn_writes / pods, 3),
        "bound_s": round(bound, 3),
        "duration_vs_bound": round(elapsed / bound, 3) if bound else None,
        # what the writes alone would take one after another, and the CPU the controller
        # spent (all its threads): which of the two the burst is waiting on
        "serial_write_time_s": round(all_writes * write_latency, 3),
        "controller_cpu_s": round(controller_cpu, 3),
        # the emulator's process in the same window (the pods' creation included): on a
        # shared machine its CPU and the controller's compete for the same cores
        "apiserver_cpu_s": round(server_cpu, 3),
        "load_average_1m_before": round(load_before, 2),
        "writes": {k: v for k, v in sorted(writes.items()) if v},
        # the whole life, release included (P8: <= 4.0)
        "lifecycle_writes_per_pod": round(
            sum(v for k, v in life.items() if k != "events") / pods, 3),
        "lifecycle_writes": {k: v for k, v in sorted(life.items()) if v},
        "provider_calls": {k: v for k, v in sorted(calls.items()) if v},
        "pool_grow_calls": grows,
        "met": {"bound": elapsed <= bound, "ten_seconds": elapsed <= TARGET_S},
        "checks": {"pod_networks": len(final), "not_routed": not_routed,
                   "duplicate_ips": len(ips) - len(set(ips))},
        "ok": ok,
        **({"profile": profile_summary(burst_profile, pods)}
           if burst_profile is not None else {}),
    }


def profile_summary(window: threadprofile.Snapshot, pods: int,
                    top: int = 25) -> dict[str, Any]:
    """Python calls of the controller's threads in the burst: per pod, per API request,
    by package; the top functions by calls and by own time go to stderr."""
    calls, own, cumulative = window
    threads = {k.removeprefix("thread:"): v for k, v in calls.items() if k.startswith("thread:")}
    calls = Counter({k: v for k, v in calls.items() if not k.startswith("thread:")})
    total = sum(calls.values())
    by_group: Counter[str] = Counter()
    for label, n in calls.items():
        by_group[threadprofile.group(label)] += n
    # every request, watches included, goes through KubeCluster._open
    requests = sum(n for label, n in calls.items()
                   if "cluster/kube.py:" in label and label.endswith("(_open)"))
    for title, table in (("calls", calls), ("own seconds", own),
                         ("cumulative seconds", cumulative)):
        log(f"top {top} by {title} in the burst (all threads):")
        for label, n in table.most_common(top):
            log(f"  {n:>12,.3f}  {label}" if isinstance(n, float) else f"  {n:>12,}  {label}")
    return {
        "python_calls_per_pod": round(total / pods, 1),
        "requests": requests,
        "requests_per_pod": round(requests / pods, 2),
        "by_thread_per_pod": {k: round(v / pods, 1) for k, v in
                              sorted(threads.items(), key=lambda kv: -kv[1])},
        "by_package_per_pod": {k: round(v / pods, 1) for k, v in by_group.most_common(15)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000, help="burst size (%(default)s)")
    parser.add_argument("--nodes", type=int, default=50, help="nodes (%(default)s)")
    parser.add_argument("--workers", type=int, default=EngineOptions().workers,
                        help="the engine's worker threads: its concurrent writers "
                        "(%(default)s, as podnet run)")
    parser.add_argument("--write-latency", type=float, default=0.010, metavar="SECONDS",
                        help="added to every write (%(default)s)")
    parser.add_argument("--read-latency", type=float, default=0.0, metavar="SECONDS",
                        help="added to every read (%(default)s)")
    parser.add_argument("--sync-events", action="store_true",
                        help="write Events on the workers (before the sender thread)")
    parser.add_argument("--profile", action="store_true",
                        help="count the Python calls of every controller thread in the burst "
                        "(cProfile per thread: the wall figures of such a run mean nothing)")
    parser.add_argument("--audit-log", metavar="FILE",
                        help="the API server's audit log: one line per write request")
    parser.add_argument("--kubelet", action="store_true",
                        help="the pods' kubelets confirm their deletion at once (the pods "
                        "go, and the garbage collector takes their records); without it a "
                        "deleted pod stays terminating and is released at its grace's end")
    parser.add_argument("--quick", action="store_true", help="smoke test: 100 pods, 10 nodes")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    pods, nodes = (100, 10) if args.quick else (args.pods, args.nodes)
    if pods < 1 or nodes < 1 or args.workers < 1:
        parser.error("counts must be positive")
    if args.write_latency < 0 or args.read_latency < 0:
        parser.error("a latency cannot be negative")
    gc.collect()
    result = run(pods, nodes, args.workers, args.write_latency, args.read_latency, args.seed,
                 args.sync_events, args.profile, args.audit_log, args.kubelet)
    report = {
        "benchmark": "api_latency",
        "goal": "P10: a burst with 10 ms per API write, warm pools: <= 1.25 x (writes per "
                "pod x 10 ms x pods / concurrent writers) and <= 10 s",
        "env": {"python": platform.python_version(), "machine": platform.machine(),
                "cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
        **result,
    }
    print(json.dumps(report, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
