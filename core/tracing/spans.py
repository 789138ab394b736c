"""The spans themselves: one per reconcile, one per transition attempt, one per provider
call, and what makes a span ERROR (a failure) or not (a wait, a retry).

The context managers are plain classes rather than ``@contextmanager`` generators, and
the no-op ones are shared stateless objects, so that tracing off costs close to nothing.
"""

from __future__ import annotations

import enum
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import Any, Final, Protocol

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    Link,
    NoOpTracerProvider,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)
from opentelemetry.util.types import AttributeValue

from podnet.core.filetrace import (
    CONTEXT_VAR,
    LEAN_SPAN_TYPES,
    SPAN_KEY,
    UNSET_STATUS,
    LeanSpan,
    LeanTracer,
)
from podnet.core.redaction import redact
from podnet.core.tracing.attributes import (
    ATTR_ERROR_TYPE,
    ATTR_FROM,
    ATTR_MACHINE,
    ATTR_OBJECT,
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
from podnet.core.tracing.traceparent import (
    format_ids,
    format_traceparent,
    formatted_parse,
    parse_traceparent,
)


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




# The current Context: read, set and reset on its ContextVar when OpenTelemetry's runtime
# context is the default one (bound methods of C: no Python frame), else through the API.
_get_current: Callable[[], Context]
_attach: Callable[[Context], Token[Context]]
_reset: Callable[[Token[Context]], None]
if CONTEXT_VAR is not None:
    _get_current = CONTEXT_VAR.get
    _attach = CONTEXT_VAR.set
    _reset = CONTEXT_VAR.reset
else:  # pragma: no cover - another runtime context configured
    _get_current = context_api.get_current
    _attach = context_api.attach
    _reset = context_api.detach


def _current_parent(current: Context) -> SpanContext | None:
    """The valid span context of ``current``'s span, or None (a new trace)."""
    span: Any = current.get(SPAN_KEY)
    if type(span) in LEAN_SPAN_TYPES:
        lean: SpanContext = span.context
        return lean
    if span is None:
        return None
    ctx = trace.get_current_span(current).get_span_context()
    return ctx if ctx.is_valid else None


def _scope_failed(span: Span, kind: SpanKind, exc: Exception) -> None:
    """What a reconcile, step or client span says of the exception ending it."""
    # like OpenTelemetry's use_span: BaseException (cancel, exit) is not a failure (the
    # caller passes Exceptions only); nor is a provider finding no idle address (its
    # transition waits)
    if _is_wait(exc):
        if span.is_recording():
            span.set_attribute(ATTR_WAITING, "address")
    elif is_stale_read(exc):
        if span.is_recording():
            span.set_attribute(ATTR_RETRY, RETRY_CONFLICT)
    elif kind is SpanKind.CLIENT and _is_throttled(exc):
        # waiting is not failing: the cloud said "later", and the caller calls
        # again; a caller that gives up says so on its own (reconcile) span
        if span.is_recording():
            span.set_attribute(ATTR_RETRY, RETRY_THROTTLED)
            span.add_event(EVENT_RETRY, {ATTR_RETRY: RETRY_THROTTLED,
                                         ATTR_WAITING_REASON: redact(str(exc))})
    else:
        _mark_failed(span, exc, event=False)


def _transition_failed(span: Span, exc: Exception) -> None:
    """What a transition's span says of the exception ending it (not a wait's)."""
    if is_stale_read(exc):
        if span.is_recording():
            span.set_attribute(ATTR_RETRY, RETRY_CONFLICT)
            span.add_event(EVENT_RETRY, {ATTR_RETRY: RETRY_CONFLICT,
                                         ATTR_WAITING_REASON: redact(str(exc))})
    else:
        _mark_failed(span, exc, event=True)


_new_object = object.__new__
_time_ns = time.time_ns


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
    """Starts an API tracer's span on enter, makes it current, marks failure and ends it
    on exit (the lean tracer's spans are their own scopes: :class:`_LeanScope`).

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
        current = _get_current()
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
        self._token = _attach(Context(values))
        return span

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            try:
                _reset(self._token)
            except (ValueError, RuntimeError):  # left in another Context than entered
                context_api.detach(self._token)  # the API's own handling: it logs
        span = self._span
        if exc is not None and isinstance(exc, Exception):
            _scope_failed(span, self._kind, exc)
        span.end()


class TransitionSpan(Protocol):
    """One transition attempt; returned by :meth:`Tracing.transition`, entered by ``with``.

    While the body runs the span is current, so provider client spans nest under it. If the
    body raises, the span gets status ERROR, ``error.type`` and a redacted exception event,
    and the exception goes on.
    """

    @property
    def traceparent(self) -> str | None:
        """What the caller stores in status.traceparent: the lifecycle trace's context.

        The one given if it was valid, else this (root) span's own; None with tracing off
        and no stored value.
        """

    @property
    def span(self) -> Span:
        """The span itself (INVALID_SPAN with tracing off or before ``with``)."""

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute; None is skipped so callers can pass optional fields as they are."""

    def succeeded(self, dest: str) -> None:
        """Record the state the transition reached."""

    def waiting(self, what: str, reason: str) -> None:
        """The attempt waits for ``what`` (``address``) rather than failing: the span
        gets ``podnet.waiting`` and a ``waiting`` event saying why (redacted), and the
        exception ending it does not make it ERROR."""

    def __enter__(self) -> TransitionSpan: ...

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


class _ApiTransition(AbstractContextManager["_ApiTransition"]):
    """A :class:`TransitionSpan` around an API tracer's span (the SDK's), or none with
    tracing off (``tracer`` None)."""

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
        if self._traceparent is None and self._tracer is not None:  # off: nothing to give
            ctx = self._span.get_span_context()
            if ctx[5]:  # is_valid, by index (a SpanContext is a tuple)
                self._traceparent = format_traceparent(ctx)
        return self._traceparent

    @property
    def span(self) -> Span:
        return self._span

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None and self._tracer is not None:  # off: a no-op span's call saved
            self._span.set_attribute(key, value)

    def succeeded(self, dest: str) -> None:
        if self._tracer is not None:
            self._span.set_attribute(ATTR_TO, dest)

    def waiting(self, what: str, reason: str) -> None:
        self._waiting = True
        span = self._span
        if not span.is_recording():
            return
        span.set_attribute(ATTR_WAITING, what)
        span.add_event(EVENT_WAITING, {ATTR_WAITING: what, ATTR_WAITING_REASON: redact(reason)})

    def __enter__(self) -> _ApiTransition:
        tracer = self._tracer
        if tracer is None:
            return self
        current_ctx = _get_current()
        current = _current_parent(current_ctx)  # the reconcile's span: linked
        links = () if current is None else (Link(current),)
        parent = parse_traceparent(self._traceparent) if self._traceparent else None
        if parent is None:
            # first transition (or an unusable stored value): a new root, so the lifecycle
            # trace does not hang under one reconcile
            self._traceparent = None
        span = tracer.start_span(
            self._name,
            context=Context() if parent is None else trace.set_span_in_context(
                trace.NonRecordingSpan(parent), current_ctx),
            kind=SpanKind.INTERNAL,
            attributes=self._attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = span
        values = current_ctx.copy()  # as trace.set_span_in_context(span, current_ctx)
        values[SPAN_KEY] = span
        self._token = _attach(Context(values))
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
            try:
                _reset(self._token)
            except (ValueError, RuntimeError):  # left in another Context than entered
                context_api.detach(self._token)  # the API's own handling: it logs
        span = self._span
        if isinstance(exc, Exception) and not self._waiting:
            _transition_failed(span, exc)
        span.end()
        return None


# The lean tracer's spans are their own scopes: one object a span (not a scope, a span,
# its SpanContext, a Link and a tuple), made by Tracing's reconcile, client and transition
# without a Python call, started on enter, ended into the provider's queue on exit
# without one either. One class for
# reconciles, steps, provider calls and transitions alike: the encoder reads every span's
# fields at the same places, which stay specialised only while every span has one type.


class _LeanScope(LeanSpan):
    """A lean span and its own scope: a reconcile, step or client span (as
    :class:`_SpanScope`), or a transition's and its :class:`TransitionSpan` (as
    :class:`_ApiTransition`), as ``_transition`` says."""

    __slots__ = ("_traceparent", "_transition")

    #: a transition's span (else a reconcile's, a step's or a provider call's)
    _transition: bool
    #: a transition's lifecycle context: the one stored, else its own once formatted
    _traceparent: str | None
    #: set once a transition's attempt waits (rare: the span's own only then)
    _waiting = False

    @property
    def links(self) -> Sequence[Link]:  # type: ignore[override]  # read-only: made when read
        """A transition's reconcile, linked: made when read (the encoder reads the linked
        span's ids instead)."""
        linked = self._linked
        if linked is None:
            return ()
        return (Link(linked.context if type(linked) in LEAN_SPAN_TYPES else linked),)

    @property
    def traceparent(self) -> str | None:
        value = self._traceparent
        if value is None and self._trace_id:  # not before the span starts
            value = self._traceparent = format_ids(self._trace_id, self._span_id)
        return value

    @property
    def span(self) -> Span:
        return self

    def set(self, key: str, value: AttributeValue | None) -> None:
        if value is not None and self.end_time is None:
            self.attributes[key] = value

    def succeeded(self, dest: str) -> None:
        if self.end_time is None:
            self.attributes[ATTR_TO] = dest

    def waiting(self, what: str, reason: str) -> None:
        self._waiting = True
        if self.end_time is None:
            self.attributes[ATTR_WAITING] = what
            self.add_event(EVENT_WAITING, {ATTR_WAITING: what,
                                           ATTR_WAITING_REASON: redact(reason)})

    def __enter__(self) -> _LeanScope:
        current = _get_current()
        tracer = self._tracer
        span: Any = current.get(SPAN_KEY)  # the current span: the parent, or linked
        if self._transition:
            if span is not None and type(span) not in LEAN_SPAN_TYPES:
                span = _current_parent(current)
            self._linked = span
            stored = self._traceparent
            parent = (formatted_parse(stored) or parse_traceparent(stored)) if stored else None
            if parent is None:
                # first transition (or an unusable stored value): a new root, so the
                # lifecycle trace does not hang under one reconcile
                self._traceparent = None
                self._trace_id = tracer._bits(128) or 1
            else:
                self._trace_id = parent[0]
            self._parent = parent
        else:
            if type(span) in LEAN_SPAN_TYPES:  # the usual parent: its ids read as they are
                self._trace_id = span._trace_id
            elif span is None:  # a reconcile: a new trace
                self._trace_id = tracer._bits(128) or 1
            else:  # another tracer's span
                span = _current_parent(current)
                self._trace_id = span[0] if span is not None else tracer._bits(128) or 1
            self._parent = span
        self._span_id = tracer._bits(64) or 1
        self.start_time = _time_ns()
        # trace.set_span_in_context(self, current), without its two calls
        values = current.copy()
        values[SPAN_KEY] = self
        self._token = _attach(Context(values))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        if token is not None:
            self._token = None  # a span in the queue holds no Context
            try:
                _reset(token)
            except (ValueError, RuntimeError):  # left in another Context than entered
                context_api.detach(token)  # the API's own handling: it logs
        if exc is not None and isinstance(exc, Exception):
            if not self._transition:
                _scope_failed(self, self.kind, exc)
            elif not self._waiting:
                _transition_failed(self, exc)
        if self.end_time is None:  # self.end(), inline
            self.end_time = _time_ns()
            provider = self._tracer._provider
            if not provider._stopped:
                queue = provider._queue
                queue.append(self)  # atomic: no lock on the engine's path
                if len(queue) == provider._max_batch:
                    provider._wake.set()


def _lean_scope(tracer: LeanTracer, name: str, kind: SpanKind,
                attributes: dict[str, AttributeValue]) -> _LeanScope:
    """A lean span not yet started: its fields set without an ``__init__`` call."""
    span: _LeanScope = _new_object(_LeanScope)
    span._tracer = tracer
    span._transition = False
    span.name = name
    span.kind = kind
    span.attributes = attributes
    span.end_time = None
    span._linked = None
    span.events = ()
    span.status = UNSET_STATUS
    span.resource = tracer._resource
    span.instrumentation_scope = tracer._scope
    return span


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
        tracer = self._tracer
        if tracer is None:
            return _NOOP_SCOPE
        if type(tracer) is LeanTracer:  # _lean_scope(...), inline: once a reconcile
            span: _LeanScope = _new_object(_LeanScope)
            span._tracer = tracer
            span._transition = False
            span.name = f"reconcile {controller}"
            span.kind = SpanKind.INTERNAL
            span.attributes = {ATTR_OBJECT: key}
            span.end_time = None
            span._linked = None
            span.events = ()
            span.status = UNSET_STATUS
            span.resource = tracer._resource
            span.instrumentation_scope = tracer._scope
            return span
        return _SpanScope(tracer, f"reconcile {controller}", SpanKind.INTERNAL,
                          {ATTR_OBJECT: key})

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
        tracer = self._tracer
        if tracer is None:
            return _ApiTransition(None, "", _EMPTY_ATTRS, traceparent)
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
        if type(tracer) is not LeanTracer:
            return _ApiTransition(tracer, f"{machine}.{trigger}", attrs, traceparent)
        # the span not yet started, its fields set without an __init__ call
        span: _LeanScope = _new_object(_LeanScope)
        span._tracer = tracer
        span._transition = True
        span.name = f"{machine}.{trigger}"
        span.kind = SpanKind.INTERNAL
        span.attributes = attrs
        span._traceparent = traceparent
        span._trace_id = 0  # not started: no traceparent of its own yet
        span.end_time = None
        span.events = ()
        span.status = UNSET_STATUS
        span.resource = tracer._resource
        span.instrumentation_scope = tracer._scope
        return span

    def internal(self, name: str, attributes: Mapping[str, AttributeValue | None]
                 ) -> AbstractContextManager[Span]:
        """An INTERNAL span for one step of a reconcile (``netpol.program``), current
        while the body runs; None attributes are left out."""
        tracer = self._tracer
        if tracer is None:
            return _NOOP_SCOPE
        kept: dict[str, AttributeValue] = {
            k: v for k, v in attributes.items() if v is not None}
        if type(tracer) is LeanTracer:
            return _lean_scope(tracer, name, SpanKind.INTERNAL, kept)
        return _SpanScope(tracer, name, SpanKind.INTERNAL, kept)

    def client(self, provider: str, api: str) -> AbstractContextManager[Span]:
        """CLIENT span for one cloud or OVN call, child of the current transition."""
        tracer = self._tracer
        if tracer is None:
            return _NOOP_SCOPE
        attributes: dict[str, AttributeValue] = {
            ATTR_PROVIDER: provider, ATTR_RPC_SYSTEM: provider, ATTR_RPC_METHOD: api}
        if type(tracer) is LeanTracer:  # _lean_scope(...), inline: once a provider call
            span: _LeanScope = _new_object(_LeanScope)
            span._tracer = tracer
            span._transition = False
            span.name = f"{provider}.{api}"
            span.kind = SpanKind.CLIENT
            span.attributes = attributes
            span.end_time = None
            span._linked = None
            span.events = ()
            span.status = UNSET_STATUS
            span.resource = tracer._resource
            span.instrumentation_scope = tracer._scope
            return span
        return _SpanScope(tracer, f"{provider}.{api}", SpanKind.CLIENT, attributes)
