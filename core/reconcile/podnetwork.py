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

import functools
import hashlib
import ipaddress
import logging
import threading
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from types import MappingProxyType
from typing import Any, TypeVar

import attrs

from podnet.core.annotations import (
    check_unknown_keys,
    parse_network_request,
    parse_networks,
)
from podnet.core.caches import Caches, pod_key_of
from podnet.core.clock import Clock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK, Conflict, NotFound
from podnet.core.convert import UnreadablePodNetwork
from podnet.core.drift import PoolProblems
from podnet.core.enqueue import Enqueuer
from podnet.core.errors import (
    ErrorKind,
    InvalidRequest,
    NotLeader,
    PodnetError,
    PoolEmpty,
    ProviderError,
    TerminalError,
    describe,
    one_line,
)
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Claim, Ledger, Problem, ProblemKind
from podnet.core.machines import POD_NETWORK_MACHINE, state_of
from podnet.core.models import (
    DEFAULT_NETWORK,
    FINALIZER,
    LABEL_NODE,
    LABEL_POD,
    LABEL_VM,
    Condition,
    NetworkRequest,
    NodeInfo,
    ObjectMeta,
    OwnerReference,
    Phase,
    PodInfo,
    PodNetwork,
    PodNetworkSpec,
    Route,
    WorkloadInfo,
    set_condition,
)
from podnet.core.objects import (
    is_statefulset,
    namespace_annotations,
    pod_is_sticky,
    pod_is_terminal,
    statefulset_ordinal,
    vm_of,
)
from podnet.core.placement import Placement
from podnet.core.pool import NodePool, Pools, Reservation
from podnet.core.reconcile.requests import REQUESTS_APPLIED
from podnet.core.reconcile.requests import compare as compare_requests
from podnet.core.reconcile.result import DONE, Result
from podnet.core.records import RecordWriter
from podnet.core.resolve import resolve
from podnet.core.tracing import (
    ATTR_INTERFACE,
    ATTR_IP,
    ATTR_NAMESPACE,
    ATTR_NODE,
    ATTR_POD,
    TransitionSpan,
)
from podnet.core.transition import Subject, Transitions
from podnet.core.unplug import UnplugGate
from podnet.core.values import evolve
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    PodNetworkContext,
    ReleaseResult,
)

log = logging.getLogger("podnet.podnetwork")

T = TypeVar("T")

READY = "Ready"
#: False while a pod has ``podnet.io/`` annotations podnet does not know (ignored)
ANNOTATIONS = "AnnotationsRecognized"
#: span attribute: why a record changes without its pod asking (repair, readdress)
ATTR_DRIFT = "podnet.drift"
#: how long to wait before looking again at a pod network waiting for an address
_WAIT_RECHECK = 5.0
#: a wait for an address is written on the record (Ready=False, WaitingForAddress) only
#: once it has lasted this long while the node's pool says why it cannot serve (a failed
#: grow, at capacity) ...
WAIT_SAID_AFTER = _WAIT_RECHECK
#: ... or this long while the pool grows without trouble: a cold burst on a rate-limited
#: cloud fills its nodes in about ten seconds, and a write per waiting pod network would
#: cost a third more API writes (P8) to say what a healthy pool is doing anyway
WAIT_SAID_AFTER_GROWING = 30.0
#: the Ready reason of a pod network waiting for its node's pool
WAITING_FOR_ADDRESS = "WaitingForAddress"
#: what a pod without ``podnet.io/`` annotations asks for
_NO_REQUEST = parse_network_request({})


@attrs.frozen
class Desired:
    provider: str
    request: NetworkRequest
    sticky: bool
    #: the problem with the pod's annotations, if any: recorded, nothing allocated
    invalid: InvalidRequest | None = None
    #: what is wrong with the annotations but harmless (unknown keys): said, not blocking
    warnings: tuple[str, ...] = ()


def record_name(pod: PodInfo, network: str, sticky: bool) -> str:
    """Sticky records are named after the pod alone, so a pod returning under the same
    name finds its address (a VM's pods after their VirtualMachineInstance, with a
    ``.vm`` suffix: each start names its pod anew); others carry the pod's uid, so a new
    pod under an old name never inherits a record by accident."""
    vm = vm_of(pod) if sticky else None
    if vm is not None:
        base = f"{vm}.{network}.vm"
    else:
        base = f"{pod.name}.{network}" if sticky else f"{pod.name}.{network}.{pod.uid[:8]}"
    if len(base) <= 253:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    # a DNS-1123 subdomain's labels end alphanumeric: trim what the cut left dangling
    return f"{base[:242].rstrip('.-')}.{digest}"


@attrs.frozen
class _Unwritten:
    """An allocation made and not written yet: the record as the Routed write (or a
    failed route's condition) writes it, and what follows once a write carries it."""

    record: PodNetwork
    #: a write naming the allocation landed (the record as written)
    recorded: Callable[[PodNetwork], None]
    #: no write carried it: (the failure, whether a write was sent) undoes the claims
    not_recorded: Callable[[BaseException, bool], None]


