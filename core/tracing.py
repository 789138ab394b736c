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
"""

from __future__ import annotations

import base64
import enum
import functools
import json
import os
import re
import threading
import traceback
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import IO, Any, Final

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NoOpTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from podnet.core.errors import ConfigError
from podnet.core.filetrace import SPAN_KEY, UNSET_STATUS, LeanSpan, LeanTracerProvider
from podnet.core.redaction import redact

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
    "ATTR_RPC_METHOD",
    "ATTR_RPC_SYSTEM",
    "ATTR_TO",
    "ATTR_TRIGGER",
    "ATTR_WAITING",
    "ATTR_WAITING_REASON",
    "EVENT_WAITING",
    "JsonLinesSpanExporter",
    "Tracing",
    "TransitionSpan",
    "encode_json_line",
    "format_traceparent",
    "make_tracer_provider",
    "otel_exporters",
    "otel_resource",
    "parse_traceparent",
    "read_trace_file",
    "redact",
    "tracer_provider_from_env",
]

ATTR_MACHINE: Final = "podnet.machine"
ATTR_TRIGGER: Final = "podnet.trigger"
ATTR_FROM: Final = "podnet.state.from"
ATTR_TO: Final = "podnet.state.to"
ATTR_PROVIDER: Final = "podnet.provider"
ATTR_OBJECT: Final = "podnet.object"
ATTR_POD: Final = "k8s.pod.name"
ATTR_NAMESPACE: Final = "k8s.namespace.name"
ATTR_NODE: Final = "k8s.node.name"
ATTR_IP: Final = "podnet.ip"
ATTR_INTERFACE: Final = "podnet.interface"
#: OpenTelemetry's semantic convention for a container's id (the CNI sandbox)
ATTR_CONTAINER: Final = "container.id"
ATTR_ERROR_TYPE: Final = "error.type"
#: what a transition attempt that found nothing to take waits for (``address``): the
#: attempt is a wait, not a failure, and its span is not ERROR
ATTR_WAITING: Final = "podnet.waiting"
#: the span event of such an attempt, and its attribute saying why
EVENT_WAITING: Final = "waiting"
ATTR_WAITING_REASON: Final = "podnet.waiting.reason"
#: an attempt that ends to be retried at once, not failed: ``conflict`` (a write with a
#: stale ``resourceVersion``; the writer reads again). Its span event says why
ATTR_RETRY: Final = "podnet.retry"
RETRY_CONFLICT: Final = "conflict"
#: a provider call the cloud throttled: its caller waits and calls again (a read read
#: again soon, a grow after its backoff); the call's span is not ERROR
RETRY_THROTTLED: Final = "throttled"
EVENT_RETRY: Final = "retry"
ATTR_RPC_SYSTEM: Final = "rpc.system"
ATTR_RPC_METHOD: Final = "rpc.method"

#: Instrumentation scope of every podnet span.
SCOPE_NAME: Final = "podnet"

def _error_type(exc: BaseException) -> str:
    kind = getattr(exc, "kind", None)
    if kind is None:
        return type(exc).__qualname__
    # ErrorKind is a StrEnum; a plain Enum's str() would be "Cls.MEMBER", so take the value
    return str(kind.value) if isinstance(kind, enum.Enum) else str(kind)


def is_stale_read(exc: BaseException) -> bool:
    """A write refused for a stale ``resourceVersion`` (a 409 Conflict): the writer reads
    again and retries; a span it ends is not ERROR."""
    return getattr(exc, "stale_read", False) is True


def _is_wait(exc: BaseException) -> bool:
    """A provider's answer that no idle address fits (``ErrorKind.POOL_EMPTY``, a
    StrEnum): what its caller waits on, not a failure."""
    return getattr(exc, "kind", None) == "pool_empty"


def _is_throttled(exc: BaseException) -> bool:
    """A provider call the cloud throttled (``ErrorKind.THROTTLED``, a StrEnum)."""
    return getattr(exc, "kind", None) == "throttled"


def _mark_failed(span: Span, exc: BaseException, *, event: bool) -> None:
    if not span.is_recording():
        return
    error_type = _error_type(exc)
    message = redact(str(exc))
    span.set_attribute(ATTR_ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, f"{error_type}: {message}"))
    if event:
        cls = type(exc)
        module = cls.__module__
        # Our own event instead of span.record_exception: that one writes the raw message
        # and a stack trace that repeats it.
        span.add_event(
            "exception",
            {
                "exception.type": cls.__qualname__
                if module == "builtins"
                else f"{module}.{cls.__qualname__}",
                "exception.message": message,
                "exception.stacktrace": redact("".join(traceback.format_exception(exc))),
            },
        )


# -- traceparent -------------------------------------------------------------------------

_TRACEPARENT_RE: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?"
)


def format_traceparent(span_context: SpanContext) -> str:
    """W3C ``traceparent`` (version 00) of a span context; ValueError if it is invalid."""
    if not span_context.is_valid:
        raise ValueError("cannot format an invalid span context as traceparent")
    return (
        f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}"
        f"-{span_context.trace_flags & 0xFF:02x}"
    )


def parse_traceparent(value: str) -> SpanContext | None:
    """The remote span context in a W3C ``traceparent``; None when it is not valid."""
    if not isinstance(value, str) or len(value) > 512:
        return None
    return _parse_traceparent(value)


# A record's later transitions all parse the same stored value; SpanContext is an
# immutable tuple, so sharing one is safe.
@functools.lru_cache(maxsize=4096)
def _parse_traceparent(value: str) -> SpanContext | None:
    match = _TRACEPARENT_RE.fullmatch(value.strip())
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    # ff is forbidden; version 00 has exactly four fields, later versions may append more
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id = int(trace_hex, 16)
    span_id = int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    return SpanContext(
        trace_id=trace_id,
        span_id=span_id,
        is_remote=True,
        trace_flags=TraceFlags(int(flags_hex, 16)),
    )


# -- context managers ---------------------------------------------------------------------


class _NoopScope(AbstractContextManager[Span]):
    """Shared, stateless: what reconcile() and client() return when tracing is off."""

    __slots__ = ()

    def __enter__(self) -> Span:
        return INVALID_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NOOP_SCOPE: Final = _NoopScope()
# never mutated: the no-op TransitionSpan only holds it
_EMPTY_ATTRS: Final[dict[str, AttributeValue]] = {}


class _SpanScope(AbstractContextManager[Span]):
    """Starts a span on enter, makes it current, marks failure and ends it on exit.

    A plain class rather than @contextmanager: a generator per span costs measurably at
    thousands of spans a second.
    """

    __slots__ = ("_attributes", "_kind", "_name", "_span", "_token", "_tracer")

    def __init__(
        self,
        tracer: trace.Tracer,
        name: str,
        kind: SpanKind,
        attributes: dict[str, AttributeValue],
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._attributes = attributes
        self._span: Span = INVALID_SPAN
        self._token: Token[Context] | None = None

    def __enter__(self) -> Span:
        # the current context read once, for the parent and for the new one
        current = context_api.get_current()
        span = self._tracer.start_span(
            self._name,
            context=current,
            kind=self._kind,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = span
        # trace.set_span_in_context(span, current), without its two calls
        values = current.copy()
        values[SPAN_KEY] = span
        self._token = context_api.attach(Context(values))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            context_api.detach(self._token)
        span = self._span
        # like OpenTelemetry's use_span: BaseException (cancel, exit) is not a failure;
        # nor is a provider finding no idle address (its transition waits)
        if exc is not None and isinstance(exc, Exception):
            if _is_wait(exc):
                if span.is_recording():
                    span.set_attribute(ATTR_WAITING, "address")
            elif is_stale_read(exc):
                if span.is_recording():
                    span.set_attribute(ATTR_RETRY, RETRY_CONFLICT)
            elif self._kind is SpanKind.CLIENT and _is_throttled(exc):
                # waiting is not failing: the cloud said "later", and the caller calls
                # again; a caller that gives up says so on its own (reconcile) span
                if span.is_recording():
                    span.set_attribute(ATTR_RETRY, RETRY_THROTTLED)
                    span.add_event(EVENT_RETRY, {ATTR_RETRY: RETRY_THROTTLED,
                                                 ATTR_WAITING_REASON: redact(str(exc))})
            else:
                _mark_failed(span, exc, event=False)
        span.end()


class TransitionSpan(AbstractContextManager["TransitionSpan"]):
    """One transition attempt; returned by :meth:`Tracing.transition`, entered by ``with``.

    While the body runs the span is current, so provider client spans nest under it. If the
    body raises, the span gets status ERROR, ``error.type`` and a redacted exception event,
    and the exception goes on.
    """

    __slots__ = ("_attributes", "_name", "_span", "_token", "_traceparent", "_tracer",
                 "_waiting")

    def __init__(
        self,
        tracer: trace.Tracer | None,
        name: str,
        attributes: dict[str, AttributeValue],
        traceparent: str | None,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._attributes = attributes
        self._traceparent = traceparent
        self._span: Span = INVALID_SPAN
        self._token: Token[Context] | None = None
        self._waiting = False

    @property
    def traceparent(self) -> str | None:
        """What the caller stores in status.traceparent: the lifecycle trace's context.

        The one given if it was valid, else this (root) span's own; None with tracing off
        and no stored value.
        """
        if self._traceparent is None:
            ctx = self._span.get_span_context()
            if ctx.is_valid:
                self._traceparent = format_traceparent(ctx)
        return self._traceparent

    @property
    def span(self) -> Span:
        return self._span

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute; None is skipped so callers can pass optional fields as they are."""
        if value is not None:
            self._span.set_attribute(key, value)

    def succeeded(self, dest: str) -> None:
        """Record the state the transition reached."""
        self._span.set_attribute(ATTR_TO, dest)

    def waiting(self, what: str, reason: str) -> None:
        """The attempt waits for ``what`` (``address``) rather than failing: the span
        gets ``podnet.waiting`` and a ``waiting`` event saying why (redacted), and the
        exception ending it does not make it ERROR."""
        self._waiting = True
        span = self._span
        if not span.is_recording():
            return
        span.set_attribute(ATTR_WAITING, what)
        span.add_event(EVENT_WAITING, {ATTR_WAITING: what, ATTR_WAITING_REASON: redact(reason)})

    def __enter__(self) -> TransitionSpan:
        tracer = self._tracer
        if tracer is None:
            return self
        current_ctx = context_api.get_current()
        current_span = current_ctx.get(SPAN_KEY)
        if type(current_span) is LeanSpan:  # the reconcile's: valid, no API calls needed
            links: tuple[Link, ...] = (Link(current_span.context),)
        else:
            current = trace.get_current_span(current_ctx).get_span_context()
            links = (Link(current),) if current.is_valid else ()
        parent = parse_traceparent(self._traceparent) if self._traceparent else None
        if parent is None:
            # first transition (or an unusable stored value): a new root, so the lifecycle
            # trace does not hang under one reconcile
            self._traceparent = None
            parent_ctx = Context()
        else:
            parent_ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent), current_ctx)
        span = tracer.start_span(
            self._name,
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes=self._attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = span
        values = current_ctx.copy()  # as trace.set_span_in_context(span, current_ctx)
        values[SPAN_KEY] = span
        self._token = context_api.attach(Context(values))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tracer is None:
            return None
        if self._token is not None:
            context_api.detach(self._token)
        span = self._span
        if isinstance(exc, Exception) and not self._waiting:
            if is_stale_read(exc):
                if span.is_recording():
                    span.set_attribute(ATTR_RETRY, RETRY_CONFLICT)
                    span.add_event(EVENT_RETRY, {ATTR_RETRY: RETRY_CONFLICT,
                                                 ATTR_WAITING_REASON: redact(str(exc))})
            else:
                _mark_failed(span, exc, event=True)
        span.end()
        return None


class Tracing:
    """The engine's handle on tracing; ``Tracing(None)`` is off and nearly free."""

    __slots__ = ("_enabled", "_tracer")

    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._enabled = tracer_provider is not None and not isinstance(
            tracer_provider, NoOpTracerProvider
        )
        self._tracer: trace.Tracer | None = (
            tracer_provider.get_tracer(SCOPE_NAME)
            if tracer_provider is not None and self._enabled
            else None
        )

    @property
    def enabled(self) -> bool:
        return self._enabled

    def reconcile(self, controller: str, key: str) -> AbstractContextManager[Span]:
        """Span for one reconcile of ``key``, current while the body runs."""
        if self._tracer is None:
            return _NOOP_SCOPE
        return _SpanScope(
            self._tracer, f"reconcile {controller}", SpanKind.INTERNAL, {ATTR_OBJECT: key}
        )

    def transition(
        self,
        machine: str,
        trigger: str,
        *,
        source: str,
        provider: str,
        obj: str,
        traceparent: str | None,
        attributes: Mapping[str, str | int | bool | None] | None = None,
    ) -> TransitionSpan:
        """Span for one attempt of ``machine.trigger`` from state ``source``.

        ``traceparent`` is the record's stored lifecycle context (None on its first
        transition); read the value to store back from the returned span's ``traceparent``.
        """
        if self._tracer is None:
            return TransitionSpan(None, "", _EMPTY_ATTRS, traceparent)
        attrs: dict[str, AttributeValue] = {
            ATTR_MACHINE: machine,
            ATTR_TRIGGER: trigger,
            ATTR_FROM: source,
            ATTR_PROVIDER: provider,
            ATTR_OBJECT: obj,
        }
        if attributes:
            for k, v in attributes.items():
                if v is not None:
                    attrs[k] = v
        return TransitionSpan(self._tracer, f"{machine}.{trigger}", attrs, traceparent)

    def client(self, provider: str, api: str) -> AbstractContextManager[Span]:
        """CLIENT span for one cloud or OVN call, child of the current transition."""
        if self._tracer is None:
            return _NOOP_SCOPE
        return _SpanScope(
            self._tracer,
            f"{provider}.{api}",
            SpanKind.CLIENT,
            {ATTR_PROVIDER: provider, ATTR_RPC_SYSTEM: provider, ATTR_RPC_METHOD: api},
        )


# -- OTLP JSON file --------------------------------------------------------------------------

_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


def _to_any_value(value: Any) -> dict[str, Any]:
    # bool before int: bool is an int in Python, not in OTLP
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a string in ProtoJSON
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_to_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _to_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": k, "value": _to_any_value(v)} for k, v in (attributes or {}).items()]


def _span_dict(span: ReadableSpan) -> dict[str, Any]:
    """One span as its OTLP/JSON object: the reference form that :func:`_span_json` writes
    directly, and the fallback for what that fast path does not take."""
    ctx = span.context
    assert ctx is not None
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        # OTLP numbers kinds from 1 (0 is "unspecified"); the SDK from 0
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "flags": 0x100 | int(ctx.trace_flags),
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.attributes:
        out["attributes"] = _to_attributes(span.attributes)
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(ev.timestamp), "name": ev.name,
             "attributes": _to_attributes(ev.attributes)}
            for ev in span.events
        ]
    if span.links:
        out["links"] = [
            {"traceId": f"{link.context.trace_id:032x}",
             "spanId": f"{link.context.span_id:016x}",
             "attributes": _to_attributes(link.attributes)}
            for link in span.links
        ]
    out["status"] = _status_dict(span.status)
    return out


