"""A throwaway OVN Northbound server: ``ovsdb-server`` on a unix socket in a temp folder.

For the tests, the benchmark and ``podnet demo``; real deployments point the provider at
their own NB database. ``stop()`` then ``start()`` restarts the server on the same
database file (what a chaos test needs for "the NB server restarted").
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from podnet.hookspecs.demo import DemoUnavailable

__all__ = ["NbServer", "NbServerMissing", "find_schema", "ovsdb_server_available"]

#: where Debian and other distributions install the Northbound schema
SCHEMA_DIRS = ("/usr/share/ovn", "/usr/local/share/ovn", "/usr/share/openvswitch",
               "/opt/ovn/share/ovn")
SCHEMA_NAME = "ovn-nb.ovsschema"
INSTALL_HINT = ("install Debian's ovn-central package (apt-get install -y ovn-central), "
                "which provides ovsdb-server, ovsdb-tool, ovn-nbctl and the OVN schemas")


class NbServerMissing(DemoUnavailable):
    """ovsdb-server, ovsdb-tool or the Northbound schema is not installed."""


def find_schema() -> str | None:
    env = os.environ.get("PODNET_OVN_NB_SCHEMA")
    if env and os.path.exists(env):
        return env
    for folder in SCHEMA_DIRS:
        path = os.path.join(folder, SCHEMA_NAME)
        if os.path.exists(path):
            return path
    return None


def ovsdb_server_available() -> str | None:
    """``None`` when a server can be started here; otherwise why not."""
    for tool in ("ovsdb-server", "ovsdb-tool"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: {INSTALL_HINT}"
    if find_schema() is None:
        return f"the OVN Northbound schema ({SCHEMA_NAME}) is not installed: {INSTALL_HINT}"
    return None


class NbServer:
    """``with NbServer() as nb: ... nb.remote ...``"""

    def __init__(self, folder: str | None = None, *, start_timeout: float = 10.0) -> None:
        problem = ovsdb_server_available()
        if problem is not None:
            raise NbServerMissing(problem)
        self._own_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="podnet-ovn-nb-"))
        self.db = self.folder / "nb.db"
        self.socket = self.folder / "nb.sock"
        self.pidfile = self.folder / "nb.pid"
        self.ctl = self.folder / "nb.ctl"
        self.log = self.folder / "nb.log"
        self.start_timeout = start_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def remote(self) -> str:
        return f"unix:{self.socket}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> NbServer:
        if self.running:
            return self
        if not self.db.exists():
            schema = find_schema()
            assert schema is not None
            subprocess.run(["ovsdb-tool", "create", str(self.db), schema], check=True,
                           capture_output=True)
        if self.socket.exists():
            self.socket.unlink()
        self.process = subprocess.Popen(
            ["ovsdb-server", str(self.db), f"--remote=punix:{self.socket}",
             f"--pidfile={self.pidfile}", f"--unixctl={self.ctl}", f"--log-file={self.log}"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + self.start_timeout
        # the socket file appears at bind(), before listen(): a client connecting in
        # between is refused, so wait for a connection to go through
        while not self._accepting():
            if self.process.poll() is not None:
                err = self.process.stderr.read().decode() if self.process.stderr else ""
                raise RuntimeError(f"ovsdb-server exited with {self.process.returncode}: {err}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ovsdb-server did not open {self.socket} in time")
            time.sleep(0.005)
        return self

    def _accepting(self) -> bool:
        if not self.socket.exists():
            return False
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return True

    def stop(self) -> None:
        proc, self.process = self.process, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    def restart(self) -> None:
        self.stop()
        self.start()
        self.restarts += 1

    def restart_fresh(self) -> None:
        """Stop, drop the database, start on an empty one (tests' clean slate)."""
        self.stop()
        if self.db.exists():
            self.db.unlink()
        self.start()

    def close(self) -> None:
        self.stop()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> NbServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