def ready_condition(pn: PodNetwork) -> Condition | None:
    for c in pn.status.conditions:
        if c.type == READY:
            return c
    return None


class PodNetworkReconciler:
    """Takes the parts it uses: the caches it reads, the writer of its records and
    Events, the queue to look at pods and nodes again, the provider gateway and the
    transition runner, which provider and policy serve what, the address ledger, the node
    pools (who waits for an address), what the node side learned (unreadable pools), and
    the clock."""

    def __init__(self, *, caches: Caches, records: RecordWriter, enqueue: Enqueuer,
                 gateway: ProviderGateway, transitions: Transitions, placement: Placement,
                 ledger: Ledger, pools: Pools, problems: PoolProblems, clock: Clock,
                 unplug: UnplugGate) -> None:
        self.caches = caches
        self.records = records
        self.enqueue = enqueue
        self.gateway = gateway
        self.transitions = transitions
        self.placement = placement
        #: who holds each address: asked, never bypassed
        self.ledger = ledger
        self.owned = ledger.owned
        self.pools = pools
        self.problems = problems
        self.clock = clock
        #: whether a released address may go back yet (its node agent's word)
        self.unplug = unplug
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
        #: pod key -> what was last said on a pod that has no record to carry it (its
        #: node does not exist): said once per pod and reason, again when it changes
        self._said: dict[str, str] = {}
        #: PodNetwork key -> the trace its first (waiting) allocate attempt started, while
        #: that wait is not written on the record yet: its next attempt joins it
        self._first_trace: dict[str, str] = {}

    # --- the pass ---------------------------------------------------------------------

    def reconcile(self, pod_key: str) -> Result:
        vms = {f"{pn.metadata.namespace}/{pn.metadata.labels[LABEL_VM]}"
               for pn in self.caches.pod_networks.by_index("pod", pod_key)
               if LABEL_VM in pn.metadata.labels}
        pod = self.caches.pods.get(pod_key)
        vm = vm_of(pod) if pod is not None else None
        if pod is not None and vm is not None:
            vms.add(f"{pod.namespace}/{vm}")
        if not vms:
            return self._reconcile(pod_key)
        with ExitStack() as held:
            for stripe in sorted({hash(v) % len(self._vm_stripes) for v in vms}):
                held.enter_context(self._vm_stripes[stripe])
            return self._reconcile(pod_key)

    def _reconcile(self, pod_key: str) -> Result:
        if self.owned.vanished:
            self._settle_vanished(pod_key)
        pod = self.caches.pods.get(pod_key)
        if pod is None or self._maybe_gone.get(pod_key, pod.uid) != pod.uid:
            self._maybe_gone.pop(pod_key, None)  # the cache caught up
        if pod is None:
            self._said.pop(pod_key, None)
        records = sorted(self.caches.pod_networks.by_index("pod", pod_key),
                         key=lambda r: r.metadata.name)
        desired = self.desired(pod)
        if pod is not None and desired and pod.deletion_timestamp is not None:
            # a terminating pod (its deletionTimestamp includes the grace): released once
            # that passes (see desired), and nothing may wake the key then — a lost
            # node's kubelet never finishes the pod — so look again at the deadline,
            # whatever this pass ends in (an invalid request is not retried otherwise)
            left = (pod.deletion_timestamp - self.clock.now()).total_seconds()
            self.enqueue.pod(pod_key, after=max(left, 0.0))
        if pod is not None and desired:
            records += self._held_for_vm(pod, records, desired)
        results = []
        covered: set[str] = set()
        for pn in records:
            if isinstance(pn, UnreadablePodNetwork):
                # reported as invalid; its addresses stay owned. Never acted on, and no
                # second record is made beside it (the pod would hold two addresses)
                covered.add(pn.spec.network)
                continue
            if self._wanted(pn, pod, desired):
                covered.add(pn.spec.network)
                assert pod is not None
                results.append(self._advance(pn, pod, desired[pn.spec.network]))
            else:
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

    def _settle_vanished(self, pod_key: str) -> None:
        """Records of this pod that left the cache without podnet removing them. Gone
        from the API server too (its finalizer was taken off by hand): nothing may stay
        owned by a record that is gone, so its addresses go back, after the reuse
        cooldown. Still there (the cache re-listed before seeing it): nothing to do."""
        for key, pn in list(self.owned.vanished.items()):
            if pod_key_of(pn) != pod_key:
                continue
            if self.caches.pod_networks.get(key) is None:
                try:
                    self.records.cluster.get(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)
                    continue  # still there: the cache catches up (a later event settles it)
                except NotFound:
                    pass
            del self.owned.vanished[key]
            if self.caches.pod_networks.get(key) is not None:
                continue  # back in the cache: its owner again
            served = pn.spec.provider in self.placement.providers
            cooldown = (self.clock.monotonic() + self.placement.policy(
                pn.spec.provider).reuse_cooldown) if served else 0.0
            freed = self.ledger.settle_vanished(pn, served=served, cooldown_until=cooldown)
            if freed:
                log.warning("PodNetwork %s was removed without its release; %s back in the "
                            "pool of node %s", key, ", ".join(freed), pn.spec.node_name)
                self.enqueue.node(pn.spec.node_name)

    def _held_for_vm(self, pod: PodInfo, have: list[PodNetwork],
                     desired: dict[str, Desired]) -> list[PodNetwork]:
        """The held records of the VM whose pod ``pod`` is, for networks it has no record
        of: a VM's new pod takes its addresses back."""
        vm = vm_of(pod)
        if vm is None:
            return []
        mine = {pn.spec.network for pn in have}
        out = []
        for pn in self.caches.pod_networks.by_index("vm", f"{pod.namespace}/{vm}"):
            want = desired.get(pn.spec.network)
            if (want is None or not want.sticky or pn.spec.network in mine
                    or want.provider != pn.spec.provider
                    or pn.metadata.deletion_timestamp is not None):
                continue
            if pn.status.phase is not Phase.RELEASING and not self._pod_gone(pn):
                continue  # its pod still runs (a live migration's source): not to take
            if (self.placement.providers[pn.spec.provider].uses_node_pool
                    and pn.spec.node_name != pod.node_name):
                continue  # a node pool's address cannot follow the VM to another node
            out.append(pn)
        return out

    def _pod_gone(self, pn: PodNetwork) -> bool:
        """Whether the pod a record serves is gone, replaced or finished, as the cache
        has it (its own pass may not have come yet)."""
        old = self.caches.pods.get(pod_key_of(pn))
        return old is None or old.uid != pn.spec.pod_uid or pod_is_terminal(old)

    def desired(self, pod: PodInfo | None) -> dict[str, Desired]:
        """The networks a pod should have now; empty when its networks must go."""
        if pod is None or pod.host_network or not pod.node_name:
            return {}
        if pod_is_terminal(pod):
            return {}
        if pod.deletion_timestamp is not None and self.clock.now() >= pod.deletion_timestamp:
            return {}  # past its deletion grace: the pod no longer runs
        node = self.caches.nodes.get(pod.node_name)
        if node is None:
            self._say_node_missing(pod)
            return {}
        self._said.pop(pod.key, None)
        if node.deletion_timestamp is not None:
            return {}
        provider = self.placement.provider_for_node(node)
        if provider is None:
            return {}
        invalid = None
        names: tuple[str, ...] = ()
        warnings: tuple[str, ...] = ()
        request = _NO_REQUEST  # most pods carry no podnet.io/ annotation: nothing to read
        if pod.annotations:
            try:
                request = parse_network_request(pod.annotations)
                names = parse_networks(pod.annotations)
                warnings = check_unknown_keys(pod.annotations)
            except InvalidRequest as exc:
                request, invalid = NetworkRequest(), exc
        info = self.placement.providers[provider]
        sticky = pod_is_sticky(pod, info.sticky_kinds)
        out = {DEFAULT_NETWORK: Desired(provider, request, sticky, invalid, warnings)}
        # who serves each attachment: the operator's config first, then the plugins
        served_by = {n: self.placement.networks[n] for n in names if n in self.placement.networks}
        for attachment in self.gateway.select_networks(pod, node):
            if attachment.provider in self.placement.providers:
                served_by.setdefault(attachment.network, attachment.provider)
        for network in dict.fromkeys((*names, *served_by)):
            if network in served_by:
                out[network] = self._attachment(pod, node, provider, network,
                                                served_by[network])
            else:
                # still a record, so the pod's owner sees why on `kubectl get pn`
                known = sorted({*self.placement.networks, *served_by}) or ["none"]
                out[network] = Desired(provider, NetworkRequest(), False, InvalidRequest(
                    f"networks[{network}]", f"network {network!r} is not served by any "
                    f"provider (configured: {', '.join(known)})"))
        if invalid is not None:
            # one answer for the pod's annotations: when they are wrong, none of its
            # networks is set up (an attachment a plugin read from the raw annotation
            # included), each record saying why. The pod cannot start without its default
            # network, and an attachment routed for it would only hold an address
            out = {n: d if d.invalid is not None else attrs.evolve(d, invalid=invalid)
                   for n, d in out.items()}
        return out

    def _say_node_missing(self, pod: PodInfo) -> None:
        """A pod bound to a node that does not exist gets no record (no provider serves a
        node that is not there): an Event on the Pod says so, once per pod. The node's
        arrival requeues its pods (``_on_node``), which then go on as usual."""
        message = (f"pod {pod.key} is bound to node {pod.node_name}, which does not exist: "
                   "no network is set up for it until the node is there")
        if self._said.get(pod.key) == message:
            return
        try:
            self.records.cluster.get(NODE, pod.node_name or "")
            return  # it does: the node cache is behind, and its event requeues the pod
        except NotFound:
            pass
        self._said[pod.key] = message
        self.records.event(_pod_ref(pod), "NodeNotFound", message)

    def _attachment(self, pod: PodInfo, node: NodeInfo, default_provider: str, network: str,
                    provider: str) -> Desired:
        served = self.placement.providers[provider]
        problem = None
        if served.uses_node_pool and provider != default_provider:
            # a node has one pool owner: its default network's provider
            problem = InvalidRequest(
                f"networks[{network}]",
                f"provider {provider!r} allocates from node pools, but node {node.name}'s "
                f"pool belongs to {default_provider!r}; an attachment network needs a "
                "provider with its own address management")
        return Desired(provider, NetworkRequest(),
                       pod_is_sticky(pod, served.sticky_kinds), problem)

    def _wanted(self, pn: PodNetwork, pod: PodInfo | None, desired: dict[str, Desired]) -> bool:
        if pod is None or pn.metadata.deletion_timestamp is not None:
            return False
        want = desired.get(pn.spec.network)
        if want is None or want.provider != pn.spec.provider:
            return False
        if (pn.spec.node_name != pod.node_name
                and self.placement.providers[pn.spec.provider].uses_node_pool):
            return False  # an address from one node's pool cannot follow its pod elsewhere
        if pn.spec.pod_uid == pod.uid:
            return pn.status.phase is not Phase.RELEASING or pn.spec.sticky
        # another pod under the same name: only a sticky record carries over
        return pn.spec.sticky and want.sticky

    # --- create -----------------------------------------------------------------------

    def _create(self, pod: PodInfo, network: str, want: Desired) -> Result:
        if self._maybe_gone.get(pod.key) == pod.uid:
            # the pod's last record was deleted from outside while the cache still showed
            # the pod: ask the API server whether this pod is still there
            try:
                live = self.records.cluster.get(POD, pod.name, pod.namespace)
            except NotFound:
                return Result(requeue_after=_WAIT_RECHECK)  # gone: its deletion event follows
            if live.get("metadata", {}).get("uid") != pod.uid:
                return Result(requeue_after=_WAIT_RECHECK)  # replaced by a new pod
            del self._maybe_gone[pod.key]  # alive: only its record was removed
        sticky = want.sticky
        vm = vm_of(pod) if sticky else None
        if vm is not None and self.caches.pod_networks.get(
                f"{pod.namespace}/{record_name(pod, network, True)}") is not None:
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
            owner = _sticky_owner(pod) if sticky else None
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

    # --- forward ----------------------------------------------------------------------

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
            pn = self._adopt_pod(pn, pod)
            if (moved or renamed) and pn.status.phase is Phase.ROUTED:
                # an address that follows its pod: the dataplane is rewritten for it
                pn = self._repair(pn, pod, f"pod {pod.key} moved to node {pod.node_name}"
                                  if moved else f"pod {pod.key} took the record over")
        if want.invalid is not None:
            return self._invalid(pn, pod, want.invalid)
        pn = self._report_warnings(pn, pod, want)
        if pn.status.phase is Phase.PENDING:
            pn = self._report_unavailable(pn, pod)
        if pn.status.phase is Phase.PENDING and pn.spec.requests != want.request:
            pn = self.records.update(POD_NETWORK, attrs.evolve(
                pn, spec=attrs.evolve(pn.spec, requests=want.request)))
        elif pn.status.phase is not Phase.PENDING and (
                pn.spec.requests != want.request or _frozen_said(pn)):
            pn = self._changed_requests(pn, pod, want.request)
        if pn.status.phase in (Phase.ALLOCATED, Phase.ROUTED):
            problem = self._address_problem(pn)
            if problem is not None:
                pn = self._readdress(pn, pod, *problem)
        phase = pn.status.phase
        if phase is Phase.PENDING:
            allocated = self._allocate(pn, pod)
            if isinstance(allocated, _Unwritten):
                pn = self._route_unwritten(allocated, pod)
            elif allocated.status.phase is Phase.PENDING:
                return Result(requeue_after=_WAIT_RECHECK)
            else:
                pn = allocated
        if pn.status.phase is Phase.ALLOCATED:
            pn = self._route(pn, pod)
        if pn.status.phase is Phase.ROUTED:
            return self._maybe_verify(pn, pod)
        return DONE

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
        problem = self.ledger.problem(pn)
        if problem is None:
            return None
        return (*problem_wording(pn, problem), problem.prefer)

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
            subnet=None, gateway=None, interface=None, prefix_length=None,
            ipv6_prefix_length=None, ipv6_gateway=None, routes=(), mtu=None), drift=why)
        if readdressed is None:
            return pn
        pn = readdressed
        self.ledger.readdressed(pn)
        if prefer is not None:
            self._prefer[pn.key] = prefer
        message = f"PodNetwork {pn.key}: {why}; the pod gets an address again"
        self.records.event(pn, reason, message)
        self.records.event(_pod_ref(pod), reason, message)
        if conflict is not None:
            holder = self.caches.pod_networks.get(conflict[1])
            if holder is not None:
                self.records.event(holder, reason, f"PodNetwork {pn.key} recorded "
                                   f"{conflict[0]}, which {holder.key} holds; {pn.key} "
                                   "was re-addressed")
        log.warning("re-addressing %s (was %s): %s", pn.key, old, why)
        return pn

    def _changed_requests(self, pn: PodNetwork, pod: PodInfo, wanted: NetworkRequest
                          ) -> PodNetwork:
        """The pod changed its requests after its address was given: dataplane fields
        are adopted and written (``repair`` → ``route``, for a routed record); address
        fields never move the address, which a ``RequestsApplied`` condition says."""
        change = compare_requests(pn.spec.requests, wanted)
        if change.applied:
            pn = self.records.update(POD_NETWORK, attrs.evolve(
                pn, spec=attrs.evolve(pn.spec, requests=change.merged)))
        pn = self._say_frozen(pn, pod, change.frozen)
        if change.applied and pn.status.phase is Phase.ROUTED:
            pn = self._repair(pn, pod, f"requests changed: {', '.join(change.applied)}")
        return pn

    def _say_frozen(self, pn: PodNetwork, pod: PodInfo, frozen: tuple[str, ...]
                    ) -> PodNetwork:
        current = _condition(pn, REQUESTS_APPLIED)
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
            self.records.event(_pod_ref(pod), reason, message)
        return written or pn

    def _put_condition(self, pn: PodNetwork, kind: str, status: str, reason: str,
                       message: str) -> PodNetwork | None:
        """Write condition ``kind`` unless the record says it already (its transition time
        kept while its status stays). :return: the record written, or None when nothing
        changed or the write lost a race (the next pass writes it from a fresh read)."""
        current = _condition(pn, kind)
        if current is not None and (current.status, current.reason, current.message) == (
                status, reason, message):
            return None
        condition = Condition(type=kind, status=status, reason=reason, message=message,
                              last_transition_time=self.clock.now(),
                              observed_generation=pn.metadata.generation)
        try:
            return self.records.update_status(POD_NETWORK, attrs.evolve(pn, status=attrs.evolve(
                pn.status, conditions=set_condition(pn.status.conditions, condition))))
        except (Conflict, NotFound):
            return None

    def _adopt_pod(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork:
        """A sticky record serves the pod now running under its name (on whichever node,
        for providers whose addresses are not tied to a node's pool)."""
        node = pod.node_name or pn.spec.node_name
        meta = attrs.evolve(pn.metadata, labels={**pn.metadata.labels, LABEL_NODE: node,
                                                 LABEL_POD: pod.name})
        return self.records.update(POD_NETWORK, attrs.evolve(
            pn, metadata=meta, spec=attrs.evolve(pn.spec, pod_uid=pod.uid, node_name=node,
                                                 pod_name=pod.name)))

    def _invalid(self, pn: PodNetwork, pod: PodInfo, exc: InvalidRequest) -> Result:
        """Bad input: say so on the record and the pod, allocate nothing, don't retry."""
        waiting_in = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if waiting_in is not None:
            waiting_in.stop_waiting(pn.key)  # it takes nobody's turn while it cannot take one
        message = one_line(f"pod {pod.key}: {exc}")
        if self._set_ready(pn, "False", "InvalidRequest", message):
            self.records.event(pn, "InvalidRequest", message)
            self.records.event(_pod_ref(pod), "InvalidRequest", message)
        return DONE

    def _report_warnings(self, pn: PodNetwork, pod: PodInfo, want: Desired) -> PodNetwork:
        """``AnnotationsRecognized`` on the record: False naming each unknown key while
        there are any (a Warning Event on the record and the Pod when that changes), True
        once they are gone; never written for a pod that never had one."""
        current = _condition(pn, ANNOTATIONS)
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
            self.records.event(_pod_ref(pod), reason, message)
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
            self.records.event(_pod_ref(pod), "PoolUnavailable", message)
            return self.caches.pod_networks.get(pn.key) or pn
        return pn

    def _namespace_annotations(self, namespace: str) -> dict[str, str]:
        """The namespace's ``podnet.io/`` annotations. A namespace the cache has not seen
        yet (created a moment before its pod) is read from the API server: its annotations
        may pick the pod's subnet, and an address is never moved once given."""
        cached = self.caches.namespaces.get(namespace)
        if cached is not None or not namespace:
            return cached or {}
        try:
            return namespace_annotations(self.records.cluster.get(NAMESPACE, namespace))
        except NotFound:
            return {}  # gone, and its pods with it

    def _allocate(self, pn: PodNetwork, pod: PodInfo) -> PodNetwork | _Unwritten:
        """Allocate an address for a Pending record: the record as it was when nothing
        was allocated (it waits), or the allocation, not written yet: the route's write
        records it (:meth:`_route_unwritten`), one status write for both."""
        provider = pn.spec.provider
        key = pn.key
        info = self.placement.providers[provider]
        node_ctx = self.caches.node_context(pn.spec.node_name)
        if not self.caches.namespaces.has_synced:
            # the namespace's annotations may choose the address, and an address is never
            # moved later: wait for them (the cache's first list wakes this record)
            return pn
        reservation: Reservation | None = None
        if info.uses_node_pool:
            pool = self.pools.get(provider, pn.spec.node_name)
            if not pool.synced:
                # the pool is rebuilt from inventory + records before any allocation
                pool.wait_for_address(key, pool.waiting.get(key),
                                      self.clock.monotonic(), queued=self._takes_any(pn))
                self.enqueue.node(pn.spec.node_name)
                return pn
            if self._takes_any(pn):
                # nothing a plain request could take: wait for the node's pass to grow
                # the pool and wake it, without a transition (no span, no provider call,
                # no write). Its turn comes in the order it arrived
                subnet = pool.waiting.get(key)
                if not pool.serves_next(key, subnet, self.clock.monotonic()):
                    self._wait(pn, pool, subnet, queued=True,
                               why=f"no idle address{f' in subnet {subnet}' if subnet else ''}"
                                   f" on node {pool.node}")
                    return pn
            reservation = self.ledger.reserve(pool, key, self.clock.monotonic(),
                                              prefer=self._prefer.get(key))
            traced = self._first_trace.get(key)
            if traced is not None and not pn.status.traceparent:
                pn = attrs.evolve(pn, status=attrs.evolve(pn.status, traceparent=traced))
        ctx = AllocateContext(pod_network=pn, node=node_ctx, pod=pod, pool=reservation,
                              namespace_annotations=self._namespace_annotations(
                                  pn.metadata.namespace or ""))
        claims: list[Claim] = []

        def allocate(span: TransitionSpan) -> PodNetwork:
            answer = self._take_back(pn, ctx, reservation)
            if answer is None:
                answer = self._ask(ctx, reservation)
            if answer is None:
                raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} did not allocate")
            allocation = answer
            claims.append(self._claim(pn, allocation, reservation))
            return self._phase_record(pn, Phase.ALLOCATED, span, ip=allocation.ip,
                                      ipv6=allocation.ipv6, mac=allocation.mac,
                                      subnet=allocation.subnet, gateway=allocation.gateway,
                                      interface=allocation.interface,
                                      **pod_interface_fields(allocation))

        def not_allocated(exc: BaseException, written: bool = False) -> None:
            # ``written``: a write naming the address was sent. One whose answer was lost
            # may have landed: the address stays with this record until a later write
            # proves otherwise (a 409 or 404 proves it did not)
            maybe_written = written and not isinstance(exc, Conflict | NotFound)
            if not maybe_written:
                for claim in reversed(claims):
                    claim.undo()
                if reservation is not None:
                    reservation.rollback()
            if reservation is not None and not isinstance(exc, PoolEmpty):
                # not waiting for the pool (that is PoolEmpty's answer): a stale waiter
                # would keep the node's idle addresses from ever being trimmed, and a
                # static address may need that room on an interface (the queue retries)
                self.pools.get(provider, pn.spec.node_name).stop_waiting(pn.key)

        updated = self._run(pn, "allocate", allocate, undo=not_allocated)
        if updated is None:
            return pn
        return _Unwritten(updated, functools.partial(self._allocation_recorded, reservation),
                          not_allocated)

    def _allocation_recorded(self, reservation: Reservation | None, updated: PodNetwork
                             ) -> None:
        """A write naming the allocation landed: what earlier, unanswered writes held for
        the record is free, and the pool knows the address the record names."""
        self._prefer.pop(updated.key, None)
        self._first_trace.pop(updated.key, None)
        self.ledger.recorded(updated, reservation)

    def _route_unwritten(self, allocated: _Unwritten, pod: PodInfo) -> PodNetwork:
        """Route an allocation not written yet: the Routed write records the address and
        the route at once. A failed route records the address with its Ready=False
        condition (:meth:`_failed`); when no write named it for certain, the claims are
        undone."""
        staged = allocated.record
        try:
            routed = self._route(staged, pod)
        except BaseException as exc:
            current = self.caches.pod_networks.get(staged.key)
            if (current is not None and current.status.phase is Phase.ALLOCATED
                    and current.status.ip == staged.status.ip
                    and current.metadata.resource_version != staged.metadata.resource_version):
                allocated.recorded(current)  # the failure's condition write carried it
            else:
                # a 409 or 404 on the write proves it did not land; anything else may have
                allocated.not_recorded(exc.__cause__ if isinstance(exc.__cause__, NotFound)
                                       else exc, True)
            raise
        if routed is staged:
            # not routed and nothing written (a wait): the allocation is recorded now
            routed = self.records.update_status(POD_NETWORK, staged)
        allocated.recorded(routed)
        return routed

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

    def _take_back(self, pn: PodNetwork, ctx: AllocateContext,
                   reservation: Reservation | None) -> Allocation | None:
        """The address this pod network had, asked for as a static address where the pool
        does not hold it (the cloud lost it): the pod keeps its address where the cloud
        gives it back. None when it did not (a new address follows) or nothing is due."""
        prefer = self._prefer.get(pn.key)
        req = pn.spec.requests
        if prefer is None or req.ip_address or req.ip_pool or req.subnets:
            return None
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if reservation is not None and pool is not None and prefer in pool.addresses:
            return None  # in the pool: the reservation hands it out first
        asked = attrs.evolve(pn, spec=attrs.evolve(pn.spec, requests=attrs.evolve(
            req, ip_address=prefer)))
        try:
            answer = self._ask(attrs.evolve(ctx, pod_network=asked), reservation)
        except (PodnetError, ProviderError) as exc:
            log.info("%s: address %s not taken back: %s", pn.key, prefer, exc)
            answer = None
        if answer is None or answer.ip != prefer:
            self._prefer.pop(pn.key, None)
            if reservation is not None:
                reservation.rollback()
            return None
        return answer

    def _ask(self, ctx: AllocateContext, reservation: Reservation | None) -> Allocation | None:
        """The provider's allocation for ``ctx``; a pool provider's request is resolved
        against the node's pool first (core's checks and messages, the same for all)."""
        pn = ctx.pod_network
        provider = pn.spec.provider
        if reservation is not None:
            node = ctx.node

            def space() -> AddressSpace | None:
                return self.gateway.address_space(provider, node)

            ctx = evolve(ctx, request=resolve(
                pn.spec.requests, owner=pn.key, node=pn.spec.node_name, provider=provider,
                pool=reservation, space=space))
        return self.gateway.allocate(provider, ctx)

    def _claim(self, pn: PodNetwork, allocation: Allocation,
               reservation: Reservation | None) -> Claim:
        """The ledger makes the answer this record's before it is written (the second of
        two racing records is refused there); an address the pool thought idle is held
        off for the reuse cooldown (at least until the next look at a waiting record)."""
        policy = self.placement.policy(pn.spec.provider)
        return self.ledger.claim(pn, allocation, reservation, hold_off_until=(
            self.clock.monotonic() + max(policy.reuse_cooldown, _WAIT_RECHECK)))

    def _route(self, pn: PodNetwork, pod: PodInfo | None) -> PodNetwork:
        provider = pn.spec.provider
        ctx = PodNetworkContext(pod_network=pn, node=self.caches.node_context(pn.spec.node_name),
                                pod=pod)

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
        """Drift (or a move): back to allocated, then route writes the dataplane again."""
        repaired = self._run(pn, "repair", lambda span: self._write_phase(
            pn, Phase.ALLOCATED, span, reason="Repairing", message=why), drift=why)
        if repaired is None:
            return pn
        return self._route(repaired, pod)

    # --- backward ---------------------------------------------------------------------

    def _wind_down(self, pn: PodNetwork, pod: PodInfo | None) -> Result:
        if pn.status.phase is not Phase.RELEASING:
            released = self._run(pn, "release", lambda span: self._write_phase(
                pn, Phase.RELEASING, span, reason="Releasing",
                message=self._release_reason(pn, pod)))
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

    def _release_reason(self, pn: PodNetwork, pod: PodInfo | None) -> str:
        if pn.metadata.deletion_timestamp is not None:
            return "record deleted"
        if pod is None:
            return f"pod {pn.metadata.namespace}/{pn.spec.pod_name} is gone"
        if pod.uid != pn.spec.pod_uid:
            return f"pod {pod.key} was replaced (uid {pod.uid})"
        if pod_is_terminal(pod):
            return f"pod {pod.key} is {pod.phase}"
        return f"pod {pod.key} no longer runs on a served node"

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
            self._remove_record(pn)
            return pn  # as it was last written: the event names its address

        # the cache's delete is ours: the address is given back here
        self.owned.finishing.add(pn.key)
        finished = self._run(pn, "finish", finish,
                             undo=lambda _exc: self.owned.finishing.discard(pn.key))
        if finished is None:
            return Result(requeue_after=0.0)
        self.owned.finishing.discard(pn.key)
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
                or pn.spec.network not in self.desired(pod) or not pn.status.ip):
            return
        self._prefer[pn.key] = pn.status.ip
        message = (f"PodNetwork {pn.key} was deleted while pod {pod.key} was running; its "
                   f"address {pn.status.ip} was released and a new record is made, which "
                   "takes it back where it can")
        self.records.event(_pod_ref(pod), "PodNetworkDeleted", message)

    def _remove_record(self, pn: PodNetwork) -> None:
        """Finalizer off and record gone; each step may be redone after a crash."""
        current = pn
        if FINALIZER in current.metadata.finalizers:
            meta = attrs.evolve(current.metadata, finalizers=tuple(
                f for f in current.metadata.finalizers if f != FINALIZER))
            try:
                current = self.records.update(POD_NETWORK, attrs.evolve(current, metadata=meta))
            except NotFound:
                return
        if pn.metadata.deletion_timestamp is None:
            try:
                self.records.delete(POD_NETWORK, current)
            except NotFound:
                pass
        self.caches.pod_networks.forget(pn.key)

    # --- transitions: one path for every trigger --------------------------------------

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

        return self.transitions.run(POD_NETWORK_MACHINE, _subject(pn, drift), trigger,
                                    action, settled=_settled, failed=failed)

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
        now = self.clock.now()
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
                              last_transition_time=self.clock.now(),
                              observed_generation=pn.metadata.generation)
        try:
            self.records.update_status(POD_NETWORK, attrs.evolve(pn, status=attrs.evolve(
                pn.status, conditions=set_condition(pn.status.conditions, condition),
                traceparent=traceparent)))
        except (Conflict, NotFound):
            pass  # the next pass writes it from a fresh read
        return True


