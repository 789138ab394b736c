"""The ECS ENI dataplane with real packets, through a VPC that forwards by the cloud's state
(:mod:`podnet.testing.vpcbed`).

``podnet apiserver`` and ``podnet run`` (the ECS provider) run in the underlay's router
namespace, the ECS simulator in this process with its socket there too (the real SDK is
its client, in the controller and in the agents); each node is a namespace with its own
``podnet node``; the ENIs the simulator attaches appear in the nodes as devices with
their MACs, wired to the VPC namespace, which routes each address only to the ENI the
simulator says holds it and checks sources.

Instances are ``ecs.sim.tiny``: 3 secondary addresses per ENI, so a node with four pods
has two secondary ENIs.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podnet.linux.netns import iproute, netns_path, run_in_netns
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.plugins.ecs.dataplane import (
    GATEWAY,
    GATEWAY6,
    ORPHAN_RULE,
    PROTO,
    RULE_PRIORITY,
    table_of,
    veth_names,
)
from podnet.plugins.ecs.sim import EcsSimulator
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    AgentClient,
    Host,
    NodeNamespace,
    Stack,
    TcpServer,
    Underlay,
    in_netns,
    ping,
    pod,
    tcp_talk,
)
from podnet.testing.vpcbed import VpcBed, attached_state
from podnet.testing.waiting import wait_for as _wait_for

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

VSWITCH = "vsw-eni-1"
SUBNET = "sbn-eni-1"
TYPE_LABEL = "node.kubernetes.io/instance-type"
CIDR = "10.70.0.0/24"
BBC_CIDR = "10.71.0.0/24"
TYPE = "ecs.sim.tiny"
TYPE6 = "ecs.sim.tiny6"
CIDR6 = "fd70:0:0:1::/64"
BBC_CIDR6 = "fd71:0:0:1::/64"
#: the simulator never checks signatures
CREDENTIALS = {"ALIBABA_CLOUD_ACCESS_KEY_ID": "test", "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "test",
               "BCE_ACCESS_KEY_ID": "test", "BCE_SECRET_ACCESS_KEY": "test"}


def wait_for(what: str, check: Any, timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.2)


class Bed:
    """The underlay, the simulators (``clouds``: ``ecs``, ``bbc`` or both, one VPC) in its
    router namespace, the VPC, the cluster. ``sim`` is the first cloud's simulator."""

    def __init__(self, tmp: Path, *clouds: str, dual: bool = False) -> None:
        self.clouds = clouds or ("ecs",)
        #: dual stack: a vSwitch (ECS) or subnet (BBC) with an IPv6 CIDR, pods with pairs
        self.dual = dual
        #: pod name -> the IPv6 address its ADD gave it (dual stack)
        self.ipv6: dict[str, str] = {}
        self.underlay = Underlay()
        self.host = Host(links=lambda c, i: veth_names(c, i))
        self.vpc: VpcBed | None = None
        self.stack: Stack | None = None
        self.sims: dict[str, Any] = {}
        try:
            sections: dict[str, dict[str, Any]] = {}
            for cloud in self.clouds:
                sim = self.sims[cloud] = (EcsSimulator if cloud == "ecs" else BbcSimulator)(
                    host=self.underlay.router_address)
                run_in_netns(netns_path(self.underlay.router), sim.start)
                if cloud == "ecs":
                    sim.add_vswitch(VSWITCH, CIDR, ipv6_cidr=CIDR6 if dual else None)
                    sections[cloud] = {"endpoint": sim.endpoint, "protocol": "http",
                                       "vswitches": [VSWITCH], "security_groups": ["sg-1"],
                                       "timeout": 5, **({"ip_stack": "dual"} if dual else {})}
                else:
                    sim.add_subnet(SUBNET, BBC_CIDR, ipv6_cidr=BBC_CIDR6 if dual else None)
                    sections[cloud] = {"endpoint": sim.endpoint, "subnets": [SUBNET],
                                       **({"ipStack": "dual"} if dual else {})}
            self.sim = self.sims[self.clouds[0]]
            self.vpc = VpcBed(self.underlay, lambda: [
                eni for sim in self.sims.values() for eni in attached_state(sim)])
            self.config = {
                "defaultProvider": self.clouds[0], "providers": sections,
                "nodeProviders": [{"provider": "bbc", "nodeSelector": f"{TYPE_LABEL}=BBC"}]
                if len(self.clouds) > 1 else [],
                "policies": {c: {"minIdle": 0, "maxIdle": 0} for c in self.clouds},
                "listen": "127.0.0.1:0"}
            more = [a for c in self.clouds[1:] for a in ("--provider", c)]
            self.stack = Stack(tmp, provider=self.clouds[0], controller_config=self.config,
                               netns=self.underlay.router, address=self.underlay.router_address,
                               controller_args=more)
            self.vpc.follow()
        except BaseException:
            self.close()
            raise
        self.tmp = tmp

    def node(self, name: str, instance: str, cloud: str | None = None, *,
             wait: bool = True) -> NodeNamespace:
        assert self.stack is not None and self.vpc is not None
        cloud = cloud or self.clouds[0]
        if cloud == "ecs":
            kind = TYPE6 if self.dual else TYPE
            self.sims[cloud].add_instance(instance, kind, VSWITCH)
            labels, provider_id = {TYPE_LABEL: kind}, f"cn-hangzhou.{instance}"
        else:
            self.sims[cloud].add_instance(instance, SUBNET)
            labels, provider_id = {TYPE_LABEL: "BBC"}, f"cce://{instance}"
        # a podCIDR of its own for the underlay's router; the ENI dataplane uses none
        n = self.underlay.add_node(name, f"10.93.{len(self.underlay.nodes)}.0/24")
        self.vpc.add_node(n, instance)
        self.stack.create([{
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"providerID": provider_id}}])
        self.start_agent(n, cloud, wait=wait)
        return n

    def nodes(self, *names: str) -> dict[str, NodeNamespace]:
        """ECS nodes ``names`` (instance ``i-<name without dashes>``), their agents
        started together."""
        out = {name: self.node(name, "i-" + name.replace("-", ""), wait=False)
               for name in names}
        self.wait_ready(*names)
        return out

    def wait_ready(self, *names: str) -> None:
        assert self.stack is not None
        for name in names:
            wait_for(f"the agent of {name} ready",
                     AgentClient(self.stack.socket_of(name)).ready)

    def start_agent(self, n: NodeNamespace, cloud: str | None = None, *,
                    wait: bool = True) -> None:
        assert self.stack is not None
        self.stack.agent(n.name, netns=n.netns, providers=[cloud or self.clouds[0]],
                         add_timeout=20,
                         args=["--config", str(self.tmp / "controller.yaml")])
        if wait:
            wait_for(f"the agent of {n.name} ready",
                     AgentClient(self.stack.socket_of(n.name)).ready)

    def add(self, name: str, n: NodeNamespace, *, patient: bool = False
            ) -> tuple[str, str, str]:
        """Pod ``name`` on ``n``, ADDed as a runtime does (again after a transient error,
        a bounded number of times: an ENI's device may appear a moment after the
        record is Routed); its namespace, container id and address. ``patient``: again
        after any error 11 and while the agent is not there (killed, restarting), for
        up to a minute."""
        assert self.stack is not None
        ns, path = self.host.netns()
        cid = self.host.container()
        client = AgentClient(self.stack.socket_of(n.name))
        deadline = time.monotonic() + 60
        for _ in range(50 if not patient else 1_000_000):
            try:
                status, body = client.add(cid, path, name)
            except OSError as exc:  # the agent died under the request, or is not back yet
                if not patient or time.monotonic() > deadline:
                    raise
                status, body = 0, {"msg": repr(exc)}
                time.sleep(0.2)
                continue
            if status == 200:
                # the result says what the pod got: its address alone, the link-local
                # gateway
                address = body["ips"][0]["address"]
                assert address.endswith("/32"), body
                routes = [{"dst": "0.0.0.0/0", "gw": GATEWAY}]
                if self.dual:
                    address6 = body["ips"][1]["address"]
                    assert address6.endswith("/128"), body
                    self.ipv6[name] = address6.split("/")[0]
                    routes.append({"dst": "::/0", "gw": GATEWAY6})
                assert body["routes"] == routes, body
                return ns, cid, address.split("/")[0]
            if patient and body.get("code") == 11 and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            if "has no device" not in str(body.get("msg")):
                break
            time.sleep(0.2)
        raise AssertionError(f"ADD of {name} on {n.name}: {status} {body}")

    def podnet(self, *args: str) -> tuple[int, Any]:
        """``podnet ARGS -o json`` as an operator runs it, against the apiserver (and the
        clouds' simulators, for audit) from the router namespace; its exit status and
        output."""
        assert self.stack is not None
        extra = (["--config", str(self.tmp / "controller.yaml"),
                  *(a for c in self.clouds for a in ("--provider", c))]
                 if args[0] == "audit" else [])
        run = subprocess.run(
            ["ip", "netns", "exec", self.underlay.router, sys.executable, "-m",
             "podnet.app.cli", *args, "--kubeconfig", str(self.stack.kubeconfig), *extra,
             "-o", "json"], capture_output=True, text=True, timeout=60, check=False)
        assert run.returncode in (0, 1), run.stderr
        return run.returncode, json.loads(run.stdout)

    def dataplane(self, node: str) -> dict[str, Any] | None:
        """What ``podnet status`` shows of ``node``'s ENI dataplane."""
        _, report = self.podnet("status", "--node", node)
        (agent,) = report["agents"]
        return agent["eni_dataplane"]  # type: ignore[no-any-return]

    def eni_of(self, address: str) -> str:
        return next(e.id for e in attached_state(self.sim) if address in e.addresses)

    def close(self) -> None:
        if self.vpc is not None:
            # what the VPC's thread could not program shows in the test's report
            for error in self.vpc.errors:
                print("the VPC bed's follow thread:", error)
        if self.stack is not None:
            self.stack.close()
        if self.vpc is not None:
            self.vpc.cleanup()
        self.host.cleanup()
        for sim in self.sims.values():
            sim.stop()
        self.underlay.cleanup()


