"""The OVN provider's dataplane, proven by packets: the cluster as processes (``podnet
apiserver``, ``podnet run --provider ovn`` writing a real NB, ``podnet node --provider ovn``
plugging pods into a real ``br-int`` that a real ``ovn-controller`` binds), pods as network
namespaces.

Two pods on one logical switch ping each other and hold a TCP connection; a pod on
another switch of the same router is reached through it; a spoofed source address is
dropped by port security while the real one passes; DEL removes the OVS port and the
pod's reachability; deleting the pods leaves no port in OVS and no pod port in NB."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    AgentClient,
    Host,
    Stack,
    TcpServer,
    Underlay,
    in_netns,
    node_object,
    ping,
    pod,
    tcp_talk,
    wait_for,
)
from podnet.testing.ovnbed import OvnBed, bed_unavailable

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

ANN = "podnet.io/"
BLUE, GREEN = "10.31.0.0/24", "10.32.0.0/24"


def ovn_config(bed: OvnBed) -> dict[str, Any]:
    """The controller's (and the agent's) configuration: two subnets on one router."""
    return {
        "defaultProvider": "ovn",
        "providers": {"ovn": {
            "remote": bed.nb_remote, "ovs_db": bed.ovs_remote, "bind_timeout": 20,
            "subnets": [
                {"name": "blue", "cidr": BLUE, "router": "lr1", "default": True},
                {"name": "green", "cidr": GREEN, "router": "lr1"},
            ],
            "routers": [{"name": "lr1"}],
        }},
        "listen": "127.0.0.1:0",
    }


class Bed:
    """The underlay's node namespace holds br-int (ovs-vswitchd, ovn-controller) and the
    agent; the apiserver and the controller run in its router namespace."""

    def __init__(self, tmp: Path) -> None:
        # pods' namespaces; their host ends are in the node namespace, gone with it
        self.host = Host(links=lambda container, interface: [])
        self.underlay = Underlay("192.168.79.0/24")
        self.ovn: OvnBed | None = None
        self.stack: Stack | None = None
        try:
            self.node = self.underlay.add_node(NODE, "10.93.0.0/24")
            started = time.monotonic()
            self.ovn = OvnBed(tmp / "ovn", netns=self.node.netns).start()
            self.ovn_start = time.monotonic() - started
            self.stack = Stack(tmp, provider="ovn", controller_config=ovn_config(self.ovn),
                               netns=self.underlay.router,
                               address=self.underlay.router_address)
            self.stack.create([node_object(NODE, self.node.pod_cidr, self.node.address)])
            self.stack.agent(NODE, netns=self.node.netns,
                             args=["--config", str(tmp / "controller.yaml")])
            self.client = AgentClient(self.stack.socket)
            wait_for("the agent to be ready", self.client.ready, 30)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Processes first, then OVS (bridges before daemons), then the namespaces."""
        steps = [s for s in (self.stack and self.stack.close, self.ovn and self.ovn.close,
                             self.host.cleanup, self.underlay.cleanup) if s]
        for step in steps:
            try:
                step()
            except Exception as exc:  # every step runs, whatever failed before
                print(f"cleanup: {step}: {exc}")


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[Bed]:
    (tmp_path / "ovn").mkdir()
    made = Bed(tmp_path)  # cleans up after itself when it fails half way
    try:
        yield made
    finally:
        made.close()


def _ovs_ports(bed: Bed) -> list[str]:
    assert bed.ovn is not None
    return [p for p in bed.ovn.vsctl("list-ports", "br-int").split() if p]


def _pod_ports(bed: Bed) -> list[str]:
    """The logical switch ports of pods in NB (podnet's, not its router links)."""
    rows = json.loads(bed.ovn.nbctl("--format=json", "--columns=name,type,external_ids",
                                    "list", "Logical_Switch_Port"))
    out = []
    for name, kind, ids in rows["data"]:
        ext = dict(ids[1])
        if "podnet/key" in ext and not kind and "podnet/role" not in ext:
            out.append(name)
    return out


def _up(bed: Bed, port: str) -> bool:
    return bed.ovn.nbctl("--bare", "--columns=up", "find", "Logical_Switch_Port",
                         f'name="{port}"').strip() == "true"


