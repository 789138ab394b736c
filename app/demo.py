"""``podnet demo``: the engine on its embedded default, start to finish in one process.

An in-memory cluster, nodes, a burst of pods, optional churn (pods deleted and recreated
under the same names), then a check of the outcome against each provider's ground truth:
every pod network routed, no address owned twice, nothing leaked.

The default (``--provider mixed``) is the cluster podnet is built for: half the nodes are
BBC machines and half ECS instances, each on its loopback simulator (the real SDKs over
HTTP), and every third pod also attaches to an OVN overlay network on a throwaway
Northbound server (left out, with the install command, when ovsdb-server is missing).

Then, where the machine allows it (root, network namespaces), the stage "on a node"
(:mod:`podnet.app.demo_node`): one more node, served by the reference provider, whose
node agent gives two pods real interfaces that ping each other; in the mixed cluster the
same on an ECS and on a BBC node, their ENIs wired to a simulated VPC, and on an OVN
node where OVS and OVN are installed. The demo prints how many pods of each cloud's
stage answered a ping, or why a stage was skipped. Each such stage then applies a
NetworkPolicy (its namespace denies all ingress, one pair allowed) and shows the allowed
pair connecting and the denied pair dropped, enforced as in production: by the node
agent's nftables table on the reference, ECS and BBC nodes, by the controller and the OVN
provider's ACLs on the OVN node.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import ipaddress
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

from podnet.app import demo_node
from podnet.app.demo_node import PODS as PODS_PER_STAGE
from podnet.app.demo_node import NodeStageReport
from podnet.core.clock import SystemClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK, SUBNET, Obj
from podnet.core.config import parse_config
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import DEFAULT_NETWORK, Phase
from podnet.core.objects import record_finished
from podnet.core.plugin import missing_extra, new_plugin_manager
from podnet.core.policy import RateLimit
from podnet.core.tracing import Tracing, tracer_provider_from_env
from podnet.hookspecs import hookimpl
from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings
from podnet.hookspecs.types import TransitionEvent
from podnet.sim.memory import InMemoryCluster

NAMESPACE_NAME = "demo"
MIXED = "mixed"
#: the mixed cluster's attachment network, served by the OVN provider
OVERLAY_NETWORK = "overlay"
#: the mixed cluster's config, as an operator would write it: BBC machines are picked by
#: their instance-type label, everything else is ECS, the overlay is OVN's
MIXED_CONFIG: dict[str, Any] = {
    "defaultProvider": "ecs",
    "nodeProviders": [
        {"provider": "bbc", "nodeSelector": "node.kubernetes.io/instance-type=BBC"},
    ],
    "networks": {OVERLAY_NETWORK: {"provider": "ovn"}},
}
#: the mixed cluster's Subnet objects besides the providers' own: the overlay's, for the
#: demo's pods (their only OVN network is the overlay attachment)
MIXED_SUBNETS: tuple[dict[str, Any], ...] = (
    {"metadata": {"name": "ovn-overlay"},
     "spec": {"provider": "ovn", "cidrBlock": "10.20.0.0/16", "namespaces": [NAMESPACE_NAME],
              "parameters": {"logicalSwitch": "ovn-overlay", "gatewayType": "distributed"}}},
)
#: every how many pods one also attaches to the overlay
ATTACH_EVERY = 3


@attrs.frozen
class DemoOptions:
    provider: str = MIXED
    nodes: int = 20
    pods: int = 500
    churn: int = 0
    seed: int = 1
    cloud_latency_ms: float = 0.0
    cloud_rate: float | None = None
    fault_rate: float = 0.0
    trace_file: str | None = None
    #: export the spans to this OTLP/HTTP endpoint (the full signal URL) too; the
    #: ``OTEL_*`` environment is honoured either way
    otlp_endpoint: str | None = None
    workers: int = 4
    timeout_s: float = 600.0
    #: run the stage "on a node" (when the machine allows it: see demo_node)
    node_stage: bool = True


@attrs.define
class ProviderReport:
    """One provider's share of the outcome."""

    nodes: int = 0
    #: pod networks this provider should serve at the end, and how many it routed
    pod_networks: int = 0
    routed: int = 0
    released: int = 0
    leaked_ips: int = 0
    duplicate_ips: int = 0
    cloud_calls: dict[str, int] = attrs.field(factory=dict)
    #: calls that changed the cloud (the provider's ``DEMO.write_apis``), GOALS P1
    write_calls: int = 0