@pytest.fixture
def bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bed]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)  # the processes inherit them
    b = Bed(tmp_path)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def dual_bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bed]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    b = Bed(tmp_path, dual=True)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def bbc_bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bed]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    b = Bed(tmp_path, "bbc")
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def bbc_dual_bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bed]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    b = Bed(tmp_path, "bbc", dual=True)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def mixed_bed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Bed]:
    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    b = Bed(tmp_path, "ecs", "bbc")
    try:
        yield b
    finally:
        b.close()


def rules_in(netns: str, family: int = socket.AF_INET) -> dict[str, list[int]]:
    """Pod address -> the tables its podnet rules look up, in namespace ``netns``."""
    out: dict[str, list[int]] = {}
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        for rule in ipr.get_rules(family=family):
            if rule.get_attr("FRA_PRIORITY") == RULE_PRIORITY:
                out.setdefault(rule.get_attr("FRA_SRC"), []).append(rule.get_attr("FRA_TABLE"))
    return out


def device_index(netns: str, name: str) -> int:
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        return int(ipr.link_lookup(ifname=name)[0])


def default_route(netns: str, table: int, family: int = socket.AF_INET
                  ) -> list[tuple[Any, Any]]:
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        return [(r.get_attr("RTA_GATEWAY"), r.get_attr("RTA_OIF"))
                for r in ipr.get_routes(family=family, table=table)
                if family == socket.AF_INET or r["dst_len"] == 0]


