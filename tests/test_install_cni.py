"""``podnet install-cni`` and ``podnet uninstall-cni``, through the real command line:
the plugin and the conflist land on the host atomically and only after every check
passed; each refusal is one line naming the path (exit 2, no traceback); uninstall takes
off podnet's files and nothing else; the chaining mode installs podnet-ipam alone.

The plugin installed here is a real static executable: Debian's busybox-static with
podnet's marker appended (a stand-in for the plugin ``make`` builds, so these tests hold
whichever plugin the tree has); ``/bin/true`` is a real dynamically linked one."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.app.cli import main
from podnet.app.install import (
    CONFLIST_NAME,
    IPAM_NAME,
    PLUGIN_ENV,
    PLUGIN_NAME,
    InstallError,
    check_plugin,
    install_cni,
    is_podnets_binary,
    plugin_binary,
    uninstall_cni,
)
from podnet.testing.cni import run_cni

BUSYBOX = Path("/bin/busybox")
DYNAMIC = Path("/bin/true")
PODNET = Path(sys.executable).parent / "podnet"
#: the string podnet's plugin carries (its User-Agent, podnet-cni/<version>)
MARKER = b"podnet-cni/0.0.0-test"

pytestmark = pytest.mark.skipif(not BUSYBOX.exists(),
                                reason=f"{BUSYBOX} is missing (Debian: busybox-static)")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (mounts, another user)")


@pytest.fixture
def plugin(tmp_path: Path) -> Path:
    """A static ELF executable of this machine that carries podnet's marker."""
    path = tmp_path / "built" / PLUGIN_NAME
    path.parent.mkdir()
    path.write_bytes(BUSYBOX.read_bytes() + b"\0" + MARKER + b"\0")
    path.chmod(0o755)
    return path


