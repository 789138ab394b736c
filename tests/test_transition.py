"""The one transition path (podnet.core.transition) and the one map between recorded
states and machine states (podnet.core.machines)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from podnet.core.errors import ErrorKind, ProviderError, TransitionRefused
from podnet.core.machines import (
    ENI_MACHINE,
    ENI_STATES,
    POD_NETWORK_MACHINE,
    POD_NETWORK_STATES,
    recorded_as,
    state_of,
)
from podnet.core.models import (
    InterfaceState,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    PodNetworkStatus,
)
from podnet.core.reconcile.podnetwork_wording import subject_of
from podnet.core.tracing import ATTR_ERROR_TYPE, ATTR_FROM, ATTR_NODE, ATTR_TO, Tracing
from podnet.core.transition import Subject, Transitions
from podnet.hookspecs.types import TransitionEvent

SUBJECT = Subject(key="demo/web.default.1234", provider="reference", state="pending",
                  span_attributes={ATTR_NODE: "node-0", "podnet.ip": None},
                  event_attributes={"ip": None, "node": "node-0"})


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.clear()


class Rig:
    def __init__(self, exporter: InMemorySpanExporter) -> None:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        self.succeeded: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self.events: list[TransitionEvent] = []
        self.transitions = Transitions(Tracing(provider), succeeded=self.succeeded,
                                       failed=self.failed, notify=self.events.append)


def test_a_transition_runs_its_action_in_its_span_and_says_where_it_went(
        exporter: InMemorySpanExporter) -> None:
    rig = Rig(exporter)
    settled = Subject(key=SUBJECT.key, provider="reference", state="allocated",
                      event_attributes={"ip": "10.0.0.5", "node": "node-0"})
    result = rig.transitions.run(POD_NETWORK_MACHINE, SUBJECT, "allocate",
                                 lambda span: span.traceparent, settled=lambda _: settled)
    assert result is not None  # the action ran with the span, current
    (span,) = exporter.get_finished_spans()
    assert span.name == "pod_network.allocate"
    attributes = span.attributes or {}
    assert attributes[ATTR_FROM] == "pending" and attributes[ATTR_TO] == "allocated"
    assert attributes[ATTR_NODE] == "node-0" and "podnet.ip" not in attributes
    assert rig.succeeded == Counter({"pod_network.allocate": 1}) and not rig.failed
    assert rig.events == [TransitionEvent(
        machine="pod_network", trigger="allocate", source="pending", dest="allocated",
        object_key=SUBJECT.key, provider="reference", ok=True,
        attributes={"ip": "10.0.0.5", "node": "node-0"})]


def test_a_failed_action_changes_nothing_and_is_counted_told_and_raised(
        exporter: InMemorySpanExporter) -> None:
    rig = Rig(exporter)
    error = ProviderError(ErrorKind.THROTTLED, "slow down")

    def action(_span: object) -> None:
        raise error

    subject = Subject(key="node-0/eni-1", provider="reference", state="ready")
    with pytest.raises(ProviderError) as raised:
        rig.transitions.run(ENI_MACHINE, subject, "dispose", action)
    assert raised.value is error
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert ATTR_TO not in (span.attributes or {})
    assert (span.attributes or {})[ATTR_ERROR_TYPE] == "throttled"
    assert rig.failed == Counter({"eni.dispose": 1}) and not rig.succeeded
    assert rig.events == [TransitionEvent(
        machine="eni", trigger="dispose", source="ready", dest=None, object_key="node-0/eni-1",
        provider="reference", ok=False, error="ProviderError")]


def test_the_failure_handler_gets_the_error_and_the_span_once_the_span_ended(
        exporter: InMemorySpanExporter) -> None:
    rig = Rig(exporter)
    seen: list[tuple[BaseException, int]] = []

    def failed(exc: BaseException, span: object) -> str:
        seen.append((exc, len(exporter.get_finished_spans())))
        return "recorded"

    answer = rig.transitions.run(POD_NETWORK_MACHINE, SUBJECT, "finish", lambda _: "never",
                                 failed=failed)
    assert answer == "recorded"
    (exc, ended), = seen
    assert isinstance(exc, TransitionRefused)  # finish is not a pending record's trigger
    assert ended == 1
    assert rig.failed == Counter({"pod_network.finish": 1})
    assert [e.ok for e in rig.events] == [False]


@pytest.mark.parametrize("error", [KeyboardInterrupt(), SystemExit(1)])
def test_what_stops_the_process_still_ends_the_span_and_reaches_the_handler(
        exporter: InMemorySpanExporter, error: BaseException) -> None:
    rig = Rig(exporter)

    def action(_span: object) -> None:
        raise error

    def failed(exc: BaseException, _span: object) -> None:
        raise exc  # as the pod network reconciler does: not its to swallow

    with pytest.raises(type(error)):
        rig.transitions.run(POD_NETWORK_MACHINE, SUBJECT, "allocate", action, failed=failed)
    assert len(exporter.get_finished_spans()) == 1
    assert rig.failed == Counter({"pod_network.allocate": 1})


def test_one_map_between_recorded_and_machine_states() -> None:
    assert (*(state_of(p) for p in Phase), "deleted") == POD_NETWORK_STATES
    assert (*(state_of(s) for s in InterfaceState), "deleted") == ENI_STATES
    for phase in Phase:
        assert recorded_as(Phase, state_of(phase)) is phase
    for state in InterfaceState:
        assert recorded_as(InterfaceState, state_of(state)) is state
    assert state_of(Phase.RELEASING) == "releasing"
    assert recorded_as(InterfaceState, "disposing") is InterfaceState.DISPOSING


def test_with_no_listener_no_event_is_built_and_one_that_comes_later_hears(
        exporter: InMemorySpanExporter) -> None:
    """``listened`` is asked at each attempt: while it says no, neither the event nor the
    settled subject is made (the warm path's two transitions), and the counters and span
    are as always; once it says yes, the events come again."""
    listening = [False]
    events: list[TransitionEvent] = []
    settled_calls: list[object] = []
    succeeded: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    transitions = Transitions(Tracing(None), succeeded=succeeded, failed=failed,
                              notify=events.append, listened=lambda: listening[0])

    def settled(result: object) -> Subject:
        settled_calls.append(result)
        return SUBJECT

    assert transitions.run(POD_NETWORK_MACHINE, SUBJECT, "allocate", lambda _: 1,
                           settled=settled) == 1
    with pytest.raises(TransitionRefused):
        transitions.run(POD_NETWORK_MACHINE, SUBJECT, "finish", lambda _: 2)
    assert events == [] and settled_calls == []
    assert succeeded == Counter({"pod_network.allocate": 1})
    assert failed == Counter({"pod_network.finish": 1})
    listening[0] = True
    transitions.run(POD_NETWORK_MACHINE, SUBJECT, "allocate", lambda _: 3, settled=settled)
    assert settled_calls == [3]
    assert [(e.trigger, e.ok) for e in events] == [("allocate", True)]



def test_a_pod_networks_span_attributes_are_built_only_when_its_spans_are_recorded() -> None:
    pn = PodNetwork(
        metadata=ObjectMeta(name="web.default.00000000", namespace="demo"),
        spec=PodNetworkSpec(pod_name="web", pod_uid="u1", node_name="node-0",
                            provider="reference"),
        status=PodNetworkStatus(phase=Phase.ALLOCATED, ip="10.0.0.5", interface="eth0"))
    traced = subject_of(pn)
    assert traced.span_attributes[ATTR_NODE] == "node-0"
    assert traced.span_attributes["podnet.ip"] == "10.0.0.5"
    untraced = subject_of(pn, traced=False)
    assert dict(untraced.span_attributes) == {}
    # the event's are the same either way: a listener may come at any time
    assert untraced.event_attributes == traced.event_attributes == {
        "ip": "10.0.0.5", "node": "node-0"}
    assert Transitions(Tracing(None), succeeded=Counter(), failed=Counter(),
                       notify=lambda _event: None).traced is False
