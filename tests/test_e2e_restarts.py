"""End to end: what the controller's world does behind its back while it runs.

The API server restarts empty on the same address (the emulator keeps no state; an etcd
restore does the same to resourceVersions: they start over lower), and the BBC cloud
restarts empty mid-burst. The running controller must follow both without being
restarted itself, and say truthfully on /healthz whether it is still working.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
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
                                     str(self.kubeconfig), "--kubelet-finish-after", "0"],
                                    "apiserver-again")
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
    # tens of versions in (nodes, pods, records, pools): the new server's history starts
    # over below what the controller's caches last saw
    assert max(int(pn["metadata"]["resourceVersion"]) for pn in c.get("podnetworks")) > 20

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


def bbc_secondaries(sim_port: int) -> dict[str, str]:
    """What the simulator really has: secondary address -> the node whose instance holds it
    (the cloud's own answer, ``GET /v1/vpcPort/{instance}``; the simulator checks no
    signature)."""
    out: dict[str, str] = {}
    for i in range(BBC_INSTANCES):
        url = f"http://127.0.0.1:{sim_port}/v1/vpcPort/i-{i:04d}"
        with urllib.request.urlopen(url, timeout=5) as r:
            port = json.loads(r.read())
        for ip in port["privateIpSet"]:
            if not ip["primary"]:
                out[ip["privateIpAddress"]] = f"bbc-{i}"
    return out


def events_by_reason(c: Restartable, reason: str) -> set[tuple[str, str]]:
    """(kind, name) of every object with an Event of that reason."""
    return {(ev["involvedObject"]["kind"], ev["involvedObject"]["name"])
            for ev in c.get("events") if ev.get("reason") == reason}


def test_bbc_cloud_restarting_empty_mid_burst_kills_no_worker(
        cluster: Restartable, monkeypatch: pytest.MonkeyPatch) -> None:
    c = cluster
    for name, value in CREDENTIALS.items():  # the simulator checks none
        monkeypatch.setenv(name, value)
    sim_port, port = free_port(), free_port()
    sim_args = ["sim", "bbc", "--port", str(sim_port), "--instances", str(BBC_INSTANCES)]
    sim = c.spawn(sim_args, "sim-bbc")
    config = c.tmp / "bbc.yaml"
    workers = 4
    config.write_text(yaml.safe_dump({
        "defaultProvider": "bbc",
        "providers": {"bbc": {"endpoint": f"127.0.0.1:{sim_port}",
                              "subnets": ["sbn-a", "sbn-b"], "maxIpsPerNode": 40}},
        # short periods, so the lost addresses are found (GC's inventory resync), routed
        # records verified, nodes checked and leaks swept within the waits below
        "policies": {"bbc": {"gcPeriod": 2, "verifyPeriod": 3, "nodeCheckPeriod": 2,
                             "leakedIpExpiry": 3}},
        "listen": f"127.0.0.1:{port}", "workers": workers,
        "leaderElection": {"namespace": "kube-system", "name": "podnet"},
    }))
    controller = c.spawn(["run", "--kubeconfig", str(c.kubeconfig), "--config", str(config)],
                         "bbc-controller")
    alive: list[float] = []  # podnet_worker_threads_alive at every look

    def watching(check: Callable[[], bool]) -> Callable[[], bool]:
        def look() -> bool:
            alive.append(metric(port, "podnet_worker_threads_alive"))
            return check()
        return look

    def serving() -> bool:
        try:
            return metric(port, "podnet_worker_threads_alive") == workers
        except OSError:
            return False  # not listening yet

    wait_for("the controller's workers up", serving, timeout=60)
    c.create(bbc_nodes())
    burst = [f"a-{i:03d}" for i in range(100)]
    c.create(bbc_pods(burst))
    wait_for("the burst under way", watching(lambda: len(routed(c)) > 20), timeout=120)
    before = routed(c)
    # the cloud forgets every address it handed out, mid-burst
    sim.send_signal(signal.SIGKILL)
    sim.wait(timeout=10)
    sim = c.spawn(sim_args, "sim-bbc-again")
    assert sim.stdout is not None
    assert sim.stdout.readline().strip().endswith(f":{sim_port}")  # serving again
    after = [f"b-{i:03d}" for i in range(12)]
    c.create(bbc_pods(after))
    everyone = set(burst) | set(after)
    node_of = {doc["metadata"]["name"]: doc["spec"]["nodeName"]
               for doc in bbc_pods(burst) + bbc_pods(after)}

    def unsettled() -> list[str]:
        """What keeps the cluster from the end state: empty once converged."""
        records = c.get("podnetworks")
        cloud = bbc_secondaries(sim_port)
        seen: dict[str, str] = {}
        out = [f"no record for {name}" for name in sorted(
            everyone - {pn["spec"]["podName"] for pn in records})]
        for pn in records:
            name, status = pn["spec"]["podName"], pn.get("status", {})
            ip = status.get("ip")
            if status.get("phase") != "Routed":
                ready = [x for x in status.get("conditions", ()) if x["type"] == "Ready"]
                out.append(f"{name} {status.get('phase')} {ip}: {ready}")
            elif ip in seen:
                out.append(f"{name} and {seen[ip]} both have {ip}")
            elif cloud.get(ip) != node_of[name]:
                out.append(f"{name} on {node_of[name]} has {ip}, the cloud has it on "
                           f"{cloud.get(ip)}")
            if ip:
                seen[ip] = name
        return out

    last: list[str] = []

    def converged() -> bool:
        last[:] = unsettled()
        return not last

    # every pod, old and new, ends Routed with an address of its own that the cloud
    # really has on the pod's node: the lost ones were taken back or replaced
    try:
        wait_for("every pod routed on an address its node has", watching(converged),
                 timeout=240)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {len(last)} unsettled: {last[:20]}") from None
    final = routed(c)
    record_of = {pn["spec"]["podName"]: pn["metadata"]["name"] for pn in c.get("podnetworks")}
    moved = {name for name in before if final[name] != before[name]}
    # Events leave from the controller's sender thread: soon after the writes, not with them
    said = {pair for name in moved for pair in (("Pod", name), ("PodNetwork", record_of[name]))}
    wait_for("an AddressLost Event on every re-addressed pod and its record",
             lambda: said <= events_by_reason(c, "AddressLost"), timeout=15)
    lost = events_by_reason(c, "AddressLost")
    assert lost, "no AddressLost Event: nothing was found lost"
    for name in before:
        # a pod whose address was lost was re-addressed, and said so on itself and on
        # its record; the cloud may have handed the same address to the same node again
        # before GC looked (its pool grew from an empty subnet), and then nothing was lost
        if ("Pod", name) in lost:
            assert ("PodNetwork", record_of[name]) in lost, name
        else:
            assert final[name] == before[name], f"{name} re-addressed without an Event"
    assert controller.poll() is None, "the controller exited"
    # the overflow class (a key failing past 1,024 times killed every worker): no worker
    # died at any look, and health says they run and the queue drains
    assert alive and set(alive) == {workers}, alive
    assert metric(port, "podnet_worker_threads_alive") == workers
    assert health(port, "/healthz") == 200
    assert health(port, "/readyz") == 200
    wait_for("a clean podnet audit", watching(lambda: bbc_audit(c, config) == 0), timeout=60)
    assert set(alive) == {workers}, alive


def bbc_audit(c: Restartable, config: Path) -> int:
    run = subprocess.run([sys.executable, "-m", "podnet.app.cli", "audit", "--kubeconfig",
                          str(c.kubeconfig), "--config", str(config), "--provider", "bbc"],
                         capture_output=True, text=True, timeout=60, check=False)
    (c.tmp / "audit.out").write_text(run.stdout + run.stderr)
    return run.returncode


def _sim_call(sim_port: int, method: str, path: str, body: dict[str, Any]) -> Any:
    """One request to the BBC simulator, by hand (it checks no signature)."""
    req = urllib.request.Request(f"http://127.0.0.1:{sim_port}{path}", method=method,
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read() or b"{}")


def _api_faults(c: Restartable, spec: dict[str, Any]) -> None:
    req = urllib.request.Request(f"{c.url}/_podnet/faults", method="POST",
                                 data=json.dumps(spec).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as r:
        r.read()


def test_a_bbc_node_registered_again_while_podnet_is_down_then_deleted_leaks_nothing(
        cluster: Restartable, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-registration gap, as separate processes: the controller down, the Node
    deleted and registered again (its record marked by the garbage collector), every
    NodeNetwork create failing; the controller started, killed again, the Node deleted.
    The old controller let the record go at once and never made a new one: the
    instance kept its secondary addresses, no record named them, the next controller
    never gave them back and the audit saw nothing. Now the record is kept until the
    node leaves, everything goes back, and an address planted on that instance by hand
    afterwards is what the audit reports."""
    c = cluster
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    sim_port = free_port()
    sim = c.spawn(["sim", "bbc", "--port", str(sim_port), "--instances", "1"], "sim-bbc")
    assert sim.stdout is not None and sim.stdout.readline().strip().endswith(f":{sim_port}")
    config = c.tmp / "bbc.yaml"
    config.write_text(yaml.safe_dump({
        "defaultProvider": "bbc",
        "providers": {"bbc": {"endpoint": f"127.0.0.1:{sim_port}", "subnets": ["sbn-a"]}},
        "policies": {"bbc": {"minIdle": 4, "maxIdle": 8, "gcPeriod": 2}},
        "listen": f"127.0.0.1:{free_port()}",
        "leaderElection": {"enabled": False},  # one controller at a time, killed each time
    }))

    def controller(name: str) -> subprocess.Popen[str]:
        return c.spawn(["run", "--kubeconfig", str(c.kubeconfig), "--config", str(config)],
                       name)

    def kill(proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)

    def secondaries() -> set[str]:
        return set(bbc_secondaries_of(sim_port, "i-0000"))

    def recorded() -> set[str]:
        return {ip["address"] for nn in c.get("nodenetworks")
                for itf in nn.get("status", {}).get("interfaces", ())
                for ip in itf.get("ips", ())}

    node = bbc_nodes()[0]
    first = controller("bbc-first")
    c.create([node])
    wait_for("the node's pool grown and recorded",
             lambda: len(secondaries()) >= 4 and recorded() == secondaries(), timeout=60)
    pool = secondaries()
    kill(first)

    c.kubectl("delete", "node", "bbc-0", "--wait=true")
    c.create([node])  # the same machine, registered again: a new uid
    (nn,) = c.get("nodenetworks")
    assert nn["metadata"].get("deletionTimestamp"), "the garbage collector marked it"
    _api_faults(c, {"failNext": {"op": "create", "resource": "nodenetworks", "code": 500,
                                 "times": 100_000}})
    c.create(bbc_pods(["p-0"])[:1])
    second = controller("bbc-second")
    # either the old record was let go (and no new one can be made), or the pool serves
    wait_for("the controller dealt with the node",
             lambda: not c.get("nodenetworks") or "p-0" in routed(c), timeout=60)
    kill(second)

    c.kubectl("delete", "pod", "p-0", "--wait=false")
    c.kubectl("delete", "node", "bbc-0", "--wait=true")
    _api_faults(c, {"clear": True})
    controller("bbc-third")
    try:
        wait_for("the node's addresses given back and its records gone",
                 lambda: not secondaries() and not c.get("nodenetworks")
                 and not c.get("podnetworks"), timeout=60)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: left on the instance {sorted(secondaries())} "
                             f"(the pool was {sorted(pool)})") from None
    wait_for("a clean podnet audit", lambda: bbc_audit(c, config) == 0, timeout=60)

    # what the old controller left, planted by hand: the audit finds it
    planted = _sim_call(sim_port, "PUT", "/v1/instance/batchAddIp",
                        {"instanceId": "i-0000", "secondaryPrivateIpAddressCount": 2})
    ips = planted["privateIps"]
    try:
        wait_for("the audit finding the planted addresses",
                 lambda: bbc_audit(c, config) == 1, timeout=60)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: the instance holds {sorted(secondaries())}, planted {ips}, records "
            f"{c.get('nodenetworks')}; the last audit printed:\n"
            f"{(c.tmp / 'audit.out').read_text()}") from None
    out = (c.tmp / "audit.out").read_text()
    assert "unrecorded" in out and all(ip in out for ip in ips), out
    _sim_call(sim_port, "PUT", "/v1/instance/batchDelIp",
              {"instanceId": "i-0000", "privateIps": ips})
    assert bbc_audit(c, config) == 0


def bbc_secondaries_of(sim_port: int, instance: str) -> list[str]:
    with urllib.request.urlopen(f"http://127.0.0.1:{sim_port}/v1/vpcPort/{instance}",
                                timeout=5) as r:
        port = json.loads(r.read())
    return [ip["privateIpAddress"] for ip in port["privateIpSet"] if not ip["primary"]]
