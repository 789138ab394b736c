"""The NetworkPolicy reconciler: each policy resolved, programmed where its provider
enforces it, and its realization said on the policy.

Queue keys ``("netpol", "<namespace>/<name>")``, one per policy, ``reconcile(key) ->
Result`` as controller-runtime's reconcilers are (level-triggered: a pass reads the
policy and everything it selects as they are now), and ``("netpolkeys", "")``, the sweep
at start of what providers programmed for policies deleted meanwhile. A pass:

- resolves the policy (:func:`podnet.core.netpol.resolve.resolve`) over core's caches:
  the pods it selects with their default network's addresses, its peers as CIDRs, its
  named ports as numbers;
- for each provider that enforces policy itself (``ProviderInfo.network_policy`` is
  ``Enforcement.PROVIDER``) calls ``podnet_network_policy`` with the members restricted
  to that provider's pods (``None`` once it has none left), when that changed or on
  resync; the other providers' pods are enforced by their node agents, which resolve the
  same way;
- writes the policy's ``podnet.io/status`` annotation (:mod:`podnet.core.netpol.status`:
  ``Accepted``, ``Programmed`` from the providers' answers and the agents' reports) when
  it changed;
- says each finding in a Warning Event once per generation (reason: the finding's,
  message naming the field), and a provider's failure; waiting for a member's address or
  an agent's report is not failing: no Warning.

Whatever can change a policy's resolution requeues it: the policy itself, a pod's
labels, named ports, node or host networking, its default network's addresses, a
namespace's labels, a node's addresses; an agent's report requeues the policies with a
member on its node. A pod event costs one test while no policy exists.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from podnet.core.caches import Caches, pod_key_of
from podnet.core.clock import Clock, format_time
from podnet.core.cluster.port import NETWORK_POLICY, ApiError, NotFound
from podnet.core.enqueue import Key
from podnet.core.errors import NotLeader, PodnetError, one_line
from podnet.core.gateway import ProviderGateway
from podnet.core.models import DEFAULT_NETWORK, NodeInfo, Phase, PodInfo, PodNetwork
from podnet.core.netpol.resolve import PolicyIndex, resolve
from podnet.core.netpol.status import (
    STATUS_ANNOTATION,
    AgentPolicyReport,
    PolicyStatus,
    encode_status,
    policy_status,
    read_status,
)
from podnet.core.netpol.wire import PolicySpec, StoredPolicy
from podnet.core.reconcile.result import DONE, Result
from podnet.core.tracing import Tracing
from podnet.core.workqueue import WorkQueue
from podnet.hookspecs.netpol import (
    NETWORK_POLICY_GROUP,
    NETWORK_POLICY_KIND,
    FindingReason,
    PolicyRealization,
    ResolvedPolicy,
)

log = logging.getLogger("podnet.netpol")

NETPOL_KEY = "netpol"
#: the sweep at start: what providers programmed for policies that are gone
NETPOL_KEYS_KEY: Key = ("netpolkeys", "")
#: a policy is resolved and handed to its providers again this often (seconds) even when
#: nothing changed: what a dataplane lost is put back
RESYNC = 600.0
#: while the policies are not listed yet, the sweep waits this long (seconds)
SWEEP_WAIT = 5.0
#: a provider waiting for its dataplane to catch up is asked again this soon (seconds)
WAIT_AGAIN = 1.0
#: the pods' index by namespace, added when the first policy is seen
NAMESPACE_INDEX = "namespace"
SPAN_NAME = "netpol.program"


class CacheView:
    """:class:`~podnet.core.netpol.resolve.PolicyView` over core's caches: pods by
    namespace, namespaces' labels, each pod's default network's addresses once its record
    is Routed, nodes' InternalIP addresses."""

    def __init__(self, caches: Caches) -> None:
        self.caches = caches

    def pods(self) -> Iterable[PodInfo]:
        return self.caches.pods.values()

    def pods_in(self, namespace: str) -> Iterable[PodInfo]:
        return self.caches.pods.by_index(NAMESPACE_INDEX, namespace)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        info = self.caches.namespaces.get(name)
        return None if info is None else info.labels

    def namespaces(self) -> Iterable[str]:
        return self.caches.namespaces.keys()

    def _record(self, pod: PodInfo) -> PodNetwork | None:
        for pn in self.caches.pod_networks.by_index("pod", pod.key):
            if pn.spec.network == DEFAULT_NETWORK and pn.status.phase is Phase.ROUTED:
                return pn
        return None

    def addresses_of(self, pod: PodInfo) -> tuple[str, ...]:
        pn = self._record(pod)
        if pn is None:
            return ()
        return tuple(a for a in (pn.status.ip, pn.status.ipv6) if a)

    def provider_of(self, pod: PodInfo) -> str | None:
        pn = self._record(pod)
        return None if pn is None else pn.spec.provider

    def node_addresses(self, node: str) -> tuple[str, ...]:
        info = self.caches.nodes.get(node)
        return () if info is None else info.internal_ips


