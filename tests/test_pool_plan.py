"""A node pool's own decisions: what its next grow or shrink call is (or why there is
none yet), what a failed grow leads to, which interfaces recover or go, which suspects
GC deletes. The node pool reconciler only carries them out."""

from __future__ import annotations

from datetime import UTC, datetime

import attrs
import pytest

from podnet.core.errors import ErrorKind
from podnet.core.models import InterfaceState, InterfaceStatus
from podnet.core.policy import Backoff, PoolPolicy
from podnet.core.pool import SHRINKING, DeferReason, Deferred, GrowPlan, NodePool, ShrinkPlan
from podnet.hookspecs.types import CloudInterface, Inventory, PoolEntry

#: no aggregation window, batch 1: a plan asks for exactly what is short
EXACT = PoolPolicy(min_idle=0, max_idle=10, batch_size=1, max_batch_size=10)


def ips(prefix: str, n: int) -> tuple[str, ...]:
    return tuple(f"{prefix}.{i}" for i in range(1, n + 1))


def pool_of(*interfaces: CloudInterface, max_interfaces: int = 2, ips_per_interface: int = 10,
            suspects: tuple[str, ...] = (), now: float = 0.0) -> NodePool:
    """A synced pool of ``interfaces``, every address podnet's and idle; ``suspects``:
    addresses the cloud has on the first interface that podnet never held."""
    pool = NodePool("n", "p")
    pooled = {ip for itf in interfaces for ip in itf.ips}
    if suspects:
        first = interfaces[0]
        interfaces = (CloudInterface(id=first.id, subnet=first.subnet,
                                     ips=first.ips + suspects), *interfaces[1:])
    pool.rebuild(Inventory(interfaces=interfaces, max_interfaces=max_interfaces,
                           ips_per_interface=ips_per_interface),
                 owners={}, pooled=pooled, now=now)
    return pool


def grow(pool: NodePool, policy: PoolPolicy = EXACT, now: float = 0.0,
         manages_interfaces: bool = False) -> GrowPlan:
    plan = pool.plan_grow(policy, now, manages_interfaces=manages_interfaces)
    assert isinstance(plan, GrowPlan), plan
    return plan


def deferred(pool: NodePool, policy: PoolPolicy = EXACT, now: float = 0.0,
             manages_interfaces: bool = False) -> Deferred:
    plan = pool.plan_grow(policy, now, manages_interfaces=manages_interfaces)
    assert isinstance(plan, Deferred), plan
    return plan


def own(pool: NodePool, *addresses: str) -> None:
    for ip in addresses:
        assert pool.claim(ip, f"ns/{ip}", None, None) == (None, False)


# --- grow: demand ---------------------------------------------------------------------

def test_nothing_short_defers_and_hands_back_the_waiters_to_wake() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 2)))
    pool.wait_for_address("ns/a", None, 0.0)
    plan = deferred(pool, attrs.evolve(EXACT, min_idle=1))
    assert plan.reason is DeferReason.NOTHING_TO_DO and plan.retry_after is None
    assert plan.waiting == {"ns/a": None}
    # one waiter more than the idle addresses spare: one is short
    pool.wait_for_address("ns/b", None, 0.0)
    assert grow(pool, attrs.evolve(EXACT, min_idle=1)).need == 1


def test_cooling_addresses_count_toward_min_idle_only_while_nobody_waits() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)))
    for ip in ips("10.0.0", 2):
        pool.hold_off(ip, until=10.0)
    policy = attrs.evolve(EXACT, min_idle=4)
    assert deferred(pool, policy).reason is DeferReason.NOTHING_TO_DO
    pool.wait_for_address("ns/a", None, 0.0)
    plan = grow(pool, policy)
    assert (plan.need, plan.count) == (3, 3)  # 1 waiter + 4 min_idle - 2 ready


