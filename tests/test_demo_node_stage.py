"""The demo's stage "on a node": two pods on a node served by the reference provider get
their interfaces from the node agent through the real ``podnet-cni ADD`` and ping each
other; then a NetworkPolicy (default deny, one allowed pair) lets pod-a connect to pod-b
and drops pod-b's connect to pod-a, on every dataplane's stage; afterwards nothing of the
stage is left on the host.

Needs root and network namespaces; skipped with the reason otherwise.
"""

from __future__ import annotations

import glob
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podnet.app.demo import DemoOptions, run_demo
from podnet.app.demo_node import POD_CIDR, NodeStageReport
from podnet.app.demo_policy import ALLOW_POLICY, DENY_POLICY, POLICY_PORT, nft_unavailable
from podnet.core.tracing import read_trace_file
from podnet.plugins.reference.dataplane import veth_names
from podnet.testing.cni import plugin_path
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import links_in

WHY = netns_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def _namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


@pytest.fixture(autouse=True)
def _own_temp(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The stage's folders (and its subprocesses') made in a folder of this test's own: the
    checks that nothing is left look there, not where another test worker, or another
    checkout's demo, makes its own at the same time. Short: unix socket paths live in it."""
    folder = tempfile.mkdtemp(prefix="pnt-")
    monkeypatch.setattr(tempfile, "tempdir", folder)
    monkeypatch.setenv("TMPDIR", folder)
    try:
        yield
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def _the_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage runs the static plugin: built now when pytest runs without make, and
    named to the stage (and to the demo command's process) wherever it was built."""
    monkeypatch.setenv("PODNET_CNI_PLUGIN", str(plugin_path()))


def _temp_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "podnet-demo-*")))


def _assert_nothing_left(node: NodeStageReport, temp_before: set[str]) -> None:
    """No namespace of the stage (the node's held the bridge and the host ends), no veth
    of its containers in this namespace, no socket folder."""
    made = {node.node_netns, *(p.netns for p in node.pods)}
    assert len(made) == 3
    assert not made & _namespaces()
    links = set(links_in())
    for plugged in node.pods:
        assert not set(veth_names(plugged.container_id, plugged.interface)) & links
    assert _temp_dirs() <= temp_before


def _assert_policy_enforced(stage: NodeStageReport, namespace: str, *,
                            by_node: bool = True) -> None:
    """The stage's NetworkPolicy part: both policies Programmed on the stage's node, the
    allowed pair connects, the denied pair's connect is dropped (a timeout, not a
    refusal), both having connected before the policies; what they programmed removed
    with them. Where the node cannot enforce (no nft), the stage says so."""
    why = nft_unavailable() if by_node else None
    if why is not None:
        assert stage.policy_skipped == why and not stage.probes
        return
    assert stage.policy_skipped is None and stage.policy_ok
    assert stage.policy_enforcer.startswith("node agent" if by_node else "ovn provider")
    rows = {r["name"]: r for r in stage.policies}
    assert set(rows) == {DENY_POLICY, ALLOW_POLICY}
    for row in rows.values():
        assert row["programmed"]["status"] == "True", row
        assert row["observed_generation"] == row["generation"] and row["nodes_programmed"] == 1
        assert row["namespace"] == namespace and row["nodes_failed"] == {}
    assert rows[DENY_POLICY]["members"] == 2 and rows[ALLOW_POLICY]["members"] == 1
    assert [(p.source, p.target, p.port, p.expected, p.before, p.after)
            for p in stage.probes] == [
        ("pod-a", "pod-b", POLICY_PORT, "allowed", "ok", "ok"),
        ("pod-b", "pod-a", POLICY_PORT, "denied", "ok", "timeout")]
    assert stage.policy_programmed_ms > 0 and stage.policies_removed
    # the dataplane held both (so that it held none after is said of something)
    assert stage.policies_held == [f"{namespace}/{ALLOW_POLICY}", f"{namespace}/{DENY_POLICY}"]