def podnet(*args: str, env: dict[str, str] | None = None,
           prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The podnet command, as an init container or an operator runs it."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})}
    return subprocess.run([*prefix, str(PODNET), *args], env=clean, capture_output=True,
                          text=True, timeout=120, check=False)


def refused(done: subprocess.CompletedProcess[str], path: Path | str, why: str) -> None:
    """One line on stderr naming ``path`` and saying ``why``; exit 2; nothing installed."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"podnet install-cni: error: {path}: "), line
    assert why in line, line
    assert done.stdout == ""


def listing(*dirs: Path) -> dict[str, list[str]]:
    return {str(d): sorted(os.listdir(d)) if d.is_dir() else [] for d in dirs}


def another_machines(path: Path, tmp: Path) -> Path:
    """``path``'s bytes with the ELF header's machine changed to another one's."""
    data = bytearray(path.read_bytes())
    other = 183 if platform.machine() in ("x86_64", "amd64") else 62
    data[18:20] = other.to_bytes(2, sys.byteorder)
    out = tmp / "other-machine"
    out.write_bytes(bytes(data))
    out.chmod(0o755)
    return out


def relocatable(path: Path, tmp: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[16:18] = (1).to_bytes(2, sys.byteorder)  # ET_REL: an object file
    out = tmp / "object.o"
    out.write_bytes(bytes(data))
    return out


# --- installing ------------------------------------------------------------------------


def test_install_puts_the_plugin_and_a_conflist(tmp_path: Path, plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    written = install_cni(bin_dir, conf_dir, socket_path="/run/podnet/test.sock",
                          plugin=plugin)
    installed, conf = bin_dir / PLUGIN_NAME, conf_dir / CONFLIST_NAME
    ipam = bin_dir / IPAM_NAME
    assert written == [installed, ipam, conf]
    assert installed.stat().st_mode & 0o777 == 0o755
    # the IPAM plugin is the same file under the name that picks its role
    assert ipam.stat().st_mode & 0o777 == 0o755
    assert ipam.read_bytes() == installed.read_bytes() == plugin.read_bytes()
    assert conf.stat().st_mode & 0o777 == 0o644
    config = json.loads(conf.read_text())
    assert config["plugins"] == [{"type": PLUGIN_NAME, "agentSocket": "/run/podnet/test.sock"}]
    # a host runs the copy by itself (the stand-in answers as the applet argv[0] names)
    done = subprocess.run(["true"], executable=str(installed), check=False)
    assert done.returncode == 0
    assert install_cni(bin_dir, conf_dir, socket_path="/run/podnet/test.sock",
                       plugin=plugin) == []
    assert not list(bin_dir.glob(".*")) and not list(conf_dir.glob(".*"))


def test_install_replaces_a_changed_plugin(tmp_path: Path, plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir, plugin=plugin)
    (bin_dir / PLUGIN_NAME).write_text("#!/bin/sh\nexit 1\n")
    assert install_cni(bin_dir, conf_dir, plugin=plugin) == [bin_dir / PLUGIN_NAME]
    assert (bin_dir / PLUGIN_NAME).read_bytes() == plugin.read_bytes()


def test_the_command_line_in_process(tmp_path: Path, plugin: Path) -> None:
    assert main(["install-cni", "--bin-dir", str(tmp_path / "b"), "--conf-dir",
                 str(tmp_path / "c"), "--network", "pn", "--plugin", str(plugin)]) == 0
    assert json.loads((tmp_path / "c" / CONFLIST_NAME).read_text())["name"] == "pn"


def test_running_it_again_rewrites_nothing(tmp_path: Path, plugin: Path) -> None:
    """Idempotent: the second run writes no file (the same inodes: a runtime reading one
    meanwhile sees the same file) and says nothing."""
    args = ("install-cni", "--bin-dir", str(tmp_path / "b"), "--conf-dir",
            str(tmp_path / "c"), "--plugin", str(plugin))
    first = podnet(*args)
    assert first.returncode == 0 and first.stderr == "", first.stderr
    assert len(first.stdout.splitlines()) == 3
    inodes = {p: p.stat().st_ino for p in [*(tmp_path / "b").iterdir(),
                                           *(tmp_path / "c").iterdir()]}
    again = podnet(*args)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    assert {p: p.stat().st_ino for p in inodes} == inodes


def test_where_the_plugin_comes_from(tmp_path: Path, plugin: Path) -> None:
    """--plugin, else $PODNET_CNI_PLUGIN, else podnet-cni beside podnet's own command;
    none of them: one line naming where it looked."""
    bin_dir, conf_dir = tmp_path / "b", tmp_path / "c"
    # the environment names it
    done = podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir),
                  env={PLUGIN_ENV: str(plugin)})
    assert done.returncode == 0, done.stderr
    assert (bin_dir / PLUGIN_NAME).read_bytes() == plugin.read_bytes()
    # --plugin wins over the environment (which names a plugin that would be refused)
    done = podnet("install-cni", "--bin-dir", str(tmp_path / "b2"), "--conf-dir",
                  str(conf_dir), "--plugin", str(plugin), env={PLUGIN_ENV: str(DYNAMIC)})
    assert done.returncode == 0, done.stderr
    refused(podnet("install-cni", "--bin-dir", str(tmp_path / "b3"), "--conf-dir",
                   str(conf_dir), env={PLUGIN_ENV: str(DYNAMIC)}), DYNAMIC,
            "dynamically linked")
    # beside podnet's own command
    assert plugin_binary(None, environ={}, scripts_dir=plugin.parent) == plugin
    with pytest.raises(InstallError) as raised:
        plugin_binary(None, environ={}, scripts_dir=tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / PLUGIN_NAME}: ")
    assert "--plugin" in message and PLUGIN_ENV in message and "\n" not in message


@pytest.mark.parametrize("case", ["missing", "a directory", "a script", "dynamic",
                                  "another machine", "an object file", "empty"])
def test_a_plugin_a_host_could_not_run_is_refused(tmp_path: Path, plugin: Path,
                                                  case: str) -> None:
    bad, why = {
        "missing": (tmp_path / "nope", "missing"),
        "a directory": (tmp_path, "not a regular file"),
        "a script": (tmp_path / "plugin.py", "not an ELF executable"),
        "dynamic": (DYNAMIC, "dynamically linked (needs the loader /"),
        "another machine": (another_machines(plugin, tmp_path), "not this machine's"),
        "an object file": (relocatable(plugin, tmp_path), "not an ELF executable (ELF type 1)"),
        "empty": (tmp_path / "empty", "not an ELF executable"),
    }[case]
    (tmp_path / "plugin.py").write_text("#!/usr/bin/env python3\nprint('podnet-cni/1')\n")
    (tmp_path / "empty").write_bytes(b"")
    bin_dir, conf_dir = tmp_path / "host" / "bin", tmp_path / "host" / "net.d"
    refused(podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir),
                   "--plugin", str(bad)), bad, why)
    # checked before anything was written: not even the directories were made
    assert not (tmp_path / "host").exists()


