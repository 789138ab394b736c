"""Loopback stand-ins of the services a cloud provider gets its credentials from, and the
authority the cloud simulators ask whether a request's credentials are good.

One HTTP server on 127.0.0.1 (an ephemeral port) speaks three wire formats:

- Alibaba Cloud's ECS instance metadata service, as ``alibabacloud_credentials``'
  ``EcsRamRoleCredentialsProvider`` asks it: ``PUT /latest/api/token`` with
  ``X-aliyun-ecs-metadata-token-ttl-seconds`` (IMDSv2: the token in the body), then
  ``GET /latest/meta-data/ram/security-credentials/`` (the instance's role name) and
  ``GET /latest/meta-data/ram/security-credentials/<role>`` with
  ``X-aliyun-ecs-metadata-token``: ``{Code: "Success", AccessKeyId, AccessKeySecret,
  SecurityToken, Expiration: "YYYY-MM-DDTHH:MM:SSZ", LastUpdated}``. The SDK asks the
  fixed address 100.100.100.200; it reaches this server as its HTTP proxy (the SDK's own
  ``HttpOptions.proxy``): requests in absolute form for that host are answered here, and
  nothing is forwarded anywhere.
- Alibaba Cloud STS ``AssumeRoleWithOIDC`` (RRSA): ``Action``, ``RoleArn``,
  ``OIDCProviderArn``, ``OIDCToken``, ``RoleSessionName``, ``DurationSeconds`` (900 at
  least) in the query string, unsigned; ``{RequestId, Credentials: {AccessKeyId,
  AccessKeySecret, SecurityToken, Expiration}, AssumedRoleUser, OIDCTokenInfo}``. The
  SDK's ``sts_endpoint`` names it (``http://127.0.0.1:<port>``).
- Baidu Cloud STS ``POST /v1/sessionToken?durationSeconds=N``, signed ``bce-auth-v1``
  with a long-term key: ``{accessKeyId, secretAccessKey, sessionToken, createTime,
  expiration, userId}``.
- BCC's metadata service, the key of the IAM role bound to the instance:
  ``GET /latest/meta-data/sts-credential``, answered with BCE's credentials object as IAM's
  reference spells it (``accessKeyId``, ``accessKeySecret``, ``sessionToken``,
  ``expiration``; the answer's exact form is not published: an assumption).

Every temporary credential is issued by one :class:`CredentialAuthority`, which the ECS
and BBC simulators are handed (their ``auth``): a request with an unknown key, a key
whose token is missing or not its own, or an expired token is refused. The authority's
clock is the wall clock plus :meth:`CredentialAuthority.advance`'s offset, so that a test
can move past an expiry without waiting for it; the SDKs read the wall clock.
"""

from __future__ import annotations

import enum
import itertools
import json
import secrets
import threading
import time
import uuid
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs

#: the ECS metadata service's address, as the SDK asks it
ECS_METADATA_HOST = "100.100.100.200"
ECS_CREDENTIALS_PATH = "/latest/meta-data/ram/security-credentials/"
ECS_TOKEN_PATH = "/latest/api/token"
ECS_TOKEN_HEADER = "X-aliyun-ecs-metadata-token"
ECS_TOKEN_TTL_HEADER = "X-aliyun-ecs-metadata-token-ttl-seconds"
#: where BCC's metadata service answers the key of the IAM role bound to the instance
BCC_CREDENTIAL_PATH = "/latest/meta-data/sts-credential"


class Verdict(enum.Enum):
    """What the authority says of a request's key and token."""

    OK = "ok"
    UNKNOWN_KEY = "unknown-key"
    #: a temporary key sent without its token
    TOKEN_MISSING = "token-missing"
    #: a token that is not the key's
    TOKEN_MISMATCH = "token-mismatch"
    EXPIRED = "expired"


