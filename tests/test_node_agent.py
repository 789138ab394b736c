"""The node agent with real packets: ``podnet apiserver``, ``podnet run`` (the reference
provider) and ``podnet node`` as separate processes; "pods" are network namespaces the test
makes; the test drives the agent over its unix socket exactly as the CNI plugin does
(:class:`AgentClient`: swap it for a driver of the ``podnet-cni`` binary later).

Two pods on the node ping each other and hold a TCP connection over the reference bridge
network; a DEL removes the pod's veth and leaves its address recorded, released only once
the pod is gone; a restarted agent removes leftovers of records that no longer exist.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnet.testing.netns import netns_unavailable
from podnet.testing.waiting import wait_for as _wait_for

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

NODE = "node-00"
POD_CIDR = "10.93.0.0/24"
#: an attachment network the reference provider serves too
ATTACHMENT = "blue"


# --- the test driver: the plugin's side of the protocol -----------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class AgentClient:
    """The CNI plugin's half of the protocol (docs/node.md), as a test driver."""

    def __init__(self, socket_path: str, network_config: dict[str, Any]) -> None:
        self.socket_path = socket_path
        self.config = network_config

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                timeout: float = 90.0) -> tuple[int, dict[str, Any]]:
        conn = _UnixConnection(self.socket_path, timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        finally:
            conn.close()

    def _body(self, container_id: str, netns: str | None, pod: str,
              if_name: str = "eth0") -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "containerId": container_id, "netns": netns,
                "ifName": if_name, "podNamespace": "default", "podName": pod, "podUid": None,
                "network": self.config["name"], "config": self.config}

    def add(self, container_id: str, netns: str, pod: str) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/add", self._body(container_id, netns, pod))

    def delete(self, container_id: str, netns: str | None, pod: str
               ) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/del", self._body(container_id, netns, pod))

    def check(self, container_id: str, netns: str, pod: str) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/check", self._body(container_id, netns, pod))

    def gc(self, valid: list[str]) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/gc", {
            "cniVersion": "1.1.0", "network": self.config["name"], "config": self.config,
            "validAttachments": [{"containerID": c, "ifname": "eth0"} for c in valid]})

    def status(self) -> tuple[int, dict[str, Any]]:
        return self.request("GET", "/v1/cni/status", timeout=5)


# --- the cluster as separate processes ---------------------------------------------------


class Stack:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.kubeconfig = tmp / "kubeconfig"
        self.procs: dict[str, subprocess.Popen[str]] = {}
        api = self.spawn("apiserver", ["apiserver", "--port", "0", "--kubeconfig-out",
                                       str(self.kubeconfig)])
        assert api.stdout is not None
        url = api.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        config = tmp / "controller.yaml"
        config.write_text(yaml.safe_dump({
            "defaultProvider": "reference",
            "providers": {"reference": {"state_file": str(tmp / "cloud.json")}},
            "policies": {"reference": {"minIdle": 2, "maxIdle": 6}},
            "networks": {ATTACHMENT: {"provider": "reference"}},
            "listen": "127.0.0.1:0",
        }))
        self.spawn("controller", ["run", "--kubeconfig", str(self.kubeconfig), "--provider",
                                  "reference", "--config", str(config), "--no-leader-elect"])
        self.socket = str(tmp / "run" / "agent.sock")

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen[str]:
        log = open(self.tmp / f"{name}.log", "a")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen([sys.executable, "-m", "podnet.app.cli", *args],
                                stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs[name] = proc
        return proc

    def agent(self) -> subprocess.Popen[str]:
        return self.spawn("agent", ["node", "--node", NODE, "--kubeconfig", str(self.kubeconfig),
                                    "--provider", "reference", "--socket", self.socket,
                                    "--add-timeout", "60"])

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()

    def kubectl(self, *args: str, input: str | None = None) -> str:
        run = subprocess.run(["kubectl", "--kubeconfig", str(self.kubeconfig),
                              "--request-timeout=20s", *args], input=input,
                             capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, f"kubectl {' '.join(args)}: {run.stderr}"
        return run.stdout

    def create(self, docs: list[dict[str, Any]]) -> None:
        self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs))

    def records(self, network: str = "default") -> dict[str, dict[str, Any]]:
        """pod name -> its record of ``network``."""
        items = json.loads(self.kubectl("get", "podnetworks", "-A", "-o", "json"))["items"]
        return {pn["spec"]["podName"]: pn for pn in items
                if pn["spec"].get("network", "default") == network}

    def close(self) -> None:
        for name in list(self.procs):
            self.stop(name)


