"""Subnet objects on BBC: which VPC subnets serve a Subnet, checked against the cloud.

A Subnet of the ``bbc`` provider names its VPC subnets::

    spec:
      provider: bbc
      cidrBlock: 10.64.0.0/15
      parameters:
        subnetIds: [sbn-a, sbn-b]

``subnetIds`` is required and the only key. Each subnet must exist (the VPC subnet API,
``GET /v1/subnet/{id}``, read when the Subnet changes) and have its CIDR inside the
Subnet's IPv4 block. A node's pool grows in the subnets of the Subnets core hands it
(``NodeContext.subnets``; those of another zone than the node's
``topology.kubernetes.io/zone`` left out), else, as before, in its record's
``spec.subnets`` or the config's ``subnets``.

The config file's ``subnets`` become one Subnet per zone (the migration): named
``<provider>-<zone>``, its block the smallest CIDR holding that zone's subnets, each the
provider's default; with subnets in several zones each takes only the nodes of its zone
(``nodeSelector`` on ``topology.kubernetes.io/zone``), and zones whose blocks would
overlap share one Subnet, since two Subnets of one provider may not overlap.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.networks import (
    Networks,
    SelectorTerm,
    SubnetInfo,
    SubnetRealization,
    covering_block,
    sole_parameter,
)
from podnet.hookspecs.sections import config_key
from podnet.hookspecs.types import NodeContext

log = logging.getLogger(__name__)

SUBNET_IDS = "subnetIds"
#: the realization's list of the cloud subnets whose addresses are the Subnet's: what its
#: pool entries name as their ``subnet``
CLOUD_SUBNETS = "cloudSubnets"
FIELD = "spec.parameters"
#: a VPC subnet id as BCE writes it
SUBNET_ID = re.compile(r"^sbn-[a-z0-9][a-z0-9-]{0,127}$")
ZONE_LABEL = "topology.kubernetes.io/zone"


class CloudSubnet(Protocol):
    """What the provider reads of one VPC subnet."""

    id: str
    cidr: str
    available: int
    zone: str


class SubnetReader(Protocol):
    def __call__(self, subnet: str, *, fresh: bool = False) -> CloudSubnet: ...


def subnet_ids(subnet: SubnetInfo) -> tuple[str, ...]:
    """The Subnet's ``spec.parameters.subnetIds``, checked for form (not against the
    cloud). :raises InvalidRequest: naming the parameter."""
    field = f"{FIELD}.{SUBNET_IDS}"
    raw = sole_parameter(subnet, SUBNET_IDS, "bbc", "the VPC subnets ([sbn-...])")
    if not isinstance(raw, list | tuple) or not raw:
        raise InvalidRequest(field, f"Subnet {subnet.name}: expected a non-empty list of "
                             f"subnet ids, got {raw!r}")
    seen: dict[str, int] = {}
    for i, sid in enumerate(raw):
        at = f"{field}[{i}]"
        if not isinstance(sid, str) or not SUBNET_ID.match(sid):
            raise InvalidRequest(at, f"Subnet {subnet.name}: {sid!r} is not a subnet id "
                                 "(sbn-...)")
        if sid in seen:
            raise InvalidRequest(at, f"Subnet {subnet.name}: subnet {sid} is listed twice "
                                 f"(also at {field}[{seen[sid]}])")
        seen[sid] = i
    return tuple(raw)


def node_subnet_ids(subnets: Sequence[SubnetInfo]) -> list[str]:
    """The VPC subnets ``subnets`` list, in order, once each (a malformed one adds none)."""
    out: list[str] = []
    for subnet in subnets:
        try:
            ids = subnet_ids(subnet)
        except InvalidRequest:
            continue  # core hands over Ready Subnets only; never trust a bad one here
        out.extend(s for s in ids if s not in out)
    return out


class BbcSubnets:
    """The three Subnet hooks of the BBC provider (a mixin of ``BbcProvider``)."""

    name: str
    subnets: tuple[str, ...]
    #: the Ready Subnets (and pools) core last handed over (podnet_networks_changed)
    networks: Networks = Networks()

    def _subnet(self, subnet: str, *, fresh: bool = False) -> Any:
        raise NotImplementedError  # BbcProvider's

    @staticmethod
    def _error_code(error: BaseException) -> tuple[str | None, int | None]:
        raise NotImplementedError  # BbcProvider's: the SDK error's code and HTTP status

    def _read(self, sid: str, at: str, owner: str) -> CloudSubnet:
        """One VPC subnet, fresh; one the cloud does not have is refused (``at``), one it
        cannot read now is a transient error."""
        try:
            info: CloudSubnet = self._subnet(sid, fresh=True)
        except ProviderError as exc:
            if exc.kind in (ErrorKind.TRANSIENT, ErrorKind.THROTTLED):
                raise
            raise ProviderError(ErrorKind.TRANSIENT, f"{owner}: reading subnet {sid} "
                                f"failed: {exc}", subject=sid) from None
        except Exception as exc:
            code, status = self._error_code(exc)
            if status == 404 or code == "NoSuchObject":
                raise InvalidRequest(at, f"{owner}: subnet {sid} does not exist") from None
            kind = ErrorKind.THROTTLED if code == "RateLimit" else ErrorKind.TRANSIENT
            raise ProviderError(kind, f"{owner}: reading subnet {sid} failed: "
                                f"{code or type(exc).__name__}", subject=sid) from None
        return info

    @hookimpl
    def podnet_subnet_parameters(self, provider: str, subnet: SubnetInfo
                                 ) -> SubnetRealization | None:
        """``spec.parameters.subnetIds`` checked for form, then each subnet read (one
        ``GET /v1/subnet/{id}`` each): it exists, its CIDR inside the Subnet's block."""
        ids = subnet_ids(subnet)
        block = subnet.network(4)
        owner = f"Subnet {subnet.name}"
        found: list[dict[str, Any]] = []
        for i, sid in enumerate(ids):
            at = f"{FIELD}.{SUBNET_IDS}[{i}]"
            info = self._read(sid, at, owner)
            cidr = ipaddress.ip_network(info.cidr, strict=False)
            if not isinstance(block, ipaddress.IPv4Network) or \
                    not isinstance(cidr, ipaddress.IPv4Network) or not cidr.subnet_of(block):
                raise InvalidRequest(at, f"{owner}: subnet {sid}'s CIDR {cidr} is not inside "
                                     f"cidrBlock {', '.join(subnet.cidrs)}")
            found.append({"id": sid, "zone": info.zone, "cidr": str(cidr),
                          "availableIPs": info.available})
        n = len(found)
        return SubnetRealization(details={"subnets": found, CLOUD_SUBNETS: list(ids)},
                                 summary=f"{n} subnet{'' if n == 1 else 's'}")

    @hookimpl
    def podnet_networks_changed(self, provider: str, networks: Networks) -> None:
        """Kept: node pools grow in the subnets of the node's Subnets."""
        self.networks = networks

    @hookimpl
    def podnet_config_networks(self, provider: str) -> Networks | None:
        """The configured ``subnets`` as Subnets, one per zone (see the module docstring),
        their zones and CIDRs read from the cloud."""
        if not self.subnets:
            return None
        found: list[CloudSubnet] = []
        missing: list[str] = []
        for sid in self.subnets:
            try:
                found.append(self._read(sid, config_key(provider, "subnets"),
                                        f"config {config_key(provider, 'subnets')}"))
            except InvalidRequest:
                missing.append(sid)
        if missing:
            log.warning("config %s: subnet %s does not exist: left out of the Subnets made "
                        "from it", config_key(provider, "subnets"), ", ".join(missing))
        return config_networks(provider, found) if found else None

    def _zone_subnets(self, node: NodeContext) -> list[str]:
        """The node's Subnets' VPC subnets, less those their realization says are in
        another zone than the node's ``topology.kubernetes.io/zone`` (when it has one)."""
        zone = node.node.labels.get(ZONE_LABEL)
        elsewhere: set[str] = set()
        for subnet in node.subnets if zone else ():
            found = subnet.realized.get("subnets") if isinstance(subnet.realized,
                                                                  Mapping) else None
            for s in found if isinstance(found, list) else ():
                if isinstance(s, Mapping) and s.get("zone") and s.get("zone") != zone:
                    elsewhere.add(str(s.get("id")))
        ids = [s for s in node_subnet_ids(node.subnets) if s not in elsewhere]
        if not ids:
            names = ", ".join(s.name for s in node.subnets)
            raise ProviderError(ErrorKind.FATAL, f"node {node.node.name}: Subnet {names} "
                                f"lists no subnet of its zone {zone}", subject=zone)
        return ids

    def subnets_named(self, node: NodeContext, subnet: str) -> list[str]:
        """The VPC subnets core named: ``subnet`` itself, or, when it names one of the
        node's Subnet objects, that Subnet's subnets (of the node's zone)."""
        named = tuple(s for s in node.subnets if s.name == subnet)
        if not named:
            return [subnet]
        return self._zone_subnets(NodeContext(node=node.node, network=node.network,
                                              inventory=node.inventory, subnets=named))

    def candidates(self, node: NodeContext) -> tuple[str, ...]:
        """Where a node's pool grows: the VPC subnets of the Subnets core handed for it
        (``NodeContext.subnets``), else its record's ``spec.subnets``, else the configured
        ``subnets``."""
        if node.subnets:
            return tuple(self._zone_subnets(node))
        if node.network is not None and node.network.spec.subnets:
            return tuple(node.network.spec.subnets)
        return self.subnets


