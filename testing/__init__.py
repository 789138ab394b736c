"""The kit for provider authors.

``pytest_plugins = ["podnet.testing"]`` opts a test suite into the kit's fixtures
(``podnet.testing.plugin``). Production never imports the kit (the reference provider it
puts under test by default is a plugin, ``podnet.plugins.reference``); imported where
pytest is missing, the kit simply offers no fixtures.

PYTEST_DONT_REWRITE: this module asserts nothing; a test module may import the kit before
pytest loads it as a plugin, and pytest would warn that it came too late to rewrite it.
"""

try:
    import pytest
except ImportError:  # pragma: no cover - production install without test extras
    pass
else:
    # the kit's own asserts explain themselves in a failing provider's test run
    pytest.register_assert_rewrite(
        "podnet.testing.harness", "podnet.testing.conformance", "podnet.testing.chaos",
        "podnet.testing.plugin", "podnet.testing.nodebed", "podnet.testing.ovnbed",
        "podnet.testing.vpcbed",
    )
    from podnet.testing.nodebed import host, underlay  # noqa: F401
    from podnet.testing.ovnbed import ovn_bed, ovn_central  # noqa: F401
    from podnet.testing.plugin import (  # noqa: F401
        cluster,
        engine_factory,
        fake_clock,
        fault_injector,
        ground_truth,
        hook_calls,
        plugin_manager,
        provider_name,
        provider_plugin,
        span_exporter,
        tracer_provider,
        tracing,
        world,
    )
