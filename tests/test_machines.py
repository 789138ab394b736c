"""The two state machines against the design's transition tables.

The tables below are copied from the design, not derived from ``podnet.core.machines``:
a change to a machine's table must fail here until the design (and this file) changes too.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import pytest
from transitions import Machine

import podnet.core.machines as machines
from podnet.core.errors import TransitionRefused
from podnet.core.machines import ENI_MACHINE, POD_NETWORK_MACHINE, StateMachine

#: trigger -> {source: dest}, as in the design
POD_NETWORK_DESIGN: dict[str, dict[str, str]] = {
    "allocate": {"pending": "allocated"},
    "route": {"allocated": "routed"},
    "repair": {"routed": "allocated"},
    "readdress": {"allocated": "pending", "routed": "pending"},
    "release": {"pending": "releasing", "allocated": "releasing", "routed": "releasing"},
    "reclaim": {"releasing": "allocated"},
    "finish": {"releasing": "deleted"},
}
POD_NETWORK_DESIGN_STATES = ("pending", "allocated", "routed", "releasing", "deleted")

ENI_DESIGN: dict[str, dict[str, str]] = {
    "attached": {"initializing": "ready"},
    "inhibit": {"ready": "inhibited"},
    "recover": {"inhibited": "ready"},
    "dispose": {"ready": "disposing", "inhibited": "disposing"},
    "fail": {"initializing": "disposing"},
    "gone": {"disposing": "deleted"},
}
ENI_DESIGN_STATES = ("initializing", "ready", "inhibited", "disposing", "deleted")

DESIGNS: dict[str, tuple[StateMachine, dict[str, dict[str, str]], tuple[str, ...]]] = {
    "pod_network": (POD_NETWORK_MACHINE, POD_NETWORK_DESIGN, POD_NETWORK_DESIGN_STATES),
    "eni": (ENI_MACHINE, ENI_DESIGN, ENI_DESIGN_STATES),
}


def _pairs(allowed: bool) -> list[Any]:
    """Every (machine, trigger, state) of the design, the allowed or the refused ones."""
    out = []
    for key, (_, design, states) in DESIGNS.items():
        for trigger, state in itertools.product(design, states):
            if (state in design[trigger]) is allowed:
                out.append(pytest.param(key, trigger, state, id=f"{key}-{trigger}-{state}"))
    return out


ALLOWED = _pairs(True)
REFUSED = _pairs(False)


def test_pair_lists_cover_every_trigger_and_state() -> None:
    # 7 pod network triggers and 6 ENI triggers x 5 states; release has 3 sources,
    # readdress and dispose 2
    assert len(ALLOWED) == 10 + 7
    assert len(ALLOWED) + len(REFUSED) == (7 + 6) * 5


class Spy:
    """An action that counts its calls and returns a fresh object (or raises)."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.calls = 0
        self.error = error
        self.result = object()

    def __call__(self) -> object:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.result


class ActionFailed(Exception):
    pass


# --- the table as a whole ----------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(DESIGNS))
def test_table_equals_design(key: str) -> None:
    machine, design, states = DESIGNS[key]
    assert machine.name == key
    assert machine.table == design
    assert machine.states == states
    # every source and destination is a declared state
    for sources in machine.table.values():
        for source, dest in sources.items():
            assert source in machine.states
            assert dest in machine.states


@pytest.mark.parametrize("key", sorted(DESIGNS))
def test_transitions_machine_agrees_with_table(key: str) -> None:
    """The ``transitions`` Machine behind the table knows exactly the same edges."""
    machine, design, _ = DESIGNS[key]
    inner = machine._machine
    assert isinstance(inner, Machine)
    edges = {
        (trigger, source, t.dest)
        for trigger, event in inner.events.items()
        for source, ts in event.transitions.items()
        for t in ts
    }
    expected = {
        (trigger, source, dest)
        for trigger, sources in design.items()
        for source, dest in sources.items()
    }
    assert edges == expected
    assert set(inner.states) == set(DESIGNS[key][2])


@pytest.mark.parametrize("key", sorted(DESIGNS))
def test_deleted_is_terminal(key: str) -> None:
    machine, _, _ = DESIGNS[key]
    assert machine.triggers("deleted") == []


@pytest.mark.parametrize("key", sorted(DESIGNS))
def test_triggers_lists_the_design_triggers_of_each_state(key: str) -> None:
    machine, design, states = DESIGNS[key]
    for state in states:
        expected = sorted(t for t, sources in design.items() if state in sources)
        assert machine.triggers(state) == expected, state


# --- every (trigger, state) pair ---------------------------------------------------------


