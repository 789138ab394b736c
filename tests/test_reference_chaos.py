"""The chaos machine, applied to the reference provider (``PODNET_CHAOS_EXAMPLES`` for
deeper runs), and the engine bugs it found, each as a plain deterministic test."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pluggy
import pytest
from hypothesis import reproduce_failure
from hypothesis.errors import DidNotReproduce
from hypothesis.stateful import run_state_machine_as_test

from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.policy import PoolPolicy
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster
from podnet.testing.chaos import chaos_settings, make_chaos_machine
from podnet.testing.harness import EngineFactory, FaultInjector, LossyCluster, World

pytest_plugins = ["podnet.testing"]


def _addresses(plugin: Any) -> Mapping[str, str]:
    cloud: ReferenceCloud = plugin.cloud
    return cloud.all_addresses()


def _fault_rate(plugin: Any, rate: float) -> None:
    cloud: ReferenceCloud = plugin.cloud
    cloud.fault_rate = rate


def _forget(plugin: Any, node: str, addresses: list[str]) -> None:
    cloud: ReferenceCloud = plugin.cloud
    cloud.forget(node, addresses)


#: faults left out while an engine bug they trigger is open, each with an xfail test below
#: reproducing it (keys: see make_chaos_machine's ``without``); none open now
KNOWN_BUGS: tuple[str, ...] = ()


def _tight_pools() -> ReferenceProvider:
    """Small interfaces and pool bounds: grow, shrink, new interfaces and disposal all
    happen with a handful of pods; released addresses are reused at once."""
    cloud = ReferenceCloud(max_interfaces=3, ips_per_interface=4)
    policy = PoolPolicy(min_idle=1, max_idle=2, batch_size=2, max_batch_size=4,
                        reuse_cooldown=0.0)
    return ReferenceProvider(cloud=cloud, policy=policy)


ReferenceChaos = make_chaos_machine(
    lambda: ReferenceProvider(cloud=ReferenceCloud()), _addresses,
    cloud_fault_rate=_fault_rate, cloud_forget=_forget, without=KNOWN_BUGS,
    name="ReferenceChaos",
)
TestReferenceChaos = ReferenceChaos.TestCase
TestReferenceChaos.settings = chaos_settings()

VmChaos = make_chaos_machine(
    lambda: ReferenceProvider(cloud=ReferenceCloud(),
                              sticky_kinds=("StatefulSet", "VirtualMachineInstance")),
    _addresses, cloud_fault_rate=_fault_rate, vms=True, without=KNOWN_BUGS, name="VmChaos",
)
TestVmChaos = VmChaos.TestCase  # VM pods on node pools: their address follows on one node
TestVmChaos.settings = chaos_settings()

TightPoolChaos = make_chaos_machine(
    _tight_pools, _addresses, cloud_fault_rate=_fault_rate, cloud_forget=_forget, pods=8,
    without=KNOWN_BUGS,
    name="TightPoolChaos",
)
TestTightPoolChaos = TightPoolChaos.TestCase
TestTightPoolChaos.settings = chaos_settings()


# --- engine bugs the machine found, shrunk to plain deterministic tests -------------------
# An open bug is marked xfail(strict=True) with the reason and its fault listed in
# KNOWN_BUGS; once fixed, the test stays as a regression test.


def test_sticky_pod_back_on_another_node_settles(world: World) -> None:
    """Was a livelock: the releasing sticky record was reclaimed for a pod now on another
    node, then wound down again because the node differed, forever."""
    world.add_node(0)
    world.add_node(1)
    world.add_pod("web-0", 0, owner=("StatefulSet", "web"))
    world.settle()
    world.recreate_pod("web-0", 1)
    world.settle(advance=world.gc_grace(), max_steps=2_000)
    world.assert_converged()


def test_pods_of_a_node_that_comes_back_get_networks(world: World) -> None:
    """Was: a node's pods were queued only when it was deleted, so pods bound to a node
    the engine saw appear later were never reconciled."""
    world.add_node(0)
    world.add_pod("p0", 0)
    world.delete_node(0)
    world.settle()
    world.add_node(0)
    world.settle(advance=world.gc_grace())
    world.assert_converged()


def test_lost_shrink_answer_never_hands_out_a_removed_address(
        world: World, fault_injector: FaultInjector) -> None:
    """Was: the victims of a shrink whose answer got lost went back to the pool as idle
    and were handed to pods, though the cloud had removed them."""
    world.add_node(0)
    world.settle()
    excess = world.policy().max_idle + 4
    for i in range(excess):
        world.add_pod(f"p{i}", 0)
    world.settle()
    # the cloud removes the addresses, the answer never arrives
    fault_injector.fail("pool_shrink", ProviderError(ErrorKind.TRANSIENT, "timed out"),
                        when="after")
    for i in range(excess):
        world.delete_pod(f"p{i}")
    world.settle()
    assert fault_injector.fired
    for i in range(excess):
        world.add_pod(f"q{i}", 0)
    world.settle()
    assert world.dangling_problems() == []


def test_lost_allocated_write_keeps_the_address_owned(
        cluster: InMemoryCluster, fake_clock: FakeClock, plugin_manager: pluggy.PluginManager,
        provider_name: str, ground_truth: Callable[[], Mapping[str, str]]) -> None:
    """Was: the reservation was rolled back when the Allocated write's answer got lost;
    the record (committed) was routed, the pool kept offering its address to later pods,
    which failed 'already recorded' forever."""
    api = LossyCluster(cluster)
    engines = EngineFactory(cluster, plugin_manager, fake_clock, provider=provider_name,
                            api=api.as_cluster())
    world = World(cluster, fake_clock, engines, ground_truth)
    world.add_node(0)
    world.settle()
    api.lose_next("update_status", POD_NETWORK)  # the first status write: Allocated
    world.add_pod("p0", 0)
    world.settle()
    assert api.lost == [("update_status", "podnetworks")]
    world.add_pod("p1", 0)
    world.settle(advance=world.gc_grace())
    world.assert_converged()


def test_an_edit_made_while_the_watches_were_down_is_seen_by_the_next_settle(
        world: World, cluster: InMemoryCluster) -> None:
    """Was: a pump that found its watch closed only reopened it; what the new watch
    replayed (an edit made while none was open) waited for the next pump, so
    ``run_until_idle`` saw nothing ready and stopped with two records on one address."""
    world.add_node(0)
    world.add_pod("p0", 0)
    world.add_pod("p1", 0)
    world.settle()
    a, b = world.record_of("p0"), world.record_of("p1")
    assert a is not None and b is not None and b.status.ip
    cluster.faults.drop_watches()
    cluster.patch(POD_NETWORK, a.metadata.name, {"status": {"ip": b.status.ip}},
                  a.metadata.namespace, subresource="status")
    world.settle()
    world.assert_no_double_owner()


def test_a_node_leaves_with_a_record_edited_to_another_records_address() -> None:
    """Found by the machine: p0's status.ip set to p1's address, then the node deleted.
    p0's release gave back the address it names (p1's, not its own), so the pool kept
    p0's own address owned by a record that was gone, and the node's record waited for it
    forever with its finalizer. Now an owner that is gone owns nothing on a leaving node."""
    state = TightPoolChaos()
    try:
        state.populate(up=1, running=2)
        state.settle(seconds=0.0)
        state.edit_record_ip(a="p0", b="p1")
        state.delete_node(i=0)
        state.every_cloud_address_has_a_record()
        state.teardown()
    finally:
        state.world.close()


def test_a_node_the_cloud_never_read_leaves_after_a_restart() -> None:
    """Found by the machine: the node's record was created but its answer lost, so its
    pool was never read and the reference cloud never knew the node; after a restart the
    Node was deleted, and the node known only from its record (no podCIDR) could not be
    read: the inventory's fatal error was waited on forever, the record kept by its
    finalizer. A provider that refuses a field of a Node that left now gives back what the
    record lists, and the record goes."""
    state = VmChaos()
    try:
        state.populate(up=1, running=0)
        state.lose_answers(times=1, what=("create", NODE_NETWORK))
        state.step(n=2)
        state.restart()
        state.node_deleted(i=0, kill=None, pods_on_it=0, steps=0, when="before")
        state.teardown()
    finally:
        state.world.close()



def test_a_migration_kubevirt_says_is_of_another_pod_leaves_the_vms_record_alone() -> None:
    """Found by the machine (a sweep before a stop): two pods of one VM ran (the second
    got an address of its own, the VM's record serving the first), and KubeVirt migrated
    the second. Its target took the VM's record from the first pod as if that were the
    migration's source; when KubeVirt said the migration completed and the real source
    ended, the first pod ran on, lending its record for good. Now a target takes the
    VM's record only from the pod KubeVirt names as the source (the pods decide when
    KubeVirt says nothing): here it gets an address of its own."""
    state = VmChaos()
    try:
        state.populate(up=3, running=0)
        state.add_vm_pod(i=1, pod="p0", vm="vm-a")
        state.add_vm_pod(i=0, pod="p1", vm="vm-a")
        state.migrate_vm(ends="finished", i=1, kubevirt=True, pick=1, steps=0)
        record = state.world.record_of("p0")
        assert record is not None and record.spec.sticky, "the VM's record stays p0's"
        state.teardown()
    finally:
        state.world.close()


# --- histories CI printed as blobs, replayed as the machine that found them drew them ----

#: the fault the machines left out while the re-registration gap was open: the blobs
#: below were drawn without it, and decode to the same history only without it
_RE_REGISTRATION_GAP_RUN = ("cluster_fail:create:nodenetworks",)


def _replay_machine(blob: bytes, ran: list[list[str]]) -> Any:
    """The machine that drew ``blob``, set to replay it; each teardown adds the nodes
    still live to ``ran`` (how far the history went)."""
    machine = make_chaos_machine(
        _tight_pools, _addresses, cloud_fault_rate=_fault_rate, cloud_forget=_forget, pods=8,
        without=_RE_REGISTRATION_GAP_RUN, name="TightPoolChaos")
    teardown = machine.teardown

    def noting_teardown(self: Any) -> None:
        ran.append(sorted(self.world.live_nodes()))
        teardown(self)

    machine.teardown = noting_teardown
    return reproduce_failure("6.170.27", blob)(machine)


@pytest.mark.parametrize("blob", [
    b"AXictY6xEYAwDAOlJBxFCgbINL//UiCHYwPOjf7lQqJzIGGWyJkZlrEjRBOndrzqo9oyrvYPWlkSbu+aytYD"
    b"I+Zb29ENmIcTeA==",
    b"AXictY6xEYAwDMT+E6goGCDTaP+l4P84Nsi5sWQXEpMTCbNExlxhGTtCDHH3Utsv1+6glYLw+Cq6Wy8cMX/l"
    b"RA/86RKu",
], ids=["with-a-crash", "api-errors-only"])
def test_a_node_registered_again_and_deleted_under_api_errors_leaks_nothing(
        blob: bytes) -> None:
    """Found by CI (10 % API errors): a Node deleted and registered again, then deleted;
    10.64.0.2/.3 were left on the node with no record naming them. The record of a machine
    that still runs is no longer let go while its Node is registered again: it keeps the
    pool until the node leaves. A replay raises DidNotReproduce when its history passes
    (having run past the step that failed, it asks for more steps than the blob holds:
    "the shape ... has changed"); the teardown's convergence check ran either way."""
    ran: list[list[str]] = []
    with pytest.raises(DidNotReproduce):
        run_state_machine_as_test(_replay_machine(blob, ran), settings=chaos_settings())
    # nodes 0 and 1 deleted, node 0 registered again and deleted again: node 2 is left
    assert ran == [["node-0002"]]


