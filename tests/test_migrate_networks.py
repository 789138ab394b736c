"""core.networks.migrate: a config's networks become objects once, never over an
operator's, against the in-memory cluster."""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

import attrs
import pytest

from podnet.core.cluster.port import (
    CONFIG_MAP,
    IP_POOL,
    POD,
    POD_NETWORK,
    SECURITY_GROUP,
    SUBNET,
    ApiError,
    Invalid,
    Kind,
    NotFound,
)
from podnet.core.engine import Engine
from podnet.core.networks.migrate import (
    MARKER,
    MARKER_KEY,
    MIGRATED_FROM,
    Migration,
    migrate_networks,
)
from podnet.hookspecs import hookimpl
from podnet.hookspecs.networks import (
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SelectorTerm,
    SubnetInfo,
)
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import EngineRig
from podnet.testing.networklab import LAB, NetworkLab

OVN = Networks(
    subnets=(
        SubnetInfo(name="blue", provider="ovn", cidrs=("10.20.0.0/16", "fd00:20::/64"),
                   gateways=("10.20.0.1", "fd00:20::1"), excluded=("10.20.0.2..10.20.0.9",),
                   namespaces=("team-a",),
                   namespace_selector=SelectorTerm({"team": "a"}, (("tier", "In", ("web",)),
                                                                 ("x", "Exists", ()))),
                   node_selector=SelectorTerm({"kubernetes.io/os": "linux"}),
                   default=True, parameters={"logicalSwitch": "blue"}),
        SubnetInfo(name="green", provider="ovn", cidrs=("10.30.0.0/24",)),
    ),
    pools=(IPPoolInfo(name="web", subnet="blue", addresses=("10.20.1.0/28", "10.20.2.5"),
                      namespaces=("team-a",)),),
    security_groups=(SecurityGroupInfo(
        name="web",
        ingress=(SecurityRule("tcp", (80, 80), ("10.0.0.0/8",), ("db",)),
                 SecurityRule("udp", (8000, 8080))),
        egress=(SecurityRule(),)),),
)


def get(cluster: InMemoryCluster, kind: Kind, name: str) -> dict[str, Any]:
    return cluster.get(kind, name)


def test_every_declared_object_is_created_in_wire_form() -> None:
    cluster = InMemoryCluster()
    done = migrate_networks(cluster, {"ovn": OVN, "ecs": None})
    assert done.created == ("Subnet blue", "Subnet green", "IPPool web", "SecurityGroup web")
    assert done.kept == () and done.refused == ()
    blue = get(cluster, SUBNET, "blue")
    assert blue["spec"] == {
        "provider": "ovn", "cidrBlock": "10.20.0.0/16,fd00:20::/64",
        "gateway": "10.20.0.1,fd00:20::1", "excludeIPs": ["10.20.0.2..10.20.0.9"],
        "namespaces": ["team-a"],
        "namespaceSelector": {"matchLabels": {"team": "a"}, "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["web"]},
            {"key": "x", "operator": "Exists"}]},
        "nodeSelector": {"matchLabels": {"kubernetes.io/os": "linux"}},
        "default": True, "parameters": {"logicalSwitch": "blue"}}
    assert blue["metadata"]["annotations"] == {MIGRATED_FROM: "providers.ovn"}
    assert get(cluster, SUBNET, "green")["spec"] == {"provider": "ovn",
                                                     "cidrBlock": "10.30.0.0/24"}
    assert get(cluster, IP_POOL, "web")["spec"] == {
        "subnet": "blue", "addresses": ["10.20.1.0/28", "10.20.2.5"], "namespaces": ["team-a"]}
    assert get(cluster, SECURITY_GROUP, "web")["spec"] == {
        "ingress": [{"protocol": "tcp", "port": "80", "from": ["10.0.0.0/8"],
                     "groups": ["db"]},
                    {"protocol": "udp", "port": "8000-8080"}]}  # egress: not restricted


def test_an_operators_object_is_never_overwritten_and_a_second_run_makes_nothing(
        caplog: pytest.LogCaptureFixture) -> None:
    cluster = InMemoryCluster()
    mine = {"apiVersion": "podnet.io/v1alpha1", "kind": "Subnet",
            "metadata": {"name": "blue"}, "spec": {"provider": "ovn", "cidrBlock": "10.9.0.0/16"}}
    cluster.create(SUBNET, mine)
    with caplog.at_level(logging.INFO, logger="podnet.core.networks.migrate"):
        first = migrate_networks(cluster, {"ovn": OVN})
    assert first.kept == ("Subnet blue",)
    assert "Subnet blue" not in first.created and len(first.created) == 3
    assert get(cluster, SUBNET, "blue")["spec"] == mine["spec"]
    assert "migration: created Subnet green from providers.ovn" in caplog.text
    assert "Subnet blue exists" in caplog.text
    again = migrate_networks(cluster, {"ovn": OVN})
    assert again.created == () and len(again.kept) == 4


