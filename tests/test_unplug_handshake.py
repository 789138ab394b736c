"""The release handshake on the in-memory cluster: a Releasing record's address goes back
to the pool only once its node agent reports the old interface gone, the node is gone, or
(for a record no agent wrote its host onto) ``unplug_timeout`` passed; a node without an
agent report does not wait. A record that names the host that plugged it waits for that
host's own word, whatever is done to the report (GOALS.md R8); the agent's reporter keeps
its report its own.

The test plays the node agent by writing its Lease through the same wire function the
agent uses (``agent_report_lease``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podnet.core.clock import FakeClock, format_micro_time
from podnet.core.cluster.port import LEASE, NAMESPACE, NODE, POD, POD_NETWORK, NotFound, Obj
from podnet.core.convert import from_wire
from podnet.core.models import AgentReport, PodNetwork
from podnet.core.objects import (
    ANNOTATION_PLUGGED_ON,
    LABEL_AGENT_NODE,
    agent_lease_name,
    agent_report,
    agent_report_lease,
    holder_host,
    release_token,
)
from podnet.core.policy import PoolPolicy
from podnet.node.report import NodeReporter
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import EngineRig

NS = "demo"
AGENTS = "kube-system"
TIMEOUT = 90.0


class Rig(EngineRig):
    def __init__(self) -> None:
        self.cloud = ReferenceCloud()
        policy = PoolPolicy(min_idle=1, max_idle=4, batch_size=2, reuse_cooldown=0.0,
                            unplug_timeout=TIMEOUT)
        super().__init__([("reference", ReferenceProvider(self.cloud, policy=policy))],
                         namespaces=(NS, AGENTS), agent_namespace=AGENTS)
        self.node_name = super().node(0)

    def settle(self, advance: float = 0.0) -> None:
        self.engine.run_until_idle(advance=advance)

    def pod(self, name: str) -> Obj:  # type: ignore[override]
        return super().pod(name, self.node_name)

    def record(self, pod: Obj) -> Obj | None:  # type: ignore[override]
        uid = pod["metadata"]["uid"]
        found = [r for r in self.records() if r["spec"]["podUid"] == uid]
        return found[0] if found else None

    def report(self, *, plugged: set[str] = frozenset(),  # type: ignore[assignment]
               unplugged: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        """What the node's agent writes: its Lease, created or replaced."""
        lease = agent_report_lease(
            AgentReport(node=self.node_name, holder="agent", plugged=frozenset(plugged),
                        unplugged=frozenset(unplugged)),
            AGENTS, format_micro_time(self.clock.now()))
        try:
            current = self.cluster.get(LEASE, agent_lease_name(self.node_name), AGENTS)
        except NotFound:
            self.cluster.create(LEASE, lease)
            return
        lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self.cluster.update(LEASE, lease)

    def pooled_free(self) -> set[str]:
        pool = self.engine.pools.find("reference", self.node_name)
        assert pool is not None
        return {a.address for a in pool.addresses.values() if a.owner is None}


def key(record: Obj) -> str:
    return f"{record['metadata']['namespace']}/{record['metadata']['name']}"


def token(rig: Rig, pod: Obj) -> str:
    """What the agent reports for the pod's record as it is now (Releasing)."""
    current = rig.record(pod)
    assert current is not None
    return release_token(from_wire(PodNetwork, current))


@pytest.fixture
def rig() -> Rig:
    return Rig()


def test_the_address_waits_for_the_agent_to_report_the_interface_gone(rig: Rig) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None and record["status"]["phase"] == "Routed"
    ip = record["status"]["ip"]
    rig.report(plugged={key(record)})
    rig.settle()

    # the kubelet removes the pod before the runtime's DEL: the record is Releasing, its
    # address is neither free in the pool nor given to the next pod
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle(advance=TIMEOUT / 3)
    held = rig.record(web)
    assert held is not None and held["status"]["phase"] == "Releasing"
    assert ip not in rig.pooled_free()
    other = rig.pod("other")
    rig.settle()
    taken = rig.record(other)
    assert taken is not None and taken["status"]["ip"] != ip
    assert rig.engine.stats.failed_transitions == {}, "waiting is not failing"

    # the agent's DEL removed the interface and it says so: the address goes back now
    rig.report(plugged={key(taken)}, unplugged={token(rig, web)})
    rig.settle()
    assert rig.record(web) is None
    assert ip in rig.pooled_free()


