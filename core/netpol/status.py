"""The wire formats of a policy's realization, and the status core writes from them.

Two annotations:

- :data:`AGENT_REPORT_ANNOTATION` on a node agent's report Lease: the policies with a
  member on that node, as programmed (at a generation) or failed (with why), JSON
  ``{"programmed": {"<ns>/<name>": <generation>}, "failed": {"<ns>/<name>": "<message>"}}``;
- :data:`STATUS_ANNOTATION` on the NetworkPolicy (``networking.k8s.io/v1`` has no status
  since Kubernetes 1.28), written by the controller only when it changes, JSON
  ``{"observedGeneration": g, "conditions": [{"type", "status", "reason", "message",
  "lastTransitionTime"}], "nodes": {"programmed": n, "pending": [first 10 node names],
  "failed": {node: message}}, "members": n}``.

Conditions: ``Accepted`` (``True``, or ``False`` with the first finding's reason when a
part of the policy is not enforced as written — the rest is) and ``Programmed``
(``True`` once every member's node, or its provider, programmed this generation;
``Unknown``/``Pending`` while one has not said so yet — waiting is not failing;
``False``/``Failed`` when one said it could not).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import attrs

from podnet.hookspecs.netpol import PolicyRealization, ResolvedPolicy

#: on a node agent's report Lease: what it programmed
AGENT_REPORT_ANNOTATION = "podnet.io/network-policies"
#: on a NetworkPolicy: its realization, as the controller sees it
STATUS_ANNOTATION = "podnet.io/status"

ACCEPTED = "Accepted"
PROGRAMMED = "Programmed"
#: how many pending nodes a status names (the count is ``members``/``nodes``)
PENDING_SHOWN = 10


@attrs.frozen
class AgentPolicyReport:
    """One agent's word on the policies with a member on its node (``node``: its node,
    when read from its Lease)."""

    programmed: Mapping[str, int] = attrs.field(factory=dict)
    failed: Mapping[str, str] = attrs.field(factory=dict)
    node: str = ""


def encode_agent_report(report: AgentPolicyReport) -> str:
    return json.dumps({"programmed": dict(sorted(report.programmed.items())),
                       "failed": dict(sorted(report.failed.items()))},
                      separators=(",", ":"), sort_keys=True)


def read_agent_report(text: str | None) -> AgentPolicyReport:
    """An agent's report annotation, leniently: what cannot be read says nothing (its
    policies stay pending)."""
    try:
        raw = json.loads(text) if text else {}
    except ValueError:
        return AgentPolicyReport()
    if not isinstance(raw, Mapping):
        return AgentPolicyReport()
    programmed, failed = raw.get("programmed"), raw.get("failed")
    return AgentPolicyReport(
        programmed={str(k): v for k, v in (programmed or {}).items()
                    if isinstance(v, int) and not isinstance(v, bool)}
        if isinstance(programmed, Mapping) else {},
        failed={str(k): str(v) for k, v in (failed or {}).items()}
        if isinstance(failed, Mapping) else {})


@attrs.frozen
class PolicyCondition:
    type: str
    status: str
    reason: str
    message: str = ""
    last_transition_time: str = ""


@attrs.frozen
class PolicyStatus:
    observed_generation: int
    conditions: tuple[PolicyCondition, ...] = ()
    nodes_programmed: int = 0
    #: the first :data:`PENDING_SHOWN` pending nodes, sorted
    nodes_pending: tuple[str, ...] = ()
    nodes_pending_count: int = 0
    nodes_failed: Mapping[str, str] = attrs.field(factory=dict)
    members: int = 0

    def condition(self, type_: str) -> PolicyCondition | None:
        return next((c for c in self.conditions if c.type == type_), None)


def encode_status(status: PolicyStatus) -> str:
    return json.dumps({
        "observedGeneration": status.observed_generation,
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason,
                        "message": c.message, "lastTransitionTime": c.last_transition_time}
                       for c in status.conditions],
        "nodes": {"programmed": status.nodes_programmed,
                  "pending": list(status.nodes_pending),
                  "failed": dict(sorted(status.nodes_failed.items()))},
        "members": status.members,
    }, separators=(",", ":"))


def read_status(text: str | None) -> PolicyStatus | None:
    """A policy's status annotation, or None when it has none (or it cannot be read)."""
    try:
        raw = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(raw, Mapping):
        return None
    conditions = []
    for c in raw.get("conditions") or ():
        if isinstance(c, Mapping):
            conditions.append(PolicyCondition(
                type=str(c.get("type", "")), status=str(c.get("status", "")),
                reason=str(c.get("reason", "")), message=str(c.get("message", "")),
                last_transition_time=str(c.get("lastTransitionTime", ""))))
    nodes = raw.get("nodes")
    nodes = nodes if isinstance(nodes, Mapping) else {}
    pending = [str(n) for n in nodes.get("pending") or () if isinstance(n, str)]
    failed = nodes.get("failed")
    failed = failed if isinstance(failed, Mapping) else {}
    return PolicyStatus(
        observed_generation=_int(raw.get("observedGeneration")),
        conditions=tuple(conditions),
        nodes_programmed=_int(nodes.get("programmed")),
        nodes_pending=tuple(pending), nodes_pending_count=len(pending),
        nodes_failed={str(k): str(v) for k, v in failed.items()},
        members=_int(raw.get("members")))