def host_routes(netns: str, address: str) -> list[Any]:
    """The main table's routes to ``address`` alone (a /32 or /128) in ``netns``."""
    family, length = ((socket.AF_INET6, 128) if ":" in address else (socket.AF_INET, 32))
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        return [r for r in ipr.get_routes(family=family, table=254)
                if r.get_attr("RTA_DST") == address and r["dst_len"] == length]


def test_pods_on_different_enis_and_nodes_talk_through_the_vpc_which_routes_by_the_cloud(
        bed: Bed) -> None:
    assert bed.stack is not None and bed.vpc is not None
    node_a, node_b = bed.node("ecs-a", "i-enia"), bed.node("ecs-b", "i-enib")
    bed.stack.create([*(pod(f"a{i}", "ecs-a") for i in range(4)), pod("b0", "ecs-b")])
    pods = {f"a{i}": bed.add(f"a{i}", node_a) for i in range(4)}
    pods["b0"] = bed.add("b0", node_b)
    enis = {name: bed.eni_of(ip) for name, (_, _, ip) in pods.items()}
    # 3 addresses per ENI: node a holds two secondary ENIs
    assert len({enis[f"a{i}"] for i in range(4)}) == 2, enis
    first = "a0"
    second = next(f"a{i}" for i in range(4) if enis[f"a{i}"] != enis["a0"])

    # each pod's rule looks up its own ENI's table, whose default route is that ENI's
    # device and the vSwitch's gateway
    devices = bed.vpc.devices("ecs-a")
    rules = rules_in(node_a.netns)
    for name in (first, second):
        ip = pods[name][2]
        index = device_index(node_a.netns, devices[enis[name]])
        assert rules[ip] == [table_of(index)], (name, rules)
        assert default_route(node_a.netns, table_of(index)) == [("10.70.0.1", index)]
    assert rules[pods[first][2]] != rules[pods[second][2]]

    (ns_1, _, ip_1), (ns_2, _, ip_2), (ns_b, _, ip_b) = pods[first], pods[second], pods["b0"]
    assert ping(ns_1, ip_b), f"{first} cannot ping b0 on the other node"
    assert ping(ns_2, ip_b), f"{second} (the second ENI) cannot ping b0"
    assert ping(ns_b, ip_2), f"b0 cannot ping {second}"
    assert ping(ns_1, ip_2), f"{first} cannot ping {second} (another ENI of its node)"
    with TcpServer(ns_b, ip_b, 8080):
        talk = tcp_talk(ns_2, ip_b, 8080, "from a")
    assert talk.returncode == 0, talk.stderr
    assert talk.stdout.strip() == f"hello {ip_2} from a"  # no NAT on the way

    # an address no ENI holds is dropped by the VPC
    assert not ping(ns_1, "10.70.0.200", count=2)

    # the cloud moves first's address to the other ENI behind podnet's back: the VPC
    # delivers it there and drops what the pod sends from its old ENI (source check)
    bed.sim.move_address(ip_1, enis[second])
    bed.vpc.sync()
    assert bed.vpc.routes()[ip_1] == enis[second]
    assert not ping(ns_1, ip_b, count=2), "a pod answered through an ENI without its address"
    assert not ping(ns_b, ip_1, count=2)
    # ...and back: it works again (it was the cloud's state, nothing else)
    bed.sim.move_address(ip_1, enis[first])
    bed.vpc.sync()
    assert ping(ns_1, ip_b), "the address came back to its ENI and does not work"

    # a rule pointing at the wrong ENI's table: CHECK names it, the VPC drops the pod's
    # packets, and the runtime's ADD again converges it
    client_a = AgentClient(bed.stack.socket_of("ecs-a"))
    cid_1, path_1 = pods[first][1], netns_path(ns_1)
    assert client_a.check(cid_1, path_1, first)[0] == 200
    host_1 = veth_names(cid_1, "eth0")[0]
    wrong = table_of(device_index(node_a.netns, devices[enis[second]]))
    with contextlib.closing(iproute(netns_path(node_a.netns))) as ipr:
        ipr.rule("del", family=socket.AF_INET, src=ip_1, src_len=32, iifname=host_1,
                 table=rules[ip_1][0], priority=RULE_PRIORITY)
        ipr.rule("add", family=socket.AF_INET, src=ip_1, src_len=32, iifname=host_1,
                 table=wrong, priority=RULE_PRIORITY, FRA_PROTOCOL=PROTO)
    status, body = client_a.check(cid_1, path_1, first)
    assert status != 200 and f"the rules from {ip_1} look up [{wrong}]" in body["msg"], body
    # the agent's report says so (it looks again every few seconds), and podnet audit,
    # which sees no netlink, names the address and both ENIs; status shows the devices
    # by MAC and the rules each table has
    macs = {e.id: e.mac for e in attached_state(bed.sim)}
    wait_for("the moved rule in the agent's report", lambda: [
        d["rules"] for d in bed.dataplane("ecs-a")["devices"]  # type: ignore[index]
        if d["table"] == wrong] == [sum(1 for e in enis.values() if e == enis[second]) + 1],
        timeout=20)
    shown = bed.dataplane("ecs-a")
    assert shown is not None and shown["error"] is None
    by_mac = {d["mac"]: d for d in shown["devices"]}
    for name in (first, second):
        device = by_mac[macs[enis[name]]]
        assert device["name"] == devices[enis[name]] and device["gateway"] == "10.70.0.1"
    assert by_mac[macs[enis[first]]]["rules"] == sum(
        1 for e in enis.values() if e == enis[first]) - 1
    code, found = bed.podnet("audit")
    assert code == 1, found
    assert found["wrong_eni"] == [{
        "pod_network": bed.stack.records()[first]["metadata"]["namespace"] + "/"
        + bed.stack.records()[first]["metadata"]["name"], "node": "ecs-a", "ip": ip_1,
        "eni": enis[first], "rule_eni": enis[second]}], found
    assert not ping(ns_1, ip_b, count=2), "a pod's packets left through the wrong ENI"
    assert client_a.add(cid_1, path_1, first)[0] == 200
    assert rules_in(node_a.netns)[ip_1] == rules[ip_1]
    assert ping(ns_1, ip_b), "ADD did not converge the rule"
    wait_for("the audit clean of the moved rule",
             lambda: bed.podnet("audit")[1]["wrong_eni"] == [], timeout=20)

    # b0 goes: its DEL removes its rule and route; its address is unassigned (no idle
    # addresses kept) and the VPC stops delivering it; its ENI, now empty, is disposed
    # and leaves no table behind
    eni_b = enis["b0"]
    table_b = table_of(device_index(node_b.netns, bed.vpc.devices("ecs-b")[eni_b]))
    assert default_route(node_b.netns, table_b) == [("10.70.0.1", device_index(
        node_b.netns, bed.vpc.devices("ecs-b")[eni_b]))]
    status, body = AgentClient(bed.stack.socket_of("ecs-b")).delete(pods["b0"][1], None, "b0")
    assert status == 200, body
    assert ip_b not in rules_in(node_b.netns)
    bed.stack.kubectl("delete", "pod", "b0", "--wait=false")
    wait_for("b0's address unassigned", lambda: ip_b not in bed.sim.addresses())
    bed.vpc.sync()
    assert ip_b not in bed.vpc.routes()
    assert not ping(ns_1, ip_b, count=2), "a released address answered"
    wait_for("b0's ENI disposed", lambda: eni_b not in bed.sim.eni_states())
    bed.vpc.sync()
    assert eni_b not in bed.vpc.devices("ecs-b")
    assert default_route(node_b.netns, table_b) == []
    assert rules_in(node_b.netns) == {}

    # the same address, asked for by a pod on node a, works there
    bed.stack.create([pod("a9", "ecs-a", annotations={"podnet.io/ip-address": ip_b})])
    ns_9, _, ip_9 = bed.add("a9", node_a)
    assert ip_9 == ip_b
    bed.vpc.sync()
    assert ping(ns_1, ip_b), "the address given again, on another node, does not work"
    assert ping(ns_9, ip_2)
    assert bed.vpc.errors == []


