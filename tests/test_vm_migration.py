"""KubeVirt live migration on the OVN provider: the VM keeps its address.

KubeVirt runs a migration as a second virt-launcher pod of the same
VirtualMachineInstance, labelled ``kubevirt.io/migrationJobUID`` (the
VirtualMachineInstanceMigration's uid); the source pod has no such label. When the
migration succeeds the source pod ends (``Succeeded``); when it fails or is aborted the
target pod does. Driven here against the API emulator and a real Northbound server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from podnet.core.cluster.port import POD_NETWORK
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE,
    ANNOTATION_MIGRATION_SOURCE_NODE,
    LABEL_MIGRATION_JOB,
    LABEL_MIGRATION_SOURCE_NODE,
    Phase,
)
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.types import Plug, ProviderInfo, UnplugContext
from podnet.node import NodeAgent
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.faults import FaultInjector
from podnet.testing.harness import World, build_plugin_manager
from podnet.testing.kubevirt import KubeVirt

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

VMI = ("VirtualMachineInstance", "vm1")
SUBNETS = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True}]


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


@pytest.fixture
def provider_plugin(nb_server: NbServer) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, seed=1)
    yield plugin
    plugin.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Any:
    return provider_plugin.nb_addresses


@pytest.fixture
def injector() -> FaultInjector:
    return FaultInjector()


@pytest.fixture
def plugin_manager(provider_plugin: Any, injector: FaultInjector) -> Any:
    return build_plugin_manager(provider_plugin, injector=injector)


def _routed(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.phase is Phase.ROUTED, pn
    return pn


def _binding(plugin: Any, port: str) -> dict[str, str]:
    lsp = plugin.client.port(port)
    assert lsp is not None, port
    return {k: v for k, v in dict(lsp.options).items()
            if k in ("requested-chassis", "activation-strategy")}


def _migrating(world: World, plugin: Any) -> tuple[Any, str, str]:
    """A VM running on node 0, and its migration's target pod on node 1, settled."""
    world.add_node(0)
    world.add_node(1)
    world.add_pod("virt-launcher-vm1-src", 0, owner=VMI)
    world.settle()
    source = _routed(world, "virt-launcher-vm1-src")
    assert _binding(plugin, source.status.interface) == {
        "requested-chassis": world.node_name(0)}
    world.add_pod("virt-launcher-vm1-dst", 1, owner=VMI,
                  labels={LABEL_MIGRATION_JOB: "mig-uid-1"})
    world.settle()
    return source, world.node_name(0), world.node_name(1)


def test_a_migration_target_shares_the_vms_address_and_port(
        world: World, provider_plugin: Any) -> None:
    source, n0, n1 = _migrating(world, provider_plugin)
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.key == source.key  # one record: one address, owned once
    assert (target.status.ip, target.status.mac) == (source.status.ip, source.status.mac)
    assert target.spec.node_name == n1
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE] == "virt-launcher-vm1-src"
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE_NODE] == n0
    assert target.metadata.labels[LABEL_MIGRATION_SOURCE_NODE] == n0  # its agent lists it
    # the VM still runs on the source's node: bound there, the target's chassis waits
    # for the VM's RARP
    assert _binding(provider_plugin, target.status.interface) == {
        "requested-chassis": f"{n0},{n1}", "activation-strategy": "rarp"}
    assert world.record_of("virt-launcher-vm1-src") is None
    assert [pn.key for pn in world.records()] == [source.key]
    world.assert_converged()


def test_a_finished_migration_binds_the_port_to_the_target_only(
        world: World, provider_plugin: Any) -> None:
    source, _n0, n1 = _migrating(world, provider_plugin)
    world.finish_pod("virt-launcher-vm1-src")  # the source's virt-launcher completes
    world.settle()
    world.delete_pod("virt-launcher-vm1-src")
    world.settle(advance=world.policy().sticky_hold + 10)
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.key == source.key and target.status.ip == source.status.ip
    assert ANNOTATION_MIGRATION_SOURCE not in target.metadata.annotations
    assert LABEL_MIGRATION_SOURCE_NODE not in target.metadata.labels
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    assert source.status.ip in world.cloud_addresses()  # never given back on the way
    assert [pn.key for pn in world.records()] == [source.key]
    world.assert_converged()


