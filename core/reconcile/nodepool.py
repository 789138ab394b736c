"""The NodePool reconciler: one node's idle addresses within bounds, and its interfaces.

Keyed by node name. Before a node's pool serves anything it is rebuilt from the
provider's inventory plus the records (who owns what) plus the last recorded pool (which
idle addresses were podnet's). Then, each pass:

- interfaces whose inhibit window is over ``recover``;
- demand (pod networks waiting) plus ``min_idle`` beyond what is idle → one grow call,
  after the aggregation window, batched, rate-limited; a new interface when none has room
  (ENI machine ``attached`` / ``fail``); quota or exhaustion errors halve the batch and,
  at batch 1, back off; the interface to blame is ``inhibit``-ed;
- idle beyond ``max_idle`` with nobody waiting → one shrink call; an interface left with
  no address is ``dispose``-d (never a primary, trunk or unpooled interface) until the
  cloud confirms it ``gone``; invalid halves of dual-stack pairs are given back by every
  pass's shrink, even while pod networks wait;
- an interface already being disposed is finished off even while pod networks wait, and
  before the grow: until the cloud confirms it ``gone`` it holds one of the node's
  ``max_interfaces`` slots, which the interface made for them may need;
- interfaces the inventory marks ``pooled=False`` hold no pod address: never grown on,
  counted against ``max_interfaces`` or disposed;
- the pool is written to the NodeNetwork's status whenever its membership changed;
- a pass over a pool in the state its last pass changed nothing in (addresses, owners,
  interfaces, the record, the policy, the node's Subnets; nothing waiting on the clock:
  no waiter, cooldown, inhibited or disposing interface, suspect, failed grow) is
  skipped: the timed passes a restart makes every refill period found nothing to do;
  any change, and the node check when due, bring the whole pass back;
- at most every ``node_check_period``, after a successful pass on a synced pool, the
  provider's ``podnet_node_check``: each new finding is a Warning Event on the Node and
  the NodeNetwork, and the ``ProviderCheck`` condition lists what is still found.

The NodeNetwork carries the finalizer ``podnet.io/release`` from its create (a record
without it gets it before anything more is made for the node). A node that left the
cluster (no Node, or one being deleted), or a record naming another machine than the
one running under its name, is passed to :mod:`podnet.core.reconcile.nodeleave`, which
gives back what podnet made for the node (or the old machine) before the record goes. A
record being deleted while its own machine runs keeps recording the pool until the node
leaves.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from random import Random
from typing import Any

import attrs

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.cluster.port import NODE_NETWORK, Conflict, NotFound
from podnet.core.drift import PoolProblems
from podnet.core.enqueue import Enqueuer
from podnet.core.errors import ErrorKind, PodnetError, ProviderError, describe, one_line
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger
from podnet.core.models import (
    FINALIZER,
    Condition,
    InterfaceState,
    InterfaceStatus,
    NodeInfo,
    NodeNetwork,
    NodeNetworkSpec,
    ObjectMeta,
    OwnerReference,
    Phase,
    set_condition,
)
from podnet.core.objects import TAINT_UNINITIALIZED, pod_is_terminal, vm_of
from podnet.core.placement import Placement
from podnet.core.policy import PoolPolicy
from podnet.core.pool import DeferReason, Deferred, GrowPlan, Interface, NodePool, Pools
from podnet.core.poolservice import POOL_READY, PoolService
from podnet.core.ratelimit import CloudWait, deferrable
from podnet.core.reconcile.nodeleave import NodeLeave
from podnet.core.reconcile.nodepool_quiet import QuietPasses
from podnet.core.reconcile.result import DONE, Result
from podnet.core.records import RecordWriter
from podnet.core.transition import Transitions
from podnet.core.validate import check_entries
from podnet.hookspecs.networks import SubnetInfo
from podnet.hookspecs.types import (
    CloudInterface,
    NodeContext,
    NodeFinding,
    PoolEntry,
)

log = logging.getLogger("podnet.nodepool")


#: after a rate-limit answer, wait about this long (with jitter) before the next call
_THROTTLE_WAIT = 0.2
#: a pool whose read is throttled this long in a row is said to be unavailable (on the
#: records waiting for it); shorter, it is a wait like a throttled grow, retried quietly
THROTTLED_READ_SAID_AFTER = 30.0
#: an address a grow brought while pod networks wait for one is recorded at the latest
#: this long after it came, if no record names it by then (the waiters' writes do)
_UNNAMED_GRACE = 1.0
#: a node's first pool write waits this long: the pods placed with it arrive meanwhile,
#: and the grows they ask for are written with it
_FIRST_WRITE_DELAY = 1.0
#: a Node that does not name its machine yet is looked at again this often (its update
#: to spec.providerID queues it at once)
_MACHINE_UNKNOWN_WAIT = 5.0
#: a shrink that kept idle addresses for pods still to ask looks again this soon: a pod
#: deleted before it asked lets its address go
_COMING_RECHECK = 1.0
#: while pod networks wait, what a restart does not need (owners, addresses records name,
#: addresses given back) is written once the pool is quiet, or after this long
_BUSY_WRITE_DELAY = 30.0


class NodePoolReconciler(QuietPasses):
    """Takes the parts it uses: the caches it reads, the writer of its records and
    Events, the queue, the provider gateway and the transition runner, which provider and
    policy serve what, the node pools, the ledger and the pool service (lent to a node's
    leave), where to say which pools cannot be read, the clock and a seeded random source
    (jitter)."""

    def __init__(self, *, caches: Caches, records: RecordWriter, enqueue: Enqueuer,
                 gateway: ProviderGateway, transitions: Transitions, placement: Placement,
                 pools: Pools, ledger: Ledger, service: PoolService, problems: PoolProblems,
                 clock: Clock, random: Random) -> None:
        self.caches = caches
        self.records = records
        self.enqueue = enqueue
        self.gateway = gateway
        self.transitions = transitions
        self.placement = placement
        self.pools = pools
        #: the pools as the cloud and the records have them (shared with the GC)
        self.service = service
        #: node -> why its pool cannot be read (its inventory fails: an instance the cloud
        #: does not have, say), for the pod networks waiting on it to say so
        self.problems = problems
        self.clock = clock
        self.random = random
        #: gives back what podnet made for nodes that left (see its module)
        self.leaving = NodeLeave(caches=caches, records=records, gateway=gateway,
                                 placement=placement, pools=pools, ledger=ledger,
                                 service=service,
                                 clock=clock, random=random, removed=self.node_removed)
        #: per node: when (monotonic) ``podnet_node_check`` is next due, and the findings
        #: of its last check (reported already: not again while they persist)
        self._next_check: dict[str, float] = {}
        self._findings: dict[str, tuple[NodeFinding, ...]] = {}
        #: node -> when (monotonic) its pool's reads began to be throttled, in a row
        self._throttled_since: dict[str, float] = {}
        #: nodes waiting for their Node's spec.providerID (said once each)
        self._machine_unknown: set[str] = set()
        #: node -> why no provider serves it, as said (once per node and reason)
        self._unserved: dict[str, str] = {}
        #: node -> the state its last pass found nothing to do in (``_quiet_state``):
        #: passes on the same state are skipped until it changes or the clock says
        self._quiet: dict[str, tuple[Any, ...]] = {}

    def reconcile(self, name: str) -> Result:
        node = self.caches.nodes.get(name)
        recorded = self.caches.node_networks.get(name)
        if node is None or node.deletion_timestamp is not None:
            # the node left: what podnet made for it goes back before its record does
            self.problems.by_node.pop(name, None)
            self._unserved.pop(name, None)
            return self.leaving.reconcile(name, node)
        if recorded is not None and recorded.spec.instance_id and not node.provider_id:
            # the Node does not say its machine yet (a cloud controller manager sets
            # spec.providerID after the kubelet registers it): whether the record's pool
            # is on it cannot be told, and guessing "another" would give back what its
            # pods use. Nothing is done until it says (its update queues the node)
            if name not in self._machine_unknown:
                log.info("node %s has no spec.providerID yet; its record names %s: "
                         "waiting for it", name, recorded.spec.instance_id)
                self._machine_unknown.add(name)
            return Result(requeue_after=_MACHINE_UNKNOWN_WAIT)
        self._machine_unknown.discard(name)
        if recorded is not None and not self.leaving.same_machine(node, recorded):
            # another machine runs under the record's name (the record being deleted by
            # its old Node's garbage collection, or not yet): the old machine's share goes
            # back first, and nothing is made for the new one before a record names it.
            # A record being deleted while its own machine runs goes on recording the
            # pool: it is let go only when the node leaves (see nodeleave)
            return self.leaving.another_machine(node, recorded)
        self.leaving.returned(name)
        self.service.last_seen[name] = node
        provider = self.placement.provider_for_node(node)
        if provider is None:
            self._say_unserved(node)
        else:
            self._unserved.pop(name, None)
        if provider is None or not self.placement.providers[provider].uses_node_pool:
            self._forget_checks(name)
            self.problems.by_node.pop(name, None)
            return DONE
        pool = self.pools.get(provider, name)
        nn = recorded or self._create_record(node, provider)
        if FINALIZER not in nn.metadata.finalizers:
            if nn.metadata.deletion_timestamp is not None:
                # a record from before the finalizer, being deleted (another finalizer
                # holds it): it takes no new one and may go at any moment, so nothing
                # is made under it; the next record is created once it is gone
                return Result(requeue_after=_MACHINE_UNKNOWN_WAIT)
            # a record from before the finalizer: ownership recorded before anything
            # more is made for the node
            nn = self._add_finalizer(nn)
        policy = self.policy_for(provider, nn, pool)
        quiet = self._quiet_state(node, nn, pool, policy)
        if quiet is not None and self._quiet.get(name) == quiet:
            due = self._timer(name, policy)
            if due > 0:
                # nothing the last pass looked at changed since it found nothing to do:
                # this pass would find the same (a restart's timed passes, mostly)
                return Result(requeue_after=due)
        self._quiet.pop(name, None)
        results: list[Result] = []
        with pool.lock:
            before = self._snapshot(pool)
        if pool.synced and pool.capacity and pool.total() > pool.capacity:
            # more addresses than the node can hold: the bookkeeping is wrong, not the
            # cloud. Drop it and rebuild from the inventory and the records.
            log.warning("node %s: pool holds %d addresses, capacity %d: rebuilding", name,
                        pool.total(), pool.capacity)
            pool.invalidate()
        reading = False
        try:
            if not pool.synced:
                reading = True
                with deferrable(("inventory", name)):
                    self.service.rebuild(node, nn, provider, pool, cooldown=policy.reuse_cooldown)
                reading = False
                self.problems.by_node.pop(name, None)
                policy = self.policy_for(provider, nn, pool)
                # what the rest of this pass starts from
                quiet = self._quiet_state(node, nn, pool, policy)
            self._recover(node, pool, provider)
            if pool.waiting:
                # a disposal under way is finished while pods wait, first: its interface
                # holds one of the max_interfaces slots a new one for them may need
                results.append(self._dispose(node, nn, provider, pool, policy,
                                             started_only=True))
            results.append(self._grow(node, nn, provider, pool, policy))
            if not pool.waiting:
                results.append(self._shrink(node, nn, provider, pool, policy))
                results.append(self._dispose(node, nn, provider, pool, policy))
            else:
                # while pods wait, only what no pod can take goes: invalid halves, and
                # idle addresses the node's Subnets exclude (they count as idle, so the
                # pool would not grow past them)
                results.append(self._shrink(node, nn, provider, pool, policy,
                                            halves_only=True))
        except CloudWait as turn:
            # the read waits for its turn under the rate limit (nothing was called): its
            # slot is kept, and the worker serves other nodes (their grows) meanwhile
            return Result(requeue_after=turn.retry_after, at_slot=True)
        except Exception as exc:
            if reading and self._read_throttled(name, provider, exc):
                # the cloud slows the read down, it does not refuse it: read again soon,
                # and nobody waiting is told (a write each) of what passes in a moment
                return Result(requeue_after=_THROTTLE_WAIT * (1 + self.random.random()))
            problem = describe(exc)
            if reading:
                problem = self._unavailable(node, provider, pool, problem)
            self._report(nn, problem)
            raise
        self._throttled_since.pop(name, None)
        record_result, listed = self._record_pool(nn, pool, self._snapshot(pool) != before)
        results.append(record_result)
        self._report(nn, pool.last_error)
        if pool.synced:
            results.append(self._check(node, nn, provider, policy))
        results.append(Result(requeue_after=policy.refill_period))
        result = Result.soonest(results)
        if listed:
            self._remember_quiet(name, node, pool, quiet, result)
        return result

    def node_removed(self, name: str, provider: str | None = None) -> None:
        """A node left and everything podnet made for it was given back: its pools
        dropped, and each of their providers (and ``provider``, whose record it was)
        told (``podnet_node_removed``) so it drops what it keeps about the node."""
        providers = {p.provider for p in self.pools.all() if p.node == name}
        if provider is not None and provider in self.placement.providers:
            providers.add(provider)
        self.pools.drop_node(name)
        self.service.unwritten.pop(name, None)
        self._throttled_since.pop(name, None)
        self._machine_unknown.discard(name)
        self.service.last_seen.pop(name, None)
        self._forget_checks(name)
        self._quiet.pop(name, None)
        for each in sorted(providers):
            self.gateway.node_removed(each, name)

    def _read_throttled(self, node: str, provider: str, exc: Exception) -> bool:
        """Whether the pool's read failed only by throttling, for less than
        :data:`THROTTLED_READ_SAID_AFTER` in a row (longer, and it is said as any
        failed read is)."""
        if self.gateway.classify(provider, exc) is not ErrorKind.THROTTLED:
            self._throttled_since.pop(node, None)
            return False
        now = self.clock.monotonic()
        since = self._throttled_since.setdefault(node, now)
        if now - since >= THROTTLED_READ_SAID_AFTER:
            return False
        log.debug("node %s: its %s pool's read was throttled; read again: %s", node,
                  provider, exc)
        return True

    def _say_unserved(self, node: NodeInfo) -> None:
        """A node no provider serves: its pods get no network (their records are never
        made). Said once per node and reason, on the Node and in the log, not per pod."""
        reason, message = self.placement.why_unserved(node)
        if node.uninitialized:
            # waiting, not failing: the rules may match the labels its cloud controller
            # manager has yet to set; its removal of the taint brings the node back here
            if self._unserved.get(node.name) != "Uninitialized":
                self._unserved[node.name] = "Uninitialized"
                log.info("node %s: no provider serves it yet; it waits for its cloud "
                         "controller manager to initialize it (taint %s)", node.name,
                         TAINT_UNINITIALIZED)
            return
        if self._unserved.get(node.name) == reason:
            return
        self._unserved[node.name] = reason
        log.warning("%s", message)
        self.records.event({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": node.name, "uid": node.uid}}, reason, message)

    def _unavailable(self, node: NodeInfo, provider: str, pool: NodePool, problem: str) -> str:
        """The pool could not be read: say which node and instance, keep it for the pod
        networks waiting on this node (woken when it changes), and tell the Node."""
        message = (f"node {node.name} (spec.providerID {node.provider_id or 'unset'}): "
                   f"its {provider} pool cannot be read: {problem}")
        if self.problems.by_node.get(node.name) != message:
            self.problems.by_node[node.name] = message
            self.records.event({"apiVersion": "v1", "kind": "Node",
                     "metadata": {"name": node.name, "uid": node.uid}},
                    "PoolUnavailable", message)
            self.enqueue.wake(dict(pool.waiting))
        return message

    # --- the provider's node check ----------------------------------------------------

    def _forget_checks(self, name: str) -> None:
        self._next_check.pop(name, None)
        self._findings.pop(name, None)

    def _check(self, node: NodeInfo, nn: NodeNetwork, provider: str,
               policy: PoolPolicy) -> Result:
        """``podnet_node_check`` when it is due (the first one a period after the node was
        first seen); its new findings reported. A check that fails is logged and tried
        again a period later: it never fails the pass."""
        period = policy.node_check_period
        if period <= 0:
            self._forget_checks(node.name)
            return DONE
        now = self.clock.monotonic()
        due = self._next_check.setdefault(node.name, now + period)
        if now < due:
            return Result(requeue_after=due - now)
        self._next_check[node.name] = now + period
        current = self.caches.node_networks.get(nn.metadata.name) or nn
        try:
            findings = self.gateway.node_check(provider,
                                               self.caches.context(node, current))
        except Exception as exc:
            log.warning("node %s: podnet_node_check of %s failed (tried again in %gs): %s",
                        node.name, provider, period, exc)
            return Result(requeue_after=period)
        if node.name in self._findings:
            previous = set(self._findings[node.name])
        else:  # the first check since start: the record says what was reported before
            previous = set(_reported_before(current, findings))
        self._findings[node.name] = findings
        involved = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": node.name, "uid": node.uid}}
        for finding in findings:
            if finding in previous:
                continue  # reported already, and still there
            log.warning("node %s: %s: %s", node.name, finding.reason, finding.message)
            self.records.event(involved, finding.reason, finding.message)
            self.records.event(current, finding.reason, finding.message)
        self._report_check(current, findings)
        return Result(requeue_after=period)

    def _report_check(self, nn: NodeNetwork, findings: tuple[NodeFinding, ...]) -> None:
        """``ProviderCheck`` on the NodeNetwork: False with the findings' messages, True
        once they cleared. Written only when it changes (never while all is well from the
        start)."""
        current = self.caches.node_networks.get(nn.metadata.name) or nn
        old = next((c for c in current.status.conditions if c.type == "ProviderCheck"), None)
        if findings:
            reasons = {f.reason for f in findings}
            status = "False"
            reason = reasons.pop() if len(reasons) == 1 else "ProviderFindings"
            message = "; ".join(f.message for f in findings)
        else:
            status, reason, message = "True", "NoFindings", ""
        if old is None and not findings:
            return
        if old is not None and (old.status, old.reason, old.message) == (status, reason,
                                                                         message):
            return
        condition = Condition(type="ProviderCheck", status=status, reason=reason,
                              message=message, last_transition_time=self.clock.now(),
                              observed_generation=current.metadata.generation)
        try:
            self.records.update_status(NODE_NETWORK, attrs.evolve(current, status=attrs.evolve(
                current.status, conditions=set_condition(current.status.conditions, condition))))
        except (Conflict, NotFound):
            pass  # the next check compares with the record again, and writes it

    def _report(self, nn: NodeNetwork, problem: str | None) -> None:
        """``PoolReady`` on the NodeNetwork says whether the pool can serve, and why not;
        a new problem is also an Event. Written only when it changes."""
        current = self.caches.node_networks.get(nn.metadata.name) or nn
        old = next((c for c in current.status.conditions if c.type == POOL_READY), None)
        status, reason = ("False", "PoolError") if problem else ("True", "Ready")
        message = problem or ""
        if old is not None and (old.status, old.message) == (status, message):
            return
        if old is None and not problem and nn.metadata.name in self.service.unwritten:
            return  # the pool's first write, coalesced, says it
        # healthy and never said (a record from before PoolReady was written when healthy,
        # its pool unchanged since): said once, so waiting for the condition ends
        condition = Condition(type=POOL_READY, status=status, reason=reason,
                              message=message, last_transition_time=self.clock.now(),
                              observed_generation=current.metadata.generation)
        try:
            self.records.update_status(NODE_NETWORK, attrs.evolve(current, status=attrs.evolve(
                current.status, conditions=set_condition(current.status.conditions, condition))))
        except (Conflict, NotFound):
            return
        if problem:
            log.warning("node %s: its pool cannot serve: %s", nn.metadata.name, problem)
            self.records.event(current, "PoolError", f"node {nn.metadata.name}: {problem}")
        else:
            log.info("node %s: its pool serves again", nn.metadata.name)

    def policy_for(self, provider: str, nn: NodeNetwork | None, pool: NodePool) -> PoolPolicy:
        policy = self.placement.policy(provider)
        if nn is not None:
            bounds = nn.spec.pool
            if bounds.min_idle is not None or bounds.max_idle is not None:
                max_idle = bounds.max_idle if bounds.max_idle is not None else policy.max_idle
                min_idle = bounds.min_idle if bounds.min_idle is not None else policy.min_idle
                policy = attrs.evolve(policy, min_idle=min(min_idle, max_idle), max_idle=max_idle)
        return policy.clamp(pool.capacity) if pool.synced else policy

    # --- records ----------------------------------------------------------------------

    def _create_record(self, node: NodeInfo, provider: str) -> NodeNetwork:
        nn = NodeNetwork(
            metadata=ObjectMeta(
                name=node.name,
                owner_references=(OwnerReference(
                    api_version="v1", kind="Node", name=node.name, uid=node.uid),),
            ),
            spec=NodeNetworkSpec(provider=provider, instance_id=node.provider_id),
        )
        # the finalizer from the first write: nothing is made for the node before the
        # record says podnet must give it back
        nn = attrs.evolve(nn, metadata=attrs.evolve(nn.metadata, finalizers=(FINALIZER,)))
        try:
            return self.records.create(NODE_NETWORK, nn)
        except Conflict:
            found = self.caches.node_networks.get(node.name)
            if found is None:
                raise
            return found

    def _add_finalizer(self, nn: NodeNetwork) -> NodeNetwork:
        meta = attrs.evolve(nn.metadata, finalizers=(*nn.metadata.finalizers, FINALIZER))
        return self.records.update(NODE_NETWORK, attrs.evolve(nn, metadata=meta))

    def _snapshot(self, pool: NodePool) -> tuple[Any, ...]:
        return (
            tuple(sorted((a.address, a.interface, a.ipv6 or "", a.half)
                         for a in pool.addresses.values())),
            tuple(sorted((i.id, i.state, i.inhibited_until) for i in pool.interfaces.values())),
        )

    def _record_pool(self, nn: NodeNetwork, pool: NodePool,
                     changed: bool) -> tuple[Result, bool]:
        """The pool written to the record at the end of a pass, or later: what a restart
        needs of it (an address podnet added that no record names, an interface in any
        state but ready) at once, or within :data:`_UNNAMED_GRACE` while pod networks wait
        for those addresses; the rest once nobody waits, or after
        :data:`_BUSY_WRITE_DELAY` (a burst's grows become one write). The record lists no
        owners (the PodNetworks name their addresses): an allocation or a release writes
        nothing here; the owners a record written by an older podnet lists go with the
        next write. :return: when to look again, and whether the record listed the pool
        as it is already (nothing written)."""
        name = nn.metadata.name
        current = self.caches.node_networks.get(name) or nn
        interfaces = self.service.status(pool)
        if (current.status.last_inventory_sync is not None
                and current.status.interfaces == interfaces):
            self.service.unwritten.pop(name, None)
            return DONE, True
        if (current.status.last_inventory_sync is not None and name not in self.service.unwritten
                and _without_owners(current.status.interfaces) == _without_owners(interfaces)):
            if changed:
                self.service.write(nn, pool, interfaces)
            return DONE, False
        now = self.clock.monotonic()
        since = self.service.unwritten.setdefault(name, now)
        if _restart_states(current.status.interfaces) != _restart_states(interfaces):
            self.service.write(nn, pool, interfaces)
            return DONE, False
        unnamed = self._unnamed(current, pool)
        if unnamed is not None:
            if not pool.waiting or now >= unnamed + _UNNAMED_GRACE:
                self.service.write(nn, pool, interfaces)
                return DONE, False
            return Result(requeue_after=unnamed + _UNNAMED_GRACE - now), False
        if current.status.last_inventory_sync is None and now < since + _FIRST_WRITE_DELAY:
            return Result(requeue_after=since + _FIRST_WRITE_DELAY - now), False
        if pool.waiting and now < since + _BUSY_WRITE_DELAY:
            return Result(requeue_after=since + _BUSY_WRITE_DELAY - now), False
        self.service.write(nn, pool, interfaces)
        return DONE, False

    def _unnamed(self, current: NodeNetwork, pool: NodePool) -> float | None:
        """When the oldest address of the pool that neither the record lists nor a
        PodNetwork names joined it; None when there is none."""
        listed = {a for itf in current.status.interfaces for ip in itf.ips
                  for a in (ip.address, ip.ipv6) if a}
        oldest: float | None = None
        records = self.caches.pod_networks
        with pool.lock:
            for entry in pool.addresses.values():
                record = records.get(entry.owner) if entry.owner else None
                named = (record.status.ip, record.status.ipv6) if record is not None else ()
                if all(a in listed or a in named for a in (entry.address, entry.ipv6) if a):
                    continue
                oldest = entry.added_at if oldest is None else min(oldest, entry.added_at)
        return oldest

    # --- rebuild ----------------------------------------------------------------------

    # --- interfaces: the ENI machine --------------------------------------------------

    def _recover(self, node: NodeInfo, pool: NodePool, provider: str) -> None:
        for itf in pool.recoverable(self.clock.monotonic()):
            self.service.eni(node, provider, itf, "recover")
            pool.recovered(itf)

    def _inhibit(self, node: NodeInfo, pool: NodePool, provider: str, itf: Interface,
                 seconds: float, reason: str) -> None:
        self.service.eni(node, provider, itf, "inhibit")
        pool.inhibited(itf, self.clock.monotonic() + seconds, reason)

    # --- grow -------------------------------------------------------------------------

    def _grow(self, node: NodeInfo, nn: NodeNetwork, provider: str, pool: NodePool,
              policy: PoolPolicy) -> Result:
        now = self.clock.monotonic()
        # demand is what still waits: a record deleted or allocated meanwhile asks nothing
        for key in list(pool.waiting):
            waiter = self.caches.pod_networks.get(key)
            if waiter is None or waiter.status.phase is not Phase.PENDING:
                pool.stop_waiting(key)
        info = self.placement.providers[provider]
        coming = self._coming(node, pool) if info.manages_interfaces and pool.waiting else 0
        plan = pool.plan_grow(policy, now, manages_interfaces=info.manages_interfaces,
                              coming=coming)
        if isinstance(plan, Deferred):
            if plan.reason in (DeferReason.AT_CAPACITY, DeferReason.NOTHING_TO_DO):
                pool.cannot_grow(plan.problem)  # None: a limit said before is over
            if plan.waiting:
                self.enqueue.wake(plan.waiting)
            return _deferred(plan)
        wait = self.gateway.admit(provider)
        if wait:
            return Result(requeue_after=wait)
        if plan.no_interface is not None:
            pool.cannot_grow(plan.no_interface)
            return Result(requeue_after=policy.refill_period)
        itf, count, subnet = plan.interface, plan.count, plan.subnet
        created: CloudInterface | None = None
        try:
            if plan.new_interface:
                created, entries = self._new_interface(node, nn, provider, pool, plan)
            else:
                ctx = self.caches.context(node, nn)
                with deferrable(("grow", node.name)):
                    entries = self.gateway.pool_grow(
                        provider, ctx,
                        itf.cloud(pool.ipv4_on(itf.id), pool.ipv6_on(itf.id)) if itf else None,
                        count, subnet)
        except CloudWait as turn:
            # nothing was called: planned again at its slot, with what waits by then
            return Result(requeue_after=turn.retry_after, at_slot=True)
        except Exception as exc:
            return self._grow_failed(node, provider, pool, policy, plan, exc, nn)
        pool.grew(entries, now, created)
        self.enqueue.wake(plan.waiting)
        return Result(requeue_after=0.0) if len(entries) < plan.need else DONE

    def _new_interface(self, node: NodeInfo, nn: NodeNetwork, provider: str, pool: NodePool,
                       plan: GrowPlan) -> tuple[CloudInterface, list[PoolEntry]]:
        """The interface ``plan`` asks for, made: it and its addresses."""
        subnet, count = plan.subnet, plan.count
        itf = Interface(id=f"pending-{len(pool.interfaces)}", state=InterfaceState.INITIALIZING,
                        subnet=subnet)
        ctx = self.caches.context(node, nn)

        def create() -> CloudInterface:
            created = self.gateway.interface_create(provider, ctx, subnet, count)
            if created is None:
                raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} made no interface")
            return created

        try:
            created = self.service.eni(node, provider, itf, "attached", create)
        except Exception:
            try:
                self.service.eni(node, provider, itf, "fail")
            except PodnetError:
                pass
            pool.invalidate()  # a half-made interface shows up in the next inventory
            raise
        entries = check_entries(provider, "interface_create", _entries_of(pool, created))
        return created, entries

    def _grow_failed(self, node: NodeInfo, provider: str, pool: NodePool, policy: PoolPolicy,
                     plan: GrowPlan, exc: Exception, nn: NodeNetwork) -> Result:
        kind = self.gateway.classify(provider, exc)
        itf = plan.interface
        subject = getattr(exc, "subject", None) or plan.subnet or (itf.subnet if itf else None)
        where = f" ({subject})" if subject else ""
        problem = one_line(f"growing the pool failed: {kind.value}{where}: {exc}")
        retry = pool.grow_failed(plan, kind, problem, policy, self.clock.monotonic(),
                                 subnets=len(nn.spec.subnets))
        if retry.inhibit is not None:
            self._inhibit(node, pool, provider, retry.inhibit, retry.inhibit_for, problem)
        if retry.after is None:
            return Result(requeue_after=_THROTTLE_WAIT * (1 + self.random.random()))
        if retry.backed_off:
            self.enqueue.wake(dict(pool.waiting))  # waiting pod networks record the reason
        return Result(requeue_after=retry.after)

    def _coming(self, node: NodeInfo, pool: NodePool) -> int:
        """How many of the node's pods will ask this pool for an address and have no
        record yet: running, not host-network, not deleting, asking for nothing in
        particular (no podnet or Multus annotation), no VM's pod (its address may be
        held for it). A guess that only sizes a grow already due, and what a shrink
        keeps: pods that never ask cost idle addresses, never one given twice."""
        if self.placement.provider_for_node(node) != pool.provider:
            return 0
        recorded = {(pn.metadata.namespace, pn.spec.pod_name)
                    for pn in self.caches.pod_networks.by_index("node", node.name)}
        return sum(1 for pod in self.caches.pods.by_index("node", node.name)
                   if not (pod.host_network or pod.annotations
                           or pod.deletion_timestamp is not None or pod_is_terminal(pod)
                           or vm_of(pod) is not None
                           or (pod.namespace, pod.name) in recorded))

    # --- shrink and dispose -----------------------------------------------------------

    def _shrink(self, node: NodeInfo, nn: NodeNetwork, provider: str, pool: NodePool,
                policy: PoolPolicy, halves_only: bool = False) -> Result:
        """Idle addresses beyond ``max_idle`` go back to the cloud, and every invalid half
        of a dual-stack pair with them (``halves_only``: just those)."""
        now = self.clock.monotonic()
        subnets = self.caches.context(node, nn).subnets
        unusable = None if not subnets else functools.partial(_excluded_by, subnets)
        coming = 0
        if not halves_only and self.placement.providers[provider].manages_interfaces:
            with pool.lock:
                crowded = pool.idle_count() > policy.max_idle
            coming = self._coming(node, pool) if crowded else 0
        # one hold of the lock from the plan until its victims are out of the pool
        with pool.lock:
            plan = pool.plan_shrink(policy, now, halves_only, unusable, coming)
            if isinstance(plan, Deferred):
                if coming and plan.reason is DeferReason.NOTHING_TO_DO:
                    # kept for pods still to ask: looked at again soon, in case they
                    # never do (deleted first), and never a quiet pass meanwhile
                    return Result(requeue_after=_COMING_RECHECK)
                return _deferred(plan)
            wait = self.gateway.admit(provider)
            if wait:
                return Result(requeue_after=wait)
            entries = pool.shrinking(plan)
        try:
            gone = self.gateway.pool_shrink(provider, self.caches.context(node, nn),
                                            entries)
        except Exception as exc:
            kind = self.gateway.classify(provider, exc)
            # the cloud may have removed them (a lost answer; or, throttled, an SDK's
            # retry after a first attempt did the work): they stay out of the pool until
            # the next inventory says which are still there
            pool.invalidate()
            if kind is ErrorKind.THROTTLED:
                return Result(requeue_after=_THROTTLE_WAIT * (1 + self.random.random()))
            raise
        pool.shrunk(plan, gone or ())
        return Result(requeue_after=0.0) if plan.leaves_excess else DONE

    def _dispose(self, node: NodeInfo, nn: NodeNetwork, provider: str, pool: NodePool,
                 policy: PoolPolicy, started_only: bool = False) -> Result:
        """An interface with no address left goes (never primary, never trunk);
        ``started_only``: just those already disposing (none newly given up)."""
        if not self.placement.providers[provider].manages_interfaces:
            return DONE
        done = 0
        for itf in pool.disposable():
            if started_only and itf.state is not InterfaceState.DISPOSING:
                continue
            if done >= policy.max_interface_ops:
                # a node's operations run one at a time (its key never runs twice at once);
                # this caps how many one pass makes before other nodes get a turn
                return Result(requeue_after=0.0)
            if itf.state in (InterfaceState.READY, InterfaceState.INHIBITED):
                self.service.eni(node, provider, itf, "dispose")
            if itf.state is not InterfaceState.DISPOSING:
                continue
            # recorded before the provider acts (no write when it is already): a crash
            # between its steps (detached, not yet deleted) leaves an interface the node
            # no longer lists, which the next run must still finish off
            self.service.write(nn, pool)
            ctx = self.caches.context(node, nn)
            wait = self.gateway.admit(provider)
            if wait:
                return Result(requeue_after=wait)

            def dispose(itf: Interface = itf, ctx: NodeContext = ctx) -> None:
                done = self.gateway.interface_dispose(provider, ctx, itf.cloud())
                if not done:
                    raise ProviderError(ErrorKind.TRANSIENT, f"{itf.id} is still detaching")

            try:
                self.service.eni(node, provider, itf, "gone", dispose)
            except Exception:
                return Result(requeue_after=policy.refill_period)
            pool.interface_gone(itf.id)
            done += 1
        return DONE


def _deferred(plan: Deferred) -> Result:
    return DONE if plan.retry_after is None else Result(requeue_after=plan.retry_after)


def _entries_of(pool: NodePool, created: CloudInterface) -> list[PoolEntry]:
    """A new interface's addresses; on a dual-stack node paired in order, and what is
    left without a partner is an invalid half (given back by the next shrink)."""
    if not pool.dual_stack:
        return [PoolEntry(ip, created.id, created.subnet) for ip in created.ips]
    out = [PoolEntry(ip, created.id, created.subnet, ip6)
           for ip, ip6 in zip(created.ips, created.ipv6, strict=False)]
    n = len(out)
    out += [PoolEntry(ip, created.id, created.subnet)
            for ip in (*created.ips[n:], *created.ipv6[n:])]
    return out


def _reported_before(nn: NodeNetwork, findings: tuple[NodeFinding, ...]
                     ) -> tuple[NodeFinding, ...]:
    """The findings a ``ProviderCheck`` condition written by an earlier run already names
    (reported then: a restart does not repeat their Events)."""
    old = next((c for c in nn.status.conditions if c.type == "ProviderCheck"), None)
    if old is None or old.status != "False":
        return ()
    return tuple(f for f in findings if f.message and f.message in old.message)


def _without_owners(interfaces: tuple[InterfaceStatus, ...]) -> tuple[InterfaceStatus, ...]:
    return tuple(attrs.evolve(itf, ips=tuple(attrs.evolve(ip, owner=None) for ip in itf.ips))
                 for itf in interfaces)


def _restart_states(interfaces: tuple[InterfaceStatus, ...]
                    ) -> set[tuple[str, InterfaceState, Any]]:
    """What a restart takes from the record about interfaces (``NodePool.resume``): the
    state of each that is not plainly ready (inhibited, being made or disposed)."""
    return {(itf.id, itf.state, itf.inhibited_until) for itf in interfaces
            if itf.state is not InterfaceState.READY or itf.inhibited_until is not None}


def _excluded_by(subnets: Sequence[SubnetInfo], address: str) -> bool:
    """Whether a Subnet of the node holding ``address`` keeps it from every pod (one of
    its excludeIPs, or its gateway)."""
    return any(s.contains(address) and (address in s.gateways or s.excludes(address))
               for s in subnets)
