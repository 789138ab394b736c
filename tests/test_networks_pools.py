"""Subnets and IPPools for a provider with node pools (the reference provider): its node
pool hooks are told the node's usable Subnets (``NodeContext.subnets``), and an IPPool
object's members are resolved against the node's pool as an address list is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from podnet.core.cluster.port import IP_POOL, POD_NETWORK, SUBNET
from podnet.core.policy import PoolPolicy
from podnet.core.pool import NodePool
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig


class Spy:
    """A plugin of no provider: sees every routed call's arguments."""

    def __init__(self) -> None:
        self.grown_with: list[tuple[str, ...]] = []

    @hookimpl(hookwrapper=True)
    def podnet_pool_grow(self, provider: str, node: Any, interface: Any, count: int,
                         subnet: Any) -> Iterator[None]:
        self.grown_with.append(tuple(s.name for s in node.subnets))
        yield


def test_a_pool_provider_hears_its_subnets_and_serves_an_ippool_object() -> None:
    spy = Spy()
    policy = PoolPolicy(min_idle=4, max_idle=8, batch_size=4, max_batch_size=8,
                        reuse_cooldown=0.0)
    rig = EngineRig([("reference", ReferenceProvider(ReferenceCloud(), policy=policy)),
                     ("spy", spy)], namespaces=("team-a", "team-b"))
    rig.cluster.create(SUBNET, {"metadata": {"name": "ref"}, "spec": {
        "provider": "reference", "cidrBlock": "10.64.0.0/16", "default": True}})
    rig.clock.advance(1)
    rig.cluster.create(SUBNET, {"metadata": {"name": "elsewhere"}, "spec": {
        "provider": "reference", "cidrBlock": "10.65.0.0/16",
        "nodeSelector": {"matchLabels": {"zone": "far"}}}})
    rig.settle()
    node = rig.node(0)  # podCIDR 10.64.0.0/24
    rig.cluster.create(IP_POOL, {"metadata": {"name": "fixed"}, "spec": {
        "subnet": "ref", "addresses": ["10.64.0.4..10.64.0.5"], "namespaces": ["team-b"]}})
    rig.settle()
    rig.namespace = "team-b"
    rig.pod("b-0", node)
    rig.namespace = "team-a"
    rig.pod("a-0", node)
    rig.settle()
    assert spy.grown_with and all(names == ("ref",) for names in spy.grown_with)
    by_pod = {r["spec"]["podName"]: r for r in rig.cluster.list(POD_NETWORK).items}
    assert by_pod["b-0"]["status"]["ip"] in ("10.64.0.4", "10.64.0.5")
    assert by_pod["a-0"]["status"]["phase"] == "Routed"
    assert by_pod["a-0"]["status"]["ip"] not in ("10.64.0.4", "10.64.0.5")
    status = rig.cluster.get(IP_POOL, "fixed")["status"]
    assert status["v4UsingIPs"] == 1


def _one_pod_on_a_subnet(min_idle: int) -> tuple[EngineRig, str, NodePool]:
    """The reference provider serving a default Subnet holding node 0's podCIDR, one pod
    routed there and the node's pool grown to ``min_idle`` idle addresses."""
    policy = PoolPolicy(min_idle=min_idle, max_idle=2 * min_idle, batch_size=min_idle,
                        max_batch_size=2 * min_idle, reuse_cooldown=0.0)
    rig = EngineRig([("reference", ReferenceProvider(ReferenceCloud(), policy=policy))],
                    namespaces=("team-a",))
    rig.cluster.create(SUBNET, {"metadata": {"name": "ref"}, "spec": {
        "provider": "reference", "cidrBlock": "10.64.0.0/16", "default": True}})
    rig.settle()
    node = rig.node(0)
    rig.pod("a-0", node)
    rig.settle()
    return rig, node, rig.engine.pools.get("reference", node)


def test_an_idle_address_the_subnet_now_excludes_is_handed_to_no_new_pod() -> None:
    rig, node, pool = _one_pod_on_a_subnet(min_idle=6)
    idle = [a.address for a in pool.idle_addresses(rig.clock.monotonic())]
    assert len(idle) >= 4
    # the cloud put them on the node before the operator excluded them: they stay
    # idle in the pool, and the next pods get others
    first = pool.first_idle(rig.clock.monotonic())
    assert first is not None
    excluded = [first.address, *idle[:2]]
    rig.cluster.patch(SUBNET, "ref", {"spec": {"excludeIPs": excluded}})
    rig.settle()
    for i in range(1, 4):
        rig.pod(f"a-{i}", node)
    rig.settle()
    records = rig.cluster.list(POD_NETWORK).items
    assert len(records) == 4 and all(r["status"]["phase"] == "Routed" for r in records)
    new = {r["status"]["ip"] for r in records if r["spec"]["podName"] != "a-0"}
    assert not new & set(excluded), (new, excluded)


def test_idle_addresses_all_excluded_go_back_to_the_cloud_and_a_waiting_pod_is_served(
) -> None:
    rig, node, pool = _one_pod_on_a_subnet(min_idle=4)
    idle = [a.address for a in pool.idle_addresses(rig.clock.monotonic())]
    # every idle address excluded: they count as idle, so the pool would not grow for
    # the next pod unless they go
    rig.cluster.patch(SUBNET, "ref", {"spec": {"excludeIPs": idle}})
    rig.settle()
    rig.pod("a-1", node)
    rig.settle(advance=60)
    (record,) = [r for r in rig.cluster.list(POD_NETWORK).items
                 if r["spec"]["podName"] == "a-1"]
    assert record["status"]["phase"] == "Routed"
    assert record["status"]["ip"] not in idle
    assert not set(pool.addresses) & set(idle)
    calls = dict(rig.engine.stats.provider_calls)
    rig.settle(advance=60)
    assert dict(rig.engine.stats.provider_calls).get("reference.pool_shrink") == calls.get(
        "reference.pool_shrink"), "the pool gives the same addresses back again and again"
