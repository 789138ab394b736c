"""A burst of pods against the OVN provider (goal P6): fewer, larger transactions.

Reads of the replica do not wait out a transaction in flight; what was read as it should
be (a group's ACLs, a switch, a port group) is not read again per pod until something
changes it; callers arriving one a little behind the other share a transaction.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from podnet.core.models import (
    NetworkRequest,
    NodeInfo,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.hookspecs.types import AllocateContext, NodeContext, PodNetworkContext
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.waiting import wait_for

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

GROUP = "web"
NODE = NodeContext(node=NodeInfo(name="node-0", uid="n0"))


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


def _wait(what: str, done: Any) -> None:
    wait_for(what, done, timeout=20.0, interval=0.01)


def _record(i: int) -> PodNetwork:
    return PodNetwork(
        metadata=ObjectMeta(name=f"p{i}.default.{i:08x}", namespace="burst"),
        spec=PodNetworkSpec(pod_name=f"p{i}", pod_uid=f"{i:08x}", node_name="node-0",
                            provider="ovn", requests=NetworkRequest(
                                port_security=True, security_groups=(GROUP,))))


def _create(plugin: Any, pn: PodNetwork) -> PodNetwork:
    got = plugin.podnet_allocate(context=AllocateContext(pod_network=pn, node=NODE))
    status = PodNetworkStatus(phase=Phase.ALLOCATED, ip=got.ip, mac=got.mac,
                              subnet=got.subnet, gateway=got.gateway, interface=got.interface)
    routed = PodNetwork(metadata=pn.metadata, spec=pn.spec, status=status)
    plugin.podnet_route(context=PodNetworkContext(pod_network=routed, node=NODE))
    return routed


def test_a_read_does_not_wait_out_a_transaction_in_flight(nb_server: NbServer) -> None:
    """The server stopped while a transaction waits for its answer: a read of the replica
    meanwhile goes through (ovsdbapp's connection thread held the replica's lock for the
    whole round trip), and sees the replica as the server last said."""
    from podnet.plugins.ovn.nb import KEY, NbClient, PortSpec

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    assert nb_server.process is not None
    pid = nb_server.process.pid
    writer: threading.Thread | None = None
    try:
        client.ensure_infra(switches=["flight"])
        spec = PortSpec("flight-1", "flight", ["0a:00:00:00:02:01 10.31.0.2"],
                        {KEY: "demo/flight-1"})
        written = threading.Event()

        def write() -> None:
            client.run([client.ensure_port(spec)])
            written.set()

        os.kill(pid, signal.SIGSTOP)
        writer = threading.Thread(target=write)
        writer.start()
        _wait("the transaction sent", lambda: bool(client.api.idl._outstanding_txns))
        read: list[Any] = []
        reader = threading.Thread(target=lambda: read.append(client.port("flight-1")))
        reader.start()
        reader.join(20)
        assert read == [None], "the read waited for the stopped server's answer"
        assert not written.is_set()
    finally:
        os.kill(pid, signal.SIGCONT)
        if writer is not None:
            writer.join(30)
        client.close()


def test_a_burst_reads_the_groups_acls_once_until_they_change(
        nb_server: NbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each pod's allocate and route checked the group's ACLs (and its switch's) against
    NB: the same rows, once per pod. Now once, and again after an ACL changed behind
    podnet's back (the next route writes them back) or NB came back empty."""
    from podnet.plugins.ovn import nb
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, [{"name": "burst", "cidr": "10.44.0.0/24"}], seed=1,
                         security_groups={GROUP: {"ingress": [{"protocol": "tcp",
                                                               "port": 80}]}})
    reads: list[str] = []
    checks = {"acls": nb.acls_differ, "switch": nb.stateful_ok}

    def counted(kind: str) -> Any:
        def check(api: Any, name: str, *rest: Any) -> Any:
            reads.append(kind)
            return checks[kind](api, name, *rest)
        return check

    monkeypatch.setattr(nb, "acls_differ", counted("acls"))
    monkeypatch.setattr(nb, "stateful_ok", counted("switch"))
    try:
        _create(plugin, _record(0))  # the group's rules written, then read as they are
        first = len(reads)
        with ThreadPoolExecutor(8) as pool:
            routed = list(pool.map(lambda i: _create(plugin, _record(i)), range(1, 41)))
        assert len(reads) == first, f"read again for the burst: {reads[first:]}"
        assert all(plugin.client.port(pn.status.interface) is not None for pn in routed)

        client = plugin.client
        client.api.pg_acl_del("sg_web").execute(check_error=True)
        _wait("the ACLs gone from the replica", lambda: not client.acls_ok(
            {"sg_web": plugin._acls_of(_record(0))[0]["sg_web"]}))
        _create(plugin, _record(41))  # route puts them back
        assert client.acls_ok({"sg_web": plugin._acls_of(_record(0))[0]["sg_web"]})

        wanted = plugin._acls_of(_record(0))[0]
        seqno = client.api.idl._session.get_seqno()
        nb_server.restart_fresh()
        _wait("the client reconnected", lambda: client.api.idl._session.get_seqno()
              != seqno and client.api.idl._session.is_connected())
        _wait("the empty NB loaded", lambda: not client.ports())
        assert not client.acls_ok(wanted)
        assert not client.infra_ok(["burst"])
    finally:
        plugin.close()


