"""A dual-stack pool never loses track of an IPv6 partner: however its IPv4 half leaves
the pool (the cloud dropped it, or a grow handed it out again while a record held it),
the IPv6 address the cloud may still have stays in the pool as an invalid half, which
the next shrink gives back. A partner named by nothing is a leak no check finds: the
pool knew it, so it is no suspect either."""

from __future__ import annotations

from podnet.core.pool import NodePool
from podnet.hookspecs.types import CloudInterface, Inventory, PoolEntry


def _inventory(ips: tuple[str, ...], ipv6: tuple[str, ...]) -> Inventory:
    return Inventory(interfaces=(CloudInterface(id="eni-1", ips=ips, ipv6=ipv6),),
                     max_interfaces=2, ips_per_interface=9, dual_stack=True)


def _pool() -> NodePool:
    """10.0.0.1/2408::1 owned by ns/a, 10.0.0.2/2408::2 idle."""
    pool = NodePool("n", "bbc")
    ips, ipv6 = ("10.0.0.1", "10.0.0.2"), ("2408::1", "2408::2")
    pool.rebuild(_inventory(ips, ipv6), {"10.0.0.1": "ns/a"}, {*ips, *ipv6}, 0.0,
                 {"10.0.0.1": "2408::1", "10.0.0.2": "2408::2"})
    return pool


def _halves(pool: NodePool) -> set[str]:
    return {a.address for a in pool.halves()}


def test_the_cloud_dropping_an_idle_ipv4_half_leaves_its_partner_a_half() -> None:
    pool = _pool()
    lost = pool.observe(_inventory(("10.0.0.1",), ("2408::1", "2408::2")),
                        {"10.0.0.1": "ns/a", "2408::1": "ns/a"}, 1.0)
    assert lost == [] and "10.0.0.2" not in pool.addresses
    assert _halves(pool) == {"2408::2"} and "2408::2" not in pool.suspects
    # the partner the cloud dropped too is nobody's problem: no half is made for it
    again = _pool()
    again.observe(_inventory(("10.0.0.1",), ("2408::1",)),
                  {"10.0.0.1": "ns/a", "2408::1": "ns/a"}, 1.0)
    assert "2408::2" not in again.addresses and _halves(again) == set()


def test_a_grow_handing_out_an_address_a_record_holds_keeps_its_new_partner() -> None:
    """The cloud lost ns/a's 10.0.0.1 and a grow brought it back (with 2408::9) before
    ns/a let it go: the record keeps its pair meanwhile; 2408::9 is a half; once ns/a
    lets 10.0.0.1 go as lost, it is the pool's again (without a partner: a half), not a
    suspect the cloud has and the pool forgot."""
    pool = _pool()
    pool.add([PoolEntry("10.0.0.1", "eni-1", None, ipv6="2408::9")], 2.0)
    assert pool.addresses["10.0.0.1"].owner == "ns/a"
    assert pool.addresses["10.0.0.1"].ipv6 == "2408::1"
    assert _halves(pool) == {"2408::9"}
    pool.forget_lost("10.0.0.1", "ns/a")
    entry = pool.addresses["10.0.0.1"]
    assert entry.owner is None and entry.ipv6 is None
    assert _halves(pool) == {"2408::9", "2408::1", "10.0.0.1"}
    # a lost address that did not come back leaves the pool; its partner is a half
    other = _pool()
    other.forget_lost("10.0.0.1", "ns/a")
    assert "10.0.0.1" not in other.addresses and _halves(other) == {"2408::1"}


def test_a_single_stack_address_handed_out_again_is_idle_once_its_record_lets_go() -> None:
    pool = NodePool("n", "ecs")
    pool.rebuild(Inventory(interfaces=(CloudInterface(id="eni-1", ips=("10.0.0.1",)),),
                           max_interfaces=2, ips_per_interface=9),
                 {"10.0.0.1": "ns/a"}, {"10.0.0.1"}, 0.0)
    pool.add([PoolEntry("10.0.0.1", "eni-1", None)], 1.0)
    pool.forget_lost("10.0.0.1", "ns/a")
    assert [a.address for a in pool.idle_addresses(2.0)] == ["10.0.0.1"]
