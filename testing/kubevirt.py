"""What KubeVirt writes over a live migration, for tests and chaos machines: the
VirtualMachineInstanceMigration that asks for it (its ``status.phase``), and the
VirtualMachineInstance's ``status.migrationState`` as virt-controller and virt-handler
keep it (``migrationUid``, the source and target pods and nodes, ``completed``,
``failed``, ``abortStatus``, the start and end times). The target virt-launcher pod
carries the migration's uid in its ``kubevirt.io/migrationJobUID`` label (the test makes
the pod: see :meth:`KubeVirt.begin`).

Written straight into the cluster (in-process or the emulator's store): nothing here
decides, it says what KubeVirt would have said.
"""

from __future__ import annotations

from typing import Any

from podnet.core.clock import Clock, format_time
from podnet.core.cluster.port import VMI, Kind, NotFound, Obj

#: KubeVirt's migration request (its phase is what a user watches)
VMIM = Kind("kubevirt.io", "v1", "VirtualMachineInstanceMigration",
            "virtualmachineinstancemigrations", True)

#: how a migration may end, as the VMI's ``migrationState`` says each
ENDINGS = ("completed", "failed", "aborted")


class KubeVirt:
    """KubeVirt's writes for the VMs of one namespace of ``cluster``."""

    def __init__(self, cluster: Any, namespace: str, clock: Clock) -> None:
        self.cluster = cluster
        self.namespace = namespace
        self.clock = clock

    def _vmi(self, name: str) -> Obj:
        try:
            return dict(self.cluster.get(VMI, name, self.namespace))
        except NotFound:
            return dict(self.cluster.create(VMI, {
                "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"domain": {"devices": {}}},
                "status": {"phase": "Running"}}))

    def _status(self, name: str, **changes: Any) -> Obj:
        vmi = self._vmi(name)
        vmi["status"] = {**(vmi.get("status") or {}), **changes}
        return dict(self.cluster.update(VMI, vmi))

    def running(self, vmi: str, node: str) -> None:
        """The VMI runs on ``node`` (virt-handler's word once its domain is up)."""
        self._status(vmi, phase="Running", nodeName=node)

    def begin(self, vmi: str, *, name: str, source_pod: str, source_node: str,
              target_pod: str, target_node: str) -> str:
        """A VirtualMachineInstanceMigration ``name`` of ``vmi`` made, and the VMI's
        migrationState started for it; the migration's uid (the target pod's
        ``kubevirt.io/migrationJobUID``)."""
        vmim = self.cluster.create(VMIM, {
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstanceMigration",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {"vmiName": vmi}, "status": {"phase": "Running"}})
        uid = str(vmim["metadata"]["uid"])
        self._status(vmi, migrationState={
            "migrationUid": uid, "sourceNode": source_node, "sourcePod": source_pod,
            "targetNode": target_node, "targetPod": target_pod,
            "startTimestamp": format_time(self.clock.now()),
            "completed": False, "failed": False})
        return uid

    def end(self, vmi: str, name: str, how: str) -> None:
        """Migration ``name`` of ``vmi`` ends ``how`` (one of :data:`ENDINGS`): the VMI's
        migrationState as virt-handler leaves it (an abort that worked says
        ``completed`` and ``abortStatus: Succeeded``), the VMI's node the target's when
        it completed, and the migration's phase."""
        if how not in ENDINGS:
            raise ValueError(f"a migration ends one of {ENDINGS}, not {how!r}")
        state = dict(self._vmi(vmi)["status"]["migrationState"])
        state["endTimestamp"] = format_time(self.clock.now())
        if how == "completed":
            state.update(completed=True)
        elif how == "failed":
            state.update(completed=True, failed=True, failureReason="injected by the test")
        else:
            state.update(completed=True, abortRequested=True, abortStatus="Succeeded")
        changes: dict[str, Any] = {"migrationState": state}
        if how == "completed":
            changes["nodeName"] = state["targetNode"]
        self._status(vmi, **changes)
        vmim = dict(self.cluster.get(VMIM, name, self.namespace))
        vmim["status"] = {**(vmim.get("status") or {}),
                          "phase": "Succeeded" if how == "completed" else "Failed"}
        self.cluster.update(VMIM, vmim)
