"""What the engine does with each hook's answer, driven end to end on a fake clock.

tests/test_engine.py covers the pod network lifecycle through the reference provider;
here each hook is looked at on its own: when the engine calls it, with what, and what
follows from the answer. Listener and selector plugins are registered next to the
provider(s), as a deployment would have them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from podnet.app.demo import pod_obj
from podnet.core.cluster.port import EVENT, NAMESPACE, POD, Obj
from podnet.core.errors import ConfigError
from podnet.core.models import NodeInfo, PodInfo
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
    CloudInterface,
    NetworkAttachment,
    NodeContext,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    TransitionEvent,
    VerifyResult,
)
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig

NS = "demo"
POLICY = PoolPolicy(min_idle=1, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0)
STS = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-1",
        "controller": True}]


class Rig(EngineRig):
    """A cluster and an engine over the reference provider plus ``extra`` plugins;
    ``file``: what an operator's config file would say (nodeProviders, networks)."""

    def __init__(self, *extra: object, provider: ReferenceProvider | None = None,
                 config: Mapping[str, dict[str, Any]] | None = None,
                 file: Mapping[str, Any] | None = None) -> None:
        self.provider = provider or ReferenceProvider(ReferenceCloud(), policy=POLICY)
        super().__init__([("reference", self.provider),
                          *((f"extra-{i}", plugin) for i, plugin in enumerate(extra))],
                         config=file, provider_config=config)


def phase(record: Obj) -> str:
    return str(record.get("status", {}).get("phase", "Pending"))


# --- podnet_transition ---------------------------------------------------------------------


class Listener:
    """Declares no provider; only listens."""

    def __init__(self) -> None:
        self.events: list[TransitionEvent] = []

    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        self.events.append(event)


class BrokenListener:
    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        raise RuntimeError("listener bug")


def test_podnet_transition_reports_every_attempt_in_order_to_a_listener() -> None:
    listener = Listener()
    rig = Rig(listener)
    node = rig.node(0)
    rig.settle()
    rig.provider.cloud.scripted["SetRoute"] = ["InternalError"]
    rig.pod("web", node)
    rig.settle()
    key = f"{NS}/{rig.records('web')[0]['metadata']['name']}"
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    mine = [(e.trigger, e.source, e.dest, e.ok, e.error) for e in listener.events
            if e.machine == "pod_network" and e.object_key == key]
    assert mine == [
        ("allocate", "pending", "allocated", True, None),
        ("route", "allocated", None, False, "ProviderError"),
        ("route", "allocated", "routed", True, None),
        ("release", "routed", "releasing", True, None),
        ("finish", "releasing", "deleted", True, None),
    ]
    routed = next(e for e in listener.events if e.object_key == key and e.trigger == "route"
                  and e.ok)
    assert routed.provider == "reference"
    assert routed.attributes["node"] == node and routed.attributes["ip"]
    # every counted transition was broadcast, and nothing else
    stats = rig.engine.stats
    counted = (sum(stats.transitions.values()) + sum(stats.failed_transitions.values())
               + sum(stats.waited_transitions.values()))
    assert len(listener.events) == counted


def test_a_podnet_transition_listener_registered_after_start_hears_what_follows() -> None:
    """With no listener no event is built (the warm path's transitions); one registered
    while the engine runs hears the next transitions."""
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    assert not rig.engine.gateway.transition_listened()
    listener = Listener()
    rig.pm.register(listener, name="late-listener")
    assert rig.engine.gateway.transition_listened()
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    assert [(e.trigger, e.ok) for e in listener.events if e.machine == "pod_network"] == [
        ("release", True), ("finish", True)]


def test_a_failing_podnet_transition_listener_does_not_stop_the_engine() -> None:
    rig = Rig(BrokenListener())
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    assert phase(rig.records("web")[0]) == "Routed"
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.records() == []


# --- podnet_select_provider -----------------------------------------------------------------