def test_a_rule_left_behind_is_removed_by_the_agents_start(bed: Bed) -> None:
    """A rule of podnet's whose pod interface is gone (the agent died between the two
    deletes) is listed as a leftover and unplugged when the agent starts."""
    assert bed.stack is not None
    node = bed.node("ecs-c", "i-enic")
    bed.stack.create([pod("c0", "ecs-c")])
    _, _, ip = bed.add("c0", node)
    leftover = "10.70.0.250"
    with contextlib.closing(iproute(netns_path(node.netns))) as ipr:
        table = rules_in(node.netns)[ip][0]
        ipr.rule("add", family=socket.AF_INET, src=leftover, src_len=32, table=table,
                 iifname="pne0000000000",
                 priority=RULE_PRIORITY, FRA_PROTOCOL=PROTO)
    listed = in_netns(node.netns, """
        from podnet.plugins.ecs.dataplane import EniDataplane
        print([(p.container_id, p.if_name, p.owner) for p in EniDataplane('ecs', str).plugs()])
    """)
    assert listed.returncode == 0, listed.stderr
    assert f"('{leftover}', '{ORPHAN_RULE}', None)" in listed.stdout
    assert "'eth0', 'default/c0." in listed.stdout, listed.stdout
    bed.stack.stop(Stack.agent_name("ecs-c"))
    bed.start_agent(node)
    rules = rules_in(node.netns)
    assert leftover not in rules, rules
    assert ip in rules, "the live pod's rule went too"


