"""A node no provider serves (no ``nodeProviders`` rule matches it, no plugin claims it,
no ``defaultProvider``): its pods get no network, and the controller says so once per node
and reason, as a Warning Event on the Node and a log line, not once per pod."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK, Obj
from podnet.core.cluster.selectors import parse_label_selector
from podnet.core.config import NodeProviderRule
from podnet.core.engine import Engine, EngineOptions
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster


def no_provider_events(cluster: InMemoryCluster, node: Obj) -> int:
    """How many times a NoProvider Event was said about ``node`` (repeats counted)."""
    return sum(int(e.get("count") or 1)
               for e in cluster.events_for(node, reason="NoProvider"))


def test_a_node_no_provider_serves_is_said_once_per_node_not_per_pod(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud(), policy=PoolPolicy(
        min_idle=1, max_idle=2, batch_size=2, max_batch_size=4)), name="reference")
    rule = NodeProviderRule(provider="reference", selector=parse_label_selector("pool=a"),
                            text="pool=a")
    engine = Engine(cluster, pm, clock=clock,
                    options=EngineOptions(default_provider=None, node_providers=(rule,)))
    engine.start()
    served = node_obj(0)
    served["metadata"]["labels"]["pool"] = "a"
    served = cluster.create(NODE, served)
    unserved = cluster.create(NODE, node_obj(1))
    name = unserved["metadata"]["name"]
    caplog.set_level(logging.WARNING)
    for i in range(30):
        cluster.create(POD, pod_obj(f"p{i}", name))
    cluster.create(POD, pod_obj("served", served["metadata"]["name"]))
    engine.run_until_idle(advance=5)
    # the node changes (a label no rule matches) and is reconciled again: not said again
    cluster.patch(NODE, name, {"metadata": {"labels": {"pool": "b"}}})
    engine.run_until_idle(advance=5)

    records = {pn["spec"]["podName"] for pn in cluster.list(POD_NETWORK).items}
    assert records == {"served"}, "the unserved node's pods got records"
    assert no_provider_events(cluster, unserved) == 1
    [event] = cluster.events_for(unserved, reason="NoProvider")
    assert event["type"] == "Warning"
    assert "nodeProviders" in event["message"] and "defaultProvider" in event["message"]
    assert no_provider_events(cluster, served) == 0
    said = [r for r in caplog.records if "no provider serves it" in r.getMessage()]
    assert len(said) == 1 and name in said[0].getMessage()

    # served now (a rule matches): quiet; unserved again: said again
    cluster.patch(NODE, name, {"metadata": {"labels": {"pool": "a"}}})
    engine.run_until_idle(advance=5)
    cluster.patch(NODE, name, {"metadata": {"labels": {"pool": "c"}}})
    engine.run_until_idle(advance=5)
    assert no_provider_events(cluster, unserved) == 2


class ClaimsForAnUnknownProvider:
    """A plugin that claims every node for a provider nobody registered."""

    @hookimpl
    def podnet_select_provider(self, node: Any) -> str:
        return "retired"


def test_a_claim_for_a_provider_not_registered_is_said_with_its_name() -> None:
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    pm.register(ClaimsForAnUnknownProvider(), name="claims")
    engine = Engine(cluster, pm, clock=clock, options=EngineOptions(default_provider=None))
    engine.start()
    node = cluster.create(NODE, node_obj(0))
    for i in range(5):
        cluster.create(POD, pod_obj(f"p{i}", node["metadata"]["name"]))
    engine.run_until_idle(advance=5)
    assert not cluster.list(POD_NETWORK).items
    [event] = cluster.events_for(node, reason="UnknownProvider")
    assert event["type"] == "Warning" and int(event.get("count") or 1) == 1
    assert "'retired', which is not registered" in event["message"]


def test_a_node_its_cloud_has_not_initialized_waits_without_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    """Waiting is not failing: a node still tainted uninitialized has no labels from its
    cloud controller manager yet, so no rule can match it; it is no Warning. Once the
    taint goes and still no rule matches, it is said as any unserved node."""
    clock = FakeClock()
    cluster = InMemoryCluster(clock=clock)
    cluster.create(NAMESPACE, {"metadata": {"name": NAMESPACE_NAME}})
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    rule = NodeProviderRule(provider="reference", selector=parse_label_selector("pool=a"),
                            text="pool=a")
    engine = Engine(cluster, pm, clock=clock,
                    options=EngineOptions(default_provider=None, node_providers=(rule,)))
    engine.start()
    obj = node_obj(0)
    obj["spec"]["taints"] = [{"key": "node.cloudprovider.kubernetes.io/uninitialized",
                              "value": "true", "effect": "NoSchedule"}]
    node = cluster.create(NODE, obj)
    name = node["metadata"]["name"]
    cluster.create(POD, pod_obj("p0", name))
    caplog.set_level(logging.INFO)
    engine.run_until_idle(advance=5)
    assert no_provider_events(cluster, node) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING
                and name in r.getMessage()]
    assert len([r for r in caplog.records if "waits for its cloud controller manager"
                in r.getMessage()]) == 1

    cluster.patch(NODE, name, {"spec": {"taints": None}})  # initialized, no rule matches
    engine.run_until_idle(advance=5)
    assert no_provider_events(cluster, node) == 1