def _re_registered_under_api_errors(crash: bool) -> None:
    state = TightPoolChaos()
    try:
        state.populate(up=3, running=5)
        state.node_deleted(i=0, kill=None, pods_on_it=1, steps=11, when="before")
        state.heal_records()
        if crash:
            state.crash_after_write(what=("create", POD_NETWORK))
        state.cluster_fault_rates(conflict=0.0, error=0.1)
        for _ in range(7):
            state.heal_records()
        state.node_deleted(i=1, kill=None, pods_on_it=0, steps=2, when="before")
        state.add_node(i=0)
        state.node_deleted(i=0, kill=None, pods_on_it=1, steps=3, when="before")
        state.every_cloud_address_has_a_record()
        state.teardown()
    finally:
        state.world.close()


def test_a_node_registered_again_and_deleted_under_api_errors_keeps_its_addresses_named(
) -> None:
    """The first blob's history, step by step: node-0000 deleted, registered again while
    its old record was still giving its share back, deleted again, the API server failing
    one write in ten and the controller killed once after a PodNetwork's create."""
    _re_registered_under_api_errors(crash=True)


def test_a_node_registered_again_under_api_errors_alone_keeps_its_addresses_named() -> None:
    """The second blob's history: the same, with no crash."""
    _re_registered_under_api_errors(crash=False)


