"""The node agent against careless runtimes and hostile callers, with real packets:
``podnet apiserver``, ``podnet run`` and ``podnet node`` as processes, pods as network
namespaces (the kit's node bed), requests sent to the agent's socket as the plugin (or
anyone who can open it) would.

One record's address is on one interface at most: two sandboxes of one pod ADDed at the
same moment, the same container ADDed under a second interface name, an attachment taken
off a running pod. A request the agent refuses leaves the live sandbox as it was; the
node's own namespace is never a pod's; every field is checked by the agent itself.

Needs root, network namespaces and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    ATTACHMENT,
    NODE,
    AgentClient,
    Host,
    NodeNamespace,
    Stack,
    addresses_in,
    in_netns,
    links_in,
    ping,
    pod,
)
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


@pytest.fixture
def client(stack: Stack, node: NodeNamespace) -> AgentClient:
    """The node's agent (in the node's namespace), ready, and a client of its socket."""
    stack.agent(NODE, netns=node.netns, add_timeout=30)
    agent = AgentClient(stack.socket)
    wait_for("the agent ready", lambda: os.path.exists(stack.socket) and agent.ready())
    return agent


def _holders(paths: list[str], ip: str) -> list[str]:
    """The namespaces (of ``paths``) that have ``ip`` on an interface."""
    return [p for p in paths
            if any(a.startswith(f"{ip}/") for addrs in addresses_in(p).values()
                   for a in addrs)]


def _host_ends(netns: str) -> list[str]:
    from podnet.plugins.reference.dataplane import HOST_PREFIX

    return [n for n in links_in(netns) if n.startswith(HOST_PREFIX)]


def _default_route(netns: str) -> str:
    done = subprocess.run(["ip", "-n", netns, "route", "show", "default"],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_two_sandboxes_of_one_pod_added_at_once_leave_one_interface_with_the_address(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    """A runtime retrying with a new sandbox while the first ADD still runs: both ADDs
    are answered, and exactly one sandbox holds the address (and one host end exists)."""
    stack.create([pod("twin")])
    wait_for("twin Routed", lambda: stack.records().get("twin", {}).get("status", {})
             .get("phase") == "Routed")
    ip = stack.records()["twin"]["status"]["ip"]
    paths: list[str] = []
    for _ in range(4):
        sandboxes = [(host.container(), host.netns()[1]) for _ in range(2)]
        paths += [p for _, p in sandboxes]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda s: client.add(s[0], s[1], "twin"), sandboxes))
        assert all(code == 200 for code, _ in answers), answers
        assert len(_holders(paths, ip)) == 1, (
            f"{ip} is on {_holders(paths, ip)}: one record, one interface")
        assert len(_host_ends(node.netns)) == 1, _host_ends(node.netns)


def test_the_same_container_under_a_second_interface_name_is_refused(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    stack.create([pod("once")])
    cid, (_, path) = host.container(), host.netns()
    code, result = client.add(cid, path, "once")
    assert code == 200, result
    code, err = client.add(cid, path, "once", if_name="eth1")
    assert code == 400 and err["code"] == 7 and err["msg"].startswith("ifName"), err
    assert "eth0" in err["msg"], err
    assert sorted(addresses_in(path)) == ["eth0", "lo"]
    assert len(_host_ends(node.netns)) == 1
    # the first interface is untouched: the same ADD still converges on it
    assert client.add(cid, path, "once") == (200, result)


def test_an_attachment_taken_off_a_running_pod_is_unplugged_before_its_release(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    stack.create([pod("multi", networks=ATTACHMENT)])
    cid, (_, path) = host.container(), host.netns()
    code, result = client.add(cid, path, "multi")
    assert code == 200, result
    assert sorted(addresses_in(path)) == ["eth0", "lo", "net1"]
    blue = stack.records(ATTACHMENT)["multi"]["status"]["ip"]

    stack.kubectl("annotate", "pod", "multi", "podnet.io/networks-")
    # released (the record gone) well within the unplug timeout (120 s): on the agent's
    # word that net1 is gone, which it must be by then
    wait_for("the attachment's record released",
             lambda: "multi" not in stack.records(ATTACHMENT), timeout=60)
    assert "net1" not in addresses_in(path)
    assert veth_names(cid, "net1")[0] not in links_in(node.netns)
    assert not _holders([path], blue)
    # the default network's interface stays
    assert client.check(cid, path, "multi")[0] in (200, 409)
    assert "eth0" in addresses_in(path)


def test_a_refused_add_for_a_new_sandbox_leaves_the_live_one_serving(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    """A new sandbox's ADD whose netns is not a namespace, or whose interface name is
    taken there by a link that is not podnet's: error 7, and the pod's live sandbox still
    has its interface and answers pings."""
    stack.create([pod("live"), pod("peer")])
    peer_ns, peer_path = host.netns()
    assert client.add(host.container(), peer_path, "peer")[0] == 200
    live_cid, (_, live_path) = host.container(), host.netns()
    code, result = client.add(live_cid, live_path, "live")
    assert code == 200, result
    ip = result["ips"][0]["address"].split("/")[0]
    assert ping(peer_ns, ip)

    def live_untouched() -> None:
        assert addresses_in(live_path).get("eth0") == [result["ips"][0]["address"]], (
            "the live sandbox lost its interface to a refused ADD")
        assert ping(peer_ns, ip), "the live sandbox lost its network to a refused ADD"

    with tempfile.NamedTemporaryFile(prefix="podnet-not-a-netns-") as plain:
        code, err = client.add(host.container(), plain.name, "live")
    live_untouched()
    assert code == 400 and err["code"] == 7 and err["msg"].startswith("netns"), err

    taken_ns, taken_path = host.netns()
    subprocess.run(["ip", "-n", taken_ns, "link", "add", "eth0", "type", "veth", "peer",
                    "name", "other0"], check=True)
    code, err = client.add(host.container(), taken_path, "live")
    live_untouched()
    assert code == 400 and err["code"] == 7 and "eth0" in err["msg"], err
    assert err["msg"].startswith("ifName"), err
    assert client.add(live_cid, live_path, "live") == (200, result)


def test_the_nodes_own_namespace_is_never_a_pods(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    """CNI_NETNS naming the agent's namespace (the node's), by its path or through
    /proc, or the host's: error 7, and the node keeps its addresses and default route."""
    stack.create([pod("intruder")])
    wait_for("intruder Routed", lambda: stack.records().get("intruder", {})
             .get("status", {}).get("phase") == "Routed")
    before = (addresses_in(node.netns), _default_route(node.netns))
    agent_pid = stack.procs["agent"].pid
    for netns in (f"/run/netns/{node.netns}", f"/proc/{agent_pid}/ns/net", "/proc/1/ns/net"):
        code, err = client.add(host.container(), netns, "intruder")
        assert code == 400 and err["code"] == 7 and err["msg"].startswith("netns"), (
            netns, err)
        assert (addresses_in(node.netns), _default_route(node.netns)) == before, netns
    assert _host_ends(node.netns) == []


