"""The whole node path (goal P13), measured as Spiderpool measures IPAM: pods created in
Deployments' worth of ten, each timed from its create until its address answers.

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md ("P13").
Root and network namespaces needed.

The node bed (``podnet.testing.nodebed``) as separate processes: ``podnet apiserver``
(the project's API emulator) and ``podnet run`` (the controller, the reference provider:
the one real dataplane that needs no cloud, a Linux bridge per node and a veth pair per
pod) in a router namespace, and ``--nodes`` real ``podnet node`` agents (10), each in a
network namespace of its own on the underlay. Beside each agent, in this process, a
kubelet stand-in: it watches the pods bound to its node (a field selector on
``spec.nodeName``, as a kubelet does) and, for each pod as soon as it sees it, makes the
sandbox (a new network namespace) and runs the REAL static plugin's ADD
(``podnet-cni`` as a new process, the ``CNI_*`` environment and the network
configuration on stdin, as a container runtime runs it), retried as the kubelet retries
a failed sandbox; then it writes the pod's status (Running, its podIP) and pings the
address from the node's namespace until it answers. Once every pod answered, the
ReplicaSets' pods are deleted (gracefully: they stay Terminating); each kubelet runs
the plugin's DEL, removes the sandbox and confirms the deletion (grace 0), as a kubelet
does; the controller then releases the records. The leak check follows.

The kubelet stand-in's limits: a kubelet runs one worker per pod and no cap on sandboxes
in flight; here ``--workers-per-node`` (10) sandboxes are made at once per node, for the
2-core machine's sake; its API writes go through a token bucket of the kubelet's
defaults (kubeAPIQPS 50, kubeAPIBurst 100).

The pods are what a ReplicaSet makes (``ownerReferences`` to their ReplicaSet, the
``app`` and ``pod-template-hash`` labels, generated names), ``--pods`` (1,000) in
Deployments of ``--per-deployment`` (10), bound round robin over the nodes (a
scheduler's spread) and created by ``--creators`` (4) threads through one token bucket
of kube-controller-manager's client defaults (``--create-qps`` 20, ``--create-burst``
30): the pace at which a ReplicaSet controller can create them, so each pod's stages are
timed as a cluster sees them. ``--create-qps 0`` creates them as fast as the threads can
(a burst no real control plane sends; the stages then time a queue, not a pod). No
Deployment or ReplicaSet controller is emulated beyond that rate (nor its slow-start
batches), no scheduler, no image pull and no container start.

Two runs, each on a fresh bed: ``exact``, where the cloud gives each node as many
addresses as it has pods (the provider's interface capacity: one interface of exactly
that many addresses) and ``plenty`` (4 interfaces of 60 on each node's /24).

Per pod, stage stamps: ``created`` (its POST answered), ``routed`` (the bench's watch saw
its PodNetwork Routed), ``added`` (the plugin's ADD answered), ``running`` (the kubelet
wrote its status), ``answered`` (its address answered an ICMP echo from the node's
namespace). Per mode: the makespan (first POST to last answer, as Spiderpool's
"create -> Running" of all pods), p50/p99 of each stage, the plugin runs and retries,
the teardown (delete -> every record released), and the leak check: ``podnet audit``
finds nothing (no address in the cloud that no record owns and no pool holds, no
duplicate, no record without its pod), no PodNetwork left, no pod interface left on
any node, no sandbox namespace left; the pool's addresses per node are reported (the
pool keeps idle addresses by design: not a leak). ``cpu_s``: the CPU seconds each part
used over the burst and over the teardown (the emulator, the controller, the agents
together, this process, the plugin's runs and ``ip``): what a loaded machine's wall time
hides.

Goal P13 on a 2-core machine: created -> ADD answered p99 <= 2 s and a makespan <= 60 s
for 1,000 pods on at least 5 agents, nothing leaked (``target``, ``met`` per mode;
``at_goal_size`` says whether the run had that size).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import platform
import queue
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "p13"
IF_NAME = "eth0"
#: the kubelet's defaults (KubeletConfiguration kubeAPIQPS, kubeAPIBurst)
KUBELET_QPS = 50.0
KUBELET_BURST = 100
#: kube-controller-manager's client defaults (--kube-api-qps, --kube-api-burst): the
#: ReplicaSet controller creates a Deployment's pods through them
CONTROLLER_MANAGER_QPS = 20.0
CONTROLLER_MANAGER_BURST = 30
#: Spiderpool's published figures (its IPAM performance document), seconds from creating
#: 100 Deployments of 10 until all 1,000 pods are Running, on 10 nodes of 3 cores
#: (Kubernetes 1.26, containerd 1.7): addresses equal to pods, and sufficient
SPIDERPOOL_TABLE_S = {
    "ips_equal_to_pods": {"spiderpool": 207, "kube-ovn": 405, "whereabouts": "failed"},
    "ips_sufficient": {"spiderpool": 182, "kube-ovn": 343, "cilium": 215, "calico": 322},
}
#: goal P13 on this 2-core machine: created -> ADD answered p99, the makespan; no leak
TARGET_CREATED_TO_ADDED_P99_S = 2.0
TARGET_MAKESPAN_S = 60.0


def _in_threads(items: list[Any], fn: Any, threads: int) -> None:
    """``fn(item)`` for every item, from ``threads`` threads taking the next one as they
    go; back once all are done."""
    work: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for item in items:
        work.put(item)

    def run() -> None:
        while True:
            try:
                item = work.get_nowait()
            except queue.Empty:
                return
            fn(item)

    workers = [threading.Thread(target=run, daemon=True) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]  # noqa: E731
    return {"count": len(ordered), "p50": round(statistics.median(ordered), 3),
            "p99": round(at(0.99), 3), "max": round(ordered[-1], 3)}


def _process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` used so far; 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> tuple[float, float]:
    """This process's CPU seconds (the kubelet stand-ins, the watches), and its waited-for
    children's (the plugin's runs, ``ip netns``)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


