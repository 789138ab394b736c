"""Who signs the BBC provider's requests: its key sources and the SDK clients that sign
with them.

Credentials: ``credentials: access_key`` signs every request with the key given (a
temporary one with its ``sessionToken``, which an operator renews by restarting with a new
one). ``credentials: sts`` uses that long-term key only to ask BCE STS for a session token
(``POST /v1/sessionToken?durationSeconds=N``, the SDK's ``StsClient``) and signs the BBC
and VPC requests with the temporary key, its token in ``x-bce-security-token``; a new one
is asked for before the last expires (a quarter of its life, at most 15 minutes, before).
``credentials: instance_role`` signs with the key of the IAM role bound to the instance,
from BCC's metadata service (``GET /latest/meta-data/sts-credential``), renewed the same
way; the SDK has no client of it (:class:`InstanceRoleKeys` is the provider's).
bce-python-sdk 0.9.79 sends ``x-bce-security-token`` from its BOS client only, so the
provider's clients add it themselves (:class:`SessionSigned`). Keys are never logged,
traced or put in a message.
"""

from __future__ import annotations

import datetime
import inspect
import json
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceError, BceHttpClientError, BceServerError
from baidubce.http import http_headers
from baidubce.retry.retry_policy import NoRetryPolicy
from baidubce.services.bbc.bbc_client import BbcClient
from baidubce.services.sts.sts_client import StsClient
from baidubce.services.subnet.subnet_client import SubnetClient

from podnet.hookspecs.errors import ErrorKind, ProviderError


def error_code(error: BaseException) -> tuple[str | None, int | None]:
    """The BBC code and HTTP status of an SDK error (``None`` when it has none)."""
    inner: BaseException | None = error
    if isinstance(error, BceHttpClientError):
        inner = error.last_error
    if isinstance(inner, BceServerError):
        code = inner.code
        if isinstance(code, bytes):
            code = code.decode(errors="replace")
        return (str(code) if code is not None else None), inner.status_code
    return None, None


def reply_json(response: Any) -> Any:
    """An SDK reply's JSON body ({} when it has none)."""
    raw = getattr(response, "raw_data", None)
    if raw is None:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise ProviderError(ErrorKind.TRANSIENT, "reply is not JSON",
                            code="MalformedReply") from None


def endpoint_url(host: str, protocol: str) -> str:
    return host if "://" in host else f"{protocol}://{host}"


class StaticKeys:
    """One key, maybe a temporary one with its session token: signs every request."""

    def __init__(self, access_key_id: str, secret_access_key: str,
                 session_token: str | None = None) -> None:
        self._current = (BceCredentials(access_key_id, secret_access_key), session_token)

    def current(self) -> tuple[BceCredentials, str | None]:
        return self._current

    def __repr__(self) -> str:  # never the key
        return "StaticKeys()"


class RenewedKeys:
    """A temporary key, renewed a quarter of its life (at most 15 minutes) before it
    expires: :meth:`_fetch` gets the next one. Thread-safe; the first request asks."""

    #: the most a key is renewed ahead of its expiry (seconds)
    MARGIN = 900.0
    #: where the keys come from, as a message names it
    source = ""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: tuple[BceCredentials, str | None] | None = None
        #: when the current key is renewed (epoch seconds)
        self._renew_at = 0.0
        #: keys had so far
        self.issued = 0

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}()"

    def current(self) -> tuple[BceCredentials, str | None]:
        with self._lock:
            if self._current is None or time.time() >= self._renew_at:
                self._renew()
            assert self._current is not None
            return self._current

    def _fetch(self) -> Any:
        raise NotImplementedError

    def _renew(self) -> None:
        data = self._fetch()
        # BCE's credentials object: IAM's reference spells the secret accessKeySecret,
        # STS's GetSessionToken answer secretAccessKey
        secret = data.get("secretAccessKey") or data.get("accessKeySecret") if isinstance(
            data, dict) else None
        fields = ("accessKeyId", "sessionToken", "expiration")
        if not isinstance(data, dict) or not isinstance(secret, str) or not secret or not all(
                isinstance(data.get(f), str) and data.get(f) for f in fields):
            raise ProviderError(ErrorKind.TRANSIENT, f"malformed reply from {self.source} "
                                "(wants accessKeyId, secretAccessKey, sessionToken, "
                                "expiration)", code="MalformedReply")
        try:
            expires = datetime.datetime.fromisoformat(data["expiration"]).timestamp()
        except ValueError:
            raise ProviderError(ErrorKind.TRANSIENT, f"malformed reply from {self.source}: "
                                f"expiration {data['expiration']!r}",
                                code="MalformedReply") from None
        now = time.time()
        self._current = (BceCredentials(data["accessKeyId"], secret), data["sessionToken"])
        self._renew_at = expires - min(self.MARGIN, max(0.0, expires - now) / 4)
        self.issued += 1


