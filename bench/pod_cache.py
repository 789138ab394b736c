"""What caching pods through an informer costs: the lean ``pod_info`` transform against
the raw dict (supports goal P4; not itself a goal).

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md.

A second process serves ``--pods`` realistic pods (about 4 KiB of JSON each, as a
Deployment's pods are served) from the API emulator, so that tracemalloc and RSS in this
one see only the client's side: the response, ``json.loads``, the transform, the cache.
For each transform an ``Informer`` over ``KubeCluster`` (the official client over HTTP)
lists every pod and is stopped; what stays allocated after a collection is the cache.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from podnet.core.cluster.informer import Informer
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import NODE, POD, Obj
from podnet.core.objects import pod_info
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster


def realistic_pod(i: int) -> Obj:
    """A Deployment's pod roughly as the API serves it (~4 KiB of JSON)."""
    name = f"web-7d9c8b6f5-{i:05d}"
    node = f"node-{i % 200:03d}"
    return {
        "metadata": {
            "name": name,
            "namespace": f"team-{i % 20}",
            "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5", "tier": "frontend"},
            "annotations": {
                "podnet.io/subnets": "subnet-a,subnet-b",
                "kubectl.kubernetes.io/restartedAt": "2026-01-01T00:00:00Z",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9c8b6f5",
                    "uid": "5b6c8c1e-0f57-4a8e-9e0e-3c1d2a4b5c6d",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-01-01T00:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}, "f:tier": {}}},
                        "f:spec": {"f:containers": {'k:{"name":"web"}': {".": {}}}},
                    },
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "restartPolicy": "Always",
            "serviceAccountName": "web",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example.com/team/web:1.42.0",
                    "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                    "env": [
                        {"name": "LOG_LEVEL", "value": "info"},
                        {
                            "name": "POD_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}},
                        },
                    ],
                    "resources": {
                        "requests": {"cpu": "250m", "memory": "256Mi"},
                        "limits": {"memory": "512Mi"},
                    },
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x7k2p",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                    "readinessProbe": {
                        "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                        "periodSeconds": 10,
                    },
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                }
            ],
            "volumes": [
                {
                    "name": "kube-api-access-x7k2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                }
            ],
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "hostIP": f"10.1.{i % 200}.1",
            "podIP": f"10.2.{i // 250}.{i % 250}",
            "podIPs": [{"ip": f"10.2.{i // 250}.{i % 250}"}],
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}
                for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady")
            ],
            "containerStatuses": [
                {
                    "name": "web",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": "registry.example.com/team/web:1.42.0",
                    "imageID": "registry.example.com/team/web@sha256:" + "ab" * 32,
                    "containerID": f"containerd://{i:064x}",
                    "state": {"running": {"startedAt": "2026-01-01T00:00:04Z"}},
                }
            ],
        },
    }


def _raw(obj: Obj) -> Obj:
    return obj


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def serve(count: int, kubeconfig: str) -> None:
    """The API server's side: its store and threads stay out of the measured process."""
    store = InMemoryCluster()
    for i in range(count):
        store.create(POD, realistic_pod(i))
    with ApiServer(store, bookmark_interval=600) as server:
        server.write_kubeconfig(kubeconfig)
        print(server.url, flush=True)
        sys.stdin.read()  # until the measuring process closes our stdin


def measure(count: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = str(Path(tmp) / "kubeconfig")
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--pods", str(count), "--kubeconfig",
             kubeconfig],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        try:
            assert server.stdout is not None
            if not server.stdout.readline().startswith("http"):
                raise SystemExit("the API emulator did not start")
            size = sum(len(json.dumps(realistic_pod(i))) for i in range(100)) / 100
            result: dict[str, Any] = {"pods": count, "json_bytes_per_pod": round(size)}
            transforms: dict[str, Callable[[Obj], Any]] = {"pod_info": pod_info, "raw": _raw}
            with KubeCluster.from_kubeconfig(kubeconfig) as kube:
                kube.list(NODE)  # the connection pool and imports, outside the measurement
                for label, transform in transforms.items():
                    print(f"listing {count} pods through {label}", file=sys.stderr)
                    gc.collect()
                    rss_before = _rss()
                    tracemalloc.start()
                    base = tracemalloc.get_traced_memory()[0]
                    started = time.perf_counter()
                    informer: Informer[Any] = Informer(kube, POD, transform)
                    informer.start()
                    took = time.perf_counter() - started
                    informer.stop()  # the watch thread and its buffers are not the cache
                    gc.collect()
                    held, peak = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
                    rss_after = _rss()
                    if len(informer) != count:
                        raise SystemExit(f"{label}: cached {len(informer)} of {count} pods")
                    per_pod = (held - base) / count
                    result[label] = {
                        "held_bytes_per_pod": round(per_pod),
                        "mib_per_100k_pods": round(per_pod * 100_000 / 2**20, 1),
                        "peak_during_list_mib": round((peak - base) / 2**20, 2),
                        "rss_growth_mib": round((rss_after - rss_before) / 2**20, 1),
                        "list_and_cache_seconds_traced": round(took, 2),
                    }
                    del informer
        finally:
            assert server.stdin is not None
            server.stdin.close()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    lean, raw = result["pod_info"], result["raw"]
    result["lean_over_raw"] = round(lean["held_bytes_per_pod"] / raw["held_bytes_per_pod"], 3)
    result["python"] = platform.python_version()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--kubeconfig", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.pods, args.kubeconfig)
        return
    print(json.dumps(measure(args.pods), indent=2))


if __name__ == "__main__":
    main()
