"""The provider's Northbound client: one ovsdbapp connection per server, idempotent
"ensure" commands, and a group-commit batcher that puts several pods' commands into one
transaction.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from ovsdbapp.backend.ovs_idl import connection as ovs_connection
from ovsdbapp.exceptions import TimeoutException
from ovsdbapp.schema.ovn_northbound.impl_idl import OvnNbApiIdlImpl

from podnet.plugins.ovn.nbcommands import (
    DeleteExternals,
    DeletePort,
    DeletePortGroups,
    EnsureAcls,
    EnsureExternal,
    EnsureInfra,
    EnsurePort,
    PortSpec,
    acls_differ,
    by_name,
    external_ok,
    external_switches,
    holds,
    link_ok,
    stateful_ok,
)
from podnet.plugins.ovn.nbpolicy import (
    DeletePolicy,
    EnsurePolicy,
    RefreshPolicies,
    policy_differs,
    policy_keys,
    policy_rows_of,
    refresh_needed,
)
from podnet.plugins.ovn.netpol import PolicyRows
from podnet.plugins.ovn.rows import (
    GROUPS,
    KEY,
    OWNER,
    OWNER_VALUE,
    ExternalNet,
    RouterLink,
)
from podnet.plugins.ovn.secgroups import Acl, BadGroup, SecurityGroup

__all__ = ["GROUPS", "KEY", "OWNER", "OWNER_VALUE", "Batcher", "ExternalNet", "NbClient",
           "PortSpec", "RouterLink", "connect"]

_counter = 0
_counter_lock = threading.Lock()


class _WatchedIdl(ovs_connection.OvsdbIdl):
    """Keeps a note of every Logical_Switch_Port change the server sends (ports created or
    changed by others after podnet read NB, whose addresses its IPAM must hold too).

    ``notify`` runs on the connection's thread: it only records, the provider applies the
    notes under its own lock when it next uses the client (no lock taken here).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (event, name, external ids, addresses and a virtual port's virtual-ip)
        self.port_changes: deque[tuple[str, str, dict[str, str], list[str]]] = deque()

    def notify(self, event: str, row: Any, updates: Any = None) -> None:
        table = getattr(row, "_table", None)
        if table is None or table.name != "Logical_Switch_Port":
            return
        try:
            addresses = list(row.addresses)
            vip = dict(row.options).get("virtual-ip") if row.type == "virtual" else None
            if vip:
                # a virtual port's address is its virtual-ip: held like any other
                addresses.append(f"virtual {vip}")
            self.port_changes.append((event, str(row.name), dict(row.external_ids),
                                      addresses))
        except Exception:  # pragma: no cover - a row without the columns: nothing to hold
            return


def connect(remote: str, timeout: float, backoff_ms: tuple[int, int] | None = None) -> Any:
    """An ``OvnNbApiIdlImpl`` of its own: the backend keeps the connection on the class,
    so every server gets a subclass (a second server would otherwise reuse the first
    connection). ``backoff_ms``: the reconnect backoff's (min, max), ovs' 1 s and 8 s
    when not given."""
    global _counter
    with _counter_lock:
        _counter += 1
        name = f"PodnetNbApi{_counter}"
    idl = _WatchedIdl.from_server(remote, "OVN_Northbound")
    if backoff_ms is not None:
        # the Python IDL has no setter of its own: its session's reconnect FSM has one
        idl._session.reconnect.set_backoff(*backoff_ms)
    conn = ovs_connection.Connection(idl, timeout=timeout)
    cls = type(name, (OvnNbApiIdlImpl,), {"_ovsdb_connection": None})
    return cls(conn)



class Batcher:
    """Group commit: a caller whose commands find no transaction in flight commits them
    at once (after ``window`` seconds, to gather company); commands arriving meanwhile
    ride together in the next transaction. When a shared transaction fails, each caller's
    commands are committed on their own, so one bad command fails only its caller."""

    def __init__(self, api: Any, window: float = 0.0, max_batch: int = 500) -> None:
        self.api = api
        self.window = window
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._pending: list[tuple[list[Any], Future[None]]] = []
        self._committing = False
        #: transactions committed; callers whose commands shared one with others; shared
        #: transactions that failed and were split into one per caller
        self.transactions = 0
        self.batched = 0
        self.split = 0

    def run(self, commands: Iterable[Any]) -> None:
        future: Future[None] = Future()
        with self._lock:
            self._pending.append((list(commands), future))
            leader = not self._committing
            if leader:
                self._committing = True
        if leader:
            self._lead()
        future.result()

    def _lead(self) -> None:
        try:
            while True:
                if self.window:
                    time.sleep(self.window)
                with self._lock:
                    batch = self._pending[:self.max_batch]
                    del self._pending[:self.max_batch]
                    if not batch:
                        self._committing = False
                        return
                self._commit(batch)
        except BaseException:
            with self._lock:
                self._committing = False
                left, self._pending = self._pending, []
            for _, future in left:
                if not future.done():
                    future.set_exception(RuntimeError("batch leader died"))
            raise

    def _commit_one(self, commands: list[Any]) -> None:
        self.transactions += 1
        with self.api.transaction(check_error=True) as txn:
            for cmd in commands:
                txn.add(cmd)

    def _commit(self, batch: list[tuple[list[Any], Future[None]]]) -> None:
        if len(batch) > 1:
            self.batched += len(batch)
        try:
            self._commit_one([cmd for cmds, _ in batch for cmd in cmds])
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, TimeoutException):
                for _, future in batch:
                    future.set_exception(exc)
                return
            for cmds, future in batch:
                try:
                    self._commit_one(cmds)
                except Exception as one:
                    future.set_exception(one)
                else:
                    future.set_result(None)
            self.split += 1
            return
        for _, future in batch:
            future.set_result(None)


