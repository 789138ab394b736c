"""The demo's last stage, "on a node": two pods get real interfaces, ping each other, and
a NetworkPolicy lets one reach the other and not back.

The demo's other stages prove the control plane; this one runs the node side on one
more node of the same in-memory cluster, served by the reference provider (the one with
a dataplane today: a Linux bridge per network, a veth pair per pod interface):

1. the node (labelled :data:`NODE_LABEL`, which the demo's ``nodeProviders`` rule routes
   to the reference provider) is a network namespace, and its node agent
   (:class:`~podnet.node.NodeAgent`, in this process, on a unix socket in a
   temporary folder) does its netlink work from threads inside that namespace, so the
   bridge and the host ends of the veth pairs are made there, never on this host;
2. two pods on it, each a network namespace; once their PodNetworks are Routed, the real
   ``podnet-cni ADD`` runs for each, as a runtime runs it (the ``CNI_*`` environment, the
   configuration on stdin, ``agentSocket`` pointing at the agent);
3. ICMP echoes from one pod's namespace to the other's address;
4. NetworkPolicy: the pods' namespace denies all ingress and one pair is allowed
   (:func:`policy_objects`); a TCP connect each way before the policies and once both
   say Programmed: pod-a -> pod-b connects, pod-b -> pod-a gets no answer (dropped). The
   policies are enforced as in production: the agent's own table in the node's namespace
   (``inet podnet``), or on OVN the controller through the provider's ACLs; then deleted,
   and what they programmed waited out;
5. ``podnet-cni DEL`` for both, the pods deleted, their records released (the release
   handshake through the agent's report), then everything made is removed: namespaces,
   socket, agent, also when a step fails or on Ctrl-C.

It needs root and network namespaces (:func:`stage_unavailable` says why not); the policy
part needs ``nft`` on a node whose agent enforces (:func:`nft_unavailable`; without it
the stage says so and does not fake it).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import attrs

from podnet.app import demo_policy
from podnet.app.demo_policy import (
    ALLOWED_TIMEOUT_S,
    DENIED_TIMEOUT_S,
    POLICY_PORT,
    ROLE_LABEL,
    ROLES,
    PolicyProbe,
    nft_unavailable,
    policy_objects,
    tcp_connect,
)
from podnet.app.install import InstallError, plugin_binary
from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY, NODE, POD, POD_NETWORK, Obj
from podnet.core.models import Phase
from podnet.core.objects import record_finished
from podnet.core.plugin import Providers, load_plugins, new_plugin_manager
from podnet.core.tracing import Tracing
from podnet.hookspecs.demo import DemoCloud
from podnet.linux.netns import (
    add_netns,
    del_netns,
    netns_exists,
    netns_path,
    netns_unavailable,
    run_in_netns,
)
from podnet.node import NodeAgent, UnixHTTPServer, listen
from podnet.sim.memory import InMemoryCluster

T = TypeVar("T")

#: the provider serving the stage's node, and the rule's label that routes it there
PROVIDER = "reference"
NODE_LABEL = "podnet.io/demo-node"
NODE_LABEL_VALUE = "plain"
NODE_SELECTOR = f"{NODE_LABEL}={NODE_LABEL_VALUE}"
NODE_NAME = "node-plain"
#: below every other demo node's podCIDR (10.64.0.0/24 and up)
POD_CIDR = "10.63.0.0/24"
#: the Kubernetes namespace of the stage's pods (the demo's counts look at "demo" only)
POD_NAMESPACE = "demo-node"
PODS = demo_policy.PODS
IF_NAME = "eth0"
PING_COUNT = 3
PING_TIMEOUT_S = 2.0
#: one uncounted echo each way first, waited for this long: the first packet of a path
#: waits on neighbour resolution (and the simulated VPC's learning), slow on a busy host
PRIME_TIMEOUT_S = 5.0
#: the stage on an OVN node: its provider, node, label value, podCIDR (unused by an
#: overlay) and its pods' namespace
OVN_PROVIDER = "ovn"
OVN_NODE_NAME = "node-ovn"
OVN_LABEL_VALUE = "ovn"
OVN_POD_CIDR = "10.62.0.0/24"
OVN_POD_NAMESPACE = "demo-ovn"
#: the CNI network configuration's name and type, as ``podnet install-cni`` writes them
CNI_NETWORK = "podnet"
CNI_TYPE = "podnet-cni"


def stage_unavailable() -> str | None:
    """Why the stage cannot run on this machine, or None."""
    return netns_unavailable()


def node_rule() -> dict[str, str]:
    """The ``nodeProviders`` rule that gives the stage's node to the reference provider."""
    return {"provider": PROVIDER, "nodeSelector": NODE_SELECTOR}


