"""``podnet status`` shows each Subnet's and IPPool's usage from their status, read
through the emulator as an operator's kubeconfig would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from podnet.app.cli import main
from podnet.app.records import read_records
from podnet.core.cluster.port import IP_POOL, SUBNET, Kind
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster


def _obj(kind: Kind, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": name},
            "spec": spec}


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[tuple[InMemoryCluster, Path]]:
    store = InMemoryCluster()
    blue = store.create(SUBNET, _obj(SUBNET, "blue", {
        "provider": "ovn", "cidrBlock": "10.20.0.0/24,fd00:20::/64", "default": True}))
    store.update_status(SUBNET, {**blue, "status": {
        "phase": "NotReady", "v4AvailableIPs": 240, "v4UsingIPs": 5, "v4ReservedIPs": 3,
        "v4ExcludedIPs": 8, "v6AvailableIPs": 18446744073709551613.0, "v6UsingIPs": 2,
        "outsideIPs": ["team-a/web-0 10.20.0.5 excluded"],
        "conditions": [{"type": "Ready", "status": "False", "reason": "Overlaps",
                        "message": "cidrBlock 10.20.0.0/24 overlaps Subnet green",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    store.create(SUBNET, _obj(SUBNET, "new", {"provider": "ecs", "cidrBlock": "10.30.0.0/24"}))
    pool = store.create(IP_POOL, _obj(IP_POOL, "web", {"subnet": "blue",
                                                       "addresses": ["10.20.0.16/28"]}))
    store.update_status(IP_POOL, {**pool, "status": {
        "phase": "Ready", "v4AvailableIPs": 14, "v4UsingIPs": 2,
        "held": [{"ip": "10.20.0.17", "podNetwork": "team-a/web-0"},
                 {"ip": "10.20.0.18", "podNetwork": "team-a/web-1"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "Valid", "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    with ApiServer(store) as server:
        yield store, server.write_kubeconfig(tmp_path / "kubeconfig")


def test_status_json_has_a_row_per_subnet_and_pool(
        kubeconfig: tuple[InMemoryCluster, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, path = kubeconfig
    assert main(["status", "--kubeconfig", str(path), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["subnets"] == [
        {"name": "blue", "provider": "ovn", "cidr": "10.20.0.0/24,fd00:20::/64",
         "default": True, "phase": "NotReady", "v4_available": 240, "v4_using": 5,
         "v4_reserved": 3, "v4_excluded": 8, "v6_available": 18446744073709551613.0,
         "v6_using": 2, "v6_reserved": None, "v6_excluded": None, "outside": 1,
         "not_ready": {"status": "False", "reason": "Overlaps",
                       "message": "cidrBlock 10.20.0.0/24 overlaps Subnet green"}},
        {"name": "new", "provider": "ecs", "cidr": "10.30.0.0/24", "default": False,
         "phase": None, "v4_available": None, "v4_using": None, "v4_reserved": None,
         "v4_excluded": None, "v6_available": None, "v6_using": None, "v6_reserved": None,
         "v6_excluded": None, "outside": 0, "not_ready": None}]
    assert report["ip_pools"] == [
        {"name": "web", "subnet": "blue", "phase": "Ready", "v4_available": 14, "v4_using": 2,
         "v6_available": None, "v6_using": None, "held": 2, "not_ready": None}]


def test_status_prints_the_usage_tables(
        kubeconfig: tuple[InMemoryCluster, Path], capsys: pytest.CaptureFixture[str]) -> None:
    _, path = kubeconfig
    assert main(["status", "--kubeconfig", str(path)]) == 0
    out = capsys.readouterr().out
    assert "subnets" in out and "IP pools" in out
    blue = next(line for line in out.splitlines() if "blue" in line and "ovn" in line)
    assert "5 / 245" in blue and "NotReady" in blue and "Overlaps" in blue
    assert "blue (default)" in out
    web = next(line for line in out.splitlines() if "web" in line and "Ready" in line)
    assert "2 / 16" in web


def test_a_cluster_without_the_network_crds_has_no_rows() -> None:
    class NoNetworkKinds(InMemoryCluster):
        def list(self, kind: Kind, *args: Any, **kw: Any) -> Any:
            if kind.group == "podnet.io" and kind.plural in ("subnets", "ippools"):
                from podnet.core.cluster.port import NotFound
                raise NotFound(f"the server could not find the requested resource ({kind})")
            return super().list(kind, *args, **kw)

    records = read_records(NoNetworkKinds())
    assert records.subnets == () and records.ip_pools == ()
