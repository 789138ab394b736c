"""Errors the engine understands.

The errors of the provider contract (the kinds providers classify their errors into,
:class:`ProviderError` and its subclasses, :class:`ConfigError`) are defined in
:mod:`podnet.hookspecs.errors` and re-exported here under their old names; the errors
below (and the helpers that turn any error into one line) are core's own.
"""

from __future__ import annotations

from podnet.hookspecs.errors import (
    ConfigError,
    ErrorKind,
    InvalidRequest,
    PodnetError,
    PoolEmpty,
    ProviderError,
)

__all__ = [
    "MAX_MESSAGE",
    "ConfigError",
    "ErrorKind",
    "InvalidRequest",
    "MissingExtra",
    "NotLeader",
    "PodnetError",
    "PoolEmpty",
    "ProviderError",
    "TerminalError",
    "TransitionRefused",
    "describe",
    "one_line",
]


class TerminalError(PodnetError):
    """Recorded on the object and not retried: only a change to the object helps."""

    def __init__(self, message: str, *, field: str | None = None, reason: str = "Invalid"):
        super().__init__(message)
        self.message = message
        self.field = field
        self.reason = reason


class MissingExtra(ConfigError):
    """A provider the configuration names whose Python SDK this install lacks: the base
    install carries no cloud SDK, each comes with the provider's extra."""

    def __init__(self, key: str, provider: str, module: str, extra: str) -> None:
        super().__init__(key, f"provider {provider!r} needs the Python package {module!r}, "
                              f"which is not installed: pip install 'podnet[{extra}]'")
        if key.startswith("--"):  # named by a flag, not by the config file
            self.args = (str(self.args[0]).removeprefix("config "),)
        self.provider = provider
        self.module = module
        self.extra = extra


class NotLeader(PodnetError):
    """A write refused because this replica's Lease may have expired (the renew deadline
    passed without a renewal). Not a failure of the object: the reconcile stops there,
    is not retried by this replica, and the replica stops leading."""


class TransitionRefused(PodnetError):
    """A trigger that the machine's table does not allow from the current state."""

    def __init__(self, machine: str, trigger: str, state: str) -> None:
        super().__init__(f"{machine}: trigger {trigger!r} is not allowed from state {state!r}")
        self.machine = machine
        self.trigger = trigger
        self.state = state


#: the longest message podnet writes into a condition or an Event from an error
MAX_MESSAGE = 300
_TRACEBACK_HEAD = "Traceback (most recent call last):"


def one_line(text: object, limit: int = MAX_MESSAGE) -> str:
    """Any error text reduced to one bounded line for a condition, an Event or a log line.

    SDK errors may carry whole tracebacks (the BCE client's "All trace backs:" does) and
    request dumps: the first line says what failed and the last what the cause was, so
    both are kept (``first … last``) and everything between is dropped. Whitespace is
    collapsed, credentials are hidden, and the result is cut to ``limit`` characters.
    """
    from podnet.core.redaction import redact

    # hidden first: an Authorization value runs to the end of its line
    lines = [" ".join(line.strip().lstrip(">").split())
             for line in redact(str(text)).splitlines()]
    lines = [line for line in lines if line]
    if lines and lines[0] == _TRACEBACK_HEAD:
        lines = lines[1:]
    if not lines:
        return ""
    shown = lines[0] if len(lines) == 1 or lines[-1] == lines[0] else (
        f"{lines[0]} … {lines[-1]}")
    return shown if len(shown) <= limit else shown[: limit - 1].rstrip() + "…"


def describe(exc: BaseException, limit: int = MAX_MESSAGE) -> str:
    """One line for an exception: a ProviderError's kind, field and subject, else the
    exception's type and its text (see :func:`one_line`)."""
    if isinstance(exc, ProviderError):
        subject = f" ({exc.subject})" if exc.subject else ""
        return one_line(f"{exc.kind.value}: {exc}{subject}", limit)
    return one_line(f"{type(exc).__name__}: {exc}", limit)
