"""The CNI plugin's start-up and ADD latency: the static ``podnet-cni`` beside the Python
plugin it replaced, in one run.

Prints one JSON object to stdout. Each run is a new process (the runtime starts the plugin
for every sandbox and every command), timed from before the spawn to its exit, with the
network configuration on stdin. Start-up is VERSION; the forms take turns (a busy
neighbour on the machine then slows all of them alike):

static             the static executable built from ``cni/podnet-cni.c``
                   (``podnet.testing.cni.plugin_path``): the form the target is for
python_plugin      the Python plugin of the last revision that had it (``cni/plugin.py``,
                   read with ``git show`` into a temporary file, run by this
                   interpreter as a host ran the installed copy): today's figures until
                   this round; absent (and said) outside a git checkout
python_alone       the interpreter printing a line: the floor no Python plugin goes below

Target (goal P11): p99 of the static form <= 5 ms. ``--runs`` (default 50), ``--quick``
(10 runs).

``--add`` measures ADD and DEL instead (root and network namespaces needed), against the
real thing as separate processes: ``podnet apiserver``, ``podnet run`` (the reference
provider) and ``podnet node`` (the test kit's node bed; the node a network namespace of its
own, so that its bridge is the bench's alone). ``--pods`` pods per form (default 50) are
created on one node and their PodNetworks waited for until Routed (a warm pool: no ADD
waits for the controller); then, one pod at a time, the forms taking turns, a new network
namespace and ``podnet-cni ADD`` (a new process: the static plugin through the agent's
exec route, or the Python plugin through the routes it used), timed from the spawn to its
exit with the result; then DEL of each by the form that added it. The first ``WARMUP``
pods are not counted. Target: ADD p99 <= 100 ms for the static plugin.
``add_over_startup_p50_ms`` is what an ADD costs beyond the plugin's own start (VERSION,
measured in the same run): the agent's share and the socket's. Everything made
(namespaces, veths, the bridge, processes) is removed, also when the run fails.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 5.0
ADD_TARGET_MS = 100.0
#: pods plugged before the counted ones: the agent's and the bridge's first-time costs
WARMUP = 3
BARE = "import sys; sys.stdout.write('{\"supportedVersions\": [1]}')"
OLD_PLUGIN = "cni/plugin.py"


@contextlib.contextmanager
def python_plugin() -> Iterator[tuple[Path | None, str]]:
    """The Python plugin of the last revision that had it, as a temporary file: (its path,
    the revision), or (None, why not)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True, check=True).stdout

    try:
        gone = git("rev-list", "-n", "1", "HEAD", "--", OLD_PLUGIN).strip()
        source = git("show", f"{gone}^:{OLD_PLUGIN}") if gone else ""
    except (OSError, subprocess.CalledProcessError) as exc:
        yield None, f"not a git checkout: {exc}"
        return
    if not source:
        yield None, f"no revision has {OLD_PLUGIN}"
        return
    with tempfile.TemporaryDirectory(prefix="pncnibench-py-") as tmp:
        path = Path(tmp) / "podnet-cni"  # the name it was installed under: the cni role
        path.write_text(source)
        yield path, gone[:12] + "^"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _summary(times: list[float]) -> dict[str, object]:
    return {"runs": len(times), "p50_ms": round(statistics.median(times), 2),
            "p99_ms": round(_percentile(times, 99), 2), "min_ms": round(min(times), 2),
            "max_ms": round(max(times), 2)}


def _children_cpu_ms() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (used.ru_utime + used.ru_stime) * 1000


