"""The chaos machine against the OVN provider on a real NB server, with an extra rule:
the NB server restarts (same database file) between any two steps; pods may be VM pods
(their sticky address follows the VM, not the pod's name).

``PODNET_CHAOS_EXAMPLES`` sets the example count (the kit's 200 by default). The provider
reconnects within a fifth of a second of a restart here (ovs' default waits a second)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis.stateful import rule

from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.chaos import chaos_settings, make_chaos_machine

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


class _Server:
    """One NB server for the module; each example gets a fresh database on it."""

    server: NbServer | None = None


def _provider() -> Any:
    from podnet.plugins.ovn.provider import OvnProvider

    server = _Server.server
    assert server is not None
    server.restart_fresh()
    # reconnect within ~0.1 s of a restart (ovs' own first backoff is a second)
    return OvnProvider(server.remote, seed=0, timeout=10.0, reconnect_backoff_ms=(20, 200))


def _addresses(plugin: Any) -> Mapping[str, str]:
    addresses: dict[str, str] = plugin.nb_addresses()
    return addresses


_Base = make_chaos_machine(_provider, _addresses, name="OvnChaosBase", vms=True)


class OvnChaos(_Base):  # type: ignore[misc,valid-type]
    @rule()
    def nb_server_restarts(self) -> None:
        """The Northbound server goes away and comes back on the same database."""
        server = _Server.server
        assert server is not None
        server.restart()

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            self.plugin.close()


@pytest.fixture(scope="module", autouse=True)
def _nb_server() -> Iterator[None]:
    with NbServer() as server:
        _Server.server = server
        yield
        _Server.server = None


TestOvnChaos = OvnChaos.TestCase
TestOvnChaos.settings = chaos_settings()


# --- histories the machine once failed on, replayed as plain tests -------------------------


def test_a_hand_edit_seen_first_by_a_new_leader_does_not_take_the_address() -> None:
    """Found by a random CI run: p0's record is edited by hand to p1's address, then the
    leader is paused past its Lease. The new leader's address book, filled from the
    records in listing order, gave the address to p0 (the edited one); p1, whose port
    really has it, was re-addressed, got the same address back from OVN and stayed
    Pending on a conflict for ever. Now the provider's verify decides between them."""
    state = OvnChaos()
    try:
        state.populate(up=1, running=0)
        state.add_pod(i=0, pod="p0", stateful=False)
        state.add_pod(i=0, pod="p1", stateful=False)
        state.settle(seconds=0.0)
        state.edit_record_ip(a="p0", b="p1")
        state.pause_leader_past_lease(late=0.0, stale_steps=1, steps=0)
        state.no_address_owned_twice()
    finally:
        state.teardown()


def test_an_edited_record_the_book_took_at_a_restart_gives_the_address_up() -> None:
    """Found by a random CI run: p4's record is edited by hand to p0's address, then p0's
    record is removed by hand (nothing released: its port keeps the address) and the
    controller restarts. The address book, rebuilt from the records, gave the address to
    p4 (the edited one); p0's new record got it back from OVN and stayed Pending on a
    conflict for ever. Now the provider's verify of the holder decides: p4's port does
    not have it, so p4 is re-addressed and p0 keeps its port's address."""
    state = OvnChaos()
    try:
        state.populate(up=1, running=5)
        state.edit_record_ip(a="p0", b="p0")
        state.pause_leader_past_lease(late=0.0, stale_steps=25, steps=13)
        state.compact()
        state.edit_record_ip(a="p4", b="p0")
        state.drop_watches()
        state.remove_record_by_hand(pod="p0")
        state.compact()
        state.restart()
        state.no_address_owned_twice()
    finally:
        state.teardown()


def test_a_record_whose_finalizer_write_fails_after_its_release_is_not_left_routed() -> None:
    """Found by a random run: p0's pod is recreated on its node while API writes fail at
    30 %. The old record's release deletes its port and the finalizer's removal fails.
    Because the record is written Releasing before the release (the intent recorded
    before the cloud is touched), it never says Routed on an address OVN no longer has;
    the retry finishes it (the teardown's convergence check). A change that skipped the
    Releasing write where no node agent waits failed here and in a second history (a
    finished pod whose record's delete failed once), and was taken back."""
    from podnet.core.cluster.port import POD_NETWORK

    state = OvnChaos()
    try:
        state.populate(up=2, running=2)
        state.add_node(i=0)
        state.crash_at(hook="allocate", when="before")
        state.remove_record_by_hand(pod="p0")
        state.crash_at(hook="allocate", when="before")
        state.cluster_fail_next(conflict=True, what=("create", POD_NETWORK), times=2)
        state.cluster_fault_rates(conflict=0.0, error=0.0)
        state.remove_record_by_hand(pod="p0")
        for _ in range(4):
            state.drop_watches()
        state.pause_leader_past_lease(late=0.0, stale_steps=1, steps=16)
        state.recreate_pod(i=0, pod="p0", same_node=True)
        state.cluster_fault_rates(conflict=0.0, error=0.3)
        state.step(n=1)
        state.records_point_at_real_addresses()
        state.no_address_owned_twice()
    finally:
        state.teardown()


def test_a_finished_pods_record_whose_delete_fails_is_releasing_not_routed() -> None:
    """Found by a random CI run: p0 finishes (Succeeded) and the record's delete fails
    once. The record must say Releasing from before its port is deleted, not Routed on an
    address OVN no longer has."""
    from podnet.core.cluster.port import POD_NETWORK

    state = OvnChaos()
    try:
        state.populate(up=1, running=4)
        state.settle(seconds=0.0)
        state.pod_finishes(phase="Succeeded", pod="p0")
        state.cluster_fail_next(conflict=False, what=("delete", POD_NETWORK), times=1)
        state.step(n=1)
        state.records_point_at_real_addresses()
        state.no_address_owned_twice()
    finally:
        state.teardown()
