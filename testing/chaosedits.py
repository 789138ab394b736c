"""What the chaos machine checks of the records' addresses around hand edits: a record
edited to another's address never takes it from the record podnet gave it to, and every
address podnet gave carries the seal written with it (``status.addressSeal``)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Set

from podnet.core.cluster.port import EVENT
from podnet.core.ledger import sealed
from podnet.core.models import Phase
from podnet.testing.harness import World

__all__ = ["edits_that_took_an_address", "unsealed_addresses"]

#: the Event a pool's rebuild leaves on a record passed over for an address it names
_DUPLICATE = re.compile(r"address (?P<address>\S+) is also recorded by (?P<winner>\S+)")
#: the phases in which a record owns the address it names
_OWNING = frozenset({Phase.ALLOCATED, Phase.ROUTED, Phase.RELEASING})


def edits_that_took_an_address(world: World, edited: Mapping[str, str],
                               edited_ever: Mapping[str, Set[str]]) -> list[str]:
    """Where an edited record got another's address: a rebuilt pool (a restart, a node
    leaving) that kept it for the edited record (its ``DuplicateAddress`` Event names the
    record passed over), or a synced pool holding it for the edited record while the
    other names it. ``edited``: record name -> the address its last edit gave it, while
    it names it; ``edited_ever``: every address an edit gave it."""
    problems = []
    with world.quiet():
        events = world.cluster.list(EVENT, world.namespace).items
    for ev in events:
        said = _DUPLICATE.fullmatch(ev.get("message") or "")
        if ev.get("reason") != "DuplicateAddress" or said is None:
            continue
        address, winner = said["address"], said["winner"].rpartition("/")[2]
        loser = (ev.get("involvedObject") or {}).get("name", "")
        if address in edited_ever.get(winner, ()) and address not in edited_ever.get(loser, ()):
            problems.append(f"{address} kept for {winner} (a hand edit) over {loser}")
    records = world.records()
    now_edited = {pn.key for pn in records
                  if pn.status.ip and edited.get(pn.metadata.name) == pn.status.ip}
    for pn in records:
        if not now_edited or pn.key in now_edited or not pn.status.ip or (
                pn.status.phase not in _OWNING):
            continue
        pool = world.engine.pools.find(pn.spec.provider, pn.spec.node_name)
        owner = pool.owner_of(pn.status.ip) if pool is not None and pool.synced else None
        if owner in now_edited:
            problems.append(f"{pn.status.ip}: node {pn.spec.node_name}'s pool holds it for "
                            f"{owner} (a hand edit), not for {pn.key}")
    return problems


def unsealed_addresses(world: World, edited_ever: Mapping[str, Set[str]]) -> list[str]:
    """Records naming an address no hand edit gave them without the seal of their uid and
    addresses."""
    return [f"{pn.key} on {pn.status.ip or pn.status.ipv6}" for pn in world.records()
            if (pn.status.ip or pn.status.ipv6) and sealed(pn) is not True
            and pn.status.ip not in edited_ever.get(pn.metadata.name, ())]
