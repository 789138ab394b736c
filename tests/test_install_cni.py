"""``podnet install-cni``: the plugin file and the conflist land on the host, runnable,
atomically, and writing them again changes nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from podnet.app.cli import main
from podnet.app.install import CONFLIST_NAME, IPAM_NAME, PLUGIN_NAME, install_cni
from podnet.testing.cni import run_cni


def test_install_puts_a_runnable_plugin_and_a_conflist(tmp_path: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    written = install_cni(bin_dir, conf_dir, socket_path="/run/podnet/test.sock")
    plugin, conf = bin_dir / PLUGIN_NAME, conf_dir / CONFLIST_NAME
    ipam = bin_dir / IPAM_NAME
    assert written == [plugin, ipam, conf]
    assert plugin.stat().st_mode & 0o777 == 0o755
    # the IPAM plugin is the same file under the name that picks its role
    assert ipam.stat().st_mode & 0o777 == 0o755
    assert ipam.read_bytes() == plugin.read_bytes()
    config = json.loads(conf.read_text())
    assert config["plugins"] == [{"type": PLUGIN_NAME, "agentSocket": "/run/podnet/test.sock"}]
    # the installed single file answers as the runtime calls it, by itself
    done = run_cni("VERSION", {"cniVersion": "1.1.0"}, argv=[sys.executable, str(plugin)])
    assert done.exit_code == 0, done.stdout + done.stderr
    assert "1.1.0" in json.loads(done.stdout)["supportedVersions"]
    assert install_cni(bin_dir, conf_dir, socket_path="/run/podnet/test.sock") == []
    assert not list(bin_dir.glob(".*.tmp")) and not list(conf_dir.glob(".*.tmp"))


def test_install_replaces_a_changed_plugin(tmp_path: Path) -> None:
    bin_dir, conf_dir = tmp_path / "bin", tmp_path / "net.d"
    install_cni(bin_dir, conf_dir)
    (bin_dir / PLUGIN_NAME).write_text("#!/bin/sh\nexit 1\n")
    assert install_cni(bin_dir, conf_dir) == [bin_dir / PLUGIN_NAME]


def test_the_command_line(tmp_path: Path, capsys: object) -> None:
    assert main(["install-cni", "--bin-dir", str(tmp_path / "b"), "--conf-dir",
                 str(tmp_path / "c"), "--network", "pn"]) == 0
    assert json.loads((tmp_path / "c" / CONFLIST_NAME).read_text())["name"] == "pn"
