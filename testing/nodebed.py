"""The node bed: a cluster as separate processes and pods as network namespaces, for
packet tests of the node agent and of a provider's dataplane.

What it gives a test (root and network namespaces needed: skip with
:func:`podnet.testing.netns.netns_unavailable`):

- :class:`Stack` runs ``podnet apiserver``, ``podnet run`` (the controller, with the
  provider and configuration you give it; the reference provider by default) and
  ``podnet node`` agents as processes, with kubectl helpers;
- :class:`AgentClient` speaks the CNI plugin's half of the protocol (docs/node.md) to an
  agent's socket; :func:`podnet.testing.cni.run_cni` runs the real plugin instead;
- :class:`Host` makes pod namespaces and container ids, and removes them (and the host
  links a dataplane made for them) also when the test fails;
- :class:`Underlay` makes nodes as network namespaces of their own, joined through a
  router namespace that routes each node's podCIDR to it (as a cloud route table does);
  the cluster's processes run in the router namespace, each agent in its node's;
- :func:`ping`, :class:`TcpServer` and :func:`tcp_talk` prove a dataplane with packets;
  :class:`PortServers`, :func:`probe`, :class:`Prober` (probing again and again) and
  :class:`HeldFlow` (an established connection) prove who may reach whom;
  :func:`addresses_in` and :func:`links_in` read what a namespace holds.

A provider author puts another dataplane under test by giving :class:`Stack` the
controller configuration and provider name, and :class:`Host` the names of the host links
its dataplane makes for a container (to remove them after a failed test)::

    stack = Stack(tmp_path, provider="mine", controller_config={...})
    stack.create([node_object("node-00", "10.93.0.0/24"), pod("a", "node-00")])
    stack.agent("node-00")

Everything it starts or makes it also stops or removes: call ``close`` / ``cleanup`` in a
``finally`` (the fixtures of ``tests/test_node_agent.py`` show how).
"""

from __future__ import annotations

import contextlib
import http.client
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from podnet.testing.waiting import wait_for

__all__ = [
    "ATTACHMENT", "NODE", "POD_CIDR", "AgentClient", "HeldFlow", "Host", "NodeNamespace",
    "PortServers", "Prober", "Stack", "TcpServer", "Underlay", "addresses_in", "in_netns",
    "links_in", "node_object", "ping", "pod", "probe", "reference_config", "reference_links",
    "tcp_talk", "wait_for",
]

#: the one node of a single-node bed, and its podCIDR
NODE = "node-00"
POD_CIDR = "10.93.0.0/24"
#: an attachment network the reference configuration serves too
ATTACHMENT = "blue"


# --- the plugin's side of the protocol ------------------------------------------------


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


class AgentClient:
    """The CNI plugin's half of the protocol (docs/node.md), as a test driver: every
    method answers ``(HTTP status, body)``."""

    def __init__(self, socket_path: str, network_config: dict[str, Any] | None = None
                 ) -> None:
        self.socket_path = socket_path
        self.config = network_config or {"cniVersion": "1.1.0", "name": "podnet",
                                         "type": "podnet-cni"}

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                timeout: float = 90.0) -> tuple[int, dict[str, Any]]:
        conn = _UnixConnection(self.socket_path, timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data,
                         headers={"Content-Type": "application/json"} if data else {})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read() or b"{}")
        except http.client.HTTPException as exc:
            # an agent killed mid-answer (a cut body, no status line): unreachable, as
            # the plugin takes it (error 11), not a malformed answer
            raise ConnectionError(f"the agent's answer broke off: {exc!r}") from exc
        finally:
            conn.close()

    def _body(self, container_id: str, netns: str | None, pod: str, if_name: str,
              namespace: str) -> dict[str, Any]:
        return {"cniVersion": "1.1.0", "containerId": container_id, "netns": netns,
                "ifName": if_name, "podNamespace": namespace, "podName": pod,
                "podUid": None, "network": self.config["name"], "config": self.config}

    def add(self, container_id: str, netns: str, pod: str, *, if_name: str = "eth0",
            namespace: str = "default") -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/add",
                            self._body(container_id, netns, pod, if_name, namespace))

    def delete(self, container_id: str, netns: str | None, pod: str, *,
               if_name: str = "eth0", namespace: str = "default") -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/del",
                            self._body(container_id, netns, pod, if_name, namespace))

    def check(self, container_id: str, netns: str, pod: str, *, if_name: str = "eth0",
              namespace: str = "default") -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/check",
                            self._body(container_id, netns, pod, if_name, namespace))

    def gc(self, valid: list[str]) -> tuple[int, dict[str, Any]]:
        return self.request("POST", "/v1/cni/gc", {
            "cniVersion": "1.1.0", "network": self.config["name"], "config": self.config,
            "validAttachments": [{"containerID": c, "ifname": "eth0"} for c in valid]})

    def status(self) -> tuple[int, dict[str, Any]]:
        return self.request("GET", "/v1/cni/status", timeout=5)

    def ready(self) -> bool:
        """Whether the agent's socket is there and STATUS succeeds."""
        if not os.path.exists(self.socket_path):
            return False
        try:
            return self.status()[0] == 200
        except OSError:
            return False


