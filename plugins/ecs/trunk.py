"""The ECS provider's trunk ENI (``trunk: true``, Terway's ``enable_eni_trunking``).

A node's pool build (the inventory read for a node with a record, neither being deleted)
makes a trunk ENI when none is attached, the instance type supports trunking
(DescribeInstanceTypes' ``EniTrunkSupported``, with room for member ENIs:
``EniTotalQuantity`` over ``EniQuantity``) and an adapter is free: CreateNetworkInterface
with ``InstanceType=Trunk`` and no secondary address (one address, its primary), tagged
``podnet.io/instance=<instance id>``, then attached. A trunk made and not attached (the
controller died in between, or the attach failed) is found by that tag
(DescribeNetworkInterfaces by tag and ``Status=Available``, its ``Type`` Trunk) and
attached, never made twice; one attached and never recorded is in the next inventory.

A trunk ENI (podnet's, or one attached before) is reported ``trunk=True, pooled=False``: no
pod address goes on it, it is never disposed (even with no address left) nor swept, and
its adapter comes out of the multi-IP count (``max_interfaces`` one fewer). The node's
record lists it (``status.interfaces[].trunk``) and ``podnet status`` shows its role. A
node that gets none (a type without trunking, every adapter taken) is a
``TrunkUnavailable`` finding of the node check naming ``providers.ecs.trunk``; an instance
that refuses the trunk at attach (``InvalidOperation.InstanceTypeNotSupportEniTrunking``)
has it deleted and its type left without trunking. Member ENIs (per-pod ENIs on the
trunk) are not made yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.sections import config_key
from podnet.hookspecs.types import CloudInterface, NodeContext, NodeFinding
from podnet.plugins.ecs.cloud import EcsCloud, Limits, _Eni
from podnet.plugins.ecs.config import DESCRIPTION_PREFIX, INSTANCE_TAG, NO_TRUNKING, TRUNK

log = logging.getLogger(__name__)


def builds_pool(node: NodeContext) -> bool:
    """Whether an inventory of ``node`` is read to build (or resync) the pool of a node in
    the cluster: not a report's read (``podnet audit``: ``read_only``), it has a record,
    and neither it nor its Node is being deleted. A node that left, or a machine no record
    names, gets nothing made."""
    nn = node.network
    return (not node.read_only and nn is not None and nn.metadata.deletion_timestamp is None
            and node.node.deletion_timestamp is None)


def interfaces_of(enis: Sequence[_Eni], dual: bool, instance: str,
                  unsettled: Collection[str] = ()) -> tuple[list[CloudInterface], bool]:
    """The inventory's interfaces (the attached ENIs, the primary first), and whether a
    trunk is among them. An ENI podnet made for ``instance`` is ``made`` (every address
    on it is podnet's), unless it is ``unsettled``: being made, or rolled back."""
    interfaces, trunked = [], False
    for eni in enis:
        if eni.status not in ("InUse", "Attaching"):
            continue  # detaching: on its way out, nothing to pool on it
        primary, trunk = eni.kind == "Primary", eni.kind == TRUNK
        trunked = trunked or trunk
        # Terway never puts pod addresses on the primary ENI, and podnet none on a trunk
        # (its pods are member ENIs): neither is pooled
        interfaces.append(CloudInterface(
            id=eni.id, mac=eni.mac, subnet=eni.vswitch, primary=primary, trunk=trunk,
            ips=eni.secondary, pooled=not (primary or trunk), ipv6=eni.ipv6 if dual else (),
            made=eni.made_for(instance) and eni.id not in unsettled))
    interfaces.sort(key=lambda i: (not i.primary, i.id))
    return interfaces, trunked


class EcsTrunks(EcsCloud):
    """The cloud, and the node's trunk ENI on it."""

    def ensure_trunk(self, node: NodeContext, instance: str, limits: Limits,
                     enis: list[_Eni],
                     where: Callable[[], tuple[str | None, list[str]]]) -> list[_Eni]:
        """Terway's pool initializer with trunking on: the node's ENIs with a trunk ENI
        among them, made (one address, ``InstanceType=Trunk``) and attached when none is
        attached, the instance type supports trunking and an adapter is free; else as
        they are (``podnet_node_check`` says why there is none).

        Idempotent across crashes: the trunk carries the instance's tag from its
        creation, so one made and never attached (the process died before the attach, or
        the attach failed) is found with one DescribeNetworkInterfaces and attached, never
        made twice. One attached and never recorded is in the next inventory as it is.
        Never deleted, but when the cloud refuses it on this instance type.
        """
        from alibabacloud_ecs20140526 import models as m

        if any(e.kind == TRUNK and e.status in ("InUse", "Attaching") for e in enis):
            return enis
        itype = self.instance_type_of(node)
        with self._lock:
            refused = itype in self._no_trunk
        # every attached ENI (a detaching one too, until it is gone) takes an adapter
        if not limits.trunk or refused or len(enis) >= limits.enis:
            return enis
        # the API documents Type's filter values as Primary and Secondary only: the kind is
        # checked here, the cloud asked by tag and state
        made = sorted((e for e in self.describe_enis(status="Available",
                                                     tag=(INSTANCE_TAG, instance))
                       if e.kind == TRUNK), key=lambda e: e.id)
        if made:
            eni_id = made[0].id
        else:
            wanted, candidates = where()
            vswitch = self.choose_vswitch(wanted, 0, candidates)
            body = self._call("CreateNetworkInterface", m.CreateNetworkInterfaceRequest(
                region_id=self.config.region, v_switch_id=vswitch, instance_type=TRUNK,
                security_group_ids=list(self.config.security_groups),
                description=f"{DESCRIPTION_PREFIX}{instance}",
                tag=[m.CreateNetworkInterfaceRequestTag(key=INSTANCE_TAG, value=instance)]),
                subject=vswitch)
            made_id = getattr(body, "network_interface_id", None)
            if not isinstance(made_id, str) or not made_id:
                # made, maybe: the next pool build finds it by its tag
                raise ProviderError(ErrorKind.TRANSIENT, "CreateNetworkInterface: malformed "
                                    "reply (no NetworkInterfaceId)", subject=vswitch)
            eni_id = made_id
        try:
            self._call("AttachNetworkInterface", m.AttachNetworkInterfaceRequest(
                region_id=self.config.region, network_interface_id=eni_id,
                instance_id=instance), subject=eni_id)
            trunk = self._wait(eni_id, "InUse")
        except ProviderError as exc:
            if NO_TRUNKING not in str(exc):
                raise  # left Available and tagged: the next pool build attaches it
            # the catalogue said yes and the instance says no: no trunk on this type
            log.warning("node %s: ECS refuses a trunk ENI on instance type %s (%s): "
                        "trunking left off for it", node.node.name, itype, NO_TRUNKING)
            with self._lock:
                self._no_trunk.add(itype)
            try:
                self._delete(eni_id)
            except ProviderError:
                pass  # still tagged and Available: found (and deleted) at the next try
            return enis
        return [*enis, trunk]

    def trunk_findings(self, node: NodeContext, instance: str, enis: Sequence[_Eni]
                       ) -> list[NodeFinding]:
        """With ``trunk`` on, a node without a trunk ENI that will not get one at its next
        pool build: ``TrunkUnavailable``, naming the setting and why."""
        if any(e.kind == TRUNK and e.status in ("InUse", "Attaching") for e in enis):
            return []
        key = config_key(self.name, "trunk")
        itype = self.instance_type_of(node)
        limits = self.limits(node)
        with self._lock:
            refused = itype in self._no_trunk
        if not limits.trunk or refused:
            why = ("ECS refused a trunk ENI on it" if refused else
                   "it does not support ENI trunking (EniTrunkSupported)")
        elif len(enis) >= limits.enis:
            why = (f"all {limits.enis} of its adapters are taken (one is made once an "
                   "adapter is free)")
        else:
            return []  # made at the next pool build
        return [NodeFinding(reason="TrunkUnavailable",
                            message=f"config {key} is on and node {node.node.name} "
                                    f"(instance {instance}, type {itype}) has no trunk ENI: "
                                    f"{why}")]
