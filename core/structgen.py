"""One generated function per record class that reads its common wire form in one pass.

cattrs' generated structure functions call a hook per field, and each hook is a Python
call even where the value is taken as it is (a plain string). At 150,000 records a
restart pays that a few million times (goal P5). The function made here reads every
field of one class in its own body: the common form of a value (a plain string, a known
enum value, a timestamp already seen) is tested and taken inline, through the form its
hook declares (:class:`Inline`); anything else is handed to the hook itself. It raises
on anything it does not take, without saying why: its caller parses the value again
with the detailed function, whose errors name the field. The wire rules stay with the
hooks (``podnet.core.convert``), which say how their common case reads.
"""

from __future__ import annotations

import itertools
import linecache
import re
from collections.abc import Callable, Mapping
from typing import Any

import attrs

__all__ = ["Inline", "make_fast_structure"]

Hook = Callable[[Any, Any], Any]


@attrs.frozen
class Inline:
    """How a hook's common case reads without calling it, as code on the value ``x``:
    where ``test`` holds (always, when None), the field is ``value``; elsewhere the hook
    is called. ``names``: what the code refers to. ``none``: the wire's ``null`` reads as
    None at once (a hook for an optional value)."""

    value: str
    test: str | None = None
    names: Mapping[str, Any] = attrs.field(factory=dict)
    none: bool = False


class _Unread(Exception):
    """The value is not in its common form: the detailed function reads it."""


_MISSING = object()
_serial = itertools.count()


def _renamed(code: str, names: Mapping[str, Any], suffix: str) -> str:
    for name in names:
        code = re.sub(rf"\b{name}\b", f"{name}_{suffix}", code)
    return code


def make_fast_structure(
    cls: type, wire_names: Mapping[str, str], hooks: Mapping[str, Hook],
    inline: Mapping[Hook, Inline], *, forbid_extra_keys: bool,
    check: Callable[[Any], None] | None = None,
) -> Callable[[Any], Any] | None:
    """The one-pass function for attrs class ``cls``: ``wire_names`` (attribute -> key),
    ``hooks`` (attribute -> the hook cattrs would call), ``inline`` (hook -> its common
    form), unknown keys refused or not, ``check`` across the fields once built. None for
    a class whose ``__init__`` does not take every field by position in order."""
    fields = attrs.fields(cls)
    if any(not a.init or a.kw_only or a.alias != a.name for a in fields):
        return None
    names: dict[str, Any] = {"cls": cls, "Unread": _Unread, "MISSING": _MISSING,
                             "allowed": frozenset(wire_names[a.name] for a in fields),
                             "check": check}
    lines = [f"def fast_{cls.__name__}(o):",
             "    if o.__class__ is not dict:",
             "        raise Unread"]
    if forbid_extra_keys:
        lines += ["    if not o.keys() <= allowed:",
                  "        raise Unread"]
    args = []
    for index, a in enumerate(fields):
        key, out = wire_names[a.name], f"a{index}"
        hook = hooks[a.name]
        names[f"h{index}"], names[f"t{index}"] = hook, a.type
        form = inline.get(hook)
        # (test, statement) branches; the first with no test is where the rest ends
        branches: list[tuple[str | None, str]] = []
        if a.default is attrs.NOTHING:
            lines.append(f"    x = o[{key!r}]")
        else:
            lines.append(f"    x = o.get({key!r}, MISSING)")
            factory = getattr(a.default, "factory", None)
            if factory is not None:
                names[f"f{index}"] = factory
                branches.append(("x is MISSING", f"{out} = f{index}()"))
            else:
                names[f"d{index}"] = a.default
                branches.append(("x is MISSING", f"{out} = d{index}"))
        call = f"{out} = h{index}(x, t{index})"
        if form is None:
            branches.append((None, call))
        else:
            suffix = str(index)
            names.update({f"{n}_{suffix}": v for n, v in form.names.items()})
            value = _renamed(form.value, form.names, suffix)
            if form.none:
                branches.append(("x is None", f"{out} = None"))
            if form.test is None:
                branches.append((None, f"{out} = {value}"))
            else:
                branches.append((_renamed(form.test, form.names, suffix), f"{out} = {value}"))
                branches.append((None, call))
        for number, (test, statement) in enumerate(branches):
            if test is None:
                lines += ["    else:", f"        {statement}"] if number else [f"    {statement}"]
                break
            lines += [f"    {'elif' if number else 'if'} {test}:", f"        {statement}"]
        args.append(out)
    lines.append(f"    r = cls({', '.join(args)})")
    if check is not None:
        lines.append("    check(r)")
    lines.append("    return r")
    source = "\n".join(lines) + "\n"
    filename = f"<podnet fast structure {cls.__module__}.{cls.__qualname__}-{next(_serial)}>"
    exec(compile(source, filename, "exec"), names)  # the code made above
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    fast: Callable[[Any], Any] = names[f"fast_{cls.__name__}"]
    return fast
