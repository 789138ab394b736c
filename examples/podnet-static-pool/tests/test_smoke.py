"""Smoke tests: podnet's engine settles pods with static-pool, on a fake clock and an
in-memory cluster, driven one step at a time (no threads, no sleeping)."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from podnet_static_pool import NAME, StaticBackend, StaticPoolProvider

from podnet.app.demo import node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK, Obj
from podnet.core.engine import Engine, EngineOptions
from podnet.core.plugin import new_plugin_manager
from podnet.hookspecs.errors import ConfigError
from podnet.sim.memory import InMemoryCluster

NS = "demo"  # the namespace podnet.app.demo.pod_obj puts pods in
RANGES = ["10.20.0.0/28", "10.20.1.0/28"]


class Rig:
    """A cluster, a backend, and an engine that can be restarted over both."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.clock = FakeClock()
        self.cluster = InMemoryCluster(clock=self.clock)
        self.backend = StaticBackend()
        self.config = config if config is not None else {"ranges": RANGES, "per_node": 8}
        self.cluster.create(NAMESPACE, {"metadata": {"name": NS}})
        self.engine = self._engine()

    def _engine(self) -> Engine:
        pm = new_plugin_manager()
        self.plugin = StaticPoolProvider(self.backend)
        pm.register(self.plugin, name=NAME)
        engine = Engine(self.cluster, pm, clock=self.clock, options=EngineOptions(
            default_provider=NAME, provider_config={NAME: self.config}, seed=0))
        engine.start()
        return engine

    def restart(self) -> None:
        """A new controller process: new engine and plugin object, same backend."""
        for informer in self.engine.informers:
            informer.stop()
        self.engine.queue.shutdown()
        self.engine = self._engine()

    def settle(self, advance: float = 0.0) -> None:
        self.engine.run_until_idle(advance=advance)

    def node(self, i: int) -> str:
        return str(self.cluster.create(NODE, node_obj(i))["metadata"]["name"])

    def pod(self, name: str, node: str, annotations: dict[str, str] | None = None) -> Obj:
        obj = pod_obj(name, node)
        if annotations:
            obj["metadata"]["annotations"] = annotations
        return self.cluster.create(POD, obj)

    def records(self) -> list[Obj]:
        return list(self.cluster.list(POD_NETWORK).items)

    def record_of(self, pod: Obj) -> Obj:
        found = [r for r in self.records() if r["spec"]["podUid"] == pod["metadata"]["uid"]]
        assert len(found) == 1, found
        return found[0]

    def assert_no_leak(self) -> None:
        owned = [r["status"]["ip"] for r in self.records() if r.get("status", {}).get("ip")]
        assert len(owned) == len(set(owned)), owned
        pooled = {a.address for p in self.engine.pools.all() for a in p.addresses.values()}
        stray = set(self.backend.all_addresses()) - set(owned) - pooled
        assert not stray, f"assigned addresses nobody owns or pools: {sorted(stray)}"


def phase(record: Obj) -> str:
    return str(record.get("status", {}).get("phase", "Pending"))


def ready(record: Obj) -> dict[str, Any]:
    conditions = {c["type"]: c for c in record.get("status", {}).get("conditions", [])}
    condition: dict[str, Any] = conditions["Ready"]
    return condition


def test_ten_pods_settle_on_distinct_addresses_of_the_ranges_and_go_away_cleanly() -> None:
    rig = Rig()
    nodes = [rig.node(i) for i in range(2)]
    pods = [rig.pod(f"p{i}", nodes[i % 2]) for i in range(10)]
    rig.settle()
    networks = [ipaddress.ip_network(r) for r in RANGES]
    ips = set()
    for pod in pods:
        record = rig.record_of(pod)
        status = record["status"]
        assert phase(record) == "Routed", status
        ip = status["ip"]
        ips.add(ip)
        assert status["subnet"] in RANGES
        network = ipaddress.ip_network(status["subnet"])
        assert ipaddress.ip_address(ip) in network
        assert status["gateway"] == str(next(network.hosts())) != ip
        assert any(ipaddress.ip_address(ip) in n for n in networks)
        assert rig.backend.assigned[ip] == pod["spec"]["nodeName"]
        assert rig.backend.routes[ip] == f"{NS}/{record['metadata']['name']}"
    assert len(ips) == 10
    rig.assert_no_leak()

    for i in range(10):
        rig.cluster.delete(POD, f"p{i}", NS, grace_period_seconds=0)
    rig.settle(advance=10)  # backend calls are rate-limited: let the fake clock run
    assert rig.records() == []
    assert rig.backend.routes == {}
    policy = rig.engine.policy(NAME)
    for node in nodes:
        held = [ip for ip, n in rig.backend.all_addresses().items() if n == node]
        assert len(held) <= policy.max_idle
    rig.assert_no_leak()


