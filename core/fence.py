"""The leadership fence: no write leaves a replica whose Lease may have expired.

A replica leads only until its last successful renewal plus the renew deadline, measured
on its own monotonic clock from *before* that renewal was sent. Another replica takes the
Lease no earlier than ``lease_duration`` after it saw that renewal land, which is later
still, so a write that passed the fence just before it closed has ``lease_duration -
renew_deadline`` to reach the API server or the cloud before anyone else may lead. A
replica that was paused (SIGSTOP, a stalled VM, a long GC) finds the fence closed the
moment it runs again, whatever its elector has not yet looked at.

The engine checks the fence immediately before every write: every Kubernetes write goes
through :class:`FencedCluster` (records, status, patches, Events), and every provider call
through the provider gateway. A refused write raises :class:`~podnet.core.errors.NotLeader`:
the engine stops the reconcile there and does not count it as a failure.
"""

from __future__ import annotations

import builtins
import logging
import math
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, Literal

from podnet.core.clock import Clock, SystemClock
from podnet.core.cluster.port import (
    Cluster,
    Fields,
    Kind,
    ListResult,
    Obj,
    Propagation,
    Watch,
)
from podnet.core.errors import NotLeader

log = logging.getLogger("podnet.fence")


class Fence:
    """Open until ``valid_until`` (monotonic seconds). Closed until first extended, unless
    made with ``open_forever`` (a replica that does not elect leaders)."""

    def __init__(self, clock: Clock | None = None, *, open_forever: bool = False) -> None:
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.Lock()
        self.valid_until = math.inf if open_forever else -math.inf
        #: refused writes by what they were (``create.podnetworks``, ``ref.pool_grow``, ...)
        self.refused: Counter[str] = Counter()
        self._warned = False

    def extend(self, until: float) -> None:
        """A renewal succeeded: writes may go on until ``until`` (never moves back)."""
        with self._lock:
            if until > self.valid_until:
                self.valid_until = until
            self._warned = False

    def close(self) -> None:
        """Leadership is over (lost, or handed back): refuse everything from now on."""
        with self._lock:
            self.valid_until = -math.inf

    def is_open(self) -> bool:
        return self.clock.monotonic() < self.valid_until

    def check(self, what: str) -> None:
        """Raise :class:`NotLeader` unless the fence is open; call right before the write."""
        now = self.clock.monotonic()
        if now < self.valid_until:
            return
        with self._lock:
            self.refused[what] += 1
            warn, self._warned = not self._warned, True
        if warn:
            late = now - self.valid_until
            log.warning("leadership may have expired (%s): refusing writes, first %s",
                        f"{late:.1f}s past the renew deadline" if math.isfinite(late)
                        else "not leading", what)
        raise NotLeader(f"{what} refused: this replica's lease may have expired")


class FencedCluster:
    """The Cluster port with every write behind a :class:`Fence`; reads pass through."""

    def __init__(self, inner: Cluster, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence

    def __getattr__(self, name: str) -> Any:  # adapter extras (faults, close, ...)
        return getattr(self.inner, name)

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj:
        return self.inner.get(kind, name, namespace)

    def list(self, kind: Kind, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None,
             transform: Callable[[Obj], Any] | None = None, *,
             fields: Fields | None = None) -> ListResult:
        if fields is None:
            return self.inner.list(kind, namespace, label_selector, field_selector, transform)
        return self.inner.list(kind, namespace, label_selector, field_selector, transform,
                               fields=fields)

    def watch(self, kind: Kind, resource_version: str, namespace: str | None = None,
              label_selector: str | None = None, field_selector: str | None = None,
              timeout_seconds: float | None = None) -> Watch:
        return self.inner.watch(kind, resource_version, namespace, label_selector,
                                field_selector, timeout_seconds)

    def create(self, kind: Kind, obj: Obj) -> Obj:
        self.fence.check(f"create.{kind.plural}")
        return self.inner.create(kind, obj)

    def update(self, kind: Kind, obj: Obj) -> Obj:
        self.fence.check(f"update.{kind.plural}")
        return self.inner.update(kind, obj)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        self.fence.check(f"status.{kind.plural}")
        return self.inner.update_status(kind, obj)

    def patch(self, kind: Kind, name: str,
              patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
              namespace: str | None = None,
              patch_type: Literal["merge", "json", "strategic"] = "merge",
              subresource: Literal["status"] | None = None) -> Obj:
        self.fence.check(f"patch.{kind.plural}")
        return self.inner.patch(kind, name, patch, namespace, patch_type, subresource)

    def delete(self, kind: Kind, name: str, namespace: str | None = None,
               uid: str | None = None, grace_period_seconds: int | None = None,
               propagation_policy: Propagation | None = None) -> None:
        self.fence.check(f"delete.{kind.plural}")
        self.inner.delete(kind, name, namespace, uid, grace_period_seconds,
                          propagation_policy)

    def emit_event(self, involved: Obj, reason: str, message: str,
                   type: Literal["Normal", "Warning"] = "Normal") -> None:
        self.fence.check("events")
        self.inner.emit_event(involved, reason, message, type)
