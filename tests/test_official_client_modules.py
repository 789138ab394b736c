"""The official client's own higher-level modules against the API emulator: ``watch``
(through a 410 Gone), ``informer`` (a cache that converges, through a 410 too),
``leaderelection`` (two electors over a Lease) and ``dynamic`` (discovery, then CRUD of
pods and PodNetworks). Each assertion is what a real kube-apiserver answers; the
upstream behaviour is named in the docstrings.

The installed client (``kubernetes`` 37) ships ``kubernetes.informer.SharedInformer``, and
``leaderelection`` with two locks, ``LeaseLock`` (used here) and ``ConfigMapLock``.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, dynamic, watch
from kubernetes.client.rest import ApiException
from kubernetes.informer import SharedInformer
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from podnet.core.cluster.port import LEASE, POD
from podnet.sim.apiserver import ApiServer
from podnet.testing.waiting import wait_for

# a client that hangs is a failure here, not a stuck CI run
pytestmark = pytest.mark.timeout(60)

NS = "default"
GROUP, VERSION = "podnet.io", "v1alpha1"
PN_SPEC = {"podName": "p", "podUid": "uid-1", "nodeName": "n1", "provider": "reference"}


def new_pod(core: client.CoreV1Api, name: str) -> None:
    core.create_namespaced_pod(NS, {"metadata": {"name": name},
                                    "spec": {"containers": [{"name": "app", "image": "d:1"}]}})


def fault(server: ApiServer, **body: bool) -> None:
    """The emulator's fault endpoint: ``dropWatches`` ends every open watch (an API server
    restart), ``compact`` forgets the history (older resourceVersions answer 410)."""
    req = urllib.request.Request(f"{server.url}/_podnet/faults", method="POST",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.status == 200


def names(items: Any) -> set[str]:
    return {p.metadata.name for p in items}


# --- kubernetes.watch -------------------------------------------------------------------


def test_watch_stream_raises_410_after_one_retry_and_a_relist_resumes(
        server: ApiServer, api: client.ApiClient) -> None:
    """kubernetes.io "API Concepts" (efficient detection of changes): a watch from a
    resourceVersion the server no longer has is answered with an ERROR event carrying a
    410 ``Expired`` Status, and the client must list again and watch from the list's
    resourceVersion. ``Watch.stream`` re-watches once from its last resourceVersion when a
    stream ends or says 410 (its docstring), then raises ``ApiException(410)``; the
    caller's relist then shows the changes made while it was away, and the new watch sees
    the changes after."""
    core = client.CoreV1Api(api)
    new_pod(core, "a")
    listed = core.list_namespaced_pod(NS)
    seen = names(listed.items)
    hold, held = threading.Event(), threading.Event()
    outcome: list[Any] = []

    def consume() -> None:
        w = watch.Watch()
        try:
            for ev in w.stream(core.list_namespaced_pod, NS,
                               resource_version=listed.metadata.resource_version):
                seen.add(ev["object"].metadata.name)
                held.set()
                hold.wait(10)  # a slow handler: the server moves on meanwhile
        except ApiException as exc:
            outcome.append(exc.status)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    new_pod(core, "b")
    assert held.wait(10), "the watch saw no event"
    # while the handler runs: the server restarts, things change, the history is lost
    fault(server, dropWatches=True)
    new_pod(core, "c")
    core.delete_namespaced_pod("a", NS)  # unscheduled: gone at once
    fault(server, compact=True)
    hold.set()
    consumer.join(15)
    assert not consumer.is_alive() and outcome == [410]
    assert seen == {"a", "b"}  # the watch alone missed c, and a's deletion

    relisted = core.list_namespaced_pod(NS)
    assert names(relisted.items) == {"b", "c"}
    resumed: list[tuple[str, str]] = []
    w = watch.Watch()
    new_pod(core, "d")
    for ev in w.stream(core.list_namespaced_pod, NS, timeout_seconds=10,
                       resource_version=relisted.metadata.resource_version):
        resumed.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    assert resumed == [("ADDED", "d")]


def test_watch_stream_resumes_by_itself_after_a_dropped_connection(
        server: ApiServer, api: client.ApiClient) -> None:
    """A watch the server ends (its timeout, a restart) while its history is kept is
    resumed by ``Watch.stream`` from the last resourceVersion it saw, without a gap or a
    repeat: kube-apiserver replays every change after that resourceVersion."""
    core = client.CoreV1Api(api)
    listed = core.list_namespaced_pod(NS)
    events: list[tuple[str, str]] = []
    done = threading.Event()

    def consume() -> None:
        w = watch.Watch()
        for ev in w.stream(core.list_namespaced_pod, NS,
                           resource_version=listed.metadata.resource_version):
            events.append((ev["type"], ev["object"].metadata.name))
            if ev["object"].metadata.name == "z":
                w.stop()
        done.set()

    threading.Thread(target=consume, daemon=True).start()
    new_pod(core, "a")
    wait_for("the first event", lambda: bool(events), 10, 0.02)
    fault(server, dropWatches=True)
    new_pod(core, "b")
    new_pod(core, "z")
    assert done.wait(15), f"the watch did not resume: {events}"
    assert events == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "z")]


# --- kubernetes.informer ----------------------------------------------------------------


def test_shared_informer_cache_converges_through_a_410(
        server: ApiServer, api: client.ApiClient) -> None:
    """client-go's reflector contract, which ``SharedInformer`` follows: list, then watch
    from the list's resourceVersion; on 410 Gone list again and replace the cache (what
    went missing is reported DELETED). So the cache converges on the server's objects
    across a restart that lost the history, with no event for a change made meanwhile
    lost."""
    core = client.CoreV1Api(api)
    new_pod(core, "a")
    new_pod(core, "b")
    informer = SharedInformer(core.list_namespaced_pod, namespace=NS)
    deleted: list[str] = []
    errors: list[Any] = []
    informer.add_event_handler("DELETED", lambda obj: deleted.append(obj.metadata.name))
    informer.add_event_handler("ERROR", lambda exc: errors.append(getattr(exc, "status", exc)))
    informer.start()
    try:
        def cached() -> set[str]:
            return names(informer.cache.list())

        wait_for("the first list", lambda: cached() == {"a", "b"}, 10, 0.02)
        new_pod(core, "c")
        core.patch_namespaced_pod("a", NS, {"metadata": {"labels": {"v": "2"}}})
        wait_for("the watch", lambda: cached() == {"a", "b", "c"} and (
            informer.cache.get_by_key(f"{NS}/a").metadata.labels == {"v": "2"}), 10, 0.02)

        # the server restarts, things change and the history is lost before the
        # informer is back (held off by the store's lock): its re-watch gets 410
        store = server.cluster
        with server.locked():
            store.faults.drop_watches()
            store.delete(POD, "b", NS)
            store.create(POD, {"metadata": {"name": "d", "namespace": NS},
                               "spec": {"containers": [{"name": "app", "image": "d:1"}]}})
            store.faults.compact()
        wait_for("the relist", lambda: cached() == {"a", "c", "d"}, 15, 0.02)
        assert errors == [410]  # the one way it learnt: the re-watch's answer
        assert deleted == ["b"]  # reported by the relist: the watch had closed before
        new_pod(core, "e")
        wait_for("the watch after the relist", lambda: "e" in cached(), 10, 0.02)
    finally:
        informer.stop()


# --- kubernetes.leaderelection ----------------------------------------------------------


class _Elector:
    """One candidate: ``LeaderElection`` over a ``LeaseLock`` on the emulator. It leads
    until ``step_down`` is set: its work then fails, and the library stops renewing."""

    def __init__(self, api: client.ApiClient, identity: str, log: list[tuple[str, str]]):
        lock = LeaseLock("podnet-test", NS, identity)
        lock.api_instance = client.CoordinationV1Api(api)  # this server, not the default
        self.step_down = threading.Event()

        def lead() -> None:
            log.append(("leading", identity))
            self.step_down.wait(30)
            raise RuntimeError(f"{identity} steps down")

        # near the library's lower bounds (lease > renew deadline > 1.2 x retry >= 1 s),
        # with a lease that a loaded machine's late renewal does not let expire
        config = electionconfig.Config(lock, lease_duration=3, renew_deadline=2,
                                       retry_period=1, onstarted_leading=lead,
                                       onstopped_leading=lambda: log.append(
                                           ("stopped", identity)))
        self.thread = threading.Thread(
            target=leaderelection.LeaderElection(config).run, name=f"elector-{identity}",
            daemon=True)


def test_leader_election_one_leads_and_the_other_takes_over(
        server: ApiServer, api: client.ApiClient) -> None:
    """coordination.k8s.io/v1 Lease semantics (kubernetes.io "Leases", leader election):
    the first candidate creates the Lease and leads; the other reads a held, fresh Lease
    and waits; once the leader stops renewing, the Lease expires after its
    ``leaseDurationSeconds`` and the other replaces it (an update guarded by the
    resourceVersion it read), holding it from then on."""
    log: list[tuple[str, str]] = []
    first = _Elector(api, "first", log)
    first.thread.start()
    wait_for("a leader", lambda: ("leading", "first") in log, 10, 0.02)
    second = _Elector(api, "second", log)
    second.thread.start()
    try:
        lease = server.peek(LEASE, "podnet-test", NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == "first"
        assert lease["spec"]["leaseDurationSeconds"] == 3
        first.step_down.set()
        wait_for("the take-over", lambda: ("leading", "second") in log, 15, 0.05)
        assert log.index(("stopped", "first")) < log.index(("leading", "second"))
        assert [e for e in log if e[0] == "leading"] == [("leading", "first"),
                                                         ("leading", "second")]
        lease = server.peek(LEASE, "podnet-test", NS)
        assert lease is not None and lease["spec"]["holderIdentity"] == "second"
    finally:
        first.step_down.set()
        second.step_down.set()
        first.thread.join(10)
        second.thread.join(10)


# --- kubernetes.dynamic -----------------------------------------------------------------


def test_dynamic_client_discovers_and_writes_pods_and_podnetworks(
        api: client.ApiClient, tmp_path: Path) -> None:
    """``DynamicClient`` reads discovery (``/api``, ``/apis`` and each group version's
    resource list, as kube-apiserver serves them) and finds both kinds with their status
    subresource; then get, create, patch and delete behave as the real server's: a
    strategic merge patch for the pod, a merge patch of the PodNetwork's ``/status``
    changing only its status, and deletes answering the object (a pod) or a Status."""
    dyn = dynamic.DynamicClient(api, cache_file=str(tmp_path / "discovery.json"))
    pods = dyn.resources.get(api_version="v1", kind="Pod")
    networks = dyn.resources.get(api_version=f"{GROUP}/{VERSION}", kind="PodNetwork")
    assert pods.namespaced and networks.namespaced and networks.short_names == ["pn"]
    assert networks.subresources["status"].verbs == ["get", "patch", "update"]

    made = pods.create(namespace=NS, body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p1"},
        "spec": {"containers": [{"name": "app", "image": "d:1"}]}})
    assert made.status.phase == "Pending"
    patched = pods.patch(namespace=NS, name="p1",
                         body={"metadata": {"labels": {"app": "web"}}},
                         content_type="application/strategic-merge-patch+json")
    assert patched.to_dict()["metadata"]["labels"] == {"app": "web"}
    assert [p.metadata.name for p in pods.get(namespace=NS, label_selector="app=web").items] \
        == ["p1"]
    gone = pods.delete(namespace=NS, name="p1")
    assert gone.kind == "Pod" and gone.metadata.name == "p1"

    networks.create(namespace=NS, body={
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodNetwork",
        "metadata": {"name": "pn1"}, "spec": PN_SPEC})
    status = networks.status.patch(
        namespace=NS, name="pn1", content_type="application/merge-patch+json",
        body={"status": {"phase": "Allocated"}, "spec": {"podName": "ignored"}})
    assert status.status.phase == "Allocated" and status.spec.podName == "p"
    assert networks.get(namespace=NS, name="pn1").status.phase == "Allocated"
    with pytest.raises(dynamic.exceptions.UnprocessibleEntityError):
        networks.patch(namespace=NS, name="pn1", content_type="application/merge-patch+json",
                       body={"spec": {"nodeName": None}})  # a required field
    answer = networks.delete(namespace=NS, name="pn1")
    assert answer.kind == "Status" and answer.status == "Success"
    with pytest.raises(dynamic.exceptions.NotFoundError):
        networks.get(namespace=NS, name="pn1")
