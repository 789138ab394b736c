"""Each stored object's JSON, encoded once per version, for the lists the emulator serves.

kube-apiserver's watch cache keeps every object it serves already serialized (per
resourceVersion), so a list of 150,000 pods writes bytes it holds rather than encoding
each object again. The emulator did encode each again, after copying it, on every page
of every list: at 150,000 pod networks a controller's restart waited on that more than on
its own work. This cache does what the watch cache does: an object's bytes are kept
while it is the stored version (stored objects are never changed in place, so the same
object is the same version), and a list body is the cached items joined, byte for byte
what ``json.dumps`` of the whole list writes.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from typing import Any, Final

from podnet.core.cluster.port import Kind, Obj

__all__ = ["BUDGET", "EncodedObjects"]

#: bytes of encoded objects held at most; past it the cache starts over (the objects of
#: a controller's restart at 150,000 pods on 5,000 nodes take about 230 MiB)
BUDGET: Final = 768 << 20

_SEPARATORS: Final = (",", ":")


def encode(value: Any) -> bytes:
    """JSON as the emulator writes every answer: compact, ASCII."""
    return json.dumps(value, separators=_SEPARATORS).encode()


class EncodedObjects:
    """Stored object -> its JSON, kept by (kind, namespace, name) for as long as that key
    holds the very same (immutable) object; thread-safe."""

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self._lock = threading.Lock()
        self._entries: dict[tuple[Kind, str, str], tuple[Obj, bytes]] = {}
        self._bytes = 0
        #: objects encoded, and served from the cache (tests, benchmarks)
        self.encoded = 0
        self.reused = 0

    def __len__(self) -> int:
        return len(self._entries)

    def of(self, kind: Kind, obj: Obj) -> bytes:
        """``obj``'s JSON; ``obj`` must be a stored object, never changed afterwards."""
        meta = obj["metadata"]
        key = (kind, meta.get("namespace", ""), meta["name"])
        entry = self._entries.get(key)
        if entry is not None and entry[0] is obj:
            self.reused += 1
            return entry[1]
        data = encode(obj)
        with self._lock:
            self.encoded += 1
            old = self._entries.get(key)
            if old is not None:
                self._bytes -= len(old[1])
            if self._bytes + len(data) > self.budget:
                # objects deleted since they were encoded are never looked up again:
                # starting over bounds what they hold
                self._entries.clear()
                self._bytes = 0
            self._entries[key] = (obj, data)
            self._bytes += len(data)
        return data

    def list_body(self, kind: Kind, head: Obj, items: Iterable[Obj]) -> bytes:
        """A list answer: ``head`` (kind, apiVersion, metadata) and then ``items``, as
        ``encode({**head, "items": [...]})`` writes it."""
        start = encode(head)
        return b"".join((start[:-1], b',"items":[' if head else b'"items":[',
                         b",".join([self.of(kind, o) for o in items]), b"]}"))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
