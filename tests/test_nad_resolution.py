"""Multus attachments resolved to their NetworkAttachmentDefinitions by the engine, on the
in-memory cluster and a fake clock: one PodNetwork per podnet NAD the pod names (network
``<nad-namespace>/<nad-name>``, the NAD's Subnet and the entry's address and MAC in its
requests), none for other plugins' NADs, a record saying why for a NAD podnet cannot
read; a NAD created or changed requeues the pods naming it."""

from __future__ import annotations

import json
from typing import Any

from podnet.core.attachments import MULTUS_NETWORKS
from podnet.core.cluster.port import EVENT, NAD, NAMESPACE, POD, Obj
from podnet.core.cluster.port import SUBNET as SUBNET_KIND
from podnet.core.policy import PoolPolicy
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig
from podnet.testing.networklab import LAB, NetworkLab

NS = "demo"
POLICY = PoolPolicy(min_idle=1, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0)
#: node 0's podCIDR: the one subnet the reference provider serves there, by that name
SUBNET = "10.64.0.0/24"


def rig(*extra: tuple[str, object]) -> EngineRig:
    provider = ReferenceProvider(ReferenceCloud(), policy=POLICY)
    return EngineRig([("reference", provider), *extra])


def nad(name: str, config: dict[str, Any] | str, namespace: str = NS) -> Obj:
    text = config if isinstance(config, str) else json.dumps(config)
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"config": text}}


def podnet_cni(name: str = "blue-net", **extra: Any) -> dict[str, Any]:
    return {"cniVersion": "1.0.0", "name": name, "type": "podnet-cni", "subnet": SUBNET,
            **extra}


def by_network(r: EngineRig, pod: str) -> dict[str, Obj]:
    return {rec["spec"]["network"]: rec for rec in r.records(pod)}


def ready(record: Obj) -> dict[str, Any]:
    return next(c for c in record["status"].get("conditions", ()) if c["type"] == "Ready")


def warnings(r: EngineRig) -> list[str]:
    return [e["message"] for e in r.cluster.list(EVENT).items if e.get("type") == "Warning"]


def test_a_podnet_nad_gets_a_routed_record_with_its_subnet_and_the_entry_requests() -> None:
    r = rig()
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    r.cluster.create(NAD, nad("macvlan", {"cniVersion": "1.0.0", "name": "m",
                                          "type": "macvlan", "ipam": {"type": "host-local"}}))
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: json.dumps([
        {"name": "macvlan"},
        {"name": "blue", "ips": ["10.64.0.77/24"], "mac": "02-aa-bb-cc-dd-ee"}])})
    r.settle()
    records = by_network(r, "app")
    # the macvlan NAD is its plugin's: no record; blue is podnet's
    assert set(records) == {"default", f"{NS}/blue"}
    blue = records[f"{NS}/blue"]
    assert blue["metadata"]["name"].startswith(f"app.{NS}.blue.")
    assert blue["spec"]["provider"] == "reference"
    assert blue["spec"]["requests"] == {"subnets": [SUBNET], "ipAddress": "10.64.0.77",
                                        "macAddress": "02:aa:bb:cc:dd:ee",
                                        "portSecurity": False, "snat": False}
    assert blue["status"]["phase"] == "Routed"
    assert blue["status"]["ip"] == "10.64.0.77" and blue["status"]["mac"] == "02:aa:bb:cc:dd:ee"
    assert records["default"]["status"]["ip"] != "10.64.0.77"


def test_the_comma_form_the_namespace_form_and_podnet_ipam_in_a_conflist() -> None:
    r = rig()
    r.cluster.create(NAMESPACE, {"metadata": {"name": "other"}})
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    r.cluster.create(NAD, nad("green", {"cniVersion": "1.0.0", "name": "green", "plugins": [
        {"type": "bridge", "ipam": {"type": "podnet-ipam", "subnet": SUBNET}},
        {"type": "portmap"}]}, namespace="other"))
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: "blue@data0, other/green"})
    r.settle()
    records = by_network(r, "app")
    assert set(records) == {"default", f"{NS}/blue", "other/green"}
    assert all(rec["status"]["phase"] == "Routed" for rec in records.values())
    ips = {rec["status"]["ip"] for rec in records.values()}
    assert len(ips) == 3