class ClaimByLabel:
    """Claims nodes labelled ``podnet.io/provider`` for the provider the label names."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @hookimpl
    def podnet_select_provider(self, node: NodeInfo) -> str | None:
        self.asked.append(node.name)
        return node.labels.get("podnet.io/provider")


def test_podnet_select_provider_claims_labelled_nodes_for_another_provider() -> None:
    edge = ReferenceProvider(ReferenceCloud(), name="edge", policy=POLICY)
    claim = ClaimByLabel()
    rig = Rig(edge, claim)
    plain = rig.node(0)
    labelled = rig.node(1, {"podnet.io/provider": "edge"})
    unknown = rig.node(2, {"podnet.io/provider": "no-such-provider"})
    for i, node in enumerate((plain, labelled, unknown)):
        rig.pod(f"p{i}", node)
    rig.settle()
    assert {plain, labelled, unknown} <= set(claim.asked)
    by_pod = {r["spec"]["podName"]: r for r in rig.records()}
    assert all(phase(r) == "Routed" for r in by_pod.values())
    assert by_pod["p0"]["spec"]["provider"] == "reference"
    assert by_pod["p1"]["spec"]["provider"] == "edge"
    # a claim naming a provider nobody declares falls back to the default provider
    assert by_pod["p2"]["spec"]["provider"] == "reference"
    assert by_pod["p1"]["status"]["ip"] in edge.cloud.all_addresses()
    assert by_pod["p1"]["status"]["ip"] not in rig.provider.cloud.all_addresses()
    assert set(edge.cloud.nodes) == {labelled}
    assert labelled not in rig.provider.cloud.nodes
    assert rig.engine.pools.find("edge", labelled) is not None
    assert rig.engine.pools.find("reference", labelled) is None


# --- podnet_select_networks -----------------------------------------------------------------


class OverlayIpam:
    """A provider without node pools (``uses_node_pool=False``): its own IPAM, one /24."""

    def __init__(self) -> None:
        self.next = 10
        self.by_key: dict[str, str] = {}
        self.routes: dict[str, str] = {}

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="storage", version="1.0", uses_node_pool=False)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        if pn.spec.provider != "storage":
            return None
        assert context.pool is None
        ip = self.by_key.get(pn.key)
        if ip is None:
            ip = self.by_key[pn.key] = f"192.168.50.{self.next}"
            self.next += 1
        return Allocation(ip=ip, subnet="192.168.50.0/24", gateway="192.168.50.1")

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        if pn.spec.provider != "storage":
            return None
        self.routes[pn.status.ip or ""] = pn.key
        return RouteResult(interface="net1")

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        pn = context.pod_network
        if pn.spec.provider != "storage":
            return None
        self.routes.pop(pn.status.ip or "", None)
        self.by_key.pop(pn.key, None)
        return ReleaseResult(return_to_pool=False)


class AttachStorage:
    """Pods labelled ``storage=yes`` also join the ``storage`` network."""

    @hookimpl
    def podnet_select_networks(self, pod: PodInfo, node: NodeInfo
                               ) -> Sequence[NetworkAttachment] | None:
        if pod.labels.get("storage") != "yes":
            return None
        return [NetworkAttachment(network="storage", provider="storage")]


def test_podnet_select_networks_gives_a_pod_a_second_pod_network() -> None:
    overlay = OverlayIpam()
    rig = Rig(overlay, AttachStorage())
    node = rig.node(0)
    rig.pod("db", node, labels={"app": "demo", "storage": "yes"})
    rig.pod("web", node)
    rig.settle()
    db = {r["spec"]["network"]: r for r in rig.records("db")}
    assert set(db) == {"default", "storage"}
    assert db["default"]["spec"]["provider"] == "reference"
    assert db["storage"]["spec"]["provider"] == "storage"
    assert all(phase(r) == "Routed" for r in db.values())
    storage = db["storage"]["status"]
    assert storage["ip"].startswith("192.168.50.") and storage["interface"] == "net1"
    assert overlay.routes == {storage["ip"]: f"{NS}/{db['storage']['metadata']['name']}"}
    assert [r["spec"]["network"] for r in rig.records("web")] == ["default"]

    rig.cluster.delete(POD, "db", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.records("db") == []
    assert overlay.routes == {} and overlay.by_key == {}


class AttachByAnnotation:
    """Reads ``podnet.io/networks`` itself, as the OVN provider does: serves ``blue``."""

    @hookimpl
    def podnet_select_networks(self, pod: PodInfo, node: NodeInfo
                               ) -> Sequence[NetworkAttachment] | None:
        names = [n.strip() for n in pod.annotations.get("podnet.io/networks", "").split(",")]
        return [NetworkAttachment(network="blue", provider="storage")] if "blue" in names \
            else None


def test_a_malformed_networks_annotation_is_one_answer_for_every_network_of_the_pod() -> None:
    overlay = OverlayIpam()
    rig = Rig(overlay, AttachByAnnotation())
    node = rig.node(0)
    rig.pod("app", node, annotations={"podnet.io/networks": "blue,blue"})
    rig.pod("bystander", node, annotations={"podnet.io/networks": "blue"})
    rig.settle()
    records = {r["spec"]["network"]: r for r in rig.records("app")}
    assert set(records) == {"default", "blue"}
    for network, record in records.items():
        assert phase(record) == "Pending" and not record["status"].get("ip"), network
        ready = next(c for c in record["status"]["conditions"] if c["type"] == "Ready")
        assert ready["reason"] == "InvalidRequest", network
        assert "podnet.io/networks" in ready["message"] and "duplicate" in ready["message"]
    assert overlay.routes.keys() == {r["status"]["ip"] for r in rig.records("bystander")
                                     if r["spec"]["network"] == "blue"}
    assert {phase(r) for r in rig.records("bystander")} == {"Routed"}


# --- the operator's config: nodeProviders and networks ---------------------------------------


def test_node_rules_in_the_config_beat_the_plugins_claims_and_the_default() -> None:
    edge = ReferenceProvider(ReferenceCloud(), name="edge", policy=POLICY)
    claim = ClaimByLabel()  # claims nodes labelled podnet.io/provider=edge for "edge"
    rig = Rig(edge, claim, file={"nodeProviders": [
        {"provider": "reference", "nodeSelector": "podnet.io/provider=edge,pinned=yes"},
        {"provider": "edge", "nodeSelector": "instance-type in (e1,e2)"},
    ]})
    nodes = [rig.node(0, {"podnet.io/provider": "edge", "pinned": "yes"}),  # rule 1 wins
             rig.node(1, {"instance-type": "e2"}),                        # rule 2
             rig.node(2, {"podnet.io/provider": "edge"}),                 # the plugin's claim
             rig.node(3, {"instance-type": "e9"})]             # nothing: the default
    for i, node in enumerate(nodes):
        rig.pod(f"p{i}", node)
    rig.settle()
    providers = {r["spec"]["podName"]: r["spec"]["provider"] for r in rig.records()}
    assert providers == {"p0": "reference", "p1": "edge", "p2": "edge", "p3": "reference"}
    assert all(phase(r) == "Routed" for r in rig.records())
    assert set(edge.cloud.nodes) == {nodes[1], nodes[2]}


def test_networks_in_the_config_attach_by_annotation_and_unplug_one_by_one() -> None:
    overlay = OverlayIpam()
    rig = Rig(overlay, file={"networks": {"blue": {"provider": "storage"},
                                          "green": {"provider": "storage"}}})
    node = rig.node(0)
    rig.pod("app", node, annotations={"podnet.io/networks": "blue, green"})
    rig.settle()
    records = {r["spec"]["network"]: r for r in rig.records("app")}
    assert set(records) == {"default", "blue", "green"}
    assert all(phase(r) == "Routed" for r in records.values())
    assert {records[n]["spec"]["provider"] for n in ("blue", "green")} == {"storage"}
    kept = {n: records[n]["status"]["ip"] for n in ("default", "green")}

    pod = rig.cluster.get(POD, "app", NS)
    pod["metadata"]["annotations"]["podnet.io/networks"] = "green"
    rig.cluster.update(POD, pod)
    rig.settle()
    after = {r["spec"]["network"]: r for r in rig.records("app")}
    assert set(after) == {"default", "green"}  # only blue was unplugged
    assert {n: after[n]["status"]["ip"] for n in after} == kept
    assert records["blue"]["status"]["ip"] not in overlay.routes
    assert set(overlay.routes) == {kept["green"]}


def test_a_network_nobody_serves_gets_a_record_with_a_condition_naming_it() -> None:
    overlay = OverlayIpam()
    rig = Rig(overlay, file={"networks": {"blue": {"provider": "storage"}}})
    node = rig.node(0)
    rig.pod("app", node, annotations={"podnet.io/networks": "blue,purple"})
    rig.pod("bystander", node)
    rig.settle()
    records = {r["spec"]["network"]: r for r in rig.records("app")}
    assert phase(records["default"]) == "Routed" and phase(records["blue"]) == "Routed"
    purple = records["purple"]
    assert phase(purple) == "Pending" and not purple.get("status", {}).get("ip")
    ready = next(c for c in purple["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "InvalidRequest"
    assert "'purple' is not served" in ready["message"] and "blue" in ready["message"]
    events = [e for e in rig.cluster.list(EVENT, NS).items
              if e["involvedObject"]["kind"] == "Pod" and e["involvedObject"]["name"] == "app"]
    assert any("purple" in e["message"] for e in events)
    assert phase(rig.records("bystander")[0]) == "Routed"

    rig.cluster.delete(POD, "app", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.records("app") == [] and overlay.routes.keys() == {
        r["status"]["ip"] for r in rig.records() if r["spec"]["provider"] == "storage"}


# --- podnet_hold_address --------------------------------------------------------------------


class Holder:
    """Answers ``podnet_hold_address`` with ``verdict`` and remembers what it was asked."""

    def __init__(self, verdict: bool | None) -> None:
        self.verdict = verdict
        self.asked: list[PodNetworkContext] = []

    @hookimpl
    def podnet_hold_address(self, context: PodNetworkContext) -> bool | None:
        self.asked.append(context)
        return self.verdict


def test_podnet_hold_address_false_releases_a_sticky_record_at_once() -> None:
    holder = Holder(False)
    rig = Rig(holder)
    node = rig.node(0)
    rig.pod("db-0", node, ownerReferences=STS)
    rig.settle()
    record = rig.records("db-0")[0]
    assert record["spec"]["sticky"] is True and phase(record) == "Routed"
    ip = record["status"]["ip"]
    rig.cluster.delete(POD, "db-0", NS, grace_period_seconds=0)
    rig.settle(advance=0)  # no time passes: not the sticky_hold window running out
    assert rig.records() == []
    assert holder.asked and holder.asked[0].pod is None
    assert holder.asked[0].pod_network.spec.sticky
    assert ip not in rig.provider.cloud.routes
    assert rig.engine.stats.transitions["pod_network.finish"] == 1


def test_podnet_hold_address_true_holds_past_the_sticky_window_until_it_changes() -> None:
    holder = Holder(True)
    rig = Rig(holder)
    node = rig.node(0)
    rig.pod("db-0", node, ownerReferences=STS)
    rig.settle()
    ip = rig.records("db-0")[0]["status"]["ip"]
    rig.cluster.delete(POD, "db-0", NS, grace_period_seconds=0)
    rig.settle(advance=POLICY.sticky_hold * 2)
    (held,) = rig.records("db-0")
    assert phase(held) == "Releasing" and held["status"]["ip"] == ip
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.owner_of(ip) is not None  # never handed to another
    holder.verdict = None  # back to core's sticky_hold window, long over by now
    rig.settle(advance=5)
    assert rig.records() == []


# --- podnet_configure -----------------------------------------------------------------------


class ConfigRecorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        self.seen.append((provider, dict(config)))


def test_podnet_configure_hands_each_provider_its_section_before_anything_runs() -> None:
    recorder = ConfigRecorder()
    rig = Rig(recorder, config={"reference": {"max_interfaces": 2, "ips_per_interface": 3}})
    # every plugin sees the call; the provider named in it applies it
    assert recorder.seen == [("reference", {"max_interfaces": 2, "ips_per_interface": 3})]
    assert rig.provider.cloud.max_interfaces == 2
    node = rig.node(0)
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.capacity == 6


def test_podnet_configure_refusing_a_section_stops_the_engine_naming_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        Rig(config={"reference": {"max_interfaces": 2, "latency": 5}})
    assert info.value.key == "providers.reference.latency"


# --- podnet_verify --------------------------------------------------------------------------


class CountingProvider(ReferenceProvider):
    """The reference provider, counting some hook calls and recording their arguments."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.verified: list[str] = []
        self.shrunk: list[list[str]] = []
        self.created: list[int] = []
        self.disposed: list[str] = []
        #: how many dispose calls answer "still detaching" (False) before "gone"
        self.detaching = 0

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        result = super().podnet_verify(context)
        if result is not None:
            self.verified.append(context.pod_network.key)
        return result

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        if provider == self.name:
            self.shrunk.append([e.address for e in entries])
        return super().podnet_pool_shrink(provider, node, entries)

    @hookimpl
    def podnet_interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                                ip_count: int) -> CloudInterface | None:
        if provider == self.name:
            self.created.append(ip_count)
        return super().podnet_interface_create(provider, node, subnet, ip_count)

    @hookimpl
    def podnet_interface_dispose(self, provider: str, node: NodeContext,
                                 interface: CloudInterface) -> bool | None:
        if provider != self.name:
            return None
        self.disposed.append(interface.id)
        if self.detaching > 0:
            self.detaching -= 1
            return False
        return super().podnet_interface_dispose(provider, node, interface)


