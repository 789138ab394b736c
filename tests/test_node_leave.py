"""A node that left the cluster gets back what podnet made for it before its NodeNetwork
goes (core/reconcile/nodeleave.py): the writes that costs, an address a record still
holds, cloud errors as waits, and a record deleted while its node runs. The ECS cases
(an ENI or the whole instance gone behind podnet's back) run on its simulator."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from podnet.app.demo import node_obj
from podnet.core.cluster.port import NODE, NODE_NETWORK, NotFound
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.models import FINALIZER, Phase
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.plugins.ecs.demo import KIT_POLICY, EcsWorld, instance_id_for
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import FaultInjector, HookRecorder, World

pytest_plugins = ["podnet.testing"]

#: small interfaces: a handful of pods make a second one
POLICY = PoolPolicy(min_idle=1, max_idle=2, batch_size=2, max_batch_size=4,
                    reuse_cooldown=0.0)


@pytest.fixture
def provider_plugin() -> ReferenceProvider:
    return ReferenceProvider(ReferenceCloud(max_interfaces=3, ips_per_interface=4),
                             policy=POLICY)


def node_network_writes(world: World) -> Counter[str]:
    return Counter({k: v for k, v in world.engine.stats.writes.items()
                    if k.endswith(".nodenetworks")})


def on_node(world: World, node: str) -> list[str]:
    return sorted(ip for ip, n in world.cloud_addresses().items() if n == node)


def has_record(world: World, node: str) -> bool:
    try:
        with world.quiet():
            world.cluster.get(NODE_NETWORK, node)
    except NotFound:
        return False
    return True


@pytest.mark.parametrize(("pods", "interfaces", "writes"), [(1, 1, 1), (6, 2, 2)])
def test_writes_a_leaving_node_costs(world: World, provider_plugin: ReferenceProvider,
                                     pods: int, interfaces: int, writes: int) -> None:
    """The finalizer's removal; with an interface to delete, one status write first (the
    interfaces recorded as Disposing). The record's delete is the Node's garbage
    collection's, not podnet's."""
    node = world.add_node(0)
    for i in range(pods):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    assert len(provider_plugin.cloud.describe(node, None)) == interfaces
    before = node_network_writes(world)
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    spent = node_network_writes(world) - before
    assert sum(spent.values()) == writes, dict(spent)
    assert spent["update.nodenetworks"] == 1
    assert on_node(world, node) == []
    assert provider_plugin.cloud.describe(node, None) == {"eth0": []}
    assert not has_record(world, node)
    world.assert_converged()


def test_an_address_a_held_record_names_waits_for_it_and_goes_back_once(
        world: World, hook_calls: HookRecorder) -> None:
    """A StatefulSet pod's record keeps its address for the sticky hold after its node
    left: the node's record keeps its finalizer meanwhile, the address stays, and once
    the hold is over it is given back once, by the pool the record returned it to."""
    node = world.add_node(0)
    world.add_pod("web-0", 0, owner=("StatefulSet", "web"))
    world.add_pod("p1", 0)
    world.settle(advance=5)
    held = world.record_of("web-0")
    assert held is not None and held.status.ip
    address = held.status.ip
    hook_calls.clear()
    world.delete_node(0)
    world.settle(advance=world.policy().min_ip_lifetime + 5)
    [record] = [pn for pn in world.records() if pn.spec.pod_name == "web-0"]
    assert record.status.phase is Phase.RELEASING
    assert on_node(world, node) == [address], "only the held address is left"
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert FINALIZER in nn["metadata"]["finalizers"]
    assert nn["metadata"].get("deletionTimestamp")
    world.settle(advance=world.policy().sticky_hold + world.gc_grace())
    assert on_node(world, node) == []
    assert not has_record(world, node)
    given = Counter(e.address for c in hook_calls.of("pool_shrink")
                    for e in c.kwargs["entries"])
    assert given[address] == 1, given
    assert all(n == 1 for n in given.values()), given
    world.assert_converged()


def test_cloud_errors_while_leaving_are_waits(world: World, fault_injector: FaultInjector,
                                             hook_calls: HookRecorder) -> None:
    """Throttled and failing calls while the node's share is given back: no failed
    transition, no failed reconcile; the share is given back once they stop."""
    node = world.add_node(0)
    for i in range(6):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    errors = Counter(world.engine.stats.reconcile_errors)
    hook_calls.clear()
    fault_injector.fail("node_inventory", ProviderError(ErrorKind.THROTTLED, "slow down"),
                        times=2)
    fault_injector.fail("pool_shrink", ProviderError(ErrorKind.THROTTLED, "slow down"),
                        times=2)
    fault_injector.fail("interface_dispose", ProviderError(ErrorKind.TRANSIENT, "timeout"),
                        times=2)
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    assert len(fault_injector.fired) == 6
    assert on_node(world, node) == [] and not has_record(world, node)
    assert hook_calls.transitions(ok=False) == []
    assert Counter(world.engine.stats.reconcile_errors)["node"] == errors["node"]
    world.assert_converged()


def test_a_lost_shrink_answer_while_leaving_gives_nothing_back_twice(
        world: World, fault_injector: FaultInjector, hook_calls: HookRecorder) -> None:
    """The cloud gives a batch back and the answer is lost while the node's pods release
    theirs: the pool is read again, and no address is asked back a second time."""
    node = world.add_node(0)
    for i in range(6):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    had = set(on_node(world, node))
    hook_calls.clear()
    fault_injector.fail("pool_shrink", ProviderError(ErrorKind.TRANSIENT, "timed out"),
                        when="after")
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    assert fault_injector.fired
    asked = Counter(e.address for c in hook_calls.of("pool_shrink")
                    for e in c.kwargs["entries"])
    assert set(asked) == had
    assert all(n == 1 for n in asked.values()), asked
    assert on_node(world, node) == [] and not has_record(world, node)
    world.assert_converged()


def test_a_record_deleted_while_its_machine_runs_keeps_the_pool_until_the_node_leaves(
        world: World, provider_plugin: ReferenceProvider) -> None:
    """``kubectl delete nn`` (or the old Node's garbage collection after the machine
    joined again): the node's machine is still there and in use, and the record is the
    only one that can name its pool (a new one cannot be made under its name while it
    exists). It stays, being deleted, and goes on recording the pool; it goes once the
    node leaves and everything is given back."""
    node = world.add_node(0)
    for i in range(3):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    cloud = on_node(world, node)
    with world.quiet():
        old = world.cluster.get(NODE_NETWORK, node)
        world.cluster.delete(NODE_NETWORK, node)
    world.add_pod("p3", 0)
    world.settle(advance=5)
    with world.quiet():
        kept = world.cluster.get(NODE_NETWORK, node)
    assert kept["metadata"]["uid"] == old["metadata"]["uid"]
    assert kept["metadata"]["deletionTimestamp"]
    assert FINALIZER in kept["metadata"]["finalizers"]
    assert set(cloud) <= set(on_node(world, node))
    recorded = {ip["address"] for itf in kept["status"]["interfaces"]
                for ip in itf.get("ips") or ()}
    p3 = world.record_of("p3")
    assert p3 is not None and p3.status.ip in recorded
    world.assert_converged()
    for i in range(4):
        world.delete_pod(f"p{i}")
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    assert on_node(world, node) == [] and not has_record(world, node)
    world.assert_converged()


def test_another_machine_under_the_name_first_gets_the_old_ones_share_back(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    """The Node deleted and another machine joined under its name (another providerID)
    before the old record went: the old machine's addresses go back first, from a pool
    of their own; then the new record serves the new machine."""
    node = world.add_node(0)
    for i in range(4):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    old = set(on_node(world, node))
    world.delete_node(0)
    for i in range(4):
        world.delete_pod(f"p{i}")
    replacement = node_obj(0)
    replacement["spec"]["providerID"] = "demo://another-machine"
    with world.quiet():
        world.cluster.create(NODE, replacement)
    world.add_pod("q0", 0)
    with caplog.at_level("INFO", logger="podnet.nodeleave"):
        world.settle(advance=world.gc_grace())
    assert "what podnet made for its old machine is given back" in caplog.text
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert nn["spec"]["instanceId"] == "demo://another-machine"
    record = world.record_of("q0")
    assert record is not None and record.status.phase is Phase.ROUTED
    assert old, "the old machine had addresses"
    world.assert_converged()


def test_another_machine_under_a_record_not_yet_deleted_never_grows_under_the_old_one(
        world: World) -> None:
    """The Node deleted and another machine joined under its name before the garbage
    collector marked the old record (here: never, the Node deleted with ``Orphan``): the
    record still names the old machine, so nothing is made for the new one under it (a
    record naming one instance while the pool it lists is another's). The old machine's
    share goes back first; the record is then replaced by one naming the new machine."""
    node = world.add_node(0)
    for i in range(3):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    for i in range(3):
        world.delete_pod(f"p{i}")
    with world.quiet():
        world.cluster.delete(NODE, node, propagation_policy="Orphan")
        replacement = node_obj(0)
        replacement["spec"]["providerID"] = "demo://another-machine"
        world.cluster.create(NODE, replacement)
    world.add_pod("q0", 0)
    world.settle(advance=world.gc_grace())
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert nn["spec"]["instanceId"] == "demo://another-machine"
    record = world.record_of("q0")
    assert record is not None and record.status.phase is Phase.ROUTED
    recorded = {ip["address"] for itf in nn["status"]["interfaces"]
                for ip in itf.get("ips") or ()}
    assert record.status.ip in recorded
    world.assert_converged()


def test_a_node_registered_again_without_its_provider_id_yet_is_waited_for(
        world: World) -> None:
    """A Node registered again before the cloud controller set its spec.providerID: the
    record's pool may well be on it, so nothing of it is given back (its pods' addresses
    with it); once the Node names its machine, the pool serves it again."""
    node = world.add_node(0)
    for i in range(3):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    cloud = set(on_node(world, node))
    with world.quiet():
        world.cluster.delete(NODE, node, propagation_policy="Orphan")
        bare = node_obj(0)
        machine = bare["spec"].pop("providerID")
        world.cluster.create(NODE, bare)
    world.add_pod("q0", 0)
    world.settle(advance=30)
    assert set(on_node(world, node)) >= cloud
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert nn["spec"]["instanceId"] == machine and not nn["metadata"].get("deletionTimestamp")
    with world.quiet():
        world.cluster.patch(NODE, node, {"spec": {"providerID": machine}})
    world.settle(advance=5)
    assert set(on_node(world, node)) >= cloud
    record = world.record_of("q0")
    assert record is not None and record.status.phase is Phase.ROUTED
    world.assert_converged()


def test_a_record_from_before_the_finalizer_deleted_while_its_node_runs_is_replaced(
        world: World, caplog: pytest.LogCaptureFixture) -> None:
    """A record without podnet's finalizer, held by another one while it is deleted: it
    can take no new finalizer and may go at any moment, so nothing waits on it; once it
    is gone a new record (with the finalizer) names the pool."""
    node = world.add_node(0)
    world.add_pod("p0", 0)
    world.settle(advance=5)
    with world.quiet():
        old = world.cluster.patch(NODE_NETWORK, node,
                                  {"metadata": {"finalizers": ["example.com/hold"]}})
        world.cluster.delete(NODE_NETWORK, node)
    world.add_pod("p1", 0)
    with caplog.at_level("DEBUG", logger="podnet.engine"):
        world.settle(advance=5)
    # a wait, not a failed pass (the record cannot take the finalizer)
    assert f"node {node} failed" not in caplog.text
    with world.quiet():
        world.cluster.patch(NODE_NETWORK, node, {"metadata": {"finalizers": []}})
    world.settle(advance=5)
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert nn["metadata"]["finalizers"] == [FINALIZER]
    assert nn["metadata"]["uid"] != old["metadata"]["uid"]
    world.assert_converged()


def test_a_record_from_before_the_finalizer_gets_it(world: World) -> None:
    node = world.add_node(0)
    world.add_pod("p0", 0)
    world.settle(advance=5)
    with world.quiet():
        world.cluster.patch(NODE_NETWORK, node, {"metadata": {"finalizers": []}})
    before = node_network_writes(world)
    world.restart()
    world.settle(advance=5)
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    assert nn["metadata"]["finalizers"] == [FINALIZER]
    assert (node_network_writes(world) - before)["update.nodenetworks"] == 1
    world.assert_converged()


def test_a_node_that_comes_back_half_way_keeps_its_machine(world: World) -> None:
    """Deleted and joined again (the same machine) before its share was given back: the
    old record lets go, the new one takes the pool over, and nothing is leaked."""
    node = world.add_node(0)
    for i in range(6):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    world.delete_node(0)
    world.step(3)
    world.add_node(0)
    world.add_pod("q0", 0)
    world.settle(advance=world.gc_grace())
    assert has_record(world, node)
    world.assert_converged()


# --- ECS: what the cloud lost meanwhile counts as given back ------------------------------


@pytest.fixture
def ecs() -> Iterator[EcsWorld]:
    world = EcsWorld(nodes=2, policy=attrs.evolve(KIT_POLICY, aggregation_window=0.0))
    yield world
    world.close()


def ecs_world(ecs: EcsWorld, cluster: Any, fake_clock: Any) -> World:
    from podnet.testing.harness import EngineFactory, build_plugin_manager, provider_name_of

    pm = build_plugin_manager(ecs.plugin)
    return World(cluster, fake_clock, EngineFactory(cluster, pm, fake_clock,
                                                    provider=provider_name_of(pm)),
                 ecs.addresses)


def podnet_enis(ecs: EcsWorld, instance: str) -> list[str]:
    return sorted(e.id for e in ecs.sim.enis_of(instance) if e.kind == "Secondary")


def two_enis(ecs: EcsWorld, world: World) -> str:
    world.add_node(0)
    world.settle()
    pool = world.engine.pools.find(world.provider, World.node_name(0))
    assert pool is not None
    for i in range(pool.ips_per_interface + 1):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    instance = instance_id_for(World.node_name(0))
    assert len(podnet_enis(ecs, instance)) == 2
    return instance


def test_an_eni_deleted_behind_podnets_back_counts_as_deleted(
        ecs: EcsWorld, cluster: Any, fake_clock: Any) -> None:
    world = ecs_world(ecs, cluster, fake_clock)
    try:
        instance = two_enis(ecs, world)
        victim = podnet_enis(ecs, instance)[0]
        world.delete_node(0)
        world.step(2)
        with ecs.sim.lock:  # someone with the console deletes it, addresses and all
            eni = ecs.sim.enis.pop(victim)
            ecs.sim.vswitches[eni.vswitch].used.difference_update(eni.secondary)
        world.settle(advance=world.gc_grace())
        assert podnet_enis(ecs, instance) == []
        assert not has_record(world, World.node_name(0))
        world.assert_converged()
    finally:
        world.close()


def test_an_instance_released_with_the_node_leaves_no_eni(
        ecs: EcsWorld, cluster: Any, fake_clock: Any) -> None:
    """The instance went with its Node: ECS detaches its secondary ENIs and keeps them
    (Available); the inventory answers that there is no such instance, and the ENIs the
    record lists are deleted."""
    world = ecs_world(ecs, cluster, fake_clock)
    try:
        instance = two_enis(ecs, world)
        with ecs.sim.lock:
            for eni in ecs.sim.enis.values():
                if eni.instance_id == instance and eni.kind == "Secondary":
                    eni.instance_id, eni.status = None, "Available"
            primary = ecs.sim.instances.pop(instance).primary_eni
            ecs.sim.enis.pop(primary)
        world.delete_node(0)
        world.settle(advance=world.gc_grace())
        assert podnet_enis(ecs, instance) == []
        assert not has_record(world, World.node_name(0))
        world.assert_converged()
    finally:
        world.close()


def test_what_no_record_names_is_not_given_back_when_the_node_leaves(
        world: World, provider_plugin: ReferenceProvider) -> None:
    """The record forced away (its finalizer taken off by hand) before the node left:
    the addresses on the machine are no longer podnet's to give back on the word of its
    in-memory pool (it counts every address the cloud shows on the machine, planted by
    anyone since). They stay, for the audit to report; nothing of podnet's is left."""
    node = world.add_node(0)
    world.add_pod("p0", 0)
    world.settle(advance=5)
    world.delete_pod("p0")
    world.settle(advance=5)
    held = on_node(world, node)
    assert held
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
        world.cluster.update(NODE_NETWORK, {**nn, "metadata": {**nn["metadata"],
                                                               "finalizers": []}})
        world.cluster.delete(NODE_NETWORK, node)
    assert world.engine.nodepools.pools.find("reference", node) is not None
    world.delete_node(0)
    world.settle(advance=world.gc_grace())
    assert on_node(world, node) == held
    assert world.engine.nodepools.pools.find("reference", node) is None