@attrs.define
class DemoReport:
    pods: int = 0
    #: live pods whose every network is routed
    routed: int = 0
    released: int = 0
    leaked_ips: int = 0
    duplicate_ips: int = 0
    duration_s: float = 0.0
    transitions: dict[str, int] = attrs.field(factory=dict)
    #: attempts that failed, and attempts that found no address and waited (no failure)
    failed_transitions: dict[str, int] = attrs.field(factory=dict)
    waited_transitions: dict[str, int] = attrs.field(factory=dict)
    cloud_calls: dict[str, int] = attrs.field(factory=dict)
    provider_calls: dict[str, int] = attrs.field(factory=dict)
    writes: dict[str, int] = attrs.field(factory=dict)
    settled: bool = False
    trace_file: str | None = None
    provider: str = ""
    #: the same, per provider
    providers: dict[str, ProviderReport] = attrs.field(factory=dict)
    #: providers the demo left out, and why (e.g. ovsdb-server not installed)
    skipped: dict[str, str] = attrs.field(factory=dict)
    #: Northbound transactions, when the OVN provider took part
    ovn_transactions: int | None = None
    #: cloud calls that changed something, all providers (GOALS P1: per pod)
    write_calls: int = 0
    #: the fewest cloud write calls a perfect controller could make (GOALS P1b), and the
    #: time the slowest rate-limited API needs for its fewest calls, plus one latency (P2);
    #: single-provider runs only
    min_write_calls: int | None = None
    lower_bound_s: float | None = None
    #: the stage "on a node": pods plugged, ping replies, ADD latency per pod
    node: NodeStageReport = attrs.field(factory=NodeStageReport)
    #: the same stage on a node the OVN provider serves, on a throwaway chassis
    ovn_node: NodeStageReport = attrs.field(factory=NodeStageReport)
    #: the same stage on an ECS and on a BBC node, their ENIs in a simulated VPC
    ecs_node: NodeStageReport = attrs.field(factory=NodeStageReport)
    bbc_node: NodeStageReport = attrs.field(factory=NodeStageReport)
    #: each Subnet object at the end, as ``podnet status`` shows it (name, provider, cidr,
    #: phase, v4/v6 available, using, reserved, excluded)
    subnets: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def ok(self) -> bool:
        """Everything settled, nothing leaked or duplicated, and the node stage, if it
        ran, plugged both pods and they reached each other."""
        return (self.settled and self.leaked_ips == 0 and self.duplicate_ips == 0
                and all(not stage.ran or stage.ok for stage in (
                    self.node, self.ovn_node, self.ecs_node, self.bbc_node)))

    def answering(self) -> dict[str, str]:
        """Per cloud provider's stage: how many of its pods answered a ping (``2/2``), or
        why it was skipped."""
        out = {}
        for name, stage in (("BBC", self.bbc_node), ("ECS", self.ecs_node),
                            ("OVN", self.ovn_node)):
            out[name] = (f"{stage.pods_answering}/{len(PODS_PER_STAGE)}" if stage.ran
                         else f"skipped: {stage.skipped}")
        return out

    def policy_pairs(self) -> dict[str, str]:
        """Per dataplane's stage: the NetworkPolicy's allowed and denied pair as they
        went (``allowed ok, denied dropped``), or why the policy part did not run."""
        out = {}
        for name, stage in (("reference", self.node), ("BBC", self.bbc_node),
                            ("ECS", self.ecs_node), ("OVN", self.ovn_node)):
            if not stage.ran:
                out[name] = f"skipped: {stage.skipped}"
            elif stage.policy_skipped is not None:
                out[name] = f"not enforced here: {stage.policy_skipped}"
            elif not stage.probes or not stage.probes[-1].after:
                out[name] = f"not run: {stage.error}"
            else:
                out[name] = ", ".join(
                    f"{p.expected} {_VERDICT.get(p.after, p.after)}"
                    + ("" if p.ok else " (WRONG)") for p in stage.probes)
        return out

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