def test_the_address_goes_back_after_the_unplug_timeout(rig: Rig) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    rig.report(plugged={key(record)})
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle(advance=TIMEOUT - 5)
    assert rig.record(web) is not None, "released before the timeout"
    rig.settle(advance=10)
    assert rig.record(web) is None
    assert record["status"]["ip"] in rig.pooled_free()


def test_a_node_without_an_agent_report_does_not_wait(rig: Rig) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.record(web) is None
    assert record["status"]["ip"] in rig.pooled_free()


def test_a_gone_node_does_not_wait(rig: Rig) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    rig.report(plugged={key(record)})
    rig.settle()
    rig.cluster.delete(NODE, rig.node_name)
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle(advance=1)
    assert rig.record(web) is None


def test_an_acknowledgement_of_another_release_does_not_count(rig: Rig) -> None:
    """The report names Releasing episodes (uid and when): an older record of the same
    name, or an earlier release of this one, does not free the address."""
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    rig.report(plugged={key(record)})
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    now = token(rig, web)
    uid, when = now.split("@")
    rig.report(plugged={key(record)}, unplugged={
        f"some-older-uid@{when}", f"{uid}@2020-01-01T00:00:00.000000Z", uid})
    rig.settle(advance=5)
    assert rig.record(web) is not None
    rig.report(plugged={key(record)}, unplugged={now})
    rig.settle()
    assert rig.record(web) is None


@pytest.mark.parametrize("annotations", [
    {}, {"podnet.io/unplugged": "not json"}, {"podnet.io/unplugged": '{"a": 1}'},
    {"podnet.io/unplugged": '["u1", 7]'},
])
def test_a_report_that_does_not_parse_acknowledges_nothing(annotations: dict[str, Any]) -> None:
    lease = {"metadata": {"name": agent_lease_name("n1"), "namespace": AGENTS,
                          "labels": {"podnet.io/agent-node": "n1"},
                          "annotations": annotations}, "spec": {}}
    report = agent_report(lease)
    assert report is not None and report.node == "n1"
    assert report.unplugged <= {"u1"}
    assert agent_report({"metadata": {"name": "podnet", "labels": {}}}) is None


def test_a_record_the_garbage_collector_deletes_ahead_of_the_pod_cache_still_waits(
        rig: Rig) -> None:
    """The pod is deleted and the garbage collector deletes its record; the controller
    sees the record's deletion while its pod cache still has the pod. That is no record
    deleted by hand under a live pod: the address waits for the agent all the same."""
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    rig.report(plugged={key(record)})
    rig.settle()
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.cluster.delete(POD_NETWORK, record["metadata"]["name"], NS)
    engine = rig.engine
    while engine.caches.pod_networks.pump(0):
        pass  # the records' watch is ahead; the pods' is not pumped
    assert engine.caches.pods.get(f"{NS}/web") is not None, "the pod cache is behind"
    engine.podnetworks.reconcile(f"{NS}/web")
    held = rig.record(web)
    assert held is not None and held["status"]["ip"] == record["status"]["ip"]
    rig.settle(advance=5)
    assert rig.record(web) is not None, "released without the agent's word"
    rig.report(unplugged={token(rig, web)})
    rig.settle()
    assert rig.record(web) is None


# --- R8: only the word of the host that plugged the record frees its address -----------

HOST = "host-a.4026531992"


def plugged_by(rig: Rig, record: Obj, *hosts: str) -> None:
    """What the node agent writes onto a record before it plugs it."""
    rig.cluster.patch(POD_NETWORK, record["metadata"]["name"],
                      {"metadata": {"annotations": {ANNOTATION_PLUGGED_ON: ",".join(hosts)}}},
                      record["metadata"]["namespace"])