@attrs.define
class PluggedPod:
    """One pod's interface, as its record has it, and what its ADD took."""

    pod: str
    container_id: str
    netns: str
    interface: str
    mac: str
    address: str
    #: the plugin's run, a process start included, as the runtime sees it
    add_ms: float


@attrs.define
class NodeStageReport:
    """The outcome of the stage: ``ran`` False with ``skipped`` saying why, or what it
    did; ``error`` names the step that failed."""

    ran: bool = False
    skipped: str | None = None
    ok: bool = False
    node: str = NODE_NAME
    provider: str = PROVIDER
    #: the node's network namespace (the bridge and the host ends of the pairs are there)
    node_netns: str = ""
    pods_plugged: int = 0
    pods: list[PluggedPod] = attrs.field(factory=list)
    ping_from: str = PODS[0]
    ping_to: str = PODS[1]
    ping_sent: int = 0
    ping_replies: int = 0
    #: of the pods, how many answered a ping from the other
    pods_answering: int = 0
    #: the NetworkPolicy part, after the ping: why it did not run (None: it ran), who
    #: enforced it, each policy as ``podnet status --policies`` shows it once programmed,
    #: the milliseconds from their creation until programmed (on OVN: until the chassis
    #: applied them), the allowed and the denied pair, and whether what they programmed
    #: was removed with them
    policy_skipped: str | None = None
    policy_enforcer: str = ""
    policies: list[dict[str, Any]] = attrs.field(factory=list)
    policy_programmed_ms: float = 0.0
    probes: list[PolicyProbe] = attrs.field(factory=list)
    #: the policies the node's dataplane held once they were programmed (the agent's
    #: table, or OVN's port groups), and whether it held none of them after their deletion
    policies_held: list[str] = attrs.field(factory=list)
    policies_removed: bool = False
    #: the policy part ran and every pair was as the policies say
    policy_ok: bool = False
    #: both pods' records released and gone after their DEL and deletion
    released: bool = False
    #: every namespace the stage made is gone
    cleaned: bool = False
    duration_s: float = 0.0
    error: str | None = None


class StageError(Exception):
    """A step of the stage failed; the message names it."""


def _plugin_binary() -> str:
    """The CNI plugin's static executable, where ``podnet install-cni`` takes it from:
    ``$PODNET_CNI_PLUGIN``, else ``podnet-cni`` beside the podnet scripts."""
    try:
        path = plugin_binary()
    except InstallError as exc:
        raise StageError(f"the CNI plugin: {exc}") from None
    if not os.access(path, os.X_OK):
        raise StageError(f"the CNI plugin {path} is not executable")
    return str(path)


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def icmp_echo(target: str, count: int, timeout: float) -> int:
    """How many of ``count`` ICMP echoes to ``target`` are answered (a raw socket: root;
    each echo waits up to ``timeout`` seconds). Run it inside the sender's namespace."""
    ident = os.getpid() & 0xFFFF
    replies = 0
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as sock:
        for seq in range(count):
            payload = b"podnet-demo"
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            packet = struct.pack("!BBHHH", 8, 0, _checksum(header + payload), ident,
                                 seq) + payload
            sock.sendto(packet, (target, 0))
            deadline = time.monotonic() + timeout
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                try:
                    data, (source, _) = sock.recvfrom(1024)
                except TimeoutError:
                    break
                ihl = (data[0] & 0x0F) * 4
                kind, _, _, got_ident, got_seq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if source == target and kind == 0 and (got_ident, got_seq) == (ident, seq):
                    replies += 1
                    break
    return replies


