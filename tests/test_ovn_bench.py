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