def test_a_waiter_for_a_subnet_is_served_only_by_an_idle_address_in_it() -> None:
    pool = pool_of(CloudInterface(id="eth0", subnet="a", ips=ips("10.0.0", 2)))
    pool.wait_for_address("ns/a", "a", 0.0)
    assert deferred(pool).reason is DeferReason.NOTHING_TO_DO
    pool.wait_for_address("ns/b", "b", 0.0)
    pool.wait_for_address("ns/c", "c", 0.0)
    pool.wait_for_address("ns/d", "c", 0.0)
    plan = grow(pool)
    # the idle addresses in "a" serve none of them; the subnet shortest of addresses first
    assert (plan.need, plan.subnet) == (3, "c")


def test_at_capacity_it_says_so_and_looks_again_a_refill_period_later() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)), max_interfaces=1,
                   ips_per_interface=4)
    own(pool, *ips("10.0.0", 4))
    pool.wait_for_address("ns/a", None, 0.0)
    plan = deferred(pool)
    assert plan.reason is DeferReason.AT_CAPACITY
    assert plan.retry_after == EXACT.refill_period
    assert plan.problem == "node n is at its capacity of 4 addresses"


def test_at_capacity_short_only_of_min_idle_it_says_no_problem() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)), max_interfaces=1,
                   ips_per_interface=4)
    own(pool, *ips("10.0.0", 2))
    plan = deferred(pool, attrs.evolve(EXACT, min_idle=4))
    # two idle addresses still serve: below min_idle is no problem while no pod waits
    assert plan.reason is DeferReason.AT_CAPACITY and plan.problem is None
    # every interface slot taken, none with room (a provider managing interfaces)
    slots = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)),
                    CloudInterface(id="eth1", ips=ips("10.0.1", 1)), ips_per_interface=4)
    own(slots, *ips("10.0.0", 3))
    slots.interfaces["eth1"].state = InterfaceState.INHIBITED
    plan = deferred(slots, attrs.evolve(EXACT, min_idle=3), manages_interfaces=True)
    assert plan.reason is DeferReason.AT_CAPACITY and plan.problem is None


def test_a_plan_that_needs_no_grow_ends_a_limit_said_and_a_failed_calls_problem() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 1)), max_interfaces=1,
                   ips_per_interface=1)
    pool.cannot_grow("node n is at its capacity of 1 addresses")
    pool.cannot_grow(None)
    assert pool.last_error is None
    failed = GrowPlan(count=1, need=1, subnet=None, interface=None, new_interface=False,
                      waiting={})
    pool.grow_failed(failed, ErrorKind.TRANSIENT, "internal error", EXACT, 0.0)
    assert pool.last_error == "internal error"
    pool.cannot_grow(None)  # nothing needs a grow any more: nothing to say
    assert pool.last_error is None
    assert pool.grow_failures == 1  # the backoff stays, should a grow be needed again


# --- grow: the aggregation window and batches ------------------------------------------

def test_the_aggregation_window_gathers_demand_until_it_ends_or_fills_a_call() -> None:
    policy = attrs.evolve(EXACT, aggregation_window=0.3, max_batch_size=2)
    pool = pool_of(CloudInterface(id="eth0", ips=()))
    pool.wait_for_address("ns/a", None, 1.0)
    plan = deferred(pool, policy, now=1.1)
    assert plan.reason is DeferReason.WINDOW
    assert plan.retry_after == pytest.approx(0.2)
    assert grow(pool, policy, now=1.3).count == 1  # the window is over
    pool.wait_for_address("ns/b", None, 1.2)
    assert grow(pool, policy, now=1.2).count == 2  # a full call's worth: no need to wait


def test_the_window_of_a_new_interface_is_what_it_holds() -> None:
    policy = attrs.evolve(EXACT, aggregation_window=1.0, max_batch_size=2)
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 3)), max_interfaces=2,
                   ips_per_interface=3)
    own(pool, *ips("10.0.0", 3))
    for key in ("ns/a", "ns/b"):
        pool.wait_for_address(key, None, 0.0)
    # two waiters fill an add call, not a new interface of 3: still gathering
    assert deferred(pool, policy, manages_interfaces=True).reason is DeferReason.WINDOW
    pool.wait_for_address("ns/c", None, 0.0)
    plan = grow(pool, policy, manages_interfaces=True)
    assert plan.new_interface and plan.count == 3


