"""The ``podnet`` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import attrs
import pytest

from podnet.app import demo
from podnet.core.tracing import read_trace_file
from podnet.hookspecs.demo import DemoCloud, DemoProvider, DemoSettings


def podnet(*args: str, timeout: float = 300, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd,
    )


def test_demo_settles_with_churn_and_traces_every_pod_network(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    # the control plane alone: the node stage's two pods would add to the exact counts
    run = podnet("demo", "--provider", "reference", "--nodes", "20", "--pods", "500",
                 "--churn", "200", "--json", "--trace-file", str(trace), "--no-node-stage")
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["pods"] == 500
    assert report["routed"] == 500
    assert report["leaked_ips"] == 0
    assert report["duplicate_ips"] == 0
    assert report["released"] == 200
    assert report["transitions"]["pod_network.allocate"] == 700
    assert report["transitions"]["pod_network.route"] == 700
    assert report["transitions"]["pod_network.finish"] == 200
    assert report["duration_s"] > 0

    spans = read_trace_file(trace)
    by_object: dict[str, set[str]] = {}
    traces: dict[str, set[str]] = {}
    for span in spans:
        obj = span["attributes"].get("podnet.object")
        if span["name"].startswith("pod_network.") and obj:
            by_object.setdefault(obj, set()).add(span["name"])
            traces.setdefault(obj, set()).add(span["traceId"])
    assert len(by_object) == 700  # 500 pods + 200 replacements, each its own record
    assert all({"pod_network.allocate", "pod_network.route"} <= names
               for names in by_object.values())
    assert sum("pod_network.finish" in names for names in by_object.values()) == 200
    assert all(len(ids) == 1 for ids in traces.values()), "one trace per lifecycle"


def test_demo_without_json_prints_a_summary_table_per_provider(tmp_path: Path) -> None:
    run = podnet("demo", "--provider", "reference", "--nodes", "2", "--pods", "10",
                 cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "routed" in run.stdout and "leaked IPs" in run.stdout
    assert "reference" in run.stdout
    assert list(tmp_path.iterdir()) == []  # no trace file unless asked, off the default


def test_the_default_demo_is_the_mixed_cluster_and_writes_its_trace(tmp_path: Path) -> None:
    """No flags but a smaller size: BBC and ECS nodes, every third pod on the OVN overlay
    (when ovsdb-server is installed), churn by default, the trace file in the folder."""
    trace = tmp_path / "podnet-demo-trace.jsonl"
    trace.write_text('{"an earlier run": true}\n')  # each run writes its own trace
    run = podnet("demo", "--nodes", "4", "--pods", "30", "--json", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout)
    assert report["provider"] == "mixed" and report["settled"]
    # a clean run: pods that wait for their node's pool, writes that meet a newer
    # version, all of that is no failure and no ERROR span
    assert report["failed_transitions"] == {}
    assert report["routed"] == 30 and report["leaked_ips"] == 0
    assert report["duplicate_ips"] == 0
    providers = report["providers"]
    # one more node each where the ECS and BBC node stages ran (root, namespaces)
    assert providers["bbc"]["nodes"] == 2 + report["bbc_node"]["ran"]
    assert providers["ecs"]["nodes"] == 2 + report["ecs_node"]["ran"]
    assert providers["bbc"]["routed"] == providers["ecs"]["routed"] == 15
    # churn: 30 // 5; each ENI node stage releases its two pods
    staged_eni = 2 * (report["bbc_node"]["ran"] + report["ecs_node"]["ran"])
    assert providers["bbc"]["released"] + providers["ecs"]["released"] == 6 + staged_eni
    assert providers["bbc"]["cloud_calls"] and providers["ecs"]["cloud_calls"]
    if "ovn" in report["skipped"]:
        assert "ovn-central" in report["skipped"]["ovn"]
    else:
        # pods 0, 3, ..., 27 attach to the overlay; pod 0 and 3 are churned with it; the
        # stage on an OVN node (where OVS and OVN are installed) releases its two pods
        staged = 2 if report["ovn_node"]["ran"] else 0
        assert providers["ovn"]["routed"] == 10
        assert providers["ovn"]["released"] == 2 + staged
        assert providers["ovn"]["leaked_ips"] == 0 and report["ovn_transactions"] > 0
    assert "an earlier run" not in trace.read_text()
    spans = read_trace_file(trace)
    assert [(s["name"], s["status"]["message"]) for s in spans if s["statusCode"] == 2] == []
    providers_traced = {s["attributes"].get("podnet.provider") for s in spans}
    assert {"bbc", "ecs"} <= providers_traced


def test_no_node_stage_skips_the_stage_and_says_so(tmp_path: Path) -> None:
    run = podnet("demo", "--provider", "reference", "--nodes", "1", "--pods", "4",
                 "--no-node-stage", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "on a node: skipped: --no-node-stage" in run.stdout
    report = demo.run_demo(demo.DemoOptions(provider="reference", nodes=1, pods=2,
                                            node_stage=False, timeout_s=60))
    assert report.ok and not report.node.ran and report.node.skipped == "--no-node-stage"
    assert report.as_json()["node"]["skipped"] == "--no-node-stage"
    assert report.providers["reference"].nodes == 1  # no node of the stage


@pytest.mark.parametrize("name", list(demo.DEMO_MODULES))
def test_every_demo_module_declares_the_demo_interface(name: str) -> None:
    declared = demo.demo_provider(name)
    assert isinstance(declared, DemoProvider)
    assert name in demo.demo_providers()


def test_a_demo_provider_builds_its_plugin_on_its_cloud() -> None:
    cloud = demo.demo_provider("reference").build(DemoSettings(seed=3))
    assert isinstance(cloud, DemoCloud)
    assert cloud.plugin.podnet_register_provider().name == "reference"  # type: ignore[attr-defined]
    assert cloud.ground_truth() == {}
    node = {"metadata": {"name": "n"}}
    assert cloud.setup_node(node) is node


def test_a_demo_module_without_the_interface_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(demo.DEMO_MODULES, "plain", "podnet.plugins.reference.provider")
    with pytest.raises(TypeError, match=r"\.DEMO is not a podnet\.hookspecs\.demo\.DemoProvider"):
        demo.demo_provider("plain")
    with pytest.raises(ValueError, match="not available"):
        demo.demo_provider("nope")


def test_the_demo_settings_reach_the_providers_cloud(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[DemoSettings] = []
    reference = demo.demo_provider("reference")

    def build(settings: DemoSettings) -> DemoCloud:
        seen.append(settings)
        return reference.build(settings)

    monkeypatch.setattr("podnet.plugins.reference.demo.DEMO",
                        attrs.evolve(reference, build=build))
    report = demo.run_demo(demo.DemoOptions(provider="reference", nodes=1, pods=2, seed=7,
                                            cloud_latency_ms=1.0, fault_rate=0.0,
                                            timeout_s=60))
    assert report.settled and report.routed == 2
    assert seen == [DemoSettings(seed=7, cloud_latency_ms=1.0, cloud_rate=None,
                                 fault_rate=0.0)]


@pytest.mark.parametrize("args, needle", [
    (["demo", "--pods", "-1"], "--pods"),
    (["demo", "--nodes", "many"], "--nodes"),
    (["demo", "--nodes", "0"], "--nodes"),
    (["demo", "--pods", "5", "--churn", "6"], "--churn"),
    (["demo", "--fault-rate", "2"], "--fault-rate"),
    (["demo", "--provider", "nope"], "--provider"),
    (["demo", "--bogus"], "--bogus"),
    (["frobnicate"], "frobnicate"),
])
def test_bad_flags_give_one_line_and_exit_2(args: list[str], needle: str) -> None:
    run = podnet(*args, timeout=60)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert needle in lines[0]


def test_plugins_lists_the_reference_provider_with_its_hooks() -> None:
    run = podnet("plugins", timeout=60)
    assert run.returncode == 0, run.stderr
    assert "reference" in run.stdout
    assert "allocate" in run.stdout and "classify_error" in run.stdout


def test_plugins_honours_the_disable_list() -> None:
    import os

    env = dict(os.environ, PODNET_DISABLE_PLUGINS="reference")
    run = subprocess.run([sys.executable, "-m", "podnet.app.cli", "plugins"],
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert run.returncode == 0
    assert "reference" not in run.stdout
