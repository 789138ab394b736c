"""OVN port churn (goal P6): podnet's create and delete of N logical switch ports against
one ``ovn-nbctl`` invocation per port doing the same, on one throwaway NB server.

Each port has an address ("MAC IP"), port security with the same entry, and membership
of one port group (a security group: podnet writes its four ACLs once, ovn-nbctl none).

The bulk bound: the same ports, with the external ids podnet writes on a pod's port, in
one transaction each way through podnet's NB client (``bulk``, ``vs_bulk``: goal P6);
``bulk_thin`` is the bound with two external ids only (the bound before 2026-12-06).
``--no-nbctl`` skips ovn-nbctl (minutes on a loaded machine).

podnet: the OVN provider's hooks, as the engine's workers call them: ``--workers`` threads
each run allocate + route for their share of the pod networks (create), then release
(delete). Commands of concurrent callers share transactions (group commit).

ovn-nbctl: one process per port, its commands chained with ``--`` (create: the port with
its addresses and port security, on the switch, in the group; delete: ``lsp-del``).

Plug (``--plug-pods``, default 200; 0 skips it): the time from a pod created to its CNI
ADD answered with the port bound, on one real chassis, everything as processes: ``podnet
apiserver``, ``podnet run --provider ovn`` (NB, SB and northd of the test kit's OVN bed),
``podnet node --provider ovn`` in the chassis' namespace (OVS userspace datapath,
``ovn-controller``), and the real ``podnet-cni`` (the static plugin, a new process per
ADD, as a runtime runs it). One pod at a time: the Pod is POSTed to the apiserver, then
ADD is spawned at once (it waits for the controller to allocate and route the record,
then for ovn-controller to install the port); timed from before the POST to the plugin's
exit. After each ADD, NB's ``Logical_Switch_Port.up`` is read (not timed):
``nb_up_at_answer`` counts the ports already up when ADD answered;
``first_quarter_p50_ms`` and ``last_quarter_p50_ms`` show how the time grows as the
chassis fills. The first ``WARMUP`` pods are not counted. Then DEL of each;
``ovs_ports_left`` must be 0.
Needs root, network namespaces, ``ovn-host`` and ``openvswitch-switch``.

Prints one JSON object on stdout; progress on stderr. Needs ovsdb-server and ovn-nbctl
(Debian ``ovn-central``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
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
#: pods plugged before the counted ones: the agent's, OVS's and the controller's first-time
#: costs
WARMUP = 3


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _summary(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": round(_percentile(ms, 50), 1), "p99_ms": round(_percentile(ms, 99), 1),
            "max_ms": round(max(ms), 1), "mean_ms": round(sum(ms) / len(ms), 1)}


def plug_run(pods: int) -> dict[str, Any]:
    """``pods`` pods, one at a time: created, then ADD by the real plugin; the time from
    the create to ADD's answer (the port bound by ovn-controller)."""
    from podnet.linux.netns import run_in_netns
    from podnet.testing.cni import plugin_path, pod_args
    from podnet.testing.nodebed import (
        NODE,
        AgentClient,
        Host,
        Stack,
        Underlay,
        node_object,
        pod,
        wait_for,
    )
    from podnet.testing.ovnbed import OvnBed, bed_unavailable

    why = bed_unavailable()
    if why:
        return {"skipped": why}
    total = pods + WARMUP
    if total > 250:  # the subnet is a /24
        raise SystemExit(f"--plug-pods: at most {250 - WARMUP}")
    with tempfile.TemporaryDirectory(prefix="pnovnbench-") as tmp_dir:
        tmp = Path(tmp_dir)
        (tmp / "ovn").mkdir()
        underlay = Underlay("192.168.83.0/24")
        host = Host(links=lambda container, interface: [])
        bed: OvnBed | None = None
        stack: Stack | None = None
        try:
            node = underlay.add_node(NODE, "10.97.0.0/24")
            bed = OvnBed(tmp / "ovn", netns=node.netns).start()
            config = {"defaultProvider": "ovn", "listen": "127.0.0.1:0", "providers": {"ovn": {
                "remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
                "subnets": [{"name": "plug", "cidr": "10.51.0.0/24", "default": True}]}}}
            stack = Stack(tmp, provider="ovn", controller_config=config,
                          netns=underlay.router, address=underlay.router_address)
            stack.create([node_object(NODE, node.pod_cidr, node.address)])
            stack.agent(NODE, netns=node.netns, args=["--config", str(tmp / "controller.yaml")])
            wait_for("the agent ready", AgentClient(stack.socket).ready, 30)
            network = json.dumps({"cniVersion": "1.1.0", "name": "podnet",
                                  "type": "podnet-cni", "agentSocket": stack.socket}).encode()
            base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                    "CNI_PATH": "/opt/cni/bin", "CNI_IFNAME": "eth0"}
            router = f"/run/netns/{underlay.router}"
            url = f"{stack.url}/api/v1/namespaces/default/pods"

            def create(name: str) -> None:
                body = json.dumps(pod(name)).encode()
                req = urllib.request.Request(url, body, method="POST",
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=20) as answer:
                    answer.read()

            add_ms: list[float] = []
            up_at_answer = 0
            envs = []
            for i in range(total):
                name = f"plug-{i:03d}"
                _, path = host.netns()
                env = {**base, "CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
                       "CNI_ARGS": pod_args(name=name, uid=None)}
                envs.append(env)
                started = time.perf_counter()
                run_in_netns(router, lambda name=name: create(name))  # type: ignore[misc]
                done = subprocess.run([str(plugin_path())], input=network,
                                      env={**env, "CNI_COMMAND": "ADD"},
                                      capture_output=True, timeout=120, check=False)
                elapsed = (time.perf_counter() - started) * 1000
                if done.returncode != 0:
                    raise SystemExit(f"ADD of {name} failed: {done.stdout.decode()}")
                port = f"default/{name}"
                up = bed.nbctl("--bare", "--columns=up", "find", "Logical_Switch_Port",
                               f'external_ids:pod="{name}"').strip() == "true"
                if i >= WARMUP:
                    add_ms.append(elapsed)
                    up_at_answer += up
                if i % 50 == 0:
                    print(f"  {i}/{total} pods ({port}: {elapsed:.0f} ms)", file=sys.stderr)
            for env in envs:
                done = subprocess.run([str(plugin_path())], input=network,
                                      env={**env, "CNI_COMMAND": "DEL"},
                                      capture_output=True, timeout=60, check=False)
                if done.returncode != 0:
                    raise SystemExit(f"DEL failed: {done.stdout.decode()}")
            left = [p for p in bed.vsctl("list-ports", bed.bridge).split() if p]
        finally:
            for step in (stack and stack.close, bed and bed.close, host.cleanup,
                         underlay.cleanup):
                if step:
                    try:
                        step()
                    except Exception as exc:  # every step runs, whatever failed before
                        print(f"cleanup: {exc}", file=sys.stderr)
    quarter = max(1, len(add_ms) // 4)
    return {"pods": pods, "warmup_pods": WARMUP, "create_to_add_answered": _summary(add_ms),
            # the chassis filling up: the first and the last quarter of the pods
            "first_quarter_p50_ms": round(_percentile(add_ms[:quarter], 50), 1),
            "last_quarter_p50_ms": round(_percentile(add_ms[-quarter:], 50), 1),
            "nb_up_at_answer": up_at_answer, "ovs_ports_left": len(left)}


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
        cpu = time.process_time()
        t0 = time.perf_counter()
        list(pool.map(create, range(ports)))
        created = time.perf_counter() - t0
        made = sum(1 for p in plugin.client.ports() if p.name.startswith("bench/"))
        create_txns = plugin.client.transactions - before
        t0 = time.perf_counter()
        list(pool.map(delete, range(ports)))
        deleted = time.perf_counter() - t0
        cpu = time.process_time() - cpu
    left = sum(1 for p in plugin.client.ports() if p.name.startswith("bench/"))
    txns = plugin.client.transactions - before
    plugin.close()
    if made != ports or left:
        raise SystemExit(f"podnet made {made} ports of {ports}, left {left}")
    return {"create_s": round(created, 3), "delete_s": round(deleted, 3),
            "create_transactions": create_txns, "delete_transactions": txns - create_txns,
            "workers": workers, "cpu_s": round(cpu, 3)}


def bulk_run(remote: str, ports: int, thin: bool = False) -> dict[str, Any]:
    """The bound: the same ports (address, port security, group membership, the external
    ids podnet writes on a pod's port) created in one transaction, then deleted in one,
    through podnet's NB client. ``thin``: with only the key and owner external ids, the
    bound before 2026-12-06 (each further id costs the client on every row)."""
    from podnet.plugins.ovn.config import (
        EXT_IP,
        EXT_MAC,
        EXT_NAMESPACE,
        EXT_NODE,
        EXT_POD,
        EXT_SUBNET,
    )
    from podnet.plugins.ovn.nb import KEY, OWNER, OWNER_VALUE, NbClient, PortSpec

    prefix = "thin" if thin else "bulk"
    client = NbClient(remote)
    try:
        client.ensure_infra(switches=[prefix], port_groups=[f"pg_{prefix}"])
        specs = []
        for i in range(ports):
            mac = f"0a:00:01:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}"
            ip = f"10.42.{i >> 8 & 255}.{i & 255}"
            entry = f"{mac} {ip}"
            record = _record(i)
            name = f"{prefix}/{record.metadata.name}"
            ids = {KEY: name, OWNER: OWNER_VALUE}
            if not thin:  # as podnet's allocate writes them (its port groups' id: EnsurePort)
                ids.update({EXT_POD: record.spec.pod_name, EXT_NAMESPACE: "bench",
                            EXT_SUBNET: prefix, EXT_NODE: "node-0", EXT_MAC: mac,
                            EXT_IP: ip})
            specs.append(PortSpec(name, prefix, [entry], ids, port_security=[entry],
                                  port_groups=[f"pg_{prefix}"]))
        cpu = time.process_time()
        t0 = time.perf_counter()
        client.run([client.ensure_port(spec) for spec in specs])
        created = time.perf_counter() - t0
        made = sum(1 for p in client.ports() if p.name.startswith(f"{prefix}/"))
        t0 = time.perf_counter()
        client.run([client.delete_port(spec.name, spec.name) for spec in specs])
        deleted = time.perf_counter() - t0
        cpu = time.process_time() - cpu
        left = sum(1 for p in client.ports() if p.name.startswith(f"{prefix}/"))
    finally:
        client.close()
    if made != ports or left:
        raise SystemExit(f"the bulk transaction made {made} ports of {ports}, left {left}")
    return {"create_s": round(created, 3), "delete_s": round(deleted, 3),
            "cpu_s": round(cpu, 3)}


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
    parser.add_argument("--plug-pods", type=int, default=200,
                        help="pods plugged on a real chassis, one at a time (0: none)")
    parser.add_argument("--json", action="store_true", help="JSON only (the default output)")
    parser.add_argument("--no-nbctl", action="store_true",
                        help="skip ovn-nbctl's run (minutes on a loaded machine): the bulk "
                             "bound only")
    args = parser.parse_args(argv)
    load_before = round(os.getloadavg()[0], 2)
    problem = ovsdb_server_available() or (
        None if args.no_nbctl or shutil.which("ovn-nbctl")
        else "ovn-nbctl is not installed (Debian ovn-central)")
    if problem:
        print(problem, file=sys.stderr)
        return 2
    with NbServer() as server:
        print(f"podnet: {args.ports} ports ...", file=sys.stderr)
        podnet = podnet_run(server.remote, args.ports, args.workers)
        # the bound right after podnet's run: ovn-nbctl's 2,000 processes take minutes on
        # a loaded machine, over which the load (and so the ratio) drifts
        print(f"bulk: {args.ports} ports in one transaction each way ...", file=sys.stderr)
        bulk = bulk_run(server.remote, args.ports)
        bulk_thin = bulk_run(server.remote, args.ports, thin=True)
        nbctl = None
        if not args.no_nbctl:
            print(f"ovn-nbctl: {args.ports} invocations each way ...", file=sys.stderr)
            nbctl = nbctl_run(server.remote, args.ports)
    podnet_s = podnet["create_s"] + podnet["delete_s"]
    result: dict[str, Any] = {"ports": args.ports, "podnet": podnet}
    if nbctl is not None:
        result.update({
            "ovn_nbctl": nbctl,
            "speedup_create": round(nbctl["create_s"] / max(podnet["create_s"], 1e-9), 1),
            "speedup_delete": round(nbctl["delete_s"] / max(podnet["delete_s"], 1e-9), 1),
            # goal P6: create + delete together, against one nbctl call per port and
            # against the bulk bound
            "speedup": round((nbctl["create_s"] + nbctl["delete_s"]) / max(podnet_s, 1e-9),
                             1)})
    result.update({
        "bulk": bulk,
        "vs_bulk": round(podnet_s / max(bulk["create_s"] + bulk["delete_s"], 1e-9), 2),
        "bulk_thin": bulk_thin,
        "vs_bulk_thin": round(podnet_s / max(bulk_thin["create_s"] + bulk_thin["delete_s"],
                                             1e-9), 2),
    })
    result["goal_met"] = {"vs_bulk": result["vs_bulk"] <= 2}
    if nbctl is not None:
        result["goal_met"]["speedup"] = result["speedup"] >= 10
    if args.plug_pods > 0:
        print(f"plug: {args.plug_pods} pods on one chassis ...", file=sys.stderr)
        result["plug"] = plug_run(args.plug_pods)
    result["cpus"] = os.cpu_count()
    result["load_average_1m_before"] = load_before
    result["load_average_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