def _policy_fields(pod: PodInfo) -> tuple[object, ...]:
    """What of a pod a policy's resolution reads (its addresses aside)."""
    return (pod.labels, pod.named_ports, pod.host_network, pod.node_name,
            pod.phase in ("Succeeded", "Failed"))


def _routed(pn: PodNetwork | None) -> tuple[object, ...] | None:
    """What of a record a policy's resolution reads: the default network's addresses
    once Routed, its provider and node."""
    if pn is None or pn.spec.network != DEFAULT_NETWORK or pn.status.phase is not Phase.ROUTED:
        return None
    return (pn.status.ip, pn.status.ipv6, pn.spec.provider, pn.spec.node_name)


@attrs.frozen
class _Sent:
    """What a provider was last handed for a policy, what it answered, and when."""

    policy: ResolvedPolicy | None
    answer: PolicyRealization
    at: float


@attrs.define
class _Said:
    """What the Events said of a policy's generation (and spec: a cluster that keeps no
    generation on NetworkPolicies leaves it 0)."""

    uid: str
    generation: int
    spec: PolicySpec
    tags: set[str] = attrs.field(factory=set)


class NetworkPolicyReconciler:
    """Takes the caches, the cluster writes go to (fenced), the queue, the gateway, the
    provider infos (which enforce policy themselves), the clock, tracing and the engine's
    write counter. ``enforce=False`` (config ``networkPolicy: none``): no policy is
    reconciled, and the providers are told to remove every policy they have."""

    def __init__(self, *, caches: Caches, cluster: Any, queue: WorkQueue[Key],
                 gateway: ProviderGateway, provider_enforced: Iterable[str], clock: Clock,
                 tracing: Tracing, writes: Counter[str], enforce: bool = True) -> None:
        self.caches = caches
        self.cluster = cluster
        self.queue = queue
        self.gateway = gateway
        #: the providers that program policy themselves (the others' node agents do)
        self.provider_enforced = frozenset(provider_enforced)
        self.clock = clock
        self.tracing = tracing
        self.writes = writes
        self.enforce = enforce
        self.view = CacheView(caches)
        self.index = PolicyIndex()
        #: a policy exists: the pod handlers have work (read without the lock)
        self.active = False
        self._lock = threading.Lock()
        self._indexed_namespaces = False
        #: node -> the policies with a member on it (an agent's report, a node's addresses)
        self._by_node: dict[str, set[str]] = {}
        self._nodes_of: dict[str, frozenset[str]] = {}
        #: (policy key, provider) -> what it was last handed
        self._sent: dict[tuple[str, str], _Sent] = {}
        #: (policy key, provider) the provider has something programmed for (the sweep
        #: found it at start): removed once the policy has none of its pods
        self._held: set[tuple[str, str]] = set()
        self._said: dict[str, _Said] = {}
        #: each namespace's labels, kept from the namespace events: a pod's handler runs
        #: under the pods cache's lock and must not take the namespaces cache's (whose
        #: handlers take the records cache's, whose handlers take the pods cache's)
        self._namespace_labels: dict[str, Mapping[str, str]] = {}

    def start(self) -> None:
        """Queue the sweep of what providers hold for policies gone meanwhile (handlers
        are added by the engine)."""
        if self.provider_enforced:
            self.queue.add(NETPOL_KEYS_KEY)

    # --- informer handlers ----------------------------------------------------------------

    def on_policy(self, _event: str, key: str, old: StoredPolicy | None,
                  new: StoredPolicy | None) -> None:
        with self._lock:
            if new is None:
                self.index.remove(key)
            else:
                self.index.put(new.spec)
            self.active = len(self.index) > 0
        if old is not None and new is not None and old.spec == new.spec:
            return  # only its status annotation: the write of a pass
        self.queue.add((NETPOL_KEY, key))

    def on_pod(self, _event: str, _key: str, old: PodInfo | None, new: PodInfo | None
               ) -> None:
        if not self.active:
            return
        if old is not None and new is not None and _policy_fields(old) == _policy_fields(new):
            return
        pod = new or old
        if pod is None:
            return
        self._requeue_for_pod([old, new], pod.namespace)

    def on_pod_network(self, _event: str, _key: str, old: PodNetwork | None,
                       new: PodNetwork | None) -> None:
        if not self.active:
            return
        if _routed(old) == _routed(new):
            return
        pn = new or old
        if pn is None:
            return
        pod = self.caches.pods.get(pod_key_of(pn))
        if pod is not None:  # a pod gone: its own event requeued what it was in
            self._requeue_for_pod([pod], pod.namespace)

    def on_namespace(self, _event: str, key: str, old: Any, new: Any) -> None:
        before = None if old is None else old.labels
        after = None if new is None else new.labels
        if before == after:
            return
        with self._lock:
            if after is None:
                self._namespace_labels.pop(key, None)
            else:
                self._namespace_labels[key] = after
            if not self.active:
                return
            keys = self.index.for_namespace(key, before, after)
        self._add(keys)

    def on_node(self, _event: str, key: str, old: NodeInfo | None, new: NodeInfo | None
                ) -> None:
        if not self.active:
            return
        if (None if old is None else old.internal_ips) == (
                None if new is None else new.internal_ips):
            return
        with self._lock:
            keys = sorted(self._by_node.get(key, ()))
        self._add(keys)

    def on_agent_report(self, _event: str, _key: str, old: AgentPolicyReport | None,
                        new: AgentPolicyReport | None) -> None:
        report = new or old
        if report is None or not self.active:
            return
        said: set[str] = set()
        for r in (old, new):
            if r is not None:
                said.update(r.programmed)
                said.update(r.failed)
        with self._lock:
            keys = set(self._by_node.get(report.node, ()))
            keys.update(k for k in said if k in self.index)
        self._add(sorted(keys))

    def selecting(self, provider: str, pod: PodInfo | None) -> tuple[str, ...]:
        """The policies that select ``pod``, for a provider that enforces them itself:
        its new port joins them as it is made (``AllocateContext.network_policies``)."""
        if pod is None or not self.active or provider not in self.provider_enforced:
            return ()
        with self._lock:
            return tuple(self.index.selecting(pod))

    def _requeue_for_pod(self, pods: list[PodInfo | None], namespace: str) -> None:
        with self._lock:
            keys = self.index.for_pod(pods, self._namespace_labels.get(namespace))
        self._add(keys)

    def _add(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add((NETPOL_KEY, key))

    # --- one policy ---------------------------------------------------------------------

    def _ensure_index(self) -> None:
        if not self._indexed_namespaces:
            # added with the first policy: a cluster without any pays nothing per pod
            self.caches.pods.add_index(NAMESPACE_INDEX, lambda p: [p.namespace])
            self._indexed_namespaces = True

    def reconcile(self, key: str) -> Result:
        if not self.enforce:
            return DONE
        stored = self.caches.network_policies.get(key)
        if stored is None:
            return self._gone(key)
        self._ensure_index()
        spec = stored.spec
        resolved = resolve(spec, self.view)
        rules = sum(len(r) for r in (resolved.ingress, resolved.egress) if r is not None)
        error: PodnetError | None = None
        with self.tracing.internal(SPAN_NAME, {
                "podnet.netpol.key": key, "podnet.netpol.generation": spec.generation,
                "podnet.netpol.members": len(resolved.members),
                "podnet.netpol.rules": rules}):
            answers, error = self._program(key, resolved)
        nodes = frozenset(m.node for m in resolved.members)
        with self._lock:
            self._file_nodes(key, nodes)
        provider_findings = tuple(f for a in answers.values() if a is not None
                                  for f in a.findings)
        seen = attrs.evolve(resolved, findings=resolved.findings + provider_findings)
        previous = read_status(stored.status)
        reports = {node: report for node in nodes
                   if (report := self.caches.agent_policy_report_of(node)) is not None}
        status = policy_status(
            seen, provider_enforced=self.provider_enforced, provider_answers=answers,
            reports=reports, previous=previous, now=format_time(self.clock.now()))
        self._write_status(spec.namespace, spec.name, stored.status, status)
        self._say(stored, seen, answers, previous)
        if error is not None:
            raise error  # retried with backoff; the status says it is not programmed
        if any(a is not None and a.waiting and not a.programmed for a in answers.values()):
            return Result(WAIT_AGAIN)  # the dataplane catching up: asked again soon
        return Result(RESYNC)

    def _program(self, key: str, resolved: ResolvedPolicy
                 ) -> tuple[dict[str, PolicyRealization | None], PodnetError | None]:
        """Hand each enforcing provider its share of the policy; their answers (None:
        not asked yet and nothing to say) and the first error."""
        answers: dict[str, PolicyRealization | None] = {}
        error: PodnetError | None = None
        now = self.clock.monotonic()
        for provider in sorted(self.provider_enforced):
            members = tuple(m for m in resolved.members if m.provider == provider)
            share = attrs.evolve(resolved, members=members) if members else None
            with self._lock:
                sent = self._sent.get((key, provider))
                held = (key, provider) in self._held
            if share is None and sent is None and not held:
                continue  # nothing of it there, nothing to remove
            if (sent is not None and sent.policy == share and sent.answer.programmed
                    and now - sent.at < RESYNC):
                answers[provider] = sent.answer
                continue
            try:
                answer = self.gateway.network_policy(provider, key, share)
            except NotLeader:
                raise
            except PodnetError as exc:
                answer = PolicyRealization(programmed=False, message=one_line(str(exc)))
                error = error or exc
            with self._lock:
                if share is None and answer.programmed:
                    self._sent.pop((key, provider), None)
                    self._held.discard((key, provider))
                else:
                    self._sent[(key, provider)] = _Sent(share, answer, now)
                    self._held.add((key, provider))
            if share is not None:
                answers[provider] = answer
        return answers, error

    def _gone(self, key: str) -> Result:
        """The policy is deleted: every provider that has it removes it."""
        error: PodnetError | None = None
        with self._lock:  # other workers file other policies meanwhile
            holders = sorted({p for (k, p) in (*self._sent, *self._held) if k == key})
        for provider in holders:
            try:
                answer = self.gateway.network_policy(provider, key, None)
            except NotLeader:
                raise
            except PodnetError as exc:
                error = error or exc
                continue
            if answer.programmed:
                with self._lock:
                    self._sent.pop((key, provider), None)
                    self._held.discard((key, provider))
        with self._lock:
            self._file_nodes(key, frozenset())
        self._said.pop(key, None)
        if error is not None:
            raise error
        return DONE

    def _file_nodes(self, key: str, nodes: frozenset[str]) -> None:
        before = self._nodes_of.get(key, frozenset())
        if before == nodes:
            return
        for node in before - nodes:
            keys = self._by_node.get(node)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_node[node]
        for node in nodes - before:
            self._by_node.setdefault(node, set()).add(key)
        if nodes:
            self._nodes_of[key] = nodes
        else:
            self._nodes_of.pop(key, None)

    def sweep(self, _name: str) -> Result:
        """At start: each enforcing provider's programmed policies; those no policy has
        any more (or all, when policy is left to another engine) are removed, the others
        reconciled (a policy that has none of the provider's pods any more is removed
        there by its pass)."""
        if self.enforce and not self.caches.network_policies.has_synced:
            return Result(SWEEP_WAIT)
        error: PodnetError | None = None
        for provider in sorted(self.provider_enforced):
            try:
                keys = self.gateway.network_policy_keys(provider)
            except NotLeader:
                raise
            except PodnetError as exc:
                error = error or exc
                continue
            for key in sorted(keys or ()):
                if self.enforce and key in self.caches.network_policies:
                    with self._lock:
                        self._held.add((key, provider))
                    self.queue.add((NETPOL_KEY, key))
                    continue
                try:
                    self.gateway.network_policy(provider, key, None)
                except NotLeader:
                    raise
                except PodnetError as exc:
                    error = error or exc
        if error is not None:
            raise error
        return DONE

    # --- what is said of it ------------------------------------------------------------

    def _write_status(self, namespace: str, name: str, written: str | None,
                      status: PolicyStatus) -> None:
        text = encode_status(status)
        if text == written:
            return
        try:
            self.cluster.patch(NETWORK_POLICY, name,
                               {"metadata": {"annotations": {STATUS_ANNOTATION: text}}},
                               namespace)
            self.writes["networkpolicy_status"] += 1
        except NotFound:
            pass  # deleted meanwhile: its deletion requeues it

    def _say(self, stored: StoredPolicy, resolved: ResolvedPolicy,
             answers: Mapping[str, PolicyRealization | None],
             previous: PolicyStatus | None) -> None:
        spec = stored.spec
        said = self._said.get(spec.key)
        if said is None or (said.uid, said.generation, said.spec) != (
                spec.uid, spec.generation, spec):
            fresh = _Said(spec.uid, spec.generation, spec)
            if said is None and previous is not None and (
                    previous.observed_generation == spec.generation):
                # a restart: this generation's status (and so its Events) was written
                # before; what the reading finds is said already
                fresh.tags.update(_tag(f.field, f.reason) for f in resolved.findings
                                  if f.reason is not FindingReason.UNRESOLVED_NAMED_PORT)
            said = self._said[spec.key] = fresh
        involved = {"apiVersion": f"{NETWORK_POLICY_GROUP}/v1", "kind": NETWORK_POLICY_KIND,
                    "metadata": {"name": spec.name, "namespace": spec.namespace,
                                 "uid": spec.uid}}
        for f in resolved.findings:
            tag = _tag(f.field, f.reason)
            if tag not in said.tags:
                said.tags.add(tag)
                self._event(involved, f.reason.value, f"{f.field}: {f.message}")
        for provider, answer in sorted(answers.items()):
            if answer is None or answer.programmed or answer.waiting:
                continue  # a wait is no failure: no Warning Event
            tag = f"provider/{provider}/{answer.message}"
            if tag not in said.tags:
                said.tags.add(tag)
                self._event(involved, "NotProgrammed",
                            f"provider {provider} did not program it: {answer.message}")

    def _event(self, involved: dict[str, Any], reason: str, message: str) -> None:
        try:
            self.cluster.emit_event(involved, reason, one_line(message), type="Warning")
            self.writes["events"] += 1
        except ApiError as exc:
            log.debug("event %s dropped: %s", reason, exc)


def _tag(field: str, reason: FindingReason) -> str:
    return f"{reason.value}/{field}"
