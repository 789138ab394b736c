"""The OVN provider's dataplane, proven by packets: the cluster as processes (``podnet
apiserver``, ``podnet run --provider ovn`` writing a real NB, ``podnet node --provider ovn``
plugging pods into a real ``br-int`` that a real ``ovn-controller`` binds), pods as network
namespaces.

Two pods on one logical switch ping each other and hold a TCP connection; each pod's
eth0 (and its host end) has the MTU its record carries, and a packet of that size passes
br-int; a pod on
another switch of the same router is reached through it; a spoofed source address is
dropped by port security while the real one passes; DEL removes the OVS port and the
pod's reachability; deleting the pods leaves no port in OVS and no pod port in NB; an
agent started after its pod left removes the pod's port; with ovn-controller down ADD is
error 11 after bind_timeout, and the retried ADD converges once it is back. The dataplane
alone, on the
session's chassis: a second plug converges on the first, a port OVN does not know times
out as a transient error, half-made plugs are listed and converged."""

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

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]

ANN = "podnet.io/"
BLUE, GREEN = "10.31.0.0/24", "10.32.0.0/24"


def ovn_config(bed: OvnBed, bind_timeout: float = 20) -> dict[str, Any]:
    """The controller's (and the agent's) configuration: two subnets on one router."""
    return {
        "defaultProvider": "ovn",
        "providers": {"ovn": {
            "remote": bed.nb_remote, "ovs_db": bed.ovs_remote, "bind_timeout": bind_timeout,
            "subnets": [
                {"name": "blue", "cidr": BLUE, "router": "lr1", "default": True},
                {"name": "green", "cidr": GREEN, "router": "lr1", "mtu": 1300},
            ],
            "routers": [{"name": "lr1"}],
        }},
        "listen": "127.0.0.1:0",
    }


class Bed:
    """The underlay's node namespace holds br-int (ovs-vswitchd, ovn-controller) and the
    agent; the apiserver and the controller run in its router namespace."""

    def __init__(self, tmp: Path, bind_timeout: float = 20) -> None:
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
            self.stack = Stack(tmp, provider="ovn",
                               controller_config=ovn_config(self.ovn, bind_timeout),
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
def bed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Bed]:
    (tmp_path / "ovn").mkdir()
    bind_timeout = getattr(request, "param", 20)
    made = Bed(tmp_path, bind_timeout)  # cleans up after itself when it fails half way
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


def _mtu(netns: str, link: str) -> int:
    """The MTU of ``link`` in namespace ``netns`` (a name or a path)."""
    from pyroute2 import NetNS

    with NetNS(netns) as ns:
        found = ns.link_lookup(ifname=link)
        assert found, f"{link} is not in {netns}"
        return int(ns.get_links(found[0])[0].get_attr("IFLA_MTU"))


def _host_end(bed: Bed, cid: str) -> str:
    """The OVS port (the veth's host end) of container ``cid``."""
    assert bed.ovn is not None
    return next(p for p in _ovs_ports(bed) if p.startswith("pno")
                and bed.ovn.vsctl("get", "Interface", p, "external_ids:podnet-container"
                                  ).strip().strip('"') == cid)


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
    # the MTU the record carries (the provider's 1400, green's own 1300) on the pod's
    # eth0 and the host end; a full-sized packet passes br-int, one byte more is not sent
    assert records["a"]["status"]["mtu"] == 1400 and records["c"]["status"]["mtu"] == 1300
    assert _mtu(a["netns"], "eth0") == 1400 and _mtu(c["netns"], "eth0") == 1300
    assert _mtu(bed.node.netns, _host_end(bed, a["cid"])) == 1400
    assert _mtu(bed.node.netns, _host_end(bed, c["cid"])) == 1300
    assert ping(a["netns"], b["ip"], size=1400), "a 1400-byte packet did not pass"
    assert not ping(a["netns"], b["ip"], count=1, size=1401)
    assert ping(c["netns"], a["ip"], size=1300), "a 1300-byte packet did not pass the router"
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
    host_end = _host_end(bed, a["cid"])
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


