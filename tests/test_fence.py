"""The leadership fence: a replica whose Lease may have expired by its own clock writes
nothing, to the API server or through a provider, whatever its elector has not yet seen."""

from __future__ import annotations

import builtins
import threading
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

import pytest

from podnet.app.demo import node_obj, pod_obj
from podnet.app.host import Host
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import LEASE, NAMESPACE, NODE, POD, POD_NETWORK, Kind, Obj
from podnet.core.config import parse_config
from podnet.core.engine import Engine, EngineOptions
from podnet.core.errors import NotLeader
from podnet.core.fence import Fence
from podnet.core.leader import LeaderElector
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = "demo"
#: hooks that change the cloud or the dataplane
MUTATING = {"podnet_pool_grow", "podnet_pool_shrink", "podnet_interface_create",
            "podnet_interface_dispose", "podnet_allocate", "podnet_route", "podnet_release",
            "podnet_sweep"}


class CountingCluster(InMemoryCluster):
    """The in-memory cluster, counting the writes that reach it, by who made them."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.writes: Counter[str] = Counter()

    def _count(self, verb: str, kind: Kind) -> None:
        self.writes[f"{verb}.{kind.plural}"] += 1

    def create(self, kind: Kind, obj: Obj) -> Obj:
        self._count("create", kind)
        return super().create(kind, obj)

    def update(self, kind: Kind, obj: Obj) -> Obj:
        self._count("update", kind)
        return super().update(kind, obj)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        self._count("status", kind)
        return super().update_status(kind, obj)

    def patch(self, kind: Kind, name: str,
              patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
              namespace: str | None = None,
              patch_type: Literal["merge", "json", "strategic"] = "merge",
              subresource: Literal["status"] | None = None) -> Obj:
        self._count("patch", kind)
        return super().patch(kind, name, patch, namespace, patch_type, subresource)

    def delete(self, kind: Kind, name: str, namespace: str | None = None,
               uid: str | None = None, grace_period_seconds: int | None = None) -> None:
        self._count("delete", kind)
        super().delete(kind, name, namespace, uid, grace_period_seconds)

    def emit_event(self, involved: Obj, reason: str, message: str,
                   type: Literal["Normal", "Warning"] = "Normal") -> None:
        self.writes["events"] += 1
        super().emit_event(involved, reason, message, type)

    def non_lease_writes(self) -> int:
        return sum(n for w, n in self.writes.items() if not w.endswith(".leases"))


def elector(cluster: InMemoryCluster, clock: FakeClock, identity: str,
            fence: Fence | None = None) -> LeaderElector:
    return LeaderElector(cluster, namespace="kube-system", name="podnet", identity=identity,
                         lease_duration=15, renew_deadline=10, retry_period=2, clock=clock,
                         fence=fence)


# --- the fence and the elector --------------------------------------------------------


def test_the_fence_refuses_writes_once_the_renew_deadline_passes_without_a_renewal() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a = elector(cluster, clock, "a")
    with pytest.raises(NotLeader):  # not leading yet: closed
        a.fence.check("create.podnetworks")
    assert a.try_acquire_or_renew()
    assert a.fence.valid_until == clock.monotonic() + 10
    a.fence.check("create.podnetworks")
    clock.advance(9.999)  # a write that starts just before the deadline still goes
    a.fence.check("create.podnetworks")
    clock.advance(0.001)
    with pytest.raises(NotLeader):
        a.fence.check("create.podnetworks")
    with pytest.raises(NotLeader):
        a.fence.check("reference.pool_grow")
    assert a.fence.refused == Counter({"create.podnetworks": 2, "reference.pool_grow": 1})


def test_each_renewal_moves_the_deadline_from_when_it_was_sent() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a = elector(cluster, clock, "a")
    assert a.try_acquire_or_renew()
    for _ in range(5):
        clock.advance(2)
        sent = clock.monotonic()
        assert a.try_acquire_or_renew()
        assert a.fence.valid_until == sent + 10
    # a failed renewal (the API answers 500) moves nothing: the old deadline stands
    cluster.faults.error_rate = 1.0
    clock.advance(2)
    assert a.try_acquire_or_renew() is True
    assert a.fence.valid_until == sent + 10
    clock.advance(8)
    assert not a.fence.is_open()


def test_a_replica_paused_past_its_renew_deadline_stops_leading_even_if_nobody_took_over(
) -> None:
    # as client-go: leadership ends at the renew deadline, not when another replica shows
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a = elector(cluster, clock, "a")
    assert a.try_acquire_or_renew()
    clock.advance(11)  # paused; the Lease still names a
    assert cluster.get(LEASE, "podnet", "kube-system")["spec"]["holderIdentity"] == "a"
    assert a.try_acquire_or_renew() is False
    assert a.leading is False
    assert not a.fence.is_open()


def test_run_stops_leading_at_the_renew_deadline() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a = elector(cluster, clock, "a")
    a.retry_period = 0.01
    events: list[str] = []
    stop = threading.Event()

    def started() -> None:
        events.append("start")
        clock.advance(10)  # the process is paused right after it became leader

    thread = threading.Thread(target=a.run, args=(stop, started,
                                                  lambda: events.append("stop")))
    thread.start()
    thread.join(10)
    stop.set()
    assert not thread.is_alive()
    assert events == ["start", "stop"]
    assert not a.fence.is_open()


def test_a_clean_stop_closes_the_fence_before_the_lease_is_handed_back() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    a = elector(cluster, clock, "a")
    assert a.try_acquire_or_renew()
    a.release()
    assert not a.fence.is_open()
    assert cluster.get(LEASE, "podnet", "kube-system")["spec"]["holderIdentity"] is None


def test_the_host_fences_its_engine_with_its_elector() -> None:
    config = parse_config({"defaultProvider": "reference"})
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    host = Host(InMemoryCluster(), pm, config, identity="a")
    assert host.engine.fence is host.elector.fence is host.fence
    with pytest.raises(NotLeader):  # a standby writes nothing
        host.engine.cluster.create(POD_NETWORK, {"metadata": {"name": "x", "namespace": NS}})
    unelected = Host(InMemoryCluster(), pm, config, identity="b", leader_elect=False)
    assert unelected.fence.is_open()


# --- the engine behind the fence ------------------------------------------------------


class Replica:
    """A leader's engine and elector, as ``podnet run`` wires them, on a fake clock."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.cluster = CountingCluster(self.clock)
        self.cluster.create(NAMESPACE, {"metadata": {"name": NS}})
        self.cloud = ReferenceCloud()
        self.elector = elector(self.cluster, self.clock, "a")
        pm = new_plugin_manager()
        pm.register(ReferenceProvider(self.cloud, policy=PoolPolicy(
            min_idle=2, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0,
            leaked_ip_expiry=5.0, gc_period=2.0)), name="reference")
        self.hook_calls: Counter[str] = Counter()
        pm.add_hookcall_monitoring(
            lambda name, _impls, _kwargs: self.hook_calls.update([name]),
            lambda *_: None)
        assert self.elector.try_acquire_or_renew()
        self.engine = Engine(self.cluster, pm, clock=self.clock,
                             options=EngineOptions(default_provider="reference"),
                             fence=self.elector.fence)
        self.engine.start()

    def mutating_calls(self) -> int:
        return sum(n for name, n in self.hook_calls.items() if name in MUTATING)

    def routed(self) -> dict[str, str]:
        return {r["spec"]["podName"]: r["status"]["ip"]
                for r in self.cluster.list(POD_NETWORK).items
                if r.get("status", {}).get("phase") == "Routed"}


