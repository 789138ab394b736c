"""KubeVirt's migration objects in the API emulator, and a controller on a cluster that
does not serve them (no KubeVirt): it runs as before, the pods alone telling a live
migration's course, and says once that the kind is not served."""

from __future__ import annotations

import http.client
import json
import logging
from typing import Any

import pytest

from podnet.core.cluster.port import VMI, ApiError, Forbidden, NotFound
from podnet.core.engine import Engine
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.sim.apiserver import ApiServer
from podnet.testing.harness import EngineRig

VMIS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstances"
VMIMS = "/apis/kubevirt.io/v1/namespaces/default/virtualmachineinstancemigrations"


def _call(server: ApiServer, method: str, path: str, body: Any = None
          ) -> tuple[int, Any, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, json.loads(raw) if raw else None, dict(resp.getheaders())
    finally:
        conn.close()


def test_the_emulator_serves_kubevirts_vmi_and_migration_as_kubevirt_writes_them() -> None:
    state = {"migrationUid": "5d0c2b1e-0000-4000-8000-000000000001",
             "sourceNode": "node-a", "sourcePod": "virt-launcher-vm1-abcde",
             "targetNode": "node-b", "targetPod": "virt-launcher-vm1-fghij",
             "startTimestamp": "2026-01-01T00:00:00Z", "endTimestamp": "2026-01-01T00:00:09Z",
             "completed": True, "failed": False, "abortRequested": True,
             "abortStatus": "Succeeded", "mode": "PreCopy"}
    with ApiServer() as server:
        code, made, _ = _call(server, "POST", VMIS, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm1"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "default",
                                                            "bridge": {}}]}}},
            "status": {"phase": "Running", "nodeName": "node-b",
                       "migrationState": {**state, "madeUp": 1}}})
        assert code == 201, made
        # KubeVirt's fields kept as written; one it does not have pruned and named
        assert made["status"]["migrationState"] == state
        assert made["spec"]["domain"]["devices"]["interfaces"][0]["name"] == "default"
        code, bad, _ = _call(server, "POST", VMIS, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm2"},
            "status": {"migrationState": {"abortStatus": "Maybe", "completed": "yes"}}})
        assert code == 422, bad
        assert {c["field"] for c in bad["details"]["causes"]} >= {
            "status.migrationState.abortStatus", "status.migrationState.completed"}
        code, vmim, _ = _call(server, "POST", VMIMS, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": "mig1"}, "spec": {"vmiName": "vm1"},
            "status": {"phase": "Running"}})
        assert code == 201 and vmim["spec"] == {"vmiName": "vm1"}
        vmim["status"] = {"phase": "Succeeded"}
        code, vmim, _ = _call(server, "PUT", f"{VMIMS}/mig1", vmim)
        assert code == 200 and vmim["status"]["phase"] == "Succeeded"


class WithoutKubeVirt:
    """The in-memory cluster as an API server without KubeVirt's CRDs answers (404 for
    the VMIs' lists and watches), or one whose role for podnet lacks them (403); counts
    them."""

    def __init__(self, cluster: Any, refusal: type[ApiError]) -> None:
        self.cluster = cluster
        self.refusal = refusal
        self.asked = 0

    def _check(self, kind: Any) -> None:
        if kind == VMI:
            self.asked += 1
            raise self.refusal("virtualmachineinstances.kubevirt.io: not for you")

    def list(self, kind: Any, *args: Any, **kw: Any) -> Any:
        self._check(kind)
        return self.cluster.list(kind, *args, **kw)

    def watch(self, kind: Any, *args: Any, **kw: Any) -> Any:
        self._check(kind)
        return self.cluster.watch(kind, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)


@pytest.mark.parametrize("refusal", [NotFound, Forbidden])
def test_a_cluster_without_kubevirt_runs_as_before_and_says_so_once(
        caplog: pytest.LogCaptureFixture, refusal: type[ApiError]) -> None:
    rig = EngineRig([("reference", ReferenceProvider(ReferenceCloud()))], start=False)
    api = WithoutKubeVirt(rig.cluster, refusal)
    rig.engine = Engine(api, rig.pm, clock=rig.clock, options=rig.options)  # type: ignore[arg-type]
    with caplog.at_level(logging.INFO, logger="podnet.core.cluster.informer"):
        rig.engine.start()
        assert rig.engine.caches.vmis.has_synced  # nothing of it exists: ready
        node = rig.node(0)
        vm = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
              "name": "vm1", "uid": "vm1-uid", "controller": True}
        rig.pod("virt-launcher-vm1-a", node, ownerReferences=[vm])
        rig.pod("virt-launcher-vm1-b", node, ownerReferences=[vm],
                labels={"kubevirt.io/migrationJobUID": "mig-1"})
        for _ in range(5):
            rig.settle(advance=30)
    assert rig.record("virt-launcher-vm1-a")["status"]["phase"] == "Routed"
    assert api.asked == 1  # listed once; looked at again only after minutes
    said = [r for r in caplog.records if "vmis" in r.getMessage()]
    assert len(said) == 1 and "not served" in said[0].getMessage(), said
    assert all(r.levelno <= logging.INFO for r in said)
