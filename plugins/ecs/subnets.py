"""Subnet objects on ECS: which vSwitches serve a Subnet, checked against the cloud.

A Subnet of the ``ecs`` provider names its vSwitches per zone::

    spec:
      provider: ecs
      cidrBlock: 10.40.0.0/16
      parameters:
        vSwitchIds:
          cn-hangzhou-k: [vsw-aaa, vsw-bbb]
          cn-hangzhou-j: [vsw-ccc]

``vSwitchIds`` is required and the only key. Each vSwitch must exist, be in the zone it is
listed under and have its CIDR inside the Subnet's IPv4 block (DescribeVSwitches, read
when the Subnet changes); a node grows its pool in the vSwitches of its own zone, an ENI
being attachable only to an instance of its vSwitch's zone. The SDK's DescribeVSwitches
says nothing of a vSwitch's IPv6 CIDR: a dual-stack Subnet's IPv6 block is not checked
against it.

The config file's ``vswitches`` become one Subnet per zone (the migration): named
``<provider>-<zone>``, its block the smallest CIDR holding that zone's vSwitches, each the
provider's default; with vSwitches in several zones each takes only the nodes of its zone
(``nodeSelector`` on ``topology.kubernetes.io/zone``), and zones whose blocks would overlap
share one Subnet (listing both zones), since two Subnets of one provider may not overlap.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.networks import (
    Networks,
    SelectorTerm,
    SubnetInfo,
    SubnetRealization,
    covering_block,
    sole_parameter,
)
from podnet.plugins.ecs.cloud import VSwitch
from podnet.plugins.ecs.config import ZONE_LABEL

VSWITCH_IDS = "vSwitchIds"
#: the realization's list of the cloud subnets (vSwitches) whose addresses are the
#: Subnet's: what its pool entries and interfaces name as their ``subnet``
CLOUD_SUBNETS = "cloudSubnets"
FIELD = "spec.parameters"
#: a vSwitch id as ECS writes it (``vsw-`` and lower-case letters, digits, dashes)
VSWITCH_ID = re.compile(r"^vsw-[a-z0-9][a-z0-9-]{0,127}$")
#: a zone id (``cn-hangzhou-k``)
ZONE_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def vswitch_ids(subnet: SubnetInfo) -> dict[str, tuple[str, ...]]:
    """The Subnet's ``spec.parameters.vSwitchIds``, zone -> vSwitch ids, checked for
    form (not against the cloud). :raises InvalidRequest: naming the parameter."""
    field = f"{FIELD}.{VSWITCH_IDS}"
    raw = sole_parameter(subnet, VSWITCH_IDS, "ecs", "the vSwitches per zone ({zone: [vsw-...]})")
    if not isinstance(raw, Mapping) or not raw:
        raise InvalidRequest(field, f"Subnet {subnet.name}: expected a non-empty map of "
                             f"zone to vSwitch ids, got {raw!r}")
    out: dict[str, tuple[str, ...]] = {}
    seen: dict[str, str] = {}
    for zone, ids in raw.items():
        if not isinstance(zone, str) or not ZONE_ID.match(zone):
            raise InvalidRequest(field, f"Subnet {subnet.name}: {zone!r} is not a zone id")
        where = f"{field}.{zone}"
        if not isinstance(ids, list | tuple) or not ids:
            raise InvalidRequest(where, f"Subnet {subnet.name}: expected a non-empty list of "
                                 f"vSwitch ids, got {ids!r}")
        for i, vid in enumerate(ids):
            at = f"{where}[{i}]"
            if not isinstance(vid, str) or not VSWITCH_ID.match(vid):
                raise InvalidRequest(at, f"Subnet {subnet.name}: {vid!r} is not a vSwitch id "
                                     "(vsw-...)")
            if vid in seen:
                raise InvalidRequest(at, f"Subnet {subnet.name}: vSwitch {vid} is listed "
                                     f"twice (also at {seen[vid]})")
            seen[vid] = at
        out[zone] = tuple(ids)
    return out


def realize(subnet: SubnetInfo, wanted: Mapping[str, Sequence[str]],
            cloud: Mapping[str, VSwitch]) -> SubnetRealization:
    """Check each wanted vSwitch against what the cloud said (``cloud``: id -> vSwitch):
    it exists, is in its zone, and its CIDR is inside the Subnet's IPv4 block.
    :raises InvalidRequest: naming the vSwitch's place in the parameters."""
    block = subnet.network(4)
    found: list[dict[str, Any]] = []
    for zone, ids in wanted.items():
        for i, vid in enumerate(ids):
            at = f"{FIELD}.{VSWITCH_IDS}.{zone}[{i}]"
            v = cloud.get(vid)
            if v is None:
                raise InvalidRequest(at, f"Subnet {subnet.name}: vSwitch {vid} does not "
                                     "exist in the region")
            if v.zone != zone:
                raise InvalidRequest(at, f"Subnet {subnet.name}: vSwitch {vid} is in zone "
                                     f"{v.zone}, not {zone}")
            if v.cidr is None:
                raise ProviderError(ErrorKind.TRANSIENT, f"DescribeVSwitches: malformed "
                                    f"reply (vSwitch {vid} has no CIDR)", subject=vid)
            if block is None or not isinstance(block, ipaddress.IPv4Network) or \
                    not v.cidr.subnet_of(block):
                raise InvalidRequest(at, f"Subnet {subnet.name}: vSwitch {vid}'s CIDR "
                                     f"{v.cidr} is not inside cidrBlock "
                                     f"{', '.join(subnet.cidrs)}")
            found.append({"id": vid, "zone": zone, "cidr": str(v.cidr),
                          "availableIPs": v.free})
    n = len(found)
    return SubnetRealization(details={"vSwitches": found, CLOUD_SUBNETS: [v["id"] for v in found]},
                             summary=f"{n} vSwitch{'' if n == 1 else 'es'}")