def test_directories_that_cannot_be_written_are_refused(tmp_path: Path,
                                                        plugin: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("x")
    bin_dir = tmp_path / "bin"
    nope = Path("/proc") / f"nope-{uuid.uuid4().hex[:8]}"
    for bin_at, conf_at, path, why in [
            (nope, tmp_path / "c", nope, "cannot create the directory"),
            (bin_dir, file, file, "not a directory"),
            (bin_dir, file / "net.d", file / "net.d", f"not a directory ({file} is in its way)"),
            (file, tmp_path / "c", file, "not a directory")]:
        done = podnet("install-cni", "--bin-dir", str(bin_at), "--conf-dir", str(conf_at),
                      "--plugin", str(plugin))
        refused(done, path, why)
        # the bin directory it made before the conf directory failed is taken back
        assert not bin_dir.exists() and not (tmp_path / "c").exists()
    # a directory where a file of podnet's goes: none of the files is written
    (tmp_path / "c" / CONFLIST_NAME).mkdir(parents=True)
    done = podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir",
                  str(tmp_path / "c"), "--plugin", str(plugin))
    refused(done, tmp_path / "c" / CONFLIST_NAME, "a directory is in the way")
    assert not bin_dir.exists()


@as_root
def test_a_read_only_directory_is_refused_and_nothing_written(tmp_path: Path,
                                                               plugin: Path) -> None:
    """A read-only mount (root passes every mode bit, not that): the conf directory
    refuses, so the binaries are not written either."""
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    conf_dir.mkdir()
    done = podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir),
                  "--plugin", str(plugin), prefix=_read_only(conf_dir))
    refused(done, conf_dir, "not writable: Read-only file system")
    assert not bin_dir.exists() and listing(conf_dir) == {str(conf_dir): []}


@as_root
def test_a_directory_without_permission_is_refused(plugin: Path) -> None:
    """Another user (not root), a directory it may not write or not even reach."""
    base = Path(tempfile.mkdtemp(prefix="podnet-install-"))
    try:
        base.chmod(0o755)
        locked = base / "locked"
        locked.mkdir(mode=0o555)
        hidden = base / "hidden"
        (hidden / "bin").mkdir(parents=True)
        hidden.chmod(0o700)
        shutil.copy(plugin, base / PLUGIN_NAME)
        (base / PLUGIN_NAME).chmod(0o755)
        nobody = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
        reach = subprocess.run([*nobody, sys.executable, "-c", "import podnet.app.cli"],
                               capture_output=True, text=True, timeout=60)
        if reach.returncode != 0:
            # a checkout under a folder only root may enter (mktemp -d makes 0700 ones)
            pytest.skip("another user cannot run this checkout's podnet: "
                        + (reach.stderr.strip().splitlines() or ["?"])[-1])
        for bin_dir, why in [(locked, "not writable: Permission denied"),
                             (hidden / "bin", "cannot reach it: Permission denied")]:
            done = podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir",
                          str(base / "net.d"), "--plugin", str(base / PLUGIN_NAME),
                          prefix=nobody)
            refused(done, bin_dir, why)
        assert sorted(os.listdir(base)) == ["hidden", "locked", PLUGIN_NAME]
        assert os.listdir(locked) == []
    finally:
        shutil.rmtree(base)


