"""The truth table of ``tests/test_netpol_truth.py`` on OVN: the controller writes each
policy's port group, address sets and ACLs into a real NB, a real ``ovn-controller``
enforces them on one chassis (``ovs-vswitchd``'s userspace datapath and its conntrack);
the subnet is dual-stack, so every matrix is probed over IPv4 and over IPv6. The same
cases and change tests, on this module's own bed (its own file, so that two test workers
run both beds at once).

Open vSwitch 3.1.0's userspace conntrack sometimes asserts under the probes' many short
connections (``conn_update_state``) and ``ovs-vswitchd`` dies: the bed starts it again
and probes that case once more (the summary line counts it as ``dataplane_restarts``).
Its userspace datapath can also keep a megaflow translated by tables that changed under
it: the bed purges the datapath flows before it probes (``OvnPolicyBed
.purge_datapath_flows``), and a case with wrong cells has its chassis' state in its report.

Needs root, network namespaces, kubectl and the OVN packages; skipped with the reason
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_netpol_truth import (  # the same tests, collected here on this module's bed
    pytestmark,
    running,
    test_a_deleted_policy_opens_what_it_closed,
    test_a_label_flipped_on_a_running_pod_moves_it_in_and_out,
    test_a_relabelled_namespace_moves_its_pods_in_and_out,
    test_the_bed_reads_the_policies_as_kubectl_does,
    test_the_matrix_is_the_oracles,
)

from podnet.testing.netpol.beds import OvnPolicyBed, PolicyBed
from podnet.testing.netpol.matrix import Verdict
from podnet.testing.ovnbed import bed_unavailable

pytest_plugins = ["podnet.testing"]

__all__ = [
    "pytestmark", "test_a_deleted_policy_opens_what_it_closed",
    "test_a_label_flipped_on_a_running_pod_moves_it_in_and_out",
    "test_a_relabelled_namespace_moves_its_pods_in_and_out",
    "test_the_bed_reads_the_policies_as_kubectl_does", "test_the_matrix_is_the_oracles",
]

MISSING = bed_unavailable()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyBed]:
    if MISSING is not None:
        pytest.skip(MISSING)
    made = OvnPolicyBed(tmp_path_factory.mktemp("netpol-ovn"))
    assert 6 in made.families, f"the OVN bed's pods are not dual-stack: {made.families}"
    yield from running(made)


# --- the bed's own tools for the open flake (see OvnPolicyBed) ---------------------------------


def _conntrack_naming(bed: OvnPolicyBed, address: str) -> list[str]:
    return [line for line in bed._appctl("dpctl/dump-conntrack").splitlines()
            if f"={address}," in line]


def _datapath_flows_naming(bed: OvnPolicyBed, address: str) -> list[str]:
    return [line for line in bed._appctl("dpctl/dump-flows", "-m").splitlines()
            if f"dst={address}," in line or f"dst={address}/" in line]


def test_between_cases_the_chassis_forgets_the_connections_and_flows_of_the_last(
        bed: PolicyBed) -> None:
    assert isinstance(bed, OvnPolicyBed) and bed.prober is not None
    xa = bed.endpoints["x/a"].address(4)
    assert xa is not None
    got = bed.prober.probe([("y/b", "x/a", 80, "TCP"), ("y/b", "x/a", 81, "UDP")])
    assert set(got.values()) == {Verdict.PASS}, got
    assert _conntrack_naming(bed, xa), "the probes left no conntrack entry to flush"
    assert _datapath_flows_naming(bed, xa), "the probes left no datapath flow to purge"
    bed.between_cases()
    assert _conntrack_naming(bed, xa) == []
    assert _datapath_flows_naming(bed, xa) == []


def test_a_wrong_cell_is_reported_with_the_chassis_state_and_what_clears_it(
        bed: PolicyBed) -> None:
    # a cell that passes, said to be expected dropped: no clearing makes it "right"
    assert isinstance(bed, OvnPolicyBed)
    cell = ("z/a", "x/a", 80, "TCP")
    report = bed.diagnose({4: {cell: Verdict.DROP}})
    assert report is not None
    xa, za = bed.endpoints["x/a"].address(4), bed.endpoints["z/a"].address(4)
    assert f"z/a ({za}) -> x/a ({xa}) TCP/80, expected drop:" in report, report
    for dump in ("conntrack", "datapath flows", "openflow"):
        assert f"    {dump}: " in report, report
    # the OpenFlow tables name the pods' addresses (port security, ARP/ND answers)
    assert "openflow: 0 lines" not in report, report
    assert " failed: " not in report, report  # every clearing was done
    steps = ["nothing cleared", "conntrack flushed", "datapath flows purged",
             "ovn-controller recomputed"]
    assert [line.strip() for line in report.splitlines() if line.strip().startswith("after")] \
        == [f"after {step}: 1 cells wrong" for step in steps], report
    dump = report.split("whole dumps in ", 1)[1].split(")", 1)[0]
    assert "== openflow" in Path(dump).read_text()
