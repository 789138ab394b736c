"""A restart's start-up pass: each pod the list finds is looked at once, right after its
node's first pass has read the node's pool; a routed record with nothing to do costs that
look alone (no pod pass), anything else (a conflict, an address its pool holds for another
record, a record whose pod is gone) still gets its pod's whole pass."""

from __future__ import annotations

from collections import Counter

from podnet.core.cluster.port import POD, POD_NETWORK, ApiError, Kind, Obj
from podnet.core.convert import from_wire
from podnet.core.engine import Engine
from podnet.core.ledger import address_seal, sealed
from podnet.core.models import NodeInfo, Phase, PodNetwork
from tests.test_engine import NS, Rig, phase


def routed(rig: Rig, count: int) -> tuple[list[str], list[Obj]]:
    nodes = [rig.node(i) for i in range(2)]
    pods = [rig.pod(f"p{i}", nodes[i % 2]) for i in range(count)]
    rig.settle(advance=rig.policy.refill_period)
    assert all(phase(rig.record_of(p)) == "Routed" for p in pods)
    return nodes, pods


def writes_of(rig: Rig) -> dict[tuple[str, str], int]:
    return {k: v for k, v in rig.cluster.stats.items() if k[0] not in ("list", "watch", "get")}


def ips(rig: Rig) -> dict[str, str]:
    return {r["spec"]["podName"]: r["status"]["ip"] for r in rig.records()}


def test_a_restart_looks_at_each_routed_pod_once_and_runs_no_pod_pass() -> None:
    rig = Rig()
    routed(rig, 8)
    before = ips(rig)
    writes = writes_of(rig)
    rig.restart()
    rig.settle()
    engine: Engine = rig.engine
    assert engine.stats.reconciles["pod"] == 0, "no pod's pass: the nodes' passes looked"
    assert engine.stats.reconciles["node"] == 2
    assert dict(engine.stats.start_checks) == {"clean": 8}
    assert engine.start_checks_pending() == 0
    assert ips(rig) == before and writes_of(rig) == writes
    assert "reference.verify" not in engine.stats.provider_calls
    # each record is still verified when its period is due, as after its first pass
    rig.settle(advance=rig.policy.verify_period)
    assert engine.stats.provider_calls["reference.verify"] == 8
    assert engine.stats.reconciles["pod"] == 8
    rig.assert_no_leak()


def test_the_looks_at_one_nodes_pods_ask_for_its_provider_once() -> None:
    """A node's provider (its config rules, then the plugins' ``podnet_select_provider``)
    is asked once for the looks at all its pods, not once a pod (150,000 asks, two hook
    calls each, at a restart of 150,000 pods)."""
    rig = Rig()
    nodes, _ = routed(rig, 8)
    rig.restart()
    engine: Engine = rig.engine
    placement = engine.placement
    looking: list[bool] = [False]
    asked: Counter[str] = Counter()
    ask, look = placement.provider_for_node, engine._check_at_start

    def counted_ask(node: NodeInfo) -> str | None:
        if looking[0]:
            asked[node.name] += 1
        return ask(node)

    def counted_look(keys: list[str]) -> None:
        looking[0] = True
        try:
            look(keys)
        finally:
            looking[0] = False

    placement.provider_for_node = counted_ask  # type: ignore[method-assign]
    engine._check_at_start = counted_look  # type: ignore[method-assign]
    rig.settle()
    assert dict(engine.stats.start_checks) == {"clean": 8}
    assert asked == dict.fromkeys(nodes, 1)


def test_a_route_lost_while_the_controller_was_down_is_repaired_at_its_verify() -> None:
    rig = Rig()
    _, pods = routed(rig, 4)
    record = rig.record_of(pods[1])
    ip = record["status"]["ip"]
    rig.cloud.delete_route(ip, f"{NS}/{record['metadata']['name']}")
    rig.restart()
    rig.settle()
    assert rig.engine.stats.start_checks["clean"] == 4  # the look reads no dataplane
    rig.settle(advance=rig.policy.verify_period)
    assert rig.engine.stats.transitions["pod_network.repair"] == 1
    assert rig.cloud.routes[ip] == f"{NS}/{record['metadata']['name']}"
    assert phase(rig.record_of(pods[1])) == "Routed"


