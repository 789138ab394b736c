"""The node agent's NetworkPolicy enforcer: the policies that select pods this agent
plugged, resolved as the controller resolves them (``podnet.core.netpol``), programmed
as the nftables table ``inet podnet`` (``podnet.linux.nftables``).

- **What it reads**: NetworkPolicies, Pods, Namespaces and PodNetworks, cluster-wide and
  read only (a peer may be any pod of the cluster), through informers of its own.
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
from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY, POD, POD_NETWORK, Cluster, Obj
from podnet.core.convert import RecordError, from_wire
from podnet.core.models import DEFAULT_NETWORK, PodNetwork
from podnet.core.netpol.resolve import resolve, selects
from podnet.core.netpol.status import (
    AGENT_REPORT_ANNOTATION,
    AgentPolicyReport,
    encode_agent_report,
)
from podnet.core.netpol.wire import PolicySpec, read_policy
from podnet.core.objects import pod_info
from podnet.hookspecs.models import PodInfo
from podnet.hookspecs.netpol import ResolvedPolicy
from podnet.linux import nftables
from podnet.linux.nftables import HostPort, NftablesError, Table
from podnet.node.protocol import record_addresses

log = logging.getLogger("podnet.node.netpol")

#: seconds a change waits for the rest of its burst before the table is rendered
DEFAULT_DEBOUNCE = 0.05
#: seconds between looks at the kernel's table (someone deleted or changed it)
DEFAULT_RESYNC = 30.0


def _default_record(obj: Obj) -> tuple[str, str, tuple[str, ...]] | None:
    """(pod key, provider, addresses) of a default-network PodNetwork; None for others."""
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


class _View:
    """``podnet.core.netpol.resolve.PolicyView`` over the enforcer's informers, with the
    pods an ADD saw before the informer did."""

    def __init__(self, enforcer: PolicyEnforcer) -> None:
        self._e = enforcer
        # one pass resolves every policy over one view: its pods are gathered once
        self._fresh = enforcer.fresh_pods()
        self._all: list[PodInfo] | None = None
        self._in: dict[str, list[PodInfo]] = {}

    def pods(self) -> Iterable[PodInfo]:
        if self._all is None:
            seen = {p.key: p for p in self._e.pods.values()}
            for key, pod in self._fresh.items():
                seen.setdefault(key, pod)
            self._all = list(seen.values())
        return self._all

    def pods_in(self, namespace: str) -> Iterable[PodInfo]:
        if namespace not in self._in:
            seen = {p.key: p for p in self._e.pods.by_index("namespace", namespace)}
            for key, pod in self._fresh.items():
                if pod.namespace == namespace:
                    seen.setdefault(key, pod)
            self._in[namespace] = list(seen.values())
        return self._in[namespace]

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self._e.namespaces.get(name)

    def namespaces(self) -> Iterable[str]:
        return self._e.namespaces.keys()

    def _record(self, pod: PodInfo) -> tuple[str, str, tuple[str, ...]] | None:
        found = self._e.records.by_index("pod", pod.key)
        if found and found[0] is not None:
            return found[0]
        return self._e.local_record(pod.key)

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
                 resync: float = DEFAULT_RESYNC) -> None:
        self.cluster = cluster
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
        self.pods: Informer[PodInfo] = Informer(cluster, POD, pod_info, name="pods-netpol")
        self.pods.add_index("namespace", lambda p: [p.namespace])
        self.namespaces: Informer[dict[str, str]] = Informer(
            cluster, NAMESPACE, _namespace_labels, name="namespaces-netpol")
        self.records: Informer[tuple[str, str, tuple[str, ...]] | None] = Informer(
            cluster, POD_NETWORK, _default_record, name="podnetworks-netpol")
        self.records.add_index("pod", lambda r: [r[0]] if r else [])
        self._informers = (self.policies, self.pods, self.namespaces, self.records)
        for informer in self._informers:
            informer.add_handler(lambda *_: self.poke())
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
        self.program()
        if not self.enforce:
            return
        for informer in self._informers:
            self._threads.append(threading.Thread(
                target=informer.run, args=(self._stop, 0.5), daemon=True,
                name=f"podnet-node-{informer.name}"))
        self._threads.append(threading.Thread(target=self._run, daemon=True,
                                              name="podnet-node-netpol"))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop following; the table stays in the kernel (a restarted agent replaces it
        atomically: denied stays denied meanwhile)."""
        self._stop.set()
        self._dirty.set()
        for informer in self._informers:
            informer.stop()
        for thread in self._threads:
            thread.join(timeout=5)

    def poke(self) -> None:
        """Something the table depends on may have changed."""
        self._dirty.set()

    def _run(self) -> None:
        while not self._stop.is_set():
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
        only those whose pod selector matches a pod of this node are resolved)."""
        view = _View(self)
        local = [p for p in view.pods() if p.node_name == self.node]
        by_namespace: dict[str, list[PodInfo]] = {}
        for pod in local:
            by_namespace.setdefault(pod.namespace, []).append(pod)
        out = []
        for spec in self.policies.values():
            if any(selects(spec, pod) for pod in by_namespace.get(spec.namespace, ())):
                out.append(resolve(spec, view))
        return out

    def program(self, *, raise_errors: bool = False) -> bool:
        """Render the table and apply it when it differs from the one in place; whether
        the kernel's table changed."""
        with self._lock:
            if not self.enforce:
                return self._remove()
            policies = self.resolved()
            ports = self.ports()
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
