"""A pod network's address request resolved against its node's pool, once for every
pool provider.

The pod's ``podnet.io/ip-address``, ``ip-pool`` and ``subnets`` (its record's
``spec.requests``) are checked here, with one set of owner checks and one set of
messages: each refusal is an :class:`InvalidRequest` naming the annotation and the node,
subnet or record concerned. The provider supplies only what is its own: which subnets it
serves on the node (``podnet_address_space``) and, in ``podnet_allocate``, the cloud call
that adds a requested address the pool does not hold yet.

A plain request (none of the three) takes the next idle address and never asks the
provider for its address space.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from podnet.core.annotations import IP_ADDRESS, IP_POOL, SUBNETS, annotation_field, is_ip
from podnet.core.errors import InvalidRequest, PoolEmpty
from podnet.core.models import NetworkRequest
from podnet.core.pool import reserved_reason
from podnet.hookspecs.types import AddressSpace, PoolEntry, PoolView, ResolvedRequest, Subnet

STATIC_FIELD = annotation_field(IP_ADDRESS)
POOL_FIELD = annotation_field(IP_POOL)
SUBNETS_FIELD = annotation_field(SUBNETS)


def resolve(request: NetworkRequest, *, owner: str, node: str, provider: str,
            pool: PoolView, space: Callable[[], AddressSpace | None]) -> ResolvedRequest:
    """Reserve the pool entry ``request`` asks for, or name the requested address the
    provider must add itself.

    :param owner: the pod network's key (``namespace/name``)
    :param space: reads the provider's address space on the node (called only for a
        request that needs it; ``None``: the provider serves plain requests only)
    :raise InvalidRequest: what the request asks for cannot be served (not retried)
    :raise PoolEmpty: nothing idle fits yet (the pool grows; the pod network waits)
    """
    if request.ip_address is None and not request.ip_pool and not request.subnets:
        return ResolvedRequest(entry=pool.take())
    served = space() or AddressSpace(static=False, ip_pools=False)
    r = _Resolver(request, owner, node, provider, pool, served)
    wanted = r.wanted_subnets()
    if request.ip_address is not None:
        return r.static(request.ip_address, wanted)
    if request.ip_pool:
        return r.from_ip_pool(request.ip_pool, wanted)
    return r.from_subnets(wanted)


class _Resolver:
    def __init__(self, request: NetworkRequest, owner: str, node: str, provider: str,
                 pool: PoolView, space: AddressSpace) -> None:
        self.request = request
        self.owner = owner
        self.node = node
        self.provider = provider
        self.pool = pool
        self.space = space

    # --- subnets ---------------------------------------------------------------------------

    def wanted_subnets(self) -> tuple[Subnet, ...]:
        """The requested subnets the provider serves on the node, in the pod's order;
        subnets it does not serve are passed over, as long as one is left."""
        asked = self.request.subnets
        if not asked:
            return ()
        wanted = tuple(s for s in (self.space.subnet(a) for a in asked) if s is not None)
        if not wanted:
            raise InvalidRequest(SUBNETS_FIELD, f"none of {', '.join(asked)} is served on "
                                 f"node {self.node} (served: {self._served()})")
        return wanted

    def _served(self) -> str:
        return ", ".join(f"{s.id} ({s.cidr})" if s.cidr and s.cidr != s.id else s.id
                         for s in self.space.subnets) or "none"

    def subnet_of(self, entry: PoolEntry) -> Subnet | None:
        """The subnet of a pool entry: the one it names, else the one holding it."""
        return self.space.subnet(entry.subnet) or (
            self.space.subnet_of(entry.address) if entry.subnet is None else None)

    def _idle_in(self, subnet: Subnet) -> PoolEntry | None:
        """An idle entry of ``subnet``: by the id the pool knows it by, else (entries
        whose subnet the inventory did not say) by its CIDR."""
        if self.pool.idle(subnet.id):
            return self.pool.take(subnet=subnet.id)
        for entry in self.pool.idle():
            if entry.subnet is None and self.subnet_of(entry) == subnet:
                return self.pool.take(entry.address)
        return None

    def from_subnets(self, wanted: Sequence[Subnet]) -> ResolvedRequest:
        for subnet in wanted:
            entry = self._idle_in(subnet)
            if entry is not None:
                return ResolvedRequest(entry=entry, subnet=subnet, field=SUBNETS_FIELD)
        # the pool grows where there is most room, as far as the provider knows
        best = max(wanted, key=lambda s: s.free if s.free is not None else -1)
        raise PoolEmpty(f"no idle address in subnet {', '.join(s.id for s in wanted)} on "
                        f"node {self.node}", subnet=best.id)

    # --- a static address ----------------------------------------------------------------

    def _check_owner(self, address: str) -> None:
        other = self.pool.owner_of(address)
        if other is not None and other != self.owner:
            raise InvalidRequest(STATIC_FIELD, f"{address} is already used by {other}")

    def static(self, address: str, wanted: Sequence[Subnet]) -> ResolvedRequest:
        field = STATIC_FIELD
        if not self.space.static:
            raise InvalidRequest(field, f"provider {self.provider!r} does not serve fixed "
                                 "addresses")
        if "," in address:
            return self._static_pair(address, wanted)
        subnet = self.space.subnet_of(address)
        if subnet is None:
            raise InvalidRequest(field, f"{address} is outside every subnet of node "
                                 f"{self.node} (served: {self._served()})")
        if wanted and subnet not in wanted:
            raise InvalidRequest(field, f"{address} is in subnet {subnet.id}, not in "
                                 f"{', '.join(s.id for s in wanted)}")
        reserved = reserved_reason(address, subnet.cidr, subnet.gateway)
        if reserved is not None:
            raise InvalidRequest(field, f"{reserved} (subnet {subnet.id}): not a pod address")
        self._check_owner(address)
        if any(e.address == address for e in self.pool.idle()):
            return ResolvedRequest(entry=self.pool.take(address), subnet=subnet, field=field)
        if not subnet.takes_static:
            raise InvalidRequest(field, f"{address} is not idle on node {self.node}, and "
                                 f"provider {self.provider!r} adds no requested address to "
                                 f"subnet {subnet.id}")
        return ResolvedRequest(address=address, subnet=subnet, field=field)

    def _static_pair(self, address: str, wanted: Sequence[Subnet]) -> ResolvedRequest:
        """``<IPv4>,<IPv6>``: a pair the node's pool holds idle."""
        field = STATIC_FIELD
        if not self.space.pairs:
            raise InvalidRequest(field, f"{address}: dual-stack pairs are not served by "
                                 f"provider {self.provider!r} here")
        v4, v6 = sorted((p.strip() for p in address.split(",")), key=lambda p: ":" in p)
        for entry in self.pool.idle():
            if entry.address == v4 and entry.ipv6 == v6:
                subnet = self.subnet_of(entry)
                if wanted and subnet not in wanted:
                    break
                return ResolvedRequest(entry=self.pool.take(v4), subnet=subnet, field=field)
        self._check_owner(v4)
        where = f" in subnet {', '.join(s.id for s in wanted)}" if wanted else ""
        raise InvalidRequest(field, f"{v4},{v6} is not an idle pair{where} on node "
                             f"{self.node}")

    # --- an IP pool ----------------------------------------------------------------------

    def from_ip_pool(self, candidates: Sequence[str], wanted: Sequence[Subnet]
                     ) -> ResolvedRequest:
        field = POOL_FIELD
        if len(candidates) == 1 and not is_ip(candidates[0]):
            raise InvalidRequest(field, f"named pool {candidates[0]!r} is not defined for "
                                 f"provider {self.provider!r} (give a list of addresses)")
        if not self.space.ip_pools:
            raise InvalidRequest(field, f"provider {self.provider!r} does not serve address "
                                 "pools")
        idle = {e.address: e for e in self.pool.idle()}
        for candidate in candidates:
            entry = idle.get(candidate)
            if entry is None:
                continue
            subnet = self.subnet_of(entry)
            if wanted and subnet not in wanted:
                continue
            return ResolvedRequest(entry=self.pool.take(candidate), subnet=subnet,
                                   field=field)
        where = f" in subnet {', '.join(s.id for s in wanted)}" if wanted else ""
        raise InvalidRequest(field, f"no address of the pool is idle{where} on node "
                             f"{self.node}")
