"""The chart's monitoring (deploy/chart/monitoring/): the alert rules pass their promtool
unit tests, every rule and dashboard query parses and names only metrics that a real
controller (``podnet run`` against the emulator) and a real node agent (``podnet node``)
serve, and the chart renders both only when asked."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client as k8s_client
from prometheus_client.parser import text_string_to_metric_families

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import NAMESPACE, NODE, POD
from podnet.linux.netns import add_netns, del_netns, run_in_netns
from podnet.sim.apiserver import ApiServer
from podnet.testing.netns import netns_unavailable
from podnet.testing.waiting import wait_for

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "chart"
RULES = CHART / "monitoring" / "rules.yaml"
DASHBOARD = CHART / "monitoring" / "dashboard.json"
RULE_TESTS = CHART / "monitoring" / "rules-test.yaml"
#: what a metric's name starts with (no label or function name does)
METRIC = re.compile(r"\b(?:podnet|workqueue|process)_[a-z0-9_]+\b")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is not installed (Debian prometheus; make test installs it)")
    return found


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dash["panels"] for t in p.get("targets", ())]


# --- rules -------------------------------------------------------------------------------


def test_the_rules_pass_their_unit_tests() -> None:
    done = subprocess.run([promtool(), "test", "rules", str(RULE_TESTS)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_the_issue_asks_for_is_there_and_tested() -> None:
    alerts = {r["alert"] for r in rules()}
    assert alerts == {"PodnetControllerDown", "PodnetNoLeader", "PodnetWorkersStalled",
                      "PodnetPodsWithoutNetwork", "PodnetPoolExhausted",
                      "PodnetCloudThrottled", "PodnetAgentMissing", "PodnetAgentNotReady"}
    # each fires in a test and is silent in another
    fired: set[str] = set()
    silent: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case.get("alert_rule_test", ()):
            (fired if check.get("exp_alerts") else silent).add(check["alertname"])
    assert fired == alerts and silent == alerts
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]


def test_every_query_parses(tmp_path: Path) -> None:
    """The dashboard's queries, as recording rules promtool checks (PromQL's own parser)."""
    queries = dashboard_queries()
    assert len(queries) > 20
    as_rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"podnet:dashboard_query_{i}", "expr": q} for i, q in enumerate(queries)]}]}
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump(as_rules))
    for checked in (path, RULES):
        done = subprocess.run([promtool(), "check", "rules", str(checked)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr


# --- the metrics the queries name, as real processes serve them ----------------------------


def series_names(text: str) -> set[str]:
    """The names of the series an exposition's families give (a counter's ``_total``, a
    histogram's ``_bucket``, ``_count``, ``_sum``), samples or not."""
    out = set()
    for family in text_string_to_metric_families(text):
        if family.type == "counter":
            out.add(family.name + "_total")
        elif family.type == "histogram":
            out.update(family.name + s for s in ("_bucket", "_count", "_sum"))
        else:
            out.add(family.name)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Processes:
    """``podnet run`` and ``podnet node`` in a namespace of their own, with the emulator."""

    def __init__(self, tmp: Path, name: str, path: str, server: ApiServer) -> None:
        self.tmp, self.name, self.path = tmp, name, path
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")

    def spawn(self, label: str, *args: str) -> None:
        log = open(self.tmp / f"{label}.log", "ab")  # noqa: SIM115 - lives with the process
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", self.name, sys.executable, "-m", "podnet.app.cli", *args],
            stdout=subprocess.DEVNULL, stderr=log))

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _get(path: str, url: str) -> str:
    def fetch() -> str:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return str(answer.read().decode())
    return run_in_netns(path, fetch)


