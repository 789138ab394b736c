"""Who owns each pod address: decided in memory, under one lock, before any record says so.

Caches lag: two pod networks allocated a moment apart can both find an address "free" in
a cache that has not yet seen the first one's record. The :class:`AddressBook` cannot
lag, because it is the decision itself: an address is claimed here before the record
naming it is written, and the second claimant is refused. It is filled from every record
the caches see (records that do not parse included), so after a restart it holds what
the records hold; a record naming an address the book gave to another record is a
conflict, reported on both.

Addresses are unique per provider (one cloud VPC, one overlay): the book's scope is the
provider's name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from podnet.core.convert import UnreadablePodNetwork
from podnet.core.models import PodNetwork

log = logging.getLogger("podnet.engine")


class AddressBook:
    """address -> owning PodNetwork key, per provider. Thread-safe; O(1) per call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: dict[tuple[str, str], str] = {}
        #: owner key -> its (provider, address) claims
        self._held: dict[str, set[tuple[str, str]]] = {}

    def claim(self, provider: str, address: str, owner: str) -> str | None:
        """Give ``address`` to ``owner`` unless another holds it.

        :return: None when ``owner`` holds it now, else the other holder (nothing changed).
        """
        slot = (provider, address)
        with self._lock:
            holder = self._owner.get(slot)
            if holder is not None and holder != owner:
                return holder
            self._owner[slot] = owner
            self._held.setdefault(owner, set()).add(slot)
            return None

    def claim_all(self, provider: str, addresses: Iterable[str | None],
                  owner: str) -> tuple[str, str] | None:
        """Claim every address or none. :return: None, or (address, its other holder)."""
        taken: list[str] = []
        for address in addresses:
            if not address:
                continue
            fresh = self.holder(provider, address) is None
            other = self.claim(provider, address, owner)
            if other is not None:
                for a in taken:
                    self.release(provider, a, owner)
                return address, other
            if fresh:
                taken.append(address)
        return None

    def holder(self, provider: str, address: str) -> str | None:
        with self._lock:
            return self._owner.get((provider, address))

    def held_by(self, owner: str) -> set[tuple[str, str]]:
        """The (provider, address) pairs ``owner`` holds."""
        with self._lock:
            return set(self._held.get(owner, ()))

    def release(self, provider: str, address: str, owner: str) -> bool:
        """``owner`` gives ``address`` up; a no-op when another holds it."""
        slot = (provider, address)
        with self._lock:
            if self._owner.get(slot) != owner:
                return False
            del self._owner[slot]
            held = self._held.get(owner)
            if held is not None:
                held.discard(slot)
                if not held:
                    del self._held[owner]
            return True

    def release_owner(self, owner: str, keep: Iterable[str] = ()) -> list[tuple[str, str]]:
        """Everything ``owner`` holds but ``keep`` goes. :return: what was released."""
        kept = set(keep)
        with self._lock:
            gone = [s for s in self._held.get(owner, ()) if s[1] not in kept]
            for slot in gone:
                del self._owner[slot]
                self._held[owner].discard(slot)
            if owner in self._held and not self._held[owner]:
                del self._held[owner]
            return gone

    def __len__(self) -> int:
        with self._lock:
            return len(self._owner)


class Ownership:
    """The address book and what the controllers know about records beside it.

    - ``addresses``: who owns each address;
    - ``conflicts``: PodNetwork key -> (its address, the record holding that address): a
      record that names an address the book gave to another;
    - ``finishing``: PodNetwork keys podnet itself is removing (their address goes back
      by the reconciler's hand, not the cache's);
    - ``vanished``: records that left the cache without podnet removing them, by key:
      their pod's pass confirms they are gone before their addresses go back.
    """

    def __init__(self) -> None:
        self.addresses = AddressBook()
        self.conflicts: dict[str, tuple[str, str]] = {}
        self.finishing: set[str] = set()
        self.vanished: dict[str, PodNetwork] = {}

    def recorded(self, pn: PodNetwork) -> str | None:
        """A record was seen: every address it names is its owner's in the book, unless
        the book gave it to another record first. Then the conflict is kept and the
        holder's key returned (the caller wakes it: it may be the one to re-address)."""
        key = pn.key
        for address in (pn.status.ip, pn.status.ipv6):
            if not address:
                continue
            other = self.addresses.claim(pn.spec.provider, address, key)
            if other is not None:
                if self.conflicts.get(key) != (address, other):
                    log.error("PodNetwork %s names address %s, which %s holds",
                              key, address, other)
                self.conflicts[key] = (address, other)
                return other
        if self.conflicts:  # none, almost always: nothing to look up
            self.conflicts.pop(key, None)
        return None

    def gone(self, pn: PodNetwork) -> None:
        """A record left the cache. Removed by podnet's own release: the reconciler gives
        its address back. Otherwise (its finalizer taken off by hand, or a re-list that
        did not show it yet) its pod's pass asks the API server, and gives the address
        back only once the record is really gone."""
        self.conflicts.pop(pn.key, None)
        if pn.key in self.finishing:
            return
        if isinstance(pn, UnreadablePodNetwork) and not (pn.status.ip or pn.status.ipv6):
            return
        self.vanished[pn.key] = pn
