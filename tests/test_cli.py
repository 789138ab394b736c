"""The ``podnet`` command as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.core.tracing import read_trace_file


def podnet(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "podnet.core.cli", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )


def test_demo_settles_with_churn_and_traces_every_pod_network(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    run = podnet("demo", "--provider", "reference", "--nodes", "20", "--pods", "500",
                 "--churn", "200", "--json", "--trace-file", str(trace))
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


def test_demo_without_json_prints_a_summary_table() -> None:
    run = podnet("demo", "--nodes", "2", "--pods", "10")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "routed" in run.stdout and "leaked IPs" in run.stdout


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
    run = subprocess.run([sys.executable, "-m", "podnet.core.cli", "plugins"],
                         capture_output=True, text=True, timeout=60, env=env, check=False)
    assert run.returncode == 0
    assert "reference" not in run.stdout