def test_a_hand_edit_that_gave_a_record_anothers_address_is_found_by_the_start() -> None:
    """Both records go to their pods' whole passes: the one listed first holds the
    address in the book, but its node's pool (rebuilt with the owner the node's record
    names) holds it for the other; the other's claim is a conflict. The edited record is
    given an address of its own again; the real owner keeps its address."""
    rig = Rig()
    _, pods = routed(rig, 4)
    real, edited = rig.record_of(pods[2]), rig.record_of(pods[0])  # p0 is listed first
    assert real["spec"]["nodeName"] == edited["spec"]["nodeName"]
    taken = real["status"]["ip"]
    edited["status"]["ip"] = taken
    rig.cluster.update_status(POD_NETWORK, edited)
    rig.restart()
    rig.settle()
    assert rig.engine.stats.start_checks == {"clean": 2, "queued": 2}
    after = ips(rig)
    assert after["p2"] == taken, "the pool's owner keeps its address"
    assert after["p0"] != taken and phase(rig.record_of(pods[0])) == "Routed"
    assert rig.cloud.routes[after["p0"]] == f"{NS}/{edited['metadata']['name']}"
    rig.assert_no_leak()


def test_a_hand_edit_after_a_stop_inside_the_owners_lag_leaves_the_real_owner_its_address(
) -> None:
    """As above, but the controller stopped right after the pods were routed, before their
    node's record listed them as owners: the seal each record got with its address says
    which one podnet gave it to."""
    rig = Rig()
    nodes = [rig.node(i) for i in range(2)]
    rig.settle(advance=3 * rig.policy.refill_period)  # the pools written, nobody on them
    pods = [rig.pod(f"p{i}", nodes[i % 2]) for i in range(4)]
    rig.settle()
    assert all(phase(rig.record_of(p)) == "Routed" for p in pods)
    real, edited = rig.record_of(pods[2]), rig.record_of(pods[0])  # p0 is listed first
    taken = real["status"]["ip"]
    edited["status"]["ip"] = taken
    rig.cluster.update_status(POD_NETWORK, edited)
    rig.restart()
    rig.settle()
    after = ips(rig)
    assert after["p2"] == taken, "the pool's owner keeps its address"
    assert after["p0"] != taken and phase(rig.record_of(pods[0])) == "Routed"
    rig.assert_no_leak()


def read_record(rig: Rig, pod: Obj) -> PodNetwork:
    return from_wire(PodNetwork, rig.record_of(pod))


def test_a_readdress_takes_the_seal_off_with_the_address_and_seals_the_next_one() -> None:
    """A record edited to another's address while the controller runs is re-addressed:
    the Pending write lets the seal go with the address, and the record's next address
    (its own again, held for it in the book) is sealed in the write that names it."""
    rig = Rig()
    _, pods = routed(rig, 4)
    assert all(sealed(read_record(rig, p)) is True for p in pods)
    real, edited = rig.record_of(pods[2]), rig.record_of(pods[0])
    edited["status"]["ip"] = real["status"]["ip"]
    rig.cluster.update_status(POD_NETWORK, edited)
    assert sealed(read_record(rig, pods[0])) is False, "the edit did not carry it along"
    statuses: list[Obj] = []
    write = rig.cluster.update_status

    def watched(kind: Kind, obj: Obj) -> Obj:
        if kind == POD_NETWORK and obj["metadata"]["name"] == edited["metadata"]["name"]:
            statuses.append(dict(obj["status"]))
        return write(kind, obj)

    rig.cluster.update_status = watched  # type: ignore[method-assign]
    rig.settle()
    pending = [s for s in statuses if s["phase"] == "Pending"]
    assert pending and all("addressSeal" not in s and "ip" not in s for s in pending)
    after = read_record(rig, pods[0])
    assert after.status.phase is Phase.ROUTED and after.status.ip != real["status"]["ip"]
    assert after.status.address_seal == address_seal(after.metadata.uid, after.status.ip, None)
    assert sealed(read_record(rig, pods[2])) is True and ips(rig)["p2"] == real["status"]["ip"]


