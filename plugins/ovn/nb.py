"""The provider's Northbound client: one ovsdbapp connection per server, idempotent
"ensure" commands, and a group-commit batcher that puts several pods' commands into one
transaction.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import ovs.poller
from ovs.db import data as ovs_data
from ovs.db import types as ovs_types
from ovsdbapp.backend.ovs_idl import connection as ovs_connection
from ovsdbapp.backend.ovs_idl import transaction as ovs_transaction
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
    named,
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

__all__ = ["GROUPS", "KEY", "OWNER", "OWNER_VALUE", "Batcher", "ExternalNet", "FlowsState",
           "NbClient", "PortSpec", "RouterLink", "connect"]

#: northd writes this NB_Global option when it first serves an NB: an NB without it has
#: no northd, so no chassis will ever follow nb_cfg
NORTHD_MARK = "mac_prefix"

_counter = 0
_counter_lock = threading.Lock()


#: the tables and columns whose changes count in ``_WatchedIdl.structure_changes``
#: (with every ACL's)
STRUCTURE_TABLES = ("Logical_Switch", "Port_Group")
STRUCTURE_COLUMNS = ("name", "acls")


def _changed(updates: Any, columns: Sequence[str]) -> bool:
    """Whether an update's old values (a row of just the columns that changed) name one
    of ``columns`` (True when it cannot tell)."""
    data = getattr(updates, "_data", None)
    return not isinstance(data, dict) or any(c in data for c in columns)


_OWNER_ATOM = ovs_data.Atom(ovs_types.StringType, OWNER)


def _owner(row: Any) -> str | None:
    """A port's ``OWNER`` external id, read from the row's datum (reading the column
    converts every key of it twice: per port of a burst, on the connection's thread)."""
    datum = row._data.get("external_ids") if row._data is not None else None
    if datum is None:
        return dict(row.external_ids).get(OWNER)
    value = datum.values.get(_OWNER_ATOM)
    return None if value is None else str(value.value)


class _WatchedIdl(ovs_connection.OvsdbIdl):
    """Keeps a note of every change the server sends of a Logical_Switch_Port podnet does
    not own (ports created or changed by others after podnet read NB, whose addresses its
    IPAM must hold too; podnet's own follow their records).

    ``notify`` runs on the connection's thread: it only records, the provider applies the
    notes under its own lock when it next uses the client (no lock taken here).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (event, name, external ids, addresses and a virtual port's virtual-ip)
        self.port_changes: deque[tuple[str, str, dict[str, str], list[str]]] = deque()
        #: notified on every NB_Global change (northd's sb_cfg and hv_cfg following),
        #: which ``global_changes`` counts
        self.global_changed = threading.Condition()
        self.global_changes = 0
        #: changes that may undo what ``NbClient`` confirmed of the replica: any ACL's, and
        #: a switch or port group made, removed, renamed or given other ACLs
        self.structure_changes = 0

    def cooperative_yield(self) -> None:
        """No yield between the rows of an update: ovsdbapp's is for green threads; here
        it gave the interpreter (and on a loaded machine the CPU) away once per row while
        the connection's thread holds the replica's lock, which the readers wait for."""

    def notify(self, event: str, row: Any, updates: Any = None) -> None:
        table = getattr(row, "_table", None)
        if table is not None and table.name == "NB_Global":
            with self.global_changed:
                self.global_changes += 1
                self.global_changed.notify_all()
            return
        if table is not None and (table.name == "ACL" or (
                table.name in STRUCTURE_TABLES and (
                    event != "update" or _changed(updates, STRUCTURE_COLUMNS)))):
            self.structure_changes += 1
            return
        if table is None or table.name != "Logical_Switch_Port":
            return
        if _owner(row) == OWNER_VALUE:
            return  # podnet's own port: its record decides, the notes are for others'
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


def _commit_block_unlocked(txn: Any, lock: Any) -> Any:
    """The IDL's ``Transaction.commit_block`` (send, then run the IDL until the server
    answers), with the replica's ``lock`` let go while it waits on the socket. The IDL
    drops the transaction's changes from its rows once the request is sent, so a reader
    meanwhile sees the replica as the server last said; every step that changes the
    replica (the IDL's run) holds the lock."""
    while True:
        status = txn.commit()
        if status != txn.INCOMPLETE:
            return status
        txn.idl.run()
        poller = ovs.poller.Poller()
        txn.idl.wait(poller)
        txn.wait(poller)
        try:
            lock.release()
        except RuntimeError:  # not held by this thread: nothing to let go
            held = False
        else:
            held = True
        try:
            poller.block()
        finally:
            if held:
                lock.acquire()


class _Transaction(ovs_transaction.Transaction):
    """ovsdbapp's transaction, except that its connection thread lets go of the replica's
    lock while the server works on the request. ovsdbapp holds it from the first command
    to the answer: every read (``NbClient.reading``) waited out each transaction in
    flight, and in a burst the callers could not get their next commands ready
    meanwhile, so transactions were smaller and more of them."""

    def pre_commit(self, txn: Any) -> None:
        super().pre_commit(txn)
        txn.commit_block = functools.partial(_commit_block_unlocked, txn,
                                             self.ovsdb_connection.lock)


def _create_transaction(self: Any, check_error: bool = False, log_errors: bool = True,
                        **kwargs: Any) -> _Transaction:
    return _Transaction(self, self.ovsdb_connection, self.ovsdb_connection.timeout,
                        check_error, log_errors)


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
    cls = type(name, (OvnNbApiIdlImpl,), {"_ovsdb_connection": None,
                                          "create_transaction": _create_transaction})
    return cls(conn)



class _Call:
    """One caller's commands in the batcher: done once committed (``error`` set when they
    failed); ``lead`` when the caller is to commit the next batch itself."""

    __slots__ = ("commands", "done", "error", "lead", "wake")

    def __init__(self, commands: list[Any]) -> None:
        self.commands = commands
        self.done = False
        self.error: BaseException | None = None
        self.lead = False
        #: set when the commands are done, or the caller is made the leader
        self.wake = threading.Event()

    def finish(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done = True
        self.wake.set()


class BatchLeaderDied(RuntimeError):
    """The caller committing a batch died with it: whether the batch was committed is
    not known."""


def outcome_unknown(exc: BaseException) -> bool:
    """Whether a transaction that raised ``exc`` may be committed all the same: its
    answer did not come in time (the request was sent), its batch's leader died, or the
    caller itself was interrupted (not an ``Exception``: a crash, an exit) at a point
    that may be after the request went out."""
    return (isinstance(exc, (TimeoutException, BatchLeaderDied))
            or not isinstance(exc, Exception))


class Batcher:
    """Group commit: a caller whose commands find no transaction in flight commits them,
    once ``window`` seconds passed without another caller's arriving (at most
    ``LINGER_WINDOWS`` windows: a burst's callers, each a little behind the other, share
    one transaction rather than each starting one), or as soon as as many callers wait as
    the last transaction had (a burst's workers coming back for their next pod: no window
    left idle after the last of them); commands arriving meanwhile ride together in the
    next transaction. The leader commits one transaction, its own, and hands the next to
    the first caller waiting: its own caller goes on at once (a leader that stayed one for
    the whole burst kept its worker from its next pod). When a shared transaction fails,
    each caller's commands are committed on their own, so one bad command fails only its
    caller."""

    #: the longest a transaction waits for company, in windows
    LINGER_WINDOWS = 8

    def __init__(self, api: Any, window: float = 0.0, max_batch: int = 500) -> None:
        self.api = api
        self.window = window
        self.max_batch = max_batch
        self._lock = threading.Lock()
        #: notified when the leader gathering its batch has all it waits for
        self._arrival = threading.Condition(self._lock)
        self._pending: list[_Call] = []
        self._committing = False
        #: while the leader gathers: the callers it waits for (an arrival that makes them
        #: all wakes it; the others it counts when its window is over)
        self._gathering: int | None = None
        #: callers the last transaction had: in a burst, as many come back
        self._expected = 0
        #: transactions committed; callers whose commands shared one with others; shared
        #: transactions that failed and were split into one per caller
        self.transactions = 0
        self.batched = 0
        self.split = 0
        #: gathers that ended on the expected callers all there (not on a quiet window)
        self.gathered_expected = 0

    def run(self, commands: Iterable[Any]) -> None:
        call = _Call(list(commands))
        with self._lock:
            self._pending.append(call)
            if self._committing:
                if self._gathering is not None and len(self._pending) >= self._gathering:
                    self._arrival.notify()
            else:
                self._committing = True
                call.lead = True
        while not call.done:
            if call.lead:
                self._lead(call)
            else:
                call.wake.wait()
        if call.error is not None:
            raise call.error

    def _gather(self) -> None:
        """Wait while callers keep arriving: until a window passes with none, the batch
        is full, as many wait as the last transaction had (when it had company), or
        ``LINGER_WINDOWS`` windows have passed. Called with the lock held."""
        deadline = time.monotonic() + self.window * self.LINGER_WINDOWS
        wanted = self.max_batch if self._expected <= 1 else min(self._expected,
                                                                  self.max_batch)
        self._gathering = wanted
        try:
            while len(self._pending) < wanted:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                waiting = len(self._pending)
                # woken by the arrival that makes them all, not by each (a burst's
                # leader was woken 15 times a transaction, the GIL handed to it and back)
                self._arrival.wait(min(self.window, left))
                if len(self._pending) == waiting:
                    return  # a window without an arrival
        finally:
            self._gathering = None
        if wanted < self.max_batch:
            self.gathered_expected += 1

    def _lead(self, call: _Call) -> None:
        """Commit the batch that holds ``call``, then make the first caller waiting the
        leader (or none: the next to arrive is)."""
        batch: list[_Call] = []
        try:
            while not call.done:
                with self._lock:
                    if self.window:
                        self._gather()
                    batch = self._pending[:self.max_batch]
                    del self._pending[:self.max_batch]
                    self._expected = len(batch)
                self._commit(batch)
        except BaseException:
            with self._lock:
                self._committing = False
                left, self._pending = self._pending, []
            for one in [*batch, *left]:
                if not one.done:
                    one.finish(BatchLeaderDied("batch leader died"))
            raise
        with self._lock:
            if self._pending:
                successor = self._pending[0]
                successor.lead = True
                successor.wake.set()
            else:
                self._committing = False

    def _commit_one(self, commands: list[Any]) -> None:
        self.transactions += 1
        with self.api.transaction(check_error=True) as txn:
            for cmd in commands:
                txn.add(cmd)

    def _commit(self, batch: list[_Call]) -> None:
        if len(batch) > 1:
            self.batched += len(batch)
        try:
            self._commit_one([cmd for call in batch for cmd in call.commands])
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, TimeoutException):
                for call in batch:
                    call.finish(exc)
                return
            for call in batch:
                try:
                    self._commit_one(call.commands)
                except Exception as one:
                    call.finish(one)
                else:
                    call.finish()
            self.split += 1
            return
        for call in batch:
            call.finish()


@attrs.frozen
class FlowsState:
    """How far NB's changes have got (``NB_Global``): ``nb_cfg`` the last change's
    number, ``sb_cfg`` the one northd has put in SB, ``hv_cfg`` the one every chassis has
    installed (northd: the least over the chassis; ``nb_cfg`` itself with no chassis).
    ``served``: a northd has served this NB (without one nothing ever follows)."""

    nb_cfg: int = 0
    sb_cfg: int = 0
    hv_cfg: int = 0
    served: bool = False

    def installed(self, target: int) -> bool:
        """Whether change ``target`` is on every chassis (an NB no northd serves has no
        dataplane to wait for: committed is all there is)."""
        return not self.served or self.hv_cfg >= target


class NbClient:
    """The connection, the batcher and read helpers over the IDL's replica."""

    def __init__(self, remote: str, timeout: float = 10.0, window: float = 0.0,
                 backoff_ms: tuple[int, int] | None = None) -> None:
        self.remote = remote
        self.api = connect(remote, timeout, backoff_ms)
        self.batcher = Batcher(self.api, window)
        self._infra_lock = threading.Lock()
        #: what a read of the replica found as it should be (a pods' switch with its
        #: stateful ACLs, a port group, a group's podnet ACLs), with the generation it was
        #: read at (``_generation``) and what was wanted: good until a change that could
        #: undo it, so a burst's pods are not each checked against the same rows
        self._confirmed: dict[tuple[str, str], tuple[tuple[int, int], Any]] = {}

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

    def has_port_changes(self) -> bool:
        """Whether ``port_changes`` has anything to say."""
        return bool(self.api.idl.port_changes)

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
        if stateful and not routers and not links and self.infra_ok(switches, port_groups):
            return  # the common case, without the lock or a read
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

    def _generation(self) -> tuple[int, int]:
        """Changes to the rows a confirmation rests on, and the connection's (a reconnect
        may bring another NB: the replica is emptied and loaded again)."""
        idl = self.api.idl
        return idl.structure_changes, idl._session.get_seqno()

    def _confirm(self, facts: Mapping[tuple[str, str], Any],
                 holds: Callable[[tuple[str, str], Any], bool]) -> bool:
        """Whether every fact holds (``holds(fact, wanted)``, on the replica): those
        confirmed since the last change that could undo them are not read again."""
        generation = self._generation()
        todo = [f for f, wanted in facts.items()
                if self._confirmed.get(f) != (generation, wanted)]
        if not todo:
            return True
        with self.reading():
            generation = self._generation()  # what the reads below see
            for fact in todo:
                if not holds(fact, facts[fact]):
                    return False
                self._confirmed[fact] = (generation, facts[fact])
        return True

    def _holds(self, fact: tuple[str, str], wanted: Any) -> bool:
        kind, name = fact
        if kind == "switch":
            return stateful_ok(self.api, name)
        if kind == "port group":
            return by_name(self.api.tables["Port_Group"], name) is not None
        return not acls_differ(self.api, name, [Acl(*key) for key in wanted])

    def infra_ok(self, switches: Sequence[str] = (), port_groups: Sequence[str] = ()) -> bool:
        """Whether these (pods') switches exist with their ``STATEFUL_ACLS`` and these
        port groups exist (a read only when something changed since it was last so)."""
        return self._confirm({**{("switch", n): None for n in switches},
                              **{("port group", n): None for n in port_groups}}, self._holds)

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
        """Whether every port group named has exactly these podnet ACLs (a read only when
        an ACL or a group changed since it was last so: not for each pod of a burst)."""
        return self._confirm({("acls", g): tuple(sorted((a.direction, a.priority, a.match,
                                                         a.action) for a in rows))
                              for g, rows in acls.items()}, self._holds)

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

    def ensure_policy(self, rows: PolicyRows) -> int | None:
        """Commit one NetworkPolicy's rows in one transaction when NB differs from them;
        the transaction bumps ``NB_Global.nb_cfg``.
        :return: the ``nb_cfg`` it made (``None``: nothing written; ``0``: NB has no
        NB_Global row to count on)."""
        with self.reading():
            if not policy_differs(self.api, rows):
                return None
        command = EnsurePolicy(self.api, rows)
        self.run([command])
        return command.nb_cfg or 0

    def flows_state(self) -> FlowsState:
        """``NB_Global``'s counters as the replica has them."""
        with self.reading() as tables:
            row = next(iter(tables["NB_Global"].rows.values()), None)
            if row is None:
                return FlowsState()
            return FlowsState(nb_cfg=row.nb_cfg, sb_cfg=row.sb_cfg, hv_cfg=row.hv_cfg,
                              served=NORTHD_MARK in dict(row.options))

    def wait_installed(self, target: int, timeout: float) -> FlowsState:
        """Wait up to ``timeout`` seconds for change ``target`` to be on every chassis
        (:meth:`FlowsState.installed`); :return: the state last read."""
        deadline = time.monotonic() + timeout
        idl = self.api.idl
        while True:
            seen = idl.global_changes
            # read outside the condition: the connection's thread notifies under the
            # replica's lock, which flows_state takes
            state = self.flows_state()
            left = deadline - time.monotonic()
            if state.installed(target) or left <= 0:
                return state
            with idl.global_changed:
                if idl.global_changes == seen:
                    idl.global_changed.wait(left)

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
            return named(self.api.tables["Logical_Switch_Port"], name)

    def ports(self) -> list[Any]:
        return self.rows("Logical_Switch_Port")

    def in_port_group(self, group: str, lsp: Any) -> bool:
        with self.reading():
            pg = named(self.api.tables["Port_Group"], group)
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