@pytest.mark.parametrize("how", ["failed", "deleted"])
def test_a_failed_migration_leaves_the_source_bound(
        world: World, provider_plugin: Any, how: str) -> None:
    source, n0, _n1 = _migrating(world, provider_plugin)
    if how == "failed":
        world.finish_pod("virt-launcher-vm1-dst", "Failed")
    else:
        world.delete_pod("virt-launcher-vm1-dst")
    world.settle()
    back = _routed(world, "virt-launcher-vm1-src")
    assert back.key == source.key and back.status.ip == source.status.ip
    assert back.spec.node_name == n0
    assert ANNOTATION_MIGRATION_SOURCE not in back.metadata.annotations
    assert LABEL_MIGRATION_SOURCE_NODE not in back.metadata.labels
    assert _binding(provider_plugin, back.status.interface) == {"requested-chassis": n0}
    world.settle(advance=world.policy().sticky_hold + 10)
    assert [pn.key for pn in world.records()] == [source.key]
    assert source.status.ip in world.cloud_addresses()
    world.assert_converged()


def test_a_controller_restart_in_the_middle_of_a_migration_keeps_it(
        world: World, provider_plugin: Any) -> None:
    source, _n0, n1 = _migrating(world, provider_plugin)
    world.restart()
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.key == source.key and target.status.ip == source.status.ip
    assert ANNOTATION_MIGRATION_SOURCE in target.metadata.annotations
    assert world.record_of("virt-launcher-vm1-src") is None  # no second address for it
    world.finish_pod("virt-launcher-vm1-src")
    world.restart()
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    assert [pn.key for pn in world.records()] == [source.key]
    world.assert_converged()


def test_a_target_waits_for_the_vms_record_to_be_routed(
        world: World, provider_plugin: Any, injector: FaultInjector) -> None:
    """The source's record not routed yet (the VM is not running on it): the target takes
    no address of its own, and takes the record once it is routed."""
    world.add_node(0)
    world.add_node(1)
    injector.fail("route", lambda: ProviderError(ErrorKind.THROTTLED, "injected"),
                  when="before", times=2)
    world.add_pod("virt-launcher-vm1-src", 0, owner=VMI)
    world.add_pod("virt-launcher-vm1-dst", 1, owner=VMI,
                  labels={LABEL_MIGRATION_JOB: "mig-uid-1"})
    for _ in range(10):
        world.step(5)
        assert len(world.records()) == 1, [pn.key for pn in world.records()]
    world.settle(advance=60)  # the throttled route is retried
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE] == "virt-launcher-vm1-src"
    assert [pn.key for pn in world.records()] == [target.key]
    world.assert_converged()


# --- what KubeVirt says: the VMI's status.migrationState ------------------------------


def _kubevirt_migrating(world: World, plugin: Any) -> tuple[KubeVirt, Any, str, str]:
    """As :func:`_migrating`, with KubeVirt's objects: the VMI running on node 0, the
    VirtualMachineInstanceMigration and the VMI's migrationState begun, the target pod
    labelled with the migration's uid."""
    kubevirt = KubeVirt(world.cluster, world.namespace, world.clock)
    world.add_node(0)
    world.add_node(1)
    n0, n1 = world.node_name(0), world.node_name(1)
    kubevirt.running("vm1", n0)
    world.add_pod("virt-launcher-vm1-src", 0, owner=VMI)
    world.settle()
    source = _routed(world, "virt-launcher-vm1-src")
    uid = kubevirt.begin("vm1", name="mig1", source_pod="virt-launcher-vm1-src",
                         source_node=n0, target_pod="virt-launcher-vm1-dst", target_node=n1)
    world.add_pod("virt-launcher-vm1-dst", 1, owner=VMI,
                  labels={LABEL_MIGRATION_JOB: uid})
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.key == source.key
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE] == "virt-launcher-vm1-src"
    return kubevirt, source, n0, n1


