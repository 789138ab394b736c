"""What a restart makes of cloud addresses no record names: one on an interface the
provider made for the pool (``made``) that the last recorded pool does not list is the
pool's, idle after the reuse cooldown; one the recorded pool lists with an owner whose
record is gone is idle after the cooldown too; every other one the recorded pool does
not list is a suspect, as before (on an interface podnet did not make: an interrupted
grow, or someone else's address)."""

from __future__ import annotations

from typing import Any

from podnet.core.cluster.port import NODE_NETWORK, POD, POD_NETWORK
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.plugins.reference.provider import ReferenceCloud
from tests.test_engine import NS, CrashingProvider, Rig, phase


class InterfaceCrash(CrashingProvider):
    """Dies right after ``podnet_interface_create`` made and attached the interface."""

    @hookimpl
    def podnet_interface_create(self, provider: str, node: Any, subnet: str | None,
                                ip_count: int) -> Any:
        made = super().podnet_interface_create(provider, node, subnet, ip_count)
        self._maybe_crash("interface_create")
        return made


class UnrecordedRig(Rig):
    def _engine(self) -> Any:
        engine = super()._engine()
        # the same plugin class with one more crash point, registered in its place
        pm = engine.pm
        pm.unregister(self.plugin)
        crash_after = self.plugin.crash_after
        self.plugin = InterfaceCrash(self.cloud, policy=self.policy)
        self.plugin.crash_after = crash_after
        pm.register(self.plugin, name="reference")
        return engine


def _rig(cooldown: float = 0.0, per: int = 2) -> UnrecordedRig:
    # eth0 holds ``per`` pod addresses, every further interface as many
    return UnrecordedRig(cloud=ReferenceCloud(max_interfaces=3, ips_per_interface=per),
                         policy=PoolPolicy(min_idle=0, max_idle=2, batch_size=2,
                                           max_batch_size=2, reuse_cooldown=cooldown))


def _listed(rig: Rig, node: str) -> dict[str, list[str]]:
    nn = rig.cluster.get(NODE_NETWORK, node)
    return {itf["id"]: [ip["address"] for ip in itf.get("ips", [])]
            for itf in nn.get("status", {}).get("interfaces", [])}


def test_an_interface_made_before_a_crash_and_never_recorded_is_pooled_not_swept() -> None:
    """The controller dies right after the interface for the waiting pods was made: its
    two addresses are on the node, named by no record, listed by no pool. The restarted
    controller pools them (no suspect) and routes the pods on them without making
    another interface; nothing is swept after the leaked-address expiry. Before, they
    were suspects: a third interface was made, and the GC deleted them."""
    rig = _rig()
    node = rig.node(0)
    first = [rig.pod(f"a{i}", node) for i in range(2)]
    rig.settle(advance=30)
    assert all(phase(rig.record_of(p)) == "Routed" for p in first)
    rig.plugin.crash_after = {"interface_create"}
    later = [rig.pod(f"b{i}", node) for i in range(2)]
    try:
        rig.settle()
    except BaseException as exc:  # the Crash of tests/test_engine.py
        assert type(exc).__name__ == "Crash"
    else:
        raise AssertionError("the interface was never made")
    made = set(rig.cloud.nodes[node].interfaces) - set(_listed(rig, node))
    assert made == {"eth1"} and len(rig.cloud.nodes[node].interfaces["eth1"]) == 2
    rig.restart()
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and not pool.suspects
    assert {rig.record_of(p)["status"]["ip"] for p in later} == set(
        rig.cloud.nodes[node].interfaces["eth1"])
    assert rig.cloud.calls["CreateInterface"] == 1
    rig.settle(advance=rig.policy.leaked_ip_expiry + 2 * rig.policy.gc_period)
    assert rig.engine.sweeper.swept == 0
    assert "eth1" in _listed(rig, node)
    rig.assert_no_leak()


