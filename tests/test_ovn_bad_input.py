"""The bad-input catalogue against the OVN provider, plus what only OVN can tell: its
subnets, its address space, MACs already on a port, its config section, and a Subnet
object's OVN parameters (``spec.parameters``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from podnet.core.errors import ConfigError
from podnet.hookspecs.networks import Networks
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.badinput import (
    ANN,
    BadInput,
    BadInputSuite,
    Target,
    bad_annotation,
    generic_cases,
)
from podnet.testing.badparams import BadParameters, refused, subnet_info
from podnet.testing.harness import World

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

#: generic cases that corrupt the answers of pool hooks, which an own-IPAM provider lacks
_POOL_ONLY = {"inventory-duplicate-address", "inventory-no-interfaces-allowed",
              "grow-not-entries", "grow-bad-address"}

SUBNETS = [
    {"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True,
     "exclude_ips": ["10.16.0.2..10.16.0.9"]},
    {"name": "dual", "cidr": "10.17.0.0/24,fd00:17::/120", "router": "edge",
     "ip_pools": {"gold": ["10.17.0.50", "10.17.0.51"]}},
]
#: one good group and three bad ones: a bad group fails only the pods naming it
SECURITY_GROUPS = {
    "web": {"ingress": [{"protocol": "tcp", "port": 80}]},
    "bad-proto": {"ingress": [{"protocol": "sctp"}]},
    "bad-port": {"ingress": [{"protocol": "tcp", "port": 70000}]},
    "bad-cidr": {"egress": [{"protocol": "udp", "to": "10.0.0.0/33"}]},
}


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


def _mac_taken(world: World) -> Target:
    """A MAC another pod's port already has."""
    world.add_pod("mac-owner", 0, annotations={f"{ANN}mac-address": "0a:00:00:00:00:42"})
    world.settle()
    world.add_pod("mac-thief", 0, annotations={f"{ANN}mac-address": "0a:00:00:00:00:42"})
    return Target("pod", "mac-thief")


class TestOvnBadInput(BadInputSuite):
    provider_name = "ovn"

    @pytest.fixture
    def provider_plugin(self, nb_server: NbServer) -> Iterator[Any]:
        from podnet.plugins.ovn.provider import OvnProvider

        nb_server.restart_fresh()
        plugin = OvnProvider(nb_server.remote, SUBNETS, seed=0,
                             security_groups=SECURITY_GROUPS)
        yield plugin
        plugin.close()

    @pytest.fixture
    def ground_truth(self, provider_plugin: Any) -> Any:
        return provider_plugin.nb_addresses

    def bad_inputs(self) -> Sequence[BadInput]:
        return [
            *(c for c in generic_cases() if c.id not in _POOL_ONLY),
            bad_annotation("ip-outside-every-subnet", {f"{ANN}ip-address": "192.0.2.10"},
                           "ip-address"),
            bad_annotation("ip-outside-requested-subnet",
                           {f"{ANN}subnets": "dual", f"{ANN}ip-address": "10.16.0.77"},
                           "ip-address"),
            bad_annotation("ip-is-the-gateway", {f"{ANN}ip-address": "10.16.0.1"}, "ip-address"),
            bad_annotation("ip-excluded", {f"{ANN}ip-address": "10.16.0.5"}, "ip-address"),
            bad_annotation("ip-is-the-network-address", {f"{ANN}ip-address": "10.16.0.0"},
                           "ip-address"),
            bad_annotation("unknown-subnet", {f"{ANN}subnets": "sbn-nope"}, "subnets"),
            bad_annotation("unknown-named-ip-pool", {f"{ANN}ip-pool": "silver"}, "ip-pool"),
            bad_annotation("ip-pool-outside-subnet", {f"{ANN}ip-pool": "192.0.2.1,192.0.2.2"},
                           "ip-pool"),
            bad_annotation("eip-without-router", {f"{ANN}eip": "203.0.113.9"}, "eip"),
            bad_annotation("snat-without-external-ip",
                           {f"{ANN}subnets": "dual", f"{ANN}snat": "true"}, "snat"),
            BadInput("mac-owned-by-another-pod", _mac_taken, "mac-address"),
            bad_annotation("unknown-security-group", {f"{ANN}security-groups": "web,nope"},
                           "security-groups"),
            *(bad_annotation(f"security-group-{group}", {f"{ANN}security-groups":
                                                         f"web,{group}"},
                             f"providers.ovn.security_groups.{group}.{key}")
              for group, key in (("bad-proto", "ingress[0].protocol"),
                                 ("bad-port", "ingress[0].port"),
                                 ("bad-cidr", "egress[0].to"))),
        ]


