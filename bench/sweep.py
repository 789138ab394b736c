"""Every goal's figures in one run, a base and this tree taken in turn (issue 32's "done
when"): each goal's benchmark once on the base, then once on this tree, goal after goal,
``--rounds`` times, with the load average before each run.

    .venv/bin/python bench/sweep.py --base-tree ../podnet-base [--goals P3,P6] [--rounds 2]

``--base-tree``: a checkout of the base commit (``git worktree add DIR REV``). Both
sides run THIS tree's benchmark scripts with this interpreter, so the method is the same
and only the Python code measured differs: the base's package is put first on
``PYTHONPATH`` (a folder of the run's own holds a ``podnet`` link to the base tree). The
static CNI plugin both sides run is this interpreter's environment's (``make cni``): a
change to the plugin itself is not compared. Without ``--base-tree`` only
this tree is measured. P13 needs root and network namespaces; P6 Open vSwitch's
``ovsdb-server`` and the OVN schemas (as ``make test`` installs them).

One JSON object on stdout: per goal, each run's figures (``base``, ``new``) with its load
average and seconds, and the medians; progress on stderr. A benchmark that fails is
recorded with its exit status and the end of its stderr, and the sweep goes on.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"

Figures = dict[str, float | None]


def _get(report: dict[str, Any], path: str) -> float | None:
    """The number at dotted ``path`` of ``report`` (a part that is a number indexes a
    list); None when it is not there."""
    node: Any = report
    for part in path.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            return None
    return node if isinstance(node, (int, float)) and not isinstance(node, bool) else None


def _picker(**paths: str) -> Callable[[dict[str, Any]], Figures]:
    return lambda report: {name: _get(report, path) for name, path in paths.items()}


def _cloud(report: dict[str, Any]) -> Figures:
    """P1 and P2 from one ``podnet demo --json``: write calls per pod, the burst over the
    rate limits' lower bound (as ``bench/cloud_providers.py`` reads them)."""
    pods = report.get("pods") or 1000
    writes = report.get("write_calls")
    duration, bound = report.get("duration_s"), report.get("lower_bound_s")
    return {"p1_writes_per_pod": None if writes is None else round(writes / pods, 4),
            "p2_duration_vs_bound": None if not (duration and bound)
            else round(duration / bound, 3),
            "leaked_ips": report.get("leaked_ips"),
            "duplicate_ips": report.get("duplicate_ips")}


def _nodepath(report: dict[str, Any]) -> Figures:
    out: Figures = {}
    for run in report.get("runs", []):
        mode, up = run["mode"], run["up"]
        out[f"{mode}_created_to_added_p99_s"] = up["stages_s"]["created_to_added"].get("p99")
        out[f"{mode}_makespan_s"] = up["makespan_s"]
        out[f"{mode}_cpu_s"] = up.get("cpu_s", {}).get("total")
        out[f"{mode}_clean"] = float(bool(run["leak_check"]["clean"]))
    return out


def _demo(provider: str) -> list[str]:
    return ["-m", "podnet.app.cli", "demo", "--provider", provider, "--nodes", "50",
            "--pods", "1000", "--cloud-latency-ms", "100", "--cloud-rate", "10", "--json",
            "--no-node-stage"]


#: goal -> (the benchmark's arguments after the interpreter, what to read from its JSON)
GOALS: dict[str, tuple[list[str], Callable[[dict[str, Any]], Figures]]] = {
    "P3/P7": ([str(BENCH / "core_overhead.py"), "--only", "p3"], _picker(
        engine_only_median_ms_est="p3.api_server.engine_only_median_ms_est",
        untraced_median_ms="p3.untraced.median_ms", traced_ratio="p3.traced_ratio")),
    "P1/P2 BBC": (_demo("bbc"), _cloud),
    "P1/P2 ECS": (_demo("ecs"), _cloud),
    "P6": ([str(BENCH / "ovn_ports.py"), "--no-nbctl", "--plug-pods", "0", "--json"],
           _picker(vs_bulk="vs_bulk", podnet_cpu_s="podnet.cpu_s",
                   bulk_cpu_s="bulk.cpu_s", create_transactions="podnet.create_transactions")),
    "P8/P10": ([str(BENCH / "api_latency.py")], _picker(
        duration_vs_bound="duration_vs_bound", duration_s="duration_s",
        whole_life_writes_per_pod="lifecycle_writes_per_pod",
        controller_cpu_s="controller_cpu_s")),
    # P4 is the same run's memory: the controller's RSS once rebuilt, its peak listing
    "P5": ([str(BENCH / "restart.py"), "--cluster", "http", "--json"],
           _picker(total_s="http.median.total_s", rebuild_s="http.median.rebuild_s",
                   p4_rss_mib_rebuilt="http.runs.0.memory.rss_mib_rebuilt",
                   p4_peak_mib_list="http.runs.0.memory.peak_mib_list")),
    "P13": ([str(BENCH / "nodepath.py")], _nodepath),
    "P14": ([str(BENCH / "netpol_node.py")], _picker(
        p50_ms="enforced_latency_ms.p50", p99_ms="enforced_latency_ms.p99")),
    "CNI": ([str(BENCH / "cni.py"), "--add", "--static-only"], _picker(
        add_p99_ms="static.add.p99_ms", startup_p99_ms="static.startup.p99_ms")),
}

