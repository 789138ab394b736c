"""``/openapi/v2`` and ``/openapi/v3`` of the API emulator, from the schemas it validates
with: the built-in kinds' definitions (:mod:`podnet.sim.builtin_schema`) and the podnet
CRDs' ``openAPIV3Schema``, as a real server publishes both.

What kubectl 1.32 asks for, and why each document is shaped so:

* ``kubectl explain`` reads ``/openapi/v3`` (the index: one ``serverRelativeURL`` per
  group-version, with a content hash) and then the group-version's document, where it
  finds the kind by ``x-kubernetes-group-version-kind`` in ``components.schemas``;
* ``kubectl create``/``apply`` leave validation to the server when the group-version's
  document declares the ``fieldValidation`` parameter on the kind's PATCH operation
  (client-go's ``QueryParamVerifierV3``);
* a ``kind: List`` has no such operation, so kubectl validates it client-side against
  ``/openapi/v2``, which it asks for as protobuf only (``Accept:
  application/com.github.proto-openapi.spec.v2@v1.0+protobuf``) and decodes as gnostic's
  ``openapi.v2.Document``: that is what is served (JSON when JSON is asked for). Upstream
  builds the v2 document as protobuf too (kube-openapi's handler); the encoding here is a
  small writer for the fields a schema uses.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

from .builtin_schema import Schemas, schemas
from .schema import CustomResource

__all__ = ["PROTOBUF_V2", "PROTOBUF_V2_ANSWER", "OpenApi"]

#: what kubectl asks for, and (the "@" is not a valid media type) what upstream answers
PROTOBUF_V2: Final = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
PROTOBUF_V2_ANSWER: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_METADATA_DESCRIPTION: Final = (
    "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/"
    "sig-architecture/api-conventions.md#metadata")
_QUERY_PARAMETERS: Final = ("dryRun", "fieldManager", "fieldValidation", "force")


def refs(node: Any) -> Iterator[str]:
    """The definition names every ``$ref`` under ``node`` points at, in document order."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rsplit("/", 1)[-1]
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def _closure(definitions: Mapping[str, Any], roots: Iterable[str]) -> list[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in definitions]
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo.extend(r for r in refs(definitions[name]) if r in definitions)
    return sorted(seen)


def crd_definition_name(crd: CustomResource) -> str:
    """Upstream's name for a CR's schema: the group reversed, the version, the kind."""
    return f"{'.'.join(reversed(crd.group.split('.')))}.{crd.version}.{crd.kind}"


def _crd_schema(crd: CustomResource) -> dict[str, Any]:
    """A CRD's schema as upstream publishes it: apiVersion, kind and metadata (described)
    added, the kind's group-version-kind attached."""
    body = dict(crd.schema)
    props = dict(body.get("properties") or {})
    props.setdefault("apiVersion", {"type": "string"})
    props.setdefault("kind", {"type": "string"})
    # upstream's builder describes it as it describes every kind's metadata
    props["metadata"] = {"$ref": f"#/definitions/{_OBJECT_META}",
                         "description": _METADATA_DESCRIPTION}
    body["properties"] = props
    body["x-kubernetes-group-version-kind"] = [
        {"group": crd.group, "version": crd.version, "kind": crd.kind}
    ]
    return body