def test_kubevirt_says_completed_while_the_source_pod_still_runs(
        world: World, provider_plugin: Any) -> None:
    """The VMI says the migration completed: the port is the target's alone at once,
    and the source pod, still running until its virt-launcher exits, takes no address."""
    kubevirt, source, _n0, n1 = _kubevirt_migrating(world, provider_plugin)
    kubevirt.end("vm1", "mig1", "completed")
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.key == source.key and target.status.ip == source.status.ip
    # the source's node goes (no port there, its agent lets the interface go); the
    # source pod, still running, stays named: it takes no address of its own
    assert ANNOTATION_MIGRATION_SOURCE_NODE not in target.metadata.annotations
    assert LABEL_MIGRATION_SOURCE_NODE not in target.metadata.labels
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE] == "virt-launcher-vm1-src"
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    assert world.pod("virt-launcher-vm1-src") is not None  # still running
    assert [pn.key for pn in world.records()] == [source.key]  # no address for the source
    world.restart()  # a restart reads it the same way
    world.settle()
    assert [pn.key for pn in world.records()] == [source.key]
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    world.finish_pod("virt-launcher-vm1-src")
    world.settle()
    assert ANNOTATION_MIGRATION_SOURCE not in world.record_of(
        "virt-launcher-vm1-dst").metadata.annotations
    world.delete_pod("virt-launcher-vm1-src")
    world.settle(advance=world.policy().sticky_hold + 10)
    target = _routed(world, "virt-launcher-vm1-dst")
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    assert [pn.key for pn in world.records()] == [source.key]
    world.assert_converged()


@pytest.mark.parametrize("how", ["failed", "aborted"])
def test_kubevirt_says_the_migration_ended_without_the_target_while_it_runs(
        world: World, provider_plugin: Any, how: str) -> None:
    """The VMI says the migration failed (or its abort succeeded) while the target pod
    still runs: the source gets the record back at once, and the target takes nothing
    (neither the record again nor an address of its own) until it goes."""
    kubevirt, source, n0, _n1 = _kubevirt_migrating(world, provider_plugin)
    kubevirt.end("vm1", "mig1", how)
    world.settle()
    back = _routed(world, "virt-launcher-vm1-src")
    assert back.key == source.key and back.status.ip == source.status.ip
    assert back.spec.node_name == n0
    assert ANNOTATION_MIGRATION_SOURCE not in back.metadata.annotations
    assert _binding(provider_plugin, back.status.interface) == {"requested-chassis": n0}
    assert world.pod("virt-launcher-vm1-dst") is not None  # still running
    assert world.record_of("virt-launcher-vm1-dst") is None
    world.restart()
    world.settle(advance=60)
    assert _routed(world, "virt-launcher-vm1-src").key == source.key
    assert [pn.key for pn in world.records()] == [source.key]
    world.delete_pod("virt-launcher-vm1-dst")
    world.settle(advance=world.policy().sticky_hold + 10)
    assert [pn.key for pn in world.records()] == [source.key]
    assert source.status.ip in world.cloud_addresses()
    world.assert_converged()


def test_a_migration_state_of_another_migration_leaves_the_pods_to_decide(
        world: World, provider_plugin: Any) -> None:
    """The VMI's migrationState is its last migration's (kept after it ends): one of
    another uid says nothing of this migration, whose course the pods tell."""
    kubevirt = KubeVirt(world.cluster, world.namespace, world.clock)
    n0, n1 = world.node_name(0), world.node_name(1)
    kubevirt.begin("vm1", name="earlier", source_pod="virt-launcher-vm1-old",
                   source_node=n1, target_pod="virt-launcher-vm1-src", target_node=n0)
    kubevirt.end("vm1", "earlier", "failed")
    _source, _n0, _n1 = _migrating(world, provider_plugin)
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.metadata.annotations[ANNOTATION_MIGRATION_SOURCE] == "virt-launcher-vm1-src"
    world.finish_pod("virt-launcher-vm1-src")
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert ANNOTATION_MIGRATION_SOURCE not in target.metadata.annotations
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    world.assert_converged()


