"""The node agent's NetworkPolicy enforcer: the policies that select pods this agent
plugged, resolved as the controller resolves them (``podnet.core.netpol``), programmed
as the nftables table ``inet podnet`` (``podnet.linux.nftables``).

- **What it reads**, read only, through informers of its own: NetworkPolicies and
  Namespaces cluster-wide; the pods bound to this node (a ``spec.nodeName`` field
  selector: the members); and the pods and PodNetworks of the namespaces where the
  policies that select a pod of this node can find peers (:func:`peer_namespaces`:
  their own namespace, those their ``namespaceSelector`` peers match; every namespace,
  one cluster-wide watch, when a selector matches any namespace or more than
  :data:`MAX_PEER_NAMESPACES` match). A node none of whose pods a policy selects
  follows no pod of another node and no record but its own: the cluster's pod churn
  costs it nothing.
- **Whose pods**: the members on this node whose default network's record is of a
  provider enforced by the node (``ProviderInfo.network_policy`` is ``Enforcement.NODE``)
  and which this host plugged (their host interface from the dataplane's plugs).
- **When**: one programming thread, woken by any change and debounced; the table is
  rendered whole and applied only when it differs from the one in place (one ``nft``
  transaction). At the agent's start it is rebuilt from the API before the agent serves
  ADD; an ADD programs its pod before it answers (:meth:`PolicyEnforcer.admit`: no
  moment where a selected pod runs open); a DEL's pod leaves the table at the next pass.
- **What it says**: the report Lease's annotation ``podnet.io/network-policies`` (the
  policies with a member on this node, programmed at a generation or failed with why).
- **Interop**: with ``enforce=False`` (``podnet node --network-policy none``) it removes
  its table and programs nothing: another engine chained after podnet enforces policy.

A node with no policy member has no table at all: a cluster without policies pays nothing
in its packet path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import (
    NAMESPACE,
    NETWORK_POLICY,
    POD,
    POD_NETWORK,
    ApiError,
    Cluster,
    Obj,
)
from podnet.core.convert import RecordError, from_wire
from podnet.core.models import DEFAULT_NETWORK, PodNetwork
from podnet.core.netpol.resolve import namespace_view, pod_peers, resolve, selects
from podnet.core.netpol.status import (
    AGENT_REPORT_ANNOTATION,
    AgentPolicyReport,
    encode_agent_report,
)
from podnet.core.netpol.wire import PolicySpec, read_policy
from podnet.core.objects import pod_info, record_finished
from podnet.hookspecs.models import PodInfo
from podnet.hookspecs.netpol import ResolvedPolicy
from podnet.linux import nftables
from podnet.linux.nftables import HostPort, NftablesError, Table
from podnet.node.health import Loops
from podnet.node.protocol import record_addresses

log = logging.getLogger("podnet.node.netpol")

#: seconds a change waits for the rest of its burst before the table is rendered
DEFAULT_DEBOUNCE = 0.05
#: seconds between looks at the kernel's table (someone deleted or changed it)
DEFAULT_RESYNC = 30.0
#: more namespaces than this to follow for peers: one cluster-wide watch of pods and
#: records instead of one per namespace
MAX_PEER_NAMESPACES = 8

Record = tuple[str, str, tuple[str, ...]]


def _default_record(obj: Obj) -> Record | None:
    """(pod key, provider, addresses) of a default-network PodNetwork; None for others
    (and for a finished one: as good as deleted)."""
    if record_finished(obj):
        return None
    try:
        pn = from_wire(PodNetwork, obj)
    except RecordError:
        return None
    if pn.spec.network != DEFAULT_NETWORK:
        return None
    try:
        addresses = tuple(str(a.ip) for a in record_addresses(pn))
    except (ValueError, KeyError):
        addresses = ()
    return (f"{pn.metadata.namespace}/{pn.spec.pod_name}", pn.spec.provider, addresses)


def _namespace_labels(obj: Obj) -> dict[str, str]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return {str(k): str(v) for k, v in labels.items()}


def peer_namespaces(specs: Iterable[PolicySpec],
                    namespaces: Mapping[str, Mapping[str, str]]) -> frozenset[str] | None:
    """The namespaces whose pods can be members or peers of ``specs`` (``namespaces``:
    every namespace's labels); None: any namespace (a ``namespaceSelector`` that matches
    every namespace, an egress rule to any peer on a named port, or more than
    :data:`MAX_PEER_NAMESPACES`)."""
    out: set[str] = set()
    for spec in specs:
        out.add(spec.namespace)
        for _, _, peer in pod_peers(spec):
            if peer is None:
                return None  # an egress named port: resolved against every pod's ports
            selector = peer.namespace_selector
            if selector is None:
                out.add(spec.namespace)
            elif selector.everything:
                return None
            else:
                out.update(name for name, labels in namespaces.items()
                           if selector.matches(namespace_view(name, labels)))
    return frozenset(out) if len(out) <= MAX_PEER_NAMESPACES else None


class _Peers:
    """The pods and default records of the namespaces the enforcer follows for its
    policies' members and peers: an informer pair per namespace, or one cluster-wide
    pair (scope None). Changed and read under the enforcer's programming lock."""

    def __init__(self, enforcer: PolicyEnforcer) -> None:
        self._e = enforcer
        self.scope: frozenset[str] | None = frozenset()
        #: namespace (None: all) -> its pods and records informers
        self._pods: dict[str | None, Informer[PodInfo]] = {}
        self._records: dict[str | None, Informer[Record | None]] = {}

    def follow(self, scope: frozenset[str] | None) -> None:
        """Follow ``scope``: informers for namespaces it gained are listed now (a pass
        resolves against them at once), those of namespaces it lost stop."""
        keys: set[str | None] = {None} if scope is None else set(scope)
        for key in [k for k in self._pods if k not in keys]:
            for informer in (self._pods.pop(key), self._records.pop(key)):
                informer.stop()
                self._e.loops.remove(f"watch-{informer.name}")
        for key in sorted(keys - self._pods.keys(), key=str):
            where = "*" if key is None else key
            pods: Informer[PodInfo] = Informer(self._e.cluster, POD, pod_info, namespace=key,
                                               name=f"pods-netpol@{where}")
            records: Informer[Record | None] = Informer(
                self._e.cluster, POD_NETWORK, _default_record, namespace=key,
                name=f"podnetworks-netpol@{where}")
            if key is None:
                pods.add_index("namespace", lambda p: [p.namespace])
            records.add_index("pod", lambda r: [r[0]] if r else [])
            for informer in (pods, records):
                informer.add_handler(lambda *_: self._e.poke())
                try:
                    informer.start()
                except ApiError as exc:  # its own loop lists it again
                    log.warning("node %s: %s not listed yet: %s", self._e.node,
                                informer.name, exc)
                self._e.follow(informer)
            self._pods[key], self._records[key] = pods, records
        self.scope = scope

    def _informers(self) -> list[Informer[Any]]:
        return [*self._pods.values(), *self._records.values()]

    def pump(self) -> None:
        """What the informers have, taken now (an enforcer not started follows no
        thread: its tests pump)."""
        for informer in self._informers():
            informer.pump()

    def stop(self) -> None:
        for informer in self._informers():
            informer.stop()

    def pods(self) -> list[PodInfo]:
        return [p for informer in self._pods.values() for p in informer.values()]

    def pods_in(self, namespace: str) -> list[PodInfo]:
        informer = self._pods.get(namespace)
        if informer is not None:
            return informer.values()
        every = self._pods.get(None)
        return every.by_index("namespace", namespace) if every is not None else []

    def record(self, pod_key: str) -> Record | None:
        informer = self._records.get(pod_key.split("/", 1)[0], self._records.get(None))
        if informer is None:
            return None
        found = informer.by_index("pod", pod_key)
        return found[0] if found and found[0] is not None else None


