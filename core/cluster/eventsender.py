"""Events sent from a thread of their own, as client-go's event broadcaster sends them.

An Event is a write like any other, and over HTTP it costs a worker a round trip (and
whatever latency the API server adds) for something nobody waits on. ``EventSender``
takes the Event in a bounded queue and returns; one sender thread hands each, in the
order given, to the correlator (``events.py``), which still de-duplicates and counts.
A full queue drops the Event and counts it (``dropped``, and ``on_drop`` for a metric):
an Event is best effort, a reconcile must not wait for one. ``flush`` waits until every
Event taken is sent; ``close`` flushes, then stops the thread.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

from .events import EventType
from .port import ApiError, Obj

__all__ = ["EVENT_QUEUE", "EventSender"]

log = logging.getLogger(__name__)

#: Events waiting to be sent at most (client-go's ``maxQueuedEvents``).
EVENT_QUEUE: Final = 1000

#: (the involved object's reference, reason, message, type)
_Item = tuple[Obj, str, str, EventType]


class EventSender:
    """Queues Events for ``send(reference, reason, message, type)``, called on one thread
    of its own (started with the first Event)."""

    def __init__(self, send: Callable[[Obj, str, str, EventType], None],
                 capacity: int = EVENT_QUEUE, *, name: str = "podnet-events") -> None:
        self._send = send
        self._capacity = max(1, capacity)
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._sending = 0  # taken from the queue, not yet sent
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Events dropped because the queue was full
        self.dropped = 0
        #: told of each dropped Event (the host counts them in a metric)
        self.on_drop: Callable[[], None] | None = None

    def submit(self, reference: Obj, reason: str, message: str, type: EventType) -> bool:
        """Queue one Event; False when it was dropped (queue full). After ``close`` the
        Event is sent on the caller's thread: late, never lost to a stopped sender."""
        with self._cond:
            if self._closed:
                late = True
            elif len(self._queue) >= self._capacity:
                self.dropped += 1
                on_drop = self.on_drop
                late = False
                log.debug("event queue full (%d): dropped %s %s about %s", self._capacity,
                          type, reason, reference.get("name"))
            else:
                self._queue.append((reference, reason, message, type))
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._name,
                                                    daemon=True)
                    self._thread.start()
                self._cond.notify()
                return True
        if late:
            self._send_one((reference, reason, message, type))
            return True
        if on_drop is not None:
            on_drop()
        return False

    def pending(self) -> int:
        """Events queued or being sent."""
        with self._cond:
            return len(self._queue) + self._sending

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every Event queued so far is sent; False if ``timeout`` ran out."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._sending,
                                       timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (waiting up to ``timeout``), then stop the thread."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                item = self._queue.popleft()
                self._sending += 1
            try:
                self._send_one(item)
            finally:
                with self._cond:
                    self._sending -= 1
                    if not self._queue and not self._sending:
                        self._cond.notify_all()

    def _send_one(self, item: _Item) -> None:
        reference, reason, message, type = item
        try:
            self._send(reference, reason, message, type)
        except ApiError as exc:  # best effort: one Event refused never stops the others
            log.debug("event %s %s about %s not written: %s", type, reason,
                      _name(reference), exc)
        except Exception:
            log.warning("event %s %s about %s not written", type, reason, _name(reference),
                        exc_info=True)


def _name(reference: Mapping[str, Any]) -> str:
    return f"{reference.get('kind', '')}/{reference.get('name', '')}"
