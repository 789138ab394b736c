"""``podnet-ipam`` as the IPAM of plugins nobody here wrote: Debian's reference CNI plugins
(``bridge``, ``ptp``, ``macvlan``, ``ipvlan`` from containernetworking-plugins) execute it
from ``CNI_PATH``, against ``podnet apiserver``, ``podnet run`` (the reference provider) and
``podnet node`` as separate processes.

The node is a network namespace too: the cluster's processes and the Debian plugins run in
it (``ip netns exec``), so their bridges, veths, host routes and masters live there and go
with it, and the agent's sweep of leftovers on start sees only this node's links: nothing
the test makes or removes touches the machine's own network. Each pod's interface gets its
PodNetwork's address; two pods ping each other; DEL removes the interface and leaves the
address recorded; CHECK passes, and fails on an address that is not the record's.

Needs root, network namespaces, kubectl and the Debian plugins; skipped with the reason
otherwise.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.app.install import IPAM_NAME, install_cni
from podnet.testing.cni import CniResult, ExecStandIn, plugin_path, pod_args, run_cni
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    ATTACHMENT,
    NODE,
    Stack,
    addresses_in,
    node_object,
    ping,
    pod,
)
from podnet.testing.waiting import wait_for

#: where Debian's containernetworking-plugins puts the reference plugins
DEBIAN_PLUGINS = Path("/usr/lib/cni")
PLUGINS = ("bridge", "ptp", "macvlan", "ipvlan")
#: each plugin in a version it speaks (Debian's 1.1.1 speaks up to 1.0.0); 0.3.1 has no CHECK
CASES = [("bridge", "1.0.0"), ("ptp", "0.4.0"), ("macvlan", "0.4.0"), ("macvlan", "0.3.1"),
         ("ipvlan", "1.0.0")]
#: the node's podCIDR
POD_CIDR = "10.94.0.0/24"

WHY = (netns_unavailable()
       or (None if shutil.which("kubectl") else "kubectl is not installed")
       or next((f"the Debian plugin {DEBIAN_PLUGINS / p} is missing (containernetworking-"
                "plugins)" for p in PLUGINS if not (DEBIAN_PLUGINS / p).exists()), None))
needs_packets = pytest.mark.skipif(WHY is not None, reason=WHY or "")


# --- the node and its pods: namespaces, removed also on failure --------------------------


class Node:
    """A node namespace, where the Debian plugins make their host side, and the pods'."""

    def __init__(self, tmp: Path) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.namespaces: list[str] = []
        self.name = self.netns("pnnode")
        try:
            # the apiserver listens on the node's loopback
            self.ip("link", "set", "lo", "up")
            # podnet-ipam installed as install-cni installs it (the static plugin built
            # first, beside the podnet scripts, where install-cni takes it from); the
            # Debian plugins find their IPAM plugin on CNI_PATH
            plugin_path()
            self.bin_dir = tmp / "cni-bin"
            install_cni(self.bin_dir, tmp / "net.d")
            self.cni_path = f"{self.bin_dir}:{DEBIAN_PLUGINS}"
        except BaseException:
            self.cleanup()
            raise

    def netns(self, prefix: str = "pnpod") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.namespaces.append(name)
        return name

    def ip(self, *args: str) -> str:
        done = subprocess.run(["ip", "-n", self.name, *args], capture_output=True, text=True,
                              check=False)
        assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"
        return done.stdout

    def plugin(self, plugin: str, command: str, config: dict[str, Any],
               env: dict[str, str]) -> CniResult:
        """Run a Debian plugin on the node as a runtime runs it."""
        return run_cni(command, config, {"CNI_PATH": self.cni_path, **env},
                       argv=["ip", "netns", "exec", self.name, str(DEBIAN_PLUGINS / plugin)])

    def cleanup(self) -> None:
        # the node's namespace takes the bridge, the host veths and routes, the master
        for name in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    n = Node(tmp_path)
    try:
        yield n
    finally:
        n.cleanup()


@pytest.fixture
def stack(tmp_path: Path, node: Node) -> Iterator[Stack]:
    s = Stack(tmp_path, netns=node.name)
    try:
        s.create([node_object(NODE, POD_CIDR)])
        yield s
    finally:
        s.close()