def test_a_node_registered_again_and_deleted_under_30_percent_api_errors_keeps_its_addresses(
) -> None:
    """A deep run's history (2,000 examples, on the code before the re-registration fix):
    one pod on node-0000, three API writes in ten failing, the node deleted, registered
    again and deleted with its pod: 10.64.0.4/.5 were left on it with no record naming
    them."""
    state = TightPoolChaos()
    try:
        state.populate(up=1, running=1)
        state.add_pod(pod="p1", i=0, stateful=False)
        state.cluster_fault_rates(conflict=0.0, error=0.3)
        state.settle(seconds=5.0)
        state.node_deleted(i=0, kill=None, pods_on_it=0, steps=0, when="before")
        state.add_node(i=0)
        state.node_deleted(i=0, kill=None, pods_on_it=1, steps=1, when="before")
        state.every_cloud_address_has_a_record()
        state.teardown()
    finally:
        state.world.close()


def test_a_node_back_before_its_leave_was_done_is_read_afresh_when_it_leaves_again() -> None:
    """Found by a random run: node-0000 deleted (its leave read its pool), registered
    again on its machine before the leave was done, its pool grown in the cloud while the
    answer was lost (throttled after the grow), then deleted again: the second leave
    trusted the first one's read, and 10.64.0.2/.3 were left with nothing naming them. A
    node seen running again makes any later leave read its pool afresh."""
    state = TightPoolChaos()
    try:
        state.populate(up=1, running=0)
        state.settle(seconds=0.0)
        state.delete_node(i=0)
        state.provider_fault(kind=ErrorKind.THROTTLED, times=1, where=("pool_grow", "after"))
        state.step(n=1)
        state.add_node(i=0)
        state.settle(seconds=0.0)
        state.delete_node(i=0)
        state.every_cloud_address_has_a_record()
        state.teardown()
    finally:
        state.world.close()


def test_a_vm_record_released_before_it_had_an_address_is_allocated_when_taken_back() -> None:
    """Found by CI: a VM pod's allocation throttled, its node deleted (the record held
    Releasing with no address) and registered again: the record was taken back as
    Allocated with no address and its route failed for good ("route without an
    address"). It is allocated afresh instead."""
    state = VmChaos()
    try:
        state.populate(up=1, running=0)
        state.add_pod(i=0, pod="p0", stateful=True)
        state.provider_fault(kind=ErrorKind.THROTTLED, times=1, where=("allocate", "before"))
        state.settle(seconds=0.0)
        state.delete_node(i=0)
        state.settle(seconds=0.0)
        state.add_node(i=0)
        state.teardown()
    finally:
        state.world.close()
