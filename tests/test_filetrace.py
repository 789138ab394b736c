"""The lean file tracer writes what the SDK would, from many threads, and loses nothing.

tests/test_tracing.py runs every Tracing behaviour on both providers; here the file
itself: same spans as the SDK's file for the same work, every span of a concurrent burst
written once, flush and shutdown semantics.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider

from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.filetrace import LeanTracerProvider
from podnet.core.tracing import Tracing, make_tracer_provider, read_trace_file

#: not hex: it cannot turn up by chance in a random trace or span id
SECRET = "s3cret-not-in-any-id"


def lifecycle(tracing: Tracing, obj: str) -> None:
    """A pod network's allocate (with a provider call), a failed route, then route: seven
    spans."""
    with tracing.reconcile("pod", obj), tracing.transition(
            "pod_network", "allocate", source="pending", provider="ref", obj=obj,
            traceparent=None, attributes={"k8s.pod.name": obj, "podnet.ip": None}) as t:
        with tracing.client("ref", "allocate"):
            pass
        t.succeeded("allocated")
        parent = t.traceparent
    try:
        with tracing.reconcile("pod", obj), tracing.transition(
                "pod_network", "route", source="allocated", provider="ref", obj=obj,
                traceparent=parent):
            raise ProviderError(ErrorKind.THROTTLED, f"slow down, secretKey={SECRET}")
    except ProviderError:
        pass
    with tracing.reconcile("pod", obj), tracing.transition(
            "pod_network", "route", source="allocated", provider="ref", obj=obj,
            traceparent=parent) as t:
        t.succeeded("routed")


def shape(spans: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What must match between two files: everything but ids and times, and the
    parent/trace relations expressed by span name."""
    names = {s["spanId"]: s["name"] for s in spans}
    roots = {s["traceId"]: s["name"] for s in spans
             if s["name"].startswith("pod_network.") and not s.get("parentSpanId")}
    out = []
    for s in spans:
        events = [(e["name"], sorted(e["attributes"])) for e in s.get("events", [])]
        out.append((s["name"], s["kind"], sorted(s["attributes"].items()),
                    names.get(s.get("parentSpanId", "")), roots.get(s["traceId"]),
                    len(s.get("links", [])), s.get("status", {}).get("code"), events,
                    s["service"], s["scope"]))
    return sorted(out, key=repr)


def test_the_lean_file_holds_what_the_sdk_file_holds(tmp_path: Path) -> None:
    files = {}
    for kind in ("sdk", "lean"):
        path = tmp_path / f"{kind}.jsonl"
        tp = make_tracer_provider(trace_file=str(path), batch=(kind == "lean"))
        assert isinstance(tp, LeanTracerProvider if kind == "lean" else SdkTracerProvider)
        tracing = Tracing(tp)
        lifecycle(tracing, "default/web-0")
        lifecycle(tracing, "default/web-1")
        tp.shutdown()
        files[kind] = read_trace_file(path)
    assert len(files["lean"]) == len(files["sdk"]) == 14
    assert shape(files["lean"]) == shape(files["sdk"])
    # a failed attempt is redacted the same way on both
    failed = [s for s in files["lean"] if s.get("status", {}).get("code") == 2]
    assert failed and all(SECRET not in str(s) for s in failed)