def _status_dict(status: Status) -> dict[str, Any]:
    # ProtoJSON leaves out default values: an unset status is {}
    out: dict[str, Any] = {}
    if status.status_code.value:
        out["code"] = status.status_code.value
    if status.description:
        out["message"] = status.description
    return out


# The encoder writes the JSON text itself, exactly as json.dumps(..., separators=(",", ":"))
# writes the dicts above: building the dicts and dumping them cost three times as much,
# on the thread that competes with the engine for the GIL. Rare values (floats, sequences,
# subclasses, ids out of range) go through the dicts and json.dumps, so the text is the same.
_SEPARATORS: Final = (",", ":")
_json_str: Final = json.encoder.encode_basestring_ascii  # what json.dumps uses (C)
_BOOL_VALUES: Final = ('{"boolValue":false}', '{"boolValue":true}')
# (key, value) -> its KeyValue text, for string values: most repeat (machine, trigger,
# states, provider, API, node). Cleared when full, so values seen once do not crowd it for
# long. Exporter threads may share it: get, set and clear are atomic, a lost entry is redone.
_KEY_VALUES: Final[dict[tuple[str, str], str]] = {}
_KEY_VALUES_MAX: Final = 4096


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=_SEPARATORS)


def _key_value_json(item: tuple[Any, Any]) -> str:
    key, value = item
    if type(key) is str and type(value) is str:
        out = f'{{"key":{_json_str(key)},"value":{{"stringValue":{_json_str(value)}}}}}'
        if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
            _KEY_VALUES.clear()
        _KEY_VALUES[item] = out
        return out
    cls = type(value)
    if cls is bool:
        value_json = _BOOL_VALUES[value]
    elif cls is int:
        value_json = f'{{"intValue":"{value}"}}'
    else:
        value_json = _dumps(_to_any_value(value))
    return f'{{"key":{_json_str(key) if type(key) is str else _dumps(key)},"value":{value_json}}}'