def _to_v3(node: Any) -> Any:
    """A swagger definition as OpenAPI v3: component references, and a reference with
    siblings wrapped in ``allOf`` (as upstream's v3 documents carry descriptions)."""
    if isinstance(node, list):
        return [_to_v3(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _to_v3(v) for k, v in node.items() if k != "$ref"}
    ref = node.get("$ref")
    if isinstance(ref, str):
        target = "#/components/schemas/" + ref.rsplit("/", 1)[-1]
        if out:
            out["allOf"] = [{"$ref": target}]
        else:
            out["$ref"] = target
    if "properties" in node:
        out["properties"] = {k: _to_v3(v) for k, v in node["properties"].items()}
    return out


class OpenApi:
    """The documents for one set of served kinds, built on first use and kept."""

    def __init__(self, served: Mapping[str, Mapping[str, Any]],
                 crds: Iterable[CustomResource], source: Schemas | None = None) -> None:
        self._served = served  # "group/version" -> plural -> Resource
        self._crds = list(crds)
        self._source = source
        self._lock = threading.Lock()
        self._v2: dict[str, bytes] = {}
        self._v3: dict[str, bytes] | None = None

    @property
    def source(self) -> Schemas:
        return self._source or schemas()

    def definitions(self) -> dict[str, Any]:
        """Every swagger definition: the built-ins' and the CRDs'."""
        defs = dict(self.source.definitions)
        for crd in self._crds:
            defs[crd_definition_name(crd)] = _crd_schema(crd)
        return defs

    # --- v2 ----------------------------------------------------------------------------

    def v2(self, protobuf: bool) -> bytes:
        key = "pb" if protobuf else "json"
        with self._lock:
            if key not in self._v2:
                doc = {
                    "swagger": "2.0",
                    "info": {"title": "Kubernetes", "version": self.source.version},
                    "paths": {},
                    "definitions": self.definitions(),
                }
                self._v2[key] = (_document_pb(doc) if protobuf
                                 else json.dumps(doc, separators=(",", ":")).encode())
            return self._v2[key]

    # --- v3 ----------------------------------------------------------------------------

    def _group_version_docs(self) -> dict[str, bytes]:
        defs = self.definitions()
        by_kind = {
            (g["group"], g["version"], g["kind"]): name
            for name, body in defs.items()
            for g in body.get("x-kubernetes-group-version-kind") or ()
        }
        docs: dict[str, bytes] = {}
        for group_version, resources in self._served.items():
            roots = ["io.k8s.apimachinery.pkg.apis.meta.v1.Status",
                     "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions"]
            paths: dict[str, Any] = {}
            for res in resources.values():
                kind = res.kind
                gvk = {"group": kind.group, "version": kind.version, "kind": kind.kind}
                for k in (kind.kind, kind.kind + "List"):
                    found = by_kind.get((kind.group, kind.version, k))
                    if found:
                        roots.append(found)
                prefix = "/api/v1" if not kind.group else f"/apis/{group_version}"
                where = "/namespaces/{namespace}" if kind.namespaced else ""
                paths[f"{prefix}{where}/{kind.plural}/{{name}}"] = {
                    "patch": {
                        "x-kubernetes-group-version-kind": gvk,
                        "parameters": [
                            {"name": p, "in": "query", "schema": {"type": "string"}}
                            for p in _QUERY_PARAMETERS
                        ],
                        "responses": {},
                    }
                }
            key = "api/v1" if group_version == "v1" else f"apis/{group_version}"
            doc = {
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": self.source.version},
                "paths": paths,
                "components": {
                    "schemas": {name: _to_v3(defs[name]) for name in _closure(defs, roots)}
                },
            }
            docs[key] = json.dumps(doc, separators=(",", ":")).encode()
        return docs

    def v3(self, group_path: str) -> bytes | None:
        """The index (``group_path`` empty) or one group-version's document."""
        with self._lock:
            if self._v3 is None:
                self._v3 = self._group_version_docs()
            docs = self._v3
        if group_path:
            return docs.get(group_path)
        index = {
            key: {"serverRelativeURL":
                  f"/openapi/v3/{key}?hash={hashlib.sha512(doc).hexdigest()[:128].upper()}"}
            for key, doc in docs.items()
        }
        return json.dumps({"paths": index}, separators=(",", ":")).encode()


# --- gnostic's openapi.v2.Document as protobuf ------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes(field: int, data: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _string(field: int, text: str) -> bytes:
    return _bytes(field, text.encode()) if text else b""


def _int(field: int, n: int) -> bytes:
    return _varint(field << 3) + _varint(n & 0xFFFFFFFFFFFFFFFF)


def _double(field: int, x: float) -> bytes:
    import struct

    return _varint(field << 3 | 1) + struct.pack("<d", float(x))


def _any_yaml(value: Any) -> bytes:
    # gnostic's Any keeps a value as YAML text (field 2); JSON is YAML
    return _string(2, json.dumps(value, separators=(",", ":")))


def _schema_pb(schema: Mapping[str, Any]) -> bytes:
    """gnostic ``Schema``: the field numbers of OpenAPIv2.proto."""
    out = bytearray()
    for key, field in (("$ref", 1), ("format", 2), ("title", 3), ("description", 4),
                       ("pattern", 13)):
        value = schema.get(key)
        if isinstance(value, str):
            out += _string(field, value)
    for key, field in (("maximum", 7), ("minimum", 9)):
        if isinstance(schema.get(key), int | float):
            out += _double(field, schema[key])
    for key, field in (("maxLength", 11), ("minLength", 12), ("maxItems", 14),
                       ("minItems", 15)):
        if isinstance(schema.get(key), int):
            out += _int(field, schema[key])
    for name in schema.get("required") or ():
        out += _string(19, name)
    for value in schema.get("enum") or ():
        out += _bytes(20, _any_yaml(value))
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        out += _bytes(21, _bytes(1, _schema_pb(extra)))
    elif isinstance(extra, bool):
        out += _bytes(21, _int(2, int(extra)))
    type_ = schema.get("type")
    if isinstance(type_, str):
        out += _bytes(22, _string(1, type_))
    items = schema.get("items")
    if isinstance(items, Mapping):
        out += _bytes(23, _bytes(1, _schema_pb(items)))
    for sub in schema.get("allOf") or ():
        out += _bytes(24, _schema_pb(sub))
    props = schema.get("properties")
    if isinstance(props, Mapping):
        named = b"".join(
            _bytes(1, _string(1, name) + _bytes(2, _schema_pb(sub)))
            for name, sub in props.items()
        )
        out += _bytes(25, named)
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _bytes(31, _string(1, key) + _bytes(2, _any_yaml(value)))
    return bytes(out)


def _document_pb(doc: Mapping[str, Any]) -> bytes:
    """gnostic ``Document``: swagger (1), info (2), paths (8), definitions (9)."""
    info = doc["info"]
    definitions = b"".join(
        _bytes(1, _string(1, name) + _bytes(2, _schema_pb(body)))
        for name, body in doc["definitions"].items()
    )
    return (
        _string(1, doc["swagger"])
        + _bytes(2, _string(1, info["title"]) + _string(2, info["version"]))
        + _bytes(8, b"")
        + _bytes(9, definitions)
    )
