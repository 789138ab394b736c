"""The engine on its real worker threads and the system clock: VMs restart again and
again (each start a new pod name) on a cloud with latency, releases without a hold, so
passes over a VM's old and new pods overlap on different workers. Whatever the
interleaving: no address in two records, every running pod routed, nothing leaked. (The
one interleaving that needs the VM's lock is forced deterministically in
test_hooks_behaviour.py.)"""

from __future__ import annotations

import threading
import time
from collections import Counter

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import SystemClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = "demo"
VMS = 20
STARTS = 8


def _vm_pod(vm: int, start: int, node: str) -> dict[str, object]:
    obj = pod_obj(f"virt-launcher-vm{vm}-{start}", node)
    obj["metadata"]["ownerReferences"] = [{
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": f"vm{vm}",
        "uid": f"vmi-{vm}-{start}", "controller": True}]
    return obj


def test_vm_pods_restarting_under_threads_never_share_an_address() -> None:
    cluster = InMemoryCluster(clock=SystemClock())
    cluster.create(NAMESPACE, {"metadata": {"name": NS}})
    cloud = ReferenceCloud(latency=0.005)  # cloud calls overlap with other passes
    provider = ReferenceProvider(cloud, policy=PoolPolicy(
        min_idle=2, max_idle=6, batch_size=4, max_batch_size=8, reuse_cooldown=0.0,
        sticky_hold=0.0),  # no hold: a release races the next pod taking the record back
        sticky_kinds=("StatefulSet", "VirtualMachineInstance"))
    pm = new_plugin_manager()
    pm.register(provider, name="reference")
    engine = Engine(cluster, pm, clock=SystemClock(),
                    options=EngineOptions(default_provider="reference", workers=6))
    nodes = [cluster.create(NODE, node_obj(i))["metadata"]["name"] for i in range(2)]
    engine.start()
    stop = threading.Event()
    runner = threading.Thread(target=engine.run, args=(stop,), daemon=True)
    runner.start()
    try:
        for start in range(STARTS):
            for vm in range(VMS):
                if start:
                    cluster.delete(POD, f"virt-launcher-vm{vm}-{start - 1}", NS,
                                   grace_period_seconds=0)
                cluster.create(POD, _vm_pod(vm, start, nodes[vm % 2]))
            time.sleep(0.01 * (start % 4))  # the next start while passes are under way
        live = {f"virt-launcher-vm{vm}-{STARTS - 1}" for vm in range(VMS)}
        deadline = time.monotonic() + 30
        while True:
            records = cluster.list(POD_NETWORK).items
            routed = {r["spec"]["podName"] for r in records
                      if r.get("status", {}).get("phase") == "Routed"}
            if live <= routed and engine.is_idle():
                break
            assert time.monotonic() < deadline, f"not routed: {sorted(live - routed)}"
            time.sleep(0.05)
    finally:
        stop.set()
        runner.join(timeout=10)
    records = cluster.list(POD_NETWORK).items
    ips = Counter(r["status"]["ip"] for r in records if r.get("status", {}).get("ip"))
    assert [ip for ip, n in ips.items() if n > 1] == []
    owned = set(ips)
    pooled = {a.address for p in engine.pools.all() for a in p.addresses.values()}
    assert set(cloud.all_addresses()) <= owned | pooled
    assert set(cloud.routes) <= owned  # no route left for an address nobody holds