@pytest.mark.parametrize(("config", "key"), [
    ({"remote": "http://nb"}, "ovn.remote"),
    ({"bogus": 1}, "ovn.bogus"),
    ({"subnets": []}, "ovn.subnets"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/33"}]}, "ovn.subnets[0].cidr"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.1/24"}]}, "ovn.subnets[0].cidr"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24", "gateway": "10.1.0.1"}]},
     "ovn.subnets[0].gateway"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24", "exclude_ips": ["x..y"]}]},
     "ovn.subnets[0].exclude_ips"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24", "gateway_type": "sideways"}]},
     "ovn.subnets[0].gateway_type"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24"}, {"name": "a", "cidr": "10.1.0.0/24"}]},
     "ovn.subnets"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24", "colour": "red"}]},
     "ovn.subnets[0].colour"),
    ({"routers": [{"name": "r", "external_ip": "nope"}]}, "ovn.routers[0].external_ip"),
    ({"timeout": "soon"}, "ovn.timeout"),
    ({"mtu": 40}, "ovn.mtu"),
    ({"mtu": "big"}, "ovn.mtu"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24", "mtu": 70000}]},
     "ovn.subnets[0].mtu"),
    ({"subnets": [{"name": "a", "cidr": "10.0.0.0/24,fd00::/120", "mtu": 1200}]},
     "ovn.subnets[0].mtu"),
    ({"mtu": 1200, "subnets": [{"name": "a", "cidr": "fd00::/120"}]}, "ovn.mtu"),
    ({"reconnect_backoff_ms": 500}, "ovn.reconnect_backoff_ms"),
    ({"reconnect_backoff_ms": [800, 100]}, "ovn.reconnect_backoff_ms"),
])
def test_bad_config_names_the_key(config: dict[str, Any], key: str) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    plugin = OvnProvider()
    with pytest.raises(ConfigError) as info:
        plugin.podnet_configure(provider="ovn", config=config)
    assert key in str(info.value), str(info.value)


# --- a Subnet object's OVN parameters (spec.parameters) --------------------------------------

