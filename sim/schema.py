"""podnet's CustomResourceDefinitions as the emulated API server uses them.

The CRDs are read from their YAML, the package data ``podnet.sim/crds`` (their one
source; ``scripts/render_deploy.py`` copies them into the chart and ``deploy/crds``).
:func:`validate` checks an object against a CRD's ``openAPIV3Schema`` the way a
structural schema does, for the subset of OpenAPI v3 the CRDs use: ``type``,
``properties``, ``required``, ``enum``, ``items``, ``anyOf`` (of value validations),
``format`` (ipv4, ipv6, cidr, mac,
date-time), ``additionalProperties``, ``nullable``, ``minLength``/``maxLength``,
``minimum``/``maximum``, ``minItems``/``maxItems``, ``pattern``,
``x-kubernetes-preserve-unknown-fields`` and the uniqueness rules of
``x-kubernetes-list-type`` (map, set). Each CRD's ``x-kubernetes-validations`` are
compiled when it is loaded (:attr:`CustomResource.rules`; a rule that does not compile
stops the load, naming it) and evaluated by :mod:`podnet.sim.cel`.
"""

from __future__ import annotations

import importlib.resources
import ipaddress
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from podnet.core.cluster.patch import json_equal
from podnet.core.cluster.port import Kind

from . import cel

__all__ = [
    "CRD_FILES",
    "EXTERNAL_CRD_FILES",
    "CustomResource",
    "FieldError",
    "PrinterColumn",
    "Validation",
    "crd_directory",
    "find_path",
    "load_crds",
    "validate",
]

CRD_FILES: Final = (
    "podnetworks.yaml",
    "nodenetworks.yaml",
    "subnets.yaml",
    "ippools.yaml",
    "securitygroups.yaml",
)
#: CRDs of other projects the emulator serves (Multus's, KubeVirt's), not part of podnet's
#: chart
EXTERNAL_CRD_FILES: Final = ("external/networkattachmentdefinitions.yaml",
                             "external/virtualmachineinstances.yaml",
                             "external/virtualmachineinstancemigrations.yaml")


@dataclass(frozen=True)
class PrinterColumn:
    """One ``additionalPrinterColumns`` entry."""

    name: str
    type: str
    json_path: str
    priority: int = 0
    description: str = ""
    format: str = ""


@dataclass(frozen=True)
class CustomResource:
    """What the server needs of one served CRD version."""

    group: str
    version: str
    kind: str
    list_kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...]
    categories: tuple[str, ...]
    columns: tuple[PrinterColumn, ...]
    schema: Mapping[str, Any]
    status_subresource: bool
    selectable_fields: tuple[str, ...]  # "spec.nodeName", without the leading dot
    #: the compiled x-kubernetes-validations (None: the schema has none)
    rules: cel.Validator | None = None

    @property
    def ref(self) -> Kind:
        return Kind(self.group, self.version, self.kind, self.plural, self.namespaced)

    @property
    def field_selectors(self) -> frozenset[str]:
        """Fields a list may select by: metadata's two, plus the CRD's selectable ones."""
        return frozenset({"metadata.name", "metadata.namespace", *self.selectable_fields})


# --- loading ---------------------------------------------------------------------------


def crd_directory() -> Path | None:
    """Where the CRD YAML is: the package data (``sim/crds`` of a source checkout)."""
    packaged = importlib.resources.files("podnet.sim") / "crds"
    if all((packaged / name).is_file() for name in (*CRD_FILES, *EXTERNAL_CRD_FILES)):
        # package data of a regular install is a directory on disk
        return Path(str(packaged))
    return None


def load_crds(directory: Path | None = None) -> list[CustomResource]:
    """Every served version of every CRD in ``directory`` (default: :func:`crd_directory`)."""
    where = directory or crd_directory()
    if where is None:
        raise FileNotFoundError(
            f"podnet CRDs not found: expected {', '.join((*CRD_FILES, *EXTERNAL_CRD_FILES))} "
            "in the package "
            "data podnet.sim/crds"
        )
    found: list[CustomResource] = []
    for name in (*CRD_FILES, *EXTERNAL_CRD_FILES):
        path = where / name
        found.extend(_parsed(path, path.read_text(encoding="utf-8")))
    return found