class GivesNothingBack(ReferenceProvider):
    """The reference provider whose first ``refusals`` shrinks give nothing back (a cloud
    that answers without deleting, a provider that cannot give these addresses back)."""

    refusals = 0

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: Any, entries: Any) -> Any:
        if self.refusals:
            self.refusals -= 1
            return []
        return super().podnet_pool_shrink(provider, node, entries)


class TestAShrinkThatGivesNothingBack:
    @pytest.fixture
    def provider_plugin(self) -> ReferenceProvider:
        return GivesNothingBack(ReferenceCloud(max_interfaces=3, ips_per_interface=4),
                                policy=POLICY)

    def test_a_leaving_node_tries_again_later_not_at_once(
            self, world: World, provider_plugin: GivesNothingBack,
            hook_calls: HookRecorder) -> None:
        """A leaving node's shrink that gives nothing back is tried again a refill
        period later: before, the pass came back at once and chose the same addresses
        again, for ever (a hot loop: the settle below never ended)."""
        node = world.add_node(0)
        world.add_pod("p0", 0)
        world.settle(advance=5)
        world.delete_pod("p0")
        world.settle(advance=5)
        provider_plugin.refusals = 3
        hook_calls.clear()
        world.delete_node(0)
        world.settle()  # the clock does not move: one call, then a wait
        assert len(hook_calls.of("pool_shrink")) == 1
        world.settle(advance=world.gc_grace())
        assert provider_plugin.refusals == 0
        assert on_node(world, node) == [] and not has_record(world, node)
        world.assert_converged()
