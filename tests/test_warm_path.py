"""The warm path's shape (goal P3): a pod network allocated from an idle address and
routed, in one pass. What it must not do again is counted here, where the load cannot
move it; its CPU is measured by ``bench/core_overhead.py``."""

from __future__ import annotations

from typing import Any

import pytest

from podnet.core.caches import Caches
from podnet.core.policy import PoolPolicy
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig

POLICY = PoolPolicy(min_idle=4, max_idle=8, batch_size=4, max_batch_size=8, reuse_cooldown=0.0)


def warm_rig() -> tuple[EngineRig, str]:
    """An engine whose node's pool holds idle addresses already."""
    rig = EngineRig([("reference", ReferenceProvider(ReferenceCloud(seed=0), policy=POLICY))])
    node = rig.node(0)
    rig.settle()
    return rig, node


def spy(monkeypatch: pytest.MonkeyPatch, target: object, name: str) -> list[Any]:
    """Each call of ``target.name`` (a class's method, or one object's) while the test
    runs: its answer."""
    answers: list[Any] = []
    real = getattr(target, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        answer = real(*args, **kwargs)
        answers.append(answer)
        return answer

    monkeypatch.setattr(target, name, counted)
    return answers


def test_a_clock_with_microseconds_still_takes_writes_back_from_their_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A record's times are written in whole seconds, as the wire keeps them: the
    status write's answer reads back as what was sent and is not parsed again (a real
    clock has microseconds; every status write was parsed in full)."""
    rig, node = warm_rig()
    rig.clock.advance(0.25)
    answers = spy(monkeypatch, Caches, "as_written")
    rig.pod("p1", node)
    rig.engine.run_until_idle()
    record = rig.record("p1")
    assert record["status"]["phase"] == "Routed"
    assert len(answers) == 2  # the create, the Routed status write
    assert None not in answers
    cached = rig.engine.caches.pod_networks.get(f"{rig.namespace}/{record['metadata']['name']}")
    assert cached is not None and cached.status.last_transition_time is not None
    assert cached.status.last_transition_time.microsecond == 0
    assert all(c.last_transition_time is not None and c.last_transition_time.microsecond == 0
               for c in cached.status.conditions)


def test_the_route_is_told_the_node_as_the_allocation_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rig, node = warm_rig()
    contexts = spy(monkeypatch, Caches, "node_context")
    rig.pod("p1", node)
    rig.engine.run_until_idle()
    assert rig.record("p1")["status"]["phase"] == "Routed"
    assert len(contexts) == 1


def test_a_pass_goes_on_from_the_pod_and_records_it_read_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pod and its records, read to find whether a VM's stripe is due, are what the
    pass goes on from (a pod of no VM waits for no stripe)."""
    rig, node = warm_rig()
    rig.pod("p1", node)
    pod_reads = spy(monkeypatch, rig.engine.caches.pods, "get")
    record_reads = spy(monkeypatch, rig.engine.caches.pod_networks, "by_index")
    rig.engine.run_until_idle()
    assert rig.record("p1")["status"]["phase"] == "Routed"
    assert record_reads == [[]]  # the pod's records: none yet
    assert len(pod_reads) == 1