def test_a_nad_created_later_requeues_the_pod_and_a_nad_turned_elsewhere_releases() -> None:
    r = rig()
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: "blue"})
    r.settle()
    assert set(by_network(r, "app")) == {"default"}  # no NAD yet: no record, no failure
    assert warnings(r) == []
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    r.settle()
    records = by_network(r, "app")
    assert set(records) == {"default", f"{NS}/blue"}
    assert records[f"{NS}/blue"]["status"]["phase"] == "Routed"
    # the NAD now names another plugin: podnet's record goes
    obj = r.cluster.get(NAD, "blue", NS)
    obj["spec"]["config"] = json.dumps({"cniVersion": "1.0.0", "name": "b", "type": "macvlan"})
    r.cluster.update(NAD, obj)
    r.settle(advance=60)
    assert set(by_network(r, "app")) == {"default"}


def test_a_nad_podnet_cannot_read_is_a_record_saying_why_and_others_go_on() -> None:
    r = rig()
    cases = {
        "nosubnet": {"cniVersion": "1.0.0", "name": "n", "type": "podnet-cni"},
        "badjson": '{"type": "podnet-cni", "subnet": ',
        "twice": {"cniVersion": "1.0.0", "name": "t", "plugins": [
            {"type": "podnet-cni", "subnet": SUBNET},
            {"type": "x", "ipam": {"type": "podnet-ipam"}}]},
        "badsubnet": podnet_cni(subnet=["a"]),
        "noprovider": podnet_cni(provider="nowhere"),
    }
    wanted = {
        "nosubnet": "spec.config: subnet: missing",
        "badjson": "spec.config: not valid JSON",
        "twice": "plugins[0] and plugins[1] both name podnet",
        "badsubnet": "spec.config: subnet: must be a string",
        "noprovider": "spec.config: provider: 'nowhere' is not a configured provider",
    }
    for name, config in cases.items():
        r.cluster.create(NAD, nad(name, config))
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    node = r.node(0)
    for name in cases:
        r.pod(name, node, annotations={MULTUS_NETWORKS: name})
    r.pod("fine", node, annotations={MULTUS_NETWORKS: "blue"})
    r.settle()
    for name, text in wanted.items():
        records = by_network(r, name)
        assert set(records) == {"default", f"{NS}/{name}"}, name
        # as for a network no provider serves: that record says why, holding nothing
        assert not records[f"{NS}/{name}"]["status"].get("ip"), name
        condition = ready(records[f"{NS}/{name}"])
        assert condition["reason"] == "InvalidRequest", name
        assert f"NetworkAttachmentDefinition {NS}/{name}" in condition["message"], name
        assert text in condition["message"], (name, condition["message"])
        assert any(f"NetworkAttachmentDefinition {NS}/{name}" in m for m in warnings(r)), name
    assert {rec["status"]["phase"] for rec in r.records("fine")} == {"Routed"}


