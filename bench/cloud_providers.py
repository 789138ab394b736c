"""GOALS P1, P1b and P2 for the cloud providers: write calls per pod, against the fewest
possible, and the burst's duration against the rate limits' lower bound.

Runs ``podnet demo --provider P --nodes 50 --pods 1000 --cloud-latency-ms 100
--cloud-rate 10 --json`` (each run its own process, simulator in-process over loopback
HTTP) ``--repeat`` times per provider and prints one JSON object: every run's figures and
the median per provider.

    .venv/bin/python bench/cloud_providers.py [--providers bbc ecs] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Any


def run_once(provider: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "podnet.app.cli", "demo", "--provider", provider,
           "--nodes", str(args.nodes), "--pods", str(args.pods),
           "--cloud-latency-ms", str(args.latency_ms), "--cloud-rate", str(args.rate),
           "--json"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if out.returncode != 0 and not out.stdout:
        raise SystemExit(f"{provider}: demo failed: {out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    writes = report["write_calls"]
    return {
        "settled": report["settled"],
        "leaked_ips": report["leaked_ips"],
        "duplicate_ips": report["duplicate_ips"],
        "duration_s": report["duration_s"],
        "lower_bound_s": report["lower_bound_s"],
        "write_calls": writes,
        "min_write_calls": report["min_write_calls"],
        "p1_writes_per_pod": round(writes / args.pods, 4),
        "p1b_writes_vs_min": round(writes / report["min_write_calls"], 3),
        "p2_duration_vs_bound": round(report["duration_s"] / report["lower_bound_s"], 3),
        "cloud_calls": report["cloud_calls"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", nargs="+", default=["bbc", "ecs"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=100.0)
    parser.add_argument("--rate", type=float, default=10.0)
    args = parser.parse_args()
    result: dict[str, Any] = {"nodes": args.nodes, "pods": args.pods,
                              "cloud_latency_ms": args.latency_ms, "cloud_rate": args.rate,
                              "providers": {}}
    for provider in args.providers:
        runs = [run_once(provider, args) for _ in range(args.repeat)]
        result["providers"][provider] = {
            "runs": runs,
            "median": {key: statistics.median(r[key] for r in runs) for key in (
                "p1_writes_per_pod", "p1b_writes_vs_min", "p2_duration_vs_bound",
                "duration_s")},
            "all_clean": all(r["settled"] and not r["leaked_ips"] and not r["duplicate_ips"]
                             for r in runs),
        }
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
