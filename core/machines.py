"""The two state machines, built with ``transitions``: one Machine per kind, built once.

State lives in the records (``status.phase`` of a PodNetwork, ``state`` of an interface in
a NodeNetwork), never in the machine. To work on an object the engine wraps its recorded
state in a short-lived model and executes the trigger's ``Transition`` for that state on
it, as the trigger's ``Event`` would: the Machine's own transitions, callbacks and checks
run, but the model is never added to the Machine (a
registered model costs memory, and ``add_model`` binds every trigger and state helper to
it: about half the cost of a fire, twice per pod network on the warm path).

A trigger fires with an ``action``: the provider step of the transition. The action runs
in transitions' ``before`` callback, so when it raises the state is left unchanged and the
exception reaches the caller, who records a condition and an Event.
:mod:`podnet.core.transition` runs a transition of either machine with its span,
counters and ``podnet_transition`` event.

A record stores its state as a capitalised enum value (``status.phase`` ``Allocated``,
an interface's ``Ready``); the machine's state is that value in lower case, for both
machines (:func:`state_of`, :func:`recorded_as`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from transitions import EventData, Machine

from podnet.core.errors import TransitionRefused
from podnet.core.models import InterfaceState, Phase

T = TypeVar("T")
#: what a record stores for a machine state
Recorded = TypeVar("Recorded", Phase, InterfaceState)

DELETED = "deleted"


class _Subject:
    """The short-lived model a Machine drives: just a state and the action's result."""

    def __init__(self, state: str) -> None:
        self.state = state
        self.result: Any = None

    def __repr__(self) -> str:
        return f"_Subject({self.state!r})"


class StateMachine:
    """One kind's transition table, and the only way to change that kind's state."""

    def __init__(
        self,
        name: str,
        states: Iterable[str],
        transitions: Iterable[tuple[str, str | list[str], str]],
    ) -> None:
        self.name = name
        self.states = tuple(states)
        self.table: dict[str, dict[str, str]] = {}
        spec = []
        for trigger, sources, dest in transitions:
            for source in [sources] if isinstance(sources, str) else sources:
                self.table.setdefault(trigger, {})[source] = dest
            spec.append({"trigger": trigger, "source": sources, "dest": dest})
        self._machine = Machine(
            model=None,
            states=list(self.states),
            transitions=spec,
            initial=None,
            auto_transitions=False,
            ignore_invalid_triggers=False,
            send_event=True,
            before_state_change=[self._run_action],
            model_attribute="state",
        )

    @staticmethod
    def _run_action(event: Any) -> None:
        action = event.kwargs.get("action")
        if action is not None:
            event.model.result = action()

    def allowed(self, trigger: str, state: str) -> bool:
        return state in self.table.get(trigger, {})

    def target(self, trigger: str, state: str) -> str:
        """The state ``trigger`` leads to from ``state``; refused when not in the table."""
        try:
            return self.table[trigger][state]
        except KeyError:
            raise TransitionRefused(self.name, trigger, state) from None

    def triggers(self, state: str) -> list[str]:
        return sorted(t for t, sources in self.table.items() if state in sources)

    def fire(
        self, state: str, trigger: str, action: Callable[[], T] | None = None
    ) -> tuple[str, T]:
        """Fire ``trigger`` from ``state``, running ``action`` first.

        :return: the new state and the action's result.
        :raise TransitionRefused: the table does not allow ``trigger`` from ``state``.
        Whatever ``action`` raises propagates, and no state changes.
        """
        event = self._machine.events.get(trigger)
        if event is None or not self.allowed(trigger, state):
            raise TransitionRefused(self.name, trigger, state)
        subject = _Subject(state)
        # the Machine's own transition for this source, executed as ``Event.trigger``
        # executes it, without the event layer around it that this Machine does not use
        # (no queue, no prepare_event, finalize_event or on_exception callbacks): a
        # sixth of a fire's cost, twice per pod network
        data = EventData(self._machine.get_state(state), event, self._machine, subject,
                         args=(), kwargs={"action": action})
        for transition in event.transitions.get(state, ()):
            data.transition = transition
            if transition.execute(data):
                return subject.state, subject.result
        # the table and transitions disagree: a bug here
        raise TransitionRefused(self.name, trigger, state)

    @property
    def registered_models(self) -> int:
        """How many models are attached to the Machine (always 0: fire adds none)."""
        return len(self._machine.models)


def state_of(recorded: Phase | InterfaceState) -> str:
    """The machine state a record's phase, or an interface's recorded state, stands for."""
    return _STATE_OF[recorded]


#: each recorded value's machine state, worked out once (asked on every transition)
_STATE_OF: dict[Phase | InterfaceState, str] = {
    member: member.value.lower() for kind in (Phase, InterfaceState) for member in kind}


def recorded_as(kind: type[Recorded], state: str) -> Recorded:
    """What a record stores for machine state ``state`` (:data:`DELETED` is stored as no
    record at all)."""
    return kind(state.capitalize())


POD_NETWORK_STATES = (*(state_of(phase) for phase in Phase), DELETED)

POD_NETWORK_MACHINE = StateMachine(
    "pod_network",
    POD_NETWORK_STATES,
    [
        ("allocate", "pending", "allocated"),
        ("route", "allocated", "routed"),
        ("repair", "routed", "allocated"),
        # the record's address is not its own any more (held by another record, or gone
        # from the cloud): allocated again
        ("readdress", ["allocated", "routed"], "pending"),
        ("release", ["pending", "allocated", "routed"], "releasing"),
        ("reclaim", "releasing", "allocated"),
        ("finish", "releasing", DELETED),
    ],
)

ENI_STATES = (*(state_of(state) for state in InterfaceState), DELETED)

ENI_MACHINE = StateMachine(
    "eni",
    ENI_STATES,
    [
        ("attached", "initializing", "ready"),
        ("inhibit", "ready", "inhibited"),
        ("recover", "inhibited", "ready"),
        ("dispose", ["ready", "inhibited"], "disposing"),
        ("fail", "initializing", "disposing"),
        ("gone", "disposing", DELETED),
    ],
)
