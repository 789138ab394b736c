"""The node pool's choice of the next idle address: oldest first, a released address at
the back, never one that is owned, cooling down, a half or on a disposing interface,
and never a miss when the pool has an idle address."""

from __future__ import annotations

import pytest

from podnet.core.models import InterfaceState
from podnet.core.pool import NodePool, PoolEmpty
from podnet.hookspecs.types import CloudInterface, Inventory, PoolEntry

IPS = [f"10.0.0.{i}" for i in range(1, 7)]


def pool_of(ips: list[str] = IPS) -> NodePool:
    pool = NodePool("n", "p")
    inventory = Inventory(interfaces=(CloudInterface(id="eth0", ips=tuple(ips[:3])),
                                      CloudInterface(id="eth1", ips=tuple(ips[3:]))),
                          max_interfaces=2, ips_per_interface=10)
    pool.rebuild(inventory, owners={}, pooled=set(ips), now=0.0)
    return pool


def take(pool: NodePool, owner: str, now: float = 0.0, subnet: str | None = None) -> str:
    return pool.reserve(owner, now).take(subnet=subnet).address


def test_oldest_first_and_a_released_address_goes_to_the_back() -> None:
    pool = pool_of()
    assert [take(pool, f"ns/p{i}") for i in range(3)] == IPS[:3]
    assert pool.give_back(IPS[0], "ns/p0", cooldown_until=0.0)
    assert [take(pool, f"ns/q{i}") for i in range(4)] == [*IPS[3:], IPS[0]]
    with pytest.raises(PoolEmpty):
        take(pool, "ns/r")


def test_skips_cooldown_halves_and_disposing_interfaces() -> None:
    pool = pool_of()
    pool.addresses[IPS[0]].cooldown_until = 10.0
    pool.addresses[IPS[1]].half = True
    pool.interfaces["eth0"].state = InterfaceState.DISPOSING
    assert take(pool, "ns/a") == IPS[3]
    pool.interfaces["eth0"].state = InterfaceState.READY
    assert take(pool, "ns/b") == IPS[2]
    assert take(pool, "ns/c", now=11.0) == IPS[0]  # its cooldown is over


def test_a_rolled_back_reservation_and_a_lost_answer_free_their_address() -> None:
    pool = pool_of(IPS[:2])
    reservation = pool.reserve("ns/a", 0.0)
    assert reservation.take().address == IPS[0]
    reservation.rollback()
    assert pool.owner_of(IPS[0]) is None
    # a retry took another address, and the record names the first: the other goes back
    assert take(pool, "ns/a") == IPS[1]
    pool.addresses[IPS[0]].owner = "ns/a"
    pool.release_others("ns/a", keep=IPS[0])
    assert take(pool, "ns/b") == IPS[1]


def test_an_address_freed_behind_the_order_is_still_found() -> None:
    pool = pool_of(IPS[:2])
    take(pool, "ns/a")
    take(pool, "ns/b")
    pool.addresses[IPS[1]].owner = None  # freed without telling the pool's order
    assert take(pool, "ns/c") == IPS[1]
    pool.add([PoolEntry(IPS[2], "eth0")])
    assert take(pool, "ns/d") == IPS[2]


def test_subnet_is_honoured() -> None:
    pool = NodePool("n", "p")
    inventory = Inventory(interfaces=(CloudInterface(id="eth0", ips=(IPS[0],), subnet="a"),
                                      CloudInterface(id="eth1", ips=(IPS[1],), subnet="b")),
                          max_interfaces=2, ips_per_interface=10)
    pool.rebuild(inventory, owners={}, pooled={IPS[0], IPS[1]}, now=0.0)
    assert take(pool, "ns/x", subnet="b") == IPS[1]
    with pytest.raises(PoolEmpty):
        take(pool, "ns/y", subnet="b")
    assert take(pool, "ns/z", subnet="a") == IPS[0]