def test_the_node_stage_plugs_two_pods_that_ping_each_other_and_leaves_nothing() -> None:
    temp_before = _temp_dirs()
    report = run_demo(DemoOptions(nodes=2, pods=10, churn=2, timeout_s=120))
    node = report.node
    assert node.ran and node.error is None, node.error
    assert node.ok and report.ok
    assert node.pods_plugged == 2 and [p.pod for p in node.pods] == ["pod-a", "pod-b"]
    # every pod answers; a late reply on a busy host is a loss, not a failure
    assert node.ping_sent > 0 and node.ping_replies > 0 and node.pods_answering == 2
    _assert_policy_enforced(node, "demo-node")
    assert node.released and node.cleaned
    cidr = ipaddress.ip_network(POD_CIDR)
    for plugged in node.pods:
        assert plugged.interface == "eth0"
        assert ipaddress.ip_interface(plugged.address).network == cidr
        assert plugged.add_ms > 0
    assert len({p.address for p in node.pods}) == len({p.mac for p in node.pods}) == 2
    # the stage's node is the reference provider's, beside the mixed cluster's
    reference = report.providers["reference"]
    assert reference.nodes == 1 and reference.released == 2
    assert reference.pod_networks == 0 and reference.leaked_ips == 0
    assert report.providers["bbc"].nodes == report.providers["ecs"].nodes == 2
    _assert_nothing_left(node, temp_before)


def test_the_ecs_and_bbc_node_stages_ping_through_a_simulated_vpc_and_leave_nothing() -> None:
    """In the mixed cluster one more ECS and one more BBC node: their ENIs appear as
    devices wired to a simulated VPC, their pods get a /32 and the link-local gateway,
    ping each other through the VPC; the demo counts the pods that answered, per cloud."""
    from podnet.plugins.ecs.dataplane import veth_names as eni_veth_names

    temp_before = _temp_dirs()
    report = run_demo(DemoOptions(nodes=2, pods=10, timeout_s=120))
    assert report.ok
    for provider, stage in (("ecs", report.ecs_node), ("bbc", report.bbc_node)):
        assert stage.ran and stage.error is None, (provider, stage.error)
        assert stage.ok and stage.provider == provider
        assert stage.node == f"node-{provider}-eni"
        assert stage.pods_plugged == 2 and stage.pods_answering == 2
        assert stage.ping_sent > 0 and stage.ping_replies > 0
        # the routed ENI dataplane: the node agent's table in the forward hook
        _assert_policy_enforced(stage, f"demo-{provider}")
        assert all(p.address.endswith("/32") for p in stage.pods)
        assert len({p.mac for p in stage.pods}) == 2
        assert stage.released and stage.cleaned
        left = {stage.node_netns, stage.node_netns.removesuffix("-node") + "-vpc",
                *(p.netns for p in stage.pods)}
        assert not left & _namespaces()
        links = set(links_in())
        for plugged in stage.pods:
            assert not set(eni_veth_names(plugged.container_id, plugged.interface)) & links
    answering = report.answering()
    assert answering["ECS"] == answering["BBC"] == "2/2"
    assert answering["OVN"] == "2/2" or answering["OVN"].startswith("skipped: ")
    if nft_unavailable() is None:
        pairs = report.policy_pairs()
        assert pairs["ECS"] == pairs["BBC"] == "allowed connects, denied dropped"
    assert _temp_dirs() <= temp_before


