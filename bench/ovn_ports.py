"""OVN port churn (goal P6): podnet's create and delete of N logical switch ports against
one ``ovn-nbctl`` invocation per port doing the same, on one throwaway NB server.

Each port has an address ("MAC IP"), port security with the same entry, and membership
of one port group (a security group: podnet writes its four ACLs once, ovn-nbctl none).

podnet: the OVN provider's hooks, as the engine's workers call them: ``--workers`` threads
each run allocate + route for their share of the pod networks (create), then release
(delete). Commands of concurrent callers share transactions (group commit).

ovn-nbctl: one process per port, its commands chained with ``--`` (create: the port with
its addresses and port security, on the switch, in the group; delete: ``lsp-del``).

Prints one JSON object on stdout; progress on stderr. Needs ovsdb-server and ovn-nbctl
(Debian ``ovn-central``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from podnet.core.models import (
    NetworkRequest,
    NodeInfo,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.types import AllocateContext, NodeContext, PodNetworkContext
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.plugins.ovn.provider import OvnProvider

SUBNET = {"name": "bench", "cidr": "10.40.0.0/16", "gateway_type": "centralized"}
GROUP = "sg-bench"


def _record(i: int) -> PodNetwork:
    return PodNetwork(
        metadata=ObjectMeta(name=f"pod-{i:05d}.default.{i:08x}", namespace="bench"),
        spec=PodNetworkSpec(pod_name=f"pod-{i:05d}", pod_uid=f"{i:08x}", node_name="node-0",
                            provider="ovn", requests=NetworkRequest(
                                port_security=True, security_groups=(GROUP,))))


def podnet_run(remote: str, ports: int, workers: int) -> dict[str, Any]:
    # a security group with one rule (its ACLs are written by the first route)
    plugin = OvnProvider(remote, [SUBNET], seed=0,
                         security_groups={GROUP: {"ingress": [{"protocol": "tcp", "port": 80}]}})
    node = NodeContext(node=NodeInfo(name="node-0", uid="n0"))
    records = [_record(i) for i in range(ports)]
    plugin.client.ensure_infra(switches=["bench"], port_groups=["sg_sg_bench"])
    before = plugin.client.transactions
    routed: list[PodNetwork | None] = [None] * ports

    def create(i: int) -> None:
        pn = records[i]
        got = plugin.podnet_allocate(context=AllocateContext(pod_network=pn, node=node))
        assert got is not None
        status = PodNetworkStatus(phase=Phase.ALLOCATED, ip=got.ip, mac=got.mac,
                                  subnet=got.subnet, gateway=got.gateway,
                                  interface=got.interface)
        pn = PodNetwork(metadata=pn.metadata, spec=pn.spec, status=status)
        plugin.podnet_route(context=PodNetworkContext(pod_network=pn, node=node))
        routed[i] = pn

    def delete(i: int) -> None:
        pn = routed[i]
        assert pn is not None
        plugin.podnet_release(context=PodNetworkContext(pod_network=pn, node=node))

    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        list(pool.map(create, range(ports)))
        created = time.perf_counter() - t0
        made = sum(1 for p in plugin.client.ports() if p.name.startswith("bench/"))
        create_txns = plugin.client.transactions - before
        t0 = time.perf_counter()
        list(pool.map(delete, range(ports)))
        deleted = time.perf_counter() - t0
    left = sum(1 for p in plugin.client.ports() if p.name.startswith("bench/"))
    txns = plugin.client.transactions - before
    plugin.close()
    if made != ports or left:
        raise SystemExit(f"podnet made {made} ports of {ports}, left {left}")
    return {"create_s": round(created, 3), "delete_s": round(deleted, 3),
            "create_transactions": create_txns, "delete_transactions": txns - create_txns,
            "workers": workers}


def nbctl_run(remote: str, ports: int) -> dict[str, Any]:
    db = f"--db={remote}"
    subprocess.run(["ovn-nbctl", db, "ls-add", "nbctl", "--", "pg-add", "pg_nbctl"],
                   check=True, capture_output=True)
    t0 = time.perf_counter()
    for i in range(ports):
        name = f"nbctl-{i:05d}"
        entry = f"0a:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x} " \
                f"10.41.{i >> 8 & 255}.{i & 255}"
        subprocess.run(["ovn-nbctl", db, "--", "--id=@p", "create", "Logical_Switch_Port",
                        f"name={name}", f'addresses="{entry}"', f'port_security="{entry}"',
                        "--", "add", "Logical_Switch", "nbctl", "ports", "@p",
                        "--", "add", "Port_Group", "pg_nbctl", "ports", "@p"],
                       check=True, capture_output=True)
    created = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in range(ports):
        subprocess.run(["ovn-nbctl", db, "lsp-del", f"nbctl-{i:05d}"], check=True,
                       capture_output=True)
    deleted = time.perf_counter() - t0
    return {"create_s": round(created, 3), "delete_s": round(deleted, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ports", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=16,
                        help="threads calling the provider, as the engine's workers do")
    parser.add_argument("--json", action="store_true", help="JSON only (the default output)")
    args = parser.parse_args(argv)
    problem = ovsdb_server_available() or (
        None if shutil.which("ovn-nbctl") else "ovn-nbctl is not installed (Debian ovn-central)")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    with NbServer() as server:
        print(f"podnet: {args.ports} ports ...", file=sys.stderr)
        podnet = podnet_run(server.remote, args.ports, args.workers)
        print(f"ovn-nbctl: {args.ports} invocations each way ...", file=sys.stderr)
        nbctl = nbctl_run(server.remote, args.ports)
    result = {
        "ports": args.ports,
        "podnet": podnet,
        "ovn_nbctl": nbctl,
        "speedup_create": round(nbctl["create_s"] / max(podnet["create_s"], 1e-9), 1),
        "speedup_delete": round(nbctl["delete_s"] / max(podnet["delete_s"], 1e-9), 1),
    }
    result["goal_met"] = result["speedup_create"] >= 5 and result["speedup_delete"] >= 5
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