def test_an_engine_step_after_the_renew_deadline_writes_nothing() -> None:
    r = Replica()
    node = str(r.cluster.create(NODE, node_obj(0))["metadata"]["name"])
    for i in range(3):
        r.cluster.create(POD, pod_obj(f"p-{i}", node))
    r.engine.run_until_idle()
    assert set(r.routed()) == {"p-0", "p-1", "p-2"}
    assert r.cluster.non_lease_writes() > 0 and r.mutating_calls() > 0

    b = elector(r.cluster, r.clock, "b")
    assert not b.try_acquire_or_renew()  # the standby sees a's renewal
    # the leader is paused past its Lease; the standby takes it over
    r.clock.advance(16)
    assert b.try_acquire_or_renew()
    # work the stale leader would act on: a new pod, a deleted pod, a new node
    r.cluster.create(POD, pod_obj("late", node))
    r.cluster.delete(POD, "p-0", NS, grace_period_seconds=0)
    r.cluster.create(NODE, node_obj(1))
    writes, calls, errors = (r.cluster.non_lease_writes(), r.mutating_calls(),
                             sum(r.engine.stats.reconcile_errors.values()))
    addresses, routes = dict(r.cloud.all_addresses()), dict(r.cloud.routes)

    steps = r.engine.run_until_idle(advance=30)  # its elector has not looked yet

    assert steps > 0, "the stale leader had nothing to do: the test proves nothing"
    assert r.cluster.non_lease_writes() == writes, r.cluster.writes
    assert r.mutating_calls() == calls, r.hook_calls
    assert (dict(r.cloud.all_addresses()), dict(r.cloud.routes)) == (addresses, routes)
    assert "late" not in r.routed()
    assert sum(r.elector.fence.refused.values()) > 0
    # refused is not failed: nothing counted as a reconcile error, nothing retried
    assert sum(r.engine.stats.reconcile_errors.values()) == errors
    assert r.engine.is_idle()


def test_a_renewal_in_time_keeps_the_engine_writing() -> None:
    r = Replica()
    node = str(r.cluster.create(NODE, node_obj(0))["metadata"]["name"])
    r.engine.run_until_idle()
    r.clock.advance(8)
    assert r.elector.try_acquire_or_renew()
    r.clock.advance(8)  # 16 s after the first renewal, 8 after the last
    r.cluster.create(POD, pod_obj("web", node))
    r.engine.run_until_idle()
    assert "web" in r.routed()
    assert not r.elector.fence.refused
