"""Label and field selectors, parsed the way the API server parses them.

Both parsers are cached: a controller asks with the same few selector strings all day.
Malformed selectors and unknown fields raise :class:`Invalid` (HTTP 400/422 on a real
server), with a message that names the offending part.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final, Literal

import attrs

from .port import EVENT, NODE, POD, Invalid, Kind, Obj

LabelOp = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./")
_VALUE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")


@attrs.frozen
class Requirement:
    key: str
    op: LabelOp
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "in"):
            return value is not None and value in self.values
        if op in ("!=", "notin"):
            # a missing label satisfies both negative forms, as upstream
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            have, want = int(value), int(next(iter(self.values)))
        except ValueError:
            return False
        return have > want if op == "gt" else have < want


@attrs.frozen
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector()


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, why: str) -> Invalid:
        return Invalid(f"unable to parse requirement in selector {self.text!r}: {why}")

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def read(self, chars: frozenset[str]) -> str:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos] in chars:
            self.pos += 1
        return self.text[start : self.pos]

    def word(self, w: str) -> bool:
        """Consume keyword ``w`` if it stands alone (followed by space or '(')."""
        end = self.pos + len(w)
        if self.text.startswith(w, self.pos) and (
            end >= len(self.text) or self.text[end].isspace() or self.text[end] == "("
        ):
            self.pos = end
            return True
        return False


def _check_key(sc: _Scanner, key: str) -> str:
    if not key:
        raise sc.fail(f"expected a label key at position {sc.pos}")
    name = key.rsplit("/", 1)[-1]
    if not name or len(name) > 63 or key.count("/") > 1:
        raise sc.fail(f"invalid label key {key!r}")
    return key


def _read_set(sc: _Scanner) -> frozenset[str]:
    sc.skip_ws()
    if not sc.peek("("):
        raise sc.fail("expected '(' after set operator")
    sc.pos += 1
    values: set[str] = set()
    while True:
        sc.skip_ws()
        values.add(sc.read(_VALUE_CHARS))
        sc.skip_ws()
        if sc.peek(","):
            sc.pos += 1
            continue
        if sc.peek(")"):
            sc.pos += 1
            return frozenset(values)
        raise sc.fail("expected ',' or ')' in value set")


# "==" before "=": the longer token wins
_EQUALITY_OPS: tuple[tuple[str, LabelOp], ...] = (("==", "="), ("!=", "!="), ("=", "="))
_ORDER_OPS: tuple[tuple[str, LabelOp], ...] = ((">", "gt"), ("<", "lt"))


def _read_requirement(sc: _Scanner) -> Requirement:
    sc.skip_ws()
    if sc.peek("!"):
        sc.pos += 1
        sc.skip_ws()
        return Requirement(_check_key(sc, sc.read(_KEY_CHARS)), "!")
    key = _check_key(sc, sc.read(_KEY_CHARS))
    sc.skip_ws()
    if sc.at_end() or sc.peek(","):
        return Requirement(key, "exists")
    for token, op in _EQUALITY_OPS:
        if sc.peek(token):
            sc.pos += len(token)
            sc.skip_ws()
            return Requirement(key, op, frozenset({sc.read(_VALUE_CHARS)}))
    for token, op in _ORDER_OPS:
        if sc.peek(token):
            sc.pos += 1
            sc.skip_ws()
            value = sc.read(_VALUE_CHARS)
            if not value.lstrip("-").isdigit():
                raise sc.fail(f"{key} {token} needs an integer, got {value!r}")
            return Requirement(key, op, frozenset({value}))
    if sc.word("notin"):
        return Requirement(key, "notin", _read_set(sc))
    if sc.word("in"):
        return Requirement(key, "in", _read_set(sc))
    raise sc.fail(f"unexpected text at position {sc.pos}")


@functools.lru_cache(maxsize=512)
def parse_label_selector(text: str | None) -> LabelSelector:
    """``a=b,c!=d,e,!f,g in (x,y),h notin (z)``; comma means AND."""
    if text is None or not text.strip():
        return EVERYTHING
    sc = _Scanner(text)
    reqs: list[Requirement] = []
    while True:
        reqs.append(_read_requirement(sc))
        sc.skip_ws()
        if sc.at_end():
            break
        if not sc.peek(","):
            raise sc.fail(f"expected ',' at position {sc.pos}")
        sc.pos += 1
    return LabelSelector(tuple(reqs))


# --- field selectors -------------------------------------------------------------------

#: Fields every kind answers to in this adapter; spec.nodeName and status.phase are what
#: podnet narrows pods and its own records by.
BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace", "spec.nodeName", "status.phase"})

#: The extra fields the real API server registers per kind.
KIND_FIELDS: dict[Kind, frozenset[str]] = {
    POD: frozenset(
        {
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    NODE: frozenset({"spec.unschedulable"}),
    EVENT: frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "type",
        }
    ),
}


@attrs.frozen
class FieldRequirement:
    field: str
    path: tuple[str, ...]
    negate: bool
    value: str

    def matches(self, obj: Obj) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negate


@attrs.frozen
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, obj: Obj) -> bool:
        return all(r.matches(obj) for r in self.requirements)


NO_FIELDS = FieldSelector()


#: Boolean fields upstream's field sets format with ``strconv.FormatBool``: unset is false.
BOOLEAN_FIELDS: Final = frozenset({("spec", "unschedulable"), ("spec", "hostNetwork")})


def field_value(obj: Obj, path: tuple[str, ...]) -> str:
    """The selector's view of a field: missing is "" (or "false", for a boolean), booleans
    are lower-case."""
    cur: Any = obj
    for part in path:
        if not isinstance(cur, dict):
            cur = None
            break
        cur = cur.get(part)
    if cur is None:
        return "false" if path in BOOLEAN_FIELDS else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            buf.append(text[i : i + 2])
            i += 2
            continue
        if ch == sep:
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    parts.append("".join(buf))
    return parts


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _find_op(term: str) -> tuple[int, str]:
    i = 0
    while i < len(term):
        if term[i] == "\\":
            i += 2
            continue
        for op in ("!=", "==", "="):
            if term.startswith(op, i):
                return i, op
        i += 1
    return -1, ""


@functools.lru_cache(maxsize=512)
def parse_field_selector(text: str | None, kind: Kind) -> FieldSelector:
    """``metadata.name=x,spec.nodeName!=y``; only fields ``kind`` supports are accepted."""
    if text is None or not text.strip():
        return NO_FIELDS
    allowed = BASE_FIELDS | KIND_FIELDS.get(kind, frozenset())
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        idx, op = _find_op(term)
        if idx < 0:
            raise Invalid(f"invalid field selector {text!r}: {term!r} has no operator")
        field = term[:idx].strip()
        if field not in allowed:
            raise Invalid(
                f"field label not supported: {field!r} is not a field selector for {kind.plural}"
            )
        value = _unescape(term[idx + len(op) :].strip())
        reqs.append(FieldRequirement(field, tuple(field.split(".")), op == "!=", value))
    return FieldSelector(tuple(reqs))
