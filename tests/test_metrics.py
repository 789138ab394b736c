"""The /metrics exposition: Prometheus conventions (checked by promtool), the work queue's
``workqueue_*`` family, API-server requests by verb and code, cloud APIs by their name."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from podnet.app.demo import NAMESPACE_NAME as NS_DEMO
from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock, SystemClock, format_micro_time, format_time
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import LEASE, NAMESPACE, NODE, POD, POD_NETWORK, NotFound
from podnet.core.engine import Engine, EngineOptions
from podnet.core.metrics import Metrics, PodNetworkTally
from podnet.core.models import AgentReport, Condition, Phase, PodNetwork
from podnet.core.objects import agent_report_lease, ready_condition
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import RateLimit
from podnet.core.ratelimit import CloudLimiter
from podnet.core.values import evolve
from podnet.core.workqueue import WorkQueue
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster

NS = "default"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def value(text: str, metric: str, /, **labels: str) -> float:
    return samples(text)[metric, tuple(sorted(labels.items()))]


def names(text: str) -> set[str]:
    return {name for name, _ in samples(text)}


@pytest.fixture
def engine() -> Iterator[Engine]:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    cluster.create(NAMESPACE, {"metadata": {"name": NS}})
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    engine = Engine(cluster, pm, clock=clock, options=EngineOptions(default_provider="reference"))
    engine.metrics = Metrics()
    engine.metrics.attach(engine)
    engine.start()
    for i in range(2):
        cluster.create(NODE, node_obj(i))
    for i in range(6):
        cluster.create(POD, pod_obj(f"web-{i}", node_obj(i % 2)["metadata"]["name"]))
    engine.run_until_idle(advance=5.0)
    yield engine


def test_the_exposition_passes_promtool(engine: Engine) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (Debian prometheus; make test installs it)")
    assert engine.metrics is not None
    engine.metrics.attach_leader("kube-system/podnet", lambda: True)
    engine.metrics.kube_request("list", "200", 0.002)
    limiter = engine.gateway.cloud_limiters["reference"]
    limiter.observe("AssignPrivateIpAddresses", 0.05)
    limiter.observe("AssignPrivateIpAddresses", 0.2, "throttled")
    text = engine.metrics.render().decode()
    checked = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                             capture_output=True, timeout=30)
    # promtool lints to stderr and exits 1 on any finding (units, _total, naming)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert {"podnet_leader", "workqueue_adds_total", "workqueue_depth",
            "workqueue_queue_duration_seconds_bucket", "workqueue_retries_total",
            "workqueue_work_duration_seconds_count", "workqueue_unfinished_work_seconds",
            "workqueue_longest_running_processor_seconds", "podnet_active_workers",
            "podnet_kube_api_requests_total", "podnet_kube_api_request_duration_seconds_sum",
            "podnet_cloud_api_request_duration_seconds_count", "podnet_cloud_api_errors_total",
            "process_cpu_seconds_total", "process_resident_memory_bytes",
            "podnet_provider_hook_duration_seconds_count", "podnet_transitions_total",
            "podnet_reconcile_duration_seconds_count"} <= names(text)


def test_work_queue_family_follows_what_the_queue_did(engine: Engine) -> None:
    assert engine.metrics is not None
    text = engine.metrics.render().decode()
    stats = engine.queue.stats()
    assert value(text, "workqueue_adds_total", name="podnet") == engine.queue.adds > 0
    # every key handed out waited once and was processed once: the two counts agree
    handed_out = value(text, "workqueue_queue_duration_seconds_count", name="podnet")
    assert handed_out == value(text, "workqueue_work_duration_seconds_count", name="podnet")
    assert handed_out == sum(engine.stats.reconciles.values())
    assert value(text, "workqueue_depth", name="podnet") == stats.depth == 0
    assert value(text, "workqueue_unfinished_work_seconds", name="podnet") == 0
    # no state is the sum of the others: the pool's states add up to its addresses
    for pool in engine.pools.all():
        states = {s: value(text, "podnet_pool_addresses", provider=pool.provider,
                           node=pool.node, state=s) for s in ("allocated", "idle", "suspect")}
        assert states["allocated"] + states["idle"] == pool.total()
        assert states["allocated"] == 3
    assert 'state="total"' not in text


def test_unfinished_work_grows_while_a_key_is_processed() -> None:
    queue: WorkQueue[str] = WorkQueue(SystemClock(), name="q")
    queue.add("a")
    queue.add("a")  # deduplicated: one add
    queue.add("b")
    assert queue.get_nowait() == "a"
    time.sleep(0.02)
    stats = queue.stats()
    assert stats.adds == 2 and stats.depth == 1
    assert stats.longest_running >= 0.02 and stats.unfinished_work >= stats.longest_running
    assert queue.processing() == 1
    queue.add_rate_limited("a")
    queue.done("a")
    stats = queue.stats()
    assert stats.retries == 1 and stats.unfinished_work == 0
    buckets, total = stats.work_duration
    assert buckets[-1] == ("+Inf", 1) and total >= 0.02
    # a bucket counts what is at most its bound: 0.02 s is not in 0.01's, is in 0.1's
    assert dict(buckets)["0.01"] == 0 and dict(buckets)["0.1"] == 1


def test_cloud_api_metrics_are_per_api_name_and_error_kind() -> None:
    limiter = CloudLimiter(RateLimit(rate=100, burst=10), SystemClock())
    limiter.observe("AssignPrivateIpAddresses", 0.03)
    limiter.observe("AssignPrivateIpAddresses", 0.5, "throttled")
    limiter.observe("DescribeNetworkInterfaces", 0.01)
    latency, errors = limiter.requests()
    assert {api: b[-1][1] for api, (b, _) in latency.items()} == {
        "AssignPrivateIpAddresses": 2, "DescribeNetworkInterfaces": 1}
    assert errors == {("AssignPrivateIpAddresses", "throttled"): 1}


def test_kube_requests_are_counted_by_verb_and_code(tmp_path: Path) -> None:
    metrics = Metrics()
    with ApiServer(InMemoryCluster()) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        with KubeCluster.from_kubeconfig(str(kubeconfig)) as kube:
            kube.on_request = metrics.kube_request
            kube.create(NODE, node_obj(0))
            kube.list(NODE)
            with pytest.raises(NotFound):
                kube.get(NODE, "nowhere")
            watch = kube.watch(NODE, "0", timeout_seconds=1)
            watch.stop()
    text = metrics.render().decode()
    for verb, code in (("create", "201"), ("list", "200"), ("get", "404"), ("watch", "200")):
        assert value(text, "podnet_kube_api_requests_total", verb=verb, code=code) == 1, verb
        assert value(text, "podnet_kube_api_request_duration_seconds_count", verb=verb) == 1


def test_unconfigured_ovn_sweep_is_no_error() -> None:
    ovn = pytest.importorskip("podnet.plugins.ovn.provider")
    provider = ovn.OvnProvider()
    assert provider.remote in (None, "")
    assert provider.podnet_sweep(provider="ovn", owners=(), remove=()) is None


def test_the_docs_list_every_metric(engine: Engine) -> None:
    assert engine.metrics is not None
    engine.metrics.attach_leader("kube-system/podnet", lambda: False)
    engine.metrics.kube_request("get", "200", 0.001)
    engine.gateway.cloud_limiters["reference"].observe("Describe", 0.01, "transient")
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    listed = set(re.findall(r"`([a-z_]+)`", readme.split("### Metrics", 1)[1]
                            .split("###", 1)[0]))
    # what the alerts and the dashboard read first: listed with them
    monitoring = (root / "docs" / "monitoring.md").read_text()
    listed |= set(re.findall(r"`([a-z_]+)`", monitoring.split("## Metrics", 1)[1]
                             .split("\n## ", 1)[0]))
    exposed = set()
    for family in text_string_to_metric_families(engine.metrics.render().decode()):
        # the parser names a counter without its _total; the exposition has it
        exposed.add(family.name + ("_total" if family.type == "counter" else ""))
    assert exposed - listed == set()
    assert {m for m in listed if m.startswith(("podnet_", "workqueue_"))} <= exposed


# --- records and agents, read from the caches ------------------------------------------------


def _record_counts(engine: Engine) -> dict[tuple[str, str], float]:
    """podnet_pod_networks by (phase, ready), as rendered."""
    assert engine.metrics is not None
    out: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(engine.metrics.render().decode()):
        if family.name == "podnet_pod_networks":
            for s in family.samples:
                out[s.labels["phase"], s.labels["ready"]] = s.value
    return out


def _recount(engine: Engine) -> dict[tuple[str, str], float]:
    """The same, counted from every record in the cache."""
    out: dict[tuple[str, str], float] = {}
    for pn in engine.caches.pod_networks.values():
        cond = ready_condition(pn)
        label = (str(pn.status.phase), cond.status.lower() if cond else "unknown")
        out[label] = out.get(label, 0) + 1
    return out


def test_pod_networks_are_counted_by_phase_and_readiness(engine: Engine) -> None:
    assert _record_counts(engine) == {("Routed", "true"): 6} == _recount(engine)
    # pods go: their records are released, then deleted; the tally follows each change
    for i in range(3):
        engine.cluster.delete(POD, f"web-{i}", NS_DEMO)
    engine.run_until_idle(advance=1.0)
    assert _record_counts(engine) == _recount(engine)
    engine.run_until_idle(advance=60.0)
    assert _record_counts(engine) == _recount(engine) == {("Routed", "true"): 3}


def test_the_longest_not_ready_record_is_timed_from_its_ready_condition(
        engine: Engine) -> None:
    clock = FakeClock()
    tally = PodNetworkTally(clock)
    routed = engine.caches.pod_networks.values()[:3]
    since = clock.now()

    def not_ready(pn: PodNetwork, phase: Phase, at: datetime) -> PodNetwork:
        return evolve(pn, status=evolve(pn.status, phase=phase, conditions=(Condition(
            type="Ready", status="False", reason="Waiting", last_transition_time=at),)))

    a, b, c = (not_ready(pn, Phase.PENDING, since + timedelta(seconds=i))
               for i, pn in enumerate(routed))
    for pn in (a, b, c):
        tally.changed("ADDED", pn.key, None, pn)
    counts, oldest, served = tally.snapshot()
    assert counts == {("Pending", "false"): 3} and oldest == since.timestamp()
    assert served == {pn.spec.node_name for pn in routed}
    # the oldest one becomes ready, the next one's pod goes: the third is the oldest
    tally.changed("MODIFIED", a.key, a, routed[0])
    tally.changed("MODIFIED", b.key, b, not_ready(b, Phase.RELEASING, since))
    counts, oldest, _ = tally.snapshot()
    assert counts == {("Routed", "true"): 1, ("Releasing", "false"): 1,
                      ("Pending", "false"): 1}
    assert oldest == since.timestamp() + 2
    for pn in (routed[0], not_ready(b, Phase.RELEASING, since), c):
        tally.changed("DELETED", pn.key, pn, None)
    assert tally.snapshot() == ({}, None, set())


def test_the_gauge_says_how_long_the_oldest_has_waited(engine: Engine) -> None:
    assert engine.metrics is not None
    assert isinstance(engine.clock, FakeClock)
    text = engine.metrics.render().decode()
    assert value(text, "podnet_pod_networks_longest_not_ready_seconds") == 0
    # a record someone says is not ready since now (the controller has no reason to
    # write it again: nothing changed that it reads)
    pn = engine.caches.pod_networks.values()[0]
    wire = engine.cluster.get(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)
    wire["status"]["conditions"] = [{"type": "Ready", "status": "False", "reason": "Test",
                                     "message": "", "lastTransitionTime":
                                     format_time(engine.clock.now())}]
    engine.cluster.update_status(POD_NETWORK, wire)
    engine.run_until_idle(advance=1.0)
    cond = ready_condition(engine.caches.pod_networks.values()[0])
    assert cond is not None and cond.status == "False"
    engine.clock.advance(400)
    text = engine.metrics.render().decode()
    # since its condition's lastTransitionTime (whole seconds on the wire)
    assert 400 <= value(text, "podnet_pod_networks_longest_not_ready_seconds") <= 401
    assert value(text, "podnet_pod_networks", phase="Routed", ready="false") == 1


def test_node_agents_are_live_stale_or_missing(engine: Engine) -> None:
    assert engine.metrics is not None
    assert isinstance(engine.clock, FakeClock)
    nodes = [node_obj(i)["metadata"]["name"] for i in range(2)]

    def states() -> dict[str, str]:
        assert engine.metrics is not None
        return {s.labels["node"]: s.labels["state"]
                for f in text_string_to_metric_families(engine.metrics.render().decode())
                if f.name == "podnet_node_agents" for s in f.samples}

    assert states() == {nodes[0]: "missing", nodes[1]: "missing"}
    report = AgentReport(node=nodes[0], holder="host-a/1", lease_seconds=30)
    engine.cluster.create(LEASE, agent_report_lease(
        report, "kube-system", format_micro_time(engine.clock.now())))
    engine.run_until_idle(advance=1.0)
    assert states() == {nodes[0]: "live", nodes[1]: "missing"}
    # an agent on a node podnet serves nothing on yet is live too
    elsewhere = AgentReport(node="node-idle", holder="host-b/1", lease_seconds=30)
    engine.cluster.create(LEASE, agent_report_lease(
        elsewhere, "kube-system", format_micro_time(engine.clock.now())))
    engine.run_until_idle(advance=1.0)
    assert states() == {nodes[0]: "live", nodes[1]: "missing", "node-idle": "live"}
    engine.clock.advance(30)
    # stale where podnet serves the node; where it serves nothing, no agent is waited for
    assert states() == {nodes[0]: "stale", nodes[1]: "missing"}
