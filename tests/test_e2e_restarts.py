"""End to end: what the controller's world does behind its back while it runs.

The API server restarts empty on the same address (the emulator keeps no state; an etcd
restore does the same to resourceVersions: they start over lower), and the BBC cloud
restarts empty mid-burst. The running controller must follow both without being
restarted itself, and say truthfully on /healthz whether it is still working.
"""

from __future__ import annotations

import shutil
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_e2e_run import Cluster, free_port, metrics, nodes, pods, routed, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


def health(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def metric(port: int, name: str) -> float:
    """The sum of every sample of ``name`` (all its labels)."""
    total = 0.0
    for line in metrics(port).splitlines():
        if line.startswith(name) and line[len(name)] in " {":
            total += float(line.rsplit(" ", 1)[1])
    return total


class Restartable(Cluster):
    """The emulator on a fixed port, so a restart comes back where clients look."""

    def restart_apiserver(self) -> None:
        port = self.url.rsplit(":", 1)[1]
        self.apiserver.send_signal(signal.SIGKILL)
        self.apiserver.wait(timeout=10)
        self.apiserver = self.spawn(["apiserver", "--port", port, "--kubeconfig-out",
                                     str(self.kubeconfig)], "apiserver-again")
        assert self.apiserver.stdout is not None
        assert self.apiserver.stdout.readline().strip() == self.url


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Restartable]:
    c = Restartable(tmp_path)
    try:
        yield c
    finally:
        c.close()


def test_apiserver_restarting_with_lower_versions_is_followed(cluster: Restartable) -> None:
    c = cluster
    port = free_port()
    config = c.tmp / "one.yaml"
    controller = c.controller("one", port)
    # the Lease goes with the emulator's state: this scenario is about the caches
    data = yaml.safe_load(config.read_text())
    data["leaderElection"] = {"enabled": False}
    config.write_text(yaml.safe_dump(data))
    controller.kill()
    controller.wait(timeout=10)
    controller = c.spawn(["run", "--kubeconfig", str(c.kubeconfig), "--provider", "reference",
                          "--config", str(config), "--identity", "one"], "one-unelected")
    first = [f"a-{i}" for i in range(10)]
    c.create(nodes(2))
    c.create(pods(first, 2))
    wait_for("10 routed", lambda: set(routed(c)) >= set(first))
    # a few hundred versions in: the new server's history starts over far below them
    assert int(c.get("podnetworks")[0]["metadata"]["resourceVersion"]) > 20

    c.restart_apiserver()
    c.create(nodes(2))  # the emulator forgot everything: re-created as they were
    again = [*first, "b-0", "b-1"]  # the same names, and two it never saw
    c.create(pods(again, 2))
    wait_for("the re-created pods routed", lambda: set(routed(c)) >= set(again), timeout=120)
    assert controller.poll() is None, "the controller exited"
    assert health(port, "/healthz") == 200
    wait_for("a clean podnet audit", lambda: c.audit("one") == 0, timeout=60)


BBC_INSTANCES = 4
CREDENTIALS = {"BCE_ACCESS_KEY_ID": "e2e", "BCE_SECRET_ACCESS_KEY": "e2e"}


def bbc_nodes() -> list[dict[str, Any]]:
    return [{"apiVersion": "v1", "kind": "Node",
             "metadata": {"name": f"bbc-{i}",
                          "labels": {"node.kubernetes.io/instance-type": "BBC"}},
             "spec": {"providerID": f"cce://i-{i:04d}"}} for i in range(BBC_INSTANCES)]


def bbc_pods(names: list[str]) -> list[dict[str, Any]]:
    docs = pods(names, BBC_INSTANCES)
    for i, doc in enumerate(docs):
        doc["spec"]["nodeName"] = f"bbc-{i % BBC_INSTANCES}"
    return docs


def test_bbc_cloud_restarting_empty_mid_burst_kills_no_worker(
        cluster: Restartable, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    for name, value in CREDENTIALS.items():  # the simulator checks none
        monkeypatch.setenv(name, value)
    sim_port, port = free_port(), free_port()
    sim_args = ["sim", "bbc", "--port", str(sim_port), "--instances", str(BBC_INSTANCES)]
    sim = c.spawn(sim_args, "sim-bbc")
    config = c.tmp / "bbc.yaml"
    config.write_text(yaml.safe_dump({
        "defaultProvider": "bbc",
        "providers": {"bbc": {"endpoint": f"127.0.0.1:{sim_port}",
                              "subnets": ["sbn-a", "sbn-b"], "maxIpsPerNode": 40}},
        "listen": f"127.0.0.1:{port}", "workers": 4,
        "leaderElection": {"namespace": "kube-system", "name": "podnet"},
    }))
    controller = c.spawn(["run", "--kubeconfig", str(c.kubeconfig), "--config", str(config)],
                         "bbc-controller")
    c.create(bbc_nodes())
    burst = [f"a-{i:03d}" for i in range(100)]
    c.create(bbc_pods(burst))
    wait_for("the burst under way", lambda: len(routed(c)) > 20, timeout=120)
    # the cloud forgets every address it handed out, mid-burst
    sim.send_signal(signal.SIGKILL)
    sim.wait(timeout=10)
    c.spawn(sim_args, "sim-bbc-again")
    reconciled = metric(port, "podnet_reconcile_duration_seconds_count")
    after = [f"b-{i:03d}" for i in range(12)]
    c.create(bbc_pods(after))
    # whatever becomes of the forgotten addresses (repairing them is another matter: a
    # pooled address the cloud forgot may go to a new pod and fail its verify), the
    # controller keeps working: every pod created after the restart gets its record,
    # reconciles go on, every worker is alive, and health says so
    wait_for("records for the pods created after the restart", lambda: set(after) <= {
        pn["spec"]["podName"] for pn in c.get("podnetworks")}, timeout=180)
    wait_for("reconciles going on",
             lambda: metric(port, "podnet_reconcile_duration_seconds_count") > reconciled + 50)
    assert controller.poll() is None, "the controller exited"
    assert metric(port, "podnet_worker_threads_alive") == 4
    assert health(port, "/healthz") == 200
    assert health(port, "/readyz") == 200
