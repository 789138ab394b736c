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
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs
import pluggy

from podnet.core.clock import Clock, SystemClock
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import (
    NAMESPACE,
    NODE,
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    STATEFUL_SET,
    ApiError,
    Cluster,
    Kind,
    Obj,
)
from podnet.core.config import Config, NodeProviderRule, apply_policy
from podnet.core.convert import (
    RecordError,
    UnreadablePodNetwork,
    from_wire,
    salvage_pod_network,
    to_wire,
)
from podnet.core.errors import (
    MAX_MESSAGE,
    NotLeader,
    PodnetError,
    TerminalError,
    one_line,
)
from podnet.core.fence import Fence, FencedCluster
from podnet.core.gateway import ProviderGateway
from podnet.core.metrics import Metrics
from podnet.core.models import (
    LABEL_VM,
    Condition,
    NodeInfo,
    NodeNetwork,
    Phase,
    PodInfo,
    PodNetwork,
    WorkloadInfo,
    set_condition,
)
from podnet.core.objects import (
    is_statefulset,
    namespace_annotations,
    node_info,
    pod_info,
    statefulset_info,
    vm_of,
)
from podnet.core.ownership import AddressBook
from podnet.core.plugin import Providers
from podnet.core.policy import PoolPolicy
from podnet.core.pool import Pools
from podnet.core.reconcile.result import Result
from podnet.core.tracing import Tracing
from podnet.core.transition import Transitions
from podnet.core.workqueue import WorkQueue

log = logging.getLogger("podnet.engine")

T = TypeVar("T")
M = TypeVar("M", PodNetwork, NodeNetwork)

#: Queue keys: ("pod", "namespace/name"), ("node", "name"), ("gc", "").
Key = tuple[str, str]
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

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> EngineOptions:
        """What the config file says about the engine; ``overrides`` win."""
        values: dict[str, Any] = dict(
            default_provider=config.default_provider, node_providers=config.node_providers,
            networks=dict(config.networks), policies=config.policies,
            provider_config=config.providers, workers=config.workers,
            worker_stall_seconds=config.worker_stall_seconds,
        )
        values.update(overrides)
        return cls(**values)


@attrs.define
class Stats:
    """Counters the demo, the metrics endpoint and the tests read."""

    transitions: Counter[str] = attrs.field(factory=Counter)
    failed_transitions: Counter[str] = attrs.field(factory=Counter)
    provider_calls: Counter[str] = attrs.field(factory=Counter)
    reconciles: Counter[str] = attrs.field(factory=Counter)
    reconcile_errors: Counter[str] = attrs.field(factory=Counter)
    writes: Counter[str] = attrs.field(factory=Counter)


