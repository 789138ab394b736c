"""A NetworkPolicy on OVN says ``Programmed`` only once the chassis has its flows: the
controller's policy transaction bumps ``NB_Global.nb_cfg`` and the provider reports the
policy programmed when ``hv_cfg`` (the least ``nb_cfg`` every chassis has installed) has
reached it. With ``ovn-controller`` down the status says ``Pending`` with the reason, and
no Warning Event is raised (waiting is not failing); started again, ``Programmed``
follows. A commit to NB alone is not a flow on a chassis.

Needs root, network namespaces, kubectl and the OVN packages; skipped with the reason
otherwise.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.testing.netns import netns_unavailable
from podnet.testing.netpol.beds import STATUS, OvnPolicyBed, programmed
from podnet.testing.netpol.cases import CASES
from podnet.testing.ovnbed import bed_unavailable

pytest_plugins = ["podnet.testing"]

_MISSING = netns_unavailable() or bed_unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")]


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[OvnPolicyBed]:
    made = OvnPolicyBed(tmp_path)
    try:
        yield made
    finally:
        made.close()


def _status(bed: OvnPolicyBed, namespace: str, name: str) -> dict[str, Any]:
    policy = next(p for p in bed.policies()
                  if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name))
    raw = (policy["metadata"].get("annotations") or {}).get(STATUS)
    return {"policy": policy, "status": json.loads(raw) if raw else None}


def _condition(status: dict[str, Any] | None) -> dict[str, Any]:
    for c in (status or {}).get("conditions") or ():
        if c.get("type") == "Programmed":
            return dict(c)
    return {}


def test_programmed_waits_for_the_chassis_to_install_the_flows(bed: OvnPolicyBed) -> None:
    case = next(c for c in CASES if c.name == "egress-ipblock-except")
    assert bed.cluster is not None
    policies = case.policies(case.cluster(bed.cluster))
    ns, name = policies[0]["metadata"]["namespace"], policies[0]["metadata"]["name"]
    ovn = bed.bed.ovn
    # a crash: the chassis stays registered in SB with the nb_cfg it had reached
    ovn.stop_controller(kill=True)
    try:
        bed.apply(policies)
        # the controller has handed the policy to the provider and written what it said
        deadline = time.monotonic() + 120
        while True:
            seen = _status(bed, ns, name)
            if _condition(seen["status"]).get("reason") or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        condition = _condition(seen["status"])
        assert not programmed(seen["policy"]), condition
        assert condition.get("status") == "Unknown", condition
        assert condition.get("reason") == "Pending", condition
        assert "hv_cfg" in condition.get("message", ""), condition
        events = json.loads(bed.kubectl("get", "events", "-n", ns, "-o", "json"))["items"]
        warned = [e for e in events if e.get("involvedObject", {}).get("name") == name
                  and e.get("reason") == "NotProgrammed"]
        assert warned == [], warned
    finally:
        ovn.start_controller()
    assert bed.wait_programmed(policies, timeout=120) is None
    for p in policies:
        bed.delete_policy(p["metadata"]["namespace"], p["metadata"]["name"])
