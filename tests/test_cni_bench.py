"""The CNI benchmark (start-up, and ADD/DEL against the agent) runs and prints its JSON;
its figures are not checked here (a shared machine makes them noisy), only its shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.testing.netns import netns_unavailable

BENCH = Path(__file__).resolve().parent.parent / "bench" / "cni.py"


def test_bench_smoke() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--runs", "3"], check=True,
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["benchmark"] == "cni_startup" and report["target_ms"] == 5.0
    assert isinstance(report["met"], bool)
    # the Python plugin it replaced, from the checkout's history (a shallow clone may
    # not have it: said), beside it
    old = ["python_plugin"] if report["python_plugin_revision"] else []
    assert old or report["python_plugin_skipped"]
    for form in ("static", *old, "python_alone"):
        assert report[form]["runs"] == 3
        assert 0 < report[form]["p50_ms"] <= report[form]["p99_ms"]
        assert 0 <= report[form]["cpu_p50_ms"] <= report[form]["cpu_p99_ms"]


@pytest.mark.slow
@pytest.mark.skipif(netns_unavailable() is not None, reason=netns_unavailable() or "")
def test_add_bench_smoke() -> None:
    """``--add``: the agent and the controller as processes, a few pods per form (the
    static plugin, and the Python plugin through the routes it used); the shape, and
    nothing left on the node after the DELs."""
    out = subprocess.run([sys.executable, str(BENCH), "--add", "--pods", "3"], check=True,
                         capture_output=True, text=True, timeout=300)
    report = json.loads(out.stdout)
    assert report["benchmark"] == "cni_add" and report["target_add_p99_ms"] == 100.0
    assert report["veths_left_after_del"] == 0
    assert isinstance(report["met"], bool)
    old = ["python_plugin"] if report["python_plugin_revision"] else []
    for form in ("static", *old):
        for what in ("add", "del"):
            assert report[form][what]["runs"] == 3
            assert 0 < report[form][what]["p50_ms"] <= report[form][what]["p99_ms"]
        assert report[form]["startup"]["runs"] == 20
