"""The whole-node-path benchmark (goal P13) runs tiny end to end and prints its JSON:
every pod's address answered, the stages stamped in order, and after the DELs and the
deletions nothing left (no record, no interface, no sandbox, nothing ``podnet audit``
finds). Its figures are not checked (a shared machine makes them noisy), only its shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.testing.netns import netns_unavailable

BENCH = Path(__file__).resolve().parent.parent / "bench" / "nodepath.py"

STAGES = ("created_to_routed", "routed_to_added", "added_to_answered", "created_to_added",
          "created_to_running", "created_to_answered", "add_call")


@pytest.mark.slow
@pytest.mark.skipif(netns_unavailable() is not None, reason=netns_unavailable() or "")
def test_bench_smoke() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--nodes", "2", "--pods", "6",
                           "--per-deployment", "3", "--timeout", "120", "--per-pod"],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["bench"] == "nodepath" and report["ok"] is True
    assert report["sizes"] == {"nodes": 2, "agents": 2, "pods": 6, "per_deployment": 3,
                               "deployments": 2}
    assert [r["mode"] for r in report["runs"]] == ["exact", "plenty"]
    assert report["at_goal_size"] is False  # 6 pods: the goal's figures are for 1,000
    assert report["target"] == {"created_to_added_p99_s": 2.0, "makespan_s": 60.0,
                                "leak": "none"}
    assert {k: type(v) for k, v in report["met"].items()} == {"exact": bool, "plenty": bool}
    # exact: the cloud gives each node as many addresses as it has pods
    assert [r["addresses"] for r in report["runs"]] == [6, 480]
    for run in report["runs"]:
        up = run["up"]
        assert up["all_answered"] and up["answered"] == up["routed"] == up["added"] == 6
        assert up["add_runs"] >= 6 and not up["create_errors"]
        for cpu in (up["cpu_s"], run["teardown"]["cpu_s"]):
            assert set(cpu) == {"apiserver", "controller", "agents", "bench", "plugin_and_ip",
                                "total"} and all(v >= 0 for v in cpu.values()), cpu
        for stage in STAGES:
            got = up["stages_s"][stage]
            assert got["count"] == 6 and 0 <= got["p50"] <= got["p99"] <= got["max"], stage
        # each pod's stamps in the order of the path; a pod answers only once its ADD
        # did, and the makespan covers every pod
        assert len(up["per_pod"]) == 6
        for pod in up["per_pod"]:
            # (created is the POST's answer: the watches may see the pod before it)
            assert pod["created"] >= 0 and pod["routed"] >= 0, pod
            assert pod["add_started"] <= pod["added"] <= pod["running"], pod
            assert pod["running"] <= pod["answered"] <= up["makespan_s"], pod
        assert up["stages_s"]["created_to_answered"]["max"] <= up["makespan_s"]
        leak = run["leak_check"]
        assert leak["clean"] and leak["released"], leak
        assert leak["records_left"] == leak["pod_interfaces_left"] == 0
        assert leak["sandboxes_left"] == leak["pool_addresses_owned"] == 0
        assert leak["audit_exit"] == 0 and leak["audit_findings"] == {}
        assert leak["pools_settled_s"] >= 0 and leak["audit_clean_after_s"] >= 0
        assert sorted(leak["pool_addresses_per_node"]) == ["node-00", "node-01"]
        assert run["teardown"]["del_failures"] == 0
        assert run["kubelet_error_count"] == 0, run["kubelet_errors"]
