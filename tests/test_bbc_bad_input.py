"""The bad-input catalogue against the BBC provider, plus BBC's own cases: malformed
cloud replies and requests only BBC can judge (its subnets, its address space)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from podnet.app.demo import node_obj
from podnet.core.cluster.port import NODE, NODE_NETWORK, POD, POD_NETWORK
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.networks import Networks, SubnetInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.bbc.demo import (
    PRIMARY_SUBNET,
    provider_for,
    register_nodes,
    start_simulator,
)
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.sim import API_PORT, WRITE_APIS, BbcSimulator
from podnet.testing.badinput import (
    ANN,
    UNKNOWN_INSTANCE_NODE,
    BadConfig,
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

#: the simulator of the running test, for the cases that corrupt its replies
_CURRENT: list[BbcSimulator] = []
#: a node the catalogue's world does not use: its instance answers malformed replies
BAD_NODE = 7


@pytest.fixture
def bbc_sim() -> Iterator[BbcSimulator]:
    sim = start_simulator()
    register_nodes(sim, [World.node_name(i) for i in range(BAD_NODE + 1)])
    _CURRENT.append(sim)
    yield sim
    _CURRENT.remove(sim)
    sim.stop()


def _malformed_port(case_id: str, change: Callable[[dict[str, Any]], dict[str, Any]],
                    field: str) -> BadInput:
    """The vpcPort reply of a new node's instance is malformed: its NodeNetwork says so,
    naming the reply's field; other nodes go on."""

    def setup(world: World) -> Target:
        sim = _CURRENT[-1]
        sim.mangle[(API_PORT, World.node_name(BAD_NODE))] = change
        world.add_node(BAD_NODE)
        return Target("nodenetwork", World.node_name(BAD_NODE))

    return BadInput(case_id, setup, field)


class TestBbcBadInput(BadInputSuite):
    provider_name = "bbc"

    @pytest.fixture
    def provider_plugin(self, bbc_sim: BbcSimulator) -> BbcProvider:
        provider = provider_for(bbc_sim, subnets=[PRIMARY_SUBNET])
        provider.sim = bbc_sim  # type: ignore[attr-defined]
        return provider

    @pytest.fixture
    def ground_truth(self, provider_plugin: Any) -> Callable[[], Any]:
        sim: BbcSimulator = provider_plugin.sim
        return sim.addresses

    def bad_inputs(self) -> Sequence[BadInput]:
        return [
            *super().bad_inputs(),
            bad_annotation("ip-outside-every-subnet", {f"{ANN}ip-address": "192.0.2.10"},
                           "ip-address"),
            bad_annotation("unknown-subnet", {f"{ANN}subnets": "sbn-nope"}, "subnets"),
            bad_annotation("named-ip-pool", {f"{ANN}ip-pool": "gold"}, "ip-pool"),
            bad_annotation("ip-pool-outside-node", {f"{ANN}ip-pool": "192.0.2.1,192.0.2.2"},
                           "ip-pool"),
            bad_annotation("dual-stack-unsupported",
                           {f"{ANN}ip-address": "10.128.0.9,fd00::9"}, "ip-address"),
            unknown_instance("instance-not-found", "cce://i-nope"),
            _malformed_port("vpcport-ip-garbage", lambda d: {**d, "privateIpSet": [
                {"privateIpAddress": "10.128.0.999", "subnetId": PRIMARY_SUBNET}]},
                "vpcPort.privateIpSet[0].privateIpAddress"),
            _malformed_port("vpcport-no-eni", lambda d: {k: v for k, v in d.items()
                                                         if k != "eniId"}, "vpcPort.eniId"),
            _malformed_port("vpcport-ipset-not-a-list",
                            lambda d: {**d, "privateIpSet": "10.128.0.5"},
                            "vpcPort.privateIpSet"),
        ]

    def bad_configs(self, provider: str) -> Sequence[BadConfig]:
        return [*super().bad_configs(provider)]

    def test_an_unknown_instance_is_said_in_one_line_on_the_pod_the_record_and_the_nodes(
            self, world: World) -> None:
        """The BCE client's error carries every retry's traceback ("All trace backs:"):
        conditions and Events carry one bounded line of it, naming the node, its
        providerID and the cloud's own reason."""
        from podnet.core.errors import MAX_MESSAGE

        world.add_node(0)
        node = node_obj(UNKNOWN_INSTANCE_NODE)
        node["spec"]["providerID"] = "cce://i-nope"
        with world.quiet():
            world.cluster.create(NODE, node)
        world.add_pod("lost", UNKNOWN_INSTANCE_NODE)
        world.add_pod("fine", 0)
        world.settle(advance=30)
        name = node["metadata"]["name"]
        with world.quiet():
            pod = world.cluster.get(POD, "lost", world.namespace)
            (record,) = [pn for pn in world.cluster.list(POD_NETWORK, world.namespace).items
                         if pn["spec"]["podName"] == "lost"]
            nn = world.cluster.get(NODE_NETWORK, name)
            node_events = world.cluster.events_for(world.cluster.get(NODE, name))
            said = {"pod": world.cluster.events_for(pod),
                    "record": world.cluster.events_for(record),
                    "nodenetwork": world.cluster.events_for(nn), "node": node_events}
        ready = next(c for c in record["status"]["conditions"] if c["type"] == "Ready")
        pool = next(c for c in nn["status"]["conditions"] if c["type"] == "PoolReady")
        assert ready["status"] == "False" and ready["reason"] == "PoolUnavailable"
        assert pool["status"] == "False"
        messages = [ready["message"], pool["message"]]
        for where, events in said.items():
            assert events, f"no Event on the {where}"
            messages += [e["message"] for e in events]
        for message in messages:
            assert "\n" not in message and "Traceback" not in message, message
            assert len(message) <= MAX_MESSAGE + 100, message
            assert name in message and "cce://i-nope" in message, message
            assert "instance i-nope does not exist" in message, message
        assert len(said["pod"]) == 1, "said once, not at every retry"
        assert world.record_of("fine") is not None
        assert world.record_of("fine").status.phase.value == "Routed"