def pod(name: str, networks: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if networks:
        meta["annotations"] = {"podnet.io/networks": networks}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}]},
            "status": {"phase": "Running"}}


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


# --- host state the test makes, removed also on failure ----------------------------------


class Host:
    def __init__(self) -> None:
        self.namespaces: list[str] = []
        self.containers: list[tuple[str, str]] = []

    def netns(self) -> tuple[str, str]:
        name = f"pntest-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.namespaces.append(name)
        return name, f"/run/netns/{name}"

    def container(self) -> str:
        cid = uuid.uuid4().hex
        self.containers.extend((cid, itf) for itf in ("eth0", "net1"))
        return cid

    def cleanup(self) -> None:
        from pyroute2 import IPRoute

        from podnet.plugins.reference.dataplane import bridge_name, veth_names

        for name in self.namespaces:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        with IPRoute() as ipr:
            names = [veth_names(cid, itf)[i] for cid, itf in self.containers for i in (0, 1)]
            for name in [*names, bridge_name("default"), bridge_name(ATTACHMENT)]:
                for index in ipr.link_lookup(ifname=name):
                    ipr.link("del", index=index)


@pytest.fixture
def host() -> Iterator[Host]:
    h = Host()
    try:
        yield h
    finally:
        h.cleanup()


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        yield s
    finally:
        s.close()


def in_netns(name: str, code: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                           textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, check=False)


PING = """
import socket, struct, sys, time
def checksum(data):
    if len(data) % 2:
        data += b"\\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF
target = sys.argv[1] if len(sys.argv) > 1 else TARGET
sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
sock.settimeout(2)
for seq in range(5):
    header = struct.pack("!BBHHH", 8, 0, 0, 0x5050, seq)
    payload = b"podnet"
    packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), 0x5050, seq) + payload
    sock.sendto(packet, (target, 0))
    try:
        while True:
            data, addr = sock.recvfrom(1024)
            ihl = (data[0] & 0x0F) * 4
            kind, _, _, ident, got = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if addr[0] == target and kind == 0 and ident == 0x5050:
                print("reply from", addr[0])
                sys.exit(0)
    except socket.timeout:
        time.sleep(0.2)
sys.exit(1)
"""


def ping(netns: str, target: str) -> bool:
    return in_netns(netns, f"TARGET = {target!r}\n" + textwrap.dedent(PING)).returncode == 0


