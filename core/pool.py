"""Per-node address pools: which addresses a node holds, who owns each, which are idle.

Pools are in-memory bookkeeping, rebuilt on every start from the provider's inventory
(what exists) and the records (who owns what): a crash loses nothing that matters. The
engine commits an address to a pod network only after the record naming it is written;
an address returns to the pool only after the record releasing it is gone.

Providers see a pool only through :class:`Reservation` (the ``PoolView`` protocol) during
``podnet_allocate``; the helpers here are public for them.

A pool decides its own changes: the node pool reconciler asks it for a plan (``plan_grow``,
``plan_shrink``, ...), makes the provider call the plan names, and tells the pool the
outcome (``grew``, ``grow_failed``, ``shrunk``, ...). Nothing outside this module changes a
pool's fields.

Why this module is over 800 lines: it is that rule. ``NodePool`` and the ``Reservation``
providers allocate through are one set of fields under one lock (an address's owner, its
cooldown, the waiters' order, the interfaces' states); split across modules, each part
would change the others' fields. Who may hold an address is not decided here but in
:mod:`podnet.core.ledger`, which asks a pool and tells it the outcome.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import math
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime

import attrs

from podnet.core.annotations import ipv4_int
from podnet.core.errors import ErrorKind, PoolEmpty
from podnet.core.models import InterfaceState, InterfaceStatus
from podnet.core.policy import PoolPolicy
from podnet.hookspecs.types import CloudInterface, Inventory, PoolEntry

#: owner of an address while a shrink call deletes it: out of the pool, owned by nobody
SHRINKING = "podnet:shrinking"


@attrs.define
class Address:
    address: str
    interface: str | None = None
    subnet: str | None = None
    #: ``namespace/name`` of the PodNetwork owning it; None when idle (``owner``)
    _owner: str | None = None
    #: monotonic time before which an idle address is not handed out again
    cooldown_until: float = 0.0
    #: monotonic time it joined the pool (0: before this process started)
    added_at: float = 0.0
    #: the IPv6 half of the pair (dual-stack pools only)
    ipv6: str | None = None
    #: an invalid half of a dual-stack pair (``address`` of either family): never handed
    #: out, given back by the next shrink
    half: bool = False
    #: the owner index of the pool map holding it (``AddressMap``): told of each owner set
    _index: dict[str, set[str]] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def owner(self) -> str | None:
        return self._owner

    @owner.setter
    def owner(self, owner: str | None) -> None:
        self._owner = owner
        if owner is not None and self._index is not None:
            self._index.setdefault(owner, set()).add(self.address)

    def entry(self) -> PoolEntry:
        return PoolEntry(self.address, self.interface, self.subnet, self.ipv6)


class AddressMap(dict[str, Address]):
    """A pool's addresses by address, with an index of what each owner may hold: every
    address ever owned by it while in the map (a superset; readers check the entry), so
    finding an owner's addresses costs no scan of the pool."""

    def __init__(self) -> None:
        super().__init__()
        self.by_owner: dict[str, set[str]] = {}

    def __setitem__(self, ip: str, entry: Address) -> None:
        entry._index = self.by_owner
        if entry.owner is not None:
            self.by_owner.setdefault(entry.owner, set()).add(ip)
        super().__setitem__(ip, entry)

    def held_by(self, owner: str) -> list[Address]:
        """The addresses ``owner`` holds now (and forgets the ones it no longer does)."""
        ips = self.by_owner.get(owner)
        if not ips:
            return []
        held = [a for ip in ips if (a := self.get(ip)) is not None and a.owner == owner]
        if len(held) != len(ips):
            if held:
                self.by_owner[owner] = {a.address for a in held}
            else:
                del self.by_owner[owner]
        return held


@attrs.define
class Interface:
    id: str
    state: InterfaceState = InterfaceState.READY
    mac: str | None = None
    subnet: str | None = None
    primary: bool = False
    trunk: bool = False
    inhibited_until: float = 0.0
    #: why it was inhibited, for the conditions of the pod networks waiting on it
    reason: str | None = None
    #: False: holds no pod address, never counted, grown on or disposed
    pooled: bool = True

    def cloud(self, ips: Iterable[str] = (), ipv6: Iterable[str] = ()) -> CloudInterface:
        return CloudInterface(
            id=self.id, mac=self.mac, subnet=self.subnet, primary=self.primary,
            trunk=self.trunk, ips=tuple(ips), pooled=self.pooled, ipv6=tuple(ipv6),
        )


class DeferReason(enum.Enum):
    """Why a pool makes no grow or shrink call now."""

    #: nothing is short (grow) or in excess (shrink)
    NOTHING_TO_DO = "nothing to do"
    #: the node holds all the addresses it can
    AT_CAPACITY = "at capacity"
    #: a grow failed lately: not again before its backoff ends
    BACKOFF = "backoff"
    #: fewer pod networks wait than one call serves: more demand is gathered first
    WINDOW = "aggregation window"
    #: only addresses too young to give back are in excess
    TOO_YOUNG = "too young"


@attrs.frozen
class Deferred:
    """A plan to make no call now."""

    reason: DeferReason
    #: seconds until planning again is worth it; None: only once something changes
    retry_after: float | None = None
    #: what keeps the pool from serving (its ``last_error`` once recorded)
    problem: str | None = None
    #: nothing is short: the pod networks waiting, to be woken (the idle addresses are
    #: theirs to take)
    waiting: Mapping[str, str | None] = attrs.field(factory=dict)


@attrs.frozen
class GrowPlan:
    """One grow call: how many addresses, in which subnet, on which interface."""

    count: int
    #: addresses short in all: a call that brings fewer is followed by another at once
    need: int
    subnet: str | None
    #: the interface to add to; None: a new one (``new_interface``) or the provider's choice
    interface: Interface | None
    new_interface: bool
    #: the pod networks waiting when it was planned: woken once the addresses are in
    waiting: Mapping[str, str | None]
    #: every interface slot is taken: why the new interface cannot be made. The reconciler
    #: records it only once it took the call's token, as a call would
    no_interface: str | None = None


@attrs.frozen
class GrowRetry:
    """What a failed grow leads to."""

    #: seconds before the next grow; None: throttled, retried after a short jittered wait
    after: float | None
    #: the ready interface the quota or exhaustion is on, to inhibit for ``inhibit_for``
    inhibit: Interface | None = None
    inhibit_for: float = 0.0
    #: the pool backs off: the pod networks waiting on it record why
    backed_off: bool = False


