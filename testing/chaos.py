"""The chaos machine: hypothesis drives the engine through pod and node churn, controller
crashes at hook boundaries, restarts, cloud and API-server faults and clock jumps, in any
interleaving, and checks the invariants after every step.

Generic over providers::

    Chaos = make_chaos_machine(lambda: MyProvider(FakeClient()),
                               lambda plugin: plugin.client.addresses_by_node())
    TestMyProviderChaos = Chaos.TestCase
    TestMyProviderChaos.settings = chaos_settings()

The API server may also commit a write of the engine and lose the answer.

Invariants, after every step: no address is recorded (``status.ip``) by two PodNetworks
at once; no two live pods are routed on one address; no allocated or routed record
points at an address its node does not have in the cloud (a provider without node pools
binds an address to a node when it routes it: there an allocated record, one that moved
with its pod, needs its address in the cloud on any node); every address the cloud has
on a node that left is named by a PodNetwork or its node's NodeNetwork still holds the
finalizer (ownership is recorded before it is relied on). At the end, with every
fault cleared and the clock moved past the leaked-address expiry plus two GC periods:
every pod routed, no stray record, no NodeNetwork outliving its node, every cloud
address owned or pooled, on live nodes and gone ones (nothing leaked), and no interface
podnet made left where no inventory lists it (``cloud_leftovers``: created and never
attached, or detached and never deleted).

The controller is also killed inside a hook, between two of its cloud calls
(``cloud_kills``: e.g. after CreateNetworkInterface, before the attach).

Nodes are deleted at any point (``node_deleted``: with pods put on it first, and the
controller killed at the next hook its leaving calls), and come back.

Two replicas elect their leader on a ``coordination.k8s.io`` Lease (core's elector, its
loop run every retry period on the fake clock): the World's engine is the leader's. The
leader may be paused past its Lease (SIGSTOP, a stalled VM) while the standby takes the
Lease over and starts leading; then the paused one runs again and its workers take keys
before its elector looks. Each replica has its own engines and memory and its own view of
the API server (its writes counted), and shares the cluster, the clock and the provider
plugin (the cloud): the stale replica must make no API write and no provider call once
its renew deadline has passed, while the new leader carries on to the same end.

Operators and clouds misbehave too: two pods race for one static address, the cloud
forgets addresses (with ``cloud_forget``), a record is made unreadable (then healed), a
record's ``status.ip`` is set to another's address, a record's finalizer is removed by
hand and the record deleted. The invariants hold through all of it: an edit by hand is
excused until the next settle, an address the cloud forgot until the end.

``PODNET_CHAOS_EXAMPLES`` sets how many examples run (CI default 200). Each run draws new
histories (hypothesis prints the seed of a failing one: rerun with
``--hypothesis-seed=N``); failing examples are kept in hypothesis' local database, and the
ones worth keeping become plain tests beside the machine.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from contextlib import AbstractContextManager
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, Phase, settings
from hypothesis import event as _event
from hypothesis.control import currently_in_test_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK, ApiError, Cluster, Conflict, Kind
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.fence import Fence
from podnet.core.leader import LeaderElector
from podnet.core.models import FINALIZER
from podnet.core.ratelimit import deferring_cloud_waits
from podnet.sim.memory import InMemoryCluster
from podnet.testing.chaosedits import edits_that_took_an_address, unsealed_addresses
from podnet.testing.chaosreport import mark_chaos
from podnet.testing.harness import (
    Crash,
    EngineFactory,
    FaultInjector,
    LossyCluster,
    TickingClock,
    World,
    WriteCounter,
    build_plugin_manager,
    provider_name_of,
)
from podnet.testing.kubevirt import KubeVirt


def event(value: str) -> None:
    """Hypothesis' statistics event, when in a test: a history replayed as a plain test
    (the regression tests beside each machine) runs the same rules outside one."""
    if currently_in_test_context():
        _event(value)


__all__ = ["CHAOS_HOOKS", "EXAMPLES_ENV", "chaos_settings", "make_chaos_machine"]

EXAMPLES_ENV = "PODNET_CHAOS_EXAMPLES"
#: hooks the machine crashes or fails the provider at
CHAOS_HOOKS = ("allocate", "route", "release", "pool_grow", "pool_shrink", "interface_create",
               "interface_dispose", "node_inventory")
#: hooks a node that left calls while its share is given back
_LEAVE_HOOKS = ("node_inventory", "pool_shrink", "interface_dispose")
#: kinds of injected provider errors: all retryable (an invalid request rightly stops)
FAULT_KINDS = (ErrorKind.THROTTLED, ErrorKind.TRANSIENT, ErrorKind.QUOTA_EXCEEDED,
               ErrorKind.SUBNET_EXHAUSTED, ErrorKind.CONFLICT)
#: writes of the engine's own records the API server may fail (pods and nodes are the
#: test driver's, and a read failing is covered by error_rate)
_FAILING_OPS = ("create", "update", "update_status", "delete")
_FAILING_KINDS: tuple[Kind, ...] = (POD_NETWORK, NODE_NETWORK)
#: bound on one settle while faults are on: far above any backoff-limited retry count
_SETTLE_STEPS = 20_000
#: the Lease the replicas elect their leader on, and its timing (the config's defaults)
LEASE_NAMESPACE, LEASE_NAME = "kube-system", "podnet"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 15.0, 10.0, 2.0


class _Replica:
    """One replica of the controller (a pod of its Deployment): its identity, its own
    view of the API server (every write it sends counted), its engines, and the elector of
    its current process, whose loop runs every retry period on the fake clock while the
    process runs. It shares the cluster, the clock and the provider plugin (the cloud)
    with the other replica, never its memory."""

    def __init__(self, identity: str, cluster: InMemoryCluster, api: Cluster, pm: Any,
                 clock: TickingClock, provider: str,
                 quiet: Callable[[], AbstractContextManager[None]]) -> None:
        self.identity = identity
        self.api = WriteCounter(api)
        self.clock = clock
        self.quiet = quiet
        self.engines = EngineFactory(cluster, pm, clock, provider=provider,
                                     api=self.api.as_cluster(), fence=self._engine_fence)
        self.elector: LeaderElector | None = None
        #: the current process's leadership ended while it ran (its elector gave up)
        self.lost = False
        self._stop_loop: Callable[[], None] | None = None
        self._has_engine = False

    def start_process(self) -> None:
        """A new process of this replica: a fresh elector campaigns now and every retry
        period from now on (faults off: losing the Lease to a flaky API server is
        ``tests/test_fence.py``'s, the pause is this machine's)."""
        self.stop_process()
        self.elector = LeaderElector(
            self.api.as_cluster(), namespace=LEASE_NAMESPACE, name=LEASE_NAME,
            identity=self.identity, lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE, retry_period=RETRY_PERIOD, clock=self.clock)
        self._has_engine = False
        self.lost = False
        self.campaign()
        self._stop_loop = self.clock.every(RETRY_PERIOD, self._loop)

    def _loop(self) -> None:
        self.campaign()

    def leads(self) -> bool:
        return self.elector is not None and self.elector.leading

    def campaign(self) -> bool:
        """One round of the elector's loop: acquire or renew the Lease."""
        elector = self.elector
        assert elector is not None
        was = elector.leading
        with self.quiet():
            leading = elector.try_acquire_or_renew()
        if was and not leading:
            self.lost = True
        return leading

    def pause(self) -> None:
        """SIGSTOP: neither its elector nor its engine runs until resumed."""
        if self._stop_loop is not None:
            self._stop_loop()
            self._stop_loop = None

    def stop_process(self) -> None:
        self.pause()
        self.elector = None

    def _engine_fence(self) -> Fence:
        """An engine of this replica is built: the process that won the Lease and has no
        engine yet runs it; any other build is a new process (a restart after a crash),
        whose elector takes the Lease back at once (it still names this replica)."""
        if self.elector is None or self._has_engine:
            self.start_process()
        assert self.elector is not None
        assert self.elector.leading, f"{self.identity} starts an engine without the Lease"
        self._has_engine = True
        return self.elector.fence


