"""The errors of the provider contract, and the kinds providers classify their errors into.

Providers either raise :class:`ProviderError` with a kind, or raise their SDK's own
exception and answer the ``podnet_classify_error`` hook. Core's policies (backoff, batch
halving, inhibit windows, GC) act on the kind alone, never on a provider's message.
``podnet.core.errors`` re-exports all of them beside core's own errors.
"""

from __future__ import annotations

import enum

__all__ = [
    "ConfigError",
    "ErrorKind",
    "InvalidRequest",
    "PodnetError",
    "PoolEmpty",
    "ProviderError",
]


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


class ConfigError(PodnetError):
    """Configuration is wrong; names the offending key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"config {key}: {message}")
        self.key = key
