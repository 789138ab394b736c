"""The truth table's prober proven with real packets, before any dataplane is under test:
two namespaces joined by a veth pair, an nftables rule in one of them that drops one port.

The probe says ``drop`` (a timeout) for the dropped port, ``pass`` for the other, and
``refused`` for a port where nothing listens — over TCP and UDP, IPv4 and IPv6, and SCTP
where the kernel has it. A matrix probed concurrently converges on the expected one, and
its printer marks a cell that differs.

Needs root, network namespaces and ``nft``; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from podnet.linux.netns import add_netns, del_netns
from podnet.testing.netns import netns_unavailable
from podnet.testing.netpol.matrix import Matrix, Verdict, render
from podnet.testing.netpol.prober import Endpoint, Prober, probe, protocols
from podnet.testing.waiting import wait_for

WHY = netns_unavailable() or (None if shutil.which("nft") else "nft is not installed")
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

DROPPED = 81


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _drop_port(netns: str, port: int) -> None:
    """An input chain dropping ``port`` (TCP, UDP, SCTP), written as ``nft -j``."""
    rules = [{"add": {"rule": {"family": "inet", "table": "probe", "chain": "input",
                               "expr": [{"match": {"op": "==", "left": {"payload": {
                                   "protocol": proto, "field": "dport"}}, "right": port}},
                                        {"drop": None}]}}}
             for proto in ("tcp", "udp", "sctp")]
    batch = {"nftables": [
        {"add": {"table": {"family": "inet", "name": "probe"}}},
        {"add": {"chain": {"family": "inet", "table": "probe", "name": "input",
                           "type": "filter", "hook": "input", "prio": 0,
                           "policy": "accept"}}},
        *rules]}
    done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "-f", "-"],
                          input=json.dumps(batch), capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


@pytest.fixture
def pair() -> Iterator[tuple[Endpoint, Endpoint]]:
    """Namespaces ``c`` (client) and ``s`` (server, dropping port 81) on a veth pair,
    IPv4 and IPv6; removed also when the test fails."""
    suffix = uuid.uuid4().hex[:6]
    names = [f"pnprobe-c-{suffix}", f"pnprobe-s-{suffix}"]
    made: list[str] = []
    try:
        for name in names:
            add_netns(name)
            made.append(name)
        c, s = names
        _ip("-n", c, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", s)
        for index, name in enumerate(names, start=1):
            _ip("-n", name, "addr", "add", f"10.250.0.{index}/24", "dev", "eth0")
            _ip("-n", name, "addr", "add", f"fd50::{index}/64", "dev", "eth0", "nodad")
            _ip("-n", name, "link", "set", "eth0", "up")
        _drop_port(s, DROPPED)
        yield (Endpoint("c", f"/run/netns/{c}", ("10.250.0.1", "fd50::1")),
               Endpoint("s", f"/run/netns/{s}", ("10.250.0.2", "fd50::2")))
    finally:
        for name in made:
            del_netns(name)


@pytest.mark.parametrize("family", [4, 6])
def test_a_drop_is_a_timeout_a_missing_server_a_refusal(
        pair: tuple[Endpoint, Endpoint], family: int) -> None:
    client, server = pair
    target = server.address(family)
    assert target is not None
    with Prober([client, server], protocols=protocols()):
        # a fresh link resolves its neighbours first (an IPv6 link-local address is
        # tentative for a moment): the first SYN may go nowhere
        wait_for("the pair to answer", lambda: probe(
            client.netns, target, 80, "TCP") == Verdict.PASS, 20)
        for protocol in protocols():
            assert probe(client.netns, target, 80, protocol) == Verdict.PASS, protocol
            assert probe(client.netns, target, DROPPED, protocol, timeout=0.5) == Verdict.DROP, \
                protocol
            # no server on 82: refused, which no policy would say
            assert probe(client.netns, target, 82, protocol) == Verdict.REFUSED, protocol
        # the other way nothing is dropped: the client's namespace has no rule
        back = client.address(family)
        assert back is not None
        assert probe(server.netns, back, DROPPED, "TCP") == Verdict.PASS


def test_a_matrix_converges_and_its_printer_marks_what_differs(
        pair: tuple[Endpoint, Endpoint]) -> None:
    client, server = pair
    with Prober([client, server], protocols=("TCP", "UDP")) as prober:
        wait_for("the pair to answer", lambda: probe(
            client.netns, "10.250.0.2", 80, "TCP") == Verdict.PASS, 20)
        ports = prober.matrix_ports()
        expected = Matrix.of(["c", "s"], ports)
        for cell in expected.judged():
            src, _, port, _ = cell
            expected[cell] = (Verdict.DROP if src == "c" and port == DROPPED
                              else Verdict.PASS)
        observed = prober.converge(expected, deadline=10)
        assert expected.mismatches(observed) == [], render(expected, observed)
        # a wrong expectation is shown, cell by cell
        wrong = Matrix.of(expected.pods, expected.ports, expected.cells)
        wrong[("c", "s", 80, "TCP")] = Verdict.DROP
        observed = prober.converge(wrong, deadline=0.5)
        [mismatch] = wrong.mismatches(observed)
        assert str(mismatch) == "c -> s TCP/80: expected drop, observed pass"
        table = render(wrong, observed, "wrong on purpose")
        assert "!." in table and "1 of 8 cells differ" in table, table