#: (path, text) -> its CRDs: compiling the CEL rules takes a while, and every emulator a
#: test starts reads the same files
_PARSED: dict[tuple[Path, str], tuple[CustomResource, ...]] = {}


def _parsed(path: Path, text: str) -> tuple[CustomResource, ...]:
    key = (path.resolve(), text)
    found = _PARSED.get(key)
    if found is None:
        found = _PARSED[key] = tuple(
            crd for doc in yaml.safe_load_all(text) if doc for crd in _parse_crd(doc, path))
    return found


def _parse_crd(doc: Mapping[str, Any], path: Path) -> Iterator[CustomResource]:
    if doc.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: not a CustomResourceDefinition")
    spec = doc["spec"]
    names = spec["names"]
    for ver in spec["versions"]:
        if not ver.get("served", True):
            continue
        schema = ver["schema"]["openAPIV3Schema"]
        try:
            rules = cel.compile_schema(schema)
        except cel.CompileError as exc:
            # kube-apiserver refuses such a CRD; the emulator does not start with it
            raise ValueError(
                f"{path}: CustomResourceDefinition {doc['metadata']['name']} version "
                f"{ver['name']}: spec.validation.{exc}"
            ) from None
        columns = tuple(
            PrinterColumn(
                name=c["name"],
                type=c["type"],
                json_path=c["jsonPath"],
                priority=int(c.get("priority", 0)),
                description=c.get("description", ""),
                format=c.get("format", ""),
            )
            for c in ver.get("additionalPrinterColumns") or ()
        )
        yield CustomResource(
            group=spec["group"],
            version=ver["name"],
            kind=names["kind"],
            list_kind=names.get("listKind") or names["kind"] + "List",
            plural=names["plural"],
            singular=names.get("singular") or names["kind"].lower(),
            namespaced=spec["scope"] == "Namespaced",
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            columns=columns,
            schema=schema,
            status_subresource="status" in (ver.get("subresources") or {}),
            selectable_fields=tuple(
                f["jsonPath"].lstrip(".") for f in ver.get("selectableFields") or ()
            ),
            rules=rules,
        )


# --- a JSONPath subset for printer columns ----------------------------------------------

_STEP = re.compile(
    r"\.([A-Za-z0-9_-]+)|\[(\*|\d+)\]"
    # a filter on one field of list items, as printer columns pick one condition by type
    r"""|\[\?\(@\.([A-Za-z0-9_-]+)\s*==\s*(?:"([^"]*)"|'([^']*)')\)\]"""
)


def find_path(obj: Any, path: str) -> list[Any]:
    """Values at a simple JSONPath (``.a.b``, ``.a[*].b``, ``.a[0]``,
    ``.a[?(@.type=="Ready")].b``); [] when missing."""
    current = [obj]
    pos = 0
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    while pos < len(text):
        m = _STEP.match(text, pos)
        if m is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {text[pos:]!r}")
        pos = m.end()
        key, index, field = m.group(1), m.group(2), m.group(3)
        wanted = m.group(4) if m.group(4) is not None else m.group(5)
        nxt: list[Any] = []
        for value in current:
            if field is not None:
                if isinstance(value, list):
                    nxt.extend(item for item in value
                               if isinstance(item, dict) and item.get(field) == wanted)
            elif key is not None:
                if isinstance(value, dict) and key in value:
                    nxt.append(value[key])
            elif isinstance(value, list):
                if index == "*":
                    nxt.extend(value)
                elif int(index) < len(value):
                    nxt.append(value[int(index)])
        current = nxt
    return current


# --- validation -------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldError:
    """One cause of a 422, shaped as the API server's ``StatusCause``."""

    field: str
    reason: str  # FieldValueRequired, FieldValueNotSupported, FieldValueInvalid, ...
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass
class Validation:
    """The outcome of :func:`validate`: the object with nulls (and, when pruning,
    unknown fields) dropped, the errors, and the unknown fields seen."""

    value: Any
    errors: list[FieldError] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)