#: a connect's verdict, as the summary says it
_VERDICT = {"ok": "connects", "timeout": "dropped", "refused": "refused"}


def node_obj(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"node-{i:04d}", "labels": {"kubernetes.io/os": "linux"}},
        "spec": {"podCIDR": f"10.{64 + i // 256}.{i % 256}.0/24",
                 "providerID": f"demo://node-{i:04d}"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": f"192.168.{i // 256}.{i % 256}"}]},
    }


def pod_obj(name: str, node: str, networks: tuple[str, ...] = ()) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE_NAME, "labels": {"app": "demo"}}
    if networks:
        meta["annotations"] = {"podnet.io/networks": ",".join(networks)}
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "demo"}]},
        "status": {"phase": "Running"},
    }


@attrs.frozen
class Member:
    """One provider taking part: what its demo module declares, and its plugin on its
    stand-in cloud, built for this run."""

    name: str
    demo: DemoProvider
    cloud: DemoCloud


#: the providers the demo can run, by name -> the module defining each one's ``DEMO``, a
#: :class:`~podnet.hookspecs.demo.DemoProvider` (the demo interface; see its module)
DEMO_MODULES: dict[str, str] = {
    "reference": "podnet.plugins.reference.demo",
    "bbc": "podnet.plugins.bbc.demo",
    "ecs": "podnet.plugins.ecs.demo",
    "ovn": "podnet.plugins.ovn.demo",
}


def _installed(name: str) -> bool:
    """Provider ``name``'s demo module is there, and so is its SDK (its extra)."""
    try:
        found = importlib.util.find_spec(DEMO_MODULES[name]) is not None
    except ModuleNotFoundError:  # its provider package is not installed
        return False
    return found and missing_extra(name) is None


def demo_providers() -> list[str]:
    """Providers the demo can run: each one of :data:`DEMO_MODULES` whose module is
    installed (its stand-in cloud in-process: the reference cloud in memory, the cloud
    simulators over loopback HTTP, a throwaway NB server); ``mixed`` first when both cloud
    providers are there."""
    names = [name for name in DEMO_MODULES if _installed(name)]
    if {"bbc", "ecs"} <= set(names):
        names.insert(0, MIXED)
    return names


def demo_provider(name: str) -> DemoProvider:
    """The demo interface of provider ``name``: the ``DEMO`` its demo module declares."""
    if name not in DEMO_MODULES or name not in demo_providers():
        raise ValueError(f"--provider: {name!r} is not available "
                         f"(available: {', '.join(demo_providers())})")
    module = importlib.import_module(DEMO_MODULES[name])
    declared = getattr(module, "DEMO", None)
    if not isinstance(declared, DemoProvider):
        raise TypeError(f"{module.__name__}.DEMO is not a podnet.hookspecs.demo.DemoProvider")
    return declared


def _member(name: str, opts: DemoOptions) -> Member:
    demo = demo_provider(name)
    settings = DemoSettings(seed=opts.seed, cloud_latency_ms=opts.cloud_latency_ms,
                            cloud_rate=opts.cloud_rate, fault_rate=opts.fault_rate)
    return Member(name, demo, demo.build(settings))