def test_entries_podnet_cannot_serve_are_invalid_naming_the_entry() -> None:
    r = rig()
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    r.cluster.create(NAD, nad("mac", {"cniVersion": "1.0.0", "name": "m", "type": "macvlan"}))
    node = r.node(0)
    cases = {
        "route": [{"name": "blue", "default-route": ["10.64.0.1"]}],
        "threeips": [{"name": "blue", "ips": ["10.64.0.5", "10.64.0.6", "10.64.0.7"]}],
        "multicast": [{"name": "blue", "mac": "01:00:5e:00:00:01"}],
        "twice": [{"name": "blue"}, {"name": "blue", "interface": "x1"}],
    }
    for name, value in cases.items():
        r.pod(name, node, annotations={MULTUS_NETWORKS: json.dumps(value)})
    # the same things asked of another plugin's NAD are that plugin's business
    r.pod("other", node, annotations={MULTUS_NETWORKS: json.dumps(
        [{"name": "mac", "default-route": ["10.64.0.1"], "mac": "01:00:5e:00:00:01"}])})
    r.settle()
    for name in cases:
        condition = ready(by_network(r, name)[f"{NS}/blue"])
        assert condition["reason"] == "InvalidRequest", name
        assert MULTUS_NETWORKS in condition["message"] and "entry " in condition["message"]
    assert {rec["status"]["phase"] for rec in r.records("other")} == {"Routed"}


def test_a_malformed_annotation_is_one_answer_for_every_network_of_the_pod() -> None:
    r = rig()
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    node = r.node(0)
    r.pod("bad", node, annotations={MULTUS_NETWORKS: "blue,Not_A_Name"})
    r.pod("bystander", node, annotations={MULTUS_NETWORKS: "blue"})
    r.settle()
    (record,) = r.records("bad")  # the NADs are not read: only its default network
    condition = ready(record)
    assert condition["reason"] == "InvalidRequest"
    assert MULTUS_NETWORKS in condition["message"] and "entry 2" in condition["message"]
    assert "Not_A_Name" in condition["message"]
    assert {rec["status"]["phase"] for rec in r.records("bystander")} == {"Routed"}


def test_a_pod_deleted_releases_its_nad_records() -> None:
    r = rig()
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: "blue"})
    r.settle()
    assert len(r.records("app")) == 2
    r.cluster.delete(POD, "app", NS, grace_period_seconds=0)
    r.settle(advance=60)
    assert r.records("app") == []


def test_a_restart_whose_nad_list_fails_keeps_the_nad_records_until_it_succeeds() -> None:
    from podnet.core.cluster.port import ApiError

    r = rig()
    r.cluster.create(NAD, nad("blue", podnet_cni()))
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: "blue"})
    r.settle()
    before = by_network(r, "app")[f"{NS}/blue"]
    assert before["status"]["phase"] == "Routed"
    # a new engine (a restart) whose first NAD lists the API server refuses
    r.cluster.faults.fail_next("list", NAD, ApiError("unavailable", code=503), times=50)
    r.start()
    r.engine.run_until_idle(advance=0)
    after = by_network(r, "app")[f"{NS}/blue"]
    assert after["status"]["phase"] == "Routed"
    assert after["status"]["ip"] == before["status"]["ip"]
    assert not r.engine.caches.nads.has_synced
    # once listed, the pod is looked at again: still podnet's, still the same address
    r.cluster.faults._planned.clear()
    r.settle()
    assert r.engine.caches.nads.has_synced
    final = by_network(r, "app")[f"{NS}/blue"]
    assert final["status"]["phase"] == "Routed"
    assert final["metadata"]["uid"] == before["metadata"]["uid"]


def test_a_nad_naming_a_subnet_object_is_served_by_that_subnets_provider() -> None:
    lab = NetworkLab()
    r = rig((LAB, lab))
    r.cluster.create(SUBNET_KIND, {"metadata": {"name": "lab-net"},
                                   "spec": {"provider": LAB, "cidrBlock": "10.90.0.0/24"}})
    r.cluster.create(NAD, nad("side", {"cniVersion": "1.0.0", "name": "side",
                                       "type": "podnet-cni", "subnet": "lab-net"}))
    node = r.node(0)
    r.pod("app", node, annotations={MULTUS_NETWORKS: "side"})
    r.settle()
    side = by_network(r, "app")[f"{NS}/side"]
    assert side["spec"]["provider"] == LAB  # the Subnet's, not the node's (reference)
    assert side["status"]["phase"] == "Routed"
    assert side["status"]["ip"].startswith("10.90.0.")
    assert lab.violations == []
