"""The OVN provider's dataplane, proven by packets: the cluster as processes (``podnet
apiserver``, ``podnet run --provider ovn`` writing a real NB, ``podnet node --provider ovn``
plugging pods into a real ``br-int`` that a real ``ovn-controller`` binds), pods as network
namespaces.

Two pods on one logical switch ping each other and hold a TCP connection; each pod's eth0
(and its host end) has the MTU its record carries, and a packet of that size passes
br-int; a pod on another switch of the same router is reached through it; a spoofed
source address is dropped by port security while the real one passes; DEL removes the
OVS port and the pod's reachability; deleting the pods leaves no port in OVS and no pod
port in NB; an agent started after its pod left removes the pod's port.

Restarts, each on a bed of its own: ovn-controller stopped or killed (plugged pods keep
talking, ADD is error 11 after bind_timeout, the retry converges once it is back); the NB
server stopped and started again (plugged pods keep talking, a pod created meanwhile gets
its port once NB is back); kill -9 of the agent during 30 concurrent ``podnet-cni`` ADDs
(the retries converge, nothing plumbed twice, DEL and the pods' deletion leave nothing in
OVS or NB). Two chassis: pods on two nodes ping each other over Geneve.

The dataplane alone, on the session's chassis: a second plug converges on the first, a
port OVN does not know times out as a transient error, half-made plugs are listed and
converged."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnet.linux.veth import set_tx_checksum
from podnet.testing.cni import add_as_a_runtime, pod_args, run_cni
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    AgentClient,
    Host,
    NodeNamespace,
    Stack,
    TcpServer,
    Underlay,
    addresses_in,
    in_netns,
    links_in,
    node_object,
    ping,
    pod,
    tcp_talk,
    wait_for,
)
from podnet.testing.ovnbed import OvnBed, OvnNodeBed, bed_unavailable

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


#: the kit's node with a real chassis, the controller and the agent
Bed = OvnNodeBed


@pytest.fixture
def bed(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Bed]:
    bind_timeout = getattr(request, "param", 20)
    # cleans up after itself when it fails half way
    made = Bed(tmp_path, lambda ovn: ovn_config(ovn, bind_timeout))
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
    # each pod reaches its gateway (the router's port on its switch)
    assert ping(a["netns"], "10.31.0.1"), "a cannot ping its gateway"
    assert ping(c["netns"], records["c"]["status"]["gateway"]), "c cannot ping its gateway"
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


def test_a_statefulset_pod_recreated_keeps_its_address_and_is_reachable_again(
        bed: Bed) -> None:
    """A StatefulSet's pod is deleted and made again (a new uid, a new sandbox): its record
    was held, the new pod takes it back, and the same address answers from the new
    sandbox on a port bound again."""
    import json

    stack, client = bed.stack, bed.client
    stack.create([{"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": "db", "namespace": "default"},
                   "spec": {"replicas": 1, "serviceName": "db",
                            "selector": {"matchLabels": {"app": "db"}},
                            "template": {"metadata": {"labels": {"app": "db"}},
                                         "spec": {"containers": [{"name": "c",
                                                                  "image": "busybox"}]}}}}])
    sts = json.loads(stack.kubectl("get", "statefulset", "db", "-o", "json"))
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
             "uid": sts["metadata"]["uid"]}
    stack.create([pod("db-0", owner=owner), pod("client")])
    peer_ns, peer_path = bed.host.netns()
    assert client.add(bed.host.container(), peer_path, "client")[0] == 200
    _first_ns, first_path = bed.host.netns()
    first = bed.host.container()
    status, result = client.add(first, first_path, "db-0")
    assert status == 200, result
    ip = result["ips"][0]["address"].split("/")[0]
    assert ping(peer_ns, ip), "db-0 does not answer"

    # the pod goes (its sandbox first), and comes back as a new pod of the same name
    assert client.delete(first, first_path, "db-0")[0] == 200
    stack.kubectl("delete", "pod", "db-0", "--wait=false")
    wait_for("db-0's record held", lambda: stack.records().get("db-0", {}).get(
        "status", {}).get("phase") == "Releasing", 30)
    assert not ping(peer_ns, ip, count=2, timeout=1), "the old sandbox still answers"
    stack.create([pod("db-0", owner=owner)])
    _, second_path = bed.host.netns()
    status, again = client.add(bed.host.container(), second_path, "db-0")
    assert status == 200, again
    assert again["ips"] == result["ips"], "the recreated pod got another address"
    assert ping(peer_ns, ip), "the recreated pod does not answer on its address"


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


def _plug(bed: Bed, name: str) -> dict[str, Any]:
    """ADD pod ``name`` (its namespace made here); its netns, path, container and IP."""
    netns, path = bed.host.netns()
    cid = bed.host.container()
    status, result = bed.client.add(cid, path, name)
    assert status == 200, result
    return {"netns": netns, "path": path, "cid": cid,
            "ip": result["ips"][0]["address"].split("/")[0]}


@pytest.mark.parametrize("bed", [2], indirect=True)
@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
def test_ovn_controller_restarted_ports_keep_working_new_adds_are_error_11_until_back(
        bed: Bed, kill: bool) -> None:
    """ovn-controller stopped (or killed): the pods already plugged keep talking (the
    flows stay in ovs-vswitchd); an ADD waits bind_timeout, then answers 11 (try again);
    once it is back, the runtime's retried ADD converges on what the first made, and the
    old pods are still checked good."""
    stack, client, ovn = bed.stack, bed.client, bed.ovn
    assert stack is not None and ovn is not None
    stack.create([pod("f"), pod("g"), pod("h")])
    g, h = _plug(bed, "g"), _plug(bed, "h")
    ovn.stop_controller(kill=kill)
    assert ping(g["netns"], h["ip"]), "g cannot reach h while ovn-controller is down"
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
    assert len(_ovs_ports(bed)) == 3  # the retry found the first one's port
    assert client.check(cid, f_path, "f")[0] == 200
    for name, p in (("g", g), ("h", h)):
        assert client.check(p["cid"], p["path"], name)[0] == 200, name
    assert ping(f_netns, g["ip"]), "f cannot reach g after ovn-controller came back"
    assert ping(h["netns"], g["ip"]), "h cannot reach g after ovn-controller came back"


def test_nb_restarted_the_controller_reconnects_and_pods_made_meanwhile_get_ports(
        bed: Bed) -> None:
    """The NB ovsdb-server stopped: plugged pods keep talking (NB is not on their path);
    a pod created meanwhile waits (its record cannot be allocated: no port, no ADD);
    once NB is back on its database, the controller's client reconnects, the pod gets
    its port, its ADD succeeds and it reaches the others."""
    stack, ovn = bed.stack, bed.ovn
    assert stack is not None and ovn is not None
    stack.create([pod("j"), pod("k")])
    j, k = _plug(bed, "j"), _plug(bed, "k")
    ovn.stop_nb()
    try:
        stack.create([pod("m")])
        assert ping(j["netns"], k["ip"]), "j cannot reach k while NB is down"
        # the controller tried (the record exists) and could not allocate
        wait_for("m's record", lambda: "m" in stack.records(), 30)
        assert not stack.records()["m"].get("status", {}).get("ip"), "m got an address without NB"
    finally:
        ovn.start_nb()
    m = _plug(bed, "m")  # the agent's ADD waits for the record to be routed
    assert len(_pod_ports(bed)) == 3
    wait_for("m's port up", lambda: _up(bed, stack.records()["m"]["status"]["interface"]), 30)
    assert ping(m["netns"], j["ip"]), "m cannot reach j after NB came back"
    assert ping(k["netns"], m["ip"]), "k cannot reach m after NB came back"
    assert len({j["ip"], k["ip"], m["ip"]}) == 3


def _marked_interfaces(bed: Bed) -> list[str]:
    """The OVS Interfaces carrying podnet's marks (plugged pods, or their leftovers)."""
    from podnet.plugins.ovn.dataplane import OWNER_ID

    assert bed.ovn is not None
    rows = json.loads(bed.ovn.vsctl("--format=json", "--columns=name,external_ids", "list",
                                    "Interface"))
    return sorted(name for name, ids in rows["data"] if OWNER_ID in dict(ids[1]))


