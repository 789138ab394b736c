"""NetworkPolicy enforced by the node agent on the ENI dataplanes (ECS, BBC: routed veths,
the forward hook seeing each pod's host end), through the VPC bed of
``tests/test_eni_dataplane.py``: a policy applied with kubectl lets the allowed pod in on
its port and drops the rest, between pods of one node (out through one ENI and back
through another) and across nodes.

Needs root, network namespaces, nft and kubectl; skipped with the reason otherwise.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from podnet.testing.nodebed import PortServers, pod, probe
from tests.test_eni_dataplane import WHY as ENI_WHY
from tests.test_eni_dataplane import Bed, bbc_bed, bed, wait_for  # noqa: F401 (fixtures)

WHY = ENI_WHY or (None if shutil.which("nft") else "nft is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

TIMEOUT = 0.5

POLICY: dict[str, Any] = {
    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
    "metadata": {"name": "web", "namespace": "default"},
    "spec": {"podSelector": {"matchLabels": {"role": "server"}},
             "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                          "ports": [{"protocol": "TCP", "port": 80}]}]}}


def labelled(name: str, node: str, role: str) -> dict[str, Any]:
    doc = pod(name, node)
    doc["metadata"]["labels"] = {"role": role}
    return doc


def enforced(bed: Bed, server: str, client: str, other: str,  # noqa: F811
             nodes: dict[str, Any]) -> None:
    assert bed.stack is not None
    bed.stack.create([labelled(server, nodes[server].name, "server"),
                      labelled(client, nodes[client].name, "client"),
                      labelled(other, nodes[other].name, "other")])
    pods = {name: bed.add(name, nodes[name]) for name in (server, client, other)}
    (ns_s, _, ip_s), (ns_c, _, _), (ns_o, _, _) = (pods[server], pods[client], pods[other])
    with PortServers(ns_s, ip_s):
        assert probe(ns_o, ip_s, 80, timeout=2.0) == "ok"
        bed.stack.create([POLICY])
        wait_for("the other pod denied", lambda: probe(ns_o, ip_s, 80,
                                                       timeout=TIMEOUT) == "timeout")
        assert probe(ns_c, ip_s, 80, timeout=2.0) == "ok"
        assert probe(ns_c, ip_s, 81, timeout=TIMEOUT) == "timeout"
        assert probe(ns_c, ip_s, 80, "UDP", timeout=TIMEOUT) == "timeout"
        bed.stack.kubectl("delete", "networkpolicy", "web")
        wait_for("open again", lambda: probe(ns_o, ip_s, 80, timeout=TIMEOUT) == "ok")


def test_ecs_pods_of_one_node_and_of_another_as_the_policy_says(
        bed: Bed) -> None:  # noqa: F811
    nodes = bed.nodes("ecs-a", "ecs-b")
    # the client on the server's node (out through an ENI, back through the VPC), the
    # other pod on the other node
    enforced(bed, "srv", "cli", "oth", {"srv": nodes["ecs-a"], "cli": nodes["ecs-a"],
                                        "oth": nodes["ecs-b"]})


def test_bbc_pods_on_two_machines_as_the_policy_says(
        bbc_bed: Bed) -> None:  # noqa: F811
    node_a, node_b = bbc_bed.node("bbc-a", "i-bbca"), bbc_bed.node("bbc-b", "i-bbcb")
    enforced(bbc_bed, "srv", "cli", "oth", {"srv": node_a, "cli": node_b, "oth": node_a})
