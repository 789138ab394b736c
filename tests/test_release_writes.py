"""The writes of a pod network's whole life, release included (goal P8's third figure).

Every life writes the record's create, its Routed status and its Releasing status (the
intent, recorded before the cloud is touched), then takes podnet's finalizer off. A pod
that is gone has its record marked for deletion by the garbage collector (its owner
reference), so the finalizer's removal deletes it: four writes. A pod whose object
stays (finished, or terminating past its grace) keeps its record's owner alive: the
finalizer's removal labels the record finished in the same write, and the garbage
collector takes it when the pod's object goes (before, podnet deleted it itself: a
fifth write). Every reader takes a finished record as deleted. (A mark that lands after
the Releasing write makes the finalizer's removal conflict; the pass after it sees the
mark and sends no DELETE either.)
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from podnet.app.demo import NAMESPACE_NAME, node_obj, pod_obj
from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.models import FINALIZER
from podnet.core.objects import LABEL_FINISHED, record_finished
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.node.agent import _read_pod_network
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
    return cluster, _engine(cluster, plugin)


def _engine(cluster: InMemoryCluster, plugin: object) -> Engine:
    """An engine (a controller process) on ``cluster`` and the plugin's cloud."""
    pm = new_plugin_manager()
    pm.register(plugin, name="reference")
    engine = Engine(cluster, pm, clock=cluster.clock,
                    options=EngineOptions(default_provider="reference"))
    engine.start()
    return engine


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
    # none left but finished ones (the pod stays: its garbage collection takes them)
    assert [o for o in cluster.list(POD_NETWORK).items if not record_finished(o)] == []
    return _record_writes(engine)


def test_a_gone_pods_record_goes_with_its_finalizer_four_writes() -> None:
    cluster, engine = _rig()
    assert _life(cluster, engine, "gone") == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})
    assert cluster.list(POD_NETWORK).items == []


def test_a_finished_pod_that_stays_leaves_its_record_finished_four_writes() -> None:
    """Before: five writes, the fifth podnet's own DELETE. Now the finalizer's removal
    says the record is finished, and the garbage collector takes it with the pod."""
    cluster, engine = _rig()
    assert _life(cluster, engine, "finished") == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})
    (left,) = cluster.list(POD_NETWORK, NS).items
    assert record_finished(left)
    assert left["metadata"]["labels"][LABEL_FINISHED] == "true"
    assert FINALIZER not in left["metadata"].get("finalizers", ())
    assert engine.caches.pod_networks.values() == []
    cluster.delete(POD, "web", NS, grace_period_seconds=0)
    assert cluster.list(POD_NETWORK, NS).items == []  # its owner went: collected
    engine.run_until_idle()
    assert sum(_record_writes(engine).values()) == 4


def test_a_pod_terminating_past_its_grace_leaves_its_record_finished_four_writes() -> None:
    """No kubelet confirms the pod's deletion: it stays terminating, is released at
    its grace's end, and its record is finished in the finalizer's removal."""
    cluster, engine = _rig()
    cluster.create(POD, pod_obj("web", "node-0000"))
    engine.run_until_idle()
    cluster.delete(POD, "web", NS, grace_period_seconds=5)
    engine.run_until_idle(advance=60.0)
    assert engine.stats.transitions["pod_network.finish"] == 1
    assert _record_writes(engine) == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})
    (left,) = cluster.list(POD_NETWORK, NS).items
    assert record_finished(left)


def test_a_finished_record_is_as_good_as_deleted_across_a_restart() -> None:
    """A controller started on a finished record (its address given back) neither
    releases it again nor counts its address as owned: the next pod on the node takes
    that address, one owner, and the finished record gets no write."""
    cluster, engine = _rig()
    _life(cluster, engine, "finished")
    (left,) = cluster.list(POD_NETWORK, NS).items
    address = left["status"]["ip"]
    plugin = engine.gateway.providers.pm.get_plugin("reference")
    restarted = _engine(cluster, plugin)
    restarted.run_until_idle()
    assert restarted.caches.pod_networks.values() == []
    assert restarted.owned.addresses.holder("reference", address) is None
    cluster.create(POD, pod_obj("next", "node-0000"))
    restarted.run_until_idle(advance=60.0)
    records = [o for o in cluster.list(POD_NETWORK, NS).items if not record_finished(o)]
    assert [r["status"]["phase"] for r in records] == ["Routed"]
    assert restarted.stats.transitions.get("pod_network.finish", 0) == 0
    assert cluster.get(POD_NETWORK, left["metadata"]["name"], NS)["metadata"][
        "resourceVersion"] == left["metadata"]["resourceVersion"]  # never written again
    holders = [o["metadata"]["name"] for o in cluster.list(POD_NETWORK, NS).items
               if o["status"].get("ip") == records[0]["status"]["ip"]
               and not record_finished(o)]
    assert len(holders) == 1


def test_a_finished_label_beside_podnets_finalizer_hides_nothing() -> None:
    """Only podnet's own write (finalizer off, label on) finishes a record: the label
    alone on a record that still holds the finalizer (set by hand) is ignored by every
    reader, and the node agent reads a finished record as gone."""
    live = {"metadata": {"name": "r", "labels": {LABEL_FINISHED: "true"},
                         "finalizers": [FINALIZER]}}
    assert not record_finished(live)
    done = {"metadata": {"name": "r", "labels": {LABEL_FINISHED: "true"}}}
    assert record_finished(done)
    cluster, engine = _rig()
    cluster.create(POD, pod_obj("web", "node-0000"))
    engine.run_until_idle()
    (obj,) = cluster.list(POD_NETWORK, NS).items
    obj["metadata"].setdefault("labels", {})[LABEL_FINISHED] = "true"
    cluster.update(POD_NETWORK, obj)
    engine.run_until_idle()
    (cached,) = engine.caches.pod_networks.values()
    assert cached.status.phase.value == "Routed"
    assert _read_pod_network(cluster.get(POD_NETWORK, obj["metadata"]["name"], NS)) is not None
    finished = cluster.get(POD_NETWORK, obj["metadata"]["name"], NS)
    finished["metadata"]["finalizers"] = []
    assert _read_pod_network(finished) is None


def test_a_record_marked_while_the_cloud_releases_gets_no_delete_from_podnet() -> None:
    cluster, engine = _rig(MarkedWhileReleasing)
    writes = _life(cluster, engine, "finished")
    # the finalizer's removal, conditioned on the version before the mark, conflicted;
    # the next pass released again (idempotent) and its removal deleted the record
    assert writes == Counter({
        "create.podnetworks": 1, "status.podnetworks": 2, "update.podnetworks": 1})
    assert engine.stats.transitions["pod_network.finish"] == 1
    assert cluster.list(POD_NETWORK).items == []
