"""``podnet_node_check``: the node pool reconciler asks the provider, at most every
``node_check_period`` per node, what is wrong on the node; each new finding is one Warning
Event on the Node (and its NodeNetwork), a persisting one is not repeated, one that cleared
and came back is reported again; a check that raises never fails the pool pass."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from podnet.core.cluster.port import EVENT, NODE, NODE_NETWORK, Obj
from podnet.core.config import policy_overrides
from podnet.core.errors import ConfigError, ErrorKind, ProviderError
from podnet.core.models import Phase
from podnet.core.policy import PoolPolicy
from podnet.hookspecs.types import NodeFinding
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

PERIOD = 60.0
POLICY = PoolPolicy(min_idle=2, max_idle=8, batch_size=4, max_batch_size=16,
                    reuse_cooldown=0.0, node_check_period=PERIOD)


@pytest.fixture
def policy() -> PoolPolicy:
    return POLICY


@pytest.fixture
def provider_plugin(policy: PoolPolicy) -> ReferenceProvider:
    return ReferenceProvider(ReferenceCloud(), policy=policy)


def node_events(world: World, reason: str | None = None) -> list[Obj]:
    with world.quiet():
        return [e for e in world.cluster.list(EVENT).items
                if e["involvedObject"].get("kind") == "Node"
                and (reason is None or e["reason"] == reason)]


def nn_events(world: World, reason: str) -> list[Obj]:
    with world.quiet():
        return [e for e in world.cluster.list(EVENT).items
                if e["involvedObject"].get("kind") == "NodeNetwork" and e["reason"] == reason]


def reported(events: list[Obj]) -> int:
    """How many times these Events were emitted (a repeat bumps an Event's count)."""
    return sum(int(e.get("count", 1)) for e in events)


def check_condition(world: World, node: str) -> dict[str, Any] | None:
    with world.quiet():
        nn = world.cluster.get(NODE_NETWORK, node)
    return next((c for c in (nn.get("status") or {}).get("conditions") or ()
                 if c["type"] == "ProviderCheck"), None)


def bring_up(world: World) -> str:
    node = world.add_node(0)
    world.add_pod("p0", 0)
    world.settle(advance=1)
    record = world.record_of("p0")
    assert record is not None and record.status.phase is Phase.ROUTED
    return node


def test_a_finding_is_one_node_event_until_it_clears_and_comes_back(
        world: World, provider_plugin: ReferenceProvider, hook_calls: HookRecorder) -> None:
    node = bring_up(world)
    world.settle(advance=PERIOD + 5)
    assert hook_calls.of("podnet_node_check"), "the check never ran"
    assert node_events(world) == [] and check_condition(world, node) is None
    finding = NodeFinding(reason="InterfaceDrift", message="eth1 is not what it was",
                          interface="eth1")
    provider_plugin.findings[node] = [finding, finding]  # the same finding twice: one Event
    world.settle(advance=PERIOD + 5)
    events = node_events(world, "InterfaceDrift")
    assert len(events) == 1 and reported(events) == 1, events
    event = events[0]
    with world.quiet():
        uid = world.cluster.get(NODE, node)["metadata"]["uid"]
    assert event["type"] == "Warning" and event["message"] == finding.message
    assert {k: event["involvedObject"].get(k) for k in ("apiVersion", "kind", "name", "uid")
            } == {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}
    assert reported(nn_events(world, "InterfaceDrift")) == 1
    condition = check_condition(world, node)
    assert condition is not None
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False", "InterfaceDrift", finding.message)
    # it persists: no second Event, no condition write
    rv = world.cluster.get(NODE_NETWORK, node)["metadata"]["resourceVersion"]
    world.settle(advance=3 * PERIOD)
    assert reported(node_events(world, "InterfaceDrift")) == 1
    assert world.cluster.get(NODE_NETWORK, node)["metadata"]["resourceVersion"] == rv
    # it clears
    provider_plugin.findings[node] = []
    world.settle(advance=PERIOD + 5)
    condition = check_condition(world, node)
    assert condition is not None and condition["status"] == "True", condition
    assert reported(node_events(world, "InterfaceDrift")) == 1
    # it comes back: reported again
    provider_plugin.findings[node] = [finding]
    world.settle(advance=PERIOD + 5)
    assert reported(node_events(world, "InterfaceDrift")) == 2
    condition = check_condition(world, node)
    assert condition is not None and condition["status"] == "False"
    world.assert_converged()


def test_the_condition_moves_its_transition_time_only_when_its_status_changes(
        world: World, provider_plugin: ReferenceProvider) -> None:
    node = bring_up(world)
    provider_plugin.findings[node] = [NodeFinding("InterfaceDrift", "eth1 drifted")]
    world.settle(advance=PERIOD + 5)
    drifted = check_condition(world, node)
    assert drifted is not None and drifted["status"] == "False"
    provider_plugin.findings[node] = [NodeFinding("InterfaceDrift", "eth1 drifted again")]
    world.settle(advance=PERIOD + 5)
    again = check_condition(world, node)
    assert again is not None and again["message"] == "eth1 drifted again"
    assert again["lastTransitionTime"] == drifted["lastTransitionTime"]  # still False
    provider_plugin.findings[node] = []
    world.settle(advance=PERIOD + 5)
    cleared = check_condition(world, node)
    assert cleared is not None and cleared["status"] == "True"
    assert cleared["lastTransitionTime"] > drifted["lastTransitionTime"]


def test_the_check_runs_at_most_once_a_period_per_node(
        world: World, hook_calls: HookRecorder) -> None:
    bring_up(world)
    world.add_node(1)
    world.settle(advance=1)
    hook_calls.clear()
    world.settle(advance=5 * PERIOD)
    by_node: dict[str, int] = {}
    for call in hook_calls.of("podnet_node_check"):
        name = call.kwargs["node"].node.name
        by_node[name] = by_node.get(name, 0) + 1
    assert sorted(by_node) == [World.node_name(0), World.node_name(1)]
    assert all(4 <= n <= 5 for n in by_node.values()), by_node


@pytest.mark.parametrize("error", [
    ProviderError(ErrorKind.TRANSIENT, "the cloud is down"), RuntimeError("a bug")])
def test_a_raising_check_does_not_fail_the_pool_pass(
        world: World, provider_plugin: ReferenceProvider, hook_calls: HookRecorder,
        error: Exception) -> None:
    node = bring_up(world)
    provider_plugin.check_error = error
    errors = world.engine.stats.reconcile_errors["node"]
    world.settle(advance=3 * PERIOD + 5)
    calls = hook_calls.of("podnet_node_check")
    assert len(calls) == 3 and all(c.error is not None for c in calls), calls
    assert world.engine.stats.reconcile_errors["node"] == errors
    # the pool keeps serving meanwhile
    world.add_pod("p1", 0)
    world.settle(advance=1)
    record = world.record_of("p1")
    assert record is not None and record.status.phase is Phase.ROUTED
    # retried next period: once it answers, its findings are reported
    provider_plugin.check_error = None
    provider_plugin.findings[node] = [NodeFinding("InterfaceDrift", "eth1 drifted")]
    world.settle(advance=PERIOD + 5)
    assert reported(node_events(world, "InterfaceDrift")) == 1
    world.assert_converged()


def test_a_malformed_answer_is_logged_not_reported(
        world: World, provider_plugin: ReferenceProvider) -> None:
    node = bring_up(world)
    provider_plugin.findings[node] = ["not a finding"]  # type: ignore[list-item]
    errors = world.engine.stats.reconcile_errors["node"]
    world.settle(advance=PERIOD + 5)
    assert node_events(world) == [] and check_condition(world, node) is None
    assert world.engine.stats.reconcile_errors["node"] == errors


@pytest.mark.parametrize("policy", [attrs.evolve(POLICY, node_check_period=0.0)])
def test_period_zero_disables_the_check(
        world: World, provider_plugin: ReferenceProvider, hook_calls: HookRecorder) -> None:
    node = bring_up(world)
    provider_plugin.findings[node] = [NodeFinding("InterfaceDrift", "eth1 drifted")]
    world.settle(advance=10 * PERIOD)
    assert hook_calls.of("podnet_node_check") == []
    assert node_events(world) == []


def test_a_deleted_node_drops_its_check_state(world: World) -> None:
    node = bring_up(world)
    world.settle(advance=PERIOD + 5)
    reconciler = world.engine.nodepools
    assert node in reconciler._next_check
    world.delete_pod("p0")
    world.delete_node(0)
    world.settle(advance=5)
    assert node not in reconciler._next_check and node not in reconciler._findings


def test_the_period_is_a_policy_key() -> None:
    assert PoolPolicy().node_check_period == 300.0
    assert policy_overrides("policies.x", {"nodeCheckPeriod": 0}) == {"node_check_period": 0}
    assert policy_overrides("policies.x", {"node_check_period": 30.5}) == {
        "node_check_period": 30.5}
    with pytest.raises(ConfigError, match=r"nodeCheckPeriod|node_check_period"):
        policy_overrides("policies.x", {"nodeCheckPeriod": -1})
    with pytest.raises(ConfigError, match="nodeCheckPeriod"):
        policy_overrides("policies.x", {"nodeCheckPeriod": "often"})


def test_a_restart_does_not_report_a_persisting_finding_again(
        world: World, provider_plugin: ReferenceProvider) -> None:
    node = bring_up(world)
    drift = NodeFinding(reason="InterfaceDrift", message="eth1 is not what it was")
    provider_plugin.findings[node] = [drift]
    world.settle(advance=PERIOD + 5)
    assert reported(node_events(world, "InterfaceDrift")) == 1
    world.restart()
    world.settle(advance=PERIOD + 5)
    assert reported(node_events(world, "InterfaceDrift")) == 1  # the record remembered it
    # a new finding after the restart is news, and so is the old one once it came back
    other = NodeFinding(reason="SecurityGroupDrift", message="eth1 lost sg-1")
    provider_plugin.findings[node] = [drift, other]
    world.settle(advance=PERIOD + 5)
    assert reported(node_events(world, "InterfaceDrift")) == 1
    assert reported(node_events(world, "SecurityGroupDrift")) == 1
    condition = check_condition(world, node)
    assert condition is not None and other.message in condition["message"]
    world.assert_converged()
