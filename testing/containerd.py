"""A private containerd for tests, and an OCI image built here from busybox.

Nothing is pulled: :func:`write_busybox_image` writes an OCI image layout as a tar (one
uncompressed layer holding ``/bin/busybox`` and a symlink per applet, the config, the
manifest, the index) from the host's static busybox (Debian's ``busybox-static``), and
:class:`Containerd` imports it into a containerd of the test's own::

    with private_containerd() as ctrd:
        image = ctrd.import_image(write_busybox_image(ctrd.base / "busybox.tar"))
        done = ctrd.run(image, ["busybox", "ip", "addr"], netns="/run/netns/pod-1")
        server = ctrd.start(image, ["nc", "-l", "-p", "8080"], netns="/run/netns/pod-2")

The daemon runs with its own ``--config``: root, state, sockets, runc root and FIFO
directory all under one temporary directory, the CRI plugin off, the ``native``
snapshotter (plain directory copies: no overlay mounts, so it also runs where overlayfs
on the host's filesystem does not). Only the shims' sockets live outside it, in
containerd's fixed ``/run/containerd/s`` (named by a hash of our socket, namespace and
container): they are removed with their shim. :meth:`Containerd.run` runs a command to
its end (``ctr run --rm``), :meth:`Containerd.start` leaves one running (``--detach``).

:meth:`Containerd.close` (and the context manager, also on failure) kills and deletes
every task and container, stops the daemon, kills a shim it left behind, unmounts what
is still mounted under its directory, removes its cgroups and the directory.

:func:`containerd_unavailable` says why this cannot run here (a ``skipif`` reason): not
root, a missing binary, or runc unable to run a container at all (cgroups, mounts), found
by running busybox in a bare runc bundle.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BUSYBOX",
    "IMAGE_NAME",
    "Containerd",
    "containerd_unavailable",
    "private_containerd",
    "write_busybox_image",
]

#: Debian's busybox-static
BUSYBOX = Path("/bin/busybox")
IMAGE_NAME = "podnet.test/busybox:latest"
#: where containerd 1.6 puts every shim's socket, whatever its config says
SHIM_SOCKET_DIR = Path("/run/containerd/s")
CGROUP_ROOT = Path("/sys/fs/cgroup")

_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_INDEX = "application/vnd.oci.image.index.v1+json"
_CONFIG = "application/vnd.oci.image.config.v1+json"
_LAYER = "application/vnd.oci.image.layer.v1.tar"
#: Python's machine names -> the OCI (Go) architecture names
_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "ppc64le": "ppc64le",
         "s390x": "s390x", "riscv64": "riscv64"}


# --- the image -------------------------------------------------------------------------


def _oci_arch() -> str:
    machine = platform.machine()
    return _ARCH.get(machine, machine)


def _applets(busybox: Path) -> list[str]:
    listed = subprocess.run([str(busybox), "--list"], capture_output=True, text=True,
                            check=True, timeout=10)
    return sorted({name for name in listed.stdout.split() if name and "/" not in name}
                  - {"busybox"})


def _layer(busybox: Path) -> bytes:
    """The one layer: ``/bin/busybox``, a symlink to it per applet, ``/tmp``; owned by
    root, dated 0, so the same busybox always gives the same digest."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("bin", "tmp"):
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in _applets(busybox):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            link.mode = 0o777
            tar.addfile(link)
    return out.getvalue()


def _descriptor(media_type: str, blob: bytes) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": "sha256:" + hashlib.sha256(blob).hexdigest(),
            "size": len(blob)}


def write_busybox_image(dest: Path, *, busybox: Path = BUSYBOX,
                        name: str = IMAGE_NAME) -> Path:
    """Write an OCI image layout tar of ``busybox`` to ``dest``, named ``name`` (the
    annotation ``ctr image import`` names the image by); return ``dest``."""
    if not busybox.is_file():
        raise FileNotFoundError(f"busybox: {busybox} does not exist (Debian: busybox-static)")
    layer = _layer(busybox)
    arch = _oci_arch()
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers",
                   # uncompressed, so the layer's digest is its diff id
                   "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": _MANIFEST,
        "config": _descriptor(_CONFIG, config), "layers": [_descriptor(_LAYER, layer)],
    }, sort_keys=True).encode()
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
    index = json.dumps({
        "schemaVersion": 2, "mediaType": _INDEX,
        "manifests": [{**_descriptor(_MANIFEST, manifest),
                       "platform": {"architecture": arch, "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": tag}}],
    }, sort_keys=True).encode()
    files = {"oci-layout": json.dumps({"imageLayoutVersion": "1.0.0"}).encode(),
             "index.json": index}
    for blob in (layer, config, manifest):
        files["blobs/sha256/" + hashlib.sha256(blob).hexdigest()] = blob
    with tarfile.open(dest, "w") as tar:
        for directory in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            tar.addfile(info)
        for path, blob in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(blob)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(blob))
    return dest


