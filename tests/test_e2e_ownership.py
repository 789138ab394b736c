"""Address ownership end to end (issue 13, items 1, 6 and 8), as separate processes.

``podnet apiserver``, a cloud simulator (``podnet sim ecs``) or the reference cloud, and
``podnet run``; kubectl creates, patches and deletes what a person would; ``podnet audit``
exits 0 after every scenario. tests/test_ownership.py holds the in-process versions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_e2e_mixed import CREDENTIALS
from test_e2e_run import Cluster, free_port, nodes, pods, routed, wait_for

from podnet.core.config import load_config
from podnet.core.objects import node_info
from podnet.hookspecs.types import NodeContext

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]

#: the ECS simulator's one vSwitch (its default): gateway .1, network .0, broadcast .255.255
VSWITCH = "vsw-sim-1"
VSWITCH_CIDR = "10.0.0.0/16"
GATEWAY = "10.0.0.1"


class Ecs(Cluster):
    """The API emulator, ``podnet sim ecs`` on a fixed port, and one ECS-only controller
    whose GC, verify and node checks run every few seconds."""

    def __init__(self, tmp: Path, instances: int = 2) -> None:
        super().__init__(tmp)
        self.instances = instances
        self.sim_port = free_port()
        self.sim: subprocess.Popen[str] | None = None
        self.start_sim()
        self.config_path = tmp / "ecs.yaml"
        self.config_path.write_text(yaml.safe_dump({
            "defaultProvider": "ecs",
            "providers": {"ecs": {"endpoint": f"127.0.0.1:{self.sim_port}", "protocol": "http",
                                  "region": "cn-hangzhou", "vswitches": [VSWITCH],
                                  "security_groups": ["sg-sim-1"]}},
            "policies": {"ecs": {"minIdle": 0, "maxIdle": 2, "gcPeriod": 2, "verifyPeriod": 3,
                                 "nodeCheckPeriod": 3, "leakedIpExpiry": 4,
                                 "reuseCooldown": 0}},
            "workers": 4,
            "listen": f"127.0.0.1:{free_port()}",
            "leaderElection": {"namespace": "kube-system", "name": "podnet"},
        }))

    def start_sim(self) -> None:
        """A simulator that knows only its instances (each with its primary ENI)."""
        self.sim = self.spawn(["sim", "ecs", "--port", str(self.sim_port), "--instances",
                               str(self.instances)], "sim-ecs")
        assert self.sim.stdout is not None
        url = self.sim.stdout.readline().strip()
        assert url.endswith(f":{self.sim_port}"), url

    def kill_sim(self) -> None:
        assert self.sim is not None
        self.sim.send_signal(signal.SIGKILL)
        self.sim.wait(timeout=10)

    def run_controller(self) -> subprocess.Popen[str]:
        log = open(self.tmp / "controller.log", "a")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen([sys.executable, "-m", "podnet.app.cli", "run", "--kubeconfig",
                                 str(self.kubeconfig), "--config", str(self.config_path),
                                 "--identity", "ownership"],
                                stdout=subprocess.DEVNULL, stderr=log, text=True,
                                env={**os.environ, **CREDENTIALS})
        self.procs.append(proc)
        return proc

    def ecs_audit(self) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "podnet.app.cli", "audit", "--kubeconfig",
                               str(self.kubeconfig), "--config", str(self.config_path), "-o",
                               "json"], capture_output=True, text=True, timeout=60,
                              check=False, env={**os.environ, **CREDENTIALS})

    def ecs_nodes(self, n: int) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Node",
                 "metadata": {"name": f"ecs-{i}",
                              "labels": {"node.kubernetes.io/instance-type": "ecs.g7.large"}},
                 "spec": {"providerID": f"cn-hangzhou.i-ecs{i:04d}"}} for i in range(n)]

    def cloud_addresses(self) -> dict[str, str]:
        """Every secondary address the simulator reports -> its node, read through the
        provider's own inventory (the official SDK, over HTTP)."""
        from podnet.plugins.ecs.provider import EcsProvider

        os.environ.update(CREDENTIALS)
        ecs = EcsProvider()
        ecs.podnet_configure("ecs", load_config(self.config_path).providers["ecs"])
        out: dict[str, str] = {}
        for raw in json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]:
            node = node_info(raw)
            inventory = ecs.podnet_node_inventory(provider="ecs",
                                                  node=NodeContext(node=node, network=None))
            for itf in inventory.interfaces:
                for ip in itf.ips:
                    out[ip] = node.name
        return out


