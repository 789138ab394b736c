"""The provider gateway routes a provider's calls to the plugin that declared it.

A second provider plugin that answers every hook without looking at whom the call is for
(no name guard) sits beside the reference provider. With hooks broadcast to every plugin
it would answer for the reference provider (pluggy calls the plugin registered last
first); routed, it is never asked about anything but its own pod networks.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pytest

from podnet.core.cluster.port import NODE, POD, POD_NETWORK, NotFound
from podnet.core.errors import ErrorKind
from podnet.core.plugin import Providers
from podnet.core.policy import PoolPolicy
from podnet.core.ratelimit import CloudLimiter
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
    CloudInterface,
    Inventory,
    NodeContext,
    NodeFinding,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    VerifyResult,
)
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig

NS = "demo"
POLICY = PoolPolicy(min_idle=1, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0,
                    sticky_hold=30.0)
STS = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-1",
        "controller": True}]
GREEDY_LABEL = "example.com/greedy"

#: the hooks that concern one provider: routed, never broadcast
ROUTED = frozenset({
    "podnet_configure", "podnet_cloud_limiter", "podnet_node_inventory", "podnet_pool_grow",
    "podnet_pool_shrink", "podnet_interface_create", "podnet_interface_dispose",
    "podnet_node_check", "podnet_allocate", "podnet_route", "podnet_verify",
    "podnet_release", "podnet_hold_address", "podnet_sweep", "podnet_node_removed",
    "podnet_classify_error",
})


class Greedy:
    """A provider with its own addresses that answers every hook it has, whoever the call
    is for: it checks no name. It records which provider each call was for."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []  # (hook, the provider the call was for)

    def _for(self, hook: str, provider: str) -> None:
        self.asked.append((hook, provider))

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="greedy", version="1.0", uses_node_pool=False,
                            policy=POLICY)

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        self._for("configure", provider)

    @hookimpl
    def podnet_cloud_limiter(self, provider: str, limiter: CloudLimiter) -> bool:
        self._for("cloud_limiter", provider)
        return True

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory:
        self._for("node_inventory", provider)
        return Inventory(interfaces=(CloudInterface(id="greedy0", ips=("10.99.0.5",)),),
                         max_interfaces=1, ips_per_interface=1)

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry]:
        self._for("pool_grow", provider)
        return [PoolEntry("10.99.0.6", "greedy0")]

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str]:
        self._for("pool_shrink", provider)
        return []

    @hookimpl
    def podnet_interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                                ip_count: int) -> CloudInterface:
        self._for("interface_create", provider)
        return CloudInterface(id="greedy1", ips=("10.99.0.7",))

    @hookimpl
    def podnet_interface_dispose(self, provider: str, node: NodeContext,
                                 interface: CloudInterface) -> bool:
        self._for("interface_dispose", provider)
        return False

    @hookimpl
    def podnet_node_check(self, provider: str, node: NodeContext) -> Sequence[NodeFinding]:
        self._for("node_check", provider)
        return [NodeFinding(reason="Greedy", message="answered for any provider")]

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation:
        self._for("allocate", context.pod_network.spec.provider)
        return Allocation(ip="192.0.2.10", subnet="192.0.2.0/24")

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult:
        self._for("route", context.pod_network.spec.provider)
        return RouteResult(interface="greedy0")

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult:
        self._for("verify", context.pod_network.spec.provider)
        return VerifyResult(ok=False, reason="greedy says so")

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult:
        self._for("release", context.pod_network.spec.provider)
        return ReleaseResult(return_to_pool=False)

    @hookimpl
    def podnet_hold_address(self, context: PodNetworkContext) -> bool:
        self._for("hold_address", context.pod_network.spec.provider)
        return True

    @hookimpl
    def podnet_sweep(self, provider: str, owners: Collection[str],
                     remove: Collection[str]) -> Sequence[str]:
        self._for("sweep", provider)
        return []

    @hookimpl
    def podnet_node_removed(self, provider: str, node: str) -> None:
        self._for("node_removed", provider)

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind:
        self._for("classify_error", provider)
        return ErrorKind.FATAL


