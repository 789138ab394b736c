"""Network namespaces on this host: whether they can be made, making and removing them,
running Python code inside one, and netlink sockets in one.

A network namespace is per thread: ``setns`` moves the calling thread only. Everything
here that enters a namespace does it from a short-lived thread of its own, so no caller
ever changes namespace; a socket keeps the namespace it was made in for its whole life.
The demo's node stage, the dataplanes and the test kit (``podnet.testing.netns``) use the
same probe, so they agree on what a machine needs.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import stat
import subprocess
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

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


def setns(path: str) -> None:
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
            setns(path)
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


#: ioctl(2) on a namespace file: which kind of namespace it is (linux/nsfs.h)
_NS_GET_NSTYPE = 0xB703


def network_namespace_id(path: str) -> tuple[int, int]:
    """The identity (device, inode) of the network namespace at ``path``: two paths name
    the same namespace exactly when their identities are equal (a bind mount, a
    ``/proc/PID/ns/net`` link, a symlink to either).

    :raise ValueError: ``path`` is not a network namespace (a plain file, a directory,
        another kind of namespace), saying what it is; OSError when it cannot be opened."""
    # a namespace file is a regular file (of nsfs): anything else is not opened at all
    # (a FIFO would block, a device's open may act)
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{path} is not a namespace")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        try:
            kind = fcntl.ioctl(fd, _NS_GET_NSTYPE)
        except OSError as exc:
            if exc.errno in (errno.ENOTTY, errno.EINVAL):
                raise ValueError(f"{path} is not a namespace") from None
            raise
        if kind != _CLONE_NEWNET:
            raise ValueError(f"{path} is a namespace of another kind than network")
        st = os.fstat(fd)
        return st.st_dev, st.st_ino
    finally:
        os.close(fd)


def own_network_namespaces() -> set[tuple[int, int]]:
    """The identities of this process's network namespace and of the host's (pid 1's),
    as far as they can be read: never a pod's."""
    found = set()
    for path in ("/proc/self/ns/net", "/proc/thread-self/ns/net", "/proc/1/ns/net"):
        try:
            found.add(network_namespace_id(path))
        except (OSError, ValueError):
            continue  # not readable here (no /proc, no permission): the others stand
    return found


#: the netlink protocol of routing (links, addresses, routes)
_NETLINK_ROUTE = 0


def load_netlink() -> None:
    """Import pyroute2 now. It is imported on first use (a command that never plugs
    does without its 0.2 s); an agent calls this as it is made, before its socket is
    served, so the first ADDs of a burst do not queue behind one another on the
    import's lock (1-3 s each on a loaded host, where the plug takes milliseconds)."""
    import pyroute2  # noqa: F401


def iproute(path: str | None = None) -> Any:
    """A pyroute2 ``IPRoute`` speaking to the namespace at ``path`` (this thread's when
    None); close it when done.

    Its netlink socket is made by a thread that joins the namespace: well under a
    millisecond, where pyroute2's own ``NetNS`` forks a helper process for it (about
    10 ms, more on a loaded machine). :raise OSError: ``path`` is no namespace one can
    join."""
    import socket

    from pyroute2 import IPRoute

    if path is None:
        return IPRoute()
    sock = run_in_netns(path, lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                                    _NETLINK_ROUTE))
    return IPRoute(fileno=sock.detach())
