"""Events as a client records them: the one event correlator both adapters use.

As client-go's event recorder does for core/v1 Events, the client de-duplicates: an
Event with the same involved object, reason, message and type as one this correlator
wrote before is not created again; that Event's ``count`` goes up by one and its
``lastTimestamp`` moves to now, by a merge patch. The API server stores what it is
given and merges nothing itself.

What counts as "before" is the correlator's memory: the last :data:`EVENT_CACHE` keys
(least recently seen forgotten first, as client-go's LRU), and the Event still existing:
one the server expired (Events have a TTL) is recorded anew.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal

import attrs

from ..clock import Clock, format_time
from .port import EVENT, NotFound, Obj

__all__ = ["COMPONENT", "EVENT_CACHE", "EventCorrelator", "EventType", "reference"]

#: Event keys remembered (client-go's ``maxLruCacheEntries``).
EVENT_CACHE: Final = 4096
#: The ``source.component`` and ``reportingComponent`` of every Event podnet writes.
COMPONENT: Final = "podnet"

EventType = Literal["Normal", "Warning"]
#: (involved object's identity, reason, message, type)
EventKey = tuple[str, str, str, str]


def reference(involved: Mapping[str, Any]) -> Obj:
    """The ``involvedObject`` of an Event about ``involved`` (fields it lacks left out)."""
    meta = involved.get("metadata") or {}
    ref = {
        "apiVersion": involved.get("apiVersion", ""),
        "kind": involved.get("kind", ""),
        "name": meta.get("name", ""),
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: v for k, v in ref.items() if v is not None}


def _event_namespace(ref: Mapping[str, Any]) -> str:
    # an Event about a cluster-scoped object lives in "default", as client-go puts it
    return str(ref.get("namespace") or "default")


def _key(ref: Mapping[str, Any], reason: str, message: str, type: EventType) -> EventKey:
    """What makes two Events the same one: the involved object (by uid, else by kind,
    namespace and name), reason, message and type."""
    identity = ref.get("uid") or f"{ref['kind']}/{_event_namespace(ref)}/{ref['name']}"
    return (str(identity), reason, message, type)


@attrs.frozen
class _Seen:
    namespace: str
    name: str
    count: int


class EventCorrelator:
    """Creates an Event, or counts one more occurrence of the Event it wrote for the same
    key. ``create(event)`` and ``patch(namespace, name, patch)`` write through the
    adapter; ``clock`` stamps the Events.

    One occurrence of a key is written at a time, so two threads recording the same
    Event at once make one Event with count 2, never two Events; different Events are
    written in parallel.
    """

    def __init__(
        self,
        create: Callable[[Obj], Obj],
        patch: Callable[[str, str, Obj], Obj],
        clock: Clock,
        cache_size: int = EVENT_CACHE,
    ) -> None:
        self._create = create
        self._patch = patch
        self._clock = clock
        self._cache_size = max(1, cache_size)
        self._lock = threading.Lock()
        self._seen: OrderedDict[EventKey, _Seen] = OrderedDict()
        #: key -> [its lock, how many records of it are under way]
        self._writing: dict[EventKey, list[Any]] = {}

    def record(
        self, involved: Mapping[str, Any], reason: str, message: str, type: EventType = "Normal"
    ) -> None:
        self.record_reference(reference(involved), reason, message, type)

    def record_reference(self, ref: Obj, reason: str, message: str,
                         type: EventType = "Normal") -> None:
        """``record`` of an Event whose ``involvedObject`` (``reference()``) is made."""
        key = _key(ref, reason, message, type)
        # one occurrence of a key at a time; Events of different keys are written in
        # parallel (a write under one lock for all would queue every worker behind it)
        with self._lock:
            writing = self._writing.setdefault(key, [threading.Lock(), 0])
            writing[1] += 1
        try:
            with writing[0]:
                self._record(key, ref, reason, message, type)
        finally:
            with self._lock:
                writing[1] -= 1
                if not writing[1]:
                    del self._writing[key]

    def _record(self, key: EventKey, ref: Obj, reason: str, message: str,
                type: EventType) -> None:
        with self._lock:
            now = format_time(self._clock.now())
            seen = self._seen.get(key)
        if seen is not None:
            count = seen.count + 1
            bump = {"count": count, "lastTimestamp": now, "involvedObject": ref}
            try:
                self._patch(seen.namespace, seen.name, bump)
            except NotFound:
                pass  # expired (Events have a TTL): record it anew
            else:
                with self._lock:
                    self._remember(key, _Seen(seen.namespace, seen.name, count))
                return
        namespace = _event_namespace(ref)
        created = self._create({
            "apiVersion": EVENT.api_version,
            "kind": EVENT.kind,
            "metadata": {"generateName": f"{ref['name'] or COMPONENT}.",
                         "namespace": namespace},
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
        })
        with self._lock:
            self._remember(key, _Seen(namespace, created["metadata"]["name"], 1))

    def _remember(self, key: EventKey, seen: _Seen) -> None:
        # lock held
        self._seen[key] = seen
        self._seen.move_to_end(key)
        while len(self._seen) > self._cache_size:
            self._seen.popitem(last=False)
