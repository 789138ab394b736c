"""NetworkPolicy on OVN, checked with ``ovn-trace`` through northd's flows: the provider's
``podnet_network_policy`` writes a policy's port group, address sets and ACLs into a real
NB; a member gets only what the union of its policies allows per direction (ports by
number, range and per-member named ports, TCP, UDP and SCTP, IPv4 and IPv6, ipBlocks with
their except blocks cut out, its node's addresses), replies pass, pods no policy selects
stay open, and a port under a security group and a policy gets only what both allow.
The hooks are called with hand-made ResolvedPolicy values (core resolves selectors)."""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from test_ovn_provider import northd

from podnet.hookspecs.netpol import (
    FindingReason,
    PolicyMember,
    PolicyPort,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)
from podnet.plugins.ovn.nbserver import NbServer, ovsdb_server_available
from podnet.testing.harness import World
from podnet.testing.ovnbed import OvnCentral, Trace, parse_trace

pytest_plugins = ["podnet.testing"]

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

SG = "podnet.io/security-groups"
SUBNETS = [{"name": "ovn-default", "cidr": "10.16.0.0/16", "default": True},
           {"name": "dual", "cidr": "10.17.0.0/24,fd00:17::/120", "namespaces": ["dual"]}]
GROUPS: dict[str, Any] = {
    # ingress tcp/80 and tcp/8080 from anywhere; egress not restricted
    "web": {"ingress": [{"protocol": "tcp", "port": 80}, {"protocol": "tcp", "port": 8080}]},
    # not restricted either way
    "open": {},
}
TCP, UDP, SCTP = Protocol.TCP, Protocol.UDP, Protocol.SCTP


@pytest.fixture(scope="module")
def nb_server() -> Iterator[NbServer]:
    with NbServer() as server:
        yield server


@pytest.fixture
def provider_plugin(nb_server: NbServer) -> Iterator[Any]:
    from podnet.plugins.ovn.provider import OvnProvider

    nb_server.restart_fresh()
    plugin = OvnProvider(nb_server.remote, SUBNETS, seed=5, security_groups=GROUPS)
    yield plugin
    plugin.close()


@pytest.fixture
def ground_truth(provider_plugin: Any) -> Any:
    return provider_plugin.nb_addresses


# --- helpers -------------------------------------------------------------------------------


def status(world: World, pod: str) -> Any:
    pn = world.record_of(pod)
    assert pn is not None and pn.status.interface, pn
    return pn.status


def member(world: World, pod: str, node_addresses: Sequence[str] = ()) -> PolicyMember:
    st = status(world, pod)
    return PolicyMember(key=f"{world.namespace}/{pod}",
                        addresses=tuple(a for a in (st.ip, st.ipv6) if a),
                        node=world.record_of(pod).spec.node_name, provider="ovn",
                        node_addresses=tuple(node_addresses))


def host(world: World, pod: str, family: int = 4) -> str:
    st = status(world, pod)
    ip = st.ip if family == 4 else st.ipv6
    return f"{ip}/{32 if family == 4 else 128}"


def policy(name: str, members: Sequence[PolicyMember], *,
           ingress: Sequence[PolicyRule] | None = None,
           egress: Sequence[PolicyRule] | None = None, namespace: str = "default"
           ) -> ResolvedPolicy:
    return ResolvedPolicy(namespace=namespace, name=name, uid=f"uid-{name}", generation=1,
                          members=tuple(members),
                          ingress=None if ingress is None else tuple(ingress),
                          egress=None if egress is None else tuple(egress))


