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

``--add`` measures ADD and DEL instead (root and network namespaces needed), against the
real thing as separate processes: ``podnet apiserver``, ``podnet run`` (the reference
provider) and ``podnet node`` (the test kit's node bed; the node a network namespace of its own, so
that its bridge is the bench's alone). ``--pods`` pods (default 100)
are created on one node and their PodNetworks waited for until Routed (a warm pool: no
ADD waits for the controller); then, one pod at a time, a new network namespace and
``podnet-cni ADD`` (the plugin's file, a new process), timed from the spawn to its exit
with the result; then DEL of each, timed the same way. The first ``WARMUP`` pods are not
counted. Target: ADD p99 <= 250 ms. ``add_over_startup_p50_ms`` is what an ADD costs
beyond the plugin's own start (VERSION, measured in the same run): the agent's share and
the socket's. Everything made (namespaces, veths, the bridge, processes) is removed,
also when the run fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = ROOT / "cni" / "plugin.py"
TARGET_MS = 50.0
ADD_TARGET_MS = 250.0
#: pods plugged before the counted ones: the agent's and the bridge's first-time costs
WARMUP = 3
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


def _timed(argv: list[str], env: dict[str, str], stdin: bytes
           ) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """One plugin process: milliseconds from before its spawn to its exit."""
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False,
                          timeout=120)
    return (time.perf_counter() - start) * 1000, done


def measure_add(pods: int) -> dict[str, Any]:
    """ADD then DEL of ``pods`` pods, each a new plugin process, against the agent and
    the controller as processes; the pods' records Routed before the first ADD."""
    from podnet.testing.cni import pod_args
    from podnet.testing.netns import netns_unavailable
    from podnet.testing.nodebed import (
        NODE,
        POD_CIDR,
        AgentClient,
        Host,
        Stack,
        Underlay,
        links_in,
        node_object,
        pod,
        reference_config,
        wait_for,
    )

    why = netns_unavailable()
    if why:
        raise SystemExit(f"bench/cni.py --add: {why}")
    total = pods + WARMUP
    if pods < 1:
        raise SystemExit(f"--pods: at least 1, not {pods}")
    if total > 250:  # the node's podCIDR is a /24
        raise SystemExit(f"--pods: at most {250 - WARMUP} on the one node's /24")
    argv = [sys.executable, str(PLUGIN)]
    with tempfile.TemporaryDirectory(prefix="pncnibench-") as tmp_dir:
        tmp = Path(tmp_dir)
        config = reference_config(tmp)
        # the pool holds every pod's address up front: no ADD waits for a refill
        config["policies"] = {"reference": {"minIdle": total, "maxIdle": total + 10}}
        # the node is a namespace of its own: its bridge and veths are nobody else's
        underlay = Underlay()
        host = Host(bridges=())
        stack: Stack | None = None
        try:
            node = underlay.add_node(NODE, POD_CIDR)
            stack = Stack(tmp, controller_config=config, netns=underlay.router,
                          address=underlay.router_address)
            stack.create([node_object(NODE, POD_CIDR, node.address)])
            stack.agent(NODE, netns=node.netns)
            wait_for("the agent ready", AgentClient(stack.socket).ready)
            names = [f"bench-{i:03d}" for i in range(total)]
            stack.create([pod(name) for name in names])
            wait_for(f"{total} PodNetworks Routed", lambda: sum(
                1 for pn in stack.records().values()
                if (pn.get("status") or {}).get("phase") == "Routed") >= total, timeout=180)
            records = stack.records()
            network = json.dumps({"cniVersion": "1.1.0", "name": "podnet",
                                  "type": "podnet-cni",
                                  "agentSocket": stack.socket}).encode()
            base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_PATH": "/opt/cni/bin",
                    "CNI_IFNAME": "eth0"}
            envs = []
            for name in names:
                _, path = host.netns()
                envs.append({**base, "CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
                             "CNI_ARGS": pod_args(name=name, uid=None)})
            add_ms: list[float] = []
            for i, (name, env) in enumerate(zip(names, envs, strict=True)):
                elapsed, done = _timed(argv, {**env, "CNI_COMMAND": "ADD"}, network)
                if done.returncode != 0:
                    raise SystemExit(f"ADD of {name} failed: {done.stdout.decode()}")
                got = json.loads(done.stdout)["ips"][0]["address"].split("/")[0]
                if got != records[name]["status"]["ip"]:
                    raise SystemExit(f"ADD of {name} answered {got}, its record says "
                                     f"{records[name]['status']['ip']}")
                if i >= WARMUP:
                    add_ms.append(elapsed)
            del_ms: list[float] = []
            for i, (name, env) in enumerate(zip(names, envs, strict=True)):
                elapsed, done = _timed(argv, {**env, "CNI_COMMAND": "DEL"}, network)
                if done.returncode != 0:
                    raise SystemExit(f"DEL of {name} failed: {done.stdout.decode()}")
                if i >= WARMUP:
                    del_ms.append(elapsed)
            # the plugin's own start in the same run, for the agent's share
            startup = measure({"file": argv}, 20)["file"]
            leftover = sum(1 for link in links_in(node.netns) if link.startswith("pnv"))
        finally:
            try:
                if stack is not None:
                    stack.close()
            finally:
                try:
                    host.cleanup()
                finally:
                    underlay.cleanup()
    add = _summary(add_ms)
    return {
        "benchmark": "cni_add", "pods": pods, "warmup_pods": WARMUP,
        "target_add_p99_ms": ADD_TARGET_MS, "add": add, "del": _summary(del_ms),
        "startup": startup, "met": add["p99_ms"] <= ADD_TARGET_MS,  # type: ignore[operator]
        "add_over_startup_p50_ms": round(
            add["p50_ms"] - startup["p50_ms"], 2),  # type: ignore[operator]
        "veths_left_after_del": leftover,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 runs (--add: 10 pods)")
    parser.add_argument("--python", action="append", default=[],
                        help="also run the file with this interpreter (a host's python3)")
    parser.add_argument("--add", action="store_true",
                        help="measure ADD and DEL against the agent (root) instead")
    parser.add_argument("--pods", type=int, default=100, help="--add: pods timed")
    args = parser.parse_args()
    if args.add:
        load_before = round(os.getloadavg()[0], 2)
        report = {"python": platform.python_version(), "cpus": os.cpu_count(),
                  **measure_add(10 if args.quick else args.pods),
                  "load_average_1m_before": load_before,
                  "load_average_1m": round(os.getloadavg()[0], 2)}
        print(json.dumps(report, indent=2))
        return 0 if report["veths_left_after_del"] == 0 else 1
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
