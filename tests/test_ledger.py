"""The address ledger on its own, without the engine: every rule of who holds an address,
including the situations the chaos machines found (a record edited to another's address,
an Allocated write whose answer was lost, a restart that listed the wrong record first)."""

from __future__ import annotations

import attrs
import pytest

from podnet.core.annotations import IP_ADDRESS, annotation_field
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.ledger import Ledger, ProblemKind, address_seal, sealed
from podnet.core.models import (
    NetworkRequest,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.core.ownership import Ownership
from podnet.core.pool import NodePool, Pools, ShrinkPlan
from podnet.hookspecs.types import Allocation, PoolEntry

POOLED = "pooled"  # a provider allocating from node pools
OVERLAY = "overlay"  # one with its own address management
NODE = "n0"


def record(name: str, ip: str | None = None, *, provider: str = OVERLAY,
           phase: Phase = Phase.ROUTED, ipv6: str | None = None, static: str | None = None,
           node: str = NODE) -> PodNetwork:
    return PodNetwork(
        metadata=ObjectMeta(name=name, namespace="ns"),
        spec=PodNetworkSpec(pod_name=name, pod_uid=f"uid-{name}", node_name=node,
                            provider=provider, requests=NetworkRequest(ip_address=static)),
        status=PodNetworkStatus(phase=phase if ip or ipv6 else Phase.PENDING, ip=ip,
                                ipv6=ipv6))


class World:
    """What the ledger asks outside itself, as plain data: the records, the provider's
    verify verdicts, which records are too young for the cloud to show, who was woken."""

    def __init__(self) -> None:
        self.records: dict[str, PodNetwork] = {}
        self.verdicts: dict[str, bool | None] = {}
        self.young: set[str] = set()
        self.woken: list[str] = []
        self.verified: list[tuple[str, str]] = []
        self.owned = Ownership()
        self.pools = Pools()
        self.lost: dict[str, str] = {}
        self.ledger = Ledger(
            owned=self.owned, pools=self.pools, lost=self.lost, record=self.records.get,
            node_pool=lambda provider: provider == POOLED, verify=self._verify,
            young=lambda pn: pn.key in self.young, wake=self.woken.append,
            on_node=lambda node: [pn for pn in self.records.values()
                                  if pn.spec.node_name == node])

    def _verify(self, pn: PodNetwork, address: str) -> bool | None:
        self.verified.append((pn.key, address))
        return self.verdicts.get(pn.key)

    def add(self, *pns: PodNetwork) -> None:
        for pn in pns:
            self.records[pn.key] = pn

    def pool(self, *addresses: str) -> NodePool:
        pool = self.pools.get(POOLED, NODE)
        pool.add([PoolEntry(a, "eni-0", "subnet-0") for a in addresses])
        pool.synced = True
        return pool


def held(world: World, provider: str, address: str) -> str | None:
    return world.owned.addresses.holder(provider, address)


# --- the first claim holds ------------------------------------------------------------


def test_the_second_of_two_racing_claims_is_refused_and_keeps_nothing() -> None:
    w = World()
    a, b = record("a", phase=Phase.PENDING), record("b", phase=Phase.PENDING, static="10.0.0.5")
    w.add(a, b)
    w.ledger.claim(a, Allocation(ip="10.0.0.5"), None, hold_off_until=lambda: 0.0)
    with pytest.raises(ProviderError) as refused:
        w.ledger.claim(b, Allocation(ip="10.0.0.5", ipv6="fd00::5"), None,
                       hold_off_until=lambda: 0.0)
    assert refused.value.kind is ErrorKind.CONFLICT
    assert "already held by ns/a" in str(refused.value)
    assert refused.value.field == annotation_field(IP_ADDRESS)  # b asked for it by name
    assert held(w, OVERLAY, "10.0.0.5") == "ns/a"
    assert held(w, OVERLAY, "fd00::5") is None, "all or nothing: the IPv6 half is not kept"
    assert w.woken == ["ns/a"], "the holder is looked at: it may be the one to re-address"


def test_an_address_the_provider_chose_is_blamed_on_its_answer() -> None:
    w = World()
    w.ledger.claim(record("a"), Allocation(ip="10.0.0.5"), None, hold_off_until=lambda: 0.0)
    with pytest.raises(ProviderError) as refused:
        w.ledger.claim(record("b"), Allocation(ip="10.0.0.5"), None, hold_off_until=lambda: 0.0)
    assert refused.value.field == "allocate.ip"


def test_a_claim_is_undone_exactly_when_its_write_failed() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", provider=POOLED, phase=Phase.PENDING)
    reservation = w.ledger.reserve(pool, pn.key, 0.0)
    assert reservation.take().address == "10.0.0.1"
    # the provider added a static address of its own beside the reservation's
    claim = w.ledger.claim(pn, Allocation(ip="10.0.0.9", ipv6="fd00::9"), reservation,
                           hold_off_until=lambda: 0.0)
    assert held(w, POOLED, "10.0.0.9") == "ns/a" and held(w, POOLED, "fd00::9") == "ns/a"
    assert pool.owner_of("10.0.0.9") == "ns/a"
    claim.undo()
    assert held(w, POOLED, "10.0.0.9") is None and held(w, POOLED, "fd00::9") is None
    assert "10.0.0.9" not in pool.addresses, "an address the claim added to the pool leaves it"


def test_an_address_held_in_the_pool_by_another_record_is_refused_and_undone() -> None:
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.9")
    pool.claim("10.0.0.9", "ns/other", "eni-0", "subnet-0")
    pn = record("a", provider=POOLED, phase=Phase.PENDING)
    reservation = w.ledger.reserve(pool, pn.key, 0.0)
    reservation.take()
    with pytest.raises(ProviderError, match="held by ns/other on node n0"):
        w.ledger.claim(pn, Allocation(ip="10.0.0.9"), reservation, hold_off_until=lambda: 0.0)
    assert held(w, POOLED, "10.0.0.9") is None, "the book's claim is undone with the pool's"


def test_an_address_the_pool_thought_idle_but_the_book_gives_away_is_held_off() -> None:
    """The pool offered an address the book gives to another record (a record edited to
    it): not handed out again until the holder's pass settled who owns it."""
    w = World()
    pool = w.pool("10.0.0.1")
    w.owned.addresses.claim(POOLED, "10.0.0.1", "ns/edited")
    pn = record("a", provider=POOLED, phase=Phase.PENDING)
    reservation = w.ledger.reserve(pool, pn.key, 0.0)
    reservation.take()
    with pytest.raises(ProviderError):
        w.ledger.claim(pn, Allocation(ip="10.0.0.1"), reservation, hold_off_until=lambda: 42.0)
    assert pool.addresses["10.0.0.1"].cooldown_until == 42.0


# --- the provider's verify decides for providers without node pools ---------------------


def test_a_holder_its_provider_disowns_loses_the_address_to_the_provider_s_choice() -> None:
    """After a restart the book took a hand-edited record's address from the records; the
    provider gives it to another record and says the holder's dataplane differs."""
    w = World()
    edited = record("edited", "10.0.0.5")
    w.add(edited)
    w.owned.recorded(edited)
    w.verdicts["ns/edited"] = False
    w.ledger.claim(record("a", phase=Phase.PENDING), Allocation(ip="10.0.0.5"), None,
                   hold_off_until=lambda: 0.0)
    assert held(w, OVERLAY, "10.0.0.5") == "ns/a"
    assert w.owned.conflicts["ns/edited"] == ("10.0.0.5", "ns/a")
    assert "ns/edited" in w.woken


@pytest.mark.parametrize("verdict", [None, True])
def test_a_holder_the_provider_is_unsure_of_keeps_its_address(verdict: bool | None) -> None:
    w = World()
    holder = record("holder", "10.0.0.5")
    w.add(holder)
    w.owned.recorded(holder)
    w.verdicts["ns/holder"] = verdict
    with pytest.raises(ProviderError):
        w.ledger.claim(record("a"), Allocation(ip="10.0.0.5"), None, hold_off_until=lambda: 0.0)
    assert held(w, OVERLAY, "10.0.0.5") == "ns/holder"


def test_a_holder_not_routed_is_never_asked_and_keeps_its_address() -> None:
    w = World()
    holder = record("holder", "10.0.0.5", phase=Phase.ALLOCATED)
    w.add(holder)
    w.owned.recorded(holder)
    w.verdicts["ns/holder"] = False
    with pytest.raises(ProviderError):
        w.ledger.claim(record("a"), Allocation(ip="10.0.0.5"), None, hold_off_until=lambda: 0.0)
    assert w.verified == [] and held(w, OVERLAY, "10.0.0.5") == "ns/holder"


def test_a_node_pool_holder_is_never_disowned_by_a_verify() -> None:
    w = World()
    holder = record("holder", "10.0.0.5", provider=POOLED)
    w.add(holder)
    w.owned.recorded(holder)
    w.verdicts["ns/holder"] = False
    with pytest.raises(ProviderError):
        w.ledger.claim(record("a", provider=POOLED), Allocation(ip="10.0.0.5"), None,
                       hold_off_until=lambda: 0.0)
    assert held(w, POOLED, "10.0.0.5") == "ns/holder"


# --- a record's write landed ----------------------------------------------------------


def test_a_lost_allocated_write_keeps_its_address_until_a_later_write_lands() -> None:
    """Found by the chaos machine: the Allocated write's answer was lost; the record
    (written after all) kept its address, and the retry's address is what the record
    finally names: the first one goes back to the pool, not before."""
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.2")
    pn = record("a", provider=POOLED, phase=Phase.PENDING)
    first = w.ledger.reserve(pool, pn.key, 0.0)
    first.take()
    w.ledger.claim(pn, Allocation(ip="10.0.0.1"), first, hold_off_until=lambda: 0.0)
    # the answer was lost: nothing undone; the retry's reservation may not take it away
    second = w.ledger.reserve(pool, pn.key, 1.0)
    taken = second.take(address="10.0.0.2")
    w.ledger.claim(pn, Allocation(ip=taken.address), second, hold_off_until=lambda: 0.0)
    assert pool.owner_of("10.0.0.1") == "ns/a" and held(w, POOLED, "10.0.0.1") == "ns/a"
    w.ledger.recorded(record("a", "10.0.0.2", provider=POOLED, phase=Phase.ALLOCATED), second)
    assert pool.owner_of("10.0.0.1") is None and held(w, POOLED, "10.0.0.1") is None
    assert pool.owner_of("10.0.0.2") == "ns/a" and held(w, POOLED, "10.0.0.2") == "ns/a"


def test_an_address_the_provider_chose_without_the_pool_is_adopted_when_recorded() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", provider=POOLED, phase=Phase.PENDING)
    reservation = w.ledger.reserve(pool, pn.key, 0.0)
    reservation.take()
    written = record("a", "10.0.0.7", ipv6="fd00::7", provider=POOLED, phase=Phase.ALLOCATED)
    w.ledger.recorded(written, reservation)
    assert pool.owner_of("10.0.0.1") is None, "the reservation it did not use is rolled back"
    assert pool.owner_of("10.0.0.7") == "ns/a"
    assert pool.addresses["10.0.0.7"].ipv6 == "fd00::7"


# --- giving back ----------------------------------------------------------------------


def test_a_release_gives_the_address_back_after_its_cooldown_and_forgets_the_record() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", "10.0.0.1", provider=POOLED)
    pool.claim("10.0.0.1", pn.key, "eni-0", "subnet-0")
    w.owned.recorded(pn)
    w.lost[pn.key] = "10.0.0.1"
    pool.wait_for_address(pn.key, None, 0.0)
    assert w.ledger.give_back(pn, to_pool=True, cooldown_until=9.0)
    assert pool.owner_of("10.0.0.1") is None
    assert pool.addresses["10.0.0.1"].cooldown_until == 9.0
    assert held(w, POOLED, "10.0.0.1") is None and pn.key not in w.lost
    assert pn.key not in pool.waiting


def test_an_address_the_provider_keeps_is_not_given_back_to_the_pool() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", "10.0.0.1", provider=POOLED)
    pool.claim("10.0.0.1", pn.key, "eni-0", "subnet-0")
    w.owned.recorded(pn)
    assert not w.ledger.give_back(pn, to_pool=False, cooldown_until=0.0)
    assert pool.owner_of("10.0.0.1") == "ns/a"
    assert held(w, POOLED, "10.0.0.1") is None


def test_a_release_of_a_record_edited_to_another_s_address_gives_nothing_of_it_back() -> None:
    """Found by the chaos machine: p0's status.ip was set to p1's address; p0's release
    must not give p1's address back to the pool."""
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.2")
    pool.claim("10.0.0.1", "ns/p0", "eni-0", "subnet-0")
    pool.claim("10.0.0.2", "ns/p1", "eni-0", "subnet-0")
    edited = record("p0", "10.0.0.2", provider=POOLED)
    assert not w.ledger.give_back(edited, to_pool=True, cooldown_until=0.0)
    assert pool.owner_of("10.0.0.2") == "ns/p1"


def test_a_record_removed_without_its_release_leaves_nothing_owned() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", "10.0.0.1", provider=POOLED)
    pool.claim("10.0.0.1", pn.key, "eni-0", "subnet-0")
    w.owned.recorded(pn)
    pool.wait_for_address(pn.key, None, 0.0)
    assert w.ledger.settle_vanished(pn, served=True, cooldown_until=5.0) == ["10.0.0.1"]
    assert held(w, POOLED, "10.0.0.1") is None and pool.owner_of("10.0.0.1") is None
    assert pn.key not in pool.waiting


def test_a_vanished_record_of_a_provider_not_served_here_is_only_forgotten() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", "10.0.0.1", provider=POOLED)
    pool.claim("10.0.0.1", pn.key, "eni-0", "subnet-0")
    w.owned.recorded(pn)
    assert w.ledger.settle_vanished(pn, served=False, cooldown_until=0.0) == []
    assert held(w, POOLED, "10.0.0.1") is None and pool.owner_of("10.0.0.1") == "ns/a"


# --- what is wrong with a claim -------------------------------------------------------


def test_a_conflict_settled_meanwhile_is_no_problem_any_more() -> None:
    w = World()
    pn = record("a", "10.0.0.5")
    w.owned.addresses.claim(OVERLAY, "10.0.0.5", pn.key)
    w.owned.conflicts[pn.key] = ("10.0.0.5", "ns/gone")
    assert w.ledger.problem(pn) is None and pn.key not in w.owned.conflicts


def test_a_restart_s_first_listed_edit_loses_to_the_record_its_pool_backs() -> None:
    """The book took an edited record's address first (listed first after a restart);
    the node's pool, rebuilt from the cloud, backs the real owner: the book follows the
    pool and the edited record is the one with the conflict."""
    w = World()
    pool = w.pool("10.0.0.5")
    real, edited = (record("real", "10.0.0.5", provider=POOLED),
                    record("edited", "10.0.0.5", provider=POOLED, node="n1"))
    w.add(real, edited)
    pool.claim("10.0.0.5", real.key, "eni-0", "subnet-0")
    assert w.owned.recorded(edited) is None
    assert w.owned.recorded(real) == "ns/edited"
    assert w.ledger.problem(real) is None
    assert held(w, POOLED, "10.0.0.5") == "ns/real"
    assert w.owned.conflicts["ns/edited"] == ("10.0.0.5", "ns/real")
    assert "ns/edited" in w.woken
    problem = w.ledger.problem(edited)
    assert problem is not None and problem.kind is ProblemKind.CONFLICT
    assert problem.holder == "ns/real"


def test_the_provider_s_verify_settles_a_conflict_outside_node_pools() -> None:
    w = World()
    holder, mine = record("holder", "10.0.0.5"), record("mine", "10.0.0.5")
    w.add(holder, mine)
    w.owned.recorded(holder)
    w.owned.recorded(mine)
    w.verdicts.update({"ns/mine": True, "ns/holder": False})
    assert w.ledger.problem(mine) is None
    assert held(w, OVERLAY, "10.0.0.5") == "ns/mine"


def test_a_conflict_nobody_backs_stays_and_hands_the_record_its_own_address_first() -> None:
    """A record patched to another's address (the book still holds its own for it)."""
    w = World()
    holder, edited = record("holder", "10.0.0.5"), record("edited", "10.0.0.6")
    w.add(holder)
    w.owned.recorded(holder)
    w.owned.recorded(edited)
    edited = record("edited", "10.0.0.5")
    w.add(edited)
    assert w.owned.recorded(edited) == "ns/holder"
    problem = w.ledger.problem(edited)
    assert problem is not None and problem.kind is ProblemKind.CONFLICT
    assert (problem.address, problem.holder, problem.prefer) == ("10.0.0.5", "ns/holder",
                                                                 "10.0.0.6")
    assert held(w, OVERLAY, "10.0.0.5") == "ns/holder"


def test_an_address_the_cloud_lost_is_a_problem_until_the_record_moves_on() -> None:
    w = World()
    pn = record("a", "10.0.0.5")
    w.lost[pn.key] = "10.0.0.5"
    problem = w.ledger.problem(pn)
    assert problem is not None and problem.kind is ProblemKind.LOST and problem.lost
    assert problem.prefer == "10.0.0.5", "taken back where the cloud gives it back"
    moved = record("a", "10.0.0.6")
    assert w.ledger.problem(moved) is None and pn.key not in w.lost


def test_a_node_pool_says_what_is_wrong_with_a_record_s_address() -> None:
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.2")
    pool.claim("10.0.0.1", "ns/other", "eni-0", "subnet-0")
    held_by_other = w.ledger.problem(record("a", "10.0.0.1", provider=POOLED))
    assert held_by_other is not None and held_by_other.kind is ProblemKind.HELD_IN_POOL
    assert (held_by_other.holder, held_by_other.node) == ("ns/other", NODE)
    idle = w.ledger.problem(record("a", "10.0.0.2", provider=POOLED))
    assert idle is not None and idle.kind is ProblemKind.IDLE_IN_POOL
    assert idle.prefer == "10.0.0.2"
    missing = w.ledger.problem(record("a", "10.0.0.3", provider=POOLED))
    assert missing is not None and missing.kind is ProblemKind.NOT_ON_NODE and missing.lost
    w.young.add("ns/a")
    assert w.ledger.problem(record("a", "10.0.0.3", provider=POOLED)) is None, (
        "the cloud may not show a new address yet")


def test_a_pool_not_synced_yet_says_nothing() -> None:
    w = World()
    pool = w.pool()
    pool.synced = False
    assert w.ledger.problem(record("a", "10.0.0.3", provider=POOLED)) is None


def test_a_readdressed_record_lets_a_lost_address_go_from_book_and_pool() -> None:
    w = World()
    pool = w.pool("10.0.0.1")
    pn = record("a", "10.0.0.1", provider=POOLED)
    pool.claim("10.0.0.1", pn.key, "eni-0", "subnet-0")
    w.owned.recorded(pn)
    w.lost[pn.key] = "10.0.0.1"
    w.owned.conflicts[pn.key] = ("10.0.0.1", "ns/x")
    w.ledger.readdressed(record("a", provider=POOLED, phase=Phase.PENDING))
    assert "10.0.0.1" not in pool.addresses and held(w, POOLED, "10.0.0.1") is None
    assert w.ledger.conflict(pn.key) is None and pn.key not in w.lost


# --- a pool rebuilt after a restart ---------------------------------------------------


def test_a_rebuilt_pool_keeps_the_owner_its_last_record_named() -> None:
    first, second = record("aa-edited", "10.0.0.1"), record("zz-real", "10.0.0.1")
    assert Ledger.rebuild_owner([first, second], "ns/zz-real") is second
    assert Ledger.rebuild_owner([first, second], None) is first, "else the first listed"
    assert Ledger.rebuild_owner([first, second], "ns/gone") is first


def test_a_rebuilt_dual_stack_pool_whose_owners_lag_keeps_the_owner_its_pair_names() -> None:
    """No owner listed yet (the catch-up lags): a record whose IPv6 the recorded pool
    paired with another IPv4 (a hand edit of ``status.ip`` left it there) loses to one
    whose pair it backs, or does not know (its address not recorded yet)."""
    def with_v6(name: str, ipv6: str) -> PodNetwork:
        pn = record(name, "10.0.0.1")
        return attrs.evolve(pn, status=attrs.evolve(pn.status, ipv6=ipv6))

    edited, real = with_v6("aa-edited", "fd00::2"), with_v6("zz-real", "fd00::3")
    pairs = {"fd00::2": "10.0.0.5", "fd00::3": "10.0.0.1"}
    assert Ledger.rebuild_owner([edited, real], None, pairs) is real
    assert Ledger.rebuild_owner([edited, real], None, {"fd00::2": "10.0.0.5"}) is real, (
        "the real one's pair not recorded yet: not contradicted")
    assert Ledger.rebuild_owner([edited, real], "ns/aa-edited", pairs) is edited, (
        "a listed owner decides first")
    assert Ledger.rebuild_owner([edited, real], None, {}) is edited, (
        "nothing recorded: the first listed")


def sealed_record(name: str, ip: str, *, given: str | None = None,
                  ipv6: str | None = None) -> PodNetwork:
    """A record with the seal podnet wrote when it gave it ``given`` (default: ``ip``, the
    address it names; another one: ``ip`` is a hand edit made since)."""
    pn = record(name, ip, ipv6=ipv6)
    meta = attrs.evolve(pn.metadata, uid=f"uid-of-record-{name}")
    seal = address_seal(meta.uid, given or ip, ipv6)
    return attrs.evolve(pn, metadata=meta, status=attrs.evolve(pn.status, address_seal=seal))


def test_a_seal_names_the_record_and_every_address_podnet_gave_it() -> None:
    seal = address_seal("uid-1", "10.0.0.1", None)
    assert seal is not None and len(seal) == 12 and int(seal, 16) >= 0
    assert seal == address_seal("uid-1", "10.0.0.1", None), "the same for the same"
    assert len({seal, address_seal("uid-2", "10.0.0.1", None),
                address_seal("uid-1", "10.0.0.2", None),
                address_seal("uid-1", "10.0.0.1", "fd00::1")}) == 4
    assert address_seal("uid-1", None, None) is None, "no address, no seal"
    # a seal copied from another record with the address names that record's uid
    real = sealed_record("real", "10.0.0.1")
    copied = attrs.evolve(record("copied", "10.0.0.1"), status=real.status)
    assert sealed(real) is True and sealed(copied) is False
    assert sealed(sealed_record("edited", "10.0.0.1", given="10.0.0.9")) is False
    assert sealed(record("old", "10.0.0.1")) is None, "an older podnet's record: no seal"


def test_a_rebuilt_pool_whose_owners_lag_keeps_the_owner_the_seal_names() -> None:
    """No owner listed yet: the record whose seal names the address beats the one a hand
    edit gave it, whichever is listed first, and the seal (written with the address, so
    never behind) goes before the listed owner (which lags)."""
    real = sealed_record("zz-real", "10.0.0.1")
    edited = sealed_record("aa-edited", "10.0.0.1", given="10.0.0.7")
    assert Ledger.rebuild_owner([edited, real], None) is real
    assert Ledger.rebuild_owner([real, edited], None) is real
    assert Ledger.rebuild_owner([edited, real], "ns/aa-edited") is real
    # dual stack: the seal decides before the pairs do
    real6 = sealed_record("zz-real", "10.0.0.1", ipv6="fd00::3")
    edited6 = sealed_record("aa-edited", "10.0.0.1", given="10.0.0.7", ipv6="fd00::2")
    assert Ledger.rebuild_owner([edited6, real6], None, {"fd00::3": "10.0.0.9"}) is real6


def test_a_rebuilt_pool_takes_a_record_without_a_seal_as_neither_proof_nor_disproof(
) -> None:
    """A record an older podnet wrote (an upgrade) has no seal: it beats one whose seal a
    hand edit broke, loses to one whose seal names the address, and among records
    without one the owner rule decides as before."""
    old, other_old = record("mm-old", "10.0.0.1"), record("nn-old", "10.0.0.1")
    real = sealed_record("zz-real", "10.0.0.1")
    edited = sealed_record("aa-edited", "10.0.0.1", given="10.0.0.7")
    assert Ledger.rebuild_owner([edited, old], None) is old
    assert Ledger.rebuild_owner([edited, old], "ns/aa-edited") is old
    assert Ledger.rebuild_owner([old, real], "ns/mm-old") is real
    assert Ledger.rebuild_owner([edited, old, other_old], "ns/nn-old") is other_old
    assert Ledger.rebuild_owner([edited, old, other_old], None) is old
    # every seal broken (records restored under new uids): the owner rule as before
    restored = [sealed_record("aa", "10.0.0.1", given="10.0.0.5"),
                sealed_record("zz", "10.0.0.1", given="10.0.0.6")]
    assert Ledger.rebuild_owner(restored, "ns/zz") is restored[1]
    assert Ledger.rebuild_owner(restored, None) is restored[0]


# --- records leaving -------------------------------------------------------------------


def test_on_a_node_that_left_an_owner_that_is_gone_owns_nothing() -> None:
    """Found by the chaos machine: p0's status.ip edited to p1's address, then the node
    deleted: p0's release gave back nothing of its own, and the pool kept p0's address
    owned by a record that was gone, so the node's record waited for it for ever."""
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.2", "10.0.0.3")
    live = record("p1", "10.0.0.2", provider=POOLED)
    w.add(live)
    pool.claim("10.0.0.1", "ns/p0", "eni-0", "subnet-0")
    pool.claim("10.0.0.2", live.key, "eni-0", "subnet-0")
    entries = pool.shrinking(_plan(pool, "10.0.0.3"))
    assert [e.address for e in entries] == ["10.0.0.3"]
    w.ledger.left_node(pool)
    assert pool.owner_of("10.0.0.1") is None
    assert pool.owner_of("10.0.0.2") == "ns/p1", "a record still there gives its own back"
    w.ledger.left_node(pool, everyone=True)  # the machine no longer runs under the name
    assert pool.owner_of("10.0.0.2") is None
    assert pool.owner_of("10.0.0.3") is not None, "one being shrunk stays out of the pool"


def _plan(pool: NodePool, address: str) -> ShrinkPlan:
    return ShrinkPlan(victims=(pool.addresses[address],), excess=1)


def test_a_record_podnet_removes_is_not_taken_for_one_removed_by_hand() -> None:
    w = World()
    pn = record("a", "10.0.0.1")
    w.ledger.seen(pn)
    w.ledger.removing(pn.key)
    w.ledger.gone(pn)
    assert not w.ledger.any_vanished, "its release gives the address back, not the pass"
    w.ledger.removed(pn.key)
    w.ledger.seen(pn)
    w.ledger.gone(pn)
    assert w.ledger.vanished_of("ns/a") == [pn]
    assert w.ledger.vanished_of("ns/b") == []


def test_a_vanished_record_back_in_the_cache_is_its_address_s_owner_again() -> None:
    w = World()
    pn = record("a", "10.0.0.1")
    w.ledger.seen(pn)
    w.ledger.gone(pn)
    w.ledger.back_in_cache(pn.key)
    assert not w.ledger.any_vanished
    assert held(w, OVERLAY, "10.0.0.1") == "ns/a"
    w.ledger.gone(pn)
    w.ledger.settle_vanished(pn, served=True, cooldown_until=0.0)
    assert not w.ledger.any_vanished and held(w, OVERLAY, "10.0.0.1") is None


def test_a_retry_that_takes_the_record_s_own_address_again_never_frees_it() -> None:
    """An earlier write whose answer was lost may have named the address: the retry's
    rollback leaves it with the record."""
    w = World()
    pool = w.pool("10.0.0.1", "10.0.0.2")
    first = w.ledger.reserve(pool, "ns/a", 0.0)
    assert first.take().address == "10.0.0.1"
    retry = w.ledger.reserve(pool, "ns/a", 1.0, prefer="10.0.0.1")
    assert retry.take().address == "10.0.0.1", "its own address first"
    retry.rollback()
    assert pool.owner_of("10.0.0.1") == "ns/a"


def test_an_inventory_read_again_counts_what_the_node_s_records_name() -> None:
    """GC's resync: what a record of the node names (of the pool's provider; IPv6 only on
    a dual-stack node) is its own, the rest is a suspect."""
    w = World()
    pool = w.pool()
    w.add(record("a", "10.0.0.1", ipv6="fd00::1", provider=POOLED),
          record("b", "10.0.0.2", provider=OVERLAY),
          record("c", "10.0.0.3", provider=POOLED, node="n1"))
    assert w.ledger.named_on(pool) == {"10.0.0.1": "ns/a"}
    pool.dual_stack = True
    assert w.ledger.named_on(pool) == {"10.0.0.1": "ns/a", "fd00::1": "ns/a"}
