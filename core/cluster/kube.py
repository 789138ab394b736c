"""The Cluster port over HTTP, through the official ``kubernetes`` client.

Reads never build the client's models: for a 3 KiB pod a model costs ~475 µs and
~50 KiB against ~35 µs and ~15-20 KiB for ``json.loads`` of the same bytes, which decides
whether 100,000 pods fit in memory. So every read goes through the client's generic
``param_serialize``/``call_api`` (its auth, TLS, proxies and headers) with the raw
urllib3 response read and decoded here; one code path serves every :class:`Kind`.

Writes are the per-pod path (two or three a pod network), so they take a shorter way
through the same client: the body encoded once here, the client's own auth
(``update_params_for_auth``) and default headers, sent on the urllib3 pool of the
client's ``rest_client`` (its TLS, certificates and pool size) with the timeout built
once. ``call_api`` would JSON-encode the body itself (a body encoded already would be
sent as a JSON string), build a ``Timeout`` and match content types by regular
expression on every request: 957 Python calls a status write against 700 this way. The
patch type is always explicit because the client turns a dict sent as a JSON patch
into a strategic-merge patch, whose list merge can never drop a finalizer.

Watches stream newline-delimited JSON on a background thread so ``poll(timeout)`` never
blocks longer than asked. A watch ends when the server's ``timeoutSeconds`` runs out
(randomised, so a fleet of watches does not recycle at once), the connection drops, or
``stop``; the caller re-watches from its last resourceVersion. A 410 ERROR event is
raised as :class:`Gone` from ``poll``: re-list.

Request bodies and headers are never logged: they carry tokens and object contents.
"""

from __future__ import annotations

import builtins
import json
import logging
import math
import os
import random
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, cast

import msgspec
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from ..clock import Clock, SystemClock
from ..errors import ConfigError, one_line
from .events import EventCorrelator, reference
from .eventsender import EVENT_QUEUE, EventSender
from .gcpause import gc_paused
from .kubeerrors import (
    TRANSPORT_ERRORS,
    answer_error,
    config_mistake,
    root_cause,
    unreachable,
)
from .port import (
    EVENT,
    ApiError,
    Fields,
    Gone,
    Invalid,
    Kind,
    ListResult,
    Obj,
    Propagation,
    WatchEvent,
    WatchType,
    events_until_closed,
)

if TYPE_CHECKING:
    from .port import Cluster

__all__ = ["WATCH_TIMEOUT", "KubeCluster", "KubeWatch"]

log = logging.getLogger(__name__)

#: Server-side watch lifetime before jitter (client-go's minimum watch timeout).
WATCH_TIMEOUT: Final = 300.0
#: Items per list page; the pages of one list share its resourceVersion.
PAGE_SIZE: Final = 500
#: (connect, read) seconds for ordinary requests; read is per socket read, not total.
REQUEST_TIMEOUT: Final = (10.0, 60.0)
#: A watch whose reader falls this far behind is cut off; the caller re-watches from
#: its last resourceVersion, so nothing is lost (as the real watch cache does).
WATCH_QUEUE_LIMIT: Final = 20_000

_PATCH_CONTENT_TYPES: Final = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}
_WATCH_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK"})
_AUTH: Final = ["BearerToken"]
_READ_SIZE: Final = 1 << 16
#: Answers at least this big are decoded with the cyclic collector paused (see _loads).
_GC_PAUSE_BYTES: Final = 1 << 20
#: the Kubernetes verb of a request by its method (GET is get unless the caller says
#: list or watch)
_VERBS: Final = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
#: compact JSON for request bodies (what kubectl sends): fewer bytes, the same object
_ENCODE: Final = json.JSONEncoder(separators=(",", ":")).encode


#: the answers' decoder: the same objects as ``json.loads`` (dicts, lists, Python ints of
#: any size, the last of duplicate keys), a third faster on a page of 500 PodNetworks and
#: twice as fast on one of pods (a restart lists 300,000 objects); its errors are
#: ValueErrors too
_DECODE: Final = msgspec.json.decode


def _loads(data: bytes, decode: Callable[[bytes], Any] = _DECODE) -> Any:
    if len(data) < _GC_PAUSE_BYTES:
        return decode(data)
    # a big answer makes millions of containers (decoding ~4x slower with the
    # collector walking them: 110 µs a pod against 26)
    with gc_paused():
        return decode(data)


