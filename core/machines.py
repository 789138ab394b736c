"""The two state machines, built with ``transitions``: one Machine per kind, built once.

State lives in the records (``status.phase`` of a PodNetwork, ``state`` of an interface in
a NodeNetwork), never in the machine. To work on an object the engine wraps its recorded
state in a short-lived model and executes the trigger's ``Transition`` for that state on
it, as the trigger's ``Event`` would: the Machine's own transitions, callbacks and checks
run, but the model is never added to the Machine (a
registered model costs memory, and ``add_model`` binds every trigger and state helper to
it: about half the cost of a fire, twice per pod network on the warm path).

A trigger fires with an ``action``: the provider step of the transition. The action runs
before the state changes (transitions' ``before`` callback), so when it raises the state is
left unchanged and the exception reaches the caller, who records a condition and an Event.

Neither table declares conditions or callbacks of its own: the only callback is the
Machine's ``before_state_change`` that runs the action. Executing transitions' generic
``Transition`` for that (prepare, conditions, before, exit, set_state, enter, after: about
60 Python calls, 14 µs) was a tenth of a pod network's CPU on the warm path, twice per pod
network; so at build the Machine's own edges are read back and checked to carry nothing
else, and :meth:`StateMachine.fire` runs the action and moves the state along them itself.
:mod:`podnet.core.transition` runs a transition of either machine with its span,
counters and ``podnet_transition`` event.

A record stores its state as a capitalised enum value (``status.phase`` ``Allocated``,
an interface's ``Ready``); the machine's state is that value in lower case, for both
machines (:func:`state_of`, :func:`recorded_as`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from transitions import Machine

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
        self._edges = _plain_edges(self._machine)

    @staticmethod
    def _run_action(event: Any) -> None:
        # the Machine's own way to run an action, for whoever triggers it directly;
        # fire() does the same without it (see _plain_edges)
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
        dest = self._edges.get((trigger, state))
        if dest is None or not self.allowed(trigger, state):
            # not in the table, or the table and the Machine disagree (a bug here)
            raise TransitionRefused(self.name, trigger, state)
        subject = _Subject(state)
        if action is not None:
            subject.result = action()  # raises: no state changes
        subject.state = dest
        return subject.state, subject.result

    @property
    def registered_models(self) -> int:
        """How many models are attached to the Machine (always 0: fire adds none)."""
        return len(self._machine.models)


def _plain_edges(machine: Machine) -> dict[tuple[str, str], str]:
    """(trigger, source) -> dest of every edge ``machine`` knows, once it is checked that
    firing one only runs the Machine's ``before_state_change`` (the action) and sets the
    state: what :meth:`StateMachine.fire` does without transitions' generic execution."""
    machine_callbacks = ("prepare_event", "finalize_event", "on_exception", "on_final",
                         "after_state_change")
    extra = [name for name in machine_callbacks if getattr(machine, name)]
    if len(machine.before_state_change) != 1 or extra:
        raise ValueError(f"machine callbacks fire() does not run: {extra}")
    edges: dict[tuple[str, str], str] = {}
    for trigger, event in machine.events.items():
        for source, transitions in event.transitions.items():
            for transition in transitions:
                if (transition.prepare or transition.conditions or transition.before
                        or transition.after or transition.dest is None):
                    raise ValueError(f"{trigger} from {source}: callbacks fire() does not run")
                edges.setdefault((trigger, source), transition.dest)
    for state in machine.states.values():
        if state.on_enter or state.on_exit or state.final:
            raise ValueError(f"state {state.name}: callbacks fire() does not run")
    return edges


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