def _read_only(directory: Path) -> tuple[str, ...]:
    """A command prefix: the rest runs in a mount namespace of its own where
    ``directory`` is a read-only bind mount of itself (gone with the process)."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is missing")
    return ("unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount --bind -o ro "{directory}" "{directory}" && exec "$@"', "sh")


def test_a_configuration_the_runtime_reads_first_is_warned_of(tmp_path: Path,
                                                              plugin: Path) -> None:
    """Runtimes take the first *.conf, *.conflist or *.json by name: one line says when
    that is another network's, and the install goes on."""
    conf_dir = tmp_path / "net.d"
    conf_dir.mkdir()
    for name in ("99-late.conflist", "00-notes.txt"):
        (conf_dir / name).write_text("{}")
    (conf_dir / "01-dir.conf").mkdir()
    args = ("install-cni", "--bin-dir", str(tmp_path / "bin"), "--conf-dir",
            str(conf_dir), "--plugin", str(plugin))
    quiet = podnet(*args)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    (conf_dir / "05-flannel.conflist").write_text("{}")
    (conf_dir / "07-other.json").write_text("{}")
    done = podnet(*args)
    assert done.returncode == 0
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"podnet install-cni: warning: {conf_dir / '05-flannel.conflist'}"
                           f" sorts before {CONFLIST_NAME}"), line
    assert (conf_dir / CONFLIST_NAME).exists()


# --- the chaining mode -----------------------------------------------------------------


def test_the_ipam_mode_installs_podnet_ipam_alone(tmp_path: Path, plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    (tmp_path / "other-cni").mkdir()
    done = podnet("install-cni", "--mode", "ipam", "--bin-dir", str(bin_dir), "--conf-dir",
                  str(conf_dir), "--plugin", str(plugin))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"installed {bin_dir / IPAM_NAME}"]
    assert os.listdir(bin_dir) == [IPAM_NAME]
    assert not conf_dir.exists()  # no conflist: the cluster's own plugin is the network's
    # removing it takes podnet-ipam and leaves what else is there
    (bin_dir / "bridge").write_bytes(BUSYBOX.read_bytes())
    done = podnet("uninstall-cni", "--mode", "ipam", "--bin-dir", str(bin_dir),
                  "--conf-dir", str(conf_dir))
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert done.stdout.splitlines() == [f"removed {bin_dir / IPAM_NAME}"]
    assert os.listdir(bin_dir) == ["bridge"]


def test_switching_to_the_ipam_mode_warns_of_podnets_conflist(tmp_path: Path,
                                                              plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir, plugin=plugin)
    warnings: list[str] = []
    assert install_cni(bin_dir, conf_dir, plugin=plugin, mode="ipam",
                       warn=warnings.append) == []
    (warning,) = warnings
    assert warning.startswith(f"{conf_dir / CONFLIST_NAME}: podnet's conflist")
    assert "uninstall-cni --mode podnet" in warning


# --- uninstalling ----------------------------------------------------------------------


