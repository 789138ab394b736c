"""Strict cattrs structure hooks: no coercion (``"3"`` is not a count, ``true`` not a
number), an error naming what was expected and what came. Shared by the provider config
sections' reader (:mod:`podnet.hookspecs.sections`) and core's record converter, which
registers them on its own converter; providers use the sections, not these."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin

import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote

from podnet.hookspecs.annotations import show

__all__ = ["Hook", "RuleError", "expected", "is_dict", "is_optional", "is_tuple", "structure_bool",
           "structure_dict", "structure_float", "structure_int", "structure_str",
           "structure_tuple"]

Hook = Callable[[Any, Any], Any]


class RuleError(ValueError):
    """What a rule or a section's check raises (through
    :func:`podnet.hookspecs.sections.invalid`): ``path`` (keys, list indexes) goes on from
    the key where it was raised."""

    def __init__(self, message: str, path: tuple[str | int, ...] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.path = path


def expected(kind: str, value: object) -> RuleError:
    return RuleError(f"expected {kind}, got {show(value)}")


def structure_str(value: Any, _: Any = None) -> str:
    if value.__class__ is str:
        return value
    if not isinstance(value, str):
        raise expected("string", value)
    return str(value)


def structure_int(value: Any, _: Any = None) -> int:
    # bool is an int subclass; JSON's and YAML's true is not a count
    if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise expected("integer", value)
    return int(value)


def structure_float(value: Any, _: Any = None) -> float:
    # an integer is a number too; true is not
    if value.__class__ is float:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise expected("number", value)
    return float(value)


def structure_bool(value: Any, _: Any = None) -> bool:
    if value is not True and value is not False:
        raise expected("boolean", value)
    return bool(value)


def is_tuple(t: Any) -> bool:
    """``tuple[X, ...]``."""
    args = get_args(t)
    return get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis


def is_dict(t: Any) -> bool:
    return get_origin(t) is dict


def is_optional(t: Any) -> bool:
    """``X | None``."""
    args = get_args(t)
    return len(args) == 2 and type(None) in args and get_origin(t) in (Union, UnionType)


def structure_tuple(converter: cattrs.Converter, t: Any) -> Hook:
    """``tuple[X, ...]`` from a list, each item by ``converter``'s hook for X; a failing
    item's index goes into the error path."""
    item_type = get_args(t)[0]
    item = converter.get_structure_hook(item_type)

    def structure(value: Any, _: Any) -> tuple[Any, ...]:
        if not isinstance(value, list | tuple):
            raise expected("list", value)
        out = []
        for index, element in enumerate(value):
            try:
                out.append(item(element, item_type))
            except Exception as exc:
                exc.add_note(IterableValidationNote(f"@ index {index}", index, item_type))
                raise IterableValidationError("While structuring a list", [exc], t) from None
        return tuple(out)

    return structure


def structure_dict(converter: cattrs.Converter, t: Any) -> Hook:
    """``dict[K, V]`` from a mapping; a failing entry's key goes into the error path."""
    key_type, value_type = get_args(t)
    key_hook = converter.get_structure_hook(key_type)
    value_hook = converter.get_structure_hook(value_type)

    def structure(value: Any, _: Any) -> dict[Any, Any]:
        if not isinstance(value, Mapping):
            raise expected("object", value)
        out = {}
        for key, element in value.items():
            try:
                out[key_hook(key, key_type)] = value_hook(element, value_type)
            except Exception as exc:
                exc.add_note(IterableValidationNote(f"@ key {key!r}", str(key), value_type))
                raise IterableValidationError("While structuring a map", [exc], t) from None
        return out

    return structure
