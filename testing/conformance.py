"""The provider conformance suite: what every provider must do for the engine to be right.

Subclass :class:`ProviderConformance` in a test module of your provider::

    pytest_plugins = ["podnet.testing"]

    class TestMyProvider(ProviderConformance):
        provider_name = "mine"

        @pytest.fixture
        def provider_plugin(self):
            return MyProvider(client=FakeClient())

        def cloud_addresses(self, plugin):
            return plugin.client.addresses_by_node()  # address -> node name

        def error_samples(self):
            return [(MySdkError("Throttling"), ErrorKind.THROTTLED), ...]

Every test runs the real engine on an in-memory cluster and a fake clock, against the
provider's own ground truth: lifecycle, no-op resync, idempotency under crashes at each
hook, finalizers, a deleted node's addresses and interfaces given back (through a crash
half way), a node-pool provider's sweep leaving what is in use, transition spans, error
classification and the records' wire form.
"""

from __future__ import annotations

import abc
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import pluggy
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from podnet.core.cluster.port import (
    NODE_NETWORK,
    POD,
    POD_NETWORK,
    STATEFUL_SET,
    NotFound,
    Obj,
)
from podnet.core.convert import from_wire, to_wire
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.models import (
    FINALIZER,
    NodeInfo,
    NodeNetwork,
    ObjectMeta,
    Phase,
    PodNetwork,
    PodNetworkSpec,
)
from podnet.core.objects import record_finished
from podnet.core.plugin import Providers
from podnet.core.tracing import (
    ATTR_ERROR_TYPE,
    ATTR_FROM,
    ATTR_IP,
    ATTR_MACHINE,
    ATTR_NAMESPACE,
    ATTR_NODE,
    ATTR_OBJECT,
    ATTR_POD,
    ATTR_PROVIDER,
    ATTR_TO,
    ATTR_TRIGGER,
    ATTR_WAITING,
    EVENT_WAITING,
)
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import (
    AllocateContext,
    CloudInterface,
    NodeContext,
    PodNetworkContext,
    ProviderInfo,
)
from podnet.sim.memory import InMemoryCluster
from podnet.testing.harness import Crash, FaultInjector, HookRecorder, World, hook_name

__all__ = ["CRASH_HOOKS", "ProviderConformance"]

#: the hooks a crash is injected at, each right after (or before) the provider's work
CRASH_HOOKS = ("allocate", "route", "release", "pool_grow", "pool_shrink", "interface_create")
_POOL_HOOKS = frozenset({"pool_grow", "pool_shrink", "interface_create"})

_LIFECYCLE = [
    ("allocate", "pending", "allocated"),
    ("route", "allocated", "routed"),
    ("release", "routed", "releasing"),
    ("finish", "releasing", "deleted"),
]
_WRITE_OPS = frozenset({"create", "update", "update_status", "patch", "delete", "emit_event"})
_POD_SPAN_ATTRS = (ATTR_MACHINE, ATTR_TRIGGER, ATTR_FROM, ATTR_PROVIDER, ATTR_OBJECT, ATTR_POD,
                   ATTR_NAMESPACE, ATTR_NODE)
_ENI_SPAN_ATTRS = (ATTR_MACHINE, ATTR_TRIGGER, ATTR_FROM, ATTR_PROVIDER, ATTR_OBJECT, ATTR_NODE)


def _write_count(cluster: InMemoryCluster) -> int:
    return sum(n for (op, _plural), n in cluster.stats.items() if op in _WRITE_OPS)


def _attrs(span: ReadableSpan) -> Mapping[str, Any]:
    return span.attributes or {}


