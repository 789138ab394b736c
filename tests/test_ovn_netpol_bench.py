"""The NetworkPolicy benchmark on OVN runs end to end (a few policies) and prints its
JSON: one NB transaction per change, none for a call that changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.plugins.ovn.nbserver import ovsdb_server_available

_MISSING = ovsdb_server_available()
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "netpol_ovn.py"


def test_bench_smoke() -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--pods", "12", "--policies", "4",
                           "--northd", "no"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    for scenario in ("policies_only", "with_security_group"):
        got = result[scenario]
        for phase in ("create", "update", "delete"):
            assert got[phase]["nb_transactions_per_change"] == {"mean": 1, "max": 1}, got
        assert got["noop"]["nb_transactions_per_change"] == {"mean": 0, "max": 0}, got
        assert got["rows"]["port_groups"] == 4 and got["rows"]["acl_rows_per_policy"] > 0
    # the products with the group's rules: more rows where the pods are in a group
    assert (result["with_security_group"]["rows"]["acl_rows_per_policy"]
            > result["policies_only"]["rows"]["acl_rows_per_policy"])
