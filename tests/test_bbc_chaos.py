"""The chaos machine against the BBC provider on its loopback simulator.

``PODNET_CHAOS_EXAMPLES`` sets the example count (default 200, the kit's CI default; the
tight machine runs half as many). Every hook is a real HTTP call through bce-python-sdk:
measured here, 200 + 100 examples take about 45 s.
"""

from __future__ import annotations

import atexit
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import attrs
import pytest

from podnet.core.cluster.port import NODE_NETWORK, ApiError
from podnet.hookspecs.policy import RateLimit
from podnet.plugins.bbc.demo import provider_for, register_nodes, start_simulator
from podnet.plugins.bbc.provider import BbcProvider, default_policy
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.testing.chaos import EXAMPLES_ENV, chaos_settings, make_chaos_machine
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

NODES = 3
#: examples when PODNET_CHAOS_EXAMPLES is not set
DEFAULT_EXAMPLES = 200

_SIM: BbcSimulator | None = None


def _simulator() -> BbcSimulator:
    """One simulator for the module, emptied for each example."""
    global _SIM
    if _SIM is None:
        _SIM = start_simulator()
        atexit.register(_SIM.stop)
    return _SIM


def _provider(ip_cap: int = 40, cloud_cap: int | None = None, ip_stack: str = "ipv4",
              **policy: Any) -> BbcProvider:
    sim = _simulator()
    sim.reset()
    register_nodes(sim, [World.node_name(i) for i in range(NODES)],
                   ip_cap=cloud_cap if cloud_cap is not None else ip_cap)
    provider = provider_for(sim, ip_cap=ip_cap, ip_stack=ip_stack,
                            policy=attrs.evolve(default_policy(), **policy) if policy else None)
    provider.sim = sim  # type: ignore[attr-defined]
    return provider


def _addresses(plugin: Any) -> Mapping[str, str]:
    sim: BbcSimulator = plugin.sim
    return sim.addresses()


def _fault_rate(plugin: Any, rate: float) -> None:
    sim: BbcSimulator = plugin.sim
    sim.fault_rate = rate


def _forget(plugin: Any, _node: str, addresses: list[str]) -> None:
    sim: BbcSimulator = plugin.sim
    sim.forget(addresses)


@contextmanager
def _history(machine: Any) -> Iterator[Any]:
    """A replayed history of ``machine``: the steps run in the block, then the machine's
    teardown (its convergence check); the world closed whatever happens."""
    state = machine()
    try:
        yield state
        state.teardown()
    finally:
        state.world.close()


def _examples() -> int:
    return int(os.environ.get(EXAMPLES_ENV, str(DEFAULT_EXAMPLES)))


#: one call a second per cloud API, one at once: calls put off to their slots
TIGHT_CLOUD_RATE = RateLimit(rate=1.0, burst=1)

BbcChaos = make_chaos_machine(_provider, _addresses, cloud_fault_rate=_fault_rate,
                              cloud_forget=_forget,
                              nodes=NODES, name="BbcChaos")
TestBbcChaos = BbcChaos.TestCase
TestBbcChaos.settings = chaos_settings(_examples())

#: a small pool, and instances that refuse more addresses (ExceedLimitException) before
#: the cap the provider was told (as a memory limit does): halving, backoff and shrink;
#: a cloud budget of one call a second per API, so the nodes' inventories and grows are
#: put off to their slots (CloudWait) and come back
TightBbcChaos = make_chaos_machine(
    lambda: _provider(ip_cap=12, cloud_cap=9, min_idle=1, max_idle=2, batch_size=2,
                      max_batch_size=4, reuse_cooldown=0.0, cloud_rate=TIGHT_CLOUD_RATE),
    _addresses, cloud_fault_rate=_fault_rate, nodes=NODES, pods=8, name="TightBbcChaos")
