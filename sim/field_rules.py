"""apimachinery's validation rules and upstream's ``field.Error`` wording, shared by the
emulator's validation of the built-in kinds (:mod:`podnet.sim.builtin_validation`,
:mod:`podnet.sim.networking_validation`).

The name and label rules are ``staging/src/k8s.io/apimachinery``'s
``pkg/util/validation/validation.go`` (``IsDNS1123Label``, ``IsDNS1123Subdomain``,
``IsQualifiedName``, ``IsValidLabelValue``, ``IsConfigMapKey``) and its metav1 and
objectmeta validation (``ValidateLabels``, ``ValidateAnnotations``); :class:`Errors`
collects ``field.Error`` values as upstream prints them (``Invalid value: "x": ...``,
``Unsupported value``, ``Required value``, ``Duplicate value``, ``Forbidden``,
``Too long``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final

from .schema import FieldError

__all__ = [
    "ANNOTATIONS_LIMIT",
    "Errors",
    "GoLiteral",
    "as_dict",
    "as_list",
    "config_key",
    "dns1123_label",
    "dns1123_subdomain",
    "go_value",
    "label_value",
    "max_len",
    "qualified_name",
    "range_error",
    "validate_annotations",
    "validate_labels",
]

# --- the apimachinery rules ------------------------------------------------------------

_DNS_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT: Final = _DNS_LABEL_FMT + r"(\." + _DNS_LABEL_FMT + ")*"
_QNAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _QNAME_FMT + ")?"
_CONFIG_KEY_FMT: Final = "[-._a-zA-Z0-9]+"
_DNS_LABEL: Final = re.compile(_DNS_LABEL_FMT)
_DNS_SUBDOMAIN: Final = re.compile(_DNS_SUBDOMAIN_FMT)
_QNAME: Final = re.compile(_QNAME_FMT)
_LABEL_VALUE: Final = re.compile(_LABEL_VALUE_FMT)
_CONFIG_KEY: Final = re.compile(_CONFIG_KEY_FMT)

#: how many distinct strings each name rule remembers its answer for: a cluster's pods
#: repeat their label keys and values, node names and images
_CACHED: Final = 16384

#: apimachinery's TotalAnnotationSizeLimitB: keys and values together
ANNOTATIONS_LIMIT: Final = 256 * 1024


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``: the message, examples, and the pattern (upstream's spacing)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def max_len(n: int) -> str:
    return f"must be no more than {n} characters"


@lru_cache(maxsize=_CACHED)
def dns1123_label(value: str) -> tuple[str, ...]:
    """``IsDNS1123Label``."""
    errs = []
    if len(value) > 63:
        errs.append(max_len(63))
    if not _DNS_LABEL.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
            "or '-', and must start and end with an alphanumeric character",
            _DNS_LABEL_FMT, "my-name", "123-abc"))
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    """``IsDNS1123Subdomain``."""
    errs = []
    if len(value) > 253:
        errs.append(max_len(253))
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character",
            _DNS_SUBDOMAIN_FMT, "example.com"))
    return tuple(errs)


_QNAME_MESSAGE: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


@lru_cache(maxsize=_CACHED)
def qualified_name(value: str) -> tuple[str, ...]:
    """``IsQualifiedName``: a label or annotation key (``prefix/name``)."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    else:
        return (
            "a qualified name "
            + _regex_error(_QNAME_MESSAGE, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + max_len(63))
    if name and not _QNAME.fullmatch(name):
        errs.append(
            "name part " + _regex_error(_QNAME_MESSAGE, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def label_value(value: str) -> tuple[str, ...]:
    """``IsValidLabelValue``."""
    errs = []
    if len(value) > 63:
        errs.append(max_len(63))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character",
            _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def config_key(value: str) -> tuple[str, ...]:
    """``IsConfigMapKey`` (configmap and secret data keys)."""
    errs = []
    if len(value) > 253:
        errs.append(max_len(253))
    if not _CONFIG_KEY.fullmatch(value):
        errs.append(_regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if value in (".", ".."):
        errs.append(f"must not be '{value}'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return tuple(errs)


# --- field.Error -----------------------------------------------------------------------


class GoLiteral(str):
    """A value already spelled as Go's ``%#v`` prints it (a typed slice)."""


def go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted, numbers and bools bare."""
    if isinstance(value, GoLiteral):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class Errors:
    """The ``field.ErrorList`` a validation builds, one constructor per error type."""

    def __init__(self) -> None:
        self.list: list[FieldError] = []

    def required(self, path: str, detail: str = "") -> None:
        self.list.append(FieldError(path, "FieldValueRequired",
                                    "Required value" + (f": {detail}" if detail else "")))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.list.append(FieldError(path, "FieldValueInvalid",
                                    f"Invalid value: {go_value(value)}: {detail}"))

    def invalid_each(self, path: str, value: str, messages: Iterable[str]) -> None:
        for m in messages:
            self.invalid(path, value, m)

    def not_supported(self, path: str, value: Any, valid: Sequence[str]) -> None:
        allowed = ", ".join(json.dumps(v) for v in valid)
        self.list.append(FieldError(
            path, "FieldValueNotSupported",
            f"Unsupported value: {go_value(value)}: supported values: {allowed}"))

    def duplicate(self, path: str, value: Any) -> None:
        self.list.append(FieldError(path, "FieldValueDuplicate",
                                    f"Duplicate value: {go_value(value)}"))

    def forbidden(self, path: str, detail: str) -> None:
        self.list.append(FieldError(path, "FieldValueForbidden", f"Forbidden: {detail}"))

    def too_long(self, path: str, limit: int) -> None:
        self.list.append(FieldError(path, "FieldValueTooLong",
                                    f"Too long: may not be more than {limit} bytes"))

    def enum(self, path: str, value: Any, valid: Sequence[str]) -> None:
        """The switch most enum checks are: empty is Required, unknown NotSupported."""
        if not value:
            self.required(path)
        elif value not in valid:
            self.not_supported(path, value, valid)


def as_dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def range_error(low: int, high: int) -> str:
    """``InclusiveRangeError``."""
    return f"must be between {low} and {high}, inclusive"


# --- metav1 and objectmeta validation --------------------------------------------------


def validate_labels(errs: Errors, labels: Any, path: str) -> None:
    """``ValidateLabels`` (metav1 validation): each key a qualified name, each value a
    label value; every error names the map, not the key."""
    for key, value in as_dict(labels).items():
        errs.invalid_each(path, key, qualified_name(key))
        if isinstance(value, str):
            errs.invalid_each(path, value, label_value(value))


def validate_annotations(errs: Errors, annotations: Any, path: str) -> None:
    """``ValidateAnnotations`` (apimachinery objectmeta.go)."""
    total = 0
    for key, value in as_dict(annotations).items():
        errs.invalid_each(path, key, qualified_name(key.lower()))
        total += len(key) + len(value if isinstance(value, str) else "")
    if total > ANNOTATIONS_LIMIT:
        errs.too_long(path, ANNOTATIONS_LIMIT)
