"""NAT that forwards: a router's ``external`` network (an external switch with a localnet
port, a distributed gateway port with its gateway chassis) written by the OVN provider,
and ``ovn-trace`` through northd's flows showing where EIP/SNAT pods' packets go: out of
the localnet port with the source translated, in from it at the eip to the pod; a pod
with neither is dropped at routing. Idempotent over restarts, corrected when changed,
deleted when removed from the config."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from test_ovn_provider import _nbctl, _wait, ground_truth, northd  # noqa: F401 - shared helpers

from podnet.core.errors import ConfigError
from podnet.core.models import Phase
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.plugins.ovn.rows import link_mac
from podnet.testing.harness import World
from podnet.testing.ovnbed import OvnCentral, Trace, trace

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

ANN = "podnet.io/"
ROUTER = "lr-out"
SUBNET = "natted"
SUBNETS = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True},
           {"name": SUBNET, "cidr": "10.30.0.0/24", "router": ROUTER},
           {"name": "behind", "cidr": "10.31.0.0/24", "router": ROUTER}]
EXTERNAL = {"address": "203.0.113.1/24", "gateway": "203.0.113.254",
            "network_name": "physnet", "chassis": ["chassis-1"]}
ROUTERS = [{"name": ROUTER, "external": EXTERNAL}]
#: the external gateway's MAC, as the router would learn it by ARP on a real network
GATEWAY_MAC = "02:00:00:00:00:fe"
OUTSIDE = "198.51.100.10"
EIP = "203.0.113.20"
EXT_SWITCH = f"ext-{ROUTER}"
LOCALNET = f"{EXT_SWITCH}-localnet"
EXT_LRP = f"{ROUTER}-{EXT_SWITCH}"


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


def _provider(nb_server: NbServer, routers: list[dict[str, Any]] = ROUTERS) -> Any:
    from podnet.plugins.ovn.provider import OvnProvider

    return OvnProvider(nb_server.remote, SUBNETS, routers=routers, seed=5)


@pytest.fixture
def provider_plugin(nb_server: NbServer) -> Iterator[Any]:
    nb_server.restart_fresh()
    plugin = _provider(nb_server)
    yield plugin
    plugin.close()


@pytest.fixture
def central(nb_server: NbServer) -> Iterator[OvnCentral]:
    with northd(nb_server) as central:
        yield central


def _routed(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.phase is Phase.ROUTED, pn
    return pn


def learn_gateway(central: OvnCentral, router: str = ROUTER,
                  gateway: str = EXTERNAL["gateway"]) -> None:
    """What ARP teaches the router on a real network (ovn-controller writes it to SB's
    MAC_Binding; ovn-trace sends no ARP, it reads that table)."""
    central.sync()
    datapath = central.sbctl("--bare", "--columns=_uuid", "find", "Datapath_Binding",
                             f"external_ids:name={router}").strip()
    central.sbctl("create", "MAC_Binding", f"logical_port={router}-ext-{router}",
                  f"ip={gateway}", f'mac="{GATEWAY_MAC}"', f"datapath={datapath}")


def out(central: OvnCentral, world: World, pod: str, dst: str = OUTSIDE,
        proto: str = "icmp", router: str = ROUTER) -> Trace:
    """A packet from ``pod`` to ``dst`` outside, sent to its gateway on ``router``."""
    st = _routed(world, pod).status
    return trace(central, st.subnet, inport=st.interface, eth_src=st.mac,
                 eth_dst=link_mac(router, st.subnet), ip_src=st.ip, ip_dst=dst, proto=proto)


def inbound(central: OvnCentral, dst: str, src: str = OUTSIDE, proto: str = "icmp",
            router: str = ROUTER) -> Trace:
    """A packet from the physical network (``router``'s localnet port) to ``dst``, routed
    there by the external gateway."""
    switch = f"ext-{router}"
    return trace(central, switch, inport=f"{switch}-localnet", eth_src=GATEWAY_MAC,
                 eth_dst=link_mac(router, switch), ip_src=src, ip_dst=dst, proto=proto)


def snat_to(t: Trace) -> str | None:
    """The source address the trace's SNAT step writes (``ct_snat(...)`` in
    ``lr_out_snat``), None when no SNAT step ran."""
    found = re.search(r"lr_out_snat.*?\n\s*ct_snat(?:_in_czone)?\(([0-9a-f.:]+)\)", t.text,
                      re.S)
    return found.group(1) if found else None


def _names(nb_server: NbServer, table: str) -> list[str]:
    return _nbctl(nb_server, "--bare", "--columns=name", "list", table).split()


def test_the_external_network_is_written_as_configured(nb_server: NbServer,
                                                       provider_plugin: Any) -> None:
    assert provider_plugin.client is not None  # the first use writes the external networks
    assert EXT_SWITCH in _names(nb_server, "Logical_Switch")
    ln = _nbctl(nb_server, "--bare", "--columns=type,addresses,options", "list",
                "Logical_Switch_Port", LOCALNET)
    assert "localnet" in ln and "unknown" in ln and "network_name=physnet" in ln
    assert _nbctl(nb_server, "lrp-get-gateway-chassis", EXT_LRP).split() == [
        f"{EXT_LRP}-chassis-1", "1"]
    networks = _nbctl(nb_server, "get", "Logical_Router_Port", EXT_LRP, "networks")
    assert "203.0.113.1/24" in networks
    # the router's way out, and each of its subnets translated to its external address
    routes = _nbctl(nb_server, "lr-route-list", ROUTER)
    assert "0.0.0.0/0" in routes and "203.0.113.254" in routes, routes
    nat = _nbctl(nb_server, "lr-nat-list", ROUTER)
    assert "10.30.0.0/24" in nat and "10.31.0.0/24" in nat and "203.0.113.1" in nat, nat
    # the router's external_ip defaults to its external address
    assert provider_plugin.routers[ROUTER].external_ip == "203.0.113.1"
    assert provider_plugin.routers[ROUTER].external_gateway == "203.0.113.254"


def test_snat_eip_and_plain_pods_as_traced(world: World, nb_server: NbServer,
                                           provider_plugin: Any, central: OvnCentral) -> None:
    world.add_node(0)
    world.add_pod("snat", 0, annotations={f"{ANN}subnets": SUBNET, f"{ANN}snat": "true"})
    world.add_pod("eip", 0, annotations={f"{ANN}subnets": SUBNET, f"{ANN}eip": EIP})
    world.add_pod("plain", 0, annotations={f"{ANN}subnets": SUBNET})
    world.add_pod("other", 0, annotations={f"{ANN}subnets": "behind"})
    world.settle()
    learn_gateway(central)
    # snat: out of the localnet port, its source the router's external address
    t = out(central, world, "snat", proto="tcp")
    assert t.outputs and t.outputs[-1] == LOCALNET, t.text
    assert snat_to(t) == "203.0.113.1", t.text
    # eip: reached from outside at its eip (dnat), replies leave with the eip as source
    eip = _routed(world, "eip").status
    t = inbound(central, EIP, proto="tcp")
    assert t.delivered == (eip.interface,), t.text
    assert f"ct_dnat_in_czone({eip.ip})" in t.text or f"ct_dnat({eip.ip})" in t.text, t.text
    t = out(central, world, "eip")
    assert t.outputs[-1] == LOCALNET and snat_to(t) == EIP, t.text
    # the snat pod is not reachable from outside at the router's address (no dnat)
    t = inbound(central, "203.0.113.1", proto="tcp")
    assert _routed(world, "snat").status.interface not in t.delivered, t.text
    # neither: out by the router's default route, translated by its subnet's snat rule
    # to the router's external_ip (no private address reaches the physical network)
    t = out(central, world, "plain", proto="tcp")
    assert t.outputs[-1] == LOCALNET and snat_to(t) == "203.0.113.1", t.text
    # between the router's subnets nothing leaves and nothing is translated, NAT or not
    other = _routed(world, "other").status
    for pod in ("snat", "eip", "plain"):
        t = out(central, world, pod, dst=other.ip)
        assert t.delivered == (other.interface,), t.text
        assert snat_to(t) is None and LOCALNET not in t.outputs, t.text
    world.assert_converged()


def test_a_restart_writes_nothing_and_a_change_converges(world: World, nb_server: NbServer,
                                                         provider_plugin: Any) -> None:
    assert provider_plugin.client is not None  # the first use writes the external networks
    tables = ("Logical_Switch", "Logical_Switch_Port", "Logical_Router_Port",
              "Gateway_Chassis")
    before = {t: sorted(_names(nb_server, t)) for t in tables}
    again = _provider(nb_server)
    try:
        client = again.client
        assert client.ensure_externals([again.routers[ROUTER].external]) == 0
        assert client.transactions == 0, "a restart wrote the external network again"
        assert {t: sorted(_names(nb_server, t)) for t in tables} == before
    finally:
        again.close()
    # two chassis now, chassis-2 first; and another physical network name
    moved = _provider(nb_server, [{"name": ROUTER, "external": {
        **EXTERNAL, "chassis": ["chassis-2", "chassis-1"], "network_name": "physnet2"}}])
    try:
        assert moved.client is not None  # the first use writes the external networks
        got = _nbctl(nb_server, "lrp-get-gateway-chassis", EXT_LRP).split()
        assert got == [f"{EXT_LRP}-chassis-2", "2", f"{EXT_LRP}-chassis-1", "1"]
        assert len(_names(nb_server, "Gateway_Chassis")) == 2
        assert "network_name=physnet2" in _nbctl(nb_server, "get", "Logical_Switch_Port",
                                                 LOCALNET, "options")
    finally:
        moved.close()


def test_an_external_network_broken_behind_podnets_back_is_repaired_by_a_route(
        world: World, nb_server: NbServer, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("first", 0, annotations={f"{ANN}subnets": SUBNET})
    world.settle()
    _nbctl(nb_server, "lsp-del", LOCALNET)
    _nbctl(nb_server, "lrp-del-gateway-chassis", EXT_LRP, "chassis-1")
    client = provider_plugin.client
    _wait(lambda: client.port(LOCALNET) is None and not client.external_ok(
        provider_plugin.routers[ROUTER].external), "the replica to see the damage")
    world.add_pod("second", 0, annotations={f"{ANN}subnets": SUBNET})
    world.settle()
    _routed(world, "second")
    assert "network_name=physnet" in _nbctl(nb_server, "get", "Logical_Switch_Port",
                                            LOCALNET, "options")
    assert _nbctl(nb_server, "lrp-get-gateway-chassis", EXT_LRP).split() == [
        f"{EXT_LRP}-chassis-1", "1"]
    world.assert_converged()


def test_an_external_network_removed_from_the_config_is_deleted(
        nb_server: NbServer, provider_plugin: Any) -> None:
    assert provider_plugin.client is not None  # the first use writes the external networks
    assert EXT_SWITCH in _names(nb_server, "Logical_Switch")
    plain = _provider(nb_server, [{"name": ROUTER}])
    try:
        assert plain.client is not None  # the first use writes the external networks
        assert EXT_SWITCH not in _names(nb_server, "Logical_Switch")
        assert LOCALNET not in _names(nb_server, "Logical_Switch_Port")
        assert EXT_LRP not in _names(nb_server, "Logical_Router_Port")
        assert _names(nb_server, "Gateway_Chassis") == []
        assert ROUTER in _names(nb_server, "Logical_Router")  # the router stays
        assert _nbctl(nb_server, "lr-nat-list", ROUTER).strip() == ""
        assert "0.0.0.0/0" not in _nbctl(nb_server, "lr-route-list", ROUTER)
    finally:
        plain.close()


@pytest.mark.parametrize(("external", "key", "text"), [
    ({**EXTERNAL, "gateway": "198.51.100.1"}, "external.gateway", "not on the external"),
    ({**EXTERNAL, "address": "203.0.113.1"}, "external.address", "ADDRESS/PREFIXLEN"),
    ({**EXTERNAL, "chassis": []}, "external.chassis", "non-empty list"),
    ({**EXTERNAL, "cidr": "192.0.2.0/24"}, "external.address", "not in 192.0.2.0/24"),
    ({k: v for k, v in EXTERNAL.items() if k != "network_name"}, "external.network_name",
     "missing"),
])
def test_a_bad_external_network_is_refused_naming_the_key(
        external: dict[str, Any], key: str, text: str) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    with pytest.raises(ConfigError) as err:
        OvnProvider("unix:nowhere", SUBNETS, routers=[{"name": ROUTER, "external": external}])
    assert f"providers.ovn.routers[0].{key}" in str(err.value) and text in str(err.value)


def test_an_external_gateway_other_than_the_external_networks_is_refused() -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    with pytest.raises(ConfigError, match=r"routers\[0\]\.external_gateway"):
        OvnProvider("unix:nowhere", SUBNETS, routers=[
            {"name": ROUTER, "external_gateway": "100.64.0.1", "external": EXTERNAL}])
