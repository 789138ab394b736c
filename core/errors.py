"""Errors the engine understands, and the kinds providers classify their errors into.

Providers either raise :class:`ProviderError` with a kind, or raise their SDK's own
exception and answer the ``podnet_classify_error`` hook. Core's policies (backoff, batch
halving, inhibit windows, GC) act on the kind alone, never on a provider's message.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.StrEnum):
    THROTTLED = "throttled"
    QUOTA_EXCEEDED = "quota_exceeded"
    SUBNET_EXHAUSTED = "subnet_exhausted"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    TRANSIENT = "transient"
    FATAL = "fatal"
    #: Not a cloud answer: the node's pool has no idle address that fits the request.
    POOL_EMPTY = "pool_empty"
    #: The request itself is wrong (bad annotation, address outside every subnet, ...).
    INVALID = "invalid"


class PodnetError(Exception):
    """Base of every error podnet raises on purpose."""


class ProviderError(PodnetError):
    """A provider step failed, with a kind core can act on.

    ``field`` names the offending field (``metadata.annotations[podnet.io/ip-address]``)
    when the cause is the object's own input; ``subject`` names a cloud object (a vSwitch,
    a subnet, an ENI) when one is to blame.
    """

    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        field: str | None = None,
        subject: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field
        self.subject = subject
        self.code = code

    def __str__(self) -> str:
        where = f"{self.field}: " if self.field else ""
        return f"{where}{self.message}"


class PoolEmpty(ProviderError):
    """No idle address fits; the node pool will grow and the pod network waits."""

    def __init__(self, message: str = "no idle address on the node", *, subnet: str | None = None):
        super().__init__(ErrorKind.POOL_EMPTY, message, subject=subnet)
        self.subnet = subnet


class InvalidRequest(ProviderError):
    """The object's own input is wrong; retrying will not help until it changes."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(ErrorKind.INVALID, message, field=field)


class TerminalError(PodnetError):
    """Recorded on the object and not retried: only a change to the object helps."""

    def __init__(self, message: str, *, field: str | None = None, reason: str = "Invalid"):
        super().__init__(message)
        self.message = message
        self.field = field
        self.reason = reason


class NotLeader(PodnetError):
    """A write refused because this replica's Lease may have expired (the renew deadline
    passed without a renewal). Not a failure of the object: the reconcile stops there,
    is not retried by this replica, and the replica stops leading."""


class ConfigError(PodnetError):
    """Configuration is wrong; names the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config {key}: {message}")
        self.key = key


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
