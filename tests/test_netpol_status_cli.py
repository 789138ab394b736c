"""``podnet status --policies``: each NetworkPolicy with what the controller's status
annotation says (members, nodes programmed and pending) and what of it podnet does not
enforce as written, read through the emulator as an operator's kubeconfig would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from podnet.app.cli import main
from podnet.core.cluster.port import NAMESPACE, NETWORK_POLICY
from podnet.core.netpol.status import (
    STATUS_ANNOTATION,
    PolicyCondition,
    PolicyStatus,
    encode_status,
)
from podnet.sim.apiserver import ApiServer
from podnet.sim.memory import InMemoryCluster


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Iterator[Path]:
    store = InMemoryCluster()
    for ns in ("x", "y"):
        store.create(NAMESPACE, {"metadata": {"name": ns}})
    status = PolicyStatus(
        observed_generation=0,
        conditions=(PolicyCondition("Accepted", "True", "Accepted", "", "2026-01-01T00:00:00Z"),
                    PolicyCondition("Programmed", "Unknown", "Pending",
                                    "1 node(s) not programmed yet, node-0001 first",
                                    "2026-01-01T00:00:00Z")),
        nodes_programmed=2, nodes_pending=("node-0001",), members=5)
    store.create(NETWORK_POLICY, {"metadata": {
        "name": "db", "namespace": "x", "annotations": {STATUS_ANNOTATION: encode_status(status)}},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}}})
    store.create(NETWORK_POLICY, {"metadata": {"name": "odd", "namespace": "y"}, "spec": {
        "podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}})
    with ApiServer(store) as server:
        yield server.write_kubeconfig(tmp_path / "kubeconfig")


def test_policies_rows(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--policies", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    db, odd = report["policies"]
    assert db == {
        "namespace": "x", "name": "db", "generation": 0, "observed_generation": 0,
        "members": 5, "nodes_programmed": 2, "nodes_pending": ["node-0001"],
        "nodes_failed": {}, "accepted": {"status": "True", "reason": "Accepted", "message": ""},
        "programmed": {"status": "Unknown", "reason": "Pending",
                       "message": "1 node(s) not programmed yet, node-0001 first"},
        "findings": []}
    # no controller wrote its status yet: what podnet would not enforce is still said
    assert (odd["name"], odd["members"], odd["programmed"]) == ("odd", None, None)
    assert odd["findings"] == [{
        "field": "spec.ingress[0].from[0].ipBlock.cidr", "reason": "InvalidValue",
        "message": "'10.0.0.0/33' is not a CIDR; this peer matches nothing"}]


def test_policies_narrowed_by_namespace_and_only_when_asked(
        kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--policies", "--namespace", "y", "--kubeconfig", str(kubeconfig),
                 "-o", "json"]) == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["policies"]] == ["odd"]
    assert main(["status", "--kubeconfig", str(kubeconfig), "-o", "json"]) == 0
    assert "policies" not in json.loads(capsys.readouterr().out)


def test_policies_table(kubeconfig: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--policies", "--kubeconfig", str(kubeconfig)]) == 0
    table = capsys.readouterr().out
    assert "network policies" in table and "x/db" in table and "node-0001" in table
    assert "InvalidValue" in table