def _parts_type(fields: Fields, name: str) -> Any:
    """A TypedDict of the parts ``fields`` names (msgspec skips every other key, in C,
    without building its value)."""
    annotations: dict[str, Any] = {}
    for key, part in fields.items():
        if part is True:
            annotations[key] = Any
        elif isinstance(part, list):
            (each,) = part
            annotations[key] = list[_parts_type(each, f"{name}_{key}")] | None  # type: ignore[misc]
        else:
            annotations[key] = _parts_type(part, f"{name}_{key}") | None
    return TypedDict(name, annotations, total=False)  # type: ignore[operator]


def _list_decoder(fields: Fields) -> Callable[[bytes], Any]:
    """A list answer's decoder that builds only the parts of each item ``fields`` names
    (a realistic pod, ~4 KB with its managedFields: 3.5 µs against 25); an answer whose
    items are not shaped as they say is decoded whole, as without them."""
    lean = msgspec.json.Decoder(
        _parts_type({"metadata": True, "items": [fields]}, "ListAnswer")).decode

    def decode(data: bytes) -> Any:
        try:
            return lean(data)
        except msgspec.ValidationError:
            return _DECODE(data)

    return decode


def _typed(obj: Obj, kind: Kind) -> Obj:
    # list items of built-in kinds come without apiVersion/kind; callers rely on them
    if "kind" not in obj:
        obj["kind"] = kind.kind
    if "apiVersion" not in obj:
        obj["apiVersion"] = kind.api_version
    return obj


class KubeWatch:
    """One watch stream, read on a daemon thread into a queue that ``poll`` drains."""

    def __init__(
        self, response: urllib3.BaseHTTPResponse, kind: Kind, limit: int = WATCH_QUEUE_LIMIT
    ) -> None:
        self.kind = kind
        self._resp = response
        self._limit = limit
        self._cond = threading.Condition()
        self._queue: deque[WatchEvent] = deque()
        self._error: tuple[int, str] | None = None  # (code, message) of an ERROR event
        self._done = False  # the stream ended (server, network, overflow or stop)
        self._released = False  # the connection went back to the pool: no shutdown
        self._stopped = False  # stop() was called: the connection is not reusable
        self._thread = threading.Thread(
            target=self._read, name=f"podnet-watch:{kind.plural}", daemon=True
        )
        self._thread.start()

    # --- the reader thread -----------------------------------------------------------

    def _read(self) -> None:
        clean = False
        try:
            clean = self._stream()
        except TRANSPORT_ERRORS as exc:
            # a dropped connection or a read timeout just ends the watch
            log.debug("watch %s ended: %s", self.kind.plural, type(exc).__name__)
        except Exception:
            log.exception("watch %s: reader failed", self.kind.plural)
        finally:
            with self._cond:
                self._done = True
                self._release(clean and not self._stopped)
                self._cond.notify_all()

    def _stream(self) -> bool:
        """Read events until the stream ends; True when it ended cleanly (connection
        reusable)."""
        buf = b""
        while not self._done:
            data = self._resp.read1(_READ_SIZE)
            if not data:
                return not buf
            buf += data
            if b"\n" not in buf:
                continue
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip() and not self._decode(line):
                    return self._error is not None and self._drain()
        return False

    def _drain(self) -> bool:
        """After an ERROR event the server ends the stream: read to its end, so closing
        leaves no unread bytes (a reset) and the connection can be reused."""
        for _ in range(16):
            if self._done or not self._resp.read1(_READ_SIZE):
                return not self._done
        return False

    def _decode(self, line: bytes) -> bool:
        """Queue one event line; False once the stream must end (ERROR, overflow)."""
        try:
            ev = _DECODE(line)
            type_, obj = ev["type"], ev["object"]
        except (ValueError, KeyError, TypeError):
            log.debug("watch %s: undecodable line skipped", self.kind.plural)
            return True
        if type_ == "ERROR" or not isinstance(obj, dict):
            status = obj if isinstance(obj, dict) else {}
            code = status.get("code")
            with self._cond:
                self._error = (
                    code if isinstance(code, int) else 500,
                    str(status.get("message") or f"watch {self.kind.plural} failed"),
                )
                self._cond.notify_all()
            return False
        if type_ not in _WATCH_TYPES:
            return True  # a newer event type than we know: nothing to act on
        if type_ != "BOOKMARK":
            _typed(obj, self.kind)
        with self._cond:
            if len(self._queue) >= self._limit:
                # too far behind: the caller re-watches from the last version it took
                log.warning("watch %s: consumer %d events behind, cut off", self.kind, self._limit)
                self._queue.clear()
                return False
            self._queue.append(WatchEvent(cast(WatchType, type_), obj))
            self._cond.notify_all()
        return True

    def _release(self, reusable: bool) -> None:
        # lock held; after this ``stop`` must not touch the connection
        if self._released:
            return
        self._released = True
        try:
            if not reusable:
                self._resp.close()
            self._resp.release_conn()
        except TRANSPORT_ERRORS:
            pass

    # --- the Watch protocol ----------------------------------------------------------

    def _raise_error(self) -> None:
        assert self._error is not None
        code, message = self._error
        raise answer_error(code, json.dumps({"message": message}).encode(), self.kind.plural)

    def poll(self, timeout: float = 0.0) -> list[WatchEvent]:
        with self._cond:
            end = time.monotonic() + max(timeout, 0.0)
            while not self._queue and not self._done and self._error is None:
                wait = end - time.monotonic()
                if wait <= 0:
                    break
                self._cond.wait(wait)
            if self._queue:
                taken = list(self._queue)
                self._queue.clear()
                return taken
            if self._error is not None:
                self._raise_error()
            return []

    def __iter__(self) -> Iterator[WatchEvent]:
        return events_until_closed(self)

    @property
    def closed(self) -> bool:
        """The stream ended and everything it delivered has been polled."""
        with self._cond:
            return self._done and not self._queue

    @property
    def idle(self) -> bool:
        return not (self._queue or self._done or self._error is not None)

    def stop(self) -> None:
        with self._cond:
            if self._done:
                return
            self._done = self._stopped = True
            self._cond.notify_all()
            if self._released:
                return
            try:
                # wakes the reader blocked in recv(); it releases the connection
                self._resp.shutdown()
            except (ValueError, RuntimeError, *TRANSPORT_ERRORS):
                pass

    def join(self, timeout: float | None = None) -> None:
        """Wait for the reader thread to finish (tests; after ``stop``)."""
        self._thread.join(timeout)


