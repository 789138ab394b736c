"""NetworkPolicy on a node (goal P14): policy created -> enforced in the node's nftables.

Prints one JSON object to stdout; progress goes to stderr. See bench/README.md.

A node with ``--pods`` pods (100) that the agent plugged, each with a Routed default
PodNetwork, labelled so that each policy selects a few of them; then ``--policies``
NetworkPolicies (100) created one at a time, each waited for. The agent's enforcer
(``podnet.node.netpol.PolicyEnforcer``, as ``podnet node`` runs it: its informers and its
programming thread) runs in this process on the in-memory cluster, and programs the
nftables of a network namespace of its own (root needed). For each policy:

latency     from its create to the return of the ``nft`` transaction whose table holds
            it (the kernel has it then); the goal is p99 <= 1 s
cpu         this process's CPU and its children's (``nft``) from the create to then: the
            agent's cost of one change (rendering the whole table, one transaction)

At the end the kernel's table is read back once: every policy's comment must be there.
``rules_per_pod`` is the table's rules (dispatch aside) per restricted pod at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY, POD, POD_NETWORK
from podnet.linux import nftables
from podnet.linux.nftables import HostPort, Table
from podnet.node.netpol import PolicyEnforcer
from podnet.sim.memory import InMemoryCluster

NODE = "node-00"


def _pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i:03d}", "namespace": "bench", "uid": f"uid-{i}",
                         "labels": {"app": f"a{i % 20}", "tier": f"t{i % 5}"}},
            "spec": {"nodeName": NODE, "containers": [{
                "name": "c", "image": "i", "ports": [{"name": "http", "containerPort": 8080}]}]},
            "status": {"phase": "Running"}}


def _address(i: int) -> str:
    return f"10.93.{i // 250}.{i % 250 + 2}"


def _record(i: int) -> dict[str, Any]:
    return {"apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": f"pod-{i:03d}", "namespace": "bench",
                         "labels": {"podnet.io/node": NODE}},
            "spec": {"podName": f"pod-{i:03d}", "podUid": f"uid-{i}", "nodeName": NODE,
                     "provider": "reference"},
            "status": {"phase": "Routed", "ip": _address(i), "prefixLength": 24}}


def _policy(i: int) -> dict[str, Any]:
    """Each selects the pods of one app (5 of 100), from one tier and an ipBlock, on a
    port by number, a range and the named port; every fourth restricts egress too."""
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {"app": f"a{i % 20}"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"tier": f"t{i % 5}"}}},
                              {"ipBlock": {"cidr": f"10.{100 + i // 250}.{i % 250}.0/24",
                                           "except": [f"10.{100 + i // 250}.{i % 250}.128/25"]}}],
                     "ports": [{"port": 80 + i}, {"port": 9000, "endPort": 9100},
                               {"port": "http"}, {"protocol": "UDP", "port": 53}]}]}
    if i % 4 == 0:
        spec["egress"] = [{"to": [{"namespaceSelector": {}}], "ports": [{"port": 443}]}]
        spec["policyTypes"] = ["Ingress", "Egress"]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": f"np-{i:03d}", "namespace": "bench"}, "spec": spec}


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _quantiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    at = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50": round(statistics.median(ordered), 2), "p99": round(at(0.99), 2),
            "max": round(ordered[-1], 2), "mean": round(statistics.fmean(ordered), 2)}


def run(pods: int, policies: int, netns: str) -> dict[str, Any]:
    cluster = InMemoryCluster()
    cluster.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "bench"}})
    ports: dict[str, HostPort] = {}
    for i in range(pods):
        cluster.create(POD, _pod(i))
        made = cluster.create(POD_NETWORK, _record(i))
        cluster.update_status(POD_NETWORK, {**made, "status": _record(i)["status"]})
        ports[f"bench/pod-{i:03d}"] = HostPort(f"pnv{i:010x}", (_address(i),))

    applied: list[tuple[float, float, frozenset[str]]] = []  # (when, cpu, policies held)
    done = threading.Condition()
    real_apply = nftables.apply

    def timed_apply(table: Table, *, netns: str | None = None) -> None:
        real_apply(table, netns=netns)
        with done:
            applied.append((time.perf_counter(), _cpu(), frozenset(table.policies)))
            done.notify_all()

    nftables.apply = timed_apply  # type: ignore[assignment]
    enforcer = PolicyEnforcer(cluster, NODE, ports=lambda: ports, netns=netns)
    enforcer.start()
    latencies: list[float] = []
    cpus: list[float] = []
    try:
        for i in range(policies):
            key = f"bench/np-{i:03d}"
            start, cpu = time.perf_counter(), _cpu()
            cluster.create(NETWORK_POLICY, _policy(i))
            with done:
                while not any(key in held for _, _, held in applied):
                    if not done.wait(timeout=30):
                        raise RuntimeError(f"{key} not enforced within 30 s")
                when, cpu_then, _ = next(a for a in applied if key in a[2])
            latencies.append((when - start) * 1000)
            cpus.append((cpu_then - cpu) * 1000)
            if (i + 1) % 20 == 0:
                print(f"{i + 1} policies enforced", file=sys.stderr)
        listing = nftables.read(netns=netns) or []
        comments = " ".join(nftables.listed_comments(listing))
        missing = [f"bench/np-{i:03d}" for i in range(policies)
                   if f"bench/np-{i:03d}" not in comments]
        table = enforcer.table
        assert table is not None
        restricted = table.member_rules
    finally:
        enforcer.stop()
        nftables.apply = real_apply  # type: ignore[assignment]
    per_pod = list(restricted.values())
    return {
        "bench": "netpol_node", "pods": pods, "policies": policies,
        "python": platform.python_version(), "load_average": os.getloadavg(),
        "enforced_latency_ms": _quantiles(latencies),
        "goal_p14_p99_ms": 1000, "goal_met": sorted(latencies)[
            min(len(latencies) - 1, int(0.99 * len(latencies)))] <= 1000,
        "cpu_ms_per_change": _quantiles(cpus),
        "transactions": enforcer.applied, "renders": enforcer.rendered,
        "table": {"rules": table.rules, "chains": len(restricted),
                  "restricted_pods": len(restricted),
                  "rules_per_restricted_pod": {
                      "mean": round(statistics.fmean(per_pod), 1) if per_pod else 0,
                      "max": max(per_pod, default=0)},
                  "json_bytes": len(table.document())},
        "missing_in_kernel": missing,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--policies", type=int, default=100)
    args = parser.parse_args()
    name = f"pnbench-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        result = run(args.pods, args.policies, f"/run/netns/{name}")
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)
    print(json.dumps(result, indent=2))
    return 0 if not result["missing_in_kernel"] else 1


if __name__ == "__main__":
    sys.exit(main())
