"""NetworkPolicy's Northbound commands: one policy's port group, address sets and ACLs
made exactly what :func:`podnet.plugins.ovn.netpol.policy_rows` says, in one transaction
(found by the policy's key in external_ids, so a second call, or one after a transaction
that never committed, converges to the same rows); a policy's rows removed; and the
products with the security groups re-made when a group's rules change."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ovsdbapp.backend.ovs_idl import command as ovs_command

from podnet.hookspecs.netpol import PolicyMember
from podnet.plugins.ovn.config import EXT_IP, EXT_IPV6, EXT_NAMESPACE, EXT_POD
from podnet.plugins.ovn.nbcommands import _member_uuids
from podnet.plugins.ovn.netpol import (
    NP_CLAUSE,
    NP_GROUPS,
    NP_KEY,
    NP_SETS,
    PRIORITY_DROP,
    Clause,
    PolicyAcl,
    PolicyRows,
    groups_digest,
    policy_acls,
    policy_port_group,
)
from podnet.plugins.ovn.rows import OWNER, OWNER_VALUE
from podnet.plugins.ovn.secgroups import BadGroup, SecurityGroup

__all__ = ["DeletePolicy", "EnsurePolicy", "RefreshPolicies", "bump_nb_cfg", "member_ports",
           "policy_differs", "policy_keys", "policy_rows_of", "refresh_needed"]


def _is_member_port(lsp: Any, key: str, addresses: set[str]) -> bool:
    ext = lsp.external_ids
    return bool(ext.get(OWNER) == OWNER_VALUE and EXT_POD in ext
                and f"{ext.get(EXT_NAMESPACE, '')}/{ext[EXT_POD]}" == key
                and (ext.get(EXT_IP) in addresses or ext.get(EXT_IPV6) in addresses))


def member_ports(api: Any, members: Sequence[PolicyMember],
                 known: Mapping[str, str | None] | None = None) -> dict[str, str]:
    """Member key -> the logical switch port of its default network: podnet's port of
    that pod holding one of the member's addresses (an attachment network's port holds
    others). ``known``: address -> the port the IPAM says holds it (looked up by name,
    checked); members it does not place are looked for in every port."""
    out: dict[str, str] = {}
    for m in members:
        for address in m.addresses:
            name = (known or {}).get(address)
            lsp = api.lookup("Logical_Switch_Port", name, default=None) if name else None
            if lsp is not None and _is_member_port(lsp, m.key, set(m.addresses)):
                out[m.key] = lsp.name
                break
    rest = {m.key: set(m.addresses) for m in members if m.key not in out}
    if rest:
        for lsp in api.tables["Logical_Switch_Port"].rows.values():
            ext = lsp.external_ids
            if ext.get(OWNER) != OWNER_VALUE or EXT_POD not in ext:
                continue
            key = f"{ext.get(EXT_NAMESPACE, '')}/{ext[EXT_POD]}"
            if key in rest and _is_member_port(lsp, key, rest[key]):
                out[key] = lsp.name
    return out


def _acl_key(row: Any) -> tuple[str, int, str, str, str]:
    return (row.direction, int(row.priority), row.match, row.action,
            row.external_ids.get(NP_CLAUSE, ""))


def _want_key(a: PolicyAcl) -> tuple[str, int, str, str, str]:
    return (a.direction, a.priority, a.match, a.action, a.clause)


def _ours(row: Any, key: str) -> bool:
    return bool(row.external_ids.get(OWNER) == OWNER_VALUE
                and row.external_ids.get(NP_KEY) == key)


def policy_differs(api: Any, rows: PolicyRows) -> bool:
    """Whether NB holds other than ``rows`` for the policy (a read of the replica)."""
    pg = api.lookup("Port_Group", rows.port_group, default=None)
    if pg is None or not _ours(pg, rows.key):
        return True
    members = [api.lookup("Logical_Switch_Port", n, default=None) for n in rows.ports]
    if any(m is None for m in members) or (
            sorted(str(u) for u in _member_uuids(pg, "ports"))
            != sorted(str(m.uuid) for m in members)):
        return True
    have = sorted(_acl_key(a) for a in pg.acls if _ours(a, rows.key))
    if have != sorted(_want_key(a) for a in rows.acls):
        return True
    if (pg.external_ids.get(NP_SETS, "") != _set_names(rows)
            or pg.external_ids.get(NP_GROUPS) != rows.groups):
        return True
    for name, addresses in rows.address_sets:
        row = api.lookup("Address_Set", name, default=None)
        if (row is None or not _ours(row, rows.key)
                or sorted(str(a) for a in row.addresses) != sorted(addresses)):
            return True
    return False


def _set_names(rows: PolicyRows) -> str:
    return ",".join(n for n, _ in rows.address_sets)


def _sync_acls(txn: Any, api: Any, pg: Any, key: str, wanted: Sequence[PolicyAcl],
               new: bool = False) -> None:
    """The port group's ACLs of this policy made exactly ``wanted``: kept when there,
    duplicates and others of the policy's removed (others' ACLs left alone)."""
    keys = {_want_key(a) for a in wanted}
    kept: set[tuple[str, int, str, str, str]] = set()
    for row in [] if new else list(pg.acls):
        if not _ours(row, key):
            continue
        k = _acl_key(row)
        if k in keys and k not in kept:
            kept.add(k)
            continue
        pg.delvalue("acls", row)  # not a root: unreferenced, it goes
    for a in wanted:
        k = _want_key(a)
        if k in kept:
            continue
        kept.add(k)
        acl = txn.insert(api.tables["ACL"])
        acl.direction = a.direction
        acl.priority = a.priority
        acl.match = a.match
        acl.action = a.action
        ids = {OWNER: OWNER_VALUE, NP_KEY: key}
        if a.clause:
            ids[NP_CLAUSE] = a.clause
        acl.external_ids = ids
        pg.addvalue("acls", acl)


def bump_nb_cfg(api: Any, txn: Any) -> None:
    """Have ``txn`` increment ``NB_Global.nb_cfg`` (once: the IDL takes one increment per
    transaction, which several commands may share). northd copies it to the chassis and
    sets ``NB_Global.hv_cfg`` to the least value every chassis has reached: the flows of
    this transaction are on every chassis once ``hv_cfg`` reaches the new value."""
    nb_global = next(iter(api.tables["NB_Global"].rows.values()), None)
    if nb_global is not None and getattr(txn, "_inc_row", None) is None:
        nb_global.increment("nb_cfg")


class EnsurePolicy(ovs_command.BaseCommand):
    """One policy's port group (its members), address sets and ACLs as ``rows`` say; the
    transaction bumps ``NB_Global.nb_cfg`` (``nb_cfg``: its new value once committed)."""

    def __init__(self, api: Any, rows: PolicyRows) -> None:
        super().__init__(api)
        self.rows = rows
        self.nb_cfg: int | None = None

    def post_commit(self, txn: Any) -> None:
        # set only where the transaction had an NB_Global row to increment
        value = getattr(txn, "_inc_new_value", None)
        self.nb_cfg = value if isinstance(value, int) and value >= 0 else None

    def run_idl(self, txn: Any) -> None:
        api, rows = self.api, self.rows
        bump_nb_cfg(api, txn)
        marks = {OWNER: OWNER_VALUE, NP_KEY: rows.key}
        sets = {**marks, NP_SETS: _set_names(rows), NP_GROUPS: rows.groups}
        pg = api.lookup("Port_Group", rows.port_group, default=None)
        new = pg is None
        if pg is None:
            pg = txn.insert(api.tables["Port_Group"])
            pg.name = rows.port_group
            pg.external_ids = sets
            before: set[str] = set()
        elif pg.external_ids.get(NP_KEY) != rows.key:
            raise RuntimeError(f"port group {rows.port_group} belongs to "
                               f"{pg.external_ids.get(NP_KEY) or 'another owner'}, not "
                               f"NetworkPolicy {rows.key}")
        else:
            before = set(filter(None, pg.external_ids.get(NP_SETS, "").split(",")))
            if dict(pg.external_ids) != {**pg.external_ids, **sets}:
                pg.external_ids = {**pg.external_ids, **sets}
        wanted_ports = set(rows.ports)
        have = {} if new else {p.name: p for p in pg.ports}
        for name, lsp in have.items():
            if name not in wanted_ports:
                pg.delvalue("ports", lsp)
        for name in rows.ports:
            if name not in have:
                lsp = api.lookup("Logical_Switch_Port", name, default=None)
                if lsp is None:
                    raise RuntimeError(f"logical switch port {name} is missing")
                pg.addvalue("ports", lsp)
        # the address sets before the ACLs naming them (one transaction: northd sees both)
        # the policy's sets are named on its port group: no scan of every set (one left
        # by a group deleted by hand is found by policy_keys, and goes with DeletePolicy)
        wanted_sets = dict(rows.address_sets)
        for name in sorted(before - set(wanted_sets)):
            stale = api.lookup("Address_Set", name, default=None)
            if stale is not None and _ours(stale, rows.key):
                stale.delete()
        for name, addresses in rows.address_sets:
            row = api.lookup("Address_Set", name, default=None)
            if row is None:
                row = txn.insert(api.tables["Address_Set"])
                row.name = name
                row.external_ids = marks
                row.addresses = list(addresses)
                continue
            if not _ours(row, rows.key):
                raise RuntimeError(f"address set {name} belongs to another owner, not "
                                   f"NetworkPolicy {rows.key}")
            if sorted(str(a) for a in row.addresses) != sorted(addresses):
                row.addresses = list(addresses)
        _sync_acls(txn, api, pg, rows.key, rows.acls, new)


def policy_rows_of(api: Any, key: str) -> list[Any]:
    """Every row of policy ``key``: its port group and the address sets it names, or
    (none there: deleted by hand) the sets named after it, found by name."""
    pg_name = policy_port_group(key)
    pg = api.lookup("Port_Group", pg_name, default=None)
    if pg is not None and _ours(pg, key):
        names = filter(None, pg.external_ids.get(NP_SETS, "").split(","))
        sets = [api.lookup("Address_Set", n, default=None) for n in names]
        return [pg, *(s for s in sets if s is not None and _ours(s, key))]
    return [s for s in api.tables["Address_Set"].rows.values()
            if s.name.startswith(f"{pg_name}_") and _ours(s, key)]


class DeletePolicy(ovs_command.BaseCommand):
    """Every row of policy ``key``: its port group (its ACLs go with it) and address
    sets."""

    def __init__(self, api: Any, key: str) -> None:
        super().__init__(api)
        self.key = key

    def run_idl(self, txn: Any) -> None:
        for row in policy_rows_of(self.api, self.key):
            row.delete()


def policy_keys(api: Any) -> set[str]:
    """The keys of every policy with a row in NB (a port group, or an address set left)."""
    return {row.external_ids[NP_KEY] for table in ("Port_Group", "Address_Set")
            for row in api.tables[table].rows.values()
            if row.external_ids.get(OWNER) == OWNER_VALUE and NP_KEY in row.external_ids}


def _desired(pg: Any, key: str, groups: Iterable[SecurityGroup | BadGroup]
             ) -> list[PolicyAcl]:
    """A policy's ACLs again from what its port group holds: its clauses (their JSON on
    the clause ACLs) and its restricted directions (its drops)."""
    clauses: list[Clause] = []
    restricted: set[str] = set()
    for row in pg.acls:
        if not _ours(row, key):
            continue
        if int(row.priority) == PRIORITY_DROP:
            restricted.add(row.direction)
        text = row.external_ids.get(NP_CLAUSE)
        if text:
            clauses.append(Clause.from_json(text))
    clauses.sort(key=Clause.to_json)
    return policy_acls(pg.name, list(dict.fromkeys(clauses)), restricted, groups)


def refresh_needed(api: Any, groups: Sequence[SecurityGroup | BadGroup]) -> list[str]:
    """The policies' port groups whose products were made from other security groups
    than ``groups`` (their digest on the port group: one read per policy, as the sweep
    asks at every pass)."""
    digest = groups_digest(groups)
    return [pg.name for pg in api.tables["Port_Group"].rows.values()
            if NP_KEY in (ext := pg.external_ids) and ext.get(OWNER) == OWNER_VALUE
            and ext.get(NP_GROUPS) != digest]


class RefreshPolicies(ovs_command.BaseCommand):
    """The products of these policies' port groups with the security groups' rules made
    again (the clauses and drops are kept as they are)."""

    def __init__(self, api: Any, port_groups: Sequence[str],
                 groups: Sequence[SecurityGroup | BadGroup]) -> None:
        super().__init__(api)
        self.port_groups = list(port_groups)
        self.groups = list(groups)

    def run_idl(self, txn: Any) -> None:
        for name in self.port_groups:
            pg = self.api.lookup("Port_Group", name, default=None)
            if pg is None or NP_KEY not in pg.external_ids:
                continue
            key = pg.external_ids[NP_KEY]
            _sync_acls(txn, self.api, pg, key, _desired(pg, key, self.groups))
            pg.external_ids = {**pg.external_ids, NP_GROUPS: groups_digest(self.groups)}


def groups_by_name(groups: Mapping[str, SecurityGroup | BadGroup]
                   ) -> list[SecurityGroup | BadGroup]:
    return [groups[n] for n in sorted(groups)]
