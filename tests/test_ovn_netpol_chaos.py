"""NetworkPolicy on OVN, idempotent and crash-safe on a real NB server: a call made twice,
after a transaction that never committed, by a restarted provider, or after rows were
changed behind podnet's back converges to the same rows (no duplicate, one transaction
per change, none when nothing changed); what a policy deleted meanwhile left is found by
``podnet_network_policy_keys`` and removed by a call with ``None``.

``PODNET_CHAOS_EXAMPLES`` sets the count of random policy histories (default 40)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podnet.hookspecs.netpol import (
    PolicyMember,
    PolicyPort,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

EXAMPLES = int(os.environ.get("PODNET_CHAOS_EXAMPLES", "40"))
PODS = {f"p{i}": (f"10.16.0.{10 + i}", f"fd00:16::{10 + i:x}") for i in range(5)}
GROUPS = {"web": {"ingress": [{"protocol": "tcp", "port": 80}]}}
#: what the groups become in a random history's step (and back)
OTHER_GROUPS = {"web": {"ingress": [{"protocol": "udp", "port": "50-60", "from": "10.0.0.0/8"}],
                        "egress": [{"protocol": "icmp"}]},
                "db": {"ingress": [{"groups": ["web"]}], "egress": []}}


def _nbctl(server: NbServer, *args: str) -> str:
    return subprocess.run(["ovn-nbctl", f"--db={server.remote}", *args], check=True,
                          capture_output=True, text=True, timeout=30).stdout


def _pods(server: NbServer) -> None:
    """A switch with a podnet port per pod, as allocate writes them (external_ids)."""
    _nbctl(server, "ls-add", "ovn-default")
    for name, (v4, v6) in PODS.items():
        port = f"default/{name}-rec"
        _nbctl(server, "lsp-add", "ovn-default", port, "--", "lsp-set-addresses", port,
               f"0a:00:00:00:00:{int(name[1:]) + 10:02x} {v4} {v6}", "--", "set",
               "Logical_Switch_Port", port, "external_ids:podnet/owner=podnet",
               f"external_ids:pod={name}", "external_ids:namespace=default",
               f"external_ids:podnet/ip={v4}", f"external_ids:podnet/ipv6={v6}")


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


def _fresh(server: NbServer) -> Any:
    from podnet.plugins.ovn.provider import OvnProvider

    server.restart_fresh()
    _pods(server)
    return OvnProvider(server.remote, seed=1, security_groups=GROUPS)


@pytest.fixture
def provider(nb_server: NbServer) -> Iterator[Any]:
    plugin = _fresh(nb_server)
    yield plugin
    plugin.close()


def member(name: str) -> PolicyMember:
    return PolicyMember(f"default/{name}", PODS[name], "node-0", "ovn", ("192.168.0.1",))


def snapshot(provider: Any) -> list[tuple[Any, ...]]:
    """Every row of every policy, as NB holds them (uuids left out)."""
    from podnet.plugins.ovn.netpol import NP_KEY

    client = provider.client
    out: list[tuple[Any, ...]] = []
    with client.reading() as tables:
        for pg in tables["Port_Group"].rows.values():
            if NP_KEY in pg.external_ids:
                out.append(("pg", pg.name, tuple(sorted(p.name for p in pg.ports)),
                            tuple(sorted(dict(pg.external_ids).items()))))
                out.extend(("acl", pg.name, a.direction, int(a.priority), a.match, a.action,
                            tuple(sorted(dict(a.external_ids).items()))) for a in pg.acls)
        for s in tables["Address_Set"].rows.values():
            if NP_KEY in s.external_ids:
                out.append(("as", s.name, tuple(sorted(s.addresses)),
                            tuple(sorted(dict(s.external_ids).items()))))
    return sorted(out)


def _no_duplicates(rows: list[tuple[Any, ...]]) -> None:
    acls = [r[:6] for r in rows if r[0] == "acl"]
    assert len(acls) == len(set(acls)), acls


def _abort(provider: Any, command: Any) -> None:
    """Run ``command`` in a transaction that never commits (the controller died before
    the commit reached NB)."""
    class Crash(Exception):
        pass

    with pytest.raises(Crash), provider.client.api.transaction(check_error=True) as txn:
        txn.add(command)
        raise Crash


def test_a_second_call_writes_nothing_and_a_restart_finds_the_same_rows(
        provider: Any, nb_server: NbServer) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    pol = ResolvedPolicy("default", "np", "u", 1, (member("p0"), member("p1")),
                         ingress=(PolicyRule(("10.16.0.12/32", "fd00:16::c/128"),
                                             (PolicyPort(Protocol.TCP, 80, 90),)),))
    client = provider.client
    before = client.transactions
    assert provider.podnet_network_policy("ovn", "default/np", pol).programmed
    assert client.transactions == before + 1  # one transaction per change
    first = snapshot(provider)
    assert provider.podnet_network_policy("ovn", "default/np", pol).programmed
    assert client.transactions == before + 1 and snapshot(provider) == first
    again = OvnProvider(nb_server.remote, seed=2, security_groups=GROUPS)
    try:
        assert again.podnet_network_policy("ovn", "default/np", pol).programmed
        assert again.client.transactions == 0
        assert snapshot(again) == first
        assert again.podnet_network_policy_keys("ovn") == ["default/np"]
    finally:
        again.close()


def test_a_transaction_that_never_committed_changes_nothing(provider: Any) -> None:
    from podnet.plugins.ovn.nbpolicy import DeletePolicy, EnsurePolicy, member_ports
    from podnet.plugins.ovn.netpol import policy_rows

    old = ResolvedPolicy("default", "np", "u", 1, (member("p0"),), ingress=())
    new = ResolvedPolicy("default", "np", "u", 2, (member("p0"), member("p2")),
                         ingress=(PolicyRule(None, (PolicyPort(Protocol.UDP, 53),)),),
                         egress=(PolicyRule(("10.0.0.0/8",)),))
    provider.podnet_network_policy("ovn", "default/np", old)
    before = snapshot(provider)
    client = provider.client
    with client.reading():
        ports = member_ports(client.api, new.members)
    _abort(provider, EnsurePolicy(client.api, policy_rows(new, ports)))
    assert snapshot(provider) == before
    _abort(provider, DeletePolicy(client.api, "default/np"))
    assert snapshot(provider) == before
    # the retry after the crash: the new rows, once
    provider.podnet_network_policy("ovn", "default/np", new)
    after = snapshot(provider)
    _no_duplicates(after)
    assert any(r[0] == "as" and r[2] == ("10.0.0.0/8",) for r in after), after


def test_rows_changed_behind_podnets_back_are_put_right(provider: Any,
                                                       nb_server: NbServer) -> None:
    from podnet.plugins.ovn.netpol import policy_port_group

    pol = ResolvedPolicy("default", "np", "u", 1, (member("p0"),),
                         ingress=(PolicyRule(("10.16.0.11/32",), ()),))
    provider.podnet_network_policy("ovn", "default/np", pol)
    good = snapshot(provider)
    pg = policy_port_group("default/np")
    acl = next(r for r in good if r[0] == "acl" and r[3] == 2030)
    # a duplicate of one of its ACLs, a stray member, an address set's addresses changed
    _nbctl(nb_server, "--", "--id=@a", "create", "ACL", f"direction={acl[2]}",
           f"priority={acl[3]}", f"match={json.dumps(acl[4])}", f"action={acl[5]}",
           *[f"external_ids:{json.dumps(k)}={json.dumps(v)}" for k, v in acl[6]],
           "--", "add", "Port_Group", pg, "acls", "@a")
    uuid = _nbctl(nb_server, "--bare", "--columns=_uuid", "find", "Logical_Switch_Port",
                  "name=default/p3-rec").strip()
    _nbctl(nb_server, "add", "Port_Group", pg, "ports", uuid)
    name = next(r[1] for r in good if r[0] == "as")
    _nbctl(nb_server, "set", "Address_Set", name, 'addresses="0.0.0.0/0"')
    provider.client.api.idl.run()  # nothing: the IDL follows on its own thread

    def seen() -> bool:
        rows = snapshot(provider)
        return rows != good and sum(r[0] == "acl" for r in rows) > sum(
            r[0] == "acl" for r in good) and any(r[2] == ("0.0.0.0/0",) for r in rows)

    from test_ovn_provider import _wait

    _wait(seen, "the changes to reach the IDL")
    provider.podnet_network_policy("ovn", "default/np", pol)
    assert snapshot(provider) == good


def test_orphans_are_found_by_their_keys_and_removed(provider: Any,
                                                    nb_server: NbServer) -> None:
    from podnet.plugins.ovn.netpol import policy_port_group
    from podnet.plugins.ovn.provider import OvnProvider

    for name in ("gone", "kept", "half"):
        provider.podnet_network_policy("ovn", f"default/{name}", ResolvedPolicy(
            "default", name, "u", 1, (member("p1"),),
            ingress=(PolicyRule(("10.16.0.10/32",)),)))
    # half: its port group deleted by hand, an address set of it left
    _nbctl(nb_server, "destroy", "Port_Group", policy_port_group("default/half"))
    provider.close()
    restarted = OvnProvider(nb_server.remote, seed=3, security_groups=GROUPS)
    try:
        assert restarted.podnet_network_policy_keys("ovn") == [
            "default/gone", "default/half", "default/kept"]
        for key in ("default/gone", "default/half"):
            assert restarted.podnet_network_policy("ovn", key, None).programmed
        assert restarted.podnet_network_policy_keys("ovn") == ["default/kept"]
        assert {r[1] for r in snapshot(restarted) if r[0] == "pg"} == {
            policy_port_group("default/kept")}
        before = restarted.client.transactions
        restarted.podnet_network_policy("ovn", "default/gone", None)  # nothing left
        assert restarted.client.transactions == before
    finally:
        restarted.close()


_CIDRS = ["10.16.0.10/32", "10.16.0.11/32", "10.0.0.0/8", "fd00:16::a/128", "::/0",
          "192.168.0.0/24", "10.300.0.0/16"]
_ports = st.builds(PolicyPort, st.sampled_from(list(Protocol)),
                   st.one_of(st.none(), st.integers(1, 70000)),
                   st.one_of(st.none(), st.integers(1, 70000)))
_rules = st.builds(
    PolicyRule,
    st.one_of(st.none(), st.lists(st.sampled_from(_CIDRS), max_size=3).map(
        lambda c: tuple(sorted(set(c))))),
    st.lists(_ports, max_size=3).map(tuple),
    st.one_of(st.none(), st.lists(st.sampled_from([f"default/p{i}" for i in range(5)]),
                                  min_size=1, max_size=2).map(lambda m: tuple(sorted(set(m))))))
_direction = st.one_of(st.none(), st.lists(_rules, max_size=3).map(tuple))
_policies = st.builds(
    lambda members, ingress, egress: ResolvedPolicy(
        "default", "np", "u", 1, tuple(member(m) for m in sorted(set(members))),
        ingress, egress),
    st.lists(st.sampled_from(sorted(PODS)), max_size=4), _direction, _direction)
_steps = st.lists(st.tuples(st.one_of(st.none(), _policies), st.booleans(), st.booleans(),
                            st.booleans()), min_size=1, max_size=5)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow])
@given(steps=_steps)
def test_any_history_of_a_policy_converges(nb_server: NbServer, steps: Any) -> None:
    """Each step: maybe a transaction for it that never commits, then the call, maybe a
    second call, maybe the security groups' rules changing (the sync re-makes the
    products); after it NB holds exactly the step's rows (none for ``None``), as a call
    would write them with the groups of that moment."""
    from podnet.plugins.ovn.nbpolicy import (
        DeletePolicy,
        EnsurePolicy,
        member_ports,
        policy_differs,
    )
    from podnet.plugins.ovn.netpol import policy_rows

    provider = _fresh(nb_server)
    try:
        client = provider.client
        groups = [provider.security_groups[n] for n in sorted(provider.security_groups)]
        other = False
        for pol, crash, twice, regroup in steps:
            if pol is None:
                command: Any = DeletePolicy(client.api, "default/np")
            else:
                with client.reading():
                    command = EnsurePolicy(client.api, policy_rows(
                        pol, member_ports(client.api, pol.members), groups))
            if crash:
                before = snapshot(provider)
                _abort(provider, command)
                assert snapshot(provider) == before
            done = provider.podnet_network_policy("ovn", "default/np", pol)
            assert done.programmed, done
            rows = snapshot(provider)
            _no_duplicates(rows)
            if pol is None:
                assert rows == []
                assert provider.podnet_network_policy_keys("ovn") == []
            else:
                with client.reading():
                    wanted = policy_rows(pol, member_ports(client.api, pol.members), groups)
                    assert not policy_differs(client.api, wanted)
                assert provider.podnet_network_policy_keys("ovn") == ["default/np"]
            if regroup:
                other = not other
                provider.podnet_configure("ovn", {"security_groups": OTHER_GROUPS if other
                                                  else GROUPS})
                client = provider.client  # its next use writes the groups and products
                groups = [provider.security_groups[n]
                          for n in sorted(provider.security_groups)]
                if pol is not None:
                    with client.reading():
                        wanted = policy_rows(pol, member_ports(client.api, pol.members),
                                             groups)
                        assert not policy_differs(client.api, wanted)
                    rows = snapshot(provider)
            if twice:
                count = client.transactions
                provider.podnet_network_policy("ovn", "default/np", pol)
                assert client.transactions == count and snapshot(provider) == rows
    finally:
        provider.close()
