"""Tracing contract: span names and attributes, failures, lifecycle traces, exporters."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracerProvider, SpanKind, StatusCode

from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.filetrace import LeanTracerProvider
from podnet.core.tracing import (
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
    ATTR_TO,
    ATTR_TRIGGER,
    EVENT_RETRY,
    RETRY_THROTTLED,
    JsonLinesSpanExporter,
    Tracing,
    format_traceparent,
    make_tracer_provider,
    parse_traceparent,
    read_trace_file,
    redact,
)

SECRET = "abc123"


class Boom(RuntimeError):
    pass


class KindedError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class FlushingMemory(InMemorySpanExporter):
    """Flushes its provider before it answers: the lean provider exports on its own thread."""

    flush: Any = None

    def get_finished_spans(self) -> Any:
        if self.flush is not None:
            self.flush()
        return super().get_finished_spans()


@pytest.fixture
def memory() -> InMemorySpanExporter:
    return FlushingMemory()


@pytest.fixture(params=["sdk", "lean"])
def provider(request: pytest.FixtureRequest,
             memory: FlushingMemory) -> Iterator[SdkTracerProvider | LeanTracerProvider]:
    """Every Tracing test runs on the SDK and on the lean file provider alike."""
    tp: SdkTracerProvider | LeanTracerProvider
    if request.param == "sdk":
        tp = make_tracer_provider(exporters=[memory], batch=False)
    else:
        tp = LeanTracerProvider(memory, Resource.create({SERVICE_NAME: "podnet"}))
        memory.flush = tp.force_flush
    yield tp
    memory.flush = None
    tp.shutdown()


@pytest.fixture
def tracing(provider: SdkTracerProvider | LeanTracerProvider) -> Tracing:
    return Tracing(provider)


def by_name(memory: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in memory.get_finished_spans() if s.name == name]


def one(memory: InMemorySpanExporter, name: str) -> ReadableSpan:
    spans = by_name(memory, name)
    assert len(spans) == 1, [s.name for s in memory.get_finished_spans()]
    return spans[0]


def allocate(tracing: Tracing, traceparent: str | None = None, **attrs: Any) -> Any:
    return tracing.transition(
        "pod_network",
        "allocate",
        source="Pending",
        provider="ecs",
        obj="default/web-0",
        traceparent=traceparent,
        attributes=attrs or None,
    )


# -- names and attributes -------------------------------------------------------------------


def test_reconcile_span_name_kind_and_object(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    assert tracing.enabled
    with tracing.reconcile("podnetwork", "default/web-0") as span:
        assert trace.get_current_span() is span
    assert trace.get_current_span() is not span
    rec = one(memory, "reconcile podnetwork")
    assert rec.kind is SpanKind.INTERNAL
    assert dict(rec.attributes or {}) == {ATTR_OBJECT: "default/web-0"}
    assert rec.status.status_code is StatusCode.UNSET


def test_transition_span_carries_every_attribute(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with (
        tracing.reconcile("podnetwork", "default/web-0"),
        allocate(
            tracing,
            **{
                ATTR_POD: "web-0",
                ATTR_NAMESPACE: "default",
                ATTR_NODE: "node-a",
                ATTR_IP: None,  # not known yet: skipped
            },
        ) as ts,
    ):
        ts.set(ATTR_IP, "10.0.0.7")
        ts.set(ATTR_INTERFACE, "eni-123")
        ts.set("podnet.skipped", None)
        ts.succeeded("Allocated")
    span = one(memory, "pod_network.allocate")
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes or {}) == {
        ATTR_MACHINE: "pod_network",
        ATTR_TRIGGER: "allocate",
        ATTR_FROM: "Pending",
        ATTR_TO: "Allocated",
        ATTR_PROVIDER: "ecs",
        ATTR_OBJECT: "default/web-0",
        ATTR_POD: "web-0",
        ATTR_NAMESPACE: "default",
        ATTR_NODE: "node-a",
        ATTR_IP: "10.0.0.7",
        ATTR_INTERFACE: "eni-123",
    }
    assert span.status.status_code is StatusCode.UNSET
    assert not span.events


def test_attribute_constants_match_the_design() -> None:
    assert ATTR_MACHINE == "podnet.machine"
    assert ATTR_TRIGGER == "podnet.trigger"
    assert ATTR_FROM == "podnet.state.from"
    assert ATTR_TO == "podnet.state.to"
    assert ATTR_PROVIDER == "podnet.provider"
    assert ATTR_OBJECT == "podnet.object"
    assert ATTR_POD == "k8s.pod.name"
    assert ATTR_NAMESPACE == "k8s.namespace.name"
    assert ATTR_NODE == "k8s.node.name"
    assert ATTR_IP == "podnet.ip"
    assert ATTR_INTERFACE == "podnet.interface"
    assert ATTR_ERROR_TYPE == "error.type"


def test_transition_span_is_current_in_the_body(tracing: Tracing) -> None:
    with tracing.reconcile("podnetwork", "k") as rec:
        with allocate(tracing) as ts:
            assert trace.get_current_span() is ts.span
        assert trace.get_current_span() is rec


# -- failures ---------------------------------------------------------------------------------


def _span_text(span: ReadableSpan) -> str:
    parts = [str(span.status.description), repr(dict(span.attributes or {}))]
    parts += [repr(dict(ev.attributes or {})) for ev in span.events]
    return "\n".join(parts)


def test_failure_marks_error_with_kind_and_redacts(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    message = f"AssignPrivateIpAddresses denied: AccessKeySecret={SECRET} RequestId=42"
    with pytest.raises(ProviderError), tracing.reconcile("podnetwork", "k"), allocate(tracing):
        raise ProviderError(ErrorKind.THROTTLED, message)
    span = one(memory, "pod_network.allocate")
    assert span.status.status_code is StatusCode.ERROR
    attrs = dict(span.attributes or {})
    assert attrs[ATTR_ERROR_TYPE] == "throttled"
    assert ATTR_TO not in attrs
    (event,) = span.events
    assert event.name == "exception"
    ev_attrs = dict(event.attributes or {})
    assert ev_attrs["exception.type"] == "podnet.hookspecs.errors.ProviderError"
    assert "AssignPrivateIpAddresses denied" in str(ev_attrs["exception.message"])
    assert "RequestId=42" in str(ev_attrs["exception.message"])
    assert "Traceback" in str(ev_attrs["exception.stacktrace"])
    for exported in memory.get_finished_spans():
        assert SECRET not in _span_text(exported)


def test_failure_after_succeeded_still_fails(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with pytest.raises(KindedError), allocate(tracing) as ts:
        ts.succeeded("Allocated")
        raise KindedError("conflict", "lost the race")
    span = one(memory, "pod_network.allocate")
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})[ATTR_ERROR_TYPE] == "conflict"


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (Boom("x"), "Boom"),
        (ValueError("x"), "ValueError"),
        (KindedError("quota_exceeded", "x"), "quota_exceeded"),
    ],
)
def test_error_type_is_kind_or_class_name(
    tracing: Tracing, memory: InMemorySpanExporter, exc: Exception, expected: str
) -> None:
    with pytest.raises(type(exc)), allocate(tracing):
        raise exc
    span = one(memory, "pod_network.allocate")
    assert span.status.status_code is StatusCode.ERROR
    assert dict(span.attributes or {})[ATTR_ERROR_TYPE] == expected


def test_base_exception_is_not_a_failure(tracing: Tracing, memory: InMemorySpanExporter) -> None:
    with pytest.raises(KeyboardInterrupt), allocate(tracing):
        raise KeyboardInterrupt
    span = one(memory, "pod_network.allocate")
    assert span.status.status_code is StatusCode.UNSET
    assert span.end_time is not None


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"AccessKeySecret={SECRET}&Action=Describe", "Action=Describe"),
        (f"AccessKeyId={SECRET}, region cn-hangzhou", "region cn-hangzhou"),
        (f"{{'AccessKeySecret': '{SECRET}', 'Region': 'x'}}", "'Region': 'x'"),
        (f'{{"password": "{SECRET}", "user": "bob"}}', '"user": "bob"'),
        (f"secret={SECRET}", "secret="),
        (f"client_secret: {SECRET}\nnext line", "next line"),
        (f"SecurityToken={SECRET};Version=1", "Version=1"),
        (f"x-acs-security-token: {SECRET}", "x-acs-security-token"),
        (f"Authorization: Bearer {SECRET}\nHost: ecs", "Host: ecs"),
        (f"headers={{'Authorization': 'acs AK:{SECRET}'}}", "headers="),
        (f"https://admin:{SECRET}@ovn.local/nb", "admin:"),
    ],
)
def test_redact_hides_credential_values(text: str, kept: str) -> None:
    out = redact(text)
    assert SECRET not in out
    assert kept in out


def test_redact_leaves_ordinary_text() -> None:
    text = "vSwitch vsw-1 has no free address (secret not mentioned, token bucket empty)"
    assert redact(text) == text


# -- one trace per lifecycle --------------------------------------------------------------


def test_first_transition_starts_a_root_and_later_ones_join_it(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with tracing.reconcile("podnetwork", "k") as rec1, allocate(tracing) as first:
        pass
    stored = first.traceparent
    assert stored is not None
    assert re.fullmatch(r"00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", stored)

    with (
        tracing.reconcile("podnetwork", "k") as rec2,
        tracing.transition(
            "pod_network",
            "bind",
            source="Allocated",
            provider="ecs",
            obj="k",
            traceparent=stored,
        ) as later,
    ):
        pass
    assert later.traceparent == stored

    s1 = one(memory, "pod_network.allocate")
    s2 = one(memory, "pod_network.bind")
    r1, r2 = rec1.get_span_context(), rec2.get_span_context()

    # root of its own trace, not a child of the reconcile
    assert s1.parent is None
    assert s1.context is not None and s2.context is not None
    assert s1.context.trace_id != r1.trace_id
    # the stored value round-trips
    parsed = parse_traceparent(stored)
    assert parsed is not None
    assert (parsed.trace_id, parsed.span_id) == (s1.context.trace_id, s1.context.span_id)
    assert format_traceparent(parsed) == stored

    # the later transition joins the lifecycle trace as a child of the stored context
    assert s2.context.trace_id == s1.context.trace_id
    assert s2.parent is not None and s2.parent.span_id == s1.context.span_id
    assert s2.context.trace_id != r2.trace_id

    # both link to the reconcile that ran them
    assert [(ln.context.trace_id, ln.context.span_id) for ln in s1.links] == [
        (r1.trace_id, r1.span_id)
    ]
    assert [(ln.context.trace_id, ln.context.span_id) for ln in s2.links] == [
        (r2.trace_id, r2.span_id)
    ]


def test_transition_outside_a_reconcile_has_no_link(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with allocate(tracing) as ts:
        pass
    assert ts.traceparent is not None
    assert not one(memory, "pod_network.allocate").links


def test_unusable_stored_traceparent_starts_a_fresh_root(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with tracing.reconcile("podnetwork", "k"), allocate(tracing, traceparent="garbage") as ts:
        pass
    span = one(memory, "pod_network.allocate")
    assert span.parent is None
    assert span.context is not None
    assert ts.traceparent == format_traceparent(span.context)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        "00-" + "0" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 32 + "-" + "0" * 16 + "-01",
        "ff-" + "1" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 32 + "-" + "1" * 16 + "-01-extra",
        "00-" + "A" * 32 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 31 + "-" + "1" * 16 + "-01",
        "00-" + "1" * 32 + "-" + "1" * 16,
        "x" * 10_000,
        None,
        42,
    ],
)
def test_parse_traceparent_rejects_invalid_values(value: Any) -> None:
    assert parse_traceparent(value) is None


def test_parse_traceparent_accepts_valid_and_future_versions() -> None:
    tid, sid = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    ctx = parse_traceparent(f"00-{tid}-{sid}-01")
    assert ctx is not None and ctx.is_remote and ctx.trace_flags.sampled
    assert (ctx.trace_id, ctx.span_id) == (int(tid, 16), int(sid, 16))
    assert parse_traceparent(f"01-{tid}-{sid}-00-more") is not None
    assert parse_traceparent(f" 00-{tid}-{sid}-00\n") is not None
    with pytest.raises(ValueError):
        format_traceparent(trace.INVALID_SPAN_CONTEXT)


# -- provider calls ---------------------------------------------------------------------------


def test_client_span_is_a_client_child_of_the_transition(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with (
        tracing.reconcile("podnetwork", "k"),
        allocate(tracing),
        tracing.client("ecs", "AssignPrivateIpAddresses") as call,
    ):
        assert trace.get_current_span() is call
    transition = one(memory, "pod_network.allocate")
    client = one(memory, "ecs.AssignPrivateIpAddresses")
    assert client.kind is SpanKind.CLIENT
    assert transition.context is not None and client.context is not None
    assert client.parent is not None and client.parent.span_id == transition.context.span_id
    assert client.context.trace_id == transition.context.trace_id
    assert dict(client.attributes or {}) == {
        ATTR_PROVIDER: "ecs",
        "rpc.system": "ecs",
        "rpc.method": "AssignPrivateIpAddresses",
    }


def test_failed_client_call_marks_both_spans(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    with pytest.raises(ProviderError), allocate(tracing), tracing.client("ovn", "lsp-add"):
        raise ProviderError(ErrorKind.CONFLICT, f"token={SECRET}")
    client = one(memory, "ovn.lsp-add")
    transition = one(memory, "pod_network.allocate")
    for span in (client, transition):
        assert span.status.status_code is StatusCode.ERROR
        assert dict(span.attributes or {})[ATTR_ERROR_TYPE] == "conflict"
        assert SECRET not in _span_text(span)


def test_throttled_client_call_is_a_retry_not_an_error(
    tracing: Tracing, memory: InMemorySpanExporter
) -> None:
    # the cloud said "later" to a pool read: the caller reads again, so the call waited
    with (
        pytest.raises(ProviderError),
        tracing.reconcile("node", "n1"),
        tracing.client("ecs", "DescribeNetworkInterfaces"),
    ):
        raise ProviderError(ErrorKind.THROTTLED, f"Throttling token={SECRET}")
    client = one(memory, "ecs.DescribeNetworkInterfaces")
    assert client.status.status_code is not StatusCode.ERROR
    attributes = dict(client.attributes or {})
    assert attributes[ATTR_RETRY] == RETRY_THROTTLED
    assert ATTR_ERROR_TYPE not in attributes
    [event] = [e for e in client.events if e.name == EVENT_RETRY]
    assert dict(event.attributes or {})[ATTR_RETRY] == RETRY_THROTTLED
    assert SECRET not in _span_text(client)
    # a caller that gives up on it (raises) fails its own span
    assert one(memory, "reconcile node").status.status_code is StatusCode.ERROR


# -- tracing off ------------------------------------------------------------------------------


@pytest.mark.parametrize("tp", [None, NoOpTracerProvider()])
def test_noop_mode_runs_the_same_paths(tp: NoOpTracerProvider | None) -> None:
    tracing = Tracing(tp)
    assert not tracing.enabled
    with tracing.reconcile("podnetwork", "k"), allocate(tracing, **{ATTR_POD: "p"}) as ts:
        with tracing.client("ecs", "Describe"):
            pass
        ts.set(ATTR_IP, "10.0.0.1")
        ts.succeeded("Allocated")
    assert ts.traceparent is None
    stored = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
    with allocate(tracing, traceparent=stored) as again:
        pass
    assert again.traceparent == stored
    with pytest.raises(Boom), tracing.reconcile("podnetwork", "k"), allocate(tracing):
        raise Boom("still raised")


# -- exporters --------------------------------------------------------------------------------


def _emit_lifecycle(tracing: Tracing) -> None:
    with tracing.reconcile("podnetwork", "default/web-0"):
        with allocate(tracing, **{ATTR_POD: "web-0", ATTR_NODE: "node-a"}) as ts:
            with tracing.client("ecs", "AssignPrivateIpAddresses"):
                pass
            ts.set(ATTR_IP, "10.0.0.7")
            ts.succeeded("Allocated")
        with (
            pytest.raises(ProviderError),
            tracing.transition(
                "eni",
                "inhibit",
                source="Ready",
                provider="ecs",
                obj="eni-1",
                traceparent=ts.traceparent,
                attributes={"podnet.count": 3, "podnet.primary": False},
            ),
        ):
            raise ProviderError(ErrorKind.THROTTLED, f"AccessKeySecret={SECRET}")


HEX32 = re.compile(r"[0-9a-f]{32}")
HEX16 = re.compile(r"[0-9a-f]{16}")


def test_json_lines_file_is_otlp_json(tmp_path: Path) -> None:
    path = tmp_path / "traces" / "podnet.jsonl"
    provider = make_tracer_provider(service_name="podnet-test", trace_file=str(path), batch=False)
    _emit_lifecycle(Tracing(provider))
    provider.shutdown()

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4  # SimpleSpanProcessor: one export per span
    raw_spans = []
    for line in lines:
        request = json.loads(line)
        for rs in request["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                assert ss["scope"]["name"] == "podnet"
                raw_spans.extend(ss["spans"])
    assert SECRET not in "".join(lines)
    for raw in raw_spans:
        assert HEX32.fullmatch(raw["traceId"]), raw["traceId"]
        assert HEX16.fullmatch(raw["spanId"]), raw["spanId"]
        if "parentSpanId" in raw:
            assert HEX16.fullmatch(raw["parentSpanId"])
        for link in raw.get("links", ()):
            assert HEX32.fullmatch(link["traceId"]) and HEX16.fullmatch(link["spanId"])
        assert isinstance(raw["kind"], int)
        assert "startTimeUnixNano" in raw and "start_time_unix_nano" not in raw

    spans = {s["name"]: s for s in read_trace_file(path)}
    assert set(spans) == {
        "reconcile podnetwork",
        "pod_network.allocate",
        "ecs.AssignPrivateIpAddresses",
        "eni.inhibit",
    }
    rec, alloc = spans["reconcile podnetwork"], spans["pod_network.allocate"]
    call, inhibit = spans["ecs.AssignPrivateIpAddresses"], spans["eni.inhibit"]
    assert rec["service"] == "podnet-test"
    assert alloc["parentSpanId"] is None
    assert alloc["kind"] == 1 and call["kind"] == 3
    assert alloc["attributes"] == {
        ATTR_MACHINE: "pod_network",
        ATTR_TRIGGER: "allocate",
        ATTR_FROM: "Pending",
        ATTR_TO: "Allocated",
        ATTR_PROVIDER: "ecs",
        ATTR_OBJECT: "default/web-0",
        ATTR_POD: "web-0",
        ATTR_NODE: "node-a",
        ATTR_IP: "10.0.0.7",
    }
    assert alloc["links"] == [
        {"traceId": rec["traceId"], "spanId": rec["spanId"], "attributes": {}}
    ]
    assert call["parentSpanId"] == alloc["spanId"]
    assert inhibit["traceId"] == alloc["traceId"]
    assert inhibit["parentSpanId"] == alloc["spanId"]
    assert inhibit["attributes"]["podnet.count"] == 3
    assert inhibit["attributes"]["podnet.primary"] is False
    assert inhibit["statusCode"] == 2
    assert inhibit["attributes"][ATTR_ERROR_TYPE] == "throttled"
    assert [e["name"] for e in inhibit["events"]] == ["exception"]
    assert alloc["statusCode"] == 0
    assert alloc["endTimeUnixNano"] >= alloc["startTimeUnixNano"] > 0


def test_json_lines_exporter_appends_one_line_per_export_from_many_threads(
    tmp_path: Path, memory: InMemorySpanExporter, tracing: Tracing
) -> None:
    for i in range(5):
        with tracing.reconcile("podnetwork", f"k{i}"):
            pass
    spans = memory.get_finished_spans()
    path = tmp_path / "t.jsonl"
    exporter = JsonLinesSpanExporter(path)

    def work() -> None:
        for _ in range(20):
            assert exporter.export(spans) is SpanExportResult.SUCCESS

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert exporter.force_flush()
    exporter.shutdown()
    assert exporter.export(spans) is SpanExportResult.FAILURE
    exporter.shutdown()  # twice is harmless

    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 80
    assert all(
        len(json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 5 for line in lines
    )
    assert len(read_trace_file(path)) == 400

    # a second exporter on the same file appends
    again = JsonLinesSpanExporter(path)
    again.export(spans[:1])
    again.shutdown()
    assert len(read_trace_file(path)) == 401


# -- OTLP/HTTP --------------------------------------------------------------------------------


class _Collector:
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.encodings: list[str] = []
        self.content_types: list[str] = []
        self.lock = threading.Lock()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                encoding = self.headers.get("Content-Encoding", "")
                if encoding == "gzip":
                    body = gzip.decompress(body)
                elif encoding == "deflate":
                    body = zlib.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector.lock:
                    collector.requests.append(request)
                    collector.encodings.append(encoding)
                    collector.content_types.append(self.headers.get("Content-Type", ""))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def spans(self) -> list[Any]:
        with self.lock:
            return [
                span
                for req in self.requests
                for rs in req.resource_spans
                for ss in rs.scope_spans
                for span in ss.spans
            ]


@pytest.fixture
def collector() -> Iterator[_Collector]:
    c = _Collector()
    c.thread.start()
    yield c
    c.server.shutdown()
    c.server.server_close()
    c.thread.join(timeout=5)


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_otlp_http_exporter_reaches_a_collector(
    collector: _Collector, monkeypatch: pytest.MonkeyPatch, compression: str
) -> None:
    for var in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_COMPRESSION",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", compression)

    provider = make_tracer_provider(otlp_endpoint=f"http://127.0.0.1:{collector.port}/v1/traces")
    _emit_lifecycle(Tracing(provider))
    assert provider.force_flush(timeout_millis=10_000)
    provider.shutdown()

    spans = {s.name: s for s in collector.spans()}
    assert set(spans) == {
        "reconcile podnetwork",
        "pod_network.allocate",
        "ecs.AssignPrivateIpAddresses",
        "eni.inhibit",
    }
    assert collector.content_types[0] == "application/x-protobuf"
    assert collector.encodings[0] == ("" if compression == "none" else "gzip")
    resource = {
        kv.key: kv.value.string_value
        for kv in collector.requests[0].resource_spans[0].resource.attributes
    }
    assert resource["service.name"] == "podnet"

    def attrs(span: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kv in span.attributes:
            field = kv.value.WhichOneof("value")
            out[kv.key] = getattr(kv.value, field)
        return out

    alloc = spans["pod_network.allocate"]
    assert attrs(alloc)[ATTR_TO] == "Allocated"
    assert attrs(alloc)[ATTR_POD] == "web-0"
    assert alloc.parent_span_id == b""
    assert len(alloc.links) == 1
    assert alloc.links[0].span_id == spans["reconcile podnetwork"].span_id
    call = spans["ecs.AssignPrivateIpAddresses"]
    assert call.kind == 3  # SPAN_KIND_CLIENT
    assert call.parent_span_id == alloc.span_id
    assert attrs(call)["rpc.method"] == "AssignPrivateIpAddresses"
    inhibit = spans["eni.inhibit"]
    assert inhibit.trace_id == alloc.trace_id
    assert inhibit.status.code == 2  # STATUS_CODE_ERROR
    assert attrs(inhibit)[ATTR_ERROR_TYPE] == "throttled"
    assert all(SECRET.encode() not in req.SerializeToString() for req in collector.requests)


# -- cost --------------------------------------------------------------------------------------


def test_transition_span_cost_is_printed(memory: InMemorySpanExporter) -> None:
    """Rough cost of one transition span; printed (pytest -s), not asserted."""
    provider = SdkTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    on, off = Tracing(provider), Tracing(None)
    n = 2000

    def run(tracing: Tracing) -> float:
        stored = None
        start = time.perf_counter()
        for _ in range(n):
            with allocate(tracing, traceparent=stored, **{ATTR_POD: "p"}) as ts:
                ts.succeeded("Allocated")
            stored = ts.traceparent
        return (time.perf_counter() - start) / n * 1e6

    run(on), run(off)  # warm up
    memory.clear()
    us_on, us_off = run(on), run(off)
    provider.shutdown()
    print(f"\ntransition span: traced {us_on:.1f} us, no-op {us_off:.2f} us")
    assert len(memory.get_finished_spans()) == n


def test_json_line_matches_the_official_protobuf_encoding() -> None:
    """The hand-built OTLP/JSON equals ProtoJSON of the official encoder, ids in hex."""
    import base64
    import json as _json

    from google.protobuf import json_format
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from podnet.core.tracing import encode_json_line

    exporter = InMemorySpanExporter()
    provider = SdkTracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing = Tracing(provider)
    with tracing.reconcile("pod", "ns/p"):
        try:
            with tracing.transition("pod_network", "allocate", source="pending",
                                    provider="reference", obj="ns/pn", traceparent=None,
                                    attributes={"podnet.ip": "10.0.0.1", "x.count": 3,
                                                "x.ok": True, "x.ratio": 0.5}) as span:
                with tracing.client("reference", "allocate"):
                    pass
                span.succeeded("allocated")
                raise RuntimeError("boom")
        except RuntimeError:
            pass
    spans = exporter.get_finished_spans()
    ours = _json.loads(encode_json_line(spans))
    theirs = json_format.MessageToDict(encode_spans(spans), use_integers_for_enums=True)
    for rs in theirs["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in sp:
                        sp[key] = base64.b64decode(sp[key]).hex()
                for link in sp.get("links", ()):
                    for key in ("traceId", "spanId"):
                        link[key] = base64.b64decode(link[key]).hex()
                    link.pop("flags", None)
                sp.pop("flags", None)
    for rs in ours["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                sp.pop("flags", None)
                for ev in sp.get("events", ()):
                    if not ev.get("attributes"):
                        ev.pop("attributes", None)
                for link in sp.get("links", ()):
                    if not link.get("attributes"):
                        link.pop("attributes", None)
    assert ours == theirs


def _reference_json_line(spans: list[Any]) -> str:
    """The request as dicts dumped by json.dumps: the form encode_json_line writes directly."""
    from podnet.core.tracing.otlpjson import _span_dict, _to_attributes

    by_resource: dict[int, tuple[Any, dict[tuple[str, str | None], list[Any]]]] = {}
    for span in spans:
        entry = by_resource.setdefault(id(span.resource), (span.resource, {}))
        scope = span.instrumentation_scope
        key = (scope.name, scope.version) if scope is not None else ("", None)
        entry[1].setdefault(key, []).append(_span_dict(span))
    return json.dumps({"resourceSpans": [
        {"resource": {"attributes": _to_attributes(resource.attributes if resource else None)},
         "scopeSpans": [{"scope": {"name": name, **({"version": version} if version else {})},
                         "spans": encoded} for (name, version), encoded in scopes.items()]}
        for resource, scopes in by_resource.values()]}, separators=(",", ":"))


@pytest.mark.parametrize("kind", ["sdk", "lean"])
def test_json_line_is_byte_for_byte_what_json_dumps_writes(kind: str) -> None:
    """The direct encoder's fast paths (strings, ints, bools, hex ids, unset status) and its
    fallbacks (floats, sequences, subclasses, events, statuses) write the same text."""
    from podnet.core.tracing import encode_json_line

    class Text(str):
        pass

    values: list[Any] = ["plain", "ünïcode ☃ \"quoted\" \\ \n\t\x01", "", 0, -7, 2**70, True,
                         False, 0.5, float("nan"), float("-inf"), ["a", "b"], [1, 2], (True,),
                         Text("sub"), ErrorKind.THROTTLED]
    memory = InMemorySpanExporter()
    resource = Resource.create({SERVICE_NAME: "podnet", "x.ratio": 0.25, "x.n": 3})
    tp: SdkTracerProvider | LeanTracerProvider
    if kind == "sdk":
        tp = SdkTracerProvider(resource=resource)
        tp.add_span_processor(SimpleSpanProcessor(memory))
    else:
        tp = LeanTracerProvider(memory, resource)
    tracing = Tracing(tp)
    other = tp.get_tracer("other", "1.2.3")
    for i in range(40):
        obj = f"ns/p{i}☃"
        with tracing.reconcile("pod", obj):
            try:
                with tracing.transition("pod_network", "allocate", source="pending",
                                        provider="ref", obj=obj, traceparent=None,
                                        attributes={ATTR_POD: f"p{i}", "x.n": i,
                                                    "x.ok": bool(i % 2)}) as ts:
                    with tracing.client("ref", "allocate"):
                        pass
                    if i % 5 == 0:
                        raise ProviderError(ErrorKind.THROTTLED, f"slow down é {i}")
                    ts.succeeded("allocated")
            except ProviderError:
                pass
        span = other.start_span(f"raw ✓ {i}", kind=list(SpanKind)[i % len(SpanKind)],
                                attributes={f"k{j}": values[(i + j) % len(values)]
                                            for j in range(i % 4)},
                                links=[trace.Link(ts.span.get_span_context(),
                                                  {"l": values[i % len(values)]})]
                                if i % 2 else None)
        if i % 7 == 0:
            span.set_status(trace.Status(StatusCode.ERROR, f"bad \"{i}\" ✗"))
        elif i % 7 == 1:
            span.set_status(StatusCode.OK)
        if i % 4 == 0:
            span.add_event("event ✓", {"e": values[i % len(values)]})
        span.end()
    tp.force_flush()
    spans = list(memory.get_finished_spans())
    tp.shutdown()
    assert len(spans) == 40 * 4
    # ids wider than their field (no valid context has them) take the fallback too
    wide = ReadableSpan("wide", trace.SpanContext(2**130, 2**70, False), resource=resource)
    for batch in (spans, spans[:1], spans[::-1], [], [wide, *spans[:3]]):
        assert encode_json_line(batch) == _reference_json_line(batch)


def test_json_line_of_each_batch_names_its_own_resource_and_scope() -> None:
    """A batch's resource and scope text is kept between batches: a batch of another
    resource (even one made where a freed one was, at the same id) or scope writes its
    own, byte for byte as json.dumps would."""
    import gc

    from podnet.core.tracing import encode_json_line

    def batch(service: str, scope: str, version: str | None) -> list[Any]:
        memory = InMemorySpanExporter()
        tp = LeanTracerProvider(memory, Resource.create({SERVICE_NAME: service}))
        with tp.get_tracer(scope, version).start_as_current_span("work"):
            pass
        tp.force_flush()
        spans = list(memory.get_finished_spans())
        tp.shutdown()
        return spans

    seen = []
    for i in range(6):
        spans = batch(f"service-{i % 3}", f"scope-{i % 2}", "1.0" if i % 4 else None)
        for _ in range(2):
            line = encode_json_line(spans)
            assert line == _reference_json_line(spans)
            seen.append(json.loads(line)["resourceSpans"][0])
        del spans
        gc.collect()  # the next provider's resource may take the freed one's id
    services = [{kv["key"]: kv["value"]["stringValue"] for kv in r["resource"]["attributes"]}
                [SERVICE_NAME] for r in seen]
    assert services == [f"service-{i % 3}" for i in range(6) for _ in range(2)]
    assert [r["scopeSpans"][0]["scope"] for r in seen[::2]] == [
        {"name": f"scope-{i % 2}", **({"version": "1.0"} if i % 4 else {})} for i in range(6)]


def test_json_line_of_a_name_under_several_kinds_and_value_types() -> None:
    """The encoder keeps a span name's text with its kind, and a key's text for string
    values: the same name under another kind, the same key with a value of another type
    (or a key the cache was full of) write their own, byte for byte as json.dumps would."""
    from podnet.core.tracing import encode_json_line, otlpjson

    memory = InMemorySpanExporter()
    tp = LeanTracerProvider(memory, Resource.create({SERVICE_NAME: "podnet"}))
    tracer = tp.get_tracer("podnet")
    kinds = list(SpanKind)
    values: list[Any] = ["text", 3, True, "ünï ☃", 0.5, ["a"], "", ErrorKind.THROTTLED]
    for i in range(3 * len(kinds) * len(values)):
        tracer.start_span("same name", kind=kinds[i % len(kinds)],
                          attributes={"k": values[i % len(values)], f"k{i % 5}": "v",
                                      "é": values[(i + 1) % len(values)]}).end()
    tp.force_flush()
    spans = list(memory.get_finished_spans())
    tp.shutdown()
    for batch in (spans, spans[::-1], spans[1::2]):
        assert encode_json_line(batch) == _reference_json_line(batch)
    # a full cache starts again
    for i in range(otlpjson._KEY_VALUES_MAX + 1):
        otlpjson._string_head(f"filler {i}")
    assert encode_json_line(spans) == _reference_json_line(spans)


def test_a_formatted_traceparent_parses_as_its_text_does() -> None:
    """A traceparent this process formatted is parsed from what formatting it kept: the
    same span context as parsing its text, field by field and type by type."""
    from podnet.core.tracing import traceparent

    for flags in (0, 1, 0x80 | 1, 0xFF):
        ctx = trace.SpanContext(0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331,
                                is_remote=False, trace_flags=trace.TraceFlags(flags))
        value = format_traceparent(ctx)
        parsed = parse_traceparent(value)
        text_parsed = traceparent._parse_traceparent.__wrapped__(value)
        assert parsed is not None and text_parsed is not None
        assert parsed == text_parsed
        assert [type(f) for f in parsed] == [type(f) for f in text_parsed]
        assert parsed.is_remote and parsed.is_valid
        assert parsed.trace_state == text_parsed.trace_state
        assert format_traceparent(parsed) == value


def test_a_formatted_traceparent_the_parse_refuses_is_not_kept() -> None:
    """An id wider than its field (no SpanContext's checks made it, yet it says valid)
    formats to a value the parse refuses: kept or not, parsing it still gives None."""
    ctx = tuple.__new__(trace.SpanContext, (2**130, 5, False, trace.TraceFlags(1),
                                            trace.DEFAULT_TRACE_STATE, True))
    value = format_traceparent(ctx)
    assert parse_traceparent(value) is None
