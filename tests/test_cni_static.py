"""The plugin needs nothing of the host: the built file is a static ELF executable (no
program interpreter, no shared library: read from its headers, and as ``ldd`` sees it),
and it runs in an empty root file system, the file alone in it, reaching the agent's
socket there."""

from __future__ import annotations

import json
import os
import platform
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from podnet.testing.cni import IPAM_NAME, PLUGIN_NAME, ExecStandIn, plugin_path

PT_DYNAMIC, PT_INTERP = 2, 3
DT_NULL, DT_NEEDED = 0, 1
#: e_machine of the architectures a node may be
MACHINES = {"x86_64": 62, "aarch64": 183, "arm64": 183, "riscv64": 243, "ppc64le": 21,
            "s390x": 22}


def elf_dependencies(data: bytes) -> tuple[int, list[str]]:
    """(e_machine, what the file needs at run time: ``interp <path>`` for a PT_INTERP,
    ``needed <offset>`` for each DT_NEEDED of its dynamic section)."""
    assert data[:4] == b"\x7fELF", "not an ELF file"
    wide, order = data[4] == 2, "<" if data[5] == 1 else ">"
    if wide:
        e_type, machine, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
            order + "HHIQQQIHHH", data, 16)
    else:
        e_type, machine, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack_from(
            order + "HHIIIIIHHH", data, 16)
    assert e_type in (2, 3), f"not an executable: e_type {e_type}"
    needs = []
    for i in range(phnum):
        at = phoff + i * phentsize
        if wide:
            p_type, _, offset, _, _, filesz = struct.unpack_from(order + "IIQQQQ", data, at)
        else:
            p_type, offset, _, _, filesz = struct.unpack_from(order + "IIIII", data, at)
        if p_type == PT_INTERP:
            interp = data[offset:offset + filesz].rstrip(b"\0").decode()
            needs.append(f"interp {interp}")
        if p_type == PT_DYNAMIC:
            entry = "qq" if wide else "ii"
            size = struct.calcsize(order + entry)
            for j in range(filesz // size):
                tag, value = struct.unpack_from(order + entry, data, offset + j * size)
                if tag == DT_NULL:
                    break
                if tag == DT_NEEDED:
                    needs.append(f"needed {value}")
    return machine, needs


def test_the_plugin_is_a_static_executable_of_this_machine() -> None:
    for name in (PLUGIN_NAME, IPAM_NAME):
        path = plugin_path(name)
        machine, needs = elf_dependencies(path.read_bytes())
        assert needs == [], f"{path} needs {needs}"
        if platform.machine() in MACHINES:
            assert machine == MACHINES[platform.machine()]
        assert os.access(path, os.X_OK)
    # one file under two names
    assert plugin_path(IPAM_NAME).read_bytes() == plugin_path(PLUGIN_NAME).read_bytes()


def test_the_elf_reader_finds_a_dynamic_programs_needs() -> None:
    """The check above can fail: ``ls`` is a dynamic program."""
    ls = Path(os.path.realpath(shutil.which("ls") or "/bin/ls"))
    _, needs = elf_dependencies(ls.read_bytes())
    assert any(n.startswith("interp /") for n in needs), needs
    assert any(n.startswith("needed ") for n in needs), needs


@pytest.mark.skipif(shutil.which("ldd") is None, reason="no ldd on this machine")
def test_ldd_says_it_is_not_dynamic() -> None:
    done = subprocess.run(["ldd", str(plugin_path())], capture_output=True, text=True,
                          check=False)
    said = done.stdout + done.stderr
    assert done.returncode != 0 and "not a dynamic executable" in said, said


# --- an empty root file system -----------------------------------------------------------


@pytest.fixture
def empty_root() -> Iterator[Path]:
    """A root file system holding the plugin's file under its two names, nothing else
    but the directory its agent's socket goes in."""
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        pytest.skip("chroot needs root and the chroot command")
    # short: the socket's path inside must fit a unix socket address
    root = Path(tempfile.mkdtemp(prefix="pnroot"))
    try:
        shutil.copy(plugin_path(), root / PLUGIN_NAME)
        os.link(root / PLUGIN_NAME, root / IPAM_NAME)
        (root / "run" / "podnet").mkdir(parents=True)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def chrooted(root: Path, name: str, command: str, stdin: bytes, **env: str
             ) -> subprocess.CompletedProcess[bytes]:
    """The plugin run as a runtime would, but with ``root`` as its root directory."""
    return subprocess.run([shutil.which("chroot") or "chroot", str(root), f"/{name}"],
                          input=stdin,
                          env={"CNI_COMMAND": command, **env}, capture_output=True,
                          timeout=60, check=False)


def test_it_runs_alone_in_an_empty_root(empty_root: Path) -> None:
    assert sorted(p.name for p in empty_root.iterdir()) == [PLUGIN_NAME, IPAM_NAME, "run"]
    done = chrooted(empty_root, PLUGIN_NAME, "VERSION", b"")
    assert done.returncode == 0, done
    assert json.loads(done.stdout)["supportedVersions"] == ["0.3.1", "0.4.0", "1.0.0",
                                                            "1.1.0"]
    # no agent: the spec's error, for the default socket (the root's)
    done = chrooted(empty_root, PLUGIN_NAME, "ADD", b'{"cniVersion": "1.0.0"}')
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "cniVersion": "1.0.0", "code": 11,
        "msg": "podnet node agent not reachable at /run/podnet/agent.sock: No such file or "
               "directory"}
    with ExecStandIn(str(empty_root / "run" / "podnet" / "agent.sock")) as agent:
        agent.respond = lambda request: (0, b'{"cniVersion": "1.0.0", "ips": []}')
        # no agentSocket: the default, /run/podnet/agent.sock, inside this root
        config = {"cniVersion": "1.0.0", "name": "podnet", "type": "podnet-cni"}
        done = chrooted(empty_root, PLUGIN_NAME, "ADD", json.dumps(config).encode(),
                        CNI_CONTAINERID="c1", CNI_NETNS="/proc/1/ns/net", CNI_IFNAME="eth0")
        assert (done.returncode, done.stdout) == (0, b'{"cniVersion": "1.0.0", "ips": []}')
        request = agent.requests[-1]
        assert request.program == PLUGIN_NAME
        assert request.environ == {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1",
                                   "CNI_NETNS": "/proc/1/ns/net", "CNI_IFNAME": "eth0"}
        assert json.loads(request.body) == config
        # a configuration that is no JSON: the defaults, and its bytes sent as they are
        # (the agent answers error 6)
        agent.respond = lambda request: (1, b'{"code": 6}')
        done = chrooted(empty_root, IPAM_NAME, "ADD", b"{not json")
        assert (done.returncode, done.stdout) == (1, b'{"code": 6}')
        assert (agent.requests[-1].program, agent.requests[-1].body) == (IPAM_NAME,
                                                                         b"{not json")
        # the IPAM role with an ipam section that names no socket: the default too
        config = {"cniVersion": "1.0.0", "name": "n", "type": "bridge", "agentSocket": "/x",
                  "ipam": {"type": IPAM_NAME, "agentSocket": 3}}
        agent.respond = lambda request: (0, b"")
        assert chrooted(empty_root, IPAM_NAME, "STATUS", json.dumps(config).encode()
                        ).returncode == 0
        assert len(agent.requests) == 3