def test_a_restart_keeps_every_address_and_hands_out_no_duplicate() -> None:
    rig = Rig()
    nodes = [rig.node(i) for i in range(2)]
    for i in range(6):
        rig.pod(f"p{i}", nodes[i % 2])
    rig.settle()
    before = {r["metadata"]["name"]: r["status"]["ip"] for r in rig.records()}
    rig.restart()
    for i in range(6, 10):
        rig.pod(f"p{i}", nodes[i % 2])
    rig.settle()
    after = {r["metadata"]["name"]: r["status"]["ip"] for r in rig.records()}
    assert all(after[name] == ip for name, ip in before.items())
    assert len(set(after.values())) == len(after) == 10
    rig.assert_no_leak()


def test_a_subnet_request_is_served_from_that_range() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.settle()  # the pool fills up from the first range
    pod = rig.pod("picky", node, {"podnet.io/subnets": RANGES[1]})
    rig.settle(advance=30)
    record = rig.record_of(pod)
    assert phase(record) == "Routed", record["status"]
    assert record["status"]["subnet"] == RANGES[1]
    assert ipaddress.ip_address(record["status"]["ip"]) in ipaddress.ip_network(RANGES[1])
    rig.restart()  # the address assigned outside the pool is owned by the record
    rig.settle(advance=rig.engine.policy(NAME).gc_period + 1)
    assert rig.record_of(pod)["status"]["ip"] == record["status"]["ip"]
    pool = rig.engine.pools.find(NAME, node)
    assert pool is not None and not pool.suspects
    rig.assert_no_leak()


def test_a_fixed_address_request_is_refused_naming_the_annotation() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("fixed", node, {"podnet.io/ip-address": "10.20.0.9"})
    other = rig.pod("plain", node)
    rig.settle()
    record = rig.record_of(pod)
    assert phase(record) == "Pending"
    assert ready(record)["reason"] == "InvalidRequest"
    assert "metadata.annotations[podnet.io/ip-address]" in ready(record)["message"]
    assert phase(rig.record_of(other)) == "Routed"


def test_a_full_node_leaves_the_pod_waiting_with_a_reason() -> None:
    rig = Rig({"ranges": RANGES, "per_node": 2})
    node = rig.node(0)
    rig.pod("a", node)
    rig.pod("b", node)
    third = rig.pod("c", node)
    rig.settle(advance=10)
    record = rig.record_of(third)
    assert phase(record) == "Pending"
    assert ready(record)["reason"] == "WaitingForAddress"
    assert "capacity of 2" in ready(record)["message"]
    rig.cluster.delete(POD, "a", NS, grace_period_seconds=0)
    rig.settle(advance=30)
    assert phase(rig.record_of(third)) == "Routed"


def test_backend_errors_are_classified_and_retried() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.backend.faults["Assign"] = ["Throttled", "Unavailable"]
    rig.backend.faults["Route"] = ["Unavailable"]
    pod = rig.pod("web", node)
    rig.settle(advance=30)
    assert phase(rig.record_of(pod)) == "Routed"
    assert rig.backend.faults == {"Assign": [], "Route": []}
    assert rig.engine.stats.failed_transitions["pod_network.route"] == 1


@pytest.mark.parametrize("config, key", [
    ({"ranges": ["10.0.0.1/24"]}, "providers.static-pool.ranges[0]"),
    ({"ranges": ["10.0.0.0/24", "10.0.0.128/25"]}, "providers.static-pool.ranges[1]"),
    ({"ranges": "10.0.0.0/24"}, "providers.static-pool.ranges"),
    ({"per_node": 0}, "providers.static-pool.per_node"),
    ({"per_node": True}, "providers.static-pool.per_node"),
    ({"ranges": ["10.0.0.0/24"], "subnet": "x"}, "providers.static-pool.subnet"),
])
def test_a_bad_config_section_names_the_key(config: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        Rig(config)
    assert info.value.key == key
