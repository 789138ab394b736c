"""The ``inet podnet`` table as rendered from resolved policies (``podnet.linux.nftables``):
what each part of a policy becomes, without a kernel. The packets are
``tests/test_nftables_packets.py``'s."""

from __future__ import annotations

import json
import random
from typing import Any

import attrs

from podnet.hookspecs.netpol import (
    PolicyMember,
    PolicyPort,
    PolicyRule,
    Protocol,
    ResolvedPolicy,
)
from podnet.linux import nftables as nf

A = nf.HostPort("pnvaaaaaaaaaa", ("10.0.0.2", "fd00::2"))
B = nf.HostPort("pnvbbbbbbbbbb", ("10.0.0.3/24",))


def member(key: str, *addresses: str, node_addresses: tuple[str, ...] = ()) -> PolicyMember:
    return PolicyMember(key=key, addresses=addresses, node="n", provider="reference",
                        node_addresses=node_addresses)


def policy(name: str = "p", *, members: tuple[PolicyMember, ...] | None = None,
           ingress: tuple[PolicyRule, ...] | None = None,
           egress: tuple[PolicyRule, ...] | None = None,
           generation: int = 1) -> ResolvedPolicy:
    return ResolvedPolicy(namespace="x", name=name, uid=f"uid-{name}", generation=generation,
                          members=members if members is not None else (member("x/a"),),
                          ingress=ingress, egress=egress)


def chains(table: nf.Table) -> dict[str, list[list[dict[str, Any]]]]:
    """chain name -> its rules' expressions, in order."""
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for command in table.commands:
        add = command["add"]
        if "chain" in add:
            out.setdefault(add["chain"]["name"], [])
        elif "rule" in add:
            out[add["rule"]["chain"]].append(add["rule"]["expr"])
    return out


def sets(table: nf.Table) -> dict[str, dict[str, Any]]:
    return {c["add"]["set"]["name"]: c["add"]["set"] for c in table.commands
            if "set" in c["add"]}


def test_a_pod_no_policy_selects_gets_no_chain_and_the_base_chain_judges_new_flows_only(
        ) -> None:
    table = nf.render([], {"x/a": A})
    found = chains(table)
    assert list(found) == [nf.BASE_CHAIN]
    first = found[nf.BASE_CHAIN][0]
    assert first == [{"match": {"op": "in", "left": {"ct": {"key": "state"}},
                                "right": ["established", "related"]}}, {"accept": None}]
    assert table.policies == {} and table.member_rules == {}
    base = next(c["add"]["chain"] for c in table.commands if "chain" in c["add"])
    assert (base["hook"], base["policy"]) == ("forward", "accept")


def test_the_batch_replaces_the_whole_table_in_one_transaction() -> None:
    doc = json.loads(nf.render([policy(ingress=())], {"x/a": A}).document())["nftables"]
    table = {"family": "inet", "name": "podnet"}
    assert doc[:3] == [{"add": {"table": table}}, {"delete": {"table": table}},
                       {"add": {"table": table}}]
    assert all("table" not in c.get("delete", {}) for c in doc[3:])


def test_an_empty_rule_list_denies_all_with_a_drop_at_the_end_of_the_members_chain() -> None:
    table = nf.render([policy(ingress=())], {"x/a": A})
    found = chains(table)
    ingress, egress = nf.chain_names(A.host_interface)
    assert found[ingress] == [[{"drop": None}]]
    assert egress not in found  # egress not restricted: no chain, no dispatch
    assert table.member_rules == {"x/a": 1}
    assert table.policies == {"x/p": 1}


def test_dispatch_by_interface_and_by_address_egress_before_ingress() -> None:
    table = nf.render([policy(members=(member("x/a"), member("x/b")), ingress=(),
                              egress=())], {"x/a": A, "x/b": B})
    vmaps = [expr[0]["vmap"] for expr in chains(table)[nf.BASE_CHAIN]
             if "vmap" in expr[0]]
    keys = [json.dumps(v["key"], sort_keys=True) for v in vmaps]
    assert keys == [
        '{"meta": {"key": "iifname"}}',
        '{"payload": {"field": "saddr", "protocol": "ip"}}',
        '{"payload": {"field": "saddr", "protocol": "ip6"}}',
        '{"meta": {"key": "oifname"}}',
        '{"payload": {"field": "daddr", "protocol": "ip"}}',
        '{"payload": {"field": "daddr", "protocol": "ip6"}}',
    ]
    assert vmaps[1]["data"]["set"] == [
        ["10.0.0.2", {"jump": {"target": "out_pnvaaaaaaaaaa"}}],
        ["10.0.0.3", {"jump": {"target": "out_pnvbbbbbbbbbb"}}]]
    assert vmaps[3]["data"]["set"] == [
        ["pnvaaaaaaaaaa", {"jump": {"target": "in_pnvaaaaaaaaaa"}}],
        ["pnvbbbbbbbbbb", {"jump": {"target": "in_pnvbbbbbbbbbb"}}]]