def config_networks(provider: str, subnets: Sequence[CloudSubnet]) -> Networks:
    """The configured subnets as Subnets: one per zone, zones whose blocks overlap
    merged."""
    groups: list[tuple[list[str], list[CloudSubnet]]] = []
    for s in subnets:
        group = next((g for g in groups if s.zone in g[0]), None)
        if group is None:
            groups.append(([s.zone], [s]))
        else:
            group[1].append(s)
    merged = True
    while merged:
        merged = False
        for i, a in enumerate(groups):
            other = next((b for b in groups[i + 1:]
                          if _covering(a[1]).overlaps(_covering(b[1]))), None)
            if other is not None:
                a[0].extend(other[0])
                a[1].extend(other[1])
                groups.remove(other)
                merged = True
                break
    several = len(groups) > 1
    out = []
    for zones, members in groups:
        block = _covering(members)
        selector = SelectorTerm(match_expressions=((ZONE_LABEL, "In", tuple(zones)),)) \
            if several else None
        name = re.sub(r"[^a-z0-9.-]+", "-", f"{provider}-{'-'.join(zones)}".lower()).strip("-.")
        out.append(SubnetInfo(
            name=name[:253] or provider, provider=provider, cidrs=(str(block),),
            gateways=(str(next(block.hosts())),), node_selector=selector, default=True,
            parameters={SUBNET_IDS: [s.id for s in members]}))
    return Networks(subnets=tuple(out))


def _covering(members: Sequence[CloudSubnet]) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return covering_block(ipaddress.IPv4Network(s.cidr, strict=False) for s in members)