def test_a_call_asks_for_a_batch_at_least_and_a_max_batch_at_most() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=()), ips_per_interface=20)
    policy = PoolPolicy(min_idle=1, max_idle=20, batch_size=4, max_batch_size=10)
    assert grow(pool, policy).count == 4
    assert grow(pool, attrs.evolve(policy, min_idle=15)).count == 10


def test_a_call_asks_for_no_more_than_the_node_has_room_for() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 9)), max_interfaces=1,
                   ips_per_interface=10)
    own(pool, *ips("10.0.0", 9))
    plan = grow(pool, PoolPolicy(min_idle=4, max_idle=10, batch_size=4, max_batch_size=10))
    assert plan.count == 1


def test_after_quota_errors_the_halved_batch_caps_every_call() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=()), ips_per_interface=20)
    policy = PoolPolicy(min_idle=3, max_idle=20, batch_size=4, max_batch_size=10)
    plan = grow(pool, policy)
    assert plan.count == 4
    pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "quota", policy, 0.0)
    assert grow(pool, policy).count == 2  # not 3: the demand would have it
    pool.grew([], 0.0)
    assert grow(pool, policy).count == 4  # a success starts over


# --- grow: which interface ------------------------------------------------------------

def test_the_ready_pooled_interface_with_the_fewest_addresses_is_grown() -> None:
    pool = pool_of(
        CloudInterface(id="eth0", ips=ips("10.0.0", 3)),
        CloudInterface(id="eth1", ips=ips("10.0.1", 2)),
        CloudInterface(id="eth2", ips=ips("10.0.2", 1)),
        CloudInterface(id="trunk", trunk=True),
        CloudInterface(id="primary", pooled=False),
        max_interfaces=4,
    )
    own(pool, *ips("10.0.0", 3), *ips("10.0.1", 2), *ips("10.0.2", 1))
    pool.wait_for_address("ns/a", None, 0.0)
    pool.interfaces["eth2"].state = InterfaceState.INHIBITED
    plan = grow(pool, manages_interfaces=True)
    assert plan.interface is pool.interfaces["eth1"] and not plan.new_interface


def test_of_interfaces_with_as_many_addresses_the_first_is_grown() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 1)),
                   CloudInterface(id="eth1", ips=ips("10.0.1", 1)))
    own(pool, "10.0.0.1", "10.0.1.1")
    pool.wait_for_address("ns/a", None, 0.0)
    assert grow(pool, manages_interfaces=True).interface is pool.interfaces["eth0"]


def test_a_waiter_for_a_subnet_grows_an_interface_in_it() -> None:
    pool = pool_of(CloudInterface(id="eth0", subnet="a", ips=()),
                   CloudInterface(id="eth1", subnet="b", ips=ips("10.0.1", 2)))
    own(pool, *ips("10.0.1", 2))
    pool.wait_for_address("ns/a", "b", 0.0)
    plan = grow(pool, manages_interfaces=True)
    assert plan.interface is pool.interfaces["eth1"] and plan.subnet == "b"


def test_a_call_adds_no_more_than_the_interface_has_room_for() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 3)), max_interfaces=2,
                   ips_per_interface=4)
    own(pool, *ips("10.0.0", 3))
    pool.wait_for_address("ns/a", None, 0.0)
    plan = grow(pool, PoolPolicy(min_idle=3, max_idle=4, batch_size=4, max_batch_size=10),
                manages_interfaces=True)
    assert plan.interface is pool.interfaces["eth0"] and plan.count == 1