# --- the cluster as separate processes -------------------------------------------------


def reference_config(tmp: Path) -> dict[str, Any]:
    """The controller configuration the bed uses by default: the reference provider (its
    cloud's state in ``tmp``) and the attachment network :data:`ATTACHMENT`."""
    return {
        "defaultProvider": "reference",
        "providers": {"reference": {"state_file": str(tmp / "cloud.json")}},
        "policies": {"reference": {"minIdle": 2, "maxIdle": 6}},
        "networks": {ATTACHMENT: {"provider": "reference"}},
        "listen": "127.0.0.1:0",
    }


def _in(netns: str | None, argv: Sequence[str]) -> list[str]:
    return [*(["ip", "netns", "exec", netns] if netns else []), *argv]


class Stack:
    """``podnet apiserver`` and the controller as processes (logs in ``tmp``), and agents
    started on demand.

    ``netns``: the namespace the apiserver, the controller and kubectl run in (None: this
    one); ``address``: where the apiserver listens (reachable from the agents'
    namespaces). ``provider`` and ``controller_config`` choose the provider under test
    (default: :func:`reference_config`). ``kubelet_finish_after``: the apiserver's kubelet
    stand-in, which deletes a terminating pod with grace 0 that many seconds after it was
    marked (0, the default: at once, a kubelet whose containers stop at once; None: never,
    pods stay Terminating until deleted with grace 0)."""

    def __init__(self, tmp: Path, *, provider: str = "reference",
                 controller_config: dict[str, Any] | None = None, netns: str | None = None,
                 address: str = "127.0.0.1", controller_args: Sequence[str] = (),
                 kubelet_finish_after: float | None = 0) -> None:
        self.tmp = tmp
        self.provider = provider
        self.netns = netns
        self.kubeconfig = tmp / "kubeconfig"
        self.procs: dict[str, subprocess.Popen[str]] = {}
        try:
            kubelet = ([] if kubelet_finish_after is None
                       else ["--kubelet-finish-after", str(kubelet_finish_after)])
            api = self.spawn("apiserver", ["apiserver", "--address", address, "--port", "0",
                                           "--kubeconfig-out", str(self.kubeconfig), *kubelet],
                             netns=netns)
            assert api.stdout is not None
            self.url = api.stdout.readline().strip()
            assert self.url.startswith(f"http://{address}:"), self.url
            config = tmp / "controller.yaml"
            config.write_text(yaml.safe_dump(
                controller_config if controller_config is not None else reference_config(tmp)))
            self.spawn("controller", ["run", "--kubeconfig", str(self.kubeconfig),
                                      "--provider", provider, "--config", str(config),
                                      "--no-leader-elect", *controller_args], netns=netns)
        except BaseException:
            self.close()
            raise
        #: the single-node bed's agent socket
        self.socket = self.socket_of(NODE)

    def socket_of(self, node: str) -> str:
        return str(self.tmp / "run" / node / "agent.sock")

    def spawn(self, name: str, args: list[str], *, netns: str | None = None
              ) -> subprocess.Popen[str]:
        """``python -m podnet.app.cli ARGS`` as process ``name``, in ``netns``; its stderr
        appended to ``tmp/<name>.log``."""
        with open(self.tmp / f"{name}.log", "a") as log:
            proc = subprocess.Popen(
                _in(netns, [sys.executable, "-m", "podnet.app.cli", *args]),
                stdout=subprocess.PIPE, stderr=log, text=True)
        self.procs[name] = proc
        return proc

    def agent(self, node: str = NODE, *, netns: str | None = None, add_timeout: float = 60,
              providers: Sequence[str] | None = None, name: str | None = None,
              args: Sequence[str] = ()) -> subprocess.Popen[str]:
        """Start ``podnet node`` for ``node`` (process name ``agent`` for :data:`NODE`,
        ``agent-<node>`` otherwise), in ``netns``, its socket at :meth:`socket_of`; ``args``
        are more of its flags."""
        provider_args = [a for p in (providers or [self.provider]) for a in ("--provider", p)]
        name = name or self.agent_name(node)
        # a health socket of its own (beds run at once); one in ``args`` comes after, and wins
        return self.spawn(name, [
            "node", "--node", node, "--kubeconfig", str(self.kubeconfig), *provider_args,
            "--socket", self.socket_of(node), "--add-timeout", f"{add_timeout:g}",
            "--health-listen", f"unix:{self.health_socket(name)}", *args], netns=netns)

    def health_socket(self, name: str) -> str:
        """Where agent process ``name`` serves /healthz, /readyz and /metrics (a unix
        socket, unless its ``args`` chose another ``--health-listen``)."""
        return str(self.tmp / f"{name}.health.sock")

    @staticmethod
    def agent_name(node: str) -> str:
        return "agent" if node == NODE else f"agent-{node}"

    def kill(self, name: str) -> None:
        """SIGKILL process ``name`` (a crash: nothing of it runs a cleanup)."""
        proc = self.procs.pop(name)
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()

    def stop(self, name: str) -> None:
        """SIGTERM process ``name``, SIGKILL after 10 s."""
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
        run = subprocess.run(
            _in(self.netns, ["kubectl", "--kubeconfig", str(self.kubeconfig),
                             "--request-timeout=20s", *args]),
            input=input, capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode == 0, f"kubectl {' '.join(args)}: {run.stderr}"
        return run.stdout

    def create(self, docs: list[dict[str, Any]]) -> None:
        self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(docs))

    def records(self, network: str = "default") -> dict[str, dict[str, Any]]:
        """pod name -> its record of ``network`` (all namespaces)."""
        items = json.loads(self.kubectl("get", "podnetworks", "-A", "-o", "json"))["items"]
        return {pn["spec"]["podName"]: pn for pn in items
                if pn["spec"].get("network", "default") == network}

    def close(self) -> None:
        """Stop every process: the agents, the controller, the apiserver last (the
        others talk to it)."""
        last = ("controller", "apiserver")
        for name in sorted(self.procs, key=lambda n: last.index(n) + 1 if n in last else 0):
            self.stop(name)


