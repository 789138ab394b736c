"""The demo's report of its NetworkPolicy part, without running it: each pair's verdict
against what the policies say, the summary line per dataplane, and what is printed (a
pair not as the policies say is shown as such, a node that cannot enforce says so)."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from podnet.app.cli import _print_node_stage
from podnet.app.demo import DemoReport
from podnet.app.demo_node import NodeStageReport
from podnet.app.demo_policy import PolicyProbe


def _probes(denied_after: str) -> list[PolicyProbe]:
    return [PolicyProbe("pod-a", "pod-b", 8080, "allowed", "ok", "ok"),
            PolicyProbe("pod-b", "pod-a", 8080, "denied", "ok", denied_after)]


def _stage(**kwargs: Any) -> NodeStageReport:
    return NodeStageReport(ran=True, policy_enforcer="node agent (nftables)", **kwargs)


def test_a_pair_is_as_the_policies_say_only_when_open_before_and_dropped_or_open_after(
        ) -> None:
    allowed, denied = _probes("timeout")
    assert allowed.ok and denied.ok
    # enforcement off: the denied pair still connects
    assert not PolicyProbe("b", "a", 1, "denied", "ok", "ok").ok
    # a refusal is something answering: not a drop
    assert not PolicyProbe("b", "a", 1, "denied", "ok", "refused").ok
    # closed before the policies: the verdict after says nothing of them
    assert not PolicyProbe("b", "a", 1, "denied", "timeout", "timeout").ok
    assert not PolicyProbe("a", "b", 1, "allowed", "ok", "timeout").ok


def test_the_summary_says_each_dataplanes_pairs_or_why_not() -> None:
    report = DemoReport(
        node=_stage(probes=_probes("timeout")),
        ecs_node=_stage(probes=_probes("ok")),
        bbc_node=_stage(policy_skipped="nft is not installed"),
        ovn_node=NodeStageReport(skipped="the OVN provider is not in this run"))
    assert report.policy_pairs() == {
        "reference": "allowed connects, denied dropped",
        "BBC": "not enforced here: nft is not installed",
        "ECS": "allowed connects, denied connects (WRONG)",
        "OVN": "skipped: the OVN provider is not in this run"}


def _printed(stage: NodeStageReport) -> str:
    out = io.StringIO()
    _print_node_stage(Console(file=out, width=200), stage, "on a node")
    return out.getvalue()


def test_the_stage_prints_its_policies_and_each_pair() -> None:
    row = {"namespace": "demo-node", "name": "default-deny", "members": 2,
           "programmed": {"status": "True", "reason": "Programmed",
                          "message": "programmed on 1 node(s)"}}
    text = _printed(_stage(policies=[row], probes=_probes("ok"), policy_programmed_ms=12.5,
                           policies_removed=True))
    assert ("NetworkPolicy demo-node/default-deny: Programmed (programmed on 1 node(s)), "
            "2 member(s)") in text
    assert "enforced by the node agent (nftables), programmed in 12.5 ms" in text
    assert "pod-a -> pod-b tcp/8080: before ok, after ok (allowed)\n" in text
    assert "pod-b -> pod-a tcp/8080: before ok, after ok (denied) NOT AS THE POLICY SAYS" in text
    assert "policies deleted, what they programmed removed" in text
    skipped = _printed(_stage(policy_skipped="nft is not installed"))
    assert "NetworkPolicy not enforced here: nft is not installed" in skipped
