"""``podnet status`` and ``podnet audit``, end to end in one process.

An engine with the reference provider routes a few pods on an in-memory cluster; the API
emulator serves that same cluster on 127.0.0.1 and the commands read it through a
kubeconfig, as an operator would. The reference cloud keeps its state in a file, so the
audit's own provider instance sees the cloud the engine built, and the test can change
that cloud behind everyone's back.
"""

from __future__ import annotations

import ipaddress
import json
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml

from podnet.app.audit import NO_NODE_POOL, NODE_GONE, NOT_LOADED, audit
from podnet.app.cli import main
from podnet.app.records import read_records
from podnet.core.clock import FakeClock
from podnet.core.cluster.kube import KubeCluster
from podnet.core.cluster.port import NODE, NODE_NETWORK, POD, POD_NETWORK, NotFound
from podnet.core.plugin import Providers
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import ProviderInfo
from podnet.plugins.reference import provider as reference
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import EngineFactory, World, build_plugin_manager

PODS = 4
NODES = 2


@attrs.frozen
class Site:
    store: InMemoryCluster
    world: World
    cloud: ReferenceCloud
    kubeconfig: Path
    config: Path

    def podnet(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any]:
        """Run a command against the emulator; its exit status and its JSON output."""
        code = main([*args, "--kubeconfig", str(self.kubeconfig), "-o", "json"])
        out = capsys.readouterr().out
        return code, json.loads(out)

    def audit(self, capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
        return self.podnet(capsys, "audit", "--config", str(self.config),
                           "--provider", "reference")

    def records(self, kind: Any) -> list[dict[str, Any]]:
        return list(self.store.list(kind).items)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    state = tmp_path / "cloud.json"
    cloud = ReferenceCloud()
    cloud.persist_to(str(state))
    clock = FakeClock()
    store = InMemoryCluster(clock=clock)
    engines = EngineFactory(store, build_plugin_manager(ReferenceProvider(cloud=cloud)), clock,
                            provider=reference.NAME)
    world = World(store, clock, engines, cloud.all_addresses)
    for i in range(NODES):
        world.add_node(i)
    for i in range(PODS):
        world.add_pod(f"web-{i}", i % NODES)
    world.settle(advance=30)
    routed = [pn for pn in store.list(POD_NETWORK).items
              if pn.get("status", {}).get("phase") == "Routed"]
    assert len(routed) == PODS, "the engine did not route every pod"
    engines.stop(world.engine)  # the controller is down: the commands read what it left

    config = tmp_path / "podnet.yaml"
    config.write_text(yaml.safe_dump({
        "defaultProvider": reference.NAME,
        "providers": {reference.NAME: {"state_file": str(state)}},
    }))
    # `podnet audit` configures the module's own plugin; give it a cloud object of its own
    # (it is pointed at the state file) and put the shared one back afterwards
    monkeypatch.setattr(reference.plugin, "cloud", ReferenceCloud())
    with ApiServer(store) as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        yield Site(store, world, cloud, kubeconfig, config)
    world.close()


def _free_address(cloud: ReferenceCloud, cidr: str) -> str:
    used = set(cloud.all_addresses())
    hosts = list(ipaddress.ip_network(cidr).hosts())
    return next(str(h) for h in reversed(hosts) if str(h) not in used)


def test_status_json_lists_every_pool_and_pod_network(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    code, report = site.podnet(capsys, "status")
    assert code == 0
    truth = site.cloud.all_addresses()  # address -> node
    pns = {(pn["metadata"]["namespace"], pn["spec"]["podName"]): pn
           for pn in site.records(POD_NETWORK)}

    assert [(p["namespace"], p["name"]) for p in report["pods"]] == sorted(pns)
    for pod in report["pods"]:
        (net,) = pod["networks"]
        record = pns[(pod["namespace"], pod["name"])]
        assert net["phase"] == "Routed"
        assert net["ip"] == record["status"]["ip"]
        assert net["node"] == record["spec"]["nodeName"] == truth[net["ip"]]
        assert net["provider"] == reference.NAME
        assert net["ipv6"] is None and net["not_ready"] is None and net["error"] is None

    nns = {nn["metadata"]["name"]: nn for nn in site.records(NODE_NETWORK)}
    assert [n["name"] for n in report["nodes"]] == sorted(nns) and len(nns) == NODES
    for node in report["nodes"]:
        on_node = {ip for ip, name in truth.items() if name == node["name"]}
        pods_here = {net["ip"] for p in report["pods"] for net in p["networks"]
                     if net["node"] == node["name"]}
        assert node["provider"] == reference.NAME
        assert node["allocated"] == len(pods_here) > 0
        assert node["idle"] + node["allocated"] == len(on_node)
        assert node["idle"] >= 1, "the reference policy keeps idle addresses"
        assert node["idle"] == sum(i["idle"] for i in node["interfaces"])
        assert node["pool_not_ready"] is None and node["error"] is None
        recorded = {itf["id"] for itf in nns[node["name"]]["status"]["interfaces"]}
        assert {i["id"] for i in node["interfaces"]} == recorded


def test_status_filters_by_node_and_prints_tables(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    node = site.records(NODE)[0]["metadata"]["name"]
    _, report = site.podnet(capsys, "status", "--node", node)
    assert [n["name"] for n in report["nodes"]] == [node]
    assert report["pods"] and all(net["node"] == node
                                  for p in report["pods"] for net in p["networks"])
    _, elsewhere = site.podnet(capsys, "status", "--namespace", "no-such-namespace")
    assert elsewhere["pods"] == [] and len(elsewhere["nodes"]) == NODES

    assert main(["status", "--kubeconfig", str(site.kubeconfig)]) == 0
    table = capsys.readouterr().out
    for pn in site.records(POD_NETWORK):
        assert pn["spec"]["podName"] in table and pn["status"]["ip"] in table


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_waits_for_the_conditions_podnet_writes(site: Site, tmp_path: Path) -> None:
    """What the engine wrote: each condition names the generation it was written for; a
    healthy NodeNetwork says PoolReady=True, so `kubectl wait` returns; `kubectl get`
    shows both in its Ready column."""
    for kind, condition in ((NODE_NETWORK, "PoolReady"), (POD_NETWORK, "Ready")):
        for record in site.records(kind):
            conditions = record["status"]["conditions"]
            assert {c["type"]: c["status"] for c in conditions}[condition] == "True"
            assert all(c["observedGeneration"] == record["metadata"]["generation"]
                       for c in conditions), record

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", "--kubeconfig", str(site.kubeconfig),
                               "--cache-dir", str(tmp_path / "cache"), *args],
                              capture_output=True, text=True, timeout=60, check=False)

    node = site.records(NODE_NETWORK)[0]["metadata"]["name"]
    waited = kubectl("wait", "--for=condition=PoolReady", f"nodenetwork/{node}",
                     "--timeout=20s")
    assert waited.returncode == 0, waited.stderr
    assert f"nodenetwork.podnet.io/{node} condition met" in waited.stdout
    namespace = site.records(POD_NETWORK)[0]["metadata"]["namespace"]
    waited = kubectl("wait", "--for=condition=Ready", "pn", "--all", "-n", namespace,
                     "--timeout=20s")
    assert waited.returncode == 0, waited.stderr
    assert waited.stdout.count("condition met") == PODS
    rows = [line.split() for line in kubectl("get", "nn").stdout.splitlines()]
    assert rows[0][:2] == ["NAME", "READY"] and {r[1] for r in rows[1:]} == {"True"}
    rows = [line.split() for line in kubectl("get", "pn", "-n", namespace).stdout.splitlines()]
    assert rows[0][:3] == ["NAME", "READY", "PHASE"]
    assert {(r[1], r[2]) for r in rows[1:]} == {("True", "Routed")}


def test_the_tables_print_bracketed_text_as_it_is(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """What records say is text, never rich markup: a field path's brackets, a style tag
    and an emoji code reach the table unchanged."""
    said = "metadata.annotations[podnet.io/networks]: [bold]x[/bold] :smile: [red]"
    pn = site.records(POD_NETWORK)[0]
    pn["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                   "reason": "InvalidRequest", "message": said}]
    site.store.update_status(POD_NETWORK, pn)
    assert main(["status", "--kubeconfig", str(site.kubeconfig)]) == 0
    table = capsys.readouterr().out
    assert f"InvalidRequest: {said}" in table


def test_a_record_that_does_not_parse_is_shown_as_invalid(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    pn = site.records(POD_NETWORK)[0]
    pn["status"]["ip"] = "not-an-ip"
    site.store.update_status(POD_NETWORK, pn)
    code, report = site.podnet(capsys, "status")
    assert code == 0
    rows = [net for p in report["pods"] for net in p["networks"] if net["error"]]
    assert len(rows) == 1 and "status.ip" in rows[0]["error"]
    assert rows[0]["record"] == pn["metadata"]["name"]
    assert sum(len(p["networks"]) for p in report["pods"]) == PODS

    code, found = site.audit(capsys)
    assert code == 1
    assert [e["node"] for e in found["errors"]] == [pn["spec"]["nodeName"]]
    assert found["unowned"] == [] and found["lost"] == []


def test_audit_is_clean_then_finds_a_leak_a_lost_and_a_misplaced_address(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    code, clean = site.audit(capsys)
    assert code == 0, clean
    assert clean == {"unowned": [], "unrecorded": [], "lost": [], "misplaced": [],
                     "duplicates": [], "gone": [], "wrong_eni": [], "still_plugged": [],
                     "errors": [], "skipped": []}

    nodes = sorted((n["metadata"]["name"], n["spec"]["podCIDR"]) for n in site.records(NODE))
    (node_a, cidr_a), (node_b, _) = nodes
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pn in sorted(site.records(POD_NETWORK), key=lambda p: p["metadata"]["name"]):
        by_node.setdefault(pn["spec"]["nodeName"], []).append(pn)
    gone, moved = by_node[node_a][0], by_node[node_b][0]
    key = "{0[metadata][namespace]}/{0[metadata][name]}".format

    leak = _free_address(site.cloud, cidr_a)
    site.cloud.add(node_a, None, "eth0", 1, address=leak)
    site.cloud.remove(node_a, [gone["status"]["ip"]])
    site.cloud.remove(node_b, [moved["status"]["ip"]])
    site.cloud.add(node_a, None, "eth0", 1, address=moved["status"]["ip"])

    code, found = site.audit(capsys)
    assert code == 1
    assert found["unowned"] == [
        {"node": node_a, "provider": reference.NAME, "ip": leak, "interface": "eth0"}]
    assert found["lost"] == [
        {"pod_network": key(gone), "node": node_a, "ip": gone["status"]["ip"]}]
    assert found["misplaced"] == [
        {"pod_network": key(moved), "node": node_b, "ip": moved["status"]["ip"],
         "cloud_node": node_a, "interface": "eth0"}]
    assert found["errors"] == [] and found["skipped"] == []

    assert main(["audit", "--config", str(site.config), "--kubeconfig",
                 str(site.kubeconfig), "--provider", reference.NAME]) == 1
    table = capsys.readouterr().out
    assert leak in table and key(gone) in table and key(moved) in table


def test_audit_finds_one_address_in_two_records(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pn in sorted(site.records(POD_NETWORK), key=lambda p: p["metadata"]["name"]):
        by_node.setdefault(pn["spec"]["nodeName"], []).append(pn)
    first, second = next(pns for pns in by_node.values() if len(pns) >= 2)[:2]
    second["status"]["ip"] = first["status"]["ip"]  # edited behind podnet's back
    site.store.update_status(POD_NETWORK, second)
    code, found = site.audit(capsys)
    assert code == 1
    key = "{0[metadata][namespace]}/{0[metadata][name]}".format
    # the edited record's seal names the address podnet gave it, not the one it names now
    assert found["duplicates"] == [{"provider": reference.NAME, "ip": first["status"]["ip"],
                                    "pod_networks": sorted([key(first), key(second)]),
                                    "edited": [key(second)]}]


def test_audit_finds_owners_that_are_gone(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """A record whose pod was deleted while the controller was down; and a record whose
    finalizer was removed by hand before it went, its pod still running: found through
    the interface its node's agent reports, not through the node's record (which lists
    addresses, no owners: an older podnet listed them, and a listed owner whose record is
    gone is no finding)."""
    from podnet.core.cluster.port import LEASE, NAMESPACE
    from podnet.core.models import AgentReport
    from podnet.core.objects import agent_report_lease

    left, unfinalized = sorted(site.records(POD_NETWORK), key=lambda p: p["metadata"]["name"])[:2]
    key = "{0[metadata][namespace]}/{0[metadata][name]}".format
    site.store.delete(POD, left["spec"]["podName"], left["metadata"]["namespace"],
                      grace_period_seconds=0)
    unfinalized["metadata"]["finalizers"] = []
    site.store.update(POD_NETWORK, unfinalized)
    site.store.delete(POD_NETWORK, unfinalized["metadata"]["name"],
                      unfinalized["metadata"]["namespace"])
    node = unfinalized["spec"]["nodeName"]
    nn = site.store.get(NODE_NETWORK, node)
    for itf in nn["status"]["interfaces"]:  # as an older podnet wrote it
        for ip in itf.get("ips", []):
            if ip["address"] == unfinalized["status"]["ip"]:
                ip["owner"] = key(unfinalized)
    site.store.update_status(NODE_NETWORK, nn)
    site.store.create(NAMESPACE, {"metadata": {"name": "kube-system"}})
    plugged = {key(r) for r in site.records(POD_NETWORK) if r["spec"]["nodeName"] == node}
    site.store.create(LEASE, agent_report_lease(
        AgentReport(node=node, holder="host-a.1/i1",
                    plugged=frozenset(plugged | {key(unfinalized)})),
        "kube-system", "2026-12-01T10:00:00.000000Z"))
    assert {pn["metadata"]["name"] for pn in site.records(POD_NETWORK)} >= {
        left["metadata"]["name"]}, "the first record outlives its pod (no controller runs)"
    code, found = site.audit(capsys)
    assert code == 1
    gone = {(g["pod_network"], g["ip"]): g for g in found["gone"]}
    assert set(gone) == {(key(left), left["status"]["ip"])}
    assert "pod is gone" in gone[(key(left), left["status"]["ip"])]["reason"]
    assert found["still_plugged"] == [
        {"pod_network": key(unfinalized), "node": node, "holder": "host-a.1/i1"}]
    # within the grace, a record just left behind is no finding yet
    code, found = site.podnet(capsys, "audit", "--config", str(site.config),
                              "--provider", "reference", "--grace", str(10 ** 10))
    assert found["gone"] == []


def test_audit_finds_nothing_gone_after_a_release_the_controller_saw_through(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """A pod deleted while a controller runs: its record is released and removed, and
    nothing of it is left for the audit to find once no controller runs."""
    world = site.world
    world.restart()
    first = sorted(site.records(POD_NETWORK), key=lambda p: p["metadata"]["name"])[0]
    site.store.delete(POD, first["spec"]["podName"], first["metadata"]["namespace"],
                      grace_period_seconds=0)
    world.settle(advance=2 * world.policy().refill_period)
    world.engines.stop(world.engine)
    assert first["metadata"]["name"] not in {
        pn["metadata"]["name"] for pn in site.records(POD_NETWORK)}, "released and removed"
    code, found = site.audit(capsys)
    assert found["gone"] == []
    assert code == 0, found


def test_audit_asks_the_cloud_about_a_served_node_without_a_node_network(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """A node the default provider serves that has no NodeNetwork yet (the controller is
    down): its cloud addresses are audited too."""
    node = {"metadata": {"name": "node-new"}, "spec": {"podCIDR": "10.99.7.0/24"}}
    site.store.create(NODE, node)
    site.cloud.add("node-new", "10.99.7.0/24", "eth0", 1, address="10.99.7.9")
    code, found = site.audit(capsys)
    assert code == 1
    assert found["unowned"] == [{"node": "node-new", "provider": reference.NAME,
                                 "ip": "10.99.7.9", "interface": "eth0"}]


def test_audit_finds_addresses_on_a_machine_no_node_and_no_record_names(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """What a node's addresses become when its record was let go and its Node deleted
    before another record named them: the controller never looks at that machine again.
    Planted by hand in the cloud: audit lists them, and is clean once they are gone."""
    site.cloud.add("node-gone", "10.99.8.0/24", "eth0", 2, address=None)
    planted = sorted(ip for ip, node in site.cloud.all_addresses().items()
                     if node == "node-gone")
    assert len(planted) == 2
    code, found = site.audit(capsys)
    assert code == 1
    assert found["unrecorded"] == [
        {"machine": "node-gone", "provider": reference.NAME, "ip": ip, "interface": "eth0"}
        for ip in planted]
    assert found["unowned"] == [] and found["errors"] == []
    site.cloud.remove("node-gone", planted)
    code, found = site.audit(capsys)
    assert code == 0, found


def test_ecs_audit_finds_addresses_on_an_instance_no_node_and_no_record_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The ECS provider on its simulator: ENIs podnet made (its tag, or an older ENI's
    description), attached by hand to instances no Node and no NodeNetwork names, are
    what a node's pool becomes when its record was let go before another named it and
    its Node was deleted. `podnet audit` lists their addresses (exit 1), not those of an
    ENI podnet did not make, and is clean (exit 0) once they are gone."""
    from podnet.plugins.ecs import provider as ecs_provider
    from podnet.plugins.ecs.demo import REGION, EcsWorld

    world = EcsWorld()
    # `podnet audit` configures the module's own plugin: a fresh one, put back afterwards
    monkeypatch.setattr(ecs_provider, "plugin", ecs_provider.EcsProvider())
    try:
        store = InMemoryCluster()
        for name in ("node-0000", "node-gone", "node-old", "other", "node-left"):
            world.add_node(name)
        # a node that left, its record (from before instanceId) still there: the config
        # maps its name to its instance, so the record names that instance
        store.create(NODE_NETWORK, {"apiVersion": "podnet.io/v1alpha1",
                                    "kind": "NodeNetwork", "metadata": {"name": "node-left"},
                                    "spec": {"provider": "ecs"}})
        world.attach_by_hand("i-nodeleft", 1)
        node = {"metadata": {"name": "node-0000", "labels": {
                    "node.kubernetes.io/instance-type": "ecs.g7.large"}},
                "spec": {"providerID": f"{REGION}.i-node0000"}}
        store.create(NODE, node)
        config = tmp_path / "podnet.yaml"
        config.write_text(yaml.safe_dump({"defaultProvider": "ecs",
                                          "providers": {"ecs": {
                                              **world.config,
                                              "instance_ids": {"node-left": "i-nodeleft"}}}}))
        tagged, planted = world.attach_by_hand("i-nodegone", 2)
        described, older = world.attach_by_hand("i-nodeold", 1, mark="description")
        world.attach_by_hand("i-other", 2, mark=None)  # not podnet's: no finding
        with ApiServer(store) as server:
            kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

            def audit_ecs() -> tuple[int, Any]:
                code = main(["audit", "--config", str(config), "--provider", "ecs",
                             "--kubeconfig", str(kubeconfig), "-o", "json"])
                return code, json.loads(capsys.readouterr().out)

            code, found = audit_ecs()
            assert code == 1, found
            assert found["unrecorded"] == [
                {"machine": "i-nodegone", "provider": "ecs", "ip": ip, "interface": tagged}
                for ip in sorted(planted)] + [
                {"machine": "i-nodeold", "provider": "ecs", "ip": older[0],
                 "interface": described}]
            assert found["unowned"] == [] and found["errors"] == []
            # the machines were listed; the record whose node left is the controller's
            assert found["skipped"] == [{"provider": "ecs", "reason": NODE_GONE,
                                         "nodes": ["node-left"]}]
            world.sim.forget([*planted, *older])
            code, found = audit_ecs()
            assert code == 0, found
    finally:
        ecs_provider.plugin.close()
        world.close()


def test_audit_names_the_bad_config_key(site: Site, capsys: pytest.CaptureFixture[str],
                                        tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"providers": {reference.NAME: {"bogus": 1}}}))
    code = main(["audit", "--config", str(bad), "--kubeconfig", str(site.kubeconfig),
                 "--provider", reference.NAME])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and f"{reference.NAME}.bogus" in err


@pytest.mark.parametrize("command", [["status"], ["audit", "--config", "CONFIG"]])
def test_missing_kubeconfig_or_no_server_exits_2_with_one_line(
        command: list[str], site: Site, capsys: pytest.CaptureFixture[str],
        tmp_path: Path) -> None:
    args = [str(site.config) if a == "CONFIG" else a for a in command]
    missing = tmp_path / "nowhere" / "kubeconfig"
    assert main([*args, "--kubeconfig", str(missing)]) == 2
    err = capsys.readouterr()
    assert err.out == "" and len(err.err.strip().splitlines()) == 1
    assert "kubeconfig" in err.err and str(missing) in err.err

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dead = yaml.safe_load(site.kubeconfig.read_text())
    dead["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{port}"
    (tmp_path / "dead").write_text(yaml.safe_dump(dead))
    assert main([*args, "--kubeconfig", str(tmp_path / "dead")]) == 2
    err = capsys.readouterr()
    assert err.out == "" and len(err.err.strip().splitlines()) == 1
    assert "unreachable" in err.err


class _Overlay:
    """An overlay provider: its own IPAM, no node pool to audit."""

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="overlay", version="0", uses_node_pool=False)


def test_audit_skips_providers_without_a_node_pool_and_those_not_loaded(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    for name, provider in (("overlay-node", "overlay"), ("other-node", "elsewhere")):
        site.store.create(NODE, {"metadata": {"name": name}, "spec": {"podCIDR": "10.99.0.0/24"}})
        site.store.create(NODE_NETWORK, {"apiVersion": "podnet.io/v1alpha1",
                                         "kind": "NodeNetwork", "metadata": {"name": name},
                                         "spec": {"provider": provider}})
    pm = build_plugin_manager(ReferenceProvider(cloud=site.cloud))
    pm.register(_Overlay(), name="overlay")
    with KubeCluster.from_kubeconfig(str(site.kubeconfig)) as kube:
        records = read_records(kube)
        nodes = {n["metadata"]["name"]: n for n in kube.list(NODE).items}
    report = audit(records, nodes, Providers(pm))
    assert report.clean
    assert report.as_json()["skipped"] == [
        {"provider": "elsewhere", "reason": NOT_LOADED, "nodes": ["other-node"]},
        {"provider": "overlay", "reason": NO_NODE_POOL, "nodes": ["overlay-node"]},
    ]

    code, found = site.audit(capsys)  # the command loads only the reference provider
    assert code == 0
    assert {s["provider"] for s in found["skipped"]} == {"overlay", "elsewhere"}


def test_status_shows_each_node_agent_and_the_releases_waiting_for_it(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    from podnet.core.cluster.port import LEASE, NAMESPACE
    from podnet.core.convert import from_wire
    from podnet.core.models import AgentReport, PodNetwork
    from podnet.core.objects import agent_report_lease, release_token

    records = site.records(POD_NETWORK)
    node = records[0]["spec"]["nodeName"]
    here = sorted((r for r in records if r["spec"]["nodeName"] == node),
                  key=lambda r: r["metadata"]["name"])
    assert len(here) >= 2
    # the controller turned two records Releasing; the agent has unplugged the second only
    for r in here[:2]:
        r["status"]["phase"] = "Releasing"
        site.store.update_status(POD_NETWORK, r)
    keys = [f"{r['metadata']['namespace']}/{r['metadata']['name']}" for r in here]
    site.store.create(NAMESPACE, {"metadata": {"name": "kube-system"}})
    site.store.create(LEASE, agent_report_lease(AgentReport(
        node=node, holder="agent", plugged=frozenset(keys[:1] + keys[2:]),
        unplugged=frozenset({release_token(from_wire(PodNetwork, site.store.get(
            POD_NETWORK, here[1]["metadata"]["name"], here[1]["metadata"]["namespace"])))})),
        "kube-system",
        "2026-12-01T10:00:00.000000Z"))

    _, report = site.podnet(capsys, "status", "--node", node)
    (problem,) = [a.pop("problem") for a in report["agents"]]
    assert report["agents"] == [{"node": node, "holder": "agent", "edited": False,
                                 "plugged": len(keys) - 1,
                                 "waiting_for_unplug": [keys[0]],
                                 "reported": "2026-12-01T10:00:00Z",
                                 "eni_dataplane": None,
                                 # renewed long ago (the agent is no longer writing)
                                 "state": "stale", "expires": "2026-12-01T10:01:00Z"}]
    assert "last renewed" in problem
    # its Lease is not where the agents report: the node's agent is missing; both of the
    # Releasing records wait for an agent's word
    _, other = site.podnet(capsys, "status", "--agent-namespace", "elsewhere",
                           "--node", node)
    assert [(a["node"], a["state"], a["waiting_for_unplug"]) for a in other["agents"]] == [
        (node, "missing", keys[:2])]
    assert main(["status", "--kubeconfig", str(site.kubeconfig)]) == 0
    table = capsys.readouterr().out
    assert "node agents" in table and keys[0] in table


def test_a_malformed_eni_summary_in_an_agents_lease_is_shown_as_such(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """What an agent reports of its ENI dataplane is read, never trusted: a summary that
    does not parse is shown with the annotation and what is wrong, and audit finds no
    wrong ENI from it."""
    from podnet.core.cluster.port import LEASE, NAMESPACE
    from podnet.core.models import AgentReport
    from podnet.core.objects import agent_report_lease
    from podnet.linux.eni import ANNOTATION_ENI

    node = site.records(POD_NETWORK)[0]["spec"]["nodeName"]
    site.store.create(NAMESPACE, {"metadata": {"name": "kube-system"}})
    lease = agent_report_lease(AgentReport(node=node, holder="agent"), "kube-system",
                               "2026-12-01T10:00:00.000000Z")
    lease["metadata"]["annotations"][ANNOTATION_ENI] = json.dumps(
        {"devices": [{"mac": "02:00:00:00:00:01", "name": "eni1"}], "rules": {}})
    site.store.create(LEASE, lease)
    _, report = site.podnet(capsys, "status", "--node", node)
    (agent,) = report["agents"]
    error = agent["eni_dataplane"]["error"]
    assert error.startswith(f"{ANNOTATION_ENI}: devices[0]:") and "table" in error, error
    _, found = site.audit(capsys)
    assert found["wrong_eni"] == [], found


def test_audit_finds_an_interface_an_agent_holds_for_a_record_that_is_gone(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """What a broken release handshake leaves (GOALS.md R8), planted by hand: a record let
    go while its node's agent still has the interface (its address free for the next
    pod); and a report whose lists someone edited. Clean while the agent's interfaces are
    all of records that exist."""
    from podnet.core.cluster.port import LEASE, NAMESPACE
    from podnet.core.models import AgentReport
    from podnet.core.objects import agent_lease_name, agent_report_lease

    records = site.records(POD_NETWORK)
    node = records[0]["spec"]["nodeName"]
    keys = sorted(f"{r['metadata']['namespace']}/{r['metadata']['name']}" for r in records
                  if r["spec"]["nodeName"] == node)
    site.store.create(NAMESPACE, {"metadata": {"name": "kube-system"}})
    holder = "host-a.1/i1"

    def report(plugged: list[str]) -> None:
        lease = agent_report_lease(AgentReport(node=node, holder=holder,
                                               plugged=frozenset(plugged)),
                                   "kube-system", "2026-12-01T10:00:00.000000Z")
        try:
            current = site.store.get(LEASE, agent_lease_name(node), "kube-system")
        except NotFound:
            site.store.create(LEASE, lease)
            return
        lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        site.store.update(LEASE, lease)

    report(keys)
    code, found = site.audit(capsys)
    assert code == 0 and found["still_plugged"] == [], found

    gone = f"{records[0]['metadata']['namespace']}/web-gone.default.0a1b2c3d"
    report([*keys, gone])
    code, found = site.audit(capsys)
    assert code == 1
    assert found["still_plugged"] == [{"pod_network": gone, "node": node, "holder": holder}]

    report(keys)
    site.store.patch(LEASE, agent_lease_name(node), {"metadata": {"annotations": {
        "podnet.io/unplugged": json.dumps(["some-uid@2026-12-01T10:00:00.000000Z"])}}},
        "kube-system")
    code, found = site.audit(capsys)
    assert code == 1
    assert [e["node"] for e in found["errors"]] == [node]
    assert "edited" in found["errors"][0]["error"]


def test_status_names_the_nodes_whose_agent_is_missing_or_stale(
        site: Site, capsys: pytest.CaptureFixture[str]) -> None:
    """A dead agent does not look like a quiet one: its report Lease runs out (renewed
    every third of its duration while the agent runs), and a node podnet serves whose
    agent never reported has no Lease at all."""
    from datetime import UTC, datetime, timedelta

    from podnet.core.clock import format_micro_time
    from podnet.core.cluster.port import LEASE, NAMESPACE
    from podnet.core.models import AgentReport
    from podnet.core.objects import agent_lease_name, agent_report_lease

    live, quiet = sorted({r["spec"]["nodeName"] for r in site.records(POD_NETWORK)})
    site.store.create(NAMESPACE, {"metadata": {"name": "kube-system"}})
    site.store.create(LEASE, agent_report_lease(
        AgentReport(node=live, holder="host-a/1"), "kube-system",
        format_micro_time(datetime.now(UTC))))
    _, report = site.podnet(capsys, "status")
    states = {a["node"]: (a["state"], a["holder"]) for a in report["agents"]}
    assert states == {live: ("live", "host-a/1"), quiet: ("missing", None)}
    assert main(["status", "--kubeconfig", str(site.kubeconfig)]) == 0
    table = capsys.readouterr().out
    assert "missing" in table and "no report" in table

    # the quiet node's agent reported once, 61 s ago, and stopped: stale
    site.store.create(LEASE, agent_report_lease(
        AgentReport(node=quiet, holder="host-b/1"), "kube-system",
        format_micro_time(datetime.now(UTC) - timedelta(seconds=61))))
    _, report = site.podnet(capsys, "status")
    rows = {a["node"]: a for a in report["agents"]}
    assert rows[live]["state"] == "live" and rows[live]["problem"] is None
    assert rows[quiet]["state"] == "stale", rows[quiet]
    assert rows[quiet]["problem"].startswith("its report was last renewed 6"), rows[quiet]
    lease = site.store.get(LEASE, agent_lease_name(quiet), "kube-system")
    assert rows[quiet]["reported"] == lease["spec"]["renewTime"][:19] + "Z"
    assert main(["status", "--kubeconfig", str(site.kubeconfig)]) == 0
    assert "stale" in capsys.readouterr().out