def test_an_allowed_egress_returns_to_the_base_chain_an_allowed_ingress_accepts() -> None:
    rule = PolicyRule(peers=("10.1.0.0/16",))
    found = chains(nf.render([policy(ingress=(rule,), egress=(rule,))], {"x/a": A}))
    ingress, egress = nf.chain_names(A.host_interface)
    assert found[ingress][0][-1] == {"accept": None}
    assert found[egress][0][-1] == {"return": None}
    assert found[ingress][-1] == found[egress][-1] == [{"drop": None}]
    assert found[egress][0][0]["match"]["left"] == {
        "payload": {"protocol": "ip", "field": "daddr"}}


def test_peers_become_named_interval_sets_per_family_overlaps_merged_and_shared() -> None:
    rule = PolicyRule(peers=("10.0.0.0/8", "10.1.2.3/32", "10.2.0.0/16", "192.168.1.7/32",
                             "fd00::/64", "fd00::5/128"))
    table = nf.render([policy(ingress=(rule,)), policy("q", ingress=(rule,))], {"x/a": A})
    found = sets(table)
    assert len(found) == 2  # one clause, two families: both policies share them
    v4 = next(s for s in found.values() if s["type"] == "ipv4_addr")
    v6 = next(s for s in found.values() if s["type"] == "ipv6_addr")
    assert v4["flags"] == v6["flags"] == ["interval"]
    assert v4["elem"] == [{"prefix": {"addr": "10.0.0.0", "len": 8}}, "192.168.1.7"]
    assert v6["elem"] == [{"prefix": {"addr": "fd00::", "len": 64}}]
    ingress = chains(table)[nf.chain_names(A.host_interface)[0]]
    assert len(ingress) == 3  # v4, v6, the drop: the two policies' equal clause is one
    comments = [c["add"]["rule"].get("comment") for c in table.commands
                if "rule" in c["add"] and c["add"]["rule"]["chain"].startswith("in_")]
    assert comments[0] == "x/p, x/q"


def test_no_peer_allows_nothing_and_any_peer_matches_no_address() -> None:
    table = nf.render([policy(ingress=(PolicyRule(peers=()),)),
                       policy("q", egress=(PolicyRule(peers=None),))], {"x/a": A})
    ingress, egress = nf.chain_names(A.host_interface)
    found = chains(table)
    assert found[ingress] == [[{"drop": None}]]
    assert found[egress] == [[{"return": None}], [{"drop": None}]]
    assert sets(table) == {}


def test_ports_of_several_protocols_are_one_rule_ranges_merged_a_whole_protocol() -> None:
    rule = PolicyRule(peers=None, ports=(
        PolicyPort(Protocol.TCP, 80), PolicyPort(Protocol.TCP, 81, 90),
        PolicyPort(Protocol.TCP, 85, 100), PolicyPort(Protocol.TCP, 443),
        PolicyPort(Protocol.UDP), PolicyPort(Protocol.UDP, 53),
        PolicyPort(Protocol.SCTP, 9000)))
    # two members: one named set of ports for both
    table = nf.render([policy(members=(member("x/a"), member("x/b")), ingress=(rule,))],
                      {"x/a": A, "x/b": B})
    found = chains(table)
    l4 = {"meta": {"key": "l4proto"}}
    dport = {"payload": {"protocol": "th", "field": "dport"}}
    port_sets = {n: v for n, v in sets(table).items() if n.startswith("ports_")}
    assert len(port_sets) == 1
    ((name, port_set),) = port_sets.items()
    assert port_set["type"] == ["inet_proto", "inet_service"]
    assert port_set["flags"] == ["interval"]
    assert port_set["elem"] == [
        {"concat": ["sctp", 9000]}, {"concat": ["tcp", {"range": [80, 100]}]},
        {"concat": ["tcp", 443]},
        # a port absent is every port of its protocol
        {"concat": ["udp", {"range": [0, 65535]}]}]
    for port in (A, B):
        assert found[nf.chain_names(port.host_interface)[0]][:-1] == [[
            {"match": {"op": "==", "left": {"concat": [l4, dport]}, "right": "@" + name}},
            {"accept": None}]]


def test_ports_of_one_protocol_match_the_protocol_then_the_port_or_a_set() -> None:
    rules = (PolicyRule(peers=None, ports=(PolicyPort(Protocol.TCP, 80),
                                           PolicyPort(Protocol.TCP, 8000, 8080))),
             PolicyRule(peers=None, ports=(PolicyPort(Protocol.TCP, 81),)),
             PolicyRule(peers=None, ports=(PolicyPort(Protocol.UDP),)))
    table = nf.render([policy(ingress=rules)], {"x/a": A})
    l4 = {"meta": {"key": "l4proto"}}
    dport = {"payload": {"protocol": "th", "field": "dport"}}
    ((name, port_set),) = ((n, v) for n, v in sets(table).items() if n.startswith("ports_"))
    assert (port_set["type"], port_set["elem"]) == (
        "inet_service", [80, {"range": [8000, 8080]}])
    assert chains(table)[nf.chain_names(A.host_interface)[0]][:-1] == [
        [{"match": {"op": "==", "left": l4, "right": "tcp"}},
         {"match": {"op": "==", "left": dport, "right": "@" + name}}, {"accept": None}],
        [{"match": {"op": "==", "left": l4, "right": "tcp"}},
         {"match": {"op": "==", "left": dport, "right": 81}}, {"accept": None}],
        [{"match": {"op": "==", "left": l4, "right": "udp"}}, {"accept": None}],
    ]


