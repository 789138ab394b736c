"""Tracing: one span per reconcile, one per transition attempt, one per cloud or OVN call.

A PodNetwork's whole lifecycle is one trace. Its first transition starts a new root span
(linked, not parented, to the reconcile that ran it); the caller stores that span's W3C
``traceparent`` in the record's status, and every later transition of the record is a child
of that stored context, again linked to its own reconcile. Provider calls are CLIENT
children of the transition running them.

The tracer provider is always injected: ``Tracing(None)`` is the no-op mode, whose context
managers are shared stateless objects so that tracing off costs close to nothing.

Exception messages go through :func:`redact` before they reach a span: cloud SDK errors
echo request parameters, and traces leave the cluster.

The package's parts, one job each (import from the package: these names are its API):

* :mod:`.attributes`: the attribute keys and event names spans carry;
* :mod:`.traceparent`: the W3C ``traceparent`` a record's status stores;
* :mod:`.spans`: :class:`Tracing`, the reconcile, transition and client spans, and what
  makes a span ERROR;
* :mod:`.otlpjson`: the OTLP/JSON lines trace file, its exporter and its reader;
* :mod:`.tracer_provider`: the tracer provider from a command's flags and ``OTEL_*``.
"""

from __future__ import annotations

from podnet.core.redaction import redact
from podnet.core.tracing.attributes import (
    ATTR_CONTAINER,
    ATTR_ERROR_TYPE,
    ATTR_FROM,
    ATTR_INTERFACE,
    ATTR_IP,
    ATTR_MACHINE,
    ATTR_NAMESPACE,
    ATTR_NODE,
    ATTR_OBJECT,
    ATTR_POD,
    ATTR_PROVIDER,
    ATTR_RETRY,
    ATTR_RPC_METHOD,
    ATTR_RPC_SYSTEM,
    ATTR_TO,
    ATTR_TRIGGER,
    ATTR_WAITING,
    ATTR_WAITING_REASON,
    EVENT_RETRY,
    EVENT_WAITING,
    RETRY_CONFLICT,
    RETRY_THROTTLED,
    SCOPE_NAME,
)
from podnet.core.tracing.otlpjson import JsonLinesSpanExporter, encode_json_line, read_trace_file
from podnet.core.tracing.spans import Tracing, TransitionSpan, is_stale_read
from podnet.core.tracing.traceparent import format_traceparent, parse_traceparent
from podnet.core.tracing.tracer_provider import (
    TRACES_EXPORTERS,
    make_tracer_provider,
    otel_exporters,
    otel_resource,
    tracer_provider_from_env,
)

__all__ = [
    "ATTR_CONTAINER",
    "ATTR_ERROR_TYPE",
    "ATTR_FROM",
    "ATTR_INTERFACE",
    "ATTR_IP",
    "ATTR_MACHINE",
    "ATTR_NAMESPACE",
    "ATTR_NODE",
    "ATTR_OBJECT",
    "ATTR_POD",
    "ATTR_PROVIDER",
    "ATTR_RETRY",
    "ATTR_RPC_METHOD",
    "ATTR_RPC_SYSTEM",
    "ATTR_TO",
    "ATTR_TRIGGER",
    "ATTR_WAITING",
    "ATTR_WAITING_REASON",
    "EVENT_RETRY",
    "EVENT_WAITING",
    "RETRY_CONFLICT",
    "RETRY_THROTTLED",
    "SCOPE_NAME",
    "TRACES_EXPORTERS",
    "JsonLinesSpanExporter",
    "Tracing",
    "TransitionSpan",
    "encode_json_line",
    "format_traceparent",
    "is_stale_read",
    "make_tracer_provider",
    "otel_exporters",
    "otel_resource",
    "parse_traceparent",
    "read_trace_file",
    "redact",
    "tracer_provider_from_env",
]
