"""The OVN provider's VIPs, NAT and changed requests against a real NB server: VIPs held
by the IPAM and modelled as virtual ports (as Kube-OVN does), EIP/SNAT pods out of their
node's port group with one NAT rule per request and family, and port security, security
groups, VIPs and EIP changed on a running pod written to NB (an address change refused)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_ovn_nat import OUTSIDE, inbound, learn_gateway, out, snat_to
from test_ovn_provider import (  # noqa: F401 - the same NB and trace helpers
    _nbctl,
    ground_truth,
    northd,
    send,
)

from podnet.core.cluster.port import POD, POD_NETWORK
from podnet.core.models import Phase
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.harness import HookRecorder, World

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

ANN = "podnet.io/"
SUBNETS = [
    {"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True},
    {"name": "tiny", "cidr": "10.18.0.0/29"},
    {"name": "small-r", "cidr": "10.23.0.0/24", "router": "lr-edge"},
    {"name": "dual-r", "cidr": "10.24.0.0/24,fd00:24::/120", "router": "lr-dual"},
]
#: lr-edge has a way out (NAT forwards, traced below); lr-dual has none (NAT rules and
#: source routes are written, and translate nothing)
ROUTERS = [{"name": "lr-edge", "external_ip": "203.0.113.1",
            "external": {"address": "100.64.0.1/24", "gateway": "100.64.0.254",
                         "network_name": "physnet", "chassis": ["chassis-1"]}},
           {"name": "lr-dual", "external_gateway": "100.64.0.1"}]
EDGE_OUT = ("0.0.0.0/0", "100.64.0.254")


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


@pytest.fixture
def provider_plugin(nb_server: NbServer) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, routers=ROUTERS, seed=1,
                         security_groups={"web": {}, "db": {}})
    yield plugin
    plugin.close()




def _routed(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.phase is Phase.ROUTED, pn
    return pn


def _annotate(world: World, pod: str, annotations: dict[str, str | None]) -> None:
    with world.quiet():
        world.cluster.patch(POD, pod, {"metadata": {"annotations": annotations}},
                            world.namespace)


def _ready(pn: Any) -> Any:
    return next(c for c in pn.status.conditions if c.type == "Ready")


def _members(provider: Any, group: str) -> set[str]:
    client = provider.client
    with client.reading():
        pg = client.api.lookup("Port_Group", group, default=None)
        return set() if pg is None else {p.name for p in pg.ports}


def _nats(provider: Any, router: str) -> set[tuple[str, str, str]]:
    """The pods' NAT rules (not the router's own, for its subnets)."""
    client = provider.client
    with client.reading():
        lr = client.api.lookup("Logical_Router", router, default=None)
        return {(n.type, n.external_ip, n.logical_ip) for n in lr.nat
                if "podnet/key" in n.external_ids} if lr else set()


def _routes(provider: Any, router: str) -> set[tuple[str, str]]:
    client = provider.client
    with client.reading():
        lr = client.api.lookup("Logical_Router", router, default=None)
        return {(r.ip_prefix, r.nexthop) for r in lr.static_routes} if lr else set()


def _vport(provider: Any, name: str) -> tuple[str, dict[str, str]] | None:
    lsp = provider.client.port(name)
    return None if lsp is None else (lsp.type, dict(lsp.options))


# --- item 3: VIPs reserved, as virtual ports ------------------------------------------------


def test_vips_are_held_as_virtual_ports_through_a_restart_and_freed_with_the_pod(
        world: World, provider_plugin: Any) -> None:
    """A pod's VIPs are never another pod's address (nor after a restart: NB holds them
    as virtual ports), its port security lists them, and they go with the pod."""
    world.add_node(0)
    vips = ["10.18.0.2", "10.18.0.3"]
    world.add_pod("a", 0, annotations={f"{ANN}subnets": "tiny", f"{ANN}vips": ",".join(vips),
                                       f"{ANN}port-security": "true"})
    world.settle()
    a = _routed(world, "a")
    assert a.status.ip not in vips
    lsp = provider_plugin.client.port(a.status.interface)
    assert list(lsp.addresses) == [f"{a.status.mac} {a.status.ip}"]
    assert list(lsp.port_security) == [f"{a.status.mac} {a.status.ip} {' '.join(vips)}"]
    for vip in vips:
        assert _vport(provider_plugin, f"tiny-vip-{vip}") == (
            "virtual", {"virtual-ip": vip, "virtual-parents": a.status.interface})
    provider_plugin.close()  # the provider forgets everything: it reads NB again
    world.restart()
    for name in ("b", "c", "d"):
        world.add_pod(name, 0, annotations={f"{ANN}subnets": "tiny"})
    world.settle(advance=5)
    records = {n: world.record_of(n) for n in ("b", "c", "d")}
    got = {pn.status.ip for pn in records.values() if pn and pn.status.phase is Phase.ROUTED}
    assert got | {a.status.ip} == {"10.18.0.4", "10.18.0.5", "10.18.0.6"}
    waiting = [n for n, pn in records.items() if pn and pn.status.phase is Phase.PENDING]
    assert len(waiting) == 1  # the subnet is full: its VIPs are not free addresses
    world.delete_pod("a")
    world.settle(advance=5)
    for vip in vips:
        assert provider_plugin.client.port(f"tiny-vip-{vip}") is None
    assert _routed(world, waiting[0]).status.ip in {*vips, a.status.ip}
    world.assert_converged()


def test_a_pods_own_vips_are_never_its_address(world: World) -> None:
    """The address is chosen before the VIPs are held: the pod's own VIPs are not free
    for it either (tiny's free addresses are .2 to .6: four VIPs leave it .6)."""
    world.add_node(0)
    world.add_pod("crowd", 0, annotations={
        f"{ANN}subnets": "tiny", f"{ANN}vips": "10.18.0.2,10.18.0.3,10.18.0.4,10.18.0.5"})
    world.settle()
    assert _routed(world, "crowd").status.ip == "10.18.0.6"


def test_a_vip_another_pod_holds_is_a_condition_naming_the_annotation(
        world: World, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("a", 0, annotations={f"{ANN}vips": "10.16.5.5"})
    world.settle()
    a = _routed(world, "a")
    world.add_pod("same-vip", 0, annotations={f"{ANN}vips": "10.16.5.5"})
    world.add_pod("vip-is-an-address", 0, annotations={f"{ANN}vips": a.status.ip})
    world.add_pod("address-is-a-vip", 0, annotations={f"{ANN}ip-address": "10.16.5.5"})
    world.settle(advance=5)
    for name, field in (("same-vip", "vips"), ("vip-is-an-address", "vips"),
                        ("address-is-a-vip", "ip-address")):
        pn = world.record_of(name)
        assert pn is not None and pn.status.phase is Phase.PENDING and pn.status.ip is None
        ready = _ready(pn)
        assert f"metadata.annotations[podnet.io/{field}]" in ready.message, ready
        assert "conflict" in ready.message and ("10.16.5.5" in ready.message
                                                or a.status.ip in ready.message)
        events = world.cluster.events_for(pn.metadata.name, world.namespace)
        assert any(f"podnet.io/{field}" in e["message"] for e in events), events
    assert _routed(world, "a").status.ip == a.status.ip  # the holder is unaffected
    assert _vport(provider_plugin, "ovn-default-vip-10.16.5.5") == (
        "virtual", {"virtual-ip": "10.16.5.5", "virtual-parents": a.status.interface})


def test_the_sweep_takes_the_virtual_ports_of_a_vanished_record_only(
        world: World, provider_plugin: Any) -> None:
    """podnet_sweep: a VIP's virtual port belongs to its pod's record. A record deleted
    without its release leaves both ports; both are swept after the grace and the VIP is
    free again; a live record's virtual port is never reported."""
    world.add_node(0)
    world.add_pod("gone", 0, annotations={f"{ANN}vips": "10.16.6.6"})
    world.add_pod("stays", 0, annotations={f"{ANN}vips": "10.16.7.7"})
    world.settle()
    gone = _routed(world, "gone")
    with world.quiet():
        record = world.cluster.get(POD_NETWORK, gone.metadata.name, world.namespace)
        record["metadata"]["finalizers"] = []
        world.cluster.update(POD_NETWORK, record)
        world.cluster.delete(POD, "gone", world.namespace, grace_period_seconds=0)
    world.settle()
    assert provider_plugin.client.port("ovn-default-vip-10.16.6.6") is not None  # for now
    owners = frozenset(pn.key for pn in world.records())
    found = provider_plugin.podnet_sweep(provider="ovn", owners=owners, remove=frozenset())
    assert sorted(found) == sorted([gone.status.interface, "ovn-default-vip-10.16.6.6"])
    policy = world.policy()
    world.settle(advance=policy.gc_period + 1)
    world.settle(advance=policy.leaked_ip_expiry + 2 * policy.gc_period + 1)
    assert provider_plugin.client.port("ovn-default-vip-10.16.6.6") is None
    assert provider_plugin.client.port(gone.status.interface) is None
    assert provider_plugin.ipam.owner("10.16.6.6") is None
    assert provider_plugin.client.port("ovn-default-vip-10.16.7.7") is not None
    assert provider_plugin.ipam.owner("10.16.7.7") is not None
    world.assert_converged()


# --- item 11a: EIP / SNAT ---------------------------------------------------------------------


def test_an_eip_and_snat_pod_leaves_the_node_group_and_forwards_at_its_eip(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("both", 0, annotations={f"{ANN}subnets": "small-r",
                                          f"{ANN}eip": "203.0.113.30", f"{ANN}snat": "true"})
    world.add_pod("plain", 0, annotations={f"{ANN}subnets": "small-r"})
    world.settle()
    both, plain = _routed(world, "both"), _routed(world, "plain")
    members = _members(provider_plugin, "node_node_0000")
    assert plain.status.interface in members and both.status.interface not in members
    # with an eip, its rule is the snat too: a second rule of the same /32 would leave
    # OVN's choice of source to chance (seen: either, from one run to the next)
    assert _nats(provider_plugin, "lr-edge") == {
        ("dnat_and_snat", "203.0.113.30", both.status.ip)}
    # a router with an external network: its default route, no source route per pod
    assert _routes(provider_plugin, "lr-edge") == {EDGE_OUT}
    with northd(nb_server) as central:
        learn_gateway(central, "lr-edge", "100.64.0.254")
        # out with the eip as source, in at the eip to the pod
        t = out(central, world, "both", router="lr-edge", proto="tcp")
        assert t.outputs[-1] == "ext-lr-edge-localnet" and snat_to(t) == "203.0.113.30", \
            t.text
        t = inbound(central, "203.0.113.30", router="lr-edge", proto="tcp")
        assert t.delivered == (both.status.interface,), t.text
        # the plain pod leaves translated to the router's external_ip
        t = out(central, world, "plain", router="lr-edge")
        assert t.outputs[-1] == "ext-lr-edge-localnet" and snat_to(t) == "203.0.113.1", \
            t.text
    world.assert_converged()


def test_nat_on_a_dual_stack_pod_takes_the_eips_family_or_is_refused(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("v4", 0, annotations={f"{ANN}subnets": "dual-r", f"{ANN}eip": "198.51.100.7"})
    world.add_pod("v6", 0, annotations={f"{ANN}subnets": "dual-r", f"{ANN}eip": "2001:db8::7"})
    world.settle(advance=5)
    v4 = _routed(world, "v4")
    assert v4.status.ipv6
    assert _nats(provider_plugin, "lr-dual") == {("dnat_and_snat", "198.51.100.7", v4.status.ip)}
    assert _routes(provider_plugin, "lr-dual") == {(v4.status.ip, "100.64.0.1")}
    with northd(nb_server) as central:
        # lr-dual has no external network: its NAT translates nothing, the packet has
        # no way to its source route's next hop
        t = out(central, world, "v4", dst=OUTSIDE, router="lr-dual")
        assert t.dropped and t.stage == "lr_in_ip_routing" and snat_to(t) is None, t.text
    v6 = world.record_of("v6")
    assert v6 is not None and v6.status.phase is not Phase.ROUTED
    ready = _ready(v6)
    assert "metadata.annotations[podnet.io/eip]" in ready.message and "IPv6" in ready.message
    assert ready.reason == "InvalidRequest"


# --- item 11b: requests changed on a running pod ----------------------------------------------


def test_port_security_groups_and_vips_changed_on_a_running_pod_are_written(
        world: World, provider_plugin: Any, hook_calls: HookRecorder,
        nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0)
    world.add_pod("peer", 0)
    world.settle()
    w = _routed(world, "w")
    port = w.status.interface
    hook_calls.clear()
    _annotate(world, "w", {f"{ANN}port-security": "true", f"{ANN}security-groups": "web",
                           f"{ANN}vips": "10.16.9.9"})
    world.settle()
    w = _routed(world, "w")
    assert w.spec.requests.vips == ("10.16.9.9",)
    with northd(nb_server) as central:
        # port security, by packets: the pod's own address and its VIP pass, a spoofed
        # address or MAC is dropped where OVN applies it
        for proto in ("icmp", "tcp"):
            for source in (w.status.ip, "10.16.9.9"):
                ok = send(central, world, "w", "peer", ip_src=source, proto=proto)
                assert ok.delivered == (_routed(world, "peer").status.interface,), ok.text
            for spoof in ({"ip_src": "10.16.9.10"}, {"eth_src": "0a:00:00:00:0b:ad"}):
                bad = send(central, world, "w", "peer", proto=proto, **spoof)
                assert bad.dropped and bad.stage == "ls_in_apply_port_sec", bad.text
    lsp = provider_plugin.client.port(port)
    assert list(lsp.port_security) == [f"{w.status.mac} {w.status.ip} 10.16.9.9"]
    assert port in _members(provider_plugin, "sg_web")
    assert _vport(provider_plugin, "ovn-default-vip-10.16.9.9") == (
        "virtual", {"virtual-ip": "10.16.9.9", "virtual-parents": port})
    assert provider_plugin.ipam.owner("10.16.9.9") == port
    assert [e.trigger for e in hook_calls.transitions("pod_network", ok=True)] == \
        ["repair", "route"]
    _annotate(world, "w", {f"{ANN}port-security": None, f"{ANN}security-groups": None,
                           f"{ANN}vips": None})
    world.settle()
    w = _routed(world, "w")
    assert list(provider_plugin.client.port(port).port_security) == []
    with northd(nb_server) as central:  # no port security: any source passes
        assert send(central, world, "w", "peer", ip_src="10.16.9.10").delivered
    assert port not in _members(provider_plugin, "sg_web")
    assert provider_plugin.client.port("ovn-default-vip-10.16.9.9") is None
    assert provider_plugin.ipam.owner("10.16.9.9") is None
    world.assert_converged()


def test_an_eip_added_to_a_running_pod_takes_it_out_of_its_node_group(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0, annotations={f"{ANN}subnets": "small-r"})
    world.settle()
    w = _routed(world, "w")
    assert w.status.interface in _members(provider_plugin, "node_node_0000")
    _annotate(world, "w", {f"{ANN}eip": "203.0.113.40"})
    world.settle()
    assert _routed(world, "w").spec.requests.eip == "203.0.113.40"
    assert w.status.interface not in _members(provider_plugin, "node_node_0000")
    assert _nats(provider_plugin, "lr-edge") == {("dnat_and_snat", "203.0.113.40", w.status.ip)}
    with northd(nb_server) as central:
        learn_gateway(central, "lr-edge", "100.64.0.254")
        t = inbound(central, "203.0.113.40", router="lr-edge")
        assert t.delivered == (w.status.interface,), t.text
        _annotate(world, "w", {f"{ANN}eip": None})
        world.settle()
        assert w.status.interface in _members(provider_plugin, "node_node_0000")
        assert _nats(provider_plugin, "lr-edge") == set()
        assert _routes(provider_plugin, "lr-edge") == {EDGE_OUT}
        # the eip gone: nothing reaches the pod at it, and it leaves as the router
        t = inbound(central, "203.0.113.40", router="lr-edge")
        assert not t.delivered, t.text
        t = out(central, world, "w", router="lr-edge")
        assert snat_to(t) == "203.0.113.1", t.text


def test_an_address_change_on_a_running_pod_is_refused_with_a_condition(
        world: World, provider_plugin: Any) -> None:
    world.add_node(0)
    world.add_pod("w", 0)
    world.settle()
    w = _routed(world, "w")
    entry = list(provider_plugin.client.port(w.status.interface).addresses)
    _annotate(world, "w", {f"{ANN}ip-address": "10.16.77.77", f"{ANN}security-groups": "db"})
    world.settle()
    after = _routed(world, "w")
    assert after.status.ip == w.status.ip and after.spec.requests.ip_address is None
    assert after.spec.requests.security_groups == ("db",)  # the rest is applied
    assert list(provider_plugin.client.port(w.status.interface).addresses) == entry
    assert w.status.interface in _members(provider_plugin, "sg_db")
    said = next(c for c in after.status.conditions if c.type == "RequestsApplied")
    assert said.status == "False" and "podnet.io/ip-address" in said.message
    events = world.cluster.events_for("w", world.namespace)
    assert any("podnet.io/ip-address" in e["message"] for e in events), events
    _annotate(world, "w", {f"{ANN}ip-address": None})
    world.settle()
    said = next(c for c in _routed(world, "w").status.conditions
                if c.type == "RequestsApplied")
    assert said.status == "True"
    world.assert_converged()
