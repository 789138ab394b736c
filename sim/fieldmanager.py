"""Server-side apply and ``metadata.managedFields``, as kube-apiserver's field manager.

The facts this follows (k8s.io/apiserver/pkg/endpoints/handlers/fieldmanager and
sigs.k8s.io/structured-merge-diff, SMD):

* a field set is a set of paths; a path's elements are spelled as FieldsV1 spells them:
  ``f:name`` (a field), ``k:{"name":"c"}`` (an item of a map-list, its keys as sorted
  JSON), ``v:"x"`` (an item of a set-list); FieldsV1 nests them, ``.`` marking a node that
  is itself a member and has children;
* the schema decides how values merge: a struct or a map merges key by key unless
  ``x-kubernetes-map-type: atomic``; a list is atomic unless ``x-kubernetes-list-type``
  says ``set`` or ``map`` (built-ins without the marker: a ``merge`` patch strategy makes
  a map on its merge key, or a set); atomic values are replaced whole;
* what an applier owns is its applied configuration's leaves, list items and empty maps
  (SMD typed/tofieldset.go); what an updater owns grows by what its write added or
  changed, and every manager loses what a write removed (SMD merge/update.go ``Update``);
* an apply conflicts where it changes a field another manager owns; ``force`` takes the
  field over; fields the applier applied before and no longer applies are removed when
  no other manager owns them (SMD ``Apply`` / ``prune``);
* ``apiVersion``, ``kind``, ``metadata`` itself and its server-set fields are never
  owned (fieldmanager's stripMeta); a kind with a status subresource resets ``status`` on
  the main resource and everything but ``status`` on ``/status`` (the strategies'
  GetResetFields).

Schemas are OpenAPI v2 (built-ins, with ``$ref``) or structural CRD schemas (inline);
an object without a declared schema merges as SMD's deduced type does (maps key by key,
lists atomic).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from podnet.core.cluster.patch import clone, json_equal

__all__ = [
    "ApplyConflict",
    "FieldSet",
    "Shape",
    "apply",
    "decode_fields",
    "encode_fields",
    "manager_identity",
    "path_string",
    "record_update",
]

Path = tuple[str, ...]
FieldSet = set[Path]

_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

#: never owned (fieldmanager's stripMeta): exact paths, not subtrees
_STRIPPED: Final = frozenset({
    ("f:apiVersion",), ("f:kind",), ("f:metadata",),
    *(("f:metadata", f"f:{name}",) for name in (
        "name", "namespace", "creationTimestamp", "selfLink", "uid", "clusterName",
        "generation", "managedFields", "resourceVersion")),
})


class Shape:
    """The type of a node of an object: how it merges and what its children are."""

    __slots__ = ("_defs", "_fields", "_item", "atomic", "keys", "kind", "list_type", "schema")

    def __init__(self, schema: Mapping[str, Any], defs: Mapping[str, Any]) -> None:
        self._defs = defs
        ref = schema.get("$ref")
        if isinstance(ref, str):
            schema = defs.get(ref.rsplit("/", 1)[-1], {})
        self.schema = schema
        self._fields: dict[str, Shape] = {}
        self._item: Shape | None = None
        self.keys: tuple[str, ...] = ()
        self.list_type = "atomic"
        type_ = schema.get("type")
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        if schema.get("x-kubernetes-int-or-string") or type_ in (
                "string", "integer", "number", "boolean"):
            self.kind = "scalar"
        elif type_ == "array":
            self.kind = "list"
            marker = schema.get("x-kubernetes-list-type")
            merge_key = schema.get("x-kubernetes-patch-merge-key")
            if marker in ("set", "map", "atomic"):
                self.list_type = marker
                self.keys = tuple(schema.get("x-kubernetes-list-map-keys") or ())
            elif "merge" in str(schema.get("x-kubernetes-patch-strategy") or "").split(","):
                self.list_type = "map" if merge_key else "set"
                self.keys = (merge_key,) if merge_key else ()
        elif isinstance(props, Mapping) and props:
            self.kind = "struct"
        elif isinstance(extra, Mapping):
            self.kind = "map"
        else:
            self.kind = "deduced"
        self.atomic = (self.kind == "list" and self.list_type == "atomic") or (
            schema.get("x-kubernetes-map-type") == "atomic")

    def field(self, key: str) -> Shape:
        """The shape of a child of this map or struct (a deduced one if undeclared)."""
        found = self._fields.get(key)
        if found is None:
            if self.kind == "struct":
                sub = self.schema["properties"].get(key)
                if sub is None and key == "metadata":
                    sub = {"$ref": _OBJECT_META}  # a CRD's schema leaves ObjectMeta out
                found = Shape(sub or {}, self._defs)
            elif self.kind == "map":
                found = self.item()
            else:
                found = _DEDUCED
            self._fields[key] = found
        return found

    def declares(self, key: str) -> bool:
        return self.kind == "struct" and key in self.schema["properties"]

    def item(self) -> Shape:
        if self._item is None:
            sub = (self.schema.get("items") if self.kind == "list"
                   else self.schema.get("additionalProperties"))
            self._item = Shape(sub if isinstance(sub, Mapping) else {}, self._defs)
        return self._item

    def element(self, item: Any) -> str:
        """The path element of ``item`` of this (set or map) list."""
        if self.list_type == "map":
            keyed = {k: item[k] for k in sorted(self.keys) if isinstance(item, dict) and k in item}
            return "k:" + json.dumps(keyed, separators=(",", ":"))
        return "v:" + json.dumps(item, separators=(",", ":"))


_DEDUCED: Final = Shape({}, {})


def _granular(value: Any, shape: Shape) -> bool:
    """Whether ``value`` is merged and owned by its parts (not as one leaf)."""
    if shape.atomic or shape.kind == "scalar":
        return False
    if isinstance(value, dict):
        return shape.kind in ("struct", "map", "deduced")
    return isinstance(value, list) and shape.kind == "list"


# --- field sets ------------------------------------------------------------------------


def applied_set(value: Any, shape: Shape, path: Path = ()) -> FieldSet:
    """What applying ``value`` makes its manager own (SMD ToFieldSet)."""
    out: FieldSet = set()
    _applied(value, shape, path, out)
    return out


def _applied(value: Any, shape: Shape, path: Path, out: FieldSet) -> None:
    if not _granular(value, shape):
        out.add(path)
        return
    if isinstance(value, dict):
        for key, sub in value.items():
            child = (*path, "f:" + key)
            sub_shape = shape.field(key)
            _applied(sub, sub_shape, child, out)
            if sub is None or sub == {} or not shape.declares(key):
                out.add(child)
    else:
        item = shape.item()
        for entry in value:
            child = (*path, shape.element(entry))
            _applied(entry, item, child, out)
            out.add(child)


def compare(old: Any, new: Any, shape: Shape) -> tuple[FieldSet, FieldSet, FieldSet]:
    """(added, modified, removed) paths from ``old`` to ``new`` (SMD typed/compare.go)."""
    added: FieldSet = set()
    modified: FieldSet = set()
    removed: FieldSet = set()
    _compare(old, new, shape, (), added, modified, removed)
    return added, modified, removed


def _compare(old: Any, new: Any, shape: Shape, path: Path, added: FieldSet,
             modified: FieldSet, removed: FieldSet, in_zero: bool = False) -> None:
    if old is new:
        return  # a subtree the write shares with the stored object (the store never mutates)
    probe = new if new is not None else old
    empty = (not old) and (not new)
    if not _granular(probe, shape) or empty or (
            old is not None and new is not None and type(old) is not type(new)):
        if old is None:
            added.add(path)
        elif new is None:
            removed.add(path)
        elif not json_equal(old, new):
            modified.add(path)
        return
    if isinstance(probe, dict):
        before = old if isinstance(old, dict) else {}
        after = new if isinstance(new, dict) else {}
        required = shape.schema.get("required") or () if shape.kind == "struct" else ()
        for key in before.keys() | after.keys():
            _compare(before.get(key), after.get(key), shape.field(key), (*path, "f:" + key),
                     added, modified, removed, key in required)
    else:
        item = shape.item()
        lhs = {shape.element(e): e for e in (old or ())}
        rhs = {shape.element(e): e for e in (new or ())}
        for pe in lhs.keys() | rhs.keys():
            _compare(lhs.get(pe), rhs.get(pe), item, (*path, pe), added, modified, removed)
    # upstream compares with the Go zero value its type decodes into, which holds every
    # struct and every field without omitempty (a required one, here); only what is not
    # there (list items, optional lists and maps) is an added node of its own
    in_item = bool(path) and path[-1][:2] in ("k:", "v:")
    if path and (in_item or (shape.kind != "struct" and not in_zero)):
        if old is None:
            added.add(path)
        elif new is None:
            removed.add(path)


def _created_tree(value: Any, shape: Shape, in_zero: bool, in_item: bool) -> dict[str, Any]:
    """FieldsV1 of what creating ``value`` adds: ``compare(None, value)`` encoded, without
    building the set (the common write, so kept cheap)."""
    if not _granular(value, shape) or not value:
        return {}
    node: dict[str, Any] = {}
    if isinstance(value, dict):
        required = shape.schema.get("required") or () if shape.kind == "struct" else ()
        for key in sorted(value):
            sub = value[key]
            if sub is not None:
                node["f:" + key] = _created_tree(sub, shape.field(key), key in required, False)
    else:
        item = shape.item()
        for entry in sorted(value, key=shape.element):
            node[shape.element(entry)] = _created_tree(entry, item, False, True)
    if in_item or (shape.kind != "struct" and not in_zero):
        return {".": {}, **node}
    return node


#: FieldsV1 trees already stored, by their JSON: objects of one shape (a deployment's
#: pods) share one tree, as stored objects are never mutated (an edit copies first)
_SHARED_TREES: dict[str, dict[str, Any]] = {}
_SHARED_LIMIT: Final = 4096


def _shared(tree: dict[str, Any]) -> dict[str, Any]:
    key = json.dumps(tree, separators=(",", ":"))
    found = _SHARED_TREES.get(key)
    if found is None:
        if len(_SHARED_TREES) >= _SHARED_LIMIT:
            _SHARED_TREES.clear()
        found = _SHARED_TREES[key] = tree
    return found


def _created_fields(new: Obj, shape: Shape, scope: str) -> dict[str, Any]:
    tree = _created_tree(_body(new), shape, False, False)
    tree.pop("f:apiVersion", None)
    tree.pop("f:kind", None)
    meta = tree.get("f:metadata")
    if meta is not None:
        meta = {k: v for k, v in meta.items() if ("f:metadata", k) not in _STRIPPED}
        if meta:
            tree["f:metadata"] = meta
        else:
            del tree["f:metadata"]
    if scope == "main":
        tree.pop("f:status", None)
    elif scope == "status":
        tree = {k: v for k, v in tree.items() if k == "f:status"}
    return _shared(tree)


def _strip(fields: FieldSet, scope: str) -> FieldSet:
    """What a manager may own of ``fields``: ``scope`` is "all", "main" (a kind whose
    status is its subresource's) or "status" (that subresource)."""
    kept = {p for p in fields if p and p not in _STRIPPED}
    if scope == "main":
        return {p for p in kept if p[0] != "f:status"}
    if scope == "status":
        return {p for p in kept if p[0] == "f:status"}
    return kept


# --- merging ---------------------------------------------------------------------------


def merge(live: Any, applied: Any, shape: Shape) -> Any:
    """``applied`` merged into ``live`` as the schema says (SMD typed.Merge)."""
    if live is None or not _granular(applied, shape) or type(live) is not type(applied):
        return clone(applied)
    if isinstance(applied, dict):
        out = dict(live)
        for key, sub in applied.items():
            out[key] = merge(live.get(key), sub, shape.field(key))
        return out
    item = shape.item()
    result = list(live)
    where = {shape.element(e): i for i, e in enumerate(result)}
    for entry in applied:
        pe = shape.element(entry)
        if pe in where:
            result[where[pe]] = merge(result[where[pe]], entry, item)
        else:
            where[pe] = len(result)
            result.append(clone(entry))
    return result


def remove(obj: Any, path: Path, shape: Shape) -> Any:
    """``obj`` without what ``path`` names (a copy along the path only)."""
    if not path:
        return obj
    head, rest = path[0], path[1:]
    if isinstance(obj, dict) and head.startswith("f:"):
        key = head[2:]
        if key not in obj:
            return obj
        out = dict(obj)
        if rest:
            out[key] = remove(obj[key], rest, shape.field(key))
            if out[key] in ({}, []) and obj[key] not in ({}, []):
                del out[key]  # emptied by the removal: SMD's remover drops it
        else:
            del out[key]
        return out
    if isinstance(obj, list) and shape.kind == "list":
        item = shape.item()
        out_list = []
        for entry in obj:
            if shape.element(entry) == head:
                if rest:
                    out_list.append(remove(entry, rest, item))
                continue
            out_list.append(entry)
        return out_list
    return obj


# --- FieldsV1 --------------------------------------------------------------------------


def encode_fields(fields: FieldSet) -> dict[str, Any]:
    """A field set as FieldsV1 JSON."""
    root: dict[str, Any] = {}
    for path in sorted(fields):
        node = root
        for pe in path:
            node = node.setdefault(pe, {})
        node["."] = {}
    return _tidy(root)


def _tidy(node: dict[str, Any]) -> dict[str, Any]:
    # a leaf member is {}; "." stays only beside children
    out = {k: _tidy(v) for k, v in sorted(node.items()) if k != "."}
    if "." in node and out:
        return {".": {}, **out}
    return out


def decode_fields(fields_v1: Any, path: Path = ()) -> FieldSet:
    out: FieldSet = set()
    if not isinstance(fields_v1, dict):
        return out
    if path and (not fields_v1 or "." in fields_v1):
        out.add(path)
    for key, sub in fields_v1.items():
        if key != ".":
            out |= decode_fields(sub, (*path, key))
    return out


def path_string(path: Path) -> str:
    """A path as SMD prints it: ``.spec.containers[name="c"].image``."""
    parts = []
    for pe in path:
        kind, text = pe[:2], pe[2:]
        if kind == "f:":
            parts.append("." + text)
        elif kind == "k:":
            keyed = json.loads(text)
            parts.append("[" + ",".join(f"{k}={json.dumps(v, separators=(',', ':'))}"
                                        for k, v in keyed.items()) + "]")
        elif kind == "v:":
            parts.append(f"[={text}]")
        else:
            parts.append(f"[{text}]")
    return "".join(parts)


# --- managers --------------------------------------------------------------------------

Managers = dict[tuple[str, str, str, str], FieldSet]


def manager_identity(entry: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """(manager, operation, apiVersion, subresource): an applier's ignores its apiVersion
    (fieldmanager's BuildManagerIdentifier)."""
    op = str(entry.get("operation") or "")
    version = "" if op == "Apply" else str(entry.get("apiVersion") or "")
    return (str(entry.get("manager") or ""), op, version, str(entry.get("subresource") or ""))


def read_managers(entries: Any) -> tuple[Managers, dict[tuple[str, str, str, str], Obj]]:
    managers: Managers = {}
    shown: dict[tuple[str, str, str, str], Obj] = {}
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, dict):
            continue
        ident = manager_identity(entry)
        managers[ident] = decode_fields(entry.get("fieldsV1"))
        shown[ident] = entry
    return managers, shown


Obj = dict[str, Any]


def write_managers(managers: Managers, shown: Mapping[tuple[str, str, str, str], Obj],
                   touched: tuple[str, str, str, str] | None, api_version: str,
                   now: str) -> list[Obj]:
    """The managedFields list, sorted as upstream sorts it (operation, time, manager)."""
    entries = []
    for ident, fields in managers.items():
        if not fields:
            continue
        manager, op, _, sub = ident
        before = shown.get(ident)
        encoded = encode_fields(fields)
        entry: Obj = {"manager": manager, "operation": op,
                      "apiVersion": (before or {}).get("apiVersion") or api_version}
        if ident == touched:
            entry["apiVersion"] = api_version
        keep_time = before is not None and ident != touched and before.get("time")
        entry["time"] = keep_time or now
        entry["fieldsType"] = "FieldsV1"
        entry["fieldsV1"] = encoded
        if sub:
            entry["subresource"] = sub
        entries.append(entry)
    entries.sort(key=lambda e: (e["operation"], e["time"], e["manager"], e["apiVersion"],
                                e.get("subresource", "")))
    return entries


def _identity_json(ident: tuple[str, str, str, str]) -> str:
    manager, op, version, sub = ident
    body: Obj = {"manager": manager, "operation": op}
    if version:
        body["apiVersion"] = version
    if sub:
        body["subresource"] = sub
    return json.dumps(body, separators=(",", ":"))


def _shown_manager(ident: tuple[str, str, str, str]) -> str:
    # fieldmanager's printManager: an updater is named with its apiVersion
    manager, op, version, sub = ident
    shown = json.dumps(manager)
    if sub:
        shown += f" with subresource {json.dumps(sub)}"
    if op == "Update":
        return f"{shown} using {version}"
    return shown


class ApplyConflict(Exception):
    """An apply would change fields other managers own: upstream's 409."""

    def __init__(self, conflicts: list[tuple[tuple[str, str, str, str], Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(self.message)

    @property
    def message(self) -> str:
        if len(self.conflicts) == 1:
            ident, path = self.conflicts[0]
            return (f"Apply failed with 1 conflict: conflict with {_shown_manager(ident)}: "
                    f"{path_string(path)}")
        lines = []
        by: dict[tuple[str, str, str, str], list[Path]] = {}
        for ident, path in self.conflicts:
            by.setdefault(ident, []).append(path)
        for ident in sorted(by, key=_identity_json):
            lines.append(f"conflicts with {_shown_manager(ident)}:")
            lines += [f"- {path_string(p)}" for p in by[ident]]
        return f"Apply failed with {len(self.conflicts)} conflicts: " + "\n".join(lines)

    @property
    def causes(self) -> list[Obj]:
        return [{"type": "FieldManagerConflict",
                 "message": f"conflict with {_shown_manager(ident)}",
                 "field": path_string(path)} for ident, path in self.conflicts]


def _body(obj: Any) -> Any:
    if not isinstance(obj, dict):
        return obj
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        return {**obj, "metadata": meta}
    return obj


def record_update(live: Obj | None, new: Obj, shape: Shape, manager: str, sub: str | None,
                  scope: str, now: str, api_version: str) -> Obj:
    """``new`` with the managedFields an Update by ``manager`` leaves (SMD Updater.Update;
    a client's own managedFields: fieldmanager's decodeLiveOrNew)."""
    found = new.get("metadata")
    meta: Obj = found if isinstance(found, dict) else {}
    sent = meta.get("managedFields")
    live_entries = ((live or {}).get("metadata") or {}).get("managedFields")
    if isinstance(sent, list) and sent and all(e == {} for e in sent):
        # a list of one empty entry resets them, before the write's own changes are
        # recorded (an empty list changes nothing)
        live_entries = []
    elif isinstance(sent, list) and sent and sent != live_entries:
        live_entries = sent  # the client rewrites them
    if live is None and not live_entries:
        tree = _created_fields(new, shape, scope)
        meta = {k: v for k, v in meta.items() if k != "managedFields"}
        if tree:
            meta["managedFields"] = [{
                "manager": manager, "operation": "Update", "apiVersion": api_version,
                "time": now, "fieldsType": "FieldsV1", "fieldsV1": tree,
                **({"subresource": sub} if sub else {})}]
        return {**new, "metadata": meta}
    added, modified, removed = compare(_body(live), _body(new), shape)
    ident = (manager, "Update", api_version, sub or "")
    gained = _strip(added | modified, scope)
    lost = modified | removed
    entries: list[Obj] = []
    mine: Obj | None = None
    for entry in live_entries if isinstance(live_entries, list) else ():
        if not isinstance(entry, dict):
            continue
        if manager_identity(entry) == ident:
            mine = entry
            continue
        theirs: Any = entry.get("fieldsV1")
        hits = [p for p in lost if _tree_has(theirs, p)]
        if hits:  # the write took these over, or removed them (edited in a copy)
            theirs = clone(theirs)
            for path in hits:
                _tree_remove(theirs, path)
            if not theirs:
                continue
            entry = {**entry, "fieldsV1": theirs}
        entries.append(entry)
    if gained or (mine is not None and removed):
        own: Any = clone(mine.get("fieldsV1")) if mine is not None else {}
        if not isinstance(own, dict):  # a client's malformed entry: start over
            own = {}
        for path in removed:
            _tree_remove(own, path)
        for path in sorted(gained, key=len):
            _tree_add(own, path)
        if own:
            # the time moves only when the write took fields (upstream's
            # managedFieldsUpdater): a removal alone keeps it, so a PUT that changes
            # nothing writes nothing
            when = now if gained or mine is None else mine.get("time") or now
            entries.append({"manager": manager, "operation": "Update",
                            "apiVersion": api_version, "time": when, "fieldsType": "FieldsV1",
                            "fieldsV1": _shared(own), **({"subresource": sub} if sub else {})})
    elif mine is not None:
        entries.append(mine)
    entries.sort(key=lambda e: (str(e.get("operation")), str(e.get("time")),
                                str(e.get("manager")), str(e.get("apiVersion")),
                                str(e.get("subresource", ""))))
    meta = {k: v for k, v in meta.items() if k != "managedFields"}
    if entries:
        meta["managedFields"] = entries
    return {**new, "metadata": meta}


def _tree_has(tree: Any, path: Path) -> bool:
    """Whether FieldsV1 ``tree`` holds ``path`` as a member."""
    node = tree
    for pe in path:
        if not isinstance(node, dict) or pe not in node:
            return False
        node = node[pe]
    return isinstance(node, dict) and (not node or "." in node)


def _tree_add(tree: dict[str, Any], path: Path) -> None:
    node = tree
    last = len(path) - 1
    for at, pe in enumerate(path):
        child = node.get(pe)
        if child is None:
            child = node[pe] = {}
        elif not child and at < last:
            child["."] = {}  # a leaf member that now has children
        node = child
    if node and "." not in node:
        node["."] = {}


def _tree_remove(tree: dict[str, Any], path: Path) -> None:
    trail = []
    node = tree
    for pe in path:
        if not isinstance(node, dict) or pe not in node:
            return
        trail.append((node, pe))
        node = node[pe]
    if len(node) > 1 or (node and "." not in node):
        node.pop(".", None)  # its children stay owned
        return
    for parent, pe in reversed(trail):
        del parent[pe]
        if parent is tree or parent:
            if list(parent) == ["."]:
                parent.clear()  # only itself is left: a leaf member again
            return


def apply(live: Obj | None, config: Obj, shape: Shape, manager: str, sub: str | None,
          scope: str, force: bool, now: str, api_version: str) -> Obj:
    """The object an apply of ``config`` by ``manager`` leaves, with its managedFields;
    raises :class:`ApplyConflict` (SMD Updater.Apply)."""
    body = _body(live) if live is not None else {}
    managers, shown = read_managers(((live or {}).get("metadata") or {}).get("managedFields"))
    ident = (manager, "Apply", "", sub or "")
    last = managers.get(ident, set())
    mine = _strip(applied_set(config, shape), scope)
    merged = merge(body, config, shape)
    managers[ident] = mine
    # what the applier stopped applying goes, unless someone else still owns it
    owned = set().union(*managers.values())
    for path in sorted(last - owned, key=len):
        if not any(p[: len(path)] == path for p in owned):
            merged = remove(merged, path, shape)
    added, modified, removed = compare(body, merged, shape)
    changes = added | modified
    conflicts = [(other, path) for other, fields in managers.items() if other != ident
                 for path in sorted(fields & changes)]
    if conflicts and not force:
        raise ApplyConflict(conflicts)
    for other in managers:
        if other != ident:
            managers[other] = managers[other] - changes - removed
    touched = ident if (changes or removed or mine != last) else None
    entries = write_managers(managers, shown, touched, api_version, now)
    meta = dict(merged.get("metadata") or {})
    meta.pop("managedFields", None)
    if entries:
        meta["managedFields"] = entries
    return {**merged, "metadata": meta}
