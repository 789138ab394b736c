"""Who is called for each hook: routing as data.

Every hookspec declares its routing with :func:`routed` or :func:`broadcast`, and
:data:`ROUTING` holds the declarations by hook name. Core's gateway looks a hook up here
before it calls it and refuses a call that does not match: a routed hook called on every
plugin, or a broadcast routed to one provider's plugin. The sentence saying so in each
hook's docstring is written from the same declaration.

- **routed**: the hook concerns one provider, named by the argument :attr:`HookRouting.by`
  names (``provider``, or ``context.pod_network.spec.provider``). It is called on the
  plugin that declared that provider (``podnet_register_provider``) and on the plugins
  that declare no provider (hook wrappers, policy plugins), never on another provider's
  plugin: a provider needs no check of the name it is called for. Routed since 0.3.0
  (before, every plugin was called and answered only for its own name).
- **broadcast**: every plugin is called; :attr:`HookRouting.answers` says what happens to
  the answers.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

__all__ = ["ROUTING", "HookRouting", "Routing", "broadcast", "routed"]

F = TypeVar("F", bound=Callable[..., Any])

#: the contract version in which routing replaced each provider's own name check
ROUTED_SINCE = "0.3.0"


class Routing(enum.StrEnum):
    ROUTED = "routed"
    BROADCAST = "broadcast"


@attrs.frozen
class HookRouting:
    """One hook's routing."""

    hook: str
    routing: Routing
    #: routed: the dotted path, from the hook's keyword arguments, of the provider's name
    by: str = ""
    #: broadcast: who is called and what becomes of the answers
    answers: str = ""

    def provider_of(self, kwargs: Mapping[str, object]) -> str:
        """The provider a routed call's arguments name (``by`` followed through them)."""
        head, through = self.name_path()
        value = kwargs[head]
        return str(value if through is None else through(value))

    def name_path(self) -> tuple[str, Callable[[object], object] | None]:
        """``by`` made ready for a caller on the hot path: the keyword argument, and what
        reads the name from it (None: the argument is the name)."""
        head, _, rest = self.by.partition(".")
        return head, operator.attrgetter(rest) if rest else None

    def sentence(self) -> str:
        """What the hook's docstring says of its routing."""
        if self.routing is Routing.BROADCAST:
            return f"Broadcast (since 0.1.0): {self.answers}."
        named = "``provider``'s plugin" if self.by == "provider" else (
            f"the plugin of ``{self.by}``")
        return (f"Routed (since {ROUTED_SINCE}): called on {named} and on plugins that "
                f"declare no provider, never on another provider's plugin.")


#: every hook's routing, by hook name; each hookspec adds its own entry
ROUTING: dict[str, HookRouting] = {}


def _declare(entry: HookRouting) -> Callable[[F], F]:
    def mark(spec: F) -> F:
        if spec.__name__ in ROUTING:
            raise ValueError(f"hook {spec.__name__} declares its routing twice")
        ROUTING[spec.__name__] = entry
        spec.__doc__ = _with_sentence(spec.__doc__ or "", entry.sentence())
        return spec

    return mark


def _with_sentence(doc: str, sentence: str) -> str:
    """``doc`` with the routing sentence as its own paragraph, before the version notes."""
    at = doc.find("\n    .. version")
    if at < 0:
        return f"{doc.rstrip()}\n\n    {sentence}\n    "
    return f"{doc[:at].rstrip()}\n\n    {sentence}\n{doc[at:]}"


def routed(by: str = "provider") -> Callable[[F], F]:
    """Declare a hook routed to the provider named by the argument path ``by``."""

    def mark(spec: F) -> F:
        return _declare(HookRouting(spec.__name__, Routing.ROUTED, by=by))(spec)

    return mark


def broadcast(answers: str) -> Callable[[F], F]:
    """Declare a hook broadcast to every plugin; ``answers`` says what becomes of them."""

    def mark(spec: F) -> F:
        return _declare(HookRouting(spec.__name__, Routing.BROADCAST, answers=answers))(spec)

    return mark
