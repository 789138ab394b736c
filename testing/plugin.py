"""The pytest plugin of the provider test kit.

Opt in from a ``conftest.py`` or a test module::

    pytest_plugins = ["podnet.testing"]

and override ``provider_plugin`` (and ``ground_truth``) to put your provider under test.
Everything runs on a fake clock and an in-memory cluster; spans go to an in-memory
exporter through a tracer provider of the test's own (never the global one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pluggy
import pytest
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from podnet.core.clock import FakeClock
from podnet.core.tracing import Tracing
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import (
    EngineFactory,
    FaultInjector,
    HookRecorder,
    World,
    build_plugin_manager,
    provider_name_of,
)

__all__ = [
    "cluster",
    "engine_factory",
    "fake_clock",
    "fault_injector",
    "ground_truth",
    "hook_calls",
    "plugin_manager",
    "provider_name",
    "provider_plugin",
    "span_exporter",
    "tracer_provider",
    "tracing",
    "world",
]


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(fake_clock: FakeClock) -> InMemoryCluster:
    """An in-memory API server on the fake clock, with every fault off."""
    return InMemoryCluster(clock=fake_clock)


@pytest.fixture
def span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(span_exporter: InMemorySpanExporter) -> Iterator[SdkTracerProvider]:
    provider = SdkTracerProvider()
    # synchronous export: a span is readable as soon as it ended
    provider.add_span_processor(SimpleSpanProcessor(span_exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def tracing(tracer_provider: SdkTracerProvider) -> Tracing:
    return Tracing(tracer_provider)


@pytest.fixture
def provider_plugin() -> Any:
    """The plugin object under test; override it. Default: the reference provider on a
    fresh reference cloud. The same object serves every engine a test starts."""
    return ReferenceProvider(cloud=ReferenceCloud())


@pytest.fixture
def hook_calls() -> HookRecorder:
    """Every hook call the plugin manager makes: ``.names()``, ``.of(hook)``,
    ``.transitions(machine)``, ``.provider_calls()``, ``.clear()``."""
    return HookRecorder()


@pytest.fixture
def plugin_manager(provider_plugin: Any, hook_calls: HookRecorder
                   ) -> Iterator[pluggy.PluginManager]:
    """A plugin manager holding only the plugin under test, its calls recorded."""
    pm = build_plugin_manager(provider_plugin)
    undo = hook_calls.attach(pm)
    yield pm
    undo()


@pytest.fixture
def fault_injector(plugin_manager: pluggy.PluginManager) -> FaultInjector:
    """Faults and crashes at the provider's hook boundaries (registered on request only)."""
    return FaultInjector().install(plugin_manager)


@pytest.fixture
def provider_name(plugin_manager: pluggy.PluginManager) -> str:
    """The name the plugin under test registers its provider under."""
    return provider_name_of(plugin_manager)


@pytest.fixture
def engine_factory(cluster: InMemoryCluster, fake_clock: FakeClock, tracing: Tracing,
                   plugin_manager: pluggy.PluginManager, provider_name: str
                   ) -> Iterator[EngineFactory]:
    """``engine_factory()`` builds an Engine on the cluster, the clock and the tracing,
    serving nodes with the plugin's provider; call it again to simulate a restart."""
    factory = EngineFactory(cluster, plugin_manager, fake_clock, provider=provider_name,
                            tracing=tracing)
    yield factory
    factory.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Callable[[], Mapping[str, str]]:
    """The provider's ground truth: every address its cloud holds -> node name. Works for
    plugins with a reference-style ``cloud.all_addresses()``; override it otherwise."""
    cloud = getattr(provider_plugin, "cloud", None)
    all_addresses = getattr(cloud, "all_addresses", None)
    if all_addresses is None:
        pytest.fail("override the ground_truth fixture: the provider plugin has no "
                    "cloud.all_addresses() to read the ground truth from")
    reader: Callable[[], Mapping[str, str]] = all_addresses
    return reader


@pytest.fixture
def world(cluster: InMemoryCluster, fake_clock: FakeClock, engine_factory: EngineFactory,
          ground_truth: Callable[[], Mapping[str, str]]) -> Iterator[World]:
    """The cluster, the engine (started on first use) and the checks, in one driver."""
    w = World(cluster, fake_clock, engine_factory, ground_truth)
    yield w
    w.close()