def test_bbc_pods_on_two_machines_talk_through_their_one_eni_each(bbc_bed: Bed) -> None:
    """BBC: one ENI per machine, one table; the record's MAC is the ENI's, the pod gets
    its own."""
    bed = bbc_bed
    assert bed.stack is not None and bed.vpc is not None
    node_a, node_b = bed.node("bbc-a", "i-bbca"), bed.node("bbc-b", "i-bbcb")
    bed.stack.create([pod("x0", "bbc-a"), pod("x1", "bbc-a"), pod("y0", "bbc-b")])
    pods = {name: bed.add(name, n) for name, n in
            (("x0", node_a), ("x1", node_a), ("y0", node_b))}
    (ns_x, _, ip_x), (_, _, ip_x1), (ns_y, cid_y, ip_y) = pods["x0"], pods["x1"], pods["y0"]
    (eni_a,) = bed.vpc.devices("bbc-a").values()
    table = table_of(device_index(node_a.netns, eni_a))
    assert rules_in(node_a.netns) == {ip_x: [table], ip_x1: [table]}
    assert ping(ns_x, ip_y), "x0 cannot ping y0 on the other machine"
    assert ping(ns_y, ip_x1), "y0 cannot ping x1"
    assert ping(ns_x, ip_x1), "x0 cannot ping x1 (the same machine, through the VPC)"
    with TcpServer(ns_y, ip_y, 8080):
        talk = tcp_talk(ns_x, ip_y, 8080, "from x")
    assert talk.returncode == 0, talk.stderr
    assert talk.stdout.strip() == f"hello {ip_x} from x"

    status, body = AgentClient(bed.stack.socket_of("bbc-b")).delete(cid_y, None, "y0")
    assert status == 200, body
    assert rules_in(node_b.netns) == {}
    bed.stack.kubectl("delete", "pod", "y0", "--wait=false")
    wait_for("y0's address deleted", lambda: ip_y not in bed.sim.addresses())
    bed.vpc.sync()
    assert ip_y not in bed.vpc.routes()
    assert not ping(ns_x, ip_y, count=2), "a released address answered"
    assert bed.vpc.errors == []


