"""What the BBC and VPC APIs answer, read and checked: a malformed reply is a transient
ProviderError naming the call and the field, never a value used half-read."""

from __future__ import annotations

import ipaddress
from typing import Any

import attrs

from podnet.hookspecs.errors import ErrorKind, ProviderError


@attrs.frozen
class PortIp:
    address: str
    subnet: str
    primary: bool


@attrs.frozen
class Port:
    """What ``GET /v1/vpcPort/{instanceId}`` says: the instance's one ENI."""

    eni_id: str
    mac: str | None
    subnet: str
    status: str
    ips: tuple[PortIp, ...]
    #: the ENI's IPv6 addresses (``ipv6PrivateIpSet``), apart from the IPv4 ones
    ipv6: tuple[PortIp, ...] = ()

    def secondary(self) -> list[PortIp]:
        return [ip for ip in self.ips if not ip.primary]

    def secondary_ipv6(self) -> list[PortIp]:
        return [ip for ip in self.ipv6 if not ip.primary]

    def held(self) -> set[str]:
        """Every secondary address of either family."""
        return {ip.address for ip in (*self.secondary(), *self.secondary_ipv6())}


@attrs.frozen
class SubnetInfo:
    id: str
    cidr: str
    available: int
    zone: str = ""
    #: the subnet's IPv6 CIDR; None: the subnet has no IPv6
    ipv6_cidr: str | None = None


def bad_reply(what: str, field: str, detail: str) -> ProviderError:
    return ProviderError(ErrorKind.FATAL, f"malformed {what} reply: {detail}",
                         field=f"{what}.{field}", code="MalformedReply")


def parse_port(data: Any) -> Port:
    """Validate a vpcPort reply; a malformed one is a ProviderError naming the field."""
    what = "vpcPort"
    if not isinstance(data, dict):
        raise bad_reply(what, "", f"expected an object, got {type(data).__name__}")
    eni = data.get("eniId")
    if not isinstance(eni, str) or not eni:
        raise bad_reply(what, "eniId", f"expected an ENI id, got {eni!r}")
    subnet = data.get("subnetId")
    if not isinstance(subnet, str) or not subnet:
        raise bad_reply(what, "subnetId", f"expected a subnet id, got {subnet!r}")
    mac = data.get("macAddress")
    if mac is not None and not isinstance(mac, str):
        raise bad_reply(what, "macAddress", f"expected a MAC, got {mac!r}")
    seen: set[str] = set()
    ips = _port_ips(data, "privateIpSet", subnet, seen, version=4, required=True)
    ipv6 = _port_ips(data, "ipv6PrivateIpSet", subnet, seen, version=6, required=False)
    return Port(eni_id=eni, mac=mac, subnet=subnet, status=str(data.get("status") or ""),
                ips=tuple(ips), ipv6=tuple(ipv6))


def _port_ips(data: dict[str, Any], key: str, subnet: str, seen: set[str], *, version: int,
              required: bool) -> list[PortIp]:
    what = "vpcPort"
    items = data.get(key)
    if items is None and not required:
        return []
    if not isinstance(items, list):
        raise bad_reply(what, key, f"expected a list, got {items!r}")
    ips: list[PortIp] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise bad_reply(what, where, f"expected an object, got {item!r}")
        address = item.get("privateIpAddress")
        try:
            parsed = ipaddress.ip_address(address if isinstance(address, str) else "")
        except ValueError:
            raise bad_reply(what, f"{where}.privateIpAddress",
                             f"not an IP address: {address!r}") from None
        if parsed.version != version:
            raise bad_reply(what, f"{where}.privateIpAddress",
                            f"{address} is not an IPv{version} address")
        if str(parsed) in seen:
            raise bad_reply(what, f"{where}.privateIpAddress", f"{address} listed twice")
        seen.add(str(parsed))
        ip_subnet = item.get("subnetId") or subnet
        if not isinstance(ip_subnet, str):
            raise bad_reply(what, f"{where}.subnetId", f"expected a subnet id, got {ip_subnet!r}")
        ips.append(PortIp(str(parsed), ip_subnet, item.get("primary") is True))
    return ips


def parse_added(data: Any, what: str) -> list[str]:
    if not isinstance(data, dict) or not isinstance(data.get("privateIps"), list):
        raise bad_reply(what, "privateIps", f"expected a list, got {data!r}")
    out = []
    for i, ip in enumerate(data["privateIps"]):
        try:
            out.append(str(ipaddress.ip_address(ip if isinstance(ip, str) else "")))
        except ValueError:
            raise bad_reply(what, f"privateIps[{i}]", f"not an IP address: {ip!r}") from None
    return out


def parse_subnet(data: Any, subnet_id: str) -> SubnetInfo:
    what = "subnet"
    body = data.get("subnet") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise bad_reply(what, "subnet", f"expected an object for {subnet_id}")
    cidr, available = body.get("cidr"), body.get("availableIp")
    try:
        ipaddress.ip_network(cidr if isinstance(cidr, str) else "", strict=False)
    except ValueError:
        raise bad_reply(what, "cidr", f"not a CIDR: {cidr!r}") from None
    if isinstance(available, bool) or not isinstance(available, int) or available < 0:
        raise bad_reply(what, "availableIp", f"expected a count, got {available!r}")
    zone = body.get("zoneName")
    cidr6 = body.get("ipv6Cidr") or None
    if cidr6 is not None:
        try:
            if not isinstance(cidr6, str) or ipaddress.ip_network(cidr6, strict=False).version != 6:
                raise ValueError(cidr6)
        except ValueError:
            raise bad_reply(what, "ipv6Cidr", f"not an IPv6 CIDR: {cidr6!r}") from None
    return SubnetInfo(id=str(body.get("subnetId") or subnet_id), cidr=str(cidr),
                      available=available, zone=zone if isinstance(zone, str) else "",
                      ipv6_cidr=cidr6)
