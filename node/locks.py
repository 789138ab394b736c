"""Locks by key (a container id, a record's key) that live only while they are wanted.

An agent runs for the life of its node and sees every container and record that ever
lands there: a lock kept per key for ever would grow without bound. Each lock here is
made when a request first asks for its key and dropped when the last request holding or
waiting for it is done.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class KeyedLocks:
    """One lock per key, made on demand and dropped once nobody holds or waits for it."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        #: key -> [its lock, how many requests hold or wait for it]
        self._locks: dict[str, list] = {}  # type: ignore[type-arg]

    @contextlib.contextmanager
    def hold(self, *keys: str) -> Iterator[None]:
        """Every key's lock, taken in one order (two requests never wait for each other)."""
        ordered = sorted(set(keys))
        with self._guard:
            entries = [self._locks.setdefault(key, [threading.Lock(), 0]) for key in ordered]
            for entry in entries:
                entry[1] += 1
        try:
            with contextlib.ExitStack() as stack:
                for entry in entries:
                    stack.enter_context(entry[0])
                yield
        finally:
            with self._guard:
                for key, entry in zip(ordered, entries, strict=True):
                    entry[1] -= 1
                    if entry[1] == 0:
                        del self._locks[key]

    def __len__(self) -> int:
        """How many keys have a lock now (held or waited for)."""
        with self._guard:
            return len(self._locks)