class NbClient:
    """The connection, the batcher and read helpers over the IDL's replica."""

    def __init__(self, remote: str, timeout: float = 10.0, window: float = 0.0,
                 backoff_ms: tuple[int, int] | None = None) -> None:
        self.remote = remote
        self.api = connect(remote, timeout, backoff_ms)
        self.batcher = Batcher(self.api, window)
        self._infra_lock = threading.Lock()

    def close(self) -> None:
        try:
            self.api.ovsdb_connection.stop()
        except Exception:  # pragma: no cover - best effort at shutdown
            pass

    def run(self, commands: Iterable[Any]) -> None:
        self.batcher.run(commands)

    def port_changes(self) -> list[tuple[str, str, dict[str, str], list[str]]]:
        """Logical switch port changes seen since the last call: (event, name, external
        ids, addresses), oldest first."""
        changes = self.api.idl.port_changes
        out = []
        while changes:
            out.append(changes.popleft())
        return out

    def ensure_port(self, spec: PortSpec) -> EnsurePort:
        return EnsurePort(self.api, spec)

    def ensure_infra(self, switches: Sequence[str] = (), routers: Sequence[str] = (),
                     port_groups: Sequence[str] = (), links: Sequence[RouterLink] = (),
                     stateful: bool = True) -> None:
        """Commit the missing ones now, in a transaction of their own (routes and NAT may
        not share a transaction with the router's creation), with the router links that
        are missing or differ (a link's switch and router must be among ``switches`` and
        ``routers``, or exist). ``stateful``: ``switches`` hold pods, and each gets (or
        keeps) its ``STATEFUL_ACLS`` in the same transaction that makes it."""
        with self._infra_lock:
            with self.reading() as tables:
                missing = [
                    (t, n) for t, names in (("Logical_Switch", switches),
                                            ("Logical_Router", routers),
                                            ("Port_Group", port_groups))
                    for n in names if by_name(tables[t], n) is None]
                wrong = [link for link in links if not link_ok(self.api, link)]
                stateless = [n for n in switches
                             if stateful and not stateful_ok(self.api, n)]
            if not missing and not wrong and not stateless:
                return
            self.batcher.transactions += 1
            EnsureInfra(self.api, [n for t, n in missing if t == "Logical_Switch"],
                        [n for t, n in missing if t == "Logical_Router"],
                        [n for t, n in missing if t == "Port_Group"],
                        wrong, stateless).execute(check_error=True)

    def infra_ok(self, switches: Sequence[str] = (), port_groups: Sequence[str] = ()) -> bool:
        """Whether these (pods') switches exist with their ``STATEFUL_ACLS`` and these
        port groups exist: a read only, which (unlike ``ensure_infra``) may share one
        ``reading()`` with other checks."""
        with self.reading() as tables:
            return (all(stateful_ok(self.api, n) for n in switches)
                    and all(by_name(tables["Port_Group"], n) is not None
                            for n in port_groups))

    def ensure_externals(self, nets: Sequence[ExternalNet]) -> int:
        """Each router's external network as configured, and podnet's external networks
        of the other routers deleted. Writes only what differs (a restart writes nothing).
        :return: the transactions committed."""
        before = self.batcher.transactions
        # the external switches hold no pod (no ACL of podnet's): left stateless
        self.ensure_infra(switches=[e.switch for e in nets], routers=[e.router for e in nets],
                          links=[e.link for e in nets], stateful=False)
        keep = [e.router for e in nets]
        with self._infra_lock:
            with self.reading():
                wrong = [e for e in nets if not external_ok(self.api, e)]
                stale = set(external_switches(self.api)) - set(keep)
            if wrong:
                self.batcher.transactions += 1
                txn_cmds = [EnsureExternal(self.api, e) for e in wrong]
                with self.api.transaction(check_error=True) as txn:
                    for cmd in txn_cmds:
                        txn.add(cmd)
            if stale:
                self.batcher.transactions += 1
                DeleteExternals(self.api, keep).execute(check_error=True)
        return self.batcher.transactions - before

    def external_ok(self, ext: ExternalNet) -> bool:
        with self.reading():
            return link_ok(self.api, ext.link) and external_ok(self.api, ext)

    def acls_ok(self, acls: Mapping[str, Sequence[Acl]]) -> bool:
        """Whether every port group named has exactly these podnet ACLs."""
        with self.reading():
            return not any(acls_differ(self.api, g, rows) for g, rows in acls.items())

    def ensure_acls(self, acls: Mapping[str, Sequence[Acl]],
                    policies: Sequence[SecurityGroup | BadGroup] | None = None) -> bool:
        """Commit the port groups whose podnet ACLs differ, in a transaction of their own
        (before the members join: a port never is in a group without its rules).
        ``policies``: every security group; the NetworkPolicies' products with their
        rules are made again in the same transaction where they differ (a port under both
        never sees a group's new rules with a policy's old products).
        :return: whether anything was written."""
        with self.reading():
            stale = refresh_needed(self.api, policies) if policies is not None else []
        if not stale and self.acls_ok(acls):  # the common case, without queueing
            return False
        with self._infra_lock:
            with self.reading():
                wrong = {g: rows for g, rows in acls.items()
                         if acls_differ(self.api, g, rows)}
                if policies is not None:
                    stale = refresh_needed(self.api, policies)
            if not wrong and not stale:
                return False
            self.batcher.transactions += 1
            with self.api.transaction(check_error=True) as txn:
                if wrong:
                    txn.add(EnsureAcls(self.api, wrong))
                if stale:
                    txn.add(RefreshPolicies(self.api, stale, policies or ()))
            return True

    def ensure_policy(self, rows: PolicyRows) -> bool:
        """Commit one NetworkPolicy's rows in one transaction when NB differs from them.
        :return: whether anything was written."""
        with self.reading():
            if not policy_differs(self.api, rows):
                return False
        self.run([EnsurePolicy(self.api, rows)])
        return True

    def delete_policy(self, key: str) -> bool:
        """Remove every row of NetworkPolicy ``key`` (one transaction; none when NB has
        none). :return: whether anything was written."""
        with self.reading():
            if not policy_rows_of(self.api, key):
                return False
        self.run([DeletePolicy(self.api, key)])
        return True

    def policy_keys(self) -> set[str]:
        with self.reading():
            return policy_keys(self.api)

    def delete_empty_port_groups(self, names: Sequence[str]) -> None:
        """Delete podnet's port groups among ``names`` that have no member."""
        if names:
            with self._infra_lock:
                self.batcher.transactions += 1
                DeletePortGroups(self.api, names).execute(check_error=True)

    def delete_port(self, name: str, key: str) -> DeletePort:
        return DeletePort(self.api, name, key)

    @contextmanager
    def reading(self) -> Iterator[Any]:
        """The replica's tables, held still: the connection's thread applies the server's
        updates under this lock, and on a reconnect it empties every table before the new
        dump arrives. A read from another thread without it can see a half-loaded replica
        (a port missing whose address is in use) or fail iterating a table that changes.
        Hold it briefly: the connection's thread waits meanwhile."""
        with self.api.ovsdb_connection.lock:
            yield self.api.tables

    def port(self, name: str) -> Any:
        with self.reading():
            return self.api.lookup("Logical_Switch_Port", name, default=None)

    def ports(self) -> list[Any]:
        return self.rows("Logical_Switch_Port")

    def in_port_group(self, group: str, lsp: Any) -> bool:
        with self.reading():
            pg = self.api.lookup("Port_Group", group, default=None)
            return pg is not None and holds(pg, "ports", lsp)

    def link_ok(self, link: RouterLink) -> bool:
        """Whether the router link's two ports are in NB as podnet made them."""
        with self.reading():
            return link_ok(self.api, link)

    def rows(self, table: str) -> list[Any]:
        with self.reading() as tables:
            return list(tables[table].rows.values())

    @property
    def transactions(self) -> int:
        return self.batcher.transactions