@pytest.fixture
def ecs(tmp_path: Path) -> Iterator[Ecs]:
    c = Ecs(tmp_path)
    try:
        yield c
    finally:
        c.close()


def pod(name: str, node: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "annotations": annotations or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}}


def records(c: Cluster) -> dict[str, dict[str, Any]]:
    """pod name -> its (default network's) PodNetwork."""
    return {pn["spec"]["podName"]: pn for pn in c.get("podnetworks")}


def phase(pn: dict[str, Any]) -> str | None:
    return pn.get("status", {}).get("phase")


def ready(pn: dict[str, Any]) -> dict[str, Any]:
    for condition in pn.get("status", {}).get("conditions", ()):
        if condition["type"] == "Ready":
            return dict(condition)
    return {}


def events(c: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in c.get("events") if e.get("reason") == reason]


def settle(c: Cluster, what: str, check: Callable[[], bool], timeout: float) -> None:
    """wait_for, saying on a timeout where every record stands."""
    try:
        wait_for(what, check, timeout=timeout)
    except AssertionError as exc:
        where = {name: (phase(pn), pn.get("status", {}).get("ip"), ready(pn).get("reason"),
                        ready(pn).get("message")) for name, pn in sorted(records(c).items())}
        raise AssertionError(f"{exc}; records: {where}") from None


def reference_audit(c: Cluster) -> subprocess.CompletedProcess[str]:
    """``podnet audit`` with the reference controller's config (``Cluster.controller``)."""
    return subprocess.run([sys.executable, "-m", "podnet.app.cli", "audit", "--kubeconfig",
                           str(c.kubeconfig), "--config", str(c.tmp / "one.yaml"), "--provider",
                           "reference", "-o", "json"], capture_output=True, text=True,
                          timeout=60, check=False)


def assert_clean_audit(audit: Callable[[], subprocess.CompletedProcess[str]],
                       timeout: float = 60.0) -> None:
    """``podnet audit`` exits 0 within ``timeout`` (pool writes may trail a change)."""
    last: list[subprocess.CompletedProcess[str]] = []

    def clean() -> bool:
        last[:] = [audit()]
        return last[0].returncode == 0

    try:
        wait_for("a clean podnet audit", clean, timeout=timeout)
    except AssertionError:
        raise AssertionError(f"podnet audit: {last[0].returncode} {last[0].stdout}"
                             f"{last[0].stderr}") from None


def assert_no_double(c: Cluster) -> None:
    ips = [pn["status"]["ip"] for pn in c.get("podnetworks") if pn.get("status", {}).get("ip")]
    assert len(ips) == len(set(ips)), f"an address is recorded twice: {sorted(ips)}"


# --- 1: two pods, one static address ------------------------------------------------------


