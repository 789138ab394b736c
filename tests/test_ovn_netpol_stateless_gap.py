"""A switch whose policies all went and came back: the verdicts are the policies', not
the history's (packets through a real ``ovn-controller`` and the userspace datapath's
conntrack; ``ovn-trace`` cannot show conntrack state).

northd sends a switch's traffic through conntrack only while the switch has a stateful
ACL. Were the last policy's ACLs the switch's last stateful ones, the packets between
their deletion and the next policy would bypass conntrack: the entries made before are
neither updated nor removed, and trusted (or found invalid) once the next policy makes
the switch stateful again. Here: b's connection to c, made under a policy (on a), is
reset after the policy went; under the next policy, b's new connection from the same
port is a SYN into an entry conntrack still holds as established (out of its window:
invalid, dropped) although no policy selects b or c. podnet keeps its pods' switches
stateful for their whole life (two lowest-priority ``allow-related`` ACLs per switch),
so conntrack saw the reset and the new connection is a new one."""

from __future__ import annotations

import socket
import struct
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
#: b's client port and c's server port: the one connection's tuple, used twice
CLIENT_PORT, SERVER_PORT = 7000, 7001


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
    """A TCP socket in ``end``'s namespace bound to its address and ``port``."""
    sock = run_in_netns(end.netns, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((end.addresses[0], port))
    return sock


def test_a_connection_reset_between_two_policies_leaves_no_trace_in_the_next(
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
    b, c = ends["b"], ends["c"]

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

        with Prober(list(ends.values()), ports=(80,)) as prober:
            program(into_a("u1"))
            server = _socket(c, SERVER_PORT)
            sockets.append(server)
            server.listen()
            first = _socket(b, CLIENT_PORT)
            sockets.append(first)
            first.settimeout(10)
            first.connect((c.addresses[0], SERVER_PORT))
            accepted, _ = server.accept()
            sockets.append(accepted)
            accepted.settimeout(10)
            first.sendall(b"x")
            assert accepted.recv(1) == b"x"
            seen = prober.probe(every)
            assert seen == expected, {k: v for k, v in seen.items() if v != expected[k]}

            # no policy left: b resets its connection (a RST, no TIME_WAIT on either end)
            program(None)
            assert provider.podnet_network_policy_keys("ovn") == []
            first.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            first.close()
            with pytest.raises(ConnectionResetError):
                accepted.recv(1)
            accepted.close()
            seen = prober.probe(every)
            assert set(seen.values()) == {Verdict.PASS}, seen

            # the next policy: b's new connection from the same port is a new one
            program(into_a("u2"))
            again = _socket(b, CLIENT_PORT)
            sockets.append(again)
            again.settimeout(5)
            try:
                again.connect((c.addresses[0], SERVER_PORT))
            except TimeoutError:
                pytest.fail("b's new connection to c (no policy selects either) was "
                            "dropped: conntrack kept the connection reset while the switch "
                            "was stateless")
            accepted, _ = server.accept()
            sockets.append(accepted)
            seen = prober.probe(every)
            assert seen == expected, {k: v for k, v in seen.items() if v != expected[k]}
    finally:
        for sock in sockets:
            sock.close()
        provider.close()