class ProviderConformance(abc.ABC):
    """Base class of a provider's conformance tests; see the module docstring."""

    #: the name the plugin registers its provider under
    provider_name: ClassVar[str]
    #: the hooks the crash tests cover (narrow it for a provider without some of them)
    crash_hooks: ClassVar[tuple[str, ...]] = CRASH_HOOKS

    # --- what the subclass supplies -----------------------------------------------------

    @abc.abstractmethod
    def cloud_addresses(self, plugin: Any) -> Mapping[str, str]:
        """The provider's ground truth: every address its cloud holds -> node name."""

    @abc.abstractmethod
    def error_samples(self) -> Sequence[tuple[BaseException, ErrorKind]]:
        """Errors the provider's SDK raises, each with the kind it must be classified as."""

    @pytest.fixture
    def ground_truth(self, provider_plugin: Any) -> Callable[[], Mapping[str, str]]:
        return lambda: self.cloud_addresses(provider_plugin)

    # --- helpers ------------------------------------------------------------------------

    @staticmethod
    def _bring_up(world: World, pods: int = 1, node: int = 0) -> list[str]:
        """A node with its pool ready, then ``pods`` pods on it, all settled."""
        if not world.has_node(node):
            world.add_node(node)
        world.settle()
        names = [f"p{i}" for i in range(pods)]
        for name in names:
            world.add_pod(name, node)
        world.settle()
        return names

    @staticmethod
    def _steady(world: World) -> None:
        """Settled including the pool's periodic top-up and trim: nothing left to do."""
        world.settle(advance=2 * world.policy().refill_period)

    def _uses_pool(self, world: World) -> bool:
        return world.engine.providers[world.provider].uses_node_pool

    # --- registration -------------------------------------------------------------------

    def test_registers_and_validates(self, plugin_manager: pluggy.PluginManager,
                                     provider_plugin: Any, provider_name: str) -> None:
        plugin_manager.check_pending()  # every hookimpl matches a spec
        assert provider_name == self.provider_name
        info = Providers(plugin_manager)[provider_name]
        assert info.version
        implemented = {h.name for h in plugin_manager.get_hookcallers(provider_plugin) or ()}
        required = {"podnet_register_provider", "podnet_allocate", "podnet_route",
                    "podnet_release"}
        if info.uses_node_pool:
            required |= {"podnet_node_inventory", "podnet_pool_grow", "podnet_pool_shrink"}
        if info.manages_interfaces:
            required |= {"podnet_interface_create", "podnet_interface_dispose"}
        assert required <= implemented, f"missing hooks: {sorted(required - implemented)}"

    def test_is_never_called_for_another_provider(
            self, plugin_manager: pluggy.PluginManager, provider_plugin: Any,
            hook_calls: HookRecorder, ground_truth: Callable[[], Mapping[str, str]]) -> None:
        """Core routes a provider's calls to the plugin that declared it: with another
        provider's plugin registered beside this one, no call for the other reaches this
        plugin, and none changes this provider's cloud."""
        other = f"not-{self.provider_name}"
        plugin_manager.register(_OtherProvider(other), name=other)
        reached: list[str] = []

        def watch(hook: str, impls: Sequence[Any], _kwargs: Mapping[str, Any]) -> None:
            if any(impl.plugin is provider_plugin for impl in impls):
                reached.append(hook)

        undo = plugin_manager.add_hookcall_monitoring(watch, lambda *_: None)
        try:
            providers = Providers(plugin_manager)
            assert providers.plugins[self.provider_name] is provider_plugin
            reached.clear()  # declaring a provider asks each plugin, this one too
            truth = dict(ground_truth())
            node = NodeContext(node=NodeInfo(name="node-x", uid="uid-x",
                                             pod_cidr="10.250.0.0/24"))
            pn = PodNetwork(metadata=ObjectMeta(name="x.default.00000000", namespace="demo"),
                            spec=PodNetworkSpec(pod_name="x", pod_uid="00000000",
                                                node_name="node-x", provider=other))
            ctx = PodNetworkContext(pod_network=pn, node=node)

            def routed(hook: str, **kwargs: Any) -> Any:
                return providers.hook(other, hook)(**kwargs)

            routed("podnet_configure", provider=other, config={"no-such-option": 1})
            assert routed("podnet_node_inventory", provider=other, node=node) is None
            assert routed("podnet_unknown_machines", provider=other, known=()) is None
            assert routed("podnet_pool_grow", provider=other, node=node, interface=None,
                          count=1, subnet=None) is None
            assert routed("podnet_pool_shrink", provider=other, node=node, entries=[]) is None
            assert routed("podnet_interface_create", provider=other, node=node, subnet=None,
                          ip_count=1) is None
            assert routed("podnet_interface_dispose", provider=other, node=node,
                          interface=CloudInterface(id="itf-x")) is None
            assert routed("podnet_node_check", provider=other, node=node) is None
            assert routed("podnet_address_space", provider=other, node=node) is None
            assert routed("podnet_allocate",
                          context=AllocateContext(pod_network=pn, node=node)) is None
            assert routed("podnet_route", context=ctx) is None
            assert routed("podnet_verify", context=ctx) is None
            assert routed("podnet_release", context=ctx) is None
            assert routed("podnet_hold_address", context=ctx) is None
            assert routed("podnet_sweep", provider=other, owners=(), remove=()) is None
            routed("podnet_node_removed", provider=other, node="node-x")
            assert routed("podnet_classify_error", provider=other,
                          error=RuntimeError("x")) is None
        finally:
            undo()
        assert reached == [], f"calls for {other} reached this plugin: {reached}"
        assert dict(ground_truth()) == truth, "a call for another provider changed the cloud"
        assert all(c.error is None for c in hook_calls), [c for c in hook_calls if c.error]

    # --- lifecycle ----------------------------------------------------------------------

    def test_lifecycle_pending_to_routed_and_back(self, world: World, hook_calls: HookRecorder
                                                  ) -> None:
        self._bring_up(world)
        pn = world.record_of("p0")
        assert pn is not None and pn.status.phase is Phase.ROUTED, pn
        assert pn.status.ip and FINALIZER in pn.metadata.finalizers
        assert world.live_pod_ips() == {"demo/p0": pn.status.ip}
        ip = pn.status.ip

        world.delete_pod("p0")
        world.settle()
        with pytest.raises(NotFound):
            world.cluster.get(POD_NETWORK, pn.metadata.name, pn.metadata.namespace)
        seen = [(e.trigger, e.source, e.dest)
                for e in hook_calls.transitions("pod_network", ok=True) if e.object_key == pn.key]
        assert seen == _LIFECYCLE
        transitions = world.engine.stats.transitions
        assert [transitions[f"pod_network.{t}"] for t, _, _ in _LIFECYCLE] == [1, 1, 1, 1]
        assert ip not in world.owners()
        if self._uses_pool(world):
            pool = world.engine.pools.find(world.provider, pn.spec.node_name)
            assert pool is not None
            # back in the pool as idle, or already given back to the cloud
            assert (ip in pool.addresses and pool.owner_of(ip) is None) or \
                ip not in world.cloud_addresses()
        world.assert_converged()

    def test_settled_reconcile_makes_no_call_and_no_write(self, world: World,
                                                          hook_calls: HookRecorder) -> None:
        self._bring_up(world, pods=2)
        self._steady(world)
        world.assert_converged()
        engine = world.engine
        writes, calls = dict(engine.stats.writes), dict(engine.stats.provider_calls)
        cluster_writes = _write_count(world.cluster)
        hook_calls.clear()
        for pod in ("demo/p0", "demo/p1"):
            engine.enqueue_pod(pod)
        engine.enqueue_node(world.node_name(0))
        engine.queue.add(("gc", ""))
        assert world.settle() >= 4
        assert hook_calls.provider_calls() == []
        assert dict(engine.stats.provider_calls) == calls
        assert dict(engine.stats.writes) == writes
        assert _write_count(world.cluster) == cluster_writes

    def test_verify_on_resync_makes_no_write(self, world: World, hook_calls: HookRecorder
                                             ) -> None:
        self._bring_up(world, pods=2)
        self._steady(world)
        engine = world.engine
        writes, cluster_writes = dict(engine.stats.writes), _write_count(world.cluster)
        hook_calls.clear()
        world.settle(advance=world.policy().verify_period + 1)
        assert len(hook_calls.of("verify")) >= 2
        assert [c for c in hook_calls.provider_calls()
                if c not in ("podnet_verify", "podnet_node_inventory")] == []
        assert dict(engine.stats.writes) == writes
        assert _write_count(world.cluster) == cluster_writes
        world.assert_converged()

    def test_restart_adopts_a_settled_world(self, world: World, hook_calls: HookRecorder
                                            ) -> None:
        """A new controller process reads what is there and changes nothing of it."""
        self._bring_up(world, pods=3)
        self._steady(world)
        before = {pn.key: (pn.metadata.resource_version, pn.status.ip)
                  for pn in world.records()}
        hook_calls.clear()
        world.restart()
        world.settle()
        assert [c for c in hook_calls.provider_calls() if c != "podnet_node_inventory"] == []
        assert {pn.key: (pn.metadata.resource_version, pn.status.ip)
                for pn in world.records()} == before
        assert world.engine.stats.writes["status.podnetworks"] == 0
        world.assert_converged()

    @pytest.mark.parametrize("how", ["pod deleted", "pod terminal", "record deleted",
                                     "node deleted", "pod deleted with grace"])
    def test_finalizer_removed_after_release(self, world: World, how: str) -> None:
        self._bring_up(world)
        pn = world.record_of("p0")
        assert pn is not None and FINALIZER in pn.metadata.finalizers
        cluster, name, ns = world.cluster, pn.metadata.name, pn.metadata.namespace
        if how == "pod deleted":
            world.delete_pod("p0")
        elif how == "pod terminal":
            world.finish_pod("p0")
        elif how == "record deleted":
            cluster.delete(POD_NETWORK, name, ns)
        elif how == "node deleted":
            world.delete_node(0)
        else:
            world.delete_pod("p0", grace=30)
            world.settle()
            assert world.record_of("p0") is not None, "released during the pod's grace period"
            # the kubelet never confirms here: past its grace the pod no longer runs
            world.settle(advance=30 + world.policy().verify_period)
        world.settle()
        if how == "record deleted":
            # the pod still runs: a new record (same name, new uid) serves it
            again = world.record_of("p0")
            assert again is not None and again.metadata.uid != pn.metadata.uid
            assert again.status.phase is Phase.ROUTED
        elif how in ("pod terminal", "pod deleted with grace"):
            # the pod's object stays: the finalizer's removal said the record is
            # finished (as good as deleted), and the garbage collector takes it with
            # the pod
            left = cluster.get(POD_NETWORK, name, ns)
            assert record_finished(left), left["metadata"]
            assert world.record_of("p0") is None
        else:
            with pytest.raises(NotFound):
                cluster.get(POD_NETWORK, name, ns)
        world.settle(advance=world.gc_grace())
        world.assert_converged()

    @pytest.mark.parametrize("crash", [None, "pool_shrink", "interface_dispose",
                                       "node_inventory"])
    def test_deleted_node_gets_back_nothing_of_podnet(
            self, world: World, fault_injector: FaultInjector, hook_calls: HookRecorder,
            provider_plugin: Any, crash: str | None) -> None:
        """A deleted Node (its instance kept) has every address and interface podnet made
        for it given back before its NodeNetwork goes: the record's finalizer stays until
        then, through a controller crash in the middle (``crash``: right after that hook
        did its work); then its pool is dropped."""
        if not self._uses_pool(world):
            pytest.skip("the provider keeps no node pools")
        if crash == "interface_dispose" and not world.engine.providers[
                world.provider].manages_interfaces:
            pytest.skip("the provider manages no interfaces")
        node = world.node_name(0)
        world.add_node(0)
        world.settle()
        pool = world.engine.pools.find(world.provider, node)
        assert pool is not None
        # more pods than one interface holds: a provider that makes interfaces makes one
        self._bring_up(world, pods=min(pool.ips_per_interface + 1, 40))
        nn = world.cluster.get(NODE_NETWORK, node)
        assert FINALIZER in nn["metadata"].get("finalizers", ()), "no finalizer on the record"
        assert node in world.cloud_addresses().values()
        if crash is not None:
            fault_injector.crash(crash, when="after")
        hook_calls.clear()
        world.delete_node(0)
        world.settle(advance=world.policy().min_ip_lifetime + 1)
        if crash is not None:
            assert [h for h, _, _ in fault_injector.fired] == [hook_name(crash)]
            assert world.crashes == 1
        world.settle(advance=world.gc_grace())
        left = sorted(ip for ip, n in world.cloud_addresses().items() if n == node)
        assert left == [], f"node {node} left the cluster and keeps {left}"
        interfaces = self.cloud_interfaces(provider_plugin)
        if interfaces is not None:
            kept = sorted(i for i, n in interfaces.items() if n == node)
            assert kept == [], f"node {node} left the cluster and keeps interfaces {kept}"
        with pytest.raises(NotFound):
            world.cluster.get(NODE_NETWORK, node)
        assert world.engine.pools.find(world.provider, node) is None
        # giving back is a wait, never a failed transition
        failed = hook_calls.transitions(machine="eni", ok=False)
        assert failed == [], failed
        world.assert_converged()

    def test_the_sweep_leaves_what_is_in_use(self, world: World,
                                             plugin_manager: pluggy.PluginManager,
                                             provider_plugin: Any) -> None:
        """Since 0.5.0 the garbage collector sweeps node-pool providers too (``podnet_sweep``:
        interfaces made that no inventory lists). Told to remove everything it reported,
        every interface and every address the cloud has, the sweep of a settled world
        takes nothing a record or a pool holds, and the world stays converged."""
        if not self._uses_pool(world):
            pytest.skip("the provider keeps no node pools (its sweep has its own tests)")
        world.add_node(0)
        world.settle()
        pool = world.engine.pools.find(world.provider, world.node_name(0))
        assert pool is not None
        self._bring_up(world, pods=min(pool.ips_per_interface + 1, pool.capacity or 40, 40))
        self._steady(world)
        truth = dict(world.cloud_addresses())
        interfaces = self.cloud_interfaces(provider_plugin)
        with world.quiet():
            owners = frozenset(f"{o['metadata']['namespace']}/{o['metadata']['name']}"
                               for o in world.cluster.list(POD_NETWORK).items
                               if not record_finished(o))
        sweep = Providers(plugin_manager).hook(self.provider_name, "podnet_sweep")
        found = sweep(provider=self.provider_name, owners=owners, remove=frozenset())
        everything = {*(found or ()), *truth, *(interfaces or {}), *owners}
        sweep(provider=self.provider_name, owners=owners, remove=frozenset(everything))
        assert dict(world.cloud_addresses()) == truth, "the sweep took addresses in use"
        assert self.cloud_interfaces(provider_plugin) == interfaces, \
            "the sweep took interfaces in use"
        world.settle()
        world.assert_converged()

    def cloud_interfaces(self, plugin: Any) -> Mapping[str, str] | None:
        """Every interface of the cloud podnet may give back (its primary ones left out)
        -> the node it is on or was made for; ``None``: the provider makes none, or the
        suite does not check them."""
        return None

    # --- crashes: every hook is idempotent ------------------------------------------------

    def _drive_to(self, world: World, hook: str) -> None:
        """Bring the world to where the engine calls ``hook``."""
        if hook in ("allocate", "route"):
            self._bring_up(world)
        elif hook == "pool_grow":
            # a provider whose node's first interface holds no pod address (an ECS
            # primary ENI) makes a new interface first, and fills it: more pods, one at a
            # time, until the pool grows on an interface it has
            names = self._bring_up(world)
            for i in range(len(names), 64):
                if world.crashes:
                    break
                world.add_pod(f"p{i}", 0)
                world.settle()
        elif hook == "release":
            self._bring_up(world)
            world.delete_pod("p0")
            world.settle()
        elif hook == "pool_shrink":
            world.add_node(0)
            world.settle()
            names = self._bring_up(world, pods=world.policy().max_idle + 2)
            for name in names:
                world.delete_pod(name)
            # an address younger than the minimum lifetime is not given back yet
            world.settle(advance=world.policy().min_ip_lifetime + 1)
        elif hook == "interface_create":
            world.add_node(0)
            world.settle()
            pool = world.engine.pools.find(world.provider, world.node_name(0))
            assert pool is not None and pool.ips_per_interface > 0
            self._bring_up(world, pods=pool.ips_per_interface + 1)
        else:  # pragma: no cover - CRASH_HOOKS and this table go together
            raise ValueError(hook)

    @pytest.mark.parametrize("when", ["after", "before"])
    @pytest.mark.parametrize("hook", CRASH_HOOKS)
    def test_crash_at_hook_converges(self, world: World, fault_injector: FaultInjector,
                                     hook: str, when: Any) -> None:
        """The process dies right after the provider's work (before the record says so),
        or right before it; a new engine converges to the same outcome: no second
        resource, no duplicate address, nothing leaked after the GC grace."""
        if hook not in self.crash_hooks:
            pytest.skip(f"{hook} is not in crash_hooks")
        info = world.engine.providers[world.provider]
        if hook in _POOL_HOOKS and not info.uses_node_pool:
            pytest.skip("the provider keeps no node pools")
        if hook == "interface_create" and not info.manages_interfaces:
            pytest.skip("the provider manages no interfaces")
        fault_injector.crash(hook, when=when)
        self._drive_to(world, hook)
        assert [h for h, _, _ in fault_injector.fired] == [hook_name(hook)], \
            f"the scenario never called {hook}"
        assert world.crashes == 1
        world.assert_no_double_owner()
        world.settle(advance=world.gc_grace())
        world.assert_converged()
        if info.uses_node_pool:
            # no second resource: what a lost call made is swept or in use, not piling up
            policy = world.policy()
            for pool in world.engine.pools.all():
                assert pool.idle_count() <= max(policy.max_idle, policy.min_idle), \
                    f"{pool.node} keeps {pool.idle_count()} idle addresses"

    # --- tracing ------------------------------------------------------------------------

    @pytest.mark.parametrize("failing", [
        "route",
        "release",
        "allocate",
    ])
    def test_transition_spans(self, world: World, span_exporter: InMemorySpanExporter,
                              fault_injector: FaultInjector, hook_calls: HookRecorder,
                              failing: str) -> None:
        """One span ``{machine}.{trigger}`` per transition attempt, with the contract's
        attributes; one trace per PodNetwork; a failed attempt is an ERROR span."""
        world.add_node(0)
        world.settle()
        before = self._attempts(world)
        span_exporter.clear()
        hook_calls.clear()
        fault_injector.fail(failing, ProviderError(ErrorKind.TRANSIENT, f"injected {failing}"))
        world.add_pod("p0", 0)
        world.settle(advance=1)
        world.delete_pod("p0")
        world.settle(advance=1)
        assert len(fault_injector.fired) == 1
        world.assert_converged()
        failed = self._check_spans(world, span_exporter, hook_calls, before)
        trigger = "finish" if failing == "release" else failing
        assert [s.name for s in failed] == [f"pod_network.{trigger}"]
        assert _attrs(failed[0])[ATTR_ERROR_TYPE] == ErrorKind.TRANSIENT.value

    def test_interface_transition_spans(self, world: World,
                                        span_exporter: InMemorySpanExporter,
                                        fault_injector: FaultInjector,
                                        hook_calls: HookRecorder) -> None:
        """The ENI machine's attempts are spans too, a failed interface creation an ERROR
        one; the pods waiting on it get their networks once it is retried."""
        if not world.engine.providers[world.provider].manages_interfaces:
            pytest.skip("the provider manages no interfaces")
        world.add_node(0)
        world.settle()
        pool = world.engine.pools.find(world.provider, world.node_name(0))
        assert pool is not None and pool.ips_per_interface > 0
        before = self._attempts(world)
        span_exporter.clear()
        hook_calls.clear()
        fault_injector.fail("interface_create",
                            ProviderError(ErrorKind.THROTTLED, "injected interface_create"))
        self._bring_up(world, pods=pool.ips_per_interface + 1)
        world.settle(advance=world.policy().grow_backoff.cap)
        assert len(fault_injector.fired) == 1
        world.assert_converged()
        failed = self._check_spans(world, span_exporter, hook_calls, before)
        eni = [s for s in failed if _attrs(s)[ATTR_MACHINE] == "eni"]
        assert [s.name for s in eni] == ["eni.attached"]
        assert _attrs(eni[0])[ATTR_ERROR_TYPE] == ErrorKind.THROTTLED.value
        # the pods meanwhile wait for an address: waiting, not failing (no ERROR span)
        assert [s.name for s in failed if s not in eni] == []

    @staticmethod
    def _attempts(world: World) -> Counter[str]:
        stats = world.engine.stats
        return stats.transitions + stats.failed_transitions + stats.waited_transitions

    def _check_spans(self, world: World, exporter: InMemorySpanExporter,
                     hook_calls: HookRecorder, before: Counter[str]) -> list[ReadableSpan]:
        """Spans and events match the attempts since ``before``; returns the failed spans.
        An attempt that waits for an address (the pool had none to take) is no failure:
        its span is not ERROR, reaches no state, and says what it waits for."""
        spans = [s for s in exporter.get_finished_spans() if ATTR_MACHINE in _attrs(s)]
        attempts = self._attempts(world) - before
        assert Counter(s.name for s in spans) == attempts
        events = hook_calls.transitions()
        assert Counter(f"{e.machine}.{e.trigger}" for e in events) == attempts

        traces: dict[str, set[int]] = {}
        for span in spans:
            attrs = _attrs(span)
            machine, trigger = attrs[ATTR_MACHINE], attrs[ATTR_TRIGGER]
            assert span.name == f"{machine}.{trigger}"
            required = _POD_SPAN_ATTRS if machine == "pod_network" else _ENI_SPAN_ATTRS
            missing = [a for a in required if a not in attrs]
            assert not missing, f"{span.name} lacks {missing}"
            assert attrs[ATTR_PROVIDER] == world.provider
            failed = span.status.status_code is StatusCode.ERROR
            waiting = ATTR_WAITING in attrs
            assert not (failed and waiting), f"{span.name} waits, and is ERROR: {dict(attrs)}"
            assert (ATTR_TO in attrs) is not (failed or waiting), f"{span.name}: {dict(attrs)}"
            assert (ATTR_ERROR_TYPE in attrs) is failed
            if waiting:
                assert span.name == "pod_network.allocate", span.name
                assert [e.name for e in span.events] == [EVENT_WAITING], span.events
            if machine == "pod_network":
                if attrs[ATTR_FROM] != "pending" or not (failed or waiting):
                    assert ATTR_IP in attrs, f"{span.name} from {attrs[ATTR_FROM]} has no ip"
                assert span.context is not None
                traces.setdefault(str(attrs[ATTR_OBJECT]), set()).add(span.context.trace_id)
        assert traces and all(len(ids) == 1 for ids in traces.values()), traces
        return [s for s in spans if s.status.status_code is StatusCode.ERROR]

    # --- errors -------------------------------------------------------------------------

    def test_error_classification(self, plugin_manager: pluggy.PluginManager,
                                  world: World, provider_name: str) -> None:
        samples = self.error_samples()
        assert samples, "error_samples() must name at least one error"
        providers = Providers(plugin_manager)
        mine = providers.hook(provider_name, "podnet_classify_error")
        others = providers.hook(f"not-{provider_name}", "podnet_classify_error")
        for error, kind in samples:
            assert mine(provider=provider_name, error=error) == kind, error
            assert world.engine.gateway.classify(provider_name, error) is kind
            # routed: another provider's errors never reach this classifier
            assert others(provider=f"not-{provider_name}", error=error) is None
        assert mine(provider=provider_name, error=RuntimeError("not an SDK error")) is None

    # --- the records' wire form ---------------------------------------------------------

    def test_records_round_trip(self, world: World) -> None:
        self._bring_up(world, pods=3)
        world.delete_pod("p2")
        world.settle()
        pod_networks = world.cluster.list(POD_NETWORK).items
        node_networks = world.cluster.list(NODE_NETWORK).items
        assert len(pod_networks) == 2
        # a NodeNetwork records a node's pool: only pool providers have one
        assert len(node_networks) == (1 if self._uses_pool(world) else 0)
        items: list[tuple[type[Any], Obj]] = [(PodNetwork, obj) for obj in pod_networks]
        items += [(NodeNetwork, obj) for obj in node_networks]
        for cls, stored in items:
            model = from_wire(cls, stored)
            assert to_wire(model) == stored
            assert from_wire(cls, to_wire(model)) == model

    # --- sticky StatefulSet pods --------------------------------------------------------

    def test_statefulset_pods_address_is_held_only_while_the_statefulset_wants_it(
            self, world: World) -> None:
        """A StatefulSet scaled below a pod's ordinal, or deleted, will not bring the pod
        back: its record is released at once, not parked for ``sticky_hold``; a pod whose
        ordinal it still counts keeps its address held."""
        if "StatefulSet" not in world.engine.providers[world.provider].sticky_kinds:
            pytest.skip("the provider keeps no StatefulSet pod's address")
        world.add_node(0)
        world.settle()
        with world.quiet():
            sts = world.cluster.create(STATEFUL_SET, {
                "metadata": {"name": "db", "namespace": world.namespace},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "db"}}}})
        owner = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
                  "uid": sts["metadata"]["uid"], "controller": True}]
        for i in range(3):
            with world.quiet():
                world.cluster.create(POD, {
                    "metadata": {"name": f"db-{i}", "namespace": world.namespace,
                                 "ownerReferences": owner},
                    "spec": {"nodeName": world.node_name(0),
                             "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Running"}})
        world.settle()
        assert {pn.spec.pod_name: pn.status.phase for pn in world.records()} == {
            f"db-{i}": Phase.ROUTED for i in range(3)}
        # scaled down to 1, as the StatefulSet controller does it: replicas, then pods
        with world.quiet():
            world.cluster.patch(STATEFUL_SET, "db", {"spec": {"replicas": 1}},
                                world.namespace)
        world.delete_pod("db-2")
        world.delete_pod("db-1")
        world.settle(advance=1)
        assert {pn.spec.pod_name for pn in world.records()} == {"db-0"}, \
            "a scaled-down StatefulSet's addresses were parked for sticky_hold"
        world.delete_pod("db-0")  # its StatefulSet still counts ordinal 0: held
        world.settle(advance=1)
        assert [(pn.spec.pod_name, pn.status.phase) for pn in world.records()] == [
            ("db-0", Phase.RELEASING)]
        with world.quiet():
            world.cluster.delete(STATEFUL_SET, "db", world.namespace)
        world.settle(advance=1)
        assert world.records() == [], "a deleted StatefulSet's address was still held"
        world.settle(advance=world.policy().reuse_cooldown + 2 * world.policy().refill_period)
        world.assert_converged()

    # --- a crash during the whole of a run ----------------------------------------------

    def test_crash_is_not_swallowed(self, world: World, fault_injector: FaultInjector) -> None:
        """Crash is a BaseException: the engine must let it end the 'process'."""
        world.add_node(0)
        world.settle()
        fault_injector.crash("allocate", when="before")
        world.add_pod("p0", 0)
        with pytest.raises(Crash):
            world.engine.run_until_idle()


class _OtherProvider:
    """A second provider beside the one under test: it declares itself, nothing more."""

    def __init__(self, name: str) -> None:
        self.name = name

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, version="0")
