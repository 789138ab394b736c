"""Provider config sections, read by the one converter.

The provider contract's side (the rules, ``section``, ``read_section``) is
:mod:`podnet.hookspecs.sections`, which providers import; this module installs the reader
there (on import: :mod:`podnet.core.plugin` imports it, so every process that loads
providers has it) and re-exports the contract's names for core's own modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs

from podnet.core.annotations import show
from podnet.core.convert import (
    RecordError,
    RuleError,
    converter,
    from_wire,
    register_section,
    to_wire,
)
from podnet.core.errors import ConfigError
from podnet.hookspecs.sections import (
    CHECK,
    PARSE,
    SECRET,
    Check,
    at_least,
    between,
    cidrs,
    config_key,
    ids,
    install_reader,
    invalid,
    one_of,
    read_section,
    rule,
    section,
    text,
)

__all__ = [
    "at_least",
    "between",
    "cidrs",
    "config_key",
    "ids",
    "invalid",
    "one_of",
    "read_section",
    "rule",
    "section",
    "text",
]

T = TypeVar("T")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _field_hook(a: attrs.Attribute[Any]) -> Callable[[Any, Any], Any]:
    check: Check | None = a.metadata.get(CHECK)
    secret = bool(a.metadata.get(SECRET))
    parse: Check | None = a.metadata.get(PARSE)
    if parse is None:
        typed = converter.get_structure_hook(a.type)
        kind = a.type

        def parse(value: Any) -> Any:
            return typed(value, kind)

    read: Check = parse

    def structure(value: Any, _: Any = None) -> Any:
        try:
            out = read(value)
            if check is not None and out is not None:
                out = check(out)
        except ValueError as exc:
            if secret:  # what was given is not repeated, not even in part
                raise invalid("expected a non-empty string (value not shown)") from None
            if isinstance(exc, RuleError):
                raise  # it names its own path (a list's index)
            raise invalid(str(exc)) from None
        return out

    return structure


class _ConverterReader:
    """The sections' reader: the one converter, records' rules for sections."""

    def register(self, cls: type, camel: bool, check: Callable[[Any], None] | None) -> None:
        attrs.resolve_types(cast(Any, cls))  # the hooks below need the real types
        fields = attrs.fields(cast(Any, cls))
        names = {a.name: _camel(a.name) if camel else a.name for a in fields}
        register_section(cls, names, {a.name: _field_hook(a) for a in fields}, check)

    def read(self, cls: type[T], provider: str, data: object, base: T | None) -> T:
        if not isinstance(data, Mapping):
            raise ConfigError(config_key(provider), f"expected a mapping, got {show(data)}")
        merged: Mapping[str, Any] = {**to_wire(base), **data} if base is not None else data
        try:
            return from_wire(cls, merged)
        except RecordError as exc:
            raise ConfigError(config_key(provider, exc.field), exc.message) from None


install_reader(_ConverterReader())