def test_an_ecs_pod_reaches_a_bbc_pod_in_one_vpc(mixed_bed: Bed) -> None:
    """Both clouds' simulators program one VPC: an ECS instance and a BBC machine, each
    pod's traffic through its own ENI and subnet gateway."""
    bed = mixed_bed
    assert bed.stack is not None
    ecs_node = bed.node("ecs-m", "i-ecsm", "ecs")
    bbc_node = bed.node("bbc-m", "i-bbcm", "bbc")
    bed.stack.create([pod("e0", "ecs-m"), pod("b0", "bbc-m")])
    ns_e, _, ip_e = bed.add("e0", ecs_node)
    ns_b, _, ip_b = bed.add("b0", bbc_node)
    assert ip_e in bed.sims["ecs"].addresses() and ip_b in bed.sims["bbc"].addresses()
    assert ping(ns_e, ip_b), "the ECS pod cannot ping the BBC pod"
    assert ping(ns_b, ip_e), "the BBC pod cannot ping the ECS pod"
    with TcpServer(ns_b, ip_b, 8080):
        talk = tcp_talk(ns_e, ip_b, 8080, "from ecs")
    assert talk.returncode == 0, talk.stderr
    assert talk.stdout.strip() == f"hello {ip_e} from ecs"


def test_dual_stack_ecs_pods_ping_over_ipv6_through_the_eni_that_holds_the_address(
        dual_bed: Bed) -> None:
    """Dual stack: each pod's IPv6 address is a /128 on its veth, a rule from it to its
    ENI's table, whose IPv6 default route goes to the vSwitch's IPv6 gateway; the VPC
    routes each IPv6 address only to its ENI. A released IPv6 address is unreachable,
    and unplug leaves no IPv6 route or rule."""
    bed = dual_bed
    assert bed.stack is not None and bed.vpc is not None
    node_a, node_b = bed.node("dual-a", "i-duala"), bed.node("dual-b", "i-dualb")
    # b's name is long enough that its host end's mark has no room for its IPv6 address
    # (the kernel keeps 255 bytes of an alias): its rule is found by the host end it names
    b = "b0-" + "x" * 100
    bed.stack.create([pod("a0", "dual-a"), pod(b, "dual-b")])
    (ns_a, _, ip_a), (ns_b, cid_b, ip_b) = bed.add("a0", node_a), bed.add(b, node_b)
    v6_a, v6_b = bed.ipv6["a0"], bed.ipv6[b]
    bed.vpc.sync()  # the VPC follows the cloud on its own thread: read it caught up
    assert bed.vpc.routes()[v6_a] == bed.eni_of(ip_a), "the cloud has a0's pair on two ENIs"
    device = device_index(node_a.netns, bed.vpc.devices("dual-a")[bed.eni_of(ip_a)])
    assert rules_in(node_a.netns, socket.AF_INET6) == {v6_a: [table_of(device)]}
    assert default_route(node_a.netns, table_of(device), socket.AF_INET6) == [
        ("fd70:0:0:1::1", device)]
    assert ping(ns_a, v6_b), "a0 cannot ping b0 over IPv6"
    assert ping(ns_b, v6_a), "b0 cannot ping a0 over IPv6"
    assert ping(ns_a, ip_b), "the IPv4 half does not work beside it"

    assert rules_in(node_b.netns, socket.AF_INET6) != {} and host_routes(node_b.netns, v6_b)
    with contextlib.closing(iproute(netns_path(node_b.netns))) as ipr:
        (link,) = ipr.get_links(ipr.link_lookup(ifname=veth_names(cid_b, "eth0")[0])[0])
        mark = str(link.get_attr("IFLA_IFALIAS"))
    assert f'"a":"{ip_b}"' in mark and '"a6"' not in mark, mark
    status, body = AgentClient(bed.stack.socket_of("dual-b")).delete(cid_b, None, b)
    assert status == 200, body
    assert rules_in(node_b.netns, socket.AF_INET6) == {}
    assert host_routes(node_b.netns, v6_b) == []
    bed.stack.kubectl("delete", "pod", b, "--wait=false")
    wait_for("b0's IPv6 address unassigned", lambda: v6_b not in bed.sim.addresses())
    bed.vpc.sync()
    assert v6_b not in bed.vpc.routes()
    assert not ping(ns_a, v6_b, count=2), "a released IPv6 address answered"
    assert bed.vpc.errors == []


