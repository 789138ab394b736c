"""The OTEL_* environment as the OpenTelemetry SDK documents it, against a real OTLP/HTTP
receiver on loopback that decodes what arrives with opentelemetry-proto."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from podnet.core.errors import ConfigError
from podnet.core.tracing import Tracing, otel_exporters, tracer_provider_from_env

OTEL_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
             "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_EXPORTER",
             "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_PROTOCOL",
             "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")


@attrs.define
class Received:
    path: str
    resource: dict[str, Any]
    spans: list[str]


class Receiver:
    """An OTLP/HTTP trace receiver: each POST decoded as an ExportTraceServiceRequest."""

    def __init__(self) -> None:
        self.requests: list[Received] = []
        self.arrived = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                assert self.headers.get("Content-Type") == "application/x-protobuf"
                request = ExportTraceServiceRequest.FromString(body)
                for rs in request.resource_spans:
                    receiver.requests.append(Received(
                        path=self.path,
                        resource={kv.key: kv.value.string_value
                                  for kv in rs.resource.attributes},
                        spans=[span.name for ss in rs.scope_spans for span in ss.spans]))
                receiver.arrived.set()
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)


def one_reconcile(**kwargs: Any) -> None:
    provider = tracer_provider_from_env(batch=False, **kwargs)
    assert provider is not None
    with Tracing(provider).reconcile("pod", "default/web"):
        pass
    provider.shutdown()


def test_the_endpoint_alone_exports_with_the_service_name(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "podnet-ci")
    # OTEL_SERVICE_NAME wins over a service.name among the attributes, as the SDK says
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES",
                       "deployment.environment=ci,service.name=not-this")
    one_reconcile()
    (got,) = receiver.requests
    assert got.path == "/v1/traces"  # the signal path appended to the base endpoint
    assert got.resource["service.name"] == "podnet-ci"
    assert got.resource["deployment.environment"] == "ci"
    assert got.spans == ["reconcile pod"]


def test_the_traces_endpoint_is_taken_as_is_and_the_default_name_is_podnets(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.url}/collect")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    one_reconcile(service_name="podnet-node")
    (got,) = receiver.requests
    assert got.path == "/collect"
    assert got.resource["service.name"] == "podnet-node"


def test_the_flag_replaces_the_environments_endpoint(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    one_reconcile(otlp_endpoint=f"{receiver.url}/v1/traces")
    assert [r.path for r in receiver.requests] == ["/v1/traces"]


def test_a_sampler_that_samples_nothing_exports_nothing(
        receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0")
    one_reconcile()
    assert receiver.requests == []


def test_nothing_asked_for_is_tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert tracer_provider_from_env() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracer_provider_from_env() is None
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert otel_exporters() == {"console"}


@pytest.mark.parametrize(("name", "value"), [
    ("OTEL_TRACES_EXPORTER", "zipkin"),
    ("OTEL_TRACES_SAMPLER", "sometimes"),
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
])
def test_a_value_the_sdk_would_not_take_names_its_variable(
        monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=name):
        otel_exporters()


def test_a_ratio_out_of_range_names_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "2")
    with pytest.raises(ConfigError, match="OTEL_TRACES_SAMPLER_ARG"):
        otel_exporters()


def podnet(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in OTEL_VARS}
    return subprocess.run([sys.executable, "-m", "podnet.app.cli", *args],
                          env={**base, **env}, capture_output=True, text=True, timeout=60)


def test_the_demo_exports_to_its_otlp_endpoint(receiver: Receiver) -> None:
    done = podnet("demo", "--provider", "reference", "--nodes", "1", "--pods", "2",
                  "--no-node-stage", "--json", "--trace-file", "",
                  "--otlp-endpoint", f"{receiver.url}/v1/traces",
                  env={"OTEL_SERVICE_NAME": "podnet-demo-ci"})
    assert done.returncode == 0, done.stderr
    assert receiver.requests, "no spans arrived"
    assert {r.resource["service.name"] for r in receiver.requests} == {"podnet-demo-ci"}
    names = {name for r in receiver.requests for name in r.spans}
    assert "pod_network.allocate" in names and "reconcile pod" in names


def test_a_bad_otel_value_is_one_line_and_exit_2() -> None:
    done = podnet("demo", "--provider", "reference", env={"OTEL_TRACES_EXPORTER": "zipkin"})
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "OTEL_TRACES_EXPORTER" in done.stderr