def measure(forms: dict[str, list[str]], runs: int) -> dict[str, dict[str, object]]:
    """Each form ``runs`` times, the forms taking turns (a busy neighbour on the machine
    then slows all of them alike), after 3 warm-up rounds that are not counted. Beside
    the wall time, the CPU time each process used (user and system): the plugin's own
    cost, which the machine's load does not stretch."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CNI_COMMAND": "VERSION",
           "CNI_PATH": "/opt/cni/bin"}
    stdin = json.dumps({"cniVersion": "1.1.0"}).encode()
    times: dict[str, list[float]] = {name: [] for name in forms}
    cpu: dict[str, list[float]] = {name: [] for name in forms}
    for i in range(runs + 3):
        for name, argv in forms.items():
            used = _children_cpu_ms()
            start = time.perf_counter()
            done = subprocess.run(argv, input=stdin, env=env, capture_output=True,
                                  check=True)
            elapsed = (time.perf_counter() - start) * 1000
            assert json.loads(done.stdout)["supportedVersions"], done.stdout
            if i >= 3:
                times[name].append(elapsed)
                cpu[name].append(_children_cpu_ms() - used)
    return {name: {**_summary(found), "cpu_p50_ms": round(statistics.median(cpu[name]), 2),
                   "cpu_p99_ms": round(_percentile(cpu[name], 99), 2)}
            for name, found in times.items()}


def _timed(argv: list[str], env: dict[str, str], stdin: bytes
           ) -> tuple[float, subprocess.CompletedProcess[bytes]]:
    """One plugin process: milliseconds from before its spawn to its exit."""
    start = time.perf_counter()
    done = subprocess.run(argv, input=stdin, env=env, capture_output=True, check=False,
                          timeout=120)
    return (time.perf_counter() - start) * 1000, done


def measure_add(pods: int, forms: dict[str, list[str]]) -> dict[str, Any]:
    """ADD then DEL of ``pods`` pods per form, each a new plugin process, the forms taking
    turns, against the agent and the controller as processes; the pods' records Routed
    before the first ADD."""
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
    if pods < 1:
        raise SystemExit(f"--pods: at least 1, not {pods}")
    total = (pods + WARMUP) * len(forms)
    if total > 250:  # the node's podCIDR is a /24
        raise SystemExit(f"--pods: at most {250 // len(forms) - WARMUP} per form on the one "
                         f"node's /24 ({len(forms)} forms)")
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
            # pod i is the form i % len(forms)'s: the forms take turns
            order = list(forms)
            plan = []
            for i, name in enumerate(names):
                _, path = host.netns()
                plan.append((name, order[i % len(order)], i // len(order) >= WARMUP,
                             {**base, "CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
                              "CNI_ARGS": pod_args(name=name, uid=None)}))
            add_ms: dict[str, list[float]] = {form: [] for form in forms}
            del_ms: dict[str, list[float]] = {form: [] for form in forms}
            for name, form, counted, env in plan:
                elapsed, done = _timed(forms[form], {**env, "CNI_COMMAND": "ADD"}, network)
                if done.returncode != 0:
                    raise SystemExit(f"ADD of {name} ({form}) failed: {done.stdout.decode()}")
                got = json.loads(done.stdout)["ips"][0]["address"].split("/")[0]
                if got != records[name]["status"]["ip"]:
                    raise SystemExit(f"ADD of {name} ({form}) answered {got}, its record "
                                     f"says {records[name]['status']['ip']}")
                if counted:
                    add_ms[form].append(elapsed)
            for name, form, counted, env in plan:
                elapsed, done = _timed(forms[form], {**env, "CNI_COMMAND": "DEL"}, network)
                if done.returncode != 0:
                    raise SystemExit(f"DEL of {name} ({form}) failed: {done.stdout.decode()}")
                if counted:
                    del_ms[form].append(elapsed)
            # the plugins' own start in the same run, for the agent's share
            startup = measure(forms, 20)
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
    report: dict[str, Any] = {
        "benchmark": "cni_add", "pods": pods, "warmup_pods": WARMUP,
        "target_add_p99_ms": ADD_TARGET_MS,
    }
    for form in forms:
        add = _summary(add_ms[form])
        report[form] = {
            "add": add, "del": _summary(del_ms[form]), "startup": startup[form],
            "add_over_startup_p50_ms": round(
                add["p50_ms"] - startup[form]["p50_ms"], 2),  # type: ignore[operator]
        }
    report["met"] = report["static"]["add"]["p99_ms"] <= ADD_TARGET_MS
    report["veths_left_after_del"] = leftover
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--quick", action="store_true", help="10 runs (--add: 10 pods)")
    parser.add_argument("--add", action="store_true",
                        help="measure ADD and DEL against the agent (root) instead")
    parser.add_argument("--pods", type=int, default=50, help="--add: pods timed per form")
    parser.add_argument("--static-only", action="store_true",
                        help="the static plugin alone, not the Python plugin beside it")
    args = parser.parse_args()
    from podnet.testing.cni import plugin_path

    with python_plugin() as (old, revision):
        forms = {"static": [str(plugin_path())]}
        if old is not None and not args.static_only:
            forms["python_plugin"] = [sys.executable, str(old)]
        report: dict[str, Any] = {"python": platform.python_version(),
                                  "cpus": os.cpu_count(),
                                  "python_plugin_revision": revision if old else None}
        if old is None:
            report["python_plugin_skipped"] = revision
        if args.add:
            report["load_average_1m_before"] = round(os.getloadavg()[0], 2)
            report.update(measure_add(10 if args.quick else args.pods, forms))
            report["load_average_1m"] = round(os.getloadavg()[0], 2)
            print(json.dumps(report, indent=2))
            return 0 if report["veths_left_after_del"] == 0 else 1
        # the interpreter alone, for scale: what no Python plugin can go below
        forms["python_alone"] = [sys.executable, "-c", BARE]
        report.update({"benchmark": "cni_startup", "command": "VERSION",
                       "target_ms": TARGET_MS})
        report.update(measure(forms, 10 if args.quick else args.runs))
    report["met"] = report["static"]["p99_ms"] <= TARGET_MS
    report["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
