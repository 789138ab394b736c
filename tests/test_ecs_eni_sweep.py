"""ENIs podnet made and never attached (or detached and never deleted) are found and
deleted after a controller crash: the crash between CreateNetworkInterface and
AttachNetworkInterface, in a rollback, and after a failed rollback with a restart.

Every ENI podnet creates is tagged in the cloud (``podnet.io/instance``); the garbage
collector's ``podnet_sweep`` lists the region's Available ENIs every ``gc_period``, and
deletes those podnet marked (the tag, or the description of ENIs made before tagging)
once they have stayed Available for ``leaked_ip_expiry``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from podnet.core.models import Phase
from podnet.plugins.ecs.demo import KIT_POLICY, EcsWorld
from podnet.plugins.ecs.provider import EcsProvider
from podnet.testing.harness import Crash, World

pytest_plugins = ["podnet.testing"]

POLICY = attrs.evolve(KIT_POLICY, min_idle=1, max_idle=2)


@pytest.fixture
def ecs() -> Iterator[EcsWorld]:
    world = EcsWorld(nodes=2, policy=POLICY, vswitches_in_cloud={"vsw-sim-a": "10.0.0.0/24"})
    yield world
    world.close()


@pytest.fixture
def provider_plugin(ecs: EcsWorld) -> EcsProvider:
    return ecs.plugin


@pytest.fixture
def ground_truth(ecs: EcsWorld) -> Any:
    return ecs.addresses


def available(ecs: EcsWorld) -> dict[str, list[str]]:
    """Every detached secondary ENI in the cloud -> its addresses."""
    with ecs.sim.lock:
        ecs.sim._settle_all()
        return {e.id: list(e.secondary) for e in ecs.sim.enis.values()
                if e.kind == "Secondary" and e.status == "Available"}


def up_with_a_pod(world: World) -> None:
    world.add_node(0)
    world.settle()
    world.add_pod("p0", 0)


def test_a_crash_between_create_and_attach_leaks_nothing(world: World, ecs: EcsWorld) -> None:
    ecs.kill_at("CreateNetworkInterface", Crash, when="after")
    up_with_a_pod(world)
    world.settle(advance=5)
    assert world.crashes == 1
    [(eni, ips)] = available(ecs).items()
    assert ips, "the ENI was made with addresses"
    # the tag says podnet made it, and for which instance
    assert ecs.sim.enis[eni].tags == {"podnet.io/instance": "i-node0000"}
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.ROUTED
    # not before the grace: it may be an ENI another replica is attaching right now
    world.settle(advance=POLICY.leaked_ip_expiry / 2)
    assert eni in available(ecs)
    world.settle(advance=world.gc_grace())
    assert available(ecs) == {}
    assert not any(ip in ecs.addresses() for ip in ips)
    world.assert_converged()


def test_a_crash_in_the_rollback_leaks_nothing(world: World, ecs: EcsWorld) -> None:
    """The attach fails, and the process dies before the rollback's delete is sent."""
    ecs.sim.fail_next("AttachNetworkInterface", "InternalError")
    ecs.kill_at("DeleteNetworkInterface", Crash, when="before")
    up_with_a_pod(world)
    world.settle(advance=5)
    assert world.crashes == 1 and len(available(ecs)) == 1
    world.settle(advance=world.gc_grace())
    assert available(ecs) == {}
    world.assert_converged()


def test_a_failed_rollback_then_a_restart_leaks_nothing(world: World, ecs: EcsWorld) -> None:
    """The rollback's delete fails (the ENI is kept in the process's memory only), and
    the process dies before the node's next inventory retries it."""
    ecs.sim.fail_next("AttachNetworkInterface", "InternalError")
    ecs.sim.fail_next("DeleteNetworkInterface", "InternalError")
    ecs.kill_at("DeleteNetworkInterface", Crash, when="before", nth=2)
    up_with_a_pod(world)
    world.settle(advance=5)
    assert world.crashes == 1 and len(available(ecs)) == 1
    world.settle(advance=world.gc_grace())
    assert available(ecs) == {}
    world.assert_converged()


def detached_eni(ecs: EcsWorld, *, description: str = "", tags: dict[str, str] | None = None,
                 count: int = 2) -> str:
    """An Available secondary ENI made straight in the cloud (no API call counted)."""
    with ecs.sim.lock:
        eni = ecs.sim._new_eni(ecs.sim.vswitches["vsw-sim-a"], count)
        eni.description, eni.tags = description, dict(tags or {})
        return eni.id


def test_the_sweep_deletes_only_what_podnet_marked_and_only_once_told(ecs: EcsWorld) -> None:
    tagged = detached_eni(ecs, tags={"podnet.io/instance": "i-node0000"})
    legacy = detached_eni(ecs, description="podnet:i-node0001")  # made before tagging
    stranger = detached_eni(ecs, description="made by hand", tags={"team": "db"})
    plugin = ecs.plugin
    before = ecs.sim.calls["DescribeNetworkInterfaces"]
    found = plugin.podnet_sweep(provider="ecs", owners=(), remove=())
    assert sorted(found or ()) == sorted([tagged, legacy])
    # one read a period, no write
    assert ecs.sim.calls["DescribeNetworkInterfaces"] == before + 1
    assert ecs.sim.calls["DeleteNetworkInterface"] == 0
    # told to remove: a stranger's ENI, and ids the cloud no longer has, are left alone
    found = plugin.podnet_sweep(provider="ecs", owners=(),
                                remove={tagged, legacy, stranger, "eni-gone"})
    assert list(found or ()) == []
    assert set(available(ecs)) == {stranger}
    assert ecs.sim.calls["DeleteNetworkInterface"] == 2
    # idempotent: nothing left of podnet's
    assert list(plugin.podnet_sweep(provider="ecs", owners=(), remove={tagged}) or ()) == []


def test_the_sweep_never_takes_an_eni_in_use_or_being_attached(
        world: World, ecs: EcsWorld) -> None:
    up_with_a_pod(world)
    world.settle(advance=5)
    plugin = ecs.plugin
    [attached] = [e.id for e in ecs.sim.enis_of("i-node0000") if e.kind == "Secondary"]
    attaching = detached_eni(ecs, tags={"podnet.io/instance": "i-node0000"})
    with plugin._lock:
        plugin._creating.add(attaching)  # this process created it and attaches it now
    assert list(plugin.podnet_sweep(provider="ecs", owners=(),
                                    remove={attached, attaching}) or ()) == []
    assert attaching in available(ecs)
    assert ecs.sim.eni_states()[attached] == "InUse"
    with plugin._lock:
        plugin._creating.discard(attaching)  # its attach failed, and so did the rollback
    assert list(plugin.podnet_sweep(provider="ecs", owners=(), remove={attaching}) or ()) == []
    world.assert_converged()


def test_a_throttled_delete_waits_for_the_next_period(ecs: EcsWorld) -> None:
    first = detached_eni(ecs, tags={"podnet.io/instance": "i-node0000"})
    second = detached_eni(ecs, tags={"podnet.io/instance": "i-node0001"})
    ecs.sim.fail_next("DeleteNetworkInterface", "Throttling")
    found = ecs.plugin.podnet_sweep(provider="ecs", owners=(), remove={first, second})
    # the throttled one and the one after it stay orphans (core keeps their first-seen)
    assert sorted(found or ()) == sorted([first, second])
    assert ecs.sim.calls["DeleteNetworkInterface"] == 1
    assert list(ecs.plugin.podnet_sweep(provider="ecs", owners=(),
                                        remove={first, second}) or ()) == []
    assert available(ecs) == {}