@pytest.mark.parametrize(("field", "value"), [
    ("ifName", "a/b"), ("ifName", "x" * 16), ("ifName", ".."), ("ifName", "eth 0"),
    ("ifName", "eth:0"), ("ifName", "eth\n0"),
    ("containerId", "../../etc"), ("containerId", "c" * 65), ("containerId", "-x"),
    ("netns", "relative/path"),
    ("podName", "Not_A_Pod"), ("podName", "a/b"), ("podNamespace", "x" * 64),
    ("podUid", "../uid"),
])
def test_a_malformed_field_sent_straight_to_the_socket_is_error_7_naming_it(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host, field: str,
        value: str) -> None:
    _, path = host.netns()
    body: dict[str, Any] = {"cniVersion": "1.1.0", "containerId": host.container(),
                            "netns": path, "ifName": "eth0", "podNamespace": "default",
                            "podName": "nobody", "podUid": None, "network": "podnet",
                            "config": {}, field: value}
    for verb in ("add", "check", "del"):
        if verb == "del" and field == "netns":
            continue  # a DEL needs no namespace: one it cannot use is ignored
        code, err = client.request("POST", f"/v1/cni/{verb}", body)
        assert code == 400 and err["code"] == 7 and err["msg"].startswith(field), (verb, err)
    assert links_in(path) == ["lo"]
    assert _host_ends(node.netns) == []


def test_a_pod_with_the_longest_names_kubernetes_allows_is_plugged_and_kept(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    """A 63-character namespace and a 253-character pod name make a record key of 317
    characters, more than a link alias holds: the pod is plugged, a restarted agent
    keeps its interface (not a leftover), and DEL removes it."""
    namespace, name = "n" * 63, ".".join(["p" * 63] * 4)[:253]
    stack.kubectl("create", "namespace", namespace)
    stack.create([pod(name, namespace=namespace)])
    cid, (_, path) = host.container(), host.netns()
    code, result = client.add(cid, path, name, namespace=namespace)
    assert code == 200, result
    ip = result["ips"][0]["address"].split("/")[0]
    done = in_netns(node.netns, """
        import json
        from podnet.plugins.reference.dataplane import BridgeDataplane
        print(json.dumps([p.owner for p in BridgeDataplane().plugs()]))
    """)
    assert done.returncode == 0, done.stderr
    assert [owner[:1] for owner in json.loads(done.stdout)] == ["#"], done.stdout

    stack.stop("agent")
    stack.agent(NODE, netns=node.netns)
    wait_for("the agent ready again", client.ready)
    assert _holders([path], ip) == [path], "the restarted agent took the pod's interface"
    code, report = client.request("GET", "/v1/agent/report")
    assert code == 200 and len(report["plugged"]) == 1, report
    assert report["plugged"][0].startswith(f"{namespace}/"), report
    assert client.delete(cid, path, name, namespace=namespace)[0] == 200
    assert _host_ends(node.netns) == []


def test_a_name_taken_in_a_first_sandbox_is_error_7_with_http_400(
        stack: Stack, client: AgentClient, node: NodeNamespace, host: Host) -> None:
    """No other sandbox to unplug: the provider's plug refuses the taken name itself,
    touching nothing; the answer is the caller's to fix (400, code 7), not a fault."""
    stack.create([pod("first")])
    taken_ns, taken_path = host.netns()
    subprocess.run(["ip", "-n", taken_ns, "link", "add", "eth0", "type", "veth", "peer",
                    "name", "other0"], check=True)
    code, err = client.add(host.container(), taken_path, "first")
    assert (code, err["code"]) == (400, 7) and "eth0" in err["msg"], (code, err)
    assert sorted(links_in(taken_path)) == ["eth0", "lo", "other0"]
    assert _host_ends(node.netns) == []
