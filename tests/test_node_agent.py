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

import ipaddress
import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.cni import add_as_a_runtime, pod_args, run_cni
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    ATTACHMENT,
    NODE,
    POD_CIDR,
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
)
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


def test_two_pods_ping_and_talk_tcp_del_removes_the_veth_not_the_address(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    stack.agent(NODE, netns=node.netns)
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
    assert host_b not in links_in(node.netns)
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
    assert host_a in links_in(node.netns)
    stack.agent(NODE, netns=node.netns)
    wait_for("the restarted agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)

    wait_for("a's leftover veth removed", lambda: host_a not in links_in(node.netns))
    wait_for("a's record released once its veth is gone", lambda: "a" not in stack.records())


def test_add_times_out_with_error_11_and_bad_input_names_the_field(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    stack.agent(NODE, netns=node.netns, add_timeout=1)
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


def test_a_pod_with_two_networks_has_two_interfaces(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    stack.agent(NODE, netns=node.netns)
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
    for itf in ("eth0", "net1"):
        assert veth_names(cid, itf)[0] not in links_in(node.netns)


def test_the_runtime_runs_podnet_cni_against_the_agent(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """The real client: ``podnet-cni`` run as a runtime runs it (environment, config on
    stdin, an older cniVersion), against the real agent: two pods ping each other; CHECK
    passes; DEL removes the interface and, run again, still succeeds."""

    stack.agent(NODE, netns=node.netns)
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


# --- nodes as network namespaces -----------------------------------------------------------


def test_pods_on_two_nodes_ping_and_hold_tcp_over_the_underlay(
        stack: Stack, underlay: Underlay, host: Host) -> None:
    """Each node its own namespace and its own agent; the bridge and the host ends live
    in the node's namespace; the router routes each podCIDR to its node."""
    from podnet.plugins.reference.dataplane import bridge_name, veth_names

    nodes = [underlay.add_node("node-a", "10.93.0.0/24"),
             underlay.add_node("node-b", "10.93.1.0/24")]
    stack.create([node_object(n.name, n.pod_cidr, n.address) for n in nodes])
    for n in nodes:
        internal = json.loads(stack.kubectl("get", "node", n.name, "-o", "json"))
        assert {"type": "InternalIP", "address": n.address} in internal["status"]["addresses"]
        stack.agent(n.name, netns=n.netns)
    stack.create([pod("a", "node-a"), pod("b", "node-b")])

    pods: dict[str, tuple[str, str, str]] = {}
    for name, n in zip(("a", "b"), nodes, strict=True):
        config = {"cniVersion": "1.1.0", "name": "podnet", "type": "podnet-cni",
                  "agentSocket": stack.socket_of(n.name)}
        wait_for(f"the agent of {n.name} ready", AgentClient(stack.socket_of(n.name)).ready)
        ns, path = host.netns()
        cid = host.container()
        done = run_cni("ADD", config, {"CNI_CONTAINERID": cid, "CNI_NETNS": path,
                                       "CNI_ARGS": pod_args(name=name, uid=None)})
        assert done.ok, done.stdout + done.stderr
        address = done.output["ips"][0]["address"]
        assert ipaddress.ip_interface(address) in ipaddress.ip_network(n.pod_cidr), address
        pods[name] = (ns, cid, address.split("/")[0])
        # the dataplane is the node's: bridge and host end in its namespace, not here
        host_end = veth_names(cid, "eth0")[0]
        assert {bridge_name("default"), host_end} <= set(links_in(n.netns))
        assert host_end not in links_in()
    (ns_a, _, ip_a), (ns_b, _, ip_b) = pods["a"], pods["b"]

    assert ping(ns_a, ip_b), "a cannot ping b on the other node"
    assert ping(ns_b, ip_a), "b cannot ping a on the other node"
    with TcpServer(ns_b, ip_b, 8080):
        talk = tcp_talk(ns_a, ip_b, 8080, "from a")
    assert talk.returncode == 0, talk.stderr
    assert talk.stdout.strip() == f"hello {ip_a} from a"  # no NAT on the way

    # what no pod has is not answered: a free address of b's podCIDR, and an address in
    # no node's podCIDR (the router has no route for it)
    free = str(list(ipaddress.ip_network(nodes[1].pod_cidr).hosts())[-1])
    assert free != ip_b
    assert not ping(ns_a, free, count=2), f"{free} answered, no pod has it"
    assert not ping(ns_a, "10.94.0.9", count=2), "an address outside every podCIDR answered"
    talk = tcp_talk(ns_a, free, 8080, "nobody", timeout=3)
    assert talk.returncode != 0, f"a TCP connection to {free} was made"


# --- the hard cases -------------------------------------------------------------------------


def _start_agent(stack: Stack, node: NodeNamespace, *, add_timeout: float = 30
                 ) -> dict[str, Any]:
    """The node's agent, ready; the plugin's config for it."""
    stack.agent(NODE, netns=node.netns, add_timeout=add_timeout)
    wait_for("the agent ready", AgentClient(stack.socket).ready)
    return {"cniVersion": "1.1.0", "name": "podnet", "type": "podnet-cni",
            "agentSocket": stack.socket}


def _host_ends(netns: str) -> list[str]:
    from podnet.plugins.reference.dataplane import HOST_PREFIX, PEER_PREFIX

    return [n for n in links_in(netns) if n.startswith((HOST_PREFIX, PEER_PREFIX))]


def _plugs_in(netns: str) -> list[str]:
    """What the reference provider's ``podnet_plugs`` lists in the node's namespace."""
    done = in_netns(netns, """
        import json
        from podnet.plugins.reference.dataplane import BridgeDataplane
        print(json.dumps([p.host_interface for p in BridgeDataplane().plugs()]))
    """)
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_kill_9_of_the_agent_during_50_adds_the_retries_converge_and_del_leaves_nothing(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    from podnet.plugins.reference.dataplane import veth_names

    config = _start_agent(stack, node)
    names = [f"burst-{i:02d}" for i in range(50)]
    stack.create([pod(n) for n in names])
    sandboxes = {n: (*host.netns(), host.container()) for n in names}
    envs = {n: {"CNI_CONTAINERID": cid, "CNI_NETNS": path,
                "CNI_ARGS": pod_args(name=n, uid=None)}
            for n, (_, path, cid) in sandboxes.items()}

    refusals: list[int | None] = []

    def add_after_the_kill(env: dict[str, str]) -> tuple[Any, list[int | None]]:
        """An ADD that first meets the killed agent, then retries as a runtime does."""
        refused = run_cni("ADD", config, env)
        refusals.append(refused.error_code)
        done, seen = add_as_a_runtime(config, env)
        return done, [refused.error_code, *seen]

    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        # the kill comes part-way through the first ten (some plugged, some in flight);
        # the other forty start while the agent is down. Timing it by the host ends alone
        # lost the race on a loaded host: all fifty were plugged before the kill
        futures = {n: pool.submit(add_as_a_runtime, config, envs[n]) for n in names[:10]}
        wait_for("the first host ends", lambda: len(_host_ends(node.netns)) >= 5)
        plugged_before = len(_host_ends(node.netns))
        stack.kill("agent")
        futures.update({n: pool.submit(add_after_the_kill, envs[n]) for n in names[10:]})
        wait_for("forty ADDs refused by the killed agent", lambda: len(refusals) == 40)
        stack.agent(NODE, netns=node.netns)
        outcomes = {n: f.result() for n, f in futures.items()}

    for n, (done, _) in outcomes.items():
        assert done.ok, f"{n}: {done.stdout}{done.stderr}"
    retried = [n for n, (_, seen) in outcomes.items() if seen]
    assert plugged_before < len(names) and retried, "the kill did not hit the burst"
    assert all(code == 11 for _, seen in outcomes.values() for code in seen)

    # nothing plumbed twice: one host end per container, one interface in each pod, the
    # addresses unique and the records'
    records = stack.records()
    expected = sorted(veth_names(cid, "eth0")[0] for _, _, cid in sandboxes.values())
    assert sorted(_host_ends(node.netns)) == expected
    addresses = set()
    for n, (_, path, _) in sandboxes.items():
        ip = records[n]["status"]["ip"]
        assert links_in(path) == ["eth0", "lo"], n
        assert addresses_in(path)["eth0"] == [f"{ip}/24"], n
        assert outcomes[n][0].output["ips"][0]["address"] == f"{ip}/24", n
        addresses.add(ip)
    assert len(addresses) == len(names)

    with ThreadPoolExecutor(max_workers=10) as pool:
        dels = list(pool.map(lambda n: run_cni("DEL", config, envs[n]), names))
    assert all(d.ok for d in dels), [d.stdout for d in dels if not d.ok]
    assert _host_ends(node.netns) == []
    assert _plugs_in(node.netns) == []


def test_half_made_veth_pairs_are_converged_by_add_or_removed_at_start(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """The states a crash between the dataplane's steps leaves, made by hand: a retried
    ADD converges each to one pair; the restarted agent removes a marked pair whose
    record is gone; DEL removes an unmarked pair (its name comes from the container)."""
    from podnet.plugins.reference.dataplane import ALIAS_MARK, veth_names

    stack.create([pod("peer-on-host"), pod("peer-not-renamed"), pod("unmarked"),
                  pod("given-up")])

    def half_pair(cid: str, key: str | None, peer_in: str | None) -> None:
        host_end, peer = veth_names(cid, "eth0")
        subprocess.run(["ip", "-n", node.netns, "link", "add", host_end, "type", "veth",
                        "peer", "name", peer, *(["netns", peer_in] if peer_in else [])],
                       check=True)
        if key is not None:
            alias = ALIAS_MARK + json.dumps({"c": cid, "i": "eth0", "n": "default", "k": key},
                                            separators=(",", ":"))
            subprocess.run(["ip", "-n", node.netns, "link", "set", host_end, "alias", alias],
                           check=True)

    sandboxes: dict[str, tuple[str, str, str]] = {}
    for name in ("peer-on-host", "peer-not-renamed", "unmarked"):
        ns, path = host.netns()
        sandboxes[name] = (ns, path, host.container())
    half_pair(sandboxes["peer-on-host"][2], "default/whatever", None)
    half_pair(sandboxes["peer-not-renamed"][2], "default/whatever",
              sandboxes["peer-not-renamed"][0])
    half_pair(sandboxes["unmarked"][2], None, sandboxes["unmarked"][0])
    gone = host.container()  # a pod deleted while the agent was down: no record
    half_pair(gone, "default/gone-0000", None)
    # an unmarked pair whose runtime gives up on the sandbox: DEL, no second ADD
    given_up_ns, given_up_path = host.netns()
    given_up = host.container()
    half_pair(given_up, None, given_up_ns)

    stack.agent(NODE, netns=node.netns)
    wait_for("the agent ready", AgentClient(stack.socket).ready)
    gone_ends = set(veth_names(gone, "eth0"))
    wait_for("the leftover of the gone record removed",
             lambda: not gone_ends & set(links_in(node.netns)))

    config = {"cniVersion": "1.1.0", "name": "podnet", "type": "podnet-cni",
              "agentSocket": stack.socket}
    for name, (_, path, cid) in sandboxes.items():
        done = run_cni("ADD", config, {"CNI_CONTAINERID": cid, "CNI_NETNS": path,
                                       "CNI_ARGS": pod_args(name=name, uid=None)})
        assert done.ok, f"{name}: {done.stdout}{done.stderr}"
        records = stack.records()
        assert links_in(path) == ["eth0", "lo"], name
        assert addresses_in(path)["eth0"] == [f"{records[name]['status']['ip']}/24"], name
    wanted = sorted(veth_names(cid, "eth0")[0] for _, _, cid in sandboxes.values())
    given_up_end = veth_names(given_up, "eth0")[0]
    assert sorted(_host_ends(node.netns)) == sorted([*wanted, given_up_end])
    assert sorted(_plugs_in(node.netns)) == wanted  # an unmarked pair is no one's plug

    wait_for("the given-up pod's record", lambda: "given-up" in stack.records())
    done = run_cni("DEL", config, {"CNI_CONTAINERID": given_up, "CNI_NETNS": given_up_path,
                                   "CNI_ARGS": pod_args(name="given-up", uid=None)})
    assert done.ok, done.stdout
    assert sorted(_host_ends(node.netns)) == wanted
    assert links_in(given_up_path) == ["lo"]


def test_a_pod_deleted_before_its_del_keeps_its_address_until_the_interface_is_gone(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """The release handshake with the agent up: the kubelet removes the pods before the
    runtime's DEL; their records stay Releasing, their addresses answer ping and belong to
    nobody else, until DEL removes the interfaces; the agent's reports for the whole
    burst cost fewer writes than pods."""
    stack.agent(NODE, netns=node.netns)
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet"})
    wait_for("the agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)
    names = [f"p{i}" for i in range(6)]
    stack.create([pod(n) for n in [*names, "watcher"]])
    sandboxes = {}
    for name in [*names, "watcher"]:
        ns, path = host.netns()
        cid = host.container()
        code, result = client.add(cid, path, name)
        assert code == 200, result
        sandboxes[name] = (ns, path, cid, result["ips"][0]["address"].split("/")[0])
    watcher = sandboxes["watcher"][0]
    before = client.request("GET", "/v1/agent/report")[1]
    # the heartbeat's renewals (a slow run lasts several) say nothing of the handshake
    writes_before = sum(before["writes"].values()) - before["renewals"]

    stack.kubectl("delete", "pod", *names, "--wait=false")
    wait_for("the records Releasing", lambda: all(
        stack.records().get(n, {}).get("status", {}).get("phase") == "Releasing"
        for n in names))
    time.sleep(3)  # more than the controller needs to release an address it may
    records = stack.records()
    for name in names:
        assert records[name]["status"]["ip"] == sandboxes[name][3], f"{name} released early"
    assert ping(watcher, sandboxes["p0"][3]), "the old interface still holds the address"
    # a new pod gets none of the held addresses
    stack.create([pod("late")])
    _ns_late, path_late = host.netns()
    code, late = client.add(host.container(), path_late, "late")
    assert code == 200, late
    assert late["ips"][0]["address"].split("/")[0] not in {s[3] for s in sandboxes.values()}

    for name in names:
        _ns, path, cid, _ip = sandboxes[name]
        assert client.delete(cid, path, name) == (200, {})
    wait_for("the records released once their interfaces are gone",
             lambda: not set(names) & set(stack.records()), timeout=30)
    report = client.request("GET", "/v1/agent/report")[1]
    assert report["plugged"] == sorted(
        f"default/{r['metadata']['name']}" for r in stack.records().values())
    writes = sum(report["writes"].values()) - report["renewals"] - writes_before
    assert 1 <= writes < len(names), f"{writes} report writes for {len(names)} pods"


@pytest.mark.parametrize("tamper", ["report deleted", "label removed", "second agent"])
def test_a_held_address_waits_whatever_is_done_to_the_agents_report(
        stack: Stack, node: NodeNamespace, host: Host, underlay: Underlay,
        tmp_path: Path, tamper: str) -> None:
    """R8: the pod is removed before the runtime's DEL; then its agent's report is deleted
    by hand, or unlabelled, or a second agent under the node's name starts on another
    host. The old eth0 still holds the address: the record keeps it, a new pod gets
    another, until the DEL removes the interface. The agent writes its report again; the
    second agent refuses the report (not ready, saying why)."""
    from podnet.core.objects import LABEL_AGENT_NODE, agent_lease_name

    lease = agent_lease_name(NODE)
    stack.agent(NODE, netns=node.netns)
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet"})
    wait_for("the agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)

    def report() -> dict[str, Any]:
        """The report Lease; {} while there is none."""
        out = stack.kubectl("get", "lease", "-n", "kube-system", lease, "-o", "json",
                            "--ignore-not-found")
        return json.loads(out) if out.strip() else {}

    def holder() -> str:
        return str(report()["spec"]["holderIdentity"])

    first = holder()
    stack.create([pod("old"), pod("watcher")])
    sandboxes = {}
    for name in ("old", "watcher"):
        ns, path = host.netns()
        cid = host.container()
        code, result = client.add(cid, path, name)
        assert code == 200, result
        sandboxes[name] = (ns, path, cid, result["ips"][0]["address"].split("/")[0])
    held = sandboxes["old"][3]
    stack.kubectl("delete", "pod", "old", "--wait=false")
    wait_for("the record Releasing", lambda: stack.records().get("old", {}).get(
        "status", {}).get("phase") == "Releasing")

    if tamper == "report deleted":
        stack.kubectl("delete", "lease", "-n", "kube-system", lease)
    elif tamper == "label removed":
        stack.kubectl("label", "lease", "-n", "kube-system", lease, f"{LABEL_AGENT_NODE}-")
    else:
        other = underlay.add_node("other-host", "10.93.9.0/24")
        second_socket = str(tmp_path / "run" / "second" / "agent.sock")
        stack.agent(NODE, netns=other.netns, name="agent-second",
                    args=["--socket", second_socket])
        second = AgentClient(second_socket, {"cniVersion": "1.1.0", "name": "podnet"})
        wait_for("the second agent answering", lambda: os.path.exists(second_socket)
                 and second.status()[0] != 0)
    time.sleep(3)  # more than the controller needs to release an address it may
    record = stack.records().get("old")
    assert record is not None and record["status"]["ip"] == held, (
        "released while the old eth0 holds it")
    if tamper == "second agent":
        code, said = second.status()
        assert code != 200 and "held by" in json.dumps(said), (
            f"two agents ready under one node name: {code} {said}")
        assert holder() == first, "the second agent took the report over"
    assert ping(sandboxes["watcher"][0], held), "the old interface still holds the address"
    stack.create([pod("late")])
    _ns, path_late = host.netns()
    code, late = client.add(host.container(), path_late, "late")
    assert code == 200, late
    assert late["ips"][0]["address"].split("/")[0] != held
    if tamper != "second agent":
        wait_for("the agent's report written again", lambda: LABEL_AGENT_NODE in report().get(
            "metadata", {}).get("labels", {}), timeout=30)
        assert holder() == first

    # the DEL removes the interface; the agent says so: the address goes back
    _ns, path, cid, _ip = sandboxes["old"]
    assert client.delete(cid, path, "old") == (200, {})
    wait_for("the record released once its interface is gone",
             lambda: "old" not in stack.records(), timeout=30)


def test_the_agents_spans_join_the_records_trace(
        stack_factory: Callable[..., Stack], host: Host, underlay: Underlay,
        tmp_path: Path) -> None:
    """One trace from the controller to the pod: the agent's node.add, node.plug and
    node.unplug spans are in the trace the record's allocation started."""
    from podnet.core.tracing import read_trace_file

    controller_trace, agent_trace = tmp_path / "controller.jsonl", tmp_path / "agent.jsonl"
    stack = stack_factory(controller_args=["--trace-file", str(controller_trace)])
    n = underlay.add_node(NODE, POD_CIDR)
    stack.create([node_object(NODE, POD_CIDR, n.address)])
    stack.agent(NODE, netns=n.netns, args=["--trace-file", str(agent_trace)])
    client = AgentClient(stack.socket, {"cniVersion": "1.1.0", "name": "podnet"})
    wait_for("the agent ready", lambda: os.path.exists(stack.socket)
             and client.status()[0] == 200)
    stack.create([pod("traced")])
    _ns, path = host.netns()
    cid = host.container()
    code, result = client.add(cid, path, "traced")
    assert code == 200, result
    assert client.delete(cid, path, "traced") == (200, {})
    record = stack.records()["traced"]
    trace_id = record["status"]["traceparent"].split("-")[1]
    stack.stop("agent")  # flushes its spans

    agent_spans = read_trace_file(agent_trace)
    mine = {s["name"]: s for s in agent_spans if s["traceId"] == trace_id}
    assert {"node.add", "node.plug", "node.unplug"} <= set(mine), sorted(
        (s["name"], s["traceId"]) for s in agent_spans)
    plug = mine["node.plug"]
    attributes = plug["attributes"]
    assert attributes["container.id"] == cid
    assert attributes["podnet.interface"] == "eth0"
    assert attributes["k8s.node.name"] == NODE
    assert attributes["podnet.object"] == f"default/{record['metadata']['name']}"
    assert attributes["podnet.ip"] == record["status"]["ip"]
    wait_for("the controller's spans written", lambda: controller_trace.exists()
             and any(s["traceId"] == trace_id for s in read_trace_file(controller_trace)))
    controller = {s["name"] for s in read_trace_file(controller_trace)
                  if s["traceId"] == trace_id}
    assert "pod_network.allocate" in controller, controller


def test_a_sandbox_recreated_for_the_same_pod_gets_the_same_address(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """DEL of the first sandbox, ADD of a new one (a new container id, a new namespace),
    as the kubelet does when a pod's sandbox dies: the record's address and MAC again,
    the old sandbox's host end gone, and the address answers from the new sandbox."""
    from podnet.plugins.reference.dataplane import veth_names

    config = _start_agent(stack, node)
    stack.create([pod("again"), pod("peer")])
    peer_ns, peer_path = host.netns()
    assert run_cni("ADD", config, {"CNI_CONTAINERID": host.container(), "CNI_NETNS": peer_path,
                                   "CNI_ARGS": pod_args(name="peer", uid=None)}).ok

    first_ns, first_path = host.netns()
    first = host.container()
    env = {"CNI_CONTAINERID": first, "CNI_NETNS": first_path,
           "CNI_ARGS": pod_args(name="again", uid=None)}
    done = run_cni("ADD", config, env)
    assert done.ok, done.stdout + done.stderr
    before = done.output
    assert run_cni("DEL", config, env).ok
    subprocess.run(["ip", "netns", "del", first_ns], check=True)  # the sandbox is gone

    _, second_path = host.netns()
    second = host.container()
    done = run_cni("ADD", config, {**env, "CNI_CONTAINERID": second,
                                   "CNI_NETNS": second_path})
    assert done.ok, done.stdout + done.stderr
    after = done.output
    assert after["ips"] == before["ips"]
    assert after["interfaces"][0]["mac"] == before["interfaces"][0]["mac"]
    assert after["interfaces"][0]["sandbox"] == second_path
    ends = set(_host_ends(node.netns))
    assert veth_names(first, "eth0")[0] not in ends
    assert veth_names(second, "eth0")[0] in ends
    ip = after["ips"][0]["address"].split("/")[0]
    assert ping(peer_ns, ip), "the recreated sandbox does not answer on its address"
    assert stack.records()["again"]["status"]["ip"] == ip

    # a third sandbox whose predecessor's DEL never came (the runtime lost it): one
    # record, one interface, so the second sandbox's is unplugged before the third's
    _third_ns, third_path = host.netns()
    third = host.container()
    done = run_cni("ADD", config, {**env, "CNI_CONTAINERID": third, "CNI_NETNS": third_path})
    assert done.ok, done.stdout + done.stderr
    ends = set(_host_ends(node.netns))
    assert veth_names(second, "eth0")[0] not in ends
    assert veth_names(third, "eth0")[0] in ends
    assert "eth0" not in addresses_in(second_path)
    assert addresses_in(third_path)["eth0"] == [after["ips"][0]["address"]]
    assert ping(peer_ns, ip), "the third sandbox does not answer on its address"


def test_add_for_a_pod_podnet_never_serves_is_error_7_at_once_and_plumbs_nothing(
        stack: Stack, node: NodeNamespace, host: Host) -> None:
    """A host-network pod, a pod bound to another node, a pod whose annotation the
    controller refused: ADD is error 7 naming the field, not a wait for a record that
    never comes (the plugin's agentTimeout is well below the agent's wait, so a wait
    would show as error 11), and nothing is left in the pod's namespace or on the node.
    A pod that does not exist yet is still a wait: error 11."""
    config = {**_start_agent(stack, node, add_timeout=60), "agentTimeout": 15}
    other = "node-elsewhere"
    stack.create([node_object(other, "10.93.9.0/24"),
                  pod("on-host", host_network=True),
                  pod("not-mine", other),
                  pod("bad-address", annotations={"podnet.io/ip-address": "10.93.0.300"}),
                  pod("bad-networks", networks="Not_A_Name")])
    wait_for("the controller's verdict on bad-address",
             lambda: any(c.get("reason") == "InvalidRequest" for c in
                         stack.records().get("bad-address", {}).get("status", {})
                         .get("conditions", [])))
    cases = {
        "on-host": ["spec.hostNetwork"],
        "not-mine": ["spec.nodeName", other],
        "bad-address": ["metadata.annotations[podnet.io/ip-address]", "10.93.0.300"],
        "bad-networks": ["podnet.io/networks"],
    }
    for name, named in cases.items():
        _, path = host.netns()
        done = run_cni("ADD", config, {"CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
                                       "CNI_ARGS": pod_args(name=name, uid=None)})
        done.check_error(7, f"default/{name}", *named)
        assert links_in(path) == ["lo"], name
        assert _host_ends(node.netns) == [], name

    stack.stop("agent")
    stack.agent(NODE, netns=node.netns, add_timeout=1)
    wait_for("the agent ready", AgentClient(stack.socket).ready)
    _, path = host.netns()
    done = run_cni("ADD", config, {"CNI_CONTAINERID": host.container(), "CNI_NETNS": path,
                                   "CNI_ARGS": pod_args(name="not-yet", uid=None)})
    done.check_error(11, "default/not-yet")
    assert links_in(path) == ["lo"]
