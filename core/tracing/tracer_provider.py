"""The tracer provider a command runs with: from its flags (a trace file, an OTLP
endpoint) and the ``OTEL_*`` environment, checked as the SDK would read it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
)

from podnet.core.errors import ConfigError
from podnet.core.filetrace import LeanTracerProvider
from podnet.core.tracing.otlpjson import JsonLinesSpanExporter

#: what ``OTEL_TRACES_EXPORTER`` may name (the SDK's: OTLP over HTTP/protobuf, console)
TRACES_EXPORTERS: Final = frozenset({"otlp", "console", "none"})
#: the samplers ``OTEL_TRACES_SAMPLER`` may name, and whether they take an argument
_SAMPLERS: Final = {"always_on": False, "always_off": False, "parentbased_always_on": False,
                    "parentbased_always_off": False, "traceidratio": True,
                    "parentbased_traceidratio": True}


def _otel_env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def otel_exporters() -> frozenset[str]:
    """The exporters the ``OTEL_*`` environment asks for, as the SDK documents it:
    ``OTEL_TRACES_EXPORTER`` (comma-separated; ``none``: none) or, when it is unset, OTLP
    once an endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``..._TRACES_ENDPOINT``) is set.
    :raises ConfigError: naming the variable, for a value the SDK would not take."""
    named = _otel_env("OTEL_TRACES_EXPORTER")
    if named is None:
        endpoint = (_otel_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
                    or _otel_env("OTEL_EXPORTER_OTLP_ENDPOINT"))
        chosen = frozenset({"otlp"}) if endpoint else frozenset()
    else:
        chosen = frozenset(n.strip().lower() for n in named.split(",") if n.strip())
        unknown = sorted(chosen - TRACES_EXPORTERS)
        if unknown:
            raise ConfigError("OTEL_TRACES_EXPORTER", f"unknown exporter {unknown[0]!r} "
                              f"(podnet has: {', '.join(sorted(TRACES_EXPORTERS))})")
        chosen = frozenset() if "none" in chosen else chosen
    if "otlp" in chosen:
        protocol = (_otel_env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
                    or _otel_env("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf")
        if protocol != "http/protobuf":
            raise ConfigError("OTEL_EXPORTER_OTLP_PROTOCOL",
                              f"{protocol!r} is not supported (podnet exports http/protobuf)")
    sampler = _otel_env("OTEL_TRACES_SAMPLER")
    if sampler is not None:
        if sampler not in _SAMPLERS:
            raise ConfigError("OTEL_TRACES_SAMPLER", f"unknown sampler {sampler!r} "
                              f"(known: {', '.join(_SAMPLERS)})")
        arg = _otel_env("OTEL_TRACES_SAMPLER_ARG")
        if _SAMPLERS[sampler] and arg is not None:
            try:
                ratio = float(arg)
            except ValueError:
                ratio = -1.0
            if not 0.0 <= ratio <= 1.0:
                raise ConfigError("OTEL_TRACES_SAMPLER_ARG",
                                  f"{arg!r} is not a ratio between 0 and 1")
    return chosen


def otel_resource(service_name: str) -> Resource:
    """The SDK's resource (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_SERVICE_NAME``, which
    wins), with ``service_name`` only where neither names the service."""
    resource = Resource.create()
    if SERVICE_NAME not in OTELResourceDetector().detect().attributes:
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    return resource


def tracer_provider_from_env(
    *,
    service_name: str = "podnet",
    trace_file: str | None = None,
    otlp_endpoint: str | None = None,
    batch: bool = True,
) -> SdkTracerProvider | LeanTracerProvider | None:
    """The provider a command's flags and the ``OTEL_*`` environment ask for; None when
    neither asks for any exporter (tracing off). ``otlp_endpoint`` (a flag) is the full
    signal URL and replaces the environment's OTLP endpoint.
    :raises ConfigError: for an ``OTEL_*`` value the SDK would not take."""
    exporters: list[SpanExporter] = []
    from_env = otel_exporters()
    if "otlp" in from_env and otlp_endpoint is None:
        # imported here: requests is only paid for when OTLP is configured
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # no endpoint given: the exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT,
        # headers, timeout and compression itself, as the SDK documents
        exporters.append(OTLPSpanExporter())
    if "console" in from_env:
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        exporters.append(ConsoleSpanExporter())
    if trace_file is None and otlp_endpoint is None and not exporters:
        return None
    return make_tracer_provider(service_name=service_name, trace_file=trace_file,
                                otlp_endpoint=otlp_endpoint, exporters=exporters,
                                batch=batch)


def make_tracer_provider(
    *,
    service_name: str = "podnet",
    trace_file: str | None = None,
    otlp_endpoint: str | None = None,
    exporters: Sequence[SpanExporter] = (),
    batch: bool = True,
) -> SdkTracerProvider | LeanTracerProvider:
    """A provider exporting to an OTLP/JSON lines file, an OTLP/HTTP endpoint and/or the
    given exporters.

    The file alone gets the lean provider (:mod:`podnet.core.filetrace`: the same spans
    and file at a fraction of the SDK's cost on the engine's thread); anything else the
    SDK with its official exporters. ``otlp_endpoint`` is the full signal URL, e.g.
    ``http://collector:4318/v1/traces``. ``batch=False`` exports synchronously on span
    end (tests, short demo runs).
    """
    resource = otel_resource(service_name)
    # the lean provider samples everything: a sampler asked for takes the SDK's
    if (trace_file is not None and otlp_endpoint is None and not exporters and batch
            and _otel_env("OTEL_TRACES_SAMPLER") is None):
        return LeanTracerProvider(JsonLinesSpanExporter(trace_file), resource)
    # the sampler: OTEL_TRACES_SAMPLER and its argument, read by the SDK
    provider = SdkTracerProvider(resource=resource)
    chosen: list[SpanExporter] = []
    if trace_file is not None:
        chosen.append(JsonLinesSpanExporter(trace_file))
    if otlp_endpoint is not None:
        # imported here: requests is only paid for when OTLP is configured
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        chosen.append(OTLPSpanExporter(endpoint=otlp_endpoint))
    chosen.extend(exporters)
    for exporter in chosen:
        processor: SpanProcessor = (
            BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
        )
        provider.add_span_processor(processor)
    return provider
