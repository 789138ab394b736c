"""The sweep (every goal's benchmark, a base and this tree in turn) runs end to end at a
smoke test's size and prints each side's figures; its numbers are not checked here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench" / "sweep.py"


def _sweep(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(BENCH), *args], capture_output=True,
                          text=True, timeout=300, check=False)


def test_a_sweep_takes_the_base_and_this_tree_in_turn() -> None:
    # this tree as its own base: the base side imports the package through the link
    done = _sweep("--quick", "--base-tree", str(ROOT), "--goals", "P3,BBC", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["base_tree"] is True and report["quick"] is True
    assert list(report["goals"]) == ["P3/P7", "P1/P2 BBC"]
    for goal, names in (("P3/P7", {"engine_only_median_ms_est", "traced_ratio"}),
                        ("P1/P2 BBC", {"p1_writes_per_pod", "p2_duration_vs_bound"})):
        by_side = report["goals"][goal]
        for side in ("base", "new"):
            assert len(by_side[side]) == 2
            for run in by_side[side]:
                assert "failed" not in run, run
                assert run["load_before"] >= 0
                assert all(isinstance(run["figures"][n], float) for n in names), run
            assert names <= set(by_side["medians"][side])
    # the order of the runs: base then new, goal after goal, round after round
    order = [line.split("] ", 1)[1].split(" (")[0] for line in done.stderr.splitlines()
             if "] " in line]
    assert order == ["P3/P7 on base", "P3/P7 on new", "P1/P2 BBC on base",
                     "P1/P2 BBC on new"] * 2


def test_an_unknown_goal_or_base_is_refused_by_name() -> None:
    done = _sweep("--goals", "P99")
    assert done.returncode == 2 and "unknown goal 'P99'" in done.stderr
    done = _sweep("--base-tree", str(ROOT / "bench"), "--goals", "P3")
    assert done.returncode == 2 and "not a podnet checkout" in done.stderr


def test_a_figure_is_read_through_lists_and_is_none_where_it_is_not() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep", BENCH)
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    report = {"http": {"runs": [{"memory": {"rss_mib_rebuilt": 799.5}}], "ok": True}}
    assert sweep._get(report, "http.runs.0.memory.rss_mib_rebuilt") == 799.5
    assert sweep._get(report, "http.runs.1.memory.rss_mib_rebuilt") is None
    assert sweep._get(report, "http.ok") is None  # a boolean is no figure
    assert sweep._get(report, "http.runs.x") is None
    # P4 rides on P5's run
    _, read = sweep.GOALS["P5"]
    assert read({"http": {"median": {"total_s": 24.0}, "runs": [
        {"memory": {"rss_mib_rebuilt": 801.0, "peak_mib_list": 690.0}}]}})[
        "p4_rss_mib_rebuilt"] == 801.0
