"""core.networks.migrate: a config's networks become objects once, never over an
operator's, against the in-memory cluster."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from podnet.core.cluster.port import ApiError, Invalid, Kind
from podnet.core.networks.migrate import (
    IP_POOL,
    MIGRATED_FROM,
    SECURITY_GROUP,
    SUBNET,
    migrate_networks,
)
from podnet.hookspecs.networks import (
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SelectorTerm,
    SubnetInfo,
)
from podnet.sim.memory import InMemoryCluster

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
                    {"protocol": "udp", "port": "8000-8080"}],
        "egress": [{"protocol": "all"}]}


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
