"""The podnet command's logs: JSON lines for pipelines, or text for people, on stderr.

Each line has an RFC 3339 timestamp in UTC, the level, the logger, the message, and,
when the line is written while a reconcile runs, its object (kind, namespace, name) and
the trace id of the span current then. Messages and tracebacks go through
:func:`~podnet.core.redaction.redact`: SDK errors echo request parameters.

``-v`` turns podnet's own loggers to DEBUG; the libraries below it (the state machine
library, urllib3, the Kubernetes client, the cloud SDKs) stay at WARNING whatever the
verbosity, since their DEBUG output is their internals, and sometimes request headers.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from opentelemetry import trace

from podnet.core.logcontext import current_object
from podnet.core.redaction import redact

#: loggers kept at WARNING at every verbosity
QUIET_LIBRARIES: Final = ("transitions", "urllib3", "kubernetes", "baidubce",
                          "alibabacloud", "Tea", "opentelemetry", "ovsdbapp")


def _timestamp(created: float) -> str:
    # RFC 3339 with milliseconds and the zone (Z: UTC)
    stamp = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    return stamp.replace("+00:00", "Z")


class ContextFilter(logging.Filter):
    """Adds ``podnet_object`` and ``trace_id`` to each record, read on the thread that
    logs (where the reconcile and its span are current)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "podnet_object"):
            record.podnet_object = current_object()
        context = trace.get_current_span().get_span_context()
        record.trace_id = f"{context.trace_id:032x}" if context.is_valid else None
        record.span_id = f"{context.span_id:016x}" if context.is_valid else None
        return True


class JsonLogFormatter(logging.Formatter):
    """One JSON object per line: what log pipelines index without parsing."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        obj = getattr(record, "podnet_object", None)
        if obj is not None:
            kind, namespace, name = obj
            entry["object"] = {"kind": kind, "name": name,
                               **({"namespace": namespace} if namespace else {})}
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            entry["trace_id"] = trace_id
            entry["span_id"] = getattr(record, "span_id", None)
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)


class TextLogFormatter(logging.Formatter):
    """``time LEVEL logger: message [Kind namespace/name] trace=...``: for people."""

    def format(self, record: logging.LogRecord) -> str:
        line = (f"{_timestamp(record.created)} {record.levelname:<7} {record.name}: "
                f"{redact(record.getMessage())}")
        obj = getattr(record, "podnet_object", None)
        if obj is not None:
            kind, namespace, name = obj
            line += f" [{kind} {namespace + '/' if namespace else ''}{name}]"
        trace_id = getattr(record, "trace_id", None)
        if trace_id is not None:
            line += f" trace={trace_id}"
        if record.exc_info:
            line += "\n" + redact(self.formatException(record.exc_info))
        return line


def configure_logging(*, verbosity: int, log_format: str, default: int = logging.INFO,
                      stream: TextIO | None = None) -> logging.Handler:
    """One handler on the root logger, replacing any: ``default`` level, DEBUG from one
    ``-v``; the quiet libraries at WARNING."""
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.addFilter(ContextFilter())
    handler.setFormatter(JsonLogFormatter() if log_format == "json" else TextLogFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbosity > 0 else default)
    for name in QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)
    # urllib3 warns on every retry of every request (about 90 lines a minute while an API
    # server is down); podnet's commands say once what they retry instead
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    return handler
