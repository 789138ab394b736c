"""Networks declared as objects (issue 27): a Subnet created at run time serving its first
pod, and a busy Subnet's status kept current without a write per pod.

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md.

subnet_to_routed  ``--trials`` times: a Subnet (listing a new namespace) and a pod of that
                  namespace are created together on a running engine; measured: the
                  engine's CPU and its steps until the pod's PodNetwork is Routed with an
                  address of that Subnet (the fake clock does not move: no wait, no
                  retry, no restart), p50 and p99.
status            ``--pods`` pods (5,000) allocated from one Subnet in waves of
                  ``--wave`` a quarter second apart on the fake clock, then half of them
                  deleted the same way; counted: the Subnet's status writes, the most in
                  any one second, and whether the final counts are exact.

Everything runs in one process on the in-memory cluster with the test kit's ``lab``
provider (``podnet.testing.networklab``), driven deterministically on a fake clock.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from typing import Any

from podnet.core.cluster.port import NAMESPACE, POD, POD_NETWORK, SUBNET
from podnet.testing.harness import EngineRig
from podnet.testing.networklab import LAB, NetworkLab, in_block

#: the issue's bound: a Subnet's status written at most once a second
TARGET_WRITES_PER_SECOND = 1


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rig() -> tuple[EngineRig, NetworkLab, str]:
    lab = NetworkLab()
    r = EngineRig([(LAB, lab)], config={"defaultProvider": LAB}, namespaces=("base",))
    return r, lab, r.node(0)


def pod(r: EngineRig, name: str, namespace: str, node: str) -> None:
    r.cluster.create(POD, {"metadata": {"name": name, "namespace": namespace},
                           "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                           "status": {"phase": "Running"}})


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]


def subnet_to_routed(trials: int) -> dict[str, Any]:
    r, _, node = rig()
    cpu_ms: list[float] = []
    steps: list[int] = []
    for i in range(trials):
        ns = f"team-{i}"
        cidr = f"10.{100 + i // 256}.{i % 256}.0/24"
        r.cluster.create(NAMESPACE, {"metadata": {"name": ns}})
        r.engine.run_until_idle()
        started = time.thread_time()
        r.cluster.create(SUBNET, {"metadata": {"name": f"s-{i}"}, "spec": {
            "provider": LAB, "cidrBlock": cidr, "namespaces": [ns]}})
        pod(r, "web-0", ns, node)
        n = r.engine.run_until_idle()
        cpu_ms.append((time.thread_time() - started) * 1000)
        steps.append(n)
        (record,) = r.cluster.list(POD_NETWORK, ns).items
        status = record.get("status", {})
        if status.get("phase") != "Routed" or not in_block(status.get("ip", "0.0.0.0"), cidr):
            raise SystemExit(f"trial {i}: the pod is not Routed on its Subnet: {status}")
    return {"trials": trials, "cpu_ms_p50": round(statistics.median(cpu_ms), 3),
            "cpu_ms_p99": round(percentile(cpu_ms, 0.99), 3),
            "steps_p50": statistics.median(steps), "steps_max": max(steps),
            "fake_seconds": 0.0,
            "note": "CPU of the engine from the Subnet's create to the pod Routed, "
                    "including the Subnet's own reconcile and status write"}


def status(pods: int, wave: int) -> dict[str, Any]:
    r, _, node = rig()
    r.cluster.create(SUBNET, {"metadata": {"name": "big"}, "spec": {
        "provider": LAB, "cidrBlock": "10.200.0.0/16", "default": True}})
    r.settle()
    # when (fake clock) each status write of the Subnet reached the API server
    written: list[float] = []
    patch = r.cluster.patch

    def counted_patch(kind: Any, name: str, body: Any, namespace: Any = None,
                      patch_type: Any = "merge", subresource: Any = None) -> Any:
        if kind == SUBNET and subresource == "status":
            written.append(r.clock.monotonic())
        return patch(kind, name, body, namespace, patch_type, subresource)

    r.cluster.patch = counted_patch  # type: ignore[method-assign]

    def run_waves(names: list[str], make: bool) -> float:
        started = r.clock.monotonic()
        for first in range(0, len(names), wave):
            for name in names[first:first + wave]:
                if make:
                    pod(r, name, "base", node)
                else:
                    r.cluster.delete(POD, name, "base", grace_period_seconds=0)
            r.engine.run_until_idle()
            r.clock.advance(0.25)
        r.settle(advance=2)
        return r.clock.monotonic() - started

    names = [f"p{i}" for i in range(pods)]
    t_up = run_waves(names, True)
    up = r.cluster.get(SUBNET, "big")["status"]
    t_down = run_waves(names[: pods // 2], False)
    down = r.cluster.get(SUBNET, "big")["status"]
    seconds = t_up + t_down
    # the most writes in any window of one second [t, t + 1)
    most = max((sum(1 for u in written if t <= u < t + 1.0) for t in written), default=0)
    return {"pods": pods, "wave": wave, "fake_seconds": seconds,
            "status_writes": len(written),
            "writes_per_second": round(len(written) / seconds, 3),
            "most_writes_in_one_second": most,
            "using_after_create": up.get("v4UsingIPs"),
            "using_after_delete": down.get("v4UsingIPs"),
            "counts_exact": up.get("v4UsingIPs") == pods
            and down.get("v4UsingIPs") == pods - pods // 2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--wave", type=int, default=100)
    parser.add_argument("--quick", action="store_true", help="20 trials, 1,000 pods")
    args = parser.parse_args(argv)
    trials = 20 if args.quick else args.trials
    pods = 1000 if args.quick else args.pods
    log(f"subnet_to_routed: {trials} trials")
    first = subnet_to_routed(trials)
    log(f"status: {pods} pods in waves of {args.wave}")
    counted = status(pods, args.wave)
    report = {
        "benchmark": "networks",
        "env": {"python": platform.python_version(), "machine": platform.machine()},
        "subnet_to_routed": first,
        "status": counted,
        "met": {"status_at_most_one_write_per_second":
                counted["most_writes_in_one_second"] <= TARGET_WRITES_PER_SECOND,
                "status_counts_exact": counted["counts_exact"]},
    }
    print(json.dumps(report, indent=2))
    return 0 if all(report["met"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
