"""Whether this machine can run the packet tests (network namespaces, veth, bridges)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid


def netns_unavailable() -> str | None:
    """Why the packet tests cannot run here (a reason for ``skipif``), or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, bridges)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip to make the test's namespaces"
    try:
        import pyroute2  # noqa: F401
    except ImportError:
        return "pyroute2 is not installed"
    name = f"pnprobe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, check=False)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None