def _attributes_json(attributes: Mapping[str, Any] | None) -> str:
    """The JSON array of OTLP KeyValues, as json.dumps(_to_attributes(attributes))."""
    if not attributes:
        return "[]"
    cached = _KEY_VALUES.get
    try:
        return "[" + ",".join([cached(item) or _key_value_json(item)
                               for item in attributes.items()]) + "]"
    except TypeError:  # an unhashable value (a list): not for the cache
        return "[" + ",".join([_key_value_json(item) for item in attributes.items()]) + "]"


def _span_json(span: ReadableSpan) -> str:
    """json.dumps(_span_dict(span)), written directly."""
    ctx = span.context
    assert ctx is not None
    name = span.name
    parent = span.parent
    attributes = span.attributes
    events = span.events
    links = span.links
    status = span.status
    if type(name) is not str or events:  # rare (failures): the reference form
        return _dumps(_span_dict(span))
    # bytes.hex of the fixed-width id: what f"{id:032x}" gives, at half the cost (an id
    # too wide raises OverflowError, and the caller takes the reference form)
    parent_json = ("" if parent is None else
                   f',"parentSpanId":"{parent.span_id.to_bytes(8, "big").hex()}"')
    attributes_json = ',"attributes":' + _attributes_json(attributes) if attributes else ""
    links_json = "" if not links else ',"links":[' + ",".join([
        f'{{"traceId":"{link.context.trace_id.to_bytes(16, "big").hex()}",'
        f'"spanId":"{link.context.span_id.to_bytes(8, "big").hex()}",'
        f'"attributes":{_attributes_json(link.attributes) if link.attributes else "[]"}}}'
        for link in links]) + "]"
    status_json = ("{}" if status is UNSET_STATUS
                   or (status.status_code is StatusCode.UNSET and not status.description)
                   else _dumps(_status_dict(status)))
    # one f-string: each + would copy the span's text so far again
    return (f'{{"traceId":"{ctx.trace_id.to_bytes(16, "big").hex()}",'
            f'"spanId":"{ctx.span_id.to_bytes(8, "big").hex()}",'
            f'"name":{_json_str(name)},"kind":{span.kind.value + 1},'
            f'"startTimeUnixNano":"{span.start_time or 0}",'
            f'"endTimeUnixNano":"{span.end_time or 0}",'
            f'"flags":{0x100 | int(ctx.trace_flags)}'
            f'{parent_json}{attributes_json}{links_json},"status":{status_json}}}')


