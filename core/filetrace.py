"""A lean OpenTelemetry tracer provider for the OTLP/JSON lines file.

The SDK's spans cost about 40 µs each on the engine's thread (samplers, bounded and
cleaned attributes, locks, span processors) and make six spans per pod network the
largest share of a traced reconcile. When the only destination is the trace file, this
provider implements the OpenTelemetry *API* (``TracerProvider`` / ``Tracer`` / ``Span``)
with plain slotted objects: a span is ids, times, a dict of attributes and a few lists;
ending it appends it to a queue; a background thread encodes batches to OTLP/JSON with
:func:`podnet.core.tracing.encode_json_line` and appends them to the file. Same data
model, same file format, a fraction of the cost; an OTLP endpoint still goes through the
SDK and its official exporter (``make_tracer_provider`` chooses).

Every span is sampled (the file is the demo's and the operator's full record); attribute
values are the OpenTelemetry primitive types or sequences of them, as the engine sets them.
"""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any, Protocol

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context, get_current
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    DEFAULT_TRACE_STATE,
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    use_span,
)
from opentelemetry.util.types import Attributes, AttributeValue

__all__ = ["CONTEXT_VAR", "LEAN_SPAN_TYPES", "SPAN_KEY", "UNSET_STATUS", "LeanSpan",
           "LeanTracer", "LeanTracerProvider"]

_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: The status every lean span starts with, shared (the encoder knows it at a glance).
UNSET_STATUS = Status(StatusCode.UNSET)

#: The key a Context holds its current span under, learnt through the public API: reading
#: it from the Context directly (and setting it in a copy) skips the API's nested calls
#: per span, a cost paid six times per pod network on the engine's thread.
SPAN_KEY: str = next(iter(trace.set_span_in_context(trace.INVALID_SPAN, Context())))




def _runtime_context_var() -> ContextVar[Context] | None:
    """The ContextVar that OpenTelemetry's runtime context keeps the current Context in,
    or None when it keeps it elsewhere (another runtime context, a changed API).

    Getting, setting and resetting it directly skips two Python calls of the API each
    (``get_current``, ``attach``, ``detach`` wrap the runtime context's methods, which wrap
    the ContextVar's): fourteen calls per pod network on the engine's thread. Found by
    looking, then proved by attaching a Context through the API and reading it back.
    """
    runtime = getattr(context_api, "_RUNTIME_CONTEXT", None)
    var = getattr(runtime, "_current_context", None)
    if not isinstance(var, ContextVar):
        return None
    probe = Context({"podnet.probe": True})
    token = context_api.attach(probe)
    try:
        if var.get() is not probe:
            return None
    finally:
        context_api.detach(token)
    return var if context_api.get_current() is var.get() else None


#: The current Context's ContextVar (see :func:`_runtime_context_var`); None: use the API.
CONTEXT_VAR: ContextVar[Context] | None = _runtime_context_var()

_new_tuple = tuple.__new__


class _Exporter(Protocol):
    def export(self, spans: Sequence[Any]) -> Any: ...

    def force_flush(self, timeout_millis: int = 30000) -> bool: ...

    def shutdown(self) -> None: ...


class _Event:
    __slots__ = ("attributes", "name", "timestamp")

    def __init__(self, name: str, attributes: Attributes, timestamp: int) -> None:
        self.name = name
        self.attributes = dict(attributes) if attributes else {}
        self.timestamp = timestamp


#: LeanSpan and its subclasses (the tracing package's scopes, each its own span): what
#: ``type(span) in LEAN_SPAN_TYPES`` takes for one of ours, without an ABC's isinstance
LEAN_SPAN_TYPES: set[type[Any]] = set()


