"""The provider conformance suite against the BBC provider on its loopback simulator."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest
from baidubce.exception import BceHttpClientError, BceServerError

from podnet.core.errors import ErrorKind
from podnet.plugins.bbc.demo import provider_for, register_nodes, start_simulator
from podnet.plugins.bbc.provider import BbcProvider, default_policy
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.testing.conformance import ProviderConformance
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

NODES = 4


def sdk_error(code: str, status: int = 400) -> BceHttpClientError:
    inner = BceServerError(f"{code} happened", code=code, request_id="req-1")
    inner.status_code = status
    return BceHttpClientError("Unable to execute HTTP request", inner)


@pytest.fixture
def bbc_sim() -> Iterator[BbcSimulator]:
    sim = start_simulator()
    register_nodes(sim, [World.node_name(i) for i in range(NODES)])
    yield sim
    sim.stop()


class TestBbcConformance(ProviderConformance):
    provider_name = "bbc"

    @pytest.fixture
    def provider_plugin(self, bbc_sim: BbcSimulator) -> BbcProvider:
        # BBC's own policy (min_idle 0): a pod network on an empty pool waits for it
        # without an attempt, so the kit's span test sees its allocate first
        provider = provider_for(bbc_sim, policy=default_policy())
        provider.sim = bbc_sim  # type: ignore[attr-defined]
        return provider

    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:
        sim: BbcSimulator = plugin.sim
        return sim.addresses()

    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        return [
            (sdk_error("ExceedLimitException"), ErrorKind.QUOTA_EXCEEDED),
            (sdk_error("VmMemoryCanNotAttachMoreIpException"), ErrorKind.QUOTA_EXCEEDED),
            (sdk_error("QuotaLimitExceeded"), ErrorKind.QUOTA_EXCEEDED),
            (sdk_error("SubnetHasNoMoreIpException"), ErrorKind.SUBNET_EXHAUSTED),
            (sdk_error("RateLimit", 429), ErrorKind.THROTTLED),
            (sdk_error("PrivateIPNotExistException"), ErrorKind.NOT_FOUND),
            (sdk_error("PrivateIpInUseException"), ErrorKind.CONFLICT),
            (sdk_error("BBC.Inner.RateLimitExceeded", 400), ErrorKind.THROTTLED),
            (sdk_error("InternalError", 500), ErrorKind.TRANSIENT),
            (sdk_error("SomethingNew", 503), ErrorKind.TRANSIENT),
            (BceHttpClientError("Unable to execute HTTP request", ConnectionRefusedError()),
             ErrorKind.TRANSIENT),
        ]


class TestBbcDualStackConformance(TestBbcConformance):
    """The same suite with ``ipStack: dual``: every pool address an IPv4/IPv6 pair."""

    @pytest.fixture
    def provider_plugin(self, bbc_sim: BbcSimulator) -> BbcProvider:
        provider = provider_for(bbc_sim, policy=default_policy(), ip_stack="dual")
        provider.sim = bbc_sim  # type: ignore[attr-defined]
        return provider
