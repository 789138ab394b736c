"""A chaos run's failing history, printed with its blob within the test's time.

Hypothesis prints a failing example only once it has shrunk it, and shrinking a history
of a chaos machine replays it hundreds of times: on a loaded host a test's timeout could
end the run first, and the log then had thread stacks, not the history. Inside
:func:`failing_histories_reported`:

- the first failing history of the run is printed (standard error, which pytest shows
  with the failure) the moment it fails, before any shrinking: its steps, its traceback
  and the ``@reproduce_failure`` decorator that replays it (on the state machine class);
- shrinking is bounded: once it has run for ``shrink_seconds``
  (``$PODNET_CHAOS_SHRINK_SECONDS``, default :data:`DEFAULT_SHRINK_SECONDS`), the run
  stops with :class:`ShrinkingStopped`, whose message is the smallest failing history
  found so far, with its traceback and its decorator.

A test timeout that fires inside an example reads to hypothesis as that example failing:
it is printed the same way, its traceback ending in the timeout (where the run was).

As a pytest plugin (``pytest_plugins = ["podnet.testing.chaosreport"]`` in a root
``conftest.py``, or ``-p podnet.testing.chaosreport``) it does so for every test whose
hypothesis settings :func:`podnet.testing.chaos.chaos_settings` made.

It listens to hypothesis' observability callbacks (``add_observability_callback``, one
observation per test case, with the steps of a state machine, the phase, and a failing
case's decorator), with coverage collection off: its line tracer would slow every example
as the explain phase did.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import settings
from hypothesis.internal import observability

__all__ = ["DEFAULT_SHRINK_SECONDS", "SHRINK_ENV", "ShrinkingStopped",
           "failing_histories_reported", "mark_chaos"]

SHRINK_ENV = "PODNET_CHAOS_SHRINK_SECONDS"
#: the CI bound on one test's shrinking: with a 200-example machine's generate phase
#: (110-260 s on a loaded host) well inside the chaos files' timeout
DEFAULT_SHRINK_SECONDS = 120.0


class ShrinkingStopped(Exception):
    """Shrinking a failure ran out of its time: the message is the smallest failing
    history found so far, its traceback and the decorator that replays it."""


def _report(title: str, observation: Any) -> str:
    meta = observation.metadata
    return "\n".join(part for part in (
        f"{title}:", observation.representation, (meta.traceback or "").rstrip(),
        f"replay it with {meta.reproduction_decorator} on the state machine class "
        "(hypothesis' settings print_blob)") if part)


class _Reporter:
    """The observability callback of one run (one test)."""

    def __init__(self, shrink_seconds: float) -> None:
        self.shrink_seconds = shrink_seconds
        self.first: Any = None
        self.smallest: Any = None
        self.shrink_started: float | None = None

    def __call__(self, observation: Any) -> None:
        if observation.type != "test_case":
            return
        failed = observation.status == "failed"
        if failed and self.first is None:
            self.first = self.smallest = observation
            print(_report(f"chaos: a failing history, as first found (in the "
                          f"{observation.metadata.phase} phase, before shrinking; "
                          f"shrinking is bounded by {SHRINK_ENV}={self.shrink_seconds:g} s)",
                          observation), file=sys.stderr, flush=True)
        if observation.metadata.phase != "shrink" or self.first is None:
            return
        if failed and _steps(observation) <= _steps(self.smallest):
            self.smallest = observation
        now = time.monotonic()
        if self.shrink_started is None:
            self.shrink_started = now
        elif now - self.shrink_started > self.shrink_seconds:
            raise ShrinkingStopped(_report(
                f"shrinking stopped after {self.shrink_seconds:g} s ({SHRINK_ENV}); the "
                "smallest failing history found", self.smallest))


def _steps(observation: Any) -> int:
    return int(observation.representation.count("\n"))


def shrink_seconds_from_env() -> float:
    """``$PODNET_CHAOS_SHRINK_SECONDS``, else :data:`DEFAULT_SHRINK_SECONDS`."""
    raw = os.environ.get(SHRINK_ENV, "").strip()
    if not raw:
        return DEFAULT_SHRINK_SECONDS
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{SHRINK_ENV}={raw!r}: expected a number of seconds") from None
    if value < 0:
        raise ValueError(f"{SHRINK_ENV}={raw!r}: expected a number of seconds >= 0")
    return value


@contextmanager
def failing_histories_reported(shrink_seconds: float | None = None) -> Iterator[None]:
    """Hypothesis runs in this thread print their first failing history at once, and
    stop shrinking after ``shrink_seconds`` (default: :func:`shrink_seconds_from_env`)."""
    reporter = _Reporter(shrink_seconds_from_env() if shrink_seconds is None
                         else shrink_seconds)
    collect = observability.OBSERVABILITY_COLLECT_COVERAGE
    observability.OBSERVABILITY_COLLECT_COVERAGE = False
    observability.add_observability_callback(reporter)
    try:
        yield
    finally:
        observability.remove_observability_callback(reporter)
        observability.OBSERVABILITY_COLLECT_COVERAGE = collect


#: the settings objects chaos_settings made (settings are immutable: no mark on them)
_CHAOS_SETTINGS: list[settings] = []


def mark_chaos(made: settings) -> settings:
    """``made`` is a chaos run's: the plugin reports its failures (see the module)."""
    _CHAOS_SETTINGS.append(made)
    return made


def _is_chaos(item: Any) -> bool:
    """A state machine's test case (its class's ``settings``) or a ``@given`` test (its
    function's) that runs with settings chaos_settings made."""
    candidates = (getattr(getattr(item, "cls", None), "settings", None),
                  getattr(getattr(item, "obj", None), "_hypothesis_internal_use_settings",
                          None))
    return any(c is made for c in candidates if c is not None for made in _CHAOS_SETTINGS)


try:
    import pytest
except ImportError:  # pragma: no cover - the kit without its test extras
    pass
else:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
        if not _is_chaos(item):
            yield
            return
        with failing_histories_reported():
            yield