class LeanSpan(trace.Span):
    """One span; read by the encoder through the same fields as the SDK's ReadableSpan.

    Its ids are plain ints and its parent the parent span itself (or a remote parent's
    SpanContext): the SpanContext the API asks for (``context``, ``parent``) is made when
    asked, so a span is one object to make, queue and free, not a span and its contexts.
    """

    __slots__ = ("_linked", "_parent", "_span_id", "_token", "_trace_id", "_tracer",
                 "attributes", "end_time", "events", "instrumentation_scope", "kind",
                 "links", "name", "resource", "start_time", "status")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        LEAN_SPAN_TYPES.add(cls)

    def __init__(self, tracer: LeanTracer, name: str, trace_id: int, span_id: int,
                 parent: SpanContext | None, kind: SpanKind, attributes: Attributes,
                 links: Sequence[Link] | None, start_time: int | None) -> None:
        self._tracer = tracer
        self.name = name
        self._trace_id = trace_id
        self._span_id = span_id
        #: the parent: a LeanSpan (its ids read as they are), a SpanContext or None
        self._parent: Any = parent
        self._token: Token[Context] | None = None
        self.kind = kind
        # copied: callers may reuse their dict, and the span must not change under export
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.links: Sequence[Link] = tuple(links) if links else ()
        #: the one span linked by the tracing package's transitions: a LeanSpan, a
        #: SpanContext or None (``links`` reads it)
        self._linked: Any = None
        # most spans have none: a list only once one comes (fewer objects for the collector)
        self.events: Sequence[_Event] = ()
        self.status: Status = UNSET_STATUS
        self.start_time = start_time if start_time is not None else time.time_ns()
        self.end_time: int | None = None
        self.resource = tracer._resource
        self.instrumentation_scope = tracer._scope

    @property
    def context(self) -> SpanContext:
        """SpanContext(trace_id, span_id, False, sampled), made in C (ids known valid)."""
        return _new_tuple(SpanContext, (self._trace_id, self._span_id, False, _SAMPLED,
                                        DEFAULT_TRACE_STATE, True))

    @property
    def parent(self) -> SpanContext | None:
        parent = self._parent
        context: SpanContext | None = (parent.context if type(parent) in LEAN_SPAN_TYPES
                                       else parent)
        return context

    def get_span_context(self) -> SpanContext:
        return self.context

    def is_recording(self) -> bool:
        return self.end_time is None

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self.end_time is None:
            self.attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        if self.end_time is None:
            self.attributes.update(attributes)

    def add_event(self, name: str, attributes: Attributes = None,
                  timestamp: int | None = None) -> None:
        if self.end_time is None:
            event = _Event(name, attributes, timestamp if timestamp is not None else time.time_ns())
            self.events = [*self.events, event]

    def update_name(self, name: str) -> None:
        if self.end_time is None:
            self.name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        if self.end_time is not None:
            return
        if isinstance(status, Status):
            new = status
        else:
            new = Status(status, description if status is StatusCode.ERROR else None)
        # as the SDK: OK is final, and UNSET never overwrites a set status
        if self.status.status_code is StatusCode.OK or new.status_code is StatusCode.UNSET:
            return
        self.status = new

    def record_exception(self, exception: BaseException, attributes: Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        cls = type(exception)
        event: dict[str, Any] = {"exception.type": cls.__qualname__,
                                 "exception.message": str(exception),
                                 "exception.escaped": str(escaped)}
        if attributes:
            event.update(attributes)
        self.add_event("exception", event, timestamp)

    def end(self, end_time: int | None = None) -> None:
        if self.end_time is not None:
            return
        self.end_time = end_time if end_time is not None else time.time_ns()
        provider = self._tracer._provider
        if provider._stopped:
            return
        queue = provider._queue
        queue.append(self)  # deque.append is atomic: no lock on the engine's path
        if len(queue) == provider._max_batch:  # once, when crossing: set() is not free
            provider._wake.set()


LEAN_SPAN_TYPES.add(LeanSpan)


class LeanTracer(trace.Tracer):
    __slots__ = ("_bits", "_provider", "_random", "_resource", "_scope")

    def __init__(self, provider: LeanTracerProvider, scope: InstrumentationScope) -> None:
        self._provider = provider
        self._random = provider.random
        #: a span's new id: getrandbits, bound once (a C call a span)
        self._bits = provider.random.getrandbits
        self._resource = provider.resource
        self._scope = scope

    def start_span(self, name: str, context: Context | None = None,
                   kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes = None,
                   links: Sequence[Link] | None = None, start_time: int | None = None,
                   record_exception: bool = True,
                   set_status_on_exception: bool = True) -> trace.Span:
        rand = self._random
        current: Any = (context if context is not None else get_current()).get(SPAN_KEY)
        parent: SpanContext | None
        if type(current) in LEAN_SPAN_TYPES:  # ours: valid, no checks needed
            parent = current.context
        elif current is not None and (
                parent := trace.get_current_span(context).get_span_context()).is_valid:
            pass
        else:  # no current span (a reconcile, a first transition): a new trace
            parent = None
        trace_id = parent[0] if parent is not None else rand.getrandbits(128) or 1
        return LeanSpan(self, name, trace_id, rand.getrandbits(64) or 1, parent, kind,
                        attributes, links, start_time)

    def start_under(self, name: str, parent: SpanContext | None, kind: SpanKind,
                    attributes: dict[str, Any], links: tuple[Link, ...] = ()) -> LeanSpan:
        """A span whose parent is ``parent``, a valid span context (None: the root of a
        new trace): :meth:`start_span` for callers that hold the parent's context rather
        than a Context around it. The span keeps ``attributes`` as it is (a dict made for
        this span alone; start_span copies the caller's)."""
        bits = self._bits
        span = LeanSpan(self, name, parent[0] if parent is not None else bits(128) or 1,
                        bits(64) or 1, parent, kind, None, links, None)
        span.attributes = attributes
        return span

    # the API types it with a private decorator's class; a plain context manager behaves alike
    @contextmanager
    def start_as_current_span(  # type: ignore[override]
            self, name: str, context: Context | None = None,
            kind: SpanKind = SpanKind.INTERNAL, attributes: Attributes = None,
            links: Sequence[Link] | None = None, start_time: int | None = None,
            record_exception: bool = True, set_status_on_exception: bool = True,
            end_on_exit: bool = True) -> Iterator[trace.Span]:
        span = self.start_span(name, context, kind, attributes, links, start_time)
        with use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                      set_status_on_exception=set_status_on_exception) as current:
            yield current