def test_two_pods_created_together_with_one_static_address_get_it_once(ecs: Ecs) -> None:
    c = ecs
    c.run_controller()
    c.create(c.ecs_nodes(1))
    # a cold node: its first ENI is made for these two, filled to a batch (9 of the 10
    # addresses an ecs.g7.large ENI holds); trimmed to maxIdle, it has room for the one
    # address named (the pods failing to fit it must not keep the trim from happening)
    wanted = "10.0.7.77"  # inside the vSwitch, neither its network, broadcast nor gateway
    # one request: both pods reach the controller in one burst, for several workers
    c.create([pod(name, "ecs-0", {"podnet.io/ip-address": wanted})
              for name in ("left", "right")])

    def decided() -> bool:
        pns = {name: pn for name, pn in records(c).items() if name in ("left", "right")}
        return (len(pns) == 2 and any(phase(pn) == "Routed" for pn in pns.values())
                and any(wanted in ready(pn).get("message", "") and phase(pn) != "Routed"
                        for pn in pns.values()))

    settle(c, "one of the two pods routed with the address, the other told why", decided,
           timeout=90)
    pns = {name: pn for name, pn in records(c).items() if name in ("left", "right")}
    holders = [pn for pn in pns.values() if pn.get("status", {}).get("ip") == wanted]
    assert len(holders) == 1, [pn["metadata"]["name"] for pn in holders]
    (winner,) = holders
    assert phase(winner) == "Routed"
    (loser,) = [pn for pn in pns.values() if pn is not winner]
    assert phase(loser) != "Routed"
    message = ready(loser)["message"]
    assert wanted in message and winner["metadata"]["name"] in message, message
    assert list(c.cloud_addresses()).count(wanted) == 1
    assert c.cloud_addresses()[wanted] == "ecs-0"

    # the vSwitch's gateway is no pod's address: refused, and nothing asked of the cloud
    before = c.cloud_addresses()
    c.create([pod("gw", "ecs-0", {"podnet.io/ip-address": GATEWAY})])
    settle(c, "the gateway request refused",
           lambda: ready(records(c).get("gw", {})).get("reason") == "InvalidRequest",
           timeout=60)
    gw = records(c)["gw"]
    assert phase(gw) != "Routed" and not gw.get("status", {}).get("ip")
    assert "podnet.io/ip-address" in ready(gw)["message"]
    assert GATEWAY not in c.cloud_addresses()
    assert c.cloud_addresses() == before, "the refused request changed the cloud"
    assert_no_double(c)
    assert_clean_audit(lambda: c.ecs_audit())


# --- 6: a cloud that forgets -------------------------------------------------------------


def test_a_cloud_restarted_empty_gets_every_routed_pod_its_address_again(ecs: Ecs) -> None:
    c = ecs
    c.run_controller()
    c.create(c.ecs_nodes(2))
    names = [f"web-{i:02d}" for i in range(20)]
    c.create([pod(name, f"ecs-{i % 2}") for i, name in enumerate(names)])
    settle(c, "20 routed pods", lambda: set(routed(c)) >= set(names), timeout=120)
    before = routed(c)
    assert set(before.values()) <= set(c.cloud_addresses())
    assert_clean_audit(lambda: c.ecs_audit())

    # the cloud forgets every secondary ENI and address; the controller runs on
    c.kill_sim()
    c.start_sim()
    assert not set(before.values()) & set(c.cloud_addresses())

    def converged() -> bool:
        now = routed(c)
        if set(now) != set(names) or len(set(now.values())) != len(names):
            return False
        return set(now.values()) <= set(c.cloud_addresses())

    settle(c, "every pod routed again on an address the cloud has", converged, timeout=180)
    after = routed(c)
    cloud = c.cloud_addresses()
    for i, name in enumerate(names):
        assert cloud[after[name]] == f"ecs-{i % 2}", name
    def told() -> set[str]:
        return {e["involvedObject"]["name"] for e in events(c, "AddressLost")
                if e["involvedObject"]["kind"] == "Pod"}

    # Events leave from the controller's sender thread: soon after the writes, not with them
    try:
        wait_for("an AddressLost Event on every pod", lambda: told() == set(names), timeout=15)
    except AssertionError:
        raise AssertionError(sorted(set(names) - told())) from None
    assert_no_double(c)
    assert_clean_audit(lambda: c.ecs_audit())


# --- 8: edits behind podnet's back (the reference cloud) ----------------------------------


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        c.controller("one", free_port())
        yield c
    finally:
        c.close()


def _patch_status_ip(c: Cluster, pn: dict[str, Any], ip: str) -> None:
    c.kubectl("patch", "podnetwork", pn["metadata"]["name"], "-n", pn["metadata"]["namespace"],
              "--subresource=status", "--type=merge", "-p", json.dumps({"status": {"ip": ip}}))


