"""From issue 31 (the Terway seed): with ``trunk`` on, a node's pool build makes a trunk
ENI (CreateNetworkInterface ``InstanceType=Trunk``, one address) when none is attached,
its instance type supports trunking and an adapter is free; the adapter is reserved (one
secondary ENI fewer for pod addresses), the trunk is never disposed, and the node's
record shows it. On the loopback simulator and a fake clock."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from podnet.app.cli import main
from podnet.core.cluster.port import EVENT, NODE_NETWORK
from podnet.core.errors import ConfigError
from podnet.core.models import NodeInfo, NodeNetwork, ObjectMeta
from podnet.core.policy import PoolPolicy
from podnet.hookspecs.models import NodeNetworkSpec
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ecs.demo import EcsWorld, instance_id_for
from podnet.plugins.ecs.provider import POLICY, EcsProvider
from podnet.sim.apiserver import ApiServer
from podnet.testing.faults import Crash
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

NODE_NAME = World.node_name(0)
INSTANCE = instance_id_for(NODE_NAME)
#: 4 adapters of 3 pod addresses each, trunking supported
TINY = "ecs.sim.tiny"
#: 2 adapters, no trunking (the burstable family)
NO_TRUNK_TYPE = "ecs.t6-c1m1.large"


@pytest.fixture
def policy() -> PoolPolicy:
    return attrs.evolve(POLICY, aggregation_window=0.0, min_idle=0, max_idle=0,
                        node_check_period=60.0)


@pytest.fixture
def itype() -> str:
    return TINY


@pytest.fixture
def ecs(policy: PoolPolicy, itype: str) -> Iterator[EcsWorld]:
    world = EcsWorld(policy=policy, vswitches_in_cloud={"vsw-sim-a": "10.0.0.0/24"},
                     instance_type=itype, instance_ids={NODE_NAME: INSTANCE}, trunk=True)
    world.add_node(NODE_NAME, itype)
    yield world
    world.close()


@pytest.fixture
def provider_plugin(ecs: EcsWorld) -> EcsProvider:
    return ecs.plugin


@pytest.fixture
def ground_truth(ecs: EcsWorld) -> Any:
    return ecs.addresses


def record(world: World) -> dict[str, Any]:
    with world.quiet():
        nn: dict[str, Any] = world.cluster.get(NODE_NETWORK, NODE_NAME)
    return nn


def trunk_rows(world: World) -> list[dict[str, Any]]:
    return [i for i in record(world)["status"]["interfaces"] if i.get("trunk")]


def kinds(ecs: EcsWorld) -> list[str]:
    return sorted(e.kind for e in ecs.sim.enis_of(INSTANCE))


def test_the_setting_is_validated_and_named() -> None:
    plugin = EcsProvider()
    keys = {"security_groups": ["sg-1"], "access_key_id": "a", "access_key_secret": "s"}
    with pytest.raises(ConfigError) as info:
        plugin.podnet_configure("ecs", {**keys, "trunk": "maybe"})
    assert "providers.ecs.trunk" in str(info.value)
    plugin.podnet_configure("ecs", {**keys, "trunk": True})
    assert plugin.config.trunk is True
    assert EcsProvider().config.trunk is False  # off unless asked for


def test_a_trunk_is_made_at_pool_build_and_recorded(world: World, ecs: EcsWorld) -> None:
    world.add_node(0)
    world.settle(advance=10)
    trunks = ecs.trunks()[INSTANCE]
    assert len(trunks) == 1 and trunks[0][1] == "InUse", trunks
    trunk = ecs.sim.enis[trunks[0][0]]
    # one address (its primary), tagged with its instance as podnet's ENIs are
    assert trunk.secondary == [] and trunk.tags == {"podnet.io/instance": INSTANCE}
    assert ecs.sim.calls["CreateNetworkInterface"] == 1
    rows = trunk_rows(world)
    assert [r["id"] for r in rows] == [trunk.id]
    assert rows[0].get("pooled") is False and not rows[0].get("ips")
    # its adapter is out of the multi-IP capacity: 2 secondary ENIs of 3, not 3 of 3
    pool = world.engine.pools.find(world.provider, NODE_NAME)
    assert pool is not None and pool.capacity == 2 * 3
    world.restart()  # a restart finds it, never makes a second one
    world.settle(advance=10)
    assert len(ecs.trunks()[INSTANCE]) == 1
    assert ecs.sim.calls["CreateNetworkInterface"] == 1
    world.assert_converged()


def test_pods_never_go_on_the_trunk_and_it_is_never_disposed(world: World,
                                                             ecs: EcsWorld) -> None:
    """The 7th pod waits at capacity (2 secondary ENIs of 3: the trunk holds the 3rd
    adapter); once every pod is gone and the empty ENIs disposed, the trunk stays."""
    world.add_node(0)
    world.settle(advance=10)
    for i in range(7):
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    assert kinds(ecs) == ["Primary", "Secondary", "Secondary", "Trunk"]
    trunk_id = ecs.trunks()[INSTANCE][0][0]
    assert all(pn.status.interface != trunk_id for pn in world.records())
    assert ecs.sim.enis[trunk_id].secondary == []
    late = world.record_of("p6")
    assert late is not None and late.status.ip is None
    for i in range(7):
        world.delete_pod(f"p{i}")
    world.settle(advance=world.gc_grace())
    assert kinds(ecs) == ["Primary", "Trunk"]
    assert ecs.trunks()[INSTANCE] == [(trunk_id, "InUse")]
    assert [r["id"] for r in trunk_rows(world)] == [trunk_id]
    world.assert_converged()


@pytest.mark.parametrize("when", ["after-create", "after-attach"])
def test_a_crash_between_the_trunks_creation_and_its_record_makes_no_second(
        world: World, ecs: EcsWorld, when: str) -> None:
    """The controller dies right after CreateNetworkInterface (the trunk made, never
    attached) or AttachNetworkInterface (attached, never recorded): the next pool build
    finds it (by its tag, or attached) and the record names it; one trunk only."""
    api = "CreateNetworkInterface" if when == "after-create" else "AttachNetworkInterface"
    ecs.kill_at(api, Crash, when="after",
                only=lambda r: api != "CreateNetworkInterface" or r.instance_type == "Trunk")
    world.add_node(0)
    world.settle(advance=10)
    assert world.crashes == 1
    trunks = ecs.trunks()[INSTANCE]
    assert len(trunks) == 1 and trunks[0][1] == "InUse", trunks
    assert ecs.sim.calls["CreateNetworkInterface"] == 1
    assert [r["id"] for r in trunk_rows(world)] == [trunks[0][0]]
    world.assert_converged()


@pytest.mark.parametrize("itype", [NO_TRUNK_TYPE])
def test_an_instance_type_without_trunking_gets_none_and_is_told(world: World,
                                                                ecs: EcsWorld) -> None:
    world.add_node(0)
    world.settle(advance=61)
    assert kinds(ecs) == ["Primary"]
    assert ecs.sim.calls["CreateNetworkInterface"] == 0
    with world.quiet():
        events = [e for e in world.cluster.list(EVENT).items
                  if e["reason"] == "TrunkUnavailable"]
    assert events and "providers.ecs.trunk" in events[0]["message"], events
    assert NO_TRUNK_TYPE in events[0]["message"]
    world.add_pod("p0", 0)
    world.settle(advance=1)
    pn = world.record_of("p0")
    assert pn is not None and pn.status.ip is not None  # the pool works without it


def test_the_cloud_refusing_a_trunk_leaves_it_off_and_deletes_the_one_made(
        ecs: EcsWorld) -> None:
    """The catalogue says yes, the instance says no (the real error code): the trunk
    made is deleted, the pool is built without one, and no trunk is tried again."""
    ecs.sim.fail_next("AttachNetworkInterface",
                      "InvalidOperation.InstanceTypeNotSupportEniTrunking")
    node = NodeContext(node=NodeInfo(name=NODE_NAME, uid="u"), network=NodeNetwork(
        metadata=ObjectMeta(name=NODE_NAME), spec=NodeNetworkSpec(provider="ecs")))
    inventory = ecs.plugin.podnet_node_inventory("ecs", node)
    assert inventory is not None and not any(i.trunk for i in inventory.interfaces)
    assert inventory.max_interfaces == 3
    assert ecs.trunks() == {}
    ecs.plugin.podnet_node_inventory("ecs", node)
    assert ecs.sim.calls["CreateNetworkInterface"] == 1
    findings = ecs.plugin.podnet_node_check("ecs", node)
    assert findings and findings[0].reason == "TrunkUnavailable"


def test_an_inventory_of_a_machine_no_record_names_makes_nothing(ecs: EcsWorld) -> None:
    """``podnet audit`` reads machines no record names, and a node that left is read
    with its record being deleted: neither gets a trunk."""
    node = NodeContext(node=NodeInfo(name=NODE_NAME, uid="u"))
    inventory = ecs.plugin.podnet_node_inventory("ecs", node)
    assert inventory is not None and inventory.max_interfaces == 3
    assert ecs.sim.calls["CreateNetworkInterface"] == 0 and ecs.trunks() == {}


def test_a_report_read_of_a_recorded_node_makes_nothing(ecs: EcsWorld) -> None:
    """``podnet audit`` reads recorded nodes too (``read_only``): a report changes nothing
    in the cloud, so the trunk waits for the pool build."""
    recorded = NodeNetwork(metadata=ObjectMeta(name=NODE_NAME),
                           spec=NodeNetworkSpec(provider="ecs"))
    node = NodeContext(node=NodeInfo(name=NODE_NAME, uid="u"), network=recorded,
                       read_only=True)
    inventory = ecs.plugin.podnet_node_inventory("ecs", node)
    assert inventory is not None and not any(i.trunk for i in inventory.interfaces)
    assert ecs.sim.calls["CreateNetworkInterface"] == 0 and ecs.trunks() == {}
    # the same node read to build its pool gets its trunk
    ecs.plugin.podnet_node_inventory("ecs", NodeContext(node=node.node, network=recorded))
    assert len(ecs.trunks()) == 1


def test_a_trunk_attached_before_counts_out_of_the_capacity_without_trunk_on(
        ecs: EcsWorld) -> None:
    """A trunk someone attached (Terway's, by hand) is reported, never pooled: its
    adapter is out of the pool's count even with the setting off."""
    ecs.plugin.podnet_configure("ecs", {**ecs.config, "trunk": False})
    made = ecs.sim.dispatch("CreateNetworkInterface", {
        "RegionId": "cn-hangzhou", "VSwitchId": "vsw-sim-a", "SecurityGroupId": "sg-x",
        "InstanceType": "Trunk"})
    ecs.sim.dispatch("AttachNetworkInterface", {"RegionId": "cn-hangzhou",
                                                "NetworkInterfaceId": made["NetworkInterfaceId"],
                                                "InstanceId": INSTANCE})
    inventory = ecs.plugin.podnet_node_inventory(
        "ecs", NodeContext(node=NodeInfo(name=NODE_NAME, uid="u")))
    assert inventory is not None
    trunk = [i for i in inventory.interfaces if i.trunk]
    assert len(trunk) == 1 and not trunk[0].pooled
    assert inventory.max_interfaces == 2 and inventory.capacity == 2 * 3


def test_podnet_status_shows_the_trunk(world: World, ecs: EcsWorld,
                                       capsys: pytest.CaptureFixture[str],
                                       tmp_path: Path) -> None:
    """The node's record, served by the API server emulator, read by ``podnet status``:
    the trunk is a row of the node's pool with its role, holding no address."""
    world.add_node(0)
    world.settle(advance=10)
    trunk_id = ecs.trunks()[INSTANCE][0][0]
    with ApiServer(world.cluster) as server:
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        assert main(["status", "--kubeconfig", kubeconfig, "-o", "json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert main(["status", "--kubeconfig", kubeconfig]) == 0
        table = capsys.readouterr().out
    (node,) = report["nodes"]
    rows = {i["id"]: i for i in node["interfaces"]}
    assert rows[trunk_id]["role"] == "trunk"
    assert rows[trunk_id]["idle"] == rows[trunk_id]["allocated"] == 0
    assert sorted(str(i["role"]) for i in node["interfaces"]) == ["primary", "trunk"]
    assert "(trunk)" in table


def test_the_sweep_never_deletes_a_trunk_made_and_not_attached(ecs: EcsWorld) -> None:
    """The sweep deletes detached secondary ENIs podnet made; a trunk left Available by
    a crash is the next pool build's to attach, never the sweep's to delete."""
    made = ecs.sim.dispatch("CreateNetworkInterface", {
        "RegionId": "cn-hangzhou", "VSwitchId": "vsw-sim-a", "SecurityGroupId": "sg-x",
        "InstanceType": "Trunk", "Tag.1.Key": "podnet.io/instance", "Tag.1.Value": INSTANCE})
    trunk_id = str(made["NetworkInterfaceId"])
    assert ecs.plugin.podnet_sweep("ecs", (), [trunk_id]) == []
    assert ecs.trunks() == {INSTANCE: [(trunk_id, "Available")]}
    node = NodeContext(node=NodeInfo(name=NODE_NAME, uid="u"), network=NodeNetwork(
        metadata=ObjectMeta(name=NODE_NAME), spec=NodeNetworkSpec(provider="ecs")))
    inventory = ecs.plugin.podnet_node_inventory("ecs", node)
    assert inventory is not None
    assert [i.id for i in inventory.interfaces if i.trunk] == [trunk_id]
    assert ecs.sim.calls["CreateNetworkInterface"] == 1  # the one above: none made
