"""A write's answer fed back into the cache: what the cache holds is what reading the
answer gives, whether or not the writer could skip parsing it."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import attrs
import pytest

from podnet.core import convert
from podnet.core.caches import Caches
from podnet.core.cluster.port import NAMESPACE, POD_NETWORK
from podnet.core.convert import RecordError, from_wire, to_wire
from podnet.core.models import (
    FINALIZER,
    Condition,
    NetworkRequest,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodNetwork,
    PodNetworkSpec,
    Route,
)
from podnet.core.records import RecordWriter
from podnet.sim.memory import InMemoryCluster

WHOLE = datetime(2026, 5, 1, 12, 0, 7, tzinfo=UTC)


@pytest.fixture
def rig() -> tuple[InMemoryCluster, Caches, RecordWriter]:
    cluster = InMemoryCluster()
    cluster.create(NAMESPACE, {"metadata": {"name": "ns"}})
    caches = Caches(cluster, lambda _key: None)
    caches.pod_networks.start()
    return cluster, caches, RecordWriter(cluster, caches, Counter())


def record() -> PodNetwork:
    return PodNetwork(
        metadata=ObjectMeta(name="p.default.abcd", namespace="ns", labels={"a": "b"},
                            finalizers=(FINALIZER,), owner_references=(OwnerReference(
                                api_version="v1", kind="Pod", name="p", uid="u1"),)),
        spec=PodNetworkSpec(pod_name="p", pod_uid="u1", node_name="n1", provider="reference",
                            requests=NetworkRequest(mac_address="02:00:00:00:00:01")))


def read_back(cluster: InMemoryCluster, pn: PodNetwork) -> PodNetwork:
    return from_wire(PodNetwork, cluster.get(POD_NETWORK, pn.metadata.name, "ns"))


def routed(pn: PodNetwork, moment: datetime) -> PodNetwork:
    return attrs.evolve(pn, status=attrs.evolve(
        pn.status, phase=Phase.ROUTED, ip="10.0.0.5", subnet="10.0.0.0/24", prefix_length=24,
        routes=(Route(dst="0.0.0.0/0", gw="10.0.0.1"),), mtu=1500, last_transition_time=moment,
        conditions=(Condition(type="Ready", status="True", reason="Routed",
                              last_transition_time=moment),)))


def test_create_and_status_write_cache_what_the_answer_reads_as(rig: tuple) -> None:
    cluster, caches, records = rig
    created = records.create(POD_NETWORK, record())
    assert created == read_back(cluster, created) == caches.pod_networks.get(created.key)
    written = records.update_status(POD_NETWORK, routed(created, WHOLE))
    assert written == read_back(cluster, written) == caches.pod_networks.get(written.key)
    assert written.metadata.resource_version != created.metadata.resource_version


def test_a_time_the_wire_rounds_is_read_back_rounded(rig: tuple) -> None:
    cluster, caches, records = rig
    created = records.create(POD_NETWORK, record())
    written = records.update_status(POD_NETWORK, routed(created, WHOLE.replace(microsecond=5)))
    assert written == read_back(cluster, written) == caches.pod_networks.get(written.key)
    assert written.status.last_transition_time == WHOLE


def test_an_answer_unlike_what_was_sent_is_not_taken_for_it(rig: tuple) -> None:
    cluster, caches, records = rig
    created = records.create(POD_NETWORK, record())
    sent = routed(created, WHOLE)
    wire = to_wire(sent)
    answer = cluster.update_status(POD_NETWORK, wire)
    assert caches.as_written(answer, sent, wire) == from_wire(PodNetwork, answer)
    changed = {**answer, "status": {**answer["status"], "ip": "10.0.0.6"}}
    assert caches.as_written(changed, sent, wire) is None
    extra = {**answer, "metadata": {**answer["metadata"], "generation": 7}}
    taken = caches.as_written(extra, sent, wire)
    assert taken == from_wire(PodNetwork, extra) and taken.metadata.generation == 7
    naive = routed(created, WHOLE.replace(tzinfo=None))
    assert caches.as_written(answer, naive, to_wire(naive)) is None


def test_a_create_answer_is_read_from_what_the_server_added(rig: tuple) -> None:
    cluster, caches, _records = rig
    sent = routed(record(), WHOLE)  # a create carries no status: the server drops it
    wire = to_wire(sent)
    answer = cluster.create(POD_NETWORK, wire)
    assert "status" not in answer
    taken = caches.as_written(answer, sent, wire)
    assert taken is not None and taken == from_wire(PodNetwork, answer)
    assert taken.status.phase is Phase.PENDING and taken.status.ip is None
    assert taken.metadata.uid == answer["metadata"]["uid"] and taken.metadata.generation == 1
    assert taken.metadata.creation_timestamp is not None
    # what the server added is read by the converter's rules: a bad value is no shortcut
    bad = {**answer, "metadata": {**answer["metadata"], "uid": 5}}
    assert caches.as_written(bad, sent, wire) is None
    # nor is an answer that lost something sent, or carries a key that was not sent
    lost = {**answer, "metadata": {k: v for k, v in answer["metadata"].items()
                                   if k != "labels"}}
    assert caches.as_written(lost, sent, wire) is None
    assert caches.as_written({**answer, "extra": 1}, sent, wire) is None


def test_a_create_answer_is_read_without_the_converter(
        rig: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a create's answer usually adds (uid, version, generation, creation time) is
    read as the converter reads it, without it; what podnet does not read (managedFields)
    is left out as the converter leaves it."""
    cluster, caches, _records = rig
    sent = record()
    wire = to_wire(sent)
    answer = cluster.create(POD_NETWORK, wire)
    answer = {**answer, "metadata": {**answer["metadata"], "managedFields": [{"manager": "x"}]}}
    expected = from_wire(PodNetwork, answer)
    read: list[type] = []
    real = convert.from_wire

    def counted(cls: type, data: dict) -> object:
        read.append(cls)
        return real(cls, data)

    monkeypatch.setattr(convert, "from_wire", counted)
    taken = caches.as_written(answer, sent, wire)
    assert taken == expected and read == []


@pytest.mark.parametrize(("key", "value"), [
    ("generation", True), ("uid", None), ("creationTimestamp", "yesterday"),
    ("labels", {"a": "c"}),
])
def test_a_create_answer_of_another_shape_is_read_by_the_converter(
        rig: tuple, key: str, value: object) -> None:
    cluster, caches, _records = rig
    sent = record()
    wire = to_wire(sent)
    answer = cluster.create(POD_NETWORK, wire)
    odd = {**answer, "metadata": {**answer["metadata"], key: value}}
    try:
        expected: PodNetwork | None = from_wire(PodNetwork, odd)
    except RecordError:
        expected = None
    assert caches.as_written(odd, sent, wire) == expected
