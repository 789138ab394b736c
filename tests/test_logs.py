"""Logs: JSON lines with an RFC 3339 time, the object and the trace id; one line per
meaningful event; -v without the libraries' noise; the flags after the command too."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from podnet.app.cli import build_parser
from podnet.app.demo import node_obj, pod_obj
from podnet.app.logs import ContextFilter, JsonLogFormatter, configure_logging
from podnet.core import logcontext
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD
from podnet.core.engine import Engine, EngineOptions
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.plugin import new_plugin_manager
from podnet.core.tracing import Tracing
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}(Z|[+-]\d\d:\d\d)")


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("transitions", "urllib3")}
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)
    for name, lvl in quiet.items():
        logging.getLogger(name).setLevel(lvl)


def test_a_json_line_names_its_object_and_trace_and_hides_credentials(
        restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging(verbosity=0, log_format="json", stream=out)
    tracing = Tracing(TracerProvider())
    logcontext.current.key = ("pod", "default/web")
    try:
        with tracing.reconcile("pod", "default/web") as span:
            logging.getLogger("podnet.test").warning(
                "call failed: AccessKeySecret=hunter2 refused")
    finally:
        logcontext.current.key = None
    logging.getLogger("podnet.test").info("no object here")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert RFC3339.fullmatch(first["time"]), first["time"]
    assert first["level"] == "warning" and first["logger"] == "podnet.test"
    assert "hunter2" not in out.getvalue() and "AccessKeySecret=" in first["message"]
    assert first["object"] == {"kind": "Pod", "namespace": "default", "name": "web"}
    assert first["trace_id"] == f"{span.get_span_context().trace_id:032x}"
    assert "object" not in second and "trace_id" not in second


def test_text_format_is_one_readable_line(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging(verbosity=0, log_format="text", stream=out)
    logcontext.current.key = ("node", "node-1")
    try:
        logging.getLogger("podnet.test").info("grown by %d", 4)
    finally:
        logcontext.current.key = None
    (line,) = out.getvalue().splitlines()
    assert RFC3339.match(line)
    assert line.endswith("INFO    podnet.test: grown by 4 [Node node-1]"), line


def test_verbose_is_podnets_debug_without_the_libraries(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging(verbosity=1, log_format="text", stream=out)
    logging.getLogger("podnet.engine").debug("podnet detail")
    logging.getLogger("transitions.core").debug("Executed callback")
    logging.getLogger("urllib3.connectionpool").debug("Starting new HTTP connection")
    logging.getLogger("transitions.core").warning("a library warning")
    text = out.getvalue()
    assert "podnet detail" in text and "a library warning" in text
    assert "Executed callback" not in text and "Starting new HTTP" not in text


def test_quiet_by_default_at_info(restore_logging: None) -> None:
    out = io.StringIO()
    configure_logging(verbosity=0, log_format="text", stream=out)
    logging.getLogger("podnet.engine").debug("hidden")
    logging.getLogger("podnet.engine").info("shown")
    assert "hidden" not in out.getvalue() and "shown" in out.getvalue()


@pytest.mark.parametrize("argv", [
    ["-v", "run", "--log-format", "text"],
    ["run", "-v", "--log-format", "text"],
    ["--log-format", "text", "run", "--verbose"],
])
def test_log_flags_go_before_or_after_the_command(argv: list[str]) -> None:
    args = build_parser().parse_args(argv)
    assert args.verbose + args.sub_verbose == 1
    assert (args.sub_log_format or args.log_format) == "text"


class FlakyProvider(ReferenceProvider):
    """The reference provider whose cloud stops answering while ``down``."""

    down = False

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: Any) -> Any:
        if self.down:
            raise ProviderError(ErrorKind.TRANSIENT, "connect timeout to the cloud endpoint")
        return super().podnet_node_inventory(provider, node)


def test_a_provider_that_stops_answering_is_said_once_and_once_when_back(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    cluster.create(NAMESPACE, {"metadata": {"name": "default"}})
    pm = new_plugin_manager()
    plugin = FlakyProvider(ReferenceCloud())
    pm.register(plugin, name="reference")
    engine = Engine(cluster, pm, clock=clock, options=EngineOptions(default_provider="reference"))
    engine.start()
    plugin.down = True
    cluster.create(NODE, node_obj(0))
    cluster.create(POD, pod_obj("web", node_obj(0)["metadata"]["name"]))
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonLogFormatter())
    logging.getLogger("podnet").addHandler(handler)
    with caplog.at_level(logging.INFO, logger="podnet"):
        try:
            engine.run_until_idle(advance=120.0)  # many retries, with backoff
        finally:
            logging.getLogger("podnet").removeHandler(handler)
        stopped = [r for r in caplog.records if "stopped answering" in r.getMessage()]
        cannot = [r for r in caplog.records if "its pool cannot serve" in r.getMessage()]
        assert len(stopped) == 1 and stopped[0].levelno == logging.WARNING
        assert "connect timeout" in stopped[0].getMessage()
        assert len(cannot) == 1
        plugin.down = False
        engine.run_until_idle(advance=300.0)
    # the line a node's reconcile wrote names that node
    (line,) = [json.loads(x) for x in out.getvalue().splitlines() if "cannot serve" in x]
    assert line["object"] == {"kind": "Node", "name": node_obj(0)["metadata"]["name"]}
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("provider reference answers again") == 1
    assert sum("its pool serves again" in m for m in messages) == 1
    assert sum("stopped answering" in m for m in messages) == 1
