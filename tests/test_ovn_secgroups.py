"""Security groups that secure: rules in ``providers.ovn.security_groups`` become ACLs on
the groups' port groups, checked with ``ovn-trace`` through northd's flows. A member
gets only what its groups allow (the rest is dropped in an ACL stage), replies pass
(allow-related), a pod in no group gets everything; a restart or re-applied config writes
no duplicate, a changed rule replaces the old ACL, an unused group is swept; a bad group
fails only the pods naming it, with a condition and an Event naming the group's key."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_ovn_provider import (
    _nbctl,
    _wait,
    northd,  # the same SB + northd on the test's NB server
)

from podnet.core.cluster.port import POD, POD_NETWORK
from podnet.core.models import Phase
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.harness import World
from podnet.testing.ovnbed import OvnCentral, Trace, parse_trace

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

ANN = "podnet.io/"
SG = f"{ANN}security-groups"
SUBNETS = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True},
           {"name": "dual", "cidr": "10.17.0.0/24,fd00:17::/120"}]
GROUPS: dict[str, Any] = {
    # ingress tcp/80 only; egress not restricted by this group
    "web": {"ingress": [{"protocol": "tcp", "port": 80}]},
    # ingress tcp/5432 from web's members only; nothing may start out of it
    "db": {"ingress": [{"protocol": "tcp", "port": 5432, "groups": ["web"]}], "egress": []},
    "pingable": {"ingress": [{"protocol": "icmp", "from": "10.16.0.0/16"}], "egress": []},
    "bad-proto": {"ingress": [{"protocol": "sctp", "port": 80}]},
    "bad-port": {"ingress": [{"protocol": "tcp", "port": 65536}]},
    "bad-cidr": {"egress": [{"protocol": "udp", "to": ["10.0.0.0/8", "10.300.0.0/16"]}]},
}


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


@pytest.fixture
def provider_plugin(nb_server: NbServer) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, seed=3, security_groups=GROUPS)
    yield plugin
    plugin.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Any:
    return provider_plugin.nb_addresses


def _routed(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.phase is Phase.ROUTED, pn
    return pn


def _status(world: World, pod: str) -> Any:
    """A record's status, routed or not (a pod whose group went bad keeps its port)."""
    pn = world.record_of(pod)
    assert pn is not None and pn.status.interface, pn
    return pn.status


def send(central: OvnCentral, world: World, src: str, dst: str, *, proto: str = "tcp",
         dport: int = 80, sport: int = 40000, reply: bool = False) -> Trace:
    """Where OVN takes one packet from pod ``src`` to pod ``dst``: a TCP SYN to ``dport``
    or an ICMP echo request; ``reply``: a SYN-ACK from ``sport`` of a connection conntrack
    knows (``trk,est,rpl`` at every ``ct_next``)."""
    a, b = _status(world, src), _status(world, dst)
    flow = [f'inport=="{a.interface}"', f"eth.src=={a.mac}", f"eth.dst=={b.mac}",
            f"ip4.src=={a.ip}", f"ip4.dst=={b.ip}", "ip.ttl==64"]
    if proto == "icmp":
        flow.append("icmp4.type==8 && icmp4.code==0")
    else:
        flow.append(f"tcp.src=={sport} && tcp.dst=={dport} && tcp.flags=={0x12 if reply else 2}")
    ct = [f"--ct={'trk,est,rpl' if reply else 'trk,new'}"] * 4
    central.sync()
    done = central.tool("ovn-trace", f"--db={central.sb_remote}", "--detailed", *ct,
                        a.subnet, " && ".join(flow))
    return parse_trace(done.stdout)


def _delivered(t: Trace, world: World, dst: str) -> None:
    assert t.delivered == (_status(world, dst).interface,), t.text


def _acl_dropped(t: Trace) -> None:
    assert t.dropped and t.stage is not None and "acl" in t.stage, t.text