def test_callers_one_behind_the_other_share_a_transaction(nb_server: NbServer) -> None:
    """Five callers a little more than half a window apart, over two windows and more:
    the transaction waits while they keep coming (it used to leave after one window,
    with the first two or three)."""
    from podnet.plugins.ovn.nb import KEY, NbClient, PortSpec

    nb_server.restart_fresh()
    window = 0.5
    client = NbClient(nb_server.remote, window=window)
    try:
        client.ensure_infra(switches=["linger"])
        before = client.transactions
        errors: list[BaseException] = []

        def one(i: int) -> None:
            spec = PortSpec(f"linger-{i}", "linger", [f"0a:00:00:00:03:{i:02x} 10.32.0.{i + 2}"],
                            {KEY: f"demo/linger-{i}"})
            try:
                client.run([client.ensure_port(spec)])
            except BaseException as exc:
                errors.append(exc)

        threads = []
        for i in range(5):
            if i:
                time.sleep(window / 2)
            threads.append(threading.Thread(target=one, args=(i,)))
            threads[-1].start()
        for t in threads:
            t.join(60)
        assert errors == []
        assert {p.name for p in client.ports()} == {f"linger-{i}" for i in range(5)}
        assert client.transactions - before == 1
    finally:
        client.close()


def _port_spec(prefix: str, switch: str, i: int, third: int) -> Any:
    from podnet.plugins.ovn.nb import KEY, PortSpec

    return PortSpec(f"{prefix}-{i}", switch, [f"0a:00:00:00:{third:02x}:{i:02x} "
                                              f"10.33.{third}.{i + 2}"],
                    {KEY: f"demo/{prefix}-{i}"})


def test_a_leader_goes_back_to_its_caller_once_its_own_commands_are_committed(
        nb_server: NbServer) -> None:
    """The caller that commits a transaction hands the next one to a caller waiting and
    returns: it used to stay the leader while callers kept coming (a whole burst), its
    own worker held from its next pod."""
    from podnet.plugins.ovn.nb import NbClient

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    batcher = client.batcher
    commit_one = batcher._commit_one
    second_held = threading.Event()
    go_on = threading.Event()
    commits: list[int] = []

    def commit(commands: list[Any]) -> None:
        commits.append(len(commands))
        if len(commits) == 1:
            # the second caller queues while the first transaction is in flight
            _wait("the second caller waiting", lambda: len(batcher._pending) == 1)
        elif len(commits) == 2:
            second_held.set()
            go_on.wait(30)
        commit_one(commands)

    batcher._commit_one = commit  # type: ignore[method-assign]
    first_done = threading.Event()
    errors: list[BaseException] = []

    def one(i: int, done: threading.Event | None) -> None:
        try:
            client.run([client.ensure_port(_port_spec("handoff", "handoff", i, 4))])
        except BaseException as exc:
            errors.append(exc)
        if done is not None:
            done.set()

    try:
        client.ensure_infra(switches=["handoff"])
        first = threading.Thread(target=one, args=(0, first_done))
        first.start()
        _wait("the first transaction in flight", lambda: bool(commits))
        second = threading.Thread(target=one, args=(1, None))
        second.start()
        _wait("the second transaction in flight", second_held.is_set)
        # the second transaction is held: the first caller is back all the same
        assert first_done.wait(20), "the first caller is leading the second transaction"
        go_on.set()
        first.join(30)
        second.join(30)
        assert errors == []
        assert commits == [1, 1]
        assert {p.name for p in client.ports()} == {"handoff-0", "handoff-1"}
    finally:
        go_on.set()
        client.close()