def chaos_settings(max_examples: int | None = None, *, step_count: int = 30) -> settings:
    """CI settings: ``max_examples`` (default ``$PODNET_CHAOS_EXAMPLES`` or 200), steps per
    example, no deadline (one example replays a lot); new histories on every run. Under
    the ``podnet.testing.chaosreport`` plugin a run with these settings prints its first
    failing history and blob at once, and its shrinking is bounded in time."""
    examples = max_examples if max_examples is not None else int(
        os.environ.get(EXAMPLES_ENV, "200"))
    return mark_chaos(settings(
        max_examples=examples,
        stateful_step_count=step_count,
        deadline=None,
        # a failure prints the blob that replays it (``@reproduce_failure``): the
        # histories are new on every run, so CI's log is the only record of one
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # no explain phase: it replays the failing history under a line tracer, many
        # times slower, and on a loaded CI host the test's timeout then killed the
        # worker before the failure and its blob were printed
        phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    ))


def make_chaos_machine(
    provider_factory: Callable[[], Any],
    cloud_addresses: Callable[[Any], Mapping[str, str]],
    *,
    cloud_fault_rate: Callable[[Any, float], None] | None = None,
    cloud_forget: Callable[[Any, str, list[str]], None] | None = None,
    cloud_kills: Collection[str] = (),
    cloud_kill: Callable[[Any, str | None], None] | None = None,
    cloud_leftovers: Callable[[Any], Mapping[str, Collection[str]]] | None = None,
    nodes: int = 3,
    pods: int = 6,
    sticky: bool = True,
    vms: bool = False,
    without: Collection[str] = (),
    name: str = "ChaosMachine",
) -> type[RuleBasedStateMachine]:
    """A state machine class over a fresh provider per example.

    :param provider_factory: a new plugin object (and its fake cloud) per example.
    :param cloud_addresses: the ground truth of that plugin: address -> node name.
    :param cloud_fault_rate: sets the cloud's own random fault rate, if it has one.
    :param cloud_forget: makes the cloud lose addresses of a node (``plugin, node name,
        addresses``), as a cloud restored from a backup does.
    :param cloud_kills: points inside a hook where the controller may be killed (between
        two cloud calls of one hook, which a hook boundary never is), armed by
        ``cloud_kill(plugin, point)`` for its next occurrence, in place of the kill armed
        before (``None``: disarm); the kill raises :class:`Crash` there and the provider
        loses its process memory. Disarming also undoes any cloud failure the arming
        scripted to lead to the kill: the end clears every fault, and one left armed
        would refuse the calls that clean up.
    :param cloud_leftovers: what the provider made in the cloud that no inventory lists
        (an interface created and never attached): id -> its addresses. Their addresses
        are the sweep's (after its grace), not the node's, in the per-step check; at
        the end none is left.
    :param nodes: node indexes drawn from ``range(nodes)``; ``pods``: pod names ``p0..``.
    :param sticky: whether pods may be StatefulSet pods (sticky addresses).
    :param vms: whether pods may be KubeVirt VM pods (``virt-launcher``, controlled by a
        VirtualMachineInstance ``vm-a`` or ``vm-b``: two pods of one VM are a VM started
        again, or a live migration while both run).
    :param without: faults to leave out, while a known bug they trigger is open:
        ``provider_fault:<hook>:<before|after>`` (e.g. ``provider_fault:pool_shrink:after``)
        ``lose_answers:<op>:<plural>`` (e.g. ``lose_answers:update_status:podnetworks``)
        and ``cluster_fail:<op>:<plural>`` (e.g. ``cluster_fail:create:nodenetworks``).
    """
    node_ids = st.integers(min_value=0, max_value=nodes - 1)
    pod_names = st.sampled_from([f"p{i}" for i in range(pods)])
    hooks = st.sampled_from(CHAOS_HOOKS)
    moments = st.sampled_from(["before", "after"])
    skipped = frozenset(without)
    provider_faults = st.tuples(hooks, moments).filter(
        lambda hw: f"provider_fault:{hw[0]}:{hw[1]}" not in skipped)
    lost_answers = st.tuples(st.sampled_from(_FAILING_OPS), st.sampled_from(_FAILING_KINDS)
                             ).filter(lambda ok: f"lose_answers:{ok[0]}:{ok[1].plural}"
                                      not in skipped)

    failing_writes = st.tuples(st.sampled_from(_FAILING_OPS), st.sampled_from(_FAILING_KINDS)
                               ).filter(lambda ok: f"cluster_fail:{ok[0]}:{ok[1].plural}"
                                        not in skipped)

    def set_rate(plugin: Any, rate: float) -> None:
        if cloud_fault_rate is not None:
            cloud_fault_rate(plugin, rate)

    class ChaosMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.plugin = provider_factory()
            self.clock = TickingClock()
            self.cluster = InMemoryCluster(clock=self.clock)
            self.injector = FaultInjector()
            self.api = LossyCluster(self.cluster)
            pm = build_plugin_manager(self.plugin, injector=self.injector)
            #: two replicas of the controller; the World's engine is the leader's
            self.replicas = [
                _Replica(identity, self.cluster, self.api.as_cluster(), pm, self.clock,
                         provider_name_of(pm), lambda: self.world.quiet())
                for identity in ("podnet-a", "podnet-b")]
            self.leader = 0
            self.world = World(self.cluster, self.clock, self.replicas[0].engines,
                               lambda: cloud_addresses(self.plugin))
            self.world.start()
            #: records edited by hand -> the address the edit gave them: excused from the
            #: invariants while they still name it (podnet fixes it, or the end's
            #: convergence check says it did not)
            self.edited: dict[str, str] = {}
            #: record name -> every address a hand edit gave it (kept: a rebuild's choice
            #: is judged by the Event it leaves, read after the rule)
            self.edited_ever: dict[str, set[str]] = {}
            #: addresses the cloud forgot: their records are re-addressed by the end
            self.forgotten: set[str] = set()
            #: record name -> the requests it had before it was made unreadable
            self.corrupted: dict[str, dict[str, Any]] = {}
            #: pods asking for a static address: the loser of a race never routes, so
            #: they go before the final check (which still sees their release)
            self.static_pods: set[str] = set()
            # the engine puts a cloud call whose token is not there off to its slot
            # (CloudWait, a requeue), as its workers do; a machine with a tight
            # cloud_rate goes through it often
            self.world.defer_cloud_waits = True

        # --- the cluster ----------------------------------------------------------------

        @initialize(up=st.integers(min_value=1, max_value=nodes),
                    running=st.integers(min_value=0, max_value=pods))
        def populate(self, up: int, running: int) -> None:
            """Start from some nodes and pods: churn needs something to churn."""
            for i in range(up):
                self.world.add_node(i)
            for p in range(running):
                self.world.add_pod(f"p{p}", p % up)

        @rule(i=node_ids)
        def add_node(self, i: int) -> None:
            if not self.world.has_node(i):
                self.world.add_node(i)

        @rule(i=node_ids)
        def delete_node(self, i: int) -> None:
            if self.world.has_node(i):
                self.world.delete_node(i)

        @rule(i=node_ids, pods_on_it=st.integers(min_value=0, max_value=3),
              kill=st.sampled_from([None, *_LEAVE_HOOKS]), when=moments,
              steps=st.integers(min_value=0, max_value=30))
        def node_deleted(self, i: int, pods_on_it: int, kill: str | None, when: Any,
                         steps: int) -> None:
            """A Node deleted (its instance kept) with pods on it, at any point of its
            pool's life; the controller killed at the next ``kill`` hook (while the node's
            share is given back, say), and ``steps`` keys run before the next rule."""
            if not self.world.has_node(i):
                return
            free = [p for p in (f"p{n}" for n in range(pods)) if self.world.pod(p) is None]
            for pod in free[:pods_on_it]:
                self.world.add_pod(pod, i)
            if pods_on_it:
                self.world.step(steps)
            if kill is not None:
                self.injector.crash(kill, when=when)
            self.world.delete_node(i)
            self.world.step(steps)
            event(f"node deleted with the controller killed at: {kill}")

        @rule(pod=pod_names, i=node_ids, stateful=st.booleans() if sticky else st.just(False))
        def add_pod(self, pod: str, i: int, stateful: bool) -> None:
            if self.world.pod(pod) is None and self.world.has_node(i):
                self.world.add_pod(pod, i, owner=("StatefulSet", "web") if stateful else None)

        if vms:
            @rule(pod=pod_names, i=node_ids, vm=st.sampled_from(["vm-a", "vm-b"]))
            def add_vm_pod(self, pod: str, i: int, vm: str) -> None:
                if self.world.pod(pod) is None and self.world.has_node(i):
                    self.world.add_pod(pod, i, owner=("VirtualMachineInstance", vm))

            @rule(pick=st.integers(min_value=0, max_value=pods - 1), i=node_ids,
                  steps=st.integers(min_value=0, max_value=30),
                  ends=st.sampled_from(["finished", "failed", "aborted"]),
                  kubevirt=st.booleans())
            def migrate_vm(self, pick: int, i: int, steps: int, ends: str,
                           kubevirt: bool) -> None:
                """A live migration of a running VM pod (the ``pick``-th, round the VM
                pods there are; a VM started for it when none runs): its target pod
                (KubeVirt's ``kubevirt.io/migrationJobUID`` label, the first free pod
                name) on node ``i``, the controller restarted ``steps`` into it, then the
                migration finishes (the source pod succeeds), fails (the target does) or is
                aborted (the target is deleted), settled before the next rule. With
                ``kubevirt``, KubeVirt's objects say it as virt-controller does: a
                VirtualMachineInstanceMigration whose uid the target's label carries, the
                VMI's migrationState begun, then ended (completed, failed, aborted) before
                the pods follow, the controller restarted again between the two."""
                names = [f"p{n}" for n in range(pods)]
                # the faults armed before stay armed: they may fire anywhere in the move
                found = {name: self.world.pod(name) for name in names}
                vm_pods = [(name, ref["name"]) for name, obj in found.items() if obj is not None
                           and (obj.get("status") or {}).get("phase") not in (
                               "Succeeded", "Failed")
                           and not obj["metadata"].get("deletionTimestamp")
                           for ref in obj["metadata"].get("ownerReferences") or []
                           if ref.get("kind") == "VirtualMachineInstance"]
                free = [name for name, obj in found.items() if obj is None]
                if not self.world.has_node(i) or len(free) < (1 if vm_pods else 2):
                    return
                started = not vm_pods
                if vm_pods:
                    source, vm = vm_pods[pick % len(vm_pods)]
                else:
                    # no VM runs: one starts first, on another node where there is one
                    source, vm = free.pop(0), "vm-a"
                    there = next((n for n in range(nodes) if n != i and self.world.has_node(n)),
                                 i)
                    self.world.add_pod(source, there, owner=("VirtualMachineInstance", vm))
                # the VM runs (KubeVirt migrates a running VM only): its network settled
                self.world.settle(advance=60.0, max_steps=_SETTLE_STEPS)
                moved = free[0]
                label = {"kubevirt.io/migrationJobUID": f"mig-{moved}"}
                said = KubeVirt(self.cluster, self.world.namespace, self.world.clock)
                migration = f"mig-{moved}-{self.world.restarts}"
                if kubevirt:
                    with self.world.quiet():
                        running = self.world.pod(source)
                        assert running is not None
                        source_node = str(running["spec"]["nodeName"])
                        said.running(vm, source_node)
                        label = {"kubevirt.io/migrationJobUID": said.begin(
                            vm, name=migration, source_pod=source, source_node=source_node,
                            target_pod=moved, target_node=self.world.node_name(i))}
                self.world.add_pod(moved, i, owner=("VirtualMachineInstance", vm),
                                   labels=label)
                self.world.step(steps)
                self.world.restart()
                self.world.step(steps)
                if kubevirt:
                    if ends == "finished":
                        self.world.settle(advance=60.0, max_steps=_SETTLE_STEPS)
                    with self.world.quiet():
                        said.end(vm, migration, {"finished": "completed"}.get(ends, ends))
                    # KubeVirt's word first, the pods later: a restart in between
                    self.world.step(steps)
                    self.world.restart()
                    self.world.step(steps)
                if ends == "finished":
                    # KubeVirt finishes only once the target runs, with the VM's network
                    self.world.settle(advance=60.0, max_steps=_SETTLE_STEPS)
                    self.world.finish_pod(source, "Succeeded")
                elif ends == "failed":
                    self.world.finish_pod(moved, "Failed")
                elif ends == "aborted":
                    self.world.delete_pod(moved)
                # the record's move (to the target, or back to the source) done before
                # the next rule, as far as the faults still armed let it
                self.world.settle(advance=60.0, max_steps=_SETTLE_STEPS)
                if started:
                    # the VM started for this migration stops and its address goes: VMs
                    # stay as frequent as add_vm_pod makes them
                    for name in (source, moved):
                        if self.world.pod(name) is not None:
                            self.world.delete_pod(name)
                    self.world.settle(advance=self.world.policy().sticky_hold + 10.0,
                                      max_steps=_SETTLE_STEPS)
                event(f"live migration with a controller restart: {ends}"
                      + (", KubeVirt's migrationState first" if kubevirt else ""))

        @rule(pod=pod_names, graceful=st.booleans())
        def delete_pod(self, pod: str, graceful: bool) -> None:
            obj = self.world.pod(pod)
            if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                self.world.delete_pod(pod, grace=30 if graceful else 0)

        @rule(pod=pod_names)
        def kubelet_confirms(self, pod: str) -> None:
            obj = self.world.pod(pod)
            if obj is not None and obj["metadata"].get("deletionTimestamp"):
                self.world.confirm_pod_deleted(pod)

        @rule(pod=pod_names, phase=st.sampled_from(["Succeeded", "Failed"]))
        def pod_finishes(self, pod: str, phase: str) -> None:
            """The pod's containers are done for good: its address can go."""
            if self.world.pod(pod) is not None:
                self.world.finish_pod(pod, phase)

        @rule(pod=pod_names, i=node_ids, same_node=st.booleans())
        def recreate_pod(self, pod: str, i: int, same_node: bool) -> None:
            """Same name, new uid, before the old one's release could finish."""
            if self.world.pod(pod) is None:
                return
            if same_node:
                self.world.recreate_pod(pod)
            elif self.world.has_node(i):
                self.world.recreate_pod(pod, i)

        # --- the controller ---------------------------------------------------------------

        @rule(n=st.integers(min_value=1, max_value=30))
        def step(self, n: int) -> None:
            self.world.step(n)

        @rule(seconds=st.sampled_from([0.0, 1.0, 5.0, 60.0]))
        def settle(self, seconds: float) -> None:
            self.world.settle(advance=seconds, max_steps=_SETTLE_STEPS)

        @rule(seconds=st.sampled_from([0.01, 0.5, 5.0, 30.0, 120.0, 700.0]))
        def advance_clock(self, seconds: float) -> None:
            self.world.advance(seconds)

        @rule()
        def restart(self) -> None:
            self.world.restart()

        @rule(late=st.sampled_from([0.0, 1.0, 30.0, 300.0]),
              steps=st.integers(min_value=0, max_value=30),
              stale_steps=st.integers(min_value=1, max_value=30))
        def pause_leader_past_lease(self, late: float, steps: int, stale_steps: int) -> None:
            """The leader is paused longer than its Lease; the standby takes the Lease over
            and leads (``steps`` of its engine); then the paused replica runs again, and
            its workers take ``stale_steps`` keys before its elector looks at the Lease."""
            old, new = self.replicas[self.leader], self.replicas[1 - self.leader]
            stale = self.world.engine
            old.pause()
            new.start_process()  # a standby: it sees the Lease held, and waits
            assert not new.leads()
            self.clock.advance(LEASE_DURATION + RETRY_PERIOD + late)
            assert new.leads(), f"{new.identity} did not take over the Lease"
            self.leader = 1 - self.leader
            assert self.world.take_over(new.engines) is stale
            self.world.step(steps)
            # the paused replica resumes: from here on, nothing it does may leave it
            writes, calls = Counter(old.api.writes), Counter(stale.stats.provider_calls)
            cloud = dict(cloud_addresses(self.plugin))
            taken = 0
            try:
                with deferring_cloud_waits():
                    while taken < stale_steps and stale.step():
                        taken += 1
            except Crash:  # a fault fired at one of its hooks: a call left it
                pass
            wrote = old.api.writes - writes
            assert not wrote, f"{old.identity} wrote after its renew deadline: {dict(wrote)}"
            called = stale.stats.provider_calls - calls
            assert not called, (
                f"{old.identity} called its provider after its renew deadline: {dict(called)}")
            assert dict(cloud_addresses(self.plugin)) == cloud, (
                f"the cloud changed while only {old.identity} ran")
            assert old.elector is not None and not old.campaign(), (
                f"{old.identity} still leads after {new.identity} took the Lease over")
            refused = sum(old.elector.fence.refused.values())
            event(f"stale replica refused writes: {refused > 0}")
            event(f"stale replica steps taken: {min(taken, 3)}")
            # like controller-runtime, a replica that lost its Lease exits
            EngineFactory.stop(stale)
            old.stop_process()

        @rule(hook=hooks, when=moments)
        def crash_at(self, hook: str, when: Any) -> None:
            """The controller dies at the next call of ``hook``: before it, or after the
            cloud did the work and before the engine recorded it."""
            self.injector.crash(hook, when=when)

        # --- faults ------------------------------------------------------------------------

        @rule(where=provider_faults, kind=st.sampled_from(FAULT_KINDS),
              times=st.integers(min_value=1, max_value=3))
        def provider_fault(self, where: tuple[str, Any], kind: ErrorKind, times: int) -> None:
            """The provider fails a call (``after``: the cloud did it, the answer got lost)."""
            hook, when = where
            self.injector.fail(hook, lambda: ProviderError(kind, f"injected {kind.value}"),
                               when=when, times=times)

        if cloud_fault_rate is not None:

            @rule(rate=st.sampled_from([0.0, 0.1, 0.3]))
            def cloud_faults(self, rate: float) -> None:
                set_rate(self.plugin, rate)

        @rule(conflict=st.sampled_from([0.0, 0.1, 0.3]), error=st.sampled_from([0.0, 0.1, 0.3]))
        def cluster_fault_rates(self, conflict: float, error: float) -> None:
            self.cluster.faults.conflict_rate = conflict
            self.cluster.faults.error_rate = error

        @rule(what=failing_writes, conflict=st.booleans(),
              times=st.integers(min_value=1, max_value=3))
        def cluster_fail_next(self, what: tuple[str, Kind], conflict: bool, times: int) -> None:
            op, kind = what
            exc = (Conflict("injected conflict") if conflict
                   else ApiError("injected server error"))
            self.cluster.faults.fail_next(op, kind, exc, times=times)

        @rule(what=lost_answers, times=st.integers(min_value=1, max_value=2))
        def lose_answers(self, what: tuple[str, Kind], times: int) -> None:
            """The API server commits the engine's write and the answer is lost."""
            op, kind = what
            self.api.lose_next(op, kind, times=times)

        @rule(what=lost_answers)
        def crash_after_write(self, what: tuple[str, Kind]) -> None:
            """The controller dies right after the API server committed one of its writes
            (between two writes of one transition, say)."""
            op, kind = what
            self.api.crash_after(op, kind)

        @rule()
        def drop_watches(self) -> None:
            self.cluster.faults.drop_watches()

        @rule()
        def compact(self) -> None:
            self.cluster.faults.compact()

        # --- operators and clouds behind podnet's back -------------------------------------

        @rule(a=pod_names, b=pod_names, i=node_ids, pick=st.integers(min_value=0, max_value=63))
        def race_for_static(self, a: str, b: str, i: int, pick: int) -> None:
            """Two pods created together, both asking for one address of their node."""
            if a == b or not self.world.has_node(i) or self.world.pod(a) or self.world.pod(b):
                return
            node = self.world.node_name(i)
            on_node = sorted(ip for ip, n in cloud_addresses(self.plugin).items()
                             if n == node and ":" not in ip)
            if not on_node:
                return
            wanted = {"podnet.io/ip-address": on_node[pick % len(on_node)]}
            self.world.add_pod(a, i, annotations=wanted)
            self.world.add_pod(b, i, annotations=wanted)
            self.static_pods.update((a, b))

        if cloud_kill is not None and cloud_kills:

            @rule(point=st.sampled_from(sorted(cloud_kills)))
            def cloud_kill_at(self, point: str) -> None:
                """The controller dies inside a hook, between two cloud calls (e.g.
                between creating an interface and attaching it)."""
                cloud_kill(self.plugin, point)
                event(f"killed in the cloud at: {point}")

        if cloud_forget is not None:
            @rule(i=node_ids, count=st.integers(min_value=1, max_value=3))
            def cloud_forgets(self, i: int, count: int) -> None:
                """The cloud loses addresses that records hold on a node."""
                node = self.world.node_name(i)
                held = sorted(ip for ip, pns in self.world.owners().items()
                              if ":" not in ip and any(p.spec.node_name == node for p in pns))
                lost = [ip for ip in held if cloud_addresses(self.plugin).get(ip) == node][:count]
                if lost:
                    cloud_forget(self.plugin, node, lost)
                    self.forgotten.update(lost)

        @rule(pod=pod_names)
        def make_record_unreadable(self, pod: str) -> None:
            """Someone writes a spec the CRD takes and podnet's converter refuses."""
            pn = self.world.record_of(pod)
            if pn is None or pn.metadata.name in self.corrupted:
                return
            with self.world.quiet():
                raw = self.cluster.get(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)
                requests = raw.get("spec", {}).get("requests") or {}
                self.corrupted[pn.metadata.name] = {
                    k: requests.get(k) for k in ("ipPool", "ipAddress")}
                self.cluster.patch(POD_NETWORK, pn.metadata.name, {"spec": {"requests": {
                    "ipPool": ["192.0.2.1"], "ipAddress": "192.0.2.2"}}},
                    pn.metadata.namespace)

        @rule()
        def heal_records(self) -> None:
            for name, requests in sorted(self.corrupted.items()):
                with self.world.quiet():
                    try:
                        self.cluster.patch(POD_NETWORK, name,
                                           {"spec": {"requests": requests}},
                                           self.world.namespace)
                    except ApiError:
                        pass  # gone meanwhile (its pod, its node)
            self.corrupted.clear()

        @rule(a=pod_names, b=pod_names)
        def edit_record_ip(self, a: str, b: str) -> None:
            """``kubectl edit``: a record's status.ip set to another record's address."""
            pa, pb = self.world.record_of(a), self.world.record_of(b)
            if pa is None or pb is None or pa.key == pb.key or not pb.status.ip:
                return
            if pa.metadata.name in self.corrupted or ":" in pb.status.ip:
                return
            with self.world.quiet():
                edited = self.cluster.patch(POD_NETWORK, pa.metadata.name, {"status": {
                    "ip": pb.status.ip}}, pa.metadata.namespace, subresource="status")
            self.edited[pa.metadata.name] = edited["status"]["ip"]
            self.edited_ever.setdefault(pa.metadata.name, set()).add(edited["status"]["ip"])

        @rule(pod=pod_names)
        def remove_record_by_hand(self, pod: str) -> None:
            """The finalizer taken off by hand and the record deleted: nothing released."""
            pn = self.world.record_of(pod)
            if pn is None or pn.metadata.name in self.corrupted:
                return
            with self.world.quiet():
                self.cluster.patch(POD_NETWORK, pn.metadata.name,
                                   {"metadata": {"finalizers": []}}, pn.metadata.namespace)
                self.cluster.delete(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)

        # --- invariants -------------------------------------------------------------------

        def _excused(self, problems: list[str]) -> list[str]:
            """Problems not caused by a hand edit podnet has not rewritten yet."""
            still = {pn.key: f"{pn.metadata.namespace}/{pn.spec.pod_name}"
                     for pn in self.world.records()
                     if self.edited.get(pn.metadata.name) == pn.status.ip}
            self.edited = {k: v for k, v in self.edited.items()
                           if any(key.endswith(f"/{k}") for key in still)}
            marks = [re.compile(rf"{re.escape(n)}\b") for pair in still.items() for n in pair]
            return [p for p in problems if not any(m.search(p) for m in marks)]

        @invariant()
        def no_address_owned_twice(self) -> None:
            problems = self._excused(self.world.double_owner_problems())
            assert not problems, "double assignment:\n  " + "\n  ".join(problems)

        @invariant()
        def a_hand_edit_takes_no_address_from_its_owner(self) -> None:
            """Whatever the owners' lag, a restart or a node leaving keeps an address for
            the record podnet gave it to, not for one edited to name it."""
            problems = edits_that_took_an_address(self.world, self.edited, self.edited_ever)
            assert not problems, "an edit took an address: " + "; ".join(problems)

        @invariant()
        def every_address_podnet_gave_is_sealed(self) -> None:
            unsealed = unsealed_addresses(self.world, self.edited_ever)
            assert not unsealed, "addresses without their seal: " + ", ".join(unsealed)

        @invariant()
        def records_point_at_real_addresses(self) -> None:
            problems = [p for p in self._excused(self.world.dangling_problems())
                        if not any(f" on {ip}, " in p for ip in self.forgotten)]
            assert not problems, "\n".join(problems)

        @invariant()
        def every_cloud_address_has_a_record(self) -> None:
            """Ownership is recorded before it is relied on: every address the cloud has
            on a node, live or gone, is named by a PodNetwork or is the node's, whose
            NodeNetwork keeps the finalizer until it is given back (a record being
            deleted while its machine runs is kept: no moment without one)."""
            if not self.world.engine.providers[self.world.provider].uses_node_pool:
                return  # an overlay's own IPAM: its sweep is the check (at the end)
            named = set(self.world.owners())
            with self.world.quiet():
                guarded = {nn["metadata"]["name"]
                           for nn in self.cluster.list(NODE_NETWORK).items
                           if FINALIZER in (nn["metadata"].get("finalizers") or ())}
            # on an interface no inventory lists: the sweep's, once its grace is over
            swept = ({ip for ips in cloud_leftovers(self.plugin).values() for ip in ips}
                     if cloud_leftovers is not None else set())
            problems = sorted(f"{ip} on {node}" for ip, node in cloud_addresses(self.plugin).items()
                              if ip not in named and node not in guarded
                              and ip not in swept)
            assert not problems, ("cloud addresses neither a PodNetwork nor a guarded "
                                  "NodeNetwork names: " + ", ".join(problems))

        @invariant()
        def the_leader_holds_the_lease(self) -> None:
            leader = self.replicas[self.leader]
            assert leader.leads(), f"{leader.identity} leads the World without the Lease"
            assert not leader.lost, f"{leader.identity} lost the Lease while running"

        def teardown(self) -> None:
            try:
                self.heal_records()
                for pod in sorted(self.static_pods):
                    obj = self.world.pod(pod)
                    if obj is not None and (obj["metadata"].get("annotations") or {}).get(
                            "podnet.io/ip-address"):
                        self.world.delete_pod(pod)
                self.cluster.faults.clear()
                self.api.clear()
                self.injector.clear()
                if cloud_kill is not None:
                    cloud_kill(self.plugin, None)
                set_rate(self.plugin, 0.0)
                self.world.settle(advance=self.world.gc_grace(), max_steps=_SETTLE_STEPS)
                self.world.assert_converged()
                if cloud_leftovers is not None:
                    left = sorted(cloud_leftovers(self.plugin))
                    assert not left, f"interfaces made and never attached, left: {left}"
                # shown by --hypothesis-show-statistics: what the examples went through
                event(f"pods routed at the end: {len(self.world.live_pod_ips())}")
                event(f"controller crashes: {min(self.world.crashes, 3)}")
                event(f"restarts: {min(self.world.restarts, 3)}")
                event(f"leader takeovers: {min(self.world.takeovers, 3)}")
                event(f"leaked addresses swept: {self.world.engine.sweeper.swept > 0}")
                limiters = self.world.engine.gateway.cloud_limiters.values()
                event(f"cloud calls put off: {min(sum(x.deferred for x in limiters), 3)}")
                event(f"cloud slots traded: {min(sum(x.traded for x in limiters), 1)}")
            finally:
                self.world.close()

    ChaosMachine.__name__ = ChaosMachine.__qualname__ = name
    return ChaosMachine
