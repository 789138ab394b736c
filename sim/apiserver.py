# Over 800 lines on purpose: its bulk is one HTTP handler class, one method per verb of
# the API (list, watch, create, update, patch, apply, delete, evict), all reading and
# answering the same request (its target, query, body, negotiated form). Split across
# modules, they would be mixins each needing the others' state. What is not the handler
# lives beside it: resources, kinds, tables, fieldmanager, openapi, schema, protobuf,
# and the store itself, memory.
"""A Kubernetes API server emulator: an :class:`InMemoryCluster` served over HTTP.

Enough of the real API for kubectl and the official Python client: discovery, JSON
objects and lists, chunked watch streams (bookmarks, 410 as an ERROR event), server-side
tables for ``kubectl get`` (the built-ins' upstream columns: ``tables``), the three patch
formats and server-side apply with ``metadata.managedFields`` on every write
(``fieldmanager``), the status subresource, kubectl's protobuf request bodies (``protobuf``), pod
evictions, services with ClusterIPs, events.k8s.io/v1 and each namespace's ``default``
ServiceAccount (``kinds``), the CRDs' schemas and their ``x-kubernetes-validations`` CEL
rules (``cel``) enforced on writes (422 naming the field), built-in objects decoded and
validated as upstream does (``builtin_schema``: the v1.32 OpenAPI types;
``builtin_validation``: validation.go's rules, pod update immutability included, and
NetworkPolicy's with its defaults), and
``/openapi/v2`` and ``/openapi/v3`` built from the same schemas (``openapi``). Standard
library only (plus PyYAML for the CRD files, cel-python for their rules); binds 127.0.0.1
unless told otherwise. The CRDs are podnet's and, for attachment tests, Multus's
NetworkAttachmentDefinition, for live-migration tests KubeVirt's VirtualMachineInstance
and VirtualMachineInstanceMigration (``crds/external``).

    with ApiServer() as server:
        server.write_kubeconfig("kubeconfig")
        ...  # kubectl --kubeconfig kubeconfig get pn

As upstream: unknown fields in podnet objects are pruned and named in a ``Warning`` header
(``fieldValidation`` Warn, the default), pruned silently with ``Ignore``, refused (400, a
strict decoding error) with ``Strict``; a pod created over HTTP gets the API's spec
defaults and ``status.phase: Pending`` (a PUT or a patch, the spec defaults); ``dryRun=All``,
``limit``/``continue`` paging (every page as of the first page's resourceVersion),
``resourceVersionMatch=Exact`` lists, delete propagation policies and the namespace
lifecycle (a fresh emulator has the four namespaces of a new cluster; one given a cluster
checks what that cluster says: ``InMemoryCluster.require_namespaces``) behave as on a real
server.

Where it departs from a real server, on purpose:

* built-in objects are validated for the rules ``builtin_validation`` lists, not all of
  validation.go; protobuf bodies are read (``podnet.sim.protobuf``) but answers are JSON
  only (an Accept without JSON gets 406);
* :class:`InMemoryCluster` called in-process keeps the pod status it is given (so a
  harness can create running pods in one call), sets no pod defaults, records no
  managedFields and is not validated (only what comes over HTTP is: a create, a PUT, the
  result of a patch);
* managedFields: an updater of a struct upstream decodes as a pointer (``rollingUpdate``)
  is not shown owning the struct itself (``.``), the Go zero value being unknown here;
  no cap on the number of Update entries, no ``before-first-apply`` manager;
* no authentication, no other admission; the CRDs' rules are not cost-estimated when they
  are loaded, nor metered when they run (``cel``);
* no PodDisruptionBudgets (every eviction is allowed), no Endpoints or EndpointSlices for
  services, single-stack ClusterIPs, no ``serviceaccounts/token``; the ``default``
  ServiceAccount is made for the namespaces there at start and those created over HTTP.

No kubelet runs: a pod deleted without ``gracePeriodSeconds: 0`` stays Terminating, as on a
real server whose kubelet is away, unless the kubelet stand-in is asked for:
``--kubelet-finish-after SECONDS`` confirms each terminating pod (deletes it with grace 0)
that long after it was marked (0: at once), and ``POST /_podnet/kubelet`` (a JSON body with
optional ``namespace`` and ``name``) confirms the terminating pods now.

Fault injection for chaos tests (emulator only): ``POST /_podnet/faults`` with a JSON
object, any of::

    {"conflictRate": 0.1,      # share of updates/patches answered 409
     "errorRate": 0.05,        # share of all calls answered 500
     "dropWatches": true,      # close every open watch now (an API server restart)
     "compact": true,          # forget watch history: older resourceVersions get 410
     "bookmark": true,         # send a BOOKMARK now to watches that allow them
     "failNext": {"op": "update", "resource": "podnetworks", "code": 409, "times": 2},
     "clear": true}            # rates back to 0, planned failures dropped (applied first)

answers the current rates (``GET`` too). ``POST /_podnet/bookmark`` is a shortcut.

An audit log (``--audit-log PATH``, like kube-apiserver's ``--audit-log-path`` at the
``ResponseComplete`` stage, metadata only): one JSON line per write request, after its
answer, with ``verb``, ``requestURI``, ``userAgent`` and ``code``: who wrote what, and in
what order.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import json
import re
import select
import signal
import socket
import socketserver
import sys
import threading
import time
import types
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Literal, cast

import yaml

from podnet.core.clock import format_time, parse_time
from podnet.core.cluster.patch import clone_obj, json_patch, merge_patch
from podnet.core.cluster.port import (
    NAMESPACE,
    POD,
    ApiError,
    Conflict,
    Gone,
    Invalid,
    Kind,
    NotFound,
    Obj,
    TooLargeResourceVersion,
    WatchEvent,
)
from podnet.core.cluster.selectors import parse_field_selector, parse_label_selector
from podnet.sim.memory import InMemoryCluster, MemoryWatch

from . import builtin_validation, cel, fieldmanager, protobuf, tables
from .builtin_schema import DecodeError, schemas
from .encoded import EncodedObjects, encode
from .kinds import (
    DEFAULT_SERVICE_CIDR,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    ServiceAllocator,
    default_service_account,
    eviction_delete_options,
    pod_defaults,
    secret_on_write,
)
from .openapi import PROTOBUF_V2, PROTOBUF_V2_ANSWER, OpenApi
from .resources import BUILTINS, Resource, column, crd_resource, human_duration
from .schema import FieldError, load_crds, validate

__all__ = ["ApiServer", "Resource", "add_arguments", "main", "run"]

#: The version /version reports; the kubectl on PATH may pick its own version by it.
SERVER_VERSION: Final = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2024-12-11T00:00:00Z",
    "goVersion": "go1.23.3",
    "compiler": "gc",
    "platform": "linux/amd64",
}

#: The namespaces a new cluster has (kube-apiserver makes the first three, kubeadm and the
#: node lease controller the last).
INITIAL_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")

DEFAULT_WATCH_TIMEOUT: Final = 1800.0  # upstream's minimum request timeout
_POLL: Final = 0.25  # how often a quiet watch checks for a gone client or a stop
_TABLE_GROUP: Final = "meta.k8s.io"
_NAME_DESCRIPTION: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically."
)
_AGE_DESCRIPTION: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created."
)
_FIELD_MESSAGE: Final = re.compile(r"([A-Za-z][\w.\[\]/-]*): (.+)", re.S)
_REASONS: Final = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    500: "InternalError",
}
_PATCH_TYPES: Final[dict[str, Literal["merge", "json", "strategic"]]] = {
    "application/merge-patch+json": "merge",
    "application/json-patch+json": "json",
    "application/strategic-merge-patch+json": "strategic",
}
APPLY_PATCH: Final = "application/apply-patch+yaml"
_CR_PATCH_TYPES: Final = (
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
)



class HttpError(Exception):
    """An answer other than success, carried as a Kubernetes ``Status``."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: Obj | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or _REASONS.get(code, "Unknown")
        self.details = details

    def status(self) -> Obj:
        return _status(self.code, self.reason, self.message, self.details)


class _ClientGone(Exception):
    """The client closed the connection in the middle of an answer."""


def _status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj



