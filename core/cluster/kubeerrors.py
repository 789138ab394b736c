"""How the official client's failures become the Cluster port's errors: an HTTP error
answer (its ``Status`` body) by its code, a transport failure as a 503, and which of
them show a mistake in the configuration rather than a server that may come back.
"""

from __future__ import annotations

import json
from typing import Final

import urllib3
from kubernetes.client.exceptions import ApiException

from ..errors import one_line
from .port import AlreadyExists, ApiError, Conflict, Forbidden, Gone, Invalid, NotFound

__all__ = ["TRANSPORT_ERRORS", "answer_error", "config_mistake", "root_cause", "unreachable"]

# the transport failures urllib3 and the client raise; none carries a request body
TRANSPORT_ERRORS: Final = (urllib3.exceptions.HTTPError, OSError, ApiException)


def unreachable(what: str, exc: BaseException) -> ApiError:
    # ApiException's str may include response headers; its reason is enough
    detail = exc.reason if isinstance(exc, ApiException) else exc
    return ApiError(f"{what}: API server unreachable: {type(exc).__name__}: {detail}", code=503)


def config_mistake(exc: ApiError) -> str | None:
    """What in the configuration is wrong, when ``exc`` shows it; None: the server may
    come back (refused, reset, timed out, 5xx)."""
    if exc.code in (401, 403):
        return f"credentials refused (HTTP {exc.code})"
    if (400 <= exc.code < 500 and exc.code != 429) or exc.code == 501:
        # a Kubernetes API server answers /version to anyone; what refuses it is another
        # server (5xx and 429 may be one starting or shedding load: worth a retry)
        return f"not a Kubernetes API server (GET /version: HTTP {exc.code})"
    cause: BaseException | None = exc.__cause__
    while cause is not None:
        if isinstance(cause, urllib3.exceptions.MaxRetryError) and cause.reason is not None:
            cause = cause.reason
            continue
        if isinstance(cause, urllib3.exceptions.NameResolutionError):
            return f"cannot resolve the host {cause.conn.host!r}"
        if isinstance(cause, urllib3.exceptions.SSLError):
            return f"TLS failed: {one_line(cause)}"
        if isinstance(cause, urllib3.exceptions.LocationParseError):
            return f"not a URL: {one_line(cause)}"
        cause = cause.__cause__
    return None


def root_cause(exc: BaseException) -> str:
    """The innermost cause of a transport failure ("[Errno 111] Connection refused"), not
    urllib3's three wrappers around it."""
    cause = exc
    while True:
        inner: BaseException | None = (
            cause.reason if isinstance(cause, urllib3.exceptions.MaxRetryError) else None)
        inner = inner or cause.__cause__
        if inner is None:
            break
        cause = inner
    if isinstance(cause, OSError) and cause.strerror:
        return cause.strerror.lower()
    return one_line(cause)


def answer_error(status: int, data: bytes, what: str) -> ApiError:
    """The port's error for an HTTP error answer (a ``Status`` body, normally)."""
    message, reason = "", ""
    try:
        body = json.loads(data) if data else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        message = str(body.get("message") or "")
        reason = str(body.get("reason") or "")
    if not message:
        message = f"{what}: HTTP {status}"
    if status == 403:
        return Forbidden(message)
    if status == 404:
        return NotFound(message)
    if status == 409:
        return AlreadyExists(message) if reason == "AlreadyExists" else Conflict(message)
    if status == 410:
        return Gone(message)
    if status == 422:
        return Invalid(message)
    return ApiError(message, code=status)