def test_podnet_verify_runs_once_per_verify_period_and_an_ok_answer_writes_nothing() -> None:
    provider = CountingProvider(ReferenceCloud(), policy=POLICY)
    rig = Rig(provider=provider)
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle(advance=POLICY.verify_period - 10)
    assert provider.verified == []  # never on the way to routed, only on resync
    writes = dict(rig.cluster.stats)
    rig.settle(advance=20)
    key = f"{NS}/{rig.records('web')[0]['metadata']['name']}"
    assert provider.verified == [key]
    changed = {k: v for k, v in rig.cluster.stats.items()
               if k[1] == "podnetworks" and v != writes.get(k) and k[0] != "list"}
    assert changed == {}
    rig.settle(advance=POLICY.verify_period)
    assert provider.verified == [key, key]


# --- podnet_pool_shrink ---------------------------------------------------------------------


def test_podnet_pool_shrink_gets_only_idle_addresses_and_trims_to_max_idle() -> None:
    provider = CountingProvider(ReferenceCloud(), policy=POLICY)
    rig = Rig(provider=provider)
    node = rig.node(0)
    for i in range(8):
        rig.pod(f"p{i}", node)
    rig.settle()
    for i in range(6):
        rig.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    rig.settle()
    owned = {r["status"]["ip"] for r in rig.records()}
    assert len(owned) == 2
    assert provider.shrunk, "idle beyond max_idle was never given back"
    assert all(not owned & set(batch) for batch in provider.shrunk)
    assert all(len(batch) <= POLICY.max_batch_size for batch in provider.shrunk)
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.idle_count() == POLICY.max_idle
    gone = {ip for batch in provider.shrunk for ip in batch}
    assert not gone & set(provider.cloud.all_addresses())
    assert set(provider.cloud.all_addresses()) == set(pool.addresses)


