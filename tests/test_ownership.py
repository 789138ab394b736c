"""Address ownership that cannot lag: races, records that do not parse, reserved addresses,
records edited behind podnet's back, addresses the cloud lost (issue 13, items 1, 2, 6,
7, 8). The engine over the in-memory cluster and the reference cloud, on a fake clock."""

from __future__ import annotations

import threading
from typing import Any

from test_engine import NS, Rig, phase

from podnet.core.cluster.port import POD, POD_NETWORK, Obj
from podnet.core.policy import PoolPolicy


def ready(record: Obj) -> dict[str, Any]:
    return {c["type"]: c for c in record.get("status", {}).get("conditions", [])}["Ready"]


def events(rig: Rig, reason: str) -> list[Obj]:
    from podnet.core.cluster.port import EVENT
    return [e for e in rig.cluster.list(EVENT, NS).items if e.get("reason") == reason]


def routed_ips(rig: Rig) -> list[str]:
    return [r["status"]["ip"] for r in rig.records() if phase(r) == "Routed"]


# --- 1: two pods racing for one static address ---------------------------------------


def test_two_pods_racing_for_one_static_address_get_it_once() -> None:
    rig = Rig()
    node = rig.node(0)
    rig.pod("warm", node)
    rig.settle()  # the pool is synced; the static address is not in it yet
    wanted = "10.64.0.77"
    # both passes decide before either record is written, as two workers in a burst do:
    # a write naming the address waits (a while at most) for the other one to arrive
    arrived = threading.Barrier(2)
    plain_write = rig.cluster.update_status

    def racing_write(kind: Any, obj: Obj) -> Obj:
        if obj.get("status", {}).get("ip") == wanted:
            try:
                arrived.wait(timeout=2)
            except threading.BrokenBarrierError:
                pass  # the other pass never got this far
        return plain_write(kind, obj)

    rig.cluster.update_status = racing_write  # type: ignore[method-assign]
    for name in ("left", "right"):
        rig.pod(name, node, annotations={"podnet.io/ip-address": wanted})
    rig.engine.pump()
    workers = [threading.Thread(target=rig.engine.process, args=(("pod", f"{NS}/{n}"),))
               for n in ("left", "right")]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=30)
    rig.settle()
    holders = [r for r in rig.records() if r.get("status", {}).get("ip") == wanted]
    assert len(holders) == 1, [r["metadata"]["name"] for r in holders]
    winner = holders[0]["spec"]["podName"]
    loser = rig.record_of(rig.cluster.get(POD, "right" if winner == "left" else "left", NS))
    assert phase(loser) == "Pending"
    assert wanted in ready(loser)["message"]
    assert holders[0]["metadata"]["name"] in ready(loser)["message"]
    rig.assert_no_leak()


# --- 2: a record that does not parse still owns its address ----------------------------


def spoil(rig: Rig, name: str) -> None:
    """Make a record unreadable: the CRD takes the edit, podnet's converter does not (one
    request, two address choices)."""
    rig.cluster.patch(POD_NETWORK, name, {"spec": {"requests": {
        "ipPool": ["10.64.0.90"], "ipAddress": "10.64.0.91"}}}, NS)


def test_a_record_that_does_not_parse_keeps_its_address_through_a_restart_and_gc() -> None:
    rig = Rig()
    node = rig.node(0)
    victim = rig.pod("victim", node)
    rig.settle()
    record = rig.record_of(victim)
    address = record["status"]["ip"]
    spoil(rig, record["metadata"]["name"])
    rig.restart()
    rig.settle()
    cached = rig.engine.pod_networks.get(f"{NS}/{record['metadata']['name']}")
    assert cached is not None and cached.status.ip == address, "kept, as far as it reads"
    for i in range(12):
        rig.pod(f"new-{i}", node)
    rig.settle(advance=rig.policy.leaked_ip_expiry + 3 * rig.policy.gc_period)
    assert address not in {r["status"].get("ip") for r in rig.records()
                           if r["metadata"]["name"] != record["metadata"]["name"]}
    assert address in rig.cloud.all_addresses(), "GC deleted an address a record names"
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.owner_of(address) == cached.key
    assert events(rig, "InvalidRecord")


