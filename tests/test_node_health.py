"""Watching the node agent (``podnet node --health-listen``): a real agent (``run``, the
``podnet node`` command's body, in a network namespace of its own) against the API
emulator, its endpoints asked over HTTP.

- ``/readyz`` is 503 naming what is missing (the API server not answered yet, the records
  not listed) and 200 once the agent may plug;
- ``/healthz`` goes 500 naming the loop when one is stuck for real (the reporter's API
  call held by the server) or a CNI request runs past its bound (a dataplane that does
  not answer), and 200 again once it moves;
- ``/metrics`` parses with Prometheus' own parser, passes ``promtool check metrics`` and
  counts each CNI request where the agent answers it, by command and result;
- the ``podnet node`` process itself: its listener answers while it waits for an API
  server that does not answer, and a listener address it cannot bind ends it in one line.

Needs root and network namespaces (the agent's nftables table is its namespace's).
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s_client
from prometheus_client.parser import text_string_to_metric_families

from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import LEASE, NAMESPACE, NODE, POD_NETWORK, Kind, Obj
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import Plug, ProviderInfo
from podnet.linux.netns import add_netns, del_netns, run_in_netns
from podnet.node import DEFAULT_NAMESPACE
from podnet.node.health import HealthServer, Watch, serve
from podnet.node.metrics import AgentMetrics
from podnet.node.server import run
from podnet.sim.apiserver import ApiServer
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import NODE as BED_NODE
from podnet.testing.nodebed import AgentClient, Host, NodeNamespace, Stack, pod
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable()
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

NODE_NAME = "node-h"
#: the loops' bound in these tests (the default is 120 s): a loop that does not turn for
#: this long past its own period is stuck
STUCK_AFTER = 3.0


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.1)


def ask(where: str, path: str) -> tuple[int, str]:
    """GET ``path`` of a listener at ``HOST:PORT`` or ``unix:PATH``: (status, body)."""
    conn: http.client.HTTPConnection
    if where.startswith("unix:"):
        conn = _Unix(where[len("unix:"):])
    else:
        host, _, port = where.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read().decode()
    finally:
        conn.close()


class _Unix(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.unix_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


class Gate:
    """Calls that pass until :meth:`close`, and wait (held, as by a server that does not
    answer) from then until :meth:`open`."""

    def __init__(self) -> None:
        self._open = threading.Event()
        self._open.set()
        #: set once a call is held
        self.holding = threading.Event()

    def close(self) -> None:
        self.holding.clear()
        self._open.clear()

    def open(self) -> None:
        self._open.set()

    def pass_through(self) -> None:
        if not self._open.is_set():
            self.holding.set()
            self._open.wait()


class GatedCluster:
    """The emulator's cluster, with the calls of one kind (and verb) held at a gate."""

    def __init__(self, cluster: KubeCluster) -> None:
        self._cluster = cluster
        self.gates: dict[tuple[str, Kind], Gate] = {}

    def gate(self, verb: str, kind: Kind) -> Gate:
        return self.gates.setdefault((verb, kind), Gate())

    def _held(self, verb: str, kind: Kind) -> None:
        gate = self.gates.get((verb, kind))
        if gate is not None:
            gate.pass_through()

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        self._held("get", kind)
        return self._cluster.get(kind, name, namespace)

    def list(self, kind: Kind, *args: Any, **kwargs: Any) -> Any:
        self._held("list", kind)
        return self._cluster.list(kind, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cluster, name)


class HeldDataplane:
    """A provider whose dataplane lists its plugs (nothing) through a gate."""

    name = "held"

    def __init__(self) -> None:
        self.gate = Gate()

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, version="test")

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> Sequence[Plug] | None:
        if provider != self.name:
            return None
        self.gate.pass_through()
        return []


class RunningAgent:
    """``run`` in a thread inside the network namespace ``path``, with its health
    listener on this namespace's loopback (an ephemeral port)."""

    def __init__(self, tmp: Path, path: str, cluster: GatedCluster,
                 dataplane: HeldDataplane) -> None:
        self.path = path
        self.socket = str(tmp / "run" / "agent.sock")
        self.metrics = AgentMetrics()
        self.watch = Watch(self.metrics)
        self.stop = threading.Event()
        self.exited: list[int] = []
        self._thread: threading.Thread | None = None
        pm = new_plugin_manager()
        pm.register(dataplane, name=dataplane.name)
        self.providers = Providers(pm)
        self.cluster = cluster
        health = serve("127.0.0.1:0", self.watch)
        assert health is not None
        self.health: HealthServer = health
        self.where = health.where

    def start(self) -> None:
        def body() -> None:
            self.exited.append(run(self.cluster, self.providers,  # type: ignore[arg-type]
                                   node=NODE_NAME, socket_path=self.socket, add_timeout=5,
                                   stop=self.stop, watch=self.watch, stuck_after=STUCK_AFTER))

        def start_thread() -> None:
            # started from inside the namespace: the thread, and every thread and process
            # the agent starts, are in it
            self._thread = threading.Thread(target=body, name="agent", daemon=True)
            self._thread.start()

        run_in_netns(self.path, start_thread)

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.health.close()