# --- the server -------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], api: ApiServer) -> None:
        self.api = api
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS round trip for nothing
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class ApiServer:
    """The emulator: serve ``cluster`` (a fresh one, with a ``default`` namespace, when
    None) on ``host:port`` (0: any free port). ``start`` runs it on a thread."""

    def __init__(
        self,
        cluster: InMemoryCluster | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        bookmark_interval: float = 1.0,
        crd_dir: Path | None = None,
        audit_log: Path | None = None,
        write_latency: float = 0.0,
        read_latency: float = 0.0,
        sleep: Callable[[float], None] = time.sleep,
        kubelet_finish_after: float | None = None,
        service_cidr: str = DEFAULT_SERVICE_CIDR,
    ) -> None:
        if write_latency < 0 or read_latency < 0:
            raise ValueError("a request latency cannot be negative")
        #: seconds each write request (POST, PUT, PATCH, DELETE) and each read (GET, a
        #: watch's start included) waits before it is served: a loaded API server
        self.write_latency = write_latency
        self.read_latency = read_latency
        self._sleep = sleep
        if cluster is None:
            # as a fresh cluster: its four namespaces, creates into others answer 404
            cluster = InMemoryCluster(require_namespaces=True)
            for ns in INITIAL_NAMESPACES:
                cluster.create(NAMESPACE, {"metadata": {"name": ns}, "status": {"phase": "Active"}})
        self.cluster = cluster
        #: the JSON of the stored objects lists have served (see ``encoded``)
        self.encoded = EncodedObjects()
        if kubelet_finish_after is not None:
            cluster.kubelet_finish_after = kubelet_finish_after
        self.host = host
        self.bookmark_interval = bookmark_interval
        self.crds = load_crds(crd_dir)
        self.resources: dict[str, dict[str, Resource]] = {}  # "group/version" -> plural -> it
        for res in (*BUILTINS, *(crd_resource(c) for c in self.crds)):
            self.resources.setdefault(res.kind.api_version, {})[res.kind.plural] = res
        self.openapi = OpenApi(self.resources, self.crds)
        self._httpd = _HTTPServer((host, port), self)
        self.services = ServiceAllocator(service_cidr)
        self._controllers_start()
        self._thread: threading.Thread | None = None
        self._kubelet: threading.Thread | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._watches: set[MemoryWatch] = set()
        self._connections: set[socket.socket] = set()
        self._audit_lock = threading.Lock()
        self._audit = open(audit_log, "a", encoding="utf-8") if audit_log else None  # noqa: SIM115

    def _controllers_start(self) -> None:
        """What kube-apiserver and the controllers have made by the time a client looks:
        the ``kubernetes`` service, each namespace's ``default`` ServiceAccount."""
        cluster = self.cluster
        with self.locked():
            namespaces = [n["metadata"]["name"] for n in cluster.list(NAMESPACE).items]
            if "default" in namespaces and self.peek(SERVICE, "kubernetes", "default") is None:
                cluster.create(SERVICE, self.services.kubernetes_service(self.port))
            for ns in namespaces:
                default_service_account(cluster, ns)

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> ApiServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.05},
                name=f"podnet-apiserver:{self.port}",
                daemon=True,
            )
            self._thread.start()
        after = self.cluster.kubelet_finish_after
        if self._kubelet is None and after is not None and after > 0:
            # the stand-in confirms on any call too; this is for a quiet server
            self._kubelet = threading.Thread(
                target=self._kubelet_loop, args=(min(0.1, after / 2),),
                name=f"podnet-apiserver-kubelet:{self.port}", daemon=True)
            self._kubelet.start()
        return self

    def _kubelet_loop(self, every: float) -> None:
        while not self._stopping.wait(every):
            self.cluster.kubelet_tick()

    def stop(self) -> None:
        """Stop serving: end the watches, close the connections, release the port."""
        self._stopping.set()
        with self._lock:
            watches, conns = list(self._watches), list(self._connections)
        for w in watches:
            w.stop()  # wakes the streams; they end their answers cleanly
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5)
            self._thread = None
        if self._kubelet is not None:
            self._kubelet.join(5)
            self._kubelet = None
        # let the woken streams write their last chunk before their connections are cut
        # (also those whose watch began after the list above: their pumps see stopping)
        drained = time.monotonic() + 1.0
        while time.monotonic() < drained:
            with self._lock:
                if not self._watches:
                    break
            time.sleep(0.01)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        with self._audit_lock:
            if self._audit is not None:
                self._audit.close()
                self._audit = None

    def audit(self, entry: Obj) -> None:
        """Append one audit line (a no-op without an audit log)."""
        with self._audit_lock:
            if self._audit is not None:
                self._audit.write(json.dumps(entry, separators=(",", ":")) + "\n")
                self._audit.flush()

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.stop()

    def kubeconfig(self, context: str = "podnet-sim", namespace: str = "default") -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url}}],
            "users": [{"name": context, "user": {}}],
            "contexts": [
                {
                    "name": context,
                    "context": {"cluster": context, "user": context, "namespace": namespace},
                }
            ],
            "current-context": context,
            "preferences": {},
        }

    def write_kubeconfig(
        self, path: str | Path, context: str = "podnet-sim", namespace: str = "default"
    ) -> Path:
        """A kubeconfig for this server (no auth), its context current; returns the path."""
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(yaml.safe_dump(self.kubeconfig(context, namespace), sort_keys=False))
        return out

    # --- bookkeeping for the handlers --------------------------------------------------

    def by_plural(self, plural: str) -> Resource | None:
        for served in self.resources.values():
            if plural in served:
                return served[plural]
        return None

    def peek(self, kind: Kind, name: str, namespace: str | None) -> Obj | None:
        """The stored object, read as the server's own bookkeeping: counted in no stats,
        drawing no injected fault. Callers that act on it hold :meth:`locked`."""
        with self.locked():
            store = self.cluster._store.get(kind, {})
            obj = store.get((namespace or "") if kind.namespaced else "", {}).get(name)
            return clone_obj(obj) if obj is not None else None

    def delay(self, method: str) -> None:
        """Wait as long as a request of ``method`` takes on a loaded server (each
        request on its own thread: concurrent requests wait side by side)."""
        latency = self.read_latency if method == "GET" else self.write_latency
        if latency > 0:
            self._sleep(latency)

    def locked(self) -> contextlib.AbstractContextManager[Any]:
        # the cluster's own (reentrant) lock: a check and the write it guards are atomic
        return cast(contextlib.AbstractContextManager[Any], self.cluster._lock)

    def track(self, item: MemoryWatch | socket.socket, add: bool) -> None:
        with self._lock:
            bucket: set[Any] = self._watches if isinstance(item, MemoryWatch) else self._connections
            if add:
                bucket.add(item)
            else:
                bucket.discard(item)

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def age(self, timestamp: Any) -> str | None:
        if not isinstance(timestamp, str):
            return None
        try:
            then = parse_time(timestamp)
        except ValueError:
            return "<invalid>"
        return human_duration((self.cluster.clock.now() - then).total_seconds())


# --- requests ---------------------------------------------------------------------------


@dataclass
class _Target:
    resource: Resource
    namespace: str | None
    name: str | None
    subresource: str | None
    watch: bool  # the legacy /watch/ path prefix