def policy_status(resolved: ResolvedPolicy, *,
                  provider_enforced: Collection[str],
                  provider_answers: Mapping[str, PolicyRealization | None],
                  reports: Mapping[str, AgentPolicyReport],
                  previous: PolicyStatus | None,
                  now: str) -> PolicyStatus:
    """The status of ``resolved``: members of a provider in ``provider_enforced`` are
    programmed by that provider's answer (``provider_answers``; missing or None: not yet),
    every other member by its node agent's report (``reports`` by node)."""
    key, generation = resolved.key, resolved.generation
    programmed: set[str] = set()
    pending: set[str] = set()
    #: pending nodes whose provider said why it waits
    waiting: dict[str, str] = {}
    failed: dict[str, str] = {}
    for member in resolved.members:
        node = member.node
        if member.provider in provider_enforced:
            answer = provider_answers.get(member.provider)
            if answer is None:
                pending.add(node)
            elif answer.waiting and not answer.programmed:
                pending.add(node)
                waiting.setdefault(node, f"provider {member.provider}: {answer.message}"
                                   if answer.message else "")
            elif answer.programmed:
                programmed.add(node)
            else:
                failed[node] = f"provider {member.provider}: {answer.message or 'not programmed'}"
            continue
        report = reports.get(node)
        if report is not None and key in report.failed:
            failed[node] = report.failed[key]
        elif report is not None and report.programmed.get(key, -1) >= generation:
            programmed.add(node)
        else:
            pending.add(node)
    pending -= failed.keys()
    programmed -= pending | failed.keys()

    reading = [f for f in resolved.findings]
    if reading:
        fields = ", ".join(f.field for f in reading[:5]) + (" ..." if len(reading) > 5 else "")
        accepted = (ACCEPTED, "False", reading[0].reason.value,
                    f"{len(reading)} part(s) not enforced as written ({fields}); the rest is "
                    "enforced")
    else:
        accepted = (ACCEPTED, "True", ACCEPTED, "")
    if failed:
        first = min(failed)
        done = (PROGRAMMED, "False", "Failed",
                f"{len(failed)} node(s) failed, {first}: {failed[first]}")
    elif pending:
        said = sorted(n for n, why in waiting.items() if why and n in pending)
        why = f"; {said[0]}: {waiting[said[0]]}" if said else ""
        done = (PROGRAMMED, "Unknown", "Pending",
                f"{len(pending)} node(s) not programmed yet, {min(pending)} first{why}")
    elif resolved.members:
        done = (PROGRAMMED, "True", PROGRAMMED,
                f"programmed on {len(programmed)} node(s)")
    else:
        done = (PROGRAMMED, "True", "NoMembers", "the policy selects no plumbed pod")
    conditions = []
    for type_, status, reason, message in (accepted, done):
        before = previous.condition(type_) if previous is not None else None
        since = (before.last_transition_time
                 if before is not None and before.status == status and before.last_transition_time
                 else now)
        conditions.append(PolicyCondition(type_, status, reason, message, since))
    shown = tuple(sorted(pending)[:PENDING_SHOWN])
    return PolicyStatus(
        observed_generation=generation, conditions=tuple(conditions),
        nodes_programmed=len(programmed), nodes_pending=shown,
        nodes_pending_count=len(pending), nodes_failed=dict(sorted(failed.items())),
        members=len(resolved.members))


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