def _members(opts: DemoOptions) -> tuple[list[Member], dict[str, str]]:
    """The providers of this run, and those left out with the reason."""
    if opts.provider != MIXED:
        return [_member(opts.provider, opts)], {}
    members = [_member("bbc", opts), _member("ecs", opts)]
    skipped: dict[str, str] = {}
    try:
        members.append(_member("ovn", opts))
    except Exception as exc:  # NbServerMissing, or the ovn plugin not installed
        skipped["ovn"] = str(exc)
    return members, skipped


def _engine_options(opts: DemoOptions, members: list[Member], node_stage: bool,
                    ovn_stage: bool = False) -> EngineOptions:
    names = {m.name for m in members}
    if opts.provider == MIXED:
        file = dict(MIXED_CONFIG)
        if "ovn" not in names:
            file.pop("networks")
    else:
        file = {"defaultProvider": opts.provider}
    if node_stage:
        # the stage's node goes to the reference provider, before any other rule
        file["nodeProviders"] = [demo_node.node_rule(), *file.get("nodeProviders", [])]
    if ovn_stage:
        file["nodeProviders"] = [demo_node.ovn_node_rule(), *file.get("nodeProviders", [])]
    config = parse_config(file)
    policies: dict[str, dict[str, Any]] = {}
    if opts.cloud_rate:
        # as an operator would: podnet's own bucket set to the cloud's published limit
        # (for the reference cloud, which has no server-side limit, it plays that limit)
        for name in names & {"reference", "bbc", "ecs"}:
            policies[name] = {"cloud_rate": RateLimit(
                rate=opts.cloud_rate, burst=max(1, int(opts.cloud_rate)))}
    return EngineOptions.from_config(config, policies=policies, provider_config={},
                                     workers=opts.workers, seed=opts.seed)


class _Releases:
    """Counts finished pod networks by provider (a ``podnet_transition`` listener)."""

    def __init__(self) -> None:
        self.by_provider: Counter[str] = Counter()

    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        if event.ok and event.machine == "pod_network" and event.trigger == "finish":
            self.by_provider[event.provider] += 1


def _node_stage_skipped(opts: DemoOptions) -> str | None:
    """Why the stage "on a node" does not run, or None when it does."""
    if not opts.node_stage:
        return "--no-node-stage"
    return demo_node.stage_unavailable()


def _eni_stage_skipped(opts: DemoOptions, members: list[Member], name: str) -> str | None:
    """Why the stage on an ENI node of provider ``name`` does not run, or None."""
    if not opts.node_stage:
        return "--no-node-stage"
    if opts.provider != MIXED:
        return "only in the mixed cluster"
    member = next((m for m in members if m.name == name), None)
    return demo_node.eni_stage_unavailable(member.cloud if member else None)


def _ovn_stage_skipped(opts: DemoOptions, members: list[Member]) -> str | None:
    """Why the stage on an OVN node does not run, or None when it does."""
    if not opts.node_stage:
        return "--no-node-stage"
    if "ovn" not in {m.name for m in members}:
        return "the OVN provider is not in this run"
    return demo_node.ovn_stage_unavailable()


