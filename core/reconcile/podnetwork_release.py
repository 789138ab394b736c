"""The release path of a pod network: ``release`` (Releasing), a sticky record held while
its pod may come back (``reclaim`` when it does), the wait for the node agent's word that
the address is unplugged, and ``finish``: the provider's release, the record gone, its
addresses given back through the ledger."""

from __future__ import annotations

import attrs

from podnet.core.cluster.port import POD, POD_NETWORK, NotFound
from podnet.core.models import FINALIZER, Phase, PodInfo, PodNetwork, WorkloadInfo
from podnet.core.objects import (
    LABEL_FINISHED,
    is_statefulset,
    pod_is_terminal,
    statefulset_ordinal,
)
from podnet.core.reconcile.podnetwork_steps import PodNetworkSteps
from podnet.core.reconcile.podnetwork_wording import pod_ref, release_reason
from podnet.core.reconcile.result import DONE, Result
from podnet.core.tracing import TransitionSpan
from podnet.hookspecs.types import PodNetworkContext, ReleaseResult


class ReleasePath(PodNetworkSteps):
    """Wind a record down, hold or reclaim a sticky one, finish a release."""

    def _wind_down(self, pn: PodNetwork, pod: PodInfo | None) -> Result:
        if pn.status.phase is not Phase.RELEASING:
            released = self._run(pn, "release", lambda span: self._write_phase(
                pn, Phase.RELEASING, span, reason="Releasing",
                message=release_reason(pn, pod)))
            if released is None:
                return Result(requeue_after=0.0)
            pn = released
        # a new pod under the record's name that does not want it (on another node's
        # pool): the name must be freed now. The record's own pod finished: held
        pod_is_back = (pod is not None and pod.name == pn.spec.pod_name
                       and pod.uid != pn.spec.pod_uid)
        if pn.spec.sticky and pn.metadata.deletion_timestamp is None and not pod_is_back:
            hold = self._hold(pn, pod)
            if hold is not None:
                return hold
        if not self._same_pod_lives(pn, pod):
            wait = self.unplug.wait(pn)
            if wait is not None:
                # waiting, not failing: the node agent's report wakes the key sooner
                return Result(requeue_after=wait)
        return self._finish(pn, pod)

    def _same_pod_lives(self, pn: PodNetwork, pod: PodInfo | None) -> bool:
        """A record deleted by hand while its own pod runs: the pod keeps the interface,
        and its next record takes the same address back (nothing to wait for). Asked of
        the API server, not the cache: the garbage collector deletes the records of a
        deleted pod ahead of the pod cache, and the pod would look alive."""
        if (pod is None or pod.uid != pn.spec.pod_uid or pod_is_terminal(pod)
                or pn.metadata.deletion_timestamp is None):
            return False
        try:
            live = self.records.cluster.get(POD, pod.name, pod.namespace)
        except NotFound:
            return False
        meta = live.get("metadata") or {}
        return meta.get("uid") == pod.uid and not meta.get("deletionTimestamp")

    def _hold(self, pn: PodNetwork, pod: PodInfo | None) -> Result | None:
        """A sticky record keeps its address while its pod may come back."""
        ctx = PodNetworkContext(pod_network=pn, pod=pod, workload=self._workload(pn))
        verdict = self.gateway.hold_address(pn.spec.provider, ctx)
        if verdict is None and workload_gave_up(pn, ctx.workload):
            # core's rule for every provider that leaves it to core: an address nobody
            # will come back for is not parked for the window
            verdict = False
        if verdict is False:
            return None
        since = pn.status.last_transition_time
        window = self.placement.policy(pn.spec.provider).sticky_hold
        if since is None:
            return None
        left = window - (self.clock.now() - since).total_seconds()
        if verdict is True:
            return Result(requeue_after=max(left, 1.0))
        return Result(requeue_after=left) if left > 0 else None

    def _workload(self, pn: PodNetwork) -> WorkloadInfo | None:
        """The record's apps/v1 StatefulSet as the cache has it; ``exists=False`` when a
        synced cache has none of that name; ``None`` when core cannot tell (another owner,
        a look-alike of another API group, the cache not synced yet)."""
        owner = next((o for o in pn.metadata.owner_references if is_statefulset(o)), None)
        if owner is None or not self.caches.statefulsets.has_synced:
            return None
        namespace = pn.metadata.namespace or ""
        found = self.caches.statefulsets.get(f"{namespace}/{owner.name}")
        if found is None:
            return WorkloadInfo(kind=owner.kind, namespace=namespace, name=owner.name,
                                uid=owner.uid, replicas=0, exists=False)
        return found

    def _reclaim(self, pn: PodNetwork, pod: PodInfo) -> Result:
        def reclaim(span: TransitionSpan) -> PodNetwork:
            moved = self._adopt_pod(pn, pod)
            return self._write_phase(moved, Phase.ALLOCATED, span, reason="Reclaimed",
                                     message=f"pod {pod.key} came back")

        reclaimed = self._run(pn, "reclaim", reclaim)
        if reclaimed is None:
            return Result(requeue_after=0.0)
        if reclaimed.status.ip is None and reclaimed.status.ipv6 is None:
            # released before it ever had an address (its allocation was still waiting):
            # nothing to route; it is allocated afresh
            self._readdress(reclaimed, pod, "Reclaimed",
                            f"pod {pod.key} came back; its record held no address", None)
            return Result(requeue_after=0.0)
        pn = self._route(reclaimed, pod)
        return Result(requeue_after=0.0) if pn.status.phase is not Phase.ROUTED else DONE

    def _finish(self, pn: PodNetwork, pod: PodInfo | None) -> Result:
        provider = pn.spec.provider
        ctx = PodNetworkContext(pod_network=pn, node=self.caches.node_context(pn.spec.node_name),
                                pod=pod)
        released: ReleaseResult | None = None

        def finish(_span: TransitionSpan) -> PodNetwork:
            nonlocal released
            released = (self.gateway.release(provider, ctx) if provider in self.placement.providers
                        else ReleaseResult())
            self._remove_record(pn, pod)
            return pn  # as it was last written: the event names its address

        # the cache's delete is ours: the address is given back here
        self.ledger.removing(pn.key)
        finished = self._run(pn, "finish", finish,
                             undo=lambda _exc: self.ledger.removed(pn.key))
        if finished is None:
            return Result(requeue_after=0.0)
        self.ledger.removed(pn.key)
        self._verify_at.pop(pn.key, None)
        self._first_trace.pop(pn.key, None)
        cooldown = self.clock.monotonic() + self.placement.policy(pn.spec.provider).reuse_cooldown
        if self.ledger.give_back(pn, to_pool=released is None or released.return_to_pool,
                                 cooldown_until=cooldown):
            self.enqueue.node(pn.spec.node_name)  # trim to max_idle or serve waiters
        self._milestone(pn, "Released", "released")
        self._successor(pn, pod)
        return DONE

    def _successor(self, pn: PodNetwork, pod: PodInfo | None) -> None:
        """A record deleted (``kubectl delete pn``) while its pod still runs and wants the
        network: the pod's next record takes the same address first (it is in its reuse
        cooldown, out of everyone else's reach), and the pod is told."""
        if (pod is None or pn.metadata.deletion_timestamp is None or pn.spec.pod_uid != pod.uid
                or pn.spec.network not in self.wants.desired(pod) or not pn.status.ip):
            return
        self._prefer[pn.key] = pn.status.ip
        message = (f"PodNetwork {pn.key} was deleted while pod {pod.key} was running; its "
                   f"address {pn.status.ip} was released and a new record is made, which "
                   "takes it back where it can")
        self.records.event(pod_ref(pod), "PodNetworkDeleted", message)

    def _remove_record(self, pn: PodNetwork, pod: PodInfo | None = None) -> None:
        """Finalizer off and record gone; each step may be redone after a crash. Where
        the garbage collector will take the record (:func:`_left_to_owner`), the
        finalizer's removal says the record is finished in the same write, and no
        delete follows."""
        current = pn
        finished = _left_to_owner(pn, pod)
        if FINALIZER in current.metadata.finalizers:
            meta = attrs.evolve(current.metadata, finalizers=tuple(
                f for f in current.metadata.finalizers if f != FINALIZER))
            if finished:
                meta = attrs.evolve(meta, labels={**meta.labels, LABEL_FINISHED: "true"})
            try:
                current = self.records.update(POD_NETWORK, attrs.evolve(current, metadata=meta))
            except NotFound:
                return
        else:
            finished = False  # a record without it (an older podnet's): deleted as before
        if pn.metadata.deletion_timestamp is None and not finished:
            try:
                self.records.delete(POD_NETWORK, current)
            except NotFound:
                pass
        self.caches.pod_networks.forget(pn.key)


