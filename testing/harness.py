"""The shared driver of the provider test kit: a cluster, a fake clock, one provider, and
the engine on top, plus the ground truth to judge the outcome by.

:class:`World` is what the conformance suite (``podnet.testing.conformance``) and the
chaos machine (``podnet.testing.chaos``) drive: it adds and removes nodes and pods, runs
the engine step by step or until idle on a :class:`FakeClock`, restarts it (a new
process: nothing kept in memory, everything rebuilt from the records and the provider's
inventory), and checks the result against the provider's ground truth.

:class:`FaultInjector`, :class:`LossyCluster`, :class:`HookRecorder` and the rest of
what a test injects or watches with are in :mod:`podnet.testing.faults` (and importable
from here, as before).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import attrs
import pluggy

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import (
    NAMESPACE,
    NODE,
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    STATEFUL_SET,
    ApiError,
    Cluster,
    NotFound,
    Obj,
)
from podnet.core.convert import RecordError, from_wire, salvage_pod_network
from podnet.core.engine import Engine, EngineOptions
from podnet.core.fence import Fence
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE,
    ANNOTATION_MIGRATION_SOURCE_NODE,
    DEFAULT_NETWORK,
    FINALIZER,
    Phase,
    PodNetwork,
)
from podnet.core.objects import record_finished
from podnet.core.plugin import Providers, new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.core.ratelimit import deferring_cloud_waits
from podnet.core.tracing import Tracing
from podnet.sim.memory import InMemoryCluster
from podnet.testing.faults import (
    EFFECT_HOOKS,
    PROVIDER_HOOKS,
    Crash,
    FaultInjector,
    HookCall,
    HookRecorder,
    LossyCluster,
    TickingClock,
    WriteCounter,
    hook_name,
)

__all__ = [
    "EFFECT_HOOKS",
    "PROVIDER_HOOKS",
    "Crash",
    "EngineFactory",
    "FaultInjector",
    "HookCall",
    "HookRecorder",
    "LossyCluster",
    "NotSettled",
    "TickingClock",
    "World",
    "WriteCounter",
    "build_plugin_manager",
    "hook_name",
    "provider_name_of",
]

NAMESPACE_NAME = "demo"

class NotSettled(AssertionError):
    """The engine kept finding work: a livelock, or a hot retry loop."""



# --- plugin manager and engines ---------------------------------------------------------


def build_plugin_manager(plugin: object, *, name: str | None = None,
                         recorder: HookRecorder | None = None,
                         injector: FaultInjector | None = None) -> pluggy.PluginManager:
    """A plugin manager holding only ``plugin`` (plus the kit's recorder and injector)."""
    pm = new_plugin_manager()
    pm.register(plugin, name=name)
    pm.check_pending()
    if injector is not None:
        injector.install(pm)
    if recorder is not None:
        recorder.attach(pm)
    return pm


def provider_name_of(pm: pluggy.PluginManager) -> str:
    """The one provider the plugins in ``pm`` declare."""
    names = Providers(pm).names()
    if len(names) != 1:
        raise ValueError(f"expected exactly one provider, the plugins declare {names}")
    return names[0]


class EngineRig:
    """One engine on the in-memory cluster and a fake clock, over the plugins given, for a
    test of one behaviour: make nodes and pods, settle, read the records.

    ``plugins``: ``(name, plugin)`` pairs, registered in order; ``config``: what an
    operator's config file would say (``defaultProvider`` defaults to ``reference``);
    ``provider_config``: the sections handed to ``podnet_configure`` (else the config's
    ``providers``); ``namespaces``: made
    first (pods go into the first); ``options``: more :class:`EngineOptions`. With
    ``start=False`` the test adds to ``pm`` first (call monitoring, ...), then
    :meth:`start`."""

    def __init__(self, plugins: Sequence[tuple[str, object]], *,
                 config: Mapping[str, Any] | None = None,
                 provider_config: Mapping[str, dict[str, Any]] | None = None,
                 namespaces: Sequence[str] = (NAMESPACE_NAME,), start: bool = True,
                 **options: Any) -> None:
        from podnet.core.config import parse_config

        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.namespace = namespaces[0]
        for ns in namespaces:
            self.cluster.create(NAMESPACE, {"metadata": {"name": ns}})
        self.pm = new_plugin_manager()
        for name, plugin in plugins:
            self.pm.register(plugin, name=name)
        if provider_config is not None:
            options["provider_config"] = dict(provider_config)
        self.options = EngineOptions.from_config(
            parse_config({"defaultProvider": "reference", **(config or {})}),
            **{"seed": 0, **options})
        self.engine: Engine
        if start:
            self.start()

    def start(self) -> Engine:
        self.engine = Engine(self.cluster, self.pm, clock=self.clock, options=self.options)
        self.engine.start()
        return self.engine

    def settle(self, advance: float = 10.0) -> None:
        self.engine.run_until_idle(advance=advance)

    def node(self, i: int, labels: Mapping[str, str] | None = None) -> str:
        obj = node_obj(i)
        obj["metadata"]["labels"].update(labels or {})
        return str(self.cluster.create(NODE, obj)["metadata"]["name"])

    def pod(self, name: str, node: str, **meta: Any) -> Obj:
        obj = pod_obj(name, node)
        obj["metadata"]["namespace"] = self.namespace
        obj["metadata"].update(meta)
        return self.cluster.create(POD, obj)

    def records(self, pod: str | None = None) -> list[Obj]:
        """The PodNetworks (of the pod named ``pod``)."""
        items = self.cluster.list(POD_NETWORK).items
        return [r for r in items if (pod is None or r["spec"]["podName"] == pod)
                and not record_finished(r)]

    def record(self, pod: str) -> Obj:
        """The one PodNetwork of the pod named ``pod``."""
        (found,) = self.records(pod)
        return found


class EngineFactory:
    """Builds engines on one cluster, clock and plugin manager: calling it again is a
    controller restart (same records, same provider object and cloud; no memory)."""

    def __init__(self, cluster: InMemoryCluster, pm: pluggy.PluginManager, clock: FakeClock,
                 *, provider: str, tracing: Tracing | None = None,
                 options: EngineOptions | None = None, api: Cluster | None = None,
                 fence: Callable[[], Fence] | None = None) -> None:
        self.cluster = cluster
        #: what the engines talk to: the cluster itself, or a proxy of it (LossyCluster)
        self.api: Cluster = api if api is not None else cluster
        self.pm = pm
        self.clock = clock
        self.provider = provider
        self.tracing = tracing or Tracing(None)
        # seeded: jitter and backoff draws repeat, so a failing run replays exactly
        self.options = options or EngineOptions(default_provider=provider, seed=0)
        #: called once per engine built (a new process): the fence it writes behind, e.g.
        #: its elector's; None: no leader election (a fence that never closes)
        self.fence = fence
        self.engines: list[Engine] = []

    def __call__(self, *, start: bool = False, **overrides: Any) -> Engine:
        options = attrs.evolve(self.options, **overrides) if overrides else self.options
        engine = Engine(self.api, self.pm, clock=self.clock, tracing=self.tracing,
                        options=options, fence=self.fence() if self.fence is not None else None)
        self.engines.append(engine)
        if start:
            engine.start()
        return engine

    @staticmethod
    def stop(engine: Engine) -> None:
        """Close the engine's watches: a dead process holds none."""
        for informer in engine.informers:
            informer.stop()
        engine.queue.shutdown()

    def close(self) -> None:
        for engine in self.engines:
            self.stop(engine)
        self.engines.clear()


# --- the world --------------------------------------------------------------------------


def _cloud_has_ipv6(cloud: Mapping[str, str]) -> bool:
    """Whether a ground truth reports IPv6 addresses (some clouds' views are IPv4 only)."""
    return any(":" in address for address in cloud)


def _pod_uid(pod: Obj) -> str:
    return str(pod["metadata"]["uid"])


class World:
    """A cluster with nodes and pods, the engine reconciling it, and the checks.

    ``cloud_addresses`` is the provider's ground truth: every address the cloud (or the
    overlay's IPAM) holds, mapped to the node it is on.
    """

    def __init__(self, cluster: InMemoryCluster, clock: FakeClock, engines: EngineFactory,
                 cloud_addresses: Callable[[], Mapping[str, str]], *,
                 namespace: str = NAMESPACE_NAME, start_attempts: int = 20) -> None:
        self.cluster = cluster
        self.clock = clock
        self.engines = engines
        self.cloud_addresses = cloud_addresses
        self.namespace = namespace
        self.start_attempts = start_attempts
        self._engine: Engine | None = None
        #: whether the engine, as its workers do, puts a cloud call whose token is not
        #: there off to its slot (CloudWait, a requeue) rather than sleeping the fake
        #: clock forward (:meth:`step`, :meth:`settle`)
        self.defer_cloud_waits = False
        #: controller deaths (Crash) survived, and restarts done (crashes included)
        self.crashes = 0
        self.restarts = 0
        #: leadership moved to another replica (:meth:`take_over`)
        self.takeovers = 0
        #: every factory engines came from (one per replica that led): closed together
        self._factories: list[EngineFactory] = [engines]
        with self.quiet():
            try:
                cluster.create(NAMESPACE, {"metadata": {"name": namespace}})
            except ApiError:
                pass  # exists: a second World on the same cluster

    # --- the engine ---------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        return self._engine if self._engine is not None else self.start()

    @property
    def provider(self) -> str:
        return self.engines.provider

    def policy(self) -> PoolPolicy:
        return self.engine.policy(self.provider)

    def gc_grace(self) -> float:
        """How long a leaked address may live: the leaked-IP expiry plus two GC periods."""
        policy = self.policy()
        return policy.leaked_ip_expiry + 2 * policy.gc_period

    def start(self) -> Engine:
        """Start an engine; an API server failing the first lists is retried, as a
        crash-looping pod would be."""
        if self._engine is not None:
            return self._engine
        for attempt in range(self.start_attempts + 1):
            engine = self.engines()
            try:
                if attempt < self.start_attempts:
                    engine.start()
                else:
                    with self.quiet():  # enough: let the last attempt through
                        engine.start()
            except ApiError:
                self.engines.stop(engine)
                continue
            self._engine = engine
            return engine
        raise AssertionError("unreachable: the last start attempt runs without faults")

    def restart(self) -> Engine:
        """Drop the engine and everything it kept in memory; start a new one."""
        if self._engine is not None:
            self.engines.stop(self._engine)
            self._engine = None
        self.restarts += 1
        return self.start()

    def take_over(self, engines: EngineFactory) -> Engine | None:
        """Another replica leads now: the engine is one of ``engines`` (started here), and
        so is every engine a later restart or crash brings up. The engine that ran so far
        is returned as it was, neither stopped nor restarted (a paused replica keeps its
        memory and its watches); stop it with :meth:`EngineFactory.stop`."""
        old, self._engine = self._engine, None
        self.engines = engines
        if engines not in self._factories:
            self._factories.append(engines)
        self.takeovers += 1
        self.start()
        return old

    def _crashed(self) -> None:
        self.crashes += 1
        self.restart()

    def step(self, n: int = 1) -> int:
        """Process at most ``n`` ready keys (fewer when the queue runs dry); a Crash
        restarts the engine and counts as a step."""
        done = 0
        with self._deferral():
            for _ in range(n):
                try:
                    if not self.engine.step():
                        break
                except Crash:
                    self._crashed()
                done += 1
        return done

    def _deferral(self) -> AbstractContextManager[None]:
        return deferring_cloud_waits() if self.defer_cloud_waits else nullcontext()

    def settle(self, advance: float = 0.0, *, max_steps: int = 50_000) -> int:
        """Run until idle, moving the fake clock up to ``advance`` seconds ahead to each
        delayed key's due time; the clock ends ``advance`` seconds later. Crashes restart
        the engine. :raise NotSettled: still busy after ``max_steps`` steps."""
        deadline = self.clock.monotonic() + advance
        steps = 0
        while True:
            left = max(0.0, deadline - self.clock.monotonic())
            try:
                with self._deferral():
                    steps += self.engine.run_until_idle(advance=left,
                                                        max_steps=max_steps - steps)
            except Crash:
                steps += 1
                self._crashed()
                continue
            if steps >= max_steps:
                raise NotSettled(
                    f"engine still busy after {steps} steps at t={self.clock.monotonic()}: "
                    f"{self.engine.queue!r}, reconciles {dict(self.engine.stats.reconciles)}")
            if self.clock.monotonic() < deadline:
                self.clock.advance(deadline - self.clock.monotonic())
                continue  # anything due exactly at the deadline
            return steps

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def close(self) -> None:
        for factory in self._factories:
            factory.close()
        self._engine = None

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """Cluster faults off for the test driver's own calls (it is not the engine): the
        rates, and the failures planned for the engine's next calls, kept for it."""
        with self.cluster.faults.paused():
            yield

    # --- the cluster ------------------------------------------------------------------------

    @staticmethod
    def node_name(node: int | str) -> str:
        return node if isinstance(node, str) else str(node_obj(node)["metadata"]["name"])

    def add_node(self, i: int) -> str:
        with self.quiet():
            return str(self.cluster.create(NODE, node_obj(i))["metadata"]["name"])

    def delete_node(self, node: int | str) -> None:
        """Delete the Node object; its pods stay (bound to a node that is gone)."""
        with self.quiet():
            self.cluster.delete(NODE, self.node_name(node))

    def has_node(self, node: int | str) -> bool:
        with self.quiet():
            try:
                self.cluster.get(NODE, self.node_name(node))
            except NotFound:
                return False
        return True

    def add_pod(self, name: str, node: int | str, annotations: Mapping[str, str] | None = None,
                owner: tuple[str, str] | None = None,
                labels: Mapping[str, str] | None = None) -> Obj:
        """Create a running pod bound to ``node``; ``owner`` is its controller as
        ``(kind, name)``, e.g. ``("StatefulSet", "web")`` for a sticky pod; ``labels``
        added to the test's own (KubeVirt's ``kubevirt.io/migrationJobUID`` on a live
        migration's target pod, say)."""
        meta: dict[str, Any] = {"name": name, "namespace": self.namespace,
                                "labels": {"app": "podnet-test", **(labels or {})}}
        if annotations:
            meta["annotations"] = dict(annotations)
        if owner is not None:
            kind, owner_name = owner
            uid = (self.statefulset(owner_name) if kind == "StatefulSet"
                   else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{owner_name}")))
            meta["ownerReferences"] = [{
                "apiVersion": "apps/v1", "kind": kind, "name": owner_name,
                "uid": uid, "controller": True,
            }]
        pod = {
            "metadata": meta,
            "spec": {"nodeName": self.node_name(node),
                     "containers": [{"name": "app", "image": "podnet-test"}]},
            "status": {"phase": "Running"},
        }
        with self.quiet():
            return self.cluster.create(POD, pod)

    def statefulset(self, name: str, replicas: int = 100) -> str:
        """The uid of StatefulSet ``name``, created (wanting ``replicas`` pods) when the
        cluster has none: a sticky pod's owner exists, as it would in a cluster (core
        releases at once the address of a pod whose StatefulSet is gone)."""
        with self.quiet():
            try:
                found = self.cluster.get(STATEFUL_SET, name, self.namespace)
            except NotFound:
                found = self.cluster.create(STATEFUL_SET, {
                    "metadata": {"name": name, "namespace": self.namespace},
                    "spec": {"replicas": replicas,
                             "selector": {"matchLabels": {"app": name}}}})
        return str(found["metadata"]["uid"])

    def pod(self, name: str) -> Obj | None:
        with self.quiet():
            try:
                return self.cluster.get(POD, name, self.namespace)
            except NotFound:
                return None

    def delete_pod(self, name: str, grace: int | None = 0) -> None:
        """Delete a pod with ``grace``: 0 (the default) deletes it at once, as a force delete
        or the kubelet's confirmation does; with more (or None: the pod's own, 30 s) it is
        marked terminating and stays until :meth:`confirm_pod_deleted`, the kubelet's
        part (no kubelet stand-in runs here)."""
        with self.quiet():
            self.cluster.delete(POD, name, self.namespace, grace_period_seconds=grace)

    def confirm_pod_deleted(self, name: str) -> None:
        """The kubelet confirms a terminating pod stopped: it goes for good."""
        with self.quiet():
            self.cluster.delete(POD, name, self.namespace, grace_period_seconds=0)

    def finish_pod(self, name: str, phase: str = "Succeeded") -> None:
        """The kubelet reports the pod terminal (``Succeeded`` or ``Failed``)."""
        with self.quiet():
            pod = self.cluster.get(POD, name, self.namespace)
            pod["status"] = {**(pod.get("status") or {}), "phase": phase}
            self.cluster.update_status(POD, pod)

    def recreate_pod(self, name: str, node: int | str | None = None) -> Obj:
        """Delete the pod and create it again at once under the same name (new uid), on
        ``node`` or the same node; annotations and owner carry over. A terminating pod is
        force-deleted first."""
        old = self.pod(name)
        if old is None:
            raise KeyError(f"no pod {name}")
        self.delete_pod(name, grace=0)
        meta = old["metadata"]
        owner = None
        for ref in meta.get("ownerReferences") or ():
            owner = (ref["kind"], ref["name"])
        return self.add_pod(name, node if node is not None else old["spec"]["nodeName"],
                            meta.get("annotations"), owner)

    # --- ground truth -------------------------------------------------------------------

    def records(self) -> list[PodNetwork]:
        """Every PodNetwork as the API server holds it, less the finished ones (released,
        left to the garbage collector: as good as deleted)."""
        with self.quiet():
            items = self.cluster.list(POD_NETWORK).items
        out: list[PodNetwork] = []
        for obj in items:
            if record_finished(obj):
                continue
            try:
                out.append(from_wire(PodNetwork, obj))
            except RecordError as exc:  # made unreadable on purpose: as far as it reads
                out.append(salvage_pod_network(obj, exc))
        return out

    def record_of(self, pod: str, network: str = DEFAULT_NETWORK) -> PodNetwork | None:
        """The record of the pod now running under ``pod`` (None when it has none)."""
        obj = self.pod(pod)
        if obj is None:
            return None
        for pn in self.records():
            if (pn.spec.pod_name == pod and pn.spec.pod_uid == _pod_uid(obj)
                    and pn.spec.network == network):
                return pn
        return None

    def owners(self) -> dict[str, list[PodNetwork]]:
        """address -> the records holding it in ``status.ip`` or ``status.ipv6``."""
        out: dict[str, list[PodNetwork]] = {}
        for pn in self.records():
            for address in (pn.status.ip, pn.status.ipv6):
                if address:
                    out.setdefault(address, []).append(pn)
        return out

    def live_nodes(self) -> dict[str, Obj]:
        with self.quiet():
            items = self.cluster.list(NODE).items
        return {n["metadata"]["name"]: n for n in items
                if not n["metadata"].get("deletionTimestamp")}

    def wanted_pods(self) -> dict[str, Obj]:
        """Pods that must have a network now: running on a live node, not terminating."""
        nodes = self.live_nodes()
        with self.quiet():
            items = self.cluster.list(POD).items
        out = {}
        for pod in items:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if meta.get("deletionTimestamp") or spec.get("hostNetwork"):
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if spec.get("nodeName") in nodes:
                out[f"{meta['namespace']}/{meta['name']}"] = pod
        return out

    def live_pod_ips(self) -> dict[str, str]:
        """pod key -> address of its routed default network, for pods that exist now."""
        with self.quiet():
            pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": _pod_uid(p)
                    for p in self.cluster.list(POD).items}
        out = {}
        for pn in self.records():
            key = f"{pn.metadata.namespace}/{pn.spec.pod_name}"
            if (pods.get(key) == pn.spec.pod_uid and pn.spec.network == DEFAULT_NETWORK
                    and pn.status.phase is Phase.ROUTED and pn.status.ip):
                out[key] = pn.status.ip
        return out

    def pooled(self) -> set[str]:
        """Addresses the engine's node pools hold (idle or owned; both halves of a
        dual-stack pair, and invalid halves waiting to be given back)."""
        if self._engine is None:
            return set()
        out = set()
        for pool in self._engine.pools.all():
            for a in pool.addresses.values():
                out.add(a.address)
                if a.ipv6:
                    out.add(a.ipv6)
        return out

    def leaked(self) -> dict[str, str]:
        """Cloud addresses that no record owns and no pool holds, on any node: a node
        that left the cluster keeps none of what podnet made for it."""
        owned = set(self.owners())
        pooled = self.pooled()
        return {ip: node for ip, node in self.cloud_addresses().items()
                if ip not in owned and ip not in pooled}

    # --- checks ---------------------------------------------------------------------------

    def double_owner_problems(self) -> list[str]:
        """No address in two records at once; no two live pods routed on one address."""
        problems = [
            f"address {ip} is recorded by {len(pns)} records: "
            + ", ".join(f"{pn.key} ({pn.status.phase.value})" for pn in pns)
            for ip, pns in sorted(self.owners().items()) if len(pns) > 1
        ]
        by_ip: dict[str, list[str]] = {}
        for pod, ip in self.live_pod_ips().items():
            by_ip.setdefault(ip, []).append(pod)
        problems += [f"live pods {', '.join(sorted(pods))} are all routed on {ip}"
                     for ip, pods in sorted(by_ip.items()) if len(pods) > 1]
        return problems

    def assert_no_double_owner(self) -> None:
        problems = self.double_owner_problems()
        if problems:
            raise AssertionError("double assignment:\n  " + "\n  ".join(problems))

    def dangling_problems(self) -> list[str]:
        """Allocated or routed records on live nodes whose address (either half of a
        dual-stack pair the cloud reports) the cloud lacks. A provider without node pools
        binds an address to a node when it routes it: its Allocated record (a record
        that moved with its pod, its route still to come) needs its address in the cloud,
        on whichever node; its Routed record needs it on the record's node."""
        cloud = self.cloud_addresses()
        nodes = self.live_nodes()
        node_pool = self.engine.providers[self.provider].uses_node_pool

        def dangles(pn: PodNetwork, address: str) -> bool:
            if node_pool or pn.status.phase is Phase.ROUTED:
                return cloud.get(address) != pn.spec.node_name
            return address not in cloud

        return [
            f"{pn.key} is {pn.status.phase.value} on {address}, which the cloud does "
            f"not have on {pn.spec.node_name} (cloud: {cloud.get(address)})"
            for pn in self.records()
            if pn.status.phase in (Phase.ALLOCATED, Phase.ROUTED)
            and pn.spec.node_name in nodes
            for address in (pn.status.ip, pn.status.ipv6)
            if address and (address == pn.status.ip or _cloud_has_ipv6(cloud))
            and dangles(pn, address)
        ]

    def convergence_problems(self) -> list[str]:
        problems: list[str] = []
        wanted = self.wanted_pods()
        records = self.records()
        by_pod: dict[str, list[PodNetwork]] = {}
        lent: dict[str, PodNetwork] = {}
        for pn in records:
            by_pod.setdefault(f"{pn.metadata.namespace}/{pn.spec.pod_name}", []).append(pn)
            source = pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE)
            if source is not None:
                lent[f"{pn.metadata.namespace}/{source}"] = pn
        for key, pod in sorted(wanted.items()):
            if key not in by_pod and key in lent:
                # a live migration's source: the VM's record serves its target meanwhile
                pn = lent[key]
                if pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE_NODE) != pod[
                        "spec"]["nodeName"] or pn.status.phase is not Phase.ROUTED:
                    problems.append(f"pod {key}: its VM's record {pn.key} is "
                                    f"{pn.status.phase.value}, its source node "
                                    f"{pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE_NODE)}")
                continue
            mine = [pn for pn in by_pod.get(key, ())
                    if pn.spec.network == DEFAULT_NETWORK and pn.spec.pod_uid == _pod_uid(pod)]
            if len(mine) != 1:
                problems.append(f"pod {key} has {len(mine)} default PodNetworks")
                continue
            pn = mine[0]
            if pn.status.phase is not Phase.ROUTED or not pn.status.ip:
                ready = [c for c in pn.status.conditions if c.type == "Ready"]
                why = f" ({ready[0].reason}: {ready[0].message})" if ready else ""
                problems.append(f"pod {key}: {pn.key} is {pn.status.phase.value}{why}")
            elif pn.spec.node_name != pod["spec"]["nodeName"]:
                problems.append(f"pod {key} runs on {pod['spec']['nodeName']}, its network "
                                f"{pn.key} is on {pn.spec.node_name}")
            elif FINALIZER not in pn.metadata.finalizers:
                problems.append(f"{pn.key} is routed without the {FINALIZER} finalizer")
        for pn in records:
            key = f"{pn.metadata.namespace}/{pn.spec.pod_name}"
            running = wanted.get(key)
            if running is None or _pod_uid(running) != pn.spec.pod_uid:
                problems.append(f"{pn.key} ({pn.status.phase.value}, {pn.status.ip}) outlives "
                                f"its pod {key} (uid {pn.spec.pod_uid[:8]})")
            if pn.metadata.deletion_timestamp is not None:
                problems.append(f"{pn.key} is stuck deleting with finalizers "
                                f"{list(pn.metadata.finalizers)}")
        with self.quiet():
            node_networks = self.cluster.list(NODE_NETWORK).items
        live = self.live_nodes()
        for nn in node_networks:
            meta = nn["metadata"]
            if meta["name"] not in live:
                problems.append(f"NodeNetwork {meta['name']} outlives its node (finalizers "
                                f"{list(meta.get('finalizers') or ())})")
        problems += self.double_owner_problems()
        problems += self.dangling_problems()
        problems += [f"address {ip} on {node} is leaked: no record owns it, no pool holds it"
                     for ip, node in sorted(self.leaked().items())]
        if self._engine is not None:
            for pn in records:
                pool = self._engine.pools.find(pn.spec.provider, pn.spec.node_name)
                if pool is None or not pn.status.ip or pn.status.phase is not Phase.ROUTED:
                    continue
                owner = pool.owner_of(pn.status.ip)
                if owner != pn.key:
                    problems.append(f"{pn.key} is routed on {pn.status.ip}, which the engine's "
                                    f"pool of {pn.spec.node_name} gives to {owner}")
        return problems

    def assert_converged(self) -> None:
        """Every wanted pod has one routed default network and no record outlives its pod;
        no address is owned twice, dangling or leaked; the engine's pools agree."""
        problems = self.convergence_problems()
        if problems:
            raise AssertionError(
                f"not converged at t={self.clock.monotonic():.1f} "
                f"(crashes {self.crashes}, restarts {self.restarts}):\n  "
                + "\n  ".join(problems))
