"""The ECS provider's hooks, one by one, against the loopback simulator."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from podnet.app.demo import node_obj
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.models import NodeInfo
from podnet.hookspecs.demo import DemoSettings
from podnet.hookspecs.networks import SubnetInfo
from podnet.hookspecs.types import CloudInterface, NodeContext, PoolEntry
from podnet.plugins.ecs import demo
from podnet.plugins.ecs.cloud import Limits as _Limits
from podnet.plugins.ecs.demo import EcsWorld
from podnet.plugins.ecs.provider import EcsProvider

SECRET = "top-SECRET-value"


@pytest.fixture
def ecs() -> Iterator[EcsWorld]:
    world = EcsWorld(nodes=1, access_key_secret=SECRET)
    yield world
    world.close()


def ctx(name: str = "node-0000", **kw: object) -> NodeContext:
    return NodeContext(node=NodeInfo(name=name, uid="u", **kw))  # type: ignore[arg-type]


def test_instance_id_from_provider_id_label_or_config() -> None:
    p = EcsProvider()
    assert p.instance_id(ctx("n", provider_id="cn-hangzhou.i-bp1abc")) == "i-bp1abc"
    assert p.instance_id(ctx("n", provider_id="alicloud://cn-beijing.i-2ze9")) == "i-2ze9"
    assert p.instance_id(ctx("n", labels={"podnet.io/ecs-instance-id": "i-x1"})) == "i-x1"
    with pytest.raises(ProviderError) as info:
        p.instance_id(ctx("n", provider_id="demo://n"))
    assert info.value.field == "spec.providerID"


def test_max_interfaces_follows_terway(ecs: EcsWorld) -> None:
    p = ecs.plugin
    # the secondary ENIs only: EniQuantity * ratio + shift - 1 (the primary is not pooled)
    assert p.max_interfaces(_Limits(enis=3, ipv4=10, ipv6=0)) == 2
    p.podnet_configure("ecs", {**ecs.config, "eni_cap_ratio": 0.5, "eni_cap_shift": 1})
    assert p.max_interfaces(_Limits(enis=8, ipv4=10, ipv6=0)) == 4
    p.podnet_configure("ecs", {**ecs.config, "max_enis": 1})
    assert p.max_interfaces(_Limits(enis=8, ipv4=10, ipv6=0)) == 1


def test_inventory_reports_the_primary_without_its_address(ecs: EcsWorld) -> None:
    inv = ecs.plugin.podnet_node_inventory("ecs", ctx())
    assert inv is not None
    [primary] = inv.interfaces
    assert primary.primary and primary.ips == () and primary.subnet == "vsw-sim-a"
    assert not primary.pooled  # Terway never puts pod addresses on the primary ENI
    assert (inv.max_interfaces, inv.ips_per_interface) == (2, 9)
    assert inv.capacity == 2 * 9  # secondary ENIs x addresses per ENI
    calls = ecs.sim.calls["DescribeInstanceTypes"]
    ecs.plugin.podnet_node_inventory("ecs", ctx())
    assert ecs.sim.calls["DescribeInstanceTypes"] == calls  # the limits are cached


def test_grow_never_goes_onto_the_primary_eni(ecs: EcsWorld) -> None:
    p = ecs.plugin
    inv = p.podnet_node_inventory("ecs", ctx())
    assert inv is not None
    for itf in (None, inv.interfaces[0]):
        with pytest.raises(ProviderError) as info:
            p.podnet_pool_grow("ecs", ctx(), itf, 2, None)
        assert info.value.kind is ErrorKind.FATAL
    with pytest.raises(ProviderError):
        p.podnet_interface_dispose("ecs", ctx(), inv.interfaces[0])
    assert ecs.sim.calls["AssignPrivateIpAddresses"] == 0
    assert ecs.addresses() == {}


def test_grow_shrink_and_already_gone(ecs: EcsWorld) -> None:
    p = ecs.plugin
    itf = p.podnet_interface_create("ecs", ctx(), None, 0)
    assert itf is not None and itf.pooled
    got = p.podnet_pool_grow("ecs", ctx(), itf, 4, None)
    assert got is not None and len(got) == 4
    assert ecs.sim.calls["AssignPrivateIpAddresses"] == 1
    assert set(ecs.addresses()) == {e.address for e in got}
    gone = p.podnet_pool_shrink("ecs", ctx(), [got[0], got[1]])
    assert gone is not None and set(gone) == {got[0].address, got[1].address}
    # one already gone, one still there: both count as gone
    again = p.podnet_pool_shrink("ecs", ctx(), [got[0], got[2]])
    assert again is not None and set(again) == {got[0].address, got[2].address}
    assert set(ecs.addresses()) == {got[3].address}
    # the interface unknown: found on the node's ENIs
    assert p.podnet_pool_shrink("ecs", ctx(), [PoolEntry(got[3].address)]) == [got[3].address]
    assert ecs.addresses() == {}


def test_create_rolls_back_a_failed_attach(ecs: EcsWorld) -> None:
    ecs.sim.fail_next("AttachNetworkInterface", "EniPerInstanceLimitExceeded")
    with pytest.raises(ProviderError) as info:
        ecs.plugin.podnet_interface_create("ecs", ctx(), None, 3)
    assert info.value.kind is ErrorKind.QUOTA_EXCEEDED
    assert [e.kind for e in ecs.sim.enis_of("i-node0000")] == ["Primary"]
    assert ecs.addresses() == {}


def test_failed_rollback_is_retried_by_the_next_inventory(ecs: EcsWorld) -> None:
    ecs.sim.fail_next("AttachNetworkInterface", "InternalError")
    ecs.sim.fail_next("DeleteNetworkInterface", "InternalError")
    with pytest.raises(ProviderError):
        ecs.plugin.podnet_interface_create("ecs", ctx(), None, 3)
    assert len(ecs.addresses()) == 3  # the orphan, attributed to the instance
    ecs.plugin.podnet_node_inventory("ecs", ctx())
    assert ecs.addresses() == {}


def test_create_attach_and_dispose(ecs: EcsWorld) -> None:
    p = ecs.plugin
    itf = p.podnet_interface_create("ecs", ctx(), None, 5)
    assert itf is not None and len(itf.ips) == 5 and itf.subnet == "vsw-sim-a"
    assert ecs.sim.eni_states()[itf.id] == "InUse"
    with pytest.raises(ProviderError):
        p.podnet_interface_dispose("ecs", ctx(), CloudInterface(id="eni-x", primary=True))
    assert p.podnet_interface_dispose("ecs", ctx(), itf) is True
    assert itf.id not in ecs.sim.eni_states()
    assert p.podnet_interface_dispose("ecs", ctx(), itf) is True  # gone is gone


def test_dispose_waits_for_a_slow_detach(ecs: EcsWorld) -> None:
    p = ecs.plugin
    itf = p.podnet_interface_create("ecs", ctx(), None, 0)
    assert itf is not None
    ecs.sim.state_latency = 30.0
    p.podnet_configure("ecs", {**ecs.config, "attach_timeout": 0.05})
    assert p.podnet_interface_dispose("ecs", ctx(), itf) is False  # still detaching
    assert ecs.sim.eni_states()[itf.id] == "Detaching"


@pytest.mark.parametrize(("policy", "expected"), [
    ("ordered", "vsw-sim-a"), ("most", "vsw-sim-b")])
def test_vswitch_policy(policy: str, expected: str) -> None:
    world = EcsWorld(nodes=1, vswitch_policy=policy,
                     vswitches_in_cloud={"vsw-sim-a": "10.0.0.0/26",
                                         "vsw-sim-b": "10.1.0.0/24"})
    try:
        assert world.plugin.choose_vswitch(None, 3) == expected
        world.sim.exhaust(expected)
        other = {"vsw-sim-a", "vsw-sim-b"} - {expected}
        assert world.plugin.choose_vswitch(None, 3) in other
        world.sim.exhaust(next(iter(other)))
        with pytest.raises(ProviderError) as info:
            world.plugin.choose_vswitch(None, 3)
        assert info.value.kind is ErrorKind.SUBNET_EXHAUSTED
    finally:
        world.close()


def test_sdk_errors_become_provider_errors_naming_the_subject(ecs: EcsWorld) -> None:
    itf = ecs.plugin.podnet_interface_create("ecs", ctx(), None, 0)
    assert itf is not None
    for code, kind in [("Throttling", ErrorKind.THROTTLED),
                       ("InvalidVSwitchId.IpNotEnough", ErrorKind.SUBNET_EXHAUSTED),
                       ("QuotaExceeded.PrivateIpAddress", ErrorKind.QUOTA_EXCEEDED),
                       ("ServiceUnavailable", ErrorKind.TRANSIENT)]:
        ecs.sim.fail_next("AssignPrivateIpAddresses", code)
        with pytest.raises(ProviderError) as info:
            ecs.plugin.podnet_pool_grow("ecs", ctx(), itf, 2, None)
        assert info.value.kind is kind and code in str(info.value)
        assert "vsw-sim-a" in str(info.value)


def test_credentials_never_leak(ecs: EcsWorld, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    ecs.sim.fault_rate = 1.0
    messages = []
    for _ in range(3):
        try:
            ecs.plugin.podnet_node_inventory("ecs", ctx())
        except ProviderError as exc:
            messages.append(repr(exc) + str(exc))
    assert messages
    assert all(SECRET not in m for m in messages)
    assert SECRET not in caplog.text
    assert SECRET not in repr(ecs.plugin.config)


def test_demo_builder_sets_up_nodes() -> None:
    cloud = demo.build(DemoSettings(), instance_type="ecs.g7.large")
    plugin, truth = cloud.plugin, cloud.ground_truth
    calls, setup_node = cloud.calls, cloud.setup_node
    node = setup_node(node_obj(3))
    assert node["spec"]["providerID"] == "cn-hangzhou.i-node0003"
    info = NodeInfo(name="node-0003", uid="u", provider_id=node["spec"]["providerID"],
                    labels=node["metadata"]["labels"])
    inv = plugin.podnet_node_inventory("ecs", NodeContext(node=info))
    assert inv is not None and inv.interfaces[0].primary
    # the demo declares its vSwitches as a Subnet object (its config names none): core
    # hands it to the node pool hooks
    (declared,) = demo.SUBNETS
    spec = declared["spec"]
    subnet = SubnetInfo(name=declared["metadata"]["name"], provider="ecs",
                        cidrs=(spec["cidrBlock"],), default=True,
                        parameters=spec["parameters"])
    ctx = NodeContext(node=info, subnets=(subnet,))
    itf = plugin.podnet_interface_create("ecs", ctx, None, 0)
    got = plugin.podnet_pool_grow("ecs", ctx, itf, 2, None)
    assert set(truth()) == {e.address for e in got}
    assert set(truth().values()) == {"node-0003"}
    assert calls()["AssignPrivateIpAddresses"] == 1


def test_a_throttled_poll_while_attaching_is_polled_again_not_rolled_back(
        ecs: EcsWorld) -> None:
    ecs.sim.fail_next("DescribeNetworkInterfaces", "Throttling", times=2)
    itf = ecs.plugin.podnet_interface_create("ecs", ctx(), None, 2)
    assert itf is not None and len(itf.ips) == 2
    assert ecs.sim.eni_states()[itf.id] == "InUse"
    assert ecs.sim.calls["DeleteNetworkInterface"] == 0


def test_waiting_for_a_state_an_eni_never_heads_to_gives_up_soon(ecs: EcsWorld) -> None:
    """An ENI left Available (its attach was lost) is not polled to the 30 s attach
    deadline: a settled, unwanted state ends the wait after a short grace, as a transient
    error the caller retries (the chaos runs poll every millisecond)."""
    import time

    from alibabacloud_ecs20140526 import models as m

    made = ecs.plugin._call("CreateNetworkInterface", m.CreateNetworkInterfaceRequest(
        region_id=ecs.plugin.config.region, v_switch_id=next(iter(ecs.sim.vswitches)),
        security_group_ids=list(demo.SECURITY_GROUPS)))
    eni_id = made.network_interface_id
    assert ecs.sim.eni_states()[eni_id] == "Available"
    started = time.monotonic()
    with pytest.raises(ProviderError) as info:
        ecs.plugin._wait(eni_id, "InUse")
    took = time.monotonic() - started
    assert info.value.kind is ErrorKind.TRANSIENT and "still Available" in str(info.value)
    assert ecs.plugin.config.attach_timeout >= 30 and took < 5


def test_each_sdk_request_is_reported_by_its_action_name(ecs: EcsWorld) -> None:
    from podnet.core.clock import SystemClock
    from podnet.core.policy import RateLimit
    from podnet.core.ratelimit import CloudLimiter

    limiter = CloudLimiter(RateLimit(rate=1000, burst=100), SystemClock())
    assert ecs.plugin.podnet_cloud_limiter("ecs", limiter) is True
    ecs.sim.fail_next("AttachNetworkInterface", "EniPerInstanceLimitExceeded")
    with pytest.raises(ProviderError):
        ecs.plugin.podnet_interface_create("ecs", ctx(), None, 3)
    itf = ecs.plugin.podnet_interface_create("ecs", ctx(), None, 0)
    assert itf is not None
    ecs.plugin.podnet_pool_grow("ecs", ctx(), itf, 2, None)
    latency, errors = limiter.requests()
    counts = {api: buckets[-1][1] for api, (buckets, _) in latency.items()}
    # what the simulator answered, request by request, under the cloud's own names
    assert counts["AssignPrivateIpAddresses"] == ecs.sim.calls["AssignPrivateIpAddresses"] == 1
    assert counts["AttachNetworkInterface"] == ecs.sim.calls["AttachNetworkInterface"]
    assert errors == {("AttachNetworkInterface", "quota_exceeded"): 1}
    assert not any(api.startswith("podnet_") or api in ("pool_grow", "interface_create")
                   for api in counts)


def test_unknown_machines_are_the_instances_holding_an_eni_podnet_made(ecs: EcsWorld
                                                                      ) -> None:
    """Only an instance an ENI podnet made is attached to is listed (tag, or an older
    ENI's description), and only when no Node and no record names it: ENIs others made
    on the region's instances are no finding."""
    p = ecs.plugin
    region = ecs.config["region"]
    for name in ("kept-node", "kept-record", "gone-tag", "gone-desc", "others", "bare"):
        ecs.add_node(name)
    _, tagged = ecs.attach_by_hand("i-gonetag", 2)
    ecs.attach_by_hand("i-gonedesc", 1, mark="description")
    ecs.attach_by_hand("i-others", 3, mark=None)  # someone else's ENI: not podnet's
    ecs.attach_by_hand("i-keptnode", 1)
    ecs.attach_by_hand("i-keptrecord", 1)
    ecs.attach_by_hand("i-node0000", 1)  # node-0000: the config's instance_ids
    known = [NodeInfo(name="kept-node", uid="u", provider_id=f"{region}.i-keptnode"),
             # a record's node: its spec.instanceId as the providerID
             NodeInfo(name="kept-record", uid="", provider_id=f"{region}.i-keptrecord"),
             NodeInfo(name="node-0000", uid="u"),
             NodeInfo(name="no-instance", uid="u")]  # names none: left out, not an error
    before = dict(ecs.sim.calls)
    machines = p.podnet_unknown_machines(provider="ecs", known=known)
    assert machines is not None
    assert [(m.name, m.provider_id, m.labels) for m in machines] == [
        (i, f"{region}.{i}", {"node.kubernetes.io/instance-type": "ecs.g7.large"})
        for i in ("i-gonedesc", "i-gonetag")]
    calls = {api: n - before.get(api, 0) for api, n in ecs.sim.calls.items()
             if n != before.get(api, 0)}
    assert calls == {"DescribeNetworkInterfaces": 1, "DescribeInstances": 1}  # reads only
    # each is one podnet_node_inventory reads without a record
    inv = p.podnet_node_inventory(provider="ecs", node=NodeContext(node=machines[1]))
    assert inv is not None and sorted(inv.all_ips()) == sorted(tagged)


def test_unknown_machines_read_every_page(ecs: EcsWorld) -> None:
    """More ENIs than a DescribeNetworkInterfaces page (500) and more instances than
    DescribeInstances takes at once (100): every one is found."""
    ecs.sim.add_vswitch("vsw-big", "10.8.0.0/16")
    for i in range(120):
        ecs.sim.add_instance(f"i-many{i:03d}", "ecs.g7.large", "vsw-big")
    for i in range(120):  # 120 primaries, 120 podnet ENIs, and 400 of others
        ecs.attach_by_hand(f"i-many{i:03d}", 0)
    for _ in range(400):
        ecs.sim.dispatch("CreateNetworkInterface", {"VSwitchId": "vsw-big",
                                                     "SecurityGroupId": "sg-1"})
    before = dict(ecs.sim.calls)
    machines = ecs.plugin.podnet_unknown_machines(provider="ecs", known=[])
    assert machines is not None
    assert [m.name for m in machines] == [f"i-many{i:03d}" for i in range(120)]
    calls = {api: ecs.sim.calls[api] - before.get(api, 0)
             for api in ("DescribeNetworkInterfaces", "DescribeInstances")}
    # 520 secondary ENIs: 2 pages of 500; 120 instances: 100 ids a call
    assert calls == {"DescribeNetworkInterfaces": 2, "DescribeInstances": 2}


def test_unknown_machines_name_a_failed_or_malformed_describe(ecs: EcsWorld) -> None:
    """A throttled or malformed DescribeInstances is an error the audit reports (never
    an empty list, which would read as clean)."""
    ecs.add_node("gone")
    ecs.attach_by_hand("i-gone", 1)
    ecs.sim.fail_next("DescribeInstances", "Throttling")
    with pytest.raises(ProviderError) as info:
        ecs.plugin.podnet_unknown_machines(provider="ecs", known=[])
    assert info.value.kind is ErrorKind.THROTTLED and "DescribeInstances" in str(info.value)
    for key in ("InstanceType", "Instances"):
        ecs.sim.malform_next("DescribeInstances", key)
        with pytest.raises(ProviderError) as info:
            ecs.plugin.podnet_unknown_machines(provider="ecs", known=[])
        assert "malformed" in str(info.value) and key in str(info.value)
    machines = ecs.plugin.podnet_unknown_machines(provider="ecs", known=[])
    assert machines is not None and [m.name for m in machines] == ["i-gone"]