# --- the build ---------------------------------------------------------------------------

BUILD = Path(__file__).resolve().parent.parent / "scripts" / "build-cni.sh"


def build(out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(BUILD), str(out)], capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300, check=False)


@pytest.mark.skipif(shutil.which("musl-gcc") is None, reason="musl-tools is not installed")
def test_the_build_writes_both_names_skips_when_fresh_and_replaces_a_script(
        tmp_path: Path) -> None:
    out = tmp_path / "bin"
    # what an older podnet left there: its Python console script, newer than the source
    out.mkdir()
    (out / PLUGIN_NAME).write_text("#!/usr/bin/python3\nimport sys\n")
    done = build(out)
    assert done.returncode == 0, done.stderr
    cni, ipam = out / PLUGIN_NAME, out / IPAM_NAME
    assert elf_dependencies(cni.read_bytes())[1] == []
    assert cni.read_bytes() == ipam.read_bytes() and os.access(ipam, os.X_OK)
    assert sorted(p.name for p in out.iterdir()) == [PLUGIN_NAME, IPAM_NAME]
    # up to date: nothing written (not even with no compiler to be found)
    stamps = (cni.stat().st_mtime_ns, ipam.stat().st_mtime_ns)
    assert build(out, MUSL_GCC="no-such-compiler").returncode == 0
    assert (cni.stat().st_mtime_ns, ipam.stat().st_mtime_ns) == stamps
    # one name missing: built again
    ipam.unlink()
    assert build(out).returncode == 0 and ipam.exists()


def test_the_build_without_musl_says_so_in_one_line(tmp_path: Path) -> None:
    done = build(tmp_path / "bin", MUSL_GCC="no-such-compiler")
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "no-such-compiler not found: install musl-tools" in done.stderr
    assert not (tmp_path / "bin").exists()
