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

Sections are read here, by a converter of their own (a provider's module may read one
on import, before anything of core is loaded).
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast, get_args

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from podnet.hookspecs.annotations import show
from podnet.hookspecs.errors import ConfigError
from podnet.hookspecs.strict import (
    Hook,
    RuleError,
    expected,
    is_dict,
    is_optional,
    is_tuple,
    structure_bool,
    structure_dict,
    structure_float,
    structure_int,
    structure_str,
    structure_tuple,
)

__all__ = [
    "CHECK",
    "PARSE",
    "SECRET",
    "RuleError",
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
N = TypeVar("N")
Metadata = dict[str, Any]
#: a rule's check: raise ValueError (its message is shown) or return the value to keep
Check = Callable[[Any], Any]

#: a field's ``metadata`` keys: its check, its parser, whether its value is secret
CHECK = "podnet.check"
PARSE = "podnet.parse"
SECRET = "podnet.secret"


def invalid(message: str, *path: str | int) -> RuleError:
    """What a rule or a section's check raises; ``path`` (keys, list indexes) goes on from
    where it was called."""
    return RuleError(message, path)


def config_key(provider: str, key: str = "") -> str:
    """The full path of a key of a provider's section, as every config error names it."""
    return f"providers.{provider}.{key}" if key else f"providers.{provider}"


def rule(check: Check | None = None, *, parse: Check | None = None, secret: bool = False
         ) -> Metadata:
    """A field's rule: ``parse`` reads the raw value instead of its type's hook;
    ``check`` then checks (and may normalise) the typed value. Either raises
    ``ValueError``; ``secret`` keeps the value out of every message."""
    out: Metadata = {SECRET: secret}
    if check is not None:
        out[CHECK] = check
    if parse is not None:
        out[PARSE] = parse
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


# --- the reader: one strict cattrs converter for config sections ---------------------------
#
# Sections are read by rules of their own, not by core's converter of records (whose
# wire form is the API server's): a provider's module may read one on import, before any
# of core is loaded. The messages are worded as the records' are.

_converter = cattrs.Converter(detailed_validation=True, forbid_extra_keys=True)
#: per section class: attribute -> key
_KEYS: dict[type, dict[str, str]] = {}
_FIELD_HOOKS: dict[tuple[type, str], Hook] = {}
_CHECKS: dict[type, Callable[[Any], None]] = {}


class _Key(str):
    """A mapping key in an error path, printed as ``[key]`` rather than ``.key``."""


def _optional_structure(t: Any) -> Hook:
    inner_type = next(a for a in get_args(t) if a is not type(None))
    inner = _converter.get_structure_hook(inner_type)
    return lambda value, _: None if value is None else inner(value, inner_type)


def _omittable(a: attrs.Attribute[Any]) -> bool:
    # only "nothing here" defaults are left out of a section written back (a base)
    default = a.default
    factory = getattr(default, "factory", None)  # an attrs Factory
    if factory is not None:
        return bool(factory in (dict, tuple, list))
    return default is None or default == ()


def _section_structure(cls: type) -> Hook:
    keys = _KEYS[cls]
    overrides: dict[str, Any] = {
        a.name: override(rename=keys[a.name], struct_hook=_FIELD_HOOKS.get((cls, a.name)))
        for a in attrs.fields(cls)}
    generated: Callable[[Any], Any] = make_dict_structure_fn(
        cls, _converter, _cattrs_forbid_extra_keys=True, **overrides)
    check = _CHECKS.get(cls)

    def structure(value: Any, _: Any = None) -> Any:
        if not isinstance(value, Mapping):
            raise expected("object", value)
        built = generated(value)
        if check is not None:
            check(built)
        return built

    return structure


def _section_unstructure(cls: type) -> Callable[[Any], dict[str, Any]]:
    keys = _KEYS[cls]
    overrides: dict[str, Any] = {
        a.name: override(rename=keys[a.name], omit_if_default=_omittable(a))
        for a in attrs.fields(cls)}
    return make_dict_unstructure_fn(cls, _converter, **overrides)


_converter.register_structure_hook(str, structure_str)
_converter.register_structure_hook(int, structure_int)
_converter.register_structure_hook(float, structure_float)
_converter.register_structure_hook(bool, structure_bool)
_converter.register_structure_hook_factory(is_optional, _optional_structure)
_converter.register_structure_hook_factory(
    is_tuple, functools.partial(structure_tuple, _converter))
_converter.register_structure_hook_factory(
    is_dict, functools.partial(structure_dict, _converter))
_converter.register_structure_hook_factory(lambda t: t in _KEYS, _section_structure)
_converter.register_unstructure_hook_factory(lambda t: t in _KEYS, _section_unstructure)


def _note(exc: BaseException, kind: type[N]) -> N | None:
    for note in getattr(exc, "__notes__", ()):
        if note.__class__ is kind:
            return note
    return None


def locate_error(exc: BaseException, names: Mapping[type, Mapping[str, str]], *,
                 say_known: bool = False) -> tuple[str, str]:
    """Where a strict cattrs structure failed and why: the first failure's path
    (``spec.ips[0]``, a mapping key as ``[key]``) and its message. ``names``: class ->
    attribute -> the key it is read from; ``say_known``: an unknown key of such a class
    lists the known ones (an operator's typo). Core's record converter reads its errors
    the same way."""
    path, message = _locate(exc, (), names, say_known)
    return _format_path(path), message


def _locate(exc: BaseException, path: tuple[str | int, ...],
            names: Mapping[type, Mapping[str, str]], say_known: bool
            ) -> tuple[tuple[str | int, ...], str]:
    """Walk cattrs' error tree down to the first failure: its key path and a message."""
    if isinstance(exc, ClassValidationError):
        # an unknown key first: a misspelt key otherwise shows up as "required field missing"
        for sub in exc.exceptions:
            if isinstance(sub, ForbiddenExtraKeysError):
                return _locate(sub, path, names, say_known)
        for sub in exc.exceptions:
            attr_note = _note(sub, AttributeValidationNote)
            if attr_note is None:
                continue
            key = names.get(exc.cl, {}).get(attr_note.name, attr_note.name)
            if type(sub) is KeyError:
                return (*path, key), "required field missing"
            return _locate(sub, (*path, key), names, say_known)
        return _locate(exc.exceptions[0], path, names, say_known)
    if isinstance(exc, IterableValidationError):
        sub = exc.exceptions[0]
        item_note = _note(sub, IterableValidationNote)
        if item_note is None:
            return _locate(sub, path, names, say_known)
        index = item_note.index
        return _locate(sub, (*path, index if isinstance(index, int) else _Key(index)),
                       names, say_known)
    if isinstance(exc, ForbiddenExtraKeysError):
        key = sorted(exc.extra_fields)[0]
        if say_known and exc.cl in names:
            known = ", ".join(sorted(names[exc.cl].values()))
            return (*path, key), f"unknown key {key!r} (known: {known})"
        return (*path, key), f"unknown field {key!r}"
    if isinstance(exc, RuleError):
        return (*path, *exc.path), exc.message
    return path, str(exc) or type(exc).__name__


def _format_path(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int | _Key):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _field_hook(a: attrs.Attribute[Any]) -> Hook:
    check: Check | None = a.metadata.get(CHECK)
    secret = bool(a.metadata.get(SECRET))
    parse: Check | None = a.metadata.get(PARSE)
    if parse is None:
        typed = _converter.get_structure_hook(a.type)
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
        _KEYS[cls] = {a.name: _camel(a.name) if camel else a.name for a in fields}
        for a in fields:
            _FIELD_HOOKS[(cls, a.name)] = _field_hook(a)
        if check is not None:
            _CHECKS[cls] = check
        return cls

    return register


def read_section(cls: type[T], provider: str, data: object, base: T | None = None) -> T:
    """``data`` (a provider's config section) as ``cls``; keys it lacks take ``base``'s
    values when given, else the class defaults.

    :raise ConfigError: naming the key path (``providers.<provider>.<key>``).
    """
    if not isinstance(data, Mapping):
        raise ConfigError(config_key(provider), f"expected a mapping, got {show(data)}")
    merged: Mapping[str, Any] = (
        {**_converter.unstructure(base), **data} if base is not None else data)
    try:
        return _converter.structure(merged, cls)
    except Exception as exc:
        path, message = locate_error(exc, _KEYS, say_known=True)
        raise ConfigError(config_key(provider, path), message) from None
