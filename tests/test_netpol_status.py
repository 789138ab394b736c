"""The realization's wire formats (podnet.core.netpol.status): the agents' report
annotation, the policy's status annotation, and the conditions core derives."""

from __future__ import annotations

import json

from podnet.core.netpol.status import (
    AgentPolicyReport,
    encode_agent_report,
    encode_status,
    policy_status,
    read_agent_report,
    read_status,
)
from podnet.hookspecs.netpol import (
    FindingReason,
    PolicyFinding,
    PolicyMember,
    PolicyRealization,
    ResolvedPolicy,
)


def member(name: str, node: str, provider: str = "reference") -> PolicyMember:
    return PolicyMember(f"x/{name}", ("10.0.0.1",), node, provider)


def resolved(*members: PolicyMember, generation: int = 2,
             findings: tuple[PolicyFinding, ...] = ()) -> ResolvedPolicy:
    return ResolvedPolicy("x", "p", "u", generation, members=members, ingress=(),
                          findings=findings)


def test_agent_report_round_trip_and_wire_form() -> None:
    report = AgentPolicyReport(programmed={"x/p": 2, "a/b": 1}, failed={"x/q": "nft: no"})
    text = encode_agent_report(report)
    assert json.loads(text) == {"programmed": {"a/b": 1, "x/p": 2}, "failed": {"x/q": "nft: no"}}
    assert read_agent_report(text) == report


def test_an_unreadable_agent_report_says_nothing() -> None:
    for text in (None, "", "{", "[]", '{"programmed": [1], "failed": 3}',
                 '{"programmed": {"x/p": "2", "x/q": true}}'):
        assert read_agent_report(text) == AgentPolicyReport()


def test_programmed_from_agent_reports() -> None:
    policy = resolved(member("a", "n1"), member("b", "n2"), member("c", "n3"))
    reports = {"n1": AgentPolicyReport(programmed={"x/p": 2}),
               "n2": AgentPolicyReport(programmed={"x/p": 1}),  # an older generation
               "n3": AgentPolicyReport(failed={"x/p": "nft: table busy"})}
    status = policy_status(policy, provider_enforced=(), provider_answers={},
                           reports=reports, previous=None, now="T1")
    assert (status.nodes_programmed, status.nodes_pending, status.nodes_failed) == (
        1, ("n2",), {"n3": "nft: table busy"})
    assert status.members == 3 and status.observed_generation == 2
    done = status.condition("Programmed")
    assert done is not None and (done.status, done.reason) == ("False", "Failed")
    assert "n3: nft: table busy" in done.message
    accepted = status.condition("Accepted")
    assert accepted is not None and (accepted.status, accepted.reason) == ("True", "Accepted")


def test_pending_is_unknown_not_false() -> None:
    status = policy_status(resolved(member("a", "n1")), provider_enforced=(),
                           provider_answers={}, reports={}, previous=None, now="T1")
    done = status.condition("Programmed")
    assert done is not None and (done.status, done.reason) == ("Unknown", "Pending")
    assert status.nodes_pending == ("n1",)


def test_provider_answers_count_for_their_members_nodes() -> None:
    policy = resolved(member("a", "n1", "ovn"), member("b", "n2", "ovn"),
                      member("c", "n3", "reference"))
    status = policy_status(
        policy, provider_enforced={"ovn"},
        provider_answers={"ovn": PolicyRealization(programmed=True)},
        reports={"n3": AgentPolicyReport(programmed={"x/p": 5})}, previous=None, now="T1")
    assert status.nodes_programmed == 3
    done = status.condition("Programmed")
    assert done is not None and done.status == "True"
    status = policy_status(
        policy, provider_enforced={"ovn"},
        provider_answers={"ovn": PolicyRealization(programmed=False, message="no NB")},
        reports={}, previous=None, now="T1")
    assert status.nodes_failed == {"n1": "provider ovn: no NB", "n2": "provider ovn: no NB"}
    assert status.nodes_pending == ("n3",)


def test_a_provider_waiting_for_its_dataplane_is_pending_with_its_reason() -> None:
    policy = resolved(member("a", "n1", "ovn"))
    status = policy_status(
        policy, provider_enforced={"ovn"},
        provider_answers={"ovn": PolicyRealization(programmed=False, waiting=True,
                                                   message="hv_cfg 3 of 4")},
        reports={}, previous=None, now="T1")
    done = status.condition("Programmed")
    assert done is not None and (done.status, done.reason) == ("Unknown", "Pending")
    assert "n1: provider ovn: hv_cfg 3 of 4" in done.message
    assert status.nodes_pending == ("n1",) and status.nodes_failed == {}


def test_no_members_is_programmed() -> None:
    status = policy_status(resolved(), provider_enforced=(), provider_answers={}, reports={},
                           previous=None, now="T1")
    done = status.condition("Programmed")
    assert done is not None and (done.status, done.reason) == ("True", "NoMembers")


def test_findings_make_accepted_false_naming_the_fields() -> None:
    finding = PolicyFinding("spec.ingress[0].from[1].ipBlock.cidr",
                            FindingReason.INVALID_VALUE, "'x' is not a CIDR")
    status = policy_status(resolved(findings=(finding,)), provider_enforced=(),
                           provider_answers={}, reports={}, previous=None, now="T1")
    accepted = status.condition("Accepted")
    assert accepted is not None
    assert (accepted.status, accepted.reason) == ("False", "InvalidValue")
    assert "spec.ingress[0].from[1].ipBlock.cidr" in accepted.message


def test_transition_time_moves_only_with_the_status() -> None:
    policy = resolved(member("a", "n1"))
    first = policy_status(policy, provider_enforced=(), provider_answers={}, reports={},
                          previous=None, now="T1")
    again = policy_status(policy, provider_enforced=(), provider_answers={}, reports={},
                          previous=read_status(encode_status(first)), now="T2")
    assert encode_status(again) == encode_status(first)
    done = policy_status(policy, provider_enforced=(), provider_answers={},
                         reports={"n1": AgentPolicyReport(programmed={"x/p": 2})},
                         previous=again, now="T3")
    times = {c.type: c.last_transition_time for c in done.conditions}
    assert times == {"Accepted": "T1", "Programmed": "T3"}


def test_status_wire_form_and_pending_cut() -> None:
    policy = resolved(*(member(f"m{i}", f"n{i:02}") for i in range(12)))
    status = policy_status(policy, provider_enforced=(), provider_answers={}, reports={},
                           previous=None, now="T1")
    wire = json.loads(encode_status(status))
    assert set(wire) == {"observedGeneration", "conditions", "nodes", "members"}
    assert wire["nodes"] == {"programmed": 0, "pending": [f"n{i:02}" for i in range(10)],
                             "failed": {}}
    assert wire["members"] == 12
    assert [set(c) for c in wire["conditions"]] == [
        {"type", "status", "reason", "message", "lastTransitionTime"}] * 2
    back = read_status(encode_status(status))
    assert back is not None and back.conditions == status.conditions
    assert read_status("nope") is None and read_status(None) is None
