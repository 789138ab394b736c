"""The provider conformance suite, applied to the reference provider."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from podnet.core.errors import ErrorKind, ProviderError
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceCloudError, ReferenceProvider
from podnet.testing.conformance import ProviderConformance
from podnet.testing.harness import EngineFactory, FaultInjector, HookRecorder, World

pytest_plugins = ["podnet.testing"]


class TestReferenceConformance(ProviderConformance):
    provider_name = "reference"

    @pytest.fixture
    def provider_plugin(self) -> ReferenceProvider:
        return ReferenceProvider(cloud=ReferenceCloud())

    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:
        cloud: ReferenceCloud = plugin.cloud
        return cloud.all_addresses()

    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        return [
            (ReferenceCloudError("Throttling", "slow down"), ErrorKind.THROTTLED),
            (ReferenceCloudError("QuotaExceeded", "eth1 is full"), ErrorKind.QUOTA_EXCEEDED),
            (ReferenceCloudError("SubnetExhausted", "no address"), ErrorKind.SUBNET_EXHAUSTED),
            (ReferenceCloudError("NotFound", "no eth9"), ErrorKind.NOT_FOUND),
            (ReferenceCloudError("Conflict", "on eth0"), ErrorKind.CONFLICT),
            (ReferenceCloudError("InternalError", "oops"), ErrorKind.TRANSIENT),
            (ReferenceCloudError("SomethingNew", "unknown code"), ErrorKind.TRANSIENT),
        ]


# --- the kit's own fixtures --------------------------------------------------------------


def test_fixtures_wire_one_world(world: World, engine_factory: EngineFactory,
                                 provider_plugin: ReferenceProvider, hook_calls: HookRecorder,
                                 span_exporter: InMemorySpanExporter) -> None:
    world.add_node(0)
    world.add_pod("p0", 0)
    world.settle()
    first = world.engine
    assert first.options.default_provider == "reference"
    assert engine_factory.engines == [first]
    world.restart()
    world.settle()
    assert world.engine is not first and world.engine.pm is first.pm
    assert set(world.cloud_addresses()) == set(provider_plugin.cloud.all_addresses())
    name, kwargs = hook_calls.of("allocate")[0]
    assert name == "podnet_allocate" and kwargs["context"].pod_network.spec.pod_name == "p0"
    assert "podnet_register_provider" in hook_calls.names()
    assert [e.trigger for e in hook_calls.transitions("pod_network")] == ["allocate", "route"]
    # spans go to the test's exporter, never to the global tracer provider
    assert any(s.name == "pod_network.route" for s in span_exporter.get_finished_spans())
    assert not isinstance(trace.get_tracer_provider(), SdkTracerProvider)
    world.assert_converged()


def test_fault_injector_counts_calls(world: World, fault_injector: FaultInjector) -> None:
    fault_injector.fail("allocate", ProviderError(ErrorKind.THROTTLED, "slow down"), nth=2,
                        times=2)
    world.add_node(0)
    world.settle()
    for i in range(4):
        world.add_pod(f"p{i}", 0)
    world.settle(advance=5)
    assert [(h, w) for h, w, _ in fault_injector.fired] == [("podnet_allocate", "before")] * 2
    assert not fault_injector.armed
    world.assert_converged()
    fault_injector.crash("release", when="after")
    world.delete_pod("p0")
    world.settle()
    assert world.crashes == 1 and world.restarts == 1
    world.assert_converged()
