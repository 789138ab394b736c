"""From the ECS issue: "ENIs created with the configured security groups; a periodic check
reports an ENI whose security groups drifted as a node Event" — ``podnet_node_check`` of
the ECS provider, on the loopback simulator and a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest
from alibabacloud_ecs20140526 import models as m
from alibabacloud_ecs20140526.client import Client
from alibabacloud_tea_openapi import models as open_api_models

from podnet.core.cluster.port import EVENT, NODE, NODE_NETWORK, Obj
from podnet.core.models import NodeInfo
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ecs.demo import REGION, SECURITY_GROUPS, EcsWorld, instance_id_for
from podnet.plugins.ecs.provider import POLICY, EcsProvider
from podnet.plugins.ecs.sim import Eni
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

PERIOD = 120.0
NODE_NAME = World.node_name(0)
INSTANCE = instance_id_for(NODE_NAME)
#: 4 ENIs of 4 addresses (3 secondary): a few pods fill one secondary ENI
TINY = "ecs.sim.tiny"


@pytest.fixture
def policy() -> PoolPolicy:
    return attrs.evolve(POLICY, aggregation_window=0.0, node_check_period=PERIOD)


@pytest.fixture
def ecs(policy: PoolPolicy) -> Iterator[EcsWorld]:
    world = EcsWorld(policy=policy, vswitches_in_cloud={"vsw-sim-a": "10.0.0.0/24"},
                     instance_type=TINY, instance_ids={NODE_NAME: INSTANCE})
    world.add_node(NODE_NAME, TINY)
    yield world
    world.close()


@pytest.fixture
def provider_plugin(ecs: EcsWorld) -> EcsProvider:
    return ecs.plugin


@pytest.fixture
def ground_truth(ecs: EcsWorld) -> Any:
    return ecs.addresses


@pytest.fixture
def client(ecs: EcsWorld) -> Client:
    return Client(open_api_models.Config(access_key_id="id", access_key_secret="secret",
                                         region_id=REGION, endpoint=ecs.sim.endpoint,
                                         protocol="http"))


def drift_events(world: World) -> list[Obj]:
    with world.quiet():
        return [e for e in world.cluster.list(EVENT).items
                if e["involvedObject"].get("kind") == "Node"
                and e["reason"] == "SecurityGroupDrift"]


def reported(events: list[Obj]) -> int:
    return sum(int(e.get("count", 1)) for e in events)


def check_condition(world: World) -> dict[str, Any] | None:
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, NODE_NAME)
    return next((c for c in (nn.get("status") or {}).get("conditions") or ()
                 if c["type"] == "ProviderCheck"), None)


def secondary_eni(ecs: EcsWorld) -> Eni:
    made = [e for e in ecs.sim.enis_of(INSTANCE) if e.kind == "Secondary"]
    assert len(made) == 1, made
    return made[0]


def bring_up(world: World, ecs: EcsWorld) -> Eni:
    """Pods routed on the node, some on a secondary ENI podnet made."""
    world.add_node(0)
    world.settle()
    for i in range(3):  # one secondary ENI's worth: the primary ENI holds no pod
        world.add_pod(f"p{i}", 0)
        world.settle(advance=1)
    eni = secondary_eni(ecs)
    assert eni.security_groups == list(SECURITY_GROUPS)
    assert any(pn.status.interface == eni.id for pn in world.records())
    return eni


def test_drifted_security_groups_are_one_node_event(
        world: World, ecs: EcsWorld, client: Client, hook_calls: HookRecorder) -> None:
    eni = bring_up(world, ecs)
    world.settle(advance=PERIOD + 10)
    checks = hook_calls.of("podnet_node_check")
    assert checks and checks[-1].result == [], checks  # the primary ENI's groups are not ours
    assert drift_events(world) == []

    # someone changes the ENI's groups through the API
    client.modify_network_interface_attribute(m.ModifyNetworkInterfaceAttributeRequest(
        region_id=REGION, network_interface_id=eni.id, security_group_id=["sg-rogue"]))
    assert ecs.sim.calls["ModifyNetworkInterfaceAttribute"] == 1
    world.settle(advance=PERIOD + 10)
    events = drift_events(world)
    assert len(events) == 1 and reported(events) == 1, events
    event = events[0]
    with world.quiet():
        uid = world.cluster.get(NODE, NODE_NAME)["metadata"]["uid"]
    assert event["type"] == "Warning"
    assert (event["involvedObject"]["name"], event["involvedObject"]["uid"]) == (NODE_NAME, uid)
    assert eni.id in event["message"] and "sg-rogue" in event["message"]
    assert all(g in event["message"] for g in SECURITY_GROUPS)
    condition = check_condition(world)
    assert condition is not None and condition["status"] == "False"
    assert eni.id in condition["message"]

    # another period, the drift persists: no second Event
    world.settle(advance=PERIOD + 10)
    assert reported(drift_events(world)) == 1

    # restored: the condition clears
    ecs.sim.set_security_groups(eni.id, list(SECURITY_GROUPS))
    world.settle(advance=PERIOD + 10)
    condition = check_condition(world)
    assert condition is not None and condition["status"] == "True", condition
    assert reported(drift_events(world)) == 1

    # another drift (behind the API's back): a new Event
    ecs.sim.set_security_groups(eni.id, [*SECURITY_GROUPS, "sg-extra"])
    world.settle(advance=PERIOD + 10)
    events = drift_events(world)
    assert reported(events) == 2 and len(events) == 2, events
    assert any("sg-extra" in e["message"] for e in events)
    world.assert_converged()


def test_the_check_reads_only(world: World, ecs: EcsWorld) -> None:
    eni = bring_up(world, ecs)
    ecs.sim.set_security_groups(eni.id, ["sg-rogue"])
    before = dict(ecs.sim.calls)
    world.settle(advance=PERIOD + 10)
    after = dict(ecs.sim.calls)
    changed = {api for api in after if after[api] != before.get(api)}
    assert changed <= {"DescribeNetworkInterfaces"}, changed
    assert secondary_eni(ecs).security_groups == ["sg-rogue"]


def test_the_same_groups_in_another_order_are_no_drift(ecs: EcsWorld) -> None:
    plugin = ecs.plugin
    plugin.podnet_configure("ecs", {**ecs.config, "security_groups": ["sg-a", "sg-b"]})
    node = NodeContext(node=NodeInfo(name=NODE_NAME, uid="u-1"))
    eni_id = plugin.podnet_interface_create("ecs", node, None, 1)
    assert eni_id is not None
    ecs.sim.set_security_groups(eni_id.id, ["sg-b", "sg-a"])
    assert plugin.podnet_node_check("ecs", node) == []
    ecs.sim.set_security_groups(eni_id.id, ["sg-a"])
    findings = plugin.podnet_node_check("ecs", node)
    assert findings is not None and [f.interface for f in findings] == [eni_id.id]
    assert findings[0].reason == "SecurityGroupDrift"
    calls = dict(ecs.sim.calls)
    # routed: a node check for another provider never reaches the ECS plugin
    pm = new_plugin_manager()
    pm.register(plugin, name="ecs")
    assert Providers(pm).hook("other", "podnet_node_check")(provider="other", node=node) is None
    assert dict(ecs.sim.calls) == calls


def test_the_simulator_keeps_and_reports_security_groups(ecs: EcsWorld, client: Client
                                                         ) -> None:
    made = client.create_network_interface(m.CreateNetworkInterfaceRequest(
        region_id=REGION, v_switch_id="vsw-sim-a", security_group_ids=["sg-1", "sg-2"],
        description="podnet:i-x")).body
    body = client.describe_network_interfaces(m.DescribeNetworkInterfacesRequest(
        region_id=REGION, network_interface_id=[made.network_interface_id])).body
    found = body.network_interface_sets.network_interface_set[0]
    assert found.security_group_ids.security_group_id == ["sg-1", "sg-2"]
    client.modify_network_interface_attribute(m.ModifyNetworkInterfaceAttributeRequest(
        region_id=REGION, network_interface_id=made.network_interface_id,
        security_group_id=["sg-3"], description="podnet:i-y"))
    body = client.describe_network_interfaces(m.DescribeNetworkInterfacesRequest(
        region_id=REGION, network_interface_id=[made.network_interface_id])).body
    found = body.network_interface_sets.network_interface_set[0]
    assert found.security_group_ids.security_group_id == ["sg-3"]
    assert found.description == "podnet:i-y"