_TYPE_NAMES: Final = {
    "object": "object",
    "array": "array",
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
}
_MAC: Final = re.compile(r"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(\1[0-9A-Fa-f]{2}){4}")
_DATE_TIME: Final = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})"
)


def _has_type(value: Any, type_: str) -> bool:
    if type_ == "object":
        return isinstance(value, dict)
    if type_ == "array":
        return isinstance(value, list)
    if type_ == "string":
        return isinstance(value, str)
    if type_ == "boolean":
        return isinstance(value, bool)
    if type_ == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if type_ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True  # an unknown type name constrains nothing here


def _format_ok(value: str, fmt: str) -> bool:
    try:
        if fmt == "ipv4":
            ipaddress.IPv4Address(value)
        elif fmt == "ipv6":
            ipaddress.IPv6Address(value)
        elif fmt == "cidr":
            ipaddress.ip_network(value, strict=False)
        elif fmt == "mac":
            return _MAC.fullmatch(value) is not None
        elif fmt == "date-time":
            return _DATE_TIME.fullmatch(value) is not None
    except ValueError:
        return False
    return True  # formats not listed are not checked, as upstream ignores unknown ones


def _show(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


class _Walker:
    def __init__(self, prune: bool) -> None:
        self.prune = prune
        self.errors: list[FieldError] = []
        self.unknown: list[str] = []

    def error(self, path: str, reason: str, message: str) -> None:
        self.errors.append(FieldError(path, reason, message))

    def invalid(self, path: str, value: Any, why: str) -> None:
        self.error(path, "FieldValueInvalid", f"Invalid value: {_show(value)}: {why}")

    def walk(self, schema: Mapping[str, Any], value: Any, path: str) -> Any:
        if value is None and schema.get("nullable"):
            return None
        type_ = schema.get("type")
        if type_ and not _has_type(value, type_):
            self.error(
                path,
                "FieldValueTypeInvalid",
                f"Invalid value: {_show(value)}: {path} in body must be of type "
                f"{_TYPE_NAMES.get(type_, type_)}: {_show(_json_type(value))}",
            )
            return value
        enum = schema.get("enum")
        if enum is not None and not any(json_equal(value, e) for e in enum):
            allowed = ", ".join(_show(e) for e in enum)
            self.error(
                path,
                "FieldValueNotSupported",
                f"Unsupported value: {_show(value)}: supported values: {allowed}",
            )
        any_of = schema.get("anyOf")
        if any_of and not self._any_of(any_of, value, path):
            self.error(path, "FieldValueInvalid",
                       f"Invalid value: {_show(value)}: {path} in body must validate at "
                       "least one schema (anyOf)")
        if isinstance(value, str):
            self._string(schema, value, path)
        elif isinstance(value, int | float) and not isinstance(value, bool):
            self._number(schema, value, path)
        if isinstance(value, dict):
            return self._object(schema, value, path)
        if isinstance(value, list):
            return self._array(schema, value, path)
        return value

    def _any_of(self, schemas: Iterable[Mapping[str, Any]], value: Any, path: str) -> bool:
        """Whether ``value`` passes one of ``schemas`` (value validations only, as a
        structural schema allows under ``anyOf``); when none, the first one's errors are
        kept beside the anyOf's own, as upstream answers."""
        first: list[FieldError] | None = None
        for sub in schemas:
            trial = _Walker(self.prune)
            trial.walk(sub, value, path)
            if not trial.errors:
                return True
            first = trial.errors if first is None else first
        self.errors.extend(first or ())
        return False

    def _string(self, schema: Mapping[str, Any], value: str, path: str) -> None:
        fmt = schema.get("format")
        if fmt and not _format_ok(value, fmt):
            self.invalid(path, value, f"{path} in body must be of type {fmt}: {_show(value)}")
        low, high = schema.get("minLength"), schema.get("maxLength")
        if low is not None and len(value) < low:
            self.invalid(path, value, f"{path} in body should be at least {low} chars long")
        if high is not None and len(value) > high:
            self.error(path, "FieldValueTooLong", f"Too long: may not be more than {high} bytes")
        pattern = schema.get("pattern")
        if pattern is not None and re.search(pattern, value) is None:
            self.invalid(path, value, f"{path} in body should match {pattern!r}")

    def _number(self, schema: Mapping[str, Any], value: float, path: str) -> None:
        low, high = schema.get("minimum"), schema.get("maximum")
        if low is not None and value < low:
            self.invalid(path, value, f"{path} in body should be greater than or equal to {low}")
        if high is not None and value > high:
            self.invalid(path, value, f"{path} in body should be less than or equal to {high}")

    def _object(self, schema: Mapping[str, Any], value: dict[str, Any], path: str) -> Any:
        props: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            sub = props.get(key)
            if sub is None and isinstance(extra, Mapping):
                sub, where = extra, f"{path}[{key}]"
            if item is None and not (sub or {}).get("nullable"):
                # a null on a non-nullable field is pruned, as upstream does before defaulting
                continue
            if sub is not None:
                out[key] = self.walk(sub, item, where)
            elif keep_unknown:
                out[key] = item
            else:
                self.unknown.append(where)
                if not self.prune:
                    self.error(where, "FieldValueForbidden", f"unknown field {_show(where)}")
        for key in schema.get("required") or ():
            if key not in out:
                self.error(f"{path}.{key}" if path else key, "FieldValueRequired", "Required value")
        return out

    def _array(self, schema: Mapping[str, Any], value: list[Any], path: str) -> Any:
        low, high = schema.get("minItems"), schema.get("maxItems")
        if low is not None and len(value) < low:
            self.invalid(path, value, f"{path} in body should have at least {low} items")
        if high is not None and len(value) > high:
            why = f"Too many: {len(value)}: must have at most {high} items"
            self.error(path, "FieldValueTooMany", why)
        items = schema.get("items")
        out = [
            self.walk(items, v, f"{path}[{i}]") if isinstance(items, Mapping) else v
            for i, v in enumerate(value)
        ]
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "set":
            self._unique(path, ((_show(v), v) for v in out))
        elif list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or ()
            self._unique(
                path,
                (
                    (_show([v.get(k) for k in keys]), {k: v.get(k) for k in keys})
                    for v in out
                    if isinstance(v, dict)
                ),
            )
        return out

    def _unique(self, path: str, entries: Iterable[tuple[str, Any]]) -> None:
        seen: set[str] = set()
        for i, (key, shown) in enumerate(entries):
            if key in seen:
                why = f"Duplicate value: {_show(shown)}"
                self.error(f"{path}[{i}]", "FieldValueDuplicate", why)
            seen.add(key)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def validate(
    schema: Mapping[str, Any],
    obj: Mapping[str, Any],
    *,
    prune: bool = False,
    only: str | None = None,
) -> Validation:
    """Check ``obj`` against a CRD's ``openAPIV3Schema``.

    Unknown fields are errors unless ``prune`` (then they are dropped and only listed).
    ``metadata`` is the server's to check, not the schema's. ``only`` narrows the check
    to one top-level field (``"status"`` for a status write, whose spec is not touched).
    """
    walker = _Walker(prune)
    props: Mapping[str, Any] = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind", "metadata") or (only is not None and key != only):
            out[key] = value
        elif key in props:
            if value is None and not props[key].get("nullable"):
                continue
            out[key] = walker.walk(props[key], value, key)
        elif schema.get("x-kubernetes-preserve-unknown-fields"):
            out[key] = value
        else:
            walker.unknown.append(key)
            if not prune:
                walker.error(key, "FieldValueForbidden", f"unknown field {_show(key)}")
    if only is None:
        for key in schema.get("required") or ():
            if key not in out:
                walker.error(key, "FieldValueRequired", "Required value")
    return Validation(out, walker.errors, walker.unknown)