def kernel_makes(kind: str) -> bool:
    """Whether this kernel can make a ``kind`` link (macvlan, ipvlan) on a veth: tried in a
    namespace of its own."""
    name = f"pnprobe-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        steps = [["link", "add", "pnpa", "type", "veth", "peer", "name", "pnpb"],
                 ["link", "add", "pnpk", "link", "pnpa", "type", kind]]
        return all(subprocess.run(["ip", "-n", name, *step], capture_output=True,
                                  check=False).returncode == 0 for step in steps)
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


def start_agent(stack: Stack, node: Node, add_timeout: float = 60) -> None:
    """The node's agent, once ready: podnet-ipam's STATUS passes."""
    stack.agent(NODE, netns=node.name, add_timeout=add_timeout)
    wait_for("the agent ready", lambda: run_cni(
        "STATUS", {"cniVersion": "1.1.0", "name": "n", "type": "bridge",
                   "ipam": {"type": IPAM_NAME, "agentSocket": stack.socket}},
        argv=[str(node.bin_dir / IPAM_NAME)]).ok, 60, interval=0.3)


def plugin_config(plugin: str, version: str, socket: str, master: str, bridge: str
                  ) -> dict[str, Any]:
    """Each Debian plugin's network configuration with podnet-ipam as its IPAM; ptp asks
    for the pods' attachment network, the others for the default one."""
    ipam: dict[str, Any] = {"type": IPAM_NAME, "agentSocket": socket}
    head = {"cniVersion": version, "name": f"ipam-{plugin}", "type": plugin}
    if plugin == "bridge":
        return {**head, "bridge": bridge, "isGateway": True, "ipam": ipam}
    if plugin == "ptp":
        return {**head, "ipam": {**ipam, "network": ATTACHMENT}}
    if plugin == "macvlan":
        return {**head, "master": master, "mode": "bridge",
                "ipam": {**ipam, "network": "default"}}
    assert plugin == "ipvlan"
    return {**head, "master": master, "mode": "l2", "ipam": ipam}


# --- the Debian plugins as podnet-ipam's clients -----------------------------------------


@pytest.mark.slow
@needs_packets
@pytest.mark.parametrize(("plugin", "version"), CASES)
def test_a_debian_plugin_gives_each_pod_its_podnetworks_address(
        plugin: str, version: str, stack: Stack, node: Node) -> None:
    start_agent(stack, node)
    master, bridge = f"pnm{node.suffix}", f"pnb{node.suffix}"
    if plugin in ("macvlan", "ipvlan"):
        if not kernel_makes(plugin):
            pytest.skip(f"this kernel makes no {plugin} links (built without it)")
        # the parent the pods' interfaces hang off: one end of a veth pair on the node
        # (a dummy would do, where the kernel has them)
        node.ip("link", "add", master, "type", "veth", "peer", "name", f"pnp{node.suffix}")
        for end in (master, f"pnp{node.suffix}"):
            node.ip("link", "set", end, "up")
    config = plugin_config(plugin, version, stack.socket, master, bridge)
    network = config["ipam"].get("network", "default")
    stack.create([pod("a", networks=ATTACHMENT), pod("b", networks=ATTACHMENT)])

    pods: dict[str, dict[str, Any]] = {}
    for name in ("a", "b"):
        ns = node.netns()
        env = {"CNI_CONTAINERID": uuid.uuid4().hex, "CNI_NETNS": f"/run/netns/{ns}",
               "CNI_ARGS": pod_args(name=name, uid=None)}
        done = node.plugin(plugin, "ADD", config, env)
        assert done.ok, done.stdout + done.stderr
        pods[name] = {"ns": ns, "env": env, "result": done.output}

    records = stack.records(network)
    other = stack.records("default" if network != "default" else ATTACHMENT)
    for name, p in pods.items():
        st = records[name]["status"]
        assert st["phase"] == "Routed"
        address = f"{st['ip']}/{st['prefixLength']}"
        assert st["ip"] != other[name]["status"]["ip"]  # the network asked for, no other
        # the plugin's result carries podnet-ipam's address, in the plugin's version
        result = p["result"]
        assert result["cniVersion"] == config["cniVersion"]
        ips = [{k: v for k, v in ip.items() if k != "interface"} for ip in result["ips"]]
        want: dict[str, Any] = {"address": address, "gateway": st["gateway"]}
        if config["cniVersion"] in ("0.3.1", "0.4.0"):
            want["version"] = "4"
        assert ips == [want]
        # and the pod's interface has it
        assert addresses_in(p["ns"]).get("eth0") == [address], addresses_in(p["ns"])
        p["ip"] = st["ip"]
    a, b = pods["a"], pods["b"]

    assert ping(a["ns"], b["ip"]), f"{plugin}: a cannot ping b"
    assert ping(b["ns"], a["ip"]), f"{plugin}: b cannot ping a"
    if plugin == "bridge":
        # isGateway: the bridge on the node holds the record's gateway, with its prefix
        assert f"inet {records['a']['status']['gateway']}/24" in node.ip("addr", "show", bridge)
        assert ping(a["ns"], records["a"]["status"]["gateway"]), "a cannot ping its gateway"

    if version != "0.3.1":  # CHECK is defined from 0.4.0 on
        checked = node.plugin(plugin, "CHECK", {**config, "prevResult": a["result"]}, a["env"])
        assert checked.ok, checked.stdout + checked.stderr

    # DEL by the plugin: b's interface goes, its address stays recorded (DEL never releases)
    host_routes = node.ip("route", "show")
    assert node.plugin(plugin, "DEL", config, b["env"]).ok
    assert "eth0" not in addresses_in(b["ns"])
    assert not ping(a["ns"], b["ip"]), f"{plugin}: b's address still answers after DEL"
    if plugin == "ptp":  # the host route to b's address went with its veth
        assert f"{b['ip']} dev" in host_routes
        assert f"{b['ip']} dev" not in node.ip("route", "show")
    assert stack.records(network)["b"]["status"]["ip"] == b["ip"]
    assert stack.records(network)["b"]["status"]["phase"] == "Routed"
    assert node.plugin(plugin, "DEL", config, b["env"]).ok, "DEL must be idempotent"
    # a sandbox made again for b gets its address back
    again = node.plugin(plugin, "ADD", config, b["env"])
    assert again.ok, again.stdout + again.stderr
    assert addresses_in(b["ns"]).get("eth0") == [f"{b['ip']}/24"]
    # b speaks first: its ARP request tells a the new MAC behind the same address (these
    # plugins send no gratuitous ARP, and a's entry for the old one is still fresh)
    assert ping(b["ns"], a["ip"]), f"{plugin}: b's new interface cannot ping a"
    assert ping(a["ns"], b["ip"]), f"{plugin}: a cannot ping b's new interface"
    for p in (a, b):
        assert node.plugin(plugin, "DEL", config, p["env"]).ok
    if plugin in ("bridge", "ptp"):
        # what the plugin made on the node for the pods is gone: no veth left
        assert node.ip("link", "show", "type", "veth").strip() == ""