def send(central: OvnCentral, world: World, src: str, dst: str, *, proto: str = "tcp",
         dport: int = 80, sport: int = 40000, family: int = 4, reply: bool = False,
         ip_src: str | None = None, ip_dst: str | None = None, sync: bool = True
         ) -> Trace:
    """Where OVN takes one packet from pod ``src`` to pod ``dst``: a new connection's
    first packet (TCP SYN, UDP, SCTP INIT, ICMP echo), or with ``reply`` one of a
    connection conntrack knows (``trk,est,rpl``)."""
    a, b = status(world, src), status(world, dst)
    v = "ip4" if family == 4 else "ip6"
    s = ip_src or (a.ip if family == 4 else a.ipv6)
    d = ip_dst or (b.ip if family == 4 else b.ipv6)
    flow = [f'inport=="{a.interface}"', f"eth.src=={a.mac}", f"eth.dst=={b.mac}",
            f"{v}.src=={s}", f"{v}.dst=={d}", "ip.ttl==64"]
    if proto == "icmp":
        flow.append("icmp4.type==8 && icmp4.code==0" if family == 4
                    else "icmp6.type==128 && icmp6.code==0")
    elif proto == "tcp":
        flow.append(f"tcp.src=={sport} && tcp.dst=={dport} && tcp.flags=={0x12 if reply else 2}")
    elif proto == "udp":
        flow.append(f"udp.src=={sport} && udp.dst=={dport}")
    elif proto == "sctp":
        flow.append(f"sctp.src=={sport} && sctp.dst=={dport}")
    ct = [f"--ct={'trk,est,rpl' if reply else 'trk,new'}"] * 4
    if sync:
        central.sync()
    done = central.tool("ovn-trace", f"--db={central.sb_remote}", "--detailed", *ct,
                        a.subnet, " && ".join(flow))
    return parse_trace(done.stdout)


def passes(t: Trace, world: World, dst: str) -> bool:
    if t.delivered == (status(world, dst).interface,):
        return True
    assert t.dropped and t.stage is not None and "acl" in t.stage, t.text
    return False


def check(central: OvnCentral, world: World, cases: Sequence[tuple[str, str, dict[str, Any],
                                                                  bool]]) -> None:
    """Every (src, dst, packet, expected) traced; all mismatches said at once."""
    central.sync()
    wrong = []
    for src, dst, packet, want in cases:
        got = passes(send(central, world, src, dst, sync=False, **packet), world, dst)
        if got != want:
            wrong.append(f"{src}->{dst} {packet}: {'passes' if got else 'dropped'}, "
                         f"expected {'passes' if want else 'dropped'}")
    assert not wrong, "\n".join(wrong)


def acls_of(provider: Any, key: str) -> list[tuple[str, int, str, str]]:
    from podnet.plugins.ovn.netpol import NP_KEY

    return sorted((a.direction, int(a.priority), a.match, a.action)
                  for a in provider.client.rows("ACL") if a.external_ids.get(NP_KEY) == key)


def pods(world: World, *names: str, node: int = 0, annotations: dict[str, str] | None = None
         ) -> None:
    for n in names:
        world.add_pod(n, node, annotations=annotations)


# --- the tests -----------------------------------------------------------------------------


def test_ingress_by_peer_port_range_and_protocol(world: World, provider_plugin: Any,
                                                 nb_server: NbServer) -> None:
    world.add_node(0)
    pods(world, "a", "b", "c", "d")
    world.settle()
    hook = provider_plugin.podnet_network_policy
    # b: from a on tcp/80, tcp 8000-8080, sctp/9000 and udp (any port); from anywhere
    # on tcp/443; d is selected by nothing
    done = hook("ovn", "default/b-in", policy("b-in", [member(world, "b")], ingress=[
        PolicyRule(peers=(host(world, "a"),), ports=(
            PolicyPort(TCP, 80), PolicyPort(TCP, 8000, 8080), PolicyPort(SCTP, 9000),
            PolicyPort(UDP))),
        PolicyRule(peers=None, ports=(PolicyPort(TCP, 443),))]))
    assert done.programmed and not done.findings, done
    with northd(nb_server) as central:
        check(central, world, [
            ("a", "b", {"dport": 80}, True),
            ("a", "b", {"dport": 81}, False),
            ("c", "b", {"dport": 80}, False),          # not a's
            ("a", "b", {"dport": 8000}, True), ("a", "b", {"dport": 8080}, True),
            ("a", "b", {"dport": 8043}, True),
            ("a", "b", {"dport": 7999}, False), ("a", "b", {"dport": 8081}, False),
            ("a", "b", {"proto": "sctp", "dport": 9000}, True),
            ("a", "b", {"proto": "sctp", "dport": 9001}, False),
            ("a", "b", {"proto": "tcp", "dport": 9000}, False),
            ("a", "b", {"proto": "udp", "dport": 53}, True),
            ("a", "b", {"proto": "udp", "dport": 5353}, True),
            ("c", "b", {"proto": "udp", "dport": 53}, False),
            ("a", "b", {"proto": "icmp"}, False),
            ("c", "b", {"dport": 443}, True), ("d", "b", {"dport": 443}, True),
            # b's egress is not restricted; its replies pass anyway
            ("b", "c", {"dport": 81}, True),
            ("b", "c", {"sport": 81, "dport": 40000, "reply": True}, True),
            # pods no policy selects stay open
            ("c", "d", {"dport": 81}, True), ("b", "d", {"proto": "icmp"}, True),
        ])