class StsKeys(RenewedKeys):
    """Session tokens BCE STS issues for a long-term key (``GetSessionToken`` through the
    SDK's ``StsClient``)."""

    source = "BCE STS"

    def __init__(self, access_key_id: str, secret_access_key: str, *, endpoint: str,
                 duration: int, protocol: str = "http", timeout_ms: int = 10_000) -> None:
        super().__init__()
        self.duration = duration
        self._sts = StsClient(BceClientConfiguration(
            credentials=BceCredentials(access_key_id, secret_access_key),
            endpoint=endpoint_url(endpoint, protocol), retry_policy=NoRetryPolicy(),
            connection_timeout_in_mills=timeout_ms))

    def _fetch(self) -> Any:
        try:
            reply = self._sts.get_session_token(acl=None, duration_seconds=self.duration)
        except BceError as exc:
            code, status = error_code(exc)
            kind = ErrorKind.THROTTLED if status == 429 else ErrorKind.TRANSIENT
            raise ProviderError(kind, f"no session token from BCE STS: "
                                f"{code or type(exc).__name__}", code=code) from None
        return reply_json(reply)


#: BCC's instance metadata service, and where it answers the bound IAM role's key
METADATA_ENDPOINT = "169.254.169.254"
ROLE_CREDENTIAL_PATH = "/latest/meta-data/sts-credential"


class InstanceRoleKeys(RenewedKeys):
    """The temporary key of the IAM role bound to the instance, from BCC's metadata
    service (``GET http://169.254.169.254/latest/meta-data/sts-credential``, which BCE
    renews every 5 minutes). bce-python-sdk has no client of it: this one asks it
    directly, never through a proxy."""

    source = "the instance metadata service"

    def __init__(self, endpoint: str = METADATA_ENDPOINT, timeout_ms: int = 10_000) -> None:
        super().__init__()
        self.url = endpoint_url(endpoint, "http").rstrip("/") + ROLE_CREDENTIAL_PATH
        self.timeout = timeout_ms / 1000
        self._open = urllib.request.build_opener(urllib.request.ProxyHandler({})).open

    def _fetch(self) -> Any:
        try:
            with self._open(self.url, timeout=self.timeout) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            reason = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            reason = type(exc).__name__
        raise ProviderError(ErrorKind.TRANSIENT, f"no key from {self.source}: {reason} "
                            f"({self.url})")


class SessionSigned:
    """Each request of the client signed with its key source's current key, the session
    token (if any) in ``x-bce-security-token``, as the SDK's BOS client sends
    ``BceClientConfiguration.security_token``."""

    keys: StaticKeys | RenewedKeys
    #: what the client sends when a request names no headers
    default_headers: dict[bytes, bytes] | None = None

    def _send_request(self, *args: Any, **kwargs: Any) -> Any:
        parent = super()._send_request  # type: ignore[misc]
        bound = inspect.signature(parent).bind(*args, **kwargs)
        credentials, token = self.keys.current()
        bound.arguments["config"] = BceClientConfiguration(
            credentials=credentials, retry_policy=NoRetryPolicy())
        if token:
            headers = bound.arguments.get("headers")
            headers = dict(headers if headers is not None else self.default_headers or {})
            headers[http_headers.STS_SECURITY_TOKEN] = token.encode()
            bound.arguments["headers"] = headers
        return parent(*bound.args, **bound.kwargs)


class SignedBbcClient(SessionSigned, BbcClient):
    pass


class SignedSubnetClient(SessionSigned, SubnetClient):
    default_headers = {b"Accept": b"*/*", b"Content-Type": b"application/json;charset=utf-8"}
