"""W3C ``traceparent``: how a PodNetwork's lifecycle trace is stored in its status and
picked up again by its next transition."""

from __future__ import annotations

import functools
import re
from typing import Final

from opentelemetry.trace import SpanContext, TraceFlags

_TRACEPARENT_RE: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?"
)


def format_traceparent(span_context: SpanContext) -> str:
    """W3C ``traceparent`` (version 00) of a span context; ValueError if it is invalid."""
    # SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, trace_state,
    # is_valid): indexed, not through its properties (a Python call each), once per record
    if not span_context[5]:
        raise ValueError("cannot format an invalid span context as traceparent")
    return f"00-{span_context[0]:032x}-{span_context[1]:016x}-{span_context[3] & 0xFF:02x}"


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
