"""The CNI start-up benchmark runs and prints its JSON; its figures are not checked here
(a shared machine makes them noisy), only its shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "cni.py"


def test_bench_smoke() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--runs", "3"], check=True,
                         capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["benchmark"] == "cni_startup" and report["target_ms"] == 50.0
    assert isinstance(report["met"], bool)
    assert isinstance(report["plugin_over_python_p50_ms"], float)
    for form in ("file", "file_without_site", "python_alone"):
        assert report[form]["runs"] == 3
        assert 0 < report[form]["p50_ms"] <= report[form]["p99_ms"]