class TokenBucket:
    """At most ``rate`` takes a second on average, ``burst`` at once (client-go's)."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst = rate, burst
        self.tokens = float(burst)
        self.stamp = time.monotonic()
        self.lock = threading.Lock()

    def take(self) -> None:
        while True:
            with self.lock:
                now = time.monotonic()
                self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
                self.stamp = now
                if self.tokens >= 1:
                    self.tokens -= 1
                    return
                wait = (1 - self.tokens) / self.rate
            time.sleep(wait)


class PodTimes:
    """One pod's stamps (``time.monotonic()``) and what its sandbox took."""

    def __init__(self, name: str, node: str) -> None:
        self.name, self.node = name, node
        self.uid = ""
        self.created: float | None = None
        self.routed: float | None = None
        self.add_started: float | None = None
        self.added: float | None = None
        self.running: float | None = None
        self.answered: float | None = None
        self.add_runs = 0
        self.add_errors: list[str] = []
        self.ip = ""
        self.netns = ""
        self.container = ""
        self.deleted = False
        self.del_errors: list[str] = []


def replica_set_pods(pods: int, per_deployment: int, nodes: list[str]
                     ) -> list[dict[str, Any]]:
    """``pods`` Pods as ReplicaSets of ``per_deployment`` make them, bound round robin."""
    out: list[dict[str, Any]] = []
    for i in range(pods):
        deployment = f"app-{i // per_deployment:03d}"
        template_hash = hashlib.sha256(deployment.encode()).hexdigest()[:10]
        replica_set = f"{deployment}-{template_hash}"
        suffix = hashlib.sha256(f"{i}".encode()).hexdigest()[:5]
        out.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{replica_set}-{suffix}", "namespace": NAMESPACE,
                "labels": {"app": deployment, "pod-template-hash": template_hash},
                "ownerReferences": [{
                    "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": replica_set,
                    "uid": str(uuid.uuid5(uuid.NAMESPACE_OID, replica_set)),
                    "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"nodeName": nodes[i % len(nodes)],
                     "containers": [{"name": "app", "image": "registry/app:1"}]},
        })
    return out