# --- podnet_interface_create / podnet_interface_dispose -------------------------------------


def test_podnet_interface_create_and_dispose_drive_the_eni_machine() -> None:
    policy = PoolPolicy(min_idle=0, max_idle=0, batch_size=4, max_batch_size=4,
                        reuse_cooldown=0.0)
    provider = CountingProvider(ReferenceCloud(max_interfaces=3, ips_per_interface=4),
                                policy=policy)
    provider.detaching = 1
    listener = Listener()
    rig = Rig(listener, provider=provider)
    node = rig.node(0)
    for i in range(6):  # more than the primary interface holds
        rig.pod(f"p{i}", node)
    rig.settle()
    assert all(phase(r) == "Routed" for r in rig.records())
    assert provider.created == [policy.batch_size]  # one batch, on the new interface
    assert set(provider.cloud.nodes[node].interfaces) == {"eth0", "eth1"}

    for i in range(6):
        rig.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    rig.settle(advance=2 * policy.refill_period)
    # the emptied secondary interface went, after one "still detaching" answer; never eth0
    assert provider.disposed == ["eth1", "eth1"]
    assert set(provider.cloud.nodes[node].interfaces) == {"eth0"}
    eni = [(e.trigger, e.source, e.dest, e.ok) for e in listener.events if e.machine == "eni"]
    assert eni == [
        ("attached", "initializing", "ready", True),
        ("dispose", "ready", "disposing", True),
        ("gone", "disposing", None, False),
        ("gone", "disposing", "deleted", True),
    ]


