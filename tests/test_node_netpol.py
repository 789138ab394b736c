"""NetworkPolicy enforced by the node agent, on the node bed (``podnet apiserver``, ``podnet
run`` with the reference provider and ``podnet node`` as processes; the node a network
namespace of its own, pods namespaces behind the reference bridge): policies applied with
kubectl deny and allow as the API says, by real packets; an ADD's pod is in the table
before the ADD answers; kill -9 of the agent keeps denied flows denied at every probe and
an established allowed flow alive, and the restarted agent rebuilds the table before it
serves ADD; ``--network-policy none`` removes the table.

Needs root, network namespaces, nft and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from podnet.linux import nftables as nf
from podnet.plugins.reference.dataplane import veth_names
from podnet.testing.netns import netns_unavailable
from podnet.testing.nodebed import (
    NODE,
    AgentClient,
    HeldFlow,
    Host,
    NodeNamespace,
    PortServers,
    Prober,
    Stack,
    pod,
    probe,
)
from podnet.testing.waiting import wait_for as _wait_for

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or next(
    (f"{tool} is not installed" for tool in ("kubectl", "nft") if not shutil.which(tool)), None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

TIMEOUT = 0.5


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    _wait_for(what, check, timeout, interval=0.3)


def labelled(name: str, **labels: str) -> dict[str, Any]:
    doc = pod(name)
    doc["metadata"]["labels"] = labels
    return doc


def policy(name: str, selector: dict[str, str], ingress: list[dict[str, Any]] | None,
           ) -> dict[str, Any]:
    spec: dict[str, Any] = {"podSelector": {"matchLabels": selector},
                            "policyTypes": ["Ingress"]}
    if ingress:
        spec["ingress"] = ingress
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


class Pods:
    """Pods ADDed on the node bed's node: name -> (netns, address, container)."""

    def __init__(self, stack: Stack, host: Host) -> None:
        self.client = AgentClient(stack.socket)
        self.host = host
        self.made: dict[str, tuple[str, str, str]] = {}

    def add(self, name: str) -> tuple[str, str, str]:
        netns, path = self.host.netns()
        cid = self.host.container()
        code, result = self.client.add(cid, path, name)
        assert code == 200, result
        self.made[name] = (netns, result["ips"][0]["address"].split("/")[0], cid)
        return self.made[name]

    def delete(self, name: str) -> None:
        netns, _, cid = self.made.pop(name)
        code, body = self.client.delete(cid, f"/run/netns/{netns}", name)
        assert code == 200, body

    def netns(self, name: str) -> str:
        return self.made[name][0]

    def ip(self, name: str) -> str:
        return self.made[name][1]

    def host_interface(self, name: str) -> str:
        return veth_names(self.made[name][2], "eth0")[0]


@pytest.fixture
def started(stack: Stack, node: NodeNamespace, host: Host) -> Iterator[Pods]:
    stack.agent(NODE, netns=node.netns)
    pods = Pods(stack, host)
    wait_for("the agent ready", pods.client.ready)
    stack.create([labelled("a", role="client"), labelled("b", role="server"),
                  labelled("c", role="other")])
    servers = []
    try:
        for name in ("a", "b", "c"):
            pods.add(name)
            servers.append(PortServers(pods.netns(name), pods.ip(name)).__enter__())
        yield pods
    finally:
        for each in servers:
            each.__exit__()


def table(node: NodeNamespace) -> list[dict[str, Any]] | None:
    return nf.read(netns=f"/run/netns/{node.netns}")


def reported(stack: Stack) -> dict[str, Any]:
    lease = json.loads(stack.kubectl("get", "lease", "-n", "kube-system",
                                     f"podnet-node-{NODE}", "-o", "json"))
    text = (lease["metadata"].get("annotations") or {}).get("podnet.io/network-policies")
    return json.loads(text) if text else {}