def run_demo(opts: DemoOptions, progress: Callable[[str, int, int], None] | None = None
             ) -> DemoReport:
    members, skipped = _members(opts)
    node_skipped = _node_stage_skipped(opts)
    ovn_skipped = _ovn_stage_skipped(opts, members)
    eni_skipped = {name: _eni_stage_skipped(opts, members, name) for name in ("ecs", "bbc")}
    # the stage's provider, beside the demo's members when it is not one of them
    audited = list(members)
    if node_skipped is None and demo_node.PROVIDER not in {m.name for m in members}:
        audited.append(_member(demo_node.PROVIDER, opts))
    cluster = InMemoryCluster()
    pm = new_plugin_manager()
    for m in audited:
        pm.register(m.cloud.plugin, name=m.name)
    releases = _Releases()
    pm.register(releases, name="demo-releases")
    if opts.trace_file:
        # one run, one trace file: the exporter appends (a controller's restarts go on
        # in its file), a demo's earlier run would mix in
        with contextlib.suppress(FileNotFoundError):
            os.remove(opts.trace_file)
    tracer_provider = tracer_provider_from_env(trace_file=opts.trace_file,
                                               otlp_endpoint=opts.otlp_endpoint)
    tracing = Tracing(tracer_provider)
    engine = Engine(cluster, pm, clock=SystemClock(), tracing=tracing,
                    options=_engine_options(opts, audited, node_skipped is None,
                                            ovn_skipped is None))
    report = DemoReport(provider=opts.provider, trace_file=opts.trace_file, skipped=skipped,
                        node=NodeStageReport(skipped=node_skipped),
                        ovn_node=NodeStageReport(skipped=ovn_skipped,
                                                 node=demo_node.OVN_NODE_NAME,
                                                 provider=demo_node.OVN_PROVIDER),
                        ecs_node=NodeStageReport(skipped=eni_skipped["ecs"], provider="ecs"),
                        bbc_node=NodeStageReport(skipped=eni_skipped["bbc"], provider="bbc"))
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    # the networks, declared as objects before any pod (as an operator does)
    subnets = _subnet_objects(opts, members)
    for obj in subnets:
        cluster.create(SUBNET, dict(obj))
    node_members = [m for m in members if m.demo.serves_nodes] or members[:1]
    nodes = []
    for i in range(opts.nodes):
        member = node_members[i % len(node_members)]  # interleaved: BBC, ECS, BBC, ...
        nodes.append(cluster.create(NODE, member.cloud.setup_node(node_obj(i)))["metadata"]["name"])
    attach = (OVERLAY_NETWORK,) if opts.provider == MIXED and "ovn" not in skipped else ()

    def networks_of(i: int) -> tuple[str, ...]:
        return attach if i % ATTACH_EVERY == 0 else ()

    engine.start()
    stop = threading.Event()
    runner = threading.Thread(target=engine.run, args=(stop,), name="engine", daemon=True)
    started = time.monotonic()
    runner.start()
    try:
        deadline = started + opts.timeout_s
        _wait_subnets_ready(cluster, [str(o["metadata"]["name"]) for o in subnets], deadline)
        names = [f"pod-{i:05d}" for i in range(opts.pods)]
        for i, name in enumerate(names):
            cluster.create(POD, pod_obj(name, nodes[i % len(nodes)], networks_of(i)))
        settled = _wait_settled(cluster, opts.pods, deadline, progress, "burst")
        if opts.churn and settled:
            for i, name in enumerate(names[: opts.churn]):
                # no kubelet plays here: gone at once, so the name can be used again
                cluster.delete(POD, name, NAMESPACE_NAME, grace_period_seconds=0)
                cluster.create(POD, pod_obj(name, nodes[(i + 1) % len(nodes)], networks_of(i)))
            settled = _wait_settled(cluster, opts.pods, deadline, progress, "churn")
        report.settled = settled
        report.duration_s = round(time.monotonic() - started, 3)
        if node_skipped is None and not settled:
            report.node = NodeStageReport(skipped="the cluster did not settle")
        elif node_skipped is None:
            # the agent's spans join each record's trace in the same trace file
            report.node = demo_node.run_node_stage(cluster, tracing=tracing)
        if ovn_skipped is None and not settled:
            report.ovn_node = NodeStageReport(skipped="the cluster did not settle")
        elif ovn_skipped is None:
            ovn = next(m for m in members if m.name == "ovn")
            report.ovn_node = demo_node.run_ovn_node_stage(cluster, ovn.cloud.plugin,
                                                           tracing=tracing)
        for name in ("ecs", "bbc"):
            if eni_skipped[name] is not None:
                continue
            stage = (NodeStageReport(skipped="the cluster did not settle", provider=name)
                     if not settled else demo_node.run_eni_node_stage(
                         cluster, name, next(m for m in members if m.name == name).cloud,
                         tracing=tracing))
            setattr(report, f"{name}_node", stage)
        if subnets:
            report.subnets = _subnet_usage(cluster, min(deadline, time.monotonic() + 10))
    finally:
        stop.set()
        runner.join(timeout=10)
        if tracer_provider is not None:
            tracer_provider.force_flush()
            tracer_provider.shutdown()
    report.pods = opts.pods
    report.routed = _progress(cluster)[0]
    _audit(report, cluster, engine, audited, releases)
    report.transitions = dict(sorted(engine.stats.transitions.items()))
    report.failed_transitions = dict(sorted(engine.stats.failed_transitions.items()))
    report.waited_transitions = dict(sorted(engine.stats.waited_transitions.items()))
    report.released = engine.stats.transitions.get("pod_network.finish", 0)
    report.provider_calls = dict(sorted(engine.stats.provider_calls.items()))
    report.writes = dict(sorted(engine.stats.writes.items()))
    calls: Counter[str] = Counter()
    for m in audited:
        calls.update(report.providers[m.name].cloud_calls)
    report.cloud_calls = dict(sorted(calls.items()))
    if "ovn" in report.providers:
        report.ovn_transactions = report.providers["ovn"].cloud_calls.get("ovn_transactions", 0)
    if len(members) == 1:
        _lower_bound(report, opts, len(nodes), members[0].demo)
    return report