#: ``--quick``: arguments that make each benchmark a smoke test of itself (the figures
#: then mean nothing against the goals)
QUICK: dict[str, list[str]] = {
    "P3/P7": ["--quick"], "P8/P10": ["--quick"], "P5": ["--quick"], "CNI": ["--quick"],
    "P1/P2 BBC": ["--nodes", "5", "--pods", "50"], "P1/P2 ECS": ["--nodes", "5", "--pods", "50"],
    "P6": ["--ports", "20"], "P13": ["--nodes", "2", "--pods", "6", "--modes", "exact"],
    "P14": ["--pods", "10", "--policies", "10"],
}

#: the goals' short names, as ``--goals`` takes them
ALIASES = {"P1": "P1/P2 BBC,P1/P2 ECS", "P2": "P1/P2 BBC,P1/P2 ECS", "BBC": "P1/P2 BBC",
           "ECS": "P1/P2 ECS", "P3": "P3/P7", "P7": "P3/P7", "P8": "P8/P10",
           "P10": "P8/P10", "P4": "P5"}


def _env(base_path: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if base_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [base_path, *filter(None, [env.get("PYTHONPATH")])])
    return env


def _last_json(text: str) -> dict[str, Any] | None:
    """The benchmark's JSON object: all of stdout, else its last line that is one."""
    try:
        out = json.loads(text)
        return out if isinstance(out, dict) else None
    except json.JSONDecodeError:
        for line in reversed(text.splitlines()):
            if line.startswith("{"):
                try:
                    return dict(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return None


def run_one(goal: str, side: str, base_path: str | None, timeout: float,
            quick: bool = False) -> dict[str, Any]:
    argv, read = GOALS[goal]
    if quick:
        argv = [*argv, *QUICK[goal]]  # a later flag wins over the same one before
    load = round(os.getloadavg()[0], 2)
    started = time.monotonic()
    print(f"[{time.strftime('%H:%M:%S')}] {goal} on {side} (load {load})", file=sys.stderr,
          flush=True)
    try:
        done = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                              cwd=ROOT, env=_env(base_path), timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"load_before": load, "seconds": round(time.monotonic() - started, 1),
                "failed": f"timed out after {timeout:g} s"}
    record: dict[str, Any] = {"load_before": load,
                              "seconds": round(time.monotonic() - started, 1)}
    report = _last_json(done.stdout)
    if report is None:
        record["failed"] = f"exit {done.returncode}: {done.stderr.strip()[-600:]}"
    else:
        record["figures"] = read(report)
        if done.returncode != 0:
            record["exit"] = done.returncode
    return record


def _medians(runs: list[dict[str, Any]]) -> Figures:
    names = {name for run in runs for name in run.get("figures", {})}
    out: Figures = {}
    for name in sorted(names):
        values = [v for run in runs if (v := run.get("figures", {}).get(name)) is not None]
        out[name] = round(statistics.median(values), 4) if values else None
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-tree", default=None,
                        help="a checkout of the base commit")
    parser.add_argument("--goals", default=",".join(GOALS),
                        help=f"comma-separated, of: {', '.join(GOALS)} (or P1 ... P14)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quick", action="store_true",
                        help="each benchmark at a smoke test's size (checks the sweep)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one benchmark run may take")
    args = parser.parse_args()
    goals: list[str] = []
    for name in (n.strip() for n in args.goals.split(",") if n.strip()):
        for goal in ALIASES.get(name.upper(), name).split(","):
            if goal not in GOALS:
                parser.error(f"--goals: unknown goal {goal!r} (of: {', '.join(GOALS)})")
            if goal not in goals:
                goals.append(goal)
    with tempfile.TemporaryDirectory(prefix="podnet-sweep-") as tmp:
        base_path = None
        if args.base_tree is not None:
            base = Path(args.base_tree).resolve()
            if not (base / "core").is_dir():
                parser.error(f"--base-tree {args.base_tree}: not a podnet checkout")
            # the package is the repository itself: a link named podnet to import it by
            (Path(tmp) / "podnet").symlink_to(base)
            base_path = tmp
        sides = [("base", base_path), ("new", None)] if base_path else [("new", None)]
        results: dict[str, dict[str, list[dict[str, Any]]]] = {
            goal: {side: [] for side, _ in sides} for goal in goals}
        for _ in range(args.rounds):
            for goal in goals:
                for side, path in sides:
                    results[goal][side].append(run_one(goal, side, path, args.timeout,
                                                               args.quick))
    report = {
        "bench": "sweep", "cpus": os.cpu_count(), "rounds": args.rounds, "quick": args.quick,
        "base_tree": args.base_tree is not None,
        "goals": {goal: {**{side: runs for side, runs in by_side.items()},
                         "medians": {side: _medians(runs) for side, runs in by_side.items()}}
                  for goal, by_side in results.items()},
    }
    print(json.dumps(report, indent=2))
    return 0 if all("failed" not in run for by_side in results.values()
                    for runs in by_side.values() for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