def test_a_policy_applied_with_kubectl_denies_and_allows_by_packets(
        stack: Stack, node: NodeNamespace, started: Pods) -> None:
    pods = started
    b = pods.ip("b")
    assert probe(pods.netns("c"), b, 80, timeout=TIMEOUT) == "ok"
    assert table(node) is None  # no policy: no table at all

    stack.create([policy("web", {"role": "server"}, [
        {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
         "ports": [{"protocol": "TCP", "port": 80}]}])])
    wait_for("c denied to b", lambda: probe(pods.netns("c"), b, 80,
                                            timeout=TIMEOUT) == "timeout")
    assert probe(pods.netns("a"), b, 80, timeout=TIMEOUT) == "ok"
    assert probe(pods.netns("a"), b, 81, timeout=TIMEOUT) == "timeout"
    assert probe(pods.netns("a"), b, 80, "UDP", timeout=TIMEOUT) == "timeout"
    # b is restricted inward only; its own connects and their replies pass
    assert probe(pods.netns("b"), pods.ip("c"), 81, timeout=TIMEOUT) == "ok"
    # the node reaches its pod (kubelet probes)
    assert probe(node.netns, b, 81, timeout=TIMEOUT) == "ok"
    stored = json.loads(stack.kubectl("get", "networkpolicy", "web", "-o", "json"))
    generation = stored["metadata"].get("generation", 0)
    wait_for("the report", lambda: reported(stack) == {
        "programmed": {"default/web": generation}, "failed": {}})

    # c relabelled as a client: allowed
    stack.kubectl("label", "pod", "c", "role=client", "--overwrite")
    wait_for("c allowed to b", lambda: probe(pods.netns("c"), b, 80,
                                             timeout=TIMEOUT) == "ok")

    # a new selected pod is in the table before its ADD answers
    stack.create([labelled("d", role="server")])
    pods.add("d")
    listing = table(node)
    assert listing is not None
    d_chain = nf.chain_names(pods.host_interface("d"))[0]
    assert d_chain in nf.listed_chains(listing)
    with PortServers(pods.netns("d"), pods.ip("d")):
        assert probe(pods.netns("a"), pods.ip("d"), 81, timeout=TIMEOUT) == "timeout"
        assert probe(pods.netns("a"), pods.ip("d"), 80, timeout=TIMEOUT) == "ok"
    # and leaves it once DELeted
    pods.delete("d")
    wait_for("d's chain gone", lambda: d_chain not in nf.listed_chains(table(node) or []))

    # the policy deleted: open again, and no table left
    stack.kubectl("delete", "networkpolicy", "web")
    wait_for("the table removed", lambda: table(node) is None)
    assert probe(pods.netns("a"), b, 81, timeout=TIMEOUT) == "ok"


def test_kill_9_keeps_denied_denied_and_the_flow_and_the_restart_rebuilds_before_add(
        stack: Stack, node: NodeNamespace, started: Pods) -> None:
    pods = started
    b = pods.ip("b")
    stack.create([policy("web", {"role": "server"}, [
        {"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
         "ports": [{"protocol": "TCP", "port": 80}]}])])
    wait_for("c denied to b", lambda: probe(pods.netns("c"), b, 80,
                                            timeout=TIMEOUT) == "timeout")
    flow = HeldFlow(pods.netns("a"), b, 80)
    try:
        assert flow.talk()
        with Prober(pods.netns("c"), b, 80, timeout=0.3) as denied:
            denied.wait(3)
            stack.kill("agent")
            denied.wait(3)
            assert table(node) is not None, "the table went with the agent"
            assert flow.talk(), "the killed agent cut an established flow"
            # a change while no agent runs: the restart must have it before it serves
            stack.create([policy("more", {"role": "server"}, [
                {"from": [{"podSelector": {"matchLabels": {"role": "other"}}}],
                 "ports": [{"protocol": "TCP", "port": 81}]}])])
            stack.agent(NODE, netns=node.netns)
            wait_for("the agent ready again", pods.client.ready)
            comments = nf.listed_comments(table(node) or [])
            assert "default/more" in comments, comments
            denied.wait(3)
        assert flow.talk(), "the restart cut an established flow"
    finally:
        flow.close()
    assert denied.verdicts and set(denied.verdicts) == {"timeout"}, denied.verdicts
    assert probe(pods.netns("c"), b, 81, timeout=TIMEOUT) == "ok"


def test_network_policy_none_removes_the_table_and_programs_nothing(
        stack: Stack, node: NodeNamespace, started: Pods) -> None:
    pods = started
    stack.create([policy("deny", {"role": "server"}, None)])
    wait_for("b denied", lambda: probe(pods.netns("a"), pods.ip("b"), 80,
                                       timeout=TIMEOUT) == "timeout")
    stack.stop("agent")
    assert table(node) is not None
    stack.agent(NODE, netns=node.netns, args=["--network-policy", "none"])
    wait_for("the agent ready", pods.client.ready)
    assert table(node) is None
    assert probe(pods.netns("a"), pods.ip("b"), 80, timeout=TIMEOUT) == "ok"
    assert reported(stack) == {}
    assert os.path.exists(stack.socket)
