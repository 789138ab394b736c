"""NetworkPolicy proven by packets, as the upstream network policy e2e suite does it: the
namespaces x, y, z with pods a, b, c each, every pod serving TCP and UDP (SCTP where the
kernel has it) on 80 and 81, every pair probed with real packets (a drop is a timeout,
not a refusal), the observed matrix compared with the oracle's
(:mod:`podnet.testing.netpol.oracle`) for every named case of
:mod:`podnet.testing.netpol.cases`; on a difference the whole matrix is printed,
expected beside observed.

One bed for the whole module (the cases applied and removed in turn): here the reference
dataplane (two node agents enforcing with nftables; IPv4, the node bed has one family);
``tests/test_netpol_truth_ovn.py`` runs the same tests on OVN (the controller's ACLs on a
real chassis; IPv4 and IPv6), ``tests/test_netpol_truth_ecs.py`` on the dual-stack ECS
ENI dataplane (routed pods, the agents' nftables; IPv4 and IPv6). Then the changes: a
label flipped on a running pod, a policy deleted, a namespace relabelled — the matrix
follows.

The module prints a summary line (cases, failures, seconds, probes) at its end;
``PODNET_NETPOL_SUMMARY=<file>`` appends it to a file as JSON.

Needs root, network namespaces and kubectl (and the OVN packages for the OVN bed);
skipped with the reason otherwise.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.netpol.beds import CaseResult, NodeBed, PolicyBed, run_case
from podnet.testing.netpol.cases import CASES, Case, into_a, labels
from podnet.testing.netpol.matrix import render
from podnet.testing.netpol.oracle import expected

pytest_plugins = ["podnet.testing"]

WHY = netns_unavailable() or (None if shutil.which("kubectl") else "kubectl is not installed")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]

#: the beds' runs, printed at the end of the module (case count, times, results)
RESULTS: list[CaseResult] = []


def running(made: PolicyBed) -> Iterator[PolicyBed]:
    try:
        yield made
    finally:
        _summary(made)
        made.close()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyBed]:
    yield from running(NodeBed(tmp_path_factory.mktemp("netpol-node")))


def _summary(bed: PolicyBed) -> None:
    mine = [r for r in RESULTS if r.bed == bed.name]
    if not mine:
        return
    summary = {"bed": bed.name, "families": list(bed.families), "cases": len(mine),
               "failed": [r.case for r in mine if r.mismatches],
               "mismatched_cells": sum(r.mismatches for r in mine),
               "seconds": round(sum(r.seconds for r in mine), 1),
               "start_seconds": {k: round(v, 1) for k, v in bed.timings.items()},
               "probes": bed.prober.probes if bed.prober else None,
               "dataplane_restarts": bed.revived,
               "passed_at_the_second_attempt": len(bed.flaked)}
    line = json.dumps(summary)
    print(f"\nnetpol truth table: {line}")
    for first in bed.flaked:
        print(f"\nfirst attempt (matched at the second):\n{first}")
    out = os.environ.get("PODNET_NETPOL_SUMMARY")
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


def _check(result: CaseResult) -> None:
    RESULTS.append(result)
    assert result.mismatches == 0, result.report()


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_matrix_is_the_oracles(bed: PolicyBed, case: Case) -> None:
    _check(run_case(bed, case))


# --- changes on a running bed ----------------------------------------------------------------


def _converged(bed: PolicyBed, policies: list[dict], what: str) -> None:
    """Every family's matrix, probed until it is the oracle's for the bed's world now."""
    assert bed.cluster is not None
    for family in bed.families:
        want = expected(policies, bed.cluster, bed.ports, family, pods=list(bed.endpoints))
        got = bed.observe(want, family)
        if want.mismatches(got) and bed.trouble() is not None:
            # the dataplane's own daemon died under the probes (see run_case): once more
            bed.revive()
            got = bed.observe(want, family)
        assert want.mismatches(got) == [], render(want, got, f"{what}, IPv{family}")


def _world(bed: PolicyBed, pods: dict | None = None, namespaces: dict | None = None) -> None:
    from podnet.testing.netpol.cases import relabelled

    assert bed.cluster is not None
    bed.cluster = relabelled(bed.cluster, pods or {}, namespaces or {})


