"""The node agent with real packets: ``podnet apiserver``, ``podnet run`` (the reference
provider) and ``podnet node`` as separate processes; "pods" are network namespaces the test
makes (the bed is the kit's, :mod:`podnet.testing.nodebed`); the test drives the agent over
its unix socket as the CNI plugin does (:class:`AgentClient`), or runs the plugin itself.

Two pods on the node ping each other and hold a TCP connection over the reference bridge
network; a DEL removes the pod's veth and leaves its address recorded, released only once
the pod is gone; a restarted agent removes leftovers of records that no longer exist.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    ATTACHMENT,
    NODE,
    POD_CIDR,
    AgentClient,
    Host,
    Stack,
    TcpServer,
    addresses_in,
    node_object,
    ping,
    pod,
    tcp_talk,
)
from podnet.testing.waiting import wait_for as _wait_for

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


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


def test_two_pods_ping_and_talk_tcp_del_removes_the_veth_not_the_address(
        stack: Stack, host: Host) -> None:
    from pyroute2 import IPRoute

    from podnet.plugins.reference.dataplane import veth_names

    stack.create([node_object(NODE, POD_CIDR)])
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

    with TcpServer(ns_b, ip_b, 8080):
        talk = tcp_talk(ns_a, ip_b, 8080, "from a")
    assert talk.returncode == 0, talk.stderr
    assert talk.stdout.strip() == f"hello {ip_a} from a"

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

    # a restarted agent removes leftovers of records that no longer exist: a's record is
    # released while the agent is down, its veth stays until the agent is back
    stack.stop("agent")
    stack.kubectl("delete", "pod", "a", "--wait=false")
    wait_for("a's record released", lambda: "a" not in stack.records())
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


def test_add_times_out_with_error_11_and_bad_input_names_the_field(
        stack: Stack, host: Host, tmp_path: Path) -> None:
    stack.create([node_object(NODE, POD_CIDR)])
    stack.agent(add_timeout=1)
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


def test_a_pod_with_two_networks_has_two_interfaces(stack: Stack, host: Host) -> None:
    from pyroute2 import IPRoute

    from podnet.plugins.reference.dataplane import veth_names

    stack.create([node_object(NODE, POD_CIDR)])
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

    stack.create([node_object(NODE, POD_CIDR)])
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
