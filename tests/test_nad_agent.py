"""Which networks a request to the node agent serves when the pod lists Multus
attachments: the runtime's own call (the default network and ``podnet.io/networks``, whose
automatic names skip the ones Multus takes), or Multus's delegate call for one NAD (its
interface names it). The agent reads the pod from the in-memory cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podnet.core.cluster.port import NAMESPACE, NODE, POD
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.node import DEFAULT_NAMESPACE, NodeAgent
from podnet.node.protocol import CniError
from podnet.sim.memory import InMemoryCluster

NODE_NAME = "node-a"
NS = "team-a"
MULTUS = "k8s.v1.cni.cncf.io/networks"


@pytest.fixture
def agent() -> Iterator[NodeAgent]:
    cluster = InMemoryCluster()
    for ns in (DEFAULT_NAMESPACE, NS):
        cluster.create(NAMESPACE, {"metadata": {"name": ns}})
    cluster.create(NODE, {"metadata": {"name": NODE_NAME}})
    made = NodeAgent(cluster, Providers(new_plugin_manager()), NODE_NAME, add_timeout=0)
    made.records.start()
    try:
        yield made
    finally:
        made.records.stop()


def add_pod(agent: NodeAgent, name: str, annotations: dict[str, str]) -> None:
    agent.cluster.create(POD, {"metadata": {"name": name, "namespace": NS,
                                            "annotations": annotations},
                               "spec": {"nodeName": NODE_NAME, "containers": []}})


def test_the_runtimes_call_and_each_delegates(agent: NodeAgent) -> None:
    add_pod(agent, "p", {MULTUS: "blue, other/green@data0",
                         "podnet.io/networks": "storage, backup"})
    # the runtime's own call: podnet's networks, named past Multus's net1 and data0
    assert agent._networks_of(NS, "p", "eth0") == (
        ("default", None), ("storage", "net2"), ("backup", "net3"))
    # Multus's delegates: one NAD each, by the interface Multus gives it
    assert agent._networks_of(NS, "p", "net1") == ((f"{NS}/blue", "net1"),)
    assert agent._networks_of(NS, "p", "data0") == (("other/green", "data0"),)
    assert agent._delegate_network(NS, "p", "data0", None) == "other/green"
    assert agent._delegate_network(NS, "p", "eth0", None) is None
    assert agent._delegate_network(NS, "missing", "net1", None) is None


def test_without_multus_nothing_changes(agent: NodeAgent) -> None:
    add_pod(agent, "p", {"podnet.io/networks": "storage@net2, backup"})
    assert agent._networks_of(NS, "p", "eth0") == (
        ("default", None), ("storage", "net2"), ("backup", "net1"))


@pytest.mark.parametrize(("annotations", "named"), [
    ({MULTUS: "blue", "podnet.io/networks": "storage@net1"}, [MULTUS, "entry 1"]),
    ({MULTUS: "blue,Bad"}, [MULTUS, "entry 2"]),
    ({MULTUS: '[{"name": "blue", "ips": ["x"]}]'}, [MULTUS, "ips"]),
])
def test_what_no_call_can_serve_is_error_7(agent: NodeAgent, annotations: dict[str, str],
                                            named: list[str]) -> None:
    add_pod(agent, "p", annotations)
    for if_name in ("eth0", "net1"):
        with pytest.raises(CniError) as info:
            agent._networks_of(NS, "p", if_name)
        assert info.value.code == 7
        for name in named:
            assert name in info.value.msg


def test_a_nad_networks_reference_bridge_is_an_interface_name() -> None:
    from podnet.node.protocol import if_name_problem
    from podnet.plugins.reference.dataplane import bridge_name

    names = {n: bridge_name(n) for n in ("a/b", "team-a/blue", "team-a/blue.v2",
                                         "team-b/blue", "default", "blue")}
    for network, name in names.items():
        assert if_name_problem(name) is None, (network, name)
    assert len(set(names.values())) == len(names)
    assert names["blue"] == "pnbr-blue"  # podnet.io/networks' names are kept
    assert "/" not in names["a/b"] and names["a/b"].startswith("pnbr-a_b.")