def test_egress_default_deny_replies_and_node_traffic(world: World, provider_plugin: Any,
                                                      nb_server: NbServer) -> None:
    world.add_node(0)
    pods(world, "a", "b", "c")
    world.settle()
    node_ip = "192.168.50.7"
    hook = provider_plugin.podnet_network_policy
    # b: nothing out (an empty egress list) but its own node; ingress not restricted
    assert hook("ovn", "default/deny-out", policy(
        "deny-out", [member(world, "b", [node_ip])], egress=[])).programmed
    # c: nothing in but its node
    assert hook("ovn", "default/deny-in", policy(
        "deny-in", [member(world, "c", [node_ip])], ingress=[])).programmed
    with northd(nb_server) as central:
        check(central, world, [
            ("b", "a", {"dport": 80}, False), ("b", "a", {"proto": "icmp"}, False),
            ("b", "a", {"proto": "udp", "dport": 53}, False),
            ("a", "b", {"dport": 80}, True),            # in: not restricted
            # b's reply to a's connection passes its default deny out
            ("b", "a", {"sport": 80, "dport": 40000, "reply": True}, True),
            ("a", "c", {"dport": 80}, False), ("b", "c", {"dport": 80}, False),
            # c's reply passes too
            ("c", "a", {"sport": 80, "dport": 40000, "reply": True}, True),
            # traffic from c's node passes (kubelet probes; the node's address as source)
            ("a", "c", {"dport": 10250, "ip_src": node_ip}, True),
            ("a", "c", {"proto": "udp", "dport": 9, "ip_src": node_ip}, True),
            ("a", "c", {"dport": 10250, "ip_src": "192.168.50.8"}, False),
        ])
        # b may reach its node: the packet leaves the ACL stage (the switch has no port
        # for the node's address: it is dropped later, not by an ACL)
        t = send(central, world, "b", "a", ip_dst=node_ip)
        assert not (t.dropped and t.stage and "acl" in t.stage), t.text
        t = send(central, world, "b", "a", ip_dst="192.168.50.8")
        assert t.dropped and t.stage and "acl" in t.stage, t.text


def test_except_blocks_named_ports_and_additive_policies(world: World, provider_plugin: Any,
                                                         nb_server: NbServer) -> None:
    world.add_node(0)
    pods(world, "a", "b", "c", "d", "e")
    world.settle()
    hook = provider_plugin.podnet_network_policy
    # ipBlock 10.16.0.0/16 except a's address: the peers as core hands them (cut out)
    block = ipaddress.ip_network("10.16.0.0/16")
    cut = sorted(str(n) for n in block.address_exclude(ipaddress.ip_network(host(world, "a"))))
    mb, md = member(world, "b"), member(world, "d")
    # port "http" named on both: 8080 on b, 9090 on d (core makes a clause per number)
    assert hook("ovn", "default/named", policy("named", [mb, md], ingress=[
        PolicyRule(peers=tuple(cut), ports=(PolicyPort(TCP, 8080),), members=(mb.key,)),
        PolicyRule(peers=tuple(cut), ports=(PolicyPort(TCP, 9090),), members=(md.key,)),
    ])).programmed
    # a second policy selecting b adds tcp/7000 from a only
    assert hook("ovn", "default/more", policy("more", [mb], ingress=[
        PolicyRule(peers=(host(world, "a"),), ports=(PolicyPort(TCP, 7000),))])).programmed
    with northd(nb_server) as central:
        check(central, world, [
            ("c", "b", {"dport": 8080}, True), ("c", "b", {"dport": 9090}, False),
            ("c", "d", {"dport": 9090}, True), ("c", "d", {"dport": 8080}, False),
            ("e", "d", {"dport": 9090}, True),
            ("a", "b", {"dport": 8080}, False),       # a is the except block
            ("a", "d", {"dport": 9090}, False),
            ("a", "b", {"dport": 7000}, True),        # ... but the other policy allows it
            ("c", "b", {"dport": 7000}, False),
            ("a", "d", {"dport": 7000}, False),       # d is not selected by "more"
        ])


