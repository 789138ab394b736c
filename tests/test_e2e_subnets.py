"""Subnets end to end, as an operator declares them: ``podnet apiserver`` (the emulator),
a real ``podnet run`` controller (the reference provider and its file-backed cloud) and
kubectl. A Subnet applied at run time serves the pods of the namespaces it selects; kubectl
shows its usage, keeps it while a pod holds one of its addresses, names the Subnet an
overlapping one collides with, and refuses a malformed one at ``apply``.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_e2e_run import Cluster, free_port, nodes, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed"),
]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


def subnet(name: str, cidr: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "podnet.io/v1alpha1", "kind": "Subnet", "metadata": {"name": name},
            "spec": {"provider": "reference", "cidrBlock": cidr, **spec}}


def apply(c: Cluster, doc: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``kubectl apply`` of one object; the caller reads the outcome."""
    return subprocess.run(["kubectl", "--kubeconfig", str(c.kubeconfig), "--request-timeout=20s",
                           "apply", "-f", "-"], input=yaml.safe_dump(doc), capture_output=True,
                          text=True, timeout=60, check=False)


def subnet_row(c: Cluster, name: str) -> dict[str, str]:
    """``kubectl get subnet NAME``'s table, as header -> cell (by the header's columns:
    a cell with no value yet is blank)."""
    header, row = c.kubectl("get", "subnet", name).splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


def record_of(c: Cluster, namespace: str, pod: str) -> dict[str, Any] | None:
    for pn in c.get("podnetworks"):
        if pn["metadata"]["namespace"] == namespace and pn["spec"]["podName"] == pod:
            return pn
    return None


def test_a_subnet_applied_at_run_time_serves_shows_its_usage_and_is_kept_while_held(
        cluster: Cluster) -> None:
    c = cluster
    c.controller("one", free_port())
    c.create(nodes(2))
    ns = f"team-{uuid.uuid4().hex[:8]}"
    c.create([{"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": ns, "labels": {"team": ns}}}])
    blue = f"blue-{uuid.uuid4().hex[:8]}"
    done = apply(c, subnet(blue, "10.61.0.0/24", excludeIPs=["10.61.0.2..10.61.0.20"],
                           namespaceSelector={"matchLabels": {"team": ns}}))
    assert done.returncode == 0, done.stderr
    wait_for("the Subnet Ready", lambda: subnet_row(c, blue).get("PHASE") == "Ready", timeout=60)
    row = subnet_row(c, blue)
    # 256 - network, broadcast, gateway - 19 excluded
    assert (row["PROVIDER"], row["CIDR"], row["AVAILABLE"], row["INUSE"]) == \
        ("reference", "10.61.0.0/24", "234", "0"), row

    c.create([{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web-0", "namespace": ns},
               "spec": {"nodeName": "node-00", "containers": [{"name": "c", "image": "busybox"}]},
               "status": {"phase": "Running"}}])

    def routed() -> bool:
        rec = record_of(c, ns, "web-0")
        return rec is not None and rec.get("status", {}).get("phase") == "Routed"

    wait_for("the pod routed on the Subnet", routed, timeout=60)
    rec = record_of(c, ns, "web-0")
    assert rec is not None
    ip = ipaddress.ip_address(rec["status"]["ip"])
    assert ip in ipaddress.ip_network("10.61.0.0/24"), ip
    assert not ipaddress.ip_address("10.61.0.2") <= ip <= ipaddress.ip_address("10.61.0.20"), ip
    assert ip != ipaddress.ip_address("10.61.0.1")  # the gateway
    wait_for("the Subnet counting the pod",
             lambda: (subnet_row(c, blue)["AVAILABLE"], subnet_row(c, blue)["INUSE"])
             == ("233", "1"), timeout=30)

    # deleting it while the pod holds an address: kept, Terminating, the reason in status
    c.kubectl("delete", "subnet", blue, "--wait=false")

    def terminating() -> dict[str, Any] | None:
        obj = json.loads(c.kubectl("get", "subnet", blue, "-o", "json"))
        ready = [x for x in obj["status"].get("conditions", ()) if x["type"] == "Ready"]
        return ready[0] if obj["status"].get("phase") == "Terminating" and ready else None

    wait_for("the Subnet Terminating", lambda: terminating() is not None, timeout=30)
    ready = terminating()
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InUse"), ready
    assert f"{ns}/" in ready["message"], ready
    assert blue in c.kubectl("get", "subnets", "-o", "name")

    c.kubectl("delete", "pod", "web-0", "-n", ns, "--wait=false")
    wait_for("the Subnet gone once the pod is",
             lambda: blue not in c.kubectl("get", "subnets", "-o", "name"), timeout=60)


def test_an_overlapping_subnet_names_the_first_and_a_bad_one_is_refused_at_apply(
        cluster: Cluster) -> None:
    c = cluster
    c.controller("one", free_port())
    first, second = (f"{n}-{uuid.uuid4().hex[:8]}" for n in ("first", "second"))
    done = apply(c, subnet(first, "10.62.0.0/16", namespaces=["a"]))
    assert done.returncode == 0, done.stderr
    wait_for("the first Ready", lambda: subnet_row(c, first).get("PHASE") == "Ready", timeout=60)
    done = apply(c, subnet(second, "10.62.5.0/24", namespaces=["b"]))
    assert done.returncode == 0, done.stderr
    path = '{.status.conditions[?(@.type=="Ready")]'

    def reason() -> str:
        return c.kubectl("get", "subnet", second, "-o", f"jsonpath={path}.reason}}")

    wait_for("the second NotReady", lambda: reason() == "Overlaps", timeout=60)
    message = c.kubectl("get", "subnet", second, "-o", f"jsonpath={path}.message}}")
    assert f"Subnet {first} (10.62.0.0/16)" in message, message
    assert c.kubectl("get", "subnet", second, "-o", "jsonpath={.status.phase}") == "NotReady"

    # a gateway outside the block: refused at admission, naming the field
    bad = f"bad-{uuid.uuid4().hex[:8]}"
    done = apply(c, subnet(bad, "10.63.0.0/24", gateway="10.64.0.1"))
    assert done.returncode != 0
    assert "spec.gateway" in done.stderr and bad in done.stderr, done.stderr
    assert bad not in c.kubectl("get", "subnets", "-o", "name")
