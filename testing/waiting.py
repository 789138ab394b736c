"""Waiting for separate processes in end-to-end tests: poll a condition, bounded."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["wait_for"]


def wait_for(what: str, check: Callable[[], bool], timeout: float = 60.0,
             interval: float = 0.3) -> None:
    """Return once ``check()`` is true; :raise AssertionError: naming ``what`` when it is
    still false after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
