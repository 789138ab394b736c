"""The bad-input catalogue: malformed inputs, each answered on the object it came with.

For every case the expectations are the same (GOALS.md R3): the object that carried the
bad input gets a condition and a Warning Event whose messages name the offending field,
the controller keeps running, and a healthy pod created beside it is routed as usual.

A provider's test module subclasses :class:`BadInputSuite`, supplies the fixtures the
kit's ``world`` needs (``provider_plugin``), and extends :meth:`BadInputSuite.bad_inputs`
with its own cases (its annotations' semantics, its SDK's malformed responses)::

    class TestMyProviderBadInput(BadInputSuite):
        @pytest.fixture
        def provider_plugin(self): ...

        def bad_inputs(self):
            return [*super().bad_inputs(), BadInput("my-case", ...)]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pluggy
import pytest

from podnet.app.demo import node_obj
from podnet.core.cluster.port import NODE, NODE_NETWORK, POD, POD_NETWORK, NotFound, Obj
from podnet.core.config import parse_config
from podnet.core.errors import ConfigError
from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import InvalidRequest
from podnet.hookspecs.networks import SubnetInfo
from podnet.hookspecs.types import CloudInterface, Inventory, PoolEntry
from podnet.testing.harness import World

ANN = "podnet.io/"


@attrs.frozen
class Target:
    """The object that must carry the condition and the Event."""

    kind: str  # "pod" (its PodNetwork and the pod), "podnetwork", "nodenetwork"
    name: str


@attrs.frozen
class BadInput:
    """One malformed input. ``setup`` puts it into the world and names its target;
    ``field`` must appear in the condition and in the Event."""

    id: str
    setup: Callable[[World], Target]
    field: str
    #: a plugin wrapping the provider to corrupt its answers, registered before start
    wrapper: Callable[[], Any] | None = None


@attrs.frozen
class BadConfig:
    id: str
    config: Mapping[str, Any]
    key: str


@attrs.frozen
class BadSubnet:
    """A Subnet whose provider parameters (``spec.parameters``) the provider must refuse
    through ``podnet_subnet_parameters``: ``field`` is what the refusal names (core puts
    it on the Subnet's Ready condition and Warning Event)."""

    id: str
    parameters: Any
    field: str
    #: the Subnet's ``cidrBlock``
    cidr: str = "10.40.0.0/16"

    def subnet(self, provider: str) -> SubnetInfo:
        return SubnetInfo(name=f"bad-{self.id}", provider=provider, cidrs=(self.cidr,),
                          parameters=self.parameters)


def refuse_subnet(hook: Callable[[str, SubnetInfo], object], provider: str,
                  case: BadSubnet) -> InvalidRequest:
    """Call ``hook`` (a provider's ``podnet_subnet_parameters``) with ``case``'s Subnet:
    it must raise :class:`InvalidRequest` naming the field and the Subnet, in one line."""
    subnet = case.subnet(provider)
    with pytest.raises(InvalidRequest) as info:
        hook(provider, subnet)
    error = info.value
    assert error.field == case.field, f"{case.id}: the refusal names {error.field!r}"
    message = str(error)
    assert f"Subnet {subnet.name}" in message and "\n" not in message, message
    return error


# --- builders -------------------------------------------------------------------------


def bad_annotation(case_id: str, annotations: Mapping[str, str], field: str) -> BadInput:
    def setup(world: World) -> Target:
        world.add_pod(f"bad-{case_id}", 0, annotations=annotations)
        return Target("pod", f"bad-{case_id}")

    return BadInput(case_id, setup, field)


#: a node the catalogue's world does not otherwise use, for the unknown-instance case
UNKNOWN_INSTANCE_NODE = 9


def unknown_instance(case_id: str, provider_id: str, field: str = "spec.providerID"
                     ) -> BadInput:
    """A pod on a node whose ``spec.providerID`` names an instance the cloud does not
    have: the pod's record (and the Pod) say so, naming the node's providerID. For cloud
    providers: pass a providerID of the form the provider reads."""

    def setup(world: World) -> Target:
        node = node_obj(UNKNOWN_INSTANCE_NODE)
        node["spec"]["providerID"] = provider_id
        with world.quiet():
            world.cluster.create(NODE, node)
        world.add_pod(f"bad-{case_id}", UNKNOWN_INSTANCE_NODE)
        return Target("pod", f"bad-{case_id}")

    return BadInput(case_id, setup, field)


def _taken_static(world: World) -> Target:
    """A static address another pod already holds."""
    world.add_pod("owner", 0)
    world.settle()
    record = world.record_of("owner")
    assert record is not None and record.status.ip
    world.add_pod("thief", 0, annotations={f"{ANN}ip-address": record.status.ip})
    return Target("pod", "thief")


def raw_record(case_id: str, kind: str, obj: Callable[[World], Obj], field: str) -> BadInput:
    def setup(world: World) -> Target:
        body = obj(world)
        cluster_kind = POD_NETWORK if kind == "podnetwork" else NODE_NETWORK
        with world.quiet():
            status = body.pop("status", None)
            made = world.cluster.create(cluster_kind, body)
            if status is not None:
                made["status"] = status
                world.cluster.update_status(cluster_kind, made)
        return Target(kind, body["metadata"]["name"])

    return BadInput(case_id, setup, field)


def _pn(world: World, name: str, spec: dict[str, Any], status: dict[str, Any] | None = None
        ) -> Obj:
    body: Obj = {
        "apiVersion": "podnet.io/v1alpha1", "kind": "PodNetwork",
        "metadata": {"name": name, "namespace": world.namespace},
        "spec": {"podName": "ghost", "podUid": "ghost-uid", "nodeName": world.node_name(0),
                 "provider": world.provider, **spec},
    }
    for key in [k for k, v in body["spec"].items() if v is None]:
        del body["spec"][key]
    if status is not None:
        body["status"] = status
    return body


def _nn(name: str, spec: dict[str, Any], status: dict[str, Any] | None = None) -> Obj:
    body: Obj = {"apiVersion": "podnet.io/v1alpha1", "kind": "NodeNetwork",
                 "metadata": {"name": name}, "spec": {"provider": "any", **spec}}
    if status is not None:
        body["status"] = status
    return body


class _Corrupt:
    """Corrupts the provider's answers of one hook with ``change`` — for the bad pod and
    its node only, so a bystander elsewhere sees a healthy provider."""

    def __init__(self, hook: str, change: Callable[[Any], Any]) -> None:
        self.hook = hook
        self.change = change

    def _wrap(self, hook: str, affected: bool) -> Any:
        outcome = yield
        if hook == self.hook and affected and outcome.exception is None:
            result = outcome.get_result()
            if result is not None:
                outcome.force_result(self.change(result))

    @hookimpl(hookwrapper=True)
    def podnet_allocate(self, context: Any) -> Any:
        bad = context.pod_network.spec.pod_name.startswith("bad-")
        return (yield from self._wrap("allocate", bad))

    @hookimpl(hookwrapper=True)
    def podnet_node_inventory(self, provider: str, node: Any) -> Any:
        return (yield from self._wrap("node_inventory", node.node.name == World.node_name(0)))

    @hookimpl(hookwrapper=True)
    def podnet_pool_grow(self, provider: str, node: Any) -> Any:
        return (yield from self._wrap("pool_grow", node.node.name == World.node_name(0)))


def corrupt_answer(case_id: str, hook: str, change: Callable[[Any], Any], field: str,
                   target: str = "pod") -> BadInput:
    def setup(world: World) -> Target:
        world.add_pod(f"bad-{case_id}", 0)
        return Target("pod", f"bad-{case_id}") if target == "pod" else Target(
            "nodenetwork", world.node_name(0))

    return BadInput(case_id, setup, field, wrapper=lambda: _Corrupt(hook, change))


# --- the generic catalogue ------------------------------------------------------------


def generic_cases() -> list[BadInput]:
    a = bad_annotation
    return [
        a("ip-not-an-ip", {f"{ANN}ip-address": "10.0.0.300"}, "ip-address"),
        a("ip-empty", {f"{ANN}ip-address": ""}, "ip-address"),
        a("ip-two-v4", {f"{ANN}ip-address": "10.0.0.1,10.0.0.2"}, "ip-address"),
        a("ip-scoped-v6", {f"{ANN}ip-address": "fe80::1%eth0"}, "ip-address"),
        a("mac-not-hex", {f"{ANN}mac-address": "zz:zz:zz:zz:zz:zz"}, "mac-address"),
        a("mac-multicast", {f"{ANN}mac-address": "01:00:5e:00:00:01"}, "mac-address"),
        a("mac-zero", {f"{ANN}mac-address": "00:00:00:00:00:00"}, "mac-address"),
        a("mac-short", {f"{ANN}mac-address": "0a:00:00:00:01"}, "mac-address"),
        a("pool-bad-ip", {f"{ANN}ip-pool": "10.0.0.1,not-an-ip"}, "ip-pool"),
        a("pool-and-static", {f"{ANN}ip-pool": "10.0.0.1", f"{ANN}ip-address": "10.0.0.2"},
          "ip-pool"),
        a("port-security-maybe", {f"{ANN}port-security": "maybe"}, "port-security"),
        a("snat-yes-please", {f"{ANN}snat": "yes please"}, "snat"),
        a("vips-bad", {f"{ANN}vips": "10.0.0.1,bogus"}, "vips"),
        a("eip-bad", {f"{ANN}eip": "1.2.3"}, "eip"),
        a("security-groups-empty-item", {f"{ANN}security-groups": "sg-1,,sg-2"},
          "security-groups"),
        a("subnets-whitespace", {f"{ANN}subnets": "a b"}, "subnets"),
        a("subnets-duplicate", {f"{ANN}subnets": "s1,s1"}, "subnets"),
        a("networks-bad-name", {f"{ANN}networks": "Bad_Name"}, "networks"),
        a("networks-duplicate", {f"{ANN}networks": "a,a"}, "networks"),
        # a misspelt key that would choose the address blocks; one like no known key warns
        a("ip-address-misspelt", {f"{ANN}ip-adress": "10.0.0.5"},
          f"metadata.annotations[{ANN}ip-adress]"),
        a("subnets-misspelt", {f"{ANN}subnet": "s1"}, f"metadata.annotations[{ANN}subnet]"),
        a("unknown-key", {f"{ANN}colour": "blue"}, f"metadata.annotations[{ANN}colour]"),
        BadInput("static-owned-by-another-pod", _taken_static, "ip-address"),
        raw_record("pn-unknown-spec-field", "podnetwork",
                   lambda w: _pn(w, "pn-unknown", {"colour": "blue"}), "spec.colour"),
        raw_record("pn-missing-pod-uid", "podnetwork",
                   lambda w: _pn(w, "pn-no-uid", {"podUid": None}), "spec.podUid"),
        raw_record("pn-bad-phase", "podnetwork",
                   lambda w: _pn(w, "pn-phase", {}, {"phase": "Bogus"}), "status.phase"),
        raw_record("pn-bad-request-ip", "podnetwork",
                   lambda w: _pn(w, "pn-req", {"requests": {"ipAddress": "nope"}}),
                   "spec.requests.ipAddress"),
        raw_record("pn-bad-status-ip", "podnetwork",
                   lambda w: _pn(w, "pn-ip", {}, {"phase": "Routed", "ip": "999.1.1.1"}),
                   "status.ip"),
        raw_record("nn-min-above-max", "nodenetwork",
                   lambda w: _nn("nn-bounds", {"pool": {"minIdle": 9, "maxIdle": 2}}),
                   "spec.pool"),
        raw_record("nn-unknown-spec-field", "nodenetwork",
                   lambda w: _nn("nn-unknown", {"zone": "a"}), "spec.zone"),
        raw_record("nn-bad-address", "nodenetwork",
                   lambda w: _nn("nn-addr", {}, {"interfaces": [
                       {"id": "eth0", "ips": [{"address": "10.0.0.999"}]}]}),
                   "status.interfaces[0].ips[0].address"),
        corrupt_answer("allocate-ip-garbage", "allocate",
                       lambda a: attrs.evolve(a, ip="not-an-ip"), "allocate.ip"),
        corrupt_answer("allocate-mac-garbage", "allocate",
                       lambda a: attrs.evolve(a, mac="xx"), "allocate.mac"),
        corrupt_answer("allocate-v4-as-v6", "allocate",
                       lambda a: attrs.evolve(a, ipv6="10.0.0.1"), "allocate.ipv6"),
        corrupt_answer("allocate-wrong-type", "allocate", lambda a: {"ip": a.ip}, "allocate"),
        corrupt_answer("inventory-duplicate-address", "node_inventory",
                       lambda inv: _duplicate_address(inv), "node_inventory.interfaces",
                       target="nodenetwork"),
        corrupt_answer("inventory-no-interfaces-allowed", "node_inventory",
                       lambda inv: attrs.evolve(inv, max_interfaces=0),
                       "node_inventory.max_interfaces", target="nodenetwork"),
        corrupt_answer("grow-not-entries", "pool_grow",
                       lambda entries: ["10.0.0.1"], "pool_grow.[0]", target="nodenetwork"),
        corrupt_answer("grow-bad-address", "pool_grow",
                       lambda entries: [PoolEntry("10.0.0.x")], "pool_grow.[0].address",
                       target="nodenetwork"),
    ]


def _duplicate_address(inventory: Inventory) -> Inventory:
    extra = CloudInterface(id="eth-dup", ips=("10.200.0.1",))
    first = inventory.interfaces[0] if inventory.interfaces else CloudInterface(id="eth0")
    first = attrs.evolve(first, ips=(*first.ips, "10.200.0.1"))
    return attrs.evolve(inventory, interfaces=(first, *inventory.interfaces[1:], extra))


def generic_config_cases(provider: str) -> list[BadConfig]:
    return [
        BadConfig("unknown-top-key", {"bogus": 1}, "bogus"),
        BadConfig("policy-min-above-max",
                  {"policies": {provider: {"minIdle": 9, "maxIdle": 2}}},
                  f"policies.{provider}.min_idle"),
        BadConfig("policy-not-a-number", {"policies": {provider: {"batchSize": "four"}}},
                  f"policies.{provider}.batchSize"),
        BadConfig("policy-unknown-key", {"policies": {provider: {"minIdel": 1}}},
                  f"policies.{provider}.minIdel"),
        BadConfig("lease-timings", {"leaderElection": {"leaseDurationSeconds": 1}},
                  "leaderElection"),
        BadConfig("unknown-default-provider", {"defaultProvider": "nope"}, "provider"),
        BadConfig("node-rule-unknown-provider",
                  {"nodeProviders": [{"provider": "nope", "nodeSelector": "a=b"}]},
                  "nodeProviders[0].provider"),
        BadConfig("node-rule-bad-selector",
                  {"nodeProviders": [{"provider": provider, "nodeSelector": "a in b"}]},
                  "nodeProviders[0].nodeSelector"),
        BadConfig("node-rule-empty-selector",
                  {"nodeProviders": [{"provider": provider, "nodeSelector": ""}]},
                  "nodeProviders[0].nodeSelector"),
        BadConfig("network-unknown-provider", {"networks": {"blue": {"provider": "nope"}}},
                  "networks.blue.provider"),
        BadConfig("network-bad-name", {"networks": {"Blue_1": {"provider": provider}}},
                  "networks.Blue_1"),
    ]


# --- the suite ------------------------------------------------------------------------


class BadInputSuite:
    """Every case of :meth:`bad_inputs` and :meth:`bad_configs`, against one provider."""

    def bad_inputs(self) -> Sequence[BadInput]:
        return generic_cases()

    def bad_configs(self, provider: str) -> Sequence[BadConfig]:
        return generic_config_cases(provider)

    #: the provider's name, for the config cases (set by the subclass)
    provider_name: str = ""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        if "bad_input" in metafunc.fixturenames:
            cases = list(self.bad_inputs())
            metafunc.parametrize("bad_input", cases, ids=[c.id for c in cases])
        if "bad_config" in metafunc.fixturenames:
            configs = list(self.bad_configs(self.provider_name))
            metafunc.parametrize("bad_config", configs, ids=[c.id for c in configs])

    def test_bad_input_is_reported_on_its_object(
        self, world: World, plugin_manager: pluggy.PluginManager, bad_input: BadInput
    ) -> None:
        if bad_input.wrapper is not None:
            plugin_manager.register(bad_input.wrapper(), name=f"corrupt-{bad_input.id}")
        world.add_node(0)
        world.add_node(1)
        world.settle()
        target = bad_input.setup(world)
        world.add_pod("bystander", 1)
        world.settle(advance=30)
        conditions, events = _reports(world, target)
        assert any(bad_input.field in m for m in conditions), (
            f"no condition on {target} names {bad_input.field!r}: {conditions}")
        assert any(bad_input.field in m for m in events), (
            f"no Event on {target} names {bad_input.field!r}: {events}")
        with world.quiet():
            phases = [pn.get("status", {}).get("phase") for pn in
                      world.cluster.list(POD_NETWORK, world.namespace).items
                      if pn["spec"].get("podName") == "bystander"]
        assert phases == ["Routed"], "a healthy pod beside the bad input was not routed"
        assert world.engine.stats.reconciles  # the engine kept running through it

    def test_bad_config_names_the_key(self, world: World, bad_config: BadConfig) -> None:
        from podnet.core.engine import Engine, EngineOptions

        with pytest.raises(ConfigError) as info:
            config = parse_config(dict(bad_config.config))
            Engine(world.cluster, world.engines.pm, clock=world.clock,
                   options=EngineOptions.from_config(
                       config, default_provider=config.default_provider or world.provider,
                       provider_config={}))
        assert bad_config.key in str(info.value), str(info.value)


def _reports(world: World, target: Target) -> tuple[list[str], list[str]]:
    """Condition messages and Event messages on the target (and, for a pod, its records)."""
    cluster = world.cluster
    objs: list[Obj] = []
    with world.quiet():
        if target.kind == "pod":
            try:
                objs.append(cluster.get(POD, target.name, world.namespace))
            except NotFound:
                pass
            objs.extend(pn for pn in cluster.list(POD_NETWORK, world.namespace).items
                        if pn["spec"].get("podName") == target.name)
        elif target.kind == "podnetwork":
            objs.append(cluster.get(POD_NETWORK, target.name, world.namespace))
        else:
            objs.append(cluster.get(NODE_NETWORK, target.name))
        conditions = [c.get("message", "") for o in objs
                      for c in (o.get("status") or {}).get("conditions") or ()]
        events = [e.get("message", "") for o in objs for e in cluster.events_for(o)]
    return conditions, events
