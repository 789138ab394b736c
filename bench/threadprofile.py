"""Python calls made by every thread of this process in a window (load-independent).

``cProfile`` profiles only the thread that enables it, so :func:`install` gives each
thread started afterwards a profiler of its own (``threading.setprofile``: the hook runs
once, on the thread's first call, and enables that thread's profiler in its place).
:meth:`ThreadProfiles.snapshot` reads every profiler's counts without stopping it, so a
window (a burst) is the difference of two snapshots. Profiling slows every call; read
the counts, not the wall time, of a profiled run.
"""

from __future__ import annotations

import cProfile
import os
import sys
import threading
from collections import Counter
from typing import Any

__all__ = ["ThreadProfiles", "install"]


def _label(code: Any) -> str:
    if isinstance(code, str):
        return code  # a built-in: "<method 'sendall' of '_socket.socket' objects>"
    return f"{code.co_filename}:{code.co_firstlineno}({code.co_name})"


class ThreadProfiles:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._profilers: list[tuple[str, cProfile.Profile]] = []

    def _start(self, *_args: object) -> None:
        sys.setprofile(None)
        profiler = cProfile.Profile()
        with self._lock:
            self._profilers.append((threading.current_thread().name, profiler))
        profiler.enable()

    def snapshot(self) -> tuple[Counter[str], Counter[str], Counter[str]]:
        """(calls, own seconds, cumulative seconds) by function, over every profiled
        thread so far; the calls by thread (its name without a number or the plural it
        watches) too, under ``thread:NAME``."""
        calls: Counter[str] = Counter()
        own: Counter[str] = Counter()
        cumulative: Counter[str] = Counter()
        with self._lock:
            profilers = list(self._profilers)
        for name, profiler in profilers:
            thread = "thread:" + name.split(":")[0].rstrip("0123456789").rstrip("-")
            for entry in profiler.getstats():
                label = _label(entry.code)
                calls[label] += entry.callcount
                calls[thread] += entry.callcount
                own[label] += entry.inlinetime
                cumulative[label] += entry.totaltime
        return calls, own, cumulative

    def stop(self) -> None:
        threading.setprofile(None)  # type: ignore[arg-type]


def install() -> ThreadProfiles:
    """Profile every thread started from now on."""
    profiles = ThreadProfiles()
    threading.setprofile(profiles._start)
    return profiles


Snapshot = tuple[Counter[str], Counter[str], Counter[str]]


def window(before: Snapshot, after: Snapshot) -> Snapshot:
    """What happened between two snapshots."""
    out = []
    for b, a in zip(before, after, strict=True):
        diff = Counter(a)
        diff.subtract(b)
        out.append(+diff)
    return out[0], out[1], out[2]


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def group(label: str) -> str:
    """The package (or the project's subpackage) a function belongs to."""
    if label.startswith("<"):
        return "builtins"
    path = label.rsplit(":", 1)[0]
    if path.startswith(_ROOT) and "site-packages" not in path:
        parts = path[len(_ROOT):].split(os.sep)
        return "podnet." + ".".join(parts[:2]).removesuffix(".py")
    if "site-packages" + os.sep in path:
        return path.split("site-packages" + os.sep, 1)[1].split(os.sep)[0].removesuffix(".py")
    parts = path.split(os.sep)
    for i, part in enumerate(parts):
        if part.startswith("python3"):
            return "stdlib." + parts[i + 1].removesuffix(".py") if i + 1 < len(parts) else path
    return path