def test_an_unreadable_record_keeps_its_ready_transition_time_while_it_stays_false() -> None:
    rig = Rig()
    node = rig.node(0)
    victim = rig.pod("victim", node)
    rig.settle()
    name = rig.record_of(victim)["metadata"]["name"]
    spoil(rig, name)
    rig.settle()
    first = ready(rig.cluster.get(POD_NETWORK, name, NS))
    assert (first["status"], first["reason"]) == ("False", "InvalidRecord")  # was True
    rig.clock.advance(60)
    rig.cluster.patch(POD_NETWORK, name, {"spec": {"requests": {"ipPool": None,
                                                                "macAddress": "nope"}}}, NS)
    rig.settle()
    again = ready(rig.cluster.get(POD_NETWORK, name, NS))
    assert again["message"] != first["message"], "the second error is reported"
    assert again["lastTransitionTime"] == first["lastTransitionTime"]


# --- 7: addresses no pod may have -------------------------------------------------------


def test_a_static_request_for_the_network_broadcast_or_gateway_address_is_refused() -> None:
    rig = Rig()
    node = rig.node(0)  # 10.64.0.0/24, gateway 10.64.0.1
    for name, address in (("net", "10.64.0.0"), ("gw", "10.64.0.1"), ("bcast", "10.64.0.255")):
        rig.pod(name, node, annotations={"podnet.io/ip-address": address})
    rig.pod("plain", node)
    rig.settle()
    for record in rig.records():
        if record["spec"]["podName"] == "plain":
            assert phase(record) == "Routed"
            continue
        assert phase(record) == "Pending"
        condition = ready(record)
        assert condition["reason"] == "InvalidRequest", condition
        assert "podnet.io/ip-address" in condition["message"]
    assert not {"10.64.0.0", "10.64.0.1", "10.64.0.255"} & set(rig.cloud.all_addresses())


# --- 8: records edited behind podnet's back ------------------------------------------------


def test_a_status_ip_patched_to_another_pods_address_is_a_conflict_and_is_undone() -> None:
    rig = Rig()
    node = rig.node(0)
    first, second = rig.pod("first", node), rig.pod("second", node)
    rig.settle()
    a, b = rig.record_of(first), rig.record_of(second)
    own_b = b["status"]["ip"]
    rig.cluster.patch(POD_NETWORK, b["metadata"]["name"], {"status": {"ip": a["status"]["ip"]}},
                      NS, subresource="status")
    rig.settle()
    a2, b2 = rig.record_of(first), rig.record_of(second)
    assert a2["status"]["ip"] == a["status"]["ip"] and phase(a2) == "Routed"
    assert b2["status"]["ip"] == own_b and phase(b2) == "Routed", "given its own address back"
    conflicts = events(rig, "AddressConflict")
    involved = {e["involvedObject"]["name"] for e in conflicts}
    assert {a["metadata"]["name"], b["metadata"]["name"], "second"} <= involved
    rig.assert_no_leak()


def test_a_record_removed_without_its_release_leaves_nothing_owned() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    record = rig.record_of(pod)
    address, key = record["status"]["ip"], f"{NS}/{record['metadata']['name']}"
    rig.cluster.patch(POD_NETWORK, record["metadata"]["name"], {"metadata": {"finalizers": []}},
                      NS)
    # its dependents go with it: the record too
    rig.cluster.delete(POD, "web", NS, grace_period_seconds=0)
    rig.settle()
    assert rig.records() == []
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and pool.owner_of(address) is None
    assert rig.engine.addresses.held_by(key) == set()
    rig.settle(advance=rig.policy.reuse_cooldown + 1)
    rig.assert_no_leak()