def test_a_concurrent_burst_is_written_once_each_and_flush_waits_for_it(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tp = make_tracer_provider(trace_file=str(path))
    assert isinstance(tp, LeanTracerProvider)
    tracing = Tracing(tp)

    def work(n: int) -> None:
        for i in range(300):
            lifecycle(tracing, f"ns/t{n}-{i}")

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert tp.force_flush()
    spans = read_trace_file(path)  # read before shutdown: flush alone must be enough
    assert len(spans) == tp.ended == 4 * 300 * 7
    assert len({s["spanId"] for s in spans}) == len(spans)
    roots = {s["traceId"] for s in spans if s["name"] == "pod_network.allocate"}
    assert len(roots) == 4 * 300  # one lifecycle trace per pod network
    tp.shutdown()
    lifecycle(tracing, "ns/late")  # after shutdown: dropped, never an error
    assert len(read_trace_file(path)) == len(spans)


def test_a_span_ended_twice_or_changed_after_its_end_is_written_once_as_it_ended(
        tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    tp = make_tracer_provider(trace_file=str(path))
    span = tp.get_tracer("podnet").start_span("x", attributes={"a": 1})
    span.end()
    span.set_attribute("a", 2)
    span.update_name("y")
    span.end()
    tp.shutdown()
    spans = read_trace_file(path)
    assert [(s["name"], s["attributes"]) for s in spans] == [("x", {"a": 1})]


def test_scopes_set_the_current_context_the_api_reads(tmp_path: Path) -> None:
    """The lean scopes get, set and reset OpenTelemetry's own ContextVar: what the API
    calls current is each scope's span inside it, and the one before after it."""
    from opentelemetry import context as context_api
    from opentelemetry import trace

    from podnet.core.filetrace import CONTEXT_VAR

    assert CONTEXT_VAR is not None  # the default runtime context: found and proved
    tracing = Tracing(make_tracer_provider(trace_file=str(tmp_path / "t.jsonl")))
    before = context_api.get_current()
    with tracing.reconcile("pod", "ns/a") as reconcile:
        assert trace.get_current_span() is reconcile
        with tracing.transition("pod_network", "allocate", source="pending", provider="ref",
                                obj="ns/a", traceparent=None) as t:
            assert trace.get_current_span() is t.span
            with tracing.client("ref", "allocate") as client:
                assert trace.get_current_span() is client
                assert client.parent == t.span.get_span_context()  # type: ignore[attr-defined]
            assert trace.get_current_span() is t.span
        assert trace.get_current_span() is reconcile
    assert context_api.get_current() is before


def test_start_under_continues_the_parents_trace_and_keeps_the_attributes(
        tmp_path: Path) -> None:
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    from podnet.core.filetrace import LeanTracer

    provider = make_tracer_provider(trace_file=str(tmp_path / "t.jsonl"))
    tracer = provider.get_tracer("podnet")
    assert type(tracer) is LeanTracer
    parent = SpanContext(0xABC, 0xDEF, True, TraceFlags(1))
    attributes = {"podnet.object": "ns/a"}
    child = tracer.start_under("child", parent, SpanKind.INTERNAL, attributes)
    context = child.get_span_context()
    assert child.parent is parent
    assert context.trace_id == 0xABC and context.span_id != 0xDEF
    # the same tuple SpanContext's own constructor makes
    assert context == SpanContext(0xABC, context.span_id, False, TraceFlags(1))
    assert context.is_valid and not context.is_remote and context.trace_flags.sampled
    assert child.attributes is attributes
    root = tracer.start_under("root", None, SpanKind.CLIENT, {})
    assert root.parent is None and root.kind is SpanKind.CLIENT
    assert root.get_span_context().trace_id not in (0, 0xABC)
    provider.shutdown()


def test_a_scope_ended_in_another_context_is_logged_not_raised(
        tmp_path: Path, caplog: Any) -> None:
    """As the API's detach: a scope entered in one Context and left in another (a
    generator moved between them) logs the failure and does not raise."""
    import contextvars

    tracing = Tracing(make_tracer_provider(trace_file=str(tmp_path / "t.jsonl")))
    scope = tracing.reconcile("pod", "ns/a")
    contextvars.copy_context().run(scope.__enter__)
    with caplog.at_level("ERROR"):
        scope.__exit__(None, None, None)
    assert "Failed to detach context" in caplog.text


class _Keep:
    """An exporter that exports nothing: the spans stay in the provider's queue."""

    def export(self, spans: Any) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        return None


def _held_provider() -> LeanTracerProvider:
    from opentelemetry.sdk.resources import Resource

    # no flush before max_batch, and max_batch never reached: what ends stays queued
    return LeanTracerProvider(_Keep(), Resource.create({}), flush_interval=3600,
                              max_batch=10**9)


def test_a_lean_span_is_its_own_scope_and_what_the_queue_holds() -> None:
    """With the lean tracer, what Tracing returns is the span itself: entered, it is the
    current span; ended, it is what waits in the export queue. No scope object beside it."""
    from opentelemetry import trace

    tp = _held_provider()
    tracing = Tracing(tp)
    reconcile = tracing.reconcile("pod", "ns/a")
    with reconcile as entered:
        assert entered is reconcile and trace.get_current_span() is reconcile
        transition = tracing.transition("pod_network", "allocate", source="pending",
                                        provider="ref", obj="ns/a", traceparent=None)
        with transition as t:
            assert t is transition and t.span is transition
            client = tracing.client("ref", "allocate")
            with client as c:
                assert c is client and trace.get_current_span() is client
    assert list(tp._queue) == [client, transition, reconcile]
    tp.shutdown()


def test_a_queued_lean_span_holds_no_object_of_its_own_but_its_attributes() -> None:
    """A pod network's spans wait in the queue for the exporter (hundreds at a time, each
    young-collection's work): each is one object and its attribute dict, its SpanContext,
    parent and link made only when read. Counted as the collector counts allocations,
    against a plain object with a dict of its own (the interpreter's own measure of two)."""
    import gc

    tp = _held_provider()
    tracing = Tracing(tp)

    def life(i: int, stored: str | None) -> str | None:
        obj = f"ns/p{i}"
        with tracing.reconcile("pod", obj), tracing.transition(
                "pod_network", "route", source="allocated", provider="ref", obj=obj,
                traceparent=stored, attributes={"k8s.pod.name": obj}) as t:
            with tracing.client("ref", "route"):
                pass
            t.succeeded("routed")
            return t.traceparent

    class Plain:
        __slots__ = ("attributes",)

    n = 300
    stored = [life(i, None) for i in range(n)]  # each its first transition's traceparent
    tp._queue.clear()
    plain: list[Plain] = []
    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        for i in range(n):
            life(i, stored[i])
        spans = gc.get_count()[0] - before
        before = gc.get_count()[0]
        for i in range(3 * n):
            one = Plain()
            one.attributes = {"k": f"v{i}"}
            plain.append(one)
        reference = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert len(tp._queue) == 3 * n
    # give or take a few objects in all (a cache's or the queue's own growth); a span with
    # a SpanContext, or a transition with a Link and its tuple, is well above
    per_span, per_plain = spans / (3 * n), reference / (3 * n)
    assert per_span < per_plain + 0.25, (per_span, per_plain)
    tp.shutdown()


def test_lean_spans_encode_as_their_reference_form_whatever_their_parent() -> None:
    """A lean span's ids, parent and link are read from its own fields by the encoder:
    the same text as the reference form, which reads them through the API's SpanContexts
    (parents and links that are lean spans, a stored traceparent, another tracer's span)."""
    import json

    from opentelemetry import trace
    from opentelemetry.trace import SpanContext, TraceFlags

    from podnet.core.tracing import otlpjson

    tp = _held_provider()
    tracing = Tracing(tp)
    lifecycle(tracing, "ns/a")
    foreign = trace.NonRecordingSpan(SpanContext(0xABC, 0xDEF, True, TraceFlags(1)))
    with trace.use_span(foreign), tracing.client("ref", "under-another"), tracing.transition(
            "node", "plug", source="routed", provider="ref", obj="ns/a", traceparent=None):
        pass
    spans = list(tp._queue)
    assert len(spans) == 9
    under = next(s for s in spans if s.name == "ref.under-another")
    assert under.parent == foreign.get_span_context()
    linked = next(s for s in spans if s.name == "node.plug").links
    assert [link.context for link in linked] == [under.get_span_context()]
    for span in spans:
        assert otlpjson._span_json(span) == json.dumps(otlpjson._span_dict(span),
                                                       separators=(",", ":"))
    tp.shutdown()