def encode_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One ExportTraceServiceRequest in OTLP/JSON (ids as lowercase hex), without newline.

    Built straight from the SDK's spans: going through the protobuf encoder and ProtoJSON
    costs many times as much per span, on the thread that competes with the engine. The
    text is what json.dumps (compact separators) writes for the request as dicts.
    """
    by_resource: dict[int, tuple[Any, dict[tuple[str, str | None], list[str]]]] = {}
    # a batch is nearly always one resource and one scope: skip the lookups while it lasts
    last_resource: Any = None
    last_scope: Any = None
    span_jsons: list[str] = []
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope
        if resource is not last_resource or scope is not last_scope or not by_resource:
            entry = by_resource.setdefault(id(resource), (resource, {}))
            scope_key = (scope.name, scope.version) if scope is not None else ("", None)
            span_jsons = entry[1].setdefault(scope_key, [])
            last_resource, last_scope = resource, scope
        try:
            span_jsons.append(_span_json(span))
        except OverflowError:
            span_jsons.append(_dumps(_span_dict(span)))
    # the pieces in order, joined once: the spans' text is copied once, not per nesting level
    parts = ['{"resourceSpans":[']
    for resource, scopes in by_resource.values():
        if len(parts) > 1:
            parts.append(",")
        parts.append('{"resource":{"attributes":'
                     + _attributes_json(resource.attributes if resource else None)
                     + '},"scopeSpans":[')
        for i, ((name, version), encoded) in enumerate(scopes.items()):
            scope_json = _dumps({"name": name, **({"version": version} if version else {})})
            parts.append(f'{"," if i else ""}{{"scope":{scope_json},"spans":[')
            parts.append(",".join(encoded))
            parts.append("]}")
        parts.append("]}")
    parts.append("]}")
    return "".join(parts)


class JsonLinesSpanExporter(SpanExporter):
    """Appends one OTLP/JSON ExportTraceServiceRequest per export() call, one per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        parent = os.path.dirname(self._path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(self._path, "a", encoding="utf-8")  # noqa: SIM115

    @property
    def path(self) -> str:
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        # encode outside the lock: it is the expensive part
        line = encode_json_line(spans)
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._file.write(line)
                self._file.write("\n")  # not line + "\n": that copies the whole batch again
                self._file.flush()
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _any_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in value["arrayValue"].get("values", ())]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: _any_value(kv.get("value", {})) for kv in items}


