"""podnet's provider conformance suite and chaos machine, applied to static-pool.

Both come from podnet's test kit (``podnet.testing``): the suite runs the real engine on
an in-memory cluster and a fake clock against the backend's ground truth; the chaos
machine adds random churn, crashes and faults. ``PODNET_CHAOS_EXAMPLES`` deepens the
chaos run (this example's default is small, to keep the suite quick).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from podnet_static_pool import NAME, StaticBackend, StaticPoolError, StaticPoolProvider

from podnet.hookspecs.errors import ErrorKind
from podnet.testing.chaos import EXAMPLES_ENV, chaos_settings, make_chaos_machine
from podnet.testing.conformance import ProviderConformance

pytest_plugins = ["podnet.testing"]


def _addresses(plugin: Any) -> Mapping[str, str]:
    backend: StaticBackend = plugin.backend
    return backend.all_addresses()


class TestStaticPoolConformance(ProviderConformance):
    provider_name = NAME

    @pytest.fixture
    def provider_plugin(self) -> StaticPoolProvider:
        # a fresh backend per test: nothing leaks from one test into the next
        return StaticPoolProvider(StaticBackend())

    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:
        return _addresses(plugin)

    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        return [
            (StaticPoolError("Throttled", "slow down"), ErrorKind.THROTTLED),
            (StaticPoolError("NodeFull", "node-0 holds 32"), ErrorKind.QUOTA_EXCEEDED),
            (StaticPoolError("RangesExhausted", "nothing left"), ErrorKind.SUBNET_EXHAUSTED),
            (StaticPoolError("Unavailable", "try again"), ErrorKind.TRANSIENT),
            (StaticPoolError("SomethingNew", "unknown code"), ErrorKind.TRANSIENT),
        ]


StaticPoolChaos = make_chaos_machine(
    lambda: StaticPoolProvider(StaticBackend()), _addresses, name="StaticPoolChaos",
)
TestStaticPoolChaos = StaticPoolChaos.TestCase
TestStaticPoolChaos.settings = chaos_settings(int(os.environ.get(EXAMPLES_ENV, "25")))
