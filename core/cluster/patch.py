"""JSON-shaped data helpers: a fast copy, and the three patch formats the API accepts.

* :func:`merge_patch` — RFC 7386 JSON merge patch.
* :func:`json_patch` — RFC 6902 JSON patch (add, remove, replace, move, copy, test).
* :func:`strategic_merge_patch` — Kubernetes' strategic merge patch, reduced to what
  podnet meets: lists with a merge key merge item by item, ``metadata.finalizers``
  merges as an ordered union (so a patch that merely omits a finalizer keeps it), and
  the ``$patch`` / ``$deleteFromPrimitiveList`` / ``$retainKeys`` directives.

All failures raise :class:`Invalid` (HTTP 422), as the API server answers a patch that
cannot be applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, cast

from .port import Invalid, Obj

#: Marks a strategic-merge list as a set of scalars merged by union.
PRIMITIVE: Final = "<primitive>"

#: Path of dict keys (list items are transparent) -> merge key, or PRIMITIVE.
MergeRules = Mapping[tuple[str, ...], str]


def clone(value: Any) -> Any:
    """Copy JSON-shaped data; ~10x faster than ``copy.deepcopy`` on API objects."""
    cls = type(value)
    if cls is dict:
        return {k: clone(v) if type(v) in _CONTAINERS else v for k, v in value.items()}
    if cls is list or cls is tuple:
        return [clone(v) if type(v) in _CONTAINERS else v for v in value]
    return value


_CONTAINERS: Final = frozenset({dict, list, tuple})


def clone_obj(obj: Obj) -> Obj:
    """:func:`clone` for an API object, typed as one."""
    return cast(Obj, clone(obj))


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: unlike Python's ``==``, ``true`` is not ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(v, b[k]) for k, v in a.items())
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


# --- RFC 7386 --------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """Return ``target`` merged with ``patch``; neither argument is modified."""
    if not isinstance(patch, Mapping):
        return clone(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 --------------------------------------------------------------------------


def parse_pointer(pointer: str) -> list[str]:
    """RFC 6901: "" is the whole document; ``~1`` is "/" and ``~0`` is "~"."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise Invalid(f"json patch: pointer {pointer!r} must start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool, pointer: str) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
        raise Invalid(f"json patch: {token!r} in {pointer!r} is not an array index")
    idx = int(token)
    limit = len(container) if for_add else len(container) - 1
    if idx > limit:
        raise Invalid(f"json patch: index {idx} out of range in {pointer!r}")
    return idx


def _parent(doc: Any, parts: list[str], pointer: str) -> Any:
    cur = doc
    for token in parts[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise Invalid(f"json patch: path {pointer!r} does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(cur, token, for_add=False, pointer=pointer)]
        else:
            raise Invalid(f"json patch: path {pointer!r} goes through a scalar")
    return cur


def _get(doc: Any, pointer: str) -> Any:
    parts = parse_pointer(pointer)
    if not parts:
        return doc
    parent = _parent(doc, parts, pointer)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"json patch: path {pointer!r} does not exist")
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False, pointer=pointer)]
    raise Invalid(f"json patch: path {pointer!r} goes through a scalar")


def _add(doc: Any, pointer: str, value: Any) -> Any:
    parts = parse_pointer(pointer)
    if not parts:
        return value
    parent = _parent(doc, parts, pointer)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True, pointer=pointer), value)
    else:
        raise Invalid(f"json patch: path {pointer!r} goes through a scalar")
    return doc


def _remove(doc: Any, pointer: str) -> tuple[Any, Any]:
    parts = parse_pointer(pointer)
    if not parts:
        raise Invalid("json patch: cannot remove the whole document")
    parent = _parent(doc, parts, pointer)
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise Invalid(f"json patch: path {pointer!r} does not exist")
        return doc, parent.pop(last)
    if isinstance(parent, list):
        return doc, parent.pop(_index(parent, last, for_add=False, pointer=pointer))
    raise Invalid(f"json patch: path {pointer!r} goes through a scalar")


