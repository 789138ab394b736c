"""The bad-input catalogue against the reference provider, plus its own cases."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.badinput import ANN, BadConfig, BadInput, BadInputSuite, bad_annotation

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
