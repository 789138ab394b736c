"""Why a pod's network is not ready, asked as an operator asks: ``podnet run`` serves the
API emulator as a process, and ``podnet status`` runs as a process against both, piped
(so not a terminal). Every mistake ends in one line on stderr and its exit status, never
a traceback."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnet.core.clock import format_time
from podnet.core.cluster.port import EVENT, LEASE, NAMESPACE, NODE, POD, POD_NETWORK
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster
from podnet.testing.waiting import wait_for

#: pods on the node no provider serves (the issue's count)
UNSERVED_PODS = 100
NS = "podnet"  # the controller's namespace: its Lease, the agents' reports


def podnet(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "podnet.app.cli", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)


def one_line(run: subprocess.CompletedProcess[str], code: int) -> str:
    assert run.returncode == code, (run.returncode, run.stdout[-1000:], run.stderr[-2000:])
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    return lines[0]


def pod(name: str, node: str | None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "app"},
            "spec": {**({"nodeName": node} if node else {}),
                     "containers": [{"name": "c", "image": "x"}], **spec}}


class Site:
    def __init__(self, store: InMemoryCluster, kubeconfig: Path, log: list[str]) -> None:
        self.store = store
        self.kubeconfig = kubeconfig
        self.log = log

    def status(self, *args: str) -> subprocess.CompletedProcess[str]:
        return podnet("status", "--kubeconfig", str(self.kubeconfig), "--agent-namespace", NS,
                      *args)

    def report(self, *args: str) -> dict[str, Any]:
        run = self.status("-o", "json", *args)
        assert run.returncode == 0 and run.stderr == "", run.stderr
        out: dict[str, Any] = json.loads(run.stdout)
        return out

    def pod_row(self, name: str) -> dict[str, Any]:
        [row] = [p for p in self.report("--pod", f"app/{name}")["pods"]]
        return row


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """A controller whose one rule serves nodes labelled pool=a, no defaultProvider: node
    ``served`` gets its pods' networks, node ``unserved`` none."""
    tmp = tmp_path_factory.mktemp("status-why")
    with ApiServer() as server:
        kubeconfig = tmp / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        store = server.cluster
        for ns in (NS, "app"):
            store.create(NAMESPACE, {"metadata": {"name": ns}})
        store.create(NODE, {"metadata": {"name": "served", "labels": {"pool": "a"}},
                            "spec": {"podCIDR": "10.1.0.0/24"}})
        store.create(NODE, {"metadata": {"name": "unserved", "labels": {"pool": "b"}}})
        store.create(POD, pod("web", "served"))
        store.create(POD, pod("pending", None))
        store.create(POD, pod("hostnet", "served", hostNetwork=True))
        store.create(POD, pod("orphan", "gone"))
        for i in range(UNSERVED_PODS):
            store.create(POD, pod(f"lost-{i}", "unserved"))
        config = tmp / "config.yaml"
        config.write_text(yaml.safe_dump({
            "nodeProviders": [{"provider": "reference", "nodeSelector": "pool=a"}],
            "providers": {"reference": {}}, "listen": "127.0.0.1:0",
            "leaderElection": {"namespace": NS}}))
        proc = subprocess.Popen(
            [sys.executable, "-m", "podnet.app.cli", "run", "--provider", "reference",
             "--config", str(config), "--kubeconfig", str(kubeconfig), "--identity", "one"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        log: list[str] = []
        assert proc.stderr is not None
        reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, "")),
                                  daemon=True)
        reader.start()
        try:
            wait_for("the served pod's record Routed", lambda: any(
                (pn.get("status") or {}).get("phase") == "Routed"
                for pn in store.list(POD_NETWORK, "app").items), timeout=120)
            wait_for("the controller's Warning on the unserved node", lambda: any(
                e.get("reason") == "NoProvider" for e in store.list(EVENT).items),
                timeout=120)
            wait_for("the controller's log line on it", lambda: any(
                "no provider serves it" in line for line in log), timeout=60)
            yield Site(store, kubeconfig, log)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            reader.join(timeout=10)