class SameIpv6Overlay(OverlayIpam):
    """An overlay whose IPAM is wrong: every pod gets the same IPv6 address."""

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        answer = super().podnet_allocate(context)
        if answer is None:
            return None
        return attrs.evolve(answer, ipv6="fd00:50::10")


def test_an_ipv6_address_already_recorded_is_refused_whatever_the_provider_says() -> None:
    overlay = SameIpv6Overlay()
    rig = Rig(overlay, file={"networks": {"storage": {"provider": "storage"}}})
    node = rig.node(0)
    rig.pod("a", node, annotations={"podnet.io/networks": "storage"})
    rig.settle()
    rig.pod("b", node, annotations={"podnet.io/networks": "storage"})
    rig.settle()
    storage = {r["spec"]["podName"]: r for r in rig.records() if r["spec"]["network"] == "storage"}
    assert phase(storage["a"]) == "Routed" and storage["a"]["status"]["ipv6"] == "fd00:50::10"
    assert phase(storage["b"]) == "Pending" and not storage["b"].get("status", {}).get("ipv6")
    ready = next(c for c in storage["b"]["status"]["conditions"] if c["type"] == "Ready")
    assert "fd00:50::10 is already held by" in ready["message"]


@pytest.mark.parametrize("ops", [1, 2])
def test_one_node_pass_disposes_at_most_max_interface_ops_interfaces(ops: int) -> None:
    """podnet_interface_dispose: empty interfaces go, at most ``max_interface_ops`` in one
    pass of their node (the next pass is queued at once), until none is left."""
    policy = attrs.evolve(POLICY, min_idle=0, max_idle=0, batch_size=2, max_batch_size=8,
                          max_interface_ops=ops)
    provider = ReferenceProvider(ReferenceCloud(max_interfaces=4, ips_per_interface=2),
                                 policy=policy)
    listener = Listener()
    rig = Rig(listener, provider=provider)
    per_pass: list[int] = []
    reconcile = rig.engine.nodepools.reconcile

    def counted(name: str) -> Any:
        before = sum(e.trigger == "gone" and e.ok for e in listener.events)
        try:
            return reconcile(name)
        finally:
            per_pass.append(sum(e.trigger == "gone" and e.ok for e in listener.events) - before)

    rig.engine._reconcilers["node"] = counted
    node = rig.node(0)
    for i in range(8):
        rig.pod(f"p{i}", node)
    rig.settle()
    assert len(provider.cloud.nodes[node].interfaces) == 4
    for i in range(8):
        rig.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    rig.settle(advance=policy.refill_period * 4)
    assert list(provider.cloud.nodes[node].interfaces) == ["eth0"]  # the primary stays
    assert sum(per_pass) == 3 and max(per_pass) == ops