def _subnet_objects(opts: DemoOptions, members: list[Member]) -> list[Obj]:
    """The Subnet objects of this run: each member's own, and the mixed cluster's overlay
    when OVN takes part."""
    out = [dict(obj) for m in members for obj in m.demo.subnets]
    if opts.provider == MIXED and "ovn" in {m.name for m in members}:
        out.extend(dict(obj) for obj in MIXED_SUBNETS)
    return out


def _wait_subnets_ready(cluster: InMemoryCluster, names: list[str], deadline: float) -> None:
    """Until the controller has found each Subnet Ready (a pod made before would be
    served by its provider's config instead); raises past ``deadline``."""
    while True:
        phases = {n: cluster.get(SUBNET, n).get("status", {}).get("phase") for n in names}
        if all(p == "Ready" for p in phases.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("demo Subnets not Ready: " + ", ".join(
                f"{n} {p or 'not checked'}" for n, p in phases.items() if p != "Ready"))
        time.sleep(0.05)


def _subnet_usage(cluster: InMemoryCluster, deadline: float) -> list[dict[str, Any]]:
    """Each Subnet as ``podnet status`` shows it, once its status counts what the records
    hold (the controller writes the counts at most once a second), or at ``deadline``."""
    from podnet.app.status import _subnet_row

    while True:
        held: Counter[str] = Counter()
        objs = cluster.list(SUBNET).items
        records = [o for o in cluster.list(POD_NETWORK).items if not record_finished(o)]
        for obj in objs:
            spec = obj["spec"]
            blocks = [ipaddress.ip_network(b) for b in str(spec["cidrBlock"]).split(",")]
            for pn in records:
                ip = pn.get("status", {}).get("ip")
                if (ip and pn["spec"]["provider"] == spec["provider"]
                        and any(ipaddress.ip_address(ip) in b for b in blocks)):
                    held[obj["metadata"]["name"]] += 1
        current = all(obj.get("status", {}).get("v4UsingIPs") == held[obj["metadata"]["name"]]
                      for obj in objs)
        if current or time.monotonic() > deadline:
            return [_subnet_row(obj) for obj in sorted(objs, key=lambda o: o["metadata"]["name"])]
        time.sleep(0.1)


def _lower_bound(report: DemoReport, opts: DemoOptions, nodes: int, demo: DemoProvider
                 ) -> None:
    """From the provider's own count of the fewest calls (``DEMO.min_calls``), if any."""
    if demo.min_calls is None:
        return
    per_node = [opts.pods // nodes + (1 if i < opts.pods % nodes else 0) for i in range(nodes)]
    calls = demo.min_calls(per_node)
    report.min_write_calls = sum(n for n, write in calls.values() if write)
    if opts.cloud_rate:
        slowest = max(n for n, _ in calls.values()) / opts.cloud_rate
        report.lower_bound_s = round(slowest + opts.cloud_latency_ms / 1000, 3)


def _wanted_networks(pod: Obj) -> set[str]:
    raw = pod["metadata"].get("annotations", {}).get("podnet.io/networks", "")
    return {DEFAULT_NETWORK, *(n.strip() for n in raw.split(",") if n.strip())}


def _progress(cluster: InMemoryCluster) -> tuple[int, int]:
    """(live pods with every network routed, records not belonging to a live pod)."""
    pods = {p["metadata"]["name"]: p for p in cluster.list(POD, NAMESPACE_NAME).items}
    routed_networks: dict[str, set[str]] = {}
    stray = 0
    for pn in cluster.list(POD_NETWORK, NAMESPACE_NAME).items:
        if record_finished(pn):
            continue
        spec, status = pn["spec"], pn.get("status", {})
        pod = pods.get(spec["podName"])
        if pod is None or pod["metadata"]["uid"] != spec["podUid"]:
            stray += 1
        elif status.get("phase") == Phase.ROUTED.value:
            routed_networks.setdefault(spec["podName"], set()).add(spec["network"])
    routed = sum(1 for name, pod in pods.items()
                 if routed_networks.get(name, set()) >= _wanted_networks(pod))
    return routed, stray


def _wait_settled(cluster: InMemoryCluster, pods: int, deadline: float,
                  progress: Callable[[str, int, int], None] | None, stage: str) -> bool:
    while time.monotonic() < deadline:
        routed, stray = _progress(cluster)
        if progress is not None:
            progress(stage, routed, pods)
        if routed == pods and stray == 0:
            return True
        time.sleep(0.1)
    return False


def _audit(report: DemoReport, cluster: InMemoryCluster, engine: Engine,
           members: list[Member], releases: _Releases) -> None:
    """Records against each provider's ground truth: duplicates and leaks, per provider
    and in total (an address owned twice across providers counts too)."""
    owners: dict[str, list[str]] = {}
    records: Counter[str] = Counter()
    routed: Counter[str] = Counter()
    owners_in: dict[str, dict[str, int]] = {}
    for pn in cluster.list(POD_NETWORK).items:
        if record_finished(pn):
            continue
        status, provider = pn.get("status", {}), pn["spec"]["provider"]
        records[provider] += 1
        routed[provider] += status.get("phase") == Phase.ROUTED.value
        for ip in (status.get("ip"), status.get("ipv6")):
            if ip:
                owners.setdefault(ip, []).append(pn["metadata"]["name"])
                mine = owners_in.setdefault(provider, {})
                mine[ip] = mine.get(ip, 0) + 1
    pooled = {a.address for pool in engine.pools.all() for a in pool.addresses.values()}
    nodes = Counter(engine.provider_for_node(n) for n in engine.nodes.values())
    for m in members:
        truth = m.cloud.ground_truth()
        report.providers[m.name] = ProviderReport(
            nodes=nodes.get(m.name, 0) if m.demo.serves_nodes else 0,
            pod_networks=records[m.name], routed=routed[m.name],
            released=releases.by_provider.get(m.name, 0),
            leaked_ips=sum(1 for ip in truth if ip not in owners and ip not in pooled),
            duplicate_ips=sum(1 for n in owners_in.get(m.name, {}).values() if n > 1),
            cloud_calls=dict(sorted(m.cloud.calls().items())),
        )
        report.providers[m.name].write_calls = sum(
            report.providers[m.name].cloud_calls.get(api, 0) for api in m.demo.write_apis)
    report.duplicate_ips = sum(1 for o in owners.values() if len(o) > 1)
    report.leaked_ips = sum(p.leaked_ips for p in report.providers.values())
    report.write_calls = sum(p.write_calls for p in report.providers.values())