@pytest.fixture
def netns() -> Iterator[str]:
    """A network namespace of the test's own: the agent's nftables table is its."""
    name = f"pnh-{uuid.uuid4().hex[:8]}"
    path = add_netns(name)
    try:
        yield path
    finally:
        del_netns(name)


@pytest.fixture
def emulator(netns: str) -> Iterator[ApiServer]:
    """The API emulator, listening in the agent's namespace, with the agent's Node."""
    server = run_in_netns(netns, lambda: ApiServer(bookmark_interval=0.2).start())
    try:
        def setup() -> None:
            kube = KubeCluster(k8s_client.ApiClient(k8s_client.Configuration(
                host=server.url)))
            assert kube.get(NAMESPACE, DEFAULT_NAMESPACE)  # the emulator serves podnet's
            kube.create(NODE, {"metadata": {"name": NODE_NAME}})

        run_in_netns(netns, setup)
        yield server
    finally:
        server.stop()


@pytest.fixture
def dataplane() -> HeldDataplane:
    return HeldDataplane()


@pytest.fixture
def gated(emulator: ApiServer) -> GatedCluster:
    return GatedCluster(KubeCluster(k8s_client.ApiClient(
        k8s_client.Configuration(host=emulator.url))))


@pytest.fixture
def agent(tmp_path: Path, netns: str, gated: GatedCluster, dataplane: HeldDataplane
          ) -> Iterator[RunningAgent]:
    running = RunningAgent(tmp_path, netns, gated, dataplane)
    try:
        yield running
    finally:
        running.close()


def started(agent: RunningAgent) -> RunningAgent:
    agent.watch.waiting_for_api(None)  # as podnet node does once the API server answered
    agent.start()
    wait_for("the agent ready", lambda: ask(agent.where, "/readyz")[0] == 200)
    return agent


# --- readiness ----------------------------------------------------------------------------


def test_readiness_names_what_is_missing_until_the_records_are_listed(
        agent: RunningAgent, gated: GatedCluster) -> None:
    # before the API server answered (podnet node waits for it first)
    code, body = ask(agent.where, "/readyz")
    assert (code, body) == (503, "the API server was not asked yet\n")
    assert ask(agent.where, "/healthz") == (200, "ok\n"), "waiting is not stuck"
    # the records' first list held by the server: the agent is up, not synced
    listing = gated.gate("list", POD_NETWORK)
    listing.close()
    agent.watch.waiting_for_api(None)
    agent.start()
    wait_for("the first list held", listing.holding.is_set)
    code, body = ask(agent.where, "/readyz")
    assert code == 503
    assert "its PodNetworks are not listed yet" in body
    assert "its first report is not written yet" in body
    assert ask(agent.where, "/healthz")[0] == 200
    listing.open()
    wait_for("ready once listed", lambda: ask(agent.where, "/readyz") == (200, "ok\n"))
    assert AgentClient(agent.socket).status()[0] == 200


# --- liveness -----------------------------------------------------------------------------


def test_liveness_names_the_reporter_held_in_its_api_call(
        agent: RunningAgent, gated: GatedCluster) -> None:
    started(agent)
    assert ask(agent.where, "/healthz") == (200, "ok\n")
    reads = gated.gate("get", LEASE)
    reads.close()  # the reporter's next read of its Lease waits for ever
    try:
        wait_for("the reporter held", reads.holding.is_set)
        wait_for("liveness failing", lambda: ask(agent.where, "/healthz")[0] == 500)
        code, body = ask(agent.where, "/healthz")
        assert code == 500 and "loop reporter has not turned for" in body, body
        # the other loops turn: only the held one is named
        assert body.count("loop ") == 1, body
    finally:
        reads.open()
    wait_for("alive again", lambda: ask(agent.where, "/healthz") == (200, "ok\n"))


