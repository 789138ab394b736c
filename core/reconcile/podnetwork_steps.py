"""The steps every path of a pod network takes: its parts, one way to fire a transition
and write its record (or say why it failed), route, verify, repair and re-address, and a
wait for an address. The allocate path (:mod:`.podnetwork_allocate`), the release path
(:mod:`.podnetwork_release`) and the reconciler's pass (:mod:`.podnetwork`) build on it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

import attrs

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.cluster.port import POD_NETWORK, Conflict, NotFound
from podnet.core.drift import PoolProblems
from podnet.core.enqueue import Enqueuer
from podnet.core.errors import (
    ErrorKind,
    NotLeader,
    PodnetError,
    PoolEmpty,
    ProviderError,
    TerminalError,
    describe,
    one_line,
)
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger
from podnet.core.machines import POD_NETWORK_MACHINE
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE,
    ANNOTATION_MIGRATION_SOURCE_NODE,
    DEFAULT_NETWORK,
    LABEL_MIGRATION_SOURCE_NODE,
    LABEL_NODE,
    LABEL_POD,
    Condition,
    Phase,
    PodInfo,
    PodNetwork,
    set_condition,
)
from podnet.core.objects import READY, is_migration_target, pod_is_terminal, ready_condition
from podnet.core.placement import Placement
from podnet.core.pool import NodePool, Pools
from podnet.core.reconcile.networks import NetworksReconciler
from podnet.core.reconcile.podnetwork_desired import Wants
from podnet.core.reconcile.podnetwork_wording import (
    WAITING_FOR_ADDRESS,
    condition_of,
    pod_ref,
    settled_subject,
    subject_of,
)
from podnet.core.reconcile.result import Result
from podnet.core.records import RecordWriter
from podnet.core.tracing import ATTR_INTERFACE, ATTR_IP, TransitionSpan
from podnet.core.transition import Transitions
from podnet.core.unplug import UnplugGate
from podnet.core.values import evolve
from podnet.hookspecs.types import NodeContext, PodNetworkContext

log = logging.getLogger("podnet.podnetwork")

#: how long to wait before looking again at a pod network waiting for an address
WAIT_RECHECK = 5.0
#: a wait for an address is written on the record (Ready=False, WaitingForAddress) only
#: once it has lasted this long while the node's pool says why it cannot serve (a failed
#: grow, at capacity) ...
WAIT_SAID_AFTER = WAIT_RECHECK
#: ... or this long while the pool grows without trouble: a cold burst on a rate-limited
#: cloud fills its nodes in about ten seconds, and a write per waiting pod network would
#: cost a third more API writes (P8) to say what a healthy pool is doing anyway
WAIT_SAID_AFTER_GROWING = 30.0


class PodNetworkSteps:
    """Takes the parts it uses: the caches it reads, the writer of its records and
    Events, the queue to look at pods and nodes again, the provider gateway and the
    transition runner, which provider and policy serve what, the address ledger, the node
    pools (who waits for an address), what the node side learned (unreadable pools), the
    clock, and the node agents' word on released addresses."""

    def __init__(self, *, caches: Caches, records: RecordWriter, enqueue: Enqueuer,
                 gateway: ProviderGateway, transitions: Transitions, placement: Placement,
                 ledger: Ledger, pools: Pools, problems: PoolProblems, clock: Clock,
                 unplug: UnplugGate, networks: NetworksReconciler | None = None) -> None:
        self.caches = caches
        self.records = records
        self.enqueue = enqueue
        self.gateway = gateway
        self.transitions = transitions
        self.placement = placement
        #: what each pod wants (its networks, their providers and requests)
        self.wants = Wants(caches=caches, records=records, gateway=gateway,
                           placement=placement, clock=clock)
        #: who holds each address: asked, never bypassed
        self.ledger = ledger
        self.pools = pools
        self.problems = problems
        self.clock = clock
        #: whether a released address may go back yet (its node agent's word)
        self.unplug = unplug
        #: the Subnets and IPPools declared as objects (None: a reconciler built without
        #: them serves every provider from its config, as before)
        self.networks = networks
        #: (provider, pod) -> the NetworkPolicies selecting the pod, for a provider that
        #: enforces them itself (set by the engine once its policy reconciler exists)
        self.selecting_policies: Callable[[str, PodInfo | None], tuple[str, ...]] = (
            lambda _provider, _pod: ())
        #: monotonic time each routed record is next verified at (in memory only)
        self._verify_at: dict[str, float] = {}
        #: (pod key, uid) whose record someone else deleted while the pod looked alive:
        #: usually Kubernetes' garbage collector following the pod's own deletion, ahead of
        #: the pod cache. Checked against the API server before a new record is made.
        self._maybe_gone: dict[str, str] = {}  # pod key -> uid
        #: a VM's pods have different keys but may share a record (the new pod takes the
        #: held record back): their passes take the VM's stripe, one at a time
        self._vm_stripes = [threading.Lock() for _ in range(64)]
        #: PodNetwork key -> the address it had, handed out to it first when it
        #: allocates again (its record was deleted while the pod ran, or re-addressed)
        self._prefer: dict[str, str] = {}
        #: PodNetwork key -> the trace its first (waiting) allocate attempt started, while
        #: that wait is not written on the record yet: its next attempt joins it
        self._first_trace: dict[str, str] = {}

    def _run(self, pn: PodNetwork, trigger: str, action: Callable[[TransitionSpan], PodNetwork],
             *, drift: str | None = None, undo: Callable[[BaseException], None] | None = None
             ) -> PodNetwork | None:
        """Fire ``trigger`` on ``pn``, ``action`` writing the record.

        :param drift: why the record changes without its pod asking (a span attribute).
        :param undo: called with the failure, before it is recorded.
        :return: the record ``action`` wrote, or None when the transition failed: why is
            recorded on the record (:meth:`_failed`, which raises what the queue is to
            retry).
        """
        def failed(exc: BaseException, span: TransitionSpan) -> None:
            if undo is not None:
                undo(exc)
            self._failed(pn, trigger, exc, span)

        transitions = self.transitions
        return transitions.run(POD_NETWORK_MACHINE,
                               subject_of(pn, drift, traced=transitions.traced), trigger,
                               action, settled=settled_subject, failed=failed)

    def _write_phase(self, pn: PodNetwork, phase: Phase, span: TransitionSpan, *,
                     reason: str | None = None, message: str = "", **fields: Any) -> PodNetwork:
        """The transition's record write: ``phase``, its Ready condition and ``fields``;
        the span names the address the record now has."""
        return self.records.update_status(POD_NETWORK, self._phase_record(
            pn, phase, span, reason=reason, message=message, **fields))

    def _phase_record(self, pn: PodNetwork, phase: Phase, span: TransitionSpan, *,
                      reason: str | None = None, message: str = "", **fields: Any
                      ) -> PodNetwork:
        """``pn`` in ``phase``, with its Ready condition and ``fields``, not written; the
        span names the address it has."""
        now = self._record_time()
        ready = phase is Phase.ROUTED
        condition = Condition(
            type=READY, status="True" if ready else "False",
            reason=reason or phase.value, message=message, last_transition_time=now,
            observed_generation=pn.metadata.generation,
        )
        status = evolve(
            pn.status, phase=phase, last_transition_time=now,
            conditions=set_condition(pn.status.conditions, condition),
            traceparent=span.traceparent or pn.status.traceparent,
            **fields,
        )
        updated = evolve(pn, status=status)
        span.set(ATTR_IP, updated.status.ip)
        span.set(ATTR_INTERFACE, updated.status.interface)
        return updated

    def _record_time(self) -> datetime:
        """Now, as a record's times read back from the wire: whole seconds. A write whose
        times already read so is taken back from its answer without parsing it again
        (``Caches.as_written``); with the clock's microseconds every status write was
        parsed in full."""
        now = self.clock.now()
        return now.replace(microsecond=0) if now.microsecond else now

    def _failed(self, pn: PodNetwork, trigger: str, exc: BaseException,
                span: TransitionSpan) -> PodNetwork:
        """Record why a transition did not happen; decide whether and when to retry."""
        if not isinstance(exc, Exception):
            raise exc  # KeyboardInterrupt, SystemExit: not ours to swallow
        if isinstance(exc, Conflict):
            raise exc  # stale cache: the queue retries at once with a fresh read
        if isinstance(exc, NotLeader):
            raise exc  # nothing to record: this replica may no longer write at all
        kind = self.gateway.classify(pn.spec.provider, exc)
        if isinstance(exc, PoolEmpty):
            # a wait, not a failure (the transition counted it so): no Warning Event, and
            # the record says so only once the wait lasts
            pool = self.pools.get(pn.spec.provider, pn.spec.node_name)
            self._wait(pn, pool, exc.subnet, queued=self._takes_any(pn), why=str(exc),
                       traceparent=span.traceparent)
            return pn
        reason = "InvalidRequest" if kind is ErrorKind.INVALID else f"{trigger.capitalize()}Failed"
        message = f"{trigger}: {describe(exc)}"
        if self._set_ready(pn, "False", reason, message, span.traceparent):
            self.records.event(pn, reason, message)
        if kind is ErrorKind.INVALID:
            raise TerminalError(message, field=getattr(exc, "field", None))
        if isinstance(exc, PodnetError | ProviderError):
            raise exc
        raise ProviderError(kind, message) from exc

    def _set_ready(self, pn: PodNetwork, status: str, reason: str, message: str,
                   traceparent: str | None = None) -> bool:
        """Write the Ready condition if it changed, and the lifecycle's trace if it has
        none yet (a failed first attempt starts the trace too). :return: whether the
        condition changed."""
        current = ready_condition(pn)
        traceparent = pn.status.traceparent or traceparent
        if current is not None and (current.status, current.reason, current.message) == (
            status, reason, message
        ) and traceparent == pn.status.traceparent:
            return False
        condition = Condition(type=READY, status=status, reason=reason, message=message,
                              last_transition_time=self._record_time(),
                              observed_generation=pn.metadata.generation)
        try:
            self.records.update_status(POD_NETWORK, attrs.evolve(pn, status=attrs.evolve(
                pn.status, conditions=set_condition(pn.status.conditions, condition),
                traceparent=traceparent)))
        except (Conflict, NotFound):
            pass  # the next pass writes it from a fresh read
        return True

    def _put_condition(self, pn: PodNetwork, kind: str, status: str, reason: str,
                       message: str) -> PodNetwork | None:
        """Write condition ``kind`` unless the record says it already (its transition time
        kept while its status stays). :return: the record written, or None when nothing
        changed or the write lost a race (the next pass writes it from a fresh read)."""
        current = condition_of(pn, kind)
        if current is not None and (current.status, current.reason, current.message) == (
                status, reason, message):
            return None
        condition = Condition(type=kind, status=status, reason=reason, message=message,
                              last_transition_time=self._record_time(),
                              observed_generation=pn.metadata.generation)
        try:
            return self.records.update_status(POD_NETWORK, attrs.evolve(pn, status=attrs.evolve(
                pn.status, conditions=set_condition(pn.status.conditions, condition))))
        except (Conflict, NotFound):
            return None

    def _policies_of(self, pn: PodNetwork, pod: PodInfo | None) -> tuple[str, ...]:
        """The NetworkPolicies selecting the pod of a default-network record (policy
        applies to the default network only)."""
        if pn.spec.network != DEFAULT_NETWORK:
            return ()
        return self.selecting_policies(pn.spec.provider, pod)

    def _route(self, pn: PodNetwork, pod: PodInfo | None,
               node: NodeContext | None = None) -> PodNetwork:
        """``node``: the node's context as the allocation just made was told it (else read
        from the caches)."""
        provider = pn.spec.provider
        if node is None:
            node = self.caches.node_context(pn.spec.node_name)
        ctx = PodNetworkContext(pod_network=pn, node=node, pod=pod,
                                network_policies=self._policies_of(pn, pod))

        def route(span: TransitionSpan) -> PodNetwork:
            result = self.gateway.route(provider, ctx)
            if result is None:
                raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} did not route")
            return self._write_phase(pn, Phase.ROUTED, span,
                                     interface=result.interface or pn.status.interface)

        updated = self._run(pn, "route", route)
        if updated is None:
            return pn
        self._verify_at[pn.key] = (self.clock.monotonic()
                                   + self.placement.policy(provider).verify_period)
        self._milestone(updated, "Routed", "routed")
        return updated

    def verify_now(self, pn: PodNetwork) -> None:
        """Verify ``pn`` at its pod's next pass (queued now), not at its period's end."""
        self._verify_at[pn.key] = 0.0
        self.enqueue.pod_of(pn)

    def _maybe_verify(self, pn: PodNetwork, pod: PodInfo) -> Result:
        now = self.clock.monotonic()
        period = self.placement.policy(pn.spec.provider).verify_period
        due = self._verify_at.setdefault(pn.key, now + period)
        if now < due:
            return Result(requeue_after=due - now)
        self._verify_at[pn.key] = now + period
        ctx = PodNetworkContext(pod_network=pn, node=self.caches.node_context(pn.spec.node_name),
                                pod=pod)
        try:
            verdict = self.gateway.verify(pn.spec.provider, ctx)
        except Exception as exc:
            log.info("verify %s failed: %s", pn.key, exc)
            return Result(requeue_after=period)
        if verdict is None or verdict.ok:
            return Result(requeue_after=period)
        pn = self._repair(pn, pod, verdict.reason)
        return Result(requeue_after=period if pn.status.phase is Phase.ROUTED else 0.0)

    def _repair(self, pn: PodNetwork, pod: PodInfo, why: str) -> PodNetwork:
        """Drift: back to allocated, then route writes the dataplane again."""
        repaired = self._unroute(pn, why)
        if repaired is None:
            return pn
        return self._route(repaired, pod)

    def _unroute(self, pn: PodNetwork, why: str) -> PodNetwork | None:
        """A routed record back to Allocated (``repair``), nothing else changed: what
        route wrote for it is no longer to be relied on. :return: the record written, or
        None when that failed (said on the record)."""
        return self._run(pn, "repair", lambda span: self._write_phase(
            pn, Phase.ALLOCATED, span, reason="Repairing", message=why), drift=why)

    def _move(self, pn: PodNetwork, pod: PodInfo, why: str) -> PodNetwork:
        """The record follows ``pod`` (to its node, or from another pod of its VM). Its
        spec and its status are two writes (the status subresource), so their order is the
        rule: a routed record is written Allocated first, where it is (its dataplane
        still there), then it names the pod and its node, then route binds the dataplane
        there and writes Routed. A failure between any two leaves a record that says
        nothing untrue: Allocated where it was, or Allocated on the new node with its
        route to come (its address its own, bound nowhere else); never Routed on a node
        whose dataplane is not written for it. The next pass goes on from there."""
        if pn.status.phase is not Phase.ROUTED:
            return self._adopt_pod(pn, pod)  # route comes after, as for any allocated record
        unrouted = self._unroute(pn, why)
        if unrouted is None:
            return pn
        return self._route(self._adopt_pod(unrouted, pod), pod)

    def _readdress(self, pn: PodNetwork, pod: PodInfo, reason: str, why: str,
                   prefer: str | None) -> PodNetwork:
        """The record's address is not its own any more (another record holds it, or the
        cloud lost it): back to Pending, recorded first, then allocated again, handing it
        ``prefer`` first (the address it held, or the lost one where the cloud gives it
        back). Said on the record, its pod and, for a conflict, the other record."""
        old = pn.status.ip
        conflict = self.ledger.conflict(pn.key)
        readdressed = self._run(pn, "readdress", lambda span: self._write_phase(
            pn, Phase.PENDING, span, reason=reason, message=why, ip=None, ipv6=None,
            address_seal=None, subnet=None, gateway=None, interface=None, prefix_length=None,
            ipv6_prefix_length=None, ipv6_gateway=None, routes=(), mtu=None), drift=why)
        if readdressed is None:
            return pn
        pn = readdressed
        self.ledger.readdressed(pn)
        if prefer is not None:
            self._prefer[pn.key] = prefer
        message = f"PodNetwork {pn.key}: {why}; the pod gets an address again"
        self.records.event(pn, reason, message)
        self.records.event(pod_ref(pod), reason, message)
        if conflict is not None:
            holder = self.caches.pod_networks.get(conflict[1])
            if holder is not None:
                self.records.event(holder, reason, f"PodNetwork {pn.key} recorded "
                                   f"{conflict[0]}, which {holder.key} holds; {pn.key} "
                                   "was re-addressed")
        log.warning("re-addressing %s (was %s): %s", pn.key, old, why)
        return pn

    def _adopt_pod(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """A sticky record serves the pod now running under its name (on whichever node,
        for providers whose addresses are not tied to a node's pool)."""
        node = pod.node_name or pn.spec.node_name
        annotations = {k: v for k, v in pn.metadata.annotations.items()
                       if k not in (ANNOTATION_MIGRATION_SOURCE, ANNOTATION_MIGRATION_SOURCE_NODE)}
        if (is_migration_target(pod) and pn.spec.pod_name != pod.name
                and self.migration_source_runs(pn.metadata.namespace or "", pn.spec.pod_name,
                                               pn.spec.pod_uid)):
            # a live migration: the VM still runs in the source pod, which keeps the
            # address until the move ends (the record names it, so a restart finds it).
            # One KubeVirt says completed is over: the source pod, not ended yet, is
            # named (it takes no address of its own), its node not (no port there)
            annotations[ANNOTATION_MIGRATION_SOURCE] = pn.spec.pod_name
            state = self.caches.migration_of(pod)
            if state is None or not state.moved:
                annotations[ANNOTATION_MIGRATION_SOURCE_NODE] = pn.spec.node_name
        labels = {k: v for k, v in pn.metadata.labels.items()
                  if k != LABEL_MIGRATION_SOURCE_NODE}
        if ANNOTATION_MIGRATION_SOURCE_NODE in annotations:
            # the source node's agent lists the records by it: it keeps the VM's
            # interface there, whatever the record's node says meanwhile
            labels[LABEL_MIGRATION_SOURCE_NODE] = annotations[ANNOTATION_MIGRATION_SOURCE_NODE]
        meta = attrs.evolve(pn.metadata, annotations=annotations,
                            labels={**labels, LABEL_NODE: node, LABEL_POD: pod.name})
        return self.records.update(POD_NETWORK, attrs.evolve(
            pn, metadata=meta, spec=attrs.evolve(pn.spec, pod_uid=pod.uid, node_name=node,
                                                 pod_name=pod.name)))

    def migration_source_runs(self, namespace: str, name: str, uid: str | None = None
                              ) -> PodInfo | None:
        """The pod ``name`` when it still runs (not terminal, not past its deletion; of
        ``uid`` when given): a live migration's source still holding the VM."""
        pod = self.caches.pods.get(f"{namespace}/{name}")
        if pod is None or (uid is not None and pod.uid != uid) or pod_is_terminal(pod):
            return None
        if pod.deletion_timestamp is not None and self.clock.now() >= pod.deletion_timestamp:
            return None
        return pod

    def migration_source(self, pn: PodNetwork) -> PodInfo | None:
        """The running source pod of the live migration ``pn`` is in (or has just
        finished: no source node named), if any."""
        name = pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE)
        if name is None:
            return None
        pod = self.migration_source_runs(pn.metadata.namespace or "", name)
        node = pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE_NODE)
        if pod is None or (node is not None and pod.node_name != node):
            return None
        return pod

    def _milestone(self, pn: PodNetwork, reason: str, done: str) -> None:
        """A Normal Event on the record: the address it got, was routed with, or gave
        back (one Event write per milestone, counted apart from the record writes)."""
        status = pn.status
        if not status.ip and not status.ipv6:
            return
        addresses = " and ".join(a for a in (status.ip, status.ipv6) if a)
        where = f"on node {pn.spec.node_name}"
        if status.interface:
            where += f", interface {status.interface}"
        self.records.event(pn, reason, f"{addresses} {done} {where}", warning=False)

    def _takes_any(self, pn: PodNetwork) -> bool:
        """Whether any idle address of the node's pool serves ``pn``'s request: no static
        address or address pool, no subnet asked for (the provider resolves those, and a
        wait it finds is told by its PoolEmpty), no address of its own to take back."""
        req = pn.spec.requests
        return not (req.ip_address or req.ip_pool or req.subnets or pn.key in self._prefer)

    def _wait(self, pn: PodNetwork, pool: NodePool, subnet: str | None, *, queued: bool,
              why: str, traceparent: str | None = None) -> None:
        """``pn`` waits for an address of ``pool`` (in ``subnet``): a waiter, woken by the
        node's pass once the pool has one for it. New waiters ask that pass for a grow;
        the record says it waits (Ready=False, ``WaitingForAddress``) only once the wait
        has lasted :data:`WAIT_SAID_AFTER` with the pool blocked, or
        :data:`WAIT_SAID_AFTER_GROWING` without, and only when that changes."""
        now = self.clock.monotonic()
        if pool.wait_for_address(pn.key, subnet, now, queued=queued):
            self.enqueue.node(pn.spec.node_name)
        if traceparent and not pn.status.traceparent:
            self._first_trace.setdefault(pn.key, traceparent)
        blocked = pool.last_error
        waited = pool.waited(pn.key, now)
        if waited < (WAIT_SAID_AFTER if blocked else WAIT_SAID_AFTER_GROWING):
            return
        message = one_line(f"waiting for an address: {why}" + (f"; {blocked}" if blocked else ""))
        self._set_ready(pn, "False", WAITING_FOR_ADDRESS, message,
                        pn.status.traceparent or self._first_trace.pop(pn.key, None))