def node_object(name: str, pod_cidr: str, internal_ip: str | None = None) -> dict[str, Any]:
    """A Node with its podCIDR and, when given, its InternalIP."""
    node: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                            "spec": {"podCIDR": pod_cidr}}
    if internal_ip:
        node["status"] = {"addresses": [{"type": "InternalIP", "address": internal_ip}]}
    return node


def pod(name: str, node: str = NODE, *, networks: str | None = None,
        annotations: dict[str, str] | None = None, host_network: bool = False,
        namespace: str = "default", owner: dict[str, Any] | None = None) -> dict[str, Any]:
    """A running Pod bound to ``node``; ``networks`` is its ``podnet.io/networks``;
    ``owner`` its controller's ``ownerReferences`` entry (a StatefulSet's: sticky)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if owner is not None:
        meta["ownerReferences"] = [{"controller": True, **owner}]
    notes = {**(annotations or {}), **({"podnet.io/networks": networks} if networks else {})}
    if notes:
        meta["annotations"] = notes
    spec: dict[str, Any] = {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}
    if host_network:
        spec["hostNetwork"] = True
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running"}}


# --- host state a test makes, removed also on failure ------------------------------------


def reference_links(container_id: str, if_name: str) -> list[str]:
    """The host links the reference dataplane makes for one container interface."""
    from podnet.plugins.reference.dataplane import veth_names

    return list(veth_names(container_id, if_name))


class Host:
    """Pod namespaces and container ids a test makes on this host.

    ``links`` names the host links a dataplane makes for a container interface,
    ``bridges`` the links it makes per network: :meth:`cleanup` removes them from this
    namespace, where a test ran an agent here (a node namespace of an :class:`Underlay`
    goes with all it holds). No bridge by default: a bridge here may be another test's,
    running at the same time."""

    def __init__(self, links: Callable[[str, str], Iterable[str]] = reference_links,
                 bridges: Iterable[str] = (),
                 interfaces: Sequence[str] = ("eth0", "net1")) -> None:
        self.links = links
        self.bridges = list(bridges)
        self.interfaces = tuple(interfaces)
        self.namespaces: list[str] = []
        self.containers: list[str] = []

    def netns(self) -> tuple[str, str]:
        """A new pod namespace: its name and its path."""
        name = f"pntest-{uuid.uuid4().hex[:8]}"
        subprocess.run(["ip", "netns", "add", name], check=True)
        self.namespaces.append(name)
        return name, f"/run/netns/{name}"

    def container(self) -> str:
        """A new container id (its links are removed by :meth:`cleanup`)."""
        cid = uuid.uuid4().hex
        self.containers.append(cid)
        return cid

    def cleanup(self) -> None:
        from pyroute2 import IPRoute

        for name in self.namespaces:
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        with IPRoute() as ipr:
            names = [n for cid in self.containers for itf in self.interfaces
                     for n in self.links(cid, itf)]
            for name in [*names, *self.bridges]:
                for index in ipr.link_lookup(ifname=name):
                    with contextlib.suppress(Exception):  # its peer's deletion took it
                        ipr.link("del", index=index)


# --- nodes as network namespaces ----------------------------------------------------------


@attrs.frozen
class NodeNamespace:
    """A node of an :class:`Underlay`: its namespace, its underlay address, its podCIDR."""

    name: str
    netns: str
    address: str
    pod_cidr: str


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _forwarding(netns: str) -> None:
    _ip("netns", "exec", netns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1")


class Underlay:
    """Nodes as network namespaces joined by a router namespace.

    The router holds a bridge with the underlay's first address; each node gets a veth
    (``underlay0`` in the node, on the router's bridge), the next address, a default route
    via the router and IPv4 forwarding (a node prerequisite). The router routes each
    node's podCIDR via the node's underlay address, as a cloud's route table does for a
    bridge network like kubenet. Run the cluster's processes in :attr:`router` with the
    apiserver on :attr:`router_address`; run each agent in its node's namespace.

    Every name has a random suffix; :meth:`cleanup` deletes the namespaces, and with them
    every link and bridge in them (stop the processes in them first)."""

    def __init__(self, subnet: str = "192.168.77.0/24") -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.subnet = ipaddress.ip_network(subnet)
        hosts = self.subnet.hosts()
        self.router_address = str(next(hosts))
        self._addresses = hosts
        self.router = f"pnrouter-{self.suffix}"
        self.nodes: dict[str, NodeNamespace] = {}
        self._made: list[str] = []
        try:
            self._namespace(self.router)
            _ip("-n", self.router, "link", "add", "underlay", "type", "bridge")
            _ip("-n", self.router, "addr", "add",
                f"{self.router_address}/{self.subnet.prefixlen}", "dev", "underlay")
            _ip("-n", self.router, "link", "set", "underlay", "up")
            _ip("-n", self.router, "link", "set", "lo", "up")
            _forwarding(self.router)
        except BaseException:
            self.cleanup()
            raise

    def _namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._made.append(name)

    def add_node(self, name: str, pod_cidr: str) -> NodeNamespace:
        """A node namespace on the underlay, its podCIDR routed to it."""
        index = len(self.nodes)
        netns = f"pnnode{index}-{self.suffix}"
        address = str(next(self._addresses))
        self._namespace(netns)
        port = f"to-node{index}"
        _ip("-n", self.router, "link", "add", port, "type", "veth", "peer", "name",
            "underlay0", "netns", netns)
        _ip("-n", self.router, "link", "set", port, "master", "underlay", "up")
        _ip("-n", netns, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev",
            "underlay0")
        _ip("-n", netns, "link", "set", "underlay0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "route", "add", "default", "via", self.router_address)
        _forwarding(netns)
        _ip("-n", self.router, "route", "add", pod_cidr, "via", address)
        node = NodeNamespace(name=name, netns=netns, address=address, pod_cidr=pod_cidr)
        self.nodes[name] = node
        return node

    def cleanup(self) -> None:
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)
        self._made.clear()


# --- packets ------------------------------------------------------------------------------


def in_netns(name: str, code: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Run Python ``code`` (dedented) in namespace ``name``."""
    return subprocess.run(["ip", "netns", "exec", name, sys.executable, "-c",
                           textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, check=False)


# ICMP echo over a raw socket: busybox's ping may be missing, this interpreter is not
_PING = """
import socket, struct, sys, time
def checksum(data):
    if len(data) % 2:
        data += b"\\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF
V6 = ":" in TARGET
# ICMPv6: the kernel fills in the checksum and hands replies over without the IP header
sock = (socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6) if V6
        else socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
sock.settimeout(TIMEOUT)
if SIZE and not V6:  # don't fragment (IP_MTU_DISCOVER = IP_PMTUDISC_DO: Python names neither)
    sock.setsockopt(socket.IPPROTO_IP, 10, 2)
request, reply = (128, 129) if V6 else (8, 0)
for seq in range(COUNT):
    header = struct.pack("!BBHHH", request, 0, 0, 0x5050, seq)
    payload = b"podnet".ljust(max(SIZE - 28, 6), b".")
    packet = struct.pack("!BBHHH", request, 0, 0 if V6 else checksum(header + payload),
                         0x5050, seq) + payload
    sock.sendto(packet, (TARGET, 0))
    try:
        while True:
            data, addr = sock.recvfrom(65536)
            ihl = 0 if V6 else (data[0] & 0x0F) * 4
            kind, _, _, ident, got = struct.unpack("!BBHHH", data[ihl:ihl + 8])
            if addr[0] == TARGET and kind == reply and ident == 0x5050:
                print("reply from", addr[0])
                sys.exit(0)
    except socket.timeout:
        time.sleep(0.2)
sys.exit(1)
"""


def ping(netns: str, target: str, count: int = 5, timeout: float = 2.0,
         size: int = 0, device: str | None = None) -> bool:
    """Whether ``target`` answers an ICMP echo from namespace ``netns`` (``count`` tries,
    ``timeout`` seconds each). ``size``: the IP packet's length, sent with don't-fragment
    (one larger than the interface's MTU is not sent: no answer); 0: a small one.
    ``device``: sent out of that interface only (a pod's attachment)."""
    code = (f"TARGET = {target!r}\nCOUNT = {count}\nTIMEOUT = {timeout}\nSIZE = {size}\n"
            + _PING)
    if device is not None:
        # SO_BINDTODEVICE (25: Python names it only on some builds)
        code = code.replace("sock.settimeout(TIMEOUT)\n", "sock.settimeout(TIMEOUT)\n"
                            f"sock.setsockopt(socket.SOL_SOCKET, 25, {device.encode()!r})\n")
    return in_netns(netns, code, timeout=count * (timeout + 1) + 10).returncode == 0


class TcpServer:
    """A TCP server in namespace ``netns`` on ``address:port`` that accepts one
    connection and answers ``hello <peer address> <what it received>``. Use as a context
    manager: it listens on entry and is stopped on exit."""

    def __init__(self, netns: str, address: str, port: int = 8080) -> None:
        self.netns, self.address, self.port = netns, address, port
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> TcpServer:
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, sys.executable, "-c", textwrap.dedent(f"""
                import socket
                s = socket.socket()
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(({self.address!r}, {self.port}))
                s.listen(1)
                print("listening", flush=True)
                s.settimeout(30)
                conn, peer = s.accept()
                conn.sendall(b"hello " + peer[0].encode() + b" " + conn.recv(100))
                conn.close()
            """)], stdout=subprocess.PIPE, text=True)
        try:
            assert self.proc.stdout is not None
            line = self.proc.stdout.readline().strip()
            assert line == "listening", f"the TCP server did not start: {line!r}"
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self.proc = None