# --- bad input, CHECK and DEL of podnet-ipam itself ---------------------------------------


@pytest.mark.slow
@needs_packets
def test_bad_input_is_a_cni_error_naming_the_field(
        stack: Stack, node: Node, tmp_path: Path) -> None:
    start_agent(stack, node, add_timeout=2)
    stack.create([pod("a")])
    wait_for("a's record Routed", lambda: stack.records().get("a", {}).get(
        "status", {}).get("phase") == "Routed", 60, interval=0.3)
    st = stack.records()["a"]["status"]
    ns = node.netns()
    env = {"CNI_CONTAINERID": uuid.uuid4().hex, "CNI_NETNS": f"/run/netns/{ns}",
           "CNI_ARGS": pod_args(name="a", uid=None)}
    base = {"cniVersion": "1.0.0", "name": "ipam-bad", "type": "bridge",
            "bridge": f"pnb{node.suffix}"}
    good = {"type": IPAM_NAME, "agentSocket": stack.socket}

    def ipam(command: str, section: Any, **extra: Any) -> CniResult:
        """podnet-ipam run as the bridge plugin runs it: the whole config on stdin."""
        return run_cni(command, {**base, "ipam": section, **extra}, env,
                       argv=[str(node.bin_dir / IPAM_NAME)])

    # the good section: an IPAM result, the record's address and routes, no interfaces
    done = ipam("ADD", good)
    assert done.ok, done.stdout
    address = f"{st['ip']}/{st['prefixLength']}"
    assert done.output == {"cniVersion": "1.0.0",
                           "ips": [{"address": address, "gateway": st["gateway"]}],
                           "routes": [{"dst": "0.0.0.0/0", "gw": st["gateway"]}], "dns": {}}

    # (an ipam section missing, no object, or with an agentSocket that is no string: the
    # plugin asks the agent on the default socket, which answers error 7 naming it;
    # tests/test_cni_exec.py, and tests/test_cni_static.py for the default socket)
    ipam("ADD", {**good, "network": 5}).check_error(7, "ipam.network")
    ipam("ADD", {**good, "network": ""}).check_error(7, "ipam.network")
    ipam("ADD", {**good, "agentTimeout": "soon"}).check_error(7, "ipam.agentTimeout")
    # a network the pod does not have: no wait, the field named
    ipam("ADD", {**good, "network": "green"}).check_error(7, "ipam.network", "green")
    # ... and through the Debian bridge plugin: its IPAM's error is what the runtime sees
    through = node.plugin("bridge", "ADD", {**base, "ipam": {**good, "network": "green"}}, env)
    assert through.exit_code == 1 and through.output["code"] == 7, through.stdout
    assert "ipam.network" in through.output["msg"], through.stdout
    # a pod with no record at all: error 11 once the agent's bounded wait runs out
    nobody = {**env, "CNI_ARGS": pod_args(name="nobody", uid=None)}
    run_cni("ADD", {**base, "ipam": good}, nobody,
            argv=[str(node.bin_dir / IPAM_NAME)]).check_error(11, "Routed")
    # the agent not there: ADD is error 11 naming the socket
    gone = {**good, "agentSocket": str(tmp_path / "none.sock")}
    ipam("ADD", gone).check_error(11, str(tmp_path / "none.sock"))

    # CHECK: the record's address passes; another of its subnet, or none, does not
    prev = {"cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": ns}],
            "ips": [{"address": address, "gateway": st["gateway"], "interface": 0}]}
    assert ipam("CHECK", good, prevResult=prev).ok
    stray = {**prev, "ips": [*prev["ips"], {"address": "10.94.0.250/24", "interface": 0}]}
    ipam("CHECK", good, prevResult=stray).check_error(100, "prevResult.ips", "10.94.0.250")
    ipam("CHECK", good, prevResult={**prev, "ips": []}).check_error(100, "prevResult.ips",
                                                                    st["ip"])
    ipam("CHECK", good).check_error(7, "prevResult")

    # DEL: nothing printed, nothing released; with the agent gone it still succeeds
    deleted = ipam("DEL", good)
    assert deleted.ok and deleted.stdout == "", deleted.stdout
    assert stack.records()["a"]["status"]["ip"] == st["ip"]
    assert stack.records()["a"]["status"]["phase"] == "Routed"
    assert ipam("DEL", gone).ok


