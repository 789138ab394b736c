"""The OVN provider's own behaviour against a real NB server: sticky StatefulSet
addresses, static-address contention, drift repaired after a port is deleted behind
podnet's back, the IPAM rebuilt from NB, the dataplane rows, and the batcher."""

from __future__ import annotations

import contextlib
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest

from podnet.core.cluster.port import NAMESPACE, POD, POD_NETWORK, STATEFUL_SET
from podnet.core.models import Phase
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.harness import HookRecorder, World
from podnet.testing.ovnbed import OvnCentral, Trace, central_unavailable, trace

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

ANN = "podnet.io/"
STS = ("StatefulSet", "web")
SUBNETS = [
    {"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True},
    {"name": "tiny", "cidr": "10.18.0.0/29"},
    {"name": "edge", "cidr": "10.19.0.0/24", "router": "lr-edge", "gateway_type": "centralized"},
    {"name": "pooled", "cidr": "10.20.0.0/24", "namespaces": ["pooled-ns"],
     "ip_pools": {"gold": ["10.20.0.50", "10.20.0.51"]}},
    {"name": "lan", "cidr": "192.168.0.0/24", "gateway": "192.168.0.254", "mtu": 8900},
    {"name": "storage", "cidr": "10.21.0.0/24"},
    {"name": "dual", "cidr": "10.22.0.0/24,fd00:22::/120"},
    {"name": "small-r", "cidr": "10.23.0.0/29", "router": "lr-edge"},
    {"name": "dual-r", "cidr": "10.24.0.0/24,fd00:24::/120", "router": "lr-dual"},
]
ROUTERS = [{"name": "lr-edge", "external_ip": "203.0.113.1",
            "external_gateway": "100.64.0.254"}]


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


class Workloads:
    """What the provider may ask about the cluster's workloads, set by each test."""

    def __init__(self) -> None:
        self.answer: bool | None = None

    def __call__(self, kind: str, namespace: str, name: str, pod: str) -> bool | None:
        return self.answer


@pytest.fixture
def workloads() -> Workloads:
    return Workloads()


@pytest.fixture
def provider_plugin(nb_server: NbServer, workloads: Workloads) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, routers=ROUTERS, seed=1,
                         workload_exists=workloads, networks={"storage": "storage"},
                         security_groups={"sg-web": {}})
    yield plugin
    plugin.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Callable[[], dict[str, str]]:
    reader: Callable[[], dict[str, str]] = provider_plugin.nb_addresses
    return reader


def _nbctl(server: NbServer, *args: str) -> str:
    out = subprocess.run(["ovn-nbctl", f"--db={server.remote}", *args], check=True,
                         capture_output=True, text=True, timeout=30)
    return out.stdout