def test_dual_stack_bbc_pods_ping_over_ipv6_through_the_machines_one_eni(
        bbc_dual_bed: Bed) -> None:
    """BBC dual stack: each pod gets an IPv4/IPv6 pair on its machine's one ENI (the IPv6
    half from batchAddIp's IPv6 form), a rule from each half to the ENI's table, whose
    IPv6 default route goes to the subnet's IPv6 gateway; pods on two machines talk over
    IPv6; a deleted pod's pair leaves the cloud and its IPv6 address stops answering."""
    bed = bbc_dual_bed
    assert bed.stack is not None and bed.vpc is not None
    node_a, node_b = bed.node("bbc6-a", "i-bbc6a"), bed.node("bbc6-b", "i-bbc6b")
    bed.stack.create([pod("p0", "bbc6-a"), pod("q0", "bbc6-b")])
    (ns_a, _, ip_a), (ns_b, cid_b, ip_b) = bed.add("p0", node_a), bed.add("q0", node_b)
    v6_a, v6_b = bed.ipv6["p0"], bed.ipv6["q0"]
    held = bed.sim.addresses()
    assert held[ip_a] == held[v6_a] == "i-bbc6a" and held[ip_b] == held[v6_b] == "i-bbc6b"
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network(BBC_CIDR6) for a in (v6_a, v6_b))
    bed.vpc.sync()
    assert bed.vpc.routes()[v6_a] == bed.vpc.routes()[ip_a], "a pair on two ENIs"
    (eni_a,) = bed.vpc.devices("bbc6-a").values()
    device = device_index(node_a.netns, eni_a)
    assert rules_in(node_a.netns, socket.AF_INET6) == {v6_a: [table_of(device)]}
    assert default_route(node_a.netns, table_of(device), socket.AF_INET6) == [
        ("fd71:0:0:1::1", device)]
    assert ping(ns_a, v6_b), "p0 cannot ping q0 over IPv6"
    assert ping(ns_b, v6_a), "q0 cannot ping p0 over IPv6"
    assert ping(ns_a, ip_b), "the IPv4 half does not work beside it"

    status, body = AgentClient(bed.stack.socket_of("bbc6-b")).delete(cid_b, None, "q0")
    assert status == 200, body
    assert rules_in(node_b.netns, socket.AF_INET6) == {}
    assert host_routes(node_b.netns, v6_b) == []
    bed.stack.kubectl("delete", "pod", "q0", "--wait=false")
    wait_for("q0's pair deleted from the machine",
             lambda: not {ip_b, v6_b} & set(bed.sim.addresses()))
    bed.vpc.sync()
    assert v6_b not in bed.vpc.routes()
    assert not ping(ns_a, v6_b, count=2), "a released IPv6 address answered"
    assert bed.vpc.errors == []


def host_ends(netns: str) -> list[str]:
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        return [str(link.get_attr("IFLA_IFNAME")) for link in ipr.get_links()
                if str(link.get_attr("IFLA_IFNAME")).startswith("pne")]


def leftovers(netns: str) -> dict[str, list[Any]]:
    """What of podnet's ENI dataplane is in namespace ``netns``: rules, host routes,
    tables' default routes, host ends (both families)."""
    with contextlib.closing(iproute(netns_path(netns))) as ipr:
        found: dict[str, list[Any]] = {"rules": [], "host routes": [], "tables": [],
                                       "host ends": []}
        for family in (socket.AF_INET, socket.AF_INET6):
            found["rules"] += [r.get_attr("FRA_SRC") for r in ipr.get_rules(family=family)
                               if r.get_attr("FRA_PRIORITY") == RULE_PRIORITY]
            for route in ipr.get_routes(family=family, proto=PROTO):
                table = route.get_attr("RTA_TABLE")
                key = "host routes" if table == 254 else "tables"
                found[key].append((table, route.get_attr("RTA_DST")))
    found["host ends"] = host_ends(netns)
    return found


def converged(bed: Bed, nodes: dict[str, NodeNamespace],
              pods: dict[str, tuple[str, str, str]], where: dict[str, str]) -> None:
    """Each pod's one rule looks up its ENI's table (the cloud's ENI), one host end per
    pod, and every pod answers a ping from a pod on another node."""
    assert bed.vpc is not None
    for name, n in nodes.items():
        rules = rules_in(n.netns)
        mine = {p for p, node in where.items() if node == name}
        assert set(rules) == {pods[p][2] for p in mine}, (name, rules)
        devices = bed.vpc.devices(name)
        for p in mine:
            index = device_index(n.netns, devices[bed.eni_of(pods[p][2])])
            assert rules[pods[p][2]] == [table_of(index)], (p, rules)
        assert sorted(host_ends(n.netns)) == sorted(
            veth_names(pods[p][1], "eth0")[0] for p in mine)
    for name, (_, _, ip) in pods.items():
        other = next(p for p in pods if where[p] != where[name])
        assert ping(pods[other][0], ip), f"{name} ({ip}) does not answer a ping"