def test_a_status_ip_patched_to_another_pods_address_is_undone(reference: Cluster) -> None:
    c = reference
    c.create(nodes(1))
    c.create(pods(["a", "b"], 1))
    settle(c, "2 routed", lambda: set(routed(c)) == {"a", "b"}, timeout=60)
    first = records(c)
    own_a, own_b = first["a"]["status"]["ip"], first["b"]["status"]["ip"]
    _patch_status_ip(c, first["b"], own_a)

    def undone() -> bool:
        now = records(c)
        return (phase(now["a"]) == phase(now["b"]) == "Routed"
                and now["a"]["status"]["ip"] == own_a and now["b"]["status"]["ip"] == own_b)

    settle(c, "b given its own address back", undone, timeout=60)
    def involved() -> set[tuple[str, str]]:
        return {(e["involvedObject"]["kind"], e["involvedObject"]["name"])
                for e in events(c, "AddressConflict")}

    names = {("PodNetwork", first[p]["metadata"]["name"]) for p in ("a", "b")} | {("Pod", "b")}
    # Events leave from the controller's sender thread: soon after the writes, not with them
    try:
        wait_for("AddressConflict on both records and on b", lambda: names <= involved(),
                 timeout=15)
    except AssertionError:
        raise AssertionError(involved()) from None
    assert_no_double(c)
    assert_clean_audit(lambda: reference_audit(c))


def test_a_record_whose_finalizer_was_removed_by_hand_gives_its_address_back(
        reference: Cluster) -> None:
    c = reference
    c.create(nodes(1))
    c.create(pods(["web"], 1))
    settle(c, "web routed", lambda: "web" in routed(c), timeout=60)
    pn = records(c)["web"]
    address = pn["status"]["ip"]
    c.kubectl("patch", "podnetwork", pn["metadata"]["name"], "-n", pn["metadata"]["namespace"],
              "--type=merge", "-p", json.dumps({"metadata": {"finalizers": None}}))
    # the controller may put its finalizer back before the pod goes (then the record is
    # released the usual way) or not (then it gives the address back when it sees the
    # record gone): the address must come back either way
    c.kubectl("delete", "pod", "web")
    settle(c, "the record gone", lambda: "web" not in records(c), timeout=60)

    # later pods, one at a time, until one is handed the address again (the pool has few)
    later: list[str] = []
    for i in range(16):
        name = f"later-{i:02d}"
        c.create(pods([name], 1))
        later.append(name)
        settle(c, f"{name} routed", lambda n=name: n in routed(c), timeout=60)
        if routed(c)[name] == address:
            break
    else:
        pytest.fail(f"{address} was never handed out again: {routed(c)}")
    assert_no_double(c)
    assert_clean_audit(lambda: reference_audit(c))


def test_a_running_pods_deleted_record_is_made_again_with_its_address(
        reference: Cluster) -> None:
    c = reference
    c.create(nodes(1))
    c.create(pods(["web", "other"], 1))
    settle(c, "2 routed", lambda: set(routed(c)) == {"web", "other"}, timeout=60)
    pn = records(c)["web"]
    c.kubectl("delete", "podnetwork", pn["metadata"]["name"], "-n",
              pn["metadata"]["namespace"], "--wait=false")

    def remade() -> bool:
        now = records(c).get("web")
        return (now is not None and now["metadata"]["uid"] != pn["metadata"]["uid"]
                and phase(now) == "Routed")

    settle(c, "a new record for web, routed", remade, timeout=60)
    again = records(c)["web"]
    assert again["status"]["ip"] == pn["status"]["ip"]
    # Events leave from the controller's sender thread: soon after the writes, not with them
    wait_for("a PodNetworkDeleted Event on the pod", lambda: any(
        (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == ("Pod", "web")
        for e in events(c, "PodNetworkDeleted")), timeout=15)
    assert_no_double(c)
    assert_clean_audit(lambda: reference_audit(c))