def test_a_transaction_leaves_once_the_last_ones_callers_are_back(nb_server: NbServer) -> None:
    """A burst's workers come back for their next pod: once as many callers wait as the
    last transaction had, it leaves, without a quiet window after the last of them (the
    window here is a minute: the callers would have waited it out)."""
    from podnet.plugins.ovn.nb import NbClient

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote, window=0.2)
    errors: list[BaseException] = []

    def round_of(n: int, third: int) -> None:
        start = threading.Barrier(n)

        def one(i: int) -> None:
            start.wait(10)
            try:
                client.run([client.ensure_port(_port_spec(f"back{third}", "back", i, third))])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads), "the callers waited out the window"

    try:
        client.ensure_infra(switches=["back"])
        before = client.transactions
        round_of(3, 5)  # three together: one transaction (they arrive within a window)
        assert client.transactions - before == 1
        client.batcher.window = 60.0
        round_of(3, 6)
        assert client.transactions - before == 2
        assert client.batcher.gathered_expected == 1
        assert errors == []
        assert len(client.ports()) == 6
    finally:
        client.close()


def test_podnets_own_ports_leave_no_notes_and_the_connection_does_not_yield_per_row(
        nb_server: NbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The notes of port changes are for ports others own (the provider skipped podnet's
    own, after the connection's thread had copied their columns); and an update is applied
    without a yield per row (ovsdbapp's, for green threads, gave the CPU away per row while
    the replica's lock is held)."""
    import time as real_time
    import types

    from ovsdbapp.backend.ovs_idl import connection as ovs_connection

    from podnet.plugins.ovn.nb import KEY, OWNER, OWNER_VALUE, NbClient, PortSpec

    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        real_time.sleep(seconds)

    fake_time = types.SimpleNamespace(**{n: getattr(real_time, n) for n in dir(real_time)
                                         if not n.startswith("__")})
    fake_time.sleep = sleep
    monkeypatch.setattr(ovs_connection, "time", fake_time)
    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    try:
        client.ensure_infra(switches=["notes"])
        client.port_changes()
        del sleeps[:]
        ours = [PortSpec(f"ours-{i}", "notes", [f"0a:00:00:00:07:{i:02x} 10.34.0.{i + 2}"],
                         {KEY: f"demo/ours-{i}", OWNER: OWNER_VALUE}) for i in range(20)]
        theirs = PortSpec("theirs", "notes", ["0a:00:00:00:08:01 10.34.1.2"],
                          {KEY: "else/theirs", OWNER: "someone-else"})
        client.run([client.ensure_port(s) for s in [*ours, theirs]])
        _wait("the update applied", lambda: client.port("theirs") is not None)
        assert sleeps == []
        notes = client.port_changes()
        assert [(event, name) for event, name, _, _ in notes] == [("create", "theirs")]
        assert notes[0][2][OWNER] == "someone-else"
        assert notes[0][3] == ["0a:00:00:00:08:01 10.34.1.2"]
        client.run([client.delete_port(s.name, s.external_ids[KEY]) for s in [*ours, theirs]])
        _wait("the ports gone", lambda: not client.ports())
        assert [(e, n) for e, n, _, _ in client.port_changes()] == [("delete", "theirs")]
    finally:
        client.close()


def test_the_ipam_finds_a_ports_addresses_without_a_scan() -> None:
    """Freeing a port's addresses (each allocate and release) scanned every address held:
    a burst of 1,000 pods was quadratic under the provider's lock. The holdings keep an
    index of each port's, whichever way they are written."""
    import random

    from podnet.plugins.ovn.ipam import Held, Ipam, Owned

    ipam = Ipam(seed=3)
    rng = random.Random(7)
    ports = [f"p{i}" for i in range(12)] + [None]  # type: ignore[list-item]

    def scan(port: str | None) -> set[str]:
        return {ip for ip, h in dict.items(ipam.used) if h.port == port}

    for step in range(2000):
        ip = f"10.9.{rng.randrange(4)}.{rng.randrange(40)}"
        port = rng.choice(ports)
        op = rng.randrange(8)
        if op == 0 and port is not None:
            ipam.take(port, [ip], f"0a:00:00:00:{rng.randrange(4):02x}:{rng.randrange(40):02x}")
        elif op == 1 and port is not None:
            ipam.take_vips(port, [ip])
        elif op == 2:
            ipam.used.pop(ip, None)
        elif op == 3:
            ipam.used.setdefault(ip, Held(port))
        elif op == 4 and ip in ipam.used:
            del ipam.used[ip]
        elif op == 5:
            ipam.used.update({ip: Held(port)})
        elif op == 6 and port is not None:
            ipam.free(port)
            assert not scan(port)
        elif op == 7 and port is not None:
            ipam.drop_vips(port, keep=[ip])
        for each in ports:
            assert set(ipam.used.keys_of(each)) == scan(each), (step, each)
            if each is not None:
                assert ipam.vips_of(each) == {ip for ip in scan(each) if ipam.used[ip].vip}
            assert set(ipam.macs.keys_of(each)) == {m for m, p in dict.items(ipam.macs)
                                                    if p == each}
    held = Owned(lambda port: port)
    held["a"] = "x"
    held |= {"b": "x"}
    assert sorted(held.keys_of("x")) == ["a", "b"]
    assert held.popitem()[1] == "x" and len(held.keys_of("x")) == 1
    held.clear()
    assert held.keys_of("x") == [] and not held


def test_the_client_is_handed_out_without_the_providers_lock_when_nothing_is_due(
        nb_server: NbServer) -> None:
    """Every hook asks the provider for its client: with nothing to bring up to date it no
    longer takes the provider's lock (a burst's callers queued for it behind each other's
    address picking); a note of another's port still waits for the lock and is applied."""
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, [{"name": "quick", "cidr": "10.45.0.0/24"}], seed=2)
    try:
        client = plugin.client
        got: list[Any] = []
        with plugin.lock:
            reader = threading.Thread(target=lambda: got.append(plugin.client))
            reader.start()
            reader.join(20)
            assert got == [client], "the client waited for the provider's lock"
            client.api.ls_add("foreign").execute(check_error=True)
            client.api.lsp_add("foreign", "not-ours").execute(check_error=True)
            client.api.lsp_set_addresses(
                "not-ours", ["0a:00:00:00:09:01 10.45.0.9"]).execute(check_error=True)
            _wait("the note", client.has_port_changes)
            waiting = threading.Thread(target=lambda: got.append(plugin.client))
            waiting.start()
            waiting.join(0.5)
            assert waiting.is_alive(), "a note to apply went by without the lock"
        waiting.join(20)
        assert got == [client, client]
        assert plugin.ipam.owner("10.45.0.9") == "a port podnet does not own"
    finally:
        plugin.close()


def test_a_columns_value_is_read_from_its_datum_as_the_attribute_gives_it(
        nb_server: NbServer) -> None:
    """``column`` gives what reading the attribute gives (maps, sets, scalars, row
    references), without the attribute's two extra conversions; a column a transaction
    under way changes is read as the attribute (with the change)."""
    from ovs.db import idl as ovs_idl

    from podnet.plugins.ovn.nb import KEY, OWNER, OWNER_VALUE, NbClient, PortSpec
    from podnet.plugins.ovn.nbcommands import named
    from podnet.plugins.ovn.rows import column

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    try:
        client.ensure_infra(switches=["cols"], port_groups=["pg_cols"])
        entry = "0a:00:00:00:0a:01 10.35.0.2"
        spec = PortSpec("cols-1", "cols", [entry], {KEY: "demo/cols-1", OWNER: OWNER_VALUE},
                        port_security=[entry], port_groups=["pg_cols"],
                        options={"requested-chassis": "node-0"})
        client.run([client.ensure_port(spec)])
        with client.reading() as tables:
            lsp = named(tables["Logical_Switch_Port"], "cols-1")
            pg = named(tables["Port_Group"], "pg_cols")
            assert lsp is client.api.lookup("Logical_Switch_Port", "cols-1")
            assert named(tables["Logical_Switch_Port"], "no-such-port") is None
            for row, names in ((lsp, ["external_ids", "addresses", "port_security", "options",
                                      "type", "up", "enabled", "tag"]),
                               (pg, ["ports", "acls", "name", "external_ids"])):
                for name in names:
                    assert column(row, name) == getattr(row, name), name
            assert column(pg, "ports") == [lsp]
            txn = ovs_idl.Transaction(client.api.idl)
            try:
                lsp.addresses = ["0a:00:00:00:0a:02 10.35.0.3"]
                pg.delvalue("ports", lsp)
                assert column(lsp, "addresses") == ["0a:00:00:00:0a:02 10.35.0.3"]
                assert column(pg, "ports") == []
            finally:
                txn.abort()
            assert column(lsp, "addresses") == [entry]
    finally:
        client.close()


def test_route_finds_a_port_in_place_without_converting_its_columns_twice(
        nb_server: NbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """route after allocate reads the port (its addresses, port security, options,
    external ids), its group and the port's membership: each read converted the column
    three times (the attribute goes through a datum checked atom by atom) and each lookup
    by name went through ovsdbapp's, which parses the name as a UUID first. Now no
    attribute of the port or its group is read that way, and no lookup is ovsdbapp's."""
    from ovs.db import idl as ovs_idl

    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, [{"name": "inplace", "cidr": "10.46.0.0/24"}],
                         seed=4, security_groups={GROUP: {"ingress": [{"protocol": "tcp",
                                                                       "port": 80}]}})
    try:
        routed = _create(plugin, _record(0))
        client = plugin.client
        before = client.transactions
        read: list[str] = []
        row_getattr = ovs_idl.Row.__getattr__

        def counted(row: Any, name: str) -> Any:
            if row._table.name in ("Logical_Switch_Port", "Port_Group"):
                read.append(f"{row._table.name}.{name}")
            return row_getattr(row, name)

        lookups: list[str] = []
        api_lookup = type(client.api).lookup

        def lookup(api: Any, table: str, record: Any, *args: Any, **kwargs: Any) -> Any:
            lookups.append(table)
            return api_lookup(api, table, record, *args, **kwargs)

        monkeypatch.setattr(ovs_idl.Row, "__getattr__", counted)
        monkeypatch.setattr(type(client.api), "lookup", lookup)
        plugin.podnet_route(context=PodNetworkContext(pod_network=routed, node=NODE))
        monkeypatch.undo()
        assert client.transactions == before, "route wrote a port already in place"
        assert read == []
        assert lookups == []
        result = plugin.podnet_verify(context=PodNetworkContext(pod_network=routed, node=NODE))
        assert result is not None and result.ok, result
    finally:
        plugin.close()


def test_a_groups_acls_are_made_once_per_group_as_configured() -> None:
    """allocate and route each made every pod's groups' ACLs from their rules; a group is
    a frozen value, so they are made once per group as configured (and a caller's list
    is its own: changing it changes nothing for the next)."""
    from podnet.plugins.ovn import secgroups
    from podnet.plugins.ovn.secgroups import Rule, SecurityGroup, acls_by_port_group

    made: list[Any] = []
    rule_matches = secgroups._rule_matches

    def counted(rule: Any, port: str, side: str) -> list[str]:
        made.append(rule)
        return rule_matches(rule, port, side)

    group = SecurityGroup("memo", ingress=(Rule("tcp", (80, 80), ("10.0.0.0/8",)),),
                          egress=(Rule("udp", (53, 53)),))
    secgroups._rule_matches = counted  # type: ignore[assignment]
    try:
        first = acls_by_port_group([group])
        count = len(made)
        assert count
        first["sg_memo"].clear()
        again = acls_by_port_group([SecurityGroup("memo", ingress=group.ingress,
                                                  egress=group.egress)])
        assert len(made) == count, "the same group's ACLs were made again"
        assert again == acls_by_port_group([group]) and again["sg_memo"]
        changed = SecurityGroup("memo", ingress=(Rule("tcp", (81, 81), ("10.0.0.0/8",)),))
        assert acls_by_port_group([changed]) != again
        assert len(made) > count
    finally:
        secgroups._rule_matches = rule_matches  # type: ignore[assignment]


def test_a_delete_finds_its_ports_switch_without_a_pass_over_every_port(
        nb_server: NbServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each transaction of deletes made an index of every port of every switch (a
    burst's 60 transactions over a switch of 1,000 ports: 60 passes over it); the switch
    holding a port is now found in each switch's set as the server sent it, or among the
    ports the same transaction adds. Ports on two switches, one moved to the other
    behind podnet's back, all go."""
    import uuid as uuid_module

    from podnet.plugins.ovn import nbcommands
    from podnet.plugins.ovn.nb import KEY, NbClient, PortSpec

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote)
    try:
        client.ensure_infra(switches=["del-a", "del-b"])
        many = [PortSpec(f"del-a-{i}", "del-a", [f"0a:00:00:01:{i >> 8:02x}:{i & 255:02x} "
                                                   f"10.36.{i >> 8}.{i & 255}"],
                         {KEY: f"demo/del-a-{i}"}) for i in range(600)]
        client.run([client.ensure_port(s) for s in many])
        client.run([client.ensure_port(PortSpec("del-b-0", "del-b", ["0a:00:00:02:00:01"],
                                                {KEY: "demo/del-b-0"}))])
        # del-a-1 moved to del-b behind podnet's back
        with client.api.transaction(check_error=True) as txn:
            txn.add(client.api.db_remove("Logical_Switch", "del-a", "ports",
                                         client.port("del-a-1").uuid))
            txn.add(client.api.db_add("Logical_Switch", "del-b", "ports",
                                      client.port("del-a-1").uuid))
        hashed: list[int] = []
        deleting = threading.local()
        uuid_hash = uuid_module.UUID.__hash__

        def counted(self: Any) -> int:
            if getattr(deleting, "on", False):
                hashed.append(1)
            return uuid_hash(self)

        run_idl = nbcommands.DeletePort.run_idl

        def delete(self: Any, txn: Any) -> None:
            deleting.on = True
            try:
                run_idl(self, txn)
            finally:
                deleting.on = False

        monkeypatch.setattr(uuid_module.UUID, "__hash__", counted)
        monkeypatch.setattr(nbcommands.DeletePort, "run_idl", delete)
        client.run([client.delete_port(f"del-a-{i}", f"demo/del-a-{i}") for i in range(3)]
                   + [client.delete_port("del-b-0", "demo/del-b-0")])
        monkeypatch.undo()
        assert len(hashed) < 100, f"{len(hashed)} uuids hashed for 4 deletes"
        names = {p.name for p in client.ports()}
        assert not names & {"del-a-0", "del-a-1", "del-a-2", "del-b-0"}
        assert len(names) == 597
        with client.reading() as tables:
            a = nbcommands.named(tables["Logical_Switch"], "del-a")
            b = nbcommands.named(tables["Logical_Switch"], "del-b")
            assert len(a.ports) == 597 and b.ports == []
    finally:
        client.close()


def test_the_leader_gathering_is_woken_once_all_it_waits_for_are_there(
        nb_server: NbServer) -> None:
    """A leader gathering its batch was woken by every caller arriving (a burst's 16
    workers: 15 times a transaction, each a handover of the GIL); it now sleeps until
    as many wait as it waits for, or its window is over."""
    from podnet.plugins.ovn.nb import NbClient

    nb_server.restart_fresh()
    client = NbClient(nb_server.remote, window=1.0)
    errors: list[BaseException] = []

    def one(i: int, third: int) -> None:
        try:
            client.run([client.ensure_port(_port_spec(f"wake{third}", "wake", i, third))])
        except BaseException as exc:
            errors.append(exc)

    try:
        client.ensure_infra(switches=["wake"])
        start = threading.Barrier(6)

        def first(i: int) -> None:
            start.wait(10)
            one(i, 8)

        threads = [threading.Thread(target=first, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert client.batcher._expected == 6, "the first six did not share a transaction"
        client.batcher.window = 60.0
        arrival = client.batcher._arrival
        wakes: list[int] = []
        wait = arrival.wait

        def counted(timeout: float | None = None) -> bool:
            woken = wait(timeout)
            wakes.append(1)
            return woken

        arrival.wait = counted  # type: ignore[method-assign]
        threads = []
        for i in range(6):  # one after the other, well inside the window
            threads.append(threading.Thread(target=one, args=(i, 9)))
            threads[-1].start()
            time.sleep(0.05)
        for t in threads:
            t.join(30)
        assert errors == []
        assert client.batcher._expected == 6
        assert len(wakes) == 1, f"the leader was woken {len(wakes)} times"
        assert len(client.ports()) == 12
    finally:
        client.close()
