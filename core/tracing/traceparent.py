"""W3C ``traceparent``: how a PodNetwork's lifecycle trace is stored in its status and
picked up again by its next transition."""

from __future__ import annotations

import functools
import re
from typing import Final

from opentelemetry.trace import DEFAULT_TRACE_STATE, SpanContext, TraceFlags

_TRACEPARENT_RE: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\s]*)?"
)


def format_traceparent(span_context: SpanContext) -> str:
    """W3C ``traceparent`` (version 00) of a span context; ValueError if it is invalid."""
    # SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, trace_state,
    # is_valid): indexed, not through its properties (a Python call each), once per record
    if not span_context[5]:
        raise ValueError("cannot format an invalid span context as traceparent")
    return format_ids(span_context[0], span_context[1], span_context[3])


_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)


def format_ids(trace_id: int, span_id: int, trace_flags: int = _SAMPLED) -> str:
    """W3C ``traceparent`` (version 00) of valid ids: :func:`format_traceparent` for a
    caller that holds the ids (a lean span) rather than a SpanContext."""
    flags = trace_flags & 0xFF
    value = f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"
    # what parsing the value gives, without the parse: a record's next transition reads
    # back the value its first one formatted (once per pod network, every one unique).
    # Only a value the parse takes (each field its width)
    if len(value) == _VALUE_LENGTH:
        if len(_FORMATTED) >= _FORMATTED_MAX:
            _FORMATTED.clear()
        _FORMATTED[value] = tuple.__new__(SpanContext, (
            trace_id, span_id, True,
            trace_flags if type(trace_flags) is TraceFlags and trace_flags == flags
            else TraceFlags(flags), DEFAULT_TRACE_STATE, True))
    return value


#: the values this process formatted -> their parse (the span context as remote). Threads
#: may share it: get, set and clear are atomic, a lost entry is parsed
_FORMATTED: Final[dict[str, SpanContext]] = {}
_FORMATTED_MAX: Final = 4096
#: "00-" 32 hex digits "-" 16 "-" 2
_VALUE_LENGTH: Final = 55
#: a value this process formatted -> its parse, else None: :func:`parse_traceparent`'s
#: first look, for a caller that looks there before calling it (no Python call)
formatted_parse: Final = _FORMATTED.get


def parse_traceparent(value: str) -> SpanContext | None:
    """The remote span context in a W3C ``traceparent``; None when it is not valid."""
    if not isinstance(value, str) or len(value) > 512:
        return None
    known = _FORMATTED.get(value)
    return known if known is not None else _parse_traceparent(value)


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