def _subject(pn: PodNetwork, drift: str | None = None) -> Subject:
    """A pod network as its transitions' spans and events name it."""
    spec, status = pn.spec, pn.status
    return Subject(
        pn.key, spec.provider, state_of(status.phase), status.traceparent,
        {
            ATTR_POD: spec.pod_name,
            ATTR_NAMESPACE: pn.metadata.namespace,
            ATTR_NODE: spec.node_name,
            ATTR_IP: status.ip,
            ATTR_INTERFACE: status.interface,
            ATTR_DRIFT: drift,
        },
        {"ip": status.ip, "node": spec.node_name},
    )


_NO_ATTRIBUTES: Mapping[str, str | int | bool | None] = MappingProxyType({})


def _settled(pn: PodNetwork) -> Subject:
    """A pod network as the event of its transition names it once the transition is
    done (the span has its attributes already)."""
    status = pn.status
    return Subject(pn.key, pn.spec.provider, state_of(status.phase), status.traceparent,
                   _NO_ATTRIBUTES, {"ip": status.ip, "node": pn.spec.node_name})


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


def _condition(pn: PodNetwork, kind: str) -> Condition | None:
    return next((c for c in pn.status.conditions if c.type == kind), None)


def _frozen_said(pn: PodNetwork) -> bool:
    """Whether the record says some of its pod's requests are not applied."""
    said = _condition(pn, REQUESTS_APPLIED)
    return said is not None and said.status == "False"


