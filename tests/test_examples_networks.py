"""The example manifests of examples/networks/ (a Subnet, an IPPool, a SecurityGroup, a
Multus NetworkAttachmentDefinition), as an operator applies them: ``kubectl apply`` to the
API emulator, which admits each through its CRD's schema and CEL rules."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from podnet.sim.apiserver import ApiServer

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "networks"
KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not on PATH")


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Any]:
    with ApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")

        def run(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir",
                                   str(tmp_path / "cache"), "--request-timeout=10s", *args],
                                  input=input, capture_output=True, text=True, timeout=60,
                                  check=False)

        yield run


def test_every_kind_has_an_example() -> None:
    kinds = {doc["kind"] for f in EXAMPLES.glob("*.yaml")
             for doc in yaml.safe_load_all(f.read_text()) if doc}
    assert kinds == {"Subnet", "IPPool", "SecurityGroup", "NetworkAttachmentDefinition"}


def test_the_examples_are_accepted_by_kubectl_apply(kubectl: Any) -> None:
    namespaces = {doc["metadata"]["namespace"] for f in EXAMPLES.glob("*.yaml")
                  for doc in yaml.safe_load_all(f.read_text())
                  if doc and "namespace" in doc["metadata"]}
    for ns in sorted(namespaces):
        assert kubectl("create", "namespace", ns).returncode == 0
    files = [str(EXAMPLES / n) for n in ("subnet.yaml", "ippool.yaml", "securitygroup.yaml",
                                         "nad.yaml")]
    done = kubectl("apply", *(a for f in files for a in ("-f", f)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("created") == 6, done.stdout
    got = {(o["kind"], o["metadata"]["name"]) for kind in (
        "subnets", "ippools", "securitygroups", "net-attach-def")
        for o in json.loads(kubectl("get", kind, "-A", "-o", "json").stdout)["items"]}
    assert got == {("Subnet", "team-a"), ("Subnet", "ovn-default"), ("IPPool", "team-a-web"),
                   ("SecurityGroup", "web"), ("NetworkAttachmentDefinition", "blue-net"),
                   ("NetworkAttachmentDefinition", "macvlan-net")}
    # applied again: nothing to change
    again = kubectl("apply", *(a for f in files for a in ("-f", f)))
    assert again.returncode == 0 and "unchanged" in again.stdout, again.stderr


def test_an_example_edited_wrong_is_refused_naming_the_field(kubectl: Any,
                                                             tmp_path: Path) -> None:
    (doc, _) = yaml.safe_load_all((EXAMPLES / "subnet.yaml").read_text())
    doc["metadata"]["name"] = f"bad-{uuid.uuid4().hex[:8]}"
    doc["spec"]["gateway"] = "10.99.0.1"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    done = kubectl("apply", "-f", str(bad))
    assert done.returncode != 0
    assert "spec.gateway" in done.stderr, done.stderr


def test_the_readme_install_example_is_accepted(kubectl: Any) -> None:
    readme = (EXAMPLES.parent.parent / "README.md").read_text()
    step = readme[readme.index("**4. The networks, as objects.**"):]
    block = step[step.index("```yaml\n") + len("```yaml\n"):]
    block = block[:block.index("```")]
    assert kubectl("create", "namespace", "team-a").returncode == 0
    done = kubectl("apply", "-f", "-", input=block)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("created") == 4, done.stdout


@pytest.mark.parametrize("provider", ["ecs", "bbc", "ovn"])
def test_the_subnet_a_values_file_shows_is_accepted(kubectl: Any, provider: str) -> None:
    """Each provider's values file shows, in its header, the Subnet to apply instead of the
    config's subnets: that manifest, uncommented, is admitted."""
    lines = (EXAMPLES.parent.parent / "deploy" / "chart" / f"values-{provider}.yaml"
             ).read_text().splitlines()
    start = lines.index("#   apiVersion: podnet.io/v1alpha1")
    block = []
    for line in lines[start:]:
        if not line.startswith("#   "):
            break
        block.append(line[len("#   "):])
    doc = yaml.safe_load("\n".join(block))
    assert (doc["kind"], doc["spec"]["provider"]) == ("Subnet", provider)
    config = yaml.safe_load("\n".join(lines))["config"]["providers"][provider]
    # the networks are objects: the config declares none (ECS's security_groups are its
    # ENIs', not OVN's rules)
    assert not {"subnets", "vswitches"} & set(config)
    done = kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))
    assert done.returncode == 0 and "created" in done.stdout, done.stderr
