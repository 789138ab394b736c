"""The cyclic garbage collector paused while big, acyclic data is built.

Decoding a list (and parsing its records) makes millions of containers; every few
hundred of them trigger a young collection, and the growing heap full ones, each
walking what was just built: at 20,000 pod networks that was 40 % of the list's CPU.
Decoded JSON and the frozen records made of it hold no cycles, so a pause loses nothing
that reference counting does not free; whatever cycle a handler makes meanwhile waits
for the next collection.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["gc_paused"]

_lock = threading.Lock()
_pausers = 0
_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector, counted across threads: the last one out restores
    what was there before the first came in."""
    global _pausers, _was_enabled
    with _lock:
        if _pausers == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pausers += 1
    try:
        yield
    finally:
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _was_enabled:
                gc.enable()