class LeanTracerProvider(trace.TracerProvider):
    """Spans end into a queue; a daemon thread hands batches to ``exporter`` every
    ``flush_interval`` seconds, or sooner once ``max_batch`` spans wait."""

    def __init__(self, exporter: _Exporter, resource: Resource, *,
                 flush_interval: float = 0.05, max_batch: int = 2048) -> None:
        self.resource = resource
        self.random = random.Random()
        self._exporter = exporter
        self._queue: deque[LeanSpan] = deque()
        self._max_batch = max_batch
        self._interval = flush_interval
        self._wake = threading.Event()
        self._flushes: deque[threading.Event] = deque()
        self._exported = 0
        self._stopped = False
        self._export_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="podnet-trace-export",
                                        daemon=True)
        self._thread.start()

    def get_tracer(self, instrumenting_module_name: str,
                   instrumenting_library_version: str | None = None,
                   schema_url: str | None = None,
                   attributes: Attributes = None) -> trace.Tracer:
        return LeanTracer(self, InstrumentationScope(
            instrumenting_module_name, instrumenting_library_version, schema_url))

    def _drain(self) -> None:
        queue = self._queue
        with self._export_lock:
            while queue:
                # spans are popped only here, under the lock: as many as counted are there
                pop = queue.popleft
                batch = [pop() for _ in range(min(len(queue), self._max_batch))]
                self._exporter.export(batch)
                self._exported += len(batch)

    @property
    def ended(self) -> int:
        """Spans ended so far and not dropped (what the file holds once flushed)."""
        return self._exported + len(self._queue)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._interval)
            self._wake.clear()
            waiting = len(self._flushes)
            self._drain()
            for _ in range(waiting):
                self._flushes.popleft().set()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Export what has ended, on the export thread (not the caller's), and wait."""
        if self._stopped or not self._thread.is_alive():
            self._drain()
        else:
            done = threading.Event()
            self._flushes.append(done)
            self._wake.set()
            if not done.wait(timeout_millis / 1000):
                return False
        return bool(self._exporter.force_flush(timeout_millis))

    def shutdown(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
        self._drain()
        self._exporter.shutdown()