# --- can it run here -------------------------------------------------------------------


def containerd_unavailable(busybox: Path = BUSYBOX) -> str | None:
    """Why a private containerd cannot run a container here (a reason for ``skipif``),
    or None. Runs busybox once in a bare runc bundle (about 0.1 s): runc fails there when
    the machine's cgroups or mounts do not let it make a container."""
    if os.geteuid() != 0:
        return "needs root (containerd, runc)"
    for binary, package in (("containerd", "containerd"), ("ctr", "containerd"),
                            ("containerd-shim-runc-v2", "containerd"), ("runc", "runc")):
        if shutil.which(binary) is None:
            return f"{binary} is not installed (Debian: {package})"
    if not busybox.is_file():
        return f"{busybox} is missing (Debian: busybox-static)"
    with tempfile.TemporaryDirectory(prefix="pnrunc-") as tmp:
        bundle = Path(tmp)
        (bundle / "rootfs" / "bin").mkdir(parents=True)
        shutil.copy2(busybox, bundle / "rootfs" / "bin" / "busybox")
        spec = subprocess.run(["runc", "spec", "--bundle", str(bundle)], capture_output=True,
                              text=True, check=False, timeout=10)
        if spec.returncode != 0:
            return f"runc spec failed: {spec.stderr.strip()}"
        config_path = bundle / "config.json"
        config = json.loads(config_path.read_text())
        config["process"].update(terminal=False, args=["/bin/busybox", "true"])
        config_path.write_text(json.dumps(config))
        name = f"pnprobe-{uuid.uuid4().hex[:8]}"
        try:
            ran = subprocess.run(["runc", "--root", str(bundle / "state"), "run", "--bundle",
                                  str(bundle), name], capture_output=True, text=True,
                                 check=False, timeout=30)
        except subprocess.TimeoutExpired:
            return "runc could not run busybox in a bare bundle within 30 s"
        finally:
            subprocess.run(["runc", "--root", str(bundle / "state"), "delete", "--force",
                            name], capture_output=True, check=False, timeout=10)
        if ran.returncode != 0:
            return (f"runc cannot run a container here (exit {ran.returncode}): "
                    f"{(ran.stderr or ran.stdout).strip()}")
    return None


# --- the daemon ------------------------------------------------------------------------


#: The daemon's parent. A shim daemonizes: once the process that started it exits, the
#: kernel gives it to the nearest "child subreaper" ancestor, else to pid 1, and a pid 1
#: that reaps no orphans (a container's, this machine's) keeps every exited shim as a
#: zombie. This parent is that subreaper: it forwards SIGTERM to the daemon and reaps
#: every process given to it; it exits once the daemon and every shim are gone.
_REAPER = """
import ctypes, os, signal, subprocess, sys
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
daemon = subprocess.Popen(sys.argv[1:])
signal.signal(signal.SIGTERM, lambda *_: os.kill(daemon.pid, signal.SIGTERM))
code = 0
while True:
    try:
        pid, status = os.wait()
    except ChildProcessError:
        break
    if pid == daemon.pid:
        code = os.waitstatus_to_exitcode(status)
sys.exit(code)
"""


def _toml(value: str) -> str:
    # a TOML basic string: JSON's escapes are TOML's
    return json.dumps(value)