class _View:
    """``podnet.core.netpol.resolve.PolicyView`` over the enforcer's informers: the pods
    of this node (with those an ADD saw before the informer did) and the followed
    namespaces' pods and records."""

    def __init__(self, enforcer: PolicyEnforcer, known: Mapping[str, PodInfo]) -> None:
        self._e = enforcer
        #: this node's pods and the ADDs' fresh ones, by key
        self._known = known
        self._all: list[PodInfo] | None = None
        self._in: dict[str, list[PodInfo]] = {}

    def pods(self) -> Iterable[PodInfo]:
        if self._all is None:
            seen = dict(self._known)
            for pod in self._e.peers.pods():
                seen.setdefault(pod.key, pod)
            self._all = list(seen.values())
        return self._all

    def pods_in(self, namespace: str) -> Iterable[PodInfo]:
        if namespace not in self._in:
            seen = {k: p for k, p in self._known.items() if p.namespace == namespace}
            for pod in self._e.peers.pods_in(namespace):
                seen.setdefault(pod.key, pod)
            self._in[namespace] = list(seen.values())
        return self._in[namespace]

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._e.namespaces.get(name)

    def namespaces(self) -> Iterable[str]:
        return self._e.namespaces.keys()

    def _record(self, pod: PodInfo) -> Record | None:
        return self._e.peers.record(pod.key) or self._e.local_record(pod.key)

    def addresses_of(self, pod: PodInfo) -> tuple[str, ...]:
        record = self._record(pod)
        return record[2] if record else ()

    def provider_of(self, pod: PodInfo) -> str | None:
        record = self._record(pod)
        return record[1] if record else None

    def node_addresses(self, node: str) -> tuple[str, ...]:
        # the agent reads no Node; a pod's own node reaches it through output and input,
        # never the forward hook, so the table needs none
        return ()