def _events(world: World, pod: str) -> list[str]:
    """The messages of the Events on the pod and on its records."""
    cluster = world.cluster
    with world.quiet():
        objs = [cluster.get(POD, pod, world.namespace)]
        objs += [pn for pn in cluster.list(POD_NETWORK, world.namespace).items
                 if pn["spec"].get("podName") == pod]
        return [e.get("message", "") for o in objs for e in cluster.events_for(o)]


def _acls(provider: Any) -> dict[str, list[tuple[str, int, str, str]]]:
    """podnet's ACLs by port group, as NB holds them."""
    client = provider.client
    with client.reading() as tables:
        return {pg.name: sorted((a.direction, int(a.priority), a.match, a.action)
                                for a in pg.acls)
                for pg in tables["Port_Group"].rows.values()}


def test_members_get_only_what_their_groups_allow(world: World, provider_plugin: Any,
                                                  nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.add_pod("d", 0, annotations={SG: "db"})
    world.add_pod("p", 0, annotations={SG: "pingable,web"})
    world.add_pod("c", 0)  # in no group
    world.add_pod("n", 0)  # in no group
    world.settle()
    with northd(nb_server) as central:
        # web: tcp/80 in, nothing else in
        _delivered(send(central, world, "c", "w", dport=80), world, "w")
        _acl_dropped(send(central, world, "c", "w", dport=81))
        _acl_dropped(send(central, world, "c", "w", proto="icmp"))
        # its egress is not restricted: w starts anything
        _delivered(send(central, world, "w", "c", dport=81), world, "c")
        _delivered(send(central, world, "w", "c", proto="icmp"), world, "c")
        # a pod in no group gets everything, from members and others alike
        for dport in (80, 81, 22):
            _delivered(send(central, world, "c", "n", dport=dport), world, "n")
        _delivered(send(central, world, "n", "c", proto="icmp"), world, "c")
        # db: tcp/5432 from web's members only, and it starts nothing
        _delivered(send(central, world, "w", "d", dport=5432), world, "d")
        _acl_dropped(send(central, world, "c", "d", dport=5432))
        _acl_dropped(send(central, world, "w", "d", dport=5433))
        _acl_dropped(send(central, world, "d", "c", dport=80))
        # ... but its replies pass: allow-related (conntrack says the reply is of a
        # connection it knows)
        _delivered(send(central, world, "d", "w", sport=5432, dport=40000, reply=True),
                   world, "w")
        # two groups: the union of their rules (icmp from pingable, tcp/80 from web)
        _delivered(send(central, world, "c", "p", proto="icmp"), world, "p")
        _delivered(send(central, world, "c", "p", dport=80), world, "p")
        _acl_dropped(send(central, world, "c", "p", dport=81))
    # one membership per group, no other
    ports = {pg.name: {p.name for p in pg.ports}
             for pg in provider_plugin.client.rows("Port_Group")}
    assert ports["sg_web"] == {_status(world, n).interface for n in ("w", "p")}, ports
    assert ports["sg_db"] == {_status(world, "d").interface}, ports
    world.assert_converged()


def test_rules_are_written_once_and_follow_the_config(world: World, provider_plugin: Any,
                                                      nb_server: NbServer) -> None:
    from podnet.plugins.ovn.provider import OvnProvider

    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.add_pod("c", 0)
    world.add_pod("old", 0, annotations={SG: "pingable"})
    world.settle()
    first = _acls(provider_plugin)
    assert len(first["sg_web"]) == 2 + 2, first  # its rules, the drops
    # a provider restarting on the same NB, and the same config applied again: no write
    again = OvnProvider(nb_server.remote, SUBNETS, seed=4, security_groups=GROUPS)
    try:
        before = again.client.transactions  # the start's sync: nothing to write
        again.podnet_configure("ovn", {"security_groups": GROUPS})
        again.client  # noqa: B018 - the next use syncs the groups
        assert again.client.transactions == before == 0
        assert _acls(again) == first
    finally:
        again.close()
    # a changed rule replaces the old ACL: tcp/8080 now, tcp/80 no longer
    changed = {**GROUPS, "web": {"ingress": [{"protocol": "tcp", "port": "8080-8081"}]}}
    del changed["pingable"]
    world.add_pod("x", 0)
    provider_plugin.podnet_configure("ovn", {"security_groups": changed})
    provider_plugin.client  # noqa: B018
    now = _acls(provider_plugin)
    web = [m for _, _, m, _ in now["sg_web"]]
    assert any("tcp.dst >= 8080 && tcp.dst <= 8081" in m for m in web), web
    assert not any("tcp.dst == 80" in m for m in web), web
    assert len(now["sg_web"]) == 4
    # pingable is no longer defined but still holds a pod: kept with its last rules
    assert now["sg_pingable"] == first["sg_pingable"]
    world.settle()
    with northd(nb_server) as central:
        _acl_dropped(send(central, world, "c", "w", dport=80))
        _delivered(send(central, world, "c", "w", dport=8081), world, "w")
    # once its last member is gone, the sweep deletes it (and its ACLs with it)
    world.delete_pod("old")
    world.settle()
    provider_plugin.podnet_sweep("ovn", owners=(), remove=())
    assert "sg_pingable" not in _acls(provider_plugin)
    assert "sg_web" in _acls(provider_plugin)  # defined: kept, members or not


def test_a_bad_group_fails_only_the_pods_naming_it(world: World, provider_plugin: Any,
                                                   nb_server: NbServer) -> None:
    world.add_node(0)
    cases = {"bp": ("bad-proto", "bad-proto.ingress[0].protocol", "sctp"),
             "bo": ("bad-port", "bad-port.ingress[0].port", "65536"),
             "bc": ("bad-cidr", "bad-cidr.egress[0].to", "10.300.0.0/16"),
             "un": ("nope", SG, "unknown security group 'nope'")}
    for pod, (group, _, _) in cases.items():
        world.add_pod(pod, 0, annotations={SG: f"web,{group}"})
    world.add_pod("w", 0, annotations={SG: "web"})
    world.add_pod("c", 0)
    world.settle()
    for pod, (group, field, detail) in cases.items():
        pn = world.record_of(pod)
        assert pn is not None and pn.status.phase is not Phase.ROUTED, pn
        said = [c for c in pn.status.conditions if c.status == "False"]
        text = " ".join(c.message for c in said)
        key = f"providers.ovn.security_groups.{field}" if field != SG else SG
        assert key in text and detail in text and group in text, said
        events = _events(world, pod)
        assert any(key in e and group in e for e in events), events
        # nothing of a bad pod's port joined a group
        assert pn.status.interface not in {
            p.name for pg in provider_plugin.client.rows("Port_Group") for p in pg.ports}
    assert "sg_bad_proto" not in _acls(provider_plugin)
    with northd(nb_server) as central:  # the pods using good groups work
        _delivered(send(central, world, "c", "w", dport=80), world, "w")
        _acl_dropped(send(central, world, "c", "w", dport=81))


def test_a_port_taken_out_of_its_group_behind_podnets_back_is_put_back(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    """The port is written with its group once (allocate), route finds it in place; a port
    removed from the group by hand is seen by verify and put back by the repair."""
    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.add_pod("x", 0, annotations={SG: "web"})
    world.settle()
    port = _routed(world, "w").status.interface
    client = provider_plugin.client
    lsp = client.port(port)
    assert client.in_port_group("sg_web", lsp)
    assert not client.in_port_group("sg_db", lsp)
    _nbctl(nb_server, "remove", "Port_Group", "sg_web", "ports", str(lsp.uuid))
    _wait(lambda: not client.in_port_group("sg_web", client.port(port)),
          "the removal to reach the IDL")
    other = client.port(_routed(world, "x").status.interface)
    assert client.in_port_group("sg_web", other), "the other member was dropped too"
    world.settle(advance=world.policy().verify_period + 1)
    assert client.in_port_group("sg_web", client.port(port))
    world.assert_converged()


def test_a_group_made_bad_under_a_running_pod_is_said_and_its_rules_kept(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.add_pod("c", 0)
    world.settle()
    before = _acls(provider_plugin)
    broken = {**GROUPS, "web": {"ingress": [{"protocol": "tcp", "port": 0}]}}
    provider_plugin.podnet_configure("ovn", {"security_groups": broken})
    world.settle(advance=world.policy().verify_period + 1)
    pn = world.record_of("w")
    assert pn is not None
    text = " ".join(c.message for c in pn.status.conditions if c.status == "False")
    assert "providers.ovn.security_groups.web.ingress[0].port" in text, pn.status.conditions
    assert any("security_groups.web.ingress[0].port" in e for e in _events(world, "w"))
    # fail static: the port keeps the group's last good rules, nothing is opened
    assert _acls(provider_plugin)["sg_web"] == before["sg_web"]
    with northd(nb_server) as central:
        _delivered(send(central, world, "c", "w", dport=80), world, "w")
        _acl_dropped(send(central, world, "c", "w", dport=81))
    # fixed, and the controller restarted with the new config (the config is read at
    # start): the pod is routed again, with the fixed rules
    fixed = {**GROUPS, "web": {"ingress": [{"protocol": "tcp", "port": 81}]}}
    provider_plugin.podnet_configure("ovn", {"security_groups": fixed})
    world.restart()
    world.settle()
    _routed(world, "w")
    with northd(nb_server) as central:
        _acl_dropped(send(central, world, "c", "w", dport=80))
        _delivered(send(central, world, "c", "w", dport=81), world, "w")


def test_acls_removed_behind_podnets_back_come_back(world: World, provider_plugin: Any,
                                                   nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.settle()
    before = _acls(provider_plugin)
    client = provider_plugin.client
    subprocess.run(["ovn-nbctl", f"--db={nb_server.remote}", "acl-del", "sg_web"],
                   check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 5
    while _acls(provider_plugin)["sg_web"] and time.monotonic() < deadline:
        time.sleep(0.01)
    assert client.acls_ok({"sg_web": []})
    world.settle(advance=world.policy().verify_period + 1)
    assert _acls(provider_plugin) == before
    _routed(world, "w")


@pytest.mark.parametrize(("body", "field", "detail"), [
    ({"ingress": [{"protocol": "sctp"}]}, "g.ingress[0].protocol", "unknown protocol 'sctp'"),
    ({"ingress": [{"protocol": "tcp", "port": 0}]}, "g.ingress[0].port", "out of range"),
    ({"ingress": [{"protocol": "udp", "port": "90-80"}]}, "g.ingress[0].port", "out of range"),
    ({"ingress": [{"protocol": "tcp", "port": "http"}]}, "g.ingress[0].port", "'http'"),
    ({"ingress": [{"protocol": "icmp", "port": 8}]}, "g.ingress[0].port", "tcp or udp"),
    ({"egress": [{"to": "10.0.0.1/8"}]}, "g.egress[0].to", "host bits"),
    ({"egress": [{"to": ["192.0.2.0/33"]}]}, "g.egress[0].to", "not a CIDR"),
    ({"egress": [{"from": "10.0.0.0/8"}]}, "g.egress[0].from", "egress rules say 'to'"),
    ({"ingress": [{"groups": ["ghost"]}]}, "g.ingress[0].groups", "'ghost'"),
    ({"ingress": {"protocol": "tcp"}}, "g.ingress", "a list of rules"),
    ({"sideways": []}, "g.sideways", "ingress or egress"),
])
def test_each_rule_is_checked_and_the_error_names_the_field(body: Any, field: str,
                                                            detail: str) -> None:
    from podnet.plugins.ovn.secgroups import BadGroup, SecurityGroup, parse_groups

    got = parse_groups({"g": body, "ok": {"ingress": [{"protocol": "tcp", "port": 1}]}},
                       "providers.ovn.security_groups")
    bad = got["g"]
    assert isinstance(bad, BadGroup), bad
    assert bad.field == f"providers.ovn.security_groups.{field}" and detail in bad.message, bad
    assert isinstance(got["ok"], SecurityGroup)  # the other group is unaffected


def test_names_sharing_a_port_group_and_a_section_not_a_mapping_are_refused() -> None:
    from podnet.core.errors import ConfigError
    from podnet.plugins.ovn.provider import OvnProvider
    from podnet.plugins.ovn.secgroups import BadGroup, parse_groups

    got = parse_groups({"a-b": {}, "a.b": {}, "c": {}}, "sg")
    assert isinstance(got["a-b"], BadGroup) and isinstance(got["a.b"], BadGroup)
    assert "sg_a_b" in got["a-b"].message and not isinstance(got["c"], BadGroup)
    with pytest.raises(ConfigError) as info:
        OvnProvider().podnet_configure(provider="ovn", config={"security_groups": ["web"]})
    assert "providers.ovn.security_groups" in str(info.value)


def _trace6(central: OvnCentral, world: World, src: str, dst: str, what: str) -> Trace:
    """An IPv6 packet from pod ``src`` to pod ``dst``: a neighbour solicitation for
    ``dst``'s address (``nd``) or an ICMPv6 echo request (``echo``)."""
    a, b = _status(world, src), _status(world, dst)
    flow = [f'inport=="{a.interface}"', f"eth.src=={a.mac}", f"eth.dst=={b.mac}",
            f"ip6.src=={a.ipv6}", f"ip6.dst=={b.ipv6}"]
    if what == "nd":
        flow += ["ip.ttl==255", "icmp6.type==135", "icmp6.code==0", f"nd.target=={b.ipv6}"]
    else:
        flow += ["ip.ttl==64", "icmp6.type==128", "icmp6.code==0"]
    central.sync()
    done = central.tool("ovn-trace", f"--db={central.sb_remote}", "--detailed",
                        *["--ct=trk,new"] * 4, a.subnet, " && ".join(flow))
    return parse_trace(done.stdout)


def test_neighbour_discovery_passes_a_member_that_may_send_nothing(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("d", 0, annotations={SG: "db", f"{ANN}subnets": "dual"})
    world.add_pod("c", 0, annotations={f"{ANN}subnets": "dual"})
    world.settle()
    with northd(nb_server) as central:
        # db allows no egress: its ICMPv6 echo is dropped in the ACL stage ...
        _acl_dropped(_trace6(central, world, "d", "c", "echo"))
        # ... but its neighbour solicitation passes (OVN's own ACL stage lets ND and MLD
        # through above every ACL once ACLs are stateful; the switch answers it)
        nd = _trace6(central, world, "d", "c", "nd")
        assert not nd.dropped and _status(world, "d").interface in nd.outputs, nd.text
        # and IPv4 the same way: its echo is dropped
        _acl_dropped(send(central, world, "d", "c", proto="icmp"))


def test_a_duplicate_acl_is_removed_and_foreign_acls_are_left(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    world.add_pod("w", 0, annotations={SG: "web"})
    world.settle()
    before = _acls(provider_plugin)["sg_web"]
    db = f"--db={nb_server.remote}"
    # a second copy of one of podnet's ACLs (two writers raced), and an operator's own
    subprocess.run(["ovn-nbctl", db, "--id=@a", "create", "ACL", "direction=to-lport",
                    "priority=2000", 'match="outport == @sg_web && ip"', "action=drop",
                    'external_ids:"podnet/owner"=podnet', "--",
                    "add", "Port_Group", "sg_web", "acls", "@a"],
                   check=True, capture_output=True, timeout=30)
    subprocess.run(["ovn-nbctl", db, "acl-add", "sg_web", "to-lport", "3000",
                    "outport == @sg_web && tcp.dst == 9999", "allow-related"],
                   check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 5
    while len(_acls(provider_plugin)["sg_web"]) < len(before) + 2:
        assert time.monotonic() < deadline, "the ACLs never reached the IDL"
        time.sleep(0.01)
    provider_plugin.podnet_sweep("ovn", owners=(), remove=())  # the periodic resync
    after = _acls(provider_plugin)["sg_web"]
    assert sorted([*before, ("to-lport", 3000, "outport == @sg_web && tcp.dst == 9999",
                             "allow-related")]) == after
