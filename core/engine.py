"""The engine: caches, the work queue, the reconcilers, and the calls into providers.

One Engine runs one controller process's worth of work. It can be driven two ways:
``run()`` with worker threads (``podnet run``, the demo), or step by step with
``run_until_idle()`` on a FakeClock (tests, the chaos harness), which is deterministic.
"""

from __future__ import annotations

import gc
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs
import pluggy

from podnet.core import logcontext
from podnet.core.caches import Caches, NamespaceInfo, pod_key_of
from podnet.core.clock import Clock, SystemClock
from podnet.core.cluster.gcpause import gc_paused
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import ApiError, Cluster, Kind
from podnet.core.config import Config, NodeProviderRule
from podnet.core.convert import RecordError, readable_generation, readable_ready, to_wire
from podnet.core.drift import LostAddresses, PoolProblems, too_young
from podnet.core.enqueue import Enqueuer, Key
from podnet.core.errors import (
    MAX_MESSAGE,
    NotLeader,
    PodnetError,
    TerminalError,
    one_line,
)
from podnet.core.fence import Fence, FencedCluster
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger, provider_verify
from podnet.core.metrics import Metrics
from podnet.core.models import (
    LABEL_VM,
    AgentReport,
    Condition,
    NodeInfo,
    NodeNetwork,
    Phase,
    PodInfo,
    PodNetwork,
    WorkloadInfo,
    set_condition,
)
from podnet.core.networks.migrate import Migration, migrate_networks
from podnet.core.objects import vm_label, vm_of
from podnet.core.ownership import AddressBook, Ownership
from podnet.core.placement import Placement, Policies
from podnet.core.plugin import Providers
from podnet.core.pool import Pools
from podnet.core.poolservice import PoolService
from podnet.core.ratelimit import defer_cloud_waits
from podnet.core.reconcile.gc import GarbageCollector
from podnet.core.reconcile.netpol import NETPOL_KEY, NETPOL_KEYS_KEY, NetworkPolicyReconciler
from podnet.core.reconcile.networks import (
    GROUP_KEY,
    POOL_KEY,
    STATUS_KEY,
    SUBNET_KEY,
    NetworksReconciler,
)
from podnet.core.reconcile.nodepool import NodePoolReconciler
from podnet.core.reconcile.podnetwork import PodNetworkReconciler
from podnet.core.reconcile.podnetwork_desired import NodeProviders
from podnet.core.reconcile.result import Result
from podnet.core.records import Echoes, RecordWriter
from podnet.core.tracing import Tracing, is_stale_read
from podnet.core.transition import Transitions
from podnet.core.unplug import UnplugGate
from podnet.core.workqueue import WorkQueue
from podnet.hookspecs.netpol import Enforcement
from podnet.hookspecs.networks import Networks

log = logging.getLogger("podnet.engine")

GC_KEY: Key = ("gc", "")
#: allocations between young-generation collections once ``freeze_gc`` applies (Python: 700)
GC_YOUNG_THRESHOLD = 20_000


@attrs.define
class EngineOptions:
    #: provider serving nodes no rule and no plugin claims
    default_provider: str | None = None
    #: the operator's node -> provider rules, first match wins, before plugins' claims
    node_providers: tuple[NodeProviderRule, ...] = ()
    #: attachment network -> provider, from config (plugins may add their own)
    networks: dict[str, str] = attrs.field(factory=dict)
    #: policy overrides per provider, merged over the provider's own defaults
    policies: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: config sections handed to ``podnet_configure``, by provider
    provider_config: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    workers: int = 4
    #: keys ready and no worker back at the queue for this long: the engine is stalled
    worker_stall_seconds: float = 120.0
    seed: int | None = None
    #: move everything loaded at start out of the cyclic collector's sight, and collect
    #: the young generation less often (long-lived processes only: tests that build many
    #: engines would never free them)
    freeze_gc: bool = False
    #: podnet's namespace, where the node agents' reports (Leases) are
    agent_namespace: str = "kube-system"
    #: who enforces NetworkPolicy: ``podnet``, or ``none`` (another engine)
    network_policy: str = "podnet"

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> EngineOptions:
        """What the config file says about the engine; ``overrides`` win."""
        values: dict[str, Any] = dict(
            default_provider=config.default_provider, node_providers=config.node_providers,
            networks=dict(config.networks), policies=config.policies,
            provider_config=config.providers, workers=config.workers,
            worker_stall_seconds=config.worker_stall_seconds,
            agent_namespace=config.leader_election.namespace,
            network_policy=config.network_policy,
        )
        values.update(overrides)
        return cls(**values)