def test_a_pod_cache_behind_the_garbage_collector_makes_no_record_for_a_gone_pod() -> None:
    """The pod is deleted; Kubernetes' garbage collector marks its PodNetwork for deletion
    and the records' cache sees that before the pods' cache sees the pod go. The record is
    released, but no new one is made for the pod the stale cache still shows (the API
    server is asked first)."""
    rig = Rig()
    node = rig.node(0)
    rig.pod("web", node)
    rig.settle()
    [record] = rig.records("web")
    pod_key = f"{NS}/web"
    # the record is marked for deletion with it
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    e = rig.engine
    for _ in range(5):  # only the records' cache moves; the pods' cache lags
        e.pod_networks.pump()
        e.podnetworks.reconcile(pod_key)
    assert e.pods.get(pod_key) is not None  # still the stale view of the deleted pod
    assert rig.records("web") == []  # released, and nothing made again
    assert rig.provider.cloud.routes == {}
    rig.settle()
    assert rig.records("web") == [] and e.pods.get(pod_key) is None
    assert record["status"]["ip"] not in rig.provider.cloud.routes


class NamespaceSeeingProvider(ReferenceProvider):
    """The reference provider, noting the namespace annotations each allocation got."""

    def __init__(self) -> None:
        super().__init__(ReferenceCloud(), policy=POLICY)
        self.seen: dict[str, dict[str, str]] = {}

    @hookimpl
    def podnet_allocate(self, context: Any) -> Any:
        self.seen[context.pod_network.spec.pod_name] = dict(context.namespace_annotations)
        return super().podnet_allocate(context)