def _wait(predicate: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


@contextlib.contextmanager
def northd(server: NbServer) -> Iterator[OvnCentral]:
    """SB and ovn-northd on the test's NB server: the flows ``ovn-trace`` follows."""
    problem = central_unavailable()
    if problem is not None:
        pytest.skip(problem)
    with OvnCentral(nb_remote=server.remote) as central:
        yield central


def send(central: OvnCentral, world: World, src: str, dst: str | None = None, *,
         ip_dst: str | None = None, eth_dst: str | None = None, ip_src: str | None = None,
         eth_src: str | None = None, proto: str = "icmp") -> Trace:
    """Where OVN takes a packet from pod ``src``'s port: to pod ``dst`` (its MAC and
    address), unless the other arguments say otherwise; source: ``src``'s own."""
    a = _routed(world, src).status
    b = _routed(world, dst).status if dst else None
    return trace(central, a.subnet, inport=a.interface, eth_src=eth_src or a.mac,
                 eth_dst=eth_dst or (b.mac if b else ""), ip_src=ip_src or a.ip,
                 ip_dst=ip_dst or (b.ip if b else ""), proto=proto)


def _routed(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.phase is Phase.ROUTED, pn
    return pn


def _statefulset(world: World, name: str, replicas: int) -> dict[str, Any]:
    """A StatefulSet in the cluster (core watches them; nothing here makes its pods)."""
    with world.quiet():
        sts: dict[str, Any] = world.cluster.create(STATEFUL_SET, {
            "metadata": {"name": name, "namespace": world.namespace},
            "spec": {"replicas": replicas, "serviceName": name,
                     "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    return sts


def _scale(world: World, name: str, replicas: int) -> None:
    with world.quiet():
        world.cluster.patch(STATEFUL_SET, name, {"spec": {"replicas": replicas}},
                            world.namespace)


def _sts_pod(world: World, sts: dict[str, Any], name: str, node: int) -> None:
    """A pod of ``sts``, its controller reference carrying the StatefulSet's real uid."""
    meta = sts["metadata"]
    with world.quiet():
        world.cluster.create(POD, {
            "metadata": {"name": name, "namespace": world.namespace,
                         "labels": {"app": meta["name"]},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                              "name": meta["name"], "uid": meta["uid"],
                                              "controller": True}]},
            "spec": {"nodeName": world.node_name(node),
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}})


def _annotate_namespace(world: World, annotations: dict[str, str | None]) -> None:
    with world.quiet():
        world.cluster.patch(NAMESPACE, world.namespace,
                            {"metadata": {"annotations": annotations}})


def _held(world: World, pod: str) -> Any:
    """The sticky record kept for a pod that is gone (releasing, address still on)."""
    found = [pn for pn in world.records() if pn.spec.pod_name == pod]
    assert len(found) == 1, found
    assert found[0].status.phase is Phase.RELEASING and found[0].status.ip, found[0]
    return found[0]


# --- sticky StatefulSet addresses ------------------------------------------------------------


def test_statefulset_pod_recreated_gets_the_same_address(world: World) -> None:
    world.add_node(0)
    world.add_node(1)
    web = _statefulset(world, "web", 1)
    _sts_pod(world, web, "web-0", 0)
    world.settle()
    first = _routed(world, "web-0")
    world.delete_pod("web-0")
    world.settle(advance=10)
    _sts_pod(world, web, "web-0", 1)  # a new pod under the same name, elsewhere
    world.settle()
    again = _routed(world, "web-0")
    assert (again.status.ip, again.status.mac) == (first.status.ip, first.status.mac)
    assert again.spec.node_name == world.node_name(1)
    assert world.cloud_addresses()[first.status.ip] == world.node_name(1)
    world.recreate_pod("web-0")  # and at once, on the same node
    world.settle()
    assert _routed(world, "web-0").status.ip == first.status.ip
    world.assert_converged()


def test_statefulset_pod_recreated_elsewhere_port_follows_at_once(world: World) -> None:
    world.add_node(0)
    world.add_node(1)
    world.add_pod("web-0", 0, owner=STS)
    world.settle()
    ip = _routed(world, "web-0").status.ip
    world.recreate_pod("web-0", 1)
    world.settle()
    assert world.dangling_problems() == []
    assert world.cloud_addresses()[ip] == world.node_name(1)


def test_statefulset_pod_recreated_elsewhere_port_follows_by_verify(
        world: World, hook_calls: HookRecorder) -> None:
    """Until the engine routes an adopted record again, verify finds the port on the old
    node and repairs it."""
    world.add_node(0)
    world.add_node(1)
    world.add_pod("web-0", 0, owner=STS)
    world.settle()
    ip = _routed(world, "web-0").status.ip
    world.recreate_pod("web-0", 1)
    world.settle(advance=world.policy().verify_period + 1)
    assert world.cloud_addresses()[ip] == world.node_name(1)
    assert [e.trigger for e in hook_calls.transitions("pod_network", ok=True)][-2:] == \
        ["repair", "route"]
    world.assert_converged()


def test_statefulset_scale_down_releases_the_address(world: World, provider_plugin: Any,
                                                     workloads: Workloads) -> None:
    world.add_node(0)
    world.add_pod("web-0", 0, owner=STS)
    world.add_pod("web-1", 0, owner=STS)
    world.settle()
    kept = _routed(world, "web-0").status.ip
    gone = _routed(world, "web-1").status.ip
    workloads.answer = False  # the StatefulSet scaled down to one replica
    world.delete_pod("web-1")
    world.settle()
    assert gone not in world.cloud_addresses()
    assert provider_plugin.client.port("demo/web-1.default") is None
    assert provider_plugin.ipam.owner(gone) is None
    assert kept in world.cloud_addresses()
    world.assert_converged()


def test_statefulset_address_held_while_the_workload_exists(world: World,
                                                            workloads: Workloads) -> None:
    world.add_node(0)
    world.add_pod("web-0", 0, owner=STS)
    world.settle()
    ip = _routed(world, "web-0").status.ip
    workloads.answer = True
    world.delete_pod("web-0")
    world.settle(advance=3 * world.policy().sticky_hold)
    assert ip in world.cloud_addresses(), "released while its StatefulSet still exists"
    world.add_pod("web-0", 0, owner=STS)
    world.settle()
    assert _routed(world, "web-0").status.ip == ip


def test_statefulset_pod_held_while_its_ordinal_is_within_replicas(
        world: World, provider_plugin: Any) -> None:
    """Core's StatefulSet cache answers: held past sticky_hold while db-2 is one of 3
    replicas; the same address when it comes back."""
    world.add_node(0)
    db = _statefulset(world, "db", 3)
    for i in range(3):
        _sts_pod(world, db, f"db-{i}", 0)
    world.settle()
    ip = _routed(world, "db-2").status.ip
    world.delete_pod("db-2")
    world.settle(advance=3 * world.policy().sticky_hold)
    assert _held(world, "db-2").status.ip == ip
    assert ip in world.cloud_addresses()
    assert provider_plugin.ipam.owner(ip) == "demo/db-2.default"
    _sts_pod(world, db, "db-2", 0)
    world.settle()
    assert _routed(world, "db-2").status.ip == ip
    world.assert_converged()


def test_statefulset_scaled_below_the_ordinal_releases_at_once(
        world: World, provider_plugin: Any) -> None:
    world.add_node(0)
    db = _statefulset(world, "db", 3)
    for i in range(3):
        _sts_pod(world, db, f"db-{i}", 0)
    world.settle()
    ips = {i: _routed(world, f"db-{i}").status.ip for i in range(3)}
    world.delete_pod("db-2")
    world.delete_pod("db-1")
    world.settle(advance=1)  # well inside sticky_hold
    assert _held(world, "db-2").status.ip == ips[2]
    assert _held(world, "db-1").status.ip == ips[1]
    _scale(world, "db", 2)  # db-2 is no longer wanted; db-1 still is
    world.settle()  # the clock does not move: the StatefulSet's change alone releases it
    assert [pn.spec.pod_name for pn in world.records()
            if pn.spec.pod_name == "db-2"] == []
    assert ips[2] not in world.cloud_addresses()
    assert provider_plugin.ipam.owner(str(ips[2])) is None
    assert provider_plugin.client.port("demo/db-2.default") is None
    assert _held(world, "db-1").status.ip == ips[1]
    _scale(world, "db", 1)
    world.settle()
    assert ips[1] not in world.cloud_addresses()
    assert _routed(world, "db-0").status.ip == ips[0]
    world.assert_converged()


def test_statefulset_deleted_releases_every_held_address(world: World,
                                                         provider_plugin: Any) -> None:
    world.add_node(0)
    db = _statefulset(world, "db", 3)
    web = _statefulset(world, "web", 1)
    for i in range(3):
        _sts_pod(world, db, f"db-{i}", 0)
    _sts_pod(world, web, "web-0", 0)
    world.settle()
    ips = [_routed(world, f"db-{i}").status.ip for i in range(3)]
    kept = _routed(world, "web-0").status.ip
    for i in range(3):
        world.delete_pod(f"db-{i}")
    world.settle(advance=1)
    assert [_held(world, f"db-{i}").status.ip for i in range(3)] == ips
    with world.quiet():
        world.cluster.delete(STATEFUL_SET, "db", world.namespace)
    world.settle()
    assert not [pn for pn in world.records() if pn.spec.pod_name.startswith("db-")]
    for ip in ips:
        assert ip not in world.cloud_addresses()
        assert provider_plugin.ipam.owner(str(ip)) is None
    assert kept in world.cloud_addresses()
    world.assert_converged()


@pytest.mark.parametrize(("workload", "pod", "answer"), [
    (None, "db-1", None),  # core does not know: sticky_hold decides
    (dict(uid="u1", replicas=3), "db-1", True),
    (dict(uid="u1", replicas=1), "db-1", False),  # scaled below the ordinal
    (dict(uid="u1", replicas=2, ordinal_start=2), "db-1", False),  # below the first
    (dict(uid="u1", replicas=2, ordinal_start=1), "db-1", True),
    (dict(uid="u2", replicas=3), "db-1", False),  # another StatefulSet of the same name
    (dict(uid="u1", replicas=0, exists=False), "db-1", False),  # deleted
    (dict(uid="u1", replicas=3), "db-x", None),  # no ordinal: cannot tell
])
def test_hold_answers_from_the_workload_core_sees(
        provider_plugin: Any, workload: dict[str, Any] | None, pod: str,
        answer: bool | None) -> None:
    from podnet.core.models import (
        ObjectMeta,
        OwnerReference,
        PodNetwork,
        PodNetworkSpec,
        WorkloadInfo,
    )
    from podnet.hookspecs.types import PodNetworkContext

    owner = OwnerReference(api_version="apps/v1", kind="StatefulSet", name="db", uid="u1")
    pn = PodNetwork(
        metadata=ObjectMeta(name=f"{pod}.default", namespace="demo",
                            owner_references=(owner,)),
        spec=PodNetworkSpec(pod_name=pod, pod_uid="p", node_name="n", provider="ovn",
                            network="default", sticky=True))
    info = None if workload is None else WorkloadInfo(
        kind="StatefulSet", namespace="demo", name="db", **workload)
    assert provider_plugin.podnet_hold_address(
        context=PodNetworkContext(pod_network=pn, workload=info)) is answer


VMI = ("VirtualMachineInstance", "vm1")


def test_a_vm_started_again_gets_its_address_back_under_a_new_pod_name(
        world: World, provider_plugin: Any) -> None:
    """KubeVirt names each start's virt-launcher pod anew (and makes a new VMI): the
    address follows the VMI's name, on whichever node the VM lands."""
    world.add_node(0)
    world.add_node(1)
    world.add_pod("virt-launcher-vm1-aaaaa", 0, owner=VMI)
    world.settle()
    first = _routed(world, "virt-launcher-vm1-aaaaa")
    assert first.metadata.name == "vm1.default.vm"
    assert first.metadata.labels["podnet.io/vm"] == "vm1"
    assert first.metadata.owner_references == ()  # the VMI goes away at each stop
    world.delete_pod("virt-launcher-vm1-aaaaa")
    world.settle(advance=10)
    world.add_pod("virt-launcher-vm1-bbbbb", 1, owner=VMI)
    world.settle()
    again = _routed(world, "virt-launcher-vm1-bbbbb")
    assert again.key == first.key
    assert (again.status.ip, again.status.mac) == (first.status.ip, first.status.mac)
    assert again.spec.node_name == world.node_name(1)
    lsp = provider_plugin.client.port(again.status.interface)
    assert lsp.external_ids["pod"] == "virt-launcher-vm1-bbbbb"
    assert [pn.key for pn in world.records()] == [first.key]
    world.assert_converged()


def test_a_vm_migration_target_gets_its_own_address_while_the_source_runs(
        world: World) -> None:
    world.add_node(0)
    world.add_node(1)
    world.add_pod("virt-launcher-vm1-src", 0, owner=VMI)
    world.settle()
    source = _routed(world, "virt-launcher-vm1-src")
    world.add_pod("virt-launcher-vm1-dst", 1, owner=VMI)
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.status.ip != source.status.ip and not target.spec.sticky
    assert _routed(world, "virt-launcher-vm1-src").status.ip == source.status.ip
    # the source goes: its address is held for the VM a while, then given back
    world.delete_pod("virt-launcher-vm1-src")
    world.settle(advance=world.policy().sticky_hold + 10)
    assert [pn.key for pn in world.records()] == [target.key]
    assert source.status.ip not in world.cloud_addresses()
    world.assert_converged()


def test_a_vm_gone_for_longer_than_the_hold_starts_afresh(world: World) -> None:
    world.add_node(0)
    world.add_pod("virt-launcher-vm1-aaaaa", 0, owner=VMI)
    world.settle()
    first = _routed(world, "virt-launcher-vm1-aaaaa")
    world.delete_pod("virt-launcher-vm1-aaaaa")
    world.settle(advance=world.policy().sticky_hold + 10)
    assert world.records() == []
    world.add_pod("virt-launcher-vm1-bbbbb", 0, owner=VMI)
    world.settle()
    again = _routed(world, "virt-launcher-vm1-bbbbb")
    assert again.metadata.name == first.metadata.name and again.metadata.uid != first.metadata.uid
    world.assert_converged()


def test_statefulset_ordinal_takes_its_pool_entry(world: World) -> None:
    world.add_node(0)
    pool = {f"{ANN}ip-pool": "10.16.5.10,10.16.5.11,10.16.5.12"}
    for name in ("web-2", "web-0"):
        world.add_pod(name, 0, annotations=pool, owner=STS)
    world.settle()
    assert _routed(world, "web-0").status.ip == "10.16.5.10"
    assert _routed(world, "web-2").status.ip == "10.16.5.12"


def test_named_ip_pool(world: World) -> None:
    world.add_node(0)
    gold = {f"{ANN}subnets": "pooled", f"{ANN}ip-pool": "gold"}
    for name in ("g1", "g2", "g3"):
        world.add_pod(name, 0, annotations=gold)
    world.settle()
    records = [world.record_of(n) for n in ("g1", "g2", "g3")]
    assert all(r is not None for r in records)
    routed = sorted(str(r.status.ip) for r in records
                    if r is not None and r.status.phase is Phase.ROUTED)
    waiting = [r for r in records if r is not None and r.status.phase is Phase.PENDING]
    assert routed == ["10.20.0.50", "10.20.0.51"]
    assert len(waiting) == 1  # the pool is used up: the third waits, with a condition
    assert any("podnet.io/ip-pool" in c.message for c in waiting[0].status.conditions)


# --- static addresses -------------------------------------------------------------------------


def test_two_pods_asking_for_one_static_address(world: World) -> None:
    world.add_node(0)
    static = {f"{ANN}ip-address": "10.16.9.9"}
    world.add_pod("first", 0, annotations=static)
    world.settle()
    assert _routed(world, "first").status.ip == "10.16.9.9"
    world.add_pod("second", 0, annotations=static)
    world.settle(advance=5)
    second = world.record_of("second")
    assert second is not None and second.status.phase is Phase.PENDING
    ready = [c for c in second.status.conditions if c.type == "Ready"]
    assert ready and "podnet.io/ip-address" in ready[0].message, ready
    assert "10.16.9.9 is already used by demo/" in ready[0].message
    world.delete_pod("first")
    world.settle(advance=120)  # the retry after backoff gets it, now free
    assert _routed(world, "second").status.ip == "10.16.9.9"
    world.assert_converged()


def test_never_a_node_address(world: World) -> None:
    """node_obj(1)'s internal address is 192.168.0.1; in a subnet covering it, a pod on
    that node asking for it by name is refused with a condition saying why."""
    world.add_node(1)
    world.add_pod("p", 1, annotations={f"{ANN}subnets": "lan",
                                       f"{ANN}ip-address": "192.168.0.1"})
    world.settle()
    pn = world.record_of("p")
    assert pn is not None and pn.status.phase is Phase.PENDING
    ready = [c for c in pn.status.conditions if c.type == "Ready"]
    assert ready and "internal address" in ready[0].message, ready
    assert "192.168.0.1" not in world.cloud_addresses()


# --- drift and restart --------------------------------------------------------------------------


def test_port_deleted_behind_podnets_back_comes_back(world: World, nb_server: NbServer,
                                                     provider_plugin: Any,
                                                     hook_calls: HookRecorder) -> None:
    world.add_node(0)
    world.add_pod("p0", 0, annotations={f"{ANN}port-security": "true",
                                        f"{ANN}security-groups": "sg-web"})
    world.add_pod("peer", 0)
    world.settle()
    pn = _routed(world, "p0")
    port = pn.status.interface
    assert port and provider_plugin.client.port(port) is not None
    _nbctl(nb_server, "lsp-del", port)
    _wait(lambda: provider_plugin.client.port(port) is None, "the deletion to reach the IDL")
    hook_calls.clear()
    world.settle(advance=world.policy().verify_period + 1)
    mine = [(e.trigger, e.ok) for e in hook_calls.transitions("pod_network")
            if e.object_key == pn.key]
    assert mine == [("repair", True), ("route", True)], mine
    lsp = provider_plugin.client.port(port)
    assert lsp is not None
    assert list(lsp.addresses) == [f"{pn.status.mac} {pn.status.ip}"]
    assert list(lsp.port_security) == list(lsp.addresses)
    groups = _nbctl(nb_server, "--bare", "--columns=name,ports", "list", "Port_Group")
    assert "sg_sg_web" in groups and str(lsp.uuid) in groups
    assert _routed(world, "p0").status.ip == pn.status.ip
    with northd(nb_server) as central:  # the port came back with its port security
        assert send(central, world, "p0", "peer").delivered, "p0 cannot reach its peer"
        spoofed = send(central, world, "p0", "peer", ip_src="10.99.0.1")
        assert spoofed.dropped and spoofed.stage == "ls_in_apply_port_sec", spoofed.text
    world.assert_converged()


def test_a_released_port_is_taken_off_whichever_switch_holds_it(
        world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    """A port moved to another switch behind podnet's back is still deleted on release
    (taken off the switch that holds it, not the one its record names), with the other
    ports of a burst of releases sharing the transaction."""
    world.add_node(0)
    for name in ("mv", "stay-1", "stay-2"):
        world.add_pod(name, 0)
    world.settle()
    port = _routed(world, "mv").status.interface
    assert port
    uuid = _nbctl(nb_server, "--bare", "--columns=_uuid", "find", "Logical_Switch_Port",
                  f'name="{port}"').strip()
    _nbctl(nb_server, "ls-add", "elsewhere", "--", "remove", "Logical_Switch",
           "ovn-default", "ports", uuid, "--", "add", "Logical_Switch", "elsewhere",
           "ports", uuid)
    for name in ("mv", "stay-1", "stay-2"):
        world.delete_pod(name)
    world.settle()
    left = _nbctl(nb_server, "--bare", "--columns=name", "list", "Logical_Switch_Port")
    assert port not in left.split(), left
    assert _nbctl(nb_server, "--bare", "--columns=ports", "list", "Logical_Switch").split() == []
    _nbctl(nb_server, "ls-del", "elsewhere")
    world.assert_converged()


def test_port_changed_behind_podnets_back_is_rewritten(world: World, nb_server: NbServer,
                                                       provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("p0", 0)
    world.settle()
    pn = _routed(world, "p0")
    port = pn.status.interface
    _nbctl(nb_server, "lsp-set-addresses", port, "0a:00:00:00:00:99 10.16.99.99")
    _wait(lambda: list(provider_plugin.client.port(port).addresses)
          == ["0a:00:00:00:00:99 10.16.99.99"], "the change to reach the IDL")
    world.settle(advance=world.policy().verify_period + 1)
    assert list(provider_plugin.client.port(port).addresses) == \
        [f"{pn.status.mac} {pn.status.ip}"]
    world.assert_converged()


def test_dual_stack_subnet_gives_both_families(world: World, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("d", 0, annotations={f"{ANN}subnets": "dual"})
    world.settle()
    pn = _routed(world, "d")
    assert pn.status.ip and pn.status.ip.startswith("10.22.0.")
    assert pn.status.ipv6 and pn.status.ipv6.startswith("fd00:22::")
    assert pn.status.gateway == "10.22.0.1"
    lsp = provider_plugin.client.port(pn.status.interface)
    assert list(lsp.addresses) == [f"{pn.status.mac} {pn.status.ip} {pn.status.ipv6}"]
    assert set(world.cloud_addresses()) == {pn.status.ip}  # the kit counts status.ip
    world.assert_converged()


def test_the_record_carries_the_subnets_mtu_else_the_providers(world: World,
                                                               provider_plugin: Any) -> None:
    """The pod interface's MTU is the record's: a subnet's own, else the provider's (by
    default 1400, room for Geneve on a 1500 underlay); a changed provider MTU reaches
    new pods."""
    world.add_node(0)
    world.add_pod("m1", 0)
    world.add_pod("m2", 0, annotations={f"{ANN}subnets": "lan"})
    world.settle()
    assert _routed(world, "m1").status.mtu == 1400
    assert _routed(world, "m2").status.mtu == 8900
    provider_plugin.podnet_configure(provider="ovn", config={"mtu": 1350})
    world.add_pod("m3", 0)
    world.settle()
    assert _routed(world, "m3").status.mtu == 1350
    assert _routed(world, "m1").status.mtu == 1400  # a record keeps what it was given
    world.assert_converged()


def test_restart_rebuilds_the_ipam_and_holds_unknown_ports(world: World, nb_server: NbServer,
                                                          provider_plugin: Any) -> None:
    """An address on a port podnet does not own is never handed out; addresses on
    podnet's ports survive a controller restart with an empty memory."""
    world.add_node(0)
    world.settle()
    _nbctl(nb_server, "ls-add", "tiny", "--", "lsp-add", "tiny", "stranger", "--",
           "lsp-set-addresses", "stranger", "0a:00:00:00:99:01 10.18.0.2")
    # podnet read NB before the stranger came (GC's first sweep connected it): the port
    # reaches its replica as a change, which the IPAM follows
    _wait(lambda: provider_plugin.client.port("stranger") is not None, "the stranger")
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "tiny"})
    world.settle()
    first = _routed(world, "a").status.ip
    provider_plugin.close()  # the provider forgets everything: it reads NB again
    world.restart()
    for name in ("b", "c", "d"):
        world.add_pod(name, 0, annotations={f"{ANN}subnets": "tiny"})
    world.settle()
    got = {_routed(world, n).status.ip for n in ("b", "c", "d")}
    assert "10.18.0.2" not in got and first not in got
    assert got | {first} == {"10.18.0.3", "10.18.0.4", "10.18.0.5", "10.18.0.6"}
    world.add_pod("e", 0, annotations={f"{ANN}subnets": "tiny"})
    world.settle(advance=5)
    e = world.record_of("e")
    assert e is not None and e.status.phase is Phase.PENDING  # the subnet is full


def test_nb_server_restart(world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    """The NB server goes away and comes back on the same database: what was written
    stays, and the provider's connection carries on for new and departing pods."""
    world.add_node(0)
    world.add_pod("a", 0)
    world.settle()
    a = _routed(world, "a")
    nb_server.restart()
    world.add_pod("b", 0)
    world.delete_pod("a")
    world.settle(advance=30)
    b = _routed(world, "b")
    assert world.cloud_addresses() == {b.status.ip: world.node_name(0)}
    assert provider_plugin.client.port(a.status.interface) is None
    world.assert_converged()


def test_reads_never_see_the_replica_half_reloaded(nb_server: NbServer) -> None:
    """After a reconnect the IDL empties every table and loads the server's dump on its
    own thread: a read from another thread in between would find ports missing (their
    addresses looking free) or fail iterating. Reads wait for the reload instead."""
    from ovs.db.idl import Idl

    from podnet.plugins.ovn.nb import KEY, NbClient, PortSpec

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    count = 600
    seen: list[int] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                seen.append(len(client.ports()))
            except BaseException as exc:  # e.g. a table changing size under iteration
                failures.append(exc)

    try:
        client.ensure_infra(switches=["many"])
        client.run([client.ensure_port(PortSpec(
            f"many-{i}", "many", [f"0a:00:00:01:{i >> 8:02x}:{i & 255:02x} 10.31.{i >> 8}."
                                  f"{i & 255}"], {KEY: f"demo/many-{i}"}))
            for i in range(count)])
        assert len(client.ports()) == count
        reader = threading.Thread(target=read)
        reader.start()
        idl = client.api.idl
        for _ in range(3):
            before = idl.change_seqno
            nb_server.restart()
            deadline = time.monotonic() + 30
            while not (idl.change_seqno > before and idl.state == Idl.IDL_S_MONITORING):
                assert time.monotonic() < deadline, "the client never reloaded"
                time.sleep(0.01)
        done.set()
        reader.join()
        assert not failures, failures[:3]
        partial = [n for n in seen if n != count]
        assert not partial, f"{len(partial)} of {len(seen)} reads saw a partial replica"
    finally:
        done.set()
        client.close()


# --- the dataplane rows -------------------------------------------------------------------------


def test_route_writes_port_groups_vips_nat_and_routes(world: World, nb_server: NbServer,
                                                      provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("fe", 0, annotations={
        f"{ANN}subnets": "edge", f"{ANN}eip": "203.0.113.20",
        f"{ANN}vips": "10.19.0.200", f"{ANN}mac-address": "0a:00:00:00:00:07"})
    world.add_pod("out", 0, annotations={f"{ANN}subnets": "edge", f"{ANN}snat": "true"})
    world.add_pod("plain", 0)
    world.settle()
    fe, out, plain = (_routed(world, n) for n in ("fe", "out", "plain"))
    assert fe.status.mac == "0a:00:00:00:00:07"
    lsp = provider_plugin.client.port(fe.status.interface)
    # the VIP is a virtual port of its own (as Kube-OVN models it), not an address
    assert list(lsp.addresses) == [f"0a:00:00:00:00:07 {fe.status.ip}"]
    vport = provider_plugin.client.port("edge-vip-10.19.0.200")
    assert vport.type == "virtual" and vport.options["virtual-ip"] == "10.19.0.200"
    assert vport.options["virtual-parents"] == fe.status.interface
    nat = _nbctl(nb_server, "lr-nat-list", "lr-edge")
    assert "dnat_and_snat" in nat and "203.0.113.20" in nat and fe.status.ip in nat
    assert "snat" in nat and "203.0.113.1" in nat and out.status.ip in nat
    routes = _nbctl(nb_server, "lr-route-list", "lr-edge")
    assert fe.status.ip in routes and "100.64.0.254" in routes and "src-ip" in routes
    with northd(nb_server) as central:
        from podnet.plugins.ovn.rows import link_mac

        # lr-edge has no external network here: the rows translate nothing, the source
        # route's next hop is on no port of the router (tests/test_ovn_nat.py: one that
        # forwards)
        for pod in ("fe", "out"):
            t = send(central, world, pod, ip_dst="198.51.100.10",
                     eth_dst=link_mac("lr-edge", "edge"))
            assert t.dropped and t.stage == "lr_in_ip_routing", t.text
            assert "ct_snat" not in t.text, t.text
    # distributed gateway (the default subnet): the port joins its node's group
    groups = _nbctl(nb_server, "--bare", "--columns=name", "list", "Port_Group")
    assert "node_node_0000" in groups
    world.delete_pod("fe")
    world.delete_pod("out")
    world.delete_pod("plain")
    world.settle()
    assert _nbctl(nb_server, "lr-nat-list", "lr-edge").strip() == ""
    assert provider_plugin.client.port("edge-vip-10.19.0.200") is None
    assert "100.64.0.254" not in _nbctl(nb_server, "lr-route-list", "lr-edge")
    assert world.cloud_addresses() == {}
    assert plain.status.subnet == "ovn-default"


def test_namespace_rule_picks_the_subnet(world: World) -> None:
    from podnet.core.cluster.port import NAMESPACE

    world.cluster.create(NAMESPACE, {"metadata": {"name": "pooled-ns"}})
    world.add_node(0)
    other = World(world.cluster, world.clock, world.engines, world.cloud_addresses,
                  namespace="pooled-ns")
    other._engine = world.engine
    other.add_pod("p", 0)
    world.settle()
    pn = other.record_of("p")
    assert pn is not None and pn.status.subnet == "pooled"
    assert pn.status.ip and pn.status.ip.startswith("10.20.0.")


def test_attachment_network_gets_its_own_port_and_unplugs(world: World,
                                                         provider_plugin: Any) -> None:
    from podnet.core.cluster.port import POD

    world.add_node(0)
    world.add_pod("db", 0, annotations={f"{ANN}networks": "storage"})
    world.settle()
    main, extra = _routed(world, "db"), world.record_of("db", "storage")
    assert extra is not None and extra.status.phase is Phase.ROUTED
    assert main.status.subnet == "ovn-default" and extra.status.subnet == "storage"
    assert provider_plugin.client.port(extra.status.interface) is not None
    pod = world.pod("db")
    assert pod is not None
    pod["metadata"]["annotations"] = {}
    world.cluster.update(POD, pod)
    world.settle()
    assert world.record_of("db", "storage") is None
    assert provider_plugin.client.port(extra.status.interface) is None
    assert extra.status.ip not in world.cloud_addresses()
    assert _routed(world, "db").status.ip == main.status.ip
    world.assert_converged()


# --- batching -------------------------------------------------------------------------------


def test_a_burst_shares_transactions_and_one_bad_command_fails_alone(
        nb_server: NbServer) -> None:
    from ovsdbapp.backend.ovs_idl import command as ovs_command

    from podnet.plugins.ovn.nb import KEY, NbClient, PortSpec

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote, window=0.02)
    try:
        client.ensure_infra(switches=["burst"])

        class Broken(ovs_command.BaseCommand):
            def run_idl(self, txn: Any) -> None:
                raise ValueError("a bad command")

        errors: dict[int, BaseException] = {}

        def one(i: int) -> None:
            spec = PortSpec(f"burst-{i}", "burst", [f"0a:00:00:00:01:{i:02x} 10.30.0.{i + 2}"],
                            {KEY: f"demo/burst-{i}"})
            cmds: list[Any] = [client.ensure_port(spec)]
            if i == 3:
                cmds.append(Broken(client.api))
            try:
                client.run(cmds)
            except BaseException as exc:
                errors[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert list(errors) == [3] and isinstance(errors[3], ValueError)
        names = {p.name for p in client.ports()}
        assert names == {f"burst-{i}" for i in range(20) if i != 3}
        assert client.batcher.batched >= 2, "no two callers ever shared a transaction"
    finally:
        client.close()


# --- the namespace's subnet --------------------------------------------------------------------


def test_namespace_annotation_picks_the_subnet_and_the_pod_annotation_wins(
        world: World) -> None:
    world.add_node(0)
    _annotate_namespace(world, {f"{ANN}subnets": "storage"})
    world.add_pod("plain", 0)
    world.add_pod("own", 0, annotations={f"{ANN}subnets": "lan"})
    world.settle()
    plain, own = _routed(world, "plain"), _routed(world, "own")
    assert plain.status.subnet == "storage" and plain.status.ip.startswith("10.21.0.")
    assert own.status.subnet == "lan" and own.status.ip.startswith("192.168.0.")
    world.assert_converged()


def test_changing_the_namespace_annotation_moves_no_routed_pod(world: World) -> None:
    world.add_node(0)
    _annotate_namespace(world, {f"{ANN}subnets": "storage"})
    world.add_pod("before", 0)
    world.settle()
    before = _routed(world, "before")
    _annotate_namespace(world, {f"{ANN}subnets": "dual"})
    world.add_pod("after", 0)
    world.settle(advance=2 * world.policy().verify_period)
    again = _routed(world, "before")
    assert (again.status.subnet, again.status.ip) == (before.status.subnet, before.status.ip)
    assert _routed(world, "after").status.subnet == "dual"
    _annotate_namespace(world, {f"{ANN}subnets": None})
    world.add_pod("default", 0)
    world.settle()
    assert _routed(world, "default").status.subnet == "ovn-default"
    assert _routed(world, "before").status.ip == before.status.ip
    world.assert_converged()


@pytest.mark.parametrize("value", ["nosuch", "", "storage,storage", "a b"])
def test_bad_namespace_annotation_is_a_condition_naming_the_namespace(
        world: World, value: str) -> None:
    world.add_node(0)
    _annotate_namespace(world, {f"{ANN}subnets": value})
    world.add_pod("p", 0)
    world.settle(advance=30)
    pn = world.record_of("p")
    assert pn is not None and pn.status.phase is Phase.PENDING and not pn.status.ip
    ready = [c for c in pn.status.conditions if c.type == "Ready"]
    assert ready and ready[0].reason == "InvalidRequest", ready
    assert "namespace[demo].metadata.annotations[podnet.io/subnets]" in ready[0].message
    assert "Namespace demo" in ready[0].message
    # fixing the namespace is enough: its change wakes the waiting record
    _annotate_namespace(world, {f"{ANN}subnets": "storage"})
    world.settle()
    assert _routed(world, "p").status.subnet == "storage"
    world.assert_converged()


# --- podnet_sweep: ports whose record is gone -----------------------------------------------------


def test_a_port_whose_record_vanished_is_swept_after_the_grace(
        world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    """podnet_sweep: a record deleted without its release (finalizer removed by hand)
    leaves its port; GC reports it as an orphan, deletes it once it stayed one for
    leaked_ip_expiry, and the address is free again. A bystander's port and a port podnet
    did not make are never touched."""
    world.add_node(0)
    world.add_pod("gone", 0)
    world.add_pod("stays", 0)
    world.settle()
    gone, stays = _routed(world, "gone"), _routed(world, "stays")
    _nbctl(nb_server, "ls-add", "foreign", "--", "lsp-add", "foreign", "not-ours")
    with world.quiet():
        record = world.cluster.get(POD_NETWORK, gone.metadata.name, world.namespace)
        record["metadata"]["finalizers"] = []
        world.cluster.update(POD_NETWORK, record)
        # its record goes with it
        world.cluster.delete(POD, "gone", world.namespace, grace_period_seconds=0)
    world.settle()
    assert [r.spec.pod_name for r in world.records()] == ["stays"]
    assert provider_plugin.client.port(gone.status.interface) is not None  # leaked, for now
    assert gone.status.ip in provider_plugin.ipam.used

    policy = world.policy()
    world.settle(advance=policy.gc_period + 1)  # first seen as an orphan: kept
    assert provider_plugin.client.port(gone.status.interface) is not None
    world.settle(advance=policy.leaked_ip_expiry + 2 * policy.gc_period + 1)
    _wait(lambda: provider_plugin.client.port(gone.status.interface) is None, "the sweep")
    assert gone.status.ip not in provider_plugin.ipam.used
    assert provider_plugin.client.port(stays.status.interface) is not None
    assert provider_plugin.client.port("not-ours") is not None
    assert world.engine.sweeper.swept == 1
    world.assert_converged()


def test_ports_others_create_or_delete_later_are_followed(world: World, nb_server: NbServer,
                                                          provider_plugin: Any) -> None:
    """After podnet read NB, a port someone else adds holds its address at once, and
    its deletion frees the address again (the IPAM follows the replica's changes)."""
    world.add_node(0)
    world.add_pod("first", 0)
    world.settle()  # the provider has read NB by now
    _nbctl(nb_server, "ls-add", "tiny", "--", "lsp-add", "tiny", "later", "--",
           "lsp-set-addresses", "later", "0a:00:00:00:99:02 10.18.0.4")
    # reading ``client`` applies the changes that reached the replica
    _wait(lambda: provider_plugin.client and provider_plugin.ipam.owner("10.18.0.4")
          is not None, "the new port's address to be held")
    assert provider_plugin.ipam.owner("10.18.0.4") == "a port podnet does not own"
    _nbctl(nb_server, "lsp-del", "later")
    _wait(lambda: provider_plugin.client and provider_plugin.ipam.owner("10.18.0.4") is None,
          "the deleted port's address to be freed")


# --- router links: each subnet's switch connected to its router ---------------------------------


def _row(server: NbServer, table: str, name: str, column: str) -> str:
    return _nbctl(server, "--bare", f"--columns={column}", "find", table,
                  f"name={name}").strip()


def _router_ports(server: NbServer) -> list[str]:
    return sorted(_nbctl(server, "--bare", "--columns=name", "list",
                         "Logical_Router_Port").split())


def _switch_router_ports(server: NbServer, switch: str) -> list[str]:
    return sorted(p for p in _nbctl(server, "lsp-list", switch).split()
                  if p.startswith(f"({switch}-"))


def test_a_routed_subnet_is_connected_to_its_router(world: World, nb_server: NbServer,
                                                    provider_plugin: Any) -> None:
    from podnet.plugins.ovn.rows import link_mac

    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    _routed(world, "a")
    lrps = _nbctl(nb_server, "lrp-list", "lr-edge")
    assert "(lr-edge-edge)" in lrps, lrps
    mac = link_mac("lr-edge", "edge")
    assert int(mac.split(":")[0], 16) & 0b11 == 0b10  # locally administered, unicast
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-edge", "mac") == mac
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-edge", "networks") == \
        "10.19.0.1/24"
    assert _nbctl(nb_server, "lsp-get-type", "edge-lr-edge").strip() == "router"
    assert _row(nb_server, "Logical_Switch_Port", "edge-lr-edge", "addresses") == "router"
    assert "router-port=lr-edge-edge" in _nbctl(nb_server, "lsp-get-options", "edge-lr-edge")
    assert "edge-lr-edge" in _nbctl(nb_server, "lsp-list", "edge")
    for table, name in (("Logical_Router_Port", "lr-edge-edge"),
                        ("Logical_Switch_Port", "edge-lr-edge")):
        ext = _row(nb_server, table, name, "external_ids")
        assert "podnet/owner=podnet" in ext and "podnet/role=router-link" in ext, ext
    # a subnet without a router gets no router port
    world.add_pod("plain", 0)
    world.settle()
    assert _router_ports(nb_server) == ["lr-edge-edge"]
    assert _switch_router_ports(nb_server, "ovn-default") == []
    # packets: a pod of another subnet on the same router is reached through it (sent to
    # the gateway's MAC, one hop: TTL decremented); the router-less subnet is not
    world.add_pod("b", 0, annotations={f"{ANN}subnets": "small-r"})
    world.settle()
    b = _routed(world, "b").status
    with northd(nb_server) as central:
        for proto in ("icmp", "tcp"):
            routed = send(central, world, "a", "b", eth_dst=mac, proto=proto)
            assert routed.delivered == (b.interface,), routed.text
            assert "lr-edge-edge" in routed.outputs or "edge-lr-edge" in routed.outputs
            assert "ip.ttl--" in routed.text
        lost = send(central, world, "a", "plain", eth_dst=mac)
        assert lost.dropped and lost.datapath == "lr-edge", lost.text
        back = send(central, world, "b", "a", eth_dst=link_mac("lr-edge", "small-r"))
        assert back.delivered == (_routed(world, "a").status.interface,), back.text
    world.assert_converged()


def test_a_router_link_deleted_behind_podnets_back_comes_back(
        world: World, nb_server: NbServer, provider_plugin: Any,
        hook_calls: HookRecorder) -> None:
    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    pn = _routed(world, "a")
    _nbctl(nb_server, "lrp-del", "lr-edge-edge")
    _nbctl(nb_server, "lsp-del", "edge-lr-edge")
    _wait(lambda: provider_plugin.client.port("edge-lr-edge") is None, "the deletion")
    hook_calls.clear()
    world.settle(advance=world.policy().verify_period + 1)
    mine = [(e.trigger, e.ok) for e in hook_calls.transitions("pod_network")
            if e.object_key == pn.key]
    assert mine == [("repair", True), ("route", True)], mine
    assert _router_ports(nb_server) == ["lr-edge-edge"]
    assert "router-port=lr-edge-edge" in _nbctl(nb_server, "lsp-get-options", "edge-lr-edge")
    assert "edge-lr-edge" in _nbctl(nb_server, "lsp-list", "edge")
    world.assert_converged()


def test_starting_twice_creates_no_link_twice(world: World, nb_server: NbServer,
                                              provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    uuids = (_row(nb_server, "Logical_Router_Port", "lr-edge-edge", "_uuid"),
             _row(nb_server, "Logical_Switch_Port", "edge-lr-edge", "_uuid"))
    for round_ in range(2):
        provider_plugin.close()  # a new start: the provider reads NB again
        world.restart()
        world.add_pod(f"b{round_}", 0, annotations={f"{ANN}subnets": "edge"})
        world.settle()
        _routed(world, f"b{round_}")
    assert _router_ports(nb_server) == ["lr-edge-edge"]
    assert _switch_router_ports(nb_server, "edge") == ["(edge-lr-edge)"]
    assert (_row(nb_server, "Logical_Router_Port", "lr-edge-edge", "_uuid"),
            _row(nb_server, "Logical_Switch_Port", "edge-lr-edge", "_uuid")) == uuids
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-edge", "networks") == \
        "10.19.0.1/24"
    world.assert_converged()


def test_a_changed_gateway_and_prefix_correct_the_router_port(
        world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    assert _routed(world, "a").status.ip.startswith("10.19.0.")
    changed = [dict(s, cidr="10.19.0.0/23", gateway="10.19.1.254") if s["name"] == "edge"
               else s for s in SUBNETS]
    provider_plugin.podnet_configure(provider="ovn",
                                     config={"subnets": changed, "routers": ROUTERS})
    provider_plugin.close()
    world.restart()
    world.add_pod("b", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    assert _routed(world, "b").status.gateway == "10.19.1.254"
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-edge", "networks") == \
        "10.19.1.254/23"
    assert _router_ports(nb_server) == ["lr-edge-edge"]
    # drift behind podnet's back is set right on the next route too
    _nbctl(nb_server, "set", "Logical_Router_Port", "lr-edge-edge",
           'networks="10.19.0.1/24","10.19.7.1/24"')
    _wait(lambda: "10.19.7.1/24" in _row(nb_server, "Logical_Router_Port", "lr-edge-edge",
                                         "networks"), "the drift")
    world.add_pod("c", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    _routed(world, "c")
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-edge", "networks") == \
        "10.19.1.254/23"


def test_a_dual_stack_subnets_router_port_has_both_gateways(
        world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("d", 0, annotations={f"{ANN}subnets": "dual-r"})
    world.settle()
    pn = _routed(world, "d")
    assert pn.status.ip != "10.24.0.1" and pn.status.ipv6 != "fd00:24::1"
    assert "(lr-dual-dual-r)" in _nbctl(nb_server, "lrp-list", "lr-dual")
    networks = _row(nb_server, "Logical_Router_Port", "lr-dual-dual-r", "networks").split()
    assert sorted(networks) == ["10.24.0.1/24", "fd00:24::1/120"]
    assert "router-port=lr-dual-dual-r" in _nbctl(nb_server, "lsp-get-options",
                                                   "dual-r-lr-dual")
    world.assert_converged()


def test_the_sweep_leaves_the_router_link_alone(world: World, nb_server: NbServer,
                                                provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "edge"})
    world.settle()
    port = _routed(world, "a").status.interface
    # nothing owns any port, every orphan may go: only the pod's port is one
    left = provider_plugin.podnet_sweep(provider="ovn", owners=set(),
                                        remove={port, "edge-lr-edge", "lr-edge-edge"})
    assert left == []
    _wait(lambda: provider_plugin.client.port(port) is None, "the sweep")
    assert provider_plugin.client.port("edge-lr-edge") is not None
    assert _router_ports(nb_server) == ["lr-edge-edge"]
    assert _nbctl(nb_server, "lsp-get-type", "edge-lr-edge").strip() == "router"


def test_the_gateway_is_never_a_pods_address(world: World, nb_server: NbServer,
                                             provider_plugin: Any) -> None:
    """10.23.0.0/29 with its router: .1 is the router port's; .2-.6 go to pods, then
    the subnet is full, before and after the IPAM's rebuild from NB."""
    from podnet.plugins.ovn.rows import link_mac

    world.add_node(0)
    small = {f"{ANN}subnets": "small-r"}
    for name in ("a", "b", "c"):
        world.add_pod(name, 0, annotations=small)
    world.add_pod("gw", 0, annotations={**small, f"{ANN}ip-address": "10.23.0.1"})
    world.settle(advance=5)
    gw = world.record_of("gw")
    assert gw is not None and gw.status.phase is Phase.PENDING
    ready = [c for c in gw.status.conditions if c.type == "Ready"]
    assert ready and "gateway" in ready[0].message, ready
    assert _row(nb_server, "Logical_Router_Port", "lr-edge-small-r", "networks") == \
        "10.23.0.1/29"
    provider_plugin.close()  # the IPAM is rebuilt from NB, router ports included
    world.restart()
    assert provider_plugin.client is not None  # connects and rebuilds
    assert provider_plugin.ipam.owner("10.23.0.1") is not None
    assert provider_plugin.ipam.macs[link_mac("lr-edge", "small-r")] == \
        "router port lr-edge-small-r"
    for name in ("d", "e", "f"):
        world.add_pod(name, 0, annotations=small)
    world.settle(advance=5)
    got = {pn.status.ip for pn in world.records()
           if pn.status.subnet == "small-r" and pn.status.phase is Phase.ROUTED}
    assert got == {f"10.23.0.{i}" for i in range(2, 7)}
    assert "10.23.0.1" not in world.cloud_addresses()


_LATE_NODE = "node-0"


def _late_record(prefix: str, i: int, subnet: str) -> Any:
    """A pod network on ``subnet`` for the tests that stop NB mid-write."""
    from podnet.core.models import NetworkRequest, ObjectMeta, PodNetwork, PodNetworkSpec

    return PodNetwork(
        metadata=ObjectMeta(name=f"{prefix}{i}.default.{i:08x}", namespace="late"),
        spec=PodNetworkSpec(pod_name=f"{prefix}{i}", pod_uid=f"{i:08x}",
                            node_name=_LATE_NODE, provider="ovn",
                            requests=NetworkRequest(subnets=(subnet,))))


def _node_context() -> Any:
    from podnet.core.models import NodeInfo
    from podnet.hookspecs.types import NodeContext

    return NodeContext(node=NodeInfo(name=_LATE_NODE, uid="n0"))


def _allocate(plugin: Any, pn: Any) -> Any:
    from podnet.hookspecs.types import AllocateContext

    return plugin.podnet_allocate(context=AllocateContext(pod_network=pn,
                                                          node=_node_context()))


def _allocate_until_full(plugin: Any, prefix: str, indexes: range) -> list[str]:
    """The addresses of "tiny" the pods ``prefix<i>`` get, until the subnet is full."""
    from podnet.core.errors import ProviderError

    got: list[str] = []
    for i in indexes:
        try:
            got.append(_allocate(plugin, _late_record(prefix, i, "tiny")).ip)
        except ProviderError:
            break  # the subnet is full
    return got


def _addresses_on_ports(plugin: Any) -> list[str]:
    return [ip for lsp in plugin.client.ports() for a in lsp.addresses
            for ip in a.split()[1:]]


def test_an_allocate_whose_answer_timed_out_keeps_its_address_from_other_pods(
        nb_server: NbServer) -> None:
    """NB stopped while a pod's port is written: the write times out, yet NB commits it
    once it runs again. Its address stays the record's: the other pods of the subnet get
    the others (before, it was freed at the timeout and given to one of them, two ports
    on one address), and the record asking again gets its port's address back."""
    import os
    import signal

    from podnet.plugins.ovn.ipam import port_name
    from podnet.plugins.ovn.nb import outcome_unknown
    from podnet.plugins.ovn.provider import OvnProvider

    def record(i: int) -> Any:
        return _late_record("t", i, "tiny")

    def allocate(pn: Any) -> Any:
        return _allocate(plugin, pn)

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, routers=ROUTERS, seed=1, timeout=1.0)
    assert nb_server.process is not None
    pid = nb_server.process.pid
    try:
        allocate(record(0))  # the subnet's switch made, one address taken
        late = record(1)
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(Exception) as timed_out:
                allocate(late)
            assert outcome_unknown(timed_out.value), timed_out.value
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait(lambda: plugin.client.port(port_name(late)) is not None,
              "NB to commit the late port", timeout=20.0)
        others = _allocate_until_full(plugin, "t", range(2, 8))
        addresses = _addresses_on_ports(plugin)
        assert len(addresses) == len(set(addresses)), sorted(addresses)
        again = allocate(late)
        assert again.ip not in others
        assert plugin.client.port(port_name(late)) is not None
        addresses = _addresses_on_ports(plugin)
        assert len(addresses) == len(set(addresses)), sorted(addresses)
    finally:
        plugin.close()


def test_a_route_whose_answer_timed_out_keeps_its_new_vip_from_other_pods(
        nb_server: NbServer) -> None:
    """A routed pod asks for a VIP; NB is stopped while its port is written with it, and
    commits the write once it runs again. The VIP stays the pod's: another pod asking for
    it is refused (before, the VIP was given back at the timeout and the other pod's
    port took it too)."""
    import os
    import signal

    from podnet.core.errors import ProviderError
    from podnet.hookspecs.types import PodNetworkContext
    from podnet.plugins.ovn.ipam import port_name
    from podnet.plugins.ovn.nb import outcome_unknown
    from podnet.plugins.ovn.provider import OvnProvider

    vip = "10.21.0.200"

    def routed(i: int) -> Any:
        pn = _late_record("v", i, "storage")
        got = _allocate(plugin, pn)
        return attrs.evolve(pn, status=attrs.evolve(
            pn.status, ip=got.ip, mac=got.mac, subnet=got.subnet, gateway=got.gateway))

    def route(pn: Any) -> Any:
        return plugin.podnet_route(context=PodNetworkContext(pod_network=pn,
                                                             node=_node_context()))

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, routers=ROUTERS, seed=1, timeout=1.0)
    assert nb_server.process is not None
    pid = nb_server.process.pid
    try:
        first = routed(1)
        route(first)
        other = routed(2)
        route(other)
        first = attrs.evolve(first, spec=attrs.evolve(
            first.spec, requests=attrs.evolve(first.spec.requests, vips=(vip,))))
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(Exception) as timed_out:
                route(first)
            assert outcome_unknown(timed_out.value), timed_out.value
        finally:
            os.kill(pid, signal.SIGCONT)
        _wait(lambda: vip in str(plugin.client.port(port_name(first)).external_ids),
              "NB to commit the late VIP", timeout=20.0)
        other = attrs.evolve(other, spec=attrs.evolve(
            other.spec, requests=attrs.evolve(other.spec.requests, vips=(vip,))))
        with pytest.raises(ProviderError) as refused:
            route(other)
        assert "already a VIP of" in str(refused.value), refused.value
        route(first)  # the pod asking again keeps it
        assert vip in str(plugin.client.port(port_name(first)).external_ids)
    finally:
        plugin.close()

def test_an_allocate_whose_batch_leader_died_keeps_its_address_from_other_pods(
        nb_server: NbServer) -> None:
    """Two pods' ports ride in one transaction; the caller committing it is interrupted
    (a crash) once NB has it. Neither caller can know whether its port was written: each
    address stays its record's, no later pod gets it, and each record asking again gets
    it back (before, the interrupted leader freed its own address)."""
    from podnet.plugins.ovn.ipam import port_name
    from podnet.plugins.ovn.nb import outcome_unknown
    from podnet.plugins.ovn.provider import OvnProvider
    from podnet.testing.faults import Crash

    def record(i: int) -> Any:
        return _late_record("b", i, "tiny")

    def allocate(pn: Any) -> Any:
        return _allocate(plugin, pn)

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, routers=ROUTERS, seed=1, timeout=5.0)
    batcher = plugin.client.batcher
    commit_one = batcher._commit_one

    def dies_after_a_shared_commit(commands: list[Any]) -> None:
        commit_one(commands)
        if len(commands) > 1:
            raise Crash("the leader's worker dies with the transaction sent")

    try:
        allocate(record(0))  # the subnet's switch made: each allocate below is one port
        batcher.window = 0.2  # the two callers below share one transaction
        batcher._commit_one = dies_after_a_shared_commit  # type: ignore[method-assign]
        pair = [record(1), record(2)]
        raised: dict[str, BaseException] = {}

        def run(pn: Any) -> None:
            try:
                allocate(pn)
            except BaseException as exc:
                raised[pn.metadata.name] = exc

        threads = [threading.Thread(target=run, args=(pn,)) for pn in pair]
        for thread in threads:
            thread.start()
            time.sleep(0.02)
        for thread in threads:
            thread.join(10)
        batcher._commit_one = commit_one  # type: ignore[method-assign]
        batcher.window = 0.0
        kinds = sorted(type(exc).__name__ for exc in raised.values())
        assert kinds == ["BatchLeaderDied", "Crash"], raised
        assert all(outcome_unknown(exc) for exc in raised.values())
        held: dict[str, str] = {}
        for pn in pair:
            port = plugin.client.port(port_name(pn))
            assert port is not None  # committed: the answer was what never came
            held[pn.metadata.name] = port.addresses[0].split()[1]
        others = _allocate_until_full(plugin, "b", range(3, 10))
        assert not set(held.values()) & set(others), (held, others)
        for pn in pair:
            assert allocate(pn).ip == held[pn.metadata.name]
        addresses = _addresses_on_ports(plugin)
        assert len(addresses) == len(set(addresses)), sorted(addresses)
    finally:
        plugin.close()