def json_patch(doc: Any, operations: list[dict[str, Any]]) -> Any:
    """Apply RFC 6902 ``operations`` to a copy of ``doc``; all or nothing."""
    if not isinstance(operations, list):
        raise Invalid("json patch: the patch must be a list of operations")
    result = clone(doc)
    for n, op in enumerate(operations):
        if not isinstance(op, dict) or not isinstance(op.get("path"), str):
            raise Invalid(f"json patch: operation {n} needs 'op' and a string 'path'")
        kind, path = op.get("op"), op["path"]
        if kind in ("add", "replace", "test") and "value" not in op:
            raise Invalid(f"json patch: operation {n} ({kind}) needs 'value'")
        if kind in ("move", "copy") and not isinstance(op.get("from"), str):
            raise Invalid(f"json patch: operation {n} ({kind}) needs 'from'")
        if kind == "add":
            result = _add(result, path, clone(op["value"]))
        elif kind == "remove":
            result, _ = _remove(result, path)
        elif kind == "replace":
            _get(result, path)  # must exist
            if parse_pointer(path):
                result, _ = _remove(result, path)
            result = _add(result, path, clone(op["value"]))
        elif kind == "test":
            if not json_equal(_get(result, path), op["value"]):
                raise Invalid(f"json patch: test failed at {path!r}")
        elif kind == "move":
            src = op["from"]
            if path != src and path.startswith(src + "/"):
                raise Invalid(f"json patch: cannot move {src!r} into its own child {path!r}")
            result, value = _remove(result, src)
            result = _add(result, path, value)
        elif kind == "copy":
            result = _add(result, path, clone(_get(result, op["from"])))
        else:
            raise Invalid(f"json patch: unknown operation {kind!r}")
    return result


# --- strategic merge -------------------------------------------------------------------

_DELETE = object()  # a map patched with {"$patch": "delete"}


def strategic_merge_patch(target: Any, patch: Any, rules: MergeRules) -> Any:
    """Strategic merge of ``patch`` into ``target`` (neither is modified)."""
    result = _smp_map(target, patch, (), rules)
    return {} if result is _DELETE else result


def _smp_map(target: Any, patch: Any, path: tuple[str, ...], rules: MergeRules) -> Any:
    if not isinstance(patch, Mapping):
        return clone(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETE
    base: dict[str, Any] = {}
    if directive != "replace" and isinstance(target, dict):
        base.update(target)
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(base.get(field), list) and isinstance(value, list):
                base[field] = [v for v in base[field] if not any(json_equal(v, d) for d in value)]
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # directives; $setElementOrder only orders, which we don't promise
        if value is None:
            base.pop(key, None)
            continue
        sub = (*path, key)
        rule = rules.get(sub)
        if isinstance(value, list) and rule is not None:
            base[key] = _smp_list(base.get(key), value, sub, rule, rules)
        elif isinstance(value, Mapping):
            merged = _smp_map(base.get(key), value, sub, rules)
            if merged is _DELETE:
                base.pop(key, None)
            else:
                base[key] = merged
        else:
            base[key] = clone(value)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        base = {k: v for k, v in base.items() if k in retain}
    return base


def _smp_list(
    target: Any, patch: list[Any], path: tuple[str, ...], rule: str, rules: MergeRules
) -> list[Any]:
    current: list[Any] = list(target) if isinstance(target, list) else []
    if any(isinstance(i, Mapping) and i.get("$patch") == "replace" for i in patch):
        return [clone(i) for i in patch if not (isinstance(i, Mapping) and "$patch" in i)]
    if rule == PRIMITIVE:
        # ordered union: what is there stays, in order; what is new is appended
        for item in patch:
            if not any(json_equal(item, have) for have in current):
                current.append(clone(item))
        return current
    for item in patch:
        if not isinstance(item, Mapping) or rule not in item:
            raise Invalid(f"strategic merge: items of {'.'.join(path)} need the key {rule!r}")
        at = next(
            (
                i
                for i, have in enumerate(current)
                if isinstance(have, dict) and json_equal(have.get(rule), item[rule])
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if at is not None:
                del current[at]
        elif at is None:
            current.append(_smp_map({}, item, path, rules))
        else:
            current[at] = _smp_map(current[at], item, path, rules)
    return current