class Kubelet:
    """The kubelet stand-in of one node (see the module)."""

    def __init__(self, bench: ModeRun, node: Any, workers: int) -> None:
        from podnet.linux.netns import netns_path

        self.bench = bench
        self.node = node
        self.node_path = netns_path(node.netns)
        self.socket = bench.stack.socket_of(node.name)
        self.pool = ThreadPoolExecutor(max_workers=workers,
                                       thread_name_prefix=f"kubelet-{node.name}")
        self.bucket = TokenBucket(KUBELET_QPS, KUBELET_BURST)
        self.seen: set[str] = set()
        self.tearing: set[str] = set()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name=f"kubelet-{node.name}",
                                       daemon=True)
        self.errors: list[str] = []

    def start(self, resource_version: str) -> None:
        self.resource_version = resource_version
        self.thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=30)
        self.pool.shutdown(wait=True)

    def _watch(self) -> None:
        from podnet.core.cluster.port import POD

        cluster = self.bench.cluster
        rv = self.resource_version
        while not self.stopping.is_set():
            try:
                watch = cluster.watch(POD, rv, namespace=NAMESPACE,
                                      field_selector=f"spec.nodeName={self.node.name}",
                                      timeout_seconds=3600)
                while not self.stopping.is_set() and not watch.closed:
                    for event in watch.poll(0.2):
                        meta = event.object.get("metadata") or {}
                        if event.type == "BOOKMARK":
                            rv = meta.get("resourceVersion") or rv
                            continue
                        rv = meta.get("resourceVersion") or rv
                        self._sync(event.type, event.object)
                watch.stop()
            except Exception as exc:  # a dropped watch: again from where it was
                self.errors.append(f"watch: {exc!r}")
                time.sleep(0.5)

    def _sync(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        name = meta["name"]
        if kind == "DELETED":
            return
        if meta.get("deletionTimestamp"):
            if name not in self.tearing:
                self.tearing.add(name)
                self.pool.submit(self._guard, self._kill, name)
        elif name not in self.seen:
            self.seen.add(name)
            times = self.bench.times[name]
            times.uid = meta["uid"]
            self.pool.submit(self._guard, self._start, times)

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as exc:
            self.errors.append(f"{fn.__name__} {args[0]!r}: {exc!r}")

    def _cni(self, command: str, times: PodTimes) -> Any:
        from podnet.linux.netns import netns_path
        from podnet.testing.cni import pod_args, run_cni

        config = {"cniVersion": "1.1.0", "name": "podnet", "type": "podnet-cni",
                  "agentSocket": self.socket}
        return run_cni(command, config, {
            "CNI_CONTAINERID": times.container, "CNI_NETNS": netns_path(times.netns),
            "CNI_IFNAME": IF_NAME,
            "CNI_ARGS": pod_args(namespace=NAMESPACE, name=times.name, uid=times.uid)},
            argv=self.bench.plugin, timeout=self.bench.add_timeout + 30)

    def _start(self, times: PodTimes) -> None:
        """The sandbox: a namespace, the plugin's ADD (retried as the kubelet retries a
        failed sandbox), the pod's status, then echoes until the address answers."""
        from podnet.core.cluster.port import POD
        from podnet.linux.netns import add_netns

        times.netns = f"pnp13-{self.bench.suffix}-{len(self.bench.sandboxes):04d}"
        self.bench.sandboxes.append(times.netns)
        add_netns(times.netns)
        times.container = uuid.uuid4().hex
        times.add_started = time.monotonic()
        backoff = 0.5
        while True:
            times.add_runs += 1
            done = self._cni("ADD", times)
            if done.ok:
                break
            times.add_errors.append(done.stdout.strip()[:300] or done.stderr.strip()[:300])
            if times.add_runs >= self.bench.add_tries or self.stopping.is_set():
                return
            time.sleep(backoff)
            backoff = min(backoff * 2, 10.0)
        times.added = time.monotonic()
        times.ip = done.output["ips"][0]["address"].split("/")[0]
        self.bucket.take()
        self.bench.cluster.patch(POD, times.name, {"status": {
            "phase": "Running", "podIP": times.ip, "podIPs": [{"ip": times.ip}],
            "conditions": [{"type": "Ready", "status": "True"}]}},
            NAMESPACE, subresource="status")
        times.running = time.monotonic()
        self._ping(times)

    def _ping(self, times: PodTimes) -> None:
        from podnet.app.demo_node import icmp_echo
        from podnet.linux.netns import run_in_netns

        deadline = time.monotonic() + self.bench.ping_timeout
        while time.monotonic() < deadline and not self.stopping.is_set():
            if run_in_netns(self.node_path, functools.partial(icmp_echo, times.ip, 1, 0.5)):
                times.answered = time.monotonic()
                return

    def _kill(self, name: str) -> None:
        """The pod is terminating: the plugin's DEL, the sandbox removed, the deletion
        confirmed (grace 0), as the kubelet does once the containers stopped."""
        from podnet.core.cluster.port import POD, NotFound
        from podnet.linux.netns import del_netns

        times = self.bench.times[name]
        if times.container:
            for _ in range(5):
                done = self._cni("DEL", times)
                if done.ok:
                    break
                times.del_errors.append(done.stdout.strip()[:300])
                time.sleep(1)
        if times.netns:
            with contextlib.suppress(Exception):
                del_netns(times.netns)
        self.bucket.take()
        with contextlib.suppress(NotFound):
            self.bench.cluster.delete(POD, name, NAMESPACE, uid=times.uid,
                                      grace_period_seconds=0)
        times.deleted = True


class ModeRun:
    """One run of the benchmark (one address mode) on a fresh bed."""

    def __init__(self, args: argparse.Namespace, mode: str, tmp: Path) -> None:
        self.args = args
        self.mode = mode
        self.tmp = tmp
        self.suffix = uuid.uuid4().hex[:6]
        self.add_timeout = args.add_timeout
        self.add_tries = args.add_tries
        self.ping_timeout = args.ping_timeout
        self.times: dict[str, PodTimes] = {}
        self.sandboxes: list[str] = []
        self.stack: Any = None
        self.cluster: Any = None
        from podnet.testing.cni import plugin_argv

        self.plugin = plugin_argv()

    def controller_config(self) -> dict[str, Any]:
        from podnet.testing.nodebed import reference_config

        per_node = -(-self.args.pods // self.args.nodes)
        config = reference_config(self.tmp)
        config.pop("networks", None)
        reference = config["providers"]["reference"]
        if self.mode == "exact":
            reference.update(max_interfaces=1, ips_per_interface=per_node)
        else:
            reference.update(max_interfaces=4, ips_per_interface=60)
        return config

    def capacity(self) -> int:
        per_node = -(-self.args.pods // self.args.nodes)
        return (per_node if self.mode == "exact" else 240) * self.args.nodes

    def run(self) -> dict[str, Any]:
        from podnet.linux.netns import del_netns, netns_path, run_in_netns
        from podnet.testing.nodebed import Stack, Underlay

        underlay = Underlay()
        kubelets: list[Kubelet] = []
        try:
            nodes = [underlay.add_node(f"node-{i:02d}", f"10.93.{i}.0/24")
                     for i in range(self.args.nodes)]
            self.stack = Stack(self.tmp, netns=underlay.router,
                               address=underlay.router_address,
                               controller_config=self.controller_config(),
                               kubelet_finish_after=None)
            # the API is reachable from the router's namespace only: this run's client
            # sockets are made there, by threads that entered it
            return run_in_netns(netns_path(underlay.router),
                                lambda: self._run(nodes, kubelets))
        finally:
            for kubelet in kubelets:
                kubelet.stopping.set()
            for kubelet in kubelets:
                kubelet.stop()
            if self.cluster is not None:
                self.cluster.close()
            if self.stack is not None:
                self.stack.close()
            for name in self.sandboxes:
                with contextlib.suppress(Exception):
                    del_netns(name)
            underlay.cleanup()

    def _run(self, nodes: list[Any], kubelets: list[Kubelet]) -> dict[str, Any]:
        from podnet.core.cluster.kube import KubeCluster
        from podnet.core.cluster.port import NAMESPACE as NAMESPACE_KIND
        from podnet.core.cluster.port import NODE, NODE_NETWORK, POD, POD_NETWORK
        from podnet.testing.nodebed import AgentClient, node_object, wait_for

        args = self.args
        stack = self.stack
        self.cluster = cluster = KubeCluster.connect(
            str(stack.kubeconfig), connections=4 * args.nodes + args.creators + 16)
        cluster.create(NAMESPACE_KIND, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": NAMESPACE}})
        for n in nodes:
            cluster.create(NODE, node_object(n.name, n.pod_cidr, n.address))
            traces = ([] if args.trace_dir is None else ["--trace-file", str(
                Path(args.trace_dir) / f"{self.mode}-agent-{n.name}.jsonl")])
            stack.agent(n.name, netns=n.netns, add_timeout=self.add_timeout,
                        args=["--network-policy", args.network_policy, *traces])
        for n in nodes:
            wait_for(f"the agent of {n.name} ready",
                     AgentClient(stack.socket_of(n.name)).ready, 120)
        names = {n.name for n in nodes}
        wait_for("every node's pool recorded", lambda: names <= {
            o["metadata"]["name"] for o in cluster.list(NODE_NETWORK).items}, 120)
        pods = replica_set_pods(args.pods, args.per_deployment, [n.name for n in nodes])
        for p in pods:
            self.times[p["metadata"]["name"]] = PodTimes(p["metadata"]["name"],
                                                         p["spec"]["nodeName"])
        # the records' watch: when each turns Routed
        start_rv = cluster.list(POD_NETWORK, NAMESPACE).resource_version
        watching = threading.Event()
        records_done = threading.Event()
        record_watch = threading.Thread(
            target=self._watch_records, args=(start_rv, watching, records_done), daemon=True)
        record_watch.start()
        pod_rv = cluster.list(POD, NAMESPACE).resource_version
        for n in nodes:
            kubelets.append(Kubelet(self, n, args.workers_per_node))
            kubelets[-1].start(pod_rv)
        watching.wait(10)
        _log(f"{self.mode}: {len(nodes)} agents ready; creating {len(pods)} pods")

        cpu_before = self.cpu()
        agents_before = self.agent_counts(nodes)
        started = time.monotonic()
        create_errors: list[str] = []

        pace = (TokenBucket(args.create_qps, args.create_burst) if args.create_qps > 0
                else None)

        def create(p: dict[str, Any]) -> None:
            if pace is not None:
                pace.take()
            try:
                cluster.create(POD, p)
                self.times[p["metadata"]["name"]].created = time.monotonic()
            except Exception as exc:
                create_errors.append(f"{p['metadata']['name']}: {exc!r}")

        _in_threads(pods, create, args.creators)
        created_s = time.monotonic() - started
        _log(f"{self.mode}: {len(pods)} pods created in {created_s:.1f} s")

        def settled() -> bool:
            return all(t.answered is not None or (t.added is None and t.add_runs >= args.add_tries)
                       for t in self.times.values())

        last = time.monotonic()
        deadline = time.monotonic() + args.timeout
        while not settled() and time.monotonic() < deadline:
            time.sleep(0.2)
            if time.monotonic() - last > 10:
                last = time.monotonic()
                _log(f"{self.mode}: routed {sum(t.routed is not None for t in self.times.values())}"
                     f", added {sum(t.added is not None for t in self.times.values())}, answered "
                     f"{sum(t.answered is not None for t in self.times.values())} "
                     f"of {len(pods)} (load {os.getloadavg()[0]:.1f})")
        finished = time.monotonic()
        cpu_up = self.cpu()
        up = self._up_report(started, finished, created_s, create_errors)
        up["cpu_s"] = self._spent(cpu_before, cpu_up)
        agents_after = self.agent_counts(nodes)
        up["agents"] = {k: agents_after[k] - v for k, v in agents_before.items()}
        _log(f"{self.mode}: makespan {up['makespan_s']} s; deleting the pods")

        # teardown: every pod deleted as a ReplicaSet's deletion deletes them (graceful);
        # the kubelets DEL and confirm; the controller releases the records
        down_started = time.monotonic()
        def delete(name: str) -> None:
            with contextlib.suppress(Exception):
                cluster.delete(POD, name, NAMESPACE)

        _in_threads(list(self.times), delete, args.creators)
        gone = lambda: (not cluster.list(POD, NAMESPACE).items  # noqa: E731
                        and not cluster.list(POD_NETWORK, NAMESPACE).items)
        released = True
        try:
            wait_for("every pod and record gone", gone, args.timeout)
        except Exception:
            released = False
        down_s = time.monotonic() - down_started
        cpu_down = self.cpu()
        records_done.set()
        leak = self._leak_check(nodes)
        leak["released"] = released
        errors = [e for k in kubelets for e in k.errors]
        return {
            "mode": self.mode,
            "addresses": self.capacity(),
            "up": up,
            "teardown": {
                "delete_to_released_s": round(down_s, 2),
                "cpu_s": self._spent(cpu_up, cpu_down),
                "del_failures": sum(bool(t.del_errors) for t in self.times.values()),
                "del_error_samples": [e for t in self.times.values() for e in t.del_errors][:3],
            },
            "leak_check": leak,
            "kubelet_errors": errors[:5],
            "kubelet_error_count": len(errors),
        }

    def agent_counts(self, nodes: list[Any]) -> dict[str, float]:
        """What the agents did so far, summed (``GET /v1/agent/report``): their report
        Lease writes, their NetworkPolicy enforcers' table renders and applies, and how
        often they read what is plugged from the host (``hostReads``)."""
        from podnet.testing.nodebed import AgentClient

        out = {"report_writes": 0.0, "netpol_renders": 0.0, "netpol_applied": 0.0,
               "host_reads": 0.0}
        for n in nodes:
            with contextlib.suppress(Exception):
                _, body = AgentClient(self.stack.socket_of(n.name)).request(
                    "GET", "/v1/agent/report")
                out["report_writes"] += sum((body.get("writes") or {}).values())
                out["host_reads"] += body.get("hostReads", 0)
                policy = body.get("networkPolicy") or {}
                out["netpol_renders"] += policy.get("rendered", 0)
                out["netpol_applied"] += policy.get("applied", 0)
        return out

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far: the API emulator, the controller, the agents together,
        this process (the kubelet stand-ins, the pods' creates, the records' watch), its
        children (the plugin's runs, `ip netns`)."""
        procs = self.stack.procs
        own, kids = _own_cpu()
        return {"apiserver": _process_cpu(procs["apiserver"].pid),
                "controller": _process_cpu(procs["controller"].pid),
                "agents": sum(_process_cpu(p.pid) for name, p in procs.items()
                              if name.startswith("agent")),
                "bench": own, "plugin_and_ip": kids}

    @staticmethod
    def _spent(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        spent = {k: round(after[k] - before[k], 2) for k in before}
        spent["total"] = round(sum(spent.values()), 2)
        return spent

    def _watch_records(self, rv: str, watching: threading.Event,
                       done: threading.Event) -> None:
        from podnet.core.cluster.port import POD_NETWORK

        while not done.is_set():
            try:
                watch = self.cluster.watch(POD_NETWORK, rv, namespace=NAMESPACE,
                                           timeout_seconds=3600)
                watching.set()
                while not done.is_set() and not watch.closed:
                    for event in watch.poll(0.2):
                        obj = event.object
                        rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                        if event.type not in ("ADDED", "MODIFIED"):
                            continue
                        if (obj.get("status") or {}).get("phase") != "Routed":
                            continue
                        times = self.times.get((obj.get("spec") or {}).get("podName", ""))
                        if times is not None and times.routed is None:
                            times.routed = time.monotonic()
                watch.stop()
            except Exception:
                time.sleep(0.5)

    def _up_report(self, started: float, finished: float, created_s: float,
                   create_errors: list[str]) -> dict[str, Any]:
        times = list(self.times.values())
        answered = [t for t in times if t.answered is not None]

        def stage(a: str, b: str) -> dict[str, float]:
            return _quantiles([getattr(t, b) - getattr(t, a) for t in times
                               if getattr(t, a) is not None and getattr(t, b) is not None])

        last = max((t.answered for t in answered), default=finished)
        last_running = max((t.running for t in times if t.running is not None),
                           default=finished)
        return {
            "pods": len(times),
            "created": sum(t.created is not None for t in times),
            "routed": sum(t.routed is not None for t in times),
            "added": sum(t.added is not None for t in times),
            "running": sum(t.running is not None for t in times),
            "answered": len(answered),
            "all_answered": len(answered) == len(times),
            "create_s": round(created_s, 2),
            "create_errors": create_errors[:3],
            "makespan_s": round(last - started, 3),
            "makespan_running_s": round(last_running - started, 3),
            "stages_s": {
                "created_to_routed": stage("created", "routed"),
                "routed_to_added": stage("routed", "added"),
                "added_to_answered": stage("added", "answered"),
                "created_to_added": stage("created", "added"),
                "created_to_running": stage("created", "running"),
                "created_to_answered": stage("created", "answered"),
                "add_call": stage("add_started", "added"),
            },
            "add_runs": sum(t.add_runs for t in times),
            "add_retried_pods": sum(t.add_runs > 1 for t in times),
            "add_error_samples": [e for t in times for e in t.add_errors][:3],
            **({"per_pod": [
                {"pod": t.name, "node": t.node, "add_runs": t.add_runs, **{
                    stage: None if getattr(t, stage) is None
                    else round(getattr(t, stage) - started, 3)
                    for stage in ("created", "routed", "add_started", "added", "running",
                                  "answered")}}
                for t in times]} if self.args.per_pod else {}),
        }

    def _leak_check(self, nodes: list[Any]) -> dict[str, Any]:
        from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK
        from podnet.linux.netns import netns_exists
        from podnet.plugins.reference.dataplane import HOST_PREFIX, PEER_PREFIX
        from podnet.testing.nodebed import links_in

        def still_owned() -> int:
            return sum(1 for nn in self.cluster.list(NODE_NETWORK).items
                       for itf in (nn.get("status") or {}).get("interfaces") or ()
                       for ip in itf.get("ips") or () if ip.get("owner"))

        # a node pool's status is written a few seconds after its records go (the
        # controller coalesces those writes): waited for, up to --settle-timeout; what
        # is still owned then is a leak
        settle_started = time.monotonic()
        while still_owned() and time.monotonic() - settle_started < self.args.settle_timeout:
            time.sleep(0.5)
        settled_s = round(time.monotonic() - settle_started, 2)
        records = len(self.cluster.list(POD_NETWORK).items)
        interfaces = {n.name: [link for link in links_in(n.netns)
                               if link.startswith((HOST_PREFIX, PEER_PREFIX))]
                      for n in nodes}
        sandboxes = [name for name in self.sandboxes if netns_exists(name)]
        def audit() -> tuple[int, dict[str, Any]]:
            done = subprocess.run(
                ["ip", "netns", "exec", self.stack.netns, sys.executable, "-m",
                 "podnet.app.cli", "audit", "--kubeconfig", str(self.stack.kubeconfig),
                 "--config", str(self.tmp / "controller.yaml"), "--provider", "reference",
                 "--grace", "0", "-o", "json"],
                capture_output=True, text=True, timeout=120, check=False)
            try:
                findings = json.loads(done.stdout)
            except ValueError:
                findings = {"unparsed": [done.stdout[-500:] + done.stderr[-500:]]}
            return done.returncode, {k: v for k, v in findings.items() if v and k != "skipped"}

        # a pool's shrink in flight (an address given back to the cloud, or not yet)
        # may show for a moment: audited again until clean, up to --settle-timeout; the
        # first findings are kept
        audit_started = time.monotonic()
        audit_exit, findings = audit()
        first = {k: v[:3] for k, v in findings.items()}
        while findings and time.monotonic() - audit_started < self.args.settle_timeout:
            time.sleep(5)
            audit_exit, findings = audit()
        audit_clean_after_s = round(time.monotonic() - audit_started, 2)
        found = {k: len(v) for k, v in findings.items()}
        # what each node's pool holds: idle addresses are kept by design; one still
        # owned by a record is a leak
        pooled: dict[str, dict[str, int]] = {}
        owned = 0
        for nn in self.cluster.list(NODE_NETWORK).items:
            ips = [ip for itf in (nn.get("status") or {}).get("interfaces") or ()
                   for ip in itf.get("ips") or ()]
            mine = sum(1 for ip in ips if ip.get("owner"))
            owned += mine
            pooled[nn["metadata"]["name"]] = {"idle": len(ips) - mine, "owned": mine}
        leaks = {
            "pools_settled_s": settled_s,
            "records_left": records,
            "pod_interfaces_left": sum(len(v) for v in interfaces.values()),
            "sandboxes_left": len(sandboxes),
            "audit_exit": audit_exit,
            "audit_findings": found,
            "audit_first_findings": first,
            "audit_clean_after_s": audit_clean_after_s if not found else None,
            "pool_addresses_owned": owned,
        }
        clean = (records == 0 and owned == 0 and not any(interfaces.values())
                 and not sandboxes and audit_exit == 0 and not found)
        return {**leaks, "clean": clean, "pool_addresses_per_node": pooled}


#: the kernel's neighbour (ARP) table limits: one table holds the entries of every
#: namespace, so the bed's nodes and pods share what one host's would have alone
NEIGH_THRESHOLDS = tuple(f"/proc/sys/net/ipv4/neigh/default/gc_thresh{i}" for i in (1, 2, 3))


@contextlib.contextmanager
def _neighbour_room(pods: int) -> Iterator[dict[str, int]]:
    """Room in the kernel's neighbour table for every node's and pod's entries (a pod's
    for its gateway, its node's for it, the underlay's), put back afterwards. At the
    defaults (128 / 512 / 1,024) a 1,000-pod bed runs out half way through: new ARP
    entries are refused and pods stay silent for up to half a minute, a limit of this
    bed (every node on one kernel), not of a node with its own."""
    wanted = [max(pods * 4, 1024), max(pods * 8, 2048), max(pods * 16, 4096)]
    before: list[int] = []
    try:
        for path in NEIGH_THRESHOLDS:
            before.append(int(Path(path).read_text()))
        for path, old, new in zip(NEIGH_THRESHOLDS, before, wanted, strict=True):
            if new > old:
                Path(path).write_text(str(new))
    except OSError as exc:
        _log(f"the neighbour table's limits stay as they are ({exc})")
    try:
        yield {Path(p).name: int(Path(p).read_text()) for p in NEIGH_THRESHOLDS}
    finally:
        for path, old in zip(NEIGH_THRESHOLDS, before, strict=False):
            with contextlib.suppress(OSError):
                Path(path).write_text(str(old))


@contextlib.contextmanager
def _tmpdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="pnbench-p13-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10, help="node agents (default 10)")
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--per-deployment", type=int, default=10)
    parser.add_argument("--modes", default="exact,plenty",
                        help="comma-separated: exact, plenty (default both)")
    parser.add_argument("--workers-per-node", type=int, default=10,
                        help="sandboxes a kubelet stand-in makes at once (default 10)")
    parser.add_argument("--creators", type=int, default=4,
                        help="threads creating the pods (default 4)")
    parser.add_argument("--create-qps", type=float, default=CONTROLLER_MANAGER_QPS,
                        help="pods created a second, as the ReplicaSet controller's client "
                        "allows (default 20, kube-controller-manager's; 0: as fast as "
                        "the creators can)")
    parser.add_argument("--create-burst", type=int, default=CONTROLLER_MANAGER_BURST,
                        help="creates at once before the rate applies (default 30)")
    parser.add_argument("--add-timeout", type=float, default=30.0,
                        help="the agents' --add-timeout (seconds; default 30, theirs: "
                        "below the plugin's own 60 s)")
    parser.add_argument("--add-tries", type=int, default=10,
                        help="ADD runs per pod before the kubelet stand-in gives up")
    parser.add_argument("--ping-timeout", type=float, default=60.0)
    parser.add_argument("--network-policy", choices=("podnet", "none"), default="podnet",
                        help="the agents' --network-policy: podnet (the default: each agent "
                        "enforces NetworkPolicy for its node's pods) or none")
    parser.add_argument("--per-pod", action="store_true",
                        help="each pod's stamps too (seconds from the first create)")
    parser.add_argument("--trace-dir", default=None,
                        help="a folder where each agent writes its spans (OTLP JSON lines, "
                        "<mode>-agent-<node>.jsonl): where an ADD's time went")
    parser.add_argument("--settle-timeout", type=float, default=120.0,
                        help="seconds the node pools may take to write that their "
                        "addresses' records are gone, before the leak check")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds each phase may take")
    args = parser.parse_args()
    from podnet.linux.netns import netns_unavailable

    why = netns_unavailable()
    if why is not None:
        print(json.dumps({"bench": "nodepath", "skipped": why}))
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"exact", "plenty"}:
        parser.error(f"--modes: unknown mode in {args.modes!r} (exact, plenty)")
    if args.pods % args.nodes:
        parser.error(f"--pods {args.pods} is not a multiple of --nodes {args.nodes}: "
                     "the exact mode gives each node as many addresses as it has pods")
    results = []
    load_before = os.getloadavg()
    with _neighbour_room(args.pods) as neighbour_limits:
        for mode in modes:
            with _tmpdir() as tmp:
                results.append(ModeRun(args, mode, tmp).run())
                results[-1]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report = {
        "bench": "nodepath", "goal": "P13",
        "sizes": {"nodes": args.nodes, "agents": args.nodes, "pods": args.pods,
                  "per_deployment": args.per_deployment,
                  "deployments": -(-args.pods // args.per_deployment)},
        "agent_network_policy": args.network_policy,
        "creates": {"qps": args.create_qps, "burst": args.create_burst,
                    "creators": args.creators},
        "kubelet": {"workers_per_node": args.workers_per_node, "api_qps": KUBELET_QPS,
                    "api_burst": KUBELET_BURST, "add_tries": args.add_tries},
        "provider": "reference", "neighbour_table_limits": neighbour_limits,
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "load_average_before": [round(x, 2) for x in load_before],
        "spiderpool_table_s": SPIDERPOOL_TABLE_S,
        "runs": results,
    }
    report["ok"] = all(r["up"]["all_answered"] and r["leak_check"]["clean"] for r in results)
    report["target"] = {"created_to_added_p99_s": TARGET_CREATED_TO_ADDED_P99_S,
                        "makespan_s": TARGET_MAKESPAN_S, "leak": "none"}
    # the goal's figures are for 1,000 pods on at least 5 agents: a smaller run says so
    report["met"] = {r["mode"]: (
        r["up"]["all_answered"] and r["leak_check"]["clean"]
        and r["up"]["stages_s"]["created_to_added"]["p99"] <= TARGET_CREATED_TO_ADDED_P99_S
        and r["up"]["makespan_s"] <= TARGET_MAKESPAN_S) for r in results}
    report["at_goal_size"] = args.pods >= 1000 and args.nodes >= 5
    print(json.dumps(report, indent=2))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