def test_the_demo_command_prints_the_stage_and_its_json_and_traces_the_agent(
        tmp_path: Path) -> None:
    temp_before = _temp_dirs()
    trace = tmp_path / "t.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "demo", "--provider", "reference",
         "--nodes", "2", "--pods", "10", "--json", "--trace-file", str(trace)],
        capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-2000:]
    node = json.loads(run.stdout)["node"]
    assert node["ran"] and node["ok"] and node["pods_plugged"] == 2
    assert node["ping_replies"] == node["ping_sent"] > 0
    assert [p["pod"] for p in node["pods"]] == ["pod-a", "pod-b"]
    assert all(p["add_ms"] > 0 and p["mac"] and p["address"] for p in node["pods"])
    if nft_unavailable() is None:
        assert node["policy_ok"] and node["policies_removed"]
        assert [(p["source"], p["target"], p["expected"], p["after"])
                for p in node["probes"]] == [("pod-a", "pod-b", "allowed", "ok"),
                                             ("pod-b", "pod-a", "denied", "timeout")]
        assert {p["name"]: p["programmed"]["reason"] for p in node["policies"]} == {
            DENY_POLICY: "Programmed", ALLOW_POLICY: "Programmed"}
    # the agent's spans join each record's own trace: allocation to unplug, one trace
    spans = read_trace_file(trace)
    traces: dict[str, set[str]] = {}
    steps: dict[str, set[str]] = {}
    for span in spans:
        obj = span["attributes"].get("podnet.object", "")
        lifecycle = span["name"].startswith(("pod_network.", "node."))
        if obj.startswith("demo-node/") and lifecycle:
            traces.setdefault(obj, set()).add(span["traceId"])
            steps.setdefault(obj, set()).add(span["name"])
    assert len(traces) == 2 and all(len(ids) == 1 for ids in traces.values())
    assert all({"pod_network.allocate", "node.plug", "node.unplug",
                "pod_network.finish"} <= names for names in steps.values())

    printed = subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "demo", "--provider", "reference",
         "--nodes", "2", "--pods", "10"],
        capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert "on a node: node-plain" in printed.stdout
    assert "pod-a -> pod-b: 3/3 replies" in printed.stdout
    assert "namespaces removed" in printed.stdout
    if nft_unavailable() is None:
        said = " ".join(printed.stdout.split())
        assert f"pod-a -> pod-b tcp/{POLICY_PORT}: before ok, after ok (allowed)" in said
        assert f"pod-b -> pod-a tcp/{POLICY_PORT}: before ok, after timeout (denied)" in said
        assert f"NetworkPolicy demo-node/{DENY_POLICY}: Programmed" in said
        assert ("NetworkPolicy pairs: reference allowed connects, denied dropped; BBC "
                "skipped: only in the mixed cluster") in said
    # a single-provider run has no ECS or BBC node stage, and says why
    assert ("pods answering a ping: BBC skipped: only in the mixed cluster, ECS skipped: "
            "only in the mixed cluster, OVN skipped: ") in " ".join(printed.stdout.split())
    assert _temp_dirs() <= temp_before


def _daemons_of(folder: str) -> set[str]:
    """Processes whose command line names ``folder`` (the chassis' daemons run with their
    pid files and logs in the stage's folder)."""
    found = set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if folder.encode() in f.read():
                        found.add(pid)
            except OSError:
                continue
    return found


def test_the_ovn_node_stage_plugs_two_pods_into_a_throwaway_chassis_and_leaves_nothing(
        ) -> None:
    """Where OVS and OVN are installed, the demo's OVN provider also serves a node: a
    chassis (OVS, br-int, ovn-controller; SB and northd on the demo's NB server) in the
    node's namespace; its two pods are plugged into br-int and answer each other's ping;
    afterwards no namespace, no daemon and no folder of the stage is left."""
    from podnet.app.demo_node import OVN_NODE_NAME
    from podnet.plugins.ovn.chassis import bed_unavailable

    why = bed_unavailable()
    if why:
        pytest.skip(why)
    temp_before = _temp_dirs()
    daemons_before = _daemons_of(os.path.join(tempfile.gettempdir(), "podnet-demo-"))
    report = run_demo(DemoOptions(provider="ovn", nodes=2, pods=10, timeout_s=120))
    node = report.ovn_node
    assert node.ran and node.error is None, node.error
    assert node.ok and report.ok
    assert node.node == OVN_NODE_NAME and node.provider == "ovn"
    assert node.pods_plugged == 2 and node.pods_answering == 2
    assert node.ping_replies == node.ping_sent > 0
    # OVN's ACLs, programmed by the controller through the provider
    _assert_policy_enforced(node, "demo-ovn", by_node=False)
    assert report.policy_pairs()["OVN"] == "allowed connects, denied dropped"
    for plugged in node.pods:
        assert ipaddress.ip_interface(plugged.address) in ipaddress.ip_network("10.16.0.0/16")
    assert node.released and node.cleaned
    assert not {node.node_netns, *(p.netns for p in node.pods)} & _namespaces()
    assert _temp_dirs() <= temp_before
    assert _daemons_of(os.path.join(tempfile.gettempdir(), "podnet-demo-")) <= daemons_before
    assert report.node.ok  # the reference provider's stage ran too
