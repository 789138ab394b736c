"""The ECS provider: ENI multi-IP pod networking on Alibaba Cloud, through the official SDK
(``alibabacloud_ecs20140526``) and nothing else.

Each node is an ECS instance. As in Terway's ENI multi-IP mode, pod addresses live only on
secondary ENIs the provider creates in a configured vSwitch, each holding up to
``EniPrivateIpAddressQuantity - 1`` secondary addresses; the instance's primary ENI is
reported ``pooled=False`` (never grown on, counted or detached). The pool's interfaces are
the secondary ENIs, at most Terway's ``EniQuantity * eni_cap_ratio + eni_cap_shift - 1``
(capped by ``max_enis``): a node whose secondary ENIs are full gets a new ENI. Core keeps
the pool (batching, aggregation, inhibit windows, rate limits); the provider makes one
cloud call per hook (two for a dual-stack grow or shrink) and reports what the cloud says.

``ip_stack: dual`` gives every pod an IPv4/IPv6 pair from one ENI, Terway's way: the
same count of each (AssignPrivateIpAddresses then AssignIpv6Addresses, a new ENI's
``Ipv6AddressCount``), at most ``EniIpv6AddressQuantity`` per ENI (an instance type
without IPv6 is a fatal error naming ``ecs.ip_stack``); a new ENI whose counts differ is
rolled back; IPv4 addresses whose IPv6 assign failed are unassigned again; shrink unassigns
both halves (UnassignPrivateIpAddresses + UnassignIpv6Addresses). The inventory reports
each ENI's IPv6 addresses unpaired: core pairs them by the records on a restart and zips
the idle rest; a half left over is never handed out and is given back. A static
``ip-address`` of ``<IPv4>,<IPv6>`` must be an idle pair of the node.

The node's instance id comes, in this order, from the ``instance_ids`` config map (node
name -> instance id), the node's ``spec.providerID`` (``<region>.<instance id>``, as the
Alibaba Cloud controller manager writes it, optionally with a ``scheme://`` prefix), or
the node label ``podnet.io/ecs-instance-id``. Its instance type from the ``instance_type``
config key, else the label ``node.kubernetes.io/instance-type``.

Config section (``providers.ecs``): ``endpoint``, ``region``, ``protocol`` (https),
``credentials`` and its keys (below), ``vswitches`` (list;
may be empty when Subnet objects name the vSwitches, plugins/ecs/subnets.py),
``vswitch_policy`` (``ordered`` | ``most`` | ``random``), ``security_groups`` (list),
``instance_type``, ``instance_ids``, ``eni_cap_ratio`` (1.0), ``eni_cap_shift`` (0),
``max_enis`` (0: no cap), ``attach_timeout`` (s), ``poll_interval`` (s), ``timeout`` (s),
``ip_stack`` (``ipv4`` | ``dual``), ``trunk`` (false).

``trunk: true`` (Terway's ``enable_eni_trunking``) gives each node a trunk ENI at its
pool build, never pooled nor disposed, its adapter out of the multi-IP count: see
plugins/ecs/trunk.py.

Every ENI podnet creates carries the tag ``podnet.io/instance=<instance id>`` (and, as
before 0.5.0, the description ``podnet:<instance id>``). The garbage collector's sweep
(``podnet_sweep``, every ``gc_period``: one DescribeNetworkInterfaces of the region's
Available secondary ENIs) reports those podnet marked, tag or description, and deletes
each once it has stayed Available for ``leaked_ip_expiry``: an ENI made and never
attached (the controller killed between CreateNetworkInterface and
AttachNetworkInterface), or detached and never deleted (killed in a rollback or a
dispose, or a rollback that failed before a restart). No inventory lists them. An
attached one naming the node's instance is ``made``: pooled again after a crash.

``podnet audit`` asks the provider for the instances no Node and no NodeNetwork names
(``podnet_unknown_machines``): those an ENI podnet made (tag or description) is attached
to, found with one DescribeNetworkInterfaces of the region's secondary ENIs (then
DescribeInstances for their instance types); the audit reports the secondary addresses
of their secondary ENIs. Instances that hold no ENI
podnet made are never listed.

ENIs are created with the configured ``security_groups``; every ``node_check_period`` the
node check (``podnet_node_check``, one DescribeNetworkInterfaces per node) reports each
ENI podnet made whose security groups differ from them as a ``SecurityGroupDrift``
finding, which core turns into a Warning Event on the Node.
Credentials come through ``alibabacloud_credentials``, by ``credentials``:

- ``access_key`` (the default): ``access_key_id`` / ``access_key_secret``, or the
  environment's ``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``;
- ``default``: the SDK's default chain, read from the process's environment when the SDK
  is imported: those two variables (and ``ALIBABA_CLOUD_SECURITY_TOKEN``), RRSA's three
  variables below, the CLI's and the SDK's profile files, then the instance's RAM role
  (unless ``ALIBABA_CLOUD_ECS_METADATA_DISABLED=true``);
- ``ecs_ram_role``: the instance's RAM role, from the metadata service
  (100.100.100.200; IMDSv2 token first, v1 unless ``ALIBABA_CLOUD_IMDSV1_DISABLED``):
  ``role_name``, else the role the service names (``ALIBABA_CLOUD_ECS_METADATA``);
- ``oidc_role_arn`` (RRSA): AssumeRoleWithOIDC with the service account's token:
  ``role_arn``, ``oidc_provider_arn``, ``oidc_token_file`` (else the environment's
  ``ALIBABA_CLOUD_ROLE_ARN``, ``ALIBABA_CLOUD_OIDC_PROVIDER_ARN``,
  ``ALIBABA_CLOUD_OIDC_TOKEN_FILE``, as ACK's pod identity webhook sets them),
  ``sts_endpoint``, ``role_session_name`` (podnet), ``session_duration`` (3600 s).

``credentials_proxy`` is the HTTP proxy the SDK reaches the metadata service and STS
through. A key of another mode is refused, naming it. The SDK client is handed the
credentials client, not a key: temporary keys are renewed 15 minutes before they expire,
by the call that finds them due, and every request signs with the current one. A key that
cannot be had fails the call (transient) with the SDK's account of why, never a key.
Keys live only in the credentials client: never logged, traced or put in a message.

On a node (``podnet node --config``, the same section) the plug hooks are the ENI
dataplane of ``plugins/ecs/dataplane.py``: a routed veth per pod and a policy rule from
the pod's address to a table per ENI whose default route is that ENI's device (found by
its MAC, asked of the cloud once per ENI); see docs/node.md.

The provider is three modules: ``config`` (its section, defaults and ECS error codes),
``cloud`` (the SDK client and what the provider reads and keeps of the cloud) and this
one, the hooks.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, PoolEmpty, ProviderError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.networks import Networks, SubnetInfo, SubnetRealization
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import (
    config_key,
    read_section,
)
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CloudInterface,
    CloudLimiter,
    Inventory,
    NodeContext,
    NodeFinding,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    ResolvedRequest,
    RouteResult,
    Subnet,
    VerifyResult,
)
from podnet.linux.hooks import DataplaneHooks
from podnet.plugins.ecs.cloud import credentials_client
from podnet.plugins.ecs.config import (
    DESCRIPTION_PREFIX,
    INSTANCE_TAG,
    NAME,
    TYPE_LABEL,
    EcsConfig,
    classify,
)
from podnet.plugins.ecs.config import POLICY as POLICY  # the defaults, as the demo reads them
from podnet.plugins.ecs.dataplane import (
    POD_ROUTES,
    POD_ROUTES_DUAL,
    ecs_dataplane,
    ipv6_gateway,
)
from podnet.plugins.ecs.subnets import (
    config_networks,
    realize,
    vswitch_ids,
    zone_vswitches,
)
from podnet.plugins.ecs.trunk import EcsTrunks, builds_pool, interfaces_of

__version__ = "0.1.0"

log = logging.getLogger(__name__)


class EcsProvider(EcsTrunks, DataplaneHooks):
    """The plugin. One instance per controller process."""

    def __init__(self, *, name: str = NAME, policy: PoolPolicy | None = None) -> None:
        super().__init__(name=name, policy=policy)
        #: the node agent's dataplane (plugins/ecs/dataplane.py)
        self.dataplane = ecs_dataplane(name, self._mac_of)
        #: the Ready Subnets (and pools) core last handed over (podnet_networks_changed)
        self.networks = Networks()

    # --- registration and configuration -------------------------------------------------

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=True, manages_interfaces=True,
            policy=self.policy, sticky_kinds=("StatefulSet",),
            description="Alibaba Cloud ECS: ENI multi-IP through alibabacloud_ecs20140526",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        cfg = read_section(EcsConfig, provider, config)
        credentials = credentials_client(cfg, provider)
        self._random.seed(cfg.seed)
        with self._lock:
            # the keys live on in the credentials client only
            self.config = attrs.evolve(cfg, access_key_id=None, access_key_secret=None)
            self._credentials = credentials
            self._generation += 1
            self._limits.clear()
            self._cidrs.clear()

    @hookimpl
    def podnet_cloud_limiter(self, provider: str, limiter: CloudLimiter) -> bool | None:
        """Every SDK request (describes and attach polls too) takes a token of its
        action's bucket first, as Terway meters each ECS API on its own."""
        self._limiter = limiter
        return True

    # --- helpers ------------------------------------------------------------------------

    @hookimpl
    def podnet_node_removed(self, provider: str, node: str) -> None:
        """The node left: the view of its instance's ENIs goes. ENIs whose rollback
        failed (``_orphans``) stay remembered: they are cloud objects still to delete,
        not a cache."""
        with self._lock:
            instance = self._node_instance.pop(node, None)
            if instance is not None:
                self._seen.pop(instance, None)

    # --- Subnet objects (plugins/ecs/subnets.py) -----------------------------------------

    @hookimpl
    def podnet_subnet_parameters(self, provider: str, subnet: SubnetInfo
                                 ) -> SubnetRealization | None:
        """``spec.parameters.vSwitchIds`` checked for form, then against the region's
        vSwitches (one DescribeVSwitches, every page): each exists, in its zone, its CIDR
        inside the Subnet's block. A cloud that cannot answer is a transient error."""
        wanted = vswitch_ids(subnet)
        try:
            cloud = self._vswitches()
        except ProviderError as exc:
            if exc.kind in (ErrorKind.TRANSIENT, ErrorKind.THROTTLED):
                raise
            raise ProviderError(ErrorKind.TRANSIENT, f"Subnet {subnet.name}: reading its "
                                f"vSwitches failed: {exc}", subject=exc.subject) from None
        return realize(subnet, wanted, cloud)

    @hookimpl
    def podnet_networks_changed(self, provider: str, networks: Networks) -> None:
        """Kept: new ENIs go into the vSwitches of the node's Subnets. The CIDRs the
        Subnets' realization read are kept too (no cloud call here)."""
        cidrs: dict[str, ipaddress.IPv4Network] = {}
        for subnet in networks.subnets:
            found = subnet.realized.get("vSwitches") if isinstance(subnet.realized,
                                                                   Mapping) else None
            for v in found if isinstance(found, list) else ():
                try:
                    cidrs[str(v["id"])] = ipaddress.IPv4Network(str(v["cidr"]))
                except (KeyError, TypeError, ValueError):
                    continue
        with self._lock:
            self.networks = networks
            self._cidrs.update(cidrs)

    @hookimpl
    def podnet_config_networks(self, provider: str) -> Networks | None:
        """The configured ``vswitches`` as Subnets, one per zone (see
        plugins/ecs/subnets.py), their zones and CIDRs read from the cloud."""
        if not self.config.vswitches:
            return None
        cloud = self._vswitches()
        missing = [v for v in self.config.vswitches if v not in cloud]
        if missing:
            log.warning("config %s: vSwitch %s does not exist in the region: left out of "
                        "the Subnets made from it", config_key(provider, "vswitches"),
                        ", ".join(missing))
        found = [cloud[v] for v in self.config.vswitches if v in cloud]
        return config_networks(provider, found) if found else None

    def where_to_grow(self, node: NodeContext, subnet: str | None
                      ) -> tuple[str | None, list[str]]:
        """A vSwitch core named (``subnet``), or none and the node's candidates: a
        ``subnet`` that names one of the node's Subnet objects stands for its vSwitches
        of the node's zone."""
        named = [s for s in node.subnets if s.name == subnet]
        if named:
            return None, self.node_vswitches(attrs.evolve(node, subnets=tuple(named)))
        return subnet, self.node_vswitches(node) if subnet is None else []

    def node_vswitches(self, node: NodeContext) -> list[str]:
        """Where a node's new ENIs go: the vSwitches its Subnets list for its zone, when
        core handed any Subnet (``NodeContext.subnets``); else the configured ones."""
        if not node.subnets:
            if not self.config.vswitches:
                key = config_key(self.name, "vswitches")
                raise ProviderError(ErrorKind.FATAL, f"node {node.node.name}: no vSwitch: no "
                                    f"Subnet of provider {self.name} takes the node and the "
                                    f"config names none ({key})", field=key)
            return list(self.config.vswitches)
        zone = self.zone_of(node)
        found = zone_vswitches(node.subnets, zone)
        if not found:
            names = ", ".join(s.name for s in node.subnets)
            raise ProviderError(ErrorKind.FATAL, f"node {node.node.name}: Subnet {names} "
                                f"lists no vSwitch of its zone {zone or '(unknown)'}",
                                subject=zone)
        return found

    # --- inventory ----------------------------------------------------------------------

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        instance = self.instance_id(node)
        limits = self.limits(node)
        dual = self.config.dual
        if dual and limits.ipv6 < 1:
            key = config_key(self.name, "ip_stack")
            raise ProviderError(ErrorKind.FATAL, f"config {key}: dual needs IPv6 on the ENIs, "
                                f"and node {node.node.name}'s instance type has none "
                                "(EniIpv6AddressQuantity 0): set ipv4, or use an instance "
                                "type with IPv6", field=key)
        self._drop_orphans(instance)
        enis = self.describe_enis(instance=instance)
        if not any(eni.kind == "Primary" for eni in enis):
            # every instance has its primary ENI: ECS answers an unknown InstanceId with an
            # empty list, not an error, and a pool grown on it would leak the new ENIs
            raise ProviderError(ErrorKind.NOT_FOUND, f"node {node.node.name}: ECS has no "
                                f"instance {instance} (no primary ENI is attached to it)",
                                field="spec.providerID", subject=instance)
        if self.config.trunk and builds_pool(node):
            enis = self.ensure_trunk(node, instance, limits, enis,
                                     lambda: self.where_to_grow(node, None))
        with self._lock:
            unsettled = self._creating | self._orphans.get(instance, set())
        interfaces, trunked = interfaces_of(enis, dual, instance, unsettled)
        return Inventory(interfaces=tuple(interfaces),
                         max_interfaces=self.max_interfaces(limits, trunk=trunked),
                         ips_per_interface=self.ips_per_eni(limits), dual_stack=dual)

    @hookimpl
    def podnet_node_check(self, provider: str, node: NodeContext
                          ) -> Sequence[NodeFinding] | None:
        """One DescribeNetworkInterfaces for the node's instance: each secondary ENI podnet
        made (its description) whose security groups are not the configured ones, as a
        set, is a ``SecurityGroupDrift`` finding. Reads only."""
        instance = self.instance_id(node)
        expected = set(self.config.security_groups)
        findings = []
        enis = self.describe_enis(instance=instance)
        if self.config.trunk:
            findings.extend(self.trunk_findings(node, instance, enis))
        for eni in enis:
            if not eni.made_by_podnet:
                continue  # the primary ENI, a trunk, or an ENI someone else made
            actual = set(eni.security_groups)
            if actual == expected:
                continue
            findings.append(NodeFinding(
                reason="SecurityGroupDrift", interface=eni.id,
                message=f"ENI {eni.id} of instance {instance} has security groups "
                        f"[{', '.join(sorted(actual))}], expected "
                        f"[{', '.join(sorted(expected))}]"))
        return findings

    # --- pool ---------------------------------------------------------------------------

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        if interface is None or interface.primary or not interface.pooled:
            # core grows only on the secondary ENIs it pools, and asks for a new ENI
            # (podnet_interface_create) when none has room: never the primary ENI
            raise ProviderError(ErrorKind.FATAL, "pod addresses go on secondary ENIs only, "
                                f"not on {interface.id if interface else 'no ENI'}",
                                subject=interface.id if interface else None)
        if interface.trunk:
            raise ProviderError(ErrorKind.FATAL, f"{interface.id} is a trunk ENI")
        if count <= 0:
            return []
        subject = interface.subnet or interface.id
        body = self._call("AssignPrivateIpAddresses", m.AssignPrivateIpAddressesRequest(
            region_id=self.config.region, network_interface_id=interface.id,
            secondary_private_ip_address_count=count), subject=subject)
        assigned = getattr(body, "assigned_private_ip_addresses_set", None)
        ip_set = getattr(assigned, "private_ip_set", None)
        ips = getattr(ip_set, "private_ip_address", None)
        if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
            # the addresses were assigned: the next inventory finds them
            raise ProviderError(ErrorKind.TRANSIENT, "AssignPrivateIpAddresses: malformed "
                                "reply (no AssignedPrivateIpAddressesSet.PrivateIpSet)",
                                subject=interface.id)
        self._note(instance, added=ips)
        if not self.config.dual or not ips:
            return [PoolEntry(ip, interface.id, interface.subnet) for ip in ips]
        v6 = self._assign_ipv6(instance, interface.id, ips, subject)
        return [PoolEntry(ip, interface.id, interface.subnet, ip6)
                for ip, ip6 in zip(ips, v6, strict=True)]

    def _assign_ipv6(self, instance: str, eni_id: str, ips: Sequence[str],
                     subject: str) -> list[str]:
        """As many IPv6 addresses as ``ips`` (just assigned) on ``eni_id``, for pairs.

        Terway's rule: a half pair is never handed out. Addresses that get no partner are
        unassigned again; if that fails too, the error is ``transient`` so that core
        reads the inventory again, finds the halves, and gives them back.
        """
        from alibabacloud_ecs20140526 import models as m

        try:
            body = self._call("AssignIpv6Addresses", m.AssignIpv6AddressesRequest(
                region_id=self.config.region, network_interface_id=eni_id,
                ipv_6address_count=len(ips)), subject=subject)
            got = getattr(getattr(body, "ipv_6sets", None), "ipv_6address", None)
            if not isinstance(got, list) or not all(isinstance(ip, str) for ip in got):
                raise ProviderError(ErrorKind.TRANSIENT, "AssignIpv6Addresses: malformed "
                                    "reply (no Ipv6Sets.Ipv6Address)", subject=eni_id)
        except ProviderError as exc:
            self._give_back_halves(instance, eni_id, ips, (), exc)
            raise
        self._note(instance, added=got)
        if len(got) != len(ips):
            self._give_back_halves(instance, eni_id, ips[len(got):], got[len(ips):], None)
        return got[: len(ips)]

    def _give_back_halves(self, instance: str, eni_id: str, ips: Sequence[str],
                          ipv6: Sequence[str], cause: ProviderError | None) -> None:
        try:
            if ips:
                self._unassign(eni_id, ips)
            if ipv6:
                self._unassign(eni_id, ipv6, ipv6=True)
        except ProviderError as exc:
            raise ProviderError(ErrorKind.TRANSIENT, f"{cause or 'IPv6 shortfall'}; "
                                f"giving back the unpaired halves failed too: {exc}",
                                subject=eni_id) from None
        self._note(instance, removed=[*ips, *ipv6])

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        if not entries:
            return []
        instance = self.instance_id(node)
        # a pair's two halves, and invalid halves of either family, all given back
        by_eni: dict[str | None, list[str]] = {}
        for e in entries:
            by_eni.setdefault(e.interface, []).extend(
                ip for ip in (e.address, e.ipv6) if ip is not None)
        if None in by_eni:
            # interface unknown: find each address on the node's ENIs
            loose = set(by_eni.pop(None))
            for eni in self.describe_enis(instance=instance):
                here = [ip for ip in (*eni.secondary, *eni.ipv6) if ip in loose]
                if here:
                    by_eni.setdefault(eni.id, []).extend(here)
        for eni_id, ips in by_eni.items():
            assert eni_id is not None
            v4 = [ip for ip in ips if ":" not in ip]
            v6 = [ip for ip in ips if ":" in ip]
            if v4:
                self._unassign(eni_id, v4)
            if v6:
                self._unassign(eni_id, v6, ipv6=True)
            self._note(instance, removed=ips)
        # unassigned now, or on none of the node's ENIs (already gone): all gone
        return list(dict.fromkeys(e.address for e in entries))

    def _unassign(self, eni_id: str, ips: Sequence[str], *, ipv6: bool = False) -> None:
        """Give ``ips`` (IPv4, or IPv6 with ``ipv6``) of one ENI back; when some are
        already gone (or the ENI is), give back only what is still there."""
        from alibabacloud_ecs20140526 import models as m

        def call(addresses: Sequence[str]) -> None:
            if ipv6:
                self._call("UnassignIpv6Addresses", m.UnassignIpv6AddressesRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    ipv_6address=list(addresses)), subject=eni_id)
            else:
                self._call("UnassignPrivateIpAddresses", m.UnassignPrivateIpAddressesRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    private_ip_address=list(addresses)), subject=eni_id)

        try:
            call(ips)
        except ProviderError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
            found = self.describe_enis(ids=[eni_id])
            held = (found[0].ipv6 if ipv6 else found[0].secondary) if found else ()
            still = [ip for ip in ips if ip in held]
            if still:
                call(still)

    # --- interfaces ---------------------------------------------------------------------

    @hookimpl
    def podnet_interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                                ip_count: int) -> CloudInterface | None:
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        limits = self.limits(node)
        count = max(0, min(ip_count, self.ips_per_eni(limits)))
        dual = self.config.dual
        wanted, candidates = self.where_to_grow(node, subnet)
        vswitch = self.choose_vswitch(wanted, count, candidates)
        body = self._call("CreateNetworkInterface", m.CreateNetworkInterfaceRequest(
            region_id=self.config.region, v_switch_id=vswitch,
            security_group_ids=list(self.config.security_groups),
            secondary_private_ip_address_count=count or None,
            ipv_6address_count=(count or None) if dual else None,
            description=f"{DESCRIPTION_PREFIX}{instance}",
            tag=[m.CreateNetworkInterfaceRequestTag(key=INSTANCE_TAG, value=instance)]),
            subject=vswitch)
        eni_id = getattr(body, "network_interface_id", None)
        if not isinstance(eni_id, str) or not eni_id:
            # made, maybe: the sweep finds it by its tag
            raise ProviderError(ErrorKind.TRANSIENT,
                                "CreateNetworkInterface: malformed reply (no NetworkInterfaceId)",
                                subject=vswitch)
        with self._lock:
            self._creating.add(eni_id)
        try:
            return self._attach_new(instance, eni_id, dual)
        finally:
            with self._lock:
                self._creating.discard(eni_id)

    def _attach_new(self, instance: str, eni_id: str, dual: bool) -> CloudInterface:
        """Attach the ENI just made and wait for it; roll it back on any failure."""
        from alibabacloud_ecs20140526 import models as m

        try:
            self._call("AttachNetworkInterface", m.AttachNetworkInterfaceRequest(
                region_id=self.config.region, network_interface_id=eni_id,
                instance_id=instance), subject=eni_id)
            eni = self._wait(eni_id, "InUse")
            if dual and len(eni.ipv6) != len(eni.secondary):
                # Terway: a new ENI whose IPv4 and IPv6 counts differ is rolled back
                raise ProviderError(ErrorKind.TRANSIENT, f"ENI {eni_id} came with "
                                    f"{len(eni.secondary)} IPv4 and {len(eni.ipv6)} IPv6 "
                                    "addresses: rolled back", subject=eni_id)
        except Exception:  # a process that dies (a kill) rolls nothing back: the sweep does
            self._rollback(instance, eni_id)
            raise
        self._note(instance, added=(*eni.secondary, *eni.ipv6))
        return CloudInterface(id=eni.id, mac=eni.mac, subnet=eni.vswitch, ips=eni.secondary,
                              ipv6=eni.ipv6 if dual else ())

    def _rollback(self, instance: str, eni_id: str) -> None:
        """A made ENI that never got attached goes again; if that fails too, the node's
        next inventory retries (and, should this process die first, the sweep)."""
        from alibabacloud_ecs20140526 import models as m

        try:
            found = self.describe_enis(ids=[eni_id])
            if found and found[0].status in ("InUse", "Attaching"):
                self._call("DetachNetworkInterface", m.DetachNetworkInterfaceRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    instance_id=instance), subject=eni_id)
                self._wait(eni_id, "Available")
            self._delete(eni_id)
        except ProviderError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return
            with self._lock:
                self._orphans.setdefault(instance, set()).add(eni_id)

    @hookimpl
    def podnet_interface_dispose(self, provider: str, node: NodeContext,
                                 interface: CloudInterface) -> bool | None:
        if interface.primary or interface.trunk or not interface.pooled:
            raise ProviderError(ErrorKind.FATAL, f"{interface.id} is a primary or trunk ENI: "
                                "never disposed", subject=interface.id)
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        found = self.describe_enis(ids=[interface.id])
        if not found:
            return True
        eni = found[0]
        if eni.kind != "Secondary":
            raise ProviderError(ErrorKind.FATAL, f"{eni.id} is a {eni.kind} ENI: never "
                                "disposed", subject=eni.id)
        self._note(instance, removed=(*eni.secondary, *eni.ipv6))
        if eni.status in ("InUse", "Attaching"):
            self._call("DetachNetworkInterface", m.DetachNetworkInterfaceRequest(
                region_id=self.config.region, network_interface_id=eni.id,
                instance_id=instance), subject=eni.id)
            try:
                eni = self._wait(eni.id, "Available", timeout=min(5.0,
                                                                   self.config.attach_timeout))
            except ProviderError as exc:
                # gone already, or still detaching (core asks again)
                return exc.kind is ErrorKind.NOT_FOUND
        if eni.status != "Available":
            return False
        try:
            self._delete(eni.id)
        except ProviderError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return True
            raise
        return True

    # --- machines no Node and no record names (podnet audit) ----------------------------

    @hookimpl
    def podnet_unknown_machines(self, provider: str, known: Sequence[NodeInfo]
                                ) -> Sequence[NodeInfo] | None:
        """The instances an ENI podnet made (its tag, or an older ENI's description) is
        attached to that none of ``known`` names: what podnet made for a node whose Node
        and record are both gone. An instance holding no such ENI is never listed, so
        ENIs others made (another cluster's, a hand-made one) on the instances of the
        region are no finding; on a listed one, the audit reads the inventory, as the
        controller pools it: the secondary addresses of its secondary ENIs.

        One DescribeNetworkInterfaces of the region's secondary ENIs (500 a page), then
        one DescribeInstances per 100 of those instances, for the instance type the
        inventory needs; an instance ECS no longer has is left out (its ENIs were detached
        when it was released, and the sweep deletes them). Reads only.
        """
        names: set[str] = set()
        for node in known:
            try:
                names.add(self._instance_of(NodeContext(node=node)))
            except ProviderError:
                continue  # names no instance: nothing of it to leave out
        holding = sorted({eni.instance for eni in self.describe_enis(kind="Secondary")
                          if eni.made_by_podnet and eni.instance
                          and eni.status in ("InUse", "Attaching")} - names)
        types = self.instance_types(holding)
        region = self.config.region
        return [NodeInfo(name=instance, uid="", provider_id=f"{region}.{instance}",
                         labels={TYPE_LABEL: types[instance]})
                for instance in holding if instance in types]

    # --- ENIs nobody attached ---------------------------------------------------------

    @hookimpl
    def podnet_sweep(self, provider: str, owners: Collection[str],
                     remove: Collection[str]) -> Sequence[str] | None:
        """The region's detached ENIs podnet made (its tag, or an older ENI's description),
        as Terway's GC finds them: created and never attached (the controller died between
        CreateNetworkInterface and AttachNetworkInterface), or detached and never deleted
        (it died in a rollback or a dispose, or the delete failed and its memory went).
        No inventory lists them: they are on no instance.

        One DescribeNetworkInterfaces (``Status=Available``, ``Type=Secondary``; one per
        500) a call; each ENI in ``remove`` (reported for ``leaked_ip_expiry``, far longer
        than any create-to-attach) that this answer still shows Available is deleted —
        never one this process is attaching now, and the cloud refuses to delete one that
        got attached since. ``owners`` name records, never an ENI: unused. A delete answered
        not-found is done; throttled, the rest wait for the next period (still reported,
        so their first-seen times stay).
        """
        found = self.describe_enis(status="Available", kind="Secondary")
        with self._lock:
            creating = set(self._creating)
        orphans = [e.id for e in found if e.made_by_podnet and e.status == "Available"
                   and e.id not in creating]
        doomed = set(remove)
        left: list[str] = []
        throttled = False
        for eni_id in orphans:
            if eni_id not in doomed or throttled:
                left.append(eni_id)
                continue
            try:
                self._delete(eni_id)
            except ProviderError as exc:
                if exc.kind is ErrorKind.NOT_FOUND:
                    continue
                # attached since, say: the next period's answer leaves it out
                throttled = exc.kind is ErrorKind.THROTTLED
                left.append(eni_id)
                continue
            with self._lock:
                for held in self._orphans.values():
                    held.discard(eni_id)
        return left

    # --- one pod network ----------------------------------------------------------------

    @hookimpl
    def podnet_address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        """The vSwitches the node's pool grows in (its Subnets', else the configured
        ones) with their CIDRs (read once, then kept)."""
        served = self.node_vswitches(node)
        cidrs = self._cidr_map(served)
        return AddressSpace(subnets=tuple(
            Subnet.first_host_gateway(v, str(cidrs[v]) if v in cidrs else None)
            for v in served), pairs=self.config.dual)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        request = context.request
        if request is None:
            raise ProviderError(ErrorKind.FATAL, "the ecs provider uses node pools")
        context.check_in_subnet(lambda: next(iter(zone_vswitches(
            (context.subnet,) if context.subnet else (), self.zone_of(context.node))), None))
        entry = request.entry or self._add_static(context, request)
        cidr = self._cidr_map([entry.subnet] if entry.subnet else []).get(entry.subnet or "")
        gateway = str(next(cidr.hosts())) if cidr is not None else None
        cidr_text = str(cidr) if cidr is not None else None
        if self.config.dual and entry.ipv6 is None:
            # core never hands out half a pair; a provider's own static add is paired
            raise ProviderError(ErrorKind.FATAL, f"{entry.address} has no IPv6 partner",
                                field="status.ipv6")
        # what the pod's interface gets (the ENI dataplane): its address alone, the
        # link-local gateway; ``gateway`` stays the vSwitch's, the ENI's table's next hop
        return Allocation(ip=entry.address, ipv6=entry.ipv6, mac=pn.spec.requests.mac_address,
                          subnet=entry.subnet, gateway=gateway, interface=entry.interface,
                          cidr=cidr_text, prefix_length=32,
                          ipv6_prefix_length=128 if entry.ipv6 else None,
                          ipv6_gateway=ipv6_gateway(entry.ipv6) if entry.ipv6 else None,
                          routes=POD_ROUTES_DUAL if entry.ipv6 else POD_ROUTES)

    def _add_static(self, context: AllocateContext, request: ResolvedRequest) -> PoolEntry:
        """Assign the requested address core found outside the pool to an ENI of the node
        in its vSwitch."""
        from alibabacloud_ecs20140526 import models as m

        address, subnet = request.address, request.subnet
        assert address is not None and subnet is not None
        vswitch = subnet.id
        instance = self.instance_id(context.node)
        # pods go on secondary ENIs only: never the primary one, never a trunk
        enis = [e for e in self.describe_enis(instance=instance)
                if e.vswitch == vswitch and e.status == "InUse"
                and e.kind not in ("Trunk", "Primary")]
        for eni in enis:
            if address in eni.secondary and not self.config.dual:
                return PoolEntry(address, eni.id, vswitch)
        if not enis:
            raise PoolEmpty(f"no ENI of the node in vSwitch {vswitch} for {address}",
                            subnet=vswitch)
        if self.config.dual:
            # its IPv6 partner would have to be chosen outside the pool: not served
            raise request.refuse(f"{address} is not an idle pair on node "
                                 f"{context.node.node.name} (ip_stack dual: a static "
                                 "address must be one the node's pool holds)")
        eni = min(enis, key=lambda e: len(e.secondary))
        self._call("AssignPrivateIpAddresses", m.AssignPrivateIpAddressesRequest(
            region_id=self.config.region, network_interface_id=eni.id,
            private_ip_address=[address]), subject=vswitch)
        self._note(instance, added=[address])
        return PoolEntry(address, eni.id, vswitch)

    def _on_node(self, context: PodNetworkContext, max_age: float | None) -> tuple[bool, str]:
        """Whether the recorded address (and, dual stack, its IPv6 half) is on an InUse ENI
        of the node: from the view the provider keeps when it is there and (``max_age``)
        fresh enough, else described."""
        pn = context.pod_network
        ip = pn.status.ip
        if ip is None:
            return False, "no address recorded"
        if context.node is None:
            return False, "no node"
        instance = self.instance_id(context.node)
        # dual stack: the IPv6 half must be there too
        ip6 = pn.status.ipv6 if self.config.dual else None
        with self._lock:
            seen = self._seen.get(instance)
        if seen is not None and all(seen[1].get(a) == "InUse" for a in (ip, ip6) if a) and (
                max_age is None or time.monotonic() - seen[0] <= max_age):
            return True, ""
        for eni in self.describe_enis(instance=instance):
            if ip in eni.secondary:
                if eni.status != "InUse":
                    return False, f"{ip} is on {eni.id}, which is {eni.status}"
                if ip6 is not None and ip6 not in eni.ipv6:
                    return False, f"{ip6}, the IPv6 half of {ip}, is not on {eni.id}"
                return True, ""
        return False, f"{ip} is on no ENI of instance {instance}"

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        if pn.status.ip is None:
            raise ProviderError(ErrorKind.FATAL, "route without an address", field="status.ip")
        ok, reason = self._on_node(context, None)
        if not ok:
            raise ProviderError(ErrorKind.NOT_FOUND, reason)
        return RouteResult()

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        ok, reason = self._on_node(context, self.verify_cache_ttl)
        return VerifyResult(ok=ok, reason=reason)

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        # nothing to undo on the ENI: the address goes back to the node's pool, and core
        # keeps it idle or unassigns it (pool_shrink)
        return ReleaseResult(return_to_pool=True)

    # --- the dataplane on a node (the node agent): a routed veth pair, a table per ENI;
    # its four hooks come from DataplaneHooks (self.dataplane) ---------------------------

    # --- errors -------------------------------------------------------------------------

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        return classify(error)


#: what the host registers as the built-in ``ecs`` plugin
plugin = EcsProvider()