def _connect_from(netns: str, source: str, address: str, port: int) -> bool:
    """Whether a TCP connection from ``source`` in ``netns`` to ``address:port`` opens."""
    done = in_netns(netns, f"""
        import socket, sys
        try:
            c = socket.create_connection(({address!r}, {port}), timeout=3,
                                         source_address=({source!r}, 0))
            c.sendall(b"x")
            c.recv(100)
        except OSError:
            sys.exit(1)
    """, timeout=20)
    return done.returncode == 0


def test_pods_on_br_int_talk_through_switches_and_routers(bed: Bed) -> None:
    stack, client = bed.stack, bed.client
    stack.create([
        pod("a", annotations={f"{ANN}port-security": "true"}),
        pod("b"),
        pod("c", annotations={f"{ANN}subnets": "green"}),
    ])
    pods: dict[str, dict[str, Any]] = {}
    binds: dict[str, float] = {}
    for name in ("a", "b", "c"):
        netns, path = bed.host.netns()
        cid = bed.host.container()
        started = time.monotonic()
        status, result = client.add(cid, path, name)
        binds[name] = time.monotonic() - started
        assert status == 200, result
        pods[name] = {"netns": netns, "path": path, "cid": cid,
                      "ip": result["ips"][0]["address"].split("/")[0], "result": result}
    records = stack.records()
    for name in ("a", "b", "c"):
        st = records[name]["status"]
        assert _up(bed, st["interface"]), f"{name}'s port is not up in NB"
        assert client.check(pods[name]["cid"], pods[name]["path"], name)[0] == 200
    print(f"OVN bed start {bed.ovn_start:.2f} s; ADD (bound) per pod: "
          + ", ".join(f"{n} {t:.2f} s" for n, t in binds.items()))
    a, b, c = pods["a"], pods["b"], pods["c"]
    assert a["result"]["ips"][0]["address"].endswith("/24")
    assert a["result"]["ips"][0]["gateway"] == "10.31.0.1"
    # one logical switch: ping and TCP
    assert ping(a["netns"], b["ip"]), "a cannot ping b"
    assert ping(b["netns"], a["ip"]), "b cannot ping a"
    with TcpServer(b["netns"], b["ip"]):
        talk = tcp_talk(a["netns"], b["ip"])
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {a['ip']} from a", talk
    # two switches joined by the subnets' router
    assert ping(a["netns"], c["ip"]), "a cannot reach c through the router"
    with TcpServer(c["netns"], c["ip"]):
        talk = tcp_talk(b["netns"], c["ip"], message="from b")
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {b['ip']} from b", talk
    # port security: a's own address passes, a spoofed one (on its interface) is dropped
    taken = {p["ip"] for p in pods.values()}
    spoofed = next(ip for ip in (f"10.31.0.{n}" for n in range(250, 2, -1)) if ip not in taken)
    assert in_netns(a["netns"], f"""
        import subprocess
        subprocess.run(["ip", "addr", "add", "{spoofed}/32", "dev", "eth0"], check=True)
    """).returncode == 0
    with TcpServer(b["netns"], b["ip"], port=8081):
        assert not _connect_from(a["netns"], spoofed, b["ip"], 8081), \
            "a spoofed source got through port security"
        assert _connect_from(a["netns"], a["ip"], b["ip"], 8081), "a's own address failed"
    # DEL: the OVS port goes, and with it a's reachability
    host_end = next(p for p in _ovs_ports(bed) if p.startswith("pno")
                    and bed.ovn.vsctl("get", "Interface", p, "external_ids:podnet-container"
                                      ).strip().strip('"') == a["cid"])
    assert client.delete(a["cid"], a["path"], "a")[0] == 200
    assert host_end not in _ovs_ports(bed)
    assert not ping(b["netns"], a["ip"], count=2, timeout=1), "a still answers after DEL"
    assert ping(b["netns"], c["ip"]), "DEL of a took c's reachability"
    # the pods deleted: their ports leave OVS (DEL) and NB (the controller releases)
    for name in ("b", "c"):
        assert client.delete(pods[name]["cid"], pods[name]["path"], name)[0] == 200
    stack.kubectl("delete", "pod", "a", "b", "c", "--wait=false")
    assert _ovs_ports(bed) == []
    wait_for("the pods' ports to leave NB", lambda: _pod_ports(bed) == [], 30)