@attrs.frozen
class Issued:
    """One temporary credential (``repr`` shows the key id only)."""

    access_key_id: str
    secret: str = attrs.field(repr=False)
    token: str = attrs.field(repr=False)
    #: epoch seconds on the authority's clock
    expires: float
    #: who it was issued through: ``ecs-metadata``, ``sts-oidc``, ``bce-sts``
    source: str


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class CredentialAuthority:
    """Long-term keys and the temporary credentials issued for them; thread-safe.

    ``lifetime`` is how long a temporary credential lives (seconds on the authority's
    clock). The Alibaba SDK refreshes 15 minutes before ``Expiration``: a lifetime of
    a little over 900 s is refreshed seconds after it was issued.
    """

    def __init__(self, lifetime: float = 3600.0) -> None:
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self._offset = 0.0
        self._keys: dict[str, str] = {}
        self._issued: dict[str, Issued] = {}
        self._order: list[Issued] = []
        self._ids = itertools.count(1)
        #: every verdict given, in order: (key id, verdict)
        self.checked: list[tuple[str, Verdict]] = []

    def now(self) -> float:
        with self._lock:
            return time.time() + self._offset

    def advance(self, seconds: float) -> None:
        """Move the authority's clock (expiry checks, new Expirations) forward."""
        with self._lock:
            self._offset += seconds

    def add_key(self, access_key_id: str, secret: str) -> None:
        """A long-term key pair (a RAM user's, a BCE account's)."""
        with self._lock:
            self._keys[access_key_id] = secret

    def issue(self, source: str, prefix: str = "STS.") -> Issued:
        with self._lock:
            n = next(self._ids)
            cred = Issued(access_key_id=f"{prefix}sim{n:04d}{secrets.token_hex(6)}",
                          secret=secrets.token_urlsafe(24), token=secrets.token_urlsafe(48),
                          expires=time.time() + self._offset + self.lifetime, source=source)
            self._issued[cred.access_key_id] = cred
            self._order.append(cred)
            return cred

    @property
    def issued(self) -> list[Issued]:
        with self._lock:
            return list(self._order)

    def is_long_term(self, access_key_id: str) -> bool:
        with self._lock:
            return access_key_id in self._keys

    def secret_of(self, access_key_id: str) -> str | None:
        with self._lock:
            found = self._issued.get(access_key_id)
            return found.secret if found is not None else self._keys.get(access_key_id)

    def __call__(self, access_key_id: str, token: str | None) -> str:
        """The verdict's value: what a cloud simulator's ``auth`` hook answers."""
        return self.check(access_key_id, token).value

    def check(self, access_key_id: str, token: str | None) -> Verdict:
        with self._lock:
            now = time.time() + self._offset
            issued = self._issued.get(access_key_id)
            if issued is None:
                verdict = Verdict.OK if access_key_id in self._keys else Verdict.UNKNOWN_KEY
            elif not token:
                verdict = Verdict.TOKEN_MISSING
            elif not secrets.compare_digest(token, issued.token):
                verdict = Verdict.TOKEN_MISMATCH
            elif now >= issued.expires:
                verdict = Verdict.EXPIRED
            else:
                verdict = Verdict.OK
            self.checked.append((access_key_id, verdict))
            return verdict


class _Reply(Exception):
    def __init__(self, status: int, body: Any, content_type: str = "application/json") -> None:
        super().__init__(status)
        self.status = status
        self.body = body
        self.content_type = content_type