def test_the_installed_ipam_name_takes_the_ipam_role(tmp_path: Path) -> None:
    """The installed file under the IPAM name reads the ipam section even of a podnet-cni
    config: its socket (the role's choice by name and config: tests/test_cni_plugin.py)."""
    plugin_path()
    install_cni(tmp_path / "bin", tmp_path / "net.d")
    with ExecStandIn(str(tmp_path / "ipam.sock")) as agent:
        as_cni = {"cniVersion": "1.0.0", "name": "n", "type": "podnet-cni",
                  "agentSocket": str(tmp_path / "none.sock"),
                  "ipam": {"agentSocket": agent.path}}
        done = run_cni("STATUS", as_cni, argv=[str(tmp_path / "bin" / IPAM_NAME)])
        assert done.ok, done
        assert [r.program for r in agent.requests] == [IPAM_NAME]


@pytest.mark.slow
@needs_packets
def test_a_granted_address_waits_for_the_plugins_del(stack: Stack, node: Node) -> None:
    """The release handshake for IPAM only: the agent cannot see the other plugin's
    interface, so the address it handed out stays the pod's until that plugin's DEL, even
    once the pod is gone."""
    start_agent(stack, node)
    config = plugin_config("bridge", "1.0.0", stack.socket, "", f"pnb{node.suffix}")
    stack.create([pod("a", networks=ATTACHMENT)])
    ns = node.netns()
    env = {"CNI_CONTAINERID": uuid.uuid4().hex, "CNI_NETNS": f"/run/netns/{ns}",
           "CNI_ARGS": pod_args(name="a", uid=None)}
    assert node.plugin("bridge", "ADD", config, env).ok
    ip = stack.records()["a"]["status"]["ip"]
    stack.kubectl("delete", "pod", "a", "--wait=false")
    wait_for("a's record Releasing", lambda: stack.records().get("a", {}).get(
        "status", {}).get("phase") == "Releasing", 30, interval=0.3)
    time.sleep(3)  # more than the controller needs to release an address it may
    assert stack.records()["a"]["status"]["ip"] == ip, "released while the grant stands"
    assert node.plugin("bridge", "DEL", config, env).ok
    wait_for("a's record released after the plugin's DEL",
             lambda: "a" not in stack.records(), 30, interval=0.3)