def test_a_clause_limited_to_some_members_is_in_their_chains_only() -> None:
    # a named port: 8080 for a, 9090 for b
    rules = (PolicyRule(peers=None, ports=(PolicyPort(port=8080),), members=("x/a",)),
             PolicyRule(peers=None, ports=(PolicyPort(port=9090),), members=("x/b",)))
    table = nf.render([policy(members=(member("x/a"), member("x/b")), ingress=rules)],
                      {"x/a": A, "x/b": B})
    found = chains(table)
    for port, number in ((A, 8080), (B, 9090)):
        rules_of = found[nf.chain_names(port.host_interface)[0]]
        assert [r[1]["match"]["right"] for r in rules_of[:-1]] == [number]


def test_a_member_of_another_host_is_left_out_and_so_is_a_policy_without_one_here() -> None:
    table = nf.render([policy(members=(member("x/a"), member("x/far"))),
                       policy("elsewhere", members=(member("x/far"),), ingress=())],
                      {"x/a": attrs.evolve(A)})
    assert table.policies == {"x/p": 1}
    assert set(chains(table)) == {nf.BASE_CHAIN}  # x/p restricts nothing (no direction)


def test_the_members_node_addresses_pass_both_ways() -> None:
    table = nf.render([policy(members=(member("x/a", node_addresses=("192.168.7.2",
                                                                     "fd07::2")),),
                              ingress=())], {"x/a": A})
    found = sets(table)
    assert found["node4"]["elem"] == ["192.168.7.2"]
    assert found["node6"]["elem"] == ["fd07::2"]
    base = chains(table)[nf.BASE_CHAIN]
    fields = [(e[0]["match"]["left"]["payload"]["field"], e[0]["match"]["right"])
              for e in base if "match" in e[0] and "payload" in e[0]["match"]["left"]]
    assert fields == [("saddr", "@node4"), ("daddr", "@node4"), ("saddr", "@node6"),
                      ("daddr", "@node6")]


def test_ipv6_neighbour_discovery_passes_for_ipv6_only() -> None:
    base = chains(nf.render([], {}))[nf.BASE_CHAIN]
    nd = base[1]
    assert nd[0] == {"match": {"op": "==", "left": {"meta": {"key": "nfproto"}},
                               "right": "ipv6"}}
    assert nd[-1] == {"accept": None}


def test_an_address_two_members_name_dispatches_to_the_first_only() -> None:
    stale = nf.HostPort("pnvcccccccccc", ("10.0.0.2",))
    table = nf.render([policy(members=(member("x/a"), member("x/c")), ingress=())],
                      {"x/a": A, "x/c": stale})
    base = chains(table)[nf.BASE_CHAIN]
    by_daddr = next(e[0]["vmap"]["data"]["set"] for e in base if "vmap" in e[0]
                    and e[0]["vmap"]["key"] == {"payload": {"protocol": "ip",
                                                            "field": "daddr"}})
    assert by_daddr == [["10.0.0.2", {"jump": {"target": "in_pnvaaaaaaaaaa"}}]]


def test_equal_inputs_in_any_order_render_equal_tables() -> None:
    rules = tuple(PolicyRule(peers=(f"10.{i}.0.0/16",), ports=(PolicyPort(port=i + 1),))
                  for i in range(6))
    policies = [policy(f"p{i}", members=(member("x/a"), member("x/b")),
                       ingress=rules[i:], egress=rules[:i]) for i in range(6)]
    ports = {"x/a": A, "x/b": B}
    first = nf.render(policies, ports)
    shuffled = policies[:]
    random.Random(7).shuffle(shuffled)
    assert nf.render(shuffled, dict(reversed(list(ports.items())))) == first
    assert first.document() == nf.render(shuffled, ports).document()


def test_a_long_comment_is_cut_to_what_the_kernel_keeps() -> None:
    rule = PolicyRule(peers=None)
    policies = [policy("p" * 60 + str(i), ingress=(rule,)) for i in range(4)]
    table = nf.render(policies, {"x/a": A})
    comments = [c["add"]["rule"]["comment"] for c in table.commands
                if "rule" in c["add"] and "comment" in c["add"]["rule"]]
    assert all(len(c.encode()) <= nf.COMMENT_MAX for c in comments)
    assert any(c.endswith("...") for c in comments)