@pytest.mark.parametrize(("key", "trigger", "state"), ALLOWED)
def test_allowed_pair_reaches_design_destination(key: str, trigger: str, state: str) -> None:
    machine, design, _ = DESIGNS[key]
    dest = design[trigger][state]
    assert machine.allowed(trigger, state)
    assert machine.target(trigger, state) == dest
    assert trigger in machine.triggers(state)

    action = Spy()
    new_state, result = machine.fire(state, trigger, action)
    assert new_state == dest
    assert result is action.result
    assert action.calls == 1
    assert machine.registered_models == 0


@pytest.mark.parametrize(("key", "trigger", "state"), ALLOWED)
def test_allowed_pair_without_action(key: str, trigger: str, state: str) -> None:
    machine, design, _ = DESIGNS[key]
    assert machine.fire(state, trigger) == (design[trigger][state], None)
    assert machine.registered_models == 0


@pytest.mark.parametrize(("key", "trigger", "state"), REFUSED)
def test_refused_pair_raises_and_never_runs_action(key: str, trigger: str, state: str) -> None:
    machine, _, _ = DESIGNS[key]
    assert not machine.allowed(trigger, state)
    assert trigger not in machine.triggers(state)

    action = Spy()
    with pytest.raises(TransitionRefused) as info:
        machine.fire(state, trigger, action)
    err = info.value
    assert (err.machine, err.trigger, err.state) == (key, trigger, state)
    message = str(err)
    assert key in message
    assert repr(trigger) in message
    assert repr(state) in message
    assert action.calls == 0
    assert machine.registered_models == 0

    with pytest.raises(TransitionRefused) as info:
        machine.target(trigger, state)
    assert (info.value.machine, info.value.trigger, info.value.state) == (key, trigger, state)


@pytest.mark.parametrize("key", sorted(DESIGNS))
@pytest.mark.parametrize(("trigger", "state"), [("nope", "pending"), ("allocate", "nowhere")])
def test_unknown_trigger_or_state_is_refused(key: str, trigger: str, state: str) -> None:
    machine, _, _ = DESIGNS[key]
    action = Spy()
    with pytest.raises(TransitionRefused):
        machine.fire(state, trigger, action)
    assert action.calls == 0
    assert machine.registered_models == 0


class _RecordingSubject(machines._Subject):
    """The machine's short-lived model, remembered so a test can look at it afterwards."""

    made: list[_RecordingSubject] = []

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.made.append(self)


@pytest.fixture
def subjects(monkeypatch: pytest.MonkeyPatch) -> list[_RecordingSubject]:
    made: list[_RecordingSubject] = []
    monkeypatch.setattr(_RecordingSubject, "made", made)
    monkeypatch.setattr(machines, "_Subject", _RecordingSubject)
    return made


@pytest.mark.parametrize(("key", "trigger", "state"), ALLOWED)
def test_failing_action_leaves_state_and_reraises(
    key: str, trigger: str, state: str, subjects: list[_RecordingSubject]
) -> None:
    machine, design, _ = DESIGNS[key]
    error = ActionFailed(f"{trigger} failed")
    action = Spy(error)
    with pytest.raises(ActionFailed) as info:
        machine.fire(state, trigger, action)
    assert info.value is error
    assert action.calls == 1
    assert machine.registered_models == 0
    [subject] = subjects
    assert subject.state == state
    assert subject not in machine._machine.models

    # the same transition still works afterwards, from the same state
    retry = Spy()
    assert machine.fire(state, trigger, retry) == (design[trigger][state], retry.result)
    assert subjects[1].state == design[trigger][state]
    assert machine.registered_models == 0


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(3), ValueError("v")])
def test_any_base_exception_propagates_and_unregisters(error: BaseException) -> None:
    action = Spy(error)
    with pytest.raises(type(error)):
        POD_NETWORK_MACHINE.fire("pending", "allocate", action)
    assert POD_NETWORK_MACHINE.registered_models == 0


def test_table_and_machine_disagreeing_is_refused_and_unregisters() -> None:
    """A table entry the ``transitions`` Machine does not know is refused, not leaked."""
    machine = StateMachine("test", ["a", "b", "c"], [("go", "a", "b")])
    machine.table["go"]["c"] = "b"  # a bug on purpose: the Machine has no go from c
    action = Spy()
    with pytest.raises(TransitionRefused) as info:
        machine.fire("c", "go", action)
    assert (info.value.machine, info.value.trigger, info.value.state) == ("test", "go", "c")
    assert action.calls == 0
    assert machine.registered_models == 0


def test_state_machines_are_independent() -> None:
    machine = StateMachine("m", ["x", "y"], [("step", "x", "y")])
    assert machine.fire("x", "step") == ("y", None)
    with pytest.raises(TransitionRefused):
        POD_NETWORK_MACHINE.fire("x", "step")
    with pytest.raises(TransitionRefused):
        machine.fire("pending", "allocate")