def interface_in_netns(name: str) -> tuple[str | None, list[str]]:
    """Interface ``name``'s MAC and IPv4 addresses (``a.b.c.d/len``) in this thread's
    namespace; (None, []) when there is no such interface."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        found = ipr.link_lookup(ifname=name)
        if not found:
            return None, []
        link = ipr.get_links(found[0])[0]
        addresses = [f"{a.get_attr('IFA_ADDRESS')}/{a['prefixlen']}"
                     for a in ipr.get_addr(index=found[0], family=socket.AF_INET)]
        return str(link.get_attr("IFLA_ADDRESS")).lower(), addresses


class NodeStage:
    """One run of the stage on ``cluster``, whose engine (serving :data:`PROVIDER` for
    nodes matching :data:`NODE_SELECTOR`) is running."""

    #: who enforces NetworkPolicy on this stage's node
    policy_enforcer = "node agent (nftables)"
    #: the provider serving the node, the node's name and label, its pods' namespace
    provider = PROVIDER
    node_name = NODE_NAME
    label_value = NODE_LABEL_VALUE
    pod_cidr = POD_CIDR
    pod_namespace = POD_NAMESPACE

    def __init__(self, cluster: InMemoryCluster, *, tracing: Tracing | None = None,
                 timeout_s: float = 60.0) -> None:
        self.cluster = cluster
        self.tracing = tracing
        self.timeout_s = timeout_s
        # names unique to this run: another run (or a test) may be making its own
        suffix = uuid.uuid4().hex[:6]
        self.node_netns = f"pndemo-{suffix}-node"
        self.pod_netns = {pod: f"pndemo-{suffix}-{pod.removeprefix('pod-')}" for pod in PODS}
        self.containers = {pod: uuid.uuid4().hex for pod in PODS}
        self.made: list[str] = []
        self.tmp: str | None = None
        self.socket_path = ""
        self.agent: NodeAgent | None = None
        self.server: UnixHTTPServer | None = None
        self.serving = False
        self.uids: dict[str, str] = {}
        #: the policy part's listening sockets (in the pods' namespaces) and policies
        self.listeners: list[socket.socket] = []
        self.policies: list[str] = []

    # --- the stage -------------------------------------------------------------------

    def run(self) -> NodeStageReport:
        report = NodeStageReport(ran=True, node_netns=self.node_netns, node=self.node_name,
                                 provider=self.provider)
        started = time.monotonic()
        try:
            self._run(report)
        except Exception as exc:  # the report says which step; the demo goes on
            report.error = str(exc) if isinstance(exc, StageError) else (
                f"{type(exc).__name__}: {exc}")
        finally:  # Ctrl-C included: nothing of the stage is left on the host
            self.cleanup(report)
            report.duration_s = round(time.monotonic() - started, 3)
        report.ok = (report.error is None and report.pods_plugged == len(PODS)
                     and report.ping_sent > 0 and report.ping_replies > 0
                     and report.pods_answering == len(PODS)
                     and report.released and report.cleaned
                     and (report.policy_skipped is not None or report.policy_ok))
        return report

    def _run(self, report: NodeStageReport) -> None:
        deadline = time.monotonic() + self.timeout_s
        node_path = self._netns(self.node_netns)
        self._node()
        self._start_agent(node_path)
        for pod in PODS:
            self._netns(self.pod_netns[pod])
            made = self.cluster.create(POD, self._pod_obj(pod))
            self.uids[pod] = made["metadata"]["uid"]
        records = self._wait("the pods' PodNetworks Routed", deadline, self._routed)
        self._before_plug(records)
        for pod in PODS:
            started = time.monotonic()
            result = self._cni("ADD", pod)
            add_ms = round((time.monotonic() - started) * 1000, 1)
            st = records[pod]["status"]
            plugged = (result or {}).get("interfaces") or [{}]
            name = str(plugged[0].get("name"))
            address = f"{st.get('ip')}/{st.get('prefixLength')}"
            # what the kernel holds in the pod, not only what the plugin answered
            mac, addresses = run_in_netns(netns_path(self.pod_netns[pod]),
                                          functools.partial(interface_in_netns, name))
            want = self._pod_mac(st, plugged[0])
            if mac != want or address not in addresses:
                raise StageError(f"{pod}: {name} has {mac} {', '.join(addresses) or '-'}, "
                                 f"the record {want} {address}")
            report.pods.append(PluggedPod(
                pod=pod, container_id=self.containers[pod], netns=self.pod_netns[pod],
                interface=name, mac=str(want), address=address, add_ms=add_ms))
            report.pods_plugged += 1
        source, target = PODS
        target_ip = str(records[target]["status"]["ip"])
        source_ip = str(records[source]["status"]["ip"])
        for sender, to in ((source, target_ip), (target, source_ip)):
            run_in_netns(netns_path(self.pod_netns[sender]),
                         functools.partial(icmp_echo, to, 1, PRIME_TIMEOUT_S))
        report.ping_sent = PING_COUNT
        # the echo's socket is made inside the sender's namespace, by a thread there
        report.ping_replies = run_in_netns(
            netns_path(self.pod_netns[source]),
            lambda: icmp_echo(target_ip, PING_COUNT, PING_TIMEOUT_S))
        # and back: how many of the pods answered a ping from the other
        back = run_in_netns(netns_path(self.pod_netns[target]),
                            lambda: icmp_echo(source_ip, PING_COUNT, PING_TIMEOUT_S))
        report.pods_answering = (report.ping_replies > 0) + (back > 0)
        report.policy_skipped = self._policy_unavailable()
        if report.policy_skipped is None:
            self._policy_part(report, records, deadline)
        for pod in PODS:
            self._cni("DEL", pod)
        for pod in PODS:
            # the kubelet's part: its containers are gone (CNI DEL), it confirms at grace 0
            self.cluster.delete(POD, pod, self.pod_namespace, grace_period_seconds=0)
        self._wait("the pods' PodNetworks released", deadline,
                   lambda: None if self._records() else True)
        report.released = True

    def _policy_part(self, report: NodeStageReport, records: dict[str, Obj],
                     deadline: float) -> None:
        """Default deny in the stage's namespace, one allowed pair: each pair probed by a
        TCP connect before the policies and once they say Programmed; then the
        policies deleted, and what they programmed waited out."""
        report.policy_enforcer = self.policy_enforcer
        address = {pod: str(records[pod]["status"]["ip"]) for pod in PODS}
        for pod in PODS:
            self.listeners.append(run_in_netns(
                netns_path(self.pod_netns[pod]),
                functools.partial(socket.create_server, (address[pod], POLICY_PORT))))
        client, server = PODS
        report.probes = [PolicyProbe(client, server, POLICY_PORT, "allowed"),
                         PolicyProbe(server, client, POLICY_PORT, "denied")]

        def connect(probe: PolicyProbe, timeout: float) -> str:
            return run_in_netns(netns_path(self.pod_netns[probe.source]), functools.partial(
                tcp_connect, address[probe.target], probe.port, timeout))

        for probe in report.probes:
            probe.before = connect(probe, ALLOWED_TIMEOUT_S)
        started = time.monotonic()
        for obj in policy_objects(self.pod_namespace):
            self.policies.append(obj["metadata"]["name"])
            self.cluster.create(NETWORK_POLICY, obj)
        report.policies = self._wait("the NetworkPolicies Programmed", deadline,
                                     self._programmed)
        self._policies_applied()
        report.policy_programmed_ms = round((time.monotonic() - started) * 1000, 1)
        report.policies_held = sorted(self._policies_left())
        for probe in report.probes:
            probe.after = connect(probe, ALLOWED_TIMEOUT_S if probe.expected == "allowed"
                                  else DENIED_TIMEOUT_S)
        for name in self.policies:
            self.cluster.delete(NETWORK_POLICY, name, self.pod_namespace)
        self._wait("what the NetworkPolicies programmed removed", deadline,
                   lambda: None if self._policies_left() else True)
        report.policies_removed = True
        report.policy_ok = all(p.ok for p in report.probes)

    def _programmed(self) -> list[dict[str, Any]] | None:
        """The stage's policies as ``podnet status --policies`` shows them, once each
        says Programmed at its generation; None before."""
        from podnet.app.status import policy_row

        rows = [policy_row(self.cluster.get(NETWORK_POLICY, name, self.pod_namespace))
                for name in self.policies]
        if all(r["programmed"] is not None and r["programmed"]["status"] == "True"
               and r["observed_generation"] == r["generation"] and r["members"]
               for r in rows):
            return rows
        return None

    def _policy_unavailable(self) -> str | None:
        """Why the node cannot enforce NetworkPolicy here, or None."""
        return nft_unavailable()

    def _policies_applied(self) -> None:
        """Once the policies say Programmed, what the dataplane still needs before
        packets see them (nothing: the agent says Programmed once its table is in the
        kernel)."""

    def _policies_left(self) -> list[str]:
        """The stage's policies the node's dataplane still holds."""
        assert self.agent is not None
        return [key for key in self.agent.policy.describe()["policies"]
                if key.startswith(f"{self.pod_namespace}/")]

    # --- its parts ---------------------------------------------------------------------

    def _netns(self, name: str) -> str:
        self.made.append(name)  # before: a half-made one is removed too
        return add_netns(name)

    def _node(self) -> None:
        self.cluster.create(NAMESPACE, {"metadata": {"name": self.pod_namespace}})
        self.cluster.create(NODE, {
            "metadata": {"name": self.node_name, "labels": {"kubernetes.io/os": "linux",
                                                            NODE_LABEL: self.label_value}},
            "spec": {"podCIDR": self.pod_cidr, "providerID": f"demo://{self.node_name}"},
        })

    def _start_agent(self, node_path: str) -> None:
        """The node agent as ``podnet node --provider PROVIDER`` runs it, in this
        process; every thread doing its netlink work is started inside the node's
        namespace."""
        self.tmp = tempfile.mkdtemp(prefix="podnet-demo-")
        self.agent = agent = NodeAgent(self.cluster, self._providers(), self.node_name,
                                       tracing=self.tracing)
        self.socket_path = os.path.join(self.tmp, "agent.sock")
        self.server = server = listen(agent, self.socket_path)

        def start() -> None:
            # the start-up pass (leftovers), the report thread (it lists the plugs) and
            # the request threads (spawned by the server's) all inherit the namespace
            agent.start()
            # a short poll: the stage's end waits for the server loop to notice
            threading.Thread(target=server.serve_forever, args=(0.05,),
                             name="podnet-demo-agent", daemon=True).start()
            self.serving = True

        run_in_netns(node_path, start)

    def _records(self) -> dict[str, Obj]:
        return {pn["spec"]["podName"]: pn
                for pn in self.cluster.list(POD_NETWORK, self.pod_namespace).items
                if not record_finished(pn)}

    def _routed(self) -> dict[str, Obj] | None:
        records = self._records()
        if all(records.get(pod, {}).get("status", {}).get("phase") == Phase.ROUTED.value
               for pod in PODS):
            return records
        return None

    def _wait(self, what: str, deadline: float, check: Callable[[], T | None]) -> T:
        while True:
            got = check()
            if got is not None:
                return got
            if time.monotonic() > deadline:
                raise StageError(f"timed out waiting for {what}")
            time.sleep(0.05)

    def _cni(self, command: str, pod: str) -> dict[str, Any] | None:
        """Run ``podnet-cni`` as a container runtime does; its result (None when it
        printed nothing)."""
        plugin = _plugin_binary()
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": self.containers[pod],
            "CNI_NETNS": netns_path(self.pod_netns[pod]),
            "CNI_IFNAME": IF_NAME,
            "CNI_PATH": os.path.dirname(plugin),
            "CNI_ARGS": f"IgnoreUnknown=1;K8S_POD_NAMESPACE={self.pod_namespace};"
                        f"K8S_POD_NAME={pod};K8S_POD_UID={self.uids[pod]}",
        }
        config = {"cniVersion": "1.1.0", "name": CNI_NETWORK, "type": CNI_TYPE,
                  "agentSocket": self.socket_path}
        done = subprocess.run([plugin], input=json.dumps(config), env=env,
                              capture_output=True, text=True, timeout=90, check=False)
        out: Any = None
        with contextlib.suppress(ValueError):
            out = json.loads(done.stdout) if done.stdout.strip() else None
        if done.returncode != 0:
            msg = out.get("msg") if isinstance(out, dict) else (done.stdout or done.stderr).strip()
            raise StageError(f"podnet-cni {command} {pod}: exit {done.returncode}: {msg}")
        return out if isinstance(out, dict) else None

    def cleanup(self, report: NodeStageReport) -> None:
        """Remove everything the stage made, whatever it got to: the pods, the agent and
        its socket, the namespaces (the node's holds the bridge and the host ends). A
        Ctrl-C meanwhile is held until the end; a step that fails does not keep the
        others from running."""
        steps: list[Callable[[], object]] = [
            *(functools.partial(sock.close) for sock in self.listeners),
            *(functools.partial(self.cluster.delete, NETWORK_POLICY, name,
                                self.pod_namespace) for name in self.policies),
            *(functools.partial(self.cluster.delete, POD, pod, self.pod_namespace,
                                grace_period_seconds=0)
              for pod in self.uids),
            self._stop_agent,
            self._stop_dataplane,
            *(functools.partial(del_netns, name) for name in reversed(self.made)),
        ]
        if self.tmp is not None:
            steps.append(functools.partial(shutil.rmtree, self.tmp, ignore_errors=True))
        with _interrupt_deferred():
            for step in steps:
                with contextlib.suppress(Exception):  # e.g. a pod the stage deleted
                    step()
        report.cleaned = not any(netns_exists(name) for name in self.made)

    def _pod_obj(self, name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": self.pod_namespace,
                         "labels": {"app": "demo-node", ROLE_LABEL: ROLES[name]}},
            "spec": {"nodeName": self.node_name,
                     "containers": [{"name": "app", "image": "demo"}]},
            "status": {"phase": "Running"},
        }

    def _providers(self) -> Providers:
        """The agent's providers: the built-in reference plugin, as ``podnet node
        --provider reference`` loads it."""
        pm = new_plugin_manager()
        load_plugins(pm, builtins=[PROVIDER], entry_points=False)
        return Providers(pm)

    def _pod_mac(self, status: dict[str, Any], interface: dict[str, Any]) -> str | None:
        """The MAC the pod's interface must have: its record's."""
        return status.get("mac")

    def _before_plug(self, records: dict[str, Obj]) -> None:
        """What the node needs once the pods' records are Routed, before their ADDs
        (nothing, for the reference provider's bridge)."""

    def _stop_dataplane(self) -> None:
        """What the node's dataplane runs beside the agent (nothing, for the reference
        provider's bridge), stopped before the namespaces go."""

    def _stop_agent(self) -> None:
        if self.server is not None:
            if self.serving:
                self.server.shutdown()
            self.server.server_close()
        if self.agent is not None:
            self.agent.stop()


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """SIGINT (Ctrl-C) held while the block runs, then raised as KeyboardInterrupt: a
    cleanup interrupted halfway would leave namespaces behind. Only the main thread
    can set a handler; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if received:
        raise KeyboardInterrupt




class OvnNodeStage(NodeStage):
    """The same stage on a node the OVN provider serves: the node's namespace holds a
    throwaway chassis (:class:`~podnet.plugins.ovn.chassis.OvnBed`: OVS with the
    userspace datapath, ``br-int`` and ``ovn-controller``, with SB and ``ovn-northd`` on
    the demo's own Northbound server), and the agent plugs the pods into ``br-int`` with
    the demo's OVN plugin, whose ports ``ovn-controller`` binds."""

    provider = OVN_PROVIDER
    policy_enforcer = "ovn provider (OVN ACLs, through the controller)"
    node_name = OVN_NODE_NAME
    label_value = OVN_LABEL_VALUE
    pod_cidr = OVN_POD_CIDR
    pod_namespace = OVN_POD_NAMESPACE

    def __init__(self, cluster: InMemoryCluster, plugin: Any, *,
                 tracing: Tracing | None = None, timeout_s: float = 60.0) -> None:
        super().__init__(cluster, tracing=tracing, timeout_s=timeout_s)
        #: the demo's OVN plugin (its ``remote`` is the demo's NB server)
        self.plugin = plugin
        self.chassis: Any = None

    def _providers(self) -> Providers:
        from podnet.plugins.ovn.chassis import OvnBed

        assert self.tmp is not None
        folder = os.path.join(self.tmp, "ovn")
        os.mkdir(folder)
        self.chassis = OvnBed(folder, netns=self.node_netns, nb_remote=self.plugin.remote,
                              chassis=self.node_name).start()
        # the agent's side of the same plugin: the chassis' local OVS database
        self.plugin.podnet_configure(provider=OVN_PROVIDER,
                                     config={"ovs_db": self.chassis.ovs_remote})
        pm = new_plugin_manager()
        pm.register(self.plugin, name=OVN_PROVIDER)
        return Providers(pm)

    def _policy_unavailable(self) -> str | None:
        return None  # the provider's ACLs, through core's reconciler

    def _policies_applied(self) -> None:
        # Programmed: the provider's rows are in NB; the chassis' flows follow
        self.chassis.nbctl(f"--timeout={self.timeout_s:g}", "--wait=hv", "sync")

    def _policies_left(self) -> list[str]:
        keys = self.plugin.podnet_network_policy_keys(provider=OVN_PROVIDER) or ()
        return [key for key in keys if key.startswith(f"{self.pod_namespace}/")]

    def _stop_dataplane(self) -> None:
        from podnet.plugins.ovn.provider import DEFAULT_OVS_DB

        # a new ovs_db closes the plugin's connection to the chassis' database
        self.plugin.podnet_configure(provider=OVN_PROVIDER, config={"ovs_db": DEFAULT_OVS_DB})
        if self.chassis is not None:
            self.chassis.close()  # the bridges first: the datapath's taps go with them


def ovn_stage_unavailable() -> str | None:
    """Why the stage cannot run on an OVN node here (no OVS/OVN binaries, no
    namespaces), or None."""
    from podnet.plugins.ovn.chassis import bed_unavailable

    return bed_unavailable()


def ovn_node_rule() -> dict[str, str]:
    """The ``nodeProviders`` rule that gives the OVN stage's node to the OVN provider."""
    return {"provider": OVN_PROVIDER, "nodeSelector": f"{NODE_LABEL}={OVN_LABEL_VALUE}"}


def run_ovn_node_stage(cluster: InMemoryCluster, plugin: Any, *,
                       tracing: Tracing | None = None,
                       timeout_s: float = 60.0) -> NodeStageReport:
    """The stage on an OVN node (see :class:`OvnNodeStage`), its outcome."""
    return OvnNodeStage(cluster, plugin, tracing=tracing, timeout_s=timeout_s).run()


def run_node_stage(cluster: InMemoryCluster, *, tracing: Tracing | None = None,
                   timeout_s: float = 60.0) -> NodeStageReport:
    """The stage on ``cluster`` (see the module), its outcome."""
    return NodeStage(cluster, tracing=tracing, timeout_s=timeout_s).run()


class EniNodeStage(NodeStage):
    """The same stage on a node of a cloud ENI provider (ECS, BBC): the node's instance
    is one more of the demo's stand-in cloud, whose attached ENIs appear in the node's
    namespace as devices with their MACs, wired to a simulated VPC
    (:class:`podnet.sim.vpc.Vpc`, one more namespace) that routes each address only to
    the ENI the simulator says holds it; the agent plugs the pods with the provider's
    ENI dataplane (a routed veth, a rule to the ENI's table), and the pods' echoes go
    out through their ENI and back through the VPC."""

    pod_cidr = ""

    def __init__(self, cluster: InMemoryCluster, provider: str, cloud: DemoCloud, *,
                 tracing: Tracing | None = None, timeout_s: float = 60.0) -> None:
        super().__init__(cluster, tracing=tracing, timeout_s=timeout_s)
        self.provider = provider
        self.node_name = f"node-{provider}-eni"
        self.pod_namespace = f"demo-{provider}"
        self.cloud = cloud
        self.vpc_netns = f"{self.node_netns.removesuffix('-node')}-vpc"
        self.vpc: Any = None

    def _pod_mac(self, status: dict[str, Any], interface: dict[str, Any]) -> str | None:
        # an ENI address has no MAC of its own: the plugin's answer names the pod's
        # (BBC's record holds the ENI's)
        mac = interface.get("mac")
        return str(mac).lower() if mac else None

    def _node(self) -> None:
        self.cluster.create(NAMESPACE, {"metadata": {"name": self.pod_namespace}})
        # the cloud's own node: its instance registered, its labels and providerID
        self.cluster.create(NODE, self.cloud.setup_node({
            "metadata": {"name": self.node_name, "labels": {"kubernetes.io/os": "linux"}},
            "spec": {}}))

    def _providers(self) -> Providers:
        pm = new_plugin_manager()
        pm.register(self.cloud.plugin, name=self.provider)
        return Providers(pm)

    def _before_plug(self, records: dict[str, Obj]) -> None:
        from podnet.core.convert import from_wire
        from podnet.hookspecs.models import PodNetwork
        from podnet.sim.vpc import Vpc, attached_enis

        attached = self.cloud.attached
        assert attached is not None
        instance = next((e["instance"] for e in attached()
                         if e["id"] == records[PODS[0]]["status"].get("interface")), None)
        if instance is None:
            raise StageError(f"the cloud has no attached ENI {records[PODS[0]]['status']}")
        self.made.append(self.vpc_netns)
        self.vpc = Vpc(self.vpc_netns, lambda: attached_enis(attached()))
        self.vpc.add_node(_VpcNode(self.node_name, self.node_netns), instance)
        self.vpc.sync()
        # the agent's threads are in the node's namespace, the stand-in cloud's API on
        # this host's loopback: each ENI's MAC (asked of the cloud once) is asked here
        dataplane = getattr(self.cloud.plugin, "dataplane", None)
        if dataplane is not None and hasattr(dataplane, "eni_mac"):
            for record in records.values():
                dataplane.eni_mac(from_wire(PodNetwork, record))

    def _stop_dataplane(self) -> None:
        if self.vpc is not None:
            self.vpc.cleanup()


@attrs.frozen
class _VpcNode:
    name: str
    netns: str


def eni_stage_unavailable(cloud: DemoCloud | None) -> str | None:
    """Why the stage cannot run on an ENI node of ``cloud`` here, or None."""
    if cloud is None:
        return "the provider is not in this run"
    if cloud.attached is None:
        return "its stand-in cloud reports no attached ENIs"
    return stage_unavailable()


def run_eni_node_stage(cluster: InMemoryCluster, provider: str, cloud: DemoCloud, *,
                       tracing: Tracing | None = None,
                       timeout_s: float = 60.0) -> NodeStageReport:
    """The stage on an ENI node of ``provider`` (see :class:`EniNodeStage`)."""
    return EniNodeStage(cluster, provider, cloud, tracing=tracing, timeout_s=timeout_s).run()
