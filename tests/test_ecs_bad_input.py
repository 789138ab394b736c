"""The bad-input catalogue against the ECS provider, plus its own cases: its annotations'
semantics (vSwitches, addresses outside every vSwitch) and malformed SDK replies."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from podnet.core.errors import ConfigError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.networks import Networks, SubnetInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ecs.demo import (
    KIT_POLICY,
    WRITE_APIS,
    EcsWorld,
    instance_id_for,
    provider_config,
)
from podnet.plugins.ecs.provider import EcsProvider
from podnet.plugins.ecs.sim import EcsSimulator
from podnet.testing.badinput import (
    ANN,
    BadInput,
    BadInputSuite,
    BadSubnet,
    Target,
    bad_annotation,
    refuse_subnet,
    unknown_instance,
)
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

#: cases whose condition does not survive on ECS: after a corrupted pool_grow answer the
#: engine re-reads the inventory and the node recovers through a new ENI (created with its
#: addresses, no pool_grow), which sets PoolReady back to True; the Event naming the field
#: stays, the condition does not
ENGINE_GAPS = frozenset({"grow-not-entries", "grow-bad-address"})

#: the simulator of the running test, for the cases that corrupt its replies
_CURRENT: list[EcsWorld] = []


def _missing_private_ip_set(world: World) -> Target:
    """DescribeNetworkInterfaces answers without the ENIs' PrivateIpSets: the node's
    inventory cannot be read; its NodeNetwork says which reply was malformed."""
    ecs = _CURRENT[0]
    ecs.sim.malform_when("DescribeNetworkInterfaces", "PrivateIpSets",
                         InstanceId=instance_id_for(World.node_name(2)))
    node = world.add_node(2)
    world.add_pod("bad-reply", 2)
    return Target("nodenetwork", node)


class TestEcsBadInput(BadInputSuite):
    provider_name = "ecs"

    @pytest.fixture
    def provider_plugin(self) -> Iterator[EcsProvider]:
        world = EcsWorld(nodes=3, policy=KIT_POLICY)
        _CURRENT[:] = [world]
        yield world.plugin
        _CURRENT.clear()
        world.close()

    @pytest.fixture
    def ground_truth(self, provider_plugin: EcsProvider) -> object:
        return _CURRENT[0].addresses

    def bad_inputs(self) -> Sequence[BadInput]:
        return [
            *(case for case in super().bad_inputs() if case.id not in ENGINE_GAPS),
            bad_annotation("ip-outside-every-vswitch", {f"{ANN}ip-address": "192.0.2.10"},
                           "ip-address"),
            bad_annotation("unknown-vswitch", {f"{ANN}subnets": "vsw-nope"}, "subnets"),
            bad_annotation("named-ip-pool", {f"{ANN}ip-pool": "gold"}, "ip-pool"),
            bad_annotation("dual-stack-unsupported",
                           {f"{ANN}ip-address": "10.0.0.9,fd00::9"}, "ip-address"),
            unknown_instance("instance-not-found", "cn-hangzhou.i-nope"),
            BadInput("reply-without-private-ip-set", _missing_private_ip_set,
                     "PrivateIpSets"),
        ]



#: the provider's own config section, handed to podnet_configure (the kit's bad-config
#: test checks only the engine's keys)
BAD_SECTIONS = [
    ({"vswitch_policy": "fastest"}, "ecs.vswitch_policy"),
    ({"vswitches": 3}, "ecs.vswitches"),
    ({"security_groups": []}, "ecs.security_groups"),
    ({"instance_ids": ["i-1"]}, "ecs.instance_ids"),
    ({"eni_cap_ratio": 2}, "ecs.eni_cap_ratio"),
    ({"protocol": "ftp"}, "ecs.protocol"),
    ({"bogus": 1}, "ecs.bogus"),
    ({"access_key_id": ""}, "ecs.access_key_id"),
]


@pytest.mark.parametrize(("change", "key"), BAD_SECTIONS, ids=[k for _, k in BAD_SECTIONS])
def test_bad_provider_config_names_the_key(change: dict[str, object], key: str) -> None:
    config: dict[str, object] = {
        "endpoint": "127.0.0.1:1", "protocol": "http", "access_key_id": "AKID-SECRET-1",
        "access_key_secret": "VERY-SECRET-2", "vswitches": ["vsw-1"],
        "security_groups": ["sg-1"],
    }
    config.update(change)
    with pytest.raises(ConfigError) as info:
        EcsProvider().podnet_configure("ecs", config)
    assert key in str(info.value)
    assert "SECRET" not in str(info.value)


def test_missing_credentials_fall_back_to_the_environment(
        monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"vswitches": ["vsw-1"], "security_groups": ["sg-1"]}
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", raising=False)
    with pytest.raises(ConfigError, match="access_key_id"):
        EcsProvider().podnet_configure("ecs", config)
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_ID", "env-id")
    monkeypatch.setenv("ALIBABA_CLOUD_ACCESS_KEY_SECRET", "env-secret")
    EcsProvider().podnet_configure("ecs", config)


# --- Subnet objects: spec.parameters (podnet_subnet_parameters) ------------------------

K, J = "cn-hangzhou-k", "cn-hangzhou-j"
VSW = "spec.parameters.vSwitchIds"
BAD_SUBNETS = [
    BadSubnet("not-a-map", ["vsw-k1"], "spec.parameters"),
    BadSubnet("unknown-key", {"vSwitchIds": {K: ["vsw-k1"]}, "securityGroups": ["sg-1"]},
              "spec.parameters.securityGroups"),
    BadSubnet("key-misspelt", {"vswitchIds": {K: ["vsw-k1"]}}, "spec.parameters.vswitchIds"),
    BadSubnet("bbc-key", {"subnetIds": ["sbn-a"]}, "spec.parameters.subnetIds"),
    BadSubnet("missing", {}, VSW),
    BadSubnet("null", {"vSwitchIds": None}, VSW),
    BadSubnet("a-list", {"vSwitchIds": ["vsw-k1"]}, VSW),
    BadSubnet("a-string", {"vSwitchIds": "vsw-k1"}, VSW),
    BadSubnet("empty-map", {"vSwitchIds": {}}, VSW),
    BadSubnet("zone-not-an-id", {"vSwitchIds": {"Zone K!": ["vsw-k1"]}}, VSW),
    BadSubnet("zone-empty-list", {"vSwitchIds": {K: []}}, f"{VSW}.{K}"),
    BadSubnet("zone-a-string", {"vSwitchIds": {K: "vsw-k1"}}, f"{VSW}.{K}"),
    BadSubnet("zone-a-map", {"vSwitchIds": {K: {"id": "vsw-k1"}}}, f"{VSW}.{K}"),
    BadSubnet("id-a-number", {"vSwitchIds": {K: [42]}}, f"{VSW}.{K}[0]"),
    BadSubnet("id-null", {"vSwitchIds": {K: ["vsw-k1", None]}}, f"{VSW}.{K}[1]"),
    BadSubnet("id-not-a-vswitch", {"vSwitchIds": {K: ["sbn-k1"]}}, f"{VSW}.{K}[0]"),
    BadSubnet("id-upper-case", {"vSwitchIds": {K: ["VSW-K1"]}}, f"{VSW}.{K}[0]"),
    BadSubnet("id-empty", {"vSwitchIds": {K: [""]}}, f"{VSW}.{K}[0]"),
    BadSubnet("id-twice", {"vSwitchIds": {K: ["vsw-k1", "vsw-k1"]}}, f"{VSW}.{K}[1]"),
    BadSubnet("id-in-two-zones", {"vSwitchIds": {K: ["vsw-k1"], J: ["vsw-k1"]}},
              f"{VSW}.{J}[0]"),
    BadSubnet("vswitch-missing", {"vSwitchIds": {K: ["vsw-k1", "vsw-nope"]}}, f"{VSW}.{K}[1]"),
    BadSubnet("vswitch-other-zone", {"vSwitchIds": {J: ["vsw-k1"]}}, f"{VSW}.{J}[0]"),
    BadSubnet("vswitch-zone-unknown", {"vSwitchIds": {"cn-hangzhou-z": ["vsw-j1"]}},
              f"{VSW}.cn-hangzhou-z[0]"),
    BadSubnet("cidr-outside", {"vSwitchIds": {K: ["vsw-far"]}}, f"{VSW}.{K}[0]"),
    BadSubnet("cidr-wider-than-block", {"vSwitchIds": {K: ["vsw-k1"]}}, f"{VSW}.{K}[0]",
              cidr="10.40.1.0/25"),
    BadSubnet("block-ipv6-only", {"vSwitchIds": {K: ["vsw-k1"]}}, f"{VSW}.{K}[0]",
              cidr="fd00:40::/64"),
]


@pytest.fixture(scope="module")
def subnet_world() -> Iterator[tuple[EcsSimulator, EcsProvider]]:
    sim = EcsSimulator()
    sim.add_vswitch("vsw-k1", "10.40.1.0/24", zone=K)
    sim.add_vswitch("vsw-far", "10.99.0.0/24", zone=K)
    sim.add_vswitch("vsw-j1", "10.40.9.0/24", zone=J)
    sim.add_instance("i-k", "ecs.g7.large", "vsw-k1")
    sim.start()
    plugin = EcsProvider()
    plugin.podnet_configure("ecs", provider_config(sim, vswitches=["vsw-k1"]))
    try:
        yield sim, plugin
    finally:
        plugin.close()
        sim.stop()


@pytest.mark.parametrize("case", BAD_SUBNETS, ids=[c.id for c in BAD_SUBNETS])
def test_bad_subnet_parameters_are_refused_naming_the_field(subnet_world, case) -> None:
    sim, plugin = subnet_world
    good = SubnetInfo(name="good", provider="ecs", cidrs=("10.40.0.0/16",),
                      parameters={"vSwitchIds": {K: ["vsw-k1"], J: ["vsw-j1"]}})
    plugin.podnet_networks_changed("ecs", Networks(subnets=(good,)))
    refuse_subnet(plugin.podnet_subnet_parameters, "ecs", case)
    # nothing made in the cloud; the good Subnet still passes and still serves its node
    assert not any(sim.calls[api] for api in WRITE_APIS)
    assert plugin.podnet_subnet_parameters("ecs", good) is not None
    node = NodeContext(node=NodeInfo(name="n", uid="u", provider_id="cn-hangzhou.i-k"),
                       subnets=(good,))
    assert plugin.node_vswitches(node) == ["vsw-k1"]