def test_a_pod_in_a_namespace_the_cache_has_not_seen_gets_its_annotations() -> None:
    """A namespace created a moment before its pod: the namespaces' cache lags, the
    allocation still sees the namespace's annotations (read from the API server)."""
    provider = NamespaceSeeingProvider()
    rig = Rig(provider=provider)
    node = rig.node(0)
    rig.settle()
    rig.cluster.create(NAMESPACE, {"metadata": {
        "name": "fresh", "annotations": {"podnet.io/subnets": "blue", "other": "x"}}})
    obj = pod_obj("web", node)
    obj["metadata"]["namespace"] = "fresh"
    rig.cluster.create(POD, obj)
    e = rig.engine
    for _ in range(5):  # every cache moves but the namespaces'
        for informer in e.informers:
            if informer is not e.namespaces:
                informer.pump()
        e.podnetworks.reconcile("fresh/web")
    assert e.namespaces.get("fresh") is None
    assert provider.seen == {"web": {"podnet.io/subnets": "blue"}}
    rig.settle()
    [record] = rig.records("web")
    assert phase(record) == "Routed"


VMI_REF = [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "vm1",
            "uid": "vmi-1", "controller": True}]


def test_a_vm_on_a_node_pool_gets_its_address_back_on_its_node_only() -> None:
    provider = ReferenceProvider(ReferenceCloud(), policy=POLICY,
                                 sticky_kinds=("StatefulSet", "VirtualMachineInstance"))
    rig = Rig(provider=provider)
    node0, node1 = rig.node(0), rig.node(1)
    rig.pod("virt-launcher-vm1-a", node0, ownerReferences=VMI_REF)
    rig.settle()
    [first] = rig.records("virt-launcher-vm1-a")
    assert first["metadata"]["name"] == "vm1.default.vm" and phase(first) == "Routed"
    rig.cluster.delete(POD, "virt-launcher-vm1-a", NS, grace_period_seconds=0)
    rig.settle()
    rig.pod("virt-launcher-vm1-b", node0, ownerReferences=VMI_REF)  # started again, same node
    rig.settle()
    [again] = rig.records("virt-launcher-vm1-b")
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert again["status"]["ip"] == first["status"]["ip"] and phase(again) == "Routed"
    rig.cluster.delete(POD, "virt-launcher-vm1-b", NS, grace_period_seconds=0)
    rig.settle()
    rig.pod("virt-launcher-vm1-c", node1, ownerReferences=VMI_REF)  # another node's pool
    rig.settle()
    [elsewhere] = rig.records("virt-launcher-vm1-c")
    assert phase(elsewhere) == "Routed" and not elsewhere["spec"]["sticky"]
    assert elsewhere["status"]["ip"] != first["status"]["ip"]
    rig.settle(advance=rig.engine.policy("reference").sticky_hold + 10)
    assert [r["metadata"]["name"] for r in rig.records()] == [elsewhere["metadata"]["name"]]
    assert first["status"]["ip"] not in provider.cloud.routes