def delete_all(bed: Bed, nodes: dict[str, NodeNamespace],
               pods: dict[str, tuple[str, str, str]], where: dict[str, str]) -> None:
    """DEL every pod, delete the pods; once the cloud disposed of their ENIs nothing of
    the dataplane is left on the nodes."""
    assert bed.stack is not None
    for name, (_, cid, _) in pods.items():
        status, body = AgentClient(bed.stack.socket_of(where[name])).delete(cid, None, name)
        assert status == 200, (name, body)
    bed.stack.kubectl("delete", "pod", *pods, "--wait=false")
    wait_for("every secondary ENI disposed", lambda: not any(
        e.id for e in attached_state(bed.sim) if e.addresses[1:]) and not bed.sim.addresses())
    for name, n in nodes.items():
        wait_for(f"nothing left on {name}", lambda n=n: leftovers(n.netns) == {
            "rules": [], "host routes": [], "tables": [], "host ends": []}, timeout=20)


def test_kill_9_of_ecs_agents_during_a_burst_of_adds_converges_and_leaves_nothing(
        bed: Bed) -> None:
    """Two ECS nodes, eight pods ADDed at once (two ENIs attached on each meanwhile);
    both agents are killed with SIGKILL part-way and started again: every ADD, retried as a runtime
    does, succeeds, each pod's rule looks up its own ENI's table, every pod answers a
    ping, and once the pods are gone nothing is left."""
    assert bed.stack is not None
    nodes = bed.nodes("kill-a", "kill-b")
    where = {f"{n[-1]}{i}": n for n in nodes for i in range(4)}
    bed.stack.create([pod(p, n) for p, n in where.items()])
    with ThreadPoolExecutor(max_workers=len(where)) as pool:
        futures = {p: pool.submit(bed.add, p, nodes[n], patient=True) for p, n in where.items()}
        # at the first host end: most ADDs are still on their way (waiting for their
        # record, an ENI's attach, or plugging)
        _wait_for("the first host end", lambda: any(
            host_ends(n.netns) for n in nodes.values()), 30, interval=0.02)
        plugged_before = sum(len(host_ends(n.netns)) for n in nodes.values())
        killed = time.monotonic()
        for name in nodes:
            bed.stack.kill(Stack.agent_name(name))
        for n in nodes.values():
            bed.start_agent(n, wait=False)
        bed.wait_ready(*nodes)
        pods = {p: f.result() for p, f in futures.items()}
    print(f"converged {time.monotonic() - killed:.1f} s after the kill "
          f"({plugged_before} of {len(where)} host ends made before it)")
    assert plugged_before < len(where), "the kill did not hit the burst"
    converged(bed, nodes, pods, where)
    delete_all(bed, nodes, pods, where)


def test_cloud_throttling_and_5xx_while_pods_are_plugged_converge_and_leave_nothing(
        bed: Bed) -> None:
    """The simulator throttles a share of the calls and answers 5xx to others (the
    controller's allocations and the agents' ENI look-ups both meet them) while pods on
    two nodes are ADDed: every ADD ends well, every pod answers a ping, and once the pods
    are gone nothing is left."""
    assert bed.stack is not None
    nodes = bed.nodes("fault-a", "fault-b")
    where = {f"{n[-1]}{i}": n for n in nodes for i in range(3)}
    with bed.sim.lock:
        bed.sim.throttle_rate = 0.1
        bed.sim.fault_rate = 0.1
    bed.sim.fail_next("CreateNetworkInterface", "ServiceUnavailable", 2)
    bed.sim.fail_next("DescribeNetworkInterfaces", "InternalError", 2)
    before = sum(bed.sim.calls.values())
    bed.stack.create([pod(p, n) for p, n in where.items()])
    with ThreadPoolExecutor(max_workers=len(where)) as pool:
        futures = {p: pool.submit(bed.add, p, nodes[n], patient=True) for p, n in where.items()}
        pods = {p: f.result() for p, f in futures.items()}
    with bed.sim.lock:
        scripted_left = {api: codes for api, codes in bed.sim.scripted.items() if codes}
    print(f"{sum(bed.sim.calls.values()) - before} cloud calls while plugging")
    assert scripted_left == {}, f"faults never met: {scripted_left}"
    bed.sim.clear_faults()
    converged(bed, nodes, pods, where)
    delete_all(bed, nodes, pods, where)
