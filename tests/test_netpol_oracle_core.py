"""Core's resolver (``podnet.core.netpol``) against the truth table's oracle, without
packets: every case and random policies are read and resolved by core as the controller
and the agents do, the :class:`~podnet.hookspecs.netpol.ResolvedPolicy` values are
interpreted as the contract tells a dataplane to (members, clauses limited to members,
peers as CIDRs, ports per protocol, the node's own traffic), and every connection's
verdict must be the oracle's. The oracle was written from the API's semantics alone, so a
difference is a bug of one of the two, found before any dataplane runs.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_netpol_oracle import PORTS, SETTINGS, WORLD, policies

from podnet.hookspecs.netpol import PolicyRule, ResolvedPolicy
from podnet.testing.netpol.beds import resolved as core_resolved
from podnet.testing.netpol.cases import CASES, Case
from podnet.testing.netpol.matrix import Matrix, Verdict, render
from podnet.testing.netpol.oracle import Cluster, Pod, expected


def _clause_allows(rule: PolicyRule, member: str, other: str | None, port: int,
                   protocol: str) -> bool:
    if rule.members is not None and member not in rule.members:
        return False
    if rule.peers is not None and (other is None or not any(
            ipaddress.ip_address(other) in ipaddress.ip_network(c) for c in rule.peers
            if ipaddress.ip_network(c).version == ipaddress.ip_address(other).version)):
        return False
    if not rule.ports:
        return True
    for p in rule.ports:
        if p.protocol.value != protocol:
            continue
        if p.port is None or p.port == port or (
                p.end_port is not None and p.port <= port <= p.end_port):
            return True
    return False


def _direction(resolved: list[ResolvedPolicy], member: Pod, other: str | None, port: int,
               protocol: str, ingress: bool) -> bool:
    chosen = [(r, m) for r in resolved for m in r.members if m.key == member.key
              and (r.ingress if ingress else r.egress) is not None]
    if not chosen:
        return True
    if other is not None and any(other in m.node_addresses for _, m in chosen):
        return True
    return any(_clause_allows(rule, member.key, other, port, protocol)
               for r, _ in chosen for rule in (r.ingress if ingress else r.egress) or ())


def as_a_dataplane_reads_it(ps: Sequence[Mapping[str, Any]], world: Cluster,
                            ports: Sequence[tuple[int, str]], family: int = 4) -> Matrix:
    resolved = core_resolved(ps, world, "reference")
    m = Matrix.of([p.key for p in world.pods], ports)
    for src_key, dst_key, port, protocol in m.judged():
        src, dst = world.pod(src_key), world.pod(dst_key)
        ok = (_direction(resolved, src, dst.address(family), port, protocol, ingress=False)
              and _direction(resolved, dst, src.address(family), port, protocol, ingress=True))
        m[(src_key, dst_key, port, protocol)] = Verdict.PASS if ok else Verdict.DROP
    return m


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("family", [4, 6])
def test_every_case_resolves_to_the_oracles_matrix(case: Case, family: int) -> None:
    world = case.cluster(WORLD)
    ps = case.policies(world)
    want = expected(ps, world, PORTS, family)
    got = as_a_dataplane_reads_it(ps, world, PORTS, family)
    assert want.mismatches(got) == [], render(want, got, f"{case.name}: oracle vs core")


@SETTINGS
@given(st.lists(policies(), min_size=1, max_size=3), st.sampled_from([4, 6]))
def test_random_policies_resolve_to_the_oracles_matrix(ps: list[dict[str, Any]], family: int
                                                       ) -> None:
    want = expected(ps, WORLD, PORTS, family)
    got = as_a_dataplane_reads_it(ps, WORLD, PORTS, family)
    assert want.mismatches(got) == [], render(want, got, "random policies: oracle vs core")


def test_the_interpreter_is_not_trivially_open() -> None:
    """The interpretation above denies where a policy denies (it could be vacuous)."""
    deny = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
             "metadata": {"name": "d", "namespace": "x"},
             "spec": {"podSelector": {}, "policyTypes": ["Ingress"]}}]
    m = as_a_dataplane_reads_it(deny, WORLD, PORTS[:1])
    assert m.count(Verdict.DROP) == sum(1 for s, d in itertools.permutations(WORLD.pods, 2)
                                        if d.namespace == "x")


def test_an_except_outside_its_block_opens_nothing_in_the_oracle_or_the_core() -> None:
    """An ipBlock whose except is not inside its CIDR (the API server refuses it; one
    stored anyway is read as matching nothing) restricts x's egress to no peer at all,
    in the oracle as in the core (found by the random policies above)."""
    ps = [{"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
           "metadata": {"name": "p0", "namespace": "x"},
           "spec": {"podSelector": {}, "egress": [{"to": [{"ipBlock": {
               "cidr": "10.60.1.0/24", "except": ["10.60.2.0/24"]}}]}]}}]
    want = expected(ps, WORLD, PORTS, 4)
    got = as_a_dataplane_reads_it(ps, WORLD, PORTS, 4)
    assert want.mismatches(got) == [], render(want, got, "except outside its block")
    assert all(want[(src, dst, port, proto)] is Verdict.DROP
               for src, dst, port, proto in want.judged() if src.startswith("x/"))