def test_an_agent_started_after_its_pod_left_removes_the_port(bed: Bed) -> None:
    """The start-up pass: the agent lists the OVS ports it marked (``podnet_plugs``) and
    removes those whose record is gone or Releasing (the pod was deleted while it was
    down, and no DEL came)."""
    stack, client = bed.stack, bed.client
    assert stack is not None
    stack.create([pod("d"), pod("e")])
    plugged = {}
    for name in ("d", "e"):
        _, path = bed.host.netns()
        cid = bed.host.container()
        status, result = client.add(cid, path, name)
        assert status == 200, result
        plugged[name] = cid
    assert len(_ovs_ports(bed)) == 2
    stack.stop("agent")
    stack.kubectl("delete", "pod", "d", "--wait=false")

    def d_released() -> bool:
        record = stack.records().get("d")
        return record is None or record["status"].get("phase") == "Releasing"

    wait_for("d's record to be Releasing", d_released, 30)
    stack.agent(NODE, netns=bed.node.netns,
                args=["--config", str(stack.tmp / "controller.yaml")])
    wait_for("the agent to be ready", client.ready, 30)

    e = stack.records()["e"]["metadata"]
    e_key = f"{e['namespace']}/{e['name']}"

    def only_e() -> bool:
        assert bed.ovn is not None
        owners = [bed.ovn.vsctl("get", "Interface", p, "external_ids:podnet-owner"
                                ).strip().strip('"') for p in _ovs_ports(bed)]
        return owners == [e_key]

    wait_for("d's OVS port to be removed at start", only_e, 30)
    # and with the interface gone, the controller releases d's address: its port leaves NB
    wait_for("d's port to leave NB", lambda: _pod_ports(bed) == [e_key], 30)


@pytest.mark.parametrize("bed", [2], indirect=True)
def test_a_port_ovn_controller_does_not_bind_is_error_11_until_it_does(bed: Bed) -> None:
    """ovn-controller down: ADD waits bind_timeout, then answers 11 (try again); once it
    is back, the runtime's retried ADD converges on what the first made."""
    stack, client, ovn = bed.stack, bed.client, bed.ovn
    assert stack is not None and ovn is not None
    stack.create([pod("f"), pod("g")])
    _, g_path = bed.host.netns()
    assert client.add(bed.host.container(), g_path, "g")[0] == 200
    ovn.stop_controller()
    f_netns, f_path = bed.host.netns()
    cid = bed.host.container()
    started = time.monotonic()
    status, body = client.add(cid, f_path, "f")
    waited = time.monotonic() - started
    assert status != 200 and body["code"] == 11, body
    assert "not bound by ovn-controller within 2 s" in body["msg"], body
    assert 2 <= waited < 15, waited
    ovn.start_controller()
    status, result = client.add(cid, f_path, "f")
    assert status == 200, result
    assert len(_ovs_ports(bed)) == 2  # the retry found the first one's port
    assert client.check(cid, f_path, "f")[0] == 200
    g_ip = stack.records()["g"]["status"]["ip"]
    assert ping(f_netns, g_ip), "f cannot reach g after ovn-controller came back"


# --- the dataplane alone, on the session's chassis: convergence, timeouts, leftovers -------

_DRIVER = """
import json, sys
from podnet.core.models import ObjectMeta, Phase, PodNetwork, PodNetworkSpec, PodNetworkStatus
from podnet.core.models import Route
from podnet.core.errors import ProviderError
from podnet.hookspecs.types import PlugContext, UnplugContext
from podnet.plugins.ovn.dataplane import OvsDataplane
from podnet.linux.veth import set_tx_checksum, tx_checksum_on

def record(port, ip, mac):
    return PodNetwork(
        metadata=ObjectMeta(name=port.split("/")[1], namespace="default"),
        spec=PodNetworkSpec(pod_name="web", pod_uid="u1", node_name="n1", provider="ovn"),
        status=PodNetworkStatus(phase=Phase.ROUTED, ip=ip, mac=mac, gateway="10.41.0.1",
                                prefix_length=24, interface=port, mtu=1400,
                                routes=(Route(dst="0.0.0.0/0", gw="10.41.0.1"),)))

def context(pn, cid, netns):
    return PlugContext(pod_network=pn, container_id=cid, if_name="eth0", netns=netns)

def unplug_context(cid, netns):
    return UnplugContext(provider="ovn", network="default", container_id=cid,
                         if_name="eth0", netns=netns)

dp = OvsDataplane(OVS_DB, bind_timeout=BIND_TIMEOUT)
out = {}
"""


def drive(bed: OvnBed, code: str, bind_timeout: float = 10.0) -> dict[str, Any]:
    """Run ``code`` with an :class:`OvsDataplane` ``dp`` in the chassis' namespace (where
    the agent would run); it fills ``out``, which comes back."""
    import textwrap

    script = (f"OVS_DB = {bed.ovs_remote!r}\nBIND_TIMEOUT = {bind_timeout!r}\n"
              + textwrap.dedent(_DRIVER) + textwrap.dedent(code)
              + "\ndp.close()\nprint(json.dumps(out))\n")
    done = in_netns(bed.netns, script, timeout=60)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture
def chassis(ovn_bed: OvnBed) -> Iterator[OvnBed]:
    """The session's chassis with a switch ``ls-t`` of its own, and pod namespaces."""
    ovn_bed.nbctl("--may-exist", "ls-add", "ls-t")
    yield ovn_bed
    ovn_bed.nbctl("--if-exists", "ls-del", "ls-t")


