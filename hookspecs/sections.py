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

This module is the provider contract's side: the rules, :func:`section` and
:func:`read_section`. The reading is core's one converter (``podnet.core.sections``
installs it with :func:`install_reader` when core is imported), so that a section's
errors read as every record's do.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from podnet.hookspecs.annotations import show

__all__ = [
    "CHECK",
    "PARSE",
    "SECRET",
    "RuleError",
    "SectionReader",
    "at_least",
    "between",
    "cidrs",
    "config_key",
    "ids",
    "install_reader",
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

#: a field's ``metadata`` keys: its check, its parser, whether its value is secret
CHECK = "podnet.check"
PARSE = "podnet.parse"
SECRET = "podnet.secret"


class RuleError(ValueError):
    """What a rule or a section's check raises (through :func:`invalid`): ``path`` (keys,
    list indexes) goes on from the key where it was raised."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


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


class SectionReader(Protocol):
    """What reads sections: core's converter, installed when core is imported (every
    process that loads providers through podnet has it)."""

    def register(self, cls: type, camel: bool, check: Callable[[Any], None] | None
                 ) -> None: ...

    def read(self, cls: type[T], provider: str, data: object, base: T | None) -> T: ...


#: the classes :func:`section` declared, in order (a nested section comes before the
#: section naming it), and the reader, once installed
_declared: list[tuple[type, bool, Callable[[Any], None] | None]] = []
_reader: list[SectionReader] = []


def install_reader(reader: SectionReader) -> None:
    """Core's: install the reader, and register with it every section declared so far."""
    _reader[:] = [reader]
    for cls, camel, check in _declared:
        reader.register(cls, camel, check)


def section(*, camel: bool = False, check: Callable[[Any], None] | None = None
            ) -> Callable[[type[T]], type[T]]:
    """Declare a frozen attrs class a config section: its attributes are its keys
    (``camel``: written camelCase, ``max_ips`` as ``maxIps``), each read with its
    type's strict hook and its ``metadata`` rule. ``check`` runs on the built section,
    raising :func:`invalid` with the key it blames."""

    def declare(cls: type[T]) -> type[T]:
        _declared.append((cls, camel, check))
        if _reader:
            _reader[0].register(cls, camel, check)
        return cls

    return declare


def read_section(cls: type[T], provider: str, data: object, base: T | None = None) -> T:
    """``data`` (a provider's config section) as ``cls``; keys it lacks take ``base``'s
    values when given, else the class defaults.

    :raise ConfigError: naming the key path (``providers.<provider>.<key>``).
    """
    if not _reader:
        raise RuntimeError(f"no config section reader to read {cls.__name__}: providers "
                           "are loaded through podnet's core, which installs it")
    return _reader[0].read(cls, provider, data, base)