def test_a_new_interface_when_none_has_room_with_what_it_holds_at_most() -> None:
    # the unpooled interface takes no slot: one is left of 2
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)),
                   CloudInterface(id="primary", pooled=False), max_interfaces=2,
                   ips_per_interface=8)
    own(pool, *ips("10.0.0", 4))
    pool.interfaces["eth0"].state = InterfaceState.INHIBITED
    plan = grow(pool, PoolPolicy(min_idle=10, max_idle=12, batch_size=2, max_batch_size=10),
                manages_interfaces=True)
    assert plan.new_interface and plan.interface is None
    assert (plan.count, plan.need, plan.no_interface) == (8, 10, None)


def test_a_grow_due_brings_the_addresses_of_the_pods_still_to_ask() -> None:
    # a node read early: 3 of its pods wait, 12 more have yet to ask
    pool = pool_of(CloudInterface(id="primary", pooled=False), max_interfaces=2,
                   ips_per_interface=20)
    for key in ("ns/a", "ns/b", "ns/c"):
        pool.wait_for_address(key, None, 0.0)
    policy = PoolPolicy(min_idle=0, max_idle=5, batch_size=10, max_batch_size=10)
    plan = pool.plan_grow(policy, 0.0, manages_interfaces=True, coming=12)
    assert isinstance(plan, GrowPlan) and plan.new_interface
    # one interface made with all 15 (not 10, topped up later), still what it holds at most
    assert (plan.count, plan.need) == (15, 3)
    plan = pool.plan_grow(policy, 0.0, manages_interfaces=True, coming=40)
    assert isinstance(plan, GrowPlan) and plan.count == 20


def test_pods_still_to_ask_never_start_a_grow_alone() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 2)), ips_per_interface=20)
    plan = pool.plan_grow(EXACT, 0.0, manages_interfaces=True, coming=12)
    assert isinstance(plan, Deferred) and plan.reason is DeferReason.NOTHING_TO_DO


def test_with_every_interface_slot_taken_the_plan_says_why_none_is_made() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)),
                   CloudInterface(id="eth1", ips=ips("10.0.1", 1)),
                   CloudInterface(id="primary", pooled=False), ips_per_interface=4)
    own(pool, *ips("10.0.0", 4), *ips("10.0.1", 1))
    pool.interfaces["eth1"].state = InterfaceState.INHIBITED
    pool.inhibited(pool.interfaces["eth1"], 60.0, "quota")
    pool.wait_for_address("ns/a", None, 0.0)
    plan = grow(pool, manages_interfaces=True)
    assert plan.new_interface and plan.no_interface == (
        "node n has all 2 interfaces in use and none can take more addresses "
        "(eth1 inhibited: quota)")


def test_a_provider_that_manages_no_interfaces_chooses_where_addresses_go() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 4)), max_interfaces=2,
                   ips_per_interface=4)
    own(pool, *ips("10.0.0", 4))
    pool.wait_for_address("ns/a", None, 0.0)
    plan = grow(pool)
    assert plan.interface is None and not plan.new_interface and plan.count == 1


# --- grow: outcomes -------------------------------------------------------------------

QUOTA = PoolPolicy(min_idle=1, max_idle=10, batch_size=4, max_batch_size=10,
                   inhibit_quota=60.0, inhibit_exhausted=600.0,
                   grow_backoff=Backoff(base=2.0, factor=2.0, cap=60.0))


def failing(policy: PoolPolicy = QUOTA) -> tuple[NodePool, GrowPlan]:
    pool = pool_of(CloudInterface(id="eth0", ips=()))
    return pool, grow(pool, policy, manages_interfaces=True)


def test_throttled_it_records_why_and_changes_nothing_else() -> None:
    pool, plan = failing()
    retry = pool.grow_failed(plan, ErrorKind.THROTTLED, "throttled", QUOTA, 5.0)
    assert retry.after is None and retry.inhibit is None and not retry.backed_off
    assert pool.last_error == "throttled" and pool.synced
    assert (pool.batch, pool.grow_failures, pool.grow_blocked_until) == (0, 0, 0.0)


