"""What the API emulator's validation of built-in objects costs per pod write.

    .venv/bin/python bench/builtin_validation.py [--pods N]

Prints one JSON object: the CPU (``time.thread_time``) per pod of each step the emulator
adds to a pod create and update over HTTP (decoding against the v1.32 schema, the
v1 conversions, validation.go's rules), beside the in-memory store's own create of the
same pods and a whole HTTP create through the official client, for scale. Pods differ
in name and node; their labels repeat, as a cluster's do.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from podnet.core.cluster.port import POD
from podnet.sim import builtin_validation
from podnet.sim.apiserver import ApiServer
from podnet.sim.builtin_schema import schemas
from podnet.sim.kinds import pod_defaults
from podnet.sim.memory import InMemoryCluster


def _pod(i: int) -> dict[str, Any]:
    return pod_defaults({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"pod-{i:06d}", "namespace": "default",
                     "labels": {"app": f"app-{i % 50}", "podnet.io/network": "blue"},
                     "annotations": {"podnet.io/networks": "blue"}},
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
    args = parser.parse_args(argv)
    n = args.pods
    pods = [_pod(i) for i in range(n)]
    source = schemas()
    source.decode(POD, pods[0])  # compiles the decoders
    decoded = [source.decode(POD, p).value for p in pods]
    updated = [{**p, "spec": {**p["spec"], "containers": [
        {**p["spec"]["containers"][0], "image": "registry.local/app:1.3"}]}} for p in decoded]

    def store_create(i: int) -> None:
        cluster.create(POD, pods[i])

    cluster = InMemoryCluster()
    result = {
        "pods": n,
        "decode_us": _per_pod(n, lambda i: source.decode(POD, pods[i])),
        "normalize_us": _per_pod(n, lambda i: builtin_validation.normalize(POD, decoded[i])),
        "validate_create_us": _per_pod(
            n, lambda i: builtin_validation.validate(POD, decoded[i], None, None)),
        "validate_update_us": _per_pod(
            n, lambda i: builtin_validation.validate(POD, updated[i], decoded[i], None)),
        "store_create_us": _per_pod(n, store_create),
    }
    result["added_per_create_us"] = (
        result["decode_us"] + result["normalize_us"] + result["validate_create_us"])
    from kubernetes import client

    http_pods = min(n, 2000)
    with ApiServer() as server, client.ApiClient(client.Configuration(host=server.url)) as api:
        core = client.CoreV1Api(api)
        wall = time.perf_counter()
        for i in range(http_pods):
            body = {"metadata": {"name": f"h-{i}", "labels": {"app": "a"}},
                    "spec": {"containers": [{"name": "app", "image": "app:1"}]}}
            core.create_namespaced_pod("default", body)
        result["http_create_wall_us"] = (time.perf_counter() - wall) / http_pods * 1e6
    result = {k: round(v, 1) if isinstance(v, float) else v for k, v in result.items()}
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
