"""The built-in kinds' OpenAPI schemas, compiled once into decoders.

The schema source is ``openapi-v1.32.json`` beside this module: upstream's swagger
definitions for Kubernetes v1.32 (the version the emulator reports), trimmed to the
served kinds and what they reach, written by ``scripts/gen_builtin_openapi.py`` from
kubernetes-validate's per-release copy of upstream's ``api/openapi-spec/swagger.json``.
Why that source: it is upstream's own document for exactly the reported release, with
descriptions (``kubectl explain`` shows them), list types and patch strategies. The
official client's models (``openapi_types``/``attribute_map``) follow the client's newer
release, carry no descriptions in data and no ``x-kubernetes-*`` extensions; and
kubernetes-validate is a test-only dependency, so a generated file is vendored (a test
checks it is still what the script writes).

A built-in object is decoded into Go structs on the real server, so the schema here does
what the Go decoder does, not what JSON-schema validation would:

* a value of the wrong JSON type is a decoding error (upstream's ``json: cannot unmarshal
  string into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64``:
  the Go struct's name, the field's JSON path without indexes, the Go type);
* a field the type does not have is dropped (and listed: the API answers a warning, or,
  with ``fieldValidation=Strict``, a strict decoding error naming ``spec.containers[0].x``);
* ``null`` leaves the field unset;
* a schema's ``required`` list is not checked here: Go decoding never requires a field,
  upstream's ``validation.go`` does (see :mod:`podnet.sim.builtin_validation`).
"""

from __future__ import annotations

import importlib.resources
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, Final

from podnet.core.cluster.port import Kind

__all__ = ["DecodeError", "Decoded", "Schemas", "go_type", "schemas"]

SCHEMA_FILE: Final = "openapi-v1.32.json"