def test_quota_halves_the_batch_down_to_one_then_backs_off() -> None:
    pool, plan = failing()
    itf = pool.interfaces["eth0"]
    first = pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "quota", QUOTA, 5.0)
    assert (first.after, first.inhibit, first.inhibit_for) == (0.0, itf, 60.0)
    assert pool.batch == 2 and not first.backed_off
    assert pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "quota", QUOTA, 5.0).after == 0.0
    assert pool.batch == 1
    third = pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "quota", QUOTA, 5.0)
    assert third.backed_off and third.after == 2.0
    assert (pool.grow_failures, pool.grow_blocked_until) == (1, 7.0)
    assert pool.synced  # the cloud said no: nothing landed


def test_backoff_blocks_growing_until_it_ends() -> None:
    pool, plan = failing(attrs.evolve(QUOTA, halve_batch_on_quota=False))
    retry = pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "quota",
                             attrs.evolve(QUOTA, halve_batch_on_quota=False), 5.0)
    assert retry.backed_off and pool.batch == 1  # no halving: backed off at once
    wait = deferred(pool, QUOTA, now=6.0)
    assert wait.reason is DeferReason.BACKOFF and wait.retry_after == 1.0
    assert grow(pool, QUOTA, now=7.0).count == 1


def test_an_exhausted_subnet_inhibits_its_interface_for_longer() -> None:
    pool, plan = failing()
    retry = pool.grow_failed(plan, ErrorKind.SUBNET_EXHAUSTED, "none left", QUOTA, 0.0)
    assert retry.inhibit is pool.interfaces["eth0"] and retry.inhibit_for == 600.0


def test_a_quota_error_while_making_an_interface_inhibits_none() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 1)), ips_per_interface=1)
    own(pool, "10.0.0.1")
    plan = grow(pool, QUOTA, manages_interfaces=True)
    assert plan.new_interface
    assert pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "q", QUOTA, 0.0).inhibit is None


def test_an_interface_no_longer_ready_is_not_inhibited_again() -> None:
    pool, plan = failing()
    pool.interfaces["eth0"].state = InterfaceState.INHIBITED
    assert pool.grow_failed(plan, ErrorKind.QUOTA_EXCEEDED, "q", QUOTA, 0.0).inhibit is None


def test_an_unknown_outcome_reads_the_inventory_again_and_backs_off() -> None:
    pool, plan = failing()
    for n, delay in enumerate((2.0, 4.0, 8.0), start=1):
        retry = pool.grow_failed(plan, ErrorKind.TRANSIENT, "lost", QUOTA, 10.0)
        assert retry.backed_off and retry.after == delay and retry.inhibit is None
        assert pool.grow_failures == n
    assert not pool.synced and pool.batch == 0 and pool.last_error == "lost"


def test_a_capped_backoff_shares_its_cap_among_the_tries_of_each_subnet() -> None:
    policy = attrs.evolve(QUOTA, backoff_cap_per_try=True)
    pool, plan = failing(policy)
    for _ in range(5):
        retry = pool.grow_failed(plan, ErrorKind.TRANSIENT, "lost", policy, 0.0, subnets=2)
    # 32 s uncapped; batch 4 makes 3 tries (4, 2, 1) in each of 2 subnets: 60 / 3 / 2
    assert retry.after == 10.0


def test_a_grow_adds_the_addresses_and_the_interface_made_and_starts_over() -> None:
    pool, plan = failing()
    pool.grow_failed(plan, ErrorKind.TRANSIENT, "lost", QUOTA, 0.0)
    made = CloudInterface(id="eni-1", mac="m", subnet="s", ips=("10.0.9.1",))
    pool.grew([PoolEntry("10.0.9.1", "eni-1", "s")], 3.0, made)
    assert pool.interfaces["eni-1"].state is InterfaceState.READY
    assert pool.addresses["10.0.9.1"].added_at == 3.0
    assert (pool.batch, pool.grow_failures, pool.grow_blocked_until, pool.last_error) == (
        0, 0, 0.0, None)


# --- shrink ---------------------------------------------------------------------------