def test_ipv6_and_dual_stack_peers(world: World, provider_plugin: Any,
                                   nb_server: NbServer) -> None:
    world.add_node(0)
    for n in ("a", "b", "c"):
        world.add_pod(n, 0, annotations={"podnet.io/subnets": "dual"})
    world.settle()
    assert status(world, "a").ipv6, status(world, "a")
    hook = provider_plugin.podnet_network_policy
    # b: from a's IPv6 address only; c: from a, both families
    assert hook("ovn", "default/v6", policy("v6", [member(world, "b")], ingress=[
        PolicyRule(peers=(host(world, "a", 6),), ports=(PolicyPort(TCP, 80),))])).programmed
    assert hook("ovn", "default/dual", policy("dual", [member(world, "c")], ingress=[
        PolicyRule(peers=(host(world, "a", 4), host(world, "a", 6)))])).programmed
    with northd(nb_server) as central:
        check(central, world, [
            ("a", "b", {"family": 6, "dport": 80}, True),
            ("a", "b", {"family": 6, "dport": 81}, False),
            ("a", "b", {"family": 4, "dport": 80}, False),
            ("c", "b", {"family": 6, "dport": 80}, False),
            ("a", "c", {"family": 6, "dport": 22}, True),
            ("a", "c", {"family": 4, "dport": 22}, True),
            ("a", "c", {"family": 6, "proto": "icmp"}, True),
            ("b", "c", {"family": 6, "dport": 22}, False),
            ("b", "c", {"family": 4, "dport": 22}, False),
        ])


