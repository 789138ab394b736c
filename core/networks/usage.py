"""Who holds which addresses of each provider, as the records say, and what that makes
of each Subnet and IPPool: its counts, the records holding an address it excludes or no
longer contains, whether any record holds one of its addresses.

A record holds address A in Subnet S when its provider is S's provider and A is in S's
block (:data:`~podnet.core.networks` plan). :class:`Usage` is fed every record change by
the engine (a dict update each; no scan), and counts a Subnet only when its status is
written (at most once a second).
"""

from __future__ import annotations

import functools
import ipaddress
import threading
from collections.abc import Iterable, Mapping

import attrs

from podnet.core.models import PodNetwork
from podnet.core.networks.checks import pool_ranges
from podnet.core.networks.wire import HeldAddress
from podnet.hookspecs.networks import IPNetwork, IPPoolInfo, SubnetInfo, address_range

#: at most this many records are listed in ``outsideIPs``
OUTSIDE_LISTED = 50
#: at most this many held addresses are listed in an IPPool's status
HELD_LISTED = 256


def addresses_of(pn: PodNetwork) -> tuple[str, ...]:
    status = pn.status
    return tuple(a for a in (status.ip, status.ipv6) if a)


@attrs.frozen
class Outside:
    """A record holding an address its Subnet excludes or no longer contains."""

    record: str
    address: str
    subnet: str
    why: str  # "excluded" | "outside cidrBlock"

    @property
    def line(self) -> str:
        return f"{self.record} {self.address} {self.why}"


@attrs.frozen
class SubnetUsage:
    #: per family (4, 6): available, using, reserved, excluded
    counts: Mapping[int, tuple[int, int, int, int]]
    holders: tuple[tuple[str, str], ...]  # (record key, address), sorted
    outside: tuple[Outside, ...]


