"""The engine end to end on the in-memory cluster, driven deterministically on a fake clock."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock, format_time
from podnet.core.cluster.port import (
    EVENT,
    NAMESPACE,
    NODE,
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    STATEFUL_SET,
    ApiError,
    Obj,
)
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import FINALIZER
from podnet.core.objects import record_finished
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.core.reconcile.podnetwork import WAIT_SAID_AFTER
from podnet.core.tracing import Tracing
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = "demo"


class Crash(BaseException):
    """The process dies: nothing after this line runs."""


class CrashingProvider(ReferenceProvider):
    """The reference provider, dying right after the hooks named in ``crash_after``."""

    crash_after: set[str] = set()

    def _maybe_crash(self, hook: str) -> None:
        if hook in self.crash_after:
            self.crash_after.discard(hook)
            raise Crash(hook)

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: Any, interface: Any, count: int,
                         subnet: str | None) -> Any:
        result = super().podnet_pool_grow(provider, node, interface, count, subnet)
        self._maybe_crash("pool_grow")
        return result

    @hookimpl
    def podnet_allocate(self, context: Any) -> Any:
        result = super().podnet_allocate(context)
        self._maybe_crash("allocate")
        return result

    @hookimpl
    def podnet_release(self, context: Any) -> Any:
        result = super().podnet_release(context)
        self._maybe_crash("release")
        return result


class Rig:
    """A cluster, a reference cloud and an engine that can be restarted over them."""

    def __init__(self, *, policy: PoolPolicy | None = None, tracing: Tracing | None = None,
                 cloud: ReferenceCloud | None = None) -> None:
        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.cloud = cloud or ReferenceCloud()
        self.policy = policy or PoolPolicy(min_idle=2, max_idle=4, batch_size=4,
                                           max_batch_size=8, reuse_cooldown=0.0)
        self.tracing = tracing
        self.cluster.create(NAMESPACE, {"metadata": {"name": NS}})
        self.engine = self._engine()

    def _engine(self) -> Engine:
        pm = new_plugin_manager()
        self.plugin = CrashingProvider(self.cloud, policy=self.policy)
        self.plugin.crash_after = set()
        pm.register(self.plugin, name="reference")
        engine = Engine(self.cluster, pm, clock=self.clock, tracing=self.tracing,
                        options=EngineOptions(default_provider="reference"))
        engine.start()
        return engine

    def restart(self) -> None:
        self.engine = self._engine()

    def settle(self, advance: float = 0.0) -> None:
        self.engine.run_until_idle(advance=advance)

    def node(self, i: int) -> str:
        return str(self.cluster.create(NODE, node_obj(i))["metadata"]["name"])

    def pod(self, name: str, node: str, **meta: Any) -> Obj:
        obj = pod_obj(name, node)
        obj["metadata"].update(meta)
        return self.cluster.create(POD, obj)

    def statefulset(self, name: str, replicas: int = 3) -> list[dict[str, Any]]:
        """A StatefulSet in the cluster; the controller reference its pods carry."""
        sts = self.cluster.create(STATEFUL_SET, {
            "metadata": {"name": name, "namespace": NS},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}}})
        return [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name,
                 "uid": sts["metadata"]["uid"], "controller": True}]

    def records(self) -> list[Obj]:
        """The PodNetworks, less the finished ones (as good as deleted)."""
        return [o for o in self.cluster.list(POD_NETWORK).items if not record_finished(o)]

    def finished(self) -> list[str]:
        """The pods whose records are finished: released, their finalizer off, left to
        the garbage collector while the pod's object stays."""
        return sorted(o["spec"]["podName"] for o in self.cluster.list(POD_NETWORK).items
                      if record_finished(o))

    def record_of(self, pod: Obj) -> Obj:
        uid = pod["metadata"]["uid"]
        found = [r for r in self.records() if r["spec"]["podUid"] == uid]
        assert len(found) == 1, found
        return found[0]

    def owners(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for r in self.records():
            ip = r.get("status", {}).get("ip")
            if ip:
                out.setdefault(ip, []).append(r["metadata"]["name"])
        return out

    def assert_no_leak(self) -> None:
        owned = self.owners()
        assert all(len(v) == 1 for v in owned.values()), owned
        pooled = {a.address for p in self.engine.pools.all() for a in p.addresses.values()}
        stray = set(self.cloud.all_addresses()) - set(owned) - pooled
        assert not stray, f"addresses nobody owns or pools: {sorted(stray)}"


def phase(record: Obj) -> str:
    return str(record.get("status", {}).get("phase", "Pending"))


def test_pod_gets_a_routed_network_and_gives_it_back() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Routed"
    assert record["metadata"]["finalizers"] == [FINALIZER]
    assert record["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    ip = record["status"]["ip"]
    assert ip in rig.cloud.all_addresses()
    assert rig.cloud.routes[ip] == f"{NS}/{record['metadata']['name']}"
    ready = {c["type"]: c for c in record["status"]["conditions"]}["Ready"]
    assert ready["status"] == "True"

    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.records() == []
    assert ip not in rig.cloud.routes
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.addresses[ip].owner is None
    assert rig.engine.stats.transitions["pod_network.finish"] == 1
    rig.assert_no_leak()


def test_settled_pod_costs_no_provider_call_and_no_write_on_a_second_pass() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    calls = dict(rig.engine.stats.provider_calls)
    writes = dict(rig.cluster.stats)
    rig.engine.enqueue_pod(f"{NS}/web")
    rig.settle()
    assert dict(rig.engine.stats.provider_calls) == calls
    assert dict(rig.cluster.stats) == writes


def test_a_pod_networks_own_writes_do_not_queue_it_again_but_others_changes_do() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.settle()
    reconciles = rig.engine.stats.reconciles
    before = reconciles["pod"]
    web = rig.pod("web", node)
    rig.settle()
    record = rig.record_of(web)
    assert phase(record) == "Routed"
    # its create and its Routed write reach the cache as they are made: no second pass
    assert reconciles["pod"] == before + 1
    name = record["metadata"]["name"]
    rig.cluster.patch(POD_NETWORK, name, {"metadata": {"labels": {"team": "a"}}}, NS)
    rig.settle()
    assert reconciles["pod"] == before + 2  # someone else's change: looked at again
    rig.cluster.delete(POD_NETWORK, name, NS)  # by hand, while its pod runs
    rig.settle()
    again = rig.record_of(web)
    assert phase(again) == "Routed" and again["metadata"]["uid"] != record["metadata"]["uid"]
    assert again["status"]["ip"] == record["status"]["ip"]
    rig.assert_no_leak()


class EchoFirst(InMemoryCluster):
    """Delivers a PodNetwork write's own watch event to the engine (from a thread of its
    own, as an informer's) before the write answers, as a stream ahead of an HTTP answer
    does; ``meddle``: someone else changes the record first."""

    engine: Engine | None = None
    meddle = False

    def create(self, kind: Any, obj: Obj) -> Obj:
        return self._deliver(kind, super().create(kind, obj))

    def update_status(self, kind: Any, obj: Obj) -> Obj:
        return self._deliver(kind, super().update_status(kind, obj))

    def _deliver(self, kind: Any, answer: Obj) -> Obj:
        if kind == POD_NETWORK and self.engine is not None:
            if self.meddle:
                self.meddle = False
                meta = answer["metadata"]
                self.patch(POD_NETWORK, meta["name"], {"metadata": {"labels": {"team": "a"}}},
                           meta["namespace"])
            pump = threading.Thread(target=self.engine.pump)
            pump.start()
            pump.join()
        return answer


def _echo_rig(meddle: bool) -> tuple[Rig, EchoFirst]:
    rig = Rig()
    cluster = EchoFirst(clock=rig.clock)
    cluster.create(NAMESPACE, {"metadata": {"name": NS}})
    rig.cluster = cluster
    rig.engine = rig._engine()
    cluster.engine = rig.engine
    cluster.meddle = meddle
    return rig, cluster


def _one_pod_through_an_echo_rig(meddle: bool) -> tuple[Rig, Any, int]:
    """A pod made Routed on an echo rig: the rig, the pod, and the pod passes before."""
    rig, _ = _echo_rig(meddle=meddle)
    node = rig.node(0)
    rig.settle()
    before = rig.engine.stats.reconciles["pod"]
    web = rig.pod("web", node)
    rig.settle()
    return rig, web, before


def test_a_writes_own_event_heard_before_its_answer_queues_no_second_pass() -> None:
    rig, web, before = _one_pod_through_an_echo_rig(meddle=False)
    assert phase(rig.record_of(web)) == "Routed"
    assert rig.engine.stats.reconciles["pod"] == before + 1  # create and Routed: one pass


def test_another_change_heard_while_a_write_is_in_flight_still_queues_the_pod() -> None:
    rig, web, before = _one_pod_through_an_echo_rig(meddle=True)
    record = rig.record_of(web)
    assert phase(record) == "Routed" and record["metadata"]["labels"]["team"] == "a"
    assert rig.engine.stats.reconciles["pod"] >= before + 2  # looked at again for it
    rig.assert_no_leak()


def test_a_pods_whole_life_writes_nothing_to_its_nodes_record_while_the_pool_keeps_its_size(
) -> None:
    # the record lists the pool's addresses, not their owners: the PodNetworks name those,
    # and listing them cost the node's record a write after the allocations and another
    # after the releases (two a node for a pod's life)
    rig = Rig()
    node = rig.node(0)
    rig.settle()

    def written() -> dict[str, str | None]:
        nn = rig.cluster.get(NODE_NETWORK, node)
        return {ip["address"]: ip.get("owner") for itf in nn["status"]["interfaces"]
                for ip in itf.get("ips", [])}

    before = written()
    writes = rig.cluster.stats[("update_status", "nodenetworks")]
    web = rig.pod("web", node)
    rig.settle(advance=rig.policy.refill_period)
    address = rig.record_of(web)["status"]["ip"]
    assert address in before
    rig.settle(advance=2 * rig.policy.refill_period)
    assert written() == before  # the address is listed, without an owner
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle(advance=2 * rig.policy.refill_period)
    assert not rig.records()
    assert rig.cluster.stats[("update_status", "nodenetworks")] == writes
    assert set(written().values()) == {None}


def _pool_ready(rig: Rig, node: str) -> str:
    nn = rig.cluster.get(NODE_NETWORK, node)
    return {c["type"]: c["status"] for c in nn["status"]["conditions"]}["PoolReady"]


def _pool_errors(rig: Rig) -> list[Obj]:
    return [e for e in rig.cluster.list(EVENT, NS).items + rig.cluster.list(EVENT).items
            if e.get("reason") == "PoolError"]


def _full_node_rig() -> Rig:
    """One node whose instance holds 4 addresses, its pool kept at 4 idle."""
    return Rig(policy=PoolPolicy(min_idle=4, max_idle=4, batch_size=4, max_batch_size=4,
                                 reuse_cooldown=0.0),
               cloud=ReferenceCloud(max_interfaces=1, ips_per_interface=4))


def test_a_pool_at_capacity_short_only_of_min_idle_still_serves_and_says_no_problem() -> None:
    rig = _full_node_rig()
    node = rig.node(0)
    rig.settle()
    rig.pod("a", node)
    rig.pod("b", node)
    rig.settle(advance=3 * rig.policy.refill_period)
    # two idle addresses left and no room for more: below min_idle, but no pod waits
    assert all(phase(r) == "Routed" for r in rig.records())
    assert _pool_ready(rig, node) == "True"
    assert _pool_errors(rig) == []


def test_a_pool_that_left_pods_waiting_at_capacity_is_ready_again_once_none_waits() -> None:
    rig = _full_node_rig()
    node = rig.node(0)
    rig.settle()
    for i in range(5):
        rig.pod(f"p{i}", node)
    rig.settle(advance=rig.policy.refill_period)
    waiting = [r for r in rig.records() if phase(r) != "Routed"]
    assert len(waiting) == 1 and _pool_ready(rig, node) == "False"
    assert len(_pool_errors(rig)) == 1
    routed = next(r for r in rig.records() if phase(r) == "Routed")
    rig.cluster.delete(POD, routed["spec"]["podName"], NS, grace_period_seconds=0)
    rig.settle(advance=rig.policy.refill_period)
    # the waiter took the address given back: no pod waits, the limit is no problem
    assert phase(rig.record_of(rig.cluster.get(POD, waiting[0]["spec"]["podName"], NS))) \
        == "Routed"
    assert _pool_ready(rig, node) == "True"
    rig.assert_no_leak()


def test_a_restart_on_an_unchanged_cloud_rewrites_no_node_record() -> None:
    rig = Rig()
    node = rig.node(0)
    for i in range(3):
        rig.pod(f"p{i}", node)
    rig.settle(advance=rig.policy.refill_period)
    key = ("update_status", "nodenetworks")
    writes = rig.cluster.stats[key]
    rig.restart()
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.synced  # rebuilt from the inventory and the records
    assert rig.cluster.stats[key] == writes
    idle = next(a.address for a in pool.addresses.values() if a.owner is None)
    rig.cloud.remove(node, [idle])  # the cloud changed while podnet was down: written
    rig.restart()
    rig.settle()
    assert rig.cluster.stats[key] > writes
    rig.assert_no_leak()


def test_pool_is_topped_up_to_min_idle_and_trimmed_to_max_idle() -> None:
    rig = Rig(policy=PoolPolicy(min_idle=3, max_idle=5, batch_size=2, max_batch_size=10,
                                reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.idle_count() == 3
    for i in range(10):
        rig.pod(f"p{i}", node)
    rig.settle()
    assert all(phase(r) == "Routed" for r in rig.records())
    assert pool.idle_count() >= 3
    for i in range(10):
        rig.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    rig.settle()
    assert pool.idle_count() == 5
    assert len(rig.cloud.all_addresses()) == 5
    rig.assert_no_leak()


def test_terminating_pod_keeps_its_address_until_its_grace_period_ends() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    ip = rig.record_of(pod)["status"]["ip"]
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=30)
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Routed" and record["status"]["ip"] == ip
    # a new pod meanwhile must not get the terminating pod's address
    other = rig.pod("other", node)
    rig.settle()
    assert rig.record_of(other)["status"]["ip"] != ip
    rig.clock.advance(31)
    rig.engine.enqueue_pod(f"{NS}/web")
    rig.settle()
    assert [r for r in rig.records() if r["spec"]["podName"] == "web"] == []
    assert rig.finished() == ["web"]  # its pod's object stays: no delete of podnet's


def test_terminating_pod_on_a_lost_node_is_released_at_its_deadline_not_a_verify_later() -> None:
    """Issue 13, 11c: nothing else ever touches a pod stuck terminating on a lost node
    (no kubelet finishes it): its records must go at ``deletionTimestamp`` (grace
    included), not at the next verify tick, with no event to wake its key."""
    policy = PoolPolicy(min_idle=2, max_idle=4, batch_size=4, max_batch_size=8,
                        reuse_cooldown=0.0, verify_period=300.0)
    rig = Rig(policy=policy)
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    assert phase(rig.record_of(pod)) == "Routed"
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=30)
    rig.settle()
    assert phase(rig.record_of(pod)) == "Routed"  # still within its grace
    # the fake clock moves only to keys due within 31 s: the deadline's, if requeued
    rig.settle(advance=31)
    assert [r for r in rig.records() if r["spec"]["podName"] == "web"] == []
    assert rig.finished() == ["web"]
    rig.assert_no_leak()


def test_a_terminating_pod_whose_request_is_invalid_is_released_at_its_deadline() -> None:
    """The same, for a record an invalid request left Pending (not retried): the pass
    that found it invalid still looks again at the pod's deadline (found by a random
    chaos history: such a record outlived its pod)."""
    rig = Rig()
    node = rig.node(0)
    first = rig.pod("first", node)
    rig.settle()
    taken = rig.record_of(first)
    bad = rig.pod("bad", node, annotations={"podnet.io/ip-address": taken["status"]["ip"]})
    rig.settle()
    assert phase(rig.record_of(bad)) == "Pending"
    rig.cluster.delete(POD, "bad", NS, grace_period_seconds=30)
    rig.settle(advance=31)
    assert [r for r in rig.records() if r["spec"]["podName"] == "bad"] == []
    assert rig.finished() == ["bad"]
    rig.assert_no_leak()


@pytest.mark.parametrize("terminal_phase", ["Succeeded", "Failed"])
def test_terminal_pod_releases_its_network(terminal_phase: str) -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("job", node)
    rig.settle()
    assert phase(rig.record_of(pod)) == "Routed"
    pod = rig.cluster.get(POD, "job", NS)
    pod["status"]["phase"] = terminal_phase
    rig.cluster.update_status(POD, pod)
    rig.settle()
    assert rig.records() == []
    assert rig.finished() == ["job"]
    rig.assert_no_leak()


def test_pod_recreated_under_the_same_name_never_inherits_the_old_record() -> None:
    rig = Rig()
    node = rig.node(0)
    old = rig.pod("web", node)
    rig.settle()
    old_record = rig.record_of(old)
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    new = rig.pod("web", node)
    rig.settle()
    records = rig.records()
    assert len(records) == 1
    assert records[0]["spec"]["podUid"] == new["metadata"]["uid"]
    assert records[0]["metadata"]["name"] != old_record["metadata"]["name"]
    rig.assert_no_leak()


def test_sticky_statefulset_pod_gets_its_address_back() -> None:
    rig = Rig()
    node = rig.node(0)
    owner = rig.statefulset("db")
    first = rig.pod("db-0", node, ownerReferences=owner)
    rig.settle()
    record = rig.record_of(first)
    ip = record["status"]["ip"]
    assert record["spec"]["sticky"] is True
    assert record["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    rig.cluster.delete(POD, "db-0", NS, grace_period_seconds=0)
    rig.settle()
    assert phase(rig.records()[0]) == "Releasing"  # held for the pod's return
    again = rig.pod("db-0", node, ownerReferences=owner)
    rig.settle()
    record = rig.record_of(again)
    assert phase(record) == "Routed" and record["status"]["ip"] == ip
    assert rig.engine.stats.transitions["pod_network.reclaim"] == 1


def test_sticky_hold_expires() -> None:
    rig = Rig()
    node = rig.node(0)
    owner = rig.statefulset("db")
    rig.pod("db-0", node, ownerReferences=owner)
    rig.settle()
    rig.cluster.delete(POD, "db-0", NS, grace_period_seconds=0)
    rig.settle(advance=rig.policy.sticky_hold + 1)
    assert rig.records() == []
    rig.assert_no_leak()


def test_invalid_annotation_is_reported_on_the_record_and_the_pod_and_others_proceed() -> None:
    rig = Rig()
    node = rig.node(0)
    bad = rig.pod("bad", node, annotations={"podnet.io/ip-address": "10.0.0.300"})
    good = rig.pod("good", node)
    rig.settle()
    assert phase(rig.record_of(good)) == "Routed"
    record = rig.record_of(bad)
    assert phase(record) == "Pending" and "ip" not in record["status"]
    ready = {c["type"]: c for c in record["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "InvalidRequest"
    assert "metadata.annotations[podnet.io/ip-address]" in ready["message"]
    events = rig.cluster.events_for(bad)
    assert any("podnet.io/ip-address" in e["message"] for e in events)
    # fixing the annotation lets it proceed
    pod = rig.cluster.get(POD, "bad", NS)
    pod["metadata"]["annotations"] = {}
    rig.cluster.update(POD, pod)
    rig.settle()
    assert phase(rig.record_of(bad)) == "Routed"


def test_a_misspelt_address_key_blocks_as_invalid_naming_the_key_it_probably_meant() -> None:
    rig = Rig()
    node = rig.node(0)
    bad = rig.pod("typo", node, annotations={"podnet.io/ip-adress": "10.64.0.200"})
    good = rig.pod("good", node)
    rig.settle()
    assert phase(rig.record_of(good)) == "Routed"
    record = rig.record_of(bad)
    assert phase(record) == "Pending" and "ip" not in record["status"], (
        "a misspelt ip-address must not silently get a random address")
    ready = {c["type"]: c for c in record["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "InvalidRequest"
    assert "metadata.annotations[podnet.io/ip-adress]" in ready["message"]
    assert "did you mean podnet.io/ip-address?" in ready["message"]
    said = [e["message"] for e in rig.cluster.events_for(bad)]
    assert len(said) == 1 and "podnet.io/ip-adress" in said[0] and "ip-address?" in said[0]
    rig.settle(advance=60)
    assert len(rig.cluster.events_for(bad)) == 1, "said once, not at every pass"
    # spelt right, it gets exactly that address
    pod = rig.cluster.get(POD, "typo", NS)
    pod["metadata"]["annotations"] = {"podnet.io/ip-address": "10.64.0.200"}
    rig.cluster.update(POD, pod)
    rig.settle()
    record = rig.record_of(bad)
    assert phase(record) == "Routed" and record["status"]["ip"] == "10.64.0.200"


def test_an_unknown_key_like_no_known_one_is_warned_about_once_and_the_pod_proceeds() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("odd", node, annotations={"podnet.io/colour": "blue"})
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Routed"
    conditions = {c["type"]: c for c in record["status"]["conditions"]}
    assert conditions["AnnotationsRecognized"]["status"] == "False"
    assert "podnet.io/colour" in conditions["AnnotationsRecognized"]["message"]
    said = [e for e in rig.cluster.events_for(pod) if e["reason"] == "UnknownAnnotation"]
    assert len(said) == 1 and said[0]["type"] == "Warning"
    assert "podnet.io/colour" in said[0]["message"]
    rig.settle(advance=120)
    assert len([e for e in rig.cluster.events_for(pod)
                if e["reason"] == "UnknownAnnotation"]) == 1
    # removed: the condition says so, and the address stays
    ip = record["status"]["ip"]
    obj = rig.cluster.get(POD, "odd", NS)
    obj["metadata"]["annotations"] = {}
    rig.cluster.update(POD, obj)
    rig.settle()
    record = rig.record_of(pod)
    conditions = {c["type"]: c for c in record["status"]["conditions"]}
    assert conditions["AnnotationsRecognized"]["status"] == "True"
    assert record["status"]["ip"] == ip and phase(record) == "Routed"


def test_a_pod_on_a_node_that_does_not_exist_gets_one_event_then_proceeds_when_it_does() -> None:
    rig = Rig()
    rig.node(0)
    pod = rig.pod("orphan", "node-0005")
    rig.settle()
    assert rig.records() == []
    said = rig.cluster.events_for(pod)
    assert [e["reason"] for e in said] == ["NodeNotFound"]
    assert "node-0005" in said[0]["message"] and "does not exist" in said[0]["message"]
    obj = rig.cluster.get(POD, "orphan", NS)
    obj["metadata"].setdefault("labels", {})["touched"] = "yes"
    rig.cluster.update(POD, obj)  # a pass for another reason: not said again
    rig.settle(advance=60)
    assert len(rig.cluster.events_for(pod)) == 1
    rig.node(5)
    rig.settle()
    assert phase(rig.record_of(pod)) == "Routed"


def test_static_address_owned_by_another_pod_is_refused_with_a_condition() -> None:
    rig = Rig()
    node = rig.node(0)
    first = rig.pod("first", node)
    rig.settle()
    taken = rig.record_of(first)["status"]["ip"]
    second = rig.pod("second", node, annotations={"podnet.io/ip-address": taken})
    rig.settle()
    record = rig.record_of(second)
    assert phase(record) == "Pending"
    ready = {c["type"]: c for c in record["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "InvalidRequest" and "already used" in ready["message"]
    assert rig.owners()[taken] == [rig.record_of(first)["metadata"]["name"]]


def test_static_address_is_honoured() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("fixed", node, annotations={"podnet.io/ip-address": "10.64.0.200"})
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Routed" and record["status"]["ip"] == "10.64.0.200"
    rig.cluster.delete(POD, "fixed", NS, grace_period_seconds=0)
    rig.settle()
    rig.assert_no_leak()


def test_deleted_node_releases_its_pod_networks_and_drops_its_pool() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    rig.cluster.delete(NODE, node)
    rig.settle()
    assert rig.records() == []
    assert rig.engine.pools.find("reference", node) is None


def test_restart_rebuilds_pools_from_inventory_and_records_without_duplicates() -> None:
    rig = Rig()
    nodes = [rig.node(i) for i in range(2)]
    for i in range(8):
        rig.pod(f"p{i}", nodes[i % 2])
    rig.settle()
    before = {r["metadata"]["name"]: r["status"]["ip"] for r in rig.records()}
    rig.restart()
    for i in range(8, 12):
        rig.pod(f"p{i}", nodes[i % 2])
    rig.settle()
    after = {r["metadata"]["name"]: r["status"]["ip"] for r in rig.records()}
    assert all(after[k] == v for k, v in before.items())
    assert len(set(after.values())) == len(after) == 12
    rig.assert_no_leak()


def test_crash_between_the_cloud_call_and_the_record_write_recovers() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.plugin.crash_after = {"pool_grow"}
    with pytest.raises(Crash):
        rig.settle()
    added = set(rig.cloud.all_addresses())
    assert added, "the cloud call happened before the crash"
    rig.restart()  # a new engine: all memory gone
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Routed"
    # the lost batch is held as suspects, never handed out, and swept after the expiry
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None
    assert record["status"]["ip"] not in added
    assert set(pool.suspects) == added
    rig.settle(advance=rig.policy.leaked_ip_expiry + 2 * rig.policy.gc_period)
    assert not pool.suspects
    assert not (added & set(rig.cloud.all_addresses()))
    rig.assert_no_leak()


def test_a_burst_writes_its_nodes_pool_once_and_what_records_name_survives_a_restart(
) -> None:
    rig = Rig(policy=PoolPolicy(min_idle=0, max_idle=8, batch_size=4, max_batch_size=4,
                                reuse_cooldown=0.0))
    node = rig.node(0)
    pods = [rig.pod(f"p{i}", node) for i in range(8)]
    rig.settle(advance=2 * rig.policy.refill_period)
    key = ("update_status", "nodenetworks")
    assert all(phase(rig.record_of(p)) == "Routed" for p in pods)
    assert rig.engine.stats.provider_calls["reference.pool_grow"] == 2
    # both grows, every address and PoolReady in one write, once nobody waited any more
    assert rig.cluster.stats[key] == 1

    def listed() -> set[str]:
        nn = rig.cluster.get(NODE_NETWORK, node)
        assert {c["type"]: c["status"] for c in nn["status"]["conditions"]}["PoolReady"] == "True"
        assert all("owner" not in ip for itf in nn["status"]["interfaces"]
                   for ip in itf.get("ips", []))
        return {ip["address"] for itf in nn["status"]["interfaces"] for ip in itf.get("ips", [])}

    def named() -> dict[str, str]:
        return {r["status"]["ip"]: f"{NS}/{r['metadata']['name']}" for r in rig.records()}

    assert listed() == set(named())
    more = [rig.pod(f"q{i}", node) for i in range(4)]
    rig.settle()  # the clock stands still: the grow's write is not due yet
    assert all(phase(rig.record_of(p)) == "Routed" for p in more)
    assert rig.cluster.stats[key] == 1
    assert set(named()) - set(listed())  # only the records name the new addresses
    rig.restart()  # the process dies before the write: its records are the truth
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and not pool.suspects
    assert {a.address: a.owner for a in pool.addresses.values()} == named()
    rig.settle(advance=2 * rig.policy.refill_period)
    assert listed() == set(named())
    rig.assert_no_leak()


def test_crash_after_allocate_before_the_record_write_hands_out_no_duplicate() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.settle()
    first = rig.pod("a", node)
    rig.plugin.crash_after = {"allocate"}
    with pytest.raises(Crash):
        rig.settle()
    rig.restart()
    second = rig.pod("b", node)
    rig.settle()
    a, b = rig.record_of(first), rig.record_of(second)
    assert phase(a) == phase(b) == "Routed"
    assert a["status"]["ip"] != b["status"]["ip"]
    rig.assert_no_leak()


def test_crash_after_release_before_the_finalizer_is_removed_recovers() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    rig.plugin.crash_after = {"release"}
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    with pytest.raises(Crash):
        rig.settle()
    assert len(rig.records()) == 1  # the finalizer still holds the record
    rig.restart()
    rig.pod("next", node)
    rig.settle()
    records = rig.records()
    assert [r["spec"]["podName"] for r in records] == ["next"]
    rig.assert_no_leak()


def test_record_write_conflicts_are_retried_without_duplicates() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.cluster.faults.conflict_rate = 0.5
    for i in range(10):
        rig.pod(f"p{i}", node)
    rig.settle(advance=60)
    rig.cluster.faults.clear()
    rig.settle(advance=60)
    assert len(rig.records()) == 10 and all(phase(r) == "Routed" for r in rig.records())
    rig.assert_no_leak()


def test_quota_errors_halve_the_batch_and_inhibit_then_recover_the_interface() -> None:
    rig = Rig(policy=PoolPolicy(min_idle=0, max_idle=8, batch_size=8, max_batch_size=8,
                                reuse_cooldown=0.0, inhibit_quota=60.0))
    node = rig.node(0)
    rig.settle()
    rig.cloud.scripted["AddAddresses"] = ["QuotaExceeded"]
    rig.pod("web", node)
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None
    assert rig.engine.stats.transitions["eni.inhibit"] == 1
    # with the only interface inhibited a second one is created, with the halved batch
    assert rig.engine.stats.transitions["eni.attached"] == 1
    assert len(pool.ips_on("eth1")) == 4
    assert phase(rig.records()[0]) == "Routed"
    rig.settle(advance=61)
    assert rig.engine.stats.transitions["eni.recover"] == 1


def test_grow_failure_leaves_the_pod_pending_with_a_condition_naming_why() -> None:
    rig = Rig(cloud=ReferenceCloud(max_interfaces=1),
              policy=PoolPolicy(min_idle=0, max_idle=4, reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    rig.cloud.scripted["AddAddresses"] = ["SubnetExhausted"] * 50
    pod = rig.pod("web", node)
    rig.settle(advance=1)
    record = rig.record_of(pod)
    assert phase(record) == "Pending"
    # a short wait is not written (a burst's waits would cost a write each): no status
    # yet (a create's status is dropped, as upstream drops a custom resource's)
    assert "conditions" not in record.get("status", {})
    rig.settle(advance=WAIT_SAID_AFTER)
    record = rig.record_of(pod)
    assert phase(record) == "Pending"
    ready = {c["type"]: c for c in record["status"]["conditions"]}["Ready"]
    assert ready["reason"] == "WaitingForAddress"
    assert "subnet_exhausted" in ready["message"]
    assert not rig.engine.stats.failed_transitions, "waiting is not failing"
    rig.cloud.scripted.clear()
    rig.settle(advance=700)
    assert phase(rig.record_of(pod)) == "Routed"


def test_a_failed_grow_nothing_needs_any_more_leaves_no_problem_on_the_pool() -> None:
    """A grow for a waiting pod fails (the cloud's internal error, again and again):
    PoolReady=False names why. The pod goes away, and nothing needs a grow any more (no
    pod waits, min_idle 0): the pool says it is ready again, rather than the old failure
    for ever (a limit already cleared so; a failed call's problem did not)."""
    rig = Rig(cloud=ReferenceCloud(max_interfaces=1),
              policy=PoolPolicy(min_idle=0, max_idle=4, reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle()
    rig.cloud.scripted["AddAddresses"] = ["InternalError"] * 50
    rig.pod("web", node)
    rig.settle(advance=WAIT_SAID_AFTER + 1)
    assert _pool_ready(rig, node) == "False"
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle(advance=rig.policy.refill_period)
    assert rig.records() == []
    assert _pool_ready(rig, node) == "True"
    assert not rig.engine.stats.failed_transitions
    rig.assert_no_leak()

def test_a_record_whose_allocation_writes_went_unanswered_asks_again_with_what_it_holds(
) -> None:
    """Every write naming a new record's address fails with a server error for a while
    (sent: each may have landed, so the record keeps its address). Asking again, it is
    handed what it holds, not one more idle address: on a node of two addresses it is
    routed once the writes go through, holding one address. Before, each try held one
    more, the two held filled the node, and the record waited for ever for a third
    (found by the tight BBC chaos machine)."""
    rig = Rig(cloud=ReferenceCloud(max_interfaces=1, ips_per_interface=2),
              policy=PoolPolicy(min_idle=2, max_idle=2, batch_size=2, max_batch_size=2,
                                reuse_cooldown=0.0))
    node = rig.node(0)
    rig.settle(advance=rig.policy.refill_period)
    rig.cluster.faults.fail_next("update_status", POD_NETWORK,
                                 ApiError("injected server error"), times=4)
    pod = rig.pod("web", node)
    rig.settle(advance=60)
    record = rig.record_of(pod)
    assert phase(record) == "Routed"
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None
    key = f"{NS}/{record['metadata']['name']}"
    held = {a for a, entry in pool.addresses.items() if entry.owner == key}
    assert held == {record["status"]["ip"]}
    rig.assert_no_leak()

def test_address_added_outside_podnet_is_deleted_after_the_expiry_and_not_before() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    stray = rig.cloud.add(node, "10.64.0.0/24", "eth0", 1, address="10.64.0.250")[0]
    rig.settle(advance=rig.policy.gc_period + 1)
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and stray in pool.suspects
    rig.settle(advance=rig.policy.leaked_ip_expiry - 2 * rig.policy.gc_period)
    assert stray in rig.cloud.all_addresses()
    rig.settle(advance=3 * rig.policy.gc_period)
    assert stray not in rig.cloud.all_addresses()


def test_verify_drift_repairs_and_routes_again() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    ip = rig.record_of(pod)["status"]["ip"]
    del rig.cloud.routes[ip]  # changed behind podnet's back
    rig.settle(advance=rig.policy.verify_period + 1)
    assert rig.engine.stats.transitions["pod_network.repair"] == 1
    assert ip in rig.cloud.routes
    assert phase(rig.record_of(pod)) == "Routed"


def test_every_transition_attempt_is_one_span_and_a_lifecycle_is_one_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    rig = Rig(tracing=Tracing(provider))
    node = rig.node(0)
    rig.settle()
    rig.cloud.scripted["SetRoute"] = ["InternalError"]
    pod = rig.pod("web", node)
    rig.settle(advance=1)
    name = rig.record_of(pod)["metadata"]["name"]
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    spans = [s for s in exporter.get_finished_spans()
             if s.name.startswith("pod_network.")
             and s.attributes and s.attributes.get("podnet.object") == f"{NS}/{name}"]
    names = [s.name for s in spans]
    assert names == ["pod_network.allocate", "pod_network.route", "pod_network.route",
                     "pod_network.release", "pod_network.finish"]
    assert len({s.context.trace_id for s in spans}) == 1
    failed = spans[1]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "transient"
    ok = spans[2]
    assert ok.attributes is not None
    for key, value in {
        "podnet.machine": "pod_network", "podnet.trigger": "route",
        "podnet.state.from": "allocated", "podnet.state.to": "routed",
        "podnet.provider": "reference", "k8s.pod.name": "web", "k8s.namespace.name": NS,
        "k8s.node.name": node,
    }.items():
        assert ok.attributes[key] == value, key
    assert ok.attributes["podnet.ip"]
    all_transitions = sum(rig.engine.stats.transitions.values()) + sum(
        rig.engine.stats.failed_transitions.values()) + sum(
        rig.engine.stats.waited_transitions.values())
    transition_spans = [s for s in exporter.get_finished_spans()
                        if s.name.startswith(("pod_network.", "eni."))]
    assert len(transition_spans) == all_transitions
    clients = [s for s in exporter.get_finished_spans()
               if s.name == "reference.route" and s.parent is not None]
    assert {s.parent.span_id for s in clients if s.parent} <= {
        s.context.span_id for s in spans}


def test_pod_on_a_node_without_pod_cidr_gets_a_condition_not_a_crash() -> None:
    rig = Rig()
    rig.cluster.create(NODE, {"metadata": {"name": "bare"}, "spec": {}})
    good_node = rig.node(0)
    rig.pod("stuck", "bare")
    good = rig.pod("fine", good_node)
    rig.settle(advance=1)
    assert phase(rig.record_of(good)) == "Routed"


def test_deletion_timestamp_helper_formats_like_the_api() -> None:
    clock = FakeClock()
    assert format_time(clock.now() + timedelta(seconds=1)).endswith("Z")


def test_young_idle_addresses_are_not_given_back_before_their_minimum_lifetime() -> None:
    rig = Rig(policy=PoolPolicy(min_idle=0, max_idle=0, batch_size=4, max_batch_size=4,
                                reuse_cooldown=0.0, min_ip_lifetime=3.0))
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()  # one batch of 4 arrives: 1 owned, 3 idle above max_idle
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.idle_count() == 3
    rig.settle(advance=2)
    assert pool.idle_count() == 3, "trimmed before the cloud surely knew the addresses"
    rig.settle(advance=rig.policy.refill_period + 3)
    assert pool.idle_count() == 0
    rig.assert_no_leak()


def test_a_corrupted_pool_is_dropped_and_rebuilt() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None
    from podnet.core.pool import Address

    for i in range(pool.capacity + 5):  # bookkeeping gone wrong: more than the node holds
        pool.addresses[f"10.250.{i // 250}.{i % 250}"] = Address(f"10.250.{i // 250}.{i % 250}")
    rig.engine.enqueue_node(node)
    rig.settle()
    assert pool.total() <= pool.capacity
    assert not any(a.startswith("10.250.") for a in pool.addresses)
    assert pool.owner_of(rig.record_of(pod)["status"]["ip"]) is not None
    rig.assert_no_leak()


def test_a_pool_that_nothing_changed_is_not_passed_again_by_the_clock() -> None:
    # a restart's node passes every refill period, over pools the restart changes not
    rig = Rig()
    nodes = [rig.node(i) for i in range(2)]
    web = rig.pod("web", nodes[0])
    for _ in range(3):  # the refill periods pass: the pools are at rest
        rig.settle(advance=rig.policy.refill_period)
    passes: list[str] = []
    real = rig.engine.nodepools._grow

    def grow(node: Any, *args: Any, **kwargs: Any) -> Any:
        passes.append(node.name)
        return real(node, *args, **kwargs)

    rig.engine.nodepools._grow = grow  # type: ignore[method-assign]
    reconciles = rig.engine.stats.reconciles["node"]
    for _ in range(3):
        rig.settle(advance=rig.policy.refill_period)
    assert rig.engine.stats.reconciles["node"] > reconciles  # the clock's passes came
    assert passes == []  # and found the state their last pass left: nothing to do
    # a change of the pool no node pass hears of (a pod takes an idle address): the next
    # timed pass is a whole one, and refills the pool to min_idle
    pool = rig.engine.pools.get("reference", nodes[1])
    idle = pool.idle_count()
    for i in range(idle - 1):
        rig.pod(f"p{i}", nodes[1])
    rig.settle()
    assert pool.idle_count() < rig.policy.min_idle
    rig.settle(advance=rig.policy.refill_period)
    assert nodes[1] in passes and nodes[0] not in passes
    assert pool.idle_count() >= rig.policy.min_idle
    # each record lists its pool's addresses as they are: the quiet pool's record too
    rig.settle(advance=rig.policy.refill_period)
    for node in nodes:
        nn = rig.cluster.get(NODE_NETWORK, node)
        written = {ip["address"] for itf in nn["status"]["interfaces"]
                   for ip in itf.get("ips", [])}
        assert written == set(rig.engine.pools.get("reference", node).addresses)
    assert rig.record_of(web)["status"]["phase"] == "Routed"
    rig.assert_no_leak()
