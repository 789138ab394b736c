"""Network namespaces on this host: whether they can be made, making and removing them,
and running Python code inside one.

The demo's node stage uses them (a node and its pods as namespaces) and the test kit
re-exports the probe (``podnet.testing.netns``), so the two agree on what a machine
needs.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: where iproute2 keeps the namespaces it names (``ip netns add NAME``)
NETNS_DIR = "/run/netns"
_CLONE_NEWNET = 0x40000000


def netns_unavailable() -> str | None:
    """Why this machine cannot make network namespaces with veth pairs and bridges in
    them, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, bridges)"
    if shutil.which("ip") is None:
        return "needs iproute2's ip to make network namespaces"
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


def netns_path(name: str) -> str:
    return os.path.join(NETNS_DIR, name)


def add_netns(name: str) -> str:
    """Make namespace ``name`` (with its loopback up); its path."""
    for argv in (["ip", "netns", "add", name], ["ip", "-n", name, "link", "set", "lo", "up"]):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise OSError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return netns_path(name)


def del_netns(name: str) -> None:
    """Remove namespace ``name`` and every link in it (a veth's peer outside goes too);
    nothing when it is not there."""
    subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def netns_exists(name: str) -> bool:
    return os.path.exists(netns_path(name))


def _setns(path: str) -> None:
    """Move the calling thread (only it) into the network namespace at ``path``."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns {path}: {os.strerror(err)}")
    finally:
        os.close(fd)


def run_in_netns(path: str, fn: Callable[[], T]) -> T:
    """``fn()`` in a new thread that entered the namespace at ``path`` first; its result
    or its exception.

    setns changes the calling thread only, so this thread's own namespace never changes;
    threads ``fn`` starts inherit the namespace (a thread is created in its creator's),
    which is how a long-lived server can be started inside one. Sockets keep the
    namespace they were made in."""
    out: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        try:
            _setns(path)
            out.append(fn())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    thread = threading.Thread(target=body, name=f"netns-{os.path.basename(path)}",
                              daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return out[0]