_V4 = ("10.60.0.0/24",)
_DUAL = ("10.60.0.0/24", "fd00:60::/120")
PARAMETER_CASES = [
    BadParameters("not-a-mapping", ["logicalSwitch"], "spec.parameters", "expected a mapping"),
    BadParameters("unknown-key", {"colour": "red"}, "spec.parameters.colour",
                  "unknown parameter"),
    BadParameters("snake-case-switch", {"logical_switch": "a"},
                  "spec.parameters.logical_switch", "did you mean logicalSwitch"),
    BadParameters("snake-case-gateway", {"gateway_type": "centralized"},
                  "spec.parameters.gateway_type", "did you mean gatewayType"),
    BadParameters("vips-for-vips-range", {"vips": "10.60.0.9"}, "spec.parameters.vips",
                  "did you mean vipsRange"),
    BadParameters("logical-router", {"logicalRouter": "lr1"},
                  "spec.parameters.logicalRouter", "did you mean router"),
    BadParameters("switch-empty", {"logicalSwitch": ""}, "spec.parameters.logicalSwitch",
                  "is not a logical switch name"),
    BadParameters("switch-space", {"logicalSwitch": "my switch"},
                  "spec.parameters.logicalSwitch", "'my switch' is not a logical switch name"),
    BadParameters("switch-number", {"logicalSwitch": 5}, "spec.parameters.logicalSwitch",
                  "5 is not a logical switch name"),
    BadParameters("switch-leading-dash", {"logicalSwitch": "-a"},
                  "spec.parameters.logicalSwitch", "is not a logical switch name"),
    BadParameters("switch-too-long", {"logicalSwitch": "s" * 254},
                  "spec.parameters.logicalSwitch", "at most 253 characters"),
    BadParameters("switch-list", {"logicalSwitch": ["a"]}, "spec.parameters.logicalSwitch",
                  "is not a logical switch name"),
    BadParameters("switch-of-a-routers-external-network", {"logicalSwitch": "ext-lr-out"},
                  "spec.parameters.logicalSwitch", "router lr-out's external switch"),
    BadParameters("switch-of-a-config-subnet", {"logicalSwitch": "dual"},
                  "spec.parameters.logicalSwitch", "already used by config subnet dual"),
    BadParameters("switch-of-another-subnet", {"logicalSwitch": "ls-taken"},
                  "spec.parameters.logicalSwitch", "already used by Subnet taken"),
    BadParameters("gateway-type-unknown", {"gatewayType": "sideways"},
                  "spec.parameters.gatewayType", "'sideways' is not one of distributed"),
    BadParameters("gateway-type-empty", {"gatewayType": ""}, "spec.parameters.gatewayType",
                  "is not one of"),
    BadParameters("gateway-type-number", {"gatewayType": 1}, "spec.parameters.gatewayType",
                  "1 is not one of"),
    BadParameters("gateway-type-capitalised", {"gatewayType": "Distributed"},
                  "spec.parameters.gatewayType", "'Distributed' is not one of"),
    BadParameters("router-unknown", {"router": "lr-nope"}, "spec.parameters.router",
                  "unknown router 'lr-nope'; the config's routers (providers.ovn.routers): "
                  "edge, lr-out"),
    BadParameters("router-empty", {"router": ""}, "spec.parameters.router",
                  "expected a router's name"),
    BadParameters("router-number", {"router": 7}, "spec.parameters.router",
                  "expected a router's name, got 7"),
    BadParameters("router-list", {"router": ["edge"]}, "spec.parameters.router",
                  "expected a router's name"),
    BadParameters("mtu-too-small", {"mtu": 67}, "spec.parameters.mtu",
                  "67 is out of range 68..65535"),
    BadParameters("mtu-too-large", {"mtu": 65536}, "spec.parameters.mtu", "out of range"),
    BadParameters("mtu-text", {"mtu": "1400"}, "spec.parameters.mtu",
                  "expected an integer 68..65535, got '1400'"),
    BadParameters("mtu-fraction", {"mtu": 1400.5}, "spec.parameters.mtu",
                  "expected an integer"),
    BadParameters("mtu-boolean", {"mtu": True}, "spec.parameters.mtu", "expected an integer"),
    BadParameters("mtu-below-ipv6-minimum", {"mtu": 1200}, "spec.parameters.mtu",
                  "IPv6, which needs an MTU of at least 1280", cidrs=_DUAL),
    BadParameters("vips-range-not-an-address", {"vipsRange": "nope"},
                  "spec.parameters.vipsRange", "is not an address, a range"),
    BadParameters("vips-range-empty-list", {"vipsRange": []}, "spec.parameters.vipsRange",
                  "non-empty list"),
    BadParameters("vips-range-number", {"vipsRange": 5}, "spec.parameters.vipsRange",
                  "got 5"),
    BadParameters("vips-range-entry-number", {"vipsRange": ["10.60.0.5", 7]},
                  "spec.parameters.vipsRange[1]", "got 7"),
    BadParameters("vips-range-outside", {"vipsRange": "10.61.0.5"},
                  "spec.parameters.vipsRange", "outside the Subnet's cidrBlock 10.60.0.0/24"),
    BadParameters("vips-range-backwards", {"vipsRange": "10.60.0.9..10.60.0.5"},
                  "spec.parameters.vipsRange", "backwards"),
    BadParameters("vips-range-two-families", {"vipsRange": "10.60.0.9..fd00:60::9"},
                  "spec.parameters.vipsRange", "two families", cidrs=_DUAL),
    BadParameters("vips-range-holds-the-gateway", {"vipsRange": ["10.60.0.1..10.60.0.5"]},
                  "spec.parameters.vipsRange[0]", "holds the gateway 10.60.0.1"),
    BadParameters("vips-range-holds-the-broadcast", {"vipsRange": "10.60.0.240/28"},
                  "spec.parameters.vipsRange", "network or broadcast address"),
    BadParameters("vips-range-overlaps-exclusions", {"vipsRange": "10.60.0.16/28"},
                  "spec.parameters.vipsRange", "overlaps excludeIPs",
                  excluded=("10.60.0.20..10.60.0.40",)),
    BadParameters("vips-range-other-family", {"vipsRange": "fd00::5"},
                  "spec.parameters.vipsRange", "outside the Subnet's cidrBlock", cidrs=_V4),
    BadParameters("vips-range-host-bits", {"vipsRange": "10.60.0.5/28"},
                  "spec.parameters.vipsRange", "is not an address, a range"),
]