def test_uninstall_removes_podnets_files_and_nothing_else(tmp_path: Path,
                                                          plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir, plugin=plugin)
    (bin_dir / "bridge").write_bytes(BUSYBOX.read_bytes())
    (conf_dir / "20-other.conflist").write_text(json.dumps(
        {"cniVersion": "1.0.0", "name": "o", "plugins": [{"type": "bridge"}]}))
    args = ("uninstall-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir))
    done = podnet(*args)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    # the conflist first: the runtime stops choosing podnet before its binary goes
    assert done.stdout.splitlines() == [f"removed {conf_dir / CONFLIST_NAME}",
                                        f"removed {bin_dir / PLUGIN_NAME}",
                                        f"removed {bin_dir / IPAM_NAME}"]
    assert listing(bin_dir, conf_dir) == {str(bin_dir): ["bridge"],
                                          str(conf_dir): ["20-other.conflist"]}
    # again: nothing to do, nothing said
    again = podnet(*args)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    # what an install that died mid-write left (its temporary file) is podnet's too
    (bin_dir / f".{PLUGIN_NAME}.tmp").write_bytes(b"\x7fELF half")
    again = podnet(*args)
    assert again.stdout.splitlines() == [f"removed {bin_dir / f'.{PLUGIN_NAME}.tmp'}"]
    assert listing(bin_dir, conf_dir) == {str(bin_dir): ["bridge"],
                                          str(conf_dir): ["20-other.conflist"]}
    again = podnet(*args)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")
    # directories that do not exist hold nothing of podnet's
    gone = podnet("uninstall-cni", "--bin-dir", str(tmp_path / "no"), "--conf-dir",
                  str(tmp_path / "no2"))
    assert (gone.returncode, gone.stdout, gone.stderr) == (0, "", "")


def test_uninstall_leaves_files_of_podnets_names_that_are_not_podnets(
        tmp_path: Path, plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir, plugin=plugin)
    # someone else's under podnet's names: a binary without podnet's marker, a conflist
    # naming no podnet-cni, a symbolic link
    foreign_binary = BUSYBOX.read_bytes()
    (bin_dir / PLUGIN_NAME).write_bytes(foreign_binary)
    foreign_conf = json.dumps({"cniVersion": "1.0.0", "name": "podnet",
                               "plugins": [{"type": "bridge"}]})
    (conf_dir / CONFLIST_NAME).write_text(foreign_conf)
    (bin_dir / IPAM_NAME).unlink()
    (bin_dir / IPAM_NAME).symlink_to(plugin)
    done = podnet("uninstall-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "warning", "warning", "warning"]
    assert [line.split(": ")[2] for line in lines] == [
        str(conf_dir / CONFLIST_NAME), str(bin_dir / PLUGIN_NAME), str(bin_dir / IPAM_NAME)]
    assert all("not podnet's" in line and "left in place" in line for line in lines)
    assert (bin_dir / PLUGIN_NAME).read_bytes() == foreign_binary
    assert (conf_dir / CONFLIST_NAME).read_text() == foreign_conf
    assert (bin_dir / IPAM_NAME).is_symlink()


def test_uninstall_knows_the_python_plugin_of_podnet_0_8(tmp_path: Path) -> None:
    """The script earlier podnets copied onto hosts: its User-Agent was podnet-cni."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / PLUGIN_NAME).write_text('#!/usr/bin/env python3\nhead = (f"POST / HTTP/1.1'
                                       '\\r\\nHost: podnet-agent\\r\\nUser-Agent: '
                                       'podnet-cni\\r\\n")\n')
    done = uninstall_cni(bin_dir, tmp_path / "net.d")
    assert done.removed == (bin_dir / PLUGIN_NAME,) and done.left == ()


@as_root
def test_uninstall_refused_by_a_read_only_directory_removes_nothing(
        tmp_path: Path, plugin: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir, plugin=plugin)
    before = listing(bin_dir, conf_dir)
    done = podnet("uninstall-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir),
                  prefix=_read_only(bin_dir))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert line == (f"podnet uninstall-cni: error: {bin_dir}: not writable: "
                    "Read-only file system")
    # the conflist stays with its binaries: the runtime never runs a plugin that is gone
    assert listing(bin_dir, conf_dir) == before


# --- the plugin the tree builds --------------------------------------------------------


@pytest.fixture
def built_plugin() -> Iterator[Path]:
    try:
        path = plugin_binary(None)
        check_plugin(path)
    except InstallError as exc:
        pytest.skip(f"the static plugin is not built here: {exc}")
    yield path


def test_the_built_plugin_installs_answers_and_is_known_as_podnets(
        tmp_path: Path, built_plugin: Path) -> None:
    """The plugin ``make`` builds (beside podnet, or $PODNET_CNI_PLUGIN) passes the
    checks, the installed copy answers VERSION by itself, and uninstall knows it by its
    marker."""
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    done = podnet("install-cni", "--bin-dir", str(bin_dir), "--conf-dir", str(conf_dir),
                  env={PLUGIN_ENV: str(built_plugin)})
    assert done.returncode == 0, done.stderr
    version = run_cni("VERSION", {"cniVersion": "1.1.0"}, argv=[str(bin_dir / PLUGIN_NAME)])
    assert version.exit_code == 0, version.stdout + version.stderr
    assert "1.1.0" in json.loads(version.stdout)["supportedVersions"]
    assert is_podnets_binary(bin_dir / PLUGIN_NAME)
    assert uninstall_cni(bin_dir, conf_dir).left == ()


# --- the chart -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


def daemonset(values: dict[str, object] | None) -> dict[str, Any]:
    """The node agent's DaemonSet as Helm renders the chart with ``values``, validated
    against Kubernetes' schema."""
    import importlib.util

    import kubernetes_validate
    import yaml

    spec = importlib.util.spec_from_file_location("render_deploy_for_install",
                                                  ROOT / "scripts" / "render_deploy.py")
    assert spec is not None and spec.loader is not None
    render_deploy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render_deploy)
    text = render_deploy.render(values)["node.yaml"]
    (doc,) = [d for d in yaml.safe_load_all(text) if d and d["kind"] == "DaemonSet"]
    kubernetes_validate.validate(doc, "1.30", strict=True)
    return dict(doc["spec"]["template"]["spec"])


def host_dirs(pod: dict[str, Any], container: dict[str, Any], args: list[str]
              ) -> tuple[str, str]:
    """The host directories ``args``' --bin-dir and --conf-dir are, in ``container``."""
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    bin_dir, conf_dir = (args[args.index(flag) + 1] for flag in ("--bin-dir", "--conf-dir"))
    return (volumes[mounts[bin_dir]]["hostPath"]["path"],
            volumes[mounts[conf_dir]]["hostPath"]["path"])


@pytest.mark.parametrize("mode", ["podnet", "ipam"])
def test_the_chart_installs_in_its_mode_and_by_default_leaves_the_files(mode: str) -> None:
    from podnet.app.cli import build_parser

    pod = daemonset(None if mode == "podnet" else {"cni": {"mode": mode}})
    (init,) = pod["initContainers"]
    args = build_parser().parse_args(init["args"])
    assert (args.command, args.mode) == ("install-cni", mode)
    assert host_dirs(pod, init, init["args"]) == ("/opt/cni/bin", "/etc/cni/net.d")
    (agent,) = pod["containers"]
    assert "lifecycle" not in agent
    assert not {"cni-bin", "cni-conf"} & {m["name"] for m in agent["volumeMounts"]}


@pytest.mark.parametrize("mode", ["podnet", "ipam"])
def test_cni_uninstall_takes_the_files_off_when_the_agent_ends(mode: str) -> None:
    """cni.uninstall: the agent's preStop runs uninstall-cni on the directories the init
    step installed into, in the same mode; its postStart installs again (a restarted
    container runs no init step)."""
    from podnet.app.cli import build_parser

    pod = daemonset({"cni": {"uninstall": True, "mode": mode},
                     "node": {"cniBinDir": "/home/kubernetes/bin"}})
    (init,) = pod["initContainers"]
    (agent,) = pod["containers"]
    stop = agent["lifecycle"]["preStop"]["exec"]["command"]
    start = agent["lifecycle"]["postStart"]["exec"]["command"]
    assert stop[0] == start[0] == "podnet"  # the image's command, on its PATH
    assert start[1:] == init["args"]
    args = build_parser().parse_args(stop[1:])
    assert (args.command, args.mode) == ("uninstall-cni", mode)
    assert host_dirs(pod, agent, stop[1:]) == host_dirs(pod, init, init["args"]) == (
        "/home/kubernetes/bin", "/etc/cni/net.d")
    import helm_python

    report = helm_python.lint(str(ROOT / "deploy" / "chart"),
                              {"cni": {"uninstall": True, "mode": mode}}, strict=True,
                              kube_version="v1.30.0")
    assert report["errors"] == [] and [m for m in report["messages"]
                                       if m["severity"] >= 2] == [], report


def test_the_chart_refuses_an_unknown_cni_mode() -> None:
    with pytest.raises(Exception, match=re.escape('cni.mode: "calico" is not podnet or ipam')):
        daemonset({"cni": {"mode": "calico"}})