def test_two_pods_ping_and_talk_tcp_del_removes_the_veth_not_the_address(
        stack: Stack, host: Host) -> None:
    from pyroute2 import IPRoute

    from podnet.plugins.reference.dataplane import veth_names

    stack.create([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                   "spec": {"podCIDR": POD_CIDR}}])
    stack.agent()
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet",
                                        "type": "podnet-cni"})
    wait_for("the agent's socket", lambda: os.path.exists(stack.socket))
    wait_for("the agent ready", lambda: client.status()[0] == 200)
    assert (os.stat(stack.socket).st_mode & 0o777) == 0o600
    assert (os.stat(os.path.dirname(stack.socket)).st_mode & 0o777) == 0o700

    stack.create([pod("a"), pod("b")])
    ns_a, path_a = host.netns()
    ns_b, path_b = host.netns()
    cid_a, cid_b = host.container(), host.container()
    code, result_a = client.add(cid_a, path_a, "a")
    assert code == 200, result_a
    code, result_b = client.add(cid_b, path_b, "b")
    assert code == 200, result_b

    records = stack.records()
    for name, result, path in (("a", result_a, path_a), ("b", result_b, path_b)):
        st = records[name]["status"]
        assert st["phase"] == "Routed"
        assert st["prefixLength"] == 24 and st["mtu"] == 1500
        assert st["routes"] == [{"dst": "0.0.0.0/0", "gw": st["gateway"]}]
        assert result["cniVersion"] == "1.1.0"
        assert result["interfaces"] == [{"name": "eth0", "mac": st["mac"], "sandbox": path}]
        assert result["ips"] == [{"address": f"{st['ip']}/24", "gateway": st["gateway"],
                                  "interface": 0}]
        assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": st["gateway"]}]
    ip_a, ip_b = records["a"]["status"]["ip"], records["b"]["status"]["ip"]

    # ADD again (the runtime retries): the same answer, no second interface
    assert client.add(cid_a, path_a, "a") == (200, result_a)
    assert client.check(cid_a, path_a, "a") == (200, {})

    assert ping(ns_a, ip_b), "a cannot ping b"
    assert ping(ns_b, ip_a), "b cannot ping a"
    assert ping(ns_a, records["a"]["status"]["gateway"]), "a cannot ping its gateway"

    server = subprocess.Popen(
        ["ip", "netns", "exec", ns_b, sys.executable, "-c", textwrap.dedent(f"""
            import socket
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(({ip_b!r}, 8080))
            s.listen(1)
            print("listening", flush=True)
            s.settimeout(20)
            conn, peer = s.accept()
            conn.sendall(b"hello " + peer[0].encode() + b" " + conn.recv(100))
            conn.close()
        """)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "listening"
        talk = in_netns(ns_a, f"""
            import socket
            c = socket.create_connection(({ip_b!r}, 8080), timeout=10)
            c.sendall(b"from a")
            print(c.recv(100).decode())
        """)
        assert talk.returncode == 0, talk.stderr
        assert talk.stdout.strip() == f"hello {ip_a} from a"
    finally:
        server.kill()
        server.wait(timeout=10)
        if server.stdout is not None:
            server.stdout.close()

    # DEL of b: its veth is gone, its record keeps its address (DEL never releases)
    host_b = veth_names(cid_b, "eth0")[0]
    assert client.delete(cid_b, path_b, "b") == (200, {})
    assert client.delete(cid_b, path_b, "b") == (200, {})  # idempotent
    with IPRoute() as ipr:
        assert ipr.link_lookup(ifname=host_b) == []
    assert stack.records()["b"]["status"]["ip"] == ip_b
    assert not ping(ns_a, ip_b)
    # the pod is gone: now the controller releases it
    stack.kubectl("delete", "pod", "b", "--wait=false")
    wait_for("b's record released", lambda: "b" not in stack.records())

    # the release handshake: a's pod is deleted while the agent is down and its veth is
    # still there, so its record stays Releasing and its address is nobody else's; the
    # restarted agent removes the leftover, reports it, and only then is it released
    stack.stop("agent")
    stack.kubectl("delete", "pod", "a", "--wait=false")
    wait_for("a's record Releasing", lambda: stack.records().get("a", {}).get(
        "status", {}).get("phase") == "Releasing")
    time.sleep(3)  # what the controller would have needed to release it
    assert stack.records()["a"]["status"]["ip"] == ip_a, "released while its veth exists"
    host_a = veth_names(cid_a, "eth0")[0]
    with IPRoute() as ipr:
        assert ipr.link_lookup(ifname=host_a) != []
    stack.agent()
    wait_for("the restarted agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)

    def a_gone() -> bool:
        with IPRoute() as ipr:
            return ipr.link_lookup(ifname=host_a) == []

    wait_for("a's leftover veth removed", a_gone)
    wait_for("a's record released once its veth is gone", lambda: "a" not in stack.records())


def test_add_times_out_with_error_11_and_bad_input_names_the_field(
        stack: Stack, host: Host, tmp_path: Path) -> None:
    stack.create([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                   "spec": {"podCIDR": POD_CIDR}}])
    stack.spawn("agent", ["node", "--node", NODE, "--kubeconfig", str(stack.kubeconfig),
                          "--provider", "reference", "--socket", stack.socket,
                          "--add-timeout", "1"])
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet"})
    wait_for("the agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)
    _, path = host.netns()
    code, err = client.add(host.container(), path, "nobody")
    assert code == 503 and err["code"] == 11 and "Routed" in err["msg"], err
    code, err = client.add(host.container(), "/nonexistent/netns", "nobody")
    assert code == 400 and err["code"] == 7 and err["msg"].startswith("netns"), err
    code, err = client.request("POST", "/v1/cni/add", {"ifName": "eth0"})
    assert code == 400 and err["code"] == 7 and "containerId" in err["msg"], err
    code, err = client.request("POST", "/v1/cni/gc", {"network": "podnet"})
    assert code == 400 and err["code"] == 7 and "validAttachments" in err["msg"], err
    assert client.gc([]) == (200, {})


def addresses_in(netns: str) -> dict[str, list[str]]:
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        names = {link["index"]: str(link.get_attr("IFLA_IFNAME")) for link in ns.get_links()}
        out: dict[str, list[str]] = {}
        for addr in ns.get_addr(family=socket.AF_INET):
            out.setdefault(names[addr["index"]], []).append(
                f"{addr.get_attr('IFA_ADDRESS')}/{addr['prefixlen']}")
        return out


def test_a_pod_with_two_networks_has_two_interfaces(stack: Stack, host: Host) -> None:
    from pyroute2 import IPRoute

    from podnet.plugins.reference.dataplane import veth_names

    stack.create([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                   "spec": {"podCIDR": POD_CIDR}}])
    stack.agent()
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet"})
    wait_for("the agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)
    stack.create([pod("multi", networks=ATTACHMENT)])
    _, path = host.netns()
    cid = host.container()
    code, result = client.add(cid, path, "multi")
    assert code == 200, result
    default = stack.records()["multi"]["status"]
    blue = stack.records(ATTACHMENT)["multi"]["status"]
    assert default["ip"] != blue["ip"]
    assert [i["name"] for i in result["interfaces"]] == ["eth0", "net1"]
    assert result["ips"] == [
        {"address": f"{default['ip']}/24", "gateway": default["gateway"], "interface": 0},
        {"address": f"{blue['ip']}/24", "gateway": blue["gateway"], "interface": 1}]
    # one default route, the default network's
    assert result["routes"] == [{"dst": "0.0.0.0/0", "gw": default["gateway"]}]
    assert addresses_in(path) == {"lo": ["127.0.0.1/8"], "eth0": [f"{default['ip']}/24"],
                                  "net1": [f"{blue['ip']}/24"]}
    assert client.check(cid, path, "multi") == (200, {})
    # GC with the container no longer listed: both host ends go
    assert client.gc([]) == (200, {})
    with IPRoute() as ipr:
        for itf in ("eth0", "net1"):
            assert ipr.link_lookup(ifname=veth_names(cid, itf)[0]) == []


def test_the_runtime_runs_podnet_cni_against_the_agent(stack: Stack, host: Host) -> None:
    """The real client: ``podnet-cni`` run as a runtime runs it (environment, config on
    stdin, an older cniVersion), against the real agent: two pods ping each other; CHECK
    passes; DEL removes the interface and, run again, still succeeds."""
    from podnet.testing.cni import pod_args, run_cni

    stack.create([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                   "spec": {"podCIDR": POD_CIDR}}])
    stack.agent()
    config = {"cniVersion": "0.4.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    wait_for("the agent ready", lambda: run_cni("STATUS", {**config, "cniVersion": "1.1.0"},
                                               {}).exit_code == 0)
    stack.create([pod("a"), pod("b")])
    pods = {}
    for name in ("a", "b"):
        ns, path = host.netns()
        cid = host.container()
        env = {"CNI_CONTAINERID": cid, "CNI_NETNS": path, "CNI_ARGS": pod_args(name=name,
                                                                                uid=None)}
        done = run_cni("ADD", config, env)
        assert done.exit_code == 0, done.stdout + done.stderr
        result = json.loads(done.stdout)
        assert result["cniVersion"] == "0.4.0"
        assert result["ips"][0]["version"] == "4"  # the field 0.4.0 requires
        pods[name] = (ns, path, env, result["ips"][0]["address"].split("/")[0])
    (ns_a, _path_a, env_a, ip_a), (ns_b, _path_b, _env_b, ip_b) = pods["a"], pods["b"]
    assert ping(ns_a, ip_b), "a cannot ping b"
    assert ping(ns_b, ip_a), "b cannot ping a"
    assert run_cni("CHECK", config, env_a).exit_code == 0

    assert run_cni("DEL", config, env_a).exit_code == 0
    assert "eth0" not in addresses_in(ns_a)
    assert not ping(ns_b, ip_a), "a's address still answers after DEL"
    assert run_cni("DEL", config, env_a).exit_code == 0, "DEL must be idempotent"