def test_a_refused_object_is_reported_and_the_others_are_made() -> None:
    cluster = InMemoryCluster()

    def check(kind: Kind, new: dict[str, Any], old: Any, sub: Any) -> dict[str, Any]:
        if kind == SUBNET and new["metadata"]["name"] == "green":
            raise Invalid('Subnet.podnet.io "green" is invalid: spec.cidrBlock: bad')
        return new

    with cluster.admission(check):
        done = migrate_networks(cluster, {"ovn": OVN})
    assert done.refused == ('Subnet green: Subnet.podnet.io "green" is invalid: '
                            "spec.cidrBlock: bad",)
    assert len(done.created) == 3


def test_an_unavailable_api_server_ends_the_run_and_a_retry_finishes_it() -> None:
    cluster = InMemoryCluster()
    cluster.faults.fail_next("create", IP_POOL, ApiError("etcd is down", code=503))
    with pytest.raises(ApiError, match="etcd is down"):
        migrate_networks(cluster, {"ovn": OVN})
    done = migrate_networks(cluster, {"ovn": OVN})
    assert done.kept == ("Subnet blue", "Subnet green")
    assert done.created == ("IPPool web", "SecurityGroup web")


def test_a_group_two_sections_declare_is_made_once(caplog: pytest.LogCaptureFixture) -> None:
    cluster = InMemoryCluster()
    other = Networks(security_groups=(SecurityGroupInfo(name="web"),))
    done = migrate_networks(cluster, {"ovn": OVN, "bbc": other})
    assert done.created.count("SecurityGroup web") == 1
    assert "declared by more than one section" in caplog.text


def test_a_direction_that_allows_nothing_stays_an_empty_list() -> None:
    cluster = InMemoryCluster()
    shut = Networks(security_groups=(SecurityGroupInfo(name="db", ingress=(
        SecurityRule("tcp", (5432, 5432), groups=("web",)),), egress=()),))
    migrate_networks(cluster, {"ovn": shut})
    spec = get(cluster, SECURITY_GROUP, "db")["spec"]
    assert spec["egress"] == [] and len(spec["ingress"]) == 1


def test_the_marker_makes_a_migration_once_and_an_entry_added_later_still_migrates() -> None:
    cluster = InMemoryCluster()
    first = migrate_networks(cluster, {"ovn": OVN}, namespace="kube-system")
    assert len(first.created) == 4
    marker = cluster.get(CONFIG_MAP, MARKER, "kube-system")
    assert marker["data"][MARKER_KEY].splitlines() == sorted(
        ["Subnet/blue", "Subnet/green", "IPPool/web", "SecurityGroup/web"])
    # the operator retires a migrated Subnet: the config still declaring it brings it
    # back no more
    cluster.delete(SUBNET, "green")
    more = attrs.evolve(OVN, subnets=(*OVN.subnets, SubnetInfo(
        name="red", provider="ovn", cidrs=("10.40.0.0/24",))))
    again = migrate_networks(cluster, {"ovn": more}, namespace="kube-system")
    assert again.created == ("Subnet red",)
    assert "Subnet green" in again.done_before
    with pytest.raises(NotFound):
        cluster.get(SUBNET, "green")
    assert "Subnet/red" in cluster.get(CONFIG_MAP, MARKER, "kube-system")["data"][MARKER_KEY]


class _Declares:
    """A lab provider whose config section declared one Subnet the old way."""

    @hookimpl
    def podnet_config_networks(self, provider: str) -> Networks | None:
        return Networks(subnets=(SubnetInfo(name="legacy", provider=LAB,
                                            cidrs=("10.50.0.0/24",), default=True),))


def test_the_engine_migrates_before_its_first_list_and_serves_the_objects_it_made() -> None:
    lab = NetworkLab()
    rig = EngineRig([(LAB, lab)], config={"defaultProvider": LAB}, namespaces=("team-a",))
    rig.pm.register(_Declares(), name="lab-config")
    node = rig.node(0)
    rig.engine = Engine(rig.cluster, rig.pm, clock=rig.clock, options=rig.options)
    made = rig.engine.migrate_networks()
    assert made is not None and made.created == ("Subnet legacy",)
    rig.engine.start()
    rig.cluster.create(POD, {
        "metadata": {"name": "web-0", "namespace": "team-a"},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}})
    rig.settle()
    assert cluster_phase(rig.cluster.get(SUBNET, "legacy")) == "Ready"
    (record,) = rig.cluster.list(POD_NETWORK, "team-a").items
    assert record["status"]["phase"] == "Routed"
    assert ipaddress.ip_address(record["status"]["ip"]) in ipaddress.ip_network("10.50.0.0/24")
    # a second start as leader makes nothing again
    assert rig.engine.migrate_networks() == Migration(done_before=("Subnet legacy",))


def cluster_phase(obj: dict[str, Any]) -> str:
    return str(obj.get("status", {}).get("phase"))