def test_a_node_no_provider_serves_is_said_once_with_an_event_and_a_log_line(
        site: Site) -> None:
    events = [e for e in site.store.list(EVENT).items if e.get("reason") == "NoProvider"]
    assert len(events) == 1
    [event] = events
    assert event["type"] == "Warning" and int(event.get("count") or 1) == 1
    assert event["involvedObject"] == {**event["involvedObject"], "kind": "Node",
                                       "name": "unserved"}
    assert "nodeProviders" in event["message"] and "defaultProvider" in event["message"]
    records = {pn["spec"]["podName"] for pn in site.store.list(POD_NETWORK).items}
    assert "lost-0" not in records and "web" in records
    said = [line for line in list(site.log) if "no provider serves it" in line]
    assert len(said) == 1 and "node unserved" in said[0], said
    assert not [line for line in list(site.log) if '"level": "error"' in line]


def test_status_explains_each_pod_without_a_record(site: Site) -> None:
    report = site.report()
    by_name = {p["name"]: p for p in report["pods"]}
    # the host-network pod is due no network: listed only when asked for by name
    assert "hostnet" not in by_name
    assert by_name["web"]["no_record"] is None and by_name["web"]["networks"]
    lost = by_name["lost-7"]["no_record"]
    assert lost["state"] == "problem" and lost["reason"] == "NoProvider"
    assert "no provider serves it" in lost["message"]
    assert sum(p["name"].startswith("lost-") for p in report["pods"]) == UNSERVED_PODS
    assert by_name["pending"]["no_record"]["state"] == "waiting"
    assert by_name["pending"]["no_record"]["reason"] == "NotScheduled"
    assert by_name["orphan"]["no_record"]["reason"] == "NodeMissing"
    assert "gone" in by_name["orphan"]["no_record"]["message"]

    hostnet = site.pod_row("hostnet")
    assert hostnet["no_record"]["state"] == "expected"
    assert hostnet["no_record"]["reason"] == "HostNetwork" and hostnet["agent"] is None


def test_status_names_the_leader_and_says_when_none_leads(site: Site) -> None:
    leader = site.report()["leader"]
    assert leader["holder"] == "one" and leader["state"] == "held"
    assert leader["lease"] == f"{NS}/podnet" and leader["problem"] is None

    missing = site.report("--leader-lease", "nosuch")
    assert missing["leader"]["state"] == "missing"
    assert "no Lease podnet/nosuch" in missing["leader"]["problem"]
    # no replica leads: a pod the controller would serve waits for nothing
    [web] = [p for p in missing["pods"] if p["name"] == "web"]
    assert web["no_record"] is None  # it has its record all the same
    site.store.create(POD, pod("late", "served"))
    try:
        row = [p for p in site.report("--leader-lease", "nosuch", "--pod", "app/late")["pods"]]
        # the running controller may have made its record by then: either is true
        assert row and (row[0]["networks"] or row[0]["no_record"]["reason"] == "NoLeader")
    finally:
        site.store.delete(POD, "late", "app")

    renewed = datetime.now(UTC) - timedelta(minutes=5)
    site.store.create(LEASE, {"metadata": {"name": "old", "namespace": NS},
                              "spec": {"holderIdentity": "gone-replica",
                                       "leaseDurationSeconds": 15,
                                       "renewTime": format_time(renewed)}})
    expired = site.report("--leader-lease", "old")["leader"]
    assert expired["state"] == "expired" and expired["holder"] == "gone-replica"
    assert "no replica leads" in expired["problem"]


def test_a_pod_whose_node_agent_is_not_live_says_so(site: Site) -> None:
    web = site.pod_row("web")
    assert web["node"] == "served"
    # no agent runs here: its node's agent row is missing, and the pod says it
    assert web["agent"]["state"] == "missing"
    table = site.status("--pod", "app/web")
    assert table.returncode == 0
    assert "node agent missing" in table.stdout


