"""A list-watch cache of one kind, holding only the lean value a controller needs.

``Informer`` lists once, then follows a watch from the list's resourceVersion. When the
watch ends cleanly it re-watches from the last resourceVersion seen; when the watch fails
(410 Gone, a resourceVersion the server never had, any error) it re-lists and replaces
the cache with the list, firing a handler call for every difference, so a controller
never misses a change (level-triggered).

resourceVersions are opaque: they are compared for equality only, never for order. An
API server restored from an older etcd snapshot (or an emulator restarted empty) hands
out versions lower than the ones cached, and those are as current as any. Order comes
from the watch stream itself, which delivers one key's changes in the order they
happened, and from the list, which is at least as new as every write that finished
before it was asked for.

The controller's own writes reach the cache ahead of their watch events through
:meth:`Informer.assume`. Each assumed version is remembered until the stream delivers
it: events for that key before it are older than what the cache holds and are skipped,
so a write is never reverted by the stream catching up, and its own event fires
nothing. A key the controller saw deleted (:meth:`Informer.forget`) ignores its late
events until its DELETED arrives. An object whose DELETED the stream delivered, or that a
write of ours deleted (the last finalizer taken off an object being deleted: the answer
is the object as it was, the DELETED comes at a later version), is gone for good: no
answer fed back late brings it back, and a DELETED ends it whatever writes of ours are
still due. Handlers also stay quiet when a version transforms to
a value equal to the cached one: the lean value is all the controller can see.

Use it threaded (:meth:`Informer.run` in its own thread) or deterministically (tests
call :meth:`Informer.pump`); the cache is guarded by a lock either way.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from .gcpause import gc_paused
from .port import ApiError, Cluster, Fields, Forbidden, Gone, Kind, NotFound, Obj, Watch

__all__ = ["EventType", "Handler", "Informer"]

log = logging.getLogger(__name__)

T = TypeVar("T")
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Handler = Callable[[EventType, str, T | None, T | None], None]

#: How many keys the controller saw deleted are remembered until their DELETED event
#: arrives, so a late event (or a stale ``assume``) cannot bring them back.
TOMBSTONES = 10_000
#: an optional kind the API server does not serve (its CRD is not installed), or does not
#: let podnet read (403), is listed again this often (seconds): installed or granted
#: later, it is picked up without a restart
ABSENT_RELIST = 30.0


class _Seen(NamedTuple):
    rv: str
    uid: str | None


class _Digest(NamedTuple, Generic[T]):
    key: str
    rv: str
    uid: str | None
    obj: Any  # the raw object until transformed, then None
    value: T | None
    transformed: bool


#: what the informer itself reads of a listed object
_IDENTITY: dict[str, Any] = {"name": True, "namespace": True, "uid": True,
                             "resourceVersion": True}


def _with_identity(fields: Fields) -> Fields:
    """``fields`` and the metadata the informer reads (the key, uid and version)."""
    meta = fields.get("metadata", {})
    if meta is True:
        return fields
    return {**fields, "metadata": {**meta, **_IDENTITY}}


def _ended_by(obj: Obj, kind: Kind) -> bool:
    """Whether ``obj``, a write's answer, says the write deleted it: being deleted, its
    last finalizer gone and no grace period left to wait (as the API server decides
    during an update; a pod still waiting out its grace period lives on)."""
    meta = obj.get("metadata") or {}
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    return int(meta.get("deletionGracePeriodSeconds") or 0) == 0 or kind.kind != "Pod"


class Informer(Generic[T]):
    def __init__(
        self,
        cluster: Cluster,
        kind: Kind,
        transform: Callable[[Obj], T | None],
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str | None = None,
        optional: bool = False,
        fields: Fields | None = None,
    ) -> None:
        self.cluster = cluster
        #: the parts of each object ``transform`` reads: a list may leave out the rest
        #: (the informer's own parts added)
        self._list_options: dict[str, Any] = (
            {} if fields is None else {"fields": _with_identity(fields)})
        #: a kind that may not be served (a CRD not installed): a 404 list is an empty,
        #: synced cache, listed again every ABSENT_RELIST seconds
        self.optional = optional
        #: while the optional kind is not served: when (monotonic) to list it again
        self._absent_until: float | None = None
        self.kind = kind
        self.name = name or kind.plural
        self._transform = transform
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._lock = threading.RLock()  # cache, indexes, handler calls
        self._pump_lock = threading.Lock()  # one list/watch driver at a time
        self._cache: dict[str, T] = {}
        self._seen: dict[str, _Seen] = {}
        # key -> versions the controller wrote and assumed whose watch events are due
        self._expected: dict[str, set[str]] = {}
        # key -> uid of an object the controller saw deleted, until its DELETED arrives
        self._tombstones: OrderedDict[str, str | None] = OrderedDict()
        # uids of objects that ended (the stream delivered their DELETED, or a write of
        # ours deleted them): no write of ours answered earlier may bring one back
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._handlers: list[Handler[T]] = []
        self._index_fns: dict[str, Callable[[T], Sequence[str]]] = {}
        # index -> value -> key(s). Most buckets hold one key (a pod's records, an
        # address's owner): a bare string until a second key arrives saves a set each,
        # ~0.5 KiB per record at 100,000 records.
        self._indexes: dict[str, dict[str, str | set[str]]] = {}
        # index -> key -> its value(s): a bare string for the usual single value
        self._indexed: dict[str, dict[str, str | tuple[str, ...]]] = {}
        self._watch: Watch | None = None
        self._rv = ""
        self._synced = False
        self._need_relist = False
        self._stopped = threading.Event()
        # set while handlers hear of a write the controller made itself (assume)
        self._assuming = False

    # --- reading -------------------------------------------------------------------

    @property
    def namespace(self) -> str | None:
        """The one namespace it lists and watches; None for all."""
        return self._namespace

    @property
    def has_synced(self) -> bool:
        return self._synced

    @property
    def last_resource_version(self) -> str:
        """The watch stream's position: the last resourceVersion listed or watched."""
        return self._rv

    def key_of(self, obj: Obj) -> str:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        return f"{meta.get('namespace', '')}/{name}" if self.kind.namespaced else name

    def get(self, key: str) -> T | None:
        with self._lock:
            return self._cache.get(key)

    def resource_version(self, key: str) -> str | None:
        """The resourceVersion of the cached value for ``key``."""
        with self._lock:
            seen = self._seen.get(key)
            return seen.rv if seen else None

    def keys(self) -> list[str]:
        with self._lock:
            return list(self._cache)

    def values(self) -> list[T]:
        with self._lock:
            return list(self._cache.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._cache)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._cache

    @property
    def own_write(self) -> bool:
        """Whether the handler being called hears of a write the controller itself made
        (:meth:`assume`), not of the stream or a list. Handlers run under the cache lock,
        so only the thread that writes sees it set."""
        return self._assuming

    # --- handlers and indexes ------------------------------------------------------

    def add_handler(self, fn: Handler[T]) -> None:
        """``fn(event, key, old, new)``; called with the cache lock held, in order."""
        with self._lock:
            self._handlers.append(fn)

    def add_index(self, name: str, fn: Callable[[T], Sequence[str]]) -> None:
        with self._lock:
            self._index_fns[name] = fn
            self._indexes[name] = {}
            self._indexed[name] = {}
            for key, value in self._cache.items():
                self._index_one(name, key, value)

    def by_index(self, name: str, value: str) -> list[T]:
        """Cached values whose index ``name`` yields ``value``, ordered by key."""
        with self._lock:
            if name not in self._indexes:
                raise KeyError(f"informer {self.name!r} has no index {name!r}")
            bucket = self._indexes[name].get(value)
            if bucket is None:
                return []
            if isinstance(bucket, str):
                return [self._cache[bucket]]
            return [self._cache[k] for k in sorted(bucket)]

    def _index_one(self, name: str, key: str, value: T) -> None:
        found = self._index_fns[name](value)
        if found.__class__ is list and len(found) < 2:
            # what most index functions return: a list of one value, or none
            if not found:
                return
            values: tuple[str, ...] = (found[0],)
        else:
            values = tuple(dict.fromkeys(found))
            if not values:
                return
        self._indexed[name][key] = values[0] if len(values) == 1 else values
        self._file(name, key, values)

    def _file(self, name: str, key: str, values: Sequence[str]) -> None:
        """Put ``key`` in index ``name``'s bucket of each of ``values`` (a bucket of one
        key is the key itself: most values name one object)."""
        buckets = self._indexes[name]
        for v in values:
            bucket = buckets.get(v)
            if bucket is None:
                buckets[v] = key
            elif isinstance(bucket, str):
                if bucket != key:
                    buckets[v] = {bucket, key}
            else:
                bucket.add(key)

    def _reindex(self, key: str, value: T) -> None:
        """Index ``key``'s new value; an index whose values for it stay the same (most of
        them on most writes: a record's pod, node, namespace) is left as it is."""
        indexes = self._indexes
        for name, fn in self._index_fns.items():
            values = fn(value)
            indexed = self._indexed[name]
            was = indexed.get(key)
            if was is None:
                if not values:
                    continue
                if values.__class__ is list and len(values) == 1:
                    # a new key's one value (a list's every record, most indexes): filed
                    # here, as _file would, without its call and loop
                    v = values[0]
                    indexed[key] = v
                    buckets = indexes[name]
                    bucket = buckets.get(v)
                    if bucket is None:
                        buckets[v] = key
                    elif isinstance(bucket, str):
                        if bucket != key:
                            buckets[v] = {bucket, key}
                    else:
                        bucket.add(key)
                    continue
            elif values == [was] if was.__class__ is str else values == list(was):
                continue  # the usual case: nothing to look up or build
            else:
                self._unindex_one(name, key)
                if not values:
                    continue
            if len(values) > 1:
                values = tuple(dict.fromkeys(values))
            indexed[key] = values[0] if len(values) == 1 else tuple(values)
            self._file(name, key, values)

    def _unindex_one(self, name: str, key: str) -> None:
        buckets = self._indexes[name]
        values = self._indexed[name].pop(key, ())
        for v in (values,) if isinstance(values, str) else values:
            bucket = buckets.get(v)
            if bucket is None:
                continue
            if isinstance(bucket, str):
                if bucket == key:
                    del buckets[v]
                continue
            bucket.discard(key)
            if len(bucket) == 1:
                buckets[v] = next(iter(bucket))
            elif not bucket:
                del buckets[v]

    # --- cache changes (lock held) -------------------------------------------------

    def _fire(self, event: EventType, key: str, old: T | None, new: T | None) -> None:
        for fn in self._handlers:
            try:
                fn(event, key, old, new)
            except Exception:
                # one broken handler must not stop the cache from following the cluster
                log.exception("informer %s: handler failed on %s %s", self.name, event, key)

    def _tombstone(self, key: str, uid: str | None) -> None:
        self._tombstones.pop(key, None)
        self._tombstones[key] = uid
        while len(self._tombstones) > TOMBSTONES:
            self._tombstones.popitem(last=False)

    def _drop(self, key: str) -> bool:
        if key not in self._cache:
            return False
        old = self._cache.pop(key)
        del self._seen[key]
        for name in self._indexes:
            self._unindex_one(name, key)
        self._fire("DELETED", key, old, None)
        return True

    def _digest(self, obj: Obj, value: T | None = None) -> _Digest[T]:
        """What the cache needs of one object version; the raw object is not kept.
        ``value``: what the transform makes of it, when that is known already."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        name = str(meta.get("name", ""))  # as key_of, without its second look-up
        key = f"{meta.get('namespace', '')}/{name}" if self.kind.namespaced else name
        # the key interned: records naming this one (a pool's owners) share its string
        return _Digest(sys.intern(key), str(meta.get("resourceVersion") or ""),
                       uid if isinstance(uid, str) else None,
                       obj if value is None else None, value, value is not None)

    def _listed(self, obj: Obj) -> _Digest[T]:
        """List transform: the lean value, computed as each page arrives."""
        meta = obj.get("metadata") or {}
        uid = meta.get("uid")
        name = str(meta.get("name", ""))  # as key_of, without its second look-up
        key = f"{meta.get('namespace', '')}/{name}" if self.kind.namespaced else name
        # as _digest, built once (a namedtuple's _replace costs more than the tuple)
        return _Digest(sys.intern(key), str(meta.get("resourceVersion") or ""),
                       uid if isinstance(uid, str) else None, None, self._transform(obj), True)

    def _store(self, digest: _Digest[T]) -> bool:
        """Make ``digest`` the cached version of its key; True when the cache changed."""
        key, rv = digest.key, digest.rv
        seen = self._seen.get(key)
        if seen is not None and rv and seen.rv == rv and seen.uid == digest.uid:
            return False  # this very version is cached already
        value = digest.value if digest.transformed else self._transform(digest.obj)
        if value is None:
            return self._drop(key)
        old = self._cache.get(key)
        self._cache[key] = value
        self._seen[key] = _Seen(rv, digest.uid)
        self._reindex(key, value)
        if seen is None:
            self._fire("ADDED", key, None, value)
        elif old != value:
            self._fire("MODIFIED", key, old, value)
        return True

    def _end(self, uid: str | None) -> None:
        """Remember that object ``uid`` is gone for good (uids are never reused)."""
        if uid is None:
            return
        self._ended.pop(uid, None)
        self._ended[uid] = None
        while len(self._ended) > TOMBSTONES:
            self._ended.popitem(last=False)

    def _is_tombstoned(self, key: str, uid: str | None) -> bool:
        """Whether ``uid`` is the object of ``key`` the controller saw deleted; a new
        object under that name clears the tombstone."""
        if key not in self._tombstones:
            return False
        dead = self._tombstones[key]
        if dead is None or uid is None or uid == dead:
            return True
        del self._tombstones[key]
        return False

    def _apply(self, event: str, obj: Obj) -> bool:
        """Fold one watch event into the cache, in stream order; True when it changed."""
        digest = self._digest(obj)
        key, rv, uid = digest.key, digest.rv, digest.uid
        if event == "DELETED":
            self._end(uid)
        if key in self._tombstones and self._is_tombstoned(key, uid):
            if event == "DELETED":
                del self._tombstones[key]
            return False  # a late event of an object already dropped
        seen = self._seen.get(key)
        if event == "DELETED":
            if seen is None or (uid and seen.uid and uid != seen.uid):
                return False  # not the object this key caches
            # the object's end: nothing of ours is still due for it, whatever we wrote
            self._expected.pop(key, None)
            return self._drop(key)
        expected = self._expected.get(key)
        if expected:
            if rv not in expected:
                return False  # before the controller's own write in the stream: older
            expected.discard(rv)
            if expected:
                return False  # another write of ours follows in the stream
            del self._expected[key]
        if seen is not None and rv and seen.rv == rv and seen.uid == uid:
            return False  # this very version is cached already (our own write's event)
        return self._store(digest)

    # --- the controller's own writes -----------------------------------------------

    def assume(self, obj: Obj, based_on: str | None = None, value: T | None = None, *,
               created: bool = False) -> bool:
        """Apply an object the controller just wrote, ahead of its watch event.

        ``based_on``: the resourceVersion the write was conditioned on. A write that
        succeeded on the cached version is its successor and always applies; so does the
        first write of ours the stream has not delivered yet. Two writes of ours in
        flight without that link cannot be ordered here: the first stays cached and the
        stream settles it. A write the stream has passed already (the cache holds a
        version after ``based_on``, or, ``created``, the object it made) is not applied:
        the cache keeps the later version. ``value``: what the transform makes of
        ``obj``, when the writer knows it already (it is not transformed again). Returns
        whether it was applied.
        """
        with self._lock:
            digest = self._digest(obj, value)
            key, rv = digest.key, digest.rv
            if not rv or self._is_tombstoned(key, digest.uid) or digest.uid in self._ended:
                return False  # the object is gone: a late answer cannot bring it back
            if _ended_by(obj, self.kind):
                # the write took the last finalizer off an object being deleted: the
                # server deleted it, and its DELETED event (at a later version than the
                # answer's) may have passed already
                self._end(digest.uid)
                seen = self._seen.get(key)
                if seen is not None and seen.uid == digest.uid:
                    self._expected.pop(key, None)
                    self._drop(key)
                return False
            seen = self._seen.get(key)
            if seen is not None and seen.rv == rv and seen.uid == digest.uid:
                return False
            successor = seen is not None and based_on is not None and based_on == seen.rv
            passed = (based_on is not None and not successor) or (
                created and seen is not None and seen.uid == digest.uid)
            if seen is not None and passed and not self._expected.get(key):
                # the stream moved the cache on from the version the write was
                # conditioned on, and nothing of ours is due: what it holds came after our
                # write (or our write's event is still coming). Applied, the cache would go
                # back to our version and wait for its event, already passed, for ever:
                # every later event of the key dropped as older
                return False
            expected = self._expected.setdefault(key, set())
            in_flight = bool(expected)
            expected.add(rv)
            if in_flight and not successor:
                return False
            self._assuming = True
            try:
                return self._store(digest)
            finally:
                self._assuming = False

    def forget(self, key: str) -> bool:
        """Drop ``key`` after the controller saw it deleted; returns whether it was cached."""
        with self._lock:
            seen = self._seen.get(key)
            if seen is None:
                return False
            self._expected.pop(key, None)
            self._tombstone(key, seen.uid)
            return self._drop(key)

    # --- list and watch ------------------------------------------------------------

    def start(self) -> None:
        """List, fill the cache (ADDED for each) and open the watch. List errors raise."""
        with self._pump_lock:
            if not self._synced:
                self._relist(raise_errors=True)

    def _relist(self, *, raise_errors: bool = False) -> int:
        # a list builds the whole cache at once: the collector would walk it again and
        # again as it grows (``gcpause``)
        with gc_paused():
            return self._list_and_replace(raise_errors)

    def _list_and_replace(self, raise_errors: bool) -> int:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
        try:
            result = self.cluster.list(
                self.kind, self._namespace, self._label_selector, self._field_selector,
                transform=self._listed, **self._list_options,
            )
        except NotFound as exc:
            if not self.optional:
                if raise_errors:
                    raise
                log.debug("informer %s: re-list failed, will retry: %s", self.name, exc)
                self._need_relist = True
                return 0
            return self._absent(exc)
        except Forbidden as exc:
            if not self.optional:
                if raise_errors:
                    raise
                log.debug("informer %s: re-list refused, will retry: %s", self.name, exc)
                self._need_relist = True
                return 0
            # an optional kind podnet may not read (a role without it): as one not
            # served, looked at again now and then, not at every pump
            return self._absent(exc)
        except ApiError as exc:
            if raise_errors:
                raise
            log.debug("informer %s: re-list failed, will retry: %s", self.name, exc)
            self._need_relist = True
            return 0
        if self._absent_until is not None:
            log.info("informer %s: %s is served now", self.name, self.kind)
            self._absent_until = None
        changed = 0
        with self._lock:
            # the list replaces the cache, whatever the versions: it is at least as new
            # as every write that finished before it was asked for. A write of ours that
            # raced it may be reverted for a moment; its watch event brings it back.
            if self._seen:  # a re-list: what it no longer has goes (a first one has none)
                fresh = {item.key for item in result.items}
                for key in [k for k in self._seen if k not in fresh]:
                    changed += self._drop(key)
            self._expected.clear()
            self._tombstones.clear()
            for item in result.items:
                changed += self._store(item)
            self._rv = result.resource_version
            self._synced = True
            self._need_relist = False
        self._open_watch()  # on a refusal the next pump re-lists
        return changed

    def _absent(self, exc: ApiError) -> int:
        """The optional kind is not served: an empty cache, synced (nothing of it
        exists), listed again later."""
        if self._absent_until is None:
            log.info("informer %s: %s is not served (%s); empty until it is", self.name,
                     self.kind, exc)
        self._absent_until = time.monotonic() + ABSENT_RELIST
        changed = 0
        with self._lock:
            for key in list(self._seen):
                changed += self._drop(key)
            self._synced = True
            self._need_relist = False
        return changed

    def _open_watch(self) -> bool:
        """Open the watch from the last resourceVersion; True when it failed and the
        cache must be re-listed.

        Any refusal means re-list, not only 410: a server restored with lower versions
        refuses ours as too large, and one that went down may come back with another
        history, where our version means something else or nothing.
        """
        try:
            self._watch = self.cluster.watch(
                self.kind,
                self._rv,
                self._namespace,
                self._label_selector,
                self._field_selector,
            )
        except Gone:
            log.debug("informer %s: resourceVersion %s expired, re-listing", self.name, self._rv)
            self._need_relist = True
            return True
        except ApiError as exc:
            log.debug("informer %s: watch failed, re-listing: %s", self.name, exc)
            self._need_relist = True
            return True
        return False

    def pump(self, timeout: float = 0.0) -> int:
        """Process what the watch has (waiting up to ``timeout``); returns changes applied."""
        watch = self._watch
        if (timeout <= 0 and watch is not None and watch.idle and self._synced
                and not self._need_relist):
            # nothing to take and no wait asked for: no locks (a step pumps every cache,
            # and most have nothing)
            return 0
        if self._stopped.is_set():
            return 0
        absent = self._absent_until
        if absent is not None and time.monotonic() < absent:
            return 0  # not served: nothing to watch until the next look
        with self._pump_lock:
            if not self._synced or self._need_relist or absent is not None:
                return self._relist()
            if self._watch is None and self._open_watch():
                return self._relist()
            applied = 0
            # at most twice: a watch found closed is reopened and what the new one has
            # already (writes made while none was open) is applied in this same pump, so
            # a pump that changed nothing means the cache is as new as the server's history
            for _ in range(2):
                watch = self._watch
                if watch is None:
                    return applied
                try:
                    events = watch.poll(timeout)
                except Gone:
                    return applied + self._relist()
                except ApiError as exc:
                    log.debug("informer %s: watch broke, re-listing: %s", self.name, exc)
                    watch.stop()
                    self._watch = None
                    self._need_relist = True
                    return applied
                with self._lock:
                    for ev in events:
                        rv = (ev.object.get("metadata") or {}).get("resourceVersion")
                        if ev.type != "BOOKMARK" and self._apply(ev.type, ev.object):
                            applied += 1
                        if rv:
                            self._rv = str(rv)
                if not watch.closed or self._stopped.is_set():
                    return applied
                # it gave us all it had; pick up from the last resourceVersion seen
                self._watch = None
                if self._open_watch():
                    return applied + self._relist()
                timeout = 0.0  # the new watch's backlog: no waiting for more
            return applied

    def run(self, stop: threading.Event, poll_interval: float = 0.5,
            on_turn: Callable[[], None] | None = None) -> None:
        """Follow the cluster until ``stop`` (or :meth:`stop`) is set; for a thread.
        ``on_turn`` is called at each turn of the loop (a liveness check's witness)."""
        while not stop.is_set() and not self._stopped.is_set():
            if on_turn is not None:
                on_turn()
            try:
                self.pump(timeout=poll_interval)
            except Exception:
                log.exception("informer %s: pump failed", self.name)
                stop.wait(poll_interval)
                continue
            if self._watch is None:
                stop.wait(poll_interval)  # the server refuses us: don't spin

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            watch, self._watch = self._watch, None
        if watch is not None:
            watch.stop()
