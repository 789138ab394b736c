"""A KubeVirt VM's live migration on two real OVN chassis keeps its address, proven by
packets: a pod pings the VM's address without pause while the migration runs, the VM
moves (its source interface stops, the target sends the RARP QEMU announces a moved VM
with) and the migration finishes; only the few echoes around the switch go unanswered.

Two node namespaces on one underlay, each an Open vSwitch (userspace datapath) and an
``ovn-controller`` named after its node, Geneve between them; the controller (engine and
OVN provider) on the API emulator writes the first bed's Northbound. The VM's interfaces
are plugged by hand as the node agent plugs a pod (a veth, its host end on ``br-int``
with the record's port as ``iface-id``): what is proven is the port binding podnet
writes, not the agent."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.core.models import LABEL_MIGRATION_JOB, Phase, PodNetwork
from podnet.linux.veth import set_tx_checksum
from podnet.testing.harness import World, node_obj
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import NodeNamespace, Underlay, ping
from podnet.testing.ovnbed import OvnBed, bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

VMI = ("VirtualMachineInstance", "vm1")
SUBNETS = [{"name": "vms", "cidr": "10.41.0.0/24", "default": True}]
#: the pinger's interval (s); the switch of chassis may cost this many echoes at most
INTERVAL = 0.02
MOST_LOST = 25


class TwoChassis:
    """The underlay, the two chassis (named after the World's nodes 0 and 1) and the pod
    namespaces plugged into them, all removed by :meth:`close`."""

    def __init__(self, folder: Path) -> None:
        self.underlay = Underlay("192.168.87.0/24")
        self.beds: list[OvnBed] = []
        self.nodes: list[NodeNamespace] = []
        self.pods: list[str] = []
        try:
            for i in range(2):
                name = str(node_obj(i)["metadata"]["name"])
                node = self.underlay.add_node(name, f"10.{96 + i}.0.0/24")
                (folder / name).mkdir()
                bed = OvnBed(folder / name, netns=node.netns, chassis=name,
                             encap_ip=node.address,
                             sb_remote=self.beds[0].sb_remote if self.beds else None)
                self.beds.append(bed.start())
                self.nodes.append(node)
                self._underlay_on_br_phy(bed, node, i)
        except BaseException:
            self.close()
            raise

    def _underlay_on_br_phy(self, bed: OvnBed, node: NodeNamespace, index: int) -> None:
        # the userspace datapath sends tunnel packets out of an OVS bridge only: the
        # node's underlay link joins br-phy, which takes over its address; no device
        # completes checksums on that path
        prefix, gateway = self.underlay.subnet.prefixlen, self.underlay.router_address
        bed.vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy",
                  "datapath_type=netdev", "--", "add-port", "br-phy", "underlay0")
        for argv in (["addr", "flush", "dev", "underlay0"],
                     ["addr", "add", f"{node.address}/{prefix}", "dev", "br-phy"],
                     ["link", "set", "br-phy", "up"],
                     ["route", "replace", "default", "via", gateway]):
            subprocess.run(["ip", "-n", node.netns, *argv], check=True, capture_output=True)
        set_tx_checksum(f"/run/netns/{node.netns}", "br-phy", False)
        for link in ("underlay", f"to-node{index}"):
            set_tx_checksum(f"/run/netns/{self.underlay.router}", link, False)

    def plug(self, index: int, pn: PodNetwork) -> str:
        """A pod namespace with ``pn``'s address and MAC on its eth0, the host end on node
        ``index``'s br-int as ``pn``'s port. Its namespace's name."""
        tag = uuid.uuid4().hex[:8]
        ns, host = f"pnvm-{tag}", f"vmh{tag}"
        node = self.nodes[index]
        subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
        self.pods.append(ns)
        st = pn.status
        assert st.ip and st.mac and st.interface and st.prefix_length is not None, st
        for argv in (["ip", "link", "add", host, "type", "veth", "peer", "name", "eth0",
                      "netns", ns],
                     ["ip", "link", "set", host, "netns", node.netns],
                     ["ip", "-n", ns, "link", "set", "eth0", "address", st.mac],
                     ["ip", "-n", ns, "addr", "add", f"{st.ip}/{st.prefix_length}",
                      "dev", "eth0"],
                     ["ip", "-n", ns, "link", "set", "eth0", "up"],
                     ["ip", "-n", ns, "link", "set", "lo", "up"],
                     ["ip", "-n", node.netns, "link", "set", host, "up"]):
            subprocess.run(argv, check=True, capture_output=True)
        set_tx_checksum(f"/run/netns/{ns}", "eth0", False)
        self.beds[index].vsctl("add-port", "br-int", host, "--", "set", "interface", host,
                               f"external_ids:iface-id={st.interface}",
                               f"external_ids:attached-mac={st.mac}")
        return ns

    def binding(self, port: str, column: str) -> str:
        return self.beds[0].sbctl("--bare", f"--columns={column}", "find", "Port_Binding",
                                  f"logical_port={port}").strip()

    def close(self) -> None:
        for step in [*(lambda ns=ns: subprocess.run(["ip", "netns", "del", ns], check=False,
                                                    capture_output=True)
                       for ns in self.pods),
                     *(bed.close for bed in reversed(self.beds)), self.underlay.cleanup]:
            try:
                step()
            except Exception as exc:  # every step runs, whatever failed before
                print(f"cleanup: {step}: {exc}")


@pytest.fixture
def chassis(tmp_path: Path) -> Iterator[TwoChassis]:
    beds = TwoChassis(tmp_path)
    try:
        yield beds
    finally:
        beds.close()


@pytest.fixture
def provider_plugin(chassis: TwoChassis) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    plugin = OvnProvider(chassis.beds[0].nb_remote, SUBNETS, seed=1)
    yield plugin
    plugin.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Callable[[], dict[str, str]]:
    reader: Callable[[], dict[str, str]] = provider_plugin.nb_addresses
    return reader


_PINGER = """
import json, os, socket, struct, sys, time
def checksum(data):
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.setblocking(False)
answered, seq, stop_at = set(), 0, None
print("started", flush=True)
while stop_at is None or time.monotonic() < stop_at:
    if stop_at is None:
        header = struct.pack("!BBHHH", 8, 0, 0, 0x4d49, seq & 0xFFFF) + b"migrate!"
        sock.sendto(struct.pack("!BBHHH", 8, 0, checksum(header), 0x4d49, seq & 0xFFFF)
                    + b"migrate!", (TARGET, 0))
        seq += 1
        if os.path.exists(STOP):
            stop_at = time.monotonic() + 1.0  # the last echoes' answers
    deadline = time.monotonic() + INTERVAL
    while time.monotonic() < deadline:
        try:
            data, addr = sock.recvfrom(2048)
        except BlockingIOError:
            time.sleep(0.002)
            continue
        ihl = (data[0] & 0x0F) * 4
        kind, _, _, ident, got = struct.unpack("!BBHHH", data[ihl:ihl + 8])
        if addr[0] == TARGET and kind == 0 and ident == 0x4d49:
            answered.add(got)
print(json.dumps({"sent": seq, "lost": sorted(set(range(seq)) - answered)}), flush=True)
"""

_RARP = """
import socket, struct
mac = bytes.fromhex(MAC.replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
body = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 3) + mac + bytes(4) + mac + bytes(4)
for _ in range(3):
    s.send(b"\\xff" * 6 + mac + struct.pack("!H", 0x8035) + body)
"""


def _wait(what: str, check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _in(ns: str, code: str, **values: object) -> list[str]:
    head = "".join(f"{k} = {v!r}\n" for k, v in values.items())
    return ["ip", "netns", "exec", ns, sys.executable, "-c", head + textwrap.dedent(code)]


def test_a_ping_to_a_migrating_vm_loses_only_the_switch(
        world: World, chassis: TwoChassis, provider_plugin: Any, tmp_path: Path) -> None:
    world.add_node(0)
    world.add_node(1)
    world.add_pod("client", 0)
    world.add_pod("virt-launcher-vm1-src", 0, owner=VMI)
    world.settle()
    client = world.record_of("client")
    vm = world.record_of("virt-launcher-vm1-src")
    assert client is not None and vm is not None and vm.status.phase is Phase.ROUTED
    client_ns = chassis.plug(0, client)
    source_ns = chassis.plug(0, vm)
    port = vm.status.interface or ""
    chassis.beds[0].wait_bound(port)
    chassis.beds[0].wait_bound(client.status.interface or "")
    assert ping(client_ns, vm.status.ip or ""), "the VM does not answer before its migration"

    stop = tmp_path / "stop-pinging"
    pinger = subprocess.Popen(
        _in(client_ns, _PINGER, TARGET=vm.status.ip or "", STOP=str(stop), INTERVAL=INTERVAL),
        stdout=subprocess.PIPE, text=True)
    try:
        assert pinger.stdout is not None and pinger.stdout.readline().strip() == "started"
        # the migration: KubeVirt's target pod on node 1, given the VM's record
        world.add_pod("virt-launcher-vm1-dst", 1, owner=VMI,
                      labels={LABEL_MIGRATION_JOB: "mig-1"})
        world.settle()
        moved = world.record_of("virt-launcher-vm1-dst")
        assert moved is not None and moved.key == vm.key, moved
        assert (moved.status.ip, moved.status.mac) == (vm.status.ip, vm.status.mac)
        target_ns = chassis.plug(1, moved)
        _wait("the target chassis to be the port's additional one",
              lambda: chassis.binding(port, "additional_chassis") != "")
        # the VM moves: its source interface stops, it announces itself from the target
        subprocess.run(["ip", "-n", source_ns, "link", "set", "eth0", "down"], check=True)
        subprocess.run(_in(target_ns, _RARP, MAC=vm.status.mac or ""), check=True,
                       capture_output=True, timeout=20)
        _wait("the target's binding to be activated by the RARP",
              lambda: "additional-chassis-activated" in chassis.binding(port, "options"))
        # the migration finishes: the source's virt-launcher completes, then goes
        world.finish_pod("virt-launcher-vm1-src")
        world.settle()
        lsp = provider_plugin.client.port(port)
        assert dict(lsp.options).get("requested-chassis") == world.node_name(1)
        _wait("the port to be bound to the target's chassis alone",
              lambda: chassis.binding(port, "additional_chassis") == "")
        time.sleep(0.5)  # echoes after the end, to be answered from the target
        stop.touch()
        out, _ = pinger.communicate(timeout=30)
    finally:
        if pinger.poll() is None:
            pinger.kill()
            pinger.wait()
    result = json.loads(out.strip().splitlines()[-1])
    print(f"echoes sent {result['sent']}, lost {result['lost']}")
    lost = result["lost"]
    assert result["sent"] > 20, result
    assert len(lost) <= MOST_LOST, f"{len(lost)} of {result['sent']} echoes lost: {lost}"
    assert result["sent"] - 1 not in lost and result["sent"] - 2 not in lost, (
        f"the VM stopped answering after the switch: {lost}")
    assert ping(client_ns, vm.status.ip or ""), "the VM does not answer after its migration"
    world.assert_converged()
