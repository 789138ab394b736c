"""The trace file: OTLP/JSON lines, one ExportTraceServiceRequest per line. Written by
:class:`JsonLinesSpanExporter` (and :mod:`podnet.core.filetrace`, through
:func:`encode_json_line`), read back by :func:`read_trace_file` (``podnet trace``, tests).
"""

from __future__ import annotations

import base64
import json
import operator
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any, Final

from opentelemetry.sdk.resources import SERVICE_NAME
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import (
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import (
    SpanKind,
    Status,
    StatusCode,
)

from podnet.core.filetrace import LEAN_SPAN_TYPES, UNSET_STATUS, LeanSpan

_ID_FIELDS: Final = ("traceId", "spanId", "parentSpanId")


def _to_any_value(value: Any) -> dict[str, Any]:
    # bool before int: bool is an int in Python, not in OTLP
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}  # int64 is a string in ProtoJSON
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_to_any_value(v) for v in value]}}
    return {"stringValue": str(value)}


def _to_attributes(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": k, "value": _to_any_value(v)} for k, v in (attributes or {}).items()]


def _span_dict(span: ReadableSpan) -> dict[str, Any]:
    """One span as its OTLP/JSON object: the reference form that :func:`_span_json` writes
    directly, and the fallback for what that fast path does not take."""
    ctx = span.context
    assert ctx is not None
    out: dict[str, Any] = {
        "traceId": f"{ctx.trace_id:032x}",
        "spanId": f"{ctx.span_id:016x}",
        "name": span.name,
        # OTLP numbers kinds from 1 (0 is "unspecified"); the SDK from 0
        "kind": span.kind.value + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "flags": 0x100 | int(ctx.trace_flags),
    }
    if span.parent is not None:
        out["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.attributes:
        out["attributes"] = _to_attributes(span.attributes)
    if span.events:
        out["events"] = [
            {"timeUnixNano": str(ev.timestamp), "name": ev.name,
             "attributes": _to_attributes(ev.attributes)}
            for ev in span.events
        ]
    if span.links:
        out["links"] = [
            {"traceId": f"{link.context.trace_id:032x}",
             "spanId": f"{link.context.span_id:016x}",
             "attributes": _to_attributes(link.attributes)}
            for link in span.links
        ]
    out["status"] = _status_dict(span.status)
    return out


def _status_dict(status: Status) -> dict[str, Any]:
    # ProtoJSON leaves out default values: an unset status is {}
    out: dict[str, Any] = {}
    if status.status_code.value:
        out["code"] = status.status_code.value
    if status.description:
        out["message"] = status.description
    return out


# The encoder writes the JSON text itself, exactly as json.dumps(..., separators=(",", ":"))
# writes the dicts above: building the dicts and dumping them cost three times as much,
# on the thread that competes with the engine for the GIL. Rare values (floats, sequences,
# subclasses, ids out of range) go through the dicts and json.dumps, so the text is the same.
_SEPARATORS: Final = (",", ":")
_json_str: Final = json.encoder.encode_basestring_ascii  # what json.dumps uses (C)
_BOOL_VALUES: Final = ('{"boolValue":false}', '{"boolValue":true}')
# (key, value) -> its KeyValue text, for string values: most repeat (machine, trigger,
# states, provider, API, node). Cleared when full, so values seen once do not crowd it for
# long. Exporter threads may share it: get, set and clear are atomic, a lost entry is redone.
_KEY_VALUES: Final[dict[tuple[str, str], str]] = {}
_KEY_VALUES_MAX: Final = 4096
#: an attribute key -> its KeyValue's text up to its string value
_KEY_HEADS: Final[dict[str, str]] = {}


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=_SEPARATORS)


def _key_value_json(item: tuple[Any, Any]) -> str:
    key, value = item
    if type(key) is str and type(value) is str:
        head = _KEY_HEADS.get(key)
        if head is None:
            if len(_KEY_HEADS) >= _KEY_VALUES_MAX:
                _KEY_HEADS.clear()
            head = _KEY_HEADS[key] = f'{{"key":{_json_str(key)},"value":{{"stringValue":'
        out = f"{head}{_json_str(value)}}}}}"
        if len(_KEY_VALUES) >= _KEY_VALUES_MAX:
            _KEY_VALUES.clear()
        _KEY_VALUES[item] = out
        return out
    cls = type(value)
    if cls is bool:
        value_json = _BOOL_VALUES[value]
    elif cls is int:
        value_json = f'{{"intValue":"{value}"}}'
    else:
        value_json = _dumps(_to_any_value(value))
    return f'{{"key":{_json_str(key) if type(key) is str else _dumps(key)},"value":{value_json}}}'


def _attributes_json(attributes: Mapping[str, Any] | None) -> str:
    """The JSON array of OTLP KeyValues, as json.dumps(_to_attributes(attributes))."""
    if not attributes:
        return "[]"
    try:
        # the cached texts looked up in C (map); only the misses in Python
        cached: list[Any] = list(map(_KEY_VALUES.get, attributes.items()))
    except TypeError:  # an unhashable value (a list): not for the cache
        return "[" + ",".join([_key_value_json(item) for item in attributes.items()]) + "]"
    texts: list[str] = ([text or _key_value_json(item)
                         for text, item in zip(cached, attributes.items(), strict=True)]
                        if None in cached else cached)
    return "[" + ",".join(texts) + "]"


def _link_json(link: Any) -> str:
    """One OTLP Link's text (the fast path's ids: see :func:`_span_json`)."""
    linked = link.context
    attributes = link.attributes
    return (f'{{"traceId":"{linked[0].to_bytes(16, "big").hex()}",'
            f'"spanId":"{linked[1].to_bytes(8, "big").hex()}",'
            f'"attributes":{_attributes_json(attributes) if attributes else "[]"}}}')


class _StringHeads(dict[str, str]):
    """An attribute key -> its KeyValue's text up to its string value, made on first use."""

    def __missing__(self, key: object) -> str:
        if type(key) is not str:  # the reference form takes it
            raise KeyError(key)
        if len(self) >= _KEY_VALUES_MAX:
            self.clear()
        head = self[key] = f'{{"key":{_json_str(key)},"value":{{"stringValue":'
        return head


_string_head: Final = _StringHeads().__getitem__
#: _json_str for any value: a string's JSON text; TypeError for anything else
_string_json_or_raise: Final[Callable[[Any], str]] = _json_str
_concat: Final = operator.add
#: a span's name and kind -> the text between its ids and its start time
_NAME_KINDS: Final[dict[str, tuple[SpanKind, str]]] = {}


def _name_kind_json(name: str, kind: SpanKind) -> str:
    cached = _NAME_KINDS.get(name)
    if cached is not None and cached[0] is kind:
        return cached[1]
    # OTLP numbers kinds from 1, the API from 0
    text = f',"name":{_json_str(name)},"kind":{kind.value + 1},"startTimeUnixNano":"'
    if len(_NAME_KINDS) >= _KEY_VALUES_MAX:
        _NAME_KINDS.clear()
    _NAME_KINDS[name] = (kind, text)
    return text


def _span_json(span: ReadableSpan) -> str:
    """json.dumps(_span_dict(span)), written directly."""
    name = span.name
    attributes = span.attributes
    status = span.status
    if type(name) is not str or span.events:  # rare (failures): the reference form
        return _dumps(_span_dict(span))
    cached = _NAME_KINDS.get(name)
    name_kind = (cached[1] if cached is not None and cached[0] is span.kind
                 else _name_kind_json(name, span.kind))
    # bytes.hex of the fixed-width id: what f"{id:032x}" gives, at half the cost (an id
    # too wide raises OverflowError, and the caller takes the reference form). A
    # SpanContext is a tuple (trace_id, span_id, is_remote, trace_flags, ...): indexed,
    # not through its properties, a Python call each
    links_json: str | None
    if type(span) in LEAN_SPAN_TYPES:
        # a lean span's ids are its own fields, its parent a lean span or a SpanContext,
        # its one link (a transition's reconcile) the linked span: no SpanContext made
        lean: Any = span
        trace_id, span_id, flags = lean._trace_id, lean._span_id, 0x101
        parent = lean._parent
        parent_id = (None if parent is None else parent._span_id
                     if type(parent) in LEAN_SPAN_TYPES else parent[1])
        linked = lean._linked
        if linked is not None:
            if type(linked) in LEAN_SPAN_TYPES:
                linked_trace, linked_span = linked._trace_id, linked._span_id
            else:
                linked_trace, linked_span = linked[0], linked[1]
            links_json = (f'{{"traceId":"{linked_trace.to_bytes(16, "big").hex()}",'
                          f'"spanId":"{linked_span.to_bytes(8, "big").hex()}",'
                          '"attributes":[]}')
        else:  # the tracing package's spans link only so; LeanSpan's API takes any
            links = lean.links if type(lean) is LeanSpan else None
            links_json = None if not links else ",".join(map(_link_json, links))
    else:
        ctx = span.context
        assert ctx is not None
        trace_id, span_id, flags = ctx[0], ctx[1], 0x100 | ctx[3]
        parent = span.parent
        parent_id = None if parent is None else parent[1]
        links = span.links
        links_json = (None if not links else _link_json(links[0]) if len(links) == 1
                      else ",".join(map(_link_json, links)))
    parent_json = ("" if parent_id is None else
                   f',"parentSpanId":"{parent_id.to_bytes(8, "big").hex()}"')
    # each part's text between its opening and its closing, all joined once by the
    # f-string below: a + would copy the part's text again
    if not attributes:
        attributes_open = attributes_json = attributes_close = ""
    else:
        try:
            # string values (nearly all): each KeyValue its key's cached head and its value
            # escaped, joined, all in C (map); a key or value of another type raises
            attributes_json = "}},".join(map(
                _concat, map(_string_head, attributes),
                map(_string_json_or_raise, attributes.values())))
            attributes_open, attributes_close = ',"attributes":[', "}}]"
        except (KeyError, TypeError):
            attributes_json = _attributes_json(attributes)
            attributes_open, attributes_close = ',"attributes":', ""
    if links_json is None:
        links_open = links_json = links_close = ""
    else:
        links_open, links_close = ',"links":[', "]"
    status_json = ("{}" if status is UNSET_STATUS
                   or (status.status_code is StatusCode.UNSET and not status.description)
                   else _dumps(_status_dict(status)))
    # one f-string: each + would copy the span's text so far again
    return (f'{{"traceId":"{trace_id.to_bytes(16, "big").hex()}",'
            f'"spanId":"{span_id.to_bytes(8, "big").hex()}"{name_kind}'
            f'{span.start_time or 0}","endTimeUnixNano":"{span.end_time or 0}",'
            f'"flags":{flags}'
            f'{parent_json}{attributes_open}{attributes_json}{attributes_close}'
            f'{links_open}{links_json}{links_close},"status":{status_json}}}')


# A batch's resource and scope, written once per batch: a provider has one of each, and a
# quiet controller exports a few spans a batch, where json.dumps' encoder (made anew per
# call) and the resource's attributes cost more than the spans. The resource's text is
# kept with the resource itself (immutable), so an id reused by another is not mistaken.
_RESOURCES: Final[dict[int, tuple[Any, str]]] = {}
_SCOPES: Final[dict[tuple[str, str | None], str]] = {}


def _resource_head(resource: Any) -> str:
    cached = _RESOURCES.get(id(resource))
    if cached is not None and cached[0] is resource:
        return cached[1]
    head = ('{"resource":{"attributes":'
            + _attributes_json(resource.attributes if resource else None)
            + '},"scopeSpans":[')
    if len(_RESOURCES) >= 64:
        _RESOURCES.clear()
    _RESOURCES[id(resource)] = (resource, head)
    return head


def encode_json_line(spans: Sequence[ReadableSpan]) -> str:
    """One ExportTraceServiceRequest in OTLP/JSON (ids as lowercase hex), without newline.

    Built straight from the SDK's spans: going through the protobuf encoder and ProtoJSON
    costs many times as much per span, on the thread that competes with the engine. The
    text is what json.dumps (compact separators) writes for the request as dicts.
    """
    by_resource: dict[int, tuple[Any, dict[tuple[str, str | None], list[str]]]] = {}
    # a batch is nearly always one resource and one scope: skip the lookups while it lasts
    last_resource: Any = None
    last_scope: Any = None
    span_jsons: list[str] = []
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope
        if resource is not last_resource or scope is not last_scope or not by_resource:
            entry = by_resource.setdefault(id(resource), (resource, {}))
            scope_key = (scope.name, scope.version) if scope is not None else ("", None)
            span_jsons = entry[1].setdefault(scope_key, [])
            last_resource, last_scope = resource, scope
        try:
            span_jsons.append(_span_json(span))
        except OverflowError:
            span_jsons.append(_dumps(_span_dict(span)))
    # the pieces in order, joined once: the spans' text is copied once, not per nesting level
    parts = ['{"resourceSpans":[']
    for resource, scopes in by_resource.values():
        if len(parts) > 1:
            parts.append(",")
        parts.append(_resource_head(resource))
        for i, ((name, version), encoded) in enumerate(scopes.items()):
            scope_json = _SCOPES.get((name, version))
            if scope_json is None:
                if len(_SCOPES) >= _KEY_VALUES_MAX:
                    _SCOPES.clear()
                scope_json = _SCOPES[(name, version)] = _dumps(
                    {"name": name, **({"version": version} if version else {})})
            parts.append(f'{"," if i else ""}{{"scope":{scope_json},"spans":[')
            parts.append(",".join(encoded))
            parts.append("]}")
        parts.append("]}")
    parts.append("]}")
    return "".join(parts)


class JsonLinesSpanExporter(SpanExporter):
    """Appends one OTLP/JSON ExportTraceServiceRequest per export() call, one per line."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.fspath(path)
        parent = os.path.dirname(self._path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        self._lock = threading.Lock()
        self._file: IO[str] | None = open(self._path, "a", encoding="utf-8")  # noqa: SIM115

    @property
    def path(self) -> str:
        return self._path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not spans:
            return SpanExportResult.SUCCESS
        # encode outside the lock: it is the expensive part
        line = encode_json_line(spans)
        with self._lock:
            if self._file is None:
                return SpanExportResult.FAILURE
            try:
                self._file.write(line)
                self._file.write("\n")  # not line + "\n": that copies the whole batch again
                self._file.flush()
            except OSError:
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return True

    def shutdown(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def _any_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "arrayValue" in value:
        return [_any_value(v) for v in value["arrayValue"].get("values", ())]
    if "kvlistValue" in value:
        return _attributes(value["kvlistValue"].get("values", ()))
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    return None


def _attributes(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {kv["key"]: _any_value(kv.get("value", {})) for kv in items}


def read_trace_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The spans of an OTLP/JSON lines file, flattened into plain dicts.

    Each dict has: name, traceId, spanId, parentSpanId (None for a root), kind (OTLP
    integer: 1 internal, 3 client), attributes {key: python value}, status
    {"code": int, "message": str} and statusCode (0 unset, 1 ok, 2 error), events
    [{name, attributes}], links [{traceId, spanId, attributes}], startTimeUnixNano,
    endTimeUnixNano (ints), service (resource service.name) and scope (its name).
    """
    spans: list[dict[str, Any]] = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            request = json.loads(line)
            for resource_spans in request.get("resourceSpans", ()):
                resource = _attributes(resource_spans.get("resource", {}).get("attributes", ()))
                for scope_spans in resource_spans.get("scopeSpans", ()):
                    scope = scope_spans.get("scope", {}).get("name", "")
                    for raw in scope_spans.get("spans", ()):
                        status = raw.get("status", {})
                        code = int(status.get("code", 0))
                        spans.append(
                            {
                                "name": raw.get("name", ""),
                                "traceId": raw.get("traceId", ""),
                                "spanId": raw.get("spanId", ""),
                                "parentSpanId": raw.get("parentSpanId") or None,
                                "kind": int(raw.get("kind", 0)),
                                "attributes": _attributes(raw.get("attributes", ())),
                                "status": {"code": code, "message": status.get("message", "")},
                                "statusCode": code,
                                "events": [
                                    {
                                        "name": ev.get("name", ""),
                                        "attributes": _attributes(ev.get("attributes", ())),
                                    }
                                    for ev in raw.get("events", ())
                                ],
                                "links": [
                                    {
                                        "traceId": ln.get("traceId", ""),
                                        "spanId": ln.get("spanId", ""),
                                        "attributes": _attributes(ln.get("attributes", ())),
                                    }
                                    for ln in raw.get("links", ())
                                ],
                                "startTimeUnixNano": int(raw.get("startTimeUnixNano", 0)),
                                "endTimeUnixNano": int(raw.get("endTimeUnixNano", 0)),
                                "service": resource.get(SERVICE_NAME),
                                "scope": scope,
                            }
                        )
    return spans
