"""Time as the engine sees it. Policies read a Clock so tests can run them on a FakeClock."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Protocol


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
        from datetime import timedelta

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
