"""The bad-input catalogue against the reference provider, plus its own cases."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.networks import Networks, SubnetInfo
from podnet.hookspecs.types import NodeContext
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.badinput import (
    ANN,
    BadConfig,
    BadInput,
    BadInputSuite,
    BadSubnet,
    bad_annotation,
    refuse_subnet,
)

pytest_plugins = ["podnet.testing"]



class TestReferenceBadInput(BadInputSuite):
    provider_name = "reference"

    @pytest.fixture
    def provider_plugin(self) -> ReferenceProvider:
        return ReferenceProvider(cloud=ReferenceCloud())

    def bad_inputs(self) -> Sequence[BadInput]:
        return [
            *super().bad_inputs(),
            # what only the provider can tell: its subnets and its address space
            bad_annotation("ip-outside-every-subnet", {f"{ANN}ip-address": "192.0.2.10"},
                           "ip-address"),
            bad_annotation("unknown-subnet", {f"{ANN}subnets": "sbn-nope"}, "subnets"),
            bad_annotation("named-ip-pool", {f"{ANN}ip-pool": "gold"}, "ip-pool"),
            bad_annotation("ip-pool-outside-node", {f"{ANN}ip-pool": "192.0.2.1,192.0.2.2"},
                           "ip-pool"),
            bad_annotation("dual-stack-unsupported",
                           {f"{ANN}ip-address": "10.64.0.9,fd00::9"}, "ip-address"),
        ]

    def bad_configs(self, provider: str) -> Sequence[BadConfig]:
        return [
            *super().bad_configs(provider),
        ]


# --- Subnet objects: spec.parameters (podnet_subnet_parameters) ------------------------

#: the reference provider takes no parameters: every key is refused, by its name
BAD_SUBNETS = [
    BadSubnet("any-key", {"x": 1}, "spec.parameters.x"),
    BadSubnet("ecs-key", {"vSwitchIds": {"cn-hangzhou-k": ["vsw-1"]}},
              "spec.parameters.vSwitchIds"),
    BadSubnet("bbc-key", {"subnetIds": ["sbn-a"]}, "spec.parameters.subnetIds"),
    BadSubnet("spec-key", {"gateway": "10.40.0.1"}, "spec.parameters.gateway"),
    BadSubnet("empty-key", {"": "x"}, "spec.parameters."),
    BadSubnet("null-value", {"podCIDR": None}, "spec.parameters.podCIDR"),
]


@pytest.mark.parametrize("case", BAD_SUBNETS, ids=[c.id for c in BAD_SUBNETS])
def test_bad_subnet_parameters_are_refused_naming_the_field(case) -> None:
    plugin = ReferenceProvider(cloud=ReferenceCloud())
    good = SubnetInfo(name="good", provider="reference", cidrs=("10.40.0.0/16",))
    assert plugin.podnet_subnet_parameters("reference", good) is not None
    plugin.podnet_networks_changed("reference", Networks(subnets=(good,)))
    refuse_subnet(plugin.podnet_subnet_parameters, "reference", case)
    # nothing put into the cloud for it; the good Subnet still serves its nodes
    assert sorted(plugin.cloud.subnets) == ["good"]
    grown = plugin.podnet_pool_grow("reference", NodeContext(
        node=NodeInfo(name="n", uid="u"), subnets=(good,)), None, 1, None)
    assert grown is not None and grown[0].subnet == "good"