class Containerd:
    """A containerd daemon of the test's own under ``base`` (made, and owned: removed on
    :meth:`close`). ``ctr`` talks to it through :meth:`ctr`, in ``namespace``."""

    def __init__(self, base: Path, *, namespace: str | None = None,
                 snapshotter: str = "native", start_timeout: float = 30.0) -> None:
        self.base = base
        self.namespace = namespace or f"podnet-{uuid.uuid4().hex[:8]}"
        self.snapshotter = snapshotter
        self.address = str(base / "containerd.sock")
        self.runc_root = base / "runc"
        self.fifo_dir = base / "fifo"
        self.log_path = base / "containerd.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives with the daemon
        config = base / "config.toml"
        config.write_text(self._config())
        #: the reaper (see _REAPER) whose child the daemon is
        self.proc = subprocess.Popen([sys.executable, "-c", _REAPER, "containerd",
                                      "--config", str(config)],
                                     stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=self._log)
        try:
            self._wait_serving(start_timeout)
        except BaseException:
            self.close()
            raise

    def _config(self) -> str:
        b = self.base
        return "\n".join([
            "version = 2",
            f"root = {_toml(str(b / 'root'))}",
            f"state = {_toml(str(b / 'state'))}",
            # no CRI (no kubelet here), no snapshotter that needs its own filesystem
            "disabled_plugins = [" + ", ".join(_toml(p) for p in (
                "io.containerd.grpc.v1.cri", "io.containerd.snapshotter.v1.btrfs",
                "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                "io.containerd.snapshotter.v1.aufs")) + "]",
            "[grpc]", f"  address = {_toml(self.address)}",
            "[ttrpc]", f"  address = {_toml(self.address + '.ttrpc')}",
            "[debug]", '  address = ""', '  level = "info"',
            "[metrics]", '  address = ""',
            '[plugins."io.containerd.internal.v1.opt"]', f"  path = {_toml(str(b / 'opt'))}",
            "",
        ])

    def _wait_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"containerd exited with {self.proc.returncode} on start: "
                                   f"{self.log_tail()}")
            if os.path.exists(self.address):
                version = self.ctr("version", check=False, timeout=10)
                if version.returncode == 0:
                    return
            time.sleep(0.1)
        raise RuntimeError(f"containerd did not serve {self.address} within {timeout:g} s: "
                           f"{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        """The daemon log's last lines, for a failure's message."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def ctr(self, *args: str, check: bool = True, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
        """Run ``ctr`` against this daemon; ``check``: raise naming the command and its
        stderr when it fails."""
        done = subprocess.run(["ctr", "--address", self.address, "--namespace",
                               self.namespace, *args], capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"ctr {' '.join(args)} exited {done.returncode}: "
                               f"{done.stderr.strip() or done.stdout.strip()}")
        return done

    def import_image(self, tar: Path) -> str:
        """Import an OCI layout tar (unpacked for this daemon's snapshotter); return the
        image's name."""
        self.ctr("image", "import", "--snapshotter", self.snapshotter, str(tar),
                 timeout=120)
        names = self.ctr("image", "list", "--quiet").stdout.split()
        if not names:
            raise RuntimeError(f"ctr image import {tar}: no image listed after the import")
        return names[0]

    def run(self, image: str, argv: Sequence[str], *, netns: str | None = None,
            container_id: str | None = None, timeout: float = 60.0
            ) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` in a new container of ``image`` until it exits, and remove the
        container (``ctr run --rm``); ``netns``: the path of a network namespace the
        container joins instead of getting its own. Its exit status is the result's."""
        cid = container_id or f"pn-{uuid.uuid4().hex[:12]}"
        args = ["run", "--rm", "--snapshotter", self.snapshotter, "--fifo-dir",
                str(self.fifo_dir), "--runc-root", str(self.runc_root)]
        if netns is not None:
            args += ["--with-ns", f"network:{netns}"]
        return self.ctr(*args, image, cid, *argv, check=False, timeout=timeout)

    def start(self, image: str, argv: Sequence[str], *, netns: str | None = None,
              container_id: str | None = None) -> str:
        """Start ``argv`` in a new container of ``image`` and leave it running (``ctr run
        --detach``): a server, say. Return the container's id; :meth:`close` removes it,
        or ``ctr("task", "kill", ...)`` and ``ctr("containers", "delete", ...)``."""
        cid = container_id or f"pn-{uuid.uuid4().hex[:12]}"
        args = ["run", "--detach", "--snapshotter", self.snapshotter, "--fifo-dir",
                str(self.fifo_dir), "--runc-root", str(self.runc_root)]
        if netns is not None:
            args += ["--with-ns", f"network:{netns}"]
        self.ctr(*args, image, cid, *argv)
        return cid

    def task_pid(self, container_id: str) -> int:
        """The pid, on this host, of a running container's first process."""
        for line in self.ctr("task", "list").stdout.splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == container_id:
                return int(fields[1])
        raise LookupError(f"container {container_id}: no task")

    @property
    def daemon_pid(self) -> int | None:
        """The containerd process's pid (a child of the reaper), None once it is gone:
        for a test that kills the daemon to see what :meth:`close` still cleans."""
        try:
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text()
        except OSError:
            return None
        return int(children.split()[0]) if children.split() else None

    # --- cleanup -----------------------------------------------------------------------

    def close(self) -> None:
        """Remove everything: tasks, containers, the daemon, its shims, mounts, cgroups
        and directory. Every step runs even when one before it failed."""
        try:
            if self.proc.poll() is None:
                self._remove_containers()
        finally:
            try:
                self._stop_daemon()
            finally:
                self._delete_runc_containers()
                self._kill_shims()
                self._end_reaper()
                self._unmount_under_base()
                self._remove_cgroups()
                self._log.close()
                shutil.rmtree(self.base, ignore_errors=True)

    def _remove_containers(self) -> None:
        listed = self.ctr("containers", "list", "--quiet", check=False, timeout=20)
        for cid in listed.stdout.split():
            self.ctr("task", "kill", "--signal", "SIGKILL", cid, check=False, timeout=20)
            self.ctr("task", "delete", "--force", cid, check=False, timeout=20)
            self.ctr("containers", "delete", cid, check=False, timeout=20)

    def _stop_daemon(self) -> None:
        """SIGTERM to the daemon (through its reaper); the reaper exits once the daemon
        and its shims have: a shim still running a task keeps it, and is left to
        :meth:`_delete_runc_containers` and :meth:`_kill_shims`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=15)

    def _end_reaper(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def _delete_runc_containers(self) -> None:
        """What the daemon could not delete (it died, a task hung): runc kills each
        container's processes and removes its cgroup itself. The shim keeps runc's state
        under ``<runc root>/<namespace>``."""
        root = self.runc_root / self.namespace
        if not root.is_dir():
            return
        for state in root.iterdir():
            subprocess.run(["runc", "--root", str(root), "delete", "--force", state.name],
                           capture_output=True, check=False, timeout=20)

    def _kill_shims(self) -> None:
        """A shim outlives its daemon when a task was not deleted: find ours by the
        daemon address on its command line, kill it by pid, remove its socket."""
        mine = f"-address\0{self.address}\0".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"containerd-shim" not in cmdline.split(b"\0", 1)[0] or mine not in cmdline:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)
            parts = cmdline.split(b"\0")
            if b"-id" in parts:
                self._remove_shim_socket(parts[parts.index(b"-id") + 1].decode())

    def _remove_shim_socket(self, container_id: str) -> None:
        # containerd names a shim's socket by sha256(<daemon address>/<namespace>/<id>)
        key = os.path.join(self.address, self.namespace, container_id)
        with contextlib.suppress(FileNotFoundError):
            (SHIM_SOCKET_DIR / hashlib.sha256(key.encode()).hexdigest()).unlink()

    def _unmount_under_base(self) -> None:
        prefix = str(self.base) + "/"
        try:
            lines = Path("/proc/self/mountinfo").read_text().splitlines()
        except OSError:
            return
        points = [line.split()[4] for line in lines if line.split()[4].startswith(prefix)]
        for point in sorted(points, key=len, reverse=True):  # the deepest first
            subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)

    def _remove_cgroups(self) -> None:
        """runc removes each container's cgroup; the namespace's parent directory,
        which containerd's default cgroup path ``/<namespace>/<id>`` makes, is ours."""
        if not CGROUP_ROOT.is_dir():
            return
        candidates = [CGROUP_ROOT / self.namespace]
        candidates += [c / self.namespace for c in CGROUP_ROOT.iterdir() if c.is_dir()]
        for path in candidates:
            if path.is_dir():
                # leaves first: rmdir only removes empty cgroups, never a live one
                for sub in sorted(path.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if sub.is_dir():
                        with contextlib.suppress(OSError):
                            sub.rmdir()
                with contextlib.suppress(OSError):
                    path.rmdir()


@contextlib.contextmanager
def private_containerd(*, snapshotter: str = "native") -> Iterator[Containerd]:
    """A :class:`Containerd` in a new short temporary directory (unix socket paths are
    limited to 108 bytes), removed with everything in it on exit, also on failure."""
    base = Path(tempfile.mkdtemp(prefix="pnctrd-"))
    try:
        ctrd = Containerd(base, snapshotter=snapshotter)
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    try:
        yield ctrd
    finally:
        ctrd.close()