def test_a_running_pods_deleted_record_is_made_again_with_the_same_address() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.pod("other", node)
    rig.settle()
    record = rig.record_of(pod)
    rig.cluster.delete(POD_NETWORK, record["metadata"]["name"], NS)  # finalizer holds it
    rig.settle()
    again = rig.record_of(pod)
    assert again["metadata"]["uid"] != record["metadata"]["uid"]
    assert phase(again) == "Routed" and again["status"]["ip"] == record["status"]["ip"]
    told = events(rig, "PodNetworkDeleted")
    assert told and told[0]["involvedObject"]["name"] == "web"
    rig.assert_no_leak()


# --- 6: addresses the cloud lost ------------------------------------------------------------


def _forget(rig: Rig, node: str, addresses: list[str]) -> None:
    """The cloud loses these addresses (a restore, an operator's console)."""
    removed = rig.cloud.remove(node, addresses)
    assert sorted(removed) == sorted(addresses)


def test_an_address_the_cloud_lost_is_taken_back_or_replaced_with_an_event() -> None:
    # no refill: a grow would hand the lost addresses out again by chance
    rig = Rig(policy=PoolPolicy(min_idle=0, max_idle=4, batch_size=4, max_batch_size=8,
                                reuse_cooldown=0.0))
    node = rig.node(0)
    pods = [rig.pod(f"p{i}", node) for i in range(3)]
    rig.settle()
    before = {p["metadata"]["name"]: rig.record_of(p)["status"]["ip"] for p in pods}
    _forget(rig, node, list(before.values()))
    rig.settle(advance=3 * rig.policy.gc_period)
    after = {p["metadata"]["name"]: rig.record_of(p) for p in pods}
    for name, record in after.items():
        assert phase(record) == "Routed", (name, record["status"])
        # the reference cloud gives a lost address back: each pod keeps its own
        assert record["status"]["ip"] == before[name]
        assert record["status"]["ip"] in rig.cloud.all_addresses()
    assert len(events(rig, "AddressLost")) >= 3
    rig.assert_no_leak()


def test_after_a_restart_the_cloud_not_the_list_order_decides_an_edited_address() -> None:
    """A record edited to an address on another node, listed first after a restart: the
    node pool rebuilt from the cloud backs the real owner, which keeps its address."""
    rig = Rig()
    n0, n1 = rig.node(0), rig.node(1)
    real, edited = rig.pod("zz-real", n0), rig.pod("aa-edited", n1)
    rig.settle()
    theirs = rig.record_of(real)["status"]["ip"]
    mine = rig.record_of(edited)
    rig.cluster.patch(POD_NETWORK, mine["metadata"]["name"], {"status": {"ip": theirs}}, NS,
                      subresource="status")
    rig.restart()
    rig.settle(advance=3 * rig.policy.gc_period)
    assert rig.record_of(real)["status"]["ip"] == theirs
    assert phase(rig.record_of(real)) == "Routed"
    again = rig.record_of(edited)
    assert phase(again) == "Routed" and again["status"]["ip"] != theirs
    assert again["status"]["ip"].startswith("10.64.1."), "an address of its own node"
    rig.assert_no_leak()


def test_a_finalizer_taken_off_a_live_record_is_put_back() -> None:
    rig = Rig()
    node = rig.node(0)
    pod = rig.pod("web", node)
    rig.settle()
    record = rig.record_of(pod)
    rig.cluster.patch(POD_NETWORK, record["metadata"]["name"], {"metadata": {"finalizers": []}},
                      NS)
    rig.settle()
    assert "podnet.io/release" in rig.record_of(pod)["metadata"]["finalizers"]
    assert events(rig, "FinalizerRestored")
    rig.cluster.delete(POD_NETWORK, record["metadata"]["name"], NS)
    rig.settle()
    again = rig.record_of(pod)  # released through its finalizer, made again for the pod
    assert phase(again) == "Routed" and again["status"]["ip"] == record["status"]["ip"]
    rig.assert_no_leak()
