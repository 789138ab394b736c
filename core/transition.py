"""One transition of either machine, run the one way: span, machine, counters, event.

Every attempt to change a PodNetwork's phase or an interface's state goes through
:meth:`Transitions.run`: a span ``<machine>.<trigger>`` (the lifecycle trace's, when the
record carries one), the machine's step with its action (the provider call and the record
write, run before the state changes), ``stats.transitions`` or
``stats.failed_transitions``, and a ``podnet_transition`` event to every listener,
whether the attempt succeeded or not. A failed attempt changes no state; what its
caller makes of the failure (a condition and an Event, a retry) is the ``failed``
handler, called once the span has ended.

An attempt that raised :class:`PoolEmpty` found no address to take: it waits, it did not
fail. It changes no state either, but it is counted in ``waited`` (not ``failed``), its
span is not ERROR (it says what it waits for) and the ``failed`` handler decides how it
waits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import attrs

from podnet.core.cluster.port import ApiError
from podnet.core.errors import PoolEmpty
from podnet.core.machines import StateMachine
from podnet.core.tracing import Tracing, TransitionSpan, is_stale_read
from podnet.hookspecs.types import TransitionEvent

T = TypeVar("T")
F = TypeVar("F")


@attrs.frozen
class Subject:
    """The object a transition acts on, as its span and its event name it."""

    #: ``namespace/name`` of a PodNetwork, ``node/interface`` of an interface
    key: str
    provider: str
    #: its machine state: the transition's source
    state: str
    #: the lifecycle trace the span continues; None starts a new one
    traceparent: str | None = None
    #: the span's attributes from its start (None values are left out)
    span_attributes: Mapping[str, str | int | bool | None] = attrs.field(factory=dict)
    #: the event's ``attributes``
    event_attributes: Mapping[str, Any] = attrs.field(factory=dict)


class Transitions:
    """Runs transitions, counting them in ``succeeded`` / ``failed`` / ``waited`` (by
    ``machine.trigger``) and telling ``notify`` of each attempt, while ``listened`` says
    someone listens (by default always: with no listener the event is not even built,
    twice per pod network on the warm path)."""

    def __init__(self, tracing: Tracing, *, succeeded: Counter[str], failed: Counter[str],
                 notify: Callable[[TransitionEvent], None],
                 waited: Counter[str] | None = None,
                 conflicted: Counter[str] | None = None,
                 listened: Callable[[], bool] | None = None) -> None:
        self._tracing = tracing
        #: whether transitions' spans are recorded (a Tracing never changes): a subject's
        #: span attributes are built only then
        self.traced = tracing.enabled
        self._succeeded = succeeded
        self._failed = failed
        self._waited: Counter[str] = waited if waited is not None else Counter()
        self._conflicted: Counter[str] = conflicted if conflicted is not None else Counter()
        self._notify = notify
        self._listened: Callable[[], bool] = listened or _always

    @overload
    def run(self, machine: StateMachine, subject: Subject, trigger: str,
            action: Callable[[TransitionSpan], T], *,
            settled: Callable[[T], Subject] | None = None) -> T: ...

    @overload
    def run(self, machine: StateMachine, subject: Subject, trigger: str,
            action: Callable[[TransitionSpan], T], *,
            settled: Callable[[T], Subject] | None = None,
            failed: Callable[[BaseException, TransitionSpan], F]) -> T | F: ...

    def run(self, machine: StateMachine, subject: Subject, trigger: str,
            action: Callable[[TransitionSpan], T], *,
            settled: Callable[[T], Subject] | None = None,
            failed: Callable[[BaseException, TransitionSpan], F] | None = None) -> T | F:
        """Fire ``trigger`` from ``subject.state``, running ``action`` (given the span)
        first.

        :param settled: the subject as the action left it (its event names it so: the
            address a PodNetwork got); by default ``subject``.
        :param failed: called with what the attempt raised and its span, once the span
            has ended; its answer is returned. Without it the exception propagates.
        :return: the action's result.
        """
        name = f"{machine.name}.{trigger}"
        span = self._tracing.transition(
            machine.name, trigger, source=subject.state, provider=subject.provider,
            obj=subject.key, traceparent=subject.traceparent,
            attributes=subject.span_attributes)
        try:
            with span:
                try:
                    dest, result = machine.fire(subject.state, trigger, lambda: action(span))
                except PoolEmpty as exc:
                    span.waiting("address", str(exc))
                    self._waited[name] += 1
                    if self._listened():
                        self._notify(_event(machine, trigger, subject, None, exc))
                    raise
                except ApiError as exc:
                    # a stale read is retried from a fresh one, not failed
                    counter = self._conflicted if is_stale_read(exc) else self._failed
                    counter[name] += 1
                    if self._listened():
                        self._notify(_event(machine, trigger, subject, None, exc))
                    raise
                except BaseException as exc:
                    self._failed[name] += 1
                    if self._listened():
                        self._notify(_event(machine, trigger, subject, None, exc))
                    raise
                span.succeeded(dest)
                self._succeeded[name] += 1
                if self._listened():
                    after = settled(result) if settled is not None else subject
                    self._notify(_event(machine, trigger, after, dest, None,
                                        source=subject.state))
        except BaseException as exc:
            if failed is None:
                raise
            return failed(exc, span)
        return result


def _always() -> bool:
    return True


def _event(machine: StateMachine, trigger: str, subject: Subject, dest: str | None,
           exc: BaseException | None, *, source: str | None = None) -> TransitionEvent:
    return TransitionEvent(
        machine=machine.name, trigger=trigger, source=source or subject.state, dest=dest,
        object_key=subject.key, provider=subject.provider, ok=exc is None,
        error=type(exc).__name__ if exc is not None else None,
        attributes=dict(subject.event_attributes),
    )