def _sticky_owner(pod: PodInfo) -> OwnerReference | None:
    for ref in pod.owner_references:
        if ref.controller:
            return OwnerReference(api_version=ref.api_version, kind=ref.kind, name=ref.name,
                                  uid=ref.uid)
    return None


def _pod_ref(pod: PodInfo) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": POD.kind,
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}}


def pod_interface_fields(allocation: Allocation) -> dict[str, Any]:
    """What the pod's interface needs beside its address, as the record's status keeps
    it: the prefix length (the allocation's, else its CIDR's, else a host route's), the
    IPv6 half's, the routes (a default route via the gateway when the provider names
    none) and the MTU."""
    prefix = allocation.prefix_length
    if prefix is None and allocation.cidr:
        prefix = ipaddress.ip_network(allocation.cidr, strict=False).prefixlen
    if prefix is None:
        prefix = 32
    routes = allocation.routes
    if not routes and allocation.gateway:
        routes = (Route(dst="0.0.0.0/0", gw=allocation.gateway),)
    v6_prefix = allocation.ipv6_prefix_length
    if v6_prefix is None and allocation.ipv6:
        v6_prefix = 128
    return {"prefix_length": prefix, "ipv6_prefix_length": v6_prefix,
            "ipv6_gateway": allocation.ipv6_gateway, "routes": tuple(routes),
            "mtu": allocation.mtu}


def problem_wording(pn: PodNetwork, problem: Problem) -> tuple[str, str]:
    """(Event reason, message) of what the ledger found wrong with a record's claim."""
    address, holder, node = problem.address, problem.holder, problem.node
    kind = problem.kind
    if kind is ProblemKind.CONFLICT:
        return "AddressConflict", f"address {address} is recorded by {pn.key} but held by {holder}"
    if kind is ProblemKind.HELD_IN_POOL:
        return ("AddressConflict",
                f"address {address} is recorded by {pn.key} but held by {holder} on node {node}")
    if kind is ProblemKind.IDLE_IN_POOL:
        return ("AddressConflict",
                f"address {address} is recorded by {pn.key} but idle in node {node}'s pool")
    if kind is ProblemKind.LOST:
        return "AddressLost", f"the cloud no longer has address {address}"
    return ("AddressLost", f"node {node} does not have address {address}, which {pn.key} "
            "records")