def write_report(rig: Rig, holder: str, *, plugged: set[str] = frozenset(),  # type: ignore[assignment]
                 unplugged: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    lease = agent_report_lease(
        AgentReport(node=rig.node_name, holder=holder, plugged=frozenset(plugged),
                    unplugged=frozenset(unplugged)),
        AGENTS, format_micro_time(rig.clock.now()))
    try:
        current = rig.cluster.get(LEASE, agent_lease_name(rig.node_name), AGENTS)
    except NotFound:
        rig.cluster.create(LEASE, lease)
        return
    lease["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    rig.cluster.update(LEASE, lease)


def _delete_report(rig: Rig, _token: str) -> None:
    rig.cluster.delete(LEASE, agent_lease_name(rig.node_name), AGENTS)


def _unlabel_report(rig: Rig, _token: str) -> None:
    rig.cluster.patch(LEASE, agent_lease_name(rig.node_name),
                      {"metadata": {"labels": {LABEL_AGENT_NODE: None}}}, AGENTS)


def _edit_report(rig: Rig, token_: str) -> None:
    """Someone adds the token by hand (the writer's digest left as it was)."""
    rig.cluster.patch(LEASE, agent_lease_name(rig.node_name), {"metadata": {"annotations": {
        "podnet.io/unplugged": json.dumps([token_])}}}, AGENTS)


def _another_host_writes(rig: Rig, token_: str) -> None:
    """A second agent under the node's name, on another host: nothing plugged there."""
    write_report(rig, "host-b.4026531992/x1", unplugged={token_})


def _old_agent_writes(rig: Rig, token_: str) -> None:
    """An agent that names no host (before 0.4) writes the report."""
    write_report(rig, "podnet-node/node-0000", unplugged={token_})


@pytest.mark.parametrize("tamper", [_delete_report, _unlabel_report, _edit_report,
                                    _another_host_writes, _old_agent_writes])
def test_a_plugged_address_is_not_reused_on_a_missing_edited_or_other_writers_report(
        rig: Rig, tamper: Any) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    ip = record["status"]["ip"]
    plugged_by(rig, record, HOST)
    write_report(rig, f"{HOST}/i1", plugged={key(record)})
    rig.settle()
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    tamper(rig, token(rig, web))
    # long past the unplug timeout: still held, and waiting is not failing
    for _ in range(4):
        rig.settle(advance=TIMEOUT)
    held = rig.record(web)
    assert held is not None and held["status"]["ip"] == ip, "reused without the host's word"
    assert ip not in rig.pooled_free()
    other = rig.pod("other")
    rig.settle()
    taken = rig.record(other)
    assert taken is not None and taken["status"]["ip"] != ip
    assert rig.engine.stats.failed_transitions == {}, "waiting is not failing"

    # the host's agent, started again (another instance), says the interface is gone
    try:
        _delete_report(rig, "")
    except NotFound:
        pass
    write_report(rig, f"{HOST}/i2", plugged={key(taken)}, unplugged={token(rig, web)})
    rig.settle()
    assert rig.record(web) is None
    assert ip in rig.pooled_free()


def test_a_record_two_hosts_plugged_waits_for_the_node_to_go(rig: Rig) -> None:
    web = rig.pod("web")
    rig.settle()
    record = rig.record(web)
    assert record is not None
    plugged_by(rig, record, HOST, "host-b.1")
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    write_report(rig, f"{HOST}/i1", unplugged={token(rig, web)})
    rig.settle(advance=TIMEOUT * 2)
    assert rig.record(web) is not None, "host-b's interface may still hold it"
    rig.cluster.delete(NODE, rig.node_name)
    rig.settle(advance=1)
    assert rig.record(web) is None


def test_an_edited_report_acknowledges_nothing() -> None:
    report = AgentReport(node="n1", holder=f"{HOST}/i1", unplugged=frozenset({"u1@t"}))
    lease = agent_report_lease(report, AGENTS, "2026-01-01T00:00:00.000000Z")
    seen = agent_report(lease)
    assert seen is not None and seen.unplugged == {"u1@t"} and not seen.edited
    lease["metadata"]["annotations"]["podnet.io/unplugged"] = '["u1@t", "u2@t"]'
    seen = agent_report(lease)
    assert seen is not None and seen.edited and seen.unplugged == frozenset()
    assert holder_host(f"{HOST}/i1") == HOST


# --- the agent's side: its report is its own, restored, and not taken over ---------------


class Reporting:
    """Node reporters over one in-memory API server (no threads: ``flush`` is the pass)."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.cluster.create(NAMESPACE, {"metadata": {"name": AGENTS}})
        self.unplugged: frozenset[str] = frozenset({"u1@t"})

    def reporter(self, host: str) -> NodeReporter:
        return NodeReporter(self.cluster, "n1", AGENTS, lambda: AgentReport(
            node="n1", unplugged=self.unplugged), host=host)

    def lease(self) -> Obj:
        return self.cluster.get(LEASE, agent_lease_name("n1"), AGENTS)

    def seen(self) -> AgentReport | None:
        return agent_report(self.lease())


def test_a_second_agent_of_another_host_does_not_take_a_live_report_over() -> None:
    bed = Reporting()
    first = bed.reporter(HOST)
    assert first.flush()
    second = bed.reporter("host-b.1")
    bed.unplugged = frozenset({"u1@t", "u2@t"})  # what the second one would say
    assert not second.flush()
    assert second.conflict is not None and first.holder in second.conflict
    assert second.written is None
    seen = bed.seen()
    assert seen is not None and seen.holder == first.holder and seen.unplugged == {"u1@t"}
    # the same host started again takes its report over at once
    again = bed.reporter(HOST)
    assert again.flush() and again.conflict is None
    seen = bed.seen()
    assert seen is not None and seen.holder == again.holder


def test_another_hosts_report_is_taken_over_once_its_renewal_ran_out() -> None:
    bed = Reporting()
    lease = agent_report_lease(AgentReport(node="n1", holder="host-b.1/old"), AGENTS,
                               "2020-01-01T00:00:00.000000Z")
    bed.cluster.create(LEASE, lease)
    mine = bed.reporter(HOST)
    assert mine.flush() and mine.conflict is None
    seen = bed.seen()
    assert seen is not None and seen.holder == mine.holder


@pytest.mark.parametrize("tamper", ["delete", "unlabel", "edit", "holder", "run out"])
def test_the_agent_restores_its_report(tamper: str) -> None:
    bed = Reporting()
    reporter = bed.reporter(HOST)
    assert reporter.flush()
    assert not reporter.flush(), "nothing changed: nothing written"
    name = agent_lease_name("n1")
    if tamper == "delete":
        bed.cluster.delete(LEASE, name, AGENTS)
    elif tamper == "unlabel":
        bed.cluster.patch(LEASE, name, {"metadata": {"labels": {LABEL_AGENT_NODE: None}}},
                          AGENTS)
    elif tamper == "edit":
        bed.cluster.patch(LEASE, name, {"metadata": {"annotations": {
            "podnet.io/unplugged": "[]"}}}, AGENTS)
    elif tamper == "holder":  # an agent of this host that does not check wrote it
        bed.cluster.patch(LEASE, name, {"spec": {"holderIdentity": f"{HOST}/other"}}, AGENTS)
    else:  # made to look run out: another host's agent would take it over
        bed.cluster.patch(LEASE, name, {"spec": {
            "renewTime": "2020-01-01T00:00:00.000000Z"}}, AGENTS)
    assert reporter.flush()
    seen = bed.seen()
    assert seen is not None and not seen.edited
    assert seen.holder == reporter.holder and seen.unplugged == {"u1@t"}
    assert seen.renew_time is not None and seen.renew_time.year > 2020
    assert not bed.reporter("host-b.1").flush(), "another host took a live report over"
