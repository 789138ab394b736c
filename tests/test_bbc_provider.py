"""The BBC provider's own rules: node selection, instance ids, config, credentials kept out
of logs and messages, candidate subnets by free addresses, shrink of absent addresses,
and the demo builder."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from podnet.app.demo import node_obj
from podnet.core.cluster.port import NODE
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.models import NodeInfo, NodeNetwork, NodeNetworkSpec, ObjectMeta
from podnet.hookspecs.demo import DemoSettings
from podnet.hookspecs.types import NodeContext, PoolEntry
from podnet.plugins.bbc import demo
from podnet.plugins.bbc.demo import provider_for, register_nodes, start_simulator
from podnet.plugins.bbc.provider import BbcProvider
from podnet.plugins.bbc.sim import API_ADD_CROSS, API_DEL, BbcSimulator

SECRET = "sk-very-secret-0123456789"


@pytest.fixture
def sim() -> Iterator[BbcSimulator]:
    s = start_simulator()
    register_nodes(s, ["node-0000"])
    yield s
    s.stop()


def _node(name: str = "node-0000", **kw: object) -> NodeInfo:
    return NodeInfo(name=name, uid=f"uid-{name}", **kw)  # type: ignore[arg-type]


def test_selects_bbc_nodes_by_instance_type_label() -> None:
    p = BbcProvider()
    label = "node.kubernetes.io/instance-type"
    assert p.podnet_select_provider(_node(labels={label: "BBC"})) == "bbc"
    assert p.podnet_select_provider(_node(labels={label: "bbc_gpu"})) == "bbc"
    assert p.podnet_select_provider(_node(labels={label: "BCC"})) is None
    assert p.podnet_select_provider(_node()) is None
    p.podnet_configure(provider="bbc", config={"instanceTypeLabel": "cloud/kind",
                                               "instanceTypePrefix": "metal"})
    assert p.podnet_select_provider(_node(labels={"cloud/kind": "METAL-1"})) == "bbc"


def test_instance_id_from_provider_id_or_label() -> None:
    p = BbcProvider()
    assert p.instance_id(_node(provider_id="cce://i-abc123")) == "i-abc123"
    p.podnet_configure(provider="bbc", config={"instanceIdLabel": "bbc/instance"})
    assert p.instance_id(_node(provider_id="cce://i-x", labels={"bbc/instance": "i-y"})) == "i-y"
    with pytest.raises(ProviderError) as info:
        BbcProvider().instance_id(_node())
    assert info.value.field == "spec.providerID"


def test_credentials_never_in_logs_or_messages(sim: BbcSimulator,
                                               caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    p = BbcProvider()
    p.podnet_configure(provider="bbc", config={"endpoint": sim.endpoint,
                                               "accessKeyId": "ak-visible",
                                               "secretAccessKey": SECRET})
    ctx = NodeContext(node=_node(provider_id="cce://node-0000"))
    p.podnet_node_inventory(provider="bbc", node=ctx)
    sim.script(API_DEL, "InternalError", status=500)
    with pytest.raises(Exception) as info:
        p.podnet_pool_shrink(provider="bbc", node=ctx, entries=[PoolEntry("10.128.0.9")])
    for text in (caplog.text, str(info.value), repr(p), repr(p.api)):
        assert SECRET not in text
        assert "ak-visible" not in text


def test_credentials_from_the_environment(sim: BbcSimulator,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BCE_ACCESS_KEY_ID", "ak-env")
    monkeypatch.setenv("BCE_SECRET_ACCESS_KEY", SECRET)
    p = BbcProvider()
    p.podnet_configure(provider="bbc", config={"endpoint": sim.endpoint})
    inv = p.podnet_node_inventory(provider="bbc",
                                  node=NodeContext(node=_node(provider_id="x://node-0000")))
    assert inv is not None and inv.max_interfaces == 1 and inv.ips_per_interface == 40
    assert inv.interfaces[0].primary and inv.interfaces[0].ips == ()


def test_grow_prefers_the_candidate_subnet_with_most_free_ips(sim: BbcSimulator) -> None:
    sim.add_subnet("sbn-small", "10.140.0.0/28")
    p = provider_for(sim, subnets=["sbn-small", "sbn-demo-b"])
    ctx = NodeContext(node=_node(provider_id="cce://node-0000"))
    got = p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=3, subnet=None)
    assert got is not None and {e.subnet for e in got} == {"sbn-demo-b"}
    # NodeNetwork subnets win over the config's
    nn = NodeNetwork(metadata=ObjectMeta(name="node-0000"),
                     spec=NodeNetworkSpec(provider="bbc", subnets=("sbn-small",)))
    got = p.podnet_pool_grow(provider="bbc", node=NodeContext(node=ctx.node, network=nn),
                             interface=None, count=2, subnet=None)
    assert got is not None and {e.subnet for e in got} == {"sbn-small"}
    assert sim.calls[API_ADD_CROSS] == 2


def test_grow_falls_through_an_exhausted_subnet(sim: BbcSimulator) -> None:
    sim.add_subnet("sbn-full", "10.141.0.0/29")
    sim.add_instance("filler", "sbn-full")
    for _ in range(4):
        sim.add_outside("filler")
    p = provider_for(sim, subnets=["sbn-full", "sbn-demo-b"])
    # the subnet API says sbn-full is empty, but suppose it lied: script it as read first
    got = p._grow_cross("node-0000", p.api.port("node-0000"), ["sbn-full", "sbn-demo-b"], 2,
                        False)
    assert {e.subnet for e in got} == {"sbn-demo-b"}


def test_a_subnet_reported_empty_is_marked_and_not_called_blind(sim: BbcSimulator) -> None:
    sim.add_subnet("sbn-full", "10.141.0.0/29")
    sim.add_instance("filler", "sbn-full")
    for _ in range(4):
        sim.add_outside("filler")
    p = provider_for(sim, subnets=["sbn-full"])
    port = p.api.port("node-0000")
    with pytest.raises(Exception, match="has 0 free IPs"):
        p._grow_cross("node-0000", port, ["sbn-full"], 1, False)
    assert p.empty_subnets == {"sbn-full"}
    calls = sim.calls[API_ADD_CROSS]
    # the mark: the next attempt checks free IPs first and fails fast, no blind write
    with pytest.raises(ProviderError, match="no free IP"):
        p._grow_cross("node-0000", port, ["sbn-full"], 1, False)
    assert sim.calls[API_ADD_CROSS] == calls


def test_shrink_counts_absent_addresses_as_gone(sim: BbcSimulator) -> None:
    p = provider_for(sim)
    ctx = NodeContext(node=_node(provider_id="cce://node-0000"))
    got = p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=2, subnet=None)
    assert got is not None
    entries = [*got, PoolEntry("10.128.0.250")]
    gone = p.podnet_pool_shrink(provider="bbc", node=ctx, entries=entries)
    assert gone == [e.address for e in entries]
    assert sim.addresses() == {}


def test_unconfigured_provider_says_so() -> None:
    with pytest.raises(ProviderError) as info:
        BbcProvider().podnet_node_inventory(provider="bbc",
                                            node=NodeContext(node=_node(provider_id="a://b")))
    assert info.value.kind is ErrorKind.FATAL and info.value.field == "providers.bbc.endpoint"


def test_demo_builder_serves_bbc_nodes() -> None:
    from podnet.core.clock import FakeClock
    from podnet.sim.memory import InMemoryCluster
    from podnet.testing.harness import EngineFactory, World, build_plugin_manager

    cloud = demo.DEMO.build(DemoSettings(seed=1))
    plugin, truth = cloud.plugin, cloud.ground_truth
    calls, setup_node = cloud.calls, cloud.setup_node
    try:
        clock = FakeClock()
        cluster = InMemoryCluster(clock=clock)
        pm = build_plugin_manager(plugin)
        world = World(cluster, clock, EngineFactory(cluster, pm, clock, provider="bbc"), truth)
        for i in range(2):
            node = setup_node(node_obj(i))
            assert plugin.podnet_select_provider(NodeInfo(
                name=node["metadata"]["name"], uid="u",
                labels=node["metadata"]["labels"])) == "bbc"
            cluster.create(NODE, node)
        for i in range(6):
            world.add_pod(f"p{i}", i % 2)
        world.settle(advance=10)
        world.assert_converged()
        assert set(truth().values()) == {"node-0000", "node-0001"}
        assert calls()["batchAddIp"] >= 2
        world.close()
    finally:
        plugin.simulator.stop()  # type: ignore[attr-defined]


def test_each_request_is_reported_by_the_bbc_api_name(sim: BbcSimulator) -> None:
    from podnet.core.clock import SystemClock
    from podnet.core.policy import RateLimit
    from podnet.core.ratelimit import CloudLimiter

    p = provider_for(sim, subnets=["sbn-demo-b"])
    limiter = CloudLimiter(RateLimit(rate=1000, burst=100), SystemClock())
    assert p.podnet_cloud_limiter("bbc", limiter) is True
    ctx = NodeContext(node=_node(provider_id="cce://node-0000"))
    sim.scripted.setdefault(API_ADD_CROSS, []).append((429, "RateLimit"))
    with pytest.raises(Exception, match="scripted"):  # the SDK's, classified by core
        p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=2, subnet=None)
    p.podnet_pool_grow(provider="bbc", node=ctx, interface=None, count=2, subnet=None)
    latency, errors = limiter.requests()
    counts = {api: buckets[-1][1] for api, (buckets, _) in latency.items()}
    assert counts[API_ADD_CROSS] == 2  # the refused request and the one that landed
    assert errors == {(API_ADD_CROSS, "throttled"): 1}


def test_unknown_machines_are_the_instances_no_node_or_record_names(sim: BbcSimulator) -> None:
    register_nodes(sim, ["node-0001", "node-0002"])
    p = provider_for(sim)
    known = [_node("node-0000", provider_id="cce://node-0000"),
             # a record's node: its spec.instanceId as the providerID
             NodeInfo(name="node-0001", uid="", provider_id="node-0001"),
             _node("no-instance")]  # names none: left out, not an error
    machines = p.podnet_unknown_machines(provider="bbc", known=known)
    assert machines is not None and [m.name for m in machines] == ["node-0002"]
    # each is one podnet_node_inventory reads without a record
    inv = p.podnet_node_inventory(provider="bbc", node=NodeContext(node=machines[0]))
    assert inv is not None and inv.interfaces[0].ips == ()


def test_audit_finds_addresses_planted_on_an_instance_no_node_or_record_names(
        sim: BbcSimulator) -> None:
    """What a node's addresses became when its record was let go before another named
    them and its Node was deleted: planted by hand in the simulator. The audit lists them
    (and exits nonzero); once they are gone, it is clean."""
    from podnet.app.audit import AuditReport, audit
    from podnet.app.records import read_records
    from podnet.core.plugin import Providers
    from podnet.sim.memory import InMemoryCluster
    from podnet.testing.harness import build_plugin_manager

    register_nodes(sim, ["node-0001"])
    store = InMemoryCluster()
    node = node_obj(0)  # node-0000, served by BBC, its instance the simulator's
    node["metadata"].setdefault("labels", {})["node.kubernetes.io/instance-type"] = "BBC"
    node["spec"]["providerID"] = "cce://node-0000"
    store.create(NODE, node)
    providers = Providers(build_plugin_manager(provider_for(sim)))

    def run() -> AuditReport:
        nodes = {n["metadata"]["name"]: n for n in store.list(NODE).items}
        return audit(read_records(store), nodes, providers, configured=["bbc"])

    report = run()
    assert report.clean, report
    planted = sorted(sim.add_outside("node-0001") for _ in range(2))
    report = run()
    assert not report.clean
    assert [(u.machine, u.ip) for u in report.unrecorded] == [
        ("node-0001", ip) for ip in planted]
    sim.forget(planted)
    assert run().clean