class Engine:
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
        from podnet.core.reconcile.gc import GarbageCollector
        from podnet.core.reconcile.nodepool import NodePoolReconciler
        from podnet.core.reconcile.podnetwork import PodNetworkReconciler

        self.pm = pm
        self.clock: Clock = clock or SystemClock()
        #: checked right before every write, Kubernetes or provider: the host hands in its
        #: elector's; without one (no leader election) it never closes
        self.fence = fence or Fence(self.clock, open_forever=True)
        #: every write the engine makes goes through here, so through the fence
        self.cluster: Cluster = FencedCluster(cluster, self.fence)
        self.tracing = tracing or Tracing(None)
        self.options = options or EngineOptions()
        self.random = random.Random(self.options.seed)
        self.providers = Providers(pm)
        for name, section in self.options.provider_config.items():
            self.providers.configure(name, section)
        if self.options.default_provider is not None:
            self.providers[self.options.default_provider]  # unknown name: ConfigError now
        for name in self.options.policies:
            self.providers[name]
        for i, rule in enumerate(self.options.node_providers):
            self.providers.require(rule.provider, f"nodeProviders[{i}].provider")
        for network, name in self.options.networks.items():
            self.providers.require(name, f"networks.{network}.provider")
        self._policies = {
            name: apply_policy(f"policies.{name}", info.policy,
                               self.options.policies.get(name, {}))
            for name, info in self.providers.infos.items()
        }
        self.stats = Stats()
        #: every call into a provider, and every broadcast to the plugins
        self.gateway = ProviderGateway(
            self.providers, policy=self.policy, clock=self.clock, fence=self.fence,
            tracing=self.tracing, calls=self.stats.provider_calls)
        self.pools = Pools()
        #: who owns each address: claimed before a record names it, filled from every
        #: record the cache sees (unreadable ones too)
        self.addresses = AddressBook()
        #: PodNetwork key -> (its address, the record holding that address): a record
        #: that names an address the book gave to another
        self.conflicts: dict[str, tuple[str, str]] = {}
        #: PodNetwork keys podnet itself is removing (their address goes back by the
        #: reconciler's hand, not the cache's)
        self.finishing: set[str] = set()
        #: records that left the cache without podnet removing them, by key: their pod's
        #: pass confirms they are gone before their addresses go back
        self.vanished: dict[str, PodNetwork] = {}
        self.queue: WorkQueue[Key] = WorkQueue(self.clock, name="podnet")

        self.pods: Informer[PodInfo] = Informer(cluster, POD, pod_info, name="pods")
        self.nodes: Informer[NodeInfo] = Informer(cluster, NODE, node_info, name="nodes")
        #: records that do not parse, by queue key, with the error: reported, not used
        self.unreadable: dict[str, tuple[Kind, Obj, RecordError]] = {}
        self._reported: dict[str, str] = {}
        self.pod_networks: Informer[PodNetwork] = Informer(
            cluster, POD_NETWORK, lambda o: self._read(POD_NETWORK, PodNetwork, o),
            name="podnetworks",
        )
        self.node_networks: Informer[NodeNetwork] = Informer(
            cluster, NODE_NETWORK, lambda o: self._read(NODE_NETWORK, NodeNetwork, o),
            name="nodenetworks",
        )
        #: Namespace -> its ``podnet.io/*`` annotations (for ``AllocateContext``)
        self.namespaces: Informer[dict[str, str]] = Informer(
            cluster, NAMESPACE, namespace_annotations, name="namespaces")
        #: StatefulSet (``namespace/name``) -> uid, replicas (for held sticky records)
        self.statefulsets: Informer[WorkloadInfo] = Informer(
            cluster, STATEFUL_SET, statefulset_info, name="statefulsets")
        self.pods.add_index("node", lambda p: [p.node_name] if p.node_name else [])
        self.pods.add_index("vm", lambda p: [f"{p.namespace}/{vm}"]
                            if (vm := vm_of(p)) is not None else [])
        self.pod_networks.add_index(
            "pod", lambda pn: [f"{pn.metadata.namespace}/{pn.spec.pod_name}"]
        )
        self.pod_networks.add_index("node", lambda pn: [pn.spec.node_name])
        # sticky records by their StatefulSet, and records waiting for an address by
        # namespace: few of either, so the indexes stay small
        self.pod_networks.add_index("statefulset", _statefulset_of)
        self.pod_networks.add_index(
            "vm", lambda pn: [f"{pn.metadata.namespace}/{pn.metadata.labels[LABEL_VM]}"]
            if LABEL_VM in pn.metadata.labels else [])
        self.pod_networks.add_index(
            "pending", lambda pn: [pn.metadata.namespace or ""]
            if pn.status.phase is Phase.PENDING else [])
        #: what must be listed before the engine starts: pools are rebuilt from these;
        #: the other caches (namespaces, statefulsets) may sync later
        self.required_informers: list[Informer[Any]] = [
            self.nodes, self.node_networks, self.pod_networks, self.pods,
        ]
        self.informers: list[Informer[Any]] = [
            *self.required_informers, self.namespaces, self.statefulsets,
        ]

        #: the one way either machine's state changes
        self.transitions = Transitions(
            self.tracing, succeeded=self.stats.transitions,
            failed=self.stats.failed_transitions, notify=self.gateway.notify_transition)
        self.podnetworks = PodNetworkReconciler(self, self.gateway, self.transitions)
        self.nodepools = NodePoolReconciler(self, self.gateway, self.transitions)
        #: the periodic sweep: stale records, the pools of gone nodes, leaked addresses
        self.sweeper = GarbageCollector(self, self.gateway)
        self._reconcilers: dict[str, Callable[[str], Result]] = {
            "pod": self.podnetworks.reconcile,
            "node": self.nodepools.reconcile,
            "gc": self.sweeper.reconcile,
            "invalid": self._report_unreadable,
        }
        self.started = False
        self._metrics: Metrics | None = None
        #: the threads of ``run()`` while it runs, and the stop it was given
        self.threads: list[threading.Thread] = []
        self._running: threading.Event | None = None
        #: real time a worker last came back to the queue (health: is it drained?)
        self.worker_heartbeat = time.monotonic()

    @property
    def metrics(self) -> Metrics | None:
        """Set by the host to observe durations (reconciles here, provider calls in the
        gateway); None costs nothing."""
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self.gateway.metrics = metrics

    # --- policies and providers -------------------------------------------------------

    def policy(self, provider: str) -> PoolPolicy:
        try:
            return self._policies[provider]
        except KeyError:
            return self.providers[provider].policy

    def provider_for_node(self, node: NodeInfo) -> str | None:
        """The operator's rules first, then the plugins' claims, then the default."""
        for rule in self.options.node_providers:
            if rule.selector.matches(node.labels):
                return rule.provider
        chosen = self.gateway.select_provider(node)
        if chosen is not None:
            return chosen
        return self.options.default_provider

    # --- records that do not parse -----------------------------------------------------

    def _read(self, kind: Kind, cls: type[M], obj: Obj) -> M | None:
        """Informer transform: a record that does not parse is reported on the object
        itself, and nothing acts on it. A PodNetwork is kept in the cache as an
        :class:`UnreadablePodNetwork` (the addresses its raw status names stay owned); a
        NodeNetwork stays out."""
        meta = obj.get("metadata", {})
        key = "/".join(p for p in (kind.plural, meta.get("namespace"), meta.get("name")) if p)
        try:
            model = from_wire(cls, obj)
        except RecordError as exc:
            # our own condition patch brings the object back here: report each error once
            if self._reported.get(key) != str(exc):
                self._reported[key] = str(exc)
                self.unreadable[key] = (kind, obj, exc)
                self.queue.add(("invalid", key))
            if kind == POD_NETWORK:
                salvaged: Any = salvage_pod_network(obj, exc)
                return salvaged  # type: ignore[no-any-return]
            return None
        self._reported.pop(key, None)
        return model

    def unreadable_keys(self, kind: Kind) -> set[str]:
        """Keys (``namespace/name``) of records of ``kind`` that exist but do not parse."""
        prefix = f"{kind.plural}/"
        return {key[len(prefix):] for key in list(self._reported) if key.startswith(prefix)}

    def _report_unreadable(self, key: str) -> Result:
        entry = self.unreadable.pop(key, None)
        if entry is None:
            return Result()
        kind, obj, exc = entry
        meta = obj.get("metadata", {})
        name = f"{kind.kind} {'/'.join(p for p in (meta.get('namespace'), meta.get('name')) if p)}"
        message = one_line(f"{name} is invalid: {exc}", limit=2 * MAX_MESSAGE)
        log.warning("%s", message)
        self.event(obj, "InvalidRecord", message)
        ready = set_condition(_readable_ready(obj), Condition(
            type="Ready", status="False", reason="InvalidRecord", message=message,
            last_transition_time=self.clock.now()))
        patch = {"status": {"conditions": [to_wire(c) for c in ready]}}
        try:
            self.cluster.patch(kind, meta.get("name", ""), patch, meta.get("namespace"),
                               subresource="status")
        except ApiError as err:
            log.debug("could not mark %s: %s", name, err)
        return Result()

    # --- record writes (all go through here: counted, and fed back into the caches) ----

    def create(self, kind: Kind, model: M) -> M:
        created = self.cluster.create(kind, to_wire(model))
        self.stats.writes[f"create.{kind.plural}"] += 1
        return self._assume(kind, created, type(model), None)

    def update(self, kind: Kind, model: M) -> M:
        updated = self.cluster.update(kind, to_wire(model))
        self.stats.writes[f"update.{kind.plural}"] += 1
        return self._assume(kind, updated, type(model), model.metadata.resource_version)

    def update_status(self, kind: Kind, model: M) -> M:
        updated = self.cluster.update_status(kind, to_wire(model))
        self.stats.writes[f"status.{kind.plural}"] += 1
        return self._assume(kind, updated, type(model), model.metadata.resource_version)

    def delete(self, kind: Kind, model: PodNetwork | NodeNetwork) -> None:
        meta = model.metadata
        self.cluster.delete(kind, meta.name, meta.namespace, uid=meta.uid)
        self.stats.writes[f"delete.{kind.plural}"] += 1

    def _assume(self, kind: Kind, obj: Obj, cls: type[M], based_on: str | None) -> M:
        """Feed a write back into its cache; ``based_on``: the version the write was
        conditioned on (an update carries it), which orders it after that version."""
        informer: Informer[Any] = self.pod_networks if kind == POD_NETWORK else self.node_networks
        if informer.assume(obj, based_on):
            cached = informer.get(informer.key_of(obj))
            if isinstance(cached, cls):
                return cached  # parsed once, by the cache
        return from_wire(cls, obj)

    def event(self, obj: PodNetwork | NodeNetwork | Obj, reason: str, message: str,
              warning: bool = True) -> None:
        """Record an Event; never fails the caller (events are best effort)."""
        involved = obj if isinstance(obj, dict) else to_wire(obj)
        try:
            self.cluster.emit_event(
                involved, reason, message, type="Warning" if warning else "Normal"
            )
            self.stats.writes["events"] += 1
        except ApiError as exc:
            log.debug("event %s dropped: %s", reason, exc)

    # --- queue ------------------------------------------------------------------------

    def enqueue_pod(self, key: str, after: float = 0.0) -> None:
        if after > 0:
            self.queue.add_after(("pod", key), after)
        else:
            self.queue.add(("pod", key))

    def enqueue_node(self, name: str, after: float = 0.0) -> None:
        if after > 0:
            self.queue.add_after(("node", name), after)
        else:
            self.queue.add(("node", name))

    def _on_pod(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        self.enqueue_pod(key)

    def _on_pod_network(self, _event: str, _key: str, old: PodNetwork | None,
                        new: PodNetwork | None) -> None:
        if new is not None:
            self._claim_recorded(new)
        elif old is not None:
            self._record_gone(old)
        pn = new or old
        if pn is not None:
            self.enqueue_pod(f"{pn.metadata.namespace}/{pn.spec.pod_name}")
            vm = pn.metadata.labels.get(LABEL_VM)
            if vm is not None:  # a VM's held record: its new pod may take it back now
                for pod in self.pods.by_index("vm", f"{pn.metadata.namespace}/{vm}"):
                    self.enqueue_pod(pod.key)

    def _claim_recorded(self, pn: PodNetwork) -> None:
        """Every address a record names is its owner's in the book, unless the book gave
        it to another record first: then both are told (the reconciler re-addresses the
        one that does not hold it)."""
        for address in (pn.status.ip, pn.status.ipv6):
            if not address:
                continue
            other = self.addresses.claim(pn.spec.provider, address, pn.key)
            if other is not None:
                if self.conflicts.get(pn.key) != (address, other):
                    log.error("PodNetwork %s names address %s, which %s holds",
                              pn.key, address, other)
                self.conflicts[pn.key] = (address, other)
                holder = self.pod_networks.get(other)
                if holder is not None:
                    self.enqueue_pod(self.pod_key_of(holder))
                return
        self.conflicts.pop(pn.key, None)

    def _record_gone(self, pn: PodNetwork) -> None:
        """A record left the cache. Removed by podnet's own release: the reconciler gives
        its address back. Otherwise (its finalizer taken off by hand, or a re-list that
        did not show it yet) its pod's pass asks the API server, and gives the address
        back only once the record is really gone."""
        self.conflicts.pop(pn.key, None)
        if pn.key in self.finishing:
            return
        if isinstance(pn, UnreadablePodNetwork) and not (pn.status.ip or pn.status.ipv6):
            return
        self.vanished[pn.key] = pn

    def _on_node(self, event: str, key: str, _old: Any, _new: Any) -> None:
        # level-triggered: whatever changed about a node (it came, it went, its labels
        # moved it to another provider) its pods are looked at again. Heartbeats do not
        # reach here: the cache keeps only fields that matter, and equal values fire nothing.
        self.enqueue_node(key)
        for pod in self.pods.by_index("node", key):
            self.enqueue_pod(pod.key)
        for pn in self.pod_networks.by_index("node", key):
            self.enqueue_pod(f"{pn.metadata.namespace}/{pn.spec.pod_name}")

    def _on_namespace(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # its annotations matter only to records still waiting for an address: an
        # allocated pod network never moves because its namespace changed
        for pn in self.pod_networks.by_index("pending", key):
            self.enqueue_pod(self.pod_key_of(pn))

    def _on_statefulset(self, _event: str, key: str, _old: Any, _new: Any) -> None:
        # created (or first seen), scaled, replaced or deleted: the records it holds for
        # pods that are gone are looked at again (released once it no longer wants them)
        for pn in self.pod_networks.by_index("statefulset", key):
            if pn.status.phase is Phase.RELEASING:
                self.enqueue_pod(self.pod_key_of(pn))

    # --- running ----------------------------------------------------------------------

    def start(self) -> None:
        """List every cache, then queue every object: level-triggered from the start."""
        self.pods.add_handler(self._on_pod)
        self.pod_networks.add_handler(self._on_pod_network)
        self.nodes.add_handler(self._on_node)
        self.namespaces.add_handler(self._on_namespace)
        self.statefulsets.add_handler(self._on_statefulset)
        for informer in self.required_informers:
            informer.start()
        for informer in self.informers:
            if informer in self.required_informers:
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
        self.queue.add(GC_KEY)
        self.started = True
        if self.options.freeze_gc:
            # what the first list loaded lives as long as the process: keep the collector's
            # full passes from walking it again and again (seconds at 100k records)
            gc.collect()
            gc.freeze()
            # a reconcile allocates many short-lived containers (wire dicts, spans) that
            # reference counting frees: at Python's 700 the young-generation pass ran every
            # few reconciles (about 7 % of a warm allocation's CPU)
            gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])

    def pump(self, timeout: float = 0.0) -> int:
        return sum(informer.pump(timeout) for informer in self.informers)

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
                self.queue.add_after(key, result.requeue_after)
        finally:
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
            for i, inf in enumerate(self.informers)
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

    # --- helpers used by reconcilers ---------------------------------------------------

    def pod_key_of(self, pn: PodNetwork) -> str:
        return f"{pn.metadata.namespace}/{pn.spec.pod_name}"

    def wake(self, pn_keys: Mapping[str, Any]) -> None:
        """Queue the pods of these PodNetwork keys again."""
        for pn_key in pn_keys:
            pn = self.pod_networks.get(pn_key)
            if pn is not None:
                self.enqueue_pod(self.pod_key_of(pn))


def _statefulset_of(pn: PodNetwork) -> list[str]:
    """``namespace/name`` of the apps/v1 StatefulSet owning a sticky record (none for
    others: look-alikes of other API groups are not in the cache)."""
    if not pn.spec.sticky:
        return []
    return [f"{pn.metadata.namespace}/{o.name}" for o in pn.metadata.owner_references
            if is_statefulset(o)]


def _readable_ready(obj: Obj) -> tuple[Condition, ...]:
    """The Ready condition of a record that does not parse, if that much of it does (its
    transition time is kept while it stays False)."""
    status = obj.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for raw in conditions if isinstance(conditions, list) else ():
        if isinstance(raw, Mapping) and raw.get("type") == "Ready":
            try:
                return (from_wire(Condition, raw),)
            except RecordError:
                return ()
    return ()