@pytest.mark.parametrize(("config", "key"), [
    ({"bogus": 1}, "bbc.bogus"),
    ({"subnets": "sbn-a"}, "bbc.subnets"),
    ({"maxIpsPerNode": 0}, "bbc.maxIpsPerNode"),
    ({"protocol": "ftp"}, "bbc.protocol"),
    ({"endpoint": ""}, "bbc.endpoint"),
])
def test_bad_provider_config_names_the_key(config: dict[str, Any], key: str) -> None:
    from podnet.core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        BbcProvider().podnet_configure(provider="bbc", config=config)
    assert key in str(info.value)


def test_missing_credentials_name_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    from podnet.core.errors import ConfigError

    monkeypatch.delenv("BCE_ACCESS_KEY_ID", raising=False)
    monkeypatch.delenv("BCE_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(ConfigError) as info:
        BbcProvider().podnet_configure(provider="bbc", config={"endpoint": "127.0.0.1:1"})
    assert "accessKeyId" in str(info.value)


# --- Subnet objects: spec.parameters (podnet_subnet_parameters) ------------------------

IDS = "spec.parameters.subnetIds"
BAD_SUBNETS = [
    BadSubnet("not-a-map", ["sbn-a1"], "spec.parameters"),
    BadSubnet("unknown-key", {"subnetIds": ["sbn-a1"], "zone": "cn-bj-a"},
              "spec.parameters.zone"),
    BadSubnet("key-misspelt", {"subnetIDs": ["sbn-a1"]}, "spec.parameters.subnetIDs"),
    BadSubnet("ecs-key", {"vSwitchIds": {"cn-bj-a": ["vsw-1"]}}, "spec.parameters.vSwitchIds"),
    BadSubnet("missing", {}, IDS),
    BadSubnet("null", {"subnetIds": None}, IDS),
    BadSubnet("a-map", {"subnetIds": {"cn-bj-a": ["sbn-a1"]}}, IDS),
    BadSubnet("a-string", {"subnetIds": "sbn-a1"}, IDS),
    BadSubnet("empty-list", {"subnetIds": []}, IDS),
    BadSubnet("id-a-number", {"subnetIds": [7]}, f"{IDS}[0]"),
    BadSubnet("id-null", {"subnetIds": ["sbn-a1", None]}, f"{IDS}[1]"),
    BadSubnet("id-not-a-subnet", {"subnetIds": ["vsw-a1"]}, f"{IDS}[0]"),
    BadSubnet("id-empty", {"subnetIds": [""]}, f"{IDS}[0]"),
    BadSubnet("id-upper-case", {"subnetIds": ["SBN-A1"]}, f"{IDS}[0]"),
    BadSubnet("id-twice", {"subnetIds": ["sbn-a1", "sbn-a1"]}, f"{IDS}[1]"),
    BadSubnet("subnet-missing", {"subnetIds": ["sbn-a1", "sbn-nope"]}, f"{IDS}[1]"),
    BadSubnet("cidr-outside", {"subnetIds": ["sbn-far"]}, f"{IDS}[0]"),
    BadSubnet("cidr-wider-than-block", {"subnetIds": ["sbn-a1"]}, f"{IDS}[0]",
              cidr="10.40.1.0/25"),
    BadSubnet("block-ipv6-only", {"subnetIds": ["sbn-a1"]}, f"{IDS}[0]", cidr="fd00:40::/64"),
]


@pytest.fixture(scope="module")
def subnet_world() -> Iterator[tuple[BbcSimulator, BbcProvider]]:
    sim = BbcSimulator()
    sim.add_subnet("sbn-primary", "10.64.0.0/24")
    sim.add_subnet("sbn-a1", "10.40.1.0/24")
    sim.add_subnet("sbn-far", "10.99.0.0/24")
    sim.add_instance("i-1", "sbn-primary")
    sim.start()
    try:
        yield sim, provider_for(sim)
    finally:
        sim.stop()


@pytest.mark.parametrize("case", BAD_SUBNETS, ids=[c.id for c in BAD_SUBNETS])
def test_bad_subnet_parameters_are_refused_naming_the_field(subnet_world, case) -> None:
    sim, plugin = subnet_world
    good = SubnetInfo(name="good", provider="bbc", cidrs=("10.40.0.0/16",),
                      parameters={"subnetIds": ["sbn-a1"]})
    plugin.podnet_networks_changed("bbc", Networks(subnets=(good,)))
    refuse_subnet(plugin.podnet_subnet_parameters, "bbc", case)
    # nothing made in the cloud; the good Subnet still passes and still serves its node
    assert not any(sim.calls[api] for api in WRITE_APIS)
    assert plugin.podnet_subnet_parameters("bbc", good) is not None
    node = NodeContext(node=NodeInfo(name="n", uid="u", provider_id="i-1"), subnets=(good,))
    assert plugin.candidates(node) == ("sbn-a1",)