@attrs.define
class Stats:
    """Counters the demo, the metrics endpoint and the tests read."""

    transitions: Counter[str] = attrs.field(factory=Counter)
    failed_transitions: Counter[str] = attrs.field(factory=Counter)
    #: attempts that found no address to take (PoolEmpty): waits, not failures
    waited_transitions: Counter[str] = attrs.field(factory=Counter)
    #: attempts whose write met a newer version (409): retried from a fresh read
    conflicted_transitions: Counter[str] = attrs.field(factory=Counter)
    provider_calls: Counter[str] = attrs.field(factory=Counter)
    reconciles: Counter[str] = attrs.field(factory=Counter)
    reconcile_errors: Counter[str] = attrs.field(factory=Counter)
    writes: Counter[str] = attrs.field(factory=Counter)
    #: a start's first look at each pod (``start_checks``): ``clean`` (nothing to do but
    #: its record's verify, scheduled) or ``queued`` (its whole pass)
    start_checks: Counter[str] = attrs.field(factory=Counter)


class Engine:
    """Composes the parts and the controllers, and runs them: start, step, run, health.

    The parts (each handed to the controllers that use it, nothing else): ``caches``,
    ``records`` (the writer), ``gateway``, ``queue`` and ``enqueue``, ``placement`` (which
    provider and policy serve what), ``owned`` (the address book and its bookkeeping),
    ``ledger`` (who holds each address: the only one to decide it), ``pools`` and
    ``pool_service`` (their inventories, rebuilds and records), ``lost`` and
    ``pool_problems`` (what the node side learns for the pod network side), ``stats``,
    ``clock``. The controllers: ``podnetworks``, ``nodepools``,
    ``sweeper`` (the periodic GC), one reconcile function each, by queue key kind.
    """

    def __init__(
        self,
        cluster: Cluster,
        pm: pluggy.PluginManager,
        *,
        clock: Clock | None = None,
        tracing: Tracing | None = None,
        options: EngineOptions | None = None,
        fence: Fence | None = None,
    ) -> None:
        self.pm = pm
        self.clock: Clock = clock or SystemClock()
        #: checked right before every write, Kubernetes or provider: the host hands in its
        #: elector's; without one (no leader election) it never closes
        self.fence = fence or Fence(self.clock, open_forever=True)
        #: every write the engine makes goes through here, so through the fence
        self.cluster: Cluster = FencedCluster(cluster, self.fence)
        self.tracing = tracing or Tracing(None)
        self.options = options = options or EngineOptions()
        self.random = random.Random(options.seed)
        self.stats = Stats()
        self.providers = self._providers(pm, options)
        self.policy = Policies(self.providers, options.policies)
        #: every call into a provider, and every broadcast to the plugins
        self.gateway = ProviderGateway(
            self.providers, policy=self.policy, clock=self.clock, fence=self.fence,
            tracing=self.tracing, calls=self.stats.provider_calls)
        self.placement = Placement(
            self.providers, self.policy, self.gateway,
            default_provider=options.default_provider, node_providers=options.node_providers,
            networks=options.networks)
        self.queue: WorkQueue[Key] = WorkQueue(self.clock, name="podnet")
        enforce_policy = options.network_policy == "podnet"
        self.caches = Caches(cluster, lambda key: self.queue.add(("invalid", key)),
                             agent_namespace=options.agent_namespace,
                             network_policy=enforce_policy)
        self.enqueue = Enqueuer(self.queue, self.caches)
        self.records = RecordWriter(self.cluster, self.caches, self.stats.writes, Echoes(
            lambda pn: getattr(logcontext.current, "key", None) == ("pod", pod_key_of(pn)),
            self.enqueue.pod_of))
        self.pools = Pools()
        self.owned = Ownership()
        self.lost = LostAddresses(self.caches, self.policy, self.clock, self.enqueue)
        self.pool_problems = PoolProblems()
        #: who holds each address: the one place that decides it
        self.ledger = Ledger(
            owned=self.owned, pools=self.pools, lost=self.lost.by_key,
            record=self.caches.pod_networks.get, node_pool=self._uses_node_pool,
            verify=provider_verify(self.gateway, self.caches,
                                   lambda name: name in self.placement.providers),
            young=lambda pn: too_young(pn, self.policy, self.clock),
            wake=lambda key: self.enqueue.wake((key,)),
            on_node=lambda node: self.caches.pod_networks.by_index("node", node))
        #: the one way either machine's state changes
        self.transitions = Transitions(
            self.tracing, succeeded=self.stats.transitions,
            failed=self.stats.failed_transitions, waited=self.stats.waited_transitions,
            conflicted=self.stats.conflicted_transitions,
            notify=self.gateway.notify_transition,
            listened=self.gateway.transition_listened)

        #: the Subnets, IPPools and SecurityGroups: checked, kept, published to providers
        self.networks = NetworksReconciler(
            caches=self.caches, cluster=self.cluster, queue=self.queue, enqueue=self.enqueue,
            gateway=self.gateway, providers=lambda: self.placement.providers.names(),
            provider_of_node=self.placement.provider_for_node, clock=self.clock,
            writes=self.stats.writes)
        self.podnetworks = PodNetworkReconciler(
            caches=self.caches, records=self.records, enqueue=self.enqueue,
            gateway=self.gateway, transitions=self.transitions, placement=self.placement,
            ledger=self.ledger, pools=self.pools, problems=self.pool_problems,
            clock=self.clock, unplug=UnplugGate(self.caches, self.clock, self.policy),
            networks=self.networks)
        self.networks.on_groups_changed = self._on_groups_changed
        #: the node pools as the cloud and the records have them: read, recorded, and
        #: their interfaces moved, for the node passes and the garbage collector alike
        self.pool_service = PoolService(
            caches=self.caches, records=self.records, enqueue=self.enqueue,
            gateway=self.gateway, transitions=self.transitions, lost=self.lost,
            clock=self.clock, random=self.random)
        self.nodepools = NodePoolReconciler(
            caches=self.caches, records=self.records, enqueue=self.enqueue,
            gateway=self.gateway, transitions=self.transitions, placement=self.placement,
            pools=self.pools, ledger=self.ledger, service=self.pool_service,
            problems=self.pool_problems,
            clock=self.clock, random=self.random)
        #: the periodic sweep: stale records, the pools of gone nodes, leaked addresses
        self.sweeper = GarbageCollector(
            caches=self.caches, enqueue=self.enqueue, gateway=self.gateway,
            placement=self.placement, pools=self.pools, ledger=self.ledger,
            service=self.pool_service,
            lost=self.lost, clock=self.clock)
        #: NetworkPolicies: resolved, programmed where the provider enforces them, said
        self.netpols = NetworkPolicyReconciler(
            caches=self.caches, cluster=self.cluster, queue=self.queue, gateway=self.gateway,
            provider_enforced=[name for name, info in self.providers.infos.items()
                               if info.network_policy is Enforcement.PROVIDER],
            clock=self.clock, tracing=self.tracing, writes=self.stats.writes,
            enforce=enforce_policy)
        self.podnetworks.selecting_policies = self.netpols.selecting
        self._reconcilers: dict[str, Callable[[str], Result]] = {
            "pod": self.podnetworks.reconcile,
            "node": self._node_pass,
            "gc": self.sweeper.reconcile,
            "invalid": self._report_unreadable,
            SUBNET_KEY: self.networks.reconcile_subnet,
            POOL_KEY: self.networks.reconcile_pool,
            GROUP_KEY: self.networks.reconcile_group,
            STATUS_KEY[0]: self.networks.flush,
            NETPOL_KEY: self.netpols.reconcile,
            NETPOL_KEYS_KEY[0]: self.netpols.sweep,
        }
        self.started = False
        #: node -> the pods a start looks at once that node's first pass has read its
        #: pool (the start-up pass, :meth:`_plan_start_checks`)
        self._start_checks: dict[str, list[str]] = {}
        self._metrics: Metrics | None = None
        #: the threads of ``run()`` while it runs, and the stop it was given
        self.threads: list[threading.Thread] = []
        self._running: threading.Event | None = None
        #: real time a worker last came back to the queue (health: is it drained?)
        self.worker_heartbeat = time.monotonic()

    @staticmethod
    def _providers(pm: pluggy.PluginManager, options: EngineOptions) -> Providers:
        """The registered providers, configured; every provider the options name must be
        one of them (a ConfigError now, not at the first pod)."""
        providers = Providers(pm)
        for name, section in options.provider_config.items():
            providers.configure(name, section)
        if options.default_provider is not None:
            providers.require(options.default_provider, "defaultProvider")
        for name in options.policies:
            providers.require(name, f"policies.{name}")
        for i, rule in enumerate(options.node_providers):
            providers.require(rule.provider, f"nodeProviders[{i}].provider")
        for network, name in options.networks.items():
            providers.require(name, f"networks.{network}.provider")
        return providers

    # --- the caches and the address book under their old names (tests, status, demo) ----

    @property
    def pods(self) -> Informer[PodInfo]:
        return self.caches.pods

    @property
    def nodes(self) -> Informer[NodeInfo]:
        return self.caches.nodes

    @property
    def pod_networks(self) -> Informer[PodNetwork]:
        return self.caches.pod_networks

    @property
    def node_networks(self) -> Informer[NodeNetwork]:
        return self.caches.node_networks

    @property
    def namespaces(self) -> Informer[NamespaceInfo]:
        return self.caches.namespaces

    @property
    def statefulsets(self) -> Informer[WorkloadInfo]:
        return self.caches.statefulsets

    @property
    def informers(self) -> list[Informer[Any]]:
        return self.caches.all

    @property
    def required_informers(self) -> list[Informer[Any]]:
        return self.caches.required

    @property
    def addresses(self) -> AddressBook:
        return self.owned.addresses

    @property
    def metrics(self) -> Metrics | None:
        """Set by the host to observe durations (reconciles here, provider calls in the
        gateway); None costs nothing."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self.gateway.metrics = metrics

    def _uses_node_pool(self, provider: str) -> bool:
        providers = self.placement.providers
        return provider in providers and providers[provider].uses_node_pool

    def provider_for_node(self, node: NodeInfo) -> str | None:
        return self.placement.provider_for_node(node)

    # --- records that do not parse -----------------------------------------------------

    def unreadable_keys(self, kind: Kind) -> set[str]:
        return self.caches.unreadable_keys(kind)

    def _report_unreadable(self, key: str) -> Result:
        entry = self.caches.unreadable.pop(key, None)
        if entry is None:
            return Result()
        kind, obj, exc = entry
        meta = obj.get("metadata", {})
        name = f"{kind.kind} {'/'.join(p for p in (meta.get('namespace'), meta.get('name')) if p)}"
        message = one_line(f"{name} is invalid: {exc}", limit=2 * MAX_MESSAGE)
        log.warning("%s", message)
        self.records.event(obj, "InvalidRecord", message)
        ready = set_condition(readable_ready(obj), Condition(
            type="Ready", status="False", reason="InvalidRecord", message=message,
            last_transition_time=self.clock.now(), observed_generation=readable_generation(meta)))
        patch = {"status": {"conditions": [to_wire(c) for c in ready]}}
        try:
            self.cluster.patch(kind, meta.get("name", ""), patch, meta.get("namespace"),
                               subresource="status")
        except ApiError as err:
            log.debug("could not mark %s: %s", name, err)
        return Result()

    # --- queue ------------------------------------------------------------------------

    def enqueue_pod(self, key: str, after: float = 0.0) -> None:
        self.enqueue.pod(key, after)

    def enqueue_node(self, name: str, after: float = 0.0) -> None:
        self.enqueue.node(name, after)

    def _on_pod(self, event: str, key: str, old: Any, new: Any) -> None:
        self.enqueue.pod(key)
        pod = new or old
        vm = vm_of(pod) if pod is not None else None
        if vm is not None:
            # a VM's pod came, finished or went: its other pod may hold the VM's record
            # in a live migration (the target keeps it once the source is gone; the
            # source takes it back when the target is)
            for other in self.caches.pods.by_index("vm", f"{pod.namespace}/{vm}"):
                if other.key != key:
                    self.enqueue.pod(other.key)
        if self.netpols.active:
            self.netpols.on_pod(event, key, old, new)

    def _on_pod_network(self, event: str, key: str, old: PodNetwork | None,
                        new: PodNetwork | None) -> None:
        if self.netpols.active:
            self.netpols.on_pod_network(event, key, old, new)
        if self.networks.usage.by_provider:  # a provider has Subnet objects: counted
            self.networks.on_record(old, new)
        if new is not None:
            other = self.ledger.seen(new)
            if other is not None:
                holder = self.caches.pod_networks.get(other)
                if holder is not None:
                    self.enqueue.pod_of(holder)
        elif old is not None:
            self.ledger.gone(old)
        pn = new or old
        if pn is not None:
            pod_key = pod_key_of(pn)
            # the pass that wrote this record goes on from the write's answer: queuing its
            # own key again would only run a pass with nothing to do. Deletions (forget),
            # the stream and other passes' writes still queue it
            if not (self.caches.pod_networks.own_write
                    and getattr(logcontext.current, "key", None) == ("pod", pod_key)):
                # the stream ahead of the pass's own write's answer: the answer decides
                echoes = self.records.echoes
                if new is None or echoes is None or not echoes.heard(new):
                    self.enqueue.pod(pod_key)
            vm = pn.metadata.labels.get(LABEL_VM)
            if vm is not None:  # a VM's held record: its new pod may take it back now
                for pod in self.caches.pods.by_index("vm", f"{pn.metadata.namespace}/{vm}"):
                    self.enqueue.pod(pod.key)

    def _on_groups_changed(self, names: set[str]) -> None:
        # a SecurityGroup's rules changed: the running pods naming it are verified now, so
        # the provider's verify finds the difference and route writes it (few records
        # name groups; a group change is rare)
        for pn in self.caches.pod_networks.values():
            if names.intersection(pn.spec.requests.security_groups):
                self.podnetworks.verify_now(pn)

    def _on_node(self, event: str, key: str, _old: Any, _new: Any) -> None:
        # level-triggered: whatever changed about a node (it came, it went, its labels
        # moved it to another provider) its pods are looked at again. Heartbeats do not
        # reach here: the cache keeps only fields that matter, and equal values fire nothing.
        self.enqueue.node(key)
        for pod in self.caches.pods.by_index("node", key):
            self.enqueue.pod(pod.key)
        for pn in self.caches.pod_networks.by_index("node", key):
            self.enqueue.pod_of(pn)

    def _on_namespace(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # its annotations matter only to records still waiting for an address: an
        # allocated pod network never moves because its namespace changed
        for pn in self.caches.pod_networks.by_index("pending", key):
            self.enqueue.pod_of(pn)

    def _on_statefulset(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # created (or first seen), scaled, replaced or deleted: the records it holds for
        # pods that are gone are looked at again (released once it no longer wants them)
        for pn in self.caches.pod_networks.by_index("statefulset", key):
            if pn.status.phase is Phase.RELEASING:
                self.enqueue.pod_of(pn)

    def _on_nad(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # created, changed or deleted: the pods whose Multus annotation names it decide
        # again whether podnet serves that attachment and on which Subnet
        for pod in self.caches.pods.by_index("nad", key):
            self.enqueue.pod(pod.key)

    def _on_vmi(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # KubeVirt says more of a VM's live migration (it completed, failed, was
        # aborted): the VM's pods decide again which of them holds its record
        namespace, _, name = key.partition("/")
        for pod in self.caches.pods.by_index("vm", f"{namespace}/{vm_label(name)}"):
            self.enqueue.pod(pod.key)

    def _on_agent_report(self, _event: str, _key: str, old: AgentReport | None,
                         new: AgentReport | None) -> None:
        # a node agent says more interfaces are gone (or went away, or another writer
        # took its report over): the Releasing records of its node waiting for that are
        # looked at again
        report = new or old
        if report is None or (old is not None and new is not None
                              and new.unplugged <= old.unplugged
                              and (new.holder, new.edited) == (old.holder, old.edited)):
            return
        for pn in self.caches.pod_networks.by_index("node", report.node):
            if pn.status.phase is Phase.RELEASING:
                self.enqueue.pod_of(pn)

    # --- running ----------------------------------------------------------------------

    def migrate_networks(self) -> Migration | None:
        """The networks the providers' config sections still declare, made objects once
        (:mod:`podnet.core.networks.migrate`): called by the host when it starts leading,
        before ``start`` lists them. A provider that cannot say now is skipped (its
        networks are migrated at a later start); None when no section declares any."""
        declared: dict[str, Networks | None] = {}
        for name in self.providers.names():
            try:
                declared[name] = self.gateway.config_networks(name)
            except (PodnetError, ApiError) as exc:
                log.warning("migration: provider %s cannot say what its config declares "
                            "now (%s); its networks are migrated at a later start", name, exc)
        if not any(declared.values()):
            return None
        return migrate_networks(self.cluster, declared, self.options.agent_namespace)

    def start(self) -> None:
        """List every cache, then queue every object: level-triggered from the start."""
        self.caches.pods.add_handler(self._on_pod)
        self.caches.pod_networks.add_handler(self._on_pod_network)
        self.caches.nodes.add_handler(self._on_node)
        self.caches.namespaces.add_handler(self._on_namespace)
        self.caches.statefulsets.add_handler(self._on_statefulset)
        self.caches.agent_reports.add_handler(self._on_agent_report)
        self.caches.nads.add_handler(self._on_nad)
        self.caches.vmis.add_handler(self._on_vmi)
        for informer in self.caches.networks:
            informer.add_handler(self.networks.on_object)
        if self.netpols.enforce:
            netpols = self.netpols
            self.caches.network_policies.add_handler(netpols.on_policy)
            # pods and their records: from the engine's own handlers, and only while a
            # policy exists (every pod event pays one test)
            self.caches.namespaces.add_handler(netpols.on_namespace)
            self.caches.nodes.add_handler(netpols.on_node)
            self.caches.agent_policy_reports.add_handler(netpols.on_agent_report)
        # the list queues every pod: they are kept aside for the start-up pass instead
        self.enqueue.defer_pods()
        try:
            # one pause over every list: what they load is acyclic (``gcpause``), and
            # collecting after each would walk the caches listed before it again
            with gc_paused():
                self._list_caches()
        except BaseException:
            for key in self.enqueue.deferred_pods():
                self.enqueue.pod(key)
            raise
        self._plan_start_checks(self.enqueue.deferred_pods())
        # each provider hears what is usable before the first pod network pass
        self.networks.prime()
        self.netpols.start()
        self.queue.add(GC_KEY)
        self.started = True
        if self.options.freeze_gc:
            # what the first list loaded lives as long as the process: keep the collector's
            # full passes from walking it again and again (seconds at 100k records). The
            # full collection first is what sizes the next ones: without it the collector
            # takes the heap for small and walks what the rebuild makes every few million
            # allocations (at 20,000 pods the rebuild took a third more CPU)
            gc.collect()
            gc.freeze()
            # a reconcile allocates many short-lived containers (wire dicts, spans) that
            # reference counting frees: at Python's 700 the young-generation pass ran every
            # few reconciles (about 7 % of a warm allocation's CPU)
            gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    def _plan_start_checks(self, pod_keys: set[str]) -> None:
        """The start-up pass: every pod the list queued is looked at once, those on a
        cached node right after that node's first pass (its pool read from the cloud and
        the records), the others by their whole pass now. The look
        (:meth:`PodNetworkReconciler.check_at_start`) takes one step per pod where its
        pass would find nothing to do but its record's verify (a restart's routed
        records, mostly), and queues the pod's pass for anything else: a restart costs
        one pass per node, not one per pod."""
        by_node: dict[str, list[str]] = {}
        for key in sorted(pod_keys):
            pod = self.caches.pods.get(key)
            node = pod.node_name if pod is not None else None
            records = self.caches.pod_networks.by_index("pod", key)
            if (node and self.caches.nodes.get(node) is not None and len(records) == 1
                    and records[0].status.phase is Phase.ROUTED):
                by_node.setdefault(node, []).append(key)
            else:
                self.enqueue.pod(key)  # something to do, surely: not held back by its node
        self._start_checks = by_node
        for node in by_node:
            self.enqueue.node(node)  # queued by the list already: its first pass looks

    def start_checks_pending(self) -> int:
        """Pods a start's look waits for: their node's first pass has not run yet."""
        return sum(len(keys) for keys in list(self._start_checks.values()))

    def _node_pass(self, name: str) -> Result:
        try:
            return self.nodepools.reconcile(name)
        finally:
            # whatever the pass ended in (its pool read, or not: the pods' passes then
            # see no pool, as they would have before its read)
            keys = self._start_checks.pop(name, None)
            if keys:
                self._check_at_start(keys)

    def _check_at_start(self, pod_keys: list[str]) -> None:
        checks = self.stats.start_checks
        #: the verify's delay -> the pods due then: queued together, one lock each
        verify: dict[float, list[str]] = {}
        # the node's provider, asked once for its pods rather than once a pod
        providers: NodeProviders = {}
        try:
            for key in pod_keys:
                try:
                    due_in = self.podnetworks.check_at_start(key, providers)
                except Exception:
                    log.exception("pod %s: its start-up look failed; its pass is queued", key)
                    due_in = None
                if due_in is not None:
                    checks["clean"] += 1
                    verify.setdefault(due_in, []).append(key)
                else:
                    checks["queued"] += 1
                    self.enqueue.pod(key)
        finally:
            for due_in, keys in verify.items():
                self.enqueue.pods_after(keys, due_in)

    def _list_caches(self) -> None:
        for informer in self.caches.required:
            informer.start()
        for informer in self.caches.all:
            if informer in self.caches.required:
                continue
            # the others only refine decisions, and whoever reads them checks has_synced
            # (allocation waits for namespaces; a held record without its StatefulSet
            # falls back to sticky_hold): a failed first list is retried by pump, not a
            # failed start (one more list that can fail would make every start likelier
            # to crash-loop on a flaky API server)
            try:
                informer.start()
            except ApiError as exc:
                log.info("cache %s not listed yet, retrying: %s", informer.name, exc)

    def pump(self, timeout: float = 0.0) -> int:
        applied = 0
        for informer in self.caches.all:
            applied += informer.pump(timeout)
        return applied

    def process(self, key: Key) -> None:
        """Reconcile one key and requeue it as its outcome says. Never raises an
        ``Exception``: a failure of this handling itself is logged and the key retried
        after the longest backoff, so no key is lost and no worker dies of it."""
        try:
            self._process(key)
        except Exception:
            log.exception("%s %s: handling its reconcile failed; retried later", *key)
            self.queue.done(key)
            try:
                self.queue.add_after(key, self.queue.limiter.item.backoff.cap)
            except Exception:
                log.exception("%s %s: could not be requeued", *key)

    def _process(self, key: Key) -> None:
        kind, name = key
        self.stats.reconciles[kind] += 1
        started = time.perf_counter()
        outcome = "error"
        logcontext.current.key = key  # what this thread's log lines are about
        try:
            with self.tracing.reconcile(kind, name):
                result = self._reconcilers[kind](name)
        except NotLeader as exc:
            # not the object's failure: this replica stops acting (the host stops it)
            outcome = "fenced"
            log.debug("%s %s stopped: %s", kind, name, exc)
            self.queue.forget(key)
        except TerminalError as exc:
            outcome = "terminal"
            log.info("%s %s: %s (not retried)", kind, name, exc)
            self.queue.forget(key)
        except (PodnetError, ApiError, RecordError) as exc:
            if is_stale_read(exc):
                outcome = "conflict"  # read again and retried: not an error
                log.debug("%s %s: %s; retried from a fresh read", kind, name, exc)
            else:
                self.stats.reconcile_errors[kind] += 1
                log.debug("%s %s failed: %s", kind, name, exc)
            self.queue.add_rate_limited(key)
        except Exception:
            self.stats.reconcile_errors[kind] += 1
            log.exception("%s %s failed unexpectedly", kind, name)
            self.queue.add_rate_limited(key)
        else:
            outcome = "success"
            self.queue.forget(key)
            if result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after, first=result.at_slot)
        finally:
            logcontext.current.key = None
            self.queue.done(key)
            if self._metrics is not None:
                self._metrics.reconcile(kind, time.perf_counter() - started, outcome)

    def step(self) -> bool:
        """Process one ready key, if any. Deterministic single-threaded driving."""
        self.pump()
        key = self.queue.get_nowait()
        if key is None:
            return False
        self.process(key)
        return True

    def run_until_idle(self, *, max_steps: int = 1_000_000, advance: float | None = None) -> int:
        """Process keys until nothing is ready. With ``advance`` (seconds), a FakeClock is
        moved to each delayed key's due time as long as that is within ``advance``."""
        steps = 0
        deadline = self.clock.monotonic() + advance if advance is not None else None
        while steps < max_steps:
            if self.step():
                steps += 1
                continue
            if deadline is None:
                break
            due = self.queue.next_due()
            if due is None or due > deadline:
                break
            advance_to = getattr(self.clock, "advance", None)
            if advance_to is None:
                break
            advance_to(max(0.0, due - self.clock.monotonic()))
        return steps

    def run(self, stop: threading.Event, workers: int | None = None) -> None:
        """Threaded: one thread per informer, ``workers`` reconcile threads."""
        threads = [
            threading.Thread(target=inf.run, args=(stop,), name=f"informer-{i}", daemon=True)
            for i, inf in enumerate(self.caches.all)
        ]
        for n in range(workers or self.options.workers):
            threads.append(
                threading.Thread(target=self._worker, args=(stop,), name=f"worker-{n}",
                                 daemon=True)
            )
        self.threads = threads
        self._running = stop
        self.worker_heartbeat = time.monotonic()
        for t in threads:
            t.start()
        stop.wait()
        self.queue.shutdown()
        for t in threads:
            t.join(timeout=5)

    def _worker(self, stop: threading.Event) -> None:
        # only what asks the thread or the process to stop (SystemExit, KeyboardInterrupt)
        # may end a worker; anything else is logged and the loop goes on
        defer_cloud_waits()  # a cloud token's wait is a requeue: other keys go on
        while not stop.is_set():
            try:
                key = self.queue.get(timeout=0.2)
                self.worker_heartbeat = time.monotonic()
                if key is not None:
                    self.process(key)
            except Exception:
                log.exception("worker %s: unexpected failure, going on",
                              threading.current_thread().name)
                stop.wait(0.2)  # whatever failed, do not spin on it

    def health_problem(self) -> str | None:
        """Why the running engine is not doing its job, or None: a thread of ``run()``
        died, or keys are ready and no worker came back to the queue for
        ``worker_stall_seconds``."""
        running = self._running
        if running is None or running.is_set():
            return None
        dead = [t.name for t in self.threads if not t.is_alive()]
        if dead:
            return f"threads died: {', '.join(dead)}"
        ready = len(self.queue)
        waited = time.monotonic() - self.worker_heartbeat
        if ready and waited > self.options.worker_stall_seconds:
            return f"{ready} keys ready and no worker took one for {waited:.0f} s"
        return None

    def workers_alive(self) -> int:
        return sum(1 for t in self.threads if t.name.startswith("worker-") and t.is_alive())

    def is_idle(self) -> bool:
        return self.queue.is_idle()