def test_liveness_names_a_cni_request_past_its_bound(
        agent: RunningAgent, dataplane: HeldDataplane) -> None:
    started(agent)
    dataplane.gate.close()  # the dataplane's listing of its plugs does not come back
    answers: list[tuple[int, dict[str, Any]]] = []
    client = AgentClient(agent.socket)
    gc = threading.Thread(target=lambda: answers.append(client.gc(["c1"])), daemon=True)
    gc.start()
    try:
        wait_for("the GC held", dataplane.gate.holding.is_set)
        wait_for("liveness failing",
                 lambda: "podnet-cni GC has run for" in ask(agent.where, "/healthz")[1])
        code, body = ask(agent.where, "/healthz")
        assert code == 500, body
        # in flight meanwhile
        assert samples(ask(agent.where, "/metrics")[1])[
            "podnet_agent_cni_requests_in_flight",
            (("command", "GC"), ("plugin", "podnet-cni"))] == 1
    finally:
        dataplane.gate.open()
        gc.join(timeout=60)
    assert answers and answers[0][0] == 200, answers
    wait_for("alive again", lambda: ask(agent.where, "/healthz") == (200, "ok\n"))


# --- metrics ------------------------------------------------------------------------------


def test_metrics_count_each_cni_request_by_command_and_result(agent: RunningAgent) -> None:
    started(agent)
    client = AgentClient(agent.socket)
    assert client.status()[0] == 200
    assert client.gc([])[0] == 200
    # refused by the agent: no pod named (error 7, the caller's to fix)
    code, refused = client.request("POST", "/v1/cni/add", {"containerId": "c1"})
    assert code == 400, refused
    refused_code = str(refused["code"])
    code, ipam = client.request("POST", "/v1/ipam/del", {"containerId": "c1"})
    text = ask(agent.where, "/metrics")[1]
    got = samples(text)

    def count(plugin: str, command: str, result: str) -> float:
        return got.get(("podnet_agent_cni_requests_total", (
            ("command", command), ("plugin", plugin), ("result", result))), 0.0)

    assert count("podnet-cni", "STATUS", "ok") >= 1
    assert count("podnet-cni", "GC", "ok") == 1
    assert count("podnet-cni", "ADD", refused_code) == 1
    assert count("podnet-ipam", "DEL", "ok" if code == 200 else str(ipam["code"])) == 1
    assert got["podnet_agent_cni_request_duration_seconds_count", (
        ("command", "GC"), ("plugin", "podnet-cni"), ("result", "ok"))] == 1
    assert got["podnet_agent_ready", ()] == 1
    assert got["podnet_agent_report_conflict", ()] == 0
    assert got["podnet_agent_report_writes_total", (("verb", "create"),)] == 1
    assert got["podnet_agent_report_last_write_age_seconds", ()] >= 0
    assert got["podnet_agent_netpol_enforced", ()] == 1
    assert got["podnet_agent_netpol_programs_total", (("outcome", "unchanged"),)] + got.get(
        ("podnet_agent_netpol_programs_total", (("outcome", "removed"),)), 0) >= 1
    (info,) = [labels for name, labels in got if name == "podnet_agent_build_info"]
    assert dict(info)["version"] and dict(info)["python"] == sys.version.split()[0]
    loops = {dict(labels)["loop"] for name, labels in got
             if name == "podnet_agent_loop_last_turn_age_seconds"}
    assert {"watch", "reporter", "server", "dropped-attachments", "netpol",
            "watch-networkpolicies", "watch-pods-netpol"} <= loops


def test_docs_list_every_metric_of_the_agent(agent: RunningAgent) -> None:
    started(agent)
    AgentClient(agent.socket).status()
    doc = (Path(__file__).parent.parent / "docs" / "node.md").read_text()
    section = doc.split("### Watching the agent", 1)[1].split("\n#", 1)[0]
    listed = set(re.findall(r"`(podnet_agent_[a-z_]+)`", section))
    exposed = {f.name + ("_total" if f.type == "counter" else "")
               for f in text_string_to_metric_families(ask(agent.where, "/metrics")[1])
               if f.name.startswith("podnet_agent_")}
    assert exposed == listed


def test_the_exposition_passes_promtool(agent: RunningAgent) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is not installed (Debian prometheus; make test installs it)")
    started(agent)
    AgentClient(agent.socket).status()
    text = ask(agent.where, "/metrics")[1]
    checked = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                             capture_output=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- the podnet node process ----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, server: str) -> Path:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {}}]}))
    return path


