"""The truth table of ``tests/test_netpol_truth.py`` on OVN: the controller writes each
policy's port group, address sets and ACLs into a real NB, a real ``ovn-controller``
enforces them on one chassis (``ovs-vswitchd``'s userspace datapath and its conntrack);
the subnet is dual-stack, so every matrix is probed over IPv4 and over IPv6. The same
cases and change tests, on this module's own bed (its own file, so that two test workers
run both beds at once).

Open vSwitch 3.1.0's userspace conntrack sometimes asserts under the probes' many short
connections (``conn_update_state``) and ``ovs-vswitchd`` dies: the bed starts it again
and probes that case once more (the summary line counts it as ``dataplane_restarts``).

Needs root, network namespaces, kubectl and the OVN packages; skipped with the reason
otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_netpol_truth import (  # the same tests, collected here on this module's bed
    pytestmark,
    running,
    test_a_deleted_policy_opens_what_it_closed,
    test_a_label_flipped_on_a_running_pod_moves_it_in_and_out,
    test_a_relabelled_namespace_moves_its_pods_in_and_out,
    test_the_matrix_is_the_oracles,
)

from podnet.testing.netpol.beds import OvnPolicyBed, PolicyBed
from podnet.testing.ovnbed import bed_unavailable

pytest_plugins = ["podnet.testing"]

__all__ = [
    "pytestmark", "test_a_deleted_policy_opens_what_it_closed",
    "test_a_label_flipped_on_a_running_pod_moves_it_in_and_out",
    "test_a_relabelled_namespace_moves_its_pods_in_and_out", "test_the_matrix_is_the_oracles",
]

MISSING = bed_unavailable()


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PolicyBed]:
    if MISSING is not None:
        pytest.skip(MISSING)
    made = OvnPolicyBed(tmp_path_factory.mktemp("netpol-ovn"))
    assert 6 in made.families, f"the OVN bed's pods are not dual-stack: {made.families}"
    yield from running(made)