def test_a_lost_answer_to_the_write_naming_an_address_leaves_it_sealed_after_the_retry(
) -> None:
    """The write naming the address landed and its answer was lost: the retry, handed
    the address the record holds, writes it with the same seal."""
    rig = Rig()
    node = rig.node(0)
    rig.settle(advance=3 * rig.policy.refill_period)
    write = rig.cluster.update_status
    landed: list[Obj] = []

    def losing(kind: Kind, obj: Obj) -> Obj:
        answer = write(kind, obj)
        if kind == POD_NETWORK and "ip" in (obj.get("status") or {}) and not landed:
            landed.append(answer)
            raise ApiError("the answer was lost")
        return answer

    rig.cluster.update_status = losing  # type: ignore[method-assign]
    pod = rig.pod("p0", node)
    rig.settle(advance=5.0)
    assert landed and landed[0]["status"]["addressSeal"]
    after = read_record(rig, pod)
    assert after.status.phase is Phase.ROUTED and sealed(after) is True
    assert after.status.ip == landed[0]["status"]["ip"]
    assert after.status.address_seal == landed[0]["status"]["addressSeal"]
    rig.assert_no_leak()


def test_a_record_whose_pod_went_while_the_controller_was_down_is_released() -> None:
    rig = Rig()
    nodes, pods = routed(rig, 4)
    gone = rig.record_of(pods[3])
    ip = gone["status"]["ip"]
    rig.restart()
    # the pod goes before the new controller looked: the deletion queues its pass
    rig.cluster.delete(POD, "p3", NS, grace_period_seconds=0)
    rig.settle()
    assert "p3" not in ips(rig)
    pool = rig.engine.pools.find("reference", nodes[1])
    assert pool is not None and pool.addresses[ip].owner is None
    assert ip not in rig.cloud.routes
    rig.assert_no_leak()


def test_a_record_whose_pod_is_gone_at_the_restart_gets_its_pass_and_is_released() -> None:
    rig = Rig()
    nodes, pods = routed(rig, 4)
    gone = rig.record_of(pods[3])
    ip = gone["status"]["ip"]
    rig.engine = None  # type: ignore[assignment]  # the controller is down
    rig.cluster.delete(POD, "p3", NS, grace_period_seconds=0)
    rig.restart()
    # its pod is not in the cache: nothing for a node's pass to look at, its own pass runs
    assert rig.engine.start_checks_pending() == 3
    rig.settle()
    assert rig.engine.stats.start_checks == {"clean": 3}
    assert rig.engine.stats.reconciles["pod"] >= 1
    assert "p3" not in ips(rig)
    pool = rig.engine.pools.find("reference", nodes[1])
    assert pool is not None and pool.addresses[ip].owner is None
    assert ip not in rig.cloud.routes
    rig.assert_no_leak()


def test_a_hand_edited_record_on_a_full_node_gets_back_the_address_it_still_holds() -> None:
    """As above on a node at its capacity: the edited record's own address is still held
    for it in the rebuilt pool (its pod may well still use it), and no other address is
    idle. Re-addressed, it is handed that address back; before, it waited for an idle
    one for ever (found by the ECS trunk chaos machine at 400 examples)."""
    from podnet.core.policy import PoolPolicy
    from podnet.plugins.reference.provider import ReferenceCloud

    rig = Rig(policy=PoolPolicy(min_idle=4, max_idle=4, batch_size=4, max_batch_size=4,
                                reuse_cooldown=30.0),
              cloud=ReferenceCloud(max_interfaces=1, ips_per_interface=4))
    node = rig.node(0)
    rig.settle(advance=3 * rig.policy.refill_period)
    pods = [rig.pod(f"p{i}", node) for i in range(4)]
    rig.settle(advance=3 * rig.policy.refill_period)
    assert all(phase(rig.record_of(p)) == "Routed" for p in pods)
    real, edited = rig.record_of(pods[2]), rig.record_of(pods[0])
    own, taken = edited["status"]["ip"], real["status"]["ip"]
    edited["status"]["ip"] = taken
    rig.cluster.update_status(POD_NETWORK, edited)
    rig.restart()
    rig.settle(advance=3 * rig.policy.refill_period)
    after = ips(rig)
    assert after["p2"] == taken, "the real owner keeps its address"
    assert phase(rig.record_of(pods[0])) == "Routed" and after["p0"] == own
    rig.assert_no_leak()