def _left_to_owner(pn: PodNetwork, pod: PodInfo | None) -> bool:
    """Whether a released record may be left to the garbage collector, finished: not
    being deleted already (then the finalizer's removal deletes it), not sticky (named
    after the pod alone, a pod coming back under the name would find it), and its own
    pod instance, its owner, known and done for good (terminal or being deleted: it never
    wants the record again, and the record's name carries its uid, so no other pod's
    record is ever named so). The garbage collector takes the record when the pod's
    object goes."""
    if pn.metadata.deletion_timestamp is not None or pn.spec.sticky or pod is None:
        return False
    if pod.uid != pn.spec.pod_uid or not any(
            o.uid == pod.uid for o in pn.metadata.owner_references):
        return False
    return pod.deletion_timestamp is not None or pod_is_terminal(pod)


def workload_gave_up(pn: PodNetwork, workload: WorkloadInfo | None) -> bool:
    """Whether a sticky record's StatefulSet will not bring its pod back: deleted,
    replaced by another of the same name (another uid), or scaled below the pod's
    ordinal. ``False`` when core cannot tell (no workload known, no ordinal)."""
    if workload is None:
        return False
    owner = next((o for o in pn.metadata.owner_references if is_statefulset(o)), None)
    if owner is None or owner.name != workload.name:
        return False
    if not workload.exists or (workload.uid and owner.uid and workload.uid != owner.uid):
        return True
    ordinal = statefulset_ordinal(pn.spec.pod_name)
    return ordinal is not None and not workload.wants_ordinal(ordinal)