def test_kill_9_of_the_agent_during_30_adds_the_retries_converge_and_del_leaves_nothing(
        bed: Bed) -> None:
    """podnet-cni run as a runtime runs it, 30 at once; the agent killed part-way and
    started again: every ADD succeeds (after error 11 for some), each pod has one
    interface and one OVS port, all answer ping; DEL of all and the pods' deletion leave
    no marked Interface in OVS and no pod port in NB."""
    from podnet.plugins.ovn.dataplane import veth_names

    stack = bed.stack
    assert stack is not None
    config = {"cniVersion": "1.1.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    names = [f"burst-{i:02d}" for i in range(30)]
    stack.create([pod(n) for n in names])
    sandboxes = {n: (*bed.host.netns(), bed.host.container()) for n in names}
    envs = {n: {"CNI_CONTAINERID": cid, "CNI_NETNS": path,
                "CNI_ARGS": pod_args(name=n, uid=None)}
            for n, (_, path, cid) in sandboxes.items()}
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        futures = {n: pool.submit(add_as_a_runtime, config, envs[n]) for n in names}
        # killed at the first port, looked for often: a burst's plugs take milliseconds
        # each once their records are routed (at three ports, polled every 0.3 s, the
        # whole burst was once done before the kill)
        wait_for("the first OVS port", lambda: len(_ovs_ports(bed)) >= 1, 60,
                 interval=0.02)
        plugged_before = len(_ovs_ports(bed))
        stack.kill("agent")
        stack.agent(NODE, netns=bed.node.netns,
                    args=["--config", str(stack.tmp / "controller.yaml")])
        outcomes = {n: f.result() for n, f in futures.items()}
    for n, (done, _) in outcomes.items():
        assert done.ok, f"{n}: {done.stdout}{done.stderr}"
    retried = [n for n, (_, seen) in outcomes.items() if seen]
    assert plugged_before < len(names) and retried, "the kill did not hit the burst"
    assert all(code == 11 for _, seen in outcomes.values() for code in seen)

    # nothing plumbed twice: one OVS port per container, one interface in each pod,
    # one NB port per pod, the addresses unique and the records'
    records = stack.records()
    expected = sorted(veth_names(cid, "eth0")[0] for _, _, cid in sandboxes.values())
    assert sorted(_ovs_ports(bed)) == expected
    assert _marked_interfaces(bed) == expected
    assert sorted(_pod_ports(bed)) == sorted(records[n]["status"]["interface"] for n in names)
    addresses = []
    for n, (_, path, _) in sandboxes.items():
        ip = records[n]["status"]["ip"]
        assert links_in(path) == ["eth0", "lo"], n
        assert addresses_in(path)["eth0"] == [f"{ip}/24"], n
        assert outcomes[n][0].output["ips"][0]["address"] == f"{ip}/24", n
        addresses.append(ip)
    assert len(set(addresses)) == len(names)
    first = sandboxes[names[0]][0]
    unreachable = [n for n, ip in zip(names[1:], addresses[1:], strict=True)
                   if not ping(first, ip, count=3, timeout=1)]
    assert not unreachable, f"{names[0]} cannot reach {unreachable}"

    with ThreadPoolExecutor(max_workers=10) as pool:
        dels = list(pool.map(lambda n: run_cni("DEL", config, envs[n]), names))
    assert all(d.ok for d in dels), [d.stdout for d in dels if not d.ok]
    stack.kubectl("delete", "pod", *names, "--wait=false")
    assert _marked_interfaces(bed) == [] and _ovs_ports(bed) == []
    wait_for("the pods' ports to leave NB", lambda: _pod_ports(bed) == [], 60)


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


# --- two chassis: Geneve between two node namespaces, in userspace ------------------------


def _underlay_on_br_phy(bed: OvnBed, underlay: Underlay, node: NodeNamespace,
                        index: int) -> None:
    """The userspace datapath sends a tunnel's packets out of an OVS bridge only: the
    node's underlay link joins a netdev bridge ``br-phy``, and its address (the chassis'
    ovn-encap-ip) moves onto that bridge's own port. Packets now pass a datapath that
    completes no checksum: the router's side stops leaving its checksums to the device
    (with it on, ping passes and TCP to the apiserver times out)."""
    prefix, gateway = underlay.subnet.prefixlen, underlay.router_address
    bed.vsctl("add-br", "br-phy", "--", "set", "bridge", "br-phy", "datapath_type=netdev",
              "--", "add-port", "br-phy", "underlay0")
    for argv in (["addr", "flush", "dev", "underlay0"],
                 ["addr", "add", f"{node.address}/{prefix}", "dev", "br-phy"],
                 ["link", "set", "br-phy", "up"],
                 ["route", "replace", "default", "via", gateway]):
        subprocess.run(["ip", "-n", node.netns, *argv], check=True, capture_output=True)
    set_tx_checksum(f"/run/netns/{node.netns}", "br-phy", False)
    for link in ("underlay", f"to-node{index}"):
        set_tx_checksum(f"/run/netns/{underlay.router}", link, False)


def test_pods_on_two_chassis_ping_each_other_over_geneve(tmp_path: Path) -> None:
    """Two node namespaces on one underlay, each an OVS (userspace datapath) and an
    ovn-controller of its own (system-id chassis-1 / chassis-2, ovn-encap-ip its underlay
    address), one agent each; a pod on each node: they ping each other through the
    Geneve tunnel between the chassis, a full 1400-byte packet included."""
    host = Host(links=lambda container, interface: [])
    underlay = Underlay("192.168.81.0/24")
    beds: list[OvnBed] = []
    stack: Stack | None = None
    try:
        n1 = underlay.add_node(NODE, "10.94.0.0/24")
        n2 = underlay.add_node("node-2", "10.95.0.0/24")
        (tmp_path / "ovn1").mkdir()
        (tmp_path / "ovn2").mkdir()
        first = OvnBed(tmp_path / "ovn1", netns=n1.netns, chassis="chassis-1",
                       encap_ip=n1.address)
        beds.append(first.start())
        second = OvnBed(tmp_path / "ovn2", netns=n2.netns, chassis="chassis-2",
                        encap_ip=n2.address, sb_remote=first.sb_remote)
        beds.append(second.start())
        for index, (bed, node) in enumerate(((first, n1), (second, n2))):
            _underlay_on_br_phy(bed, underlay, node, index)
        config = ovn_config(first)
        stack = Stack(tmp_path, provider="ovn", controller_config=config,
                      netns=underlay.router, address=underlay.router_address)
        stack.create([node_object(NODE, n1.pod_cidr, n1.address),
                      node_object("node-2", n2.pod_cidr, n2.address)])
        second_config = tmp_path / "node-2.yaml"
        config["providers"]["ovn"]["ovs_db"] = second.ovs_remote
        second_config.write_text(yaml.safe_dump(config))
        stack.agent(NODE, netns=n1.netns, args=["--config", str(tmp_path / "controller.yaml")])
        stack.agent("node-2", netns=n2.netns, args=["--config", str(second_config)])
        clients = {NODE: AgentClient(stack.socket_of(NODE)),
                   "node-2": AgentClient(stack.socket_of("node-2"))}
        for client in clients.values():
            wait_for("the agent to be ready", client.ready, 30)
        stack.create([pod("p1"), pod("p2", node="node-2")])
        pods = {}
        for name, node in (("p1", NODE), ("p2", "node-2")):
            netns, path = host.netns()
            status, result = clients[node].add(host.container(), path, name)
            assert status == 200, result
            pods[name] = (netns, result["ips"][0]["address"].split("/")[0])
        chassis = {row.split()[-1] for row in first.sbctl(
            "--bare", "--columns=chassis", "find", "Port_Binding", "type=\"\"").split("\n")
            if row.strip()}
        assert len(chassis) == 2, f"the ports are bound to {chassis}, not two chassis"
        for bed, other in ((first, n2), (second, n1)):
            tunnels = bed.vsctl("--bare", "--columns=options", "find", "Interface",
                                "type=geneve")
            assert f"remote_ip={other.address}" in tunnels.replace('"', ""), tunnels
        assert ping(pods["p1"][0], pods["p2"][1]), (
            "p1 (chassis-1) cannot reach p2 (chassis-2): "
            + first.vsctl("show") + second.vsctl("show"))
        assert ping(pods["p2"][0], pods["p1"][1]), "p2 cannot reach p1"
        # the default MTU leaves room for Geneve on the 1500 underlay: a full-sized
        # don't-fragment packet crosses the tunnel
        assert ping(pods["p1"][0], pods["p2"][1], size=1400), "1400 bytes did not cross"
    finally:
        steps = [s for s in (stack and stack.close, *(b.close for b in reversed(beds)),
                             host.cleanup, underlay.cleanup) if s]
        for step in steps:
            try:
                step()
            except Exception as exc:  # every step runs, whatever failed before
                print(f"cleanup: {step}: {exc}")
