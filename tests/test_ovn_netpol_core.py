"""NetworkPolicy objects to OVN flows through core: the engine's NetworkPolicy reconciler
resolves ``networking.k8s.io/v1`` objects (pod and namespace selectors, a named port)
and calls the OVN provider's ``podnet_network_policy``, which writes into a real NB;
``ovn-trace`` follows northd's flows. A label flipped on a running pod, a second policy,
a namespace relabelled and a deletion are followed; the policy's status says
Programmed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from test_ovn_provider import northd

from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY, POD, Obj
from podnet.core.netpol.status import STATUS_ANNOTATION
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.harness import EngineRig
from podnet.testing.ovnbed import OvnCentral, parse_trace

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

SUBNETS = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True}]


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


class Rig(EngineRig):
    def add_pod(self, ns: str, name: str, node: str, labels: dict[str, str],
                ports: list[dict[str, Any]] | None = None) -> Obj:
        container: dict[str, Any] = {"name": "app", "image": "i"}
        if ports:
            container["ports"] = ports
        return self.cluster.create(POD, {
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"nodeName": node, "containers": [container]},
            "status": {"phase": "Running"}})

    def status_of(self, name: str, ns: str = "x") -> dict[str, Any]:
        obj = self.cluster.get(NETWORK_POLICY, name, ns)
        text = (obj["metadata"].get("annotations") or {}).get(STATUS_ANNOTATION)
        return json.loads(text) if text else {}


@pytest.fixture
def rig(nb_server: NbServer) -> Iterator[Rig]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, seed=7)
    made = Rig([("ovn", plugin)], config={"defaultProvider": "ovn"}, namespaces=("x", "y"))
    try:
        yield made
    finally:
        plugin.close()


def passes(central: OvnCentral, rig: Rig, src: str, dst: str, dport: int) -> bool:
    a, b = rig.record(src)["status"], rig.record(dst)["status"]
    flow = [f'inport=="{a["interface"]}"', f"eth.src=={a['mac']}", f"eth.dst=={b['mac']}",
            f"ip4.src=={a['ip']}", f"ip4.dst=={b['ip']}", "ip.ttl==64",
            f"tcp.src==40000 && tcp.dst=={dport} && tcp.flags==2"]
    done = central.tool("ovn-trace", f"--db={central.sb_remote}", "--detailed",
                        *["--ct=trk,new"] * 4, a["subnet"], " && ".join(flow))
    t = parse_trace(done.stdout)
    if t.delivered == (b["interface"],):
        return True
    assert t.dropped and t.stage is not None and "acl" in t.stage, t.text
    return False


def matrix(central: OvnCentral, rig: Rig, cases: list[tuple[str, str, int, bool]]) -> None:
    central.sync()
    wrong = [f"{s}->{d}:{p} {'passes' if not want else 'dropped'}, expected "
             f"{'passes' if want else 'dropped'}"
             for s, d, p, want in cases if passes(central, rig, s, d, p) != want]
    assert not wrong, "\n".join(wrong)


def test_policies_through_core_to_ovn_flows(rig: Rig, nb_server: NbServer) -> None:
    node = rig.node(0)
    rig.add_pod("x", "a", node, {"app": "web"})
    rig.add_pod("x", "b", node, {"app": "db"}, ports=[{"name": "pg", "containerPort": 5432}])
    rig.add_pod("y", "c", node, {"app": "web"})
    rig.add_pod("y", "d", node, {"app": "other"})
    rig.settle()
    rig.cluster.create(NETWORK_POLICY, {"metadata": {"name": "db", "namespace": "x"}, "spec": {
        "podSelector": {"matchLabels": {"app": "db"}},
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                     "ports": [{"port": "pg"}]}]}})
    rig.settle()
    status = rig.status_of("db")
    programmed = [c for c in status["conditions"] if c["type"] == "Programmed"]
    assert programmed and programmed[0]["status"] == "True", status
    assert rig.engine.pm.hook.podnet_network_policy_keys(provider="ovn") == ["x/db"]
    with northd(nb_server) as central:
        matrix(central, rig, [
            ("a", "b", 5432, True),       # web of x, the named port
            ("a", "b", 80, False),
            ("c", "b", 5432, False),      # web of another namespace
            ("d", "b", 5432, False),
            ("b", "a", 80, True),         # egress not restricted; a not selected
            ("c", "d", 80, True),
        ])
        # a second policy: everything from namespaces labelled team=y; y gets the label
        rig.cluster.create(NETWORK_POLICY, {"metadata": {"name": "from-y", "namespace": "x"},
                                            "spec": {
            "podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "y"}}}]}]}})
        rig.settle()
        matrix(central, rig, [("c", "b", 80, False), ("a", "b", 5432, True)])
        rig.cluster.patch(NAMESPACE, "y", {"metadata": {"labels": {"team": "y"}}})
        rig.settle()
        matrix(central, rig, [("c", "b", 80, True), ("d", "b", 5432, True),
                              ("a", "b", 80, False)])
        # a's label flipped: it is no longer a web pod
        rig.cluster.patch(POD, "a", {"metadata": {"labels": {"app": "batch"}}}, "x")
        rig.settle()
        matrix(central, rig, [("a", "b", 5432, False), ("c", "b", 5432, True)])
        # both deleted: b is open again, nothing of them is left in NB
        rig.cluster.delete(NETWORK_POLICY, "db", "x")
        rig.cluster.delete(NETWORK_POLICY, "from-y", "x")
        rig.settle()
        matrix(central, rig, [("a", "b", 80, True), ("d", "b", 81, True)])
    assert rig.engine.pm.hook.podnet_network_policy_keys(provider="ovn") == []
