"""A switch whose policies all went and came back: the verdicts are the policies', not
the history's (packets through a real ``ovn-controller`` and the userspace datapath's
conntrack; ``ovn-trace`` cannot show conntrack state).

northd sends a switch's traffic through conntrack only while the switch has a stateful
ACL. Were the last policy's ACLs the switch's last stateful ones, the packets between
their deletion and the next policy would bypass conntrack: entries made before are
neither updated nor removed, exchanges begun meanwhile have none, and the next policy
finds them all again. Here: c sends to a and a answers while no policy exists; a policy
letting nothing into a comes; a sends to c once more (its egress is free), then c to a,
which a must not get. On a switch that was stateless meanwhile, conntrack saw a's
datagram first, took it for the original direction and c's for its reply: let in.
podnet keeps its pods' switches stateful for their whole life (two lowest-priority
``allow-related`` ACLs per switch), so conntrack saw c begin and a's policy drops c."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.hookspecs.netpol import PolicyMember, PolicyRule, ResolvedPolicy
from podnet.linux.netns import run_in_netns
from podnet.testing.netns import netns_unavailable
from podnet.testing.netpol.prober import Endpoint, Prober, Verdict
from podnet.testing.nodebed import NODE, pod
from podnet.testing.ovnbed import OvnBed, OvnNodeBed, bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

SUBNETS = [{"name": "np-gap", "cidr": "10.38.0.0/24", "default": True}]
#: a's UDP port for c's datagrams
PORT = 7001


def _config(bed: OvnBed) -> dict[str, Any]:
    return {"defaultProvider": "ovn",
            "providers": {"ovn": {"remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
                                  "subnets": SUBNETS}},
            "listen": "127.0.0.1:0"}


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[OvnNodeBed]:
    made = OvnNodeBed(tmp_path, _config, pod_cidr="10.96.0.0/24", underlay="192.168.78.0/24")
    try:
        yield made
    finally:
        made.close()


def _socket(end: Endpoint, port: int) -> socket.socket:
    """A UDP socket in ``end``'s namespace bound to its address and ``port`` (0: any)."""
    sock = run_in_netns(end.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
    sock.bind((end.addresses[0], port))
    return sock


def test_a_policy_after_a_stateless_spell_judges_what_began_in_it(
        bed: OvnNodeBed) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    stack, client, ovn = bed.stack, bed.client, bed.ovn
    assert stack is not None and ovn is not None
    stack.create([pod("a"), pod("b"), pod("c")])
    ends: dict[str, Endpoint] = {}
    for name in ("a", "b", "c"):
        _, path = bed.host.netns()
        status, result = client.add(bed.host.container(), path, name)
        assert status == 200, result
        ends[name] = Endpoint(name, path, (result["ips"][0]["address"].split("/")[0],))
    c = ends["c"]

    def into_a(uid: str) -> ResolvedPolicy:
        """a takes nothing (its one peer is no pod): a stateful policy b and c are not in."""
        return ResolvedPolicy("default", "into-a", uid, 1, (PolicyMember(
            "default/a", ends["a"].addresses, NODE, "ovn"),),
            ingress=(PolicyRule(("192.0.2.1/32",)),))

    every = [(s, d, 80, proto) for s in ends for d in ends if s != d
             for proto in ("TCP", "UDP")]
    expected = {cell: Verdict.DROP if cell[1] == "a" else Verdict.PASS for cell in every}
    provider = OvnProvider(ovn.nb_remote, SUBNETS)
    sockets: list[socket.socket] = []
    try:
        def program(policy: ResolvedPolicy | None) -> None:
            done = provider.podnet_network_policy("ovn", "default/into-a", policy)
            assert done is not None and done.programmed, done
            ovn.nbctl("--timeout=30", "--wait=hv", "sync")  # the chassis applied it

        def exchange(sender: socket.socket, receiver: socket.socket, data: bytes) -> bytes:
            """``data`` from one UDP socket to the other (the first datagram there),
            b"" when it does not arrive."""
            sender.sendto(data, receiver.getsockname())
            try:
                return receiver.recv(64)
            except TimeoutError:
                return b""

        with Prober(list(ends.values()), ports=(80,)) as prober:
            program(into_a("u1"))
            seen = prober.probe(every)
            assert seen == expected, {k: v for k, v in seen.items() if v != expected[k]}

            # no policy left: c sends to a, a answers
            program(None)
            assert provider.podnet_network_policy_keys("ovn") == []
            at_a, at_c = _socket(ends["a"], PORT), _socket(c, 0)
            sockets += [at_a, at_c]
            for sock in sockets:
                sock.settimeout(3)
            assert exchange(at_c, at_a, b"request") == b"request"
            assert exchange(at_a, at_c, b"answer") == b"answer"

            # a takes nothing now; a may still send to c, but c gets nothing into a
            program(into_a("u2"))
            assert exchange(at_a, at_c, b"late") == b"late"
            assert exchange(at_c, at_a, b"again") == b"", (
                "c's datagram reached a, which takes nothing: conntrack took a's "
                "datagram for the original direction (the switch was stateless when c "
                "began)")
            seen = prober.probe(every)
            assert seen == expected, {k: v for k, v in seen.items() if v != expected[k]}
    finally:
        for sock in sockets:
            sock.close()
        provider.close()


def test_a_pods_switch_gets_its_stateful_acls_once_and_keeps_them() -> None:
    """In NB: made with the switch, written once, restored when removed behind podnet's
    back, added to a switch made without them; an external switch gets none."""
    from podnet.plugins.ovn.nb import NbClient
    from podnet.plugins.ovn.nbserver import NbServer
    from podnet.plugins.ovn.rows import STATEFUL_ACLS

    def acls(client: NbClient, switch: str) -> list[tuple[Any, ...]]:
        with client.reading() as tables:
            ls = next(r for r in tables["Logical_Switch"].rows.values() if r.name == switch)
            return sorted((a.direction, a.priority, a.match, a.action,
                           a.external_ids.get("podnet/role")) for a in ls.acls)

    want = sorted((*acl, "stateful") for acl in STATEFUL_ACLS)
    with NbServer() as server:
        client = NbClient(server.remote)
        try:
            client.ensure_infra(switches=["pods"])
            assert acls(client, "pods") == want
            assert client.infra_ok(["pods"])
            before = client.batcher.transactions
            client.ensure_infra(switches=["pods"])
            assert client.batcher.transactions == before  # nothing to write
            client.api.acl_del("pods", "to-lport", 0, "ip").execute(check_error=True)
            assert not client.infra_ok(["pods"])
            client.ensure_infra(switches=["pods"])
            assert acls(client, "pods") == want
            client.api.ls_add("older").execute(check_error=True)
            assert not client.infra_ok(["older"])
            client.ensure_infra(switches=["older"])
            assert acls(client, "older") == want
            client.ensure_infra(switches=["outside"], stateful=False)
            assert acls(client, "outside") == []
        finally:
            client.close()
