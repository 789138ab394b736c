"""A throwaway OVN, started and torn down by podnet itself: the Northbound and Southbound
``ovsdb-server``s and ``ovn-northd`` (:class:`OvnCentral`), and a chassis, a local Open
vSwitch with the userspace datapath and ``ovn-controller`` in a network namespace
(:class:`OvnBed`), everything on unix sockets in a private folder.

Production code runs it where a real OVN is wanted for a moment (``podnet demo``'s stage
on an OVN node); the test kit (:mod:`podnet.testing.ovnbed`) builds its bed on it and adds
``ovn-trace`` as a check and the pytest fixtures.

- :class:`OvnCentral`: NB, SB and northd. ``OvnCentral(nb_remote=...)`` starts only SB and
  northd, on an NB server someone else runs (an
  :class:`~podnet.plugins.ovn.nbserver.NbServer`). Needs Debian's ``ovn-central``.
- :class:`OvnBed`: the central part plus one chassis: a local Open vSwitch (its own
  ``ovsdb-server`` and ``ovs-vswitchd`` with the userspace datapath, bridge ``br-int``)
  and ``ovn-controller``. ``OvnBed(nb_remote=...)`` runs its central part on that NB
  server; ``OvnBed(sb_remote=...)`` is a chassis only, on another bed's SB. Needs
  ``ovn-host`` and ``openvswitch-switch`` too, root, and network namespaces.

``ovs-vswitchd`` and ``ovn-controller`` run in a network namespace of the bed's own
(:attr:`OvnBed.netns`, or one you pass, e.g. a node namespace): the userspace datapath
makes tap devices with fixed names (``ovs-netdev``, the bridge's name), which two beds in
one namespace would share, and which outlive the daemons; a namespace of its own goes
with all it holds. A dataplane plugging pods into it (the node agent) runs in that
namespace too: its host ends must be where ``ovs-vswitchd`` is.

The ``OVS_*`` and ``OVN_*`` directories point at the bed's folder in the environment of
the processes it runs (:attr:`OvnCentral.env`), never in this process's own, so
``ovn-nbctl``, ``ovn-sbctl``, ``ovs-vsctl`` run through :meth:`OvnCentral.tool` find
their sockets without flags. Starting a bed takes 0.2-0.7 s (central alone: about
0.15 s), tearing it down about 0.15 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from podnet.linux.netns import netns_unavailable

__all__ = [
    "CENTRAL_HINT", "CHASSIS_HINT", "OvnBed", "OvnBedMissing", "OvnCentral",
    "bed_unavailable", "central_unavailable",
]

CENTRAL_HINT = "apt-get install -y ovn-central"
CHASSIS_HINT = "apt-get install -y ovn-central ovn-host openvswitch-switch"
_OVN_SHARE = ("/usr/share/ovn", "/usr/local/share/ovn", "/opt/ovn/share/ovn")
_OVS_SHARE = ("/usr/share/openvswitch", "/usr/local/share/openvswitch")


class OvnBedMissing(RuntimeError):
    """A binary or a schema the bed needs is not installed (the message says which)."""


def _schema(name: str, folders: Sequence[str]) -> str | None:
    for folder in folders:
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    return None


def central_unavailable() -> str | None:
    """Why :class:`OvnCentral` cannot start here (a ``skipif`` reason), or ``None``."""
    for tool in ("ovsdb-server", "ovsdb-tool", "ovn-northd", "ovn-nbctl", "ovn-sbctl",
                 "ovn-trace"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed ({CENTRAL_HINT})"
    for schema in ("ovn-nb.ovsschema", "ovn-sb.ovsschema"):
        if _schema(schema, _OVN_SHARE) is None:
            return f"the OVN schema {schema} is not installed ({CENTRAL_HINT})"
    return None


def bed_unavailable() -> str | None:
    """Why :class:`OvnBed` cannot start here (a ``skipif`` reason), or ``None``."""
    problem = central_unavailable()
    if problem is not None:
        return problem
    for tool in ("ovs-vswitchd", "ovs-vsctl", "ovn-controller"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed ({CHASSIS_HINT})"
    if _schema("vswitch.ovsschema", _OVS_SHARE) is None:
        return f"the Open vSwitch schema vswitch.ovsschema is not installed ({CHASSIS_HINT})"
    return netns_unavailable()


def _gone(pid: int) -> bool:
    """Whether process ``pid`` is gone (a zombie nobody reaps counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True


class OvnCentral:
    """NB and SB ``ovsdb-server`` and ``ovn-northd``, on unix sockets in ``folder`` (a
    temporary one by default, removed on :meth:`close`).

    ``nb_remote``: use this NB server instead of starting one (SB and northd only)."""

    def __init__(self, folder: str | os.PathLike[str] | None = None, *,
                 nb_remote: str | None = None, timeout: float = 20.0) -> None:
        problem = central_unavailable()
        if problem is not None:
            raise OvnBedMissing(problem)
        self._own_folder = folder is None
        self.folder = Path(folder or tempfile.mkdtemp(prefix="podnet-ovn-"))
        self.timeout = timeout
        self._external_nb = nb_remote
        self._external_sb: str | None = None
        #: the environment of every process the bed runs: the tools' default sockets,
        #: pid files and logs are in ``folder``
        self.env = dict(os.environ)
        for var in ("OVS_RUNDIR", "OVS_LOGDIR", "OVS_DBDIR", "OVS_SYSCONFDIR",
                    "OVN_RUNDIR", "OVN_LOGDIR", "OVN_DBDIR", "OVN_SYSCONFDIR"):
            self.env[var] = str(self.folder)
        #: daemons started, in order: name -> pid file
        self._daemons: dict[str, Path] = {}
        #: each database server's command line, to start it again on its database
        self._servers: dict[str, list[str]] = {}

    # the default socket names of the tools, so they need no --db flag
    @property
    def nb_remote(self) -> str:
        return self._external_nb or f"unix:{self.folder / 'ovnnb_db.sock'}"

    @property
    def sb_remote(self) -> str:
        return self._external_sb or f"unix:{self.folder / 'ovnsb_db.sock'}"

    def tool(self, *argv: str, check: bool = True, timeout: float = 30.0,
             netns: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run an OVN/OVS tool with the bed's environment; ``check``: raise, with its
        stderr, when it fails."""
        cmd = [*(["ip", "netns", "exec", netns] if netns else []), *argv]
        done = subprocess.run(cmd, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: "
                               f"{done.stderr.strip()}")
        return done

    def nbctl(self, *args: str) -> str:
        return self.tool("ovn-nbctl", f"--db={self.nb_remote}", *args).stdout

    def sbctl(self, *args: str) -> str:
        return self.tool("ovn-sbctl", f"--db={self.sb_remote}", *args).stdout

    def sync(self) -> None:
        """Wait until northd has turned what NB holds now into SB's logical flows."""
        self.nbctl(f"--timeout={self.timeout:g}", "--wait=sb", "sync")

    def _daemon(self, name: str, argv: Sequence[str], netns: str | None = None) -> None:
        """Start a daemon detached (it returns once it is ready), its pid file and log
        named after ``name`` in the folder."""
        pidfile = self.folder / f"{name}.pid"
        self._daemons[name] = pidfile
        self.tool(*argv, f"--pidfile={pidfile}", f"--log-file={self.folder / name}.log",
                  "--detach", netns=netns, timeout=self.timeout)

    def _stop(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        pidfile = self._daemons.pop(name, None)
        if pidfile is None or not pidfile.exists():
            return
        with contextlib.suppress(ValueError, OSError):
            pid = int(pidfile.read_text().strip())
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
            deadline = time.monotonic() + 5
            while not _gone(pid):
                if time.monotonic() > deadline:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    break
                time.sleep(0.01)

    def _database(self, name: str, schema: str, remotes: Sequence[str]) -> None:
        db = self.folder / f"{name}.db"
        self.tool("ovsdb-tool", "create", str(db), schema)
        self._servers[name] = ["ovsdb-server", str(db), *(f"--remote={r}" for r in remotes),
                               f"--unixctl={self.folder / name}.ctl"]
        self._daemon(name, self._servers[name])

    def stop_nb(self) -> None:
        """Stop the Northbound ``ovsdb-server`` (SIGTERM); its database stays."""
        if "nb" not in self._servers:
            raise RuntimeError("this bed runs on an NB server of someone else's")
        self._stop("nb")

    def start_nb(self) -> None:
        """Start the Northbound ``ovsdb-server`` again on its database (it answers once
        this returns: ``--detach`` waits until it listens)."""
        if "nb" not in self._servers:
            raise RuntimeError("this bed runs on an NB server of someone else's")
        self._daemon("nb", self._servers["nb"])

    def start(self) -> OvnCentral:
        try:
            self._start_central()
        except BaseException:
            self.close()
            raise
        return self

    def _start_central(self) -> None:
        ovn = _schema("ovn-nb.ovsschema", _OVN_SHARE)
        assert ovn is not None
        share = os.path.dirname(ovn)
        if self._external_nb is None:
            self._database("nb", os.path.join(share, "ovn-nb.ovsschema"), [
                f"punix:{self.folder / 'ovnnb_db.sock'}",
                "db:OVN_Northbound,NB_Global,connections"])
        self._database("sb", os.path.join(share, "ovn-sb.ovsschema"), [
            f"punix:{self.folder / 'ovnsb_db.sock'}", "db:OVN_Southbound,SB_Global,connections"])
        self.nbctl("--no-wait", "init")
        self.sbctl("init")  # ovn-sbctl takes no --no-wait
        self._daemon("northd", ["ovn-northd", f"--ovnnb-db={self.nb_remote}",
                                f"--ovnsb-db={self.sb_remote}"])

    def _close_daemons(self) -> None:
        for name in reversed(list(self._daemons)):
            self._stop(name)

    def close(self) -> None:
        """Stop every daemon, newest first, and remove the folder if it is the bed's."""
        self._close_daemons()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> OvnCentral:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


class OvnBed(OvnCentral):
    """:class:`OvnCentral` plus one chassis: a local OVS (userspace datapath, bridge
    ``br-int``, fail-mode secure) and ``ovn-controller``, registered in SB as
    ``chassis``. ``netns``: where ``ovs-vswitchd`` and ``ovn-controller`` run (default: a
    namespace the bed makes and deletes)."""

    def __init__(self, folder: str | os.PathLike[str] | None = None, *,
                 chassis: str = "chassis-1", netns: str | None = None,
                 bridge: str = "br-int", timeout: float = 20.0,
                 encap_ip: str = "127.0.0.1", sb_remote: str | None = None,
                 nb_remote: str | None = None) -> None:
        problem = bed_unavailable()
        if problem is not None:
            raise OvnBedMissing(problem)
        super().__init__(folder, timeout=timeout, nb_remote=nb_remote)
        self.chassis = chassis
        #: the Geneve tunnels' local endpoint (``ovn-encap-ip``): another chassis must
        #: reach it
        self.encap_ip = encap_ip
        #: another bed's SB: this one is a chassis only (no NB, SB or northd of its own)
        self._external_sb = sb_remote
        self.bridge = bridge
        self._own_netns = netns is None
        #: the namespace of ``ovs-vswitchd``: the bridge, its taps and the ports' host ends
        self.netns = netns or f"pnovn-{uuid.uuid4().hex[:8]}"
        self._netns_made = False

    @property
    def ovs_remote(self) -> str:
        """The local Open vSwitch database (the OVN provider's ``ovsDb``)."""
        return f"unix:{self.folder / 'db.sock'}"

    def vsctl(self, *args: str) -> str:
        return self.tool("ovs-vsctl", f"--db={self.ovs_remote}",
                         f"--timeout={self.timeout:g}", *args).stdout

    def start(self) -> OvnBed:
        try:
            if self._external_sb is None:
                self._start_central()
            self._start_chassis()
        except BaseException:
            self.close()
            raise
        return self

    def _start_chassis(self) -> None:
        schema = _schema("vswitch.ovsschema", _OVS_SHARE)
        assert schema is not None
        self._database("ovsdb", schema, [f"punix:{self.folder / 'db.sock'}",
                                         "db:Open_vSwitch,Open_vSwitch,manager_options"])
        self.vsctl("--no-wait", "init")
        if self._own_netns:
            subprocess.run(["ip", "netns", "add", self.netns], check=True, capture_output=True)
            self._netns_made = True
            subprocess.run(["ip", "-n", self.netns, "link", "set", "lo", "up"], check=True)
        self._daemon("vswitchd", ["ovs-vswitchd", self.ovs_remote], netns=self.netns)
        self.vsctl("add-br", self.bridge, "--", "set", "bridge", self.bridge,
                   "datapath_type=netdev", "fail-mode=secure")
        ids = {"system-id": self.chassis, "ovn-remote": self.sb_remote,
               "ovn-encap-type": "geneve", "ovn-encap-ip": self.encap_ip,
               "ovn-bridge": self.bridge, "ovn-bridge-datapath-type": "netdev"}
        self.vsctl("set", "open_vswitch", ".",
                   *(f"external_ids:{k}={v}" for k, v in ids.items()))
        self.start_controller()

    def stop_controller(self, *, kill: bool = False) -> None:
        """Stop ``ovn-controller`` (SIGTERM; ``kill``: SIGKILL, a crash): new ports are no
        longer bound or installed."""
        self._stop("controller", signal.SIGKILL if kill else signal.SIGTERM)

    def start_controller(self) -> None:
        """Start ``ovn-controller`` (again) and wait until its chassis is in SB."""
        # ovn-controller has no --unixctl: its control socket lands in OVN_RUNDIR
        self._daemon("controller", ["ovn-controller", self.ovs_remote], netns=self.netns)
        deadline = time.monotonic() + self.timeout
        while self.chassis not in self.sbctl("--bare", "--columns=name", "list",
                                             "Chassis").split():
            if time.monotonic() > deadline:
                raise RuntimeError(f"chassis {self.chassis} did not register in SB within "
                                   f"{self.timeout:g} s (see {self.folder}/controller.log)")
            time.sleep(0.01)

    def wait_bound(self, port: str, timeout: float | None = None) -> float:
        """Wait until NB's ``Logical_Switch_Port`` ``port`` is up; the seconds it took."""
        start = time.monotonic()
        deadline = start + (timeout or self.timeout)
        while self.nbctl("--bare", "--columns=up", "find", "Logical_Switch_Port",
                         f'name="{port}"').strip() != "true":
            if time.monotonic() > deadline:
                raise AssertionError(f"port {port} was not bound in time")
            time.sleep(0.01)
        return time.monotonic() - start

    def close(self) -> None:
        """Bridges deleted first (the userspace datapath's taps otherwise stay), then
        every daemon stopped, then the bed's namespace and folder removed."""
        if "vswitchd" in self._daemons:
            with contextlib.suppress(Exception):
                for bridge in self.vsctl("list-br").split():
                    self.vsctl("--if-exists", "del-br", bridge)
        try:
            self._close_daemons()
        finally:
            if self._netns_made:
                subprocess.run(["ip", "netns", "del", self.netns], check=False,
                               capture_output=True)
                self._netns_made = False
            if self._own_folder:
                shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> OvnBed:
        return self.start()