def tcp_talk(netns: str, address: str, port: int = 8080, message: str = "from a",
             timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
    """Connect from ``netns`` to ``address:port``, send ``message``, print the answer."""
    return in_netns(netns, f"""
        import socket
        c = socket.create_connection(({address!r}, {port}), timeout={timeout})
        c.sendall({message.encode()!r})
        print(c.recv(100).decode())
    """, timeout=timeout + 10)


def addresses_in(netns: str) -> dict[str, list[str]]:
    """Interface name -> its IPv4 addresses (``a.b.c.d/len``) in namespace ``netns`` (a
    name or a path)."""
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        names = {link["index"]: str(link.get_attr("IFLA_IFNAME")) for link in ns.get_links()}
        out: dict[str, list[str]] = {}
        for addr in ns.get_addr(family=socket.AF_INET):
            out.setdefault(names[addr["index"]], []).append(
                f"{addr.get_attr('IFA_ADDRESS')}/{addr['prefixlen']}")
        return out


def links_in(netns: str | None = None) -> list[str]:
    """The link names in namespace ``netns`` (None: this one)."""
    from pyroute2 import IPRoute, NetNS

    with contextlib.closing(NetNS(netns) if netns else IPRoute()) as ns:
        return sorted(str(link.get_attr("IFLA_IFNAME")) for link in ns.get_links())



# --- probes of who may reach whom (NetworkPolicy) ------------------------------------


def _socket_in(netns: str, family: int, kind: int) -> socket.socket:
    """A socket of namespace ``netns`` (a name or a path), usable from any thread."""
    from podnet.linux.netns import netns_path, run_in_netns

    path = netns if netns.startswith("/") else netns_path(netns)
    return run_in_netns(path, lambda: socket.socket(family, kind))


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


class PortServers:
    """TCP and UDP servers in namespace ``netns`` on ``address``, each port of ``ports``:
    TCP accepts and echoes what it receives until the peer closes; UDP echoes each
    datagram. Threads of this process (their sockets made in the namespace). Use as a
    context manager."""

    def __init__(self, netns: str, address: str, ports: Iterable[int] = (80, 81)) -> None:
        self.netns, self.address, self.ports = netns, address, tuple(ports)
        self._sockets: list[socket.socket] = []
        self._stop = False

    def __enter__(self) -> PortServers:
        import threading

        try:
            for port in self.ports:
                tcp = _socket_in(self.netns, _family(self.address), socket.SOCK_STREAM)
                self._sockets.append(tcp)
                tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                tcp.bind((self.address, port))
                tcp.listen(64)
                udp = _socket_in(self.netns, _family(self.address), socket.SOCK_DGRAM)
                self._sockets.append(udp)
                udp.bind((self.address, port))
                for target, sock in ((self._accept, tcp), (self._echo, udp)):
                    threading.Thread(target=target, args=(sock,), daemon=True).start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _accept(self, listener: socket.socket) -> None:
        import threading

        while not self._stop:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    @staticmethod
    def _serve(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(1024):
                    conn.sendall(data)
            except OSError:
                return

    def _echo(self, sock: socket.socket) -> None:
        while not self._stop:
            try:
                data, peer = sock.recvfrom(1024)
                if peer is None:  # shut down
                    return
                sock.sendto(data, peer)
            except OSError:
                return

    def __exit__(self, *_: object) -> None:
        self._stop = True
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()


def probe(netns: str, address: str, port: int, protocol: str = "TCP",
          timeout: float = 1.0) -> str:
    """One new connection from namespace ``netns`` to ``address:port``: ``"ok"`` (TCP
    connected: the kernel's handshake, whatever the server process does; UDP echoed),
    ``"timeout"`` (nothing came back within ``timeout``: dropped), ``"refused"`` (a reset
    or an ICMP error: something answered that no one listens)."""
    kind = socket.SOCK_STREAM if protocol == "TCP" else socket.SOCK_DGRAM
    sock = _socket_in(netns, _family(address), kind)
    sock.settimeout(timeout)
    try:
        sock.connect((address, port))
        if kind == socket.SOCK_STREAM:
            return "ok"
        sock.send(b"probe")
        return "ok" if sock.recv(16) == b"probe" else "refused"
    except TimeoutError:
        return "timeout"
    except OSError:
        return "refused"
    finally:
        sock.close()


class Prober:
    """Probes ``target`` from ``netns`` again and again in a thread (:func:`probe`), each
    verdict kept in :attr:`verdicts` with its index, until stopped. Use as a context
    manager; ``count`` probes have run once :meth:`wait` for it returns."""

    def __init__(self, netns: str, address: str, port: int, protocol: str = "TCP",
                 timeout: float = 0.5) -> None:
        import threading

        self.args = (netns, address, port, protocol, timeout)
        self.verdicts: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.verdicts.append(probe(*self.args))
            self._stop.wait(0.02)

    def wait(self, count: int, timeout: float = 120.0) -> None:
        start = len(self.verdicts)
        wait_for(f"{count} probes", lambda: len(self.verdicts) >= start + count, timeout)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


class HeldFlow:
    """One TCP connection from ``netns`` to a :class:`PortServers` port, held open:
    :meth:`talk` sends a line and waits for its echo (a flow cut shows as a timeout or
    an error). Close it when done."""

    def __init__(self, netns: str, address: str, port: int, timeout: float = 5.0) -> None:
        self.sock = _socket_in(netns, _family(address), socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect((address, port))
        except BaseException:
            self.sock.close()
            raise
        self.sent = 0

    def talk(self) -> bool:
        self.sent += 1
        data = f"{self.sent:08d}".encode()
        try:
            self.sock.sendall(data)
            got = b""
            while len(got) < len(data):
                more = self.sock.recv(len(data) - len(got))
                if not more:
                    return False
                got += more
            return got == data
        except OSError:
            return False

    def close(self) -> None:
        self.sock.close()


# --- pytest fixtures --------------------------------------------------------------------


try:
    import pytest
except ImportError:  # pragma: no cover - production install without test extras
    pass
else:
    @pytest.fixture
    def host() -> Iterator[Host]:
        """The pod namespaces and containers a test makes (the reference dataplane's
        links), removed at the end, also when the test fails."""
        made = Host()
        try:
            yield made
        finally:
            made.cleanup()

    @pytest.fixture
    def underlay() -> Iterator[Underlay]:
        """Nodes as namespaces on a router namespace, removed at the end."""
        made = Underlay()
        try:
            yield made
        finally:
            made.cleanup()