def test_a_controller_restart_while_kubevirt_finishes_the_migration(
        world: World, provider_plugin: Any) -> None:
    """The migration completes while no controller runs: the next one reads the VMI's
    state and binds the port to the target alone, the source pod still running."""
    kubevirt, source, _n0, n1 = _kubevirt_migrating(world, provider_plugin)
    world.engines.stop(world.engine)
    world._engine = None
    kubevirt.end("vm1", "mig1", "completed")
    world.restart()
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert ANNOTATION_MIGRATION_SOURCE_NODE not in target.metadata.annotations
    assert _binding(provider_plugin, target.status.interface) == {"requested-chassis": n1}
    assert [pn.key for pn in world.records()] == [source.key]
    world.finish_pod("virt-launcher-vm1-src")  # its virt-launcher exits
    world.settle()
    assert ANNOTATION_MIGRATION_SOURCE not in world.record_of(
        "virt-launcher-vm1-dst").metadata.annotations
    assert [pn.key for pn in world.records()] == [source.key]
    world.assert_converged()


# --- the source node's agent -------------------------------------------------------------


class DictDataplane:
    """The ``ovn`` provider as a node agent sees it, its plugs kept in a dict."""

    def __init__(self) -> None:
        self.plugged: dict[tuple[str, str], Plug] = {}

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="ovn", version="test")

    @hookimpl
    def podnet_unplug(self, context: UnplugContext) -> None:
        self.plugged.pop((context.container_id, context.if_name), None)

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> list[Plug]:
        return list(self.plugged.values())

    def plug(self, container: str, owner: str) -> None:
        self.plugged[(container, "eth0")] = Plug(container_id=container, if_name="eth0",
                                                 network="default", owner=owner)


def _agent_starts(world: World, node: str, dataplane: DictDataplane) -> None:
    """A node agent of ``node`` (re)started: its records listed, its leftovers removed
    (what its start does before it serves)."""
    pm = new_plugin_manager()
    pm.register(dataplane, name="dict-dataplane")
    agent = NodeAgent(world.cluster, Providers(pm), node, add_timeout=0)
    try:
        agent.records.start()
        agent.remove_leftovers()
    finally:
        agent.stop()


def test_the_source_nodes_agent_restarting_mid_migration_keeps_the_vms_interface(
        world: World, provider_plugin: Any) -> None:
    """The record names the target's node while the VM still runs on the source's: an
    agent of the source node that restarts then keeps the VM's interface (the record is
    its own while it names the node as its migration's source); once the migration is
    over, the interface is a leftover like any other."""
    source, n0, _n1 = _migrating(world, provider_plugin)
    dataplane = DictDataplane()
    dataplane.plug("src-sandbox", source.key)
    dataplane.plug("gone-sandbox", f"{world.namespace}/a-record-that-is-gone")
    _agent_starts(world, n0, dataplane)
    assert set(dataplane.plugged) == {("src-sandbox", "eth0")}  # the VM's, and only it
    world.finish_pod("virt-launcher-vm1-src")  # the migration is over
    world.settle()
    assert ANNOTATION_MIGRATION_SOURCE not in world.record_of("virt-launcher-vm1-dst"
                                                              ).metadata.annotations
    _agent_starts(world, n0, dataplane)
    assert dataplane.plugged == {}


def test_a_migrating_record_of_an_earlier_version_gets_the_source_nodes_label(
        world: World, provider_plugin: Any) -> None:
    """A record an earlier controller annotated has no source-node label: the next pass
    writes it, so the source node's agent finds the record."""
    source, n0, _n1 = _migrating(world, provider_plugin)
    with world.quiet():
        obj = world.cluster.get(POD_NETWORK, source.metadata.name, world.namespace)
        del obj["metadata"]["labels"][LABEL_MIGRATION_SOURCE_NODE]
        world.cluster.update(POD_NETWORK, obj)
    world.restart()
    world.settle()
    target = _routed(world, "virt-launcher-vm1-dst")
    assert target.metadata.labels[LABEL_MIGRATION_SOURCE_NODE] == n0
    world.assert_converged()
