"""A Subnet's and an IPPool's status: counts kept current from the records, written at
most once a second per object however fast its addresses churn (a dirty mark and one
timer key, as the NodeNetworks' pool writes are batched), never a write per pod."""

from __future__ import annotations

from test_networks_engine import NS, Lab

from podnet.core.cluster.port import IP_POOL, POD, SUBNET


def status_writes(rig: Lab, plural: str) -> int:
    """What the engine wrote to objects of ``plural`` (status, and a finalizer once)."""
    return rig.engine.stats.writes[plural]


def test_five_thousand_records_are_counted_with_a_write_a_second_at_most() -> None:
    rig = Lab()
    rig.subnet("big", "10.100.0.0/16", default=True, excludeIPs=["10.100.255.0/24"])
    rig.settle()
    before = status_writes(rig, "subnets")
    started = rig.clock.monotonic()
    # 5,000 pods in 50 waves a quarter second apart: 12.5 seconds of churn
    for wave in range(50):
        for i in range(100):
            rig.add_pod(f"p{wave}-{i}")
        rig.engine.run_until_idle()
        rig.clock.advance(0.25)
    rig.settle(advance=2)
    elapsed = rig.clock.monotonic() - started
    writes = status_writes(rig, "subnets") - before
    assert writes <= elapsed / 1.0 + 1, (writes, elapsed)
    assert writes >= 2  # it was kept current during the burst, not only at the end
    status = rig.get(SUBNET, "big")["status"]
    assert status["v4UsingIPs"] == 5000
    assert status["v4ReservedIPs"] == 3
    assert status["v4ExcludedIPs"] == 255  # the /24 but its broadcast, which is reserved
    assert status["v4AvailableIPs"] == 65536 - 3 - 255 - 5000

    # half of them go: the count follows, still batched
    before = status_writes(rig, "subnets")
    started = rig.clock.monotonic()
    for wave in range(25):
        for i in range(100):
            rig.cluster.delete(POD, f"p{wave}-{i}", NS, grace_period_seconds=0)
        rig.engine.run_until_idle()
        rig.clock.advance(0.25)
    rig.settle(advance=2)
    elapsed = rig.clock.monotonic() - started
    assert status_writes(rig, "subnets") - before <= elapsed / 1.0 + 1
    assert rig.get(SUBNET, "big")["status"]["v4UsingIPs"] == 2500


def test_an_unchanged_status_is_not_written_again() -> None:
    rig = Lab()
    rig.subnet("blue", "10.101.0.0/24", default=True)
    rig.pool("few", "blue", ["10.101.0.50..10.101.0.59"])
    rig.settle(advance=3)
    before = (status_writes(rig, "subnets"), status_writes(rig, "ippools"))
    # a change that touches neither: nothing written
    rig.cluster.patch(SUBNET, "blue", {"metadata": {"labels": {"x": "y"}}})
    rig.settle(advance=3)
    assert (status_writes(rig, "subnets"), status_writes(rig, "ippools")) == before
    status = rig.get(IP_POOL, "few")["status"]
    assert (status["v4AvailableIPs"], status["v4UsingIPs"]) == (10, 0)
    assert status["phase"] == "Ready"


def test_a_restarted_controller_writes_nothing_new_and_says_nothing_again() -> None:
    rig = Lab()
    rig.subnet("blue", "10.102.0.0/24", default=True)
    rig.add_pod("web-0")
    rig.settle(advance=3)
    writes = rig.cluster.stats[("patch", "subnets")]
    events = len(rig.cluster.events_for("blue"))
    rig.start()  # a new process over the same cluster
    rig.settle(advance=3)
    assert rig.cluster.stats[("patch", "subnets")] == writes
    assert len(rig.cluster.events_for("blue")) == events
    assert rig.get(SUBNET, "blue")["status"]["v4UsingIPs"] == 1