def test_pod_and_node_filters(site: Site) -> None:
    report = site.report("--pod", "app/web")
    assert [p["name"] for p in report["pods"]] == ["web"]
    assert [n["name"] for n in report["nodes"]] == ["served"]
    assert [a["node"] for a in report["agents"]] == ["served"]
    unserved = site.report("--node", "unserved")
    assert {p["name"] for p in unserved["pods"]} == {f"lost-{i}" for i in range(UNSERVED_PODS)}
    assert unserved["nodes"] == [] and unserved["agents"] == []


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("--node", "nosuch"), 1, "--node nosuch: no Node"),
    (("--pod", "app/nosuch"), 1, "--pod app/nosuch: no Pod or PodNetwork"),
    (("--pod", "nosuch"), 2, "expected NAMESPACE/NAME"),
    (("--pod", "app/web", "--namespace", "other"), 2, "is not in --namespace other"),
])
def test_a_name_status_does_not_know_is_one_line_and_non_zero(
        site: Site, args: tuple[str, ...], code: int, needle: str) -> None:
    for output in ("table", "json"):
        run = site.status("-o", output, *args)
        assert needle in one_line(run, code)
        assert run.stdout == ""


def test_piped_status_prints_plain_columns(site: Site) -> None:
    run = site.status()
    assert run.returncode == 0 and run.stderr == ""
    out = run.stdout
    assert not set("┏┃━│└") & set(out), out[:500]
    lines = out.splitlines()
    assert "# pod networks" in lines and "# leader" in lines
    [header] = [line for line in lines if line.startswith("POD ")]
    assert header.split()[:4] == ["POD", "NETWORK", "PROVIDER", "PHASE"]
    # one row a pod, every cell filled: awk finds the phase in column 4
    rows = [line.split() for line in lines if line.startswith("app/lost-")]
    assert len(rows) == UNSERVED_PODS and all(r[3] == "NoRecord" for r in rows)
    [web] = [line.split() for line in lines if line.startswith("app/web ")]
    assert web[1:4] == ["default", "reference", "Routed"]


def test_status_and_audit_against_an_api_server_that_does_not_answer(
        tmp_path: Path) -> None:
    with ApiServer() as server:  # a port that answered once, closed now
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
    config = tmp_path / "config.yaml"
    config.write_text("{}\n")
    for command in (["status"], ["audit", "--config", str(config), "--provider",
                                 "reference"]):
        run = podnet(*command, "--kubeconfig", str(kubeconfig))
        line = one_line(run, 2)
        assert "unreachable: connection refused" in line and server.url in line, line
        assert "MaxRetryError" not in line and "HTTPConnectionPool" not in line



@pytest.mark.parametrize(("change", "state", "reason"), [
    ({"status": {"phase": "Succeeded"}}, "expected", "Finished"),
    ({"metadata": {"deletionTimestamp": "2000-01-01T00:00:00Z"}}, "expected", "Terminating"),
    ({"metadata": {"deletionTimestamp": "2999-01-01T00:00:00Z"}}, "waiting", "NoRecordYet"),
    ({"spec": {"nodeName": "leaving"}}, "expected", "NodeLeaving"),
    ({"spec": {"nodeName": "unserved"}}, "problem", "NoProvider"),
    ({"spec": {"nodeName": "served-now"}}, "waiting", "NoRecordYet"),
])
def test_why_a_pod_has_no_record(change: dict[str, Any], state: str, reason: str) -> None:
    """Each answer in the controller's order; a wait is never called a problem, and a
    node's old NoProvider Warning is not believed once podnet serves the node."""
    from podnet.app.statuswhy import Scene, leader_row, why_no_record

    now = datetime.now(UTC)
    obj = pod("p", "served-now")
    for part, values in change.items():
        obj[part] = {**obj.get(part, {}), **values}
    nodes = {"served-now": {"metadata": {"name": "served-now"}},
             "unserved": {"metadata": {"name": "unserved"}},
             "leaving": {"metadata": {"name": "leaving",
                                      "deletionTimestamp": "2000-01-01T00:00:00Z"}}}
    warning = ("NoProvider", "node x: no provider serves it", None)
    scene = Scene(unserved={"unserved": warning, "served-now": warning},
                  lease={"spec": {"holderIdentity": "one", "leaseDurationSeconds": 15,
                                  "renewTime": format_time(now)}})
    leader = leader_row(scene, now)
    assert leader["state"] == "held"
    why = why_no_record(obj, nodes, scene, leader, {"served-now"}, now)
    assert (why["state"], why["reason"]) == (state, reason), why
