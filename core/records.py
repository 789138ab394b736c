"""Every write of a podnet record, and every Event: counted, and fed back into the caches.

A write's answer is ``assume``-d into its cache at once (ordered after the version the
write was conditioned on), so the controller's next read sees what it wrote, before the
watch event arrives.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from podnet.core.caches import Caches
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import POD_NETWORK, ApiError, Cluster, Kind, Obj
from podnet.core.convert import from_wire, to_wire
from podnet.core.models import NodeNetwork, PodNetwork

log = logging.getLogger("podnet.records")

M = TypeVar("M", PodNetwork, NodeNetwork)


class Echoes:
    """PodNetwork watch events heard while the pass that writes the record waits for the
    write's answer. Over HTTP the stream can deliver a write's own event before its
    answer is read (the answer is then cached already, and the event is not the pass's
    own to the cache): queuing the pod for it runs a pass with nothing to do. Such events
    are held until the answer: the one at the answer's version is the write itself and is
    dropped; any other, or every one when the write failed, queues the pod as before.

    ``mine``: whether a record's write is made by the pass its events would queue;
    ``requeue``: queue that pass again."""

    def __init__(self, mine: Callable[[PodNetwork], bool],
                 requeue: Callable[[PodNetwork], None]) -> None:
        self._mine = mine
        self._requeue = requeue
        self._lock = threading.Lock()
        #: record key -> the versions heard while its write is in flight
        self._held: dict[str, list[str | None]] = {}

    def hold(self, model: PodNetwork) -> str | None:
        """Open the hold for a write of ``model``; its key, or None when not held."""
        if model.metadata.name is None or not self._mine(model):
            return None
        key = model.key
        with self._lock:
            if key in self._held:
                return None  # another write of it in flight: that one holds
            self._held[key] = []
        return key

    def heard(self, pn: PodNetwork) -> bool:
        """Whether an event of ``pn`` is held (its write's answer decides)."""
        with self._lock:
            held = self._held.get(pn.key)
            if held is None:
                return False
            held.append(pn.metadata.resource_version)
            return True

    def answered(self, key: str | None, model: PodNetwork, version: str | None) -> None:
        """The write's answer (``version``; None: it failed) is cached: the events held
        that are not its own queue the pass."""
        if key is None:
            return
        with self._lock:
            held = self._held.pop(key, ())
        if any(rv is None or rv != version for rv in held):
            self._requeue(model)


class RecordWriter:
    """create / update / update_status / delete of PodNetworks and NodeNetworks, and
    Events. ``cluster`` is the fenced one: no write leaves a replica that lost the lease;
    ``writes`` counts them by verb and kind (``create.podnetworks``, ``events``);
    ``echoes``: where a PodNetwork write's own watch events wait for its answer."""

    def __init__(self, cluster: Cluster, caches: Caches, writes: Counter[str],
                 echoes: Echoes | None = None) -> None:
        self.cluster = cluster
        self._caches = caches
        self._writes = writes
        self.echoes = echoes

    def create(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        return self._write(kind, model, wire, "create", self.cluster.create, None)

    def update(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        return self._write(kind, model, wire, "update", self.cluster.update,
                           model.metadata.resource_version)

    def update_status(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        return self._write(kind, model, wire, "status", self.cluster.update_status,
                           model.metadata.resource_version)

    def _write(self, kind: Kind, model: M, wire: Obj, verb: str,
               send: Callable[[Kind, Obj], Obj], based_on: str | None) -> M:
        echoes = self.echoes if isinstance(model, PodNetwork) else None
        held = echoes.hold(model) if echoes is not None else None
        version: str | None = None
        try:
            answer = send(kind, wire)
            self._writes[f"{verb}.{kind.plural}"] += 1
            written = self._assume(kind, answer, model, wire, based_on,
                                   created=verb == "create")
            version = (answer.get("metadata") or {}).get("resourceVersion")
            return written
        finally:
            if echoes is not None and isinstance(model, PodNetwork):
                echoes.answered(held, model, version)

    def delete(self, kind: Kind, model: PodNetwork | NodeNetwork) -> None:
        meta = model.metadata
        self.cluster.delete(kind, meta.name, meta.namespace, uid=meta.uid)
        self._writes[f"delete.{kind.plural}"] += 1

    def _assume(self, kind: Kind, obj: Obj, sent: M, wire: Obj, based_on: str | None,
                *, created: bool = False) -> M:
        """Feed a write's answer ``obj`` back into its cache; ``sent``: the record written
        (``wire``, its wire form); ``based_on``: the version the write was conditioned on
        (an update carries it), which orders it after that version."""
        caches = self._caches
        cls = type(sent)
        informer: Informer[Any] = (caches.pod_networks
                                   if kind is POD_NETWORK or kind == POD_NETWORK
                                   else caches.node_networks)
        # a PodNetwork answered as sent is not parsed again (a sixth of a warm pod
        # network's CPU): only its metadata is new
        read = caches.as_written(obj, sent, wire) if isinstance(sent, PodNetwork) else None
        if informer.assume(obj, based_on, read, created=created):
            cached = informer.get(informer.key_of(obj))
            if isinstance(cached, cls):
                return cached  # parsed once, by the cache
        return read if read is not None else from_wire(cls, obj)

    def event(self, obj: PodNetwork | NodeNetwork | Obj, reason: str, message: str,
              warning: bool = True) -> None:
        """Record an Event; never fails the caller (events are best effort). Counted as
        ``events``, apart from the record writes."""
        involved = obj if isinstance(obj, dict) else _reference(obj)
        try:
            self.cluster.emit_event(
                involved, reason, message, type="Warning" if warning else "Normal"
            )
            self._writes["events"] += 1
        except ApiError as exc:
            log.debug("event %s dropped: %s", reason, exc)


def _reference(model: PodNetwork | NodeNetwork) -> Obj:
    """What an Event needs of its record (an ``involvedObject``): not the whole wire form,
    which costs a conversion per Event."""
    meta = model.metadata
    return {"apiVersion": model.api_version, "kind": model.kind,
            "metadata": {k: v for k, v in (("name", meta.name), ("namespace", meta.namespace),
                                           ("uid", meta.uid),
                                           ("resourceVersion", meta.resource_version))
                         if v is not None}}