def _flag(value: str | None) -> bool:
    return value is not None and value.lower() in ("1", "true", "yes")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer
    server_version = "podnet-apiserver"
    query: dict[str, str]
    body: bytes
    warnings: list[str]
    table_headers_sent: bool

    # --- plumbing ----------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        with contextlib.suppress(OSError):
            # headers and body go out in separate writes; don't let Nagle hold the second
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.api.track(self.connection, True)

    def handle(self) -> None:
        # a client dropping an idle keep-alive connection is not an error worth a traceback
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            super().handle()

    def finish(self) -> None:
        self.server.api.track(self.connection, False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test run makes thousands of requests; the client sees every status

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    @property
    def api(self) -> ApiServer:
        return self.server.api

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        self.query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query, True).items()}
        self.warnings: list[str] = []
        self.code = 0
        #: the managedFields an apply computed, for the write that stores its result
        self.applied_fields: Obj | None = None
        self.table_headers_sent = False  # a watch's Table events: the first has them
        if not url.path.startswith("/_podnet/"):
            self.api.delay(method)
        try:
            self._answer(method, url)
        finally:
            if method != "GET" and not url.path.startswith("/_podnet/"):
                self.api.audit({"verb": method, "requestURI": self.path, "code": self.code,
                                "userAgent": self.headers.get("User-Agent", "")})

    def _answer(self, method: str, url: urllib.parse.SplitResult) -> None:
        try:
            self.body = self._read_body()
            self._route(method, url.path.rstrip("/") or "/")
        except _ClientGone:
            self.close_connection = True
        except HttpError as exc:
            self._send(exc.code, exc.status())
        except ApiError as exc:
            self._send(exc.code, _status(exc.code, exc.reason, str(exc), _causes(exc)))
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug here must still answer, as a 500
            self._send(500, _status(500, "InternalError", f"{type(exc).__name__}: {exc}"))

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts: list[bytes] = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send(self, code: int, body: Any, content_type: str = "application/json") -> None:
        self._send_encoded(code, encode(body), content_type)

    def _send_encoded(self, code: int, data: bytes,
                      content_type: str = "application/json") -> None:
        self.code = code
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for warning in self.warnings:
                # RFC 7234 warn-text is a quoted-string: quotes inside are escaped
                text = warning.replace("\\", "\\\\").replace('"', '\\"')
                self.send_header("Warning", f'299 - "{text}"')
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _send_raw(self, code: int, data: bytes, content_type: str) -> None:
        self.code = code
        try:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _json_body(self) -> Any:
        ctype = self.headers.get("Content-Type", "application/json").split(";")[0].strip()
        if not self.body:
            raise HttpError(400, "the request body is empty")
        if ctype == protobuf.CONTENT_TYPE:
            try:
                return protobuf.decode(self.body)
            except protobuf.Unsupported:
                # custom resources have no protobuf form: upstream's 415
                raise HttpError(
                    415,
                    "the body of the request was in an unknown format - accepted media types "
                    "include: application/json, application/yaml",
                ) from None
            except protobuf.ProtobufError as exc:
                raise HttpError(400, str(exc)) from None
        try:
            if "yaml" in ctype:
                return yaml.safe_load(self.body)
            return json.loads(self.body)
        except (ValueError, yaml.YAMLError) as exc:
            raise HttpError(400, f"the request body is not valid JSON: {exc}") from None

    def _object_body(self) -> Obj:
        body = self._json_body()
        if not isinstance(body, dict):
            raise HttpError(400, "the request body must be a JSON object")
        return cast(Obj, body)

    # --- routing -----------------------------------------------------------------------

    def _route(self, method: str, path: str) -> None:
        if path.startswith("/_podnet/"):
            return self._admin(method, path)
        if method == "GET" and path.startswith("/openapi/"):
            return self._serve_openapi(path)
        if method == "GET":
            doc = self._discovery(path)
            if doc is not None:
                return self._send(200, doc)
        target = self._target(path)
        if target is None:
            raise HttpError(404, "the server could not find the requested resource")
        if not protobuf.accepts_json(self.headers.get("Accept")):
            raise HttpError(406, "only the following media types are accepted: "
                            "application/json", "NotAcceptable")
        dry = self.query.get("dryRun")
        if dry is not None and dry != "All":
            raise HttpError(400, f'dryRun: Unsupported value: "{dry}": supported values: "All"')
        res, name, sub = target.resource, target.name, target.subresource
        if sub == "eviction" and res.kind == POD and name is not None:
            if method != "POST":
                raise HttpError(405, "the server does not allow this method on the requested "
                                "resource", "MethodNotAllowed")
            return self._evict(target)
        if sub is not None and (sub != "status" or not res.has_status):
            raise HttpError(404, f"{res.kind.plural} have no {sub!r} subresource")
        if target.watch or (method == "GET" and name is None and _flag(self.query.get("watch"))):
            if method != "GET" or sub is not None:
                raise HttpError(405, f"{method} is not allowed on a watch")
            return self._watch(target)
        if dry == "All" and method in ("POST", "PUT", "PATCH"):
            with self.api.cluster.dry_run():  # every check, nothing stored
                return self._dispatch(method, target)
        return self._dispatch(method, target)

    def _dispatch(self, method: str, target: _Target) -> None:
        res, name = target.resource, target.name
        if name is None:
            if method == "GET":
                return self._list(target)
            if method == "POST":
                return self._create(target)
            if method == "DELETE":
                return self._delete_collection(target)
        else:
            if method == "GET":
                obj = self.api.cluster.get(res.store_kind, name, target.namespace)
                return self._send_object(res, res.shown(obj))
            if method == "PUT":
                return self._update(target)
            if method == "PATCH":
                return self._patch(target)
            if method == "DELETE":
                return self._delete(target)
        raise HttpError(405, f"{method} is not supported on {self.path}")

    def _target(self, path: str) -> _Target | None:
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3 and parts[1] == "v1":
            group_version, rest = "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group_version, rest = f"{parts[1]}/{parts[2]}", parts[3:]
        else:
            return None
        watch = rest[0] == "watch"
        if watch:
            rest = rest[1:]
        served = self.api.resources.get(group_version, {})
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces" and served.get(rest[2]) is not None:
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        res = served.get(rest[0])
        if res is None or (namespace is not None and not res.kind.namespaced):
            return None
        name = rest[1] if len(rest) > 1 else None
        if name is not None and res.kind.namespaced and namespace is None:
            return None
        return _Target(res, namespace, name, rest[2] if len(rest) > 2 else None, watch)

    # --- discovery ---------------------------------------------------------------------

    def _discovery(self, path: str) -> Obj | None:
        api = self.api
        if path == "/version":
            return dict(SERVER_VERSION)
        if path in ("/healthz", "/livez", "/readyz"):
            return {"status": "ok"}
        if path == "/api":
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [
                    {"clientCIDR": "0.0.0.0/0", "serverAddress": api.url.split("//", 1)[1]}
                ],
            }
        groups = self._groups()
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": list(groups.values())}
        parts = path.strip("/").split("/")
        if parts[0] == "apis" and len(parts) == 2 and parts[1] in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **groups[parts[1]]}
        if path == "/api/v1" or (parts[0] == "apis" and len(parts) == 3):
            group_version = "v1" if path == "/api/v1" else f"{parts[1]}/{parts[2]}"
            served = api.resources.get(group_version)
            if served is None:
                return None
            return {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": [d for res in served.values() for d in res.discovery()],
            }
        return None

    def _serve_openapi(self, path: str) -> None:
        """The OpenAPI documents (podnet.sim.openapi): v2 as protobuf or JSON, whichever
        is asked for (406 for anything else, as upstream), v3 as JSON."""
        accept = self.headers.get("Accept") or "*/*"
        wants_json = "json" in accept or "*/*" in accept
        if path == "/openapi/v2":
            if PROTOBUF_V2 in accept or PROTOBUF_V2_ANSWER in accept:
                return self._send_raw(200, self.api.openapi.v2(True), PROTOBUF_V2_ANSWER)
            if wants_json:
                return self._send_raw(200, self.api.openapi.v2(False), "application/json")
            raise HttpError(406, f"only the following media types are accepted: "
                            f"application/json, {PROTOBUF_V2}")
        if path == "/openapi/v3" or path.startswith("/openapi/v3/"):
            doc = self.api.openapi.v3(path.removeprefix("/openapi/v3").strip("/"))
            if doc is not None:
                if not wants_json:
                    raise HttpError(406, "only the following media types are accepted: "
                                    "application/json")
                return self._send_raw(200, doc, "application/json")
        raise HttpError(404, "the server could not find the requested resource")

    def _groups(self) -> dict[str, Obj]:
        groups: dict[str, Obj] = {}
        for group_version in self.api.resources:
            if "/" not in group_version:
                continue
            group, version = group_version.split("/", 1)
            entry = {"groupVersion": group_version, "version": version}
            found = groups.setdefault(
                group, {"name": group, "versions": [], "preferredVersion": entry}
            )
            found["versions"].append(entry)
        return groups

    # --- admin (faults) ----------------------------------------------------------------

    def _admin(self, method: str, path: str) -> None:
        faults = self.api.cluster.faults
        if path == "/_podnet/bookmark" and method == "POST":
            self.api.cluster.bookmark()
            return self._send(200, {"bookmark": True})
        if path == "/_podnet/kubelet" and method == "POST":
            spec = self._object_body() if self.body else {}
            where = {k: spec.get(k) for k in ("namespace", "name")}
            if not all(v is None or isinstance(v, str) for v in where.values()):
                raise HttpError(400, "kubelet: namespace and name are strings")
            return self._send(200, {"finished": self.api.cluster.finish_terminating(**where)})
        if path != "/_podnet/faults" or method not in ("GET", "POST"):
            raise HttpError(404, f"no admin endpoint {method} {path}")
        answer: Obj = {}
        if method == "POST":
            spec = self._object_body()
            if spec.get("clear"):
                faults.clear()
            for key, attr in (("conflictRate", "conflict_rate"), ("errorRate", "error_rate")):
                if key in spec:
                    rate = spec[key]
                    if not isinstance(rate, int | float) or not 0 <= rate <= 1:
                        raise HttpError(400, f"{key}: expected a number in [0, 1]")
                    with self.api.locked():
                        setattr(faults, attr, float(rate))
            if "failNext" in spec:
                self._fail_next(spec["failNext"])
            if spec.get("compact"):
                faults.compact()
            if spec.get("dropWatches"):
                answer["droppedWatches"] = faults.drop_watches()
            if spec.get("bookmark"):
                self.api.cluster.bookmark()
        answer.update(conflictRate=faults.conflict_rate, errorRate=faults.error_rate)
        self._send(200, answer)

    def _fail_next(self, spec: Any) -> None:
        if not isinstance(spec, dict) or not isinstance(spec.get("op"), str):
            raise HttpError(400, 'failNext: expected {"op": ..., "resource": ..., "code": ...}')
        kind = None
        if spec.get("resource"):
            res = self.api.by_plural(str(spec["resource"]))
            if res is None:
                raise HttpError(400, f"failNext: unknown resource {spec['resource']!r}")
            kind = res.kind
        code = int(spec.get("code", 500))
        message = str(spec.get("message") or f"injected fault: {code}")
        errors: dict[int, type[ApiError]] = {404: NotFound, 409: Conflict, 410: Gone, 422: Invalid}
        exc = errors.get(code, ApiError)(message, code=code)
        try:
            self.api.cluster.faults.fail_next(spec["op"], kind, exc, int(spec.get("times", 1)))
        except ValueError as err:
            raise HttpError(400, f"failNext: {err}") from None

    # --- reads -------------------------------------------------------------------------

    def _selectors(self, res: Resource) -> tuple[str | None, str | None]:
        labels, fields = self.query.get("labelSelector"), self.query.get("fieldSelector")
        try:
            parse_label_selector(labels or None)
            parse_field_selector(fields or None, res.kind)
        except Invalid as exc:
            raise HttpError(400, str(exc)) from None
        if fields and res.field_selectors is not None:
            for term in re.split(r"(?<!\\),", fields):
                name = re.split(r"!=|==|=", term, maxsplit=1)[0].strip()
                if name and name not in res.field_selectors:
                    raise HttpError(
                        400,
                        f'field label not supported: "{name}" is not a field selector for '
                        f"{res.kind}",
                    )
        return labels or None, fields or None

    def _accept(self) -> str | None:
        """The meta.k8s.io form asked for (Table, PartialObjectMetadata...), if any."""
        for option in self.headers.get("Accept", "").split(","):
            params: dict[str, str] = {}
            for param in option.split(";")[1:]:
                key, _, value = param.strip().partition("=")
                params[key] = value
            if params.get("g") == _TABLE_GROUP and params.get("v") in ("v1", "v1beta1"):
                return params.get("as")
        return None

    def _list_page(self, res: Resource, namespace: str | None, labels: str | None,
                   fields: str | None, start: str | None,
                   at: str | None, copy: bool = True) -> tuple[list[Obj], Obj]:
        """``limit``/``continue`` paging, as upstream: a page of at most ``limit`` items in
        (namespace, name) order after the continue token's key (``start``), as they were at
        the first page's resourceVersion (``at``), and a continue token naming the last key
        and that resourceVersion. Only the page is copied from the store: each page of a
        big list costs its own objects, not the whole list's."""
        try:
            limit = int(self.query.get("limit") or 0)
        except ValueError:
            raise HttpError(400, "limit: expected an integer") from None
        listed, more = self.api.cluster.list_page(res.store_kind, namespace, labels, fields,
                                                  after=start or "", limit=limit,
                                                  resource_version=at, copy=copy)
        meta: Obj = {"resourceVersion": listed.resource_version}
        items = listed.items
        if more:
            meta["continue"] = _encode_continue(_key(items[-1]), listed.resource_version)
            if not (labels or fields):
                meta["remainingItemCount"] = more
        return items, meta

    def _list(self, target: _Target) -> None:
        res = target.resource
        labels, fields = self._selectors(res)
        token = self.query.get("continue")
        start, at = _decode_continue(token) if token else (None, None)
        if self._exact_list(token):
            at = self.query["resourceVersion"]
        form = self._accept()
        # the stored objects themselves, written from their cached JSON (``encoded``)
        stored = form is None and res.stored_as is None
        try:
            # a continue page lists the objects as they were at the first page's
            # resourceVersion (upstream reads etcd at that revision), until compaction
            if "limit" in self.query or token:
                items, meta = self._list_page(res, target.namespace, labels, fields, start, at,
                                              copy=not stored)
            else:
                stored = False
                listed = self.api.cluster.list(res.store_kind, target.namespace, labels,
                                               fields, resource_version=at)
                items, meta = listed.items, {"resourceVersion": listed.resource_version}
        except (Gone, TooLargeResourceVersion) as exc:
            if token:
                raise HttpError(410, _CONTINUE_EXPIRED, "Expired") from None
            if isinstance(exc, Gone):
                raise HttpError(410, "The resourceVersion for the provided list is too old.",
                                "Expired") from None
            raise
        if stored:
            head = {"kind": res.list_kind, "apiVersion": res.kind.api_version, "metadata": meta}
            return self._send_encoded(200, self.api.encoded.list_body(res.kind, head, items))
        items = [res.shown(o) for o in items]
        if form == "Table":
            table = self._table(res, items, meta["resourceVersion"])
            table["metadata"] = meta
            return self._send(200, table)
        if form in ("PartialObjectMetadataList", "PartialObjectMetadata"):
            return self._send(
                200,
                {
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": meta,
                    "items": [_partial(o) for o in items],
                },
            )
        self._send(
            200,
            {
                "kind": res.list_kind,
                "apiVersion": res.kind.api_version,
                "metadata": meta,
                "items": items,
            },
        )

    def _exact_list(self, token: str | None) -> bool:
        """Whether the list asks for ``resourceVersionMatch=Exact``; the option checked as
        upstream's ``ValidateListOptions`` does (422 naming the rule). ``NotOlderThan``
        (and no match) is served the current objects, which are never older."""
        match, rv = self.query.get("resourceVersionMatch"), self.query.get("resourceVersion")
        if not match:
            return False
        if match not in ("Exact", "NotOlderThan"):
            problem = (f'Unsupported value: "{match}": supported values: "Exact", '
                       '"NotOlderThan"')
        elif not rv:
            problem = ("Forbidden: resourceVersionMatch is forbidden unless resourceVersion is "
                       "provided")
        elif token:
            problem = "Forbidden: resourceVersionMatch is forbidden when continue is provided"
        elif match == "Exact" and rv == "0":
            problem = 'Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
        else:
            return match == "Exact"
        raise HttpError(422, f'ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: '
                        f"{problem}")

    def _send_object(self, res: Resource, obj: Obj, code: int = 200) -> None:
        form = self._accept()
        if form == "Table":
            rv = str(_get(obj, "metadata", "resourceVersion") or "")
            return self._send(code, self._table(res, [obj], rv))
        if form == "PartialObjectMetadata":
            return self._send(code, _partial(obj))
        self._send(code, obj)

    def _table(self, res: Resource, objs: Iterable[Obj], rv: str) -> Obj:
        if res.crd is None and tables.has_table(res.store_kind):
            return self._builtin_table(res, list(objs), rv)
        columns = res.columns
        defs = [column("Name", format="name", description=_NAME_DESCRIPTION)]
        defs += [d for d, _ in columns]
        if res.age_column:
            defs.append(column("Age", description=_AGE_DESCRIPTION))
        include = self.query.get("includeObject", "Metadata")
        rows = []
        for obj in objs:
            cells: list[Any] = [_get(obj, "metadata", "name")]
            for d, cell in columns:
                value = cell(obj)
                cells.append(self.api.age(value) if d["type"] == "date" else value)
            if res.age_column:
                cells.append(self.api.age(_get(obj, "metadata", "creationTimestamp")))
            row: Obj = {"cells": cells}
            if include == "Object":
                row["object"] = obj
            elif include != "None":
                row["object"] = _partial(obj)
            rows.append(row)
        return {
            "kind": "Table",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": rv},
            "columnDefinitions": defs,
            "rows": rows,
        }

    def _builtin_table(self, res: Resource, objs: list[Obj], rv: str) -> Obj:
        include = self.query.get("includeObject", "Metadata")
        rows = []
        kind = res.store_kind  # a view's rows are its store's (one printer upstream)
        stored = [res.to_store(o) for o in objs]
        for obj, (cells, conditions) in zip(objs, tables.rows_of(kind, stored, self.api.age),
                                            strict=True):
            row: Obj = {"cells": cells}
            if conditions:
                row["conditions"] = conditions
            if include == "Object":
                row["object"] = obj
            elif include != "None":
                row["object"] = _partial(obj)
            rows.append(row)
        return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"resourceVersion": rv},
                "columnDefinitions": tables.columns_of(kind), "rows": rows}

    # --- watch -------------------------------------------------------------------------

    def _watch(self, target: _Target) -> None:
        api, res = self.api, target.resource
        labels, fields = self._selectors(res)
        if target.name is not None:  # the legacy /watch/.../NAME form watches one object
            one = f"metadata.name={target.name}"
            fields = f"{fields},{one}" if fields else one
        rv = self.query.get("resourceVersion", "")
        bookmarks = _flag(self.query.get("allowWatchBookmarks"))
        initial_events = _flag(self.query.get("sendInitialEvents"))
        try:
            timeout = float(self.query.get("timeoutSeconds") or DEFAULT_WATCH_TIMEOUT)
        except ValueError:
            raise HttpError(400, "timeoutSeconds: expected a number") from None
        form = self._accept()
        initial: list[WatchEvent] = []
        try:
            if rv in ("", "0") or initial_events:
                # upstream starts such a watch with the current objects as ADDED events
                listed = api.cluster.list(res.store_kind, target.namespace, labels, fields)
                initial = [WatchEvent("ADDED", o) for o in listed.items]
                rv = listed.resource_version
            w = api.cluster.watch(res.store_kind, rv, target.namespace, labels, fields, timeout,
                                  allow_bookmarks=bookmarks)
        except Gone as exc:
            # upstream answers 200 and sends the 410 as the stream's only event
            self._start_stream()
            self._chunk({"type": "ERROR", "object": _status(410, "Expired", str(exc))})
            return self._end_stream()
        if initial_events:
            end = {"k8s.io/initial-events-end": "true"}
            initial.append(WatchEvent("BOOKMARK", _bookmark(res.kind, rv, **end)))
        api.track(w, True)
        try:
            self._start_stream()
            for ev in initial:
                self._event(res, ev, form)
            self._pump(res, w, form, bookmarks)
            self._end_stream()
        except _ClientGone:
            raise
        except Exception:
            # past the headers no Status can be sent: cut the stream, the client re-watches
            self.close_connection = True
            raise _ClientGone from None
        finally:
            w.stop()
            api.track(w, False)

    def _pump(self, res: Resource, w: MemoryWatch, form: str | None, bookmarks: bool) -> None:
        api = self.api
        quiet_since = time.monotonic()
        while not api.stopping:
            wait = _POLL
            if bookmarks:
                wait = max(0.01, min(wait, quiet_since + api.bookmark_interval - time.monotonic()))
            events = w.poll(wait)
            for ev in events:
                self._event(res, ev, form)
            if events:
                quiet_since = time.monotonic()
                continue
            if w.closed:
                return
            if bookmarks and time.monotonic() - quiet_since >= api.bookmark_interval:
                # read the RV first: whatever was written up to it is queued by now
                rv = api.cluster.resource_version
                late = w.poll(0)
                for ev in late:
                    self._event(res, ev, form)
                if not late:
                    self._event(res, WatchEvent("BOOKMARK", _bookmark(res.kind, rv)), form)
                quiet_since = time.monotonic()
            if self._client_gone():
                raise _ClientGone

    def _event(self, res: Resource, ev: WatchEvent, form: str | None) -> None:
        obj = ev.object
        if ev.type != "BOOKMARK":
            obj = res.shown(obj)
            if form == "Table":
                rv = str(_get(obj, "metadata", "resourceVersion") or "")
                obj = self._table(res, [obj], rv)
                if self.table_headers_sent:
                    # upstream renders later events with NoHeaders: no column definitions
                    obj["columnDefinitions"] = None
                self.table_headers_sent = True
            elif form in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                obj = _partial(obj)
        self._chunk({"type": ev.type, "object": obj})

    def _start_stream(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def _chunk(self, payload: Obj) -> None:
        data = json.dumps(payload, separators=(",", ":")).encode() + b"\n"
        try:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        except OSError:
            raise _ClientGone from None

    def _end_stream(self) -> None:
        try:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            raise _ClientGone from None

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    # --- writes ------------------------------------------------------------------------

    def _field_validation(self) -> str:
        # upstream's default is Warn: unknown fields are pruned and named in a warning
        mode = self.query.get("fieldValidation") or "Warn"
        if mode not in ("Strict", "Warn", "Ignore"):
            raise HttpError(400, f"fieldValidation: {mode!r} is not one of Strict, Warn, Ignore")
        return mode

    def _prune(self) -> bool:
        return self._field_validation() != "Strict"

    def _check_identity(self, target: _Target, obj: Obj) -> Obj:
        """The body's apiVersion, kind, namespace and name against the URL's."""
        kind = target.resource.kind
        version, body_kind = obj.get("apiVersion"), obj.get("kind")
        if version and version != kind.api_version:
            raise HttpError(
                400,
                f"the API version in the data ({version}) does not match the expected API "
                f"version ({kind.api_version})",
            )
        if body_kind and body_kind != kind.kind:
            raise HttpError(
                400,
                f"the kind in the data ({body_kind}) does not match the expected kind "
                f"({kind.kind})",
            )
        meta = obj.get("metadata")
        if meta is None:
            meta = obj["metadata"] = {}
        if not isinstance(meta, dict):
            raise HttpError(400, "metadata: expected an object")
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != target.namespace:
                raise HttpError(
                    400,
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            meta["namespace"] = target.namespace
        if target.name is not None:
            if meta.get("name") and meta["name"] != target.name:
                raise HttpError(
                    400,
                    f"the name of the object ({meta['name']}) does not match the name on the "
                    f"URL ({target.name})",
                )
            meta["name"] = target.name
        return obj

    def _admit(self, res: Resource, obj: Obj, only: str | None = None,
               patch: tuple[str, Any] | None = None) -> Obj:
        """Check a podnet object against its CRD's schema; the (pruned) object to write.
        ``patch`` (type, body): ``obj`` is what that patch made, whose strict decoding
        error is upstream's patcher's 422 on ``patch`` (handlers/patch.go,
        applyPatchToCurrentObject), not the decoder's 400."""
        if res.crd is None:
            return obj
        mode = self._field_validation()
        checked = validate(res.crd.schema, obj, prune=True, only=only)
        if checked.unknown and mode == "Strict":
            # a decoding error, before validation: 400, as upstream's strict decoder says
            kind = res.kind
            fields = ", ".join(f'unknown field "{f}"' for f in checked.unknown)
            if patch is not None:
                raise _patch_invalid(patch, obj, f"strict decoding error: {fields}")
            raise HttpError(
                400,
                f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                f"strict decoding error: {fields}",
            )
        if checked.errors:
            errors = list(checked.errors)
            if res.crd.rules is not None:
                errors += self._rules_beside(res, obj, errors)
            raise _invalid(res, _get(obj, "metadata", "name") or "", errors)
        if checked.unknown and mode == "Warn":
            self.warnings += [f'unknown field "{f}"' for f in checked.unknown]
        return cast(Obj, checked.value)

    def _rules_beside(self, res: Resource, obj: Obj, errors: Sequence[FieldError]
                      ) -> list[FieldError]:
        """What a CRD's rules add to its schema's errors, as upstream's strategy: an
        error that makes the object unreadable (a type, an enum, a required field, a
        length or count bound) keeps every rule from running and says so; after others,
        the rules run too (their transition rules against the stored object)."""
        assert res.crd is not None
        if any(e.reason in cel.BLOCKING for e in errors):
            return [FieldError("<nil>", "FieldValueInvalid",
                               f'Invalid value: "null": {cel.NOT_CHECKED}')]
        meta = obj.get("metadata") or {}
        with self.api.locked():
            old = self.api.peek(res.kind, meta.get("name") or "", meta.get("namespace"))
        outcome = cel.evaluate(res.crd.rules, obj, old)
        return [FieldError(v.field, v.reason, v.message) for v in outcome.errors]

    def _check_rules(self, res: Resource, new: Obj, old: Obj | None) -> None:
        """A CRD's x-kubernetes-validations on what a write would store (``old``: the
        stored object): 422 naming each field; ratcheted failures are warnings."""
        if res.crd is None or res.crd.rules is None:
            return
        outcome = cel.evaluate(res.crd.rules, new, old)
        self.warnings += outcome.warnings
        if outcome.errors:
            errors = [FieldError(v.field, v.reason, v.message) for v in outcome.errors]
            raise _invalid(res, _get(new, "metadata", "name") or "", errors)

    def _builtin_admission(
        self, res: Resource, patch: tuple[str, Any] | None = None
    ) -> contextlib.AbstractContextManager[None]:
        """Decode and validate what a write would store of a built-in kind, as upstream
        does after applying a patch: a decoding error is 400 (on a patch: 422 naming
        ``patch``), unknown fields are pruned with a warning (400 / 422 with
        ``fieldValidation=Strict``), upstream's validation.go rules answer 422."""
        if res.crd is not None or schemas().definition_of(res.kind) is None:
            return self._managed_fields(res, None)
        mode = self._field_validation()
        kind = res.kind

        def check(kind_: Kind, new: Obj, old: Obj | None, sub: str | None) -> Obj:
            if kind_ != kind:
                return new  # a write the request caused (garbage collection), not its own
            return self._record_fields(res, validated(new, old, sub), old, sub)

        def validated(new: Obj, old: Obj | None, sub: str | None) -> Obj:
            try:
                decoded = schemas().decode(kind, new)
                failure = ""
            except DecodeError as exc:
                decoded, failure = None, str(exc)
            if decoded is not None and decoded.unknown and mode == "Strict":
                fields = ", ".join(f'unknown field "{f}"' for f in decoded.unknown)
                failure = f"strict decoding error: {fields}"
            if failure and patch is not None:
                raise _patch_invalid(patch, new, failure)
            if failure:
                raise HttpError(400, f'{kind.kind} in version "{kind.version}" cannot be '
                                f"handled as a {kind.kind}: {failure}")
            assert decoded is not None
            if decoded.unknown and mode == "Warn":
                self.warnings += [f'unknown field "{f}"' for f in decoded.unknown]
            obj = cast(Obj, decoded.value)
            if kind == POD and old is not None and isinstance(obj.get("spec"), dict):
                # upstream defaults every decoded pod, so an update may leave defaults out
                obj = {**obj, "spec": pod_defaults(obj)["spec"]}
            obj = builtin_validation.normalize(kind, obj)
            errors = builtin_validation.validate(kind, obj, old, sub)
            if errors:
                raise _invalid(res, _get(obj, "metadata", "name") or "", errors)
            return obj

        return self.api.cluster.admission(check)

    # --- managedFields and server-side apply -------------------------------------------

    def _field_manager(self) -> str:
        """The request's manager: ``fieldManager``, or the User-Agent up to its first "/"
        (fieldmanager's prefixFromUserAgent), 128 characters at most."""
        manager = self.query.get("fieldManager")
        if manager is None:
            manager = self.headers.get("User-Agent", "").split("/")[0]
        return manager[:128]

    def _record_fields(self, res: Resource, new: Obj, old: Obj | None, sub: str | None) -> Obj:
        """``new`` with the managedFields this write leaves (an apply's, when it is one)."""
        if res.stored_as is not None:
            return new
        if self.applied_fields is not None:
            meta = {k: v for k, v in new["metadata"].items() if k != "managedFields"}
            entries = self.applied_fields.get("entries")
            if entries:
                meta["managedFields"] = entries
            return {**new, "metadata": meta}
        return fieldmanager.record_update(
            old, new, _shape(res), self._field_manager(), sub, _scope(res, sub),
            format_time(self.api.cluster.clock.now()), res.kind.api_version)

    def _managed_fields(self, res: Resource, patch: tuple[str, Any] | None
                        ) -> contextlib.AbstractContextManager[None]:
        """The admission of a kind without built-in validation: its CRD's rules (when it
        has any) and managedFields."""
        kind = res.kind

        def check(kind_: Kind, new: Obj, old: Obj | None, sub: str | None) -> Obj:
            if kind_ != kind:
                return new
            self._check_rules(res, new, old)
            return self._record_fields(res, new, old, sub)

        return self.api.cluster.admission(check)

    def _check_patch_options(self, apply: bool) -> None:
        """upstream's ValidatePatchOptions: 422 on the PatchOptions."""
        problems = []
        if not apply and "force" in self.query:
            problems.append(("force", "FieldValueForbidden",
                             "Forbidden: may not be specified for non-apply patch"))
        if apply and not self.query.get("fieldManager"):
            problems.append(("fieldManager", "FieldValueRequired",
                             "Required value: is required for apply patch"))
        if len(self.query.get("fieldManager") or "") > 128:
            problems.append(("fieldManager", "FieldValueTooLong",
                             "Too long: may not be more than 128 bytes"))
        if problems:
            errors = [FieldError(f, r, m) for f, r, m in problems]
            shown = (str(errors[0]) if len(errors) == 1
                     else "[" + ", ".join(map(str, errors)) + "]")
            details: Obj = {"group": "meta.k8s.io", "kind": "PatchOptions", "causes": [
                {"reason": e.reason, "message": e.message, "field": e.field} for e in errors]}
            raise HttpError(422, f'PatchOptions.meta.k8s.io "" is invalid: {shown}', "Invalid",
                            details)

    def _apply(self, target: _Target) -> None:
        """Server-side apply (handlers/patch.go applyPatcher, fieldmanager.Apply): the
        configuration merged into the live object (or a new one), conflicts 409."""
        res, name = target.resource, cast(str, target.name)
        sub = target.subresource
        if res.stored_as is not None or (sub is not None and sub != "status"):
            raise HttpError(415, "the body of the request was in an unknown format - "
                            "accepted media types include: application/json-patch+json, "
                            "application/merge-patch+json")
        try:
            config = yaml.safe_load(self.body) if self.body else None
        except yaml.YAMLError as exc:
            raise HttpError(400, f"error decoding YAML: {exc}") from None
        if not isinstance(config, dict):
            raise HttpError(400, "error decoding YAML: the apply configuration is not an object")
        kind = res.kind
        version = config.get("apiVersion")
        if version != kind.api_version:
            raise HttpError(400, "Incorrect version specified in apply patch. Specified patch "
                            f"version: {version or ''}, expected: {kind.api_version}")
        if config.get("kind") != kind.kind:
            raise HttpError(400, f"the kind in the apply patch ({config.get('kind') or ''}) "
                            f"does not match the expected kind ({kind.kind})")
        meta = config.get("metadata")
        if isinstance(meta, dict) and meta.get("managedFields") is not None:
            raise HttpError(400, "metadata.managedFields must be nil")
        self._check_identity(target, config)
        force = _flag(self.query.get("force"))
        cluster = self.api.cluster
        with self.api.locked():
            live = self.api.peek(kind, name, target.namespace)
            if live is None and sub == "status":
                raise NotFound(f'{_qualified(kind)} "{name}" not found')
            wanted = (config.get("metadata") or {}).get("resourceVersion")
            if wanted and live is not None and wanted != live["metadata"]["resourceVersion"]:
                # a resourceVersion in the configuration is a precondition, as on an update
                raise Conflict(f'Operation cannot be fulfilled on {kind} "{name}": the object '
                               "has been modified; please apply your changes to the latest "
                               "version and try again")
            try:
                merged = fieldmanager.apply(
                    live, config, _shape(res), self.query["fieldManager"], sub,
                    _scope(res, sub), force, format_time(cluster.clock.now()),
                    kind.api_version)
            except fieldmanager.ApplyConflict as exc:
                raise HttpError(409, exc.message, "Conflict", {"causes": exc.causes}) from None
            self.applied_fields = {"entries": merged["metadata"].get("managedFields")}
            if live is None:
                return self._create_object(target, merged)
            merged["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
            if sub == "status":
                obj = self._admit(res, merged, only="status")
                with self._builtin_admission(res):
                    result = cluster.update_status(kind, obj)
            else:
                obj = merged
                if res.crd is not None:
                    rest = self._admit(res, _without_status(obj))
                    obj = rest | ({"status": obj["status"]} if "status" in obj else {})
                elif kind == POD:
                    obj = pod_defaults(obj)
                elif kind == SECRET:
                    obj = secret_on_write(obj)
                with self._builtin_admission(res):
                    if kind == SERVICE:
                        obj = self.api.services.on_update(live, obj)
                    result = res.shown(cluster.update(res.store_kind, res.to_store(obj)))
        self._send_object(res, result)

    def _create(self, target: _Target) -> None:
        res = target.resource
        if res.kind.namespaced and target.namespace is None:
            raise HttpError(405, f"create {res.kind.plural} in a namespace")
        self._create_object(target, self._check_identity(target, self._object_body()))

    def _create_object(self, target: _Target, obj: Obj) -> None:
        res = target.resource
        meta = obj["metadata"]
        name = meta.get("name")
        if name and (res.crd is not None or schemas().definition_of(res.kind) is None):
            _check_name(res, name)  # a built-in's name is checked with the rest of it
        if res.crd is not None and res.crd.status_subresource:
            obj.pop("status", None)  # upstream drops it: status is written through /status
        if res.kind == POD:
            obj = pod_defaults(obj)
        elif res.kind == SECRET:
            obj = secret_on_write(obj)
        obj = self._admit(res, obj)
        cluster = self.api.cluster
        # an allocation and the write that takes it are one step (one reentrant lock)
        with self.api.locked(), self._builtin_admission(res):
            if res.kind == SERVICE:
                obj = self.api.services.on_create(cluster, obj)
            created = res.shown(cluster.create(res.store_kind, res.to_store(obj)))
            if res.kind == NAMESPACE:
                default_service_account(cluster, created["metadata"]["name"])
        self._send_object(res, created, 201)

    def _evict(self, target: _Target) -> None:
        name, ns = cast(str, target.name), target.namespace
        try:
            opts = eviction_delete_options(self._object_body(), name)
        except ValueError as exc:
            raise HttpError(400, str(exc)) from None
        grace = opts.get("gracePeriodSeconds")
        dry = self.query.get("dryRun") == "All" or opts.get("dryRun") == ["All"]
        with self.api.locked():
            if self.api.peek(POD, name, ns) is None:
                raise NotFound(f'pods "{name}" not found')
            if not dry:
                pre = opts.get("preconditions") or {}
                self.api.cluster.delete(POD, name, ns, uid=pre.get("uid"),
                                        grace_period_seconds=None if grace is None else int(grace),
                                        propagation_policy=opts.get("propagationPolicy"))
        self._send(201, {"kind": "Status", "apiVersion": "v1", "metadata": {},
                         "status": "Success", "code": 201})

    def _update(self, target: _Target) -> None:
        res = target.resource
        obj = self._check_identity(target, self._object_body())
        cluster = self.api.cluster
        if target.subresource == "status":
            obj = self._admit(res, obj, only="status")
            with self._builtin_admission(res):
                result = cluster.update_status(res.kind, obj)
        else:
            if res.crd is not None:
                # status is the stored one's whatever the body says; check the rest
                rest = self._admit(res, _without_status(obj))
                obj = rest | ({"status": obj["status"]} if "status" in obj else {})
            elif res.kind == SECRET:
                obj = secret_on_write(obj)
            with self.api.locked(), self._builtin_admission(res):
                if res.kind == SERVICE:
                    old = self.api.peek(res.kind, cast(str, target.name), target.namespace)
                    if old is not None:
                        obj = self.api.services.on_update(old, obj)
                result = res.shown(cluster.update(res.store_kind, res.to_store(obj)))
        self._send_object(res, result)

    def _patch(self, target: _Target) -> None:
        res, name = target.resource, cast(str, target.name)
        ctype = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        self._check_patch_options(ctype == APPLY_PATCH)
        if ctype == APPLY_PATCH:
            return self._apply(target)
        ptype = _PATCH_TYPES.get(ctype)
        if ptype is None or (ptype == "strategic" and res.crd is not None):
            accepted = _CR_PATCH_TYPES if res.crd else ", ".join(_PATCH_TYPES)
            raise HttpError(
                415,
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {accepted}",
            )
        patch = self._json_body()
        sub = cast(Literal["status"] | None, target.subresource)
        cluster, kind = self.api.cluster, res.kind
        if res.stored_as is not None:
            return self._patch_view(res, name, target.namespace, patch, ptype)
        if res.kind == SERVICE and sub is None and self.query.get("dryRun") != "All":
            return self._patch_service(res, name, target.namespace, patch, ptype)
        if res.crd is None:
            with self._builtin_admission(res, (ptype, patch)):
                result = cluster.patch(kind, name, patch, target.namespace, ptype, sub)
            return self._send_object(res, result)
        with self.api.locked(), self._managed_fields(res, None):
            stored = self.api.peek(kind, name, target.namespace)
            if stored is not None:
                if ptype == "json":
                    if not isinstance(patch, list):
                        raise HttpError(400, "a json patch is a list of operations")
                    patched = json_patch(stored, patch)
                else:
                    patched = merge_patch(stored, patch)
                if not isinstance(patched, dict):
                    raise HttpError(422, "the patch does not leave an object")
                if sub == "status":
                    admitted = self._admit(res, patched, only="status", patch=(ptype, patch))
                else:
                    admitted = self._admit(res, _without_status(patched),
                                           patch=(ptype, patch))
                kept = {k: v for k, v in patched.items() if k in admitted}
                if self._prune() and admitted != kept:
                    # fields were pruned: write the pruned object, guarded by its RV
                    write = cluster.update_status if sub == "status" else cluster.update
                    admitted["metadata"]["resourceVersion"] = stored["metadata"]["resourceVersion"]
                    return self._send_object(res, write(kind, admitted | _status_of(patched, sub)))
            result = cluster.patch(kind, name, patch, target.namespace, ptype, sub)
        self._send_object(res, result)

    def _patch_service(self, res: Resource, name: str, ns: str | None, patch: Any,
                       ptype: Literal["merge", "json", "strategic"]) -> None:
        """A service's patch keeps its allocations as an update does: the patched object
        is previewed (a dry run), checked, then written."""
        cluster = self.api.cluster
        with self.api.locked(), self._managed_fields(res, None):
            old = self.api.peek(SERVICE, name, ns)
            if old is None:
                raise NotFound(f'services "{name}" not found')
            with cluster.dry_run():
                preview = cluster.patch(SERVICE, name, patch, ns, ptype)
            checked = self.api.services.on_update(old, preview)
            if checked == preview:
                result = cluster.patch(SERVICE, name, patch, ns, ptype)
            else:  # the patch dropped an allocation: write what it keeps
                checked["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
                result = cluster.update(SERVICE, checked)
        self._send_object(res, result)

    def _patch_view(self, res: Resource, name: str, ns: str | None, patch: Any,
                    ptype: str) -> None:
        """Patch an object of a view (events.k8s.io/v1) as it shows it, then store it;
        strategic merge is a merge here (Event has no merge keys of its own)."""
        with self.api.locked():
            stored = self.api.peek(res.store_kind, name, ns)
            if stored is None:
                raise NotFound(f'{res.kind.plural}.{res.kind.group} "{name}" not found')
            if ptype == "json":
                if not isinstance(patch, list):
                    raise HttpError(400, "a json patch is a list of operations")
                patched = json_patch(res.shown(stored), patch)
            else:
                patched = merge_patch(res.shown(stored), patch)
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise HttpError(422, "the patch does not leave an object")
            patched["metadata"].setdefault("resourceVersion",
                                           stored["metadata"]["resourceVersion"])
            result = self.api.cluster.update(res.store_kind, res.to_store(patched))
        self._send_object(res, res.shown(result))

    def _delete_options(self) -> Obj:
        opts: Obj = {}
        if self.body:
            body = self._json_body()
            if isinstance(body, dict):
                opts = body
        for key in ("gracePeriodSeconds", "propagationPolicy", "orphanDependents"):
            if key in self.query:
                opts[key] = self.query[key]
        if self.query.get("dryRun") == "All":
            opts["dryRun"] = ["All"]
        if opts.get("dryRun") not in (None, [], ["All"]):
            raise HttpError(400, f"dryRun: Unsupported value: {opts['dryRun']!r}: supported "
                            'values: "All"')
        orphan = opts.get("orphanDependents")
        if orphan is not None:
            if opts.get("propagationPolicy"):
                raise HttpError(422, "DeleteOptions is invalid: propagationPolicy: Invalid "
                                "value: orphanDependents and propagationPolicy cannot be both set",
                                "Invalid")
            # the deprecated form: true orphans, false is the default
            opts["propagationPolicy"] = "Orphan" if orphan in (True, "true") else None
        return opts

    def _delete(self, target: _Target) -> None:
        res, name, ns = target.resource, cast(str, target.name), target.namespace
        opts = self._delete_options()
        grace = opts.get("gracePeriodSeconds")
        try:
            grace = None if grace is None else int(grace)
        except (TypeError, ValueError):
            raise HttpError(400, "gracePeriodSeconds: expected an integer") from None
        pre = opts.get("preconditions") or {}
        cluster = self.api.cluster
        with self.api.locked():
            before = self.api.peek(res.store_kind, name, ns)
            if opts.get("dryRun"):
                if before is None:
                    raise NotFound(f'{res.kind.plural} "{name}" not found')
                if pre.get("uid") and pre["uid"] != before["metadata"]["uid"]:
                    raise Conflict(f'Precondition failed for {res.kind} "{name}": UID in '
                                   f"precondition: {pre['uid']}, UID in object meta: "
                                   f"{before['metadata']['uid']}")
            want_rv = pre.get("resourceVersion")
            if before is not None and want_rv and want_rv != before["metadata"]["resourceVersion"]:
                raise Conflict(
                    f'Precondition failed for {res.kind} "{name}": ResourceVersion in '
                    f"precondition: {want_rv}, ResourceVersion in object meta: "
                    f"{before['metadata']['resourceVersion']}"
                )
            if not opts.get("dryRun"):
                cluster.delete(res.store_kind, name, ns, uid=pre.get("uid"),
                               grace_period_seconds=grace,
                               propagation_policy=opts.get("propagationPolicy"))
            after = self.api.peek(res.store_kind, name, ns)
            if res.kind == SERVICE_ACCOUNT and name == "default" and ns and after is None:
                default_service_account(cluster, ns)  # the controller makes it again
        if opts.get("dryRun") and (res.kind == POD or (before is not None and
                                   before["metadata"].get("finalizers"))):
            return self._send_object(res, cast(Obj, before))  # what a delete would answer
        if opts.get("dryRun"):
            after = None
        if after is not None:  # finalizers or a grace period hold it
            return self._send_object(res, res.shown(after))
        if res.kind in (POD, SERVICE) and before is not None:
            # their stores return the deleted object (ReturnDeletedObject upstream)
            return self._send_object(res, before)
        details: Obj = {"name": name, "group": res.kind.group, "kind": res.kind.plural}
        if before is not None:
            details["uid"] = before["metadata"]["uid"]
        self._send(
            200,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": details,
            },
        )

    def _delete_collection(self, target: _Target) -> None:
        res = target.resource
        if res.kind.namespaced and target.namespace is None:
            raise HttpError(405, f"delete {res.kind.plural} in a namespace")
        labels, fields = self._selectors(res)
        opts = self._delete_options()
        grace = opts.get("gracePeriodSeconds")
        cluster = self.api.cluster
        listed = cluster.list(res.store_kind, target.namespace, labels, fields)
        for obj in [] if opts.get("dryRun") else listed.items:
            meta = obj["metadata"]
            with contextlib.suppress(NotFound):
                cluster.delete(
                    res.store_kind,
                    meta["name"],
                    meta.get("namespace"),
                    grace_period_seconds=None if grace is None else int(grace),
                    propagation_policy=opts.get("propagationPolicy"),
                )
        self._send(
            200,
            {
                "kind": res.list_kind,
                "apiVersion": res.kind.api_version,
                "metadata": {"resourceVersion": cluster.resource_version},
                "items": [res.shown(o) for o in listed.items],
            },
        )



_CONTINUE_EXPIRED: Final = (
    "The provided continue parameter is too old to display a consistent list result. You "
    "can start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace', '')}/{meta['name']}"


def _encode_continue(key: str, rv: str) -> str:
    # upstream's token shape: base64 of {"v": ..., "rv": ..., "start": key + NUL}
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": int(rv), "start": key + "\x00"})
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[str, str]:
    try:
        raw = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        start, rv = raw["start"], raw["rv"]
        if raw.get("v") != "meta.k8s.io/v1" or not isinstance(start, str) or int(rv) < 1:
            raise ValueError("not a continue token")
    except (ValueError, TypeError, KeyError) as exc:
        raise HttpError(400, f"continue key is not valid: {exc}") from None
    return start.rstrip("\x00"), str(rv)


def _bookmark(kind: Kind, rv: str, **annotations: str) -> Obj:
    meta: Obj = {"resourceVersion": rv}
    if annotations:
        meta["annotations"] = annotations
    return {"kind": kind.kind, "apiVersion": kind.api_version, "metadata": meta}


def _without_status(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k != "status"}


def _status_of(obj: Obj, sub: str | None) -> Obj:
    return {"status": obj["status"]} if sub is None and "status" in obj else {}


def _partial(obj: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata", {}),
    }


def _qualified(kind: Kind) -> str:
    return f"{kind.kind}.{kind.group}" if kind.group else kind.kind


def _shape(res: Resource) -> fieldmanager.Shape:
    """The schema server-side apply merges ``res`` by (built-ins: the vendored OpenAPI;
    custom resources: the CRD's structural schema)."""
    defs = schemas().definitions
    if res.crd is not None:
        return _crd_shape(res.crd.schema, defs)
    return _builtin_shape(schemas().definition_of(res.kind) or "")


@functools.cache
def _builtin_shape(name: str) -> fieldmanager.Shape:
    return fieldmanager.Shape({"$ref": name} if name else {}, schemas().definitions)


_CRD_SHAPES: dict[int, fieldmanager.Shape] = {}


def _crd_shape(schema: Any, defs: Any) -> fieldmanager.Shape:
    found = _CRD_SHAPES.get(id(schema))
    if found is None or found.schema is not schema:
        found = _CRD_SHAPES[id(schema)] = fieldmanager.Shape(schema, defs)
    return found


def _scope(res: Resource, sub: str | None) -> str:
    """Which fields a write may own: a kind with a status subresource resets status on the
    main resource, and all but status on /status (the strategies' GetResetFields)."""
    if sub == "status":
        return "status"
    return "main" if res.has_status else "all"


def _invalid(res: Resource, name: str, errors: Sequence[FieldError]) -> HttpError:
    what = f'{_qualified(res.kind)} "{name}" is invalid: '
    shown = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details: Obj = {
        "name": name,
        "group": res.kind.group,
        "kind": res.kind.kind,
        "causes": [{"reason": e.reason, "message": e.message, "field": e.field} for e in errors],
    }
    return HttpError(422, what + shown, "Invalid", details)


def _patch_invalid(patch: tuple[str, Any], patched: Obj, why: str) -> HttpError:
    """upstream's patcher when the patched object does not decode: 422 on ``patch``,
    shown as the patched JSON (a strategic patch: the patch as Go prints a map). For a
    strategic patch upstream's unstructured converter words a type error its own way;
    the JSON decoder's words stand in for it."""
    ptype, body = patch
    shown = (_go_print(body) if ptype == "strategic"
             else json.dumps(patched, sort_keys=True, separators=(",", ":")))
    error = FieldError("patch", "FieldValueInvalid",
                       f"Invalid value: {json.dumps(shown)}: {why}")
    details: Obj = {"causes": [{"reason": error.reason, "message": error.message,
                                "field": error.field}]}
    return HttpError(422, f' "" is invalid: {error}', "Invalid", details)


def _go_print(value: Any) -> str:
    """A decoded JSON value as Go's ``%+v`` prints it (maps sorted by key)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{_go_print(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(_go_print(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _check_name(res: Resource, name: Any) -> None:
    # ValidateObjectMeta's name rule (builtin_validation.name_errors), before any other
    if not isinstance(name, str):
        return  # the decoder's to refuse
    messages = builtin_validation.name_errors(res.kind, name)
    if messages:
        errors = [FieldError("metadata.name", "FieldValueInvalid",
                             f"Invalid value: {json.dumps(name)}: {m}") for m in messages]
        raise _invalid(res, name, errors)


def _causes(exc: ApiError) -> Obj | None:
    if not isinstance(exc, Invalid):
        return None
    m = _FIELD_MESSAGE.fullmatch(str(exc))
    cause: Obj = {"reason": "FieldValueInvalid", "message": str(exc)}
    if m is not None:
        cause.update(field=m.group(1), message=m.group(2))
    return {"causes": [cause]}


# --- command line -----------------------------------------------------------------------


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a port number, got {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``podnet apiserver`` options."""
    parser.add_argument(
        "--address", "--host", dest="address", default="127.0.0.1",
        help="address to listen on (default: %(default)s); listen elsewhere only when "
        "configured so (a test's underlay: no authentication is asked)",
    )
    parser.add_argument("--port", type=_port, default=0, help="port to bind; 0 picks a free one")
    parser.add_argument(
        "--kubeconfig-out", type=Path, default=None, metavar="PATH",
        help="write a kubeconfig for the server here (no auth, its context current)",
    )
    parser.add_argument(
        "--bookmark-interval", type=float, default=1.0, metavar="SECONDS",
        help="send a BOOKMARK after this long without events (default: %(default)s)",
    )
    parser.add_argument(
        "--crds", type=Path, default=None, metavar="DIR",
        help="directory with podnetworks.yaml and nodenetworks.yaml (default: the shipped ones)",
    )
    parser.add_argument(
        "--audit-log", type=Path, default=None, metavar="PATH",
        help="append one JSON line per write request (verb, URI, user agent, status code)",
    )
    parser.add_argument(
        "--write-latency", type=_seconds, default=0.0, metavar="SECONDS",
        help="wait this long before serving each write (POST, PUT, PATCH, DELETE), as a "
        "loaded API server answers (default: %(default)s)",
    )
    parser.add_argument(
        "--read-latency", type=_seconds, default=0.0, metavar="SECONDS",
        help="wait this long before serving each read (GET, a watch's start included; "
        "default: %(default)s)",
    )
    parser.add_argument(
        "--kubelet-finish-after", type=_seconds, default=None, metavar="SECONDS",
        help="play the kubelet: delete each terminating pod with grace 0 this long after "
        "it was marked (0: at once); default: pods stay Terminating until deleted with "
        "grace 0 (or POST /_podnet/kubelet)",
    )
    parser.add_argument(
        "--service-cluster-ip-range", type=_cidr, default=DEFAULT_SERVICE_CIDR, metavar="CIDR",
        help="where services' ClusterIPs come from, its first address the kubernetes "
        "service's (default: %(default)s, kubeadm's)",
    )


def _cidr(value: str) -> str:
    try:
        ServiceAllocator(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
    return value


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not 0 <= seconds < float("inf"):  # nan fails this too
        raise argparse.ArgumentTypeError(f"{value!r}: expected a finite number of seconds >= 0")
    return seconds


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM or SIGINT; the URL goes to stdout as the first line."""
    done = threading.Event()
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, lambda *_: done.set())
    try:
        try:
            server = ApiServer(
                host=args.address,
                port=args.port,
                bookmark_interval=args.bookmark_interval,
                crd_dir=args.crds,
                audit_log=args.audit_log,
                write_latency=args.write_latency,
                read_latency=args.read_latency,
                kubelet_finish_after=args.kubelet_finish_after,
                service_cidr=args.service_cluster_ip_range,
            )
        except OSError as exc:  # the port is busy, the address not this host's, no CRDs
            what = exc.filename or f"{args.address}:{args.port}"
            print(f"podnet apiserver: {what}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        with server:
            if args.kubeconfig_out is not None:
                server.write_kubeconfig(args.kubeconfig_out)
            print(server.url, flush=True)
            while not done.wait(0.5):
                pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="podnet apiserver",
        description="Serve an in-memory Kubernetes API (with podnet's CRDs) over HTTP.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