TestTightBbcChaos = TightBbcChaos.TestCase
TestTightBbcChaos.settings = chaos_settings(max(1, _examples() // 2))

#: dual stack on the same tight instances: every pool entry is an IPv4/IPv6 pair (two
#: batchAddIp calls per grow; a failed IPv6 call gives the IPv4 halves back), the cloud's
#: IPv6 cap below the provider's cap as the IPv4 one is, and a cloud that forgets IPv4
#: addresses records hold; the machine's leak and double-owner checks count both halves
#: (the simulator's ground truth holds both)
DualBbcChaos = make_chaos_machine(
    lambda: _provider(ip_cap=12, cloud_cap=9, ip_stack="dual", min_idle=1, max_idle=2,
                      batch_size=2, max_batch_size=4, reuse_cooldown=0.0),
    _addresses, cloud_fault_rate=_fault_rate, cloud_forget=_forget, nodes=NODES, pods=8,
    name="DualBbcChaos")
TestDualBbcChaos = DualBbcChaos.TestCase
#: fewer examples by default (two batchAddIp calls per grow); PODNET_CHAOS_EXAMPLES sets
#: the count as for the others
DUAL_EXAMPLES = 40
TestDualBbcChaos.settings = chaos_settings(int(os.environ.get(EXAMPLES_ENV,
                                                              str(DUAL_EXAMPLES))))


@pytest.mark.parametrize(("running", "paused_steps", "real"), [(2, 3, "p1"), (3, 7, "p2")])
def test_a_hand_edit_inside_the_owners_lag_on_a_leaving_node_leaves_the_owner_its_address(
        running: int, paused_steps: int, real: str) -> None:
    """Found by the machine at 400 examples (dual stack): two pods routed, the node's
    record not yet listing them as owners (the catch-up lags a refill period); the node
    deleted; p1's record made invalid and p0's ``status.ip`` edited to p1's address. The
    leaving node's pool is read again: two records name the address and no owner is
    listed, so the first listed (p0, the edited one) got it; p0 was released with its
    node and gave it back, and p1 (invalid, not acted on) named an address the cloud no
    longer had once the node was back. Now the tie-break, with no owner listed, passes
    over a record whose IPv6 the recorded pool paired with another IPv4 (p0's, left
    beside the edited address), whether the real owner's pair was recorded (two pods) or
    not yet (three: the third pod's grow came after the pool's last write). IPv4 alone
    has no such sign; the seal each record got with its address is one (below)."""
    with _history(DualBbcChaos) as state:
        steps: list[Callable[[], None]] = [
            lambda: state.populate(up=1, running=running),
            lambda: state.pause_leader_past_lease(late=0.0, stale_steps=1,
                                                  steps=paused_steps),
            lambda: state.delete_node(i=0),
            lambda: state.make_record_unreadable(pod=real),
            lambda: state.edit_record_ip(a="p0", b=real),
            lambda: state.settle(seconds=0.0),
            lambda: state.add_node(i=0)]
        for step in steps:
            step()
            # the invariants after each step, as the machine checks them (the last one
            # runs the electors' loop: the replay needs it to go the same way)
            state.every_cloud_address_has_a_record()
            state.no_address_owned_twice()
            state.records_point_at_real_addresses()
            state.the_leader_holds_the_lease()


def _checked_steps(state: Any, steps: list[Callable[[], None]]) -> None:
    """Run ``steps``, each followed by the machine's invariants about addresses."""
    for step in steps:
        step()
        state.every_cloud_address_has_a_record()
        state.no_address_owned_twice()
        state.a_hand_edit_takes_no_address_from_its_owner()
        state.records_point_at_real_addresses()
        state.the_leader_holds_the_lease()


def test_an_ipv4_hand_edit_inside_the_owners_lag_then_a_restart_leaves_the_owner_its_address(
) -> None:
    """Three pods routed, their node's record not listing them as owners yet (the
    catch-up lags a refill period), p0's ``status.ip`` edited to p2's address, and a
    restart: the rebuilt pool gave the address to the first listed, p0, and p2 (whose pod
    has it) was re-addressed. Now the seal each record got with its address decides."""
    with _history(BbcChaos) as state:
        _checked_steps(state, [
            lambda: state.populate(up=1, running=3),
            lambda: state.settle(seconds=0.0),
            lambda: state.edit_record_ip(a="p0", b="p2"),
            state.restart,
            lambda: state.settle(seconds=0.0)])


def test_an_ipv4_hand_edit_inside_the_owners_lag_on_a_leaving_node_leaves_the_owner_its_address(
) -> None:
    """The leaving node's history above on IPv4 alone, where no pair tells the records
    apart: two pods routed inside the owners' lag, the node deleted, p1's record made
    invalid and p0's ``status.ip`` edited to p1's address. The leaving node's pool, read
    again, gave the address to the first listed (p0, the edited one), released with the
    node, and p1 named an address the cloud no longer had. Now the seal (read from p1's
    raw status while it does not parse) gives it to p1."""
    with _history(BbcChaos) as state:
        _checked_steps(state, [
            lambda: state.populate(up=1, running=2),
            lambda: state.settle(seconds=0.0),
            lambda: state.delete_node(i=0),
            lambda: state.make_record_unreadable(pod="p1"),
            lambda: state.edit_record_ip(a="p0", b="p1"),
            lambda: state.settle(seconds=0.0),
            lambda: state.add_node(i=0)])


def test_a_node_registered_again_then_deleted_in_its_records_gap_keeps_its_addresses(
) -> None:
    """Found by the machine: node-0000 deleted and registered again before the controller
    saw it; its old record, marked by the garbage collector, was let go and the new one's
    create failed; the Node deleted again with the controller killed at the next
    inventory: no record named the node's addresses, and the restarted controller never
    learnt of them. Now the record of a machine that still runs is not let go: being
    deleted, it keeps recording the pool until the node leaves."""
    with _history(BbcChaos) as state:
        state.populate(up=1, running=1)
        state.settle(seconds=0.0)
        state.delete_node(i=0)
        state.add_node(i=0)
        state.cluster.faults.fail_next("create", NODE_NETWORK,
                                       ApiError("injected server error"), times=1)
        state.settle(seconds=0.0)
        state.node_deleted(i=0, kill="node_inventory", pods_on_it=0, steps=1, when="before")
        state.every_cloud_address_has_a_record()


def test_a_dual_stack_record_readdressed_after_the_cloud_lost_its_ipv4_half_leaks_nothing(
) -> None:
    """Found by the dual-stack machine with a cloud that forgets: the cloud loses a routed
    record's IPv4 half; the record is re-addressed and its lost address leaves the pool,
    which took the pair's IPv6 half (still on the machine) with it: named by nothing, held
    by no pool, never given back. Now the IPv6 half stays in the pool as an invalid half,
    and the next shrink gives it back."""
    with _history(DualBbcChaos) as state:
        state.populate(up=3, running=8)
        state.node_deleted(i=0, kill=None, pods_on_it=0, steps=14, when="before")
        state.pause_leader_past_lease(late=0.0, stale_steps=1, steps=22)
        state.cloud_forgets(count=1, i=1)


def test_a_dual_stack_node_that_leaves_after_a_hand_edit_gave_a_record_anothers_ipv4_leaks_nothing(
) -> None:
    """Found by the dual-stack machine (CI): a record's status.ip edited by hand to
    another record's address on the same node, and the Node deleted before the record was
    re-addressed. The leave's fresh read of the pool made the edited record's IPv6 half a
    suspect (named by a record whose IPv4 another holds); a node that left has no GC to
    look at suspects again, so the half stayed on the machine when the leave was done.
    Now a leaving node's pool holds that half for its record, and it goes back with it."""
    with _history(DualBbcChaos) as state:
        state.populate(up=3, running=8)
        state.pause_leader_past_lease(late=0.0, stale_steps=16, steps=21)
        state.edit_record_ip(a="p3", b="p0")
        state.delete_node(i=0)


def test_a_dual_stack_node_that_leaves_after_the_cloud_lost_ipv4_halves_leaks_nothing(
) -> None:
    """Found by a run of the dual-stack machine with a cloud that forgets: the cloud loses
    the IPv4 halves of two records' pairs on node-0001, and the Node is deleted. The
    leave's fresh read of the pool counts the records' IPv6 halves as theirs (suspects,
    not the pool's); the records then let their addresses go, the IPv4 halves count as
    given back (the cloud has none), and the leave finishes with the IPv6 halves still on
    the machine, named by nothing. Now the pool holds such an IPv6 half for its record,
    and it goes back with the record."""
    with _history(DualBbcChaos) as state:
        state.populate(up=3, running=6)
        state.settle(seconds=0.0)
        state.cloud_forgets(count=2, i=1)
        state.delete_node(i=1)
        state.settle(seconds=1.0)


def test_a_dual_stack_pair_the_cloud_dropped_the_ipv4_of_after_its_record_let_go_leaks_nothing(
) -> None:
    """Found by the dual-stack machine (CI): a pod recreated on its node, a fail-over,
    and the cloud losing the IPv4 halves records held on that node. The old pod's record
    let its pair go (idle in the pool, its IPv4 half already gone from the cloud); the
    GC's look at the cloud then dropped the idle IPv4 half from the pool and its IPv6
    partner with it, still on the machine and named by nothing (no suspect either: the
    pool had known it). Now the partner stays as an invalid half, given back."""
    with _history(DualBbcChaos) as state:
        state.populate(up=3, running=8)
        state.step(n=10)
        state.recreate_pod(i=0, pod="p0", same_node=True)
        state.pause_leader_past_lease(late=0.0, stale_steps=23, steps=3)
        state.cloud_forgets(count=3, i=0)


def test_a_dual_stack_address_the_cloud_handed_out_again_before_its_record_let_go_leaks_nothing(
) -> None:
    """Found with the one above: the cloud lost a record's IPv4 half and a grow on that
    node got the same address back (with a new IPv6 partner) before the record was
    re-addressed. The pool, holding the address for the record, dropped the grow's pair
    on the floor; the record then let the address go as lost, and the cloud's address and
    its new partner were on the machine with no pool holding them. Now the new partner is
    an invalid half and the address is the pool's again once the record lets it go."""
    with _history(DualBbcChaos) as state:
        state.populate(up=3, running=8)
        state.pause_leader_past_lease(late=0.0, stale_steps=16, steps=21)
        state.advance_clock(seconds=700.0)
        state.step(n=10)
        state.recreate_pod(i=0, pod="p0", same_node=True)
        state.pause_leader_past_lease(late=0.0, stale_steps=23, steps=3)
        state.cloud_forgets(count=3, i=0)