def test_release_others_frees_every_other_address_however_the_owner_got_it() -> None:
    """The pool finds an owner's addresses by its index, not a scan: held by a rebuild
    from the records, a take, an adopt, a claim, a hand-set owner, or an address that
    left and came back; what another owner took since, or what left the pool, is not
    touched."""
    ips = [f"10.0.1.{i}" for i in range(1, 9)]
    pool = NodePool("n", "p")
    inventory = Inventory(interfaces=(CloudInterface(id="eth0", ips=tuple(ips[:6])),),
                          max_interfaces=2, ips_per_interface=10)
    pool.rebuild(inventory, owners={ips[0]: "ns/a"}, pooled=set(ips), now=0.0)
    assert take(pool, "ns/a") == ips[0]  # what it holds is handed back, no other taken
    assert take(pool, "ns/c") == ips[1]
    pool.addresses[ips[1]].owner = "ns/a"
    pool.adopt(ips[6], "ns/a", "eth0", None)
    assert pool.claim(ips[7], "ns/a", "eth0", None) == (None, True)
    pool.addresses[ips[2]].owner = "ns/a"
    pool.addresses[ips[3]].owner = "ns/a"
    pool.addresses[ips[3]].owner = "ns/b"  # taken by another since
    pool.addresses[ips[4]].owner = "ns/a"
    del pool.addresses[ips[4]]  # gone from the pool
    held = sorted(ip for ip, a in pool.addresses.items() if a.owner == "ns/a")
    assert held == sorted([ips[0], ips[1], ips[2], ips[6], ips[7]])
    pool.release_others("ns/a", keep=ips[6])
    assert {ip: a.owner for ip, a in pool.addresses.items() if a.owner} == {
        ips[6]: "ns/a", ips[3]: "ns/b"}
    pool.release_others("ns/a", keep=None)
    assert pool.owner_of(ips[6]) is None and pool.owner_of(ips[3]) == "ns/b"


def test_a_rebuild_holds_cooling_addresses_until_their_time_and_no_owned_one() -> None:
    """``cooling`` addresses new to the pool are idle only from ``cooling_until``; one a
    record owns takes no cooldown (its release sets its own)."""
    pool = NodePool("n", "p")
    inventory = Inventory(interfaces=(CloudInterface(id="eni-1", ips=tuple(IPS[:3]),
                                                     made=True),),
                          max_interfaces=1, ips_per_interface=3)
    pool.rebuild(inventory, owners={IPS[0]: "ns/a"}, pooled=set(IPS[:3]), now=0.0,
                 cooling=set(IPS[:2]), cooling_until=30.0)
    assert not pool.suspects
    assert pool.addresses[IPS[0]].cooldown_until == 0.0
    assert take(pool, "ns/b") == IPS[2]
    with pytest.raises(PoolEmpty):
        take(pool, "ns/c", now=29.0)
    assert take(pool, "ns/c", now=30.0) == IPS[1]


def test_an_owner_waiting_for_an_address_is_served_by_the_one_the_pool_holds_for_it() -> None:
    """No idle address, another waiter ahead, and an address the pool still holds for the
    record (re-addressed after a hand edit named another pod's): that one serves it, and
    its reservation is handed it; the waiter ahead gets nothing of it."""
    ips = [f"10.0.1.{i}" for i in range(1, 4)]
    pool = NodePool("n", "p")
    inventory = Inventory(interfaces=(CloudInterface(id="eth0", ips=tuple(ips)),),
                          max_interfaces=1, ips_per_interface=3)
    pool.rebuild(inventory, owners={ips[0]: "ns/a", ips[1]: "ns/b", ips[2]: "ns/c"},
                 pooled=set(ips), now=0.0)
    pool.wait_for_address("ns/x", None, 0.0, queued=True)
    pool.wait_for_address("ns/a", None, 0.0, queued=True)
    assert not pool.serves_next("ns/x", None, 0.0)
    assert pool.serves_next("ns/a", None, 0.0)
    assert take(pool, "ns/a") == ips[0]
    with pytest.raises(PoolEmpty):  # held, but not in the subnet asked for
        take(pool, "ns/a", subnet="elsewhere")
