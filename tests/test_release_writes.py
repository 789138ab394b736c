"""The writes of a pod network's whole life, release included (goal P8's third figure).

Every life writes the record's create, its Routed status and its Releasing status (the
intent, recorded before the cloud is touched), then takes podnet's finalizer off. A pod
that is gone has its record marked for deletion by the garbage collector (its owner
reference), so the finalizer's removal deletes it: four writes. A pod whose object
stays (finished, or terminating past its grace) keeps its record's owner alive, so
podnet deletes the record itself: a fifth. (A mark that lands after the Releasing write
makes the finalizer's removal conflict; the pass after it sees the mark and sends no
DELETE either.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.memory import InMemoryCluster

NS = NAMESPACE_NAME


class MarkedWhileReleasing(ReferenceProvider):
    """The garbage collector marks the record for deletion while the cloud releases."""

    cluster: InMemoryCluster

    @hookimpl
    def podnet_release(self, context: Any) -> Any:
        result = super().podnet_release(context)
        meta = context.pod_network.metadata
        self.cluster.delete(POD_NETWORK, meta.name, meta.namespace)
        return result


def _rig(provider: type[ReferenceProvider] = ReferenceProvider
         ) -> tuple[InMemoryCluster, Engine]:
    cluster = InMemoryCluster(clock=FakeClock())
    cluster.create(NAMESPACE, {"metadata": {"name": NS}})
    cluster.create(NODE, node_obj(0))
    plugin = provider(ReferenceCloud(), policy=PoolPolicy(
        min_idle=2, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0))
    if isinstance(plugin, MarkedWhileReleasing):
        plugin.cluster = cluster
    pm = new_plugin_manager()
    pm.register(plugin, name="reference")
    engine = Engine(cluster, pm, clock=cluster.clock,
                    options=EngineOptions(default_provider="reference"))
    engine.start()
    return cluster, engine


def _record_writes(engine: Engine) -> Counter[str]:
    return Counter({k: v for k, v in engine.stats.writes.items() if k.endswith(".podnetworks")})


def _life(cluster: InMemoryCluster, engine: Engine, end: str) -> Counter[str]:
    cluster.create(POD, pod_obj("web", "node-0000"))
    engine.run_until_idle()
    assert cluster.list(POD_NETWORK).items[0]["status"]["phase"] == "Routed"
    if end == "gone":
        cluster.delete(POD, "web", NS, grace_period_seconds=0)
    else:
        pod = cluster.get(POD, "web", NS)
        pod["status"]["phase"] = "Succeeded"
        cluster.update_status(POD, pod)
    engine.run_until_idle()
    assert cluster.list(POD_NETWORK).items == []
    return _record_writes(engine)


def test_a_gone_pods_record_goes_with_its_finalizer_four_writes() -> None:
    cluster, engine = _rig()
    assert _life(cluster, engine, "gone") == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})


def test_a_finished_pod_that_stays_has_its_record_deleted_by_podnet_five_writes() -> None:
    cluster, engine = _rig()
    assert _life(cluster, engine, "finished") == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1,
        "delete.podnetworks": 1})


def test_a_record_marked_while_the_cloud_releases_gets_no_delete_from_podnet() -> None:
    cluster, engine = _rig(MarkedWhileReleasing)
    writes = _life(cluster, engine, "finished")
    # the finalizer's removal, conditioned on the version before the mark, conflicted;
    # the next pass released again (idempotent) and its removal deleted the record
    assert writes == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})
    assert engine.stats.transitions["pod_network.finish"] == 1