def test_a_label_flipped_on_a_running_pod_moves_it_in_and_out(bed: PolicyBed) -> None:
    policy = into_a({"from": [{"podSelector": labels(role="client")}]})
    base = bed.cluster
    try:
        bed.apply([policy])
        bed.wait_programmed([policy])
        _converged(bed, [policy], "nobody is a client")
        bed.label_pod("x/c", {"role": "client"})
        _world(bed, pods={"x/c": {"role": "client"}})
        _converged(bed, [policy], "x/c became a client")
        bed.label_pod("x/c", {"role": None})
        bed.label_pod("x/b", {"role": "client"})
        _world(bed, pods={"x/c": {"role": None}, "x/b": {"role": "client"}})
        _converged(bed, [policy], "x/c no longer, x/b now a client")
    finally:
        bed.delete_policy("x", policy["metadata"]["name"])
        bed.label_pod("x/c", {"role": None})
        bed.label_pod("x/b", {"role": None})
        bed.cluster = base


def test_a_deleted_policy_opens_what_it_closed(bed: PolicyBed) -> None:
    deny = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
            "metadata": {"name": "deny-y", "namespace": "y"},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}}
    allow = into_a({"from": [{"namespaceSelector": labels(ns="z")}]})
    try:
        bed.apply([deny, allow])
        bed.wait_programmed([deny, allow])
        _converged(bed, [deny, allow], "y denied, x/a from z only")
        bed.delete_policy("y", "deny-y")
        _converged(bed, [allow], "y's policy deleted")
        bed.delete_policy("x", allow["metadata"]["name"])
        _converged(bed, [], "every policy deleted")
    finally:
        for ns, name in (("y", "deny-y"), ("x", allow["metadata"]["name"])):
            bed.kubectl("delete", "networkpolicy", "-n", ns, name, "--ignore-not-found")


def test_a_relabelled_namespace_moves_its_pods_in_and_out(bed: PolicyBed) -> None:
    policy = into_a({"from": [{"namespaceSelector": labels(team="blue")}]})
    base = bed.cluster
    try:
        bed.apply([policy])
        bed.wait_programmed([policy])
        _converged(bed, [policy], "no namespace is blue")
        bed.label_namespace("z", {"team": "blue"})
        _world(bed, namespaces={"z": {"team": "blue"}})
        _converged(bed, [policy], "z is blue")
        bed.label_namespace("z", {"team": None})
        bed.label_namespace("y", {"team": "blue"})
        _world(bed, namespaces={"z": {"team": None}, "y": {"team": "blue"}})
        _converged(bed, [policy], "y is blue, z no longer")
    finally:
        bed.delete_policy("x", policy["metadata"]["name"])
        bed.label_namespace("z", {"team": None})
        bed.label_namespace("y", {"team": None})
        bed.cluster = base


def test_the_bed_reads_the_policies_as_kubectl_does(bed: PolicyBed) -> None:
    """The wait for programmed policies reads them straight from the apiserver (no kubectl
    run per poll): the same objects kubectl lists, annotations included."""
    policy = into_a({"from": [{"podSelector": labels(pod="b")}]}, name="read-back")
    try:
        bed.apply([policy])
        assert bed.wait_programmed([policy]) is None
        by_kubectl = json.loads(bed.kubectl("get", "networkpolicies", "-A", "-o", "json"))
        seen = {(p["metadata"]["namespace"], p["metadata"]["name"]): p["metadata"]
                for p in bed.policies()}
        assert set(seen) == {(p["metadata"]["namespace"], p["metadata"]["name"])
                             for p in by_kubectl["items"]}
        read = seen[("x", "read-back")]
        assert read["annotations"]["podnet.io/status"] == next(
            p["metadata"]["annotations"]["podnet.io/status"] for p in by_kubectl["items"]
            if p["metadata"]["name"] == "read-back")
    finally:
        bed.kubectl("delete", "networkpolicy", "-n", "x", "read-back", "--ignore-not-found")
