"""The address ledger: the one place that decides who holds a pod address.

Two books say who holds what: the :class:`~podnet.core.ownership.AddressBook` (every
provider: address -> the PodNetwork holding it, decided under a lock before any record
names it) and the node pools (a node-pool provider's addresses on each node, rebuilt from
the cloud's inventory). The controllers never change either to settle ownership; they ask
the ledger, which offers a few verbs:

- :meth:`Ledger.claim` makes an allocation a record's before the record is written, and
  returns the :class:`Claim` that undoes it when the write fails for certain;
  :meth:`Ledger.recorded` settles it once a write naming it landed;
- :meth:`Ledger.give_back` and :meth:`Ledger.settle_vanished` give a record's addresses
  back (its release, or a record removed without one);
- :meth:`Ledger.problem` says what is wrong with a record's claim (a conflict, an address
  the cloud lost, one its node's pool holds for another or idle), and
  :meth:`Ledger.readdressed` forgets it once the record let its address go.

Each rule of ownership lives in one named method:

- the first claim holds (:meth:`Ledger.first_claim`): the book refuses the second of two
  racing claimants, whatever the caches show;
- a node pool's owner decides for a node-pool provider (:meth:`Ledger.pool_backs`,
  :meth:`Ledger.pool_disagrees`): the pool is rebuilt from the node's cloud inventory;
- the provider's verify decides for the others (:meth:`Ledger.provider_backs`,
  :meth:`Ledger.provider_disowns`): its dataplane carries the address for one record;
- after a restart two records naming one address on a node: those whose seal says podnet
  gave them the addresses they name (:func:`address_seal`) over those it does not know
  of, over those whose seal a hand edit broke; among them the owner the last recorded
  pool names, else the first whose dual-stack pair the recorded pool does not
  contradict, else the first listed (:meth:`Ledger.rebuild_owner`);
- an address the pool thought idle but the book gives to another is held off
  (:meth:`Ledger.hold_off`) until the holder's pass settled who owns it.

The ledger reads the records and asks the provider only through what it is given (a
record lookup, which providers use node pools, the provider's verify), and wakes a record
whose claim it moved through ``wake``: it takes no controller.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from podnet.core.annotations import IP_ADDRESS, annotation_field
from podnet.core.caches import Caches, pod_key_of
from podnet.core.errors import ErrorKind, PodnetError, ProviderError
from podnet.core.gateway import ProviderGateway
from podnet.core.models import Phase, PodNetwork
from podnet.core.ownership import Ownership
from podnet.core.pool import NodePool, Pools, Reservation
from podnet.hookspecs.types import Allocation, PodNetworkContext

log = logging.getLogger("podnet.podnetwork")


class ProblemKind(enum.Enum):
    #: the book gives the record's address to another record
    CONFLICT = "conflict"
    #: the record's node pool holds its address for another record
    HELD_IN_POOL = "held-in-pool"
    #: the record's address is idle in its node's pool
    IDLE_IN_POOL = "idle-in-pool"
    #: the cloud no longer has the record's address (reported by an inventory)
    LOST = "lost"
    #: the record's node does not have its address
    NOT_ON_NODE = "not-on-node"


@attrs.frozen
class Problem:
    """What is wrong with a record's claim: the address, who holds it instead (if
    anyone), the node (a pool's problem), and the address to hand it first when it gets
    one again."""

    kind: ProblemKind
    address: str
    holder: str | None = None
    node: str | None = None
    prefer: str | None = None

    @property
    def lost(self) -> bool:
        return self.kind in (ProblemKind.LOST, ProblemKind.NOT_ON_NODE)


@attrs.frozen
class Claim:
    """What undoes a claim: run (last first) when no write named it for certain."""

    steps: tuple[Callable[[], object], ...] = ()

    def undo(self) -> None:
        for step in reversed(self.steps):
            step()


NOTHING_CLAIMED = Claim()


class Ledger:
    """Who holds each pod address. Takes the address book and what it knows beside it
    (``owned``), the node pools, the lost addresses the inventories reported (record key
    -> address), and what it asks outside: ``record`` (a record by key, as the caches have
    it), ``node_pool`` (whether a provider allocates from node pools), ``verify`` (the
    provider's verify of a routed record: True, False, or None when it cannot tell),
    ``young`` (whether a record changed too recently for the cloud to show its address),
    ``wake`` (look at a record's pod again: its claim moved) and ``on_node`` (the records
    of a node, as the caches have them)."""

    def __init__(self, *, owned: Ownership, pools: Pools, lost: dict[str, str],
                 record: Callable[[str], PodNetwork | None],
                 node_pool: Callable[[str], bool],
                 verify: Callable[[PodNetwork, str], bool | None],
                 young: Callable[[PodNetwork], bool],
                 wake: Callable[[str], None],
                 on_node: Callable[[str], Iterable[PodNetwork]] = lambda _node: ()) -> None:
        self.owned = owned
        self.pools = pools
        self.lost = lost
        self._record = record
        self._node_pool = node_pool
        self._verify = verify
        self._young = young
        self._wake = wake
        self._on_node = on_node

    # --- claim ------------------------------------------------------------------------

    def seen(self, pn: PodNetwork) -> str | None:
        """A record was seen (a watch event, a re-list): every address it names is its
        own in the book, unless the first claim went to another record; then the
        conflict is kept and the holder's key returned (the caller wakes it: it may be
        the one to re-address)."""
        return self.owned.recorded(pn)

    def gone(self, pn: PodNetwork) -> None:
        """A record left the cache: see :meth:`Ownership.gone`."""
        self.owned.gone(pn)

    def reserve(self, pool: NodePool, key: str, now: float, prefer: str | None = None,
                refuse: Callable[[str], bool] | None = None) -> Reservation:
        """The pool's view a provider allocates from for record ``key``: at most one
        address (none that ``refuse`` names), held until the claim is recorded or rolled
        back."""
        return pool.reserve(key, now, prefer=prefer, refuse=refuse)

    def claim(self, pn: PodNetwork, allocation: Allocation, reservation: Reservation | None,
              *, hold_off_until: Callable[[], float]) -> Claim:
        """Make ``allocation`` record ``pn``'s before the record is written: in the book
        (every provider) and in the node's pool (a static address the provider chose
        itself is not the reservation's). The second of two racing records is refused
        here, by a lock, not by a cache that may not have seen the first record yet.

        :param hold_off_until: until when an address the pool thought idle, but the book
            gives to another record, is not handed out again (asked only then).
        :raises ProviderError: ``CONFLICT`` naming the holder (nothing stays claimed).
        :return: what undoes the claims if the write fails for certain."""
        provider, key = pn.spec.provider, pn.key
        book = self.owned.addresses
        fresh = [a for a in (allocation.ip, allocation.ipv6)
                 if a and book.holder(provider, a) != key]
        taken = self.first_claim(provider, fresh, key)
        if taken is not None and self.provider_disowns(taken[1], taken[0]):
            # the book's holder names an address its provider does not give it (a hand
            # edit the book took from the records at a restart), and the provider gave it
            # to this record: the address follows the provider, the holder is re-addressed
            book.release(provider, taken[0], taken[1])
            self.owned.conflicts[taken[1]] = (taken[0], key)
            self._wake(taken[1])
            taken = self.first_claim(provider, fresh, key)
        if taken is not None:
            self._wake(taken[1])  # it may be the one to re-address
            if reservation is not None and reservation.taken == taken[0]:
                self.hold_off(self.pools.get(provider, pn.spec.node_name), taken[0],
                              hold_off_until())
            raise ProviderError(ErrorKind.CONFLICT, f"address {taken[0]} is already held by "
                                f"{taken[1]}", field=blamed_field(pn, taken[0]))
        steps: list[Callable[[], object]] = [
            functools.partial(book.release, provider, a, key) for a in fresh]
        if reservation is not None and allocation.ip != reservation.taken:
            pool = self.pools.get(provider, pn.spec.node_name)
            other, added = pool.claim(allocation.ip, key, allocation.interface,
                                      allocation.subnet)
            if other is not None:
                Claim(tuple(steps)).undo()
                raise ProviderError(ErrorKind.CONFLICT, f"address {allocation.ip} is already "
                                    f"held by {other} on node {pn.spec.node_name}",
                                    field=blamed_field(pn, allocation.ip))
            ip = allocation.ip
            steps.append(lambda: pool.unclaim(ip, key, added))
        return Claim(tuple(steps))

    def first_claim(self, provider: str, addresses: Iterable[str | None], key: str
                    ) -> tuple[str, str] | None:
        """Rule: the first claim holds. Every address or none goes to ``key``.
        :return: None, or (an address, the record holding it already)."""
        return self.owned.addresses.claim_all(provider, addresses, key)

    def hold_off(self, pool: NodePool, address: str, until: float) -> None:
        """Rule: an address the pool thought idle while the book gives it to another
        record is not handed out again until the holder's pass has settled who owns it."""
        pool.hold_off(address, until)

    def recorded(self, pn: PodNetwork, reservation: Reservation | None) -> None:
        """A write naming ``pn``'s allocation landed: what earlier, unanswered writes
        held for the record is free, and the pool knows the address the record names."""
        key = pn.key
        self.owned.addresses.release_owner(key, keep=(a for a in (pn.status.ip,
                                                                  pn.status.ipv6) if a))
        if reservation is None:
            return
        pool = self.pools.get(pn.spec.provider, pn.spec.node_name)
        pool.stop_waiting(key)
        pool.release_others(key, keep=pn.status.ip, keep6=pn.status.ipv6)
        if pn.status.ip and reservation.taken != pn.status.ip:
            # the provider chose without the pool (a static address it added itself)
            reservation.rollback()
            pool.adopt(pn.status.ip, key, pn.status.interface, pn.status.subnet,
                       ipv6=pn.status.ipv6)

    # --- give back --------------------------------------------------------------------

    def give_back(self, pn: PodNetwork, *, to_pool: bool, cooldown_until: float) -> bool:
        """Record ``pn`` is released: it waits for nothing, its address goes back to its
        node's pool (``to_pool``: the provider did not keep it), out of everyone's reach
        until ``cooldown_until``, and the book forgets everything it held.
        :return: whether its node's pool took an address back (its pass trims or serves)."""
        self.lost.pop(pn.key, None)
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if pool is not None:
            pool.stop_waiting(pn.key)
        back = bool(to_pool and pool is not None and pn.status.ip
                    and pool.give_back(pn.status.ip, pn.key, cooldown_until))
        if to_pool and pool is not None and pn.status.ipv6 and pool.give_back(
                pn.status.ipv6, pn.key, cooldown_until):
            back = True  # the IPv6 half the pool held for it after the cloud lost the IPv4

        self.owned.addresses.release_owner(pn.key)
        return back

    def removing(self, key: str) -> None:
        """Podnet itself removes record ``key`` (its release's last step): the cache's
        delete is ours, and the address goes back by :meth:`give_back`."""
        self.owned.finishing.add(key)

    def removed(self, key: str) -> None:
        """Record ``key``'s removal is over (done, or failed: it is retried)."""
        self.owned.finishing.discard(key)

    @property
    def any_vanished(self) -> bool:
        """Whether any record left the cache without podnet removing them (rare: a
        finalizer taken off by hand)."""
        return bool(self.owned.vanished)

    def vanished_of(self, pod_key: str) -> list[PodNetwork]:
        """The records of pod ``pod_key`` that left the cache without podnet removing
        them, not settled yet."""
        return [pn for pn in list(self.owned.vanished.values()) if pod_key_of(pn) == pod_key]

    def back_in_cache(self, key: str) -> None:
        """A vanished record is back in the cache (a re-list): its owner again."""
        self.owned.vanished.pop(key, None)

    def settle_vanished(self, pn: PodNetwork, *, served: bool, cooldown_until: float
                        ) -> list[str]:
        """Record ``pn`` is gone without its release (its finalizer taken off by hand):
        nothing may stay owned by a record that is gone. The book forgets it, and its
        node's pool (``served``: its provider is configured here) takes back what it held.
        :return: the addresses back in the pool."""
        key = pn.key
        self.owned.vanished.pop(key, None)
        held = self.owned.addresses.release_owner(key)
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if pool is None or not served:
            return []
        pool.stop_waiting(key)
        return [a for _, a in held if pool.give_back(a, key, cooldown_until)]

    def left_node(self, pool: NodePool, *, everyone: bool = False) -> None:
        """Rule, for a node that left (``everyone``: a machine that no longer runs under
        the node's name): an owner that is gone owns nothing in its pool. It gave back
        what it could (its ``status.ip``; one that finished while the pool was read, or
        whose address was edited to another's, gave back nothing), and no new record
        comes for a node that left, so nothing else would."""
        pool.release_owners(lambda owner: everyone or self._record(owner) is None)

    def named_on(self, pool: NodePool) -> dict[str, str]:
        """Rule, when a node's inventory is read again (GC): an address of the pool's
        provider that a record of the node names is that record's (IPv4, and IPv6 on a
        dual-stack node); one nobody names is a suspect, and one a record names that the
        cloud no longer has is lost. :return: address -> the record naming it."""
        out: dict[str, str] = {}
        for pn in self._on_node(pool.node):
            if pn.spec.provider != pool.provider:
                continue
            if pn.status.ip:
                out[pn.status.ip] = pn.key
            if pn.status.ipv6 and pool.dual_stack:
                out[pn.status.ipv6] = pn.key
        return out

    # --- what is wrong with a claim ---------------------------------------------------

    def problem(self, pn: PodNetwork) -> Problem | None:
        """Why the record's address cannot stay its own (an allocated or routed record),
        or None. A conflict the provider settles for this record moves the book's claim
        to it, and the other record is the one with the problem (it is woken)."""
        conflict = self.owned.conflicts.get(pn.key)
        if conflict is not None:
            address, holder = conflict
            if self.owned.addresses.holder(pn.spec.provider, address) == pn.key:
                self.owned.conflicts.pop(pn.key, None)  # settled meanwhile: the record holds it
                return None
            if self.backs(pn.key, address) and not self.backs(holder, address):
                # the provider's own state (a node pool rebuilt from its cloud inventory,
                # or the provider's dataplane) gives it to this record, not to the book's
                # holder (which claimed it first after a restart): the book follows the
                # provider, and the other record is the one re-addressed
                self.owned.addresses.release(pn.spec.provider, address, holder)
                self.owned.addresses.claim(pn.spec.provider, address, pn.key)
                self.owned.conflicts.pop(pn.key, None)
                self.owned.conflicts[holder] = (address, pn.key)
                self._wake(holder)
                return None
            return Problem(ProblemKind.CONFLICT, address, holder,
                           prefer=self.held_elsewhere(pn))
        lost = self.lost.get(pn.key)
        if lost is not None:
            if lost != pn.status.ip:
                del self.lost[pn.key]
                return None
            return Problem(ProblemKind.LOST, lost, prefer=lost)
        stray = self.pool_disagrees(pn)
        if stray is not None:
            return attrs.evolve(stray, prefer=self.held_elsewhere(pn) or pn.status.ip)
        return None

    def held_elsewhere(self, pn: PodNetwork) -> str | None:
        """An address the book holds for this record other than the one it names (the
        one podnet gave it, before a hand edit): handed to it first when re-addressed."""
        mine = sorted(a for p, a in self.owned.addresses.held_by(pn.key)
                      if p == pn.spec.provider and a not in (pn.status.ip, pn.status.ipv6))
        return mine[0] if mine else None

    def pool_disagrees(self, pn: PodNetwork) -> Problem | None:
        """Rule: a node's pool owner decides for a node-pool provider. What is wrong when
        the record's address is not the one its node's synced pool gave it (the pool is
        built from the node's cloud inventory): another record's or an idle one is a
        conflict; one the node's cloud does not have (any more) is lost."""
        ip = pn.status.ip
        if not ip or not self._node_pool(pn.spec.provider):
            return None
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if pool is None or not pool.synced:
            return None
        owner = pool.owner_of(ip)
        node = pn.spec.node_name
        if owner == pn.key:
            return None
        if owner is not None:
            return Problem(ProblemKind.HELD_IN_POOL, ip, owner, node)
        if ip in pool.addresses:
            return Problem(ProblemKind.IDLE_IN_POOL, ip, None, node)
        if self._young(pn):
            return None  # the cloud may not show a new address yet
        return Problem(ProblemKind.NOT_ON_NODE, ip, None, node)

    def backs(self, key: str, address: str) -> bool:
        """Whether the provider's own state gives ``address`` to record ``key``: its
        synced node pool for a node-pool provider, else the provider's verify. Asked
        only when two records name one address, so the provider call is rare."""
        if self._uses_node_pool(key):
            return self.pool_backs(key, address)
        return self.provider_backs(key, address)

    def pool_backs(self, key: str, address: str) -> bool:
        """Rule: record ``key``'s node pool (a node-pool provider's, synced) holds
        ``address`` for it."""
        pn = self._record(key)
        if pn is None or not self._node_pool(pn.spec.provider):
            return False
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        return pool is not None and pool.synced and pool.owner_of(address) == key

    def provider_backs(self, key: str, address: str) -> bool:
        """Rule: the provider's verify of routed record ``key`` says its dataplane
        carries ``address``."""
        return self._verified(key, address) is True

    def provider_disowns(self, key: str, address: str) -> bool:
        """Rule: the provider says for certain that record ``key`` does not have
        ``address``: a routed record (not a node pool's, whose pool decides) naming it,
        whose verify answers that its dataplane differs. Unsure (no record, not routed,
        verify failing or silent): not disowned, so a live pod's address never moves."""
        return not self._uses_node_pool(key) and self._verified(key, address) is False

    @staticmethod
    def rebuild_owner(named: Sequence[PodNetwork], recorded_owner: str | None,
                      recorded_pairs: Mapping[str, str] | None = None) -> PodNetwork:
        """Rule, when a node's pool is rebuilt (after a restart) and several records name
        one of its addresses (a hand edit): first the records whose seal says podnet gave
        them the addresses they name, else those without a seal (an older podnet's: no
        evidence either way), else the rest (:func:`sealed`; written with the address, so
        it never lags). Among them the owner the last recorded pool names (only a pool an
        older podnet wrote names owners); else the first listed
        of those whose pair the last recorded pool does not contradict
        (``recorded_pairs``: IPv6 -> the IPv4 it was paired with; a hand edit of
        ``status.ip`` leaves the record's IPv6 beside an IPv4 it was never paired with);
        else the first listed."""
        if len(named) == 1:
            return named[0]  # the common case: no tie, no digest (a restart: every address)
        ranks = [_SEAL_RANK[sealed(pn)] for pn in named]
        best = min(ranks)
        named = [pn for pn, rank in zip(named, ranks, strict=True) if rank == best]
        listed = next((pn for pn in named if pn.key == recorded_owner), None)
        if listed is not None:
            return listed
        if recorded_pairs:
            for pn in named:
                paired = recorded_pairs.get(pn.status.ipv6 or "")
                if paired is None or paired == pn.status.ip:
                    return pn
        return named[0]

    def _uses_node_pool(self, key: str) -> bool:
        pn = self._record(key)
        return pn is not None and self._node_pool(pn.spec.provider)

    def _verified(self, key: str, address: str) -> bool | None:
        pn = self._record(key)
        if pn is None:
            return None
        if address not in (pn.status.ip, pn.status.ipv6) or pn.status.phase is not Phase.ROUTED:
            return None
        return self._verify(pn, address)

    # --- after a record let its address go --------------------------------------------

    def conflict(self, key: str) -> tuple[str, str] | None:
        """The conflict record ``key`` is in: (its address, the record holding it)."""
        return self.owned.conflicts.get(key)

    def readdressed(self, pn: PodNetwork) -> None:
        """Record ``pn`` was written back to Pending, its address let go: its conflict is
        over, and an address the cloud lost leaves the book and its pool (it is added
        again if it comes back)."""
        self.owned.conflicts.pop(pn.key, None)
        lost = self.lost.pop(pn.key, None)
        if lost is not None:
            self.owned.addresses.release(pn.spec.provider, lost, pn.key)
            pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
            if pool is not None:
                pool.forget_lost(lost, pn.key)


def address_seal(uid: str | None, ip: str | None, ipv6: str | None) -> str | None:
    """The seal podnet writes with the addresses it gives a record (``status.addressSeal``,
    in the same write): 12 hex digits of a digest of the record's uid and the addresses.
    A hand edit of the addresses leaves it naming the old ones, and a seal copied from
    another record names that record's uid. None with no address."""
    if not ip and not ipv6:
        return None
    text = f"{uid or ''} {ip or ''} {ipv6 or ''}".encode()
    return hashlib.blake2b(text, digest_size=6).hexdigest()


def sealed(pn: PodNetwork) -> bool | None:
    """Whether podnet gave the record the addresses it names, as its seal says: True, False
    (its addresses were edited since), or None (no seal: a record an older podnet wrote
    the addresses of)."""
    seal = pn.status.address_seal
    if seal is None:
        return None
    return seal == address_seal(pn.metadata.uid, pn.status.ip, pn.status.ipv6)


#: the tie-break's order: what the seal proves, then what it cannot tell, then what it
#: disproves
_SEAL_RANK: dict[bool | None, int] = {True: 0, None: 1, False: 2}


def provider_verify(gateway: ProviderGateway, caches: Caches, served: Callable[[str], bool]
                    ) -> Callable[[PodNetwork, str], bool | None]:
    """The ledger's ``verify``: the provider's verify of a routed record naming an
    address, True (its dataplane carries it), False (it differs), None (its provider is
    not served here, or the verify failed or said nothing)."""
    def verify(pn: PodNetwork, address: str) -> bool | None:
        if not served(pn.spec.provider):
            return None
        ctx = PodNetworkContext(pod_network=pn, node=caches.node_context(pn.spec.node_name))
        try:
            verdict = gateway.verify(pn.spec.provider, ctx)
        except (PodnetError, ProviderError) as exc:
            log.info("cannot tell whether %s holds %s: %s", pn.key, address, exc)
            return None
        return None if verdict is None else verdict.ok

    return verify


def blamed_field(pn: PodNetwork, address: str) -> str:
    """The field to blame for an address already held: the pod's static request when it
    named that address, else the provider's answer."""
    wanted = pn.spec.requests.ip_address or ""
    return annotation_field(IP_ADDRESS) if address in wanted.split(",") else "allocate.ip"