@pytest.fixture
def pod_netns() -> Iterator[Host]:
    host = Host(links=lambda container, interface: [])
    try:
        yield host
    finally:
        host.cleanup()


def _lsp(bed: OvnBed, name: str, mac: str, ip: str) -> None:
    bed.nbctl("lsp-add", "ls-t", name, "--", "lsp-set-addresses", name, f"{mac} {ip}")


def test_plug_twice_is_one_bound_port_and_unplug_twice_is_fine(chassis: OvnBed,
                                                               pod_netns: Host) -> None:
    _, path = pod_netns.netns()
    cid = pod_netns.container()
    _lsp(chassis, "default/web-a", "0a:41:00:00:00:05", "10.41.0.5")
    got = drive(chassis, f"""
        pn = record("default/web-a", "10.41.0.5", "0a:41:00:00:00:05")
        first = dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface)
        second = dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface)
        out["same"] = first == second
        out["bind"] = dp.bind_seconds
        out["check"] = dp.check(context(pn, {cid!r}, {path!r}), "default/web-a").ok
        out["csum"] = tx_checksum_on({path!r}, "eth0")
        out["plugs"] = [(p.container_id, p.if_name, p.owner) for p in dp.plugs()]
        out["host"] = first.host_interface
        dp.unplug(unplug_context({cid!r}, {path!r}))
        dp.unplug(unplug_context({cid!r}, {path!r}))
        out["after"] = [p.host_interface for p in dp.plugs()]
    """)
    assert got["same"] and got["check"] and not got["csum"], got
    assert got["plugs"] == [[cid, "eth0", "default/web-a"]]
    print(f"bind (ovn-installed) per plug: {', '.join(f'{t:.3f} s' for t in got['bind'])}")
    assert got["after"] == []
    assert got["host"] not in chassis.vsctl("list-ports", "br-int").split()
    chassis.nbctl("lsp-del", "default/web-a")


def test_a_port_ovn_does_not_know_times_out_and_is_listed_for_removal(
        chassis: OvnBed, pod_netns: Host) -> None:
    _, path = pod_netns.netns()
    cid = pod_netns.container()
    got = drive(chassis, f"""
        import time
        pn = record("default/nowhere", "10.41.0.6", "0a:41:00:00:00:06")
        start = time.monotonic()
        try:
            dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface)
        except ProviderError as exc:
            out["error"] = [exc.kind.value, str(exc)]
        out["waited"] = time.monotonic() - start
        out["plugs"] = [p.owner for p in dp.plugs()]
        dp.unplug(unplug_context({cid!r}, {path!r}))
        out["after"] = [p.owner for p in dp.plugs()]
    """, bind_timeout=0.5)
    kind, message = got["error"]
    assert kind == "transient" and "default/nowhere" in message and "0.5 s" in message, got
    assert 0.5 <= got["waited"] < 5
    assert got["plugs"] == ["default/nowhere"] and got["after"] == []


def test_half_made_plugs_are_listed_and_converged(chassis: OvnBed, pod_netns: Host) -> None:
    _, path = pod_netns.netns()
    cid = pod_netns.container()
    _lsp(chassis, "default/web-h", "0a:41:00:00:00:07", "10.41.0.7")
    got = drive(chassis, f"""
        import subprocess
        pn = record("default/web-h", "10.41.0.7", "0a:41:00:00:00:07")
        host = dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface).host_interface
        # the OVS port gone (an agent killed between the pair and the port): still listed
        # by the host end's mark, found by check, made again by the next plug
        dp.api.del_port(host).execute(check_error=True)
        out["listed"] = [p.owner for p in dp.plugs()]
        out["check"] = dp.check(context(pn, {cid!r}, {path!r}), "default/web-h").reason
        dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface)
        out["again"] = dp.check(context(pn, {cid!r}, {path!r}), "default/web-h").ok
        # checksum offload turned back on behind podnet's back: check says so
        set_tx_checksum({path!r}, "eth0", True)
        out["csum"] = dp.check(context(pn, {cid!r}, {path!r}), "default/web-h").reason
        dp.plug(context(pn, {cid!r}, {path!r}), pn.status.interface)
        out["fixed"] = dp.check(context(pn, {cid!r}, {path!r}), "default/web-h").ok
        dp.unplug(unplug_context({cid!r}, {path!r}))
    """)
    assert got["listed"] == ["default/web-h"], got
    assert "OVS port" in got["check"] and "missing" in got["check"], got
    assert got["again"] and got["fixed"], got
    assert "checksum" in got["csum"], got
    chassis.nbctl("lsp-del", "default/web-h")