def shrink(pool: NodePool, policy: PoolPolicy, now: float = 100.0,
           halves_only: bool = False) -> ShrinkPlan:
    plan = pool.plan_shrink(policy, now, halves_only)
    assert isinstance(plan, ShrinkPlan), plan
    return plan


def test_idle_addresses_beyond_max_idle_go_a_batch_at_a_time() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 7)))
    plan = shrink(pool, PoolPolicy(max_idle=2, batch_size=1, max_batch_size=3))
    assert (len(plan.victims), plan.excess, plan.leaves_excess) == (3, 5, True)
    plan = shrink(pool, PoolPolicy(max_idle=4, batch_size=1, max_batch_size=3))
    assert (len(plan.victims), plan.leaves_excess) == (3, False)
    nothing = pool.plan_shrink(PoolPolicy(max_idle=7), 100.0)
    assert isinstance(nothing, Deferred) and nothing.reason is DeferReason.NOTHING_TO_DO


def test_a_shrink_keeps_the_addresses_of_the_pods_still_to_ask() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 7)))
    policy = PoolPolicy(max_idle=2, batch_size=1, max_batch_size=10)
    kept = pool.plan_shrink(policy, 100.0, coming=5)
    assert isinstance(kept, Deferred) and kept.reason is DeferReason.NOTHING_TO_DO
    plan = pool.plan_shrink(policy, 100.0, coming=3)
    assert isinstance(plan, ShrinkPlan) and len(plan.victims) == 2


def test_young_addresses_stay_and_the_next_look_is_when_the_first_is_old_enough() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 2)))
    pool.add([PoolEntry("10.0.0.8", "eth0"), PoolEntry("10.0.0.9", "eth0")], now=99.0)
    policy = PoolPolicy(max_idle=0, min_ip_lifetime=3.0)
    plan = shrink(pool, policy)
    assert {a.address for a in plan.victims} == set(ips("10.0.0", 2))
    assert plan.excess == 4  # the young ones are in excess too: looked at again at once
    pool.remove(ips("10.0.0", 2))
    wait = pool.plan_shrink(policy, 100.0)
    assert isinstance(wait, Deferred) and wait.reason is DeferReason.TOO_YOUNG
    assert wait.retry_after == 2.0


def test_whole_interfaces_are_freed_first() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 3)),
                   CloudInterface(id="eth1", ips=ips("10.0.1", 2)))
    own(pool, "10.0.0.1")
    plan = shrink(pool, PoolPolicy(max_idle=2))
    assert [a.interface for a in plan.victims] == ["eth1", "eth1"]


def test_invalid_halves_go_first_and_even_when_nothing_is_in_excess() -> None:
    pool = NodePool("n", "p")
    v4, v6 = ips("10.0.0", 3), ("2408::1", "2408::2")
    pool.rebuild(Inventory(interfaces=(CloudInterface(id="eth0", ips=v4, ipv6=v6),),
                           ips_per_interface=10, dual_stack=True),
                 owners={}, pooled={*v4, *v6}, now=0.0)
    assert [a.address for a in pool.halves()] == ["10.0.0.3"]  # no IPv6 left to pair
    plan = shrink(pool, PoolPolicy(max_idle=1))
    assert [a.address for a in plan.victims] == ["10.0.0.3", "10.0.0.1"]
    assert plan.excess == 2
    only = shrink(pool, PoolPolicy(max_idle=0), halves_only=True)
    assert [a.address for a in only.victims] == ["10.0.0.3"]
    assert shrink(pool, PoolPolicy(max_idle=5)).victims == (pool.addresses["10.0.0.3"],)