def test_an_unrecorded_interfaces_address_whose_record_was_removed_by_hand_cools_first(
) -> None:
    """An address of an interface the last recorded pool does not list may have been a
    pod's whose record was removed by hand before the crash (the pool's write waits while
    pods wait): after the restart it is handed out only after the reuse cooldown, as a
    running controller gives back the address of a record removed by hand, not at
    once."""
    rig = _rig(cooldown=30.0)
    node = rig.node(0)
    pods = [rig.pod(f"a{i}", node) for i in range(3)]
    rig.settle(advance=60)
    on_eth1 = set(rig.cloud.nodes[node].interfaces["eth1"])
    victim = next(p for p in pods if rig.record_of(p)["status"]["ip"] in on_eth1)
    record = rig.record_of(victim)
    address = record["status"]["ip"]
    # as if the controller had died before its pool's write listed eth1 ...
    nn = rig.cluster.get(NODE_NETWORK, node)
    nn["status"]["interfaces"] = [i for i in nn["status"]["interfaces"] if i["id"] != "eth1"]
    rig.cluster.update_status(NODE_NETWORK, nn)
    # ... and the record were removed by hand meanwhile, its pod gone too
    rig.cluster.patch(POD_NETWORK, record["metadata"]["name"], {"metadata": {"finalizers": []}},
                      NS)
    rig.cluster.delete(POD_NETWORK, record["metadata"]["name"], NS)
    rig.cluster.delete(POD, victim["metadata"]["name"], NS, grace_period_seconds=0)
    rig.restart()
    newcomer = rig.pod("late", node)
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and address not in pool.suspects
    entry = pool.addresses[address]
    assert entry.owner is None and entry.cooldown_until >= rig.clock.monotonic() + 29
    assert rig.record_of(newcomer)["status"]["ip"] != address
    rig.settle(advance=31)
    assert address not in pool.suspects
    rig.assert_no_leak()


def test_an_address_a_grow_added_to_a_listed_interface_podnet_made_is_pooled() -> None:
    """The controller dies right after a grow added an address to an interface podnet
    made, which the recorded pool lists: every address on such an interface is podnet's,
    so the restart pools it rather than holding it as a suspect (before: deleted by the
    GC after the leaked-address expiry)."""
    rig = _rig(per=3)
    node = rig.node(0)
    for i in range(4):
        rig.pod(f"a{i}", node)
    rig.settle(advance=60)
    assert "eth1" in _listed(rig, node) and len(rig.cloud.nodes[node].interfaces["eth1"]) < 3
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None
    rig.plugin.crash_after = {"pool_grow"}
    for i in range(pool.idle_count() + 1):  # one more than the idle ones: a grow on eth1
        rig.pod(f"b{i}", node)
    try:
        rig.settle()
    except BaseException as exc:
        assert type(exc).__name__ == "Crash"
    else:
        raise AssertionError("no grow was made")
    added = set(rig.cloud.nodes[node].interfaces["eth1"]) - set(_listed(rig, node)["eth1"])
    assert added
    rig.restart()
    rig.settle(advance=rig.policy.leaked_ip_expiry + 2 * rig.policy.gc_period)
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and not pool.suspects and rig.engine.sweeper.swept == 0
    assert added <= set(pool.addresses)
    rig.assert_no_leak()


def test_an_address_added_to_an_interface_podnet_did_not_make_is_still_a_suspect() -> None:
    """An address on the node's own interface (eth0: not ``made``) that no record names
    and the recorded pool does not list (someone else's, or a grow on it interrupted):
    nothing proves no other party uses it, so the restart holds it as a suspect, as
    before."""
    rig = _rig(per=3)
    node = rig.node(0)
    for i in range(2):
        rig.pod(f"a{i}", node)
    rig.settle(advance=60)
    assert "eth0" in _listed(rig, node) and len(rig.cloud.nodes[node].interfaces["eth0"]) < 3
    (stray,) = rig.cloud.add(node, None, "eth0", 1)
    rig.restart()
    rig.settle()
    pool = rig.engine.pools.find("reference", node)
    assert pool is not None and stray in pool.suspects and stray not in pool.addresses
