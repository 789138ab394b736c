"""Checks on what providers return: a provider's bad answer must never reach a record.

Each check raises :class:`ProviderError` of kind ``fatal`` naming the offending field of
the hook's return value, so the object waiting on it gets a clear condition and Event
and nothing is written.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from podnet.core.annotations import IP_ADDRESS, annotation_field, check_ip, check_mac
from podnet.core.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.core.models import NetworkRequest
from podnet.core.pool import reserved_reason
from podnet.hookspecs.types import (
    AddressSpace,
    Allocation,
    Inventory,
    NodeFinding,
    PoolEntry,
    Subnet,
)


def _bad(provider: str, hook: str, field: str, message: str) -> ProviderError:
    return ProviderError(
        ErrorKind.FATAL, f"provider {provider!r} returned a bad {hook} answer: {message}",
        field=f"{hook}.{field}",
    )


def check_allocation(provider: str, allocation: object,
                     request: NetworkRequest | None = None) -> Allocation:
    """A well-formed answer naming an address a pod may have: never its subnet's network
    or broadcast address or its gateway (the pod's own static request for one is invalid
    input; any other such answer a provider's bug)."""
    if not isinstance(allocation, Allocation):
        raise _bad(provider, "allocate", "", f"expected an Allocation, got "
                   f"{type(allocation).__name__}")
    for name, version in (("ip", None), ("ipv6", 6), ("gateway", None)):
        value = getattr(allocation, name)
        if value is None and name != "ip":
            continue
        if not isinstance(value, str):
            raise _bad(provider, "allocate", name, f"expected an address, got {value!r}")
        try:
            check_ip(value, version)
        except ValueError as exc:
            raise _bad(provider, "allocate", name, str(exc)) from None
    if allocation.mac is not None:
        try:
            check_mac(allocation.mac)
        except ValueError as exc:
            raise _bad(provider, "allocate", "mac", str(exc)) from None
    for address in (allocation.ip, allocation.ipv6):
        if address is None:
            continue
        why = reserved_reason(address, allocation.cidr, allocation.gateway)
        if why is None:
            continue
        static = request is not None and address in (request.ip_address or "").split(",")
        if static:
            raise InvalidRequest(annotation_field(IP_ADDRESS), f"{why}: not a pod address")
        raise _bad(provider, "allocate", "ip", why)
    return allocation


def check_address_space(provider: str, space: object) -> AddressSpace | None:
    """An address space whose subnets core can match addresses against."""
    hook = "address_space"
    if space is None:
        return None
    if not isinstance(space, AddressSpace):
        raise _bad(provider, hook, "", f"expected an AddressSpace, got {type(space).__name__}")
    for i, subnet in enumerate(space.subnets):
        if not isinstance(subnet, Subnet) or not subnet.id:
            raise _bad(provider, hook, f"subnets[{i}]", f"expected a Subnet with an id, got "
                       f"{subnet!r}")
        if subnet.cidr is not None:
            try:
                ipaddress.ip_network(subnet.cidr, strict=False)
            except (ValueError, TypeError):
                raise _bad(provider, hook, f"subnets[{i}].cidr",
                           f"not a CIDR: {subnet.cidr!r}") from None
        if subnet.gateway is not None:
            try:
                check_ip(subnet.gateway)
            except (ValueError, TypeError) as exc:
                raise _bad(provider, hook, f"subnets[{i}].gateway", str(exc)) from None
    return space


def check_entries(provider: str, hook: str, entries: object) -> list[PoolEntry]:
    if entries is None:
        return []
    if not isinstance(entries, Sequence) or isinstance(entries, str | bytes):
        raise _bad(provider, hook, "", f"expected a list of entries, got {entries!r}")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, PoolEntry):
            raise _bad(provider, hook, f"[{i}]", f"expected a PoolEntry, got {entry!r}")
        try:
            check_ip(entry.address)
        except (ValueError, TypeError) as exc:
            raise _bad(provider, hook, f"[{i}].address", str(exc)) from None
        if entry.ipv6 is not None:
            try:
                check_ip(entry.ipv6, 6)
            except (ValueError, TypeError) as exc:
                raise _bad(provider, hook, f"[{i}].ipv6", str(exc)) from None
            try:
                check_ip(entry.address, 4)
            except ValueError as exc:
                raise _bad(provider, hook, f"[{i}].address", f"the IPv4 half of a pair: "
                           f"{exc}") from None
        out.append(entry)
    return out


def check_inventory(provider: str, inventory: object) -> Inventory:
    hook = "node_inventory"
    if not isinstance(inventory, Inventory):
        raise _bad(provider, hook, "", f"expected an Inventory, got {inventory!r}")
    if not isinstance(inventory.max_interfaces, int) or inventory.max_interfaces < 1:
        raise _bad(provider, hook, "max_interfaces",
                   f"must be a whole number >= 1, got {inventory.max_interfaces!r}")
    if not isinstance(inventory.ips_per_interface, int) or inventory.ips_per_interface < 0:
        raise _bad(provider, hook, "ips_per_interface",
                   f"must be a whole number >= 0, got {inventory.ips_per_interface!r}")
    seen: dict[str, str] = {}
    ids: set[str] = set()
    for i, itf in enumerate(inventory.interfaces):
        if not itf.id or itf.id in ids:
            raise _bad(provider, hook, f"interfaces[{i}].id",
                       f"missing or repeated interface id {itf.id!r}")
        ids.add(itf.id)
        for j, ip in enumerate(itf.ips):
            try:
                check_ip(ip)
            except (ValueError, TypeError) as exc:
                raise _bad(provider, hook, f"interfaces[{i}].ips[{j}]", str(exc)) from None
            if ip in seen:
                raise _bad(provider, hook, f"interfaces[{i}].ips[{j}]",
                           f"{ip} is also on {seen[ip]}")
            seen[ip] = itf.id
        for j, ip in enumerate(itf.ipv6):
            try:
                check_ip(ip, 6)
            except (ValueError, TypeError) as exc:
                raise _bad(provider, hook, f"interfaces[{i}].ipv6[{j}]", str(exc)) from None
            if ip in seen:
                raise _bad(provider, hook, f"interfaces[{i}].ipv6[{j}]",
                           f"{ip} is also on {seen[ip]}")
            seen[ip] = itf.id
    return inventory


def check_findings(provider: str, found: object) -> tuple[NodeFinding, ...]:
    """What ``podnet_node_check`` answered, checked, in order, each finding once."""
    if found is None:
        return ()  # no plugin checks this provider's nodes
    if isinstance(found, str | bytes) or not isinstance(found, Sequence):
        raise ProviderError(ErrorKind.FATAL, f"provider {provider!r}: node_check answered "
                            f"{type(found).__name__}, not a sequence of NodeFinding")
    for i, finding in enumerate(found):
        if not isinstance(finding, NodeFinding) or not finding.reason:
            raise ProviderError(ErrorKind.FATAL, f"provider {provider!r}: node_check[{i}] "
                                f"is not a NodeFinding with a reason: {finding!r}")
    return tuple(dict.fromkeys(found))
