"""The networks' reconciler: Subnet, IPPool and SecurityGroup objects checked, kept and
published to their providers.

Queue keys ``("subnet", name)``, ``("ippool", name)``, ``("securitygroup", name)``, each
``reconcile(name) -> Result`` as controller-runtime's reconcilers are, and
``("netstatus", "")``, the timer that writes the status of every object marked dirty (at
most once a second per object: a Subnet whose 5,000 addresses churn is written once a
second, not once per pod). A pass:

- keeps the finalizer ``podnet.io/network-in-use`` on a live Subnet or IPPool; on one
  being deleted, removes it once no record holds one of its addresses (meanwhile
  phase Terminating, ``Ready=False`` reason ``InUse`` naming how many and the first few);
- asks the provider about a new generation of a Subnet (``podnet_subnet_parameters``)
  once everything core checks passed;
- marks the object's status dirty and says a change of verdict in an Event (Warning for
  a problem, Normal once Ready);
- publishes each provider's usable set (``podnet_networks_changed``) when it changed, and
  wakes the pod networks that waited for a Subnet of that provider (level-triggered).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import (
    IP_POOL,
    SECURITY_GROUP,
    SUBNET,
    ApiError,
    Conflict,
    Kind,
    NotFound,
)
from podnet.core.convert import RecordError, from_wire, to_wire
from podnet.core.enqueue import Enqueuer, Key
from podnet.core.errors import ErrorKind, InvalidRequest, NotLeader, ProviderError, one_line
from podnet.core.gateway import ProviderGateway
from podnet.core.models import Condition, PodNetwork, set_condition
from podnet.core.networks.catalog import Catalog, Evaluation, Parameters, Verdict
from podnet.core.networks.checks import Declared, Problem, blocks_of, blocks_overlap
from podnet.core.networks.select import subnets_for_node
from podnet.core.networks.usage import HELD_LISTED, OUTSIDE_LISTED, Outside, Usage
from podnet.core.networks.wire import (
    IPPoolStatus,
    ProviderRealization,
    SecurityGroupStatus,
    SubnetStatus,
)
from podnet.core.reconcile.result import DONE, Result
from podnet.core.workqueue import WorkQueue
from podnet.hookspecs.networks import (
    NETWORK_FINALIZER,
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SubnetInfo,
)

log = logging.getLogger("podnet.networks")

SUBNET_KEY = "subnet"
POOL_KEY = "ippool"
GROUP_KEY = "securitygroup"
STATUS_KEY: Key = ("netstatus", "")
#: an object's status is written at most once per this many seconds
STATUS_PERIOD = 1.0
#: a Ready Subnet's parameters are asked again this often (seconds): what the cloud has
#: for it may change under it (a vSwitch deleted, its CIDR read anew)
PARAMETERS_RESYNC = 600.0
#: the records an InUse condition names
IN_USE_NAMED = 3
READY = "Ready"
ADDRESSES_OUTSIDE = "AddressesOutside"
#: the record's condition while it holds an address its Subnet excludes or lost
ADDRESS_EXCLUDED = "AddressExcluded"
#: reasons whose Ready=False is no problem of the object (no Warning Event)
_QUIET = frozenset({"Pending", "Terminating"})
_KINDS: dict[str, Kind] = {SUBNET_KEY: SUBNET, POOL_KEY: IP_POOL, GROUP_KEY: SECURITY_GROUP}


class NetworksReconciler:
    """Takes the caches, the cluster writes go to (fenced), the queue, the gateway, which
    providers exist, the clock and the engine's write counter."""

    def __init__(self, *, caches: Caches, cluster: Any, queue: WorkQueue[Key],
                 enqueue: Enqueuer, gateway: ProviderGateway,
                 providers: Callable[[], Iterable[str]],
                 provider_of_node: Callable[[Any], str | None],
                 clock: Clock, writes: Counter[str]) -> None:
        self.caches = caches
        self.cluster = cluster
        self.queue = queue
        self.enqueue = enqueue
        self.gateway = gateway
        self.providers = providers
        self.provider_of_node = provider_of_node
        self.clock = clock
        self.writes = writes
        self.catalog = Catalog(lambda: (caches.subnets.values(), caches.ip_pools.values(),
                                        caches.security_groups.values()), providers)
        self.usage = Usage()
        self._lock = threading.RLock()
        self._publishing = threading.Lock()
        #: per provider, the set last published (its revision numbers the changes)
        self.published: dict[str, Networks] = {}
        #: the Ready SecurityGroups as last published (None: nothing published yet)
        self._groups: dict[str, SecurityGroupInfo] | None = None
        self._revision = 0
        #: (key kind, name) -> (uid, its last spec that read): what its records may hold
        #: once an edit made the spec unreadable
        self._last_read: dict[tuple[str, str], tuple[str, Any]] = {}
        #: (key kind, name) -> (reason, message) last said in an Event
        self._said: dict[tuple[str, str], tuple[str, str]] = {}
        #: status writes: what is to be written, when each was last, what it wrote
        self._dirty: set[tuple[str, str]] = set()
        self._last_write: dict[tuple[str, str], float] = {}
        self._written: dict[tuple[str, str], dict[str, Any]] = {}
        #: provider -> pod keys waiting for a Subnet (or refused one): woken on a change
        self._waiting: dict[str, set[str]] = {}
        #: told the names of SecurityGroups whose Ready rules changed (the engine verifies
        #: the records naming them at once, so a change applies to running pods)
        self.on_groups_changed: Callable[[set[str]], None] = lambda _: None
        #: providers with any Subnet object, as the cache has them now (the pod network
        #: path asks nothing more of a provider that has none)
        self.with_subnets: frozenset[str] = frozenset()
        #: record key -> the Subnet address it holds outside (excluded or narrowed away)
        self.outside: dict[str, Outside] = {}
        self._outside_by_subnet: dict[str, tuple[Outside, ...]] = {}

    # --- what the pod network path asks ----------------------------------------------

    def evaluation(self) -> Evaluation:
        return self.catalog.evaluation()

    def wait_for_change(self, provider: str, pod_key: str) -> None:
        """``pod_key`` waits for (or was refused) a Subnet of ``provider``: queued again
        when the provider's usable set changes."""
        with self._lock:
            self._waiting.setdefault(provider, set()).add(pod_key)

    def subnets_of_node(self, node: Any) -> tuple[SubnetInfo, ...]:
        provider = self.provider_of_node(node)
        if provider is None or provider not in self.with_subnets:
            return ()
        nets = self.published.get(provider)
        return subnets_for_node(nets, node.labels) if nets is not None else ()

    # --- informer handlers ---------------------------------------------------------------

    def on_object(self, _event: str, _key: str, old: Declared | None, new: Declared | None
                  ) -> None:
        """An object changed: it is checked again, and so are those whose verdict may
        follow from it (Subnets of its provider whose blocks overlap it, before or after;
        the pools of a Subnet, or of the same Subnet as a pool; groups naming a group)."""
        self.catalog.changed()
        self.with_subnets = frozenset(
            s.info.provider for s in self.caches.subnets.values()
            if isinstance(s.info, SubnetInfo))
        # nodes' contexts name their Subnets only while there are any
        self.caches.subnets_of_node = self.subnets_of_node if self.with_subnets else None
        d = new or old
        if d is None:
            return
        kind = _key_kind(d)
        self.queue.add((kind, d.name))
        infos = [x.info for x in (old, new) if x is not None and x.info is not None]
        if kind == SUBNET_KEY:
            blocks = [i for i in infos if isinstance(i, SubnetInfo)]
            for other in self.caches.subnets.values():
                info = other.info
                if other.name != d.name and isinstance(info, SubnetInfo) and any(
                        b.provider == info.provider
                        and blocks_overlap(blocks_of(b), blocks_of(info)) for b in blocks):
                    self.queue.add((SUBNET_KEY, other.name))
            self._pools_of({d.name})
        elif kind == POOL_KEY:
            self._pools_of({i.subnet for i in infos if isinstance(i, IPPoolInfo)})
        else:
            for other in self.caches.security_groups.values():
                info = other.info
                if isinstance(info, SecurityGroupInfo) and any(
                        d.name in rule.groups for rule in (*info.ingress, *info.egress)):
                    self.queue.add((GROUP_KEY, other.name))

    def _pools_of(self, subnets: set[str]) -> None:
        for pool in self.caches.ip_pools.values():
            if isinstance(pool.info, IPPoolInfo) and pool.info.subnet in subnets:
                self.queue.add((POOL_KEY, pool.name))

    def on_record(self, old: PodNetwork | None, new: PodNetwork | None) -> None:
        """A record changed: the Subnets and pools of its provider are counted again (at
        their next status write); one being deleted looks again whether it is free."""
        provider = self.usage.update(old, new)
        if provider is None:
            return
        ev = self.catalog.evaluation()
        for name, (d, _) in ev.subnets.items():
            info = self._held_view(SUBNET_KEY, d) if d.deleting else d.info
            if isinstance(info, SubnetInfo) and info.provider == provider:
                self._mark((SUBNET_KEY, name))
                if d.deleting:
                    self.queue.add((SUBNET_KEY, name))
        for name, (d, _) in ev.pools.items():
            pool = self._held_view(POOL_KEY, d) if d.deleting else d.info
            subnet = ev.subnets.get(pool.subnet) if isinstance(pool, IPPoolInfo) else None
            subnet_info = self._held_view(SUBNET_KEY, subnet[0]) if subnet else None
            if isinstance(subnet_info, SubnetInfo) and subnet_info.provider == provider:
                self._mark((POOL_KEY, name))
                if d.deleting:
                    self.queue.add((POOL_KEY, name))

    # --- start ---------------------------------------------------------------------------

    def prime(self) -> None:
        """At engine start, before the first pod network pass: each Subnet's parameters
        asked once, then each provider told what is usable (possibly nothing)."""
        for kind in (SUBNET_KEY, POOL_KEY):
            for d in self._informer(kind).values():
                if not d.deleting:
                    try:
                        self._keep_finalizer(kind, d)
                    except Exception as exc:  # retried by its reconcile
                        log.info("%s %s: finalizer not put on yet: %s", d.kind, d.name, exc)
        ev = self.catalog.evaluation()
        for name, (d, verdict) in ev.subnets.items():
            if verdict.reason == "Pending" and not d.deleting:
                try:
                    self._check_parameters(d)
                except Exception as exc:  # retried by its reconcile
                    log.info("Subnet %s: parameters not checked yet: %s", name, exc)
        for kind in _KINDS:
            names = self._informer(kind).keys()
            for name in names:
                self.queue.add((kind, name))
        self.publish()
        # which records hold addresses outside their Subnet, known before their first
        # pass: none of them is told otherwise for a moment
        ev = self.catalog.evaluation()
        for d, verdict in ev.subnets.values():
            if isinstance(d.info, SubnetInfo):
                self._subnet_status(ev, d, verdict)

    # --- reconcile -------------------------------------------------------------------------

    def reconcile_subnet(self, name: str) -> Result:
        d = self.caches.subnets.get(name)
        if d is None:
            self.catalog.set_parameters(name, None)
            self._forget(SUBNET_KEY, name)
            self.publish()
            return DONE
        if d.info is not None:
            self._last_read[(SUBNET_KEY, name)] = (d.uid, d.info)
        if d.deleting:
            return self._deleting(SUBNET_KEY, d)
        self._keep_finalizer(SUBNET_KEY, d)
        ev = self.catalog.evaluation()
        _, verdict = ev.subnets[name]
        failure: BaseException | None = None
        answer = self.catalog.parameters.get(name)
        if verdict.reason in ("Pending", "InvalidParameters", "ProviderError", "Valid") or (
                answer is not None and answer.as_before):
            try:
                self._check_parameters(d)
            except ProviderError as exc:
                failure = exc
        self._settle(SUBNET_KEY, name)
        if failure is not None:
            raise failure  # a transient provider error: retried with backoff
        answer = self.catalog.parameters.get(name)
        if answer is None or answer.as_before or (
                answer.problem is not None and answer.problem.reason == "ProviderError"):
            return DONE  # nothing asked, or retried with backoff (raised above)
        return Result(requeue_after=max(
            answer.asked_at + PARAMETERS_RESYNC - self.clock.monotonic(), 0.001))

    def reconcile_pool(self, name: str) -> Result:
        d = self.caches.ip_pools.get(name)
        if d is None:
            self._forget(POOL_KEY, name)
            self.publish()
            return DONE
        if d.info is not None:
            self._last_read[(POOL_KEY, name)] = (d.uid, d.info)
        if d.deleting:
            return self._deleting(POOL_KEY, d)
        self._keep_finalizer(POOL_KEY, d)
        self._settle(POOL_KEY, name)
        return DONE

    def reconcile_group(self, name: str) -> Result:
        d = self.caches.security_groups.get(name)
        if d is None:
            self._forget(GROUP_KEY, name)
            self.publish()
            return DONE
        self._settle(GROUP_KEY, name)
        return DONE

    def _check_parameters(self, d: Declared) -> None:
        """``podnet_subnet_parameters`` for this generation, unless answered already."""
        info = d.info
        if not isinstance(info, SubnetInfo):
            return
        known = self.catalog.parameters.get(d.name)
        now = self.clock.monotonic()
        if known is not None and (known.uid, known.generation) == (d.uid, d.generation) and (
                known.problem is None or known.problem.reason != "ProviderError") and (
                now < known.asked_at + PARAMETERS_RESYNC):
            return  # answered for this generation (a transient failure is asked again)
        try:
            realization = self.gateway.subnet_parameters(info.provider, info)
            answer = Parameters(d.uid, d.generation, realization=realization, asked_at=now)
        except InvalidRequest as exc:
            field = getattr(exc, "field", None) or "spec.parameters"
            answer = Parameters(d.uid, d.generation, problem=Problem(
                "InvalidParameters", one_line(f"{field}: {exc}"), field), asked_at=now)
        except NotLeader:
            raise
        except ProviderError as exc:
            if exc.kind is ErrorKind.INVALID:
                answer = Parameters(d.uid, d.generation, problem=Problem(
                    "InvalidParameters", one_line(f"spec.parameters: {exc}"),
                    "spec.parameters"), asked_at=now)
            else:
                # transient: a Subnet accepted before stays as it was while this retries
                before = known is not None and known.uid == d.uid and (
                    known.problem is None or known.as_before)
                self.catalog.set_parameters(d.name, Parameters(
                    d.uid, d.generation, realization=known.realization if before and known
                    else None, as_before=before, asked_at=now, problem=Problem(
                        "ProviderError", one_line(f"provider {info.provider}: {exc}"))))
                raise
        self.catalog.set_parameters(d.name, answer)

    def _settle(self, kind: str, name: str) -> None:
        """After a pass: its status marked, its verdict said, every provider's set
        published."""
        self._mark((kind, name))
        ev = self.catalog.evaluation()
        entry = self._entries(ev, kind).get(name)
        if entry is not None:
            self._say(kind, *entry)
        self.publish()

    def _deleting(self, kind: str, d: Declared) -> Result:
        """A Subnet or IPPool being deleted: its finalizer off once no record holds one of
        its addresses; meanwhile its status says who does."""
        self.publish()  # it serves no new pod from now on
        if NETWORK_FINALIZER not in d.finalizers:
            return DONE
        holders = self._holders(kind, d)
        if holders:
            self._mark((kind, d.name))
            message = self._in_use_message(kind, d, holders)
            if self._said.get((kind, d.name)) != ("InUse", message):
                self._said[(kind, d.name)] = ("InUse", message)
                self._event(kind, d, "InUse", message, warning=False)
            return DONE
        finalizers = [f for f in d.finalizers if f != NETWORK_FINALIZER]
        try:
            self.cluster.patch(_KINDS[kind], d.name, {"metadata": {
                "finalizers": finalizers or None, "resourceVersion": d.resource_version}})
            self.writes[_KINDS[kind].plural] += 1
        except NotFound:
            pass
        log.info("%s %s: no record holds its addresses; deleted", d.kind, d.name)
        return DONE

    def _held_view(self, kind: str, d: Declared) -> Any:
        """What records may hold in ``d``: its spec as read, else (a spec that stopped
        reading) its provider and blocks read leniently, else its last spec that read."""
        if d.info is not None:
            return d.info
        if d.footprint is not None:
            return d.footprint
        last = self._last_read.get((kind, d.name))
        return last[1] if last is not None and last[0] == d.uid else None

    def _holders(self, kind: str, d: Declared) -> list[tuple[str, str]]:
        ev = self.catalog.evaluation()
        info = self._held_view(kind, d)
        if kind == SUBNET_KEY and isinstance(info, SubnetInfo):
            self._track(ev, info.provider)
            others = [e[0].info for e in ev.subnets.values() if isinstance(e[0].info, SubnetInfo)
                      and e[0].info.provider == info.provider]
            return list(self.usage.subnet_usage(info, others).holders)
        if kind == POOL_KEY and isinstance(info, IPPoolInfo):
            subnet = ev.subnets.get(info.subnet)
            subnet_info = self._held_view(SUBNET_KEY, subnet[0]) if subnet else None
            if not isinstance(subnet_info, SubnetInfo):
                return []
            provider = subnet_info.provider
            self._track(ev, provider)
            _, held = self.usage.pool_usage(info, provider, subnet_info)
            return [(h.pod_network, h.ip) for h in held]
        return []

    @staticmethod
    def _in_use_message(kind: str, d: Declared, holders: list[tuple[str, str]]) -> str:
        records = sorted({k for k, _ in holders})
        named = ", ".join(records[:IN_USE_NAMED]) + (" ..." if len(records) > IN_USE_NAMED
                                                     else "")
        return (f"{d.kind} {d.name} is being deleted; {len(records)} record"
                f"{'s' if len(records) != 1 else ''} still hold its addresses ({named}): "
                "it goes once they are released")

    def _keep_finalizer(self, kind: str, d: Declared) -> None:
        """The finalizer on a live Subnet or IPPool: it serves no pod before (what a pod
        took from it would not hold its deletion back)."""
        if NETWORK_FINALIZER in d.finalizers:
            # the cache shows it: what the cache says decides from now on (taken off by
            # hand, it is put back here, and the object serves no pod meanwhile)
            self.catalog.finalized.discard(d.uid)
            return
        try:
            self.cluster.patch(_KINDS[kind], d.name, {"metadata": {
                "finalizers": [*d.finalizers, NETWORK_FINALIZER],
                "resourceVersion": d.resource_version}})
            self.writes[_KINDS[kind].plural] += 1
        except NotFound:
            return
        self.catalog.mark_finalized(d.uid)

    def _forget(self, kind: str, name: str) -> None:
        key = (kind, name)
        with self._lock:
            self._dirty.discard(key)
            self._last_write.pop(key, None)
            self._written.pop(key, None)
            self._said.pop(key, None)
            self._last_read.pop(key, None)
            if kind == SUBNET_KEY:
                for o in self._outside_by_subnet.pop(name, ()):
                    if self.outside.get(o.record) == o:
                        del self.outside[o.record]
                        self._wake_record(o.record)

    # --- Events ----------------------------------------------------------------------------

    def _say(self, kind: str, d: Declared, verdict: Verdict) -> None:
        """An Event when the verdict changed: Warning for a problem, Normal once Ready
        (not again after a restart when the status says it already)."""
        said = (verdict.reason, verdict.message)
        key = (kind, d.name)
        if self._said.get(key) == said:
            return
        first = key not in self._said
        self._said[key] = said
        if first and _status_says(d.status, verdict):
            return
        if verdict.ready:
            self._event(kind, d, "Ready", f"{d.kind} {d.name} is Ready", warning=False)
        elif verdict.reason not in _QUIET:
            self._event(kind, d, verdict.reason, f"{d.kind} {d.name} is not Ready: "
                        f"{verdict.message}", warning=True)

    def _event(self, kind: str, d: Declared, reason: str, message: str, *, warning: bool
               ) -> None:
        k = _KINDS[kind]
        involved = {"apiVersion": k.api_version, "kind": k.kind,
                    "metadata": {"name": d.name, "uid": d.uid}}
        try:
            self.cluster.emit_event(involved, reason, one_line(message),
                                    type="Warning" if warning else "Normal")
            self.writes["events"] += 1
        except ApiError as exc:
            log.debug("event %s dropped: %s", reason, exc)

    # --- publishing ------------------------------------------------------------------------

    def publish(self) -> None:
        """Tell each provider its usable set when it changed (the first time always), and
        wake what waited for it. One publisher at a time: a provider hears the sets in
        the order of their revisions."""
        with self._publishing:
            self._publish()

    def _publish(self) -> None:
        ev = self.catalog.evaluation()
        groups = {g.name: g for g in ev.networks("").security_groups}
        with self._lock:
            before, self._groups = self._groups, groups
        changed = {n for n in {*(before or {}), *groups}
                   if (before or {}).get(n) != groups.get(n)}
        for provider in sorted(self.providers()):
            if provider in ev.with_subnets:
                self._track(ev, provider)
            nets = ev.networks(provider)
            with self._lock:
                last = self.published.get(provider)
                if last is not None and attrs.evolve(last, revision=0) == nets:
                    continue
                self._revision += 1
                nets = attrs.evolve(nets, revision=self._revision)
                self.published[provider] = nets
                woken = self._waiting.pop(provider, set())
            self.gateway.networks_changed(provider, nets)
            log.info("provider %s: %d Subnets, %d IPPools, %d SecurityGroups usable "
                     "(revision %d)", provider, len(nets.subnets), len(nets.pools),
                     len(nets.security_groups), nets.revision)
            for pod_key in woken:
                self.enqueue.pod(pod_key)
        if changed and before is not None:
            self.on_groups_changed(changed)

    def _track(self, ev: Evaluation, provider: str) -> None:
        if self.usage.track(provider, self.caches.pod_networks.values()):
            for name, (d, _) in ev.subnets.items():
                if isinstance(d.info, SubnetInfo) and d.info.provider == provider:
                    self._mark((SUBNET_KEY, name))

    # --- status ----------------------------------------------------------------------------

    def _mark(self, key: tuple[str, str]) -> None:
        """``key``'s status is to be written (by the timer, at most once a second)."""
        with self._lock:
            if key in self._dirty:
                return
            self._dirty.add(key)
        self.queue.add(STATUS_KEY)

    def flush(self, _: str = "") -> Result:
        """Write the status of every dirty object last written a second or more ago; the
        rest at their turn."""
        now = self.clock.monotonic()
        with self._lock:
            due, later = [], []
            for key in self._dirty:
                at = self._last_write.get(key)
                if at is not None and now < at + STATUS_PERIOD:
                    later.append(at + STATUS_PERIOD)
                else:
                    due.append(key)
            self._dirty.difference_update(due)
        # Subnets first: their outside addresses are what pods' records are told
        for key in sorted(due, key=lambda k: (k[0] != SUBNET_KEY, k)):
            try:
                self._write_status(*key)
            except (Conflict, NotFound):
                pass
            except ApiError:
                with self._lock:
                    self._dirty.add(key)
                raise
        if later:
            return Result(requeue_after=max(min(later) - now, 0.001))
        return DONE

    def _write_status(self, kind: str, name: str) -> None:
        ev = self.catalog.evaluation()
        entry = self._entries(ev, kind).get(name)
        if entry is None:
            return
        d, verdict = entry
        if kind == SUBNET_KEY:
            status: dict[str, Any] = to_wire(self._subnet_status(ev, d, verdict))
        elif kind == POOL_KEY:
            status = to_wire(self._pool_status(ev, d, verdict))
        else:
            status = to_wire(self._group_status(d, verdict))
        key = (kind, name)
        if _same(status, d.status) or _same(status, self._written.get(key)):
            return
        patch = {**{k: None for k in d.status if k not in status}, **status}
        self.cluster.patch(_KINDS[kind], name, {"status": patch}, subresource="status")
        self.writes[_KINDS[kind].plural] += 1
        with self._lock:
            self._last_write[key] = self.clock.monotonic()
            self._written[key] = status

    def _conditions(self, d: Declared, *new: Condition) -> tuple[Condition, ...]:
        current: tuple[Condition, ...] = ()
        for raw in d.status.get("conditions") or ():
            try:
                current += (from_wire(Condition, raw),)
            except RecordError:
                continue
        for c in new:
            current = set_condition(current, c)
        return current

    def _ready(self, d: Declared, verdict: Verdict, reason: str | None = None,
               message: str | None = None) -> Condition:
        return Condition(type=READY, status="True" if verdict.ready else "False",
                         reason=reason or verdict.reason,
                         message=message if message is not None else verdict.message,
                         last_transition_time=self.clock.now(),
                         observed_generation=d.generation)

    def _phase(self, d: Declared, verdict: Verdict) -> str:
        if d.deleting:
            return "Terminating"
        if verdict.ready:
            return "Ready"
        return "Pending" if verdict.reason == "Pending" else "NotReady"

    def _subnet_status(self, ev: Evaluation, d: Declared, verdict: Verdict) -> SubnetStatus:
        info = self._held_view(SUBNET_KEY, d) if d.deleting else d.info
        counts: Mapping[int, tuple[int, int, int, int]] = {}
        outside: tuple[Outside, ...] = ()
        reason = message = None
        if isinstance(info, SubnetInfo):
            self._track(ev, info.provider)
            others = [e[0].info for e in ev.subnets.values()
                      if isinstance(e[0].info, SubnetInfo) and e[0].info.provider == info.provider]
            use = self.usage.subnet_usage(info, others, serving=verdict.reason != "Overlaps")
            counts, outside = use.counts, use.outside
            self._set_outside(d, outside)
            if d.deleting and use.holders:
                reason, message = "InUse", self._in_use_message(
                    SUBNET_KEY, d, list(use.holders))
        conditions = [self._ready(d, verdict, reason, message)]
        if outside or any(c.get("type") == ADDRESSES_OUTSIDE
                          for c in d.status.get("conditions") or () if isinstance(c, dict)):
            conditions.append(Condition(
                type=ADDRESSES_OUTSIDE, status="True" if outside else "False",
                reason="HeldOutside" if outside else "NoneOutside",
                message=(f"{len(outside)} record(s) hold addresses this Subnet excludes or no "
                         "longer contains; they keep them until released") if outside else "",
                last_transition_time=self.clock.now(), observed_generation=d.generation))
        answer = self.catalog.parameters.get(d.name)
        realization = answer.realization if answer is not None else None
        v4, v6 = counts.get(4), counts.get(6)
        return SubnetStatus(
            phase=self._phase(d, verdict), observed_generation=d.generation,
            conditions=self._conditions(d, *conditions),
            v4_available_ips=v4[0] if v4 else None, v4_using_ips=v4[1] if v4 else None,
            v4_reserved_ips=v4[2] if v4 else None, v4_excluded_ips=v4[3] if v4 else None,
            v6_available_ips=_number(v6[0]) if v6 else None,
            v6_using_ips=_number(v6[1]) if v6 else None,
            v6_reserved_ips=_number(v6[2]) if v6 else None,
            v6_excluded_ips=_number(v6[3]) if v6 else None,
            outside_ips=tuple(o.line for o in outside[:OUTSIDE_LISTED]),
            provider=ProviderRealization(summary=realization.summary,
                                         details=dict(realization.details))
            if realization is not None else None)

    def _set_outside(self, d: Declared, outside: tuple[Outside, ...]) -> None:
        """The records holding addresses the Subnet ``d`` excludes or lost: those whose
        standing changed are queued (their pass writes ``AddressExcluded``); records new
        to the list are said in a Warning Event on the Subnet."""
        subnet = d.name
        with self._lock:
            first = subnet not in self._outside_by_subnet
            before = self._outside_by_subnet.get(subnet, ())
            if before == outside:
                return
            self._outside_by_subnet[subnet] = outside
            changed = set()
            now = {o.record: o for o in outside}
            for o in before:
                if o.record not in now and self.outside.get(o.record) == o:
                    del self.outside[o.record]
                    changed.add(o.record)
            for record, o in now.items():
                if self.outside.get(record) != o:
                    self.outside[record] = o
                    changed.add(record)
        for record in changed:
            self._wake_record(record)
        new = [o for o in outside if o not in before]
        said = set(d.status.get("outsideIPs") or ())
        if first and {o.line for o in new[:OUTSIDE_LISTED]} <= said:
            new = []  # a restart: the status says them already, and so did an Event
        if new:
            lines = ", ".join(o.line for o in new[:IN_USE_NAMED]) + (
                " ..." if len(new) > IN_USE_NAMED else "")
            self._event(SUBNET_KEY, d, "AddressesOutside",
                        f"Subnet {subnet}: {len(new)} record(s) hold addresses it excludes or "
                        f"no longer contains ({lines}); they keep them until released",
                        warning=True)

    def _wake_record(self, record: str) -> None:
        pn = self.caches.pod_networks.get(record)
        if pn is not None:
            self.enqueue.pod_of(pn)

    def _pool_status(self, ev: Evaluation, d: Declared, verdict: Verdict) -> IPPoolStatus:
        pool = self._held_view(POOL_KEY, d) if d.deleting else d.info
        counts: Mapping[int, tuple[int, int]] = {}
        held: tuple[Any, ...] = ()
        reason = message = None
        if isinstance(pool, IPPoolInfo):
            subnet = ev.subnets.get(pool.subnet)
            info = subnet[0].info if subnet is not None else None
            if isinstance(info, SubnetInfo):
                self._track(ev, info.provider)
                counts, held = self.usage.pool_usage(pool, info.provider, info)
                if d.deleting and held:
                    reason, message = "InUse", self._in_use_message(
                        POOL_KEY, d, [(h.pod_network, h.ip) for h in held])
        v4, v6 = counts.get(4), counts.get(6)
        return IPPoolStatus(
            phase=self._phase(d, verdict), observed_generation=d.generation,
            conditions=self._conditions(d, self._ready(d, verdict, reason, message)),
            v4_available_ips=v4[0] if v4 else None, v4_using_ips=v4[1] if v4 else None,
            v6_available_ips=_number(v6[0]) if v6 else None,
            v6_using_ips=_number(v6[1]) if v6 else None,
            held=held[:HELD_LISTED])

    def _group_status(self, d: Declared, verdict: Verdict) -> SecurityGroupStatus:
        group = d.info
        return SecurityGroupStatus(
            phase=self._phase(d, verdict), observed_generation=d.generation,
            conditions=self._conditions(d, self._ready(d, verdict)),
            ingress_rules=len(group.ingress) if isinstance(group, SecurityGroupInfo) else None,
            egress_rules=len(group.egress) if isinstance(group, SecurityGroupInfo) else None)

    # --- helpers -----------------------------------------------------------------------

    def _informer(self, kind: str) -> Informer[Declared]:
        return {SUBNET_KEY: self.caches.subnets, POOL_KEY: self.caches.ip_pools,
                GROUP_KEY: self.caches.security_groups}[kind]

    @staticmethod
    def _entries(ev: Evaluation, kind: str) -> Mapping[str, tuple[Declared, Verdict]]:
        return {SUBNET_KEY: ev.subnets, POOL_KEY: ev.pools, GROUP_KEY: ev.groups}[kind]


def _key_kind(d: Declared) -> str:
    return {"Subnet": SUBNET_KEY, "IPPool": POOL_KEY}.get(d.kind, GROUP_KEY)


def _number(n: int) -> float | int:
    """A v6 count: an integer while JSON readers keep it exact, else a float."""
    return n if n < 2**53 else float(n)


def _status_says(status: Mapping[str, Any], verdict: Verdict) -> bool:
    for c in status.get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == READY:
            return (c.get("reason"), c.get("message", "")) == (verdict.reason, verdict.message)
    return False


def _strip_times(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_times(v) for k, v in value.items() if k != "lastTransitionTime"}
    if isinstance(value, list):
        return [_strip_times(v) for v in value]
    return value


def _same(status: Mapping[str, Any], other: Mapping[str, Any] | None) -> bool:
    """The same status but for transition times (kept while a condition holds)."""
    return other is not None and _strip_times(dict(status)) == _strip_times(dict(other))
