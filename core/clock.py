"""Time as the engine sees it. Policies read a Clock so tests can run them on a FakeClock.

Kubernetes timestamps are written and read here too: :func:`format_time` for
``metav1.Time`` (whole seconds), :func:`format_micro_time` for ``metav1.MicroTime``
(a Lease's times), :func:`parse_time` for either.
"""

from __future__ import annotations

import functools
import re
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})?")


@functools.lru_cache(maxsize=256)
def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with whole seconds, as ``metav1.Time`` serialises (naive: UTC).
    Cached: a write carries the same few moments again and again (its conditions' times,
    the record's creation), and ``strftime`` was 1.5 % of a warm pod network's CPU."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """RFC 3339 in UTC with microseconds, as ``metav1.MicroTime`` serialises (naive: UTC)."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An RFC 3339 timestamp (any fraction of a second, ``Z`` or an offset; none: UTC) as an
    aware datetime in UTC. :raises ValueError: anything else, other ISO 8601 shapes too."""
    if not _RFC3339.fullmatch(text):
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    # 3.11's fromisoformat takes "Z" and any number of fraction digits; the regex keeps
    # out the other ISO 8601 shapes it would accept (dates alone, basic format)
    parsed = datetime.fromisoformat(text if text[-1] != "z" else text[:-1] + "Z")
    if parsed.tzinfo is None:
        return parsed.replace(tzinfo=UTC)
    return parsed if parsed.tzinfo is UTC else parsed.astimezone(UTC)


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds, for intervals and deadlines."""

    def now(self) -> datetime:
        """Wall-clock time in UTC, for timestamps written into records."""

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that moves only when told: ``advance`` or ``sleep`` (which advances)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._mono = 1000.0
        self._wall = start or datetime(2026, 1, 1, tzinfo=UTC)

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def now(self) -> datetime:
        with self._lock:
            return self._wall + timedelta(seconds=self._mono - 1000.0)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        with self._lock:
            self._mono += seconds

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)