class ReleaseInterleaver(ReferenceProvider):
    """Runs ``during_release`` (once) inside ``podnet_release``, before it deletes the
    route: another worker's pass happening right then."""

    def __init__(self) -> None:
        super().__init__(ReferenceCloud(), policy=attrs.evolve(POLICY, sticky_hold=0.0),
                         sticky_kinds=("StatefulSet", "VirtualMachineInstance"))
        self.during_release: Any = None

    @hookimpl
    def podnet_release(self, context: Any) -> Any:
        step, self.during_release = self.during_release, None
        if step is not None:
            step()
        return super().podnet_release(context)


def test_a_vms_next_pod_waits_while_its_last_pod_releases_the_shared_record() -> None:
    """The VM's old pod releases its record (no hold) while a worker passes over the VM's
    new pod, which could take that very record back: the two passes must not interleave
    (the release would then take the route the new pod was just given)."""
    import threading

    provider = ReleaseInterleaver()
    rig = Rig(provider=provider)
    node = rig.node(0)
    rig.pod("virt-launcher-vm1-a", node, ownerReferences=VMI_REF)
    rig.settle()
    rig.cluster.delete(POD, "virt-launcher-vm1-a", NS, grace_period_seconds=0)
    rig.pod("virt-launcher-vm1-b", node, ownerReferences=VMI_REF)
    e = rig.engine
    for informer in e.informers:
        informer.pump()
    other = threading.Thread(target=e.podnetworks.reconcile, args=(f"{NS}/virt-launcher-vm1-b",))
    provider.during_release = lambda: (other.start(), other.join(timeout=0.5))
    e.podnetworks.reconcile(f"{NS}/virt-launcher-vm1-a")
    other.join(timeout=10)
    assert not other.is_alive()
    rig.settle()
    [record] = rig.records()
    assert record["spec"]["podName"] == "virt-launcher-vm1-b" and phase(record) == "Routed"
    key = f"{NS}/{record['metadata']['name']}"
    assert provider.cloud.routes.get(record["status"]["ip"]) == key


def _vm_routed_on_a_node_pool() -> tuple[Rig, ReferenceProvider, str, Obj]:
    """A node-pool provider sticky for VMs, and VM vm1's first pod routed on node 0."""
    provider = ReferenceProvider(ReferenceCloud(), policy=POLICY,
                                 sticky_kinds=("StatefulSet", "VirtualMachineInstance"))
    rig = Rig(provider=provider)
    node = rig.node(0)
    rig.pod("virt-launcher-vm1-a", node, ownerReferences=VMI_REF)
    rig.settle()
    [first] = rig.records()
    return rig, provider, node, first


def test_a_vms_next_pod_seen_before_its_last_pods_release_still_takes_the_address() -> None:
    rig, _provider, node, first = _vm_routed_on_a_node_pool()
    rig.cluster.delete(POD, "virt-launcher-vm1-a", NS, grace_period_seconds=0)
    rig.pod("virt-launcher-vm1-b", node, ownerReferences=VMI_REF)
    e = rig.engine
    for informer in e.informers:
        informer.pump()
    e.podnetworks.reconcile(f"{NS}/virt-launcher-vm1-b")  # before the old pod's pass
    rig.settle()
    [record] = rig.records()
    assert record["metadata"]["uid"] == first["metadata"]["uid"]
    assert record["spec"]["podName"] == "virt-launcher-vm1-b" and phase(record) == "Routed"
    assert record["status"]["ip"] == first["status"]["ip"]


def test_a_vms_next_pod_takes_the_address_of_a_pod_that_finished_and_lingers() -> None:
    """A stopped VM's virt-launcher pod ends ``Succeeded`` and stays listed: the VM's next
    pod takes its address back all the same."""
    rig, provider, node, first = _vm_routed_on_a_node_pool()
    old = rig.cluster.get(POD, "virt-launcher-vm1-a", NS)
    old["status"] = {"phase": "Succeeded"}
    rig.cluster.update_status(POD, old)
    rig.pod("virt-launcher-vm1-b", node, ownerReferences=VMI_REF)
    rig.settle()
    [record] = rig.records()
    assert record["spec"]["podName"] == "virt-launcher-vm1-b" and phase(record) == "Routed"
    assert record["status"]["ip"] == first["status"]["ip"]
    assert provider.cloud.routes[record["status"]["ip"]] == f"{NS}/{record['metadata']['name']}"
