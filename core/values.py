"""``evolve`` for the hot paths: ``attrs.evolve`` with each class's fields looked up once.

``attrs.evolve`` walks the class's fields in Python on every call (a ``getattr`` each, 17
for a PodNetwork's status); a warm pod network makes nine of them. Here one
``operator.attrgetter`` per class reads every field at once, and the class's own
``__init__`` builds the copy, validators and all, as ``attrs.evolve`` does.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")

#: per class: its ``__init__`` argument names with their positions, a getter of the
#: matching fields' values in that order, and whether ``__init__`` takes them by position
_FIELDS: dict[type, tuple[dict[str, int], Callable[[Any], Any], bool]] = {}


def _fields_of(cls: type) -> tuple[dict[str, int], Callable[[Any], Any], bool]:
    fields = [a for a in attrs.fields(cls) if a.init]
    names = {a.alias: i for i, a in enumerate(fields)}
    getter: Callable[[Any], Any]
    if not fields:
        getter = lambda _inst: ()  # noqa: E731
    elif len(fields) == 1:  # attrgetter of one name answers the value, not a tuple
        one = operator.attrgetter(fields[0].name)
        getter = lambda inst: (one(inst),)  # noqa: E731
    else:
        getter = operator.attrgetter(*(a.name for a in fields))
    found = _FIELDS[cls] = (names, getter, not any(a.kw_only for a in fields))
    return found


def evolve(inst: T, **changes: Any) -> T:
    """A copy of the attrs instance ``inst`` with ``changes``, as ``attrs.evolve``."""
    cls = inst.__class__
    names, getter, positional = _FIELDS.get(cls) or _fields_of(cls)
    if positional:
        values = list(getter(inst))
        for name, value in changes.items():
            try:
                values[names[name]] = value
            except KeyError:
                raise TypeError(f"{cls.__name__}.__init__() got an unexpected keyword "
                                f"argument {name!r}") from None
        return cls(*values)
    given = dict(zip(names, getter(inst)))  # noqa: B905 (one getter per names)
    given.update(changes)
    return cls(**given)