@attrs.frozen
class ShrinkPlan:
    """One shrink call: the addresses it gives back."""

    #: invalid halves first, then idle addresses beyond ``max_idle``, at most a batch
    victims: tuple[Address, ...]
    #: addresses to give back in all (halves included)
    excess: int

    @property
    def leaves_excess(self) -> bool:
        """More is in excess than one call gives back: another call follows at once."""
        return self.excess > len(self.victims)


def _is_v6(address: str) -> bool:
    return ":" in address


@functools.lru_cache(maxsize=1024)
def _network(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    # a node's few subnets, parsed once rather than on every allocation's check
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


@functools.lru_cache(maxsize=1024)
def _v4_bounds(cidr: str) -> tuple[int, int] | None:
    """An IPv4 subnet's network and broadcast addresses as integers, when it has more
    than two addresses (a /31 or /32 reserves neither); None otherwise."""
    net = _network(cidr)
    if net is None or net.version != 4 or net.num_addresses <= 2:
        return None
    return int(net.network_address), int(net.broadcast_address)


def reserved_reason(address: str, cidr: str | None, gateway: str | None = None) -> str | None:
    """Why ``address`` can never be a pod's in subnet ``cidr`` (its network or broadcast
    address, or its gateway), or None. Providers check a static request with it before
    any cloud call; core checks every allocation with it again."""
    v4 = ipv4_int(address)
    if v4 is not None:  # the common case, without address objects
        if gateway and address == gateway:
            return f"{address} is the subnet's gateway"
        if not cidr:
            return None
        bounds = _v4_bounds(cidr)
        if bounds is None:
            return None
        if v4 == bounds[0]:
            return f"{address} is the network address of {_network(cidr)}"
        if v4 == bounds[1]:
            return f"{address} is the broadcast address of {_network(cidr)}"
        return None
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return f"{address} is not an IP address"
    if gateway and address == gateway:
        return f"{address} is the subnet's gateway"
    if not cidr:
        return None
    net = _network(cidr)
    if net is None:
        return None
    if ip.version != net.version or ip not in net:
        return None
    if net.num_addresses > 2 and ip == net.network_address:
        return f"{address} is the network address of {net}"
    if net.version == 4 and net.num_addresses > 2 and ip == net.broadcast_address:
        return f"{address} is the broadcast address of {net}"
    return None


class NodePool:
    """One node's addresses for one provider. Thread-safe; cheap to query."""

    def __init__(self, node: str, provider: str) -> None:
        self.node = node
        self.provider = provider
        self.lock = threading.RLock()
        self.addresses = AddressMap()
        #: addresses that may be idle, in the order to hand them out (new ones, then
        #: released ones at the back): spares each allocation a scan past every owned
        #: address. Only a hint: what it misses, a full scan finds.
        self._idle_order: dict[str, None] = {}
        self.interfaces: dict[str, Interface] = {}
        self.max_interfaces = 1
        self.ips_per_interface = 0
        #: every pod address is an IPv4/IPv6 pair (``Inventory.dual_stack``)
        self.dual_stack = False
        self.synced = False
        #: monotonic time of the last inventory read (rebuild or GC resync)
        self.inventory_at = 0.0
        #: PodNetwork keys waiting for an address on this node, with the subnet they need,
        #: in the order they arrived
        self.waiting: dict[str, str | None] = {}
        self.waiting_since: float | None = None
        #: when each waiting key started waiting (monotonic)
        self._waiting_from: dict[str, float] = {}
        #: the waiting keys whose request any idle address of theirs serves (no static
        #: address), in arrival order: each is served before those behind it
        self._queued: dict[str, None] = {}
        #: addresses the cloud has that nobody owns and no pool record holds: first seen
        self.suspects: dict[str, float] = {}
        #: addresses a grow brought that the pool held already (a record's the cloud lost
        #: and handed out again before the record let it go): the pool's, not lost
        self._returned: set[str] = set()
        #: batch policy state (halved on quota errors, reset on success)
        self.batch: int = 0
        self.grow_failures = 0
        self.grow_blocked_until = 0.0
        self.last_error: str | None = None
        #: ``last_error`` is a limit a plan said (:meth:`cannot_grow`), not a failed call
        self.blocked = False

    # --- queries ----------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        return self.max_interfaces * self.ips_per_interface

    def total(self) -> int:
        """Addresses counted against capacity (an IPv6 half takes no IPv4 slot)."""
        return sum(1 for a in self.addresses.values() if not (a.half and _is_v6(a.address)))

    def pooled_interfaces(self) -> list[Interface]:
        """The interfaces counted against ``max_interfaces`` (not ``pooled=False`` ones)."""
        return [i for i in self.interfaces.values() if i.pooled]

    def owned(self) -> int:
        return sum(1 for a in self.addresses.values() if a.owner is not None)

    def idle_addresses(self, now: float, subnet: str | None = None) -> list[Address]:
        """Idle addresses ready to hand out: not in cooldown, interface not disposing."""
        return [a for a in self.addresses.values()
                if a.owner is None and not a.half and self._ready(a, now, subnet)]

    def _ready(self, a: Address, now: float, subnet: str | None) -> bool:
        if a.cooldown_until > now or (subnet is not None and a.subnet != subnet):
            return False
        itf = self.interfaces.get(a.interface) if a.interface else None
        return itf is None or itf.state is not InterfaceState.DISPOSING

    def first_idle(self, now: float, subnet: str | None = None,
                   refuse: Callable[[str], bool] | None = None) -> Address | None:
        """The idle address to hand out next (the first of ``idle_addresses`` in the
        hint's order, none that ``refuse`` names), or None."""
        order = self._idle_order
        stale = []
        found = None
        for ip in order:
            a = self.addresses.get(ip)
            if a is None or a.owner is not None or a.half:
                stale.append(ip)  # taken or gone: back in the hint when released
            elif self._ready(a, now, subnet) and not (refuse is not None and refuse(ip)):
                found = a
                break
        for ip in stale:
            del order[ip]
        if found is None:
            # one the hint missed
            idle = [a for a in self.idle_addresses(now, subnet)
                    if refuse is None or not refuse(a.address)]
            found = idle[0] if idle else None
        return found

    def _released(self, address: str) -> None:
        self._idle_order.pop(address, None)
        self._idle_order[address] = None

    def idle_count(self) -> int:
        return sum(1 for a in self.addresses.values() if a.owner is None and not a.half)

    def halves(self) -> list[Address]:
        """Invalid halves waiting to be given back (not being given back already)."""
        return [a for a in self.addresses.values() if a.half and a.owner is None]

    def owner_of(self, address: str) -> str | None:
        entry = self.addresses.get(address)
        return entry.owner if entry else None

    def ips_on(self, interface: str) -> list[str]:
        """Every address the pool holds on ``interface``, halves of either family too."""
        return [a.address for a in self.addresses.values() if a.interface == interface]

    def ipv4_on(self, interface: str) -> list[str]:
        return [a.address for a in self.addresses.values()
                if a.interface == interface and not _is_v6(a.address)]

    def ipv6_on(self, interface: str) -> list[str]:
        return [a.ipv6 or a.address for a in self.addresses.values()
                if a.interface == interface and (a.ipv6 or _is_v6(a.address))]

    # --- changes ----------------------------------------------------------------------

    def rebuild(
        self, inventory: Inventory, owners: dict[str, str], pooled: set[str], now: float,
        pairs: Mapping[str, str] | None = None, held6: Collection[str] = (),
        owned6: Mapping[str, str] | None = None, cooling: Collection[str] = (),
        cooling_until: float = 0.0,
    ) -> list[str]:
        """Replace the pool with ``inventory``; owners from the records.

        Addresses the cloud has that no record owns and the last recorded pool did not
        hold become suspects, not idle: whoever added them, podnet must not hand them out
        until GC decides. :return: record owners whose address the cloud lacks.

        ``cooling``: addresses of ``pooled`` new to this pool that are idle only from
        monotonic time ``cooling_until`` (those of an interface podnet made that the last
        recorded pool does not list: a record removed by hand may have named one).

        On a dual-stack node each interface's IPv4 and IPv6 addresses are paired: as
        ``pairs`` (IPv4 -> IPv6: the pod network records', then the last recorded
        pool's) says, else as this pool had them, else the idle ones in order. An address
        podnet knows that is left without its partner is an invalid half (given back by
        the next shrink), unless a record owns it; an IPv6 address a record names is
        never paired with another address or given back. ``held6`` are IPv6 addresses
        records name whose IPv4 half another record holds: suspects (GC leaves an
        address a record names alone), paired with nothing. ``owned6`` (IPv6 -> the
        record naming it) are such halves held in the pool for their record instead, as
        a node that left needs them: no GC looks at its suspects again, and the half goes
        back with its record (its release, or the leave's once the record is gone).
        """
        pairs = pairs or {}
        owned6 = owned6 or {}
        with self.lock:
            self.max_interfaces = inventory.max_interfaces
            self.ips_per_interface = inventory.ips_per_interface
            self.dual_stack = inventory.dual_stack
            old_interfaces = self.interfaces
            self.interfaces = {}
            for itf in inventory.interfaces:
                prev = old_interfaces.get(itf.id)
                self.interfaces[itf.id] = Interface(
                    id=itf.id, mac=itf.mac, subnet=itf.subnet, primary=itf.primary,
                    trunk=itf.trunk, pooled=itf.pooled,
                    state=prev.state if prev else InterfaceState.READY,
                    inhibited_until=prev.inhibited_until if prev else 0.0,
                )
            self._returned.clear()  # the inventory says what the cloud has now
            old = self.addresses
            old6 = {a.ipv6: a for a in old.values() if a.ipv6}
            cloud, cloud6 = inventory.all_ips(), inventory.all_ipv6()
            self.addresses = AddressMap()
            kept: dict[str, str | None] = {}
            for ip in cloud:
                # an address reserved in memory but not yet recorded stays reserved
                held = old.get(ip)
                kept[ip] = owners.get(ip) or (
                    held.owner if held is not None and held.owner != SHRINKING else None)
            # the IPv6 halves the records name: never anyone else's, never given back
            named6 = {pairs[ip]: ip for ip in owners if ip in pairs}
            held6 = (set(held6) | set(owned6)) - set(named6)
            paired = (self._pair(inventory, kept, pooled, pairs, named6, held6)
                      if inventory.dual_stack else {})
            for ip, itf in cloud.items():
                owner = kept[ip]
                if owner is None and ip not in pooled and ip not in old:
                    self.suspects.setdefault(ip, now)
                    continue
                prev_addr = old.get(ip)
                ipv6 = paired.get(ip)
                self.addresses[ip] = Address(
                    address=ip, interface=itf.id, subnet=itf.subnet, owner=owner,
                    cooldown_until=prev_addr.cooldown_until if prev_addr else (
                        cooling_until if ip in cooling and owner is None else 0.0),
                    ipv6=ipv6, half=inventory.dual_stack and ipv6 is None and owner is None,
                )
                self.suspects.pop(ip, None)
            used6 = set(paired.values()) | set(named6)
            for ip6, itf in cloud6.items():
                if ip6 in used6:
                    self.suspects.pop(ip6, None)
                    partner = named6.get(ip6)
                    if partner is not None and partner not in cloud:
                        # the cloud lost the record's IPv4 half: its IPv6 half stays the
                        # record's, held in the pool so that it goes back (an invalid
                        # half) when the record lets it go, never named by nothing
                        self.addresses[ip6] = Address(address=ip6, interface=itf.id,
                                                      subnet=itf.subnet,
                                                      owner=owners[partner], half=True)
                    continue
                if ip6 in owned6 and ip6 in held6:
                    self.addresses[ip6] = Address(address=ip6, interface=itf.id,
                                                  subnet=itf.subnet, owner=owned6[ip6],
                                                  half=True)
                    self.suspects.pop(ip6, None)
                    continue
                if ip6 in held6 or (ip6 not in pooled and ip6 not in old and ip6 not in old6):
                    self.suspects.setdefault(ip6, now)
                    continue
                self.addresses[ip6] = Address(address=ip6, interface=itf.id,
                                              subnet=itf.subnet, half=True)
                self.suspects.pop(ip6, None)
            # a suspect the cloud no longer has is nobody's problem any more
            for ip in list(self.suspects):
                if ip not in cloud and ip not in cloud6:
                    del self.suspects[ip]
            self._idle_order = dict.fromkeys(
                ip for ip, a in self.addresses.items() if a.owner is None)
            self.synced = True
            self.inventory_at = now
            return [owner for ip, owner in owners.items() if ip not in self.addresses]

    def _pair(self, inventory: Inventory, owners: Mapping[str, str | None],
              pooled: set[str], pairs: Mapping[str, str], named6: Mapping[str, str],
              held6: Collection[str] = ()) -> dict[str, str]:
        """IPv4 -> IPv6 on each interface: by ``pairs``, then as this pool had them, then
        the idle IPv4 addresses podnet knows with the free IPv6 ones, in order. An IPv6
        address a record names (``named6``: IPv6 -> the record's IPv4) goes with that
        IPv4 address or with none."""
        old = self.addresses
        out: dict[str, str] = {}
        for itf in inventory.interfaces:
            if not itf.pooled:
                continue
            free6 = dict.fromkeys(ip6 for ip6 in itf.ipv6 if ip6 not in held6)
            for ip in itf.ips:
                want = pairs.get(ip)
                if want is None or want not in free6 or named6.get(want, ip) != ip:
                    continue
                out[ip] = want
                del free6[want]
            for ip6 in named6:
                free6.pop(ip6, None)
            for ip in itf.ips:
                prev = old.get(ip)
                if ip not in out and prev is not None and prev.ipv6 in free6:
                    out[ip] = prev.ipv6
                    del free6[prev.ipv6]
            rest = [ip for ip in itf.ips if ip not in out and owners.get(ip) is None
                    and (ip in pooled or ip in old)]
            for ip, ip6 in zip(rest, list(free6), strict=False):
                out[ip] = ip6
        return out

    def observe(self, inventory: Inventory, owners: dict[str, str], now: float) -> list[str]:
        """Compare a fresh inventory with the pool while it is in use (GC resync).

        New addresses nobody owns become suspects; idle addresses the cloud dropped leave
        the pool; addresses in flight (reserved, releasing) are left alone. On a
        dual-stack node ``owners`` names IPv6 addresses too; an idle pair whose IPv6 half
        the cloud dropped is an invalid half now.
        :return: owners whose address the cloud no longer has.
        """
        with self.lock:
            self.inventory_at = now
            cloud, cloud6 = inventory.all_ips(), inventory.all_ipv6()
            for ip, itf in cloud.items():
                if ip in self.addresses:
                    continue
                owner = owners.get(ip)
                if owner is not None:
                    self.addresses[ip] = Address(ip, itf.id, itf.subnet, owner=owner)
                    self.suspects.pop(ip, None)
                else:
                    self.suspects.setdefault(ip, now)
            known6 = {a.ipv6 for a in self.addresses.values() if a.ipv6}
            for ip6 in cloud6:
                if ip6 in self.addresses or ip6 in known6 or ip6 in owners:
                    continue
                self.suspects.setdefault(ip6, now)
            lost = []
            for ip, entry in list(self.addresses.items()):
                if entry.ipv6 is not None and inventory.dual_stack and (
                        entry.ipv6 not in cloud6 and entry.owner is None):
                    entry.ipv6, entry.half = None, True
                if ip in cloud or ip in cloud6:
                    continue
                if entry.owner is None:
                    del self.addresses[ip]
                    if entry.ipv6 is not None and entry.ipv6 in cloud6:
                        self._keep_partner(entry)
                elif entry.owner in owners.values():
                    lost.append(entry.owner)
            for ip in list(self.suspects):
                if ip not in cloud and ip not in cloud6:
                    del self.suspects[ip]
            return lost

    def add(self, entries: Sequence[PoolEntry], now: float = 0.0) -> None:
        """New addresses; on a dual-stack node an entry without ``ipv6`` is an invalid
        half."""
        with self.lock:
            for e in entries:
                held = self.addresses.get(e.address)
                if held is None:
                    self.addresses[e.address] = Address(
                        e.address, e.interface, e.subnet, added_at=now, ipv6=e.ipv6,
                        half=self.dual_stack and e.ipv6 is None)
                    self._idle_order[e.address] = None
                else:
                    # handed out again while the pool holds it (the cloud lost it from a
                    # record): the record keeps it for now; the new partner is an invalid
                    # half, never named by nothing
                    self._returned.add(e.address)
                    if (e.ipv6 is not None and e.ipv6 != held.ipv6
                            and e.ipv6 not in self.addresses):
                        self.addresses[e.ipv6] = Address(e.ipv6, e.interface, e.subnet,
                                                         added_at=now, half=True)
                self.suspects.pop(e.address, None)
                if e.ipv6 is not None:
                    self.suspects.pop(e.ipv6, None)

    def adopt(self, address: str, owner: str, interface: str | None, subnet: str | None,
              ipv6: str | None = None) -> None:
        """A record owns ``address`` (and ``ipv6``): make the pool agree (restart,
        suspects in use)."""
        with self.lock:
            entry = self.addresses.get(address)
            if entry is None:
                self.addresses[address] = Address(address, interface, subnet, owner=owner,
                                                  ipv6=ipv6)
            else:
                entry.owner = owner
                entry.half = False
                if ipv6 is not None:
                    entry.ipv6 = ipv6
            self.suspects.pop(address, None)
            if ipv6 is not None:
                self.suspects.pop(ipv6, None)
                stray = self.addresses.get(ipv6)
                if stray is not None and stray.half:
                    del self.addresses[ipv6]

    def claim(self, address: str, owner: str, interface: str | None, subnet: str | None
              ) -> tuple[str | None, bool]:
        """Reserve ``address`` for ``owner`` before its record is written, whether the pool
        handed it out or the provider chose it (a static address it added itself): the
        pool's lock, not a cache, decides who gets it.

        :return: (the other owner, when it is taken: nothing changed; whether the address
            was new to the pool), so a failed write can undo exactly this claim.
        """
        with self.lock:
            entry = self.addresses.get(address)
            if entry is None:
                self.addresses[address] = Address(address, interface, subnet, owner=owner)
                self.suspects.pop(address, None)
                return None, True
            if entry.owner is not None and entry.owner != owner:
                return entry.owner, False
            entry.owner = owner
            return None, False

    def unclaim(self, address: str, owner: str, added: bool) -> None:
        """Undo :meth:`claim` after the record write failed for certain."""
        with self.lock:
            entry = self.addresses.get(address)
            if entry is None or entry.owner != owner:
                return
            if added:
                del self.addresses[address]
            else:
                entry.owner = None
                self._released(address)

    def hold_off(self, address: str, until: float) -> None:
        """Hand ``address`` out to nobody before monotonic time ``until``."""
        with self.lock:
            entry = self.addresses.get(address)
            if entry is not None:
                entry.cooldown_until = max(entry.cooldown_until, until)

    def remove(self, addresses: Iterable[str]) -> None:
        """``addresses`` left the cloud (a pair's IPv4 address: both halves, as
        ``podnet_pool_shrink`` answers)."""
        with self.lock:
            for ip in addresses:
                self.addresses.pop(ip, None)
                self.suspects.pop(ip, None)

    def _keep_partner(self, entry: Address) -> None:
        """``entry`` left the pool while the cloud may still have its IPv6 partner: that
        stays as an invalid half (given back by the next shrink), never named by nothing
        (a leak no check would find: not a suspect, since the pool knew it)."""
        if entry.ipv6 is not None and entry.ipv6 not in self.addresses:
            self.addresses[entry.ipv6] = Address(entry.ipv6, entry.interface, entry.subnet,
                                                 half=True)
            self.suspects.pop(entry.ipv6, None)

    def forget_lost(self, address: str, owner: str) -> None:
        """The cloud lost ``owner``'s ``address`` and its record let it go: it leaves the
        pool; its IPv6 partner, which the cloud may still have, stays as an invalid half
        (given back by the next shrink), never named by nothing."""
        with self.lock:
            entry = self.addresses.get(address)
            if entry is None or entry.owner != owner:
                return
            self._keep_partner(entry)
            if address in self._returned:
                # a grow brought it back meanwhile: the pool's again (without the
                # record's IPv6 partner: an invalid half on a dual-stack node)
                self._returned.discard(address)
                entry.owner, entry.ipv6, entry.half = None, None, self.dual_stack
                self._released(address)
                return
            del self.addresses[address]
            self._idle_order.pop(address, None)
            self.suspects.pop(address, None)

    def give_back(self, address: str, owner: str, cooldown_until: float) -> bool:
        """The record owning ``address`` is gone: the address is idle again."""
        with self.lock:
            entry = self.addresses.get(address)
            if entry is None or entry.owner != owner:
                return False
            entry.owner = None
            entry.cooldown_until = cooldown_until
            if self.dual_stack and entry.ipv6 is None:
                entry.half = True  # held without its IPv6 half: not handed out again
            self._released(address)
            return True

    def release_owners(self, gone: Callable[[str], bool]) -> None:
        """Every address whose owner is ``gone`` is idle again (one being shrunk stays
        out of the pool)."""
        with self.lock:
            for a in self.addresses.values():
                if a.owner is not None and a.owner != SHRINKING and gone(a.owner):
                    a.owner = None

    def release_others(self, owner: str, keep: str | None, keep6: str | None = None
                       ) -> None:
        """``owner``'s record now names ``keep`` (and ``keep6``): any other address held
        for it (by a write whose answer was lost, or the IPv6 half of a pair whose IPv4
        half the cloud lost) is idle again."""
        with self.lock:
            for a in self.addresses.held_by(owner):
                if a.address not in (keep, keep6):
                    a.owner = None
                    self._released(a.address)

    def wait_for_address(self, key: str, subnet: str | None, now: float, *,
                         queued: bool = False) -> bool:
        """``key`` waits for an address (in ``subnet``); ``queued``: any idle address
        (of that subnet) serves it, so it takes its turn (:meth:`serves_next`).
        :return: whether this is news for the pool (a new waiter, or another subnet): the
        node's pass is then due, not on every look at an old waiter."""
        with self.lock:
            if not self.waiting:
                self.waiting_since = now
            news = key not in self.waiting or self.waiting[key] != subnet
            self.waiting[key] = subnet
            self._waiting_from.setdefault(key, now)
            if queued:
                self._queued.setdefault(key, None)
            else:
                self._queued.pop(key, None)
            return news

    def waited(self, key: str, now: float) -> float:
        """How long ``key`` has waited (0 when it does not wait)."""
        since = self._waiting_from.get(key)
        return 0.0 if since is None else now - since

    def usable_for(self, entry: Address, subnet: str | None,
                   refuse: Callable[[str], bool] | None = None) -> bool:
        """Whether ``entry`` may be handed out (in ``subnet``): a whole address, not
        refused, not on an interface being disposed of."""
        if entry.half or (subnet is not None and entry.subnet != subnet):
            return False
        if refuse is not None and refuse(entry.address):
            return False
        itf = self.interfaces.get(entry.interface) if entry.interface else None
        return itf is None or itf.state is not InterfaceState.DISPOSING

    def held_for(self, owner: str, subnet: str | None,
                 refuse: Callable[[str], bool] | None = None) -> Address | None:
        """The first address the pool holds for ``owner`` that may be handed to it."""
        for entry in sorted(self.addresses.held_by(owner), key=lambda a: a.address):
            if self.usable_for(entry, subnet, refuse):
                return entry
        return None

    def serves_next(self, key: str, subnet: str | None, now: float) -> bool:
        """Whether an idle address (in ``subnet``) is there for ``key`` once the queued
        waiters ahead of it took theirs: pod networks are served in the order they
        arrived, and one that would find nothing makes no provider call. An address the
        pool still holds for ``key`` serves it, whoever waits ahead."""
        with self.lock:
            if self.addresses.by_owner.get(key) and self.held_for(key, subnet) is not None:
                return True
            if not self._queued:
                return self.first_idle(now, subnet) is not None
            anywhere = 0  # waiters ahead that take any idle address
            within: dict[str, int] = {}  # waiters ahead that take one of their subnet's
            for other in self._queued:
                if other == key:
                    break
                wanted = self.waiting.get(other)
                if wanted is None:
                    anywhere += 1
                else:
                    within[wanted] = within.get(wanted, 0) + 1
            idle = self.idle_addresses(now)
            if subnet is not None:
                mine = sum(1 for a in idle if a.subnet == subnet)
                return mine > within.get(subnet, 0) + anywhere
            # a waiter for a subnet with no idle address there takes nothing of ours
            per_subnet: dict[str | None, int] = {}
            for a in idle:
                per_subnet[a.subnet] = per_subnet.get(a.subnet, 0) + 1
            taken = anywhere + sum(min(n, per_subnet.get(s, 0)) for s, n in within.items())
            return len(idle) > taken

    def stop_waiting(self, key: str) -> None:
        with self.lock:
            self.waiting.pop(key, None)
            self._waiting_from.pop(key, None)
            self._queued.pop(key, None)
            if not self.waiting:
                self.waiting_since = None

    def invalidate(self) -> None:
        """The bookkeeping may be wrong (a call whose outcome is unknown, more addresses
        than the node holds): rebuilt from the inventory and the records before use."""
        with self.lock:
            self.synced = False

    # --- plans: the next call, decided from the pool, the policy and the time ---------

    def plan_grow(self, policy: PoolPolicy, now: float, *, manages_interfaces: bool,
                  coming: int = 0) -> GrowPlan | Deferred:
        """The grow call to make now, or why none.

        Demand is the pod networks waiting plus ``min_idle``, less what is idle; a pod
        network waiting for a subnet is served only by an idle address in that subnet. A
        call adds at most a batch to an interface (the fewest addresses first, when the
        provider ``manages_interfaces``); a new interface is created with all that is
        still needed, up to what it holds (one create instead of several adds).

        ``coming``: pods of the node that will ask for an address and do not wait yet. A
        grow that is due anyway brings theirs too (one call, not a top-up each); they
        never start one alone.
        """
        with self.lock:
            waiting = dict(self.waiting)
            idle_now = self.idle_addresses(now)
            available = len(idle_now)
            cooling = self.idle_count() - available
            anywhere = sum(1 for s in waiting.values() if s is None)
            need = anywhere + policy.min_idle - available
            if not waiting:
                # idle addresses cooling down count toward min_idle: they'll be ready soon
                need -= cooling
            short: dict[str, int] = {}
            for wanted in waiting.values():
                if wanted is not None:
                    short[wanted] = short.get(wanted, 0) + 1
            for a in idle_now:
                if a.subnet in short:
                    short[a.subnet] -= 1
            short = {s: n for s, n in short.items() if n > 0}
            need = max(need, 0) + sum(short.values())
            free = self.capacity - self.total()
            if need <= 0:
                return Deferred(DeferReason.NOTHING_TO_DO, waiting=waiting)
            # a pool short of min_idle alone still serves: only pods left without an
            # address make a limit a problem (PoolReady=False, a Warning)
            starved = anywhere > available or bool(short)
            if free <= 0:
                return Deferred(
                    DeferReason.AT_CAPACITY, retry_after=policy.refill_period,
                    problem=(f"node {self.node} is at its capacity of {self.capacity} "
                             "addresses") if starved else None,
                    waiting={} if starved else waiting)
            if now < self.grow_blocked_until:
                return Deferred(DeferReason.BACKOFF, retry_after=self.grow_blocked_until - now)
            subnet = max(short, key=lambda s: short[s]) if short else None
            itf = self._pick_interface(subnet) if manages_interfaces else None
            creating = manages_interfaces and itf is None
            per_call = max(self.ips_per_interface, 1) if creating else policy.max_batch_size
            window_end = (self.waiting_since or now) + policy.aggregation_window
            if waiting and now < window_end and len(waiting) < per_call:
                return Deferred(DeferReason.WINDOW, retry_after=window_end - now)
            batch = self.batch or policy.batch_size
            count = min(max(need + max(coming, 0), batch), per_call, free)
            if self.batch and self.batch < policy.batch_size:
                count = min(count, self.batch)  # halved after quota errors: stay small
            no_interface = None
            if creating:
                no_interface = self._no_interface_slot()
                if no_interface is not None and not starved:
                    return Deferred(DeferReason.AT_CAPACITY, retry_after=policy.refill_period,
                                    waiting=waiting)
            elif itf is not None:
                count = min(count, self.ips_per_interface - len(self.ipv4_on(itf.id)))
            return GrowPlan(count=count, need=need, subnet=subnet, interface=itf,
                            new_interface=creating, waiting=waiting,
                            no_interface=no_interface)

    def _pick_interface(self, subnet: str | None) -> Interface | None:
        """The ready interface with room and the fewest addresses (keeps them balanced)."""
        best, best_count = None, math.inf
        for itf in self.interfaces.values():
            if itf.state is not InterfaceState.READY or itf.trunk or not itf.pooled:
                continue
            if subnet is not None and itf.subnet not in (None, subnet):
                continue
            used = len(self.ipv4_on(itf.id))
            if used < self.ips_per_interface and used < best_count:
                best, best_count = itf, used
        return best

    def _no_interface_slot(self) -> str | None:
        """Why no interface can be added (every slot is taken), or None."""
        if len(self.pooled_interfaces()) < self.max_interfaces:
            return None
        blocked = "; ".join(f"{i.id} inhibited: {i.reason}" for i in self.interfaces.values()
                            if i.state is InterfaceState.INHIBITED and i.reason)
        return (f"node {self.node} has all {self.max_interfaces} interfaces "
                "in use and none can take more addresses"
                + (f" ({blocked})" if blocked else ""))

    def plan_shrink(self, policy: PoolPolicy, now: float, halves_only: bool = False,
                    unusable: Callable[[str], bool] | None = None, coming: int = 0
                    ) -> ShrinkPlan | Deferred:
        """The shrink call to make now, or why none: idle addresses beyond ``max_idle``
        go back to the cloud, and every invalid half of a dual-stack pair with them
        (``halves_only``: just those), and every idle address ``unusable`` names (the
        node's Subnet excludes it: no pod may take it, and it would keep the pool from
        growing for the pods that wait). ``coming`` more than ``max_idle`` stay idle:
        pods of the node that will ask for them (a grow brought theirs).

        Hold the lock from the plan to :meth:`shrinking`: nobody may take a victim
        between being chosen and leaving the pool.
        """
        with self.lock:
            idle = [] if halves_only else [a for a in self.addresses.values()
                                           if a.owner is None and not a.half]
            excess = len(idle) - policy.max_idle - max(coming, 0)
            # a cloud may not yet know an address it just added (replica lag): its "not
            # found" on delete would be believed, so the youngest addresses stay a while
            young = [a.added_at + policy.min_ip_lifetime - now for a in idle
                     if now - a.added_at < policy.min_ip_lifetime]
            idle = [a for a in idle if now - a.added_at >= policy.min_ip_lifetime]
            halves = [a for a in self.halves() if now - a.added_at >= policy.min_ip_lifetime]
            if unusable is not None:
                dead = [a for a in self.addresses.values()
                        if a.owner is None and not a.half and unusable(a.address)
                        and now - a.added_at >= policy.min_ip_lifetime]
                halves += dead
                idle = [a for a in idle if a not in dead]
                excess -= len(dead)
            if excess <= 0 and not halves:
                return Deferred(DeferReason.NOTHING_TO_DO)
            if not idle and not halves:
                # only young addresses are in excess: look again once the first is old
                # enough (not at once: that would spin until the clock moves)
                return Deferred(DeferReason.TOO_YOUNG,
                                retry_after=min(young, default=policy.refill_period))
            # free whole interfaces first: fewest owned addresses on the interface first
            owned_on: dict[str | None, int] = {}
            for a in self.addresses.values():
                if a.owner is not None:
                    owned_on[a.interface] = owned_on.get(a.interface, 0) + 1
            idle.sort(key=lambda a: (owned_on.get(a.interface, 0), a.cooldown_until))
            victims = (halves + idle[: max(excess, 0)])[: policy.max_batch_size]
            return ShrinkPlan(victims=tuple(victims), excess=max(excess, 0) + len(halves))

    def disposable(self) -> Iterator[Interface]:
        """Interfaces with no address left, which may go (never a primary, trunk or
        unpooled one), each checked when the iteration reaches it."""
        for itf in list(self.interfaces.values()):
            if not (itf.primary or itf.trunk or not itf.pooled or self.ips_on(itf.id)):
                yield itf

    def recoverable(self, now: float) -> list[Interface]:
        """Inhibited interfaces whose window is over."""
        with self.lock:
            return [i for i in self.interfaces.values()
                    if i.state is InterfaceState.INHIBITED and i.inhibited_until <= now]

    def expired_suspects(self, policy: PoolPolicy, now: float, owners: Collection[str]
                         ) -> list[str]:
        """Suspects nobody claimed for ``leaked_ip_expiry``: leaked, GC deletes them.
        ``owners``: the addresses records name (a suspect one names is not leaked)."""
        with self.lock:
            return [ip for ip, seen in self.suspects.items()
                    if now - seen >= policy.leaked_ip_expiry and ip not in owners]

    # --- outcomes of the calls a plan named -------------------------------------------

    def grew(self, entries: Sequence[PoolEntry], now: float,
             interface: CloudInterface | None = None) -> None:
        """A grow call brought ``entries`` (on ``interface``, when it made one): the
        batch and the backoff start over."""
        with self.lock:
            if interface is not None:
                self.interfaces[interface.id] = Interface(
                    id=interface.id, mac=interface.mac, subnet=interface.subnet,
                    primary=interface.primary, trunk=interface.trunk,
                    state=InterfaceState.READY, pooled=interface.pooled,
                )
            self.add(entries, now)
            self.batch = 0
            self.grow_failures = 0
            self.grow_blocked_until = 0.0
            self.last_error = None
            self.blocked = False

    def cannot_grow(self, problem: str | None) -> None:
        """No grow call can be made for pods that wait (at capacity, no interface slot):
        why; None: the plan needs no grow for a pod (nothing to do, or only ``min_idle``
        short at capacity), so no problem is left to say: a limit said before is over,
        and so is a failed call's (its backoff stays, should a grow be needed again)."""
        with self.lock:
            if problem is not None:
                self.last_error, self.blocked = problem, True
            else:
                self.last_error, self.blocked = None, False

    def grow_failed(self, plan: GrowPlan, kind: ErrorKind, problem: str, policy: PoolPolicy,
                    now: float, subnets: int = 1) -> GrowRetry:
        """The grow call ``plan`` named failed with an error of ``kind``.

        Quota and exhaustion halve the batch and, at batch 1, back off; any other error
        but throttling leaves the outcome unknown and backs off. ``subnets``: how many
        the node may grow in (``backoff_cap_per_try`` shares the cap among them).
        """
        with self.lock:
            self.last_error, self.blocked = problem, False
            if kind is ErrorKind.THROTTLED:
                return GrowRetry(after=None)
            quota = kind in (ErrorKind.QUOTA_EXCEEDED, ErrorKind.SUBNET_EXHAUSTED)
            if not quota:
                # the outcome is unknown (a lost answer, a malformed one): read the truth
                # again before growing, so a batch that landed is seen, not added twice
                self.synced = False
            inhibit, inhibit_for = None, 0.0
            if quota:
                itf = plan.interface
                if itf is not None and itf.state is InterfaceState.READY:
                    inhibit = itf
                    inhibit_for = (policy.inhibit_exhausted
                                   if kind is ErrorKind.SUBNET_EXHAUSTED
                                   else policy.inhibit_quota)
                batch = self.batch or policy.batch_size
                if policy.halve_batch_on_quota and batch > 1:
                    self.batch = max(1, batch // 2)
                    return GrowRetry(after=0.0, inhibit=inhibit, inhibit_for=inhibit_for)
                self.batch = 1
            self.grow_failures += 1
            delay = policy.grow_backoff.delay(self.grow_failures)
            if policy.backoff_cap_per_try:
                # the whole retry ladder (one try per halving, per candidate subnet) must
                # fit in one cap: each step's share of it is the step's ceiling
                tries = int(math.log2(max(1, policy.batch_size))) + 1
                delay = min(delay, policy.grow_backoff.cap / tries / max(1, subnets))
            self.grow_blocked_until = now + delay
            return GrowRetry(after=delay, inhibit=inhibit, inhibit_for=inhibit_for,
                             backed_off=True)

    def shrinking(self, plan: ShrinkPlan) -> list[PoolEntry]:
        """The victims of ``plan`` leave the pool before the call: nobody takes an
        address being deleted. :return: them, for the call."""
        with self.lock:
            for a in plan.victims:
                a.owner = SHRINKING
            return [a.entry() for a in plan.victims]

    def shrunk(self, plan: ShrinkPlan, gone: Iterable[str]) -> None:
        """The shrink call of ``plan`` deleted ``gone``: the other victims are idle
        again. A call the cloud accepted clears the grow backoff, as a successful add
        does."""
        gone_set = set(gone)
        with self.lock:
            for a in plan.victims:
                if a.owner == SHRINKING and a.address not in gone_set:
                    a.owner = None
            self.remove(gone_set)
            if gone_set:
                self.grow_failures = 0
                self.grow_blocked_until = 0.0

    def inhibited(self, itf: Interface, until: float, reason: str) -> None:
        """``itf`` takes no address before monotonic time ``until``, because of
        ``reason``."""
        with self.lock:
            itf.inhibited_until = until
            itf.reason = reason

    def recovered(self, itf: Interface) -> None:
        with self.lock:
            itf.inhibited_until = 0.0
            itf.reason = None

    def interface_gone(self, interface: str) -> None:
        """The cloud disposed of ``interface``."""
        with self.lock:
            self.interfaces.pop(interface, None)

    def resume(self, recorded: Iterable[InterfaceStatus], now: float, wall: datetime
               ) -> None:
        """After a rebuild: what the NodeNetwork recorded about each interface (state,
        inhibit window) holds again; ``now`` and ``wall`` are the same moment."""
        with self.lock:
            for rec in recorded:
                itf = self.interfaces.get(rec.id)
                if itf is None:
                    if rec.state is InterfaceState.DISPOSING and not rec.primary:
                        # being disposed when the last run stopped, and the node no longer
                        # lists it (detached, maybe not deleted yet): disposed again, or
                        # it would be left behind unseen
                        self.interfaces[rec.id] = Interface(
                            id=rec.id, state=InterfaceState.DISPOSING, mac=rec.mac,
                            subnet=rec.subnet, trunk=rec.trunk, pooled=rec.pooled)
                    continue
                itf.state = rec.state
                if rec.inhibited_until is not None:
                    left = (rec.inhibited_until - wall).total_seconds()
                    itf.inhibited_until = now + max(0.0, left)

    def suspects_deleted(self, addresses: Iterable[str]) -> None:
        """GC deleted these leaked addresses in the cloud."""
        with self.lock:
            for ip in addresses:
                self.suspects.pop(ip, None)

    def reserve(self, owner: str, now: float, prefer: str | None = None,
                refuse: Callable[[str], bool] | None = None) -> Reservation:
        return Reservation(self, owner, now, prefer, refuse)


class Reservation:
    """The ``PoolView`` a provider gets in ``podnet_allocate``: takes at most one address
    for one pod network, held until the engine commits or rolls it back."""

    def __init__(self, pool: NodePool, owner: str, now: float, prefer: str | None = None,
                 refuse: Callable[[str], bool] | None = None) -> None:
        self._pool = pool
        self._owner = owner
        self._now = now
        #: idle addresses this pod network must not be handed (its Subnet excludes them,
        #: or they are its gateway: the cloud may well have put them on the node)
        self._refuse = refuse
        #: the address this pod network had (its record was re-made or re-addressed):
        #: handed out first when it asks for any address, even in its cooldown
        self._prefer = prefer
        self.taken: str | None = None
        self._was_mine = False

    def idle(self, subnet: str | None = None) -> Sequence[PoolEntry]:
        refuse = self._refuse
        with self._pool.lock:
            return [a.entry() for a in self._pool.idle_addresses(self._now, subnet)
                    if refuse is None or not refuse(a.address)]

    def take(self, address: str | None = None, subnet: str | None = None) -> PoolEntry:
        pool = self._pool
        with pool.lock:
            if self.taken is not None:
                self.rollback()
            if address is not None:
                entry = pool.addresses.get(address)
                if entry is None or entry.owner not in (None, self._owner) or entry.half:
                    raise PoolEmpty(f"address {address} is not idle on node {pool.node}",
                                    subnet=subnet)
            elif (preferred := self._preferred(subnet)) is not None:
                entry = preferred
            else:
                # oldest entry first: deterministic, and released ones go to the back
                found = pool.first_idle(self._now, subnet, self._refuse)
                if found is None:
                    where = f" in subnet {subnet}" if subnet else ""
                    raise PoolEmpty(f"no idle address{where} on node {pool.node}", subnet=subnet)
                entry = found
            # already this pod network's (an earlier write whose answer was lost): a
            # rollback must not free it
            self._was_mine = entry.owner == self._owner
            # its turn is over: those behind it count the idle addresses left
            pool._queued.pop(self._owner, None)
            entry.owner = self._owner
            self.taken = entry.address
            return entry.entry()

    def _preferred(self, subnet: str | None) -> Address | None:
        """The address this pod network had, if it may have it again; else one the pool
        still holds for it (a hand edit made its record name another pod's address, and
        it was re-addressed; its pod may still use its own): neither counts as idle, and
        nobody else is ever handed it while held."""
        pool = self._pool
        if self._prefer is not None:
            entry = pool.addresses.get(self._prefer)
            if (entry is not None and entry.owner in (None, self._owner)
                    and pool.usable_for(entry, subnet, self._refuse)):
                return entry
        if not pool.addresses.by_owner.get(self._owner):
            return None  # the usual case: it holds nothing yet
        return pool.held_for(self._owner, subnet, self._refuse)

    def owner_of(self, address: str) -> str | None:
        return self._pool.owner_of(address)

    def rollback(self) -> None:
        with self._pool.lock:
            if self.taken is not None:
                entry = self._pool.addresses.get(self.taken)
                if entry is not None and entry.owner == self._owner and not self._was_mine:
                    entry.owner = None
                    self._pool._released(entry.address)
                self.taken = None


class Pools:
    """All node pools of the engine, by (provider, node)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pools: dict[tuple[str, str], NodePool] = {}

    def get(self, provider: str, node: str) -> NodePool:
        with self._lock:
            pool = self._pools.get((provider, node))
            if pool is None:
                pool = self._pools[(provider, node)] = NodePool(node, provider)
            return pool

    def find(self, provider: str, node: str) -> NodePool | None:
        return self._pools.get((provider, node))

    def drop_node(self, node: str) -> None:
        with self._lock:
            for key in [k for k in self._pools if k[1] == node]:
                del self._pools[key]

    def all(self) -> list[NodePool]:
        with self._lock:
            return list(self._pools.values())
