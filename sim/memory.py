# Over 800 lines on purpose: it is one class, InMemoryCluster, whose every operation works
# on the same store, resourceVersion counter, watch history and lock, and whose deletes do
# in the same call what upstream's garbage collector, kubelet and namespace controller do
# a moment later. Split across modules, each part would reach into the others' private
# state; Faults and MemoryWatch, the parts that stand alone, are small.
"""An in-memory API server: the Cluster port with the semantics controllers trip over.

What it keeps faithful, because podnet's correctness depends on it:

* one global resourceVersion counter (as etcd) and optimistic concurrency on writes;
* the status subresource: ``update`` cannot change status, ``update_status`` only can;
* finalizers: delete only marks ``deletionTimestamp`` until the last finalizer goes;
  a strategic-merge patch that omits a finalizer keeps it (lists merge as a union);
* pod graceful deletion: a pod deleted without a grace period stays Terminating for its
  ``spec.terminationGracePeriodSeconds`` (30 by default) until the kubelet confirms with
  grace 0; nobody plays the kubelet unless ``kubelet_finish_after`` says so (seconds after
  which a terminating pod is confirmed, 0: at once) or :meth:`InMemoryCluster.finish_terminating`
  is called;
* namespace lifecycle: a deleted namespace is Terminating (``status.phase``) while its
  contents are deleted, then goes; a create into it is 403 Forbidden, and with
  ``require_namespaces`` a create into a namespace that does not exist is 404;
* owner-reference garbage collection, by the delete's propagation policy: ``Background``
  (the default) deletes the dependents once their owners are gone, ``Orphan`` keeps them
  and strips the owner's references, ``Foreground`` keeps the owner (with the
  ``foregroundDeletion`` finalizer) until the dependents that ``blockOwnerDeletion`` are
  gone (and deletes dependents that own others in the foreground too); what upstream's
  garbage collector does a moment later is done in the same call;
* watches that replay from a resourceVersion, answer 410 Gone once history is
  compacted, deliver objects that leave a selector as DELETED, and carry bookmarks.

Objects are stored as plain JSON-shaped dicts and never mutated once stored (every
write builds a new dict), so stored versions can share unchanged subtrees and watch
history can hold references instead of copies. Callers always get copies.

``faults`` injects conflicts, 500s, one-off failures, dropped watches and compaction
for the chaos harness; ``stats`` counts calls by (operation, plural).
"""

from __future__ import annotations

import bisect
import builtins
import contextlib
import heapq
import random
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

import attrs

