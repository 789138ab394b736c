"""What a log line is about: the object the current thread reconciles.

The engine sets :data:`current` ``.key`` to the queue key around each reconcile (an
attribute write, no allocation: the key exists already), and the log formatter reads it
from the thread that logs, so every line a reconcile writes names its object without each
call site passing it.
"""

from __future__ import annotations

import threading
from typing import Final

#: ``current.key``: the queue key (kind, name) the thread reconciles now, or None
current: Final = threading.local()

#: queue key kinds -> the Kubernetes kind they stand for (the pod network reconciler is
#: keyed by its pod)
_KINDS: Final = {"pod": "Pod", "node": "Node"}


def current_object() -> tuple[str, str | None, str] | None:
    """``(kind, namespace or None, name)`` of the object this thread reconciles, if any."""
    key = getattr(current, "key", None)
    if key is None:
        return None
    kind = _KINDS.get(key[0])
    if kind is None:
        return None
    namespace, _, name = key[1].rpartition("/")
    return kind, namespace or None, name
