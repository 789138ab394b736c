"""The restart benchmark (goal P5) runs end to end at a small size, in both cluster modes,
and prints its JSON. Its figures are not checked here: only its shape and that the restart
was healthy (every pod Routed, no restored pod allocated again)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench" / "restart.py"


def test_bench_smoke() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--quick", "--cluster", "both", "--json"],
                         check=True, capture_output=True, text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["benchmark"] == "restart" and report["ok"] is True
    assert {"target_s", "met", "http_vs_memory"} <= set(report)
    for mode in ("memory", "http"):
        (run,) = report[mode]["runs"]
        assert run["cluster"] == mode and run["driver"] == "threads"
        assert set(report[mode]["median"]) == {"rebuild_s", "allocate_s", "total_s"}
        for key in ("rebuild_s", "allocate_s", "total_s"):
            assert run[key] > 0
        checks = run["checks"]
        assert checks["pod_networks"] == checks["expected"] == run["pods"] + run["new_pods"]
        assert checks["not_routed"] == 0
        # nothing routed before the restart was allocated again, moved or transitioned
        assert checks["restored_moved"] == checks["restored_transitions"] == 0
        assert checks["restart_allocate_calls"] == 0
        assert "reference.allocate" not in run["restart"]["provider_calls"]
        assert run["restart"]["provider_calls"]["reference.node_inventory"] == run["nodes"]
        assert run["allocate"]["provider_calls"]["reference.allocate"] == run["new_pods"]
        assert checks["duplicate_ips"] == 0
