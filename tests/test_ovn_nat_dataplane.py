"""NAT proven by packets: one node with a real chassis (``OvnNodeBed``), the router's
external network's localnet port mapped (``ovn-bridge-mappings=physnet:br-ex``) to a
netdev bridge ``br-ex`` in the node namespace, a veth from it into an "outside"
namespace holding the external gateway's address. A pod with ``podnet.io/snat`` pings
and connects out, and the server outside sees the router's external address; a pod with
``podnet.io/eip`` is pinged and connected to from outside at its eip, and its own
connections arrive as the eip; a pod with neither arrives as the router's external
address too (the router's snat rule for its subnets)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.linux.veth import set_tx_checksum
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import TcpServer, ping, pod, tcp_talk, wait_for
from podnet.testing.ovnbed import OvnBed, OvnNodeBed, bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

ANN = "podnet.io/"
ROUTER = "lr-nat"
EXTERNAL_IP, GATEWAY, EIP = "203.0.113.1", "203.0.113.254", "203.0.113.20"


def nat_config(bed: OvnBed) -> dict[str, Any]:
    return {
        "defaultProvider": "ovn",
        "providers": {"ovn": {
            "remote": bed.nb_remote, "ovs_db": bed.ovs_remote,
            "subnets": [{"name": "natted", "cidr": "10.33.0.0/24", "router": ROUTER,
                         "default": True}],
            "routers": [{"name": ROUTER, "external": {
                "address": f"{EXTERNAL_IP}/24", "gateway": GATEWAY,
                "network_name": "physnet", "chassis": [bed.chassis]}}],
        }},
        "listen": "127.0.0.1:0",
    }


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[OvnNodeBed]:
    made = OvnNodeBed(tmp_path, nat_config)
    try:
        yield made
    finally:
        if made.ovn is not None:  # before OVS stops: the bridge's tap goes with it
            made.ovn.vsctl("--if-exists", "del-br", "br-ex")
        made.close()


def _outside(bed: OvnNodeBed) -> str:
    """The physical network: a namespace (the host's, removed with the pods') holding
    the external gateway, its veth's other end a port of ``br-ex`` on the node."""
    assert bed.ovn is not None
    outside, _path = bed.host.netns()
    node_end = f"pnx{uuid.uuid4().hex[:8]}"
    for argv in (["-n", outside, "link", "add", "eth1", "type", "veth", "peer", "name",
                  node_end, "netns", bed.node.netns],
                 ["-n", outside, "addr", "add", f"{GATEWAY}/24", "dev", "eth1"],
                 ["-n", outside, "link", "set", "eth1", "up"],
                 ["-n", outside, "link", "set", "lo", "up"],
                 ["-n", bed.node.netns, "link", "set", node_end, "up"]):
        subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)
    # the userspace datapath computes no checksum a veth left for offload
    set_tx_checksum(f"/run/netns/{outside}", "eth1", False)
    set_tx_checksum(f"/run/netns/{bed.node.netns}", node_end, False)
    bed.ovn.vsctl("add-br", "br-ex", "--", "set", "bridge", "br-ex", "datapath_type=netdev",
                  "--", "add-port", "br-ex", node_end)
    bed.ovn.vsctl("set", "open_vswitch", ".", "external_ids:ovn-bridge-mappings=physnet:br-ex")
    return outside


def _gateway_bound(bed: OvnNodeBed) -> bool:
    """Whether the router's chassisredirect port (where its NAT runs) is on the chassis."""
    assert bed.ovn is not None
    lrp = f"{ROUTER}-ext-{ROUTER}"
    found = bed.ovn.sbctl("--bare", "--columns=chassis", "find", "Port_Binding",
                          f"logical_port=cr-{lrp}").strip()
    return bool(found)


def test_snat_and_eip_pods_reach_and_are_reached_through_the_external_network(
        bed: OvnNodeBed) -> None:
    assert bed.stack is not None
    outside = _outside(bed)
    wait_for("the gateway port bound to the chassis", lambda: _gateway_bound(bed), 30)
    bed.stack.create([
        pod("out", annotations={f"{ANN}snat": "true"}),
        pod("pub", annotations={f"{ANN}eip": EIP}),
        pod("plain"),
    ])
    pods: dict[str, dict[str, str]] = {}
    for name in ("out", "pub", "plain"):
        netns, path = bed.host.netns()
        status, result = bed.client.add(bed.host.container(), path, name)
        assert status == 200, result
        pods[name] = {"netns": netns, "ip": result["ips"][0]["address"].split("/")[0]}
    out, pub, plain = pods["out"], pods["pub"], pods["plain"]
    # snat: out to the gateway outside, and the server there sees the external address
    assert ping(out["netns"], GATEWAY), "the snat pod cannot ping the external gateway"
    with TcpServer(outside, GATEWAY):
        talk = tcp_talk(out["netns"], GATEWAY, message="from out")
    assert talk.returncode == 0, talk
    assert talk.stdout.strip() == f"hello {EXTERNAL_IP} from out", talk
    # eip: its own connections arrive as the eip
    with TcpServer(outside, GATEWAY):
        talk = tcp_talk(pub["netns"], GATEWAY, message="from pub")
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {EIP} from pub", talk
    # and it is reached from outside at the eip (the source is not translated inbound)
    assert ping(outside, EIP), "the eip does not answer from outside"
    with TcpServer(pub["netns"], pub["ip"]):
        talk = tcp_talk(outside, EIP, message="from outside")
    assert talk.returncode == 0, talk
    assert talk.stdout.strip() == f"hello {GATEWAY} from outside", talk
    # snat gives no way in: a connection to the external address reaches no pod
    with TcpServer(out["netns"], out["ip"]):
        talk = tcp_talk(outside, EXTERNAL_IP, message="from outside", timeout=3)
    assert talk.returncode != 0, f"the snat pod was reached from outside: {talk}"
    # neither: translated by the router's rule for its subnet
    with TcpServer(outside, GATEWAY):
        talk = tcp_talk(plain["netns"], GATEWAY, message="from plain")
    assert talk.returncode == 0 and talk.stdout.strip() == f"hello {EXTERNAL_IP} from plain", \
        talk