_QUANTITY: Final = re.compile(r"[+-]?[0-9.]+[eEinumkKMGTP]*[-+]?[0-9]*")
_QUANTITY_MESSAGE: Final = (
    "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_INT_RANGES: Final = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class DecodeError(ValueError):
    """The body does not decode into the kind's Go type (upstream answers 400)."""


@dataclass(frozen=True)
class Decoded:
    """A decoded object: what the Go struct would keep, and the unknown fields' paths."""

    value: Any
    unknown: tuple[str, ...]


def _json_kind(value: Any) -> str:
    """How Go's decoder names a JSON value it cannot store."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def go_type(name: str) -> str:
    """The Go type a definition name stands for: ``v1.PodSpec``, ``resource.Quantity``."""
    parts = name.split(".")
    return f"{parts[-2]}.{parts[-1]}"


#: Where a value is: None at the top, else (where its holder is, a field name, a list
#: index or a map key in a 1-tuple); spelled out only for an error or an unknown field
Where = tuple[Any, Any] | None

# A node decodes one value: (value, where, Go struct, unknown) -> kept
Node = Callable[[Any, Where, str, list[str]], Any]


def _steps(where: Where) -> list[Any]:
    steps = []
    while where is not None:
        where, step = where
        steps.append(step)
    return steps[::-1]


def field_path(where: Where) -> str:
    """``spec.containers[0].name``, ``metadata.labels[app]``."""
    out = ""
    for step in _steps(where):
        if isinstance(step, str):
            out = f"{out}.{step}" if out else step
        else:
            out += f"[{step if isinstance(step, int) else step[0]}]"
    return out


def _go_path(where: Where) -> str:
    # Go's decoder names struct fields only: no indexes, no map keys
    return ".".join(s for s in _steps(where) if isinstance(s, str))


def _type_error(value: Any, where: Where, struct: str, type_: str) -> DecodeError:
    return DecodeError(
        f"json: cannot unmarshal {_json_kind(value)} into Go struct field "
        f"{struct}.{_go_path(where)} of type {type_}"
    )


class Schemas:
    """The definitions, and each one compiled into a decoder on first use."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.definitions: Mapping[str, Any] = document["definitions"]
        self.version: str = document.get("kubernetesVersion", "")
        self._nodes: dict[str, Node] = {}
        self._types: dict[str, str] = {}
        self.by_kind: dict[tuple[str, str, str], str] = {}
        for name, body in self.definitions.items():
            for gvk in body.get("x-kubernetes-group-version-kind") or ():
                self.by_kind[(gvk["group"], gvk["version"], gvk["kind"])] = name

    def definition_of(self, kind: Kind) -> str | None:
        return self.by_kind.get((kind.group, kind.version, kind.kind))

    def decode(self, kind: Kind, obj: Mapping[str, Any]) -> Decoded:
        """Decode ``obj`` as ``kind``'s Go type; raises :class:`DecodeError`."""
        name = self.definition_of(kind)
        if name is None:
            return Decoded(obj, ())
        unknown: list[str] = []
        value = self._node(name)(obj, None, "", unknown)
        return Decoded(value, tuple(unknown))

    # --- compiling ---------------------------------------------------------------------

    def _node(self, name: str) -> Node:
        node = self._nodes.get(name)
        if node is None:
            # a forward reference first, so that recursive types (JSONSchemaProps) compile
            self._nodes[name] = lambda v, w, s, u: self._nodes[name](v, w, s, u)
            node = self._nodes[name] = self._compile_definition(name)
        return node

    def _compile_definition(self, name: str) -> Node:
        body = self.definitions[name]
        if name == "io.k8s.apimachinery.pkg.api.resource.Quantity":
            return _quantity
        if name == "io.k8s.apimachinery.pkg.util.intstr.IntOrString":
            return _int_or_string
        if body.get("type") == "object" and "properties" in body:
            return self._struct(name, body)
        return self._compile(body, go_type(name))

    def _type_of(self, schema: Mapping[str, Any]) -> str:
        ref = schema.get("$ref")
        if ref:
            return go_type(ref.rsplit("/", 1)[-1])
        type_ = schema.get("type")
        fmt = schema.get("format")
        if type_ == "integer":
            return fmt if fmt in _INT_RANGES else "int"
        if type_ == "number":
            return "float64"
        if type_ == "boolean":
            return "bool"
        if type_ == "string":
            return "[]uint8" if fmt == "byte" else "string"
        if type_ == "array":
            return "[]" + self._type_of(schema.get("items") or {})
        if type_ == "object":
            extra = schema.get("additionalProperties")
            inner = self._type_of(extra) if isinstance(extra, Mapping) else "interface {}"
            return "map[string]" + inner
        return "interface {}"

    def _compile(self, schema: Mapping[str, Any], type_: str | None = None) -> Node:
        ref = schema.get("$ref")
        if ref:
            target = ref.rsplit("/", 1)[-1]
            resolved: list[Node] = []

            def follow(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
                if not resolved:
                    resolved.append(self._node(target))
                return resolved[0](value, where, struct, unknown)

            return follow
        shown = type_ or self._type_of(schema)
        kind = schema.get("type")
        if kind == "string":
            return _scalar(str, shown)
        if kind == "boolean":
            return _scalar(bool, shown)
        if kind == "integer":
            return _integer(shown)
        if kind == "number":
            return _number(shown)
        if kind == "array":
            return _array(self._compile(schema.get("items") or {}), shown)
        if kind == "object":
            extra = schema.get("additionalProperties")
            if isinstance(extra, Mapping):
                return _map(self._compile(extra), shown)
            return _any_object(shown)
        return _anything

    def _struct(self, name: str, body: Mapping[str, Any]) -> Node:
        struct = name.rsplit(".", 1)[-1]
        fields = {key: self._compile(prop) for key, prop in body["properties"].items()}
        shown = go_type(name)

        def decode(value: Any, where: Where, outer: str, unknown: list[str]) -> Any:
            if not isinstance(value, dict):
                raise _type_error(value, where, outer, shown)
            out: dict[str, Any] = {}
            for key, item in value.items():
                node = fields.get(key)
                if node is None:
                    unknown.append(field_path((where, key)))
                elif item is not None:
                    out[key] = node(item, (where, key), struct, unknown)
            return out

        return decode


def _scalar(type_: type, shown: str) -> Node:
    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if not isinstance(value, type_) or (type_ is not bool and isinstance(value, bool)):
            raise _type_error(value, where, struct, shown)
        return value

    return decode


def _integer(shown: str) -> Node:
    low, high = _INT_RANGES.get(shown, _INT_RANGES["int64"])

    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(value, where, struct, shown)
        if isinstance(value, float):
            if not value.is_integer():
                # Go names the number it could not store
                raise DecodeError(
                    f"json: cannot unmarshal number {value!r} into Go struct field "
                    f"{struct}.{_go_path(where)} of type {shown}"
                )
            value = int(value)
        if not low <= value <= high:
            raise DecodeError(
                f"json: cannot unmarshal number {value} into Go struct field "
                f"{struct}.{_go_path(where)} of type {shown}"
            )
        return value

    return decode


def _number(shown: str) -> Node:
    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _type_error(value, where, struct, shown)
        return value

    return decode


def _array(item: Node, shown: str) -> Node:
    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if not isinstance(value, list):
            raise _type_error(value, where, struct, shown)
        # a null item of a struct list decodes as the zero value, kept as an empty object
        return [
            item(v, (where, i), struct, unknown) if v is not None else None
            for i, v in enumerate(value)
        ]

    return decode


def _map(item: Node, shown: str) -> Node:
    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if not isinstance(value, dict):
            raise _type_error(value, where, struct, shown)
        return {
            k: item(v, (where, (k,)), struct, unknown) if v is not None else None
            for k, v in value.items()
        }

    return decode


def _any_object(shown: str) -> Node:
    def decode(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
        if not isinstance(value, dict):
            raise _type_error(value, where, struct, shown)
        return value

    return decode


def _anything(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
    return value


def _quantity(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
    # resource.Quantity decodes itself from a string or a number
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise DecodeError(_QUANTITY_MESSAGE)
    if isinstance(value, str) and _QUANTITY.fullmatch(value.strip()) is None:
        raise DecodeError(_QUANTITY_MESSAGE)
    return value


def _int_or_string(value: Any, where: Where, struct: str, unknown: list[str]) -> Any:
    # intstr.IntOrString: a quoted value is a string, anything else must be an int32
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise DecodeError(
            f"json: cannot unmarshal {_json_kind(value)} into Go value of type int32"
        )
    return value


@cache
def schemas() -> Schemas:
    """The shipped schemas, loaded and indexed once per process."""
    text = (importlib.resources.files("podnet.sim") / SCHEMA_FILE).read_text(encoding="utf-8")
    return Schemas(json.loads(text))