def test_a_port_under_a_security_group_and_a_policy_gets_what_both_allow(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    world.add_node(0)
    pods(world, "a")
    world.add_pod("s", 0, annotations={SG: "web"})       # security group and policy
    world.add_pod("w", 0, annotations={SG: "web"})       # security group only
    world.add_pod("n", 0)                                 # policy only
    world.add_pod("o", 0, annotations={SG: "web,open"})  # groups allowing everything in
    world.settle()
    hook = provider_plugin.podnet_network_policy
    rule = PolicyRule(peers=(host(world, "a"),),
                      ports=(PolicyPort(TCP, 8080), PolicyPort(TCP, 9090)))
    assert hook("ovn", "default/np", policy(
        "np", [member(world, "s"), member(world, "n"), member(world, "o")],
        ingress=[rule])).programmed
    cases = [
        # s: web allows 80, 8080; the policy 8080, 9090 from a: only 8080 from a
        ("a", "s", {"dport": 8080}, True), ("a", "s", {"dport": 80}, False),
        ("a", "s", {"dport": 9090}, False), ("w", "s", {"dport": 8080}, False),
        # w: web alone
        ("a", "w", {"dport": 80}, True), ("a", "w", {"dport": 8080}, True),
        ("a", "w", {"dport": 9090}, False),
        # n: the policy alone
        ("a", "n", {"dport": 9090}, True), ("a", "n", {"dport": 8080}, True),
        ("a", "n", {"dport": 80}, False),
        # o: its groups allow everything in: the policy decides
        ("a", "o", {"dport": 9090}, True), ("a", "o", {"dport": 80}, False),
        ("w", "o", {"dport": 9090}, False),
        # replies pass both layers
        ("s", "a", {"sport": 8080, "dport": 40000, "reply": True}, True),
    ]
    with northd(nb_server) as central:
        check(central, world, cases)
        # web's rules change (tcp/9090 now too): the products follow in the transaction
        # that writes the group's new ACLs
        changed = {**GROUPS, "web": {"ingress": [*GROUPS["web"]["ingress"],
                                                 {"protocol": "tcp", "port": 9090}]}}
        provider_plugin.podnet_configure("ovn", {"security_groups": changed})
        provider_plugin.client  # noqa: B018 - the next use writes the groups
        check(central, world, [("a", "s", {"dport": 9090}, True),
                               ("a", "s", {"dport": 80}, False),
                               ("a", "w", {"dport": 9090}, True)])


def test_removal_keys_and_findings(world: World, provider_plugin: Any,
                                   nb_server: NbServer) -> None:
    world.add_node(0)
    pods(world, "a", "b")
    world.settle()
    hook = provider_plugin.podnet_network_policy
    keys = provider_plugin.podnet_network_policy_keys
    assert list(keys("ovn")) == []
    bad = policy("bad", [member(world, "b")], ingress=[
        PolicyRule(peers=None, ports=(PolicyPort(TCP, 90, 80),)),          # range reversed
        PolicyRule(peers=("10.300.0.0/16",), ports=(PolicyPort(TCP, 81),)),  # not a CIDR
        PolicyRule(peers=None, ports=(PolicyPort("ICMP", 1),)),              # a protocol
    ])
    done = hook("ovn", "default/bad", bad)
    assert done.programmed
    said = {(f.field, f.reason) for f in done.findings}
    assert said == {("spec.ingress[0].ports[0].port", FindingReason.INVALID_VALUE),
                    ("spec.ingress[1]", FindingReason.INVALID_VALUE),
                    ("spec.ingress[2].ports[0].protocol", FindingReason.UNSUPPORTED_FIELD)
                    }, done.findings
    # what could not be enforced allows nothing: b's ingress is denied
    assert list(keys("ovn")) == ["default/bad"]
    with northd(nb_server) as central:
        check(central, world, [("a", "b", {"dport": 80}, False),
                               ("a", "b", {"dport": 85}, False),
                               ("a", "b", {"proto": "icmp"}, False)])
        # a member whose port is not in NB (yet): the others are programmed, it is said
        ghost = member(world, "a")
        ghost = PolicyMember("default/ghost", ("10.16.99.99",), ghost.node, "ovn")
        done = hook("ovn", "default/bad", policy("bad", [member(world, "b"), ghost],
                                                 ingress=[]))
        assert not done.programmed and "default/ghost" in done.message, done
        # removed: every row of it goes, b is open again
        assert hook("ovn", "default/bad", None).programmed
        assert list(keys("ovn")) == []
        assert acls_of(provider_plugin, "default/bad") == []
        check(central, world, [("a", "b", {"dport": 80}, True)])


def test_programmed_once_every_chassis_has_installed_the_change(
        world: World, provider_plugin: Any, nb_server: NbServer) -> None:
    """The answer follows ``NB_Global.hv_cfg``: with no chassis northd sets it to
    ``nb_cfg`` (programmed once northd has the change); a registered chassis that has not
    installed the change (its ``Chassis_Private.nb_cfg`` behind) holds the policy at
    waiting, without a failure, until it catches up."""
    world.add_node(0)
    pods(world, "a", "b")
    world.settle()
    hook = provider_plugin.podnet_network_policy
    provider_plugin._configure({"flows_timeout": 0.5})
    with northd(nb_server) as central:
        done = hook("ovn", "default/b-in", policy("b-in", [member(world, "b")], ingress=[]))
        assert done.programmed and not done.waiting, done
        first = int(central.nbctl("get", "NB_Global", ".", "nb_cfg"))
        assert first >= 1  # the policy's transaction counted
        central.sbctl("chassis-add", "slow", "geneve", "127.0.0.9")
        chassis = central.sbctl("--bare", "--columns=_uuid", "find", "Chassis",
                                "name=slow").strip()
        central.sbctl("create", "Chassis_Private", "name=slow", f"chassis={chassis}",
                      f"nb_cfg={first}")
        changed = policy("b-in", [member(world, "b")], ingress=[
            PolicyRule(peers=(host(world, "a"),), ports=(PolicyPort(TCP, 80),))])
        done = hook("ovn", "default/b-in", changed)
        assert not done.programmed and done.waiting, done
        assert f"hv_cfg {first}" in done.message, done
        second = int(central.nbctl("get", "NB_Global", ".", "nb_cfg"))
        assert second == first + 1  # one transaction, one count
        # asked again with nothing changed: still the change the chassis lacks
        again = hook("ovn", "default/b-in", changed)
        assert not again.programmed and again.waiting, again
        assert int(central.nbctl("get", "NB_Global", ".", "nb_cfg")) == second
        central.sbctl("set", "Chassis_Private", "slow", f"nb_cfg={second}")
        deadline = time.monotonic() + 60  # northd follows the chassis (a loaded machine)
        while (int(central.nbctl("get", "NB_Global", ".", "hv_cfg")) < second
               and time.monotonic() < deadline):
            time.sleep(0.05)
        done = hook("ovn", "default/b-in", changed)
        assert done.programmed and not done.waiting, done