def _get_unix(socket_path: Path, route: str) -> str:
    import http.client

    class Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(10)
            self.sock.connect(str(socket_path))

    conn = Unix("localhost", timeout=10)
    try:
        conn.request("GET", route)
        return conn.getresponse().read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(the controller's /metrics, an agent's /metrics): both processes run, one node's
    agent reports, the other node has none, and pods got records."""
    if (why := netns_unavailable()) is not None:
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("monitoring")
    name = f"pnm-{uuid.uuid4().hex[:8]}"
    path = add_netns(name)
    server: ApiServer | None = None
    procs: Processes | None = None
    try:
        server = run_in_netns(path, lambda: ApiServer(bookmark_interval=0.2).start())
        kube = KubeCluster(k8s_client.ApiClient(k8s_client.Configuration(host=server.url)))
        nodes = [node_obj(0)["metadata"]["name"], node_obj(1)["metadata"]["name"]]

        def setup() -> None:
            kube.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
            for i in range(2):
                kube.create(NODE, node_obj(i))
            for i in range(4):
                kube.create(POD, pod_obj(f"web-{i}", nodes[i % 2]))

        run_in_netns(path, setup)
        procs = Processes(tmp, name, path, server)
        port = _free_port()
        config = tmp / "podnet.yaml"
        config.write_text(yaml.safe_dump({
            "defaultProvider": "reference",
            "providers": {"reference": {"state_file": str(tmp / "cloud.json")}},
            "listen": f"127.0.0.1:{port}",
            "leaderElection": {"namespace": "kube-system", "name": "podnet",
                               "leaseDurationSeconds": 6, "renewDeadlineSeconds": 4,
                               "retryPeriodSeconds": 1}}))
        procs.spawn("controller", "run", "--kubeconfig", str(procs.kubeconfig), "--provider",
                    "reference", "--config", str(config), "--identity", "mon-test")
        health = tmp / "health.sock"
        procs.spawn("agent", "node", "--node", nodes[0], "--kubeconfig", str(procs.kubeconfig),
                    "--provider", "reference", "--socket", str(tmp / "run" / "agent.sock"),
                    "--health-listen", f"unix:{health}")
        url = f"http://127.0.0.1:{port}/metrics"

        def controller() -> str:
            try:
                return _get(path, url)
            except OSError:
                return ""

        def states() -> dict[str, str]:
            return {s.labels["node"]: s.labels["state"]
                    for f in text_string_to_metric_families(controller())
                    if f.name == "podnet_node_agents" for s in f.samples}

        def agent_ready() -> bool:
            try:
                return "podnet_agent_ready 1.0" in _get_unix(health, "/metrics")
            except OSError:
                return False

        wait_for("the agent ready", agent_ready, 120)
        wait_for("the agents' states", lambda: states() == {nodes[0]: "live",
                                                             nodes[1]: "missing"}, 120)
        wait_for("4 records counted", lambda: sum(
            s.value for f in text_string_to_metric_families(controller())
            if f.name == "podnet_pod_networks" for s in f.samples) == 4, 120)
        yield controller(), _get_unix(health, "/metrics")
    finally:
        if procs is not None:
            procs.close()
        if server is not None:
            server.stop()
        del_netns(name)


def test_every_query_names_only_metrics_the_processes_serve(served: tuple[str, str]) -> None:
    controller, agent = served
    serves = series_names(controller) | series_names(agent)
    assert {"podnet_build_info", "podnet_pod_networks", "podnet_node_agents",
            "podnet_pod_networks_longest_not_ready_seconds",
            "podnet_agent_ready"} <= serves
    named = {}
    for rule in rules():
        for metric in METRIC.findall(rule["expr"]):
            named.setdefault(metric, f"alert {rule['alert']}")
        for text in rule["annotations"].values():
            for metric in METRIC.findall(text):
                named.setdefault(metric, f"alert {rule['alert']}'s annotations")
    for query in dashboard_queries():
        for metric in METRIC.findall(query):
            named.setdefault(metric, f"dashboard query {query}")
    unknown = {m: where for m, where in named.items() if m not in serves}
    assert unknown == {}
    # the alerts watch the controller's workers, records, pools, the cloud and the agents
    assert {"podnet_leader", "workqueue_depth", "podnet_pool_capacity_addresses",
            "podnet_cloud_api_errors_total", "podnet_node_agents"} <= set(named)


def test_the_controller_serves_its_version_and_its_records(served: tuple[str, str]) -> None:
    controller, _ = served
    families = {f.name: f for f in text_string_to_metric_families(controller)}
    (build,) = families["podnet_build_info"].samples
    assert build.value == 1 and build.labels["version"] and build.labels["python"]
    records = {(s.labels["phase"], s.labels["ready"]): s.value
               for s in families["podnet_pod_networks"].samples}
    assert sum(records.values()) == 4 and all(v > 0 for v in records.values())


# --- the chart ------------------------------------------------------------------------------


def render(values: dict[str, Any] | None) -> list[dict[str, Any]]:
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    out = chart.render(values, name="podnet", namespace="kube-system", is_install=True)
    # the manifests only: NOTES.txt is text for the installer
    return [d for path, text in out.items() if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]


def test_the_chart_leaves_monitoring_out_by_default() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in render(None)}
    assert ("PrometheusRule", "podnet") not in kinds
    assert ("ConfigMap", "podnet-dashboard") not in kinds


ENABLED = {"monitoring": {
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}},
    "dashboard": {"enabled": True}}}


def test_the_chart_lints_clean_with_monitoring_on() -> None:
    import helm_python

    report = helm_python.lint(str(CHART), ENABLED, strict=True, kube_version="v1.30.0")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == []


def test_the_chart_renders_the_rules_and_the_dashboard_when_asked() -> None:
    docs = render(ENABLED)
    (rule,) = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["metadata"]["namespace"] == "kube-system"
    # the very rules promtool tests, templates of their annotations untouched
    assert rule["spec"] == yaml.safe_load(RULES.read_text())
    (board,) = [d for d in docs if d["kind"] == "ConfigMap"
                and d["metadata"]["name"] == "podnet-dashboard"]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    kubernetes_validate.validate(board, "1.30", strict=True)
    assert json.loads(board["data"]["podnet.json"]) == json.loads(DASHBOARD.read_text())
