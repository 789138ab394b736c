"""The CNI plugin's start-up time: ``podnet-cni`` answering VERSION, as a runtime runs it.

Prints one JSON object to stdout. Each run is a new process (the runtime starts the plugin
for every sandbox and every command), timed from before the spawn to its exit, with the
network configuration on stdin. Two forms are measured:

file               the plugin's one file (``cni/plugin.py``) under this interpreter, as
                   the DaemonSet installs it onto a host: the form the target is for
file_without_site  the same with ``python -S``: the plugin's own cost, without what this
                   environment's site-packages hooks (.pth files) add to every start
file_with_PYTHON   the same under each ``--python`` interpreter (a host's ``python3``)
console            the ``podnet-cni`` console script of this environment
python_alone       the interpreter printing a line: the floor no Python plugin goes below

Target: p99 of the file form <= 50 ms. ``plugin_over_python_p50_ms`` is what the plugin
adds to the bare interpreter's start (p50 against p50), and ``load_average_1m`` the
machine's load when the run ended: on a shared machine p99 follows the neighbours.
``--runs`` (default 50), ``--quick`` (10 runs).
ADD latency end to end needs the node agent (``podnet node``) and is measured with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "cni" / "plugin.py"
TARGET_MS = 50.0
BARE = "import sys; sys.stdout.write('{\"supportedVersions\": [1]}')"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _summary(times: list[float]) -> dict[str, object]:
    return {"runs": len(times), "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(_percentile(times, 99), 2), "min_ms": round(min(times), 2),
            "max_ms": round(max(times), 2)}


def measure(forms: dict[str, list[str]], runs: int) -> dict[str, dict[str, object]]:
    """Each form ``runs`` times, the forms taking turns (a busy neighbour on the machine
    then slows all of them alike), after 3 warm-up rounds that are not counted."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "VERSION",
           "CNI_PATH": "/opt/cni/bin"}
    stdin = json.dumps({"cniVersion": "1.1.0"}).encode()
    times: dict[str, list[float]] = {name: [] for name in forms}
    for i in range(runs + 3):
        for name, argv in forms.items():
            start = time.perf_counter()
            done = subprocess.run(argv, input=stdin, env=env, capture_output=True,
                                  check=True)
            elapsed = (time.perf_counter() - start) * 1000
            assert json.loads(done.stdout)["supportedVersions"], done.stdout
            if i >= 3:
                times[name].append(elapsed)
    return {name: _summary(found) for name, found in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 runs")
    parser.add_argument("--python", action="append", default=[],
                        help="also run the file with this interpreter (a host's python3)")
    args = parser.parse_args()
    runs = 10 if args.quick else args.runs
    forms = {"file": [sys.executable, str(PLUGIN)],
             "file_without_site": [sys.executable, "-S", str(PLUGIN)]}
    for python in args.python:
        forms[f"file_with_{python}"] = [python, str(PLUGIN)]
    console = Path(sys.executable).parent / "podnet-cni"
    if console.exists():
        forms["console"] = [str(console)]
    # the interpreter alone, for scale: what no Python plugin can go below
    forms["python_alone"] = [sys.executable, "-c", BARE]
    report: dict[str, object] = {
        "benchmark": "cni_startup", "command": "VERSION", "target_ms": TARGET_MS,
        "python": platform.python_version(), "cpus": os.cpu_count(),
    }
    report.update(measure(forms, runs))
    file_p99 = report["file"]["p99_ms"]  # type: ignore[index]
    report["met"] = file_p99 <= TARGET_MS
    # what the plugin adds to the interpreter's own start: steadier than p99 when the
    # machine is shared (a busy neighbour moves both forms alike)
    report["plugin_over_python_p50_ms"] = round(
        report["file"]["p50_ms"] - report["python_alone"]["p50_ms"], 2)  # type: ignore[index]
    report["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