class Usage:
    """Per provider, each record's addresses; and which Subnet each record was last
    counted in (a narrowed-away address is reported against the Subnet it was in)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_provider: dict[str, dict[str, tuple[str, ...]]] = {}
        #: record key -> the Subnet its address was last found in
        self.last_subnet: dict[str, str] = {}

    def track(self, provider: str, records: Iterable[PodNetwork]) -> bool:
        """Start keeping ``provider``'s holders (its first Subnet came), from ``records``
        (every cached record). :return: whether it was new."""
        with self._lock:
            if provider in self.by_provider:
                return False
            self.by_provider[provider] = {}
        for pn in records:
            if pn.spec.provider == provider:
                self.update(None, pn)
        return True

    def update(self, old: PodNetwork | None, new: PodNetwork | None) -> str | None:
        """A record changed: the provider whose usage changed, or None. Only providers
        with Subnet objects are kept (:meth:`track`)."""
        pn = new or old
        if pn is None:
            return None
        key = pn.key
        after = addresses_of(new) if new is not None else ()
        provider = pn.spec.provider
        with self._lock:
            if old is not None and new is not None and old.spec.provider != provider:
                self.by_provider.get(old.spec.provider, {}).pop(key, None)
            held = self.by_provider.get(provider)
            if held is None:
                return None
            before = held.get(key, ())
            if new is None:
                self.last_subnet.pop(key, None)
            if before == after:
                return None
            if after:
                held[key] = after
            else:
                held.pop(key, None)
        return provider

    def holders(self, provider: str) -> list[tuple[str, tuple[str, ...]]]:
        with self._lock:
            return list(self.by_provider.get(provider, {}).items())

    def subnet_usage(self, subnet: SubnetInfo, others: Iterable[SubnetInfo], *,
                     serving: bool = True) -> SubnetUsage:
        """Counts, holders and outside records of ``subnet`` (``others``: the provider's
        other Subnets, which a narrowed-away address may have moved into). A Subnet
        refused for overlapping another (``serving`` False) never served the addresses
        in its block: it is counted, but reports none outside and claims none."""
        nets: dict[int, IPNetwork] = {n.version: n for n in subnet.networks()}
        blocks = {v: (int(n.network_address), int(n.broadcast_address))
                  for v, n in nets.items()}
        excluded = [(lo.version, int(lo), int(hi))
                    for lo, hi in (address_range(e) for e in subnet.excluded)]
        other_blocks = [(n.version, int(n.network_address), int(n.broadcast_address))
                        for o in others if o.name != subnet.name for n in o.networks()]
        reserved = {v: _reserved(net, subnet.gateway(v)) for v, net in nets.items()}
        using: dict[int, int] = {4: 0, 6: 0}
        holders: list[tuple[str, str]] = []
        outside: list[Outside] = []
        last_subnet, name = self.last_subnet, subnet.name
        for key, addresses in self.holders(subnet.provider):
            for address in addresses:
                v, n = _parsed(address)
                block = blocks.get(v)
                if block is not None and block[0] <= n <= block[1]:
                    holders.append((key, address))
                    if not serving:
                        if n not in reserved[v]:
                            using[v] += 1
                        continue
                    last_subnet[key] = name
                    if excluded and any(w == v and lo <= n <= hi for w, lo, hi in excluded):
                        outside.append(Outside(key, address, name, "excluded"))
                    elif n not in reserved[v]:
                        using[v] += 1
                elif (serving and last_subnet.get(key) == name
                      and not any(w == v and lo <= n <= hi for w, lo, hi in other_blocks)):
                    holders.append((key, address))
                    outside.append(Outside(key, address, name, "outside cidrBlock"))
        counts: dict[int, tuple[int, int, int, int]] = {}
        for v, net in nets.items():
            total = net.num_addresses
            res = len(reserved[v])
            exc = _excluded_count(net, [(lo, hi) for w, lo, hi in excluded if w == v],
                                  reserved[v])
            held_excluded = sum(1 for o in outside if o.why == "excluded"
                                and _parsed(o.address)[0] == v)
            counts[v] = (max(total - res - exc - using[v], 0), using[v] + held_excluded,
                         res, exc)
        holders.sort(key=lambda h: h[0])
        outside.sort(key=lambda o: (o.record, o.address))
        return SubnetUsage(counts=counts, holders=tuple(holders), outside=tuple(outside))

    def pool_usage(self, pool: IPPoolInfo, provider: str, subnet: SubnetInfo | None
                   ) -> tuple[dict[int, tuple[int, int]], tuple[HeldAddress, ...]]:
        """Per family (available, using) and the held addresses, sorted by address."""
        ranges = pool_ranges(pool)
        held: list[tuple[int, str, str]] = []
        for key, addresses in self.holders(provider):
            for address in addresses:
                version, n = _parsed(address)
                if any(v == version and lo <= n <= hi for v, lo, hi in ranges):
                    held.append((version, address, key))
        counts = {}
        for v in sorted({r[0] for r in ranges}):
            size = sum(hi - lo + 1 for w, lo, hi in _merged(ranges) if w == v)
            blocked = 0
            if subnet is not None:
                net = subnet.network(v)
                if net is not None:
                    blocked = sum(1 for r in _reserved(net, subnet.gateway(v))
                                  if any(w == v and lo <= r <= hi for w, lo, hi in ranges))
            using = sum(1 for h in held if h[0] == v)
            counts[v] = (max(size - using - blocked, 0), using)
        held.sort(key=lambda h: _parsed(h[1]))
        return counts, tuple(HeldAddress(ip=a, pod_network=k) for _, a, k in held)


@functools.lru_cache(maxsize=1 << 17)
def _parsed(address: str) -> tuple[int, int]:
    """An address's family and integer value, parsed once (every status write of a busy
    Subnet reads every record's address again)."""
    ip = ipaddress.ip_address(address)
    return ip.version, int(ip)


def _reserved(net: ipaddress.IPv4Network | ipaddress.IPv6Network, gateway: str | None
              ) -> set[int]:
    """Network, broadcast (IPv4) and gateway: never a pod's."""
    out = set()
    if net.num_addresses > 2:
        out.add(int(net.network_address))
        if net.version == 4:
            out.add(int(net.broadcast_address))
    if gateway:
        out.add(int(ipaddress.ip_address(gateway)))
    return out


def _merged(ranges: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for v, lo, hi in sorted(ranges):
        if out and out[-1][0] == v and lo <= out[-1][2] + 1:
            out[-1] = (v, out[-1][1], max(out[-1][2], hi))
        else:
            out.append((v, lo, hi))
    return out


def _excluded_count(net: ipaddress.IPv4Network | ipaddress.IPv6Network,
                    ranges: list[tuple[int, int]], reserved: set[int]) -> int:
    """Addresses of ``ranges`` (clipped to the block, merged) that are not reserved."""
    first, last = int(net.network_address), int(net.broadcast_address)
    merged = _merged([(0, max(lo, first), min(hi, last)) for lo, hi in ranges
                      if hi >= first and lo <= last])
    total = sum(hi - lo + 1 for _, lo, hi in merged)
    total -= sum(1 for r in reserved if any(lo <= r <= hi for _, lo, hi in merged))
    return total