@pytest.fixture
def served(nb_server: NbServer) -> Iterator[Any]:
    """The provider with one Subnet object serving (``taken``, on switch ``ls-taken``)."""
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, seed=0, routers=[
        {"name": "edge"}, {"name": "lr-out", "external": {
            "address": "203.0.113.2/24", "gateway": "203.0.113.254",
            "network_name": "physnet", "chassis": ["chassis-1"]}}])
    taken = subnet_info("taken", "ovn", ("10.62.0.0/24",), {"logicalSwitch": "ls-taken"})
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(taken,)))
    yield plugin, taken
    plugin.close()


def test_there_are_at_least_30_parameter_cases() -> None:
    assert len(PARAMETER_CASES) >= 30
    assert len({c.id for c in PARAMETER_CASES}) == len(PARAMETER_CASES)


@pytest.mark.parametrize("case", PARAMETER_CASES, ids=lambda c: c.id)
def test_bad_subnet_parameters_are_refused_naming_the_subnet_and_the_field(
        served: Any, nb_server: NbServer, case: BadParameters) -> None:
    from podnet.hookspecs.models import NodeInfo, ObjectMeta, PodNetwork, PodNetworkSpec
    from podnet.hookspecs.types import AllocateContext, NodeContext

    plugin, taken = served
    before = (dict(plugin.subnets), dict(plugin.retired), dict(plugin.pools))
    refused(plugin, "ovn", case)
    # nothing half-done: the provider's table as it was, nothing in NB
    assert (dict(plugin.subnets), dict(plugin.retired), dict(plugin.pools)) == before
    # core would never pass it on; if it did, it is left out and the rest keeps serving
    bad = subnet_info("bad", "ovn", case.cidrs, case.parameters, case.excluded)
    plugin.podnet_networks_changed(provider="ovn", networks=Networks(subnets=(taken, bad)))
    assert "bad" not in plugin.subnets and "taken" in plugin.subnets
    pn = PodNetwork(metadata=ObjectMeta(name="ok.default", namespace="team-a"),
                    spec=PodNetworkSpec(pod_name="ok", pod_uid="u", node_name="n1",
                                        provider="ovn"))
    got = plugin.podnet_allocate(AllocateContext(
        pod_network=pn, node=NodeContext(node=NodeInfo(name="n1", uid="n1")), subnet=taken))
    assert got is not None and got.subnet == "taken" and got.ip.startswith("10.62.0.")
    switches = subprocess.run(["ovn-nbctl", f"--db={nb_server.remote}", "ls-list"],
                              check=True, capture_output=True, text=True).stdout
    assert "ls-taken" in switches and " bad" not in switches, switches
