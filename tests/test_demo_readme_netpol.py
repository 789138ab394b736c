"""The README's NetworkPolicy walkthrough, run as written: its block, in a network
namespace standing for the node (as the README has the operator make one), with only its
names made unique to this run (the pods' namespaces, its files; the node's namespace is
this test's own). The output says what the README says it does: both pairs open before
the policies, both policies Programmed, the allowed pair connecting, the denied pair's
connect dropped (curl's exit 28, a timeout, not 7, a refusal), the agent's table in
place, and with ``networkPolicy: none`` the table gone and the pair open again.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from podnet.testing.netns import netns_unavailable

ROOT = Path(__file__).resolve().parent.parent
MARK = "<!-- tests/test_demo_readme_netpol.py runs this block -->"

WHY = netns_unavailable() or next(
    (f"{tool} is not installed" for tool in ("nft", "curl", "jq", "kubectl", "python3")
     if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}")), None)
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY is not None, reason=WHY or "")]


def _block() -> str:
    readme = (ROOT / "README.md").read_text()
    rest = readme[readme.index(MARK) + len(MARK):]
    rest = rest[rest.index("```sh\n") + len("```sh\n"):]
    return rest[:rest.index("```")]


def _netns() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                            check=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_readme_walks_through_a_default_deny_namespace_with_one_allowed_pair(
        tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:6]
    node, prefix = f"pnrd-{run}", f"pnrd{run}-"
    block = _block()
    # every file of the block is one of its /tmp/podnet-np* (made this test's own)
    assert block.count("/tmp/") == block.count("/tmp/podnet-np") > 0
    script = block.replace("/tmp/podnet-np", str(tmp_path / "np")).replace("shop-", prefix)
    (tmp_path / "walkthrough.sh").write_text(script)
    subprocess.run(["ip", "netns", "add", node], check=True)
    proc: subprocess.Popen[str] | None = None
    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", node, "bash", str(tmp_path / "walkthrough.sh")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True)
        out, _ = proc.communicate(timeout=240)
        said = [line for line in out.splitlines() if not line.startswith('{"')]
        text = "\n".join(said)
        assert proc.returncode == 0, text[-3000:]
        pairs = [line for line in said if " -> " in line]
        assert pairs == ["client -> server: 200", "server -> client: 200",  # no policy
                         "client -> server: 200", "server -> client: exit 28",  # policy
                         "server -> client: 200"], text[-3000:]  # networkPolicy: none
        flat = " ".join(text.split())
        for name, members in (("shop/allow-client-to-server", 1), ("shop/default-deny", 2)):
            # piped: plain columns, "-" for an empty cell
            assert f"{name} {members} 1 - - Programmed" in flat, text[-3000:]
        assert '"reason": "Programmed"' in text and '"members": 2' in text
        assert "table inet podnet {" in text and 'drop comment "shop/client' in text
        assert "namespace \"shop\" deleted" in text
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            # what the block started and stopped: gone, or made to go
            deadline = time.monotonic() + 15
            while _group_alive(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for name in sorted(_netns()):
            if name == node or name.startswith(prefix):
                subprocess.run(["ip", "netns", "del", name], check=False)
    assert not {n for n in _netns() if n == node or n.startswith(prefix)}