def read_trace_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON lines file, flattened into plain dicts.

    Each dict has: name, traceId, spanId, parentSpanId (None for a root), kind (OTLP
    integer: 1 internal, 3 client), attributes {key: python value}, status
    {"code": int, "message": str} and statusCode (0 unset, 1 ok, 2 error), events
    [{name, attributes}], links [{traceId, spanId, attributes}], startTimeUnixNano,
    endTimeUnixNano (ints), service (resource service.name) and scope (its name).
    """
    spans: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            request = json.loads(line)
            for resource_spans in request.get("resourceSpans", ()):
                resource = _attributes(resource_spans.get("resource", {}).get("attributes", ()))
                for scope_spans in resource_spans.get("scopeSpans", ()):
                    scope = scope_spans.get("scope", {}).get("name", "")
                    for raw in scope_spans.get("spans", ()):
                        status = raw.get("status", {})
                        code = int(status.get("code", 0))
                        spans.append(
                            {
                                "name": raw.get("name", ""),
                                "traceId": raw.get("traceId", ""),
                                "spanId": raw.get("spanId", ""),
                                "parentSpanId": raw.get("parentSpanId") or None,
                                "kind": int(raw.get("kind", 0)),
                                "attributes": _attributes(raw.get("attributes", ())),
                                "status": {"code": code, "message": status.get("message", "")},
                                "statusCode": code,
                                "events": [
                                    {
                                        "name": ev.get("name", ""),
                                        "attributes": _attributes(ev.get("attributes", ())),
                                    }
                                    for ev in raw.get("events", ())
                                ],
                                "links": [
                                    {
                                        "traceId": ln.get("traceId", ""),
                                        "spanId": ln.get("spanId", ""),
                                        "attributes": _attributes(ln.get("attributes", ())),
                                    }
                                    for ln in raw.get("links", ())
                                ],
                                "startTimeUnixNano": int(raw.get("startTimeUnixNano", 0)),
                                "endTimeUnixNano": int(raw.get("endTimeUnixNano", 0)),
                                "service": resource.get(SERVICE_NAME),
                                "scope": scope,
                            }
                        )
    return spans


# -- provider ------------------------------------------------------------------------------


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
