"""A record that moves to another node with its pod (a StatefulSet pod started again
elsewhere, a VM started again elsewhere, a live migration's target taking the VM's record,
the record handed back to the source when the migration fails), on the OVN provider, whose
addresses are not tied to a node's pool: the port names the node route last bound it to.

The rule: a record never says Routed on a node its dataplane is not written for. A move
writes the record Allocated on the node it leaves (where its dataplane still is) before the
record names the new node, and route binds the port to the new node before the record
says Routed there. An Allocated record of such a provider may name a node its port is not
bound to yet (its address is its own and bound nowhere else): nothing relies on it before
Routed. A failed write or route anywhere in the move leaves one of those states, and the
next pass goes on from there."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from podnet.core.cluster.port import POD_NETWORK
from podnet.core.errors import ErrorKind
from podnet.core.models import Phase
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.chaos import make_chaos_machine

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

_SERVER: list[NbServer] = []


def _provider() -> Any:
    from podnet.plugins.ovn.provider import OvnProvider

    server = _SERVER[0]
    server.restart_fresh()
    return OvnProvider(server.remote, seed=0, timeout=10.0, reconnect_backoff_ms=(20, 200))


def _addresses(plugin: Any) -> Mapping[str, str]:
    addresses: dict[str, str] = plugin.nb_addresses()
    return addresses


Machine = make_chaos_machine(_provider, _addresses, name="RecordMoves", vms=True)


@pytest.fixture(scope="module", autouse=True)
def _nb_server() -> Iterator[None]:
    with NbServer() as server:
        _SERVER.append(server)
        yield
        _SERVER.clear()


@pytest.fixture
def state() -> Iterator[Any]:
    machine = Machine()
    try:
        yield machine
    finally:
        try:
            machine.teardown()  # the convergence check, faults cleared
        finally:
            machine.plugin.close()


def _check(state: Any) -> None:
    state.records_point_at_real_addresses()
    state.no_address_owned_twice()


def _port_node(state: Any, ip: str | None) -> str | None:
    assert ip
    return dict(_addresses(state.plugin)).get(ip)


def _record(state: Any, pod: str) -> Any:
    pn = state.world.record_of(pod)
    assert pn is not None
    return pn


def _vm_record(state: Any, vm: str) -> Any:
    found = [pn for pn in state.world.records() if pn.metadata.name == f"{vm}.default.vm"]
    assert len(found) == 1
    return found[0]


def _every_step(state: Any, n: int = 40) -> None:
    """The next ``n`` keys, the invariants after each (a move's window is inside one
    rule of the machine)."""
    for _ in range(n):
        if not state.world.step(1):
            break
        _check(state)


@pytest.mark.parametrize("times", [1, 2, 3])
def test_a_statefulset_pod_moved_while_the_status_write_fails_is_never_routed_elsewhere(
        state: Any, times: int) -> None:
    """Was: the move wrote the record's node first (still Routed), then its Allocated
    status; the status write failing left it Routed on the new node while the port was
    bound to the old one."""
    state.populate(up=2, running=0)
    state.add_pod(pod="p0", i=0, stateful=True)
    state.settle(seconds=0.0)
    before = _record(state, "p0")
    assert before.status.phase is Phase.ROUTED and _port_node(state, before.status.ip) == (
        state.world.node_name(0))
    state.cluster_fail_next(what=("update_status", POD_NETWORK), conflict=False, times=times)
    state.recreate_pod(pod="p0", i=1, same_node=False)
    _every_step(state)
    state.settle(seconds=60.0)
    after = _record(state, "p0")
    assert after.status.phase is Phase.ROUTED and after.status.ip == before.status.ip
    assert _port_node(state, after.status.ip) == state.world.node_name(1)


def test_a_statefulset_pod_moved_while_its_route_is_throttled_is_allocated_not_routed(
        state: Any) -> None:
    """The route to the new node fails: the record is Allocated there (its port still
    bound to the old node, its address its own), and Routed once the route succeeds."""
    state.populate(up=2, running=0)
    state.add_pod(pod="p0", i=0, stateful=True)
    state.settle(seconds=0.0)
    state.provider_fault(where=("route", "before"), kind=ErrorKind.THROTTLED, times=3)
    state.recreate_pod(pod="p0", i=1, same_node=False)
    _every_step(state)
    pn = _record(state, "p0")
    assert pn.spec.node_name == state.world.node_name(1)
    assert pn.status.phase is not Phase.ROUTED or _port_node(state, pn.status.ip) == (
        state.world.node_name(1))


def test_a_statefulset_pod_moved_while_the_controller_dies_after_a_write(
        state: Any) -> None:
    """The controller dies right after each write of the move, in turn: each restart
    goes on from what the record says."""
    state.populate(up=2, running=0)
    state.add_pod(pod="p0", i=0, stateful=True)
    state.settle(seconds=0.0)
    state.recreate_pod(pod="p0", i=1, same_node=False)
    for _ in range(3):
        state.crash_after_write(what=("update", POD_NETWORK))
        _every_step(state, 5)
        state.crash_after_write(what=("update_status", POD_NETWORK))
        _every_step(state, 5)


@pytest.mark.parametrize("fault", ["status", "route"])
def test_a_vm_started_again_on_another_node_under_a_fault(state: Any, fault: str) -> None:
    """Was (seen by the chaos machine): a VM's pod deleted, its record held, the VM
    started again on another node: the reclaim wrote the record Allocated on the new
    node and a throttled route left it there with its port on the old node."""
    state.populate(up=2, running=0)
    state.add_vm_pod(pod="p0", i=0, vm="vm-a")
    state.settle(seconds=0.0)
    state.delete_pod(pod="p0", graceful=False)
    state.step(n=5)
    assert _vm_record(state, "vm-a").status.phase is Phase.RELEASING
    if fault == "status":
        state.cluster_fail_next(what=("update_status", POD_NETWORK), conflict=False, times=2)
    else:
        state.provider_fault(where=("route", "before"), kind=ErrorKind.THROTTLED, times=3)
    state.add_vm_pod(pod="p1", i=1, vm="vm-a")
    _every_step(state)
    state.settle(seconds=60.0)
    pn = _vm_record(state, "vm-a")
    assert pn.status.phase is Phase.ROUTED and pn.spec.pod_name == "p1"
    assert _port_node(state, pn.status.ip) == state.world.node_name(1)


@pytest.mark.parametrize("ends", ["finished", "failed", "aborted"])
@pytest.mark.parametrize("times", [1, 2])
def test_a_live_migration_whose_status_writes_fail_never_routes_the_record_elsewhere(
        state: Any, ends: str, times: int) -> None:
    """A live migration's target takes the VM's record (its node and pod), and the source
    takes it back when the migration fails: each time a status write of the move fails."""
    state.populate(up=2, running=0)
    state.add_vm_pod(pod="p0", i=0, vm="vm-a")
    state.settle(seconds=0.0)
    state.cluster_fail_next(what=("update_status", POD_NETWORK), conflict=False, times=times)
    state.world.add_pod("p1", 1, owner=("VirtualMachineInstance", "vm-a"),
                        labels={"kubevirt.io/migrationJobUID": "mig-p1"})
    _every_step(state)
    state.settle(seconds=60.0)
    state.cluster_fail_next(what=("update_status", POD_NETWORK), conflict=False, times=times)
    if ends == "finished":
        state.world.finish_pod("p0", "Succeeded")
    elif ends == "failed":
        state.world.finish_pod("p1", "Failed")
    else:
        state.world.delete_pod("p1")
    _every_step(state)
    state.settle(seconds=60.0)
    _check(state)


def test_a_record_reclaimed_without_an_address_is_allocated_afresh_after_a_crash(
        state: Any) -> None:
    """Was (seen by the chaos machine): a sticky record released before it had an address
    (its allocation throttled, its node deleted) is reclaimed when its node comes back;
    the controller died after the reclaim's write (Allocated, no address) and before the
    write that sends it back to Pending: route refused it for good ("no address to
    route"). A record holding no address is allocated again, whatever left it so."""
    state.populate(up=1, running=0)
    state.add_pod(pod="p0", i=0, stateful=True)
    state.provider_fault(where=("allocate", "before"), kind=ErrorKind.THROTTLED, times=1)
    state.settle(seconds=0.0)
    state.delete_node(i=0)
    state.settle(seconds=0.0)
    held = [pn for pn in state.world.records() if pn.spec.pod_name == "p0"]
    assert [pn.status.phase for pn in held] == [Phase.RELEASING] and not held[0].status.ip
    state.crash_after_write(what=("update_status", POD_NETWORK))
    state.add_node(i=0)
    state.settle(seconds=60.0)
    pn = _record(state, "p0")
    assert pn.status.phase is Phase.ROUTED, pn.status.conditions


@pytest.mark.parametrize("how", ["statefulset", "migration"])
def test_every_version_of_a_moving_record_routed_on_the_new_node_follows_its_route(
        state: Any, how: str) -> None:
    """Without any fault: each version the API server held of a record that moved is
    Routed on the new node only after a version Allocated there (the route's write
    follows the route). Was: the move's first write named the new node while the record
    was still Routed, which a node agent there could plug from."""
    state.populate(up=2, running=0)
    if how == "statefulset":
        state.add_pod(pod="p0", i=0, stateful=True)
    else:
        state.add_vm_pod(pod="p0", i=0, vm="vm-a")
    state.settle(seconds=0.0)
    with state.world.quiet():
        since = state.cluster.list(POD_NETWORK).resource_version
        watch = state.cluster.watch(POD_NETWORK, since)
    try:
        if how == "statefulset":
            state.recreate_pod(pod="p0", i=1, same_node=False)
        else:
            state.world.add_pod("p1", 1, owner=("VirtualMachineInstance", "vm-a"),
                                labels={"kubevirt.io/migrationJobUID": "mig-p1"})
        state.settle(seconds=0.0)
        versions = [(e.object["status"].get("phase"), e.object["spec"]["nodeName"])
                    for e in watch.poll() if e.type == "MODIFIED"]
    finally:
        watch.stop()
    new = state.world.node_name(1)
    assert ("Routed", new) in versions, versions
    first_routed = versions.index(("Routed", new))
    assert ("Allocated", new) in versions[:first_routed], versions
