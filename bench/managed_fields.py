"""What recording ``metadata.managedFields`` costs per pod write in the API emulator.

    .venv/bin/python bench/managed_fields.py [--pods N]

Prints one JSON object: the CPU (``time.thread_time``) per pod of the field manager's
step on an HTTP pod create (``create_us``: the creator's Update entry), on an update by
another manager (``update_us``: a label added), and on a server-side apply of the same
pod (``apply_create_us``), beside the in-memory store's own create of the same pods, for
scale; and the memory one pod's managedFields hold (``stored_bytes_per_pod``,
tracemalloc). Pods are defaulted as the emulator defaults them before the step runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from typing import Any

from podnet.core.cluster.port import POD
from podnet.sim import fieldmanager
from podnet.sim.builtin_schema import schemas
from podnet.sim.kinds import pod_defaults
from podnet.sim.memory import InMemoryCluster

NOW = "2026-01-01T00:00:00Z"


def _pod(i: int) -> dict[str, Any]:
    return pod_defaults({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pod-{i:06d}", "namespace": "default",
                     "labels": {"app": f"app-{i % 50}", "podnet.io/network": "blue"}},
        "spec": {"nodeName": f"node-{i % 500:04d}",
                 "containers": [{"name": "app", "image": "registry.local/app:1.2",
                                 "ports": [{"containerPort": 8080}]}]},
    })


def _per_pod(n: int, step: Any) -> float:
    start = time.thread_time()
    for i in range(n):
        step(i)
    return (time.thread_time() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20000)
    n = parser.parse_args(argv).pods
    pods = [_pod(i) for i in range(n)]
    shape = fieldmanager.Shape({"$ref": schemas().definition_of(POD) or ""},
                               schemas().definitions)
    made = [fieldmanager.record_update(None, p, shape, "kubectl-create", None, "main", NOW,
                                       "v1") for p in pods]
    relabeled = [{**p, "metadata": {**p["metadata"],
                                    "labels": {**p["metadata"]["labels"], "extra": "1"}}}
                 for p in made]
    cluster = InMemoryCluster()
    result = {
        "pods": n,
        "create_us": _per_pod(n, lambda i: fieldmanager.record_update(
            None, pods[i], shape, "kubectl-create", None, "main", NOW, "v1")),
        "update_us": _per_pod(n, lambda i: fieldmanager.record_update(
            made[i], relabeled[i], shape, "kubectl-label", None, "main", NOW, "v1")),
        "apply_create_us": _per_pod(n, lambda i: fieldmanager.apply(
            None, pods[i], shape, "kubectl", None, "main", False, NOW, "v1")),
        "store_create_us": _per_pod(n, lambda i: cluster.create(POD, pods[i])),
    }
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    kept = [fieldmanager.record_update(None, p, shape, "kubectl-create", None, "main", NOW,
                                       "v1")["metadata"]["managedFields"] for p in pods]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    result["stored_bytes_per_pod"] = sum(
        d.size_diff for d in after.compare_to(before, "filename")) / len(kept)
    result = {k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
