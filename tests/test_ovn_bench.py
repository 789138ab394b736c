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
                          "--plug-pods", "0", "--json"], check=True, capture_output=True,
                         text=True, timeout=120)
    result = json.loads(out.stdout)
    assert result["ports"] == 20
    assert result["podnet"]["create_s"] > 0 and result["ovn_nbctl"]["delete_s"] > 0
    assert {"speedup_create", "speedup_delete", "goal_met"} <= set(result)


def test_bench_bound_only() -> None:
    """``--no-nbctl``: podnet against the bulk bound only; the bound writes the external
    ids podnet writes (and the thin bound of before, two ids, beside it)."""
    out = subprocess.run([sys.executable, str(BENCH), "--ports", "20", "--workers", "4",
                          "--plug-pods", "0", "--no-nbctl", "--json"], check=True,
                         capture_output=True, text=True, timeout=120)
    result = json.loads(out.stdout)
    assert "ovn_nbctl" not in result and "speedup" not in result
    assert set(result["goal_met"]) == {"vs_bulk"}
    for bound in ("bulk", "bulk_thin"):
        assert result[bound]["create_s"] > 0 and result[bound]["cpu_s"] > 0
    assert result["vs_bulk"] > 0 and result["vs_bulk_thin"] > 0
    assert result["podnet"]["cpu_s"] > 0


@pytest.mark.slow
def test_bench_plug_smoke() -> None:
    """The plug phase on a real chassis, a few pods: every ADD answered with the port up,
    nothing left on br-int after DEL."""
    from podnet.testing.ovnbed import bed_unavailable

    why = bed_unavailable()
    if why:
        pytest.skip(why)
    out = subprocess.run([sys.executable, str(BENCH), "--ports", "5", "--workers", "2",
                          "--plug-pods", "2", "--json"], check=True, capture_output=True,
                         text=True, timeout=300)
    plug = json.loads(out.stdout)["plug"]
    assert plug["pods"] == 2 and plug["ovs_ports_left"] == 0, plug
    assert plug["create_to_add_answered"]["p99_ms"] > 0
