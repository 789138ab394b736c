"""The node agent's NetworkPolicy enforcer (``podnet.node.netpol.PolicyEnforcer``) over the
in-memory cluster, programming a throwaway network namespace's nftables: rebuilt from the
API at start and reported, applied only when the table changes, an ADD's pod programmed
before the informer has it, a failure reported and refused for a selected pod,
``enforce=False`` removing the table.

Needs root, network namespaces and nft; skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY, POD, POD_NETWORK
from podnet.core.netpol.status import AGENT_REPORT_ANNOTATION
from podnet.linux import nftables as nf
from podnet.linux.nftables import HostPort
from podnet.node.netpol import PolicyEnforcer
from podnet.sim.memory import InMemoryCluster
from podnet.testing.netns import netns_unavailable
from podnet.testing.waiting import wait_for as _wait_for

WHY = netns_unavailable() or (None if shutil.which("nft") else "nft is not installed")
pytestmark = pytest.mark.skipif(WHY is not None, reason=WHY or "")

NODE = "n1"


def pod(name: str, node: str = NODE, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}",
                         "labels": labels},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}}


def record(name: str, ip: str, node: str = NODE) -> dict[str, Any]:
    return {"apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"podnet.io/node": node}},
            "spec": {"podName": name, "podUid": f"uid-{name}", "nodeName": node,
                     "provider": "reference"},
            "status": {"phase": "Routed", "ip": ip, "prefixLength": 24}}


def web_policy(name: str = "web") -> dict[str, Any]:
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"podSelector": {"matchLabels": {"role": "server"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "client"}}}],
                                  "ports": [{"port": 80}]}]}}


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"pnenf-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield f"/run/netns/{name}"
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@pytest.fixture
def cluster() -> InMemoryCluster:
    c = InMemoryCluster()
    c.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": "default"}})
    for name, ip, labels in (("a", "10.0.0.2", {"role": "server"}),
                             ("b", "10.0.0.3", {"role": "client"})):
        c.create(POD, pod(name, **labels))
        routed(c, name, ip)
    c.create(POD, pod("far", "n2", role="server"))
    routed(c, "far", "10.0.1.2", "n2")
    return c


def routed(c: InMemoryCluster, name: str, ip: str, node: str = NODE) -> None:
    """The pod's default record, Routed (the status written as the controller does)."""
    made = c.create(POD_NETWORK, record(name, ip, node))
    c.update_status(POD_NETWORK, {**made, "status": record(name, ip, node)["status"]})


PORTS = {"default/a": HostPort("pnvaaaa", ("10.0.0.2",)),
         "default/b": HostPort("pnvbbbb", ("10.0.0.3",))}


def make(cluster: InMemoryCluster, netns: str, ports: dict[str, HostPort] | None = None,
         **options: Any) -> PolicyEnforcer:
    chosen = PORTS if ports is None else ports
    return PolicyEnforcer(cluster, NODE, ports=lambda: dict(chosen), netns=netns,
                          **options)


