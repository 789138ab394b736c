"""``podnet install-cni`` and ``podnet uninstall-cni``: put podnet's CNI plugin and its
network config onto a node, and take them off again.

The node agent's DaemonSet runs install-cni in an init container with the host's CNI
directories mounted. The plugin is one static executable (``make`` builds it beside the
``podnet`` command, the image carries it in ``/opt/podnet/bin``), copied under both its
names: ``podnet-cni``, and ``podnet-ipam`` for other plugins' IPAM (the name it runs under
picks the role). The conflist names it and the agent's socket. In the chaining mode
(``mode="ipam"``) only ``podnet-ipam`` is installed: the cluster's own plugin plumbs and
asks podnet for addresses.

Everything is checked before anything is written (the plugin is an ELF executable of this
machine that needs no loader; each directory is, or can be made, a writable directory), so
a refused install leaves the host as it was. Each file is written to a temporary file and
renamed, so a runtime never reads half a file, and writing them again changes nothing.

Uninstall removes only what is podnet's: the conflist if it names podnet-cni, each binary
if it carries podnet's marker (the ``podnet-cni/`` of the plugin's User-Agent). A file of
those names that is someone else's is left and said.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import attrs

__all__ = ["CONFLIST_NAME", "IPAM_NAME", "MODES", "PLUGIN_ENV", "PLUGIN_NAME", "InstallError",
           "Uninstalled", "check_plugin", "conflist", "install_cni", "is_podnets_binary",
           "is_podnets_conflist", "plugin_binary", "shadowing_conflist", "uninstall_cni"]

log = logging.getLogger(__name__)

PLUGIN_NAME = "podnet-cni"
#: the same file as an IPAM plugin of third-party CNI plugins (``"ipam": {"type": ...}``)
IPAM_NAME = "podnet-ipam"
#: runtimes take the first config file by name: a low number puts podnet's first
CONFLIST_NAME = "10-podnet.conflist"
#: where the plugin comes from when ``--plugin`` does not say
PLUGIN_ENV = "PODNET_CNI_PLUGIN"
Mode = Literal["podnet", "ipam"]
#: podnet: podnet-cni is the pods' network plugin (the conflist, both names);
#: ipam: chaining, another plugin plumbs and runs podnet-ipam for its addresses
MODES: tuple[Mode, ...] = ("podnet", "ipam")
#: the files each mode installs into the binary directory
_BINARIES: dict[str, tuple[str, ...]] = {"podnet": (PLUGIN_NAME, IPAM_NAME),
                                         "ipam": (IPAM_NAME,)}
#: what podnet's plugin carries: the static program's User-Agent ``podnet-cni/<version>``;
#: the Python script of podnet 0.8 and before sent ``User-Agent: podnet-cni``
_MARKERS = (b"podnet-cni/", b"User-Agent: podnet-cni")
#: the extensions libcni reads a network configuration from
_CONF_EXTENSIONS = (".conf", ".conflist", ".json")
#: a plugin (or a file of its name) larger than this is not podnet's
_MAX_PLUGIN = 64 << 20

#: ``platform.machine()`` -> (ELF e_machine, ELF class: 1 = 32-bit, 2 = 64-bit)
_MACHINES = {"x86_64": (62, 2), "amd64": (62, 2), "aarch64": (183, 2), "arm64": (183, 2),
             "i386": (3, 1), "i686": (3, 1), "armv7l": (40, 1), "armv6l": (40, 1),
             "ppc64le": (21, 2), "s390x": (22, 2), "riscv64": (243, 2),
             "loongarch64": (258, 2)}
_MACHINE_NAMES = {62: "x86-64", 183: "aarch64", 3: "i386", 40: "arm", 21: "ppc64",
                  22: "s390", 243: "riscv", 258: "loongarch", 8: "mips"}
_ET_EXEC, _ET_DYN, _PT_INTERP = 2, 3, 3


class InstallError(Exception):
    """An install or uninstall that cannot be done: one line naming the path and why."""


def conflist(network: str, socket_path: str) -> dict[str, object]:
    """The network config list a runtime reads: podnet's plugin, asking the agent at
    ``socket_path``."""
    return {"cniVersion": "1.1.0", "name": network,
            "plugins": [{"type": PLUGIN_NAME, "agentSocket": socket_path}]}


def plugin_binary(explicit: str | Path | None = None, *,
                  environ: Mapping[str, str] = os.environ,
                  scripts_dir: str | Path | None = None) -> Path:
    """The plugin executable to install: ``explicit`` (``--plugin``), else
    ``$PODNET_CNI_PLUGIN``, else ``podnet-cni`` beside the running podnet's own command
    (its ``scripts`` directory: ``.venv/bin`` after ``make``, ``/opt/podnet/bin`` in the
    image). Only found here: :func:`check_plugin` says whether it will do.

    :raise InstallError: none given and none beside podnet, naming where it looked."""
    if explicit:
        return Path(explicit)
    if environ.get(PLUGIN_ENV):
        return Path(environ[PLUGIN_ENV])
    scripts = Path(scripts_dir if scripts_dir is not None else sysconfig.get_path("scripts"))
    beside = scripts / PLUGIN_NAME
    if beside.exists():
        return beside
    raise InstallError(f"{beside}: no {PLUGIN_NAME} plugin there, and neither --plugin nor "
                       f"{PLUGIN_ENV} names one (`make` builds it)")


def check_plugin(path: str | Path) -> bytes:
    """Read the plugin at ``path``, refusing what a host could not run: not a regular
    file, not an ELF executable, built for another machine, or needing a dynamic loader
    (the host may have none, or another libc).

    :return: its bytes, what install writes.
    :raise InstallError: naming ``path`` and why."""
    path = Path(path)
    try:
        if not path.is_file():
            raise InstallError(f"{path}: the plugin is "
                               f"{'not a regular file' if path.exists() else 'missing'}")
        if path.stat().st_size > _MAX_PLUGIN:
            raise InstallError(f"{path}: not podnet's plugin (larger than "
                               f"{_MAX_PLUGIN >> 20} MiB)")
        data = path.read_bytes()
    except OSError as exc:
        raise InstallError(f"{path}: cannot read the plugin: {exc.strerror}") from None
    problem = _elf_problem(data)
    if problem:
        raise InstallError(f"{path}: {problem}")
    return data


def _elf_problem(data: bytes) -> str | None:
    """Why ``data`` is not an executable this machine can run without a loader, or None."""
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] not in (1, 2):
        return "not an ELF executable (the plugin is the static program `make` builds)"
    elf_class = data[4]
    order: Literal["little", "big"] = "little" if data[5] == 1 else "big"

    def field(offset: int, size: int) -> int:
        return int.from_bytes(data[offset:offset + size], order)

    e_type, e_machine = field(16, 2), field(18, 2)
    if e_type not in (_ET_EXEC, _ET_DYN):
        return f"not an ELF executable (ELF type {e_type})"
    want = _this_machine()
    if want is not None and ((e_machine, elf_class) != want or order != sys.byteorder):
        bits = {1: "32-bit", 2: "64-bit"}.get(elf_class, f"class {elf_class}")
        return (f"built for {_MACHINE_NAMES.get(e_machine, f'ELF machine {e_machine}')} "
                f"({bits}, {order}-endian), not this machine's {platform.machine()}")
    wide = elf_class == 2
    phoff = field(32, 8) if wide else field(28, 4)
    phentsize, phnum = (field(54, 2), field(56, 2)) if wide else (field(42, 2), field(44, 2))
    for index in range(phnum):
        header = phoff + index * phentsize
        if header + phentsize > len(data):
            return "a truncated ELF file (its program headers run past its end)"
        if field(header, 4) == _PT_INTERP:
            offset = field(header + 8, 8) if wide else field(header + 4, 4)
            size = field(header + 32, 8) if wide else field(header + 16, 4)
            loader = data[offset:offset + size].rstrip(b"\0").decode(errors="replace")
            return (f"dynamically linked (needs the loader {loader}): the plugin must be "
                    "static, a host need not have that loader or its libraries")
    return None


def _this_machine() -> tuple[int, int] | None:
    """(e_machine, ELF class) this machine runs: by name, else its own interpreter's."""
    known = _MACHINES.get(platform.machine().lower())
    if known is not None:
        return known
    try:
        with open(os.path.realpath(sys.executable), "rb") as own:
            head = own.read(20)
    except OSError:
        return None
    if head[:4] != b"\x7fELF":
        return None
    return int.from_bytes(head[18:20], "little" if head[5] == 1 else "big"), head[4]


