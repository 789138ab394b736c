"""The spans themselves: one per reconcile, one per transition attempt, one per provider
call, and what makes a span ERROR (a failure) or not (a wait, a retry).

The context managers are plain classes rather than ``@contextmanager`` generators, and
the no-op ones are shared stateless objects, so that tracing off costs close to nothing.
"""

from __future__ import annotations

import enum
import traceback
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from contextvars import Token
from types import TracebackType
from typing import Final

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    INVALID_SPAN_CONTEXT,
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

from podnet.core.filetrace import CONTEXT_VAR, SPAN_KEY, LeanSpan, LeanTracer
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
from podnet.core.tracing.traceparent import format_traceparent, parse_traceparent


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
    span = current.get(SPAN_KEY)
    if type(span) is LeanSpan:
        return span.context
    if span is None:
        return None
    ctx = trace.get_current_span(current).get_span_context()
    return ctx if ctx.is_valid else None


def _plain_link_fields() -> bool:
    """Whether a Link is its span context in ``_context`` and its attributes in
    ``_attributes`` and nothing else (as the installed API makes it): then one can be
    made without Link's and its base's ``__init__``, two Python calls a transition."""
    probe = Link(INVALID_SPAN_CONTEXT)
    return (type(probe).__init__ is Link.__init__ and getattr(probe, "__dict__", None)
            == {"_context": INVALID_SPAN_CONTEXT, "_attributes": None})


_PLAIN_LINKS: Final = _plain_link_fields()
_new_object = object.__new__


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
        current = _get_current()
        tracer = self._tracer
        span: Span
        if type(tracer) is LeanTracer:  # the attributes dict is this scope's own
            parent = current.get(SPAN_KEY)
            span = tracer.start_under(
                self._name,
                parent.context if type(parent) is LeanSpan else _current_parent(current),
                self._kind, self._attributes)
        else:
            span = tracer.start_span(
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
        if self._traceparent is None and self._tracer is not None:  # off: nothing to give
            span = self._span
            # a lean span's context read as a field, its validity by index (a SpanContext
            # is a tuple): the API's method and property are a Python call each
            ctx = span.context if type(span) is LeanSpan else span.get_span_context()
            if ctx[5]:
                self._traceparent = format_traceparent(ctx)
        return self._traceparent

    @property
    def span(self) -> Span:
        return self._span

    def set(self, key: str, value: AttributeValue | None) -> None:
        """Set an attribute; None is skipped so callers can pass optional fields as they are."""
        if value is not None and self._tracer is not None:  # off: a no-op span's call saved
            span = self._span
            if type(span) is LeanSpan and span.end_time is None:
                span.attributes[key] = value  # its set_attribute, inline
            else:
                span.set_attribute(key, value)

    def succeeded(self, dest: str) -> None:
        """Record the state the transition reached."""
        if self._tracer is not None:
            span = self._span
            if type(span) is LeanSpan and span.end_time is None:
                span.attributes[ATTR_TO] = dest  # its set_attribute, inline
            else:
                span.set_attribute(ATTR_TO, dest)

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
        current_ctx = _get_current()
        current_span = current_ctx.get(SPAN_KEY)  # the reconcile's span: linked
        current = (current_span.context if type(current_span) is LeanSpan
                   else _current_parent(current_ctx))
        links: tuple[Link, ...]
        if current is None:
            links = ()
        elif _PLAIN_LINKS:  # Link(current), without its two __init__ calls
            link: Link = _new_object(Link)
            link._context = current
            link._attributes = None
            links = (link,)
        else:  # pragma: no cover - another API's Link
            links = (Link(current),)
        parent = parse_traceparent(self._traceparent) if self._traceparent else None
        if parent is None:
            # first transition (or an unusable stored value): a new root, so the lifecycle
            # trace does not hang under one reconcile
            self._traceparent = None
        span: Span
        if type(tracer) is LeanTracer:  # the attributes dict is this span's own
            span = tracer.start_under(self._name, parent, SpanKind.INTERNAL,
                                      self._attributes, links)
        else:
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

    def internal(self, name: str, attributes: Mapping[str, AttributeValue | None]
                 ) -> AbstractContextManager[Span]:
        """An INTERNAL span for one step of a reconcile (``netpol.program``), current
        while the body runs; None attributes are left out."""
        if self._tracer is None:
            return _NOOP_SCOPE
        return _SpanScope(self._tracer, name, SpanKind.INTERNAL,
                          {k: v for k, v in attributes.items() if v is not None})

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