from podnet.core.clock import Clock, SystemClock, format_time, parse_time
from podnet.core.cluster.events import EventCorrelator
from podnet.core.cluster.patch import (
    PRIMITIVE,
    MergeRules,
    clone,
    clone_obj,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from podnet.core.cluster.port import (
    EVENT,
    IP_POOL,
    NAMESPACE,
    NODE,
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    SECURITY_GROUP,
    SUBNET,
    AlreadyExists,
    ApiError,
    Conflict,
    Fields,
    Forbidden,
    Gone,
    Invalid,
    Kind,
    ListResult,
    NotFound,
    Obj,
    Propagation,
    TooLargeResourceVersion,
    WatchEvent,
    WatchType,
    events_until_closed,
)
from podnet.core.cluster.selectors import (
    FieldSelector,
    LabelSelector,
    parse_field_selector,
    parse_label_selector,
)

if TYPE_CHECKING:
    from podnet.core.cluster.port import Cluster

__all__ = [
    "DEFAULT_TERMINATION_GRACE",
    "FOREGROUND_FINALIZER",
    "PROPAGATION_POLICIES",
    "STATUS_SUBRESOURCE",
    "Admission",
    "Faults",
    "InMemoryCluster",
    "MemoryWatch",
    "Propagation",
]

#: A pod's ``spec.terminationGracePeriodSeconds`` when it does not say (the API's default).
DEFAULT_TERMINATION_GRACE: Final = 30

#: API groups served as custom resources (CRDs), whose strategy differs from built-ins'.
CUSTOM_GROUPS: Final = frozenset({"podnet.io", "k8s.cni.cncf.io", "kubevirt.io"})

#: The finalizer a foreground delete puts on the owner (metav1.FinalizerDeleteDependents).
FOREGROUND_FINALIZER: Final = "foregroundDeletion"

PROPAGATION_POLICIES: Final = ("Orphan", "Background", "Foreground")

#: Kinds whose status is written only through the status subresource.
STATUS_SUBRESOURCE: Final = frozenset({POD, NODE, POD_NETWORK, NODE_NETWORK, SUBNET, IP_POOL,
                                       SECURITY_GROUP})

OPS: Final = frozenset(
    {"create", "update", "update_status", "patch", "delete", "get", "list", "watch"}
)

_COMMON_RULES: Final[dict[tuple[str, ...], str]] = {
    ("metadata", "finalizers"): PRIMITIVE,
    ("metadata", "ownerReferences"): "uid",
}

#: Strategic-merge keys per kind (the patchMergeKey tags of the upstream Go types).
MERGE_RULES: Final[dict[Kind, MergeRules]] = {
    POD: {
        **_COMMON_RULES,
        ("spec", "containers"): "name",
        ("spec", "initContainers"): "name",
        ("spec", "containers", "env"): "name",
        ("spec", "containers", "ports"): "containerPort",
        ("spec", "containers", "volumeMounts"): "mountPath",
        ("spec", "volumes"): "name",
        ("status", "conditions"): "type",
    },
    NODE: {
        **_COMMON_RULES,
        ("status", "conditions"): "type",
        ("status", "addresses"): "type",
    },
}

#: A write's check: (kind, the object to store, the stored one or None, subresource) ->
#: the object to store instead (see InMemoryCluster.admission)
Admission = Callable[[Kind, Obj, Obj | None, str | None], Obj]

# what upstream's names.SimpleNameGenerator draws from
_NAME_ALPHABET: Final = "bcdfghjklmnpqrstvwxz2456789"
_CONFLICT_MESSAGE: Final = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


#: Built-in API groups whose registry strategies keep ``metadata.generation`` (v1.32: the
#: apps workloads and networking.k8s.io's NetworkPolicy; core/v1 kinds, leases and events
#: have none; pods only from v1.33).
GENERATION_GROUPS: Final = frozenset({"apps", "networking.k8s.io"})


def _keeps_generation(kind: Kind) -> bool:
    """Whether upstream v1.32's strategy for ``kind`` sets ``metadata.generation``: custom
    resources always (customResourceStrategy.PrepareForCreate), the apps workloads
    (pkg/registry/apps/*/strategy.go), NetworkPolicy (pkg/registry/networking/
    networkpolicy/strategy.go: 1 on create, +1 when ``spec`` changes); not pods, nodes,
    namespaces, configmaps, secrets, services, serviceaccounts, events or leases."""
    return kind.group in CUSTOM_GROUPS or kind.group in GENERATION_GROUPS


def _spec_view(kind: Kind, obj: Obj) -> Any:
    """What a change of bumps the generation: the apps and NetworkPolicy strategies compare
    ``spec``; the custom resource strategy everything but metadata (and status, with a
    status subresource)."""
    if kind.group not in CUSTOM_GROUPS:
        return obj.get("spec")
    skip = ("metadata", "status", "apiVersion", "kind") if kind in STATUS_SUBRESOURCE else (
        "metadata", "apiVersion", "kind")
    return {k: v for k, v in obj.items() if k not in skip}


def _default_grace(pod: Obj) -> int:
    """The grace a delete without one gives ``pod``: upstream's pod strategy
    (``CheckGracefulDelete``) takes ``spec.terminationGracePeriodSeconds``, but 0 for a pod
    no node runs (unscheduled) or one that is already terminal."""
    spec = pod.get("spec") or {}
    phase = (pod.get("status") or {}).get("phase")
    if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
        return 0
    grace = spec.get("terminationGracePeriodSeconds")
    return grace if isinstance(grace, int) and grace >= 0 else DEFAULT_TERMINATION_GRACE


def _owner_uids(meta: Mapping[str, Any]) -> list[str]:
    refs = meta.get("ownerReferences") or []
    return [r["uid"] for r in refs if isinstance(r, dict) and isinstance(r.get("uid"), str)]


@attrs.define
class _PlannedFailure:
    op: str
    kind: Kind | None
    exc: Exception
    remaining: int


@attrs.define(eq=False)
class Faults:
    """Chaos knobs. Rates draw from ``rng`` (seeded by the cluster) only when non-zero."""

    _cluster: InMemoryCluster = attrs.field(repr=False)
    rng: random.Random
    conflict_rate: float = 0.0
    error_rate: float = 0.0
    _planned: list[_PlannedFailure] = attrs.field(factory=list)

    def fail_next(self, op: str, kind: Kind | None, exc: Exception, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``op`` on ``kind`` (None: any) with ``exc``."""
        if op not in OPS:
            raise ValueError(f"unknown operation {op!r}; expected one of {sorted(OPS)}")
        if times > 0:
            with self._cluster._lock:
                self._planned.append(_PlannedFailure(op, kind, exc, times))

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """No fault while inside: the rates off, and the failures planned for the next
        calls kept for the calls after (a test driver's own calls are not the engine's)."""
        with self._cluster._lock:
            saved = self.conflict_rate, self.error_rate, self._planned
            self.conflict_rate = self.error_rate = 0.0
            self._planned = []
        try:
            yield
        finally:
            with self._cluster._lock:
                self.conflict_rate, self.error_rate = saved[0], saved[1]
                self._planned = saved[2] + self._planned

    def drop_watches(self) -> int:
        """Close every open watch, as an API server restart would; returns how many."""
        return self._cluster._drop_watches()

    def compact(self) -> None:
        """Forget all watch history: a watch from any older resourceVersion gets Gone."""
        self._cluster._compact()

    def restart_empty(self) -> None:
        """Lose every object and start the resourceVersions over, as a stateless API
        server restarting (or etcd restored from an empty snapshot) does."""
        self._cluster._restart_empty()

    def clear(self) -> None:
        with self._cluster._lock:
            self.conflict_rate = 0.0
            self.error_rate = 0.0
            self._planned.clear()

    def _check(self, op: str, kind: Kind) -> None:
        """Raise the fault due for this call, if any (called under the cluster lock)."""
        for i, planned in enumerate(self._planned):
            if planned.op == op and (planned.kind is None or planned.kind == kind):
                planned.remaining -= 1
                if planned.remaining <= 0:
                    del self._planned[i]
                raise planned.exc
        if self.error_rate > 0 and self.rng.random() < self.error_rate:
            raise ApiError(f"injected fault: {op} {kind.plural} failed")
        if (
            op in ("update", "update_status", "patch")
            and self.conflict_rate > 0
            and self.rng.random() < self.conflict_rate
        ):
            raise Conflict(f"injected fault: {_CONFLICT_MESSAGE}")


class _Record(NamedTuple):
    """One write, as kept in the watch history (a tuple: thousands are made per second)."""

    rv: int
    kind: Kind
    type: WatchType
    obj: Obj
    old: Obj | None  # the version before (MODIFIED, DELETED): for selectors and snapshots


class MemoryWatch:
    """A watch on one kind; events are queued by the cluster as writes happen."""

    def __init__(
        self,
        cluster: InMemoryCluster,
        kind: Kind,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        deadline: float | None,
        allow_bookmarks: bool,
        limit: int,
    ) -> None:
        self._cluster = cluster
        self._cond = cluster._cond
        self.kind = kind
        self._namespace = namespace
        self._labels = labels
        self._fields = fields
        self._deadline = deadline
        self.allow_bookmarks = allow_bookmarks
        self._limit = limit
        self._queue: deque[tuple[WatchType, Obj]] = deque()
        self._closed = False

    def _matches(self, obj: Obj) -> bool:
        meta = obj["metadata"]
        if self._namespace is not None and meta.get("namespace") != self._namespace:
            return False
        return self._labels.matches(meta.get("labels")) and self._fields.matches(obj)

    def _offer(self, rec: _Record) -> None:
        """Queue ``rec`` as this watch sees it (cluster lock held)."""
        if self._closed or self._expired():
            return
        if rec.type == "MODIFIED" and rec.old is not None:
            now_in, was_in = self._matches(rec.obj), self._matches(rec.old)
            if now_in:
                self._push("MODIFIED" if was_in else "ADDED", rec.obj)
            elif was_in:
                # left the selector: upstream sends the previous content at the new RV
                gone = {**rec.old, "metadata": {**rec.old["metadata"]}}
                gone["metadata"]["resourceVersion"] = str(rec.rv)
                self._push("DELETED", gone)
        elif self._matches(rec.obj):
            self._push(rec.type, rec.obj)

    def _push(self, type_: WatchType, obj: Obj) -> None:
        if len(self._queue) >= self._limit:
            # a consumer this far behind is cut off, as the real watch cache does; it
            # re-watches from its last resourceVersion (or re-lists on Gone)
            self._queue.clear()
            self._close()
            return
        self._queue.append((type_, obj))

    def _expired(self) -> bool:
        if self._deadline is not None and time.monotonic() >= self._deadline:
            self._close()
            return True
        return False

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cluster._unregister(self)
            self._cond.notify_all()

    def poll(self, timeout: float = 0.0) -> list[WatchEvent]:
        with self._cond:
            end = time.monotonic() + max(timeout, 0.0)
            while not self._queue and not self._closed and not self._expired():
                wait = end - time.monotonic()
                if self._deadline is not None:
                    wait = min(wait, self._deadline - time.monotonic())
                if wait <= 0:
                    break
                self._cond.wait(wait)
            taken = list(self._queue)
            self._queue.clear()
        # stored objects are immutable, so copying can happen outside the lock
        return [WatchEvent(t, clone_obj(o)) for t, o in taken]

    def __iter__(self) -> Iterator[WatchEvent]:
        return events_until_closed(self)

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed or self._expired()

    @property
    def idle(self) -> bool:
        deadline = self._deadline
        return not (self._queue or self._closed
                    or (deadline is not None and time.monotonic() >= deadline))

    def stop(self) -> None:
        with self._cond:
            self._close()


class InMemoryCluster:
    """A thread-safe, in-process API server for tests, the simulator and benchmarks."""

    def __init__(self, clock: Clock | None = None, history: int = 10000, seed: int = 0,
                 kubelet_finish_after: float | None = None,
                 require_namespaces: bool = False) -> None:
        self.clock: Clock = clock or SystemClock()
        #: the kubelet stand-in: confirm a terminating pod (delete it with grace 0) this
        #: many seconds after it was marked (at the latest when its grace period ends);
        #: None: nobody does, the pod stays Terminating (a cluster without kubelets)
        self.kubelet_finish_after = kubelet_finish_after
        self._terminating: list[tuple[float, str]] = []  # (due, pod uid), a heap
        self._dry = False  # inside dry_run(): writes are checked and answered, not stored
        self._admission: Admission | None = None  # inside admission(): each write's check
        #: a create into a namespace that does not exist answers 404, as upstream's
        #: NamespaceLifecycle admission does (off: in-process tests skip making them)
        self.require_namespaces = require_namespaces
        self._ending_namespaces: set[str] = set()  # deleted, waiting for their contents
        self._ns_queue: deque[str] = deque()  # of those, namespaces that lost an object
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._ids = random.Random(seed)
        self.faults = Faults(self, random.Random(f"faults/{seed}"))
        self.stats: Counter[tuple[str, str]] = Counter()
        # kind -> namespace ("" when cluster-scoped) -> name -> object
        self._store: dict[Kind, dict[str, dict[str, Obj]]] = {}
        # (kind, namespace) -> a count bumped whenever a name comes or goes, and the
        # bucket's names sorted as of that count: a big list is hundreds of pages, and
        # sorting 150,000 names for each of them made serving it quadratic
        self._names_changed: dict[tuple[Kind, str], int] = {}
        self._sorted: dict[tuple[Kind, str], tuple[dict[str, Obj], int, builtins.list[str]]] = {}
        self._by_uid: dict[str, tuple[Kind, str, str]] = {}
        self._dependents: dict[str, set[str]] = {}  # owner uid -> dependent uids
        # the client side of emit_event: what it writes is stored like any other write
        self._events = EventCorrelator(self._create_event, self._patch_event, self.clock)
        self._rv = 1  # as a fresh etcd: a list never answers "0", which watch reads as "now"
        self._history: deque[_Record] = deque()
        self._history_limit = max(1, history)
        self._compacted_rv = 0  # events up to this RV may be missing from history
        self._watches: dict[Kind, set[MemoryWatch]] = {}
        self._gc_queue: deque[str] = deque()
        self._foreground: set[str] = set()  # owners waiting for their dependents to go
        self._fg_queue: deque[str] = deque()  # of those, owners that lost a dependent

    # --- small helpers -------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._rv)

    def count(self, kind: Kind) -> int:
        with self._lock:
            return sum(len(b) for b in self._store.get(kind, {}).values())

    def _begin(self, op: str, kind: Kind) -> None:
        if (self._terminating and not self._dry
                and self._terminating[0][0] <= self.clock.monotonic()):
            self._kubelet_due()
        self.stats[(op, kind.plural)] += 1
        self.faults._check(op, kind)

    def _namespace(self, kind: Kind, namespace: str | None) -> str:
        if not kind.namespaced:
            return ""  # upstream ignores a namespace on cluster-scoped kinds
        if not namespace:
            raise Invalid(f"{kind.plural} are namespaced: metadata.namespace is required")
        return namespace

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _new_uid(self) -> str:
        return str(uuid.UUID(int=self._ids.getrandbits(128), version=4))

    def _find(self, kind: Kind, name: str, namespace: str | None) -> Obj:
        ns = self._namespace(kind, namespace)
        obj = self._store.get(kind, {}).get(ns, {}).get(name)
        if obj is None:
            where = f" in namespace {ns!r}" if ns else ""
            raise NotFound(f'{kind.plural} "{name}" not found{where}')
        return obj

    def _meta_of(self, obj: Any) -> dict[str, Any]:
        if not isinstance(obj, Mapping):
            raise Invalid("object must be a JSON object")
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            raise Invalid("metadata: Required value")
        return meta

    # --- history and watchers ------------------------------------------------------

    def _record(self, kind: Kind, type_: WatchType, obj: Obj, old: Obj | None = None) -> None:
        rec = _Record(int(obj["metadata"]["resourceVersion"]), kind, type_, obj, old)
        if len(self._history) >= self._history_limit:
            self._compacted_rv = self._history.popleft().rv
        self._history.append(rec)
        watches = self._watches.get(kind)
        if watches:
            for w in list(watches):
                w._offer(rec)
            self._cond.notify_all()

    def _unregister(self, w: MemoryWatch) -> None:
        ws = self._watches.get(w.kind)
        if ws is not None:
            ws.discard(w)

    def _drop_watches(self) -> int:
        with self._lock:
            open_ = [w for ws in self._watches.values() for w in ws]
            for w in open_:
                w._close()
            self._cond.notify_all()
            return len(open_)

    def _restart_empty(self) -> None:
        with self._lock:
            self._drop_watches()
            self._store.clear()
            self._sorted.clear()
            self._by_uid.clear()
            self._dependents.clear()
            self._history.clear()
            self._gc_queue.clear()
            self._foreground.clear()
            self._fg_queue.clear()
            self._ending_namespaces.clear()
            self._ns_queue.clear()
            self._terminating.clear()
            self._compacted_rv = 0
            self._rv = 1

    def _compact(self) -> None:
        with self._lock:
            self._history.clear()
            self._compacted_rv = self._rv

    def bookmark(self) -> None:
        """Send a BOOKMARK at the current resourceVersion to watches that allow them."""
        with self._lock:
            rv = str(self._rv)
            for kind, ws in self._watches.items():
                mark: Obj = {
                    "kind": kind.kind,
                    "apiVersion": kind.api_version,
                    "metadata": {"resourceVersion": rv},
                }
                for w in list(ws):
                    if w.allow_bookmarks and not w._expired():
                        w._push("BOOKMARK", mark)
            self._cond.notify_all()

    # --- indexes -------------------------------------------------------------------

    def _index(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        uid = meta["uid"]
        self._by_uid[uid] = (kind, meta.get("namespace", ""), meta["name"])
        for owner in _owner_uids(meta):
            self._dependents.setdefault(owner, set()).add(uid)

    def _unindex_owners(self, meta: Mapping[str, Any]) -> None:
        uid = meta["uid"]
        for owner in _owner_uids(meta):
            deps = self._dependents.get(owner)
            if deps is not None:
                deps.discard(uid)
                if not deps:
                    del self._dependents[owner]

    def _put(self, kind: Kind, obj: Obj) -> None:
        meta = obj["metadata"]
        ns, name = meta.get("namespace", ""), meta["name"]
        bucket = self._store.setdefault(kind, {}).setdefault(ns, {})
        if name not in bucket:
            self._names_changed[(kind, ns)] = self._names_changed.get((kind, ns), 0) + 1
        bucket[name] = obj

    def _sorted_names(self, kind: Kind, ns: str, bucket: dict[str, Obj]) -> builtins.list[str]:
        """``bucket``'s names in order (lock held; the list is shared: not to be changed),
        sorted once for as long as no name of the store's bucket comes or goes."""
        key = (kind, ns)
        changed = self._names_changed.get(key, 0)
        cached = self._sorted.get(key)
        if cached is not None and cached[0] is bucket and cached[1] == changed:
            return cached[2]
        names = sorted(bucket)
        if bucket is self._store.get(kind, {}).get(ns):  # not a snapshot's copy
            self._sorted[key] = (bucket, changed, names)
        return names

    # --- reads ---------------------------------------------------------------------

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        with self._lock:
            self._begin("get", kind)
            obj = self._find(kind, name, namespace)
        return clone_obj(obj)

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[Obj], Any] | None = None,
        *,
        resource_version: str | None = None,
        fields: Fields | None = None,
    ) -> ListResult:
        """List (see the Cluster port; ``fields`` changes nothing: each object is given
        whole, which the port allows); with ``resource_version``, the objects as they were
        at exactly that resourceVersion (upstream's ``resourceVersionMatch=Exact``, and
        how it serves a ``continue`` page): Gone once history before it is compacted."""
        with self._lock:
            self._begin("list", kind)
            labels = parse_label_selector(label_selector)
            selector = parse_field_selector(field_selector, kind)
            buckets, spaces = self._spaces(kind, namespace, resource_version)
            items: list[Obj] = []
            for ns in spaces:
                bucket = buckets[ns]
                for name in sorted(bucket):
                    obj = bucket[name]
                    if (labels.empty or labels.matches(obj["metadata"].get("labels"))) and (
                        selector.empty or selector.matches(obj)
                    ):
                        items.append(obj)
            rv = str(self._rv) if resource_version is None else resource_version
        if transform is not None:
            return ListResult([transform(clone_obj(o)) for o in items], rv)
        return ListResult([clone_obj(o) for o in items], rv)

    def _spaces(self, kind: Kind, namespace: str | None, resource_version: str | None
                ) -> tuple[dict[str, dict[str, Obj]], builtins.list[str]]:
        """The buckets of ``kind`` (now, or at ``resource_version``) and the namespaces a
        list of ``namespace`` (None: all) reads from them, in order (lock held)."""
        if resource_version is None:
            buckets = self._store.get(kind, {})
        else:
            buckets = self._snapshot(kind, resource_version)
        if namespace and kind.namespaced:
            return buckets, [namespace] if namespace in buckets else []
        return buckets, sorted(buckets)

    def _snapshot(self, kind: Kind, resource_version: str) -> dict[str, dict[str, Obj]]:
        """The store of ``kind`` at ``resource_version``: today's, with the writes after it
        undone from the history, newest first (lock held)."""
        try:
            at = int(resource_version)
        except (TypeError, ValueError):
            raise Invalid(f"invalid resourceVersion {resource_version!r}") from None
        if at < self._compacted_rv:
            raise Gone(f"too old resource version: {at} ({self._compacted_rv + 1})")
        if at > self._rv:
            raise TooLargeResourceVersion(f"Too large resource version: {at}, current: {self._rv}")
        stored = self._store.get(kind, {})
        buckets: dict[str, dict[str, Obj]] | None = None  # copied once something differs
        for rec in reversed(self._history):
            if rec.rv <= at:
                break
            if rec.kind != kind:
                continue
            if buckets is None:
                buckets = {ns: dict(bucket) for ns, bucket in stored.items()}
            meta = rec.obj["metadata"]
            bucket = buckets.setdefault(meta.get("namespace", ""), {})
            if rec.old is None:  # created after: not there yet
                bucket.pop(meta["name"], None)
            else:  # modified or deleted after: as it was before
                bucket[meta["name"]] = rec.old
        if buckets is None:
            return stored
        return {ns: bucket for ns, bucket in buckets.items() if bucket}

    def list_page(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        *,
        after: str = "",
        limit: int = 0,
        resource_version: str | None = None,
        copy: bool = True,
    ) -> tuple[ListResult, int]:
        """One page of :meth:`list`: the objects whose ``namespace/name`` key sorts after
        ``after``, at most ``limit`` of them (0: every one), and how many more match
        (without selectors; with them, 1 when there is at least one more); with
        ``resource_version``, as they were then (see :meth:`list`). Only the page is
        copied: serving a big list page by page stays linear. ``copy=False``: the stored
        objects themselves, which the caller must not change (the API emulator encodes
        them, see ``podnet.sim.encoded``)."""
        with self._lock:
            self._begin("list", kind)
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, kind)
            selected = not (labels.empty and fields.empty)
            buckets, spaces = self._spaces(kind, namespace, resource_version)
            page: list[Obj] = []
            more = 0
            for ns in spaces:
                bucket = buckets[ns]
                prefix = f"{ns}/"
                names = self._sorted_names(kind, ns, bucket)
                first = 0
                if after.startswith(prefix):
                    first = bisect.bisect_right(names, after[len(prefix):])
                elif after:
                    names = [n for n in names if prefix + n > after]
                for i in range(first, len(names)):
                    name = names[i]
                    if limit > 0 and len(page) >= limit and not selected:
                        more += len(names) - i
                        break
                    obj = bucket[name]
                    if (labels.empty or labels.matches(obj["metadata"].get("labels"))) and (
                        fields.empty or fields.matches(obj)
                    ):
                        if limit > 0 and len(page) >= limit:
                            more = 1
                            break
                        page.append(obj)
                if selected and more:
                    break
            rv = str(self._rv) if resource_version is None else resource_version
        return ListResult([clone_obj(o) for o in page] if copy else page, rv), more

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
        allow_bookmarks: bool = True,
    ) -> MemoryWatch:
        with self._lock:
            self._begin("watch", kind)
            labels = parse_label_selector(label_selector)
            fields = parse_field_selector(field_selector, kind)
            if resource_version in ("", "0"):
                start = self._rv
            else:
                try:
                    start = int(resource_version)
                except (TypeError, ValueError):
                    raise Invalid(f"invalid resourceVersion {resource_version!r}") from None
                if start < self._compacted_rv:
                    raise Gone(f"too old resource version: {start} ({self._compacted_rv + 1})")
                if start > self._rv:
                    # upstream waits a few seconds for its cache to catch up, then says so
                    raise TooLargeResourceVersion(
                        f"Too large resource version: {start}, current: {self._rv}")
            deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
            w = MemoryWatch(
                self,
                kind,
                namespace if kind.namespaced and namespace else None,
                labels,
                fields,
                deadline,
                allow_bookmarks,
                self._history_limit,
            )
            if resource_version in ("", "0"):
                # "any version": upstream starts with every current object as ADDED
                for bucket in self._store.get(kind, {}).values():
                    for obj in bucket.values():
                        w._offer(_Record(self._rv, kind, "ADDED", obj, None))
            backlog: list[_Record] = []
            for rec in reversed(self._history):
                if rec.rv <= start:
                    break
                if rec.kind == kind:
                    backlog.append(rec)
            for rec in reversed(backlog):
                w._offer(rec)
            self._watches.setdefault(kind, set()).add(w)
            return w

    # --- writes --------------------------------------------------------------------

    def create(self, kind: Kind, obj: Obj) -> Obj:
        with self._lock:
            self._begin("create", kind)
            new = self._create(kind, obj)
        return clone_obj(new)

    def _create(self, kind: Kind, obj: Obj) -> Obj:
        """Store a new object (lock held); returns what was stored."""
        new = clone_obj(obj)
        meta = self._meta_of(new)
        if meta.get("resourceVersion"):
            raise Invalid("metadata.resourceVersion: must not be set on create")
        if meta.get("deletionTimestamp"):
            raise Invalid("metadata.deletionTimestamp: may not be set on create")
        ns = self._namespace(kind, meta.get("namespace"))
        if ns:
            self._admit_namespace(kind, ns, meta.get("name") or "")
        bucket = self._store.get(kind, {}).get(ns, {})
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise Invalid("metadata.name: Required value: name or generateName")
            name = prefix + "".join(self._ids.choice(_NAME_ALPHABET) for _ in range(5))
            while name in bucket:
                name = prefix + "".join(self._ids.choice(_NAME_ALPHABET) for _ in range(5))
        if not isinstance(name, str):
            raise Invalid("metadata.name: must be a string")
        if self._admission is not None:
            new = self._admission(kind, {**new, "metadata": {**meta, "name": name}}, None, None)
            meta = self._meta_of(new)
        if name in bucket:
            raise AlreadyExists(f'{kind.plural} "{name}" already exists')
        self._validate(meta)
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)  # omitempty, as the API serialises it
        meta["name"] = name
        if ns:
            meta["namespace"] = ns
        else:
            meta.pop("namespace", None)
        meta["uid"] = self._new_uid()
        meta["creationTimestamp"] = format_time(self.clock.now())
        if _keeps_generation(kind):
            meta["generation"] = 1
        else:
            meta.pop("generation", None)  # the strategy does not keep what a client sent
        meta.pop("deletionGracePeriodSeconds", None)
        meta["resourceVersion"] = "" if self._dry else self._next_rv()
        if kind == NAMESPACE:
            new["status"] = {**(new.get("status") or {}), "phase": "Active"}
        elif kind.group in CUSTOM_GROUPS and kind in STATUS_SUBRESOURCE:
            # upstream drops it: a custom resource's status is written through /status
            new.pop("status", None)
        # the server's apiVersion/kind win, listed first as the API prints them
        body = {k: v for k, v in new.items() if k not in ("apiVersion", "kind")}
        new = {"apiVersion": kind.api_version, "kind": kind.kind, **body}
        if self._dry:
            meta.pop("resourceVersion")
            return new
        self._put(kind, new)
        self._index(kind, new)
        self._record(kind, "ADDED", new)
        return new

    def _admit_namespace(self, kind: Kind, ns: str, name: str) -> None:
        """Upstream's NamespaceLifecycle admission for a create into ``ns``."""
        found = self._store.get(NAMESPACE, {}).get("", {}).get(ns)
        if found is None:
            if self.require_namespaces:
                raise NotFound(f'namespaces "{ns}" not found')
        elif "deletionTimestamp" in found["metadata"]:
            raise Forbidden(
                f'{kind.plural} "{name}" is forbidden: unable to create new content in '
                f"namespace {ns} because it is being terminated"
            )

    def _validate(self, meta: Mapping[str, Any]) -> None:
        fins = meta.get("finalizers")
        if fins is not None and (
            not isinstance(fins, list) or not all(isinstance(f, str) and f for f in fins)
        ):
            raise Invalid("metadata.finalizers: must be a list of non-empty strings")
        refs = meta.get("ownerReferences")
        if refs is not None:
            if not isinstance(refs, list):
                raise Invalid("metadata.ownerReferences: must be a list")
            for ref in refs:
                if not isinstance(ref, dict) or not all(
                    isinstance(ref.get(k), str) and ref.get(k)
                    for k in ("apiVersion", "kind", "name", "uid")
                ):
                    raise Invalid(
                        "metadata.ownerReferences: apiVersion, kind, name and uid are required"
                    )

    def _check_rv(self, kind: Kind, stored: Obj, rv: Any) -> None:
        if not rv:
            # upstream: built-in strategies allow an unconditional update (the last write
            # wins); the custom resource strategy does not, and answers 422
            if kind.group not in CUSTOM_GROUPS:
                return
            raise Invalid(
                f'{kind.kind}.{kind.group} "{stored["metadata"]["name"]}" is invalid: '
                "metadata.resourceVersion: Invalid value: 0: must be specified for an update"
            )
        if rv != stored["metadata"]["resourceVersion"]:
            raise Conflict(
                f'Operation cannot be fulfilled on {kind} "{stored["metadata"]["name"]}": '
                + _CONFLICT_MESSAGE
            )

    def update(self, kind: Kind, obj: Obj) -> Obj:
        with self._lock:
            self._begin("update", kind)
            meta = self._meta_of(obj)
            stored = self._find(kind, meta.get("name", ""), meta.get("namespace"))
            self._check_rv(kind, stored, meta.get("resourceVersion"))
            new = clone_obj(obj)
            if kind in STATUS_SUBRESOURCE:
                self._keep_status(new, stored)
            if self._admission is not None:
                new = self._admission(kind, new, stored, None)
            result = self._replace(kind, stored, new)
        return clone_obj(result)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        with self._lock:
            self._begin("update_status", kind)
            meta = self._meta_of(obj)
            if kind not in STATUS_SUBRESOURCE:
                raise NotFound(f"{kind.plural} have no status subresource")
            stored = self._find(kind, meta.get("name", ""), meta.get("namespace"))
            self._check_rv(kind, stored, meta.get("resourceVersion"))
            new = {**stored, "metadata": dict(stored["metadata"])}
            self._keep_status(new, obj)
            if self._admission is not None:
                new = self._admission(kind, new, stored, "status")
            result = self._replace(kind, stored, new)
        return clone_obj(result)

    @staticmethod
    def _keep_status(new: Obj, source: Mapping[str, Any]) -> None:
        if "status" in source:
            new["status"] = clone(source["status"])
        else:
            new.pop("status", None)

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "strategic"] = "merge",
        subresource: Literal["status"] | None = None,
    ) -> Obj:
        """Patch (see the Cluster port); the API emulator's admission defaults the patched
        object (``admission``), as upstream defaults what it decodes."""
        with self._lock:
            self._begin("patch", kind)
            result = self._patch(kind, name, patch, namespace, patch_type, subresource)
        return clone_obj(result)

    def _patch(
        self,
        kind: Kind,
        name: str,
        patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
        namespace: str | None,
        patch_type: Literal["merge", "json", "strategic"],
        subresource: Literal["status"] | None,
    ) -> Obj:
        """Apply a patch (lock held); returns what was stored."""
        if subresource not in (None, "status"):
            raise NotFound(f"{kind.plural} have no {subresource!r} subresource")
        if subresource == "status" and kind not in STATUS_SUBRESOURCE:
            raise NotFound(f"{kind.plural} have no status subresource")
        stored = self._find(kind, name, namespace)
        patched: Any
        if patch_type == "json":
            if not isinstance(patch, list):
                raise Invalid("a json patch is a list of operations")
            patched = json_patch(stored, patch)
        elif not isinstance(patch, Mapping):
            raise Invalid(f"a {patch_type} patch is a JSON object")
        elif patch_type == "merge":
            patched = merge_patch(stored, patch)
        elif patch_type == "strategic" and kind.group in CUSTOM_GROUPS:
            # custom resources have no strategic-merge schema: upstream answers 415
            raise ApiError("strategic merge patch is not supported for custom resources",
                           code=415)
        elif patch_type == "strategic":
            patched = strategic_merge_patch(stored, patch, MERGE_RULES.get(kind, _COMMON_RULES))
        else:
            raise Invalid(f"unsupported patch type {patch_type!r}")
        meta = self._meta_of(patched)
        rv = meta.get("resourceVersion")
        if rv is not None and rv != stored["metadata"]["resourceVersion"]:
            self._check_rv(kind, stored, rv)  # a precondition the patch carried
        if subresource == "status":
            new = {**stored, "metadata": dict(stored["metadata"])}
            self._keep_status(new, patched)
        else:
            new = patched
            if kind in STATUS_SUBRESOURCE:
                self._keep_status(new, stored)
        if self._admission is not None:
            new = self._admission(kind, new, stored, subresource)
        return self._replace(kind, stored, new)

    def _replace(self, kind: Kind, stored: Obj, new: Obj) -> Obj:
        """Store ``new`` over ``stored`` (lock held); returns what was stored."""
        old_meta = stored["metadata"]
        meta = dict(self._meta_of(new))  # a fresh dict: patches may share stored ones
        new["metadata"] = meta
        if meta.get("name") != old_meta["name"] or (
            kind.namespaced and meta.get("namespace") != old_meta.get("namespace")
        ):
            raise Invalid("metadata.name and metadata.namespace are immutable")
        for field in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if field in old_meta:
                meta[field] = old_meta[field]
            else:
                meta.pop(field, None)
        if not kind.namespaced:
            meta.pop("namespace", None)
        self._validate(meta)
        deleting = "deletionTimestamp" in old_meta
        fins: list[str] = meta.get("finalizers") or []
        old_fins: list[str] = old_meta.get("finalizers") or []
        if deleting and any(f not in old_fins for f in fins):
            raise Invalid(
                "metadata.finalizers: Forbidden: no new finalizers can be added if the "
                "object is being deleted"
            )
        if not fins:
            meta.pop("finalizers", None)
        new["apiVersion"] = kind.api_version
        new["kind"] = kind.kind
        if "generation" in old_meta and _spec_view(kind, new) != _spec_view(kind, stored):
            meta["generation"] = int(old_meta["generation"]) + 1
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == stored:
            return stored  # a no-op write keeps the resourceVersion, as etcd does
        if self._dry:
            return new
        if deleting and old_fins and not fins and not self._grace_pending(kind, meta):
            self._unindex_owners(old_meta)
            self._remove(kind, new)
            self._collect_garbage()
            return new
        meta["resourceVersion"] = self._next_rv()
        if _owner_uids(meta) != _owner_uids(old_meta):
            self._unindex_owners(old_meta)
            self._index(kind, new)
        self._put(kind, new)
        self._record(kind, "MODIFIED", new, stored)
        return new

    @staticmethod
    def _grace_pending(kind: Kind, meta: Mapping[str, Any]) -> bool:
        # only pods wait out a grace period (the kubelet confirms with grace 0)
        return kind == POD and int(meta.get("deletionGracePeriodSeconds") or 0) > 0

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: Propagation | None = None,
    ) -> None:
        """Delete (see the Cluster port); ``propagation_policy`` as DeleteOptions' (None:
        the kind's default, ``Background`` for every kind served here)."""
        if propagation_policy not in (None, *PROPAGATION_POLICIES):
            raise Invalid(
                f"propagationPolicy: Unsupported value: {propagation_policy!r}: supported "
                'values: "Foreground", "Background", "Orphan"'
            )
        with self._lock:
            self._begin("delete", kind)
            stored = self._find(kind, name, namespace)
            if uid is not None and uid != stored["metadata"]["uid"]:
                raise Conflict(
                    f'Precondition failed for {kind} "{name}": UID in precondition: {uid}, '
                    f"UID in object meta: {stored['metadata']['uid']}"
                )
            owner = stored["metadata"]["uid"]
            if kind == NAMESPACE:
                self._delete_namespace(stored)
                self._collect_garbage()
                return
            if propagation_policy == "Orphan":
                self._orphan(owner)
                stored = self._find(kind, name, namespace)
            if propagation_policy == "Foreground":
                self._delete_foreground(kind, stored, grace_period_seconds)
            else:
                self._delete(kind, stored, grace_period_seconds)
            self._collect_garbage()

    def _orphan(self, owner: str) -> None:
        """Strip ``owner`` from its dependents' ownerReferences (lock held), as upstream's
        garbage collector does for an owner deleted with the ``orphan`` finalizer."""
        for dep in sorted(self._dependents.get(owner, ())):
            where = self._by_uid.get(dep)
            if where is None:
                continue
            obj = self._store[where[0]][where[1]][where[2]]
            meta = dict(obj["metadata"])
            refs = [r for r in meta.get("ownerReferences") or () if r.get("uid") != owner]
            if refs:
                meta["ownerReferences"] = refs
            else:
                meta.pop("ownerReferences", None)
            self._replace(where[0], obj, {**obj, "metadata": meta})

    def _delete_foreground(self, kind: Kind, stored: Obj, grace: int | None) -> None:
        """Mark the owner deleting with the ``foregroundDeletion`` finalizer (even with no
        dependents: upstream's registry adds it, the garbage collector then drops it),
        delete its dependents; it goes when the blocking ones are gone (lock held). A
        dependent with dependents of its own is deleted in the foreground too, as
        upstream's garbage collector does for an owner waiting on its dependents, so a
        chain goes from its leaves up."""
        meta = stored["metadata"]
        if meta.get("deletionTimestamp"):
            self._delete(kind, stored, grace)
            return
        if kind == POD and grace is None:
            grace = _default_grace(stored)
        grace = grace or 0
        when = self.clock.now().replace(microsecond=0) + timedelta(seconds=grace)
        fins = [f for f in meta.get("finalizers") or () if f != FOREGROUND_FINALIZER]
        marked = {**stored, "metadata": {**meta, "finalizers": [*fins, FOREGROUND_FINALIZER]}}
        self._mark_deleting(kind, marked, when, grace)
        owner = meta["uid"]
        self._foreground.add(owner)
        if kind == POD and grace > 0:
            self._kubelet_schedule(owner, grace)
        for dep in sorted(self._dependents.get(owner, ())):
            where = self._by_uid.get(dep)
            if where is None:
                continue
            obj = self._store[where[0]][where[1]][where[2]]
            if self._dependents.get(dep):
                self._delete_foreground(where[0], obj, None)
            else:
                self._delete(where[0], obj, None)
        self._fg_queue.append(owner)

    def _delete_namespace(self, stored: Obj) -> None:
        """Mark the namespace Terminating and delete what it holds, as upstream's namespace
        controller does; it goes when it is empty (lock held)."""
        meta = stored["metadata"]
        name = meta["name"]
        if "deletionTimestamp" not in meta:
            now = self.clock.now().replace(microsecond=0)
            status = {**(stored.get("status") or {}), "phase": "Terminating"}
            self._mark_deleting(NAMESPACE, {**stored, "status": status}, now, 0)
            self._ending_namespaces.add(name)
        for kind in [k for k in self._store if k.namespaced]:
            for obj in list(self._store[kind].get(name, {}).values()):
                if "deletionTimestamp" not in obj["metadata"]:
                    self._delete(kind, obj, None)
        self._ns_queue.append(name)

    def _namespace_release(self, name: str) -> None:
        if name not in self._ending_namespaces:
            return
        if any(self._store[k].get(name) for k in self._store if k.namespaced):
            return
        self._ending_namespaces.discard(name)
        found = self._store.get(NAMESPACE, {}).get("", {}).get(name)
        if found is not None and not found["metadata"].get("finalizers"):
            self._remove(NAMESPACE, found)

    def _foreground_release(self, owner: str) -> None:
        """Drop the owner's ``foregroundDeletion`` finalizer once no dependent that blocks
        its deletion is left (lock held)."""
        where = self._by_uid.get(owner)
        if where is None:
            self._foreground.discard(owner)
            return
        for dep in self._dependents.get(owner, ()):
            found = self._by_uid.get(dep)
            if found is None:
                continue
            obj = self._store[found[0]][found[1]][found[2]]
            for ref in obj["metadata"].get("ownerReferences") or ():
                if ref.get("uid") == owner and ref.get("blockOwnerDeletion"):
                    return
        self._foreground.discard(owner)
        obj = self._store[where[0]][where[1]][where[2]]
        meta = dict(obj["metadata"])
        meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != FOREGROUND_FINALIZER]
        self._replace(where[0], obj, {**obj, "metadata": meta})

    def _delete(self, kind: Kind, stored: Obj, grace: int | None) -> None:
        meta = stored["metadata"]
        now = self.clock.now().replace(microsecond=0)
        marked = meta.get("deletionTimestamp")
        if kind == POD:
            if grace is None and marked and self._grace_pending(kind, meta):
                if parse_time(marked) > now:
                    return  # still terminating; the kubelet has not confirmed yet
                grace = 0
            if grace is None:
                grace = _default_grace(stored)
            if grace > 0:
                deadline = now + timedelta(seconds=grace)
                if marked and parse_time(marked) <= deadline:
                    return  # already terminating at least that fast
                self._mark_deleting(kind, stored, deadline, grace)
                self._kubelet_schedule(meta["uid"], grace)
                return
        if meta.get("finalizers"):
            if marked and not self._grace_pending(kind, meta):
                return  # deleting again changes nothing
            self._mark_deleting(kind, stored, now, 0)
            return
        if marked and kind == POD:
            # upstream's last word on a confirmed pod shows the grace it ended with: 0
            meta = {**meta, "deletionTimestamp": format_time(now), "deletionGracePeriodSeconds": 0}
            stored = {**stored, "metadata": meta}
        self._remove(kind, stored)

    @contextlib.contextmanager
    def admission(self, check: Admission) -> Iterator[None]:
        """Inside (the cluster lock held), each create, update and patch passes the object
        it would store to ``check(kind, new, stored or None, subresource)``, which answers
        the object to store or raises: an API front's validation of what a client wrote
        (in-process callers are not checked)."""
        with self._lock:
            before, self._admission = self._admission, check
            try:
                yield
            finally:
                self._admission = before

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Inside, creates, updates and patches run every check and answer what they would
        store, storing nothing (upstream's ``dryRun=All``); the cluster lock is held."""
        with self._lock:
            self._dry = True
            try:
                yield
            finally:
                self._dry = False

    # --- the kubelet stand-in -------------------------------------------------------

    def _kubelet_schedule(self, uid: str, grace: int) -> None:
        after = self.kubelet_finish_after
        if after is None:
            return
        if after <= 0:
            self._kubelet_confirm(uid)
            return
        due = self.clock.monotonic() + min(float(after), float(grace))
        heapq.heappush(self._terminating, (due, uid))

    def _kubelet_due(self) -> None:
        now = self.clock.monotonic()
        while self._terminating and self._terminating[0][0] <= now:
            self._kubelet_confirm(heapq.heappop(self._terminating)[1])
        self._collect_garbage()

    def _kubelet_confirm(self, uid: str) -> bool:
        """Delete the terminating pod ``uid`` with grace 0, as its kubelet does once the
        containers stopped (lock held); False when it is gone or not terminating."""
        where = self._by_uid.get(uid)
        if where is None or where[0] != POD:
            return False
        obj = self._store[POD][where[1]][where[2]]
        if not self._grace_pending(POD, obj["metadata"]):
            return False
        self._delete(POD, obj, 0)
        return True

    def kubelet_tick(self) -> None:
        """Confirm the terminating pods whose ``kubelet_finish_after`` has passed (they are
        also confirmed on the next call of any operation)."""
        with self._lock:
            if self._terminating:
                self._kubelet_due()

    def finish_terminating(self, namespace: str | None = None, name: str | None = None) -> int:
        """The kubelet stand-in, now: confirm every terminating pod (of ``namespace``, named
        ``name``) with grace 0; finalizers still hold them. Returns how many."""
        with self._lock:
            uids = [
                obj["metadata"]["uid"]
                for ns, bucket in self._store.get(POD, {}).items()
                if namespace is None or ns == namespace
                for pod_name, obj in bucket.items()
                if name is None or pod_name == name
            ]
            done = sum(self._kubelet_confirm(uid) for uid in uids)
            self._collect_garbage()
            return done

    def _mark_deleting(self, kind: Kind, stored: Obj, when: datetime, grace: int) -> None:
        # (``stored`` may carry changes not stored yet: a foreground delete's finalizer, a
        # namespace's phase; the history keeps what was stored, for snapshots and selectors)
        before = self._stored(kind, stored)
        meta = {
            **stored["metadata"],
            "deletionTimestamp": format_time(when),
            "deletionGracePeriodSeconds": grace,
            "resourceVersion": self._next_rv(),
        }
        if int(meta.get("generation") or 0) > 0:
            # upstream's store bumps it when a delete starts (BeforeDelete's graceful path)
            meta["generation"] = int(meta["generation"]) + 1
        new = {**stored, "metadata": meta}
        self._put(kind, new)
        self._record(kind, "MODIFIED", new, before)

    def _stored(self, kind: Kind, obj: Obj) -> Obj:
        meta = obj["metadata"]
        found = self._store.get(kind, {}).get(meta.get("namespace", ""), {}).get(meta["name"])
        return obj if found is None else found

    def _remove(self, kind: Kind, obj: Obj) -> None:
        """Drop ``obj`` for real: DELETED at a new RV, then queue its dependents for GC."""
        meta = obj["metadata"]
        ns = meta.get("namespace", "")
        buckets = self._store.get(kind, {})
        bucket = buckets.get(ns, {})
        before = bucket.pop(meta["name"], None) or obj
        self._names_changed[(kind, ns)] = self._names_changed.get((kind, ns), 0) + 1
        if not bucket:
            buckets.pop(ns, None)
            self._sorted.pop((kind, ns), None)
        self._by_uid.pop(meta["uid"], None)
        if self._foreground:
            self._fg_queue.extend(o for o in _owner_uids(meta) if o in self._foreground)
        if ns and ns in self._ending_namespaces:
            self._ns_queue.append(ns)
        self._unindex_owners(meta)
        final = {**obj, "metadata": {**meta, "resourceVersion": self._next_rv()}}
        self._record(kind, "DELETED", final, before)
        self._gc_queue.append(meta["uid"])

    def _collect_garbage(self) -> None:
        """Background propagation: delete dependents whose owners are all gone; release
        foreground owners whose blocking dependents are gone."""
        while self._gc_queue or self._fg_queue or self._ns_queue:
            if not self._gc_queue:
                if self._fg_queue:
                    self._foreground_release(self._fg_queue.popleft())
                else:
                    self._namespace_release(self._ns_queue.popleft())
                continue
            owner = self._gc_queue.popleft()
            for dep in sorted(self._dependents.pop(owner, ())):
                where = self._by_uid.get(dep)
                if where is None:
                    continue
                kind, ns, name = where
                obj = self._store[kind][ns][name]
                if any(o in self._by_uid for o in _owner_uids(obj["metadata"])):
                    continue
                self._delete(kind, obj, None)

    # --- events --------------------------------------------------------------------

    def emit_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> None:
        """Record an Event through the client's correlator (``events.py``): what it writes
        is stored as any create or patch is; the store merges nothing. Counted once in
        ``stats``, as ``emit_event``; ``faults`` leave Events alone (they are best effort,
        and the chaos harness aims at the writes that matter)."""
        with self._lock:
            self.stats[("emit_event", EVENT.plural)] += 1
        self._events.record(involved, reason, message, type)

    def _create_event(self, event: Obj) -> Obj:
        with self._lock:
            return self._create(EVENT, event)

    def _patch_event(self, namespace: str, name: str, patch: Obj) -> Obj:
        with self._lock:
            return self._patch(EVENT, name, patch, namespace, "merge", None)

    def events_for(
        self, involved: Obj | str, namespace: str | None = None, reason: str | None = None
    ) -> builtins.list[Obj]:
        """Events about an object (matched by uid) or a name, oldest first; for tests."""
        uid: str | None
        name: str | None
        if isinstance(involved, str):
            uid, name = None, involved
        else:
            meta = involved.get("metadata") or {}
            uid, name = meta.get("uid"), meta.get("name")
            namespace = namespace or meta.get("namespace")
        with self._lock:
            found: builtins.list[Obj] = []
            for ns, bucket in self._store.get(EVENT, {}).items():
                if namespace and ns != namespace:
                    continue
                for ev in bucket.values():
                    ref = ev.get("involvedObject") or {}
                    if uid is not None and ref.get("uid") != uid:
                        continue
                    if uid is None and ref.get("name") != name:
                        continue
                    if reason is not None and ev.get("reason") != reason:
                        continue
                    found.append(ev)
        # stable: Events first seen in the same second stay in the order they were made
        found.sort(key=lambda e: e.get("firstTimestamp") or "")
        return [clone_obj(e) for e in found]


if TYPE_CHECKING:
    _conforms: Cluster = InMemoryCluster()
