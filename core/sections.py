"""Provider config sections: frozen attrs classes read by the one converter.

A provider declares its section (``providers.<name>`` in the config file) as a frozen
attrs class, marks it with :func:`section` and reads what ``podnet_configure`` hands it
with :func:`read_section`::

    @section()
    @attrs.frozen
    class MyConfig:
        endpoint: str = attrs.field(default="api.example.com", metadata=text())
        timeout: float = attrs.field(default=10.0, metadata=between(0.1, 600))
        subnets: tuple[str, ...] = attrs.field(default=(), metadata=ids())

    config = read_section(MyConfig, provider, section)

Every key and default is the class's; an unknown key is refused, naming the known ones;
a bad value raises :class:`ConfigError` naming the whole key path, the same way for every
provider: ``providers.my.timeout: must be between 0.1 and 600, got 900``. Values of
``secret`` fields are never shown. Types are strict (``true`` is not a number, ``"3"``
not a count); the rules in a field's ``metadata`` check the rest.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

import attrs

from podnet.core.annotations import show
from podnet.core.convert import (
    RecordError,
    RuleError,
    converter,
    from_wire,
    invalid,
    register_section,
    to_wire,
)
from podnet.core.errors import ConfigError

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
Metadata = dict[str, Any]
#: a rule's check: raise ValueError (its message is shown) or return the value to keep
Check = Callable[[Any], Any]

_CHECK = "podnet.check"
_PARSE = "podnet.parse"
_SECRET = "podnet.secret"


def config_key(provider: str, key: str = "") -> str:
    """The full path of a key of a provider's section, as every config error names it."""
    return f"providers.{provider}.{key}" if key else f"providers.{provider}"


def rule(check: Check | None = None, *, parse: Check | None = None, secret: bool = False
         ) -> Metadata:
    """A field's rule: ``parse`` reads the raw value instead of its type's hook;
    ``check`` then checks (and may normalise) the typed value. Either raises
    ``ValueError``; ``secret`` keeps the value out of every message."""
    out: Metadata = {_SECRET: secret}
    if check is not None:
        out[_CHECK] = check
    if parse is not None:
        out[_PARSE] = parse
    return out


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def between(low: float, high: float) -> Metadata:
    def check(value: float) -> float:
        if not low <= value <= high:
            raise ValueError(f"must be between {_number(low)} and {_number(high)}, got "
                             f"{_number(value)}")
        return value

    return rule(check)


def at_least(low: float) -> Metadata:
    def check(value: float) -> float:
        if value < low:
            raise ValueError(f"must be at least {_number(low)}, got {_number(value)}")
        return value

    return rule(check)


def one_of(*options: str) -> Metadata:
    def check(value: str) -> str:
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {show(value)}")
        return value

    return rule(check)


def text(*, strip: bool = False, secret: bool = False) -> Metadata:
    """A non-empty string (``strip``: surrounding blanks dropped first)."""

    def check(value: str) -> str:
        kept = value.strip() if strip else value
        if not kept.strip():
            raise ValueError("expected a non-empty string")
        return kept

    return rule(check, secret=secret)


def _strings(value: object, what: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(
            isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a list of {what}, got {show(value)}")
    return tuple(value)


def ids(*, comma: bool = False, what: str = "ids") -> Metadata:
    """A list of non-empty ids (``comma``: ``"a,b"`` is a list too)."""

    def parse(value: object) -> tuple[str, ...]:
        if comma and isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        return _strings(value, what)

    return rule(parse=parse)


def cidrs(*, strict: bool = True, disjoint: bool = False) -> Metadata:
    """A non-empty list of CIDRs (``strict``: no host bits set; ``disjoint``: no two
    overlap); an entry's error names its index."""

    def parse(value: object) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
            raise ValueError(f"must be a non-empty list of CIDRs, got {show(value)}")
        seen: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for i, item in enumerate(value):
            if not isinstance(item, str):
                raise invalid(f"must be a CIDR string, got {show(item)}", i)
            try:
                network = ipaddress.ip_network(item, strict=strict)
            except ValueError as exc:
                raise invalid(str(exc), i) from None
            for other in seen if disjoint else ():
                if network.version == other.version and network.overlaps(other):
                    raise invalid(f"{network} overlaps {other}", i)
            seen.append(network)
        return tuple(value)

    return rule(parse=parse)


# --- declaring and reading ----------------------------------------------------------------


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _field_hook(a: attrs.Attribute[Any]) -> Callable[[Any, Any], Any]:
    check: Check | None = a.metadata.get(_CHECK)
    secret = bool(a.metadata.get(_SECRET))
    parse: Check | None = a.metadata.get(_PARSE)
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


def section(*, camel: bool = False, check: Callable[[Any], None] | None = None
            ) -> Callable[[type[T]], type[T]]:
    """Register a frozen attrs class as a config section: its attributes are its keys
    (``camel``: written camelCase, ``max_ips`` as ``maxIps``), each read with its
    type's strict hook and its ``metadata`` rule. ``check`` runs on the built section,
    raising :func:`invalid` with the key it blames."""

    def register(cls: type[T]) -> type[T]:
        attrs.resolve_types(cast(Any, cls))  # the hooks below need the real types
        fields = attrs.fields(cast(Any, cls))
        names = {a.name: _camel(a.name) if camel else a.name for a in fields}
        register_section(cls, names, {a.name: _field_hook(a) for a in fields}, check)
        return cls

    return register


def read_section(cls: type[T], provider: str, data: object, base: T | None = None) -> T:
    """``data`` (a provider's config section) as ``cls``; keys it lacks take ``base``'s
    values when given, else the class defaults.

    :raise ConfigError: naming the key path (``providers.<provider>.<key>``).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(config_key(provider), f"expected a mapping, got {show(data)}")
    merged: Mapping[str, Any] = {**to_wire(base), **data} if base is not None else data
    try:
        return from_wire(cls, merged)
    except RecordError as exc:
        raise ConfigError(config_key(provider, exc.field), exc.message) from None

