"""Security groups proven by packets: the cluster as processes (``podnet apiserver``,
``podnet run --provider ovn`` writing the groups' ACLs into a real NB, ``podnet node
--provider ovn`` plugging pods into a real ``br-int``), the ACLs enforced by a real
``ovn-controller`` and the userspace datapath's conntrack.

A member of a group allowing only tcp/8080 in accepts a connection on 8080; a SYN to
8081, where a server listens too, gets no answer at all (dropped, not refused), while the
same port on a pod in no group connects; a ping from a pod outside the group is dropped,
the member's own ping out is answered (its egress is not restricted, the reply passes the
default deny through conntrack: allow-related). A group allowing one port from another
group's members only: a member of that group connects, a pod in no group gets no answer,
and the member of a group that allows no egress starts nothing but answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    TcpServer,
    in_netns,
    ping,
    pod,
    tcp_talk,
)
from podnet.testing.ovnbed import OvnBed, OvnNodeBed, bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

ANN = "podnet.io/"
GROUPS = {
    "web": {"ingress": [{"protocol": "tcp", "port": 8080}]},
    # tcp/5432 from web's members only (northd's address set of its port group), and
    # nothing may start out of it
    "db": {"ingress": [{"protocol": "tcp", "port": 5432, "groups": ["web"]}], "egress": []},
}


def _config(bed: OvnBed) -> dict[str, Any]:
    return {
        "defaultProvider": "ovn",
        "providers": {"ovn": {
            "remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
            "subnets": [{"name": "sg-blue", "cidr": "10.35.0.0/24", "default": True}],
            "security_groups": GROUPS,
        }},
        "listen": "127.0.0.1:0",
    }


Bed = OvnNodeBed


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    made = Bed(tmp_path, _config, pod_cidr="10.94.0.0/24", underlay="192.168.78.0/24")
    try:
        yield made
    finally:
        made.close()


def _connect(netns: str, address: str, port: int) -> str:
    """``ok`` (connected and answered), ``refused`` (an RST came back) or ``timeout``
    (nothing came back: the SYN was dropped)."""
    done = in_netns(netns, f"""
        import socket, sys
        try:
            c = socket.create_connection(({address!r}, {port}), timeout=3)
            c.sendall(b"x")
            c.recv(100)
        except ConnectionRefusedError:
            print("refused")
        except (TimeoutError, socket.timeout):
            print("timeout")
        else:
            print("ok")
    """, timeout=20)
    return done.stdout.strip()


def test_a_security_group_lets_its_port_through_and_drops_the_rest(bed: Bed) -> None:
    stack, client = bed.stack, bed.client
    assert stack is not None
    stack.create([pod("m", annotations={f"{ANN}security-groups": "web"}),
                  pod("d", annotations={f"{ANN}security-groups": "db"}),
                  pod("o"), pod("q")])
    pods: dict[str, dict[str, str]] = {}
    for name in ("m", "d", "o", "q"):
        netns, path = bed.host.netns()
        status, result = client.add(bed.host.container(), path, name)
        assert status == 200, result
        pods[name] = {"netns": netns, "ip": result["ips"][0]["address"].split("/")[0]}
    m, d, o, q = pods["m"], pods["d"], pods["o"], pods["q"]
    # the allowed port: a connection from a pod in no group succeeds
    with TcpServer(m["netns"], m["ip"], port=8080):
        talk = tcp_talk(o["netns"], m["ip"], port=8080, message="from o")
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {o['ip']} from o", talk
    # another port, a server listening: the SYN is dropped (no answer, not even an RST)
    with TcpServer(m["netns"], m["ip"], port=8081):
        started = time.monotonic()
        assert _connect(o["netns"], m["ip"], 8081) == "timeout"
        print(f"tcp/8081 to the member: no answer within {time.monotonic() - started:.1f} s")
        # ... and the port listened to: it is the group that drops, not the server
        assert _connect(m["netns"], m["ip"], 8081) == "ok"
    # the same port on a pod in no group connects (it has no default deny)
    with TcpServer(q["netns"], q["ip"], port=8081):
        assert _connect(o["netns"], q["ip"], 8081) == "ok"
    # a port nobody listens on answers with an RST for a pod in no group
    assert _connect(o["netns"], q["ip"], 8082) == "refused"
    # ICMP is not allowed in: a ping from outside the group is dropped
    assert not ping(o["netns"], m["ip"], count=2, timeout=1), "o pinged the member"
    assert ping(o["netns"], q["ip"]), "o cannot ping q (no group)"
    # the member's egress is not restricted: its ping out is answered (the reply passes
    # the default deny as a reply of the connection conntrack knows)
    assert ping(m["netns"], o["ip"]), "the member's ping got no reply"
    with TcpServer(o["netns"], o["ip"], port=8083):
        assert _connect(m["netns"], o["ip"], 8083) == "ok"
    # db: 5432 from web's members only; the answer to m passes though db starts nothing
    with TcpServer(d["netns"], d["ip"], port=5432):
        assert _connect(o["netns"], d["ip"], 5432) == "timeout"
        talk = tcp_talk(m["netns"], d["ip"], port=5432, message="from m")
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {m['ip']} from m", talk
    with TcpServer(q["netns"], q["ip"], port=8084):
        assert _connect(d["netns"], q["ip"], 8084) == "timeout"
        assert _connect(o["netns"], q["ip"], 8084) == "ok"
    assert not ping(d["netns"], q["ip"], count=2, timeout=1), "db's member pinged out"