class KubeCluster:
    """The engine's Cluster port on a real (or emulated) API server."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient,
        *,
        page_size: int = PAGE_SIZE,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        watch_timeout: float = WATCH_TIMEOUT,
        clock: Clock | None = None,
        event_queue: int = 0,
    ) -> None:
        self.api_client = api_client
        self.page_size = page_size
        self.request_timeout = request_timeout
        self._write_timeout = urllib3.Timeout(connect=request_timeout[0],
                                              read=request_timeout[1])
        self._writes_via: tuple[urllib3.HTTPConnectionPool | None, str] | None = None
        self.watch_timeout = watch_timeout
        self._rng = random.Random()
        #: told of every request, once its answer's headers are in: (Kubernetes verb,
        #: HTTP status or "error", seconds); the host sets it to count them in metrics
        self.on_request: Callable[[str, str, float], None] | None = None
        self._events = EventCorrelator(
            lambda event: self.create(EVENT, event),
            lambda namespace, name, patch: self.patch(EVENT, name, patch, namespace),
            clock or SystemClock(),
        )
        #: with ``event_queue`` > 0, Events are sent from a thread of their own (at most
        #: that many waiting; more are dropped and counted): a worker never waits for one
        self.events: EventSender | None = None
        if event_queue > 0:
            self.queue_events(event_queue)

    @classmethod
    def connect(cls, kubeconfig: str | None = None, context: str | None = None, *,
                connections: int | None = None) -> KubeCluster:
        """The cluster as every podnet command finds it: the ``kubeconfig`` file when one
        is named; else, outside a pod, ``$KUBECONFIG`` (read now, not when the client was
        imported) or ``~/.kube/config``; in a pod, its service account. ``connections``:
        the most requests in flight at once (every watch, every writer), kept alive.
        :raises ConfigError: when that way in does not work."""
        if kubeconfig and not os.path.isfile(kubeconfig):
            raise ConfigError("kubeconfig", f"no such file: {kubeconfig}")
        if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.from_kubeconfig(kubeconfig or os.environ.get("KUBECONFIG") or None,
                                       context, connections=connections)
        return cls.in_cluster(connections=connections)

    @staticmethod
    def _configuration(connections: int | None) -> k8s_client.Configuration:
        configuration = k8s_client.Configuration()
        if connections is not None:
            # the client's default (5 a CPU) may be fewer than the watches and writers
            # together: a request beyond it opens a connection, and one beyond it coming
            # back is closed instead of kept
            configuration.connection_pool_maxsize = max(1, connections)
        return configuration

    @classmethod
    def from_kubeconfig(cls, path: str | None, context: str | None = None, *,
                        connections: int | None = None) -> KubeCluster:
        """From a kubeconfig file (None: ``$KUBECONFIG`` or ``~/.kube/config``)."""
        try:
            # persist_config=False: refreshing a token must not rewrite the user's file
            api: k8s_client.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=path, context=context, persist_config=False,
                client_configuration=cls._configuration(connections),
            )
        except (k8s_config.ConfigException, OSError) as exc:
            raise ConfigError("kubeconfig", str(exc)) from exc
        except Exception as exc:  # not YAML, or YAML of another shape: the client fails anyhow
            where = path or os.environ.get("KUBECONFIG") or "~/.kube/config"
            what = ("not YAML" if "yaml" in type(exc).__module__
                    else "not a mapping of clusters, users and contexts")
            raise ConfigError("kubeconfig", f"{where} is not a kubeconfig ({what}: "
                              f"{one_line(exc)})") from exc
        return cls(api)

    @classmethod
    def in_cluster(cls, *, connections: int | None = None) -> KubeCluster:
        """From the pod's service account (token refreshed from its file as it rotates)."""
        configuration = cls._configuration(connections)
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        except (k8s_config.ConfigException, OSError) as exc:
            raise ConfigError("in-cluster", str(exc)) from exc
        return cls(k8s_client.ApiClient(configuration))

    @property
    def server(self) -> str:
        """The API server's URL, as the kubeconfig or the service account names it."""
        return str(self.api_client.configuration.host)

    def probe(self) -> None:
        """GET /version once.

        :raises ConfigError: when no retry can help: the host name does not resolve, TLS
            fails, the credentials are refused, or what answers is no Kubernetes API.
        :raises ApiError: (code 503) when the server is down or slow: worth retrying."""
        try:
            answer = self._call("GET", "/version")
        except ApiError as exc:
            mistake = config_mistake(exc)
            if mistake is not None:
                raise ConfigError("kubeconfig", f"API server {self.server}: {mistake}") from exc
            raise ApiError(root_cause(exc), code=exc.code) from exc
        if not isinstance(answer, dict) or "gitVersion" not in answer:
            raise ConfigError("kubeconfig", f"{self.server} is not a Kubernetes API server "
                              "(/version has no gitVersion)")

    def queue_events(self, capacity: int = EVENT_QUEUE) -> EventSender:
        """From now on, send Events from a thread of their own (``eventsender.py``); ``podnet
        run`` does, as client-go's recorders do. ``close`` sends what is queued."""
        if self.events is None:
            self.events = EventSender(self._events.record_reference, capacity)
        return self.events

    def close(self) -> None:
        if self.events is not None:
            self.events.close()  # what is queued is sent first
        self.api_client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> KubeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests --------------------------------------------------------------------

    @staticmethod
    def _path(kind: Kind, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        if kind.namespaced and namespace:
            base += f"/namespaces/{urllib.parse.quote(namespace, safe='')}"
        base += f"/{kind.plural}"
        if name is not None:
            base += f"/{urllib.parse.quote(name, safe='')}"
        return base

    @staticmethod
    def _namespace(kind: Kind, namespace: str | None) -> str | None:
        # the in-memory adapter's rule: a namespaced object needs its namespace
        if kind.namespaced and not namespace:
            raise Invalid(f"{kind.plural} are namespaced: metadata.namespace is required")
        return namespace if kind.namespaced else None

    def _open(
        self,
        method: str,
        path: str,
        *,
        query: builtins.list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float | tuple[float, float] | None = None,
        verb: str | None = None,
    ) -> urllib3.BaseHTTPResponse:
        """Send a request; the raw, unread response (any status). ``verb``: the
        Kubernetes verb it is (``list``, ``watch``), when the method does not say."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        # the body bypasses param_serialize: it is JSON already, no need for a deep copy
        method, url, headers, _, _ = self.api_client.param_serialize(
            method, path, query_params=query or None, header_params=headers, auth_settings=_AUTH
        )
        observe = self.on_request
        started = time.perf_counter() if observe is not None else 0.0
        try:
            answer = self.api_client.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                _request_timeout=timeout or self.request_timeout,
            )
        except TRANSPORT_ERRORS as exc:
            if observe is not None:
                observe(verb or _VERBS.get(method, method.lower()), "error",
                        time.perf_counter() - started)
            raise unreachable(f"{method} {path}", exc) from exc
        response = cast(urllib3.BaseHTTPResponse, answer.response)
        if observe is not None:
            observe(verb or _VERBS.get(method, method.lower()), str(response.status),
                    time.perf_counter() - started)
        return response

    def _write_pool(self) -> tuple[urllib3.HTTPConnectionPool | None, str]:
        """Where writes go: the client's pool for its host and the host's path prefix;
        (None, host URL) when the client goes through a proxy (its manager sends them)."""
        via = self._writes_via
        if via is None:
            host = str(self.api_client.configuration.host).rstrip("/")
            manager = self.api_client.rest_client.pool_manager
            if type(manager) is urllib3.PoolManager:
                via = (manager.connection_from_url(host),
                       urllib3.util.parse_url(host).path or "")
            else:
                via = (None, host)
            self._writes_via = via
        return via

    def _send(self, method: str, path: str, body: Any,
              content_type: str = "application/json") -> urllib3.BaseHTTPResponse:
        """A write: the raw, unread response (any status)."""
        api = self.api_client
        headers = {"Accept": "application/json", "Content-Type": content_type,
                   **api.default_headers}
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, None, _AUTH, path, method, None)
        data = _ENCODE(body).encode()
        pool, prefix = self._write_pool()
        observe = self.on_request
        started = time.perf_counter() if observe is not None else 0.0
        try:
            if pool is not None:
                response = pool.urlopen(method, prefix + path, body=data, headers=headers,
                                        timeout=self._write_timeout, preload_content=False,
                                        redirect=False, assert_same_host=False)
            else:
                response = api.rest_client.pool_manager.urlopen(
                    method, prefix + path, body=data, headers=headers,
                    timeout=self._write_timeout, preload_content=False, redirect=False)
        except TRANSPORT_ERRORS as exc:
            if observe is not None:
                observe(_VERBS[method], "error", time.perf_counter() - started)
            raise unreachable(f"{method} {path}", exc) from exc
        if observe is not None:
            observe(_VERBS[method], str(response.status), time.perf_counter() - started)
        return response

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: builtins.list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str | None = None,
        verb: str | None = None,
        decode: Callable[[bytes], Any] = _DECODE,
    ) -> Any:
        """Send a request and decode its JSON answer; HTTP errors become port errors."""
        if body is not None and query is None and verb is None:
            resp = self._send(method, path, body, content_type or "application/json")
        else:
            resp = self._open(method, path, query=query, body=body,
                              content_type=content_type, verb=verb)
        try:
            data = resp.read()
        except TRANSPORT_ERRORS as exc:
            resp.close()
            raise unreachable(f"{method} {path}", exc) from exc
        finally:
            resp.release_conn()
        if not 200 <= resp.status < 300:
            raise answer_error(resp.status, data, f"{method} {path}")
        return _loads(data, decode) if data else {}

    # --- reads -----------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        ns = self._namespace(kind, namespace)
        return _typed(self._call("GET", self._path(kind, ns, name)), kind)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[Obj], Any] | None = None,
        *,
        fields: Fields | None = None,
    ) -> ListResult:
        path = self._path(kind, namespace)
        decode = _DECODE if fields is None else _list_decoder(
            {"apiVersion": True, "kind": True, **fields})
        base: builtins.list[tuple[str, Any]] = []
        if label_selector:
            base.append(("labelSelector", label_selector))
        if field_selector:
            base.append(("fieldSelector", field_selector))

        def fetch(token: str) -> Any:
            query = [*base]
            if self.page_size > 0:
                query.append(("limit", self.page_size))
            if token:
                query.append(("continue", token))
            return self._call("GET", path, query=query, verb="list", decode=decode)

        items: builtins.list[Any] = []
        # the next page is asked for as soon as its token is known, and read on a thread
        # while this one is transformed: the server encodes it (on another core) and the
        # socket fills while this thread parses, instead of each waiting for the other
        with ThreadPoolExecutor(max_workers=1,
                                thread_name_prefix=f"podnet-list:{kind.plural}") as ahead:
            page = fetch("")
            while True:
                meta = page.get("metadata") or {}
                token = meta.get("continue") or ""
                pending = ahead.submit(fetch, token) if token else None
                raw = (_typed(o, kind) for o in page.get("items") or ())
                # transform page by page: only two pages of raw objects are alive at a time
                items.extend(map(transform, raw) if transform is not None else raw)
                del page, raw
                if pending is None:
                    return ListResult(items, str(meta.get("resourceVersion") or ""))
                try:
                    page = pending.result()
                except Gone:
                    # the continue token outlived its snapshot: take the list whole, once
                    log.debug("list %s: continue token expired, listing unpaged", kind.plural)
                    page = self._call("GET", path, query=base, verb="list", decode=decode)
                    items.clear()

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> KubeWatch:
        if timeout_seconds is None:
            # jitter: watches opened together must not all expire (and re-list) together
            timeout_seconds = self.watch_timeout * (1.0 + self._rng.random())
        seconds = max(1, math.ceil(timeout_seconds))  # the API takes whole seconds
        query: builtins.list[tuple[str, Any]] = [
            ("watch", "1"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", seconds),
        ]
        if label_selector:
            query.append(("labelSelector", label_selector))
        if field_selector:
            query.append(("fieldSelector", field_selector))
        path = self._path(kind, namespace)
        # a silent connection past the server's own deadline is a dead one
        resp = self._open(
            "GET", path, query=query, timeout=(self.request_timeout[0], seconds + 30.0),
            verb="watch",
        )
        if not 200 <= resp.status < 300:
            try:
                data = resp.read()
            except TRANSPORT_ERRORS:
                data = b""
            finally:
                resp.release_conn()
            raise answer_error(resp.status, data, f"watch {kind.plural}")
        return KubeWatch(resp, kind)

    # --- writes ----------------------------------------------------------------------

    def create(self, kind: Kind, obj: Obj) -> Obj:
        meta = obj.get("metadata") or {}
        ns = self._namespace(kind, meta.get("namespace"))
        return _typed(self._call("POST", self._path(kind, ns), body=obj), kind)

    def _put(self, kind: Kind, obj: Obj, subresource: str | None) -> Obj:
        meta = obj.get("metadata") or {}
        name = meta.get("name")
        if not name:
            raise Invalid("metadata.name: Required value")
        path = self._path(kind, self._namespace(kind, meta.get("namespace")), name)
        if subresource:
            path += f"/{subresource}"
        return _typed(self._call("PUT", path, body=obj), kind)

    def update(self, kind: Kind, obj: Obj) -> Obj:
        return self._put(kind, obj, None)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        return self._put(kind, obj, "status")

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "strategic"] = "merge",
        subresource: Literal["status"] | None = None,
    ) -> Obj:
        content_type = _PATCH_CONTENT_TYPES.get(patch_type)
        if content_type is None:
            raise Invalid(f"unsupported patch type {patch_type!r}")
        # checked here too: the client would send a dict "json patch" as strategic merge
        if patch_type == "json":
            if not isinstance(patch, list):
                raise Invalid("a json patch is a list of operations")
            body: Any = patch
        elif isinstance(patch, Mapping):
            body = dict(patch)
        else:
            raise Invalid(f"a {patch_type} patch is a JSON object")
        path = self._path(kind, self._namespace(kind, namespace), name)
        if subresource:
            path += f"/{subresource}"
        return _typed(self._call("PATCH", path, body=body, content_type=content_type), kind)

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: Propagation | None = None,
    ) -> None:
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy is not None:
            options["propagationPolicy"] = propagation_policy
        if uid is not None:
            options["preconditions"] = {"uid": uid}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        path = self._path(kind, self._namespace(kind, namespace), name)
        self._call("DELETE", path, body=options)

    # --- events ----------------------------------------------------------------------

    def emit_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> None:
        """Create an Event, or count one more of the Event this client wrote for the same
        object, reason, message and type (the correlator in ``events.py``); queued for
        the sender thread when there is one (``event_queue``)."""
        if self.events is not None:
            self.events.submit(reference(involved), reason, message, type)
        else:
            self._events.record(involved, reason, message, type)


if TYPE_CHECKING:
    _conforms: Cluster = KubeCluster(k8s_client.ApiClient())
