"""A record's spec and its status are two writes (the status subresource). Where a pass
changes both, the order keeps the record true after a failure between them: a routed
record is written Allocated before its spec changes what route is to write, so a lost
status write never leaves it Routed with requests route never saw (here the reference
provider: dataplane requests changed on a running pod)."""

from __future__ import annotations

from podnet.core.cluster.port import POD, POD_NETWORK, ApiError
from podnet.core.models import Phase
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]


def test_a_dataplane_change_whose_status_write_fails_is_routed_with_it(
        world: World, hook_calls: HookRecorder) -> None:
    """Was: the changed requests were written into the spec, then the record Allocated;
    that status write failing left the record Routed, its spec naming the new requests,
    and no later pass saw a change to route (until the verify period, if the provider's
    verify looks at them)."""
    world.add_node(0)
    world.add_pod("w", 0)
    world.settle()
    hook_calls.clear()
    world.cluster.faults.fail_next("update_status", POD_NETWORK, ApiError("injected"),
                                   times=2)
    with world.quiet():
        world.cluster.patch(POD, "w", {"metadata": {"annotations": {
            "podnet.io/security-groups": "sg-1"}}}, world.namespace)
    world.settle(advance=30.0)  # the retries' backoff, well inside the verify period
    pn = world.record_of("w")
    assert pn is not None and pn.status.phase is Phase.ROUTED
    assert pn.spec.requests.security_groups == ("sg-1",)
    routes = hook_calls.of("podnet_route")
    assert routes, "the change was never routed"
    assert routes[-1].kwargs["context"].pod_network.spec.requests.security_groups == ("sg-1",)
    world.assert_converged()