def test_nested_fire_from_an_action() -> None:
    """An action may drive another object's machine (an ENI while allocating)."""

    def allocate() -> str:
        state: str = ENI_MACHINE.fire("initializing", "attached")[0]
        assert POD_NETWORK_MACHINE.registered_models == 0  # fired on, never added
        return state

    assert POD_NETWORK_MACHINE.fire("pending", "allocate", allocate) == ("allocated", "ready")
    assert POD_NETWORK_MACHINE.registered_models == 0
    assert ENI_MACHINE.registered_models == 0


# --- concurrency -------------------------------------------------------------------------

#: a walk through the pod network table that comes back to where it starts
_CYCLE: list[tuple[str, str, str]] = [
    ("pending", "allocate", "allocated"),
    ("allocated", "route", "routed"),
    ("routed", "repair", "allocated"),
    ("allocated", "route", "routed"),
    ("routed", "release", "releasing"),
    ("releasing", "reclaim", "allocated"),
    ("allocated", "release", "releasing"),
    ("releasing", "finish", "deleted"),
]


def test_concurrent_fires_are_correct_and_leave_no_model() -> None:
    threads_n, per_thread = 8, 500
    barrier = threading.Barrier(threads_n)
    errors: list[str] = []
    done = [0] * threads_n

    def work(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            source, trigger, dest = _CYCLE[i % len(_CYCLE)]
            token = (n, i)
            fail = i % 7 == 3
            action: Callable[[], tuple[int, int]]
            if fail:

                def action(token: tuple[int, int] = token) -> tuple[int, int]:
                    raise ActionFailed(token)
            else:

                def action(token: tuple[int, int] = token) -> tuple[int, int]:
                    return token

            try:
                new_state, result = POD_NETWORK_MACHINE.fire(source, trigger, action)
            except ActionFailed as exc:
                if not fail or exc.args != (token,):
                    errors.append(f"thread {n} step {i}: unexpected failure {exc!r}")
            except Exception as exc:  # pragma: no cover - reported below
                errors.append(f"thread {n} step {i}: {exc!r}")
            else:
                if fail:
                    errors.append(f"thread {n} step {i}: failing action did not raise")
                elif (new_state, result) != (dest, token):
                    errors.append(f"thread {n} step {i}: got {(new_state, result)!r}")
            done[n] += 1

    threads = [threading.Thread(target=work, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert done == [per_thread] * threads_n
    assert POD_NETWORK_MACHINE.registered_models == 0


# --- fire without transitions' generic execution ------------------------------------------


def test_fire_moves_along_the_machines_edges_without_its_generic_execution(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The Machine's edges are read once at build; a fire runs the action and sets the
    state without executing transitions' ``Transition`` (its generic callback layers cost
    a tenth of a pod network's warm path), with the same outcome."""
    from transitions import Transition

    def refuse(*_: Any) -> bool:
        raise AssertionError("Transition.execute ran")

    monkeypatch.setattr(Transition, "execute", refuse)
    action = Spy()
    assert POD_NETWORK_MACHINE.fire("pending", "allocate", action) == ("allocated",
                                                                        action.result)
    assert ENI_MACHINE.fire("initializing", "attached") == ("ready", None)
    with pytest.raises(ActionFailed):
        POD_NETWORK_MACHINE.fire("allocated", "route", Spy(ActionFailed()))


@pytest.mark.parametrize("extra", [
    {"conditions": "ok"}, {"before": "first"}, {"after": "then"}, {"prepare": "ready"}])
def test_plain_edges_refuse_a_transition_with_callbacks(extra: dict[str, str]) -> None:
    """An edge with callbacks of its own would need transitions' execution: the edges
    are not read from such a Machine (fire would skip what the table asks for)."""
    spec = [{"trigger": "go", "source": "a", "dest": "b", **extra}]
    inner = Machine(model=None, states=["a", "b"], transitions=spec, initial=None,
                    auto_transitions=False, before_state_change=[lambda event: None])
    with pytest.raises(ValueError, match="go from a"):
        machines._plain_edges(inner)


def test_plain_edges_refuse_state_callbacks_and_machine_callbacks() -> None:
    spec = [{"trigger": "go", "source": "a", "dest": "b"}]
    with_enter = Machine(model=None, states=["a", {"name": "b", "on_enter": "x"}],
                         transitions=spec, initial=None, auto_transitions=False,
                         before_state_change=[lambda event: None])
    with pytest.raises(ValueError, match="state b"):
        machines._plain_edges(with_enter)
    with_after = Machine(model=None, states=["a", "b"], transitions=spec, initial=None,
                         auto_transitions=False, before_state_change=[lambda event: None],
                         after_state_change=[lambda event: None])
    with pytest.raises(ValueError, match="after_state_change"):
        machines._plain_edges(with_after)
