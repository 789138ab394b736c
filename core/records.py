"""Every write of a podnet record, and every Event: counted, and fed back into the caches.

A write's answer is ``assume``-d into its cache at once (ordered after the version the
write was conditioned on), so the controller's next read sees what it wrote, before the
watch event arrives.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, TypeVar

from podnet.core.caches import Caches
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import POD_NETWORK, ApiError, Cluster, Kind, Obj
from podnet.core.convert import from_wire, to_wire
from podnet.core.models import NodeNetwork, PodNetwork

log = logging.getLogger("podnet.records")

M = TypeVar("M", PodNetwork, NodeNetwork)


class RecordWriter:
    """create / update / update_status / delete of PodNetworks and NodeNetworks, and
    Events. ``cluster`` is the fenced one: no write leaves a replica that lost the lease;
    ``writes`` counts them by verb and kind (``create.podnetworks``, ``events``)."""

    def __init__(self, cluster: Cluster, caches: Caches, writes: Counter[str]) -> None:
        self.cluster = cluster
        self._caches = caches
        self._writes = writes

    def create(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        created = self.cluster.create(kind, wire)
        self._writes[f"create.{kind.plural}"] += 1
        return self._assume(kind, created, model, wire, None, created=True)

    def update(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        updated = self.cluster.update(kind, wire)
        self._writes[f"update.{kind.plural}"] += 1
        return self._assume(kind, updated, model, wire, model.metadata.resource_version)

    def update_status(self, kind: Kind, model: M) -> M:
        wire = to_wire(model)
        updated = self.cluster.update_status(kind, wire)
        self._writes[f"status.{kind.plural}"] += 1
        return self._assume(kind, updated, model, wire, model.metadata.resource_version)

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
        informer: Informer[Any] = (caches.pod_networks if kind == POD_NETWORK
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
