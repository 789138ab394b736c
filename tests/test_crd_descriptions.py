"""Every field of every podnet CRD is described, in the one source (sim/crds/), and the
API emulator publishes the descriptions where ``kubectl explain`` reads them."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnet.sim.apiserver import ApiServer

ROOT = Path(__file__).resolve().parent.parent
CRDS = sorted((ROOT / "sim" / "crds").glob("*.yaml"))  # Multus's (external/) is not ours
KUBECTL = shutil.which("kubectl")


def undescribed(schema: dict[str, Any], path: str) -> Iterator[str]:
    """The paths below ``schema`` of a property without a description."""
    for name, prop in (schema.get("properties") or {}).items():
        where = f"{path}.{name}"
        # the API server publishes the root's metadata as ObjectMeta, described
        root_metadata = name == "metadata" and "." not in path
        if "description" not in prop and not root_metadata:
            yield where
        yield from undescribed(prop, where)
    if isinstance(schema.get("items"), dict):
        yield from undescribed(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from undescribed(schema["additionalProperties"], f"{path}{{}}")


def test_the_crds_are_found() -> None:
    assert {p.name for p in CRDS} >= {"podnetworks.yaml", "nodenetworks.yaml",
                                      "subnets.yaml", "ippools.yaml", "securitygroups.yaml"}


@pytest.mark.parametrize("path", CRDS, ids=lambda p: p.name)
def test_every_property_has_a_description(path: Path) -> None:
    crd = yaml.safe_load(path.read_text())
    kind = crd["spec"]["names"]["kind"]
    missing = [f"{version['name']} {where}" for version in crd["spec"]["versions"]
               for where in undescribed(version["schema"]["openAPIV3Schema"], kind)]
    assert missing == [], f"{path.relative_to(ROOT)}: fields without a description"


def test_the_check_finds_a_property_without_one() -> None:
    schema = {"properties": {"metadata": {"type": "object"},
                             "spec": {"description": "s", "properties": {
                                 "a": {"type": "string"},
                                 "b": {"type": "array", "items": {"properties": {
                                     "c": {"type": "string"}}}}}}}}
    assert list(undescribed(schema, "K")) == ["K.spec.a", "K.spec.b", "K.spec.b[].c"]


@pytest.fixture(scope="module")
def server() -> Iterator[ApiServer]:
    with ApiServer() as srv:
        yield srv


def _v3(server: ApiServer, path: str) -> Any:
    with urllib.request.urlopen(server.url + path, timeout=10) as answer:
        return json.load(answer)


def test_the_published_schemas_describe_every_field(server: ApiServer) -> None:
    """What kubectl reads: /openapi/v3's podnet.io document, every property of every
    kind described (metadata by the server, as upstream)."""
    index = _v3(server, "/openapi/v3")["paths"]
    doc = _v3(server, index["apis/podnet.io/v1alpha1"]["serverRelativeURL"])
    found = {}
    for schema in doc["components"]["schemas"].values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            if gvk["group"] == "podnet.io" and not gvk["kind"].endswith("List"):
                found[gvk["kind"]] = list(_published_undescribed(schema, gvk["kind"]))
    assert set(found) >= {"PodNetwork", "NodeNetwork", "Subnet", "IPPool", "SecurityGroup"}
    assert {kind: missing for kind, missing in found.items() if missing} == {}


def _published_undescribed(schema: dict[str, Any], path: str) -> Iterator[str]:
    for name, prop in (schema.get("properties") or {}).items():
        if "description" not in prop:
            yield f"{path}.{name}"
        yield from _published_undescribed(prop, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _published_undescribed(schema["items"], f"{path}[]")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")
def test_kubectl_explain_shows_the_records_fields(server: ApiServer, tmp_path: Path) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

    def explain(what: str) -> str:
        done = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
             str(tmp_path / "cache"), "--request-timeout=10s", "explain", what],
            capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return " ".join(done.stdout.split())

    for what in ("podnetwork", "podnetwork.spec", "podnetwork.spec.requests",
                 "podnetwork.status", "podnetwork.status.conditions",
                 "nodenetwork", "nodenetwork.spec", "nodenetwork.status",
                 "nodenetwork.status.interfaces", "nodenetwork.status.interfaces.ips"):
        assert "<no description>" not in explain(what), what
    spec = explain("podnetwork.spec")
    assert "The node the pod is scheduled to" in spec
    assert "podnet.io/mac-address" in explain("pn.spec.requests")
    assert "Releasing (the pod is gone" in explain("pn.status.phase")
    assert "Standard object's metadata" in explain("nn")
    assert "Inhibited (the cloud refused" in explain("nn.status.interfaces.state")