def test_victims_are_out_of_the_pool_during_the_call_and_what_stayed_comes_back() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=ips("10.0.0", 3)))
    policy = PoolPolicy(min_idle=4, max_idle=10)
    pool.grow_failed(grow(pool, policy), ErrorKind.TRANSIENT, "lost", policy, 98.0)
    plan = shrink(pool, PoolPolicy(max_idle=1))
    assert [e.address for e in pool.shrinking(plan)] == ["10.0.0.1", "10.0.0.2"]
    assert pool.owner_of("10.0.0.1") == SHRINKING
    assert [a.address for a in pool.idle_addresses(100.0)] == ["10.0.0.3"]
    pool.shrunk(plan, [])
    assert pool.grow_failures == 1  # nothing accepted: the backoff stays
    plan = shrink(pool, PoolPolicy(max_idle=1))
    pool.shrinking(plan)
    pool.shrunk(plan, ["10.0.0.1"])
    assert "10.0.0.1" not in pool.addresses and pool.owner_of("10.0.0.2") is None
    assert (pool.grow_failures, pool.grow_blocked_until) == (0, 0.0)


# --- interfaces -----------------------------------------------------------------------

def test_an_inhibited_interface_recovers_once_its_window_is_over() -> None:
    pool = pool_of(CloudInterface(id="eth0"), CloudInterface(id="eth1"))
    for itf in pool.interfaces.values():
        itf.state = InterfaceState.INHIBITED
    pool.inhibited(pool.interfaces["eth0"], 10.0, "quota")
    pool.inhibited(pool.interfaces["eth1"], 20.0, "quota")
    assert pool.recoverable(9.0) == []
    assert pool.recoverable(10.0) == [pool.interfaces["eth0"]]
    pool.recovered(pool.interfaces["eth0"])
    assert (pool.interfaces["eth0"].inhibited_until, pool.interfaces["eth0"].reason) == (
        0.0, None)


def test_only_an_empty_pooled_secondary_interface_may_go() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=("10.0.0.1",)), CloudInterface(id="eth1"),
                   CloudInterface(id="eth2", primary=True), CloudInterface(id="eth3", trunk=True),
                   CloudInterface(id="eth4", pooled=False), max_interfaces=4)
    assert [i.id for i in pool.disposable()] == ["eth1"]
    pool.interface_gone("eth1")
    assert "eth1" not in pool.interfaces


def test_a_rebuild_resumes_what_the_record_says_of_its_interfaces() -> None:
    pool = pool_of(CloudInterface(id="eth0"), CloudInterface(id="eth1"))
    wall = datetime(2024, 1, 1, tzinfo=UTC)
    pool.resume([
        InterfaceStatus(id="eth0", state=InterfaceState.INHIBITED,
                        inhibited_until=wall.replace(second=30)),
        InterfaceStatus(id="eth1", state=InterfaceState.INHIBITED,
                        inhibited_until=wall.replace(year=2023)),
        InterfaceStatus(id="gone", state=InterfaceState.DISPOSING),
        InterfaceStatus(id="primary", state=InterfaceState.DISPOSING, primary=True),
        InterfaceStatus(id="old", state=InterfaceState.READY),
    ], now=100.0, wall=wall)
    assert pool.interfaces["eth0"].state is InterfaceState.INHIBITED
    assert pool.interfaces["eth0"].inhibited_until == 130.0
    assert pool.interfaces["eth1"].inhibited_until == 100.0  # over already
    assert pool.interfaces["gone"].state is InterfaceState.DISPOSING  # finished off
    assert "old" not in pool.interfaces and "primary" not in pool.interfaces


# --- suspects for GC ------------------------------------------------------------------

def test_a_suspect_nobody_claims_for_the_expiry_is_deleted_and_then_forgotten() -> None:
    pool = pool_of(CloudInterface(id="eth0", ips=("10.0.0.1",)),
                   suspects=("10.0.0.8", "10.0.0.9"), now=5.0)
    policy = PoolPolicy(leaked_ip_expiry=60.0)
    assert pool.expired_suspects(policy, 64.0, owners={}) == []
    assert pool.expired_suspects(policy, 65.0, owners={"10.0.0.9": "ns/a"}) == ["10.0.0.8"]
    pool.suspects_deleted(["10.0.0.8"])
    assert pool.expired_suspects(policy, 65.0, owners={}) == ["10.0.0.9"]
