"""The README's mixed-cluster walkthrough, step by step, as separate processes.

``podnet apiserver``, ``podnet sim bbc``, ``podnet sim ecs``, a real ``ovsdb-server``
with the OVN Northbound schema, and ``podnet run --config`` with the sample config from
deploy/config/mixed.yaml (only its ports changed); kubectl creates the nodes from
examples/mixed-cluster/nodes.yaml and the pods printed by examples/mixed-cluster/pods.sh;
``ovn-nbctl`` reads the Northbound DB back.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_e2e_run import Cluster, free_port, wait_for

from podnet.core.config import load_config
from podnet.core.objects import node_info
from podnet.hookspecs.types import NodeContext
from podnet.plugins.ovn.nbserver import find_schema

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "deploy" / "config" / "mixed.yaml"
EXAMPLE = ROOT / "examples" / "mixed-cluster"
PODS = 300
ATTACHED = {f"web-{i}" for i in range(0, PODS, 3)}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
    pytest.mark.skipif(shutil.which("ovsdb-server") is None or find_schema() is None,
                       reason="ovsdb-server or the OVN NB schema is not installed"),
]

#: what the walkthrough exports: the simulators never check signatures
CREDENTIALS = {"BCE_ACCESS_KEY_ID": "walkthrough", "BCE_SECRET_ACCESS_KEY": "walkthrough",
               "ALIBABA_CLOUD_ACCESS_KEY_ID": "walkthrough",
               "ALIBABA_CLOUD_ACCESS_KEY_SECRET": "walkthrough"}


class Mixed(Cluster):
    """The API emulator, both cloud simulators, ovsdb-server and one controller."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        self.bbc_port, self.ecs_port, self.nb_port = free_port(), free_port(), free_port()
        self.spawn(["sim", "bbc", "--port", str(self.bbc_port), "--instances", "10"], "sim-bbc")
        self.spawn(["sim", "ecs", "--port", str(self.ecs_port), "--instances", "10",
                    "--instance-type", "ecs.g7.4xlarge"], "sim-ecs")
        db = tmp / "nb.db"
        subprocess.run(["ovsdb-tool", "create", str(db), find_schema() or ""], check=True)
        self.nb = f"tcp:127.0.0.1:{self.nb_port}"
        nb_log = open(tmp / "ovsdb-server.log", "a")  # noqa: SIM115 - lives with the process
        self.procs.append(subprocess.Popen(
            ["ovsdb-server", str(db), f"--remote=ptcp:{self.nb_port}:127.0.0.1", "--no-chdir",
             f"--pidfile={tmp / 'nb.pid'}", f"--unixctl={tmp / 'nb.ctl'}"],
            stdout=nb_log, stderr=nb_log, text=True))
        wait_for("ovsdb-server", lambda: self.nbctl_ok("show"), timeout=30)
        self.config_path = tmp / "mixed.yaml"
        self.config_path.write_text(yaml.safe_dump(self.config()))

    def config(self) -> dict[str, Any]:
        """The sample config with this run's ports, and pools that keep nothing idle (so
        that once the pods are gone the clouds hold no address at all)."""
        data = yaml.safe_load(SAMPLE.read_text())
        providers = data["providers"]
        providers["bbc"]["endpoint"] = f"127.0.0.1:{self.bbc_port}"
        providers["ecs"]["endpoint"] = f"127.0.0.1:{self.ecs_port}"
        providers["ovn"]["remote"] = self.nb
        data["listen"] = f"127.0.0.1:{free_port()}"
        data["policies"] = {name: {"minIdle": 0, "maxIdle": 0} for name in ("bbc", "ecs")}
        return dict(data)

    def run_controller(self) -> subprocess.Popen[str]:
        env = {**os.environ, **CREDENTIALS}
        log = open(self.tmp / "controller.log", "a")  # noqa: SIM115 - lives with the process
        proc = subprocess.Popen([sys.executable, "-m", "podnet.app.cli", "run", "--kubeconfig",
                                 str(self.kubeconfig), "--config", str(self.config_path),
                                 "--identity", "walkthrough"],
                                stdout=subprocess.DEVNULL, stderr=log, text=True, env=env)
        self.procs.append(proc)
        return proc

    def nbctl_ok(self, *args: str) -> bool:
        return subprocess.run(["ovn-nbctl", f"--db={self.nb}", *args],
                              capture_output=True, timeout=30, check=False).returncode == 0

    def lsps(self) -> dict[str, str]:
        """Logical switch port name -> the pod named in its external_ids."""
        out = subprocess.run(["ovn-nbctl", f"--db={self.nb}", "--format=json",
                              "--columns=name,external_ids", "list", "Logical_Switch_Port"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        ports = {}
        for name, ext in json.loads(out)["data"]:
            ports[name] = dict(ext[1]).get("pod", "")
        return ports

    def cloud_addresses(self) -> dict[str, int]:
        """Per node, the secondary addresses its cloud reports (the providers' own
        inventory read, through the SDKs, against the simulators)."""
        from podnet.plugins.bbc.provider import BbcProvider
        from podnet.plugins.ecs.provider import EcsProvider

        config = load_config(self.config_path)
        os.environ.update(CREDENTIALS)
        bbc, ecs = BbcProvider(), EcsProvider()
        bbc.podnet_configure("bbc", config.providers["bbc"])
        ecs.podnet_configure("ecs", config.providers["ecs"])
        out = {}
        for raw in json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]:
            node = node_info(raw)
            plugin: Any = bbc if node.name.startswith("bbc-") else ecs
            inventory = plugin.podnet_node_inventory(
                provider=plugin.name, node=NodeContext(node=node, network=None))
            out[node.name] = sum(len(itf.ips) for itf in inventory.interfaces)
        return out


@pytest.fixture
def mixed(tmp_path: Path) -> Iterator[Mixed]:
    m = Mixed(tmp_path)
    try:
        yield m
    finally:
        m.close()


def records(m: Mixed) -> list[dict[str, Any]]:
    return m.get("podnetworks")


def routed_networks(m: Mixed) -> set[tuple[str, str]]:
    return {(pn["spec"]["podName"], pn["spec"]["network"]) for pn in records(m)
            if pn.get("status", {}).get("phase") == "Routed"}


def test_mixed_cluster_walkthrough(mixed: Mixed) -> None:
    m = mixed
    m.run_controller()
    m.kubectl("create", "-f", str(EXAMPLE / "nodes.yaml"))
    pods = subprocess.run(["sh", str(EXAMPLE / "pods.sh"), str(PODS)], capture_output=True,
                          text=True, check=True, timeout=60).stdout
    m.kubectl("create", "-f", "-", input=pods)

    wanted = ({(f"web-{i}", "default") for i in range(PODS)}
              | {(name, "overlay") for name in ATTACHED})
    wait_for("400 routed pod networks", lambda: routed_networks(m) >= wanted, timeout=240)
    pns = records(m)
    assert len(pns) == len(wanted)
    providers = {(pn["spec"]["podName"], pn["spec"]["network"]): pn["spec"]["provider"]
                 for pn in pns}
    for i in range(PODS):
        assert providers[(f"web-{i}", "default")] == ("bbc" if i % 2 == 0 else "ecs")
    assert {providers[(name, "overlay")] for name in ATTACHED} == {"ovn"}
    ips = [pn["status"]["ip"] for pn in pns]
    assert len(ips) == len(set(ips)), "an address is recorded twice"

    # every attached pod has its port in the NB DB, as ovn-nbctl sees it
    ports = m.lsps()
    overlay = {pn["spec"]["podName"]: pn for pn in pns if pn["spec"]["network"] == "overlay"}
    assert sorted(ports.values()) == sorted(overlay)
    for name, pn in overlay.items():
        addresses = subprocess.run(
            ["ovn-nbctl", f"--db={m.nb}", "lsp-get-addresses", pn["status"]["interface"]],
            capture_output=True, text=True, timeout=30, check=True).stdout
        assert pn["status"]["ip"] in addresses, name

    # podnet status, as an operator reads it
    status = json.loads(subprocess.run(
        [sys.executable, "-m", "podnet.app.cli", "status", "--kubeconfig", str(m.kubeconfig),
         "-o", "json"], capture_output=True, text=True, timeout=60, check=True).stdout)
    assert len(status["nodes"]) == 20 and len(status["pods"]) == PODS

    # unplug one network from a running pod: only that one goes
    m.kubectl("annotate", "pod", "web-0", "podnet.io/networks-")
    wait_for("web-0's overlay unplugged",
             lambda: ("web-0", "overlay") not in {(pn["spec"]["podName"], pn["spec"]["network"])
                                                  for pn in records(m)})
    assert ("web-0", "default") in routed_networks(m)
    assert "web-0" not in m.lsps().values() and len(m.lsps()) == len(ATTACHED) - 1

    # deleting the pods releases everything: no record, no NB port, no cloud address
    m.kubectl("delete", "pods", "--all", "--wait=false")
    wait_for("every record gone", lambda: records(m) == [], timeout=240)
    assert m.lsps() == {}
    wait_for("the clouds hold no pod address",
             lambda: not any(m.cloud_addresses().values()), timeout=120)
