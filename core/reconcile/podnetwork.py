"""The PodNetwork reconciler: a pod's desired networks against its recorded ones.

Keyed by pod (``namespace/name``): every record of one pod is handled by one worker at a
time, and a record whose pod is gone is still found through the ``pod`` index. Each
pass compares what the pod should have (alive, scheduled, not terminal, its node still
there) with the records, and fires at most one trigger per record per step:

- missing record → create it (Pending), record first;
- pending → ``allocate``; allocated → ``route``; routed → ``verify`` when due
  (→ ``repair`` → ``route`` on drift);
- not wanted any more → ``release``, then ``finish`` (provider release, finalizer off,
  record deleted, address back to the pool) — or, for a sticky record whose pod may come
  back, hold it, and ``reclaim`` when it does.

Every transition writes the record before anything relies on it (``allocate`` and the
``route`` that follows it write once, together: the address is held in the address book
and the pool meanwhile, and the pod relies on nothing before Routed); a failed step leaves
the phase as it was, with a ``Ready=False`` condition saying why and a Warning Event.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack

import attrs

from podnet.core.caches import pod_key_of
from podnet.core.cluster.port import POD, POD_NETWORK, Conflict, NotFound
from podnet.core.convert import UnreadablePodNetwork
from podnet.core.errors import InvalidRequest, one_line
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE,
    ANNOTATION_MIGRATION_SOURCE_NODE,
    FINALIZER,
    LABEL_MIGRATION_SOURCE_NODE,
    LABEL_NODE,
    LABEL_POD,
    LABEL_VM,
    NetworkRequest,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodInfo,
    PodNetwork,
    PodNetworkSpec,
)
from podnet.core.networks.select import NONE as NO_CHOICE
from podnet.core.networks.select import Choice, choose
from podnet.core.objects import is_migration_target, record_finished, vm_of
from podnet.core.reconcile.networks import ADDRESS_EXCLUDED
from podnet.core.reconcile.podnetwork_allocate import AllocatePath, Unwritten
from podnet.core.reconcile.podnetwork_desired import (
    Desired,
    NodeProviders,
    record_name,
    sticky_owner,
)
from podnet.core.reconcile.podnetwork_release import ReleasePath
from podnet.core.reconcile.podnetwork_steps import (
    WAIT_RECHECK,
    WAIT_SAID_AFTER,
    WAIT_SAID_AFTER_GROWING,
)
from podnet.core.reconcile.podnetwork_wording import (
    ANNOTATIONS,
    WAITING_FOR_ADDRESS,
    condition_of,
    frozen_said,
    pod_ref,
    problem_wording,
)
from podnet.core.reconcile.requests import REQUESTS_APPLIED
from podnet.core.reconcile.requests import compare as compare_requests
from podnet.core.reconcile.result import DONE, Result
from podnet.hookspecs.networks import Networks

log = logging.getLogger("podnet.podnetwork")

#: a record's Ready=False reason while no Subnet object selects it (a wait)
NO_SUBNET = "NoSubnet"

#: what others read here (tests, benchmarks)
__all__ = ["WAITING_FOR_ADDRESS", "WAIT_SAID_AFTER", "WAIT_SAID_AFTER_GROWING",
           "PodNetworkReconciler", "record_name"]


class PodNetworkReconciler(AllocatePath, ReleasePath):
    """One pass per pod: its records against what it wants, each moved at most one step
    of the machine. Takes the parts :class:`PodNetworkSteps` names; who holds an address
    it asks the ledger."""

    def reconcile(self, pod_key: str) -> Result:
        records = self.caches.pod_networks.by_index("pod", pod_key)
        vms = {f"{pn.metadata.namespace}/{pn.metadata.labels[LABEL_VM]}"
               for pn in records if LABEL_VM in pn.metadata.labels}
        pod = self.caches.pods.get(pod_key)
        vm = vm_of(pod) if pod is not None else None
        if pod is not None and vm is not None:
            vms.add(f"{pod.namespace}/{vm}")
        if not vms:
            # no stripe to wait for: the pass goes on from what was just read
            return self._reconcile(pod_key, (pod, records))
        with ExitStack() as held:
            for stripe in sorted({hash(v) % len(self._vm_stripes) for v in vms}):
                held.enter_context(self._vm_stripes[stripe])
            # read again: another pod of the VM may have moved its records meanwhile
            return self._reconcile(pod_key)

    def _reconcile(self, pod_key: str,
                   read: tuple[PodInfo | None, list[PodNetwork]] | None = None) -> Result:
        """``read``: the pod and its records as the caller read them a moment before."""
        if self.ledger.any_vanished:
            self._settle_vanished(pod_key)
            read = None  # it may have asked the API server: read the caches again
        pod, records = read if read is not None else (
            self.caches.pods.get(pod_key), self.caches.pod_networks.by_index("pod", pod_key))
        if pod is None or self._maybe_gone.get(pod_key, pod.uid) != pod.uid:
            self._maybe_gone.pop(pod_key, None)  # the cache caught up
        if pod is None:
            self.wants.forget(pod_key)
        records = sorted(records, key=lambda r: r.metadata.name)
        desired = self.desired(pod)
        if pod is not None and desired and pod.deletion_timestamp is not None:
            # a terminating pod (its deletionTimestamp includes the grace): released once
            # that passes (see desired), and nothing may wake the key then — a lost
            # node's kubelet never finishes the pod — so look again at the deadline,
            # whatever this pass ends in (an invalid request is not retried otherwise)
            left = (pod.deletion_timestamp - self.clock.now()).total_seconds()
            self.enqueue.pod(pod_key, after=max(left, 0.0))
        if pod is not None and desired:
            records += self.wants.held_for_vm(pod, records, desired)
        results = []
        covered: set[str] = set()
        for pn in records:
            if isinstance(pn, UnreadablePodNetwork):
                # reported as invalid; its addresses stay owned. Never acted on, and no
                # second record is made beside it (the pod would hold two addresses)
                covered.add(pn.spec.network)
                continue
            if self.wants.wanted(pn, pod, desired):
                covered.add(pn.spec.network)
                assert pod is not None
                results.append(self._advance(pn, pod, desired[pn.spec.network]))
            else:
                handed = self._hand_back(pn, pod)
                if handed is not None:
                    covered.add(pn.spec.network)
                    results.append(handed)
                    continue
                if pod is not None and pn.spec.pod_uid == pod.uid:
                    # this pod's record is going away (deleted, or the pod is leaving):
                    # a new one waits for a pass that sees the record gone and the pod
                    # still here, never the same pass (the pod cache may be behind)
                    covered.add(pn.spec.network)
                    if pn.metadata.deletion_timestamp is not None:
                        self._maybe_gone[pod.key] = pod.uid
                results.append(self._wind_down(pn, pod))
        for network, want in desired.items():
            if network not in covered:
                assert pod is not None
                results.append(self._create(pod, network, want))
        return Result.soonest(results)

    def check_at_start(self, pod_key: str,
                       providers: NodeProviders | None = None) -> float | None:
        """A restart's first look at a pod, in one step with its node's pool: when its
        pass would find nothing to do but wait for the record's verify (one record,
        Routed, its pod's and as the pod wants it, its address its own in the ledger and
        in its node's pool), the verify's due time is set as the pass would set it, and
        the seconds until then returned (the caller queues the pod for then); None when
        the pod needs its whole pass (the caller queues it now). Reads only, but for
        that due time: anything the ledger would settle (a conflict, a lost address) is
        left to the whole pass. ``providers``: shared by the looks at one node's pods
        (its provider asked once, as :meth:`Wants.desired` says)."""
        records = self.caches.pod_networks.by_index("pod", pod_key)
        if len(records) != 1 or self.ledger.any_vanished or pod_key in self._maybe_gone:
            return None
        pn = records[0]
        pod = self.caches.pods.get(pod_key)
        if (pod is None or isinstance(pn, UnreadablePodNetwork)
                or pn.status.phase is not Phase.ROUTED or pod.deletion_timestamp is not None
                or pn.metadata.deletion_timestamp is not None
                or FINALIZER not in pn.metadata.finalizers
                or pn.spec.pod_uid != pod.uid or pn.spec.node_name != pod.node_name
                or LABEL_VM in pn.metadata.labels or vm_of(pod) is not None
                or ANNOTATION_MIGRATION_SOURCE in pn.metadata.annotations
                or ANNOTATION_MIGRATION_SOURCE_NODE in pn.metadata.annotations
                or pn.key in self._verify_at):
            return None
        desired = self.wants.desired(pod, providers)
        want = desired.get(pn.spec.network)
        if (len(desired) != 1 or want is None or not self.wants.wanted(pn, pod, desired)
                or want.invalid is not None or want.warnings
                or condition_of(pn, ANNOTATIONS) is not None
                or pn.spec.requests != want.request or frozen_said(pn)):
            return None
        if self.networks is not None and (self.networks.outside
                                          or len(pn.status.conditions) > 1):
            return None
        ledger = self.ledger
        if (not (pn.status.ip or pn.status.ipv6) or ledger.conflict(pn.key) is not None
                or pn.key in ledger.lost or ledger.pool_disagrees(pn) is not None):
            return None
        # as the pass's verify step: a record's first look only sets when it is due
        period = self.placement.policy(pn.spec.provider).verify_period
        self._verify_at[pn.key] = self.clock.monotonic() + period
        return period

    def _settle_vanished(self, pod_key: str) -> None:
        """Records of this pod that left the cache without podnet removing them. Gone
        from the API server too (its finalizer was taken off by hand): nothing may stay
        owned by a record that is gone, so its addresses go back, after the reuse
        cooldown. Still there (the cache re-listed before seeing it): nothing to do."""
        for pn in self.ledger.vanished_of(pod_key):
            key = pn.key
            if self.caches.pod_networks.get(key) is None:
                try:
                    obj = self.records.cluster.get(POD_NETWORK, pn.metadata.name,
                                                   pn.metadata.namespace)
                    if not record_finished(obj):  # finished: as good as gone
                        continue  # still there: the cache catches up (a later event settles it)
                except NotFound:
                    pass
            if self.caches.pod_networks.get(key) is not None:
                self.ledger.back_in_cache(key)
                continue  # back in the cache: its owner again
            served = pn.spec.provider in self.placement.providers
            cooldown = (self.clock.monotonic() + self.placement.policy(
                pn.spec.provider).reuse_cooldown) if served else 0.0
            freed = self.ledger.settle_vanished(pn, served=served, cooldown_until=cooldown)
            if freed:
                log.warning("PodNetwork %s was removed without its release; %s back in the "
                            "pool of node %s", key, ", ".join(freed), pn.spec.node_name)
                self.enqueue.node(pn.spec.node_name)

    def desired(self, pod: PodInfo | None) -> dict[str, Desired]:
        """The networks a pod should have now; empty when its networks must go."""
        return self.wants.desired(pod)

    def _create(self, pod: PodInfo, network: str, want: Desired) -> Result:
        if pod.deletion_timestamp is not None:
            # a pod being deleted gets no new record: it never wants one again (the rule
            # that leaves a released record of such a pod to the garbage collector,
            # finished and hidden from the caches, under the name a new one would take:
            # creating it would conflict until the pod's object goes). Its deletion's
            # last event wakes the key
            return DONE
        if self._maybe_gone.get(pod.key) == pod.uid:
            # the pod's last record was deleted from outside while the cache still showed
            # the pod: ask the API server whether this pod is still there
            try:
                live = self.records.cluster.get(POD, pod.name, pod.namespace)
            except NotFound:
                return Result(requeue_after=WAIT_RECHECK)  # gone: its deletion event follows
            if live.get("metadata", {}).get("uid") != pod.uid:
                return Result(requeue_after=WAIT_RECHECK)  # replaced by a new pod
            del self._maybe_gone[pod.key]  # alive: only its record was removed
        sticky = want.sticky
        vm = vm_of(pod) if sticky else None
        vm_record = self.caches.pod_networks.get(
            f"{pod.namespace}/{record_name(pod, network, True)}") if vm is not None else None
        if (vm_record is not None
                and vm_record.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE) == pod.name):
            # a live migration's source: its address serves the target now, and comes
            # back if the migration fails (the record's change wakes this pod)
            return DONE
        state = self.caches.migration_of(pod) if vm is not None else None
        if (vm is not None and is_migration_target(pod)
                and not self.placement.providers[want.provider].uses_node_pool
                and (vm_record is not None or self._migration_source_of(pod, vm))
                and not (vm_record is not None and state is not None
                         and state.source_pod is not None
                         and state.source_pod != vm_record.spec.pod_name)):
            # a live migration's target whose VM's record cannot be handed over yet (not
            # made or routed yet, or another migration holds it): it waits for the
            # record's change. Not when KubeVirt names another pod as the source: the
            # record serves a pod of the VM that stays, and this one gets its own
            return DONE
        if vm_record is not None:
            # the VM's record still serves its other pod (a live migration's source) or
            # cannot follow this one to its node: this pod gets an address of its own
            sticky, vm = False, None
        labels = {LABEL_NODE: pod.node_name or "", LABEL_POD: pod.name}
        owners: tuple[OwnerReference, ...]
        if vm is not None:
            # no owner: the VMI is deleted and made anew each time the VM starts, and its
            # garbage collection would take the address with it. podnet releases the
            # record once no pod of the VM wants it (after the sticky hold)
            labels[LABEL_VM] = vm
            owners = ()
        else:
            owner = sticky_owner(pod) if sticky else None
            if owner is None:
                owner = OwnerReference(api_version="v1", kind="Pod", name=pod.name,
                                       uid=pod.uid)
            owners = (owner,)
        node = pod.node_name or ""
        pn = PodNetwork(
            metadata=ObjectMeta(
                name=record_name(pod, network, sticky),
                namespace=pod.namespace,
                labels=labels,
                finalizers=(FINALIZER,),
                owner_references=owners,
            ),
            spec=PodNetworkSpec(
                pod_name=pod.name, pod_uid=pod.uid, node_name=node,
                provider=want.provider, network=network, sticky=sticky,
                requests=want.request,
            ),
        )
        try:
            created = self.records.create(POD_NETWORK, pn)
        except Conflict:
            # exists already (a sticky record, or an earlier pass): next pass sees it
            return Result(requeue_after=0.0)
        except NotFound:
            return DONE  # namespace going away
        return self._advance(created, pod, want)

    def _migration_source_of(self, pod: PodInfo, vm: str) -> bool:
        """Whether another running pod of the VM (not a migration's target) is there:
        the source of the migration ``pod`` is the target of."""
        return any(other.key != pod.key and not is_migration_target(other)
                   and self.migration_source_runs(other.namespace, other.name) is not None
                   for other in self.caches.pods.by_index("vm", f"{pod.namespace}/{vm}"))

    def _hand_back(self, pn: PodNetwork, pod: PodInfo | None) -> Result | None:
        """A live migration's target that no longer wants the VM's record (the migration
        failed or was aborted, its pod went): the source still runs the VM, and gets the
        record back as it is, address and port, nothing released."""
        if (ANNOTATION_MIGRATION_SOURCE_NODE not in pn.metadata.annotations
                or pn.metadata.deletion_timestamp is not None
                or pn.status.phase not in (Phase.ALLOCATED, Phase.ROUTED)):
            return None
        source = self.migration_source(pn)
        if source is None or not self.desired(source).get(pn.spec.network):
            return None
        target = pn.spec.pod_name
        pn = self._move(pn, source, f"pod {source.key} keeps the VM: its migration to "
                        f"pod {target} ended")
        log.info("live migration of VM %s/%s to pod %s ended without it: pod %s keeps %s",
                 pn.metadata.namespace, pn.metadata.labels.get(LABEL_VM), target,
                 source.key, pn.key)
        self.enqueue.pod(source.key)
        return DONE

    def _settle_migration(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """The record of a live migration's target once the migration finished: its
        source stopped, or KubeVirt says it completed. The source's node goes from the
        record (the port is bound to this pod's node alone, the source node's agent lets
        the VM's interface there go); the source's name stays while that pod still runs
        (it ends soon, and takes no address of its own meanwhile)."""
        annotations = pn.metadata.annotations
        if ANNOTATION_MIGRATION_SOURCE not in annotations:
            return pn
        runs = self.migration_source(pn) is not None
        bound_both = ANNOTATION_MIGRATION_SOURCE_NODE in annotations
        if runs and not bound_both:
            return pn  # completed; the source pod has not ended yet
        if runs:
            state = self.caches.migration_of(pod)
            if state is None or not state.moved:
                # the migration runs; a record an earlier version wrote has no label of
                # the source node: its agent would not find it
                node = annotations[ANNOTATION_MIGRATION_SOURCE_NODE]
                if pn.metadata.labels.get(LABEL_MIGRATION_SOURCE_NODE) != node:
                    pn = self.records.update(POD_NETWORK, attrs.evolve(
                        pn, metadata=attrs.evolve(pn.metadata, labels={
                            **pn.metadata.labels, LABEL_MIGRATION_SOURCE_NODE: node})))
                return pn
        source = annotations[ANNOTATION_MIGRATION_SOURCE]
        reroute = bound_both and pn.status.phase is Phase.ROUTED
        if reroute:
            # Allocated first: a routed record without the source node's marks says its
            # port is bound to this node alone, which only the route that follows makes true
            unrouted = self._unroute(pn, f"live migration from pod {source} finished")
            if unrouted is None:
                return pn
            pn = unrouted
        gone = (ANNOTATION_MIGRATION_SOURCE_NODE,) if runs else (
            ANNOTATION_MIGRATION_SOURCE, ANNOTATION_MIGRATION_SOURCE_NODE)
        labels = {k: v for k, v in pn.metadata.labels.items()
                  if k != LABEL_MIGRATION_SOURCE_NODE}
        pn = self.records.update(POD_NETWORK, attrs.evolve(pn, metadata=attrs.evolve(
            pn.metadata, annotations={k: v for k, v in pn.metadata.annotations.items()
                                      if k not in gone},
            labels=labels)))
        return self._route(pn, pod) if reroute else pn

    def _advance(self, pn: PodNetwork, pod: PodInfo, want: Desired) -> Result:
        if FINALIZER not in pn.metadata.finalizers:
            pn = self._restore_finalizer(pn, pod)
        if pn.status.phase is Phase.RELEASING:
            # a held sticky record wanted again: its pod's successor, or the pod itself
            # (its node came back)
            return self._reclaim(pn, pod)
        if pn.spec.pod_uid != pod.uid or pn.spec.node_name != pod.node_name:
            moved = pn.spec.node_name != pod.node_name
            renamed = pn.spec.pod_name != pod.name  # a VM's next pod took its record
            if moved or renamed:
                # an address that follows its pod: the dataplane is rewritten for it
                pn = self._move(pn, pod, f"pod {pod.key} moved to node {pod.node_name}"
                                if moved else f"pod {pod.key} took the record over")
            else:
                pn = self._adopt_pod(pn, pod)
        pn = self._settle_migration(pn, pod)
        if want.invalid is not None:
            return self._invalid(pn, pod, want.invalid)
        pn = self._report_warnings(pn, pod, want)
        if pn.status.phase is Phase.PENDING:
            pn = self._report_unavailable(pn, pod)
        # the same object, most often (the record was made from it): no field compared
        same_requests = pn.spec.requests is want.request or pn.spec.requests == want.request
        if pn.status.phase is Phase.PENDING and not same_requests:
            pn = self.records.update(POD_NETWORK, attrs.evolve(
                pn, spec=attrs.evolve(pn.spec, requests=want.request)))
        elif pn.status.phase is not Phase.PENDING and (not same_requests or frozen_said(pn)):
            pn = self._changed_requests(pn, pod, want.request)
        if pn.status.phase in (Phase.ALLOCATED, Phase.ROUTED):
            problem = self._address_problem(pn)
            if problem is not None:
                pn = self._readdress(pn, pod, *problem)
            elif self.networks is not None and (self.networks.outside
                                                or len(pn.status.conditions) > 1):
                # held outside its Subnet now, or said so before (a second condition)
                pn = self._report_outside(pn, pod)
        phase = pn.status.phase
        if phase is Phase.PENDING:
            choice = self._choose_network(pn, pod)
            if choice.invalid is not None:
                return self._invalid(pn, pod, choice.invalid)
            if choice.wait is not None:
                self._no_subnet(pn, pod, choice.wait)
                return DONE
            allocated = self._allocate(pn, pod, choice)
            if isinstance(allocated, Unwritten):
                pn = self._route_unwritten(allocated, pod)
            elif allocated.status.phase is Phase.PENDING:
                return Result(requeue_after=WAIT_RECHECK)
            else:
                pn = allocated
        if pn.status.phase is Phase.ALLOCATED:
            pn = self._route(pn, pod)
        if pn.status.phase is Phase.ROUTED:
            return self._maybe_verify(pn, pod)
        return DONE

    def _choose_network(self, pn: PodNetwork, pod: PodInfo) -> Choice:
        """The Subnet and IPPool objects the record takes (none while the provider has no
        Subnet objects, or before the namespaces are listed: the allocation waits for
        them anyway)."""
        networks = self.networks
        provider = pn.spec.provider
        if (networks is None or provider not in networks.with_subnets
                or not self.caches.namespaces.has_synced):
            return NO_CHOICE
        ev = networks.evaluation()
        namespace = pn.metadata.namespace or ""
        ns = self._namespace_view(namespace)
        node = self.caches.nodes.get(pn.spec.node_name)
        choice = choose(ev, networks.published.get(provider) or Networks(),
                        provider=provider, namespace=namespace,
                        pod_subnets=pn.spec.requests.subnets, pod_pool=pn.spec.requests.ip_pool,
                        namespace_annotations=ns.annotations, namespace_labels=ns.labels,
                        node=pn.spec.node_name, node_labels=node.labels if node else {})
        if choice.invalid is not None or choice.wait is not None:
            # looked at again when the provider's Subnets change (level-triggered)
            networks.wait_for_change(provider, pod_key_of(pn))
        return choice

    def _no_subnet(self, pn: PodNetwork, pod: PodInfo, why: str) -> None:
        """Nothing selects a Subnet for the record yet: it waits (Ready=False reason
        ``NoSubnet``), which is no failure: no transition, no Warning Event."""
        self._set_ready(pn, "False", NO_SUBNET, one_line(f"pod {pod.key}: {why}"))

    def _report_outside(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """``AddressExcluded`` on a record holding an address its Subnet now excludes or no
        longer contains (True, with a Warning Event on the record and the Pod when that
        changes; False once it does not). The address stays the record's."""
        networks = self.networks
        if networks is None:
            return pn
        outside = networks.outside.get(pn.key)
        current = condition_of(pn, ADDRESS_EXCLUDED)
        if outside is None:
            if current is None or current.status == "False":
                return pn
            return self._put_condition(pn, ADDRESS_EXCLUDED, "False", "Inside",
                                       "the address is inside its Subnet again") or pn
        if outside.why == "excluded":
            reason, where = "Excluded", f"excluded by Subnet {outside.subnet} (excludeIPs)"
        else:
            reason, where = "OutsideSubnet", (f"outside Subnet {outside.subnet}'s cidrBlock "
                                              "(narrowed)")
        message = (f"pod {pod.key} holds {outside.address}, now {where}: it keeps the address "
                   "until released; no new pod gets it")
        written = self._put_condition(pn, ADDRESS_EXCLUDED, "True", reason, message)
        if written is not None:
            self.records.event(written, reason, message)
            self.records.event(pod_ref(pod), reason, message)
        return written or pn

    def _restore_finalizer(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """A live record without ``podnet.io/release`` (taken off by hand): put back, or
        deleting the record would skip the release and strand its address."""
        meta = attrs.evolve(pn.metadata, finalizers=(*pn.metadata.finalizers, FINALIZER))
        pn = self.records.update(POD_NETWORK, attrs.evolve(pn, metadata=meta))
        message = (f"PodNetwork {pn.key} of pod {pod.key} had lost its {FINALIZER} "
                   "finalizer; it is back (the record's release frees its address)")
        self.records.event(pn, "FinalizerRestored", message)
        return pn

    def _address_problem(self, pn: PodNetwork) -> tuple[str, str, str | None] | None:
        """Why the record's address cannot stay its own, as the ledger says: (Event
        reason, message, the address to hand it first), or None."""
        if not pn.status.ip and not pn.status.ipv6:
            # nothing to route (a record reclaimed before it ever had an address, the
            # controller gone before the write that sent it back to Pending)
            return ("NoAddress", f"it is {pn.status.phase.value} without an address", None)
        problem = self.ledger.problem(pn)
        if problem is None:
            return None
        return (*problem_wording(pn, problem), problem.prefer)

    def _changed_requests(self, pn: PodNetwork, pod: PodInfo, wanted: NetworkRequest
                          ) -> PodNetwork:
        """The pod changed its requests after its address was given: dataplane fields
        are adopted and written (``repair`` → ``route``, for a routed record); address
        fields never move the address, which a ``RequestsApplied`` condition says."""
        change = compare_requests(pn.spec.requests, wanted)
        routed = bool(change.applied) and pn.status.phase is Phase.ROUTED
        if routed:
            # Allocated before the spec names what route has not written yet: a failure
            # between the two writes leaves the change to be seen again, not a record
            # Routed with requests its dataplane lacks
            unrouted = self._unroute(pn, f"requests changed: {', '.join(change.applied)}")
            if unrouted is None:
                return pn
            pn = unrouted
        if change.applied:
            pn = self.records.update(POD_NETWORK, attrs.evolve(
                pn, spec=attrs.evolve(pn.spec, requests=change.merged)))
        pn = self._say_frozen(pn, pod, change.frozen)
        return self._route(pn, pod) if routed else pn

    def _say_frozen(self, pn: PodNetwork, pod: PodInfo, frozen: tuple[str, ...]
                    ) -> PodNetwork:
        current = condition_of(pn, REQUESTS_APPLIED)
        if not frozen and current is None:
            return pn
        if frozen:
            status, reason = "False", "AddressFieldsFrozen"
            message = (f"pod {pod.key} changed {', '.join(frozen)}, which chose the address "
                       f"{pn.status.ip}: an allocated address is not moved (recreate the "
                       "pod for a new one)")
        else:
            status, reason, message = "True", "Applied", "the pod's requests are applied"
        written = self._put_condition(pn, REQUESTS_APPLIED, status, reason, message)
        if written is not None and frozen:
            self.records.event(written, reason, message)
            self.records.event(pod_ref(pod), reason, message)
        return written or pn

    def _invalid(self, pn: PodNetwork, pod: PodInfo, exc: InvalidRequest) -> Result:
        """Bad input: say so on the record and the pod, allocate nothing, don't retry."""
        waiting_in = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if waiting_in is not None:
            waiting_in.stop_waiting(pn.key)  # it takes nobody's turn while it cannot take one
        message = one_line(f"pod {pod.key}: {exc}")
        if self._set_ready(pn, "False", "InvalidRequest", message):
            self.records.event(pn, "InvalidRequest", message)
            self.records.event(pod_ref(pod), "InvalidRequest", message)
        return DONE

    def _report_warnings(self, pn: PodNetwork, pod: PodInfo, want: Desired) -> PodNetwork:
        """``AnnotationsRecognized`` on the record: False naming each unknown key while
        there are any (a Warning Event on the record and the Pod when that changes), True
        once they are gone; never written for a pod that never had one."""
        current = condition_of(pn, ANNOTATIONS)
        if want.warnings:
            status, reason = "False", "UnknownAnnotation"
            message = one_line(f"pod {pod.key}: {'; '.join(want.warnings)}", limit=600)
        elif current is None:
            return pn
        else:
            status, reason, message = "True", "Recognized", ""
        written = self._put_condition(pn, ANNOTATIONS, status, reason, message)
        if written is not None and want.warnings:
            self.records.event(written, reason, message)
            self.records.event(pod_ref(pod), reason, message)
        return written or pn

    def _report_unavailable(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """A record waiting on a node whose pool cannot be read (its providerID names an
        instance the cloud does not have, ...): Ready=False saying so, and a Warning Event
        on the record and the Pod when that changes. It goes on waiting: the node's pass
        retries with backoff and wakes it when the pool is there."""
        if not self.placement.providers[pn.spec.provider].uses_node_pool:
            return pn
        problem = self.problems.by_node.get(pn.spec.node_name)
        if problem is None:
            return pn
        message = f"pod {pod.key}: {problem}"
        if self._set_ready(pn, "False", "PoolUnavailable", message):
            self.records.event(pn, "PoolUnavailable", message)
            self.records.event(pod_ref(pod), "PoolUnavailable", message)
            return self.caches.pod_networks.get(pn.key) or pn
        return pn
