"""``podnet install-cni``: put the CNI plugin and its network config onto a node.

The node agent's DaemonSet runs this in an init container with the host's CNI
directories mounted: the plugin is one standard-library file, copied as an executable
script under both its names (``podnet-cni``, and ``podnet-ipam`` for other plugins' IPAM:
the name it runs under picks the role), and the conflist names it and the agent's socket.
Each file is written to a temporary file and renamed, so a runtime never reads half a
file, and writing them again changes nothing.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

__all__ = ["CONFLIST_NAME", "IPAM_NAME", "PLUGIN_NAME", "conflist", "install_cni"]

PLUGIN_NAME = "podnet-cni"
#: the same file as an IPAM plugin of third-party CNI plugins (``"ipam": {"type": ...}``)
IPAM_NAME = "podnet-ipam"
#: runtimes take the first config file by name: a low number puts podnet's first
CONFLIST_NAME = "10-podnet.conflist"


def conflist(network: str, socket_path: str) -> dict[str, object]:
    """The network config list a runtime reads: podnet's plugin, asking the agent at
    ``socket_path``."""
    return {"cniVersion": "1.1.0", "name": network,
            "plugins": [{"type": PLUGIN_NAME, "agentSocket": socket_path}]}


def _plugin_source() -> bytes:
    spec = importlib.util.find_spec("podnet.cni.plugin")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("the podnet.cni package is not installed")
    return Path(spec.origin).read_bytes()


def _replace(path: Path, data: bytes, mode: int) -> bool:
    """Write ``data`` to ``path`` atomically; False when it already held exactly that."""
    if path.exists() and path.read_bytes() == data and (path.stat().st_mode & 0o777) == mode:
        return False
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)
    return True


def install_cni(bin_dir: str | Path, conf_dir: str | Path, *, network: str = "podnet",
                socket_path: str = "/run/podnet/agent.sock") -> list[Path]:
    """Install the plugin (as podnet-cni and podnet-ipam) into ``bin_dir`` and its
    conflist into ``conf_dir``.

    :return: the files written (empty when all were already in place)."""
    bin_path, conf_path = Path(bin_dir), Path(conf_dir)
    bin_path.mkdir(parents=True, exist_ok=True)
    conf_path.mkdir(parents=True, exist_ok=True)
    written = []
    source = _plugin_source()
    for name in (PLUGIN_NAME, IPAM_NAME):
        plugin = bin_path / name
        if _replace(plugin, source, 0o755):
            written.append(plugin)
    config = conf_path / CONFLIST_NAME
    body = (json.dumps(conflist(network, socket_path), indent=2) + "\n").encode()
    if _replace(config, body, 0o644):
        written.append(config)
    return written