def test_rebuilt_from_the_api_at_start_reported_and_applied_only_when_it_changes(
        cluster: InMemoryCluster, netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    changed: list[int] = []
    enforcer = make(cluster, netns, changed=lambda: changed.append(1))
    enforcer.start()
    try:
        listing = nf.read(netns=netns)
        assert listing is not None
        chains = nf.listed_chains(listing)
        assert set(chains) == {nf.BASE_CHAIN, "in_pnvaaaa"}  # b is not selected
        # the clause: b's address, port 80
        in_a = chains["in_pnvaaaa"]
        assert in_a[0]["comment"] == "default/web"
        report = json.loads(enforcer.annotations()[AGENT_REPORT_ANNOTATION])
        generation = cluster.get(NETWORK_POLICY, "web", "default")["metadata"].get(
            "generation", 0)
        assert report == {"programmed": {"default/web": generation}, "failed": {}}
        assert changed and enforcer.applied == 1
        assert enforcer.program() is False  # nothing changed: nothing applied
        assert enforcer.applied == 1
    finally:
        enforcer.stop()
    assert nf.read(netns=netns) is not None  # stopping leaves the table in place


def test_no_member_here_no_table_and_the_policy_deleted_removes_it(
        cluster: InMemoryCluster, netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    enforcer = make(cluster, netns, ports={})
    for informer in enforcer._informers:
        informer.start()
    enforcer.program()
    assert nf.read(netns=netns) is None
    enforcer.ports = lambda: dict(PORTS)
    enforcer.program()
    assert nf.read(netns=netns) is not None
    cluster.delete(NETWORK_POLICY, "web", "default")
    _wait_for("the deletion seen", lambda: enforcer.policies.pump(0.2) >= 0
              and not enforcer.policies.keys(), timeout=10)
    enforcer.program()
    assert nf.read(netns=netns) is None
    assert enforcer.annotations() == {}


def test_an_adds_pod_is_programmed_before_the_informer_has_it(cluster: InMemoryCluster,
                                                             netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    ports = dict(PORTS)
    # the agent's own records informer has the new pod's record (its ADD waited for it)
    enforcer = make(cluster, netns, local_record=lambda key: (
        ("default/new", "reference", ("10.0.0.9",)) if key == "default/new" else None))
    enforcer.ports = lambda: ports
    for informer in enforcer._informers:
        informer.start()
    enforcer.program()
    # a new selected pod, its record on this node; the enforcer's informers have not
    # seen either
    new = cluster.create(POD, pod("new", role="server"))
    routed(cluster, "new", "10.0.0.9")
    ports["default/new"] = HostPort("pnvnew", ("10.0.0.9",))
    enforcer.admit(new)
    assert "in_pnvnew" in nf.listed_chains(nf.read(netns=netns) or [])


def test_a_table_nft_refuses_is_reported_failed_and_refused_to_a_selected_pod(
        cluster: InMemoryCluster, netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    # a chain name nft refuses (longer than its limit)
    bad = {"default/a": HostPort("x" * 300, ("10.0.0.2",))}
    enforcer = make(cluster, netns, ports=bad)
    for informer in enforcer._informers:
        informer.start()
    assert enforcer.program() is False
    report = json.loads(enforcer.annotations()[AGENT_REPORT_ANNOTATION])
    assert list(report["failed"]) == ["default/web"] and report["programmed"] == {}
    assert "nft" in report["failed"]["default/web"]
    with pytest.raises(nf.NftablesError):
        enforcer.admit(cluster.get(POD, "a", "default"))
    # a pod no policy selects is plugged all the same
    enforcer.admit(cluster.get(POD, "b", "default"))


def test_enforce_false_removes_the_table_and_programs_nothing(cluster: InMemoryCluster,
                                                              netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    first = make(cluster, netns)
    first.start()
    first.stop()
    assert nf.read(netns=netns) is not None
    other = make(cluster, netns, enforce=False)
    other.start()
    try:
        assert nf.read(netns=netns) is None
        other.admit(cluster.get(POD, "a", "default"))
        assert nf.read(netns=netns) is None
        assert other.annotations() == {}
    finally:
        other.stop()


def test_a_table_deleted_by_hand_is_applied_again_an_intact_one_is_left_alone(
        cluster: InMemoryCluster, netns: str) -> None:
    cluster.create(NETWORK_POLICY, web_policy())
    enforcer = make(cluster, netns, resync=0.2)
    enforcer.start()
    try:
        assert enforcer.applied == 1
        checked = enforcer._checked
        _wait_for("two looks at the kernel", lambda: enforcer._checked > checked + 0.3,
                  timeout=20)
        assert enforcer.applied == 1  # as programmed: not applied again
        nf.remove(netns=netns)
        _wait_for("the table back", lambda: nf.read(netns=netns) is not None, timeout=20)
        assert enforcer.applied == 2
    finally:
        enforcer.stop()


def in_namespace(doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    doc["metadata"]["namespace"] = namespace
    return doc


def peers_policy() -> dict[str, Any]:
    """role=server takes port 80 from role=client of its namespace and of the namespaces
    labelled team=blue."""
    client = {"matchLabels": {"role": "client"}}
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "peers", "namespace": "default"},
            "spec": {"podSelector": {"matchLabels": {"role": "server"}},
                     "policyTypes": ["Ingress"],
                     "ingress": [{"from": [{"podSelector": client},
                                           {"namespaceSelector": {
                                               "matchLabels": {"team": "blue"}},
                                            "podSelector": client}],
                                  "ports": [{"port": 80}]}]}}


def test_a_node_follows_its_own_pods_until_a_policy_selects_one_then_its_peers_on_any_node(
        cluster: InMemoryCluster, netns: str) -> None:
    """No policy selects a pod of this node: it follows no pod of another node and no
    record (the cluster's churn costs it nothing). Once one does, the peers the policy
    names on other nodes, in its namespace and in a namespace its selector matches, are
    in the table, and follow their pods' changes; the policy gone, it follows them no
    more."""
    cluster.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "blue", "labels": {"team": "blue"}}})
    cluster.create(NAMESPACE, {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "red", "labels": {"team": "red"}}})
    for namespace, name, ip in (("blue", "bc", "10.0.2.2"), ("red", "rc", "10.0.3.2")):
        cluster.create(POD, in_namespace(pod(name, "n2", role="client"), namespace))
        made = cluster.create(POD_NETWORK, in_namespace(record(name, ip, "n2"), namespace))
        cluster.update_status(POD_NETWORK, {**made, "status": record(name, ip, "n2")["status"]})
    enforcer = make(cluster, netns)
    enforcer.start()
    try:
        assert sorted(enforcer.pods.keys()) == ["default/a", "default/b"]
        assert enforcer.peers.scope == frozenset() and not enforcer.peers.pods()
        assert nf.read(netns=netns) is None

        def in_table(ip: str) -> bool:
            return f'"{ip}"' in json.dumps(nf.read(netns=netns) or [])

        cluster.create(NETWORK_POLICY, peers_policy())
        _wait_for("the policy's table", lambda: in_table("10.0.0.3"), timeout=20)
        assert enforcer.peers.scope == frozenset({"default", "blue"})
        assert in_table("10.0.2.2")  # blue's client, on n2
        assert not in_table("10.0.3.2")  # red's is not a peer
        assert not in_table("10.0.1.2")  # far (n2) is a server, not a client
        # a peer made on another node after the start joins; relabelled, it leaves
        cluster.create(POD, pod("late", "n2", role="client"))
        routed(cluster, "late", "10.0.1.7", "n2")
        _wait_for("the late peer in the table", lambda: in_table("10.0.1.7"), timeout=20)
        late = cluster.get(POD, "late", "default")
        late["metadata"]["labels"] = {"role": "other"}
        cluster.update(POD, late)
        _wait_for("the relabelled peer out", lambda: not in_table("10.0.1.7"), timeout=20)
        # a namespace relabelled into the selector brings its pods
        red = cluster.get(NAMESPACE, "red")
        red["metadata"]["labels"] = {"team": "blue"}
        cluster.update(NAMESPACE, red)
        _wait_for("red's client in the table", lambda: in_table("10.0.3.2"), timeout=20)
        assert enforcer.peers.scope == frozenset({"default", "blue", "red"})
        cluster.delete(NETWORK_POLICY, "peers", "default")
        _wait_for("the table removed", lambda: nf.read(netns=netns) is None, timeout=20)
        assert enforcer.peers.scope == frozenset() and not enforcer.peers.pods()
    finally:
        enforcer.stop()