def test_podnet_node_answers_its_probes_while_it_waits_for_the_api_server(
        tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{_free_port()}")
    health = tmp_path / "health.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "podnet.app.cli", "node", "--node", "n1", "--kubeconfig",
         str(config), "--provider", "reference", "--socket", str(tmp_path / "s" / "agent.sock"),
         "--health-listen", f"unix:{health}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        where = f"unix:{health}"
        wait_for("the API server said not to answer",
                 lambda: health.exists() and "does not answer" in ask(where, "/readyz")[1])
        code, body = ask(where, "/readyz")
        assert code == 503 and body.startswith("API server http://127.0.0.1:"), body
        assert ask(where, "/healthz") == (200, "ok\n")
        names = {f.name for f in text_string_to_metric_families(ask(where, "/metrics")[1])}
        assert "podnet_agent_build_info" in names
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        assert not health.exists(), "the listener's socket left behind"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_a_health_listen_address_not_of_this_host_ends_it_in_one_line(
        tmp_path: Path) -> None:
    config = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{_free_port()}")
    done = subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "node", "--node", "n1", "--kubeconfig",
         str(config), "--provider", "reference", "--socket", str(tmp_path / "agent.sock"),
         "--health-listen", "192.0.2.1:9254"],  # TEST-NET-1: nobody's address
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "podnet node: --health-listen 192.0.2.1:9254: Cannot assign requested address")


def test_a_busy_health_port_is_bound_once_free(tmp_path: Path) -> None:
    """An update's old agent, rolled with surge, holds the port until it stops: the new
    one waits for it rather than exiting (its restarts would hold the rollout up)."""
    config = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{_free_port()}")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "podnet.app.cli", "node", "--node", "n1", "--kubeconfig",
         str(config), "--provider", "reference", "--socket", str(tmp_path / "s" / "agent.sock"),
         "--health-listen", f"127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    try:
        said = proc.stderr.readline()
        assert "the address is in use" in said, said
        busy.close()
        where = f"127.0.0.1:{port}"

        def answers() -> bool:
            try:
                return "does not answer" in ask(where, "/readyz")[1]
            except OSError:
                return False

        wait_for("the agent's listener on the freed port", answers)
        assert proc.poll() is None
    finally:
        busy.close()
        proc.terminate()
        proc.wait(timeout=30)
        proc.stderr.close()
    assert proc.returncode == 0


@pytest.mark.parametrize("value", ["9254", "127.0.0.1:http", "unix:"])
def test_a_malformed_health_listen_is_named(tmp_path: Path, value: str) -> None:
    config = _kubeconfig(tmp_path / "kc", f"http://127.0.0.1:{_free_port()}")
    done = subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "node", "--node", "n1", "--kubeconfig",
         str(config), "--provider", "reference", "--socket", str(tmp_path / "agent.sock"),
         "--health-listen", value], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("podnet node: error: argument --health-listen: "), line


# --- a podnet node process of the node bed, with the controller --------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_a_bed_agents_metrics_count_its_add_and_del_and_its_plugged_pod(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    stack.agent(BED_NODE, netns=node.netns, add_timeout=30)
    where = f"unix:{stack.health_socket('agent')}"
    wait_for("the agent's listener", lambda: Path(stack.health_socket("agent")).exists())
    wait_for("the agent ready", lambda: ask(where, "/readyz") == (200, "ok\n"))
    client = AgentClient(stack.socket)
    stack.create([pod("a")])
    _, netns_a = host.netns()
    container = host.container()
    code, result = client.add(container, netns_a, "a")
    assert code == 200, result

    def plugged() -> float:
        return samples(ask(where, "/metrics")[1])["podnet_agent_plugged_pod_networks", ()]

    wait_for("the report saying the pod plugged", lambda: plugged() == 1)
    got = samples(ask(where, "/metrics")[1])
    add = (("command", "ADD"), ("plugin", "podnet-cni"), ("result", "ok"))
    assert got["podnet_agent_cni_requests_total", add] == 1
    assert got["podnet_agent_cni_request_duration_seconds_count", add] == 1
    assert client.delete(container, netns_a, "a")[0] == 200
    wait_for("the report saying it unplugged", lambda: plugged() == 0)
    got = samples(ask(where, "/metrics")[1])
    assert got["podnet_agent_cni_requests_total", (
        ("command", "DEL"), ("plugin", "podnet-cni"), ("result", "ok"))] == 1
    assert ask(where, "/healthz") == (200, "ok\n")
