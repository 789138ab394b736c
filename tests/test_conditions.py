"""The one condition writer: replace by type, keep lastTransitionTime unless the status
changes."""

from __future__ import annotations

from datetime import UTC, datetime

from podnet.core.models import Condition, set_condition

T0 = datetime(2026, 1, 1, tzinfo=UTC)
T1 = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


def test_a_new_type_is_added_last() -> None:
    other = Condition("RequestsApplied", "True", last_transition_time=T0)
    ready = Condition("Ready", "True", "Routed", last_transition_time=T1)
    assert set_condition((other,), ready) == (other, ready)


def test_a_new_reason_or_message_alone_keeps_the_transition_time() -> None:
    old = Condition("Ready", "False", "AllocateFailed", "boom", last_transition_time=T0)
    new = Condition("Ready", "False", "WaitingForAddress", "pool empty",
                    last_transition_time=T1)
    [written] = set_condition((old,), new)
    assert (written.reason, written.message) == ("WaitingForAddress", "pool empty")
    assert written.last_transition_time == T0


def test_a_new_status_moves_the_transition_time() -> None:
    old = Condition("Ready", "False", "AllocateFailed", last_transition_time=T0)
    new = Condition("Ready", "True", "Routed", last_transition_time=T1)
    assert set_condition((old,), new) == (new,)


def test_the_replaced_condition_goes_last_and_the_others_stay() -> None:
    ready = Condition("Ready", "True", last_transition_time=T0)
    pool = Condition("PoolReady", "True", last_transition_time=T0)
    check = Condition("ProviderCheck", "True", last_transition_time=T0)
    new = Condition("Ready", "True", "Routed", last_transition_time=T1)
    assert set_condition((ready, pool, check), new) == (
        pool, check, Condition("Ready", "True", "Routed", last_transition_time=T0))