def test_the_namespaces_followed_are_those_a_policys_members_and_peers_can_be_in() -> None:
    from podnet.core.netpol.wire import read_policy
    from podnet.node.netpol import MAX_PEER_NAMESPACES, peer_namespaces

    def spec(rules: dict[str, Any]) -> Any:
        return read_policy({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                            "metadata": {"name": "p", "namespace": "home"},
                            "spec": {"podSelector": {}, **rules}})

    labels = {"home": {}, "blue": {"team": "blue"}, "red": {"team": "red"}}
    ingress_from = lambda *peers: spec({"ingress": [{"from": list(peers)}]})  # noqa: E731
    # deny all, an ipBlock, any peer: the policy's own namespace only
    assert peer_namespaces([spec({"policyTypes": ["Ingress"]})], labels) == {"home"}
    assert peer_namespaces([ingress_from({"ipBlock": {"cidr": "10.0.0.0/8"}})],
                           labels) == {"home"}
    assert peer_namespaces([spec({"ingress": [{}]})], labels) == {"home"}
    # a namespaceSelector: the namespaces it matches (by name too)
    assert peer_namespaces([ingress_from({"namespaceSelector": {
        "matchLabels": {"team": "blue"}}})], labels) == {"home", "blue"}
    assert peer_namespaces([ingress_from({"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "red"}}})], labels) == {"home", "red"}
    # every namespace: one cluster-wide watch
    assert peer_namespaces([ingress_from({"namespaceSelector": {}})], labels) is None
    assert peer_namespaces([spec({"policyTypes": ["Egress"], "egress": [
        {"ports": [{"port": "http"}]}]})], labels) is None
    many = {f"ns{i}": {"team": "blue"} for i in range(MAX_PEER_NAMESPACES)}
    assert peer_namespaces([ingress_from({"namespaceSelector": {
        "matchLabels": {"team": "blue"}}})], {**labels, **many}) is None