class PolicyEnforcer:
    """Resolves the policies with members on ``node`` and keeps ``inet podnet`` as they
    say (see the module's docstring).

    ``ports()``: member key -> where this host plugged it, for the providers the node
    enforces; ``local_record(pod key)``: that pod's default record as the agent's own
    informer has it (fresher than the cluster-wide one during an ADD);
    ``enforced(provider)``: whether the node enforces policy for that provider's pods;
    ``changed``: called when the report says something new. ``netns``: the network
    namespace to program (None: this process's)."""

    def __init__(self, cluster: Cluster, node: str, *,
                 ports: Callable[[], Mapping[str, HostPort]],
                 local_record: Callable[[str], tuple[str, str, tuple[str, ...]] | None]
                 = lambda _: None,
                 enforced: Callable[[str], bool] = lambda _: True,
                 changed: Callable[[], None] = lambda: None, enforce: bool = True,
                 netns: str | None = None, debounce: float = DEFAULT_DEBOUNCE,
                 resync: float = DEFAULT_RESYNC, loops: Loops | None = None,
                 observe: Callable[[str, float], None] = lambda outcome, seconds: None
                 ) -> None:
        self.cluster = cluster
        #: the agent's loops (liveness), and what is told each programming's outcome
        #: (applied, unchanged, removed, failed) and duration
        self.loops = loops or Loops()
        self.observe = observe
        self.node = node
        self.ports = ports
        self.local_record = local_record
        self.enforced = enforced
        self.changed = changed
        self.enforce = enforce
        self.netns = netns
        self.debounce = debounce
        self.resync = resync
        # optional: a server that does not serve the kind has no policy to enforce
        self.policies: Informer[PolicySpec] = Informer(
            cluster, NETWORK_POLICY, read_policy, name="networkpolicies", optional=True)
        #: the pods bound to this node (the members; an ADD's pod read from here)
        self.pods: Informer[PodInfo] = Informer(
            cluster, POD, pod_info, field_selector=f"spec.nodeName={node}",
            name="pods-netpol")
        self.namespaces: Informer[dict[str, str]] = Informer(
            cluster, NAMESPACE, _namespace_labels, name="namespaces-netpol")
        self._informers = (self.policies, self.pods, self.namespaces)
        for informer in self._informers:
            informer.add_handler(lambda *_: self.poke())
        #: the pods and records of the namespaces its policies' peers can be in
        self.peers = _Peers(self)
        #: set once start() follows the informers in threads (a peer informer gets its
        #: own then; before, a pass pumps them)
        self._following = False
        #: one programming at a time (the thread's and an ADD's)
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: pods an ADD read before the pod informer had them, by key (dropped once it has)
        self._fresh: dict[str, PodInfo] = {}
        self._fresh_lock = threading.Lock()
        #: the table in place (None: none of podnet's), and what the report says
        self.table: Table | None = None
        self._removed = False
        #: the last programming failed (its outcome, for the metrics)
        self._failed = False
        self.report = AgentPolicyReport()
        #: programmings that changed the kernel's table, and renders in all
        self.applied = 0
        self.rendered = 0
        self._checked = time.monotonic()

    # --- life --------------------------------------------------------------------------

    def start(self) -> None:
        """List everything and program the table once (before the agent serves ADD),
        then follow the changes in threads."""
        if self.enforce:
            for informer in self._informers:
                informer.start()
            with self._lock:
                self._following = True
                for informer in self._informers:
                    self.follow(informer)
        self.program()
        if not self.enforce:
            return
        thread = threading.Thread(target=self._run, daemon=True, name="podnet-node-netpol")
        self._threads.append(thread)
        thread.start()

    def follow(self, informer: Informer[Any]) -> None:
        """Follow ``informer`` in a thread of its own once the enforcer follows its
        informers (until then a pass pumps it)."""
        if not self._following or self._stop.is_set():
            return
        thread = threading.Thread(
            target=informer.run, args=(self._stop, 0.5), daemon=True,
            kwargs={"on_turn": self.loops.add(f"watch-{informer.name}", 0.5).turn},
            name=f"podnet-node-{informer.name}")
        self._threads = [t for t in self._threads if t.is_alive()]
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        """Stop following; the table stays in the kernel (a restarted agent replaces it
        atomically: denied stays denied meanwhile)."""
        self._stop.set()
        self._dirty.set()
        for informer in self._informers:
            informer.stop()
        with self._lock:
            self.peers.stop()
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    def poke(self) -> None:
        """Something the table depends on may have changed."""
        self._dirty.set()

    def _run(self) -> None:
        loop = self.loops.add("netpol", 1.0)
        while not self._stop.is_set():
            loop.turn()
            if not self._dirty.wait(timeout=1.0):
                if time.monotonic() - self._checked >= self.resync:
                    self._check_kernel()
                continue
            self._stop.wait(self.debounce)
            self._dirty.clear()
            try:
                self.program()
            except Exception:  # the next change or the next look tries again
                log.exception("node %s: NetworkPolicy programming failed", self.node)
                self._stop.wait(1.0)
                self._dirty.set()

    def _check_kernel(self) -> None:
        """Apply again when the kernel's table is not the one applied (deleted or edited
        by hand)."""
        self._checked = time.monotonic()
        with self._lock:
            table = self.table
            if table is None:
                return
            try:
                listing = nftables.read(netns=self.netns)
            except NftablesError as exc:
                log.warning("node %s: the nftables table cannot be read: %s", self.node, exc)
                return
            want = {c["add"]["chain"]["name"] for c in table.commands if "chain" in c["add"]}
            rules = table.rules
            have = nftables.listed_chains(listing or [])
            if listing is None or set(have) != want or sum(map(len, have.values())) != rules:
                log.warning("node %s: the nftables table inet podnet is not as programmed; "
                            "applied again", self.node)
                self.table = None
        if self.table is None:
            self.program()

    # --- what an ADD asks ----------------------------------------------------------------

    def fresh_pods(self) -> dict[str, PodInfo]:
        with self._fresh_lock:
            for key in [k for k, p in self._fresh.items()
                        if (have := self.pods.get(k)) is not None and have.uid == p.uid]:
                del self._fresh[key]
            return dict(self._fresh)

    def admit(self, pod: Obj | PodInfo) -> None:
        """Program the table with ``pod`` (just plugged, not answered yet) in it, as the
        ADD read it, before the ADD answers: a pod a policy selects never runs open. A
        pod no policy selects costs its ADD nothing (the thread adds it as a peer).

        :raises NftablesError: a policy selects the pod and the table could not be
            programmed (the ADD fails and is retried; the pod never starts
            unrestricted)."""
        if not self.enforce:
            return
        info = pod if isinstance(pod, PodInfo) else pod_info(pod)
        with self._fresh_lock:
            self._fresh[info.key] = info
        if not any(selects(spec, info) for spec in self.policies.values()):
            # not restricted: the ADD does not wait for the table (the pod joins it as a
            # peer at the thread's next pass; until then other members' rules do not
            # name it, which only denies)
            self.poke()
            return
        self.program(raise_errors=True)

    # --- programming ---------------------------------------------------------------------

    def resolved(self) -> list[ResolvedPolicy]:
        """The policies that select a pod on this node, resolved (cheap selection first:
        only those whose pod selector matches a pod of this node are resolved, and only
        the namespaces where their members and peers can be are followed). Called under
        the programming lock."""
        known = {p.key: p for p in self.pods.values()}
        for key, pod in self.fresh_pods().items():
            known.setdefault(key, pod)
        by_namespace: dict[str, list[PodInfo]] = {}
        for pod in known.values():
            if pod.node_name == self.node:
                by_namespace.setdefault(pod.namespace, []).append(pod)
        specs = [spec for spec in self.policies.values()
                 if any(selects(spec, pod) for pod in by_namespace.get(spec.namespace, ()))]
        scope: frozenset[str] | None = frozenset()
        if specs:
            names = self.namespaces.keys()
            scope = peer_namespaces(specs, {n: self.namespaces.get(n) or {} for n in names})
        if scope != self.peers.scope:
            self.peers.follow(scope)
        if not self._following:
            self.peers.pump()
        if not specs:
            return []
        view = _View(self, known)
        return [resolve(spec, view) for spec in specs]

    def program(self, *, raise_errors: bool = False) -> bool:
        """Render the table and apply it when it differs from the one in place; whether
        the kernel's table changed."""
        with self._lock:
            started = time.monotonic()
            outcome = "failed"
            try:
                changed = self._program(raise_errors=raise_errors)
                outcome = ("failed" if self._failed else "applied" if changed and self.table
                           else "removed" if changed else "unchanged")
                return changed
            finally:
                self.observe(outcome, time.monotonic() - started)

    def _program(self, *, raise_errors: bool) -> bool:
        """:meth:`program`, under its lock."""
        self._failed = False
        if not self.enforce:
            return self._remove()
        policies = self.resolved()
        # no policy selects a pod here: no table, whatever is plugged (no link dump)
        ports = self.ports() if policies else {}
        table = nftables.render(policies, ports)
        self.rendered += 1
        local = {p.key: p.generation for p in policies
                 if any(m.node == self.node and self.enforced(m.provider)
                        for m in p.members)}
        if not table.chains:
            # nothing restricted here: no table at all
            changed = self._remove(raise_errors=raise_errors)
            self._say(AgentPolicyReport(programmed=local))
            return changed
        if table == self.table:
            self._say(AgentPolicyReport(programmed=local))
            return False
        try:
            nftables.apply(table, netns=self.netns)
        except NftablesError as exc:
            self._failed = True
            log.error("node %s: NetworkPolicy not programmed: %s", self.node, exc)
            self._say(AgentPolicyReport(failed=dict.fromkeys(local, str(exc))))
            if raise_errors:
                raise
            return False
        self.table = table
        self._removed = False
        self.applied += 1
        log.info("node %s: NetworkPolicy programmed: %d policies, %d members "
                 "restricted, %d rules", self.node, len(table.policies),
                 len(table.chains), table.rules)
        self._say(AgentPolicyReport(programmed=local))
        return True

    def _remove(self, *, raise_errors: bool = False) -> bool:
        if self._removed:
            return False
        try:
            nftables.remove(netns=self.netns)
        except NftablesError as exc:
            if raise_errors:
                raise
            log.warning("node %s: the nftables table inet podnet not removed: %s",
                        self.node, exc)
            return False
        changed = self.table is not None
        self.table = None
        self._removed = True
        return changed

    def _say(self, report: AgentPolicyReport) -> None:
        if report != self.report:
            self.report = report
            self.changed()

    def annotations(self) -> dict[str, str]:
        """The report Lease's annotation (none while nothing has a member here)."""
        if not self.enforce or (not self.report.programmed and not self.report.failed):
            return {}
        return {AGENT_REPORT_ANNOTATION: encode_agent_report(self.report)}

    def describe(self) -> dict[str, Any]:
        """What is in place, for ``GET /v1/agent/report`` and the bench."""
        table = self.table
        return {"enforce": self.enforce, "applied": self.applied, "rendered": self.rendered,
                "policies": dict(table.policies) if table else {},
                "members": dict(table.chains) if table else {},
                "rules": table.rules if table else 0,
                "memberRules": dict(table.member_rules) if table else {}}