def _check_directory(path: Path, created: list[Path]) -> None:
    """Make ``path`` a directory if it is not one yet (recording what was made, for the
    caller to take back) and prove it writable with a file that is made and removed: a
    read-only mount, a missing permission or a pseudo file system all show here, whoever
    runs it (root passes every mode bit)."""
    existing = path
    while not _exists(path, existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        where = "" if existing == path else f" ({existing} is in its way)"
        raise InstallError(f"{path}: not a directory{where}")
    missing = []
    cursor = path
    while cursor != existing:
        missing.append(cursor)
        cursor = cursor.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except OSError as exc:
            raise InstallError(f"{path}: cannot create the directory: {exc.strerror}") from None
        created.append(directory)
    try:
        fd, probe = tempfile.mkstemp(prefix=".podnet-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InstallError(f"{path}: not writable: {exc.strerror}") from None


def _exists(path: Path, step: Path) -> bool:
    """Whether ``step`` (``path`` or one of its parents) exists; a file in the way of it
    is its not existing, a directory this user cannot search is said."""
    try:
        os.lstat(step)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        raise InstallError(f"{path}: cannot reach it: {exc.strerror}") from None
    return True


def _take_back(created: list[Path]) -> None:
    for directory in reversed(created):
        try:
            directory.rmdir()
        except OSError:  # someone else's file landed there meanwhile: keep it
            pass


def shadowing_conflist(conf_dir: str | Path) -> Path | None:
    """The configuration file in ``conf_dir`` a runtime reads instead of podnet's
    conflist: runtimes (libcni) take the first file by name among ``*.conf``,
    ``*.conflist`` and ``*.json``."""
    try:
        names = sorted(entry.name for entry in os.scandir(conf_dir)
                       if entry.name.endswith(_CONF_EXTENSIONS) and not entry.is_dir())
    except OSError:
        return None
    first = next((name for name in names if name != CONFLIST_NAME), None)
    if first is None or first > CONFLIST_NAME:
        return None
    return Path(conf_dir) / first


def _scratch(path: Path) -> Path:
    """Where ``path``'s next content is written before it is renamed into place."""
    return path.with_name(f".{path.name}.tmp")


def _replace(path: Path, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` atomically; False when it already held exactly that."""
    try:
        if path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
            return False
    except OSError:
        pass
    tmp = _scratch(path)
    try:
        with open(tmp, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        tmp.chmod(mode)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return True


def _log_warning(message: str) -> None:
    log.warning("%s", message)


def install_cni(bin_dir: str | Path, conf_dir: str | Path, *, network: str = "podnet",
                socket_path: str = "/run/podnet/agent.sock",
                plugin: str | Path | None = None, mode: Mode = "podnet",
                warn: Callable[[str], object] = _log_warning) -> list[Path]:
    """Install the plugin (as podnet-cni and podnet-ipam; podnet-ipam alone in the
    ``ipam`` mode) into ``bin_dir`` and, in the ``podnet`` mode, its conflist into
    ``conf_dir``, after checking all of it can be done.

    :param plugin: the executable to install (default: :func:`plugin_binary`'s).
    :param warn: told, in one line each, what will not stop the install but may stop it
        working (another configuration the runtime reads first).
    :return: the files written (empty when all were already in place).
    :raise InstallError: a check failed (nothing written) or a write failed."""
    if mode not in MODES:
        raise InstallError(f"mode {mode!r}: not one of {', '.join(MODES)}")
    bin_path, conf_path = Path(bin_dir), Path(conf_dir)
    data = check_plugin(plugin_binary(plugin))
    config = conf_path / CONFLIST_NAME
    targets = [bin_path / name for name in _BINARIES[mode]]
    if mode == "podnet":
        targets.append(config)
    created: list[Path] = []
    try:
        _check_directory(bin_path, created)
        if mode == "podnet":
            _check_directory(conf_path, created)
        for target in targets:
            if target.is_dir() and not target.is_symlink():
                raise InstallError(f"{target}: a directory is in the way of podnet's file")
    except InstallError:
        _take_back(created)
        raise
    if mode == "podnet":
        shadow = shadowing_conflist(conf_path)
        if shadow is not None:
            warn(f"{shadow} sorts before {CONFLIST_NAME}: the runtime reads the first "
                 "configuration by name, so it runs that one, not podnet's")
    elif is_podnets_conflist(config):
        warn(f"{config}: podnet's conflist (from the podnet mode) is still there; while it "
             "is the first by name the runtime runs podnet-cni, not your plugin "
             "(`podnet uninstall-cni --mode podnet` removes it)")
    body = (json.dumps(conflist(network, socket_path), indent=2) + "\n").encode()
    written = []
    try:
        for target in targets:
            if _replace(target, *((body, 0o644) if target == config else (data, 0o755))):
                written.append(target)
    except OSError as exc:
        raise InstallError(f"{exc.filename or bin_path}: cannot write: {exc.strerror}"
                           ) from None
    return written


def is_podnets_conflist(path: str | Path) -> bool:
    """Whether the configuration at ``path`` is podnet's: a conflist (or single config)
    whose plugins name podnet-cni."""
    try:
        if Path(path).stat().st_size > _MAX_PLUGIN:
            return False
        config = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(config, dict):
        return False
    plugins = config.get("plugins", [config])
    return isinstance(plugins, list) and any(
        isinstance(p, dict) and p.get("type") == PLUGIN_NAME for p in plugins)


def is_podnets_binary(path: str | Path) -> bool:
    """Whether the file at ``path`` is podnet's plugin: it carries podnet's marker."""
    try:
        if Path(path).stat().st_size > _MAX_PLUGIN:
            return False
        data = Path(path).read_bytes()
    except OSError:
        return False
    return any(marker in data for marker in _MARKERS)


@attrs.frozen
class Uninstalled:
    """What :func:`uninstall_cni` did."""

    #: the files removed
    removed: tuple[Path, ...]
    #: a line for each file of podnet's names that is not podnet's, left in place
    left: tuple[str, ...]


def uninstall_cni(bin_dir: str | Path, conf_dir: str | Path, *,
                  mode: Mode = "podnet") -> Uninstalled:
    """Remove what :func:`install_cni` installs in ``mode`` (the conflist first, so the
    runtime stops choosing podnet, then the binaries) and nothing else. A missing file is
    already removed: running it again does nothing.

    :raise InstallError: a directory holding podnet's files is not writable (nothing is
        removed then) or a removal failed."""
    if mode not in MODES:
        raise InstallError(f"mode {mode!r}: not one of {', '.join(MODES)}")
    candidates: list[tuple[Path, Callable[[Path], bool], str]] = []
    if mode == "podnet":
        candidates.append((Path(conf_dir) / CONFLIST_NAME, is_podnets_conflist,
                           f"its plugins do not name {PLUGIN_NAME}"))
    candidates.extend((Path(bin_dir) / name, is_podnets_binary,
                       "it does not carry podnet's marker (podnet-cni/)")
                      for name in _BINARIES[mode])
    ours, left = [], []
    for path, is_ours, why in candidates:
        # the temporary file an install that died mid-write left (install's own name)
        scratch = _scratch(path)
        if scratch.is_file() and not scratch.is_symlink():
            ours.append(scratch)
        if not os.path.lexists(path):
            continue
        if path.is_symlink() or not path.is_file():
            left.append(f"{path}: not podnet's (not a regular file), left in place")
        elif is_ours(path):
            ours.append(path)
        else:
            left.append(f"{path}: not podnet's ({why}), left in place")
    for directory in dict.fromkeys(path.parent for path in ours):
        _check_directory(directory, [])
    removed = []
    for path in ours:
        try:
            path.unlink()
        except FileNotFoundError:  # removed meanwhile: what was asked
            continue
        except OSError as exc:
            raise InstallError(f"{path}: cannot remove: {exc.strerror}") from None
        removed.append(path)
    return Uninstalled(removed=tuple(removed), left=tuple(left))

