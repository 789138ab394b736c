"""Requests changed on a running pod, in core, for every provider (here the reference
provider): dataplane fields (port security, security groups, VIPs, EIP, SNAT) are adopted
into the record and written again by a traced ``repair`` → ``route``; address fields
(subnets, a static address, an IP pool, a MAC) never move an allocated address, which a
``RequestsApplied`` condition and an Event say."""

from __future__ import annotations

import attrs
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from podnet.core.cluster.port import POD
from podnet.core.models import NetworkRequest, Phase
from podnet.core.reconcile.requests import ADDRESS_FIELDS, DATAPLANE_FIELDS, compare
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

ANN = "podnet.io/"


def _annotate(world: World, pod: str, annotations: dict[str, str | None]) -> None:
    with world.quiet():
        world.cluster.patch(POD, pod, {"metadata": {"annotations": annotations}},
                            world.namespace)


def test_every_request_field_is_either_a_dataplane_or_an_address_field() -> None:
    fields = {f.name for f in attrs.fields(NetworkRequest)}
    assert set(DATAPLANE_FIELDS) | set(ADDRESS_FIELDS) == fields
    assert not set(DATAPLANE_FIELDS) & set(ADDRESS_FIELDS)
    change = compare(NetworkRequest(ip_address="10.0.0.5"),
                     NetworkRequest(mac_address="0a:00:00:00:00:01", vips=("10.0.0.9",)))
    assert change.merged == NetworkRequest(ip_address="10.0.0.5", vips=("10.0.0.9",))
    assert change.applied == ("podnet.io/vips",)
    assert change.frozen == ("podnet.io/ip-address", "podnet.io/mac-address")


def test_a_dataplane_change_on_a_routed_pod_is_routed_again(
        world: World, hook_calls: HookRecorder, span_exporter: InMemorySpanExporter) -> None:
    world.add_node(0)
    world.add_pod("w", 0)
    world.settle()
    before = world.record_of("w")
    assert before is not None and before.status.phase is Phase.ROUTED
    hook_calls.clear()
    _annotate(world, "w", {f"{ANN}security-groups": "sg-1", f"{ANN}port-security": "true"})
    world.settle()
    after = world.record_of("w")
    assert after is not None and after.status.phase is Phase.ROUTED
    assert after.status.ip == before.status.ip
    assert after.spec.requests.security_groups == ("sg-1",)
    assert after.spec.requests.port_security is True
    assert [e.trigger for e in hook_calls.transitions("pod_network", ok=True)] == \
        ["repair", "route"]
    [route] = hook_calls.of("podnet_route")
    assert route.kwargs["context"].pod_network.spec.requests.security_groups == ("sg-1",)
    drift = [s.attributes.get("podnet.drift") for s in span_exporter.get_finished_spans()
             if s.name == "pod_network.repair"]
    assert drift == ["requests changed: podnet.io/port-security, podnet.io/security-groups"]
    # the same trace as the pod network's other transitions
    assert after.status.traceparent == before.status.traceparent
    # the spec changed: the conditions written since say they were for the new generation
    assert (before.metadata.generation, after.metadata.generation) == (1, 2)
    assert [c.observed_generation for c in before.status.conditions] == [1]
    ready = next(c for c in after.status.conditions if c.type == "Ready")
    assert ready.observed_generation == 2
    hook_calls.clear()
    world.settle(advance=1)
    assert hook_calls.of("podnet_route") == []  # nothing changed since: nothing written
    world.assert_converged()


def test_an_address_change_keeps_the_address_and_says_so(
        world: World, hook_calls: HookRecorder) -> None:
    world.add_node(0)
    world.add_pod("w", 0)
    world.settle()
    before = world.record_of("w")
    assert before is not None and before.status.ip
    other = before.status.ip.rsplit(".", 1)[0] + ".250"
    hook_calls.clear()
    _annotate(world, "w", {f"{ANN}ip-address": other})
    world.settle()
    after = world.record_of("w")
    assert after is not None and after.status.phase is Phase.ROUTED
    assert after.status.ip == before.status.ip and after.spec.requests.ip_address is None
    assert hook_calls.of("podnet_allocate") == [] and hook_calls.of("podnet_route") == []
    said = next(c for c in after.status.conditions if c.type == "RequestsApplied")
    assert (said.status, said.reason) == ("False", "AddressFieldsFrozen")
    assert "podnet.io/ip-address" in said.message and before.status.ip in said.message
    for involved in ("w", after.metadata.name):
        events = world.cluster.events_for(involved, world.namespace)
        assert any(e["reason"] == "AddressFieldsFrozen" for e in events), events
    ready = next(c for c in after.status.conditions if c.type == "Ready")
    assert ready.status == "True"  # the pod's network works as it is
    _annotate(world, "w", {f"{ANN}ip-address": None})
    world.settle()
    after = world.record_of("w")
    assert after is not None
    said = next(c for c in after.status.conditions if c.type == "RequestsApplied")
    assert said.status == "True"
    world.assert_converged()
