"""The bad-input catalogue against the OVN provider, plus what only OVN can tell: its
subnets, its address space, MACs already on a port, and its config section."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from podnet.core.errors import ConfigError
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.badinput import (
    ANN,
    BadInput,
    BadInputSuite,
    Target,
    bad_annotation,
    generic_cases,
)
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
