"""The port-churn benchmark runs end to end (a few ports) and prints its JSON."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from podnet.plugins.ovn.nbserver import ovsdb_server_available

_MISSING = ovsdb_server_available() or (
    None if shutil.which("ovn-nbctl") else "ovn-nbctl is not installed (Debian ovn-central)")
pytestmark = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "ovn_ports.py"


def test_bench_smoke() -> None:
    out = subprocess.run([sys.executable, str(BENCH), "--ports", "20", "--workers", "4",
                          "--json"], check=True, capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout)
    assert result["ports"] == 20
    assert result["podnet"]["create_s"] > 0 and result["ovn_nbctl"]["delete_s"] > 0
    assert {"speedup_create", "speedup_delete", "goal_met"} <= set(result)