class Routes:
    """Watches every call of a routed hook: which provider it was for, which provider
    plugins it reached."""

    def __init__(self, plugins: Mapping[str, object]) -> None:
        self._declared = {id(plugin): name for name, plugin in plugins.items()}
        self.seen: set[str] = set()
        self.wrong: list[tuple[str, str, str]] = []  # (hook, for, reached)

    def before(self, hook: str, impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        if hook not in ROUTED:
            return
        target = kwargs.get("provider") or kwargs["context"].pod_network.spec.provider
        self.seen.add(hook)
        for impl in impls:
            reached = self._declared.get(id(impl.plugin))
            if reached is not None and reached != target:
                self.wrong.append((hook, target, reached))

    def after(self, *_: Any) -> None:
        pass


class Bystander:
    """Declares no provider: takes part in every provider's calls."""

    def __init__(self) -> None:
        self.removed: list[tuple[str, str]] = []

    @hookimpl
    def podnet_node_removed(self, provider: str, node: str) -> None:
        self.removed.append((provider, node))


class Rig(EngineRig):
    def __init__(self) -> None:
        self.reference = ReferenceProvider(ReferenceCloud(), policy=POLICY)
        self.greedy = Greedy()
        self.bystander = Bystander()
        # greedy registered after reference: pluggy would ask it first
        super().__init__(
            [("reference", self.reference), ("greedy", self.greedy),
             ("bystander", self.bystander)],
            config={"nodeProviders": [{"provider": "greedy",
                                       "nodeSelector": f"{GREEDY_LABEL}=yes"}],
                    "providers": {"reference": {}, "greedy": {}}},
            start=False)
        self.routes = Routes(Providers(self.pm).plugins)
        self.pm.add_hookcall_monitoring(self.routes.before, self.routes.after)
        self.start()


def test_a_second_provider_plugin_is_never_called_for_the_first_ones_pod_networks() -> None:
    rig = Rig()
    node = rig.node(0)
    greedy_node = rig.node(1, {GREEDY_LABEL: "yes"})
    rig.settle()
    # a route that fails once: the reference provider's error is classified by it alone
    rig.reference.cloud.scripted["SetRoute"] = ["InternalError"]
    rig.pod("web", node)
    rig.pod("db-0", node, ownerReferences=STS)
    rig.pod("own", greedy_node)
    rig.settle()
    web, own = rig.record("web"), rig.record("own")
    assert web["status"]["phase"] == "Routed" and web["spec"]["provider"] == "reference"
    assert web["status"]["ip"].startswith("10.64.0.")  # from the reference node's pool
    assert own["status"]["phase"] == "Routed" and own["spec"]["provider"] == "greedy"
    assert own["status"]["ip"] == "192.0.2.10"
    # resync (verify), a sticky pod's hold, releases, a node leaving, the sweep
    rig.settle(advance=POLICY.verify_period + POLICY.gc_period + 1)
    assert rig.record("web")["status"]["phase"] == "Routed"  # greedy's verdict not taken
    for name in ("web", "db-0", "own"):
        rig.cluster.delete(POD, name, NS, grace_period_seconds=0)
    rig.settle(advance=POLICY.sticky_hold + 1)
    assert rig.cluster.list(POD_NETWORK).items == []  # greedy's hold not taken either
    rig.cluster.delete(NODE, node)
    rig.settle(advance=POLICY.gc_period + 1)
    with pytest.raises(NotFound):
        rig.cluster.get(NODE, node)

    assert rig.routes.wrong == []
    assert {("allocate", "greedy"), ("route", "greedy"), ("release", "greedy"),
            ("sweep", "greedy")} <= set(rig.greedy.asked)
    assert {provider for _, provider in rig.greedy.asked} == {"greedy"}
    # the reference provider's own calls did happen, each hook of it at least once
    assert rig.routes.seen >= {
        "podnet_configure", "podnet_cloud_limiter", "podnet_node_inventory",
        "podnet_pool_grow", "podnet_allocate", "podnet_route", "podnet_verify",
        "podnet_release", "podnet_hold_address", "podnet_sweep", "podnet_classify_error"}
    # a plugin that declares no provider hears every provider's calls
    assert ("reference", node) in rig.bystander.removed


def test_a_provider_is_not_asked_for_a_provider_nobody_declared() -> None:
    rig = Rig()
    gateway = rig.engine.gateway
    name = rig.node(0)
    rig.settle()
    node = NodeContext(node=rig.engine.nodes.get(name) or pytest.fail("no node"))
    rig.greedy.asked.clear()
    assert gateway.node_inventory("nobody", node) is None
    assert gateway.pool_grow("nobody", node, None, 1, None) == []
    assert gateway.node_check("nobody", node) == ()
    assert gateway.classify("nobody", RuntimeError("x")) is ErrorKind.TRANSIENT
    assert rig.greedy.asked == []
    assert rig.routes.wrong == []