def zone_vswitches(subnets: Sequence[SubnetInfo], zone: str | None) -> list[str]:
    """The vSwitches the ``subnets`` list for ``zone`` (every zone's when ``zone`` is
    None), in order, once each; a Subnet whose parameters are malformed adds none."""
    out: list[str] = []
    for subnet in subnets:
        try:
            wanted = vswitch_ids(subnet)
        except InvalidRequest:
            continue  # core hands over Ready Subnets only; never trust a bad one here
        for z, ids in wanted.items():
            if zone is None or z == zone:
                out.extend(v for v in ids if v not in out)
    return out


def config_networks(provider: str, vswitches: Sequence[VSwitch]) -> Networks:
    """The configured vSwitches (as the cloud described them) as Subnets: one per zone,
    zones whose blocks overlap merged (see the module docstring)."""
    groups: list[tuple[list[str], list[VSwitch]]] = []
    for v in vswitches:
        if v.cidr is None:
            continue
        group = next((g for g in groups if v.zone in g[0]), None)
        if group is None:
            groups.append(([v.zone], [v]))
        else:
            group[1].append(v)
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                if _covering(a[1]).overlaps(_covering(b[1])):
                    a[0].extend(b[0])
                    a[1].extend(b[1])
                    groups.remove(b)
                    merged = True
                    break
            if merged:
                break
    several = len(groups) > 1
    subnets = []
    for zones, members in groups:
        params = {VSWITCH_IDS: {z: [v.id for v in members if v.zone == z] for z in zones}}
        selector = SelectorTerm(match_expressions=((ZONE_LABEL, "In", tuple(zones)),)) \
            if several else None
        block = _covering(members)
        subnets.append(SubnetInfo(
            name=_name(f"{provider}-{'-'.join(zones)}"), provider=provider,
            cidrs=(str(block),), gateways=(str(next(block.hosts())),),
            node_selector=selector, default=True, parameters=params))
    return Networks(subnets=tuple(subnets))


def _name(text: str) -> str:
    """An object name (DNS-1123 subdomain) from ``text``."""
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name[:253] or "ecs"


def _covering(members: Sequence[VSwitch]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return covering_block(v.cidr for v in members if v.cidr is not None)