class CredentialServices:
    """The loopback metadata and token services (see the module docstring).

    ``role``: the instance's RAM role (what the metadata service lists);
    ``require_token``: IMDSv2 only (a metadata read without a valid token is refused);
    ``oidc``: RRSA's expected ``(RoleArn, OIDCProviderArn, OIDCToken)``.
    """

    def __init__(self, authority: CredentialAuthority | None = None, *,
                 role: str = "podnet-node-role", require_token: bool = False,
                 oidc: tuple[str, str, str] | None = None,
                 bcc_role: str | None = "podnet-bcc-role") -> None:
        self.authority = authority or CredentialAuthority()
        #: the IAM role bound to the BCC instance (None: none, its metadata answers 404)
        self.bcc_role = bcc_role
        self.role = role
        self.require_token = require_token
        self.oidc = oidc
        self.host = "127.0.0.1"
        self.port = 0
        #: metadata tokens handed out: token -> expiry (wall clock)
        self._tokens: dict[str, float] = {}
        self._lock = threading.Lock()
        #: what was asked: (service, what) in order, e.g. ("ecs-metadata", "token")
        self.requests: list[tuple[str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> CredentialServices:
        if self._server is not None:
            return self
        services = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                services._serve(self)

            do_GET = do_PUT = do_POST = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass  # the requests carry tokens

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,),
                                        name="cloudauth", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> CredentialServices:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``: the metadata proxy and the STS endpoint."""
        return f"http://{self.host}:{self.port}"

    @property
    def endpoint(self) -> str:
        """``127.0.0.1:<port>``: the BCE STS endpoint."""
        return f"{self.host}:{self.port}"

    # --- the wire -----------------------------------------------------------------------

    def _serve(self, req: BaseHTTPRequestHandler) -> None:
        parts = urlsplit(req.path)
        length = int(req.headers.get("Content-Length") or 0)
        body = req.rfile.read(length) if length else b""
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        headers = {k.lower(): v for k, v in req.headers.items()}
        if body and "form" in (req.headers.get("Content-Type") or ""):
            query.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        try:
            if parts.netloc and parts.hostname != ECS_METADATA_HOST:
                # a proxy request for anywhere else: this is no proxy
                raise _Reply(502, {"message": f"no route to {parts.hostname}"})
            if parts.path == BCC_CREDENTIAL_PATH:
                self._bcc_metadata(req.command)
            elif parts.path.startswith("/latest/"):
                self._metadata(req.command, parts.path, headers)
            elif parts.path == "/v1/sessionToken":
                self._bce_sts(req.command, query, headers)
            elif query.get("Action") == "AssumeRoleWithOIDC":
                self._assume_role_with_oidc(query)
            else:
                raise _Reply(404, {"Code": "InvalidAction.NotFound",
                                   "Message": f"no route {req.command} {parts.path}"})
        except _Reply as reply:
            data = (reply.body if isinstance(reply.body, bytes) else
                    reply.body.encode() if isinstance(reply.body, str) else
                    json.dumps(reply.body).encode())
            req.send_response(reply.status)
            req.send_header("Content-Type", reply.content_type)
            req.send_header("Content-Length", str(len(data)))
            req.end_headers()
            req.wfile.write(data)

    def _note(self, service: str, what: str) -> None:
        with self._lock:
            self.requests.append((service, what))

    def _metadata(self, method: str, path: str, headers: Mapping[str, str]) -> None:
        """``headers``: names in lower case."""
        if method == "PUT" and path == ECS_TOKEN_PATH:
            ttl = headers.get(ECS_TOKEN_TTL_HEADER.lower())
            if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                raise _Reply(400, "invalid ttl", "text/plain")
            token = secrets.token_urlsafe(32)
            with self._lock:
                self._tokens[token] = time.time() + int(ttl)
            self._note("ecs-metadata", "token")
            raise _Reply(200, token, "text/plain")
        if method != "GET" or not path.startswith(ECS_CREDENTIALS_PATH):
            raise _Reply(404, "Not Found", "text/plain")
        given = headers.get(ECS_TOKEN_HEADER.lower())
        with self._lock:
            valid = given is not None and self._tokens.get(given, 0) > time.time()
        if (given is not None and not valid) or (self.require_token and not valid):
            raise _Reply(401, "Unauthorized", "text/plain")
        role = path.removeprefix(ECS_CREDENTIALS_PATH)
        if not role:
            self._note("ecs-metadata", "role")
            raise _Reply(200, self.role, "text/plain")
        if role != self.role:
            raise _Reply(404, "Not Found", "text/plain")
        cred = self.authority.issue("ecs-metadata")
        self._note("ecs-metadata", "credentials")
        raise _Reply(200, {"AccessKeyId": cred.access_key_id,
                           "AccessKeySecret": cred.secret,
                           "SecurityToken": cred.token,
                           "Expiration": _iso(cred.expires),
                           "LastUpdated": _iso(self.authority.now()),
                           "Code": "Success"})

    def _bcc_metadata(self, method: str) -> None:
        self._note("bcc-metadata", "sts-credential")
        if method != "GET":
            raise _Reply(405, "Method Not Allowed", "text/plain")
        if self.bcc_role is None:
            raise _Reply(404, "Not Found", "text/plain")
        cred = self.authority.issue("bcc-metadata", prefix="")
        raise _Reply(200, {"accessKeyId": cred.access_key_id,
                           "accessKeySecret": cred.secret,
                           "sessionToken": cred.token,
                           "createTime": _iso(self.authority.now()),
                           "expiration": _iso(cred.expires),
                           "roleId": self.bcc_role})

    def _sts_error(self, status: int, code: str, message: str) -> _Reply:
        return _Reply(status, {"RequestId": str(uuid.uuid4()), "HostId": "sts.aliyuncs.com",
                               "Code": code, "Message": message})

    def _assume_role_with_oidc(self, q: Mapping[str, str]) -> None:
        self._note("sts", "AssumeRoleWithOIDC")
        for name in ("RoleArn", "OIDCProviderArn", "OIDCToken", "RoleSessionName"):
            if not q.get(name):
                raise self._sts_error(400, f"MissingParameter.{name}", f"{name} is mandatory")
        duration = q.get("DurationSeconds", "3600")
        if not duration.isdigit() or not 900 <= int(duration) <= 43200:
            raise self._sts_error(400, "InvalidParameter.DurationSeconds",
                                  "DurationSeconds must be between 900 and 43200")
        if self.oidc is not None:
            role_arn, provider_arn, token = self.oidc
            if q["RoleArn"] != role_arn:
                raise self._sts_error(404, "EntityNotExist.Role", "the role does not exist")
            if q["OIDCProviderArn"] != provider_arn:
                raise self._sts_error(404, "EntityNotExist.OIDCProvider",
                                      "the OIDC provider does not exist")
            if not secrets.compare_digest(q["OIDCToken"].strip(), token):
                raise self._sts_error(400, "AuthenticationFail.OIDCToken.Invalid",
                                      "the OIDC token is invalid")
        cred = self.authority.issue("sts-oidc")
        role = q["RoleArn"].rsplit("/", 1)[-1]
        raise _Reply(200, {
            "RequestId": str(uuid.uuid4()),
            "Credentials": {"AccessKeyId": cred.access_key_id,
                            "AccessKeySecret": cred.secret,
                            "SecurityToken": cred.token,
                            "Expiration": _iso(cred.expires)},
            "AssumedRoleUser": {"Arn": f"{q['RoleArn']}/{q['RoleSessionName']}",
                                "AssumedRoleId": f"3{cred.access_key_id[-8:]}:{role}"},
            "OIDCTokenInfo": {"Subject": "system:serviceaccount:kube-system:podnet",
                              "Issuer": "https://oidc.sim", "ClientIds": "sts.aliyuncs.com"}})

    def _bce_sts(self, method: str, q: Mapping[str, str], headers: Mapping[str, str]) -> None:
        self._note("bce-sts", "sessionToken")
        if method != "POST":
            raise _Reply(405, {"code": "MethodNotAllowed", "message": method})
        auth = headers.get("authorization") or ""
        parts = auth.split("/")
        if len(parts) < 4 or parts[0] != "bce-auth-v1":
            raise _Reply(401, {"code": "AccessDenied", "message": "no bce-auth-v1 signature",
                               "requestId": str(uuid.uuid4())})
        if not self.authority.is_long_term(parts[1]):
            raise _Reply(403, {"code": "InvalidAccessKeyId", "message": "unknown access key",
                               "requestId": str(uuid.uuid4())})
        duration = q.get("durationSeconds", "43200")
        if not duration.isdigit() or not 1 <= int(duration) <= 129600:
            raise _Reply(400, {"code": "InvalidParameter", "message": "durationSeconds",
                               "requestId": str(uuid.uuid4())})
        cred = self.authority.issue("bce-sts", prefix="")
        raise _Reply(200, {"accessKeyId": cred.access_key_id,
                           "secretAccessKey": cred.secret,
                           "sessionToken": cred.token,
                           "createTime": _iso(self.authority.now()),
                           "expiration": _iso(cred.expires),
                           "userId": "sim-user"})
