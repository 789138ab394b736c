"""The allocate path of a pod network: an address asked of its provider (through its
node's pool where it has one), claimed in the ledger before any record names it, and
written together with the route that follows (one status write for both)."""

from __future__ import annotations

import functools
import ipaddress
import logging
from collections.abc import Callable
from typing import Any

import attrs

from podnet.core.caches import NamespaceInfo, namespace_info
from podnet.core.cluster.port import NAMESPACE, POD_NETWORK, Conflict, NotFound
from podnet.core.errors import ErrorKind, PodnetError, PoolEmpty, ProviderError
from podnet.core.ledger import Claim, address_seal
from podnet.core.models import Phase, PodInfo, PodNetwork, Route
from podnet.core.networks.select import Choice
from podnet.core.objects import namespace_annotations
from podnet.core.pool import Reservation
from podnet.core.reconcile.podnetwork_steps import WAIT_RECHECK, PodNetworkSteps
from podnet.core.resolve import resolve
from podnet.core.tracing import TransitionSpan
from podnet.core.values import evolve
from podnet.hookspecs.networks import SubnetInfo
from podnet.hookspecs.types import AddressSpace, AllocateContext, Allocation, NodeContext

log = logging.getLogger("podnet.podnetwork")


@attrs.frozen
class Unwritten:
    """An allocation made and not written yet: the record as the Routed write (or a
    failed route's condition) writes it, and what follows once a write carries it."""

    record: PodNetwork
    #: a write naming the allocation landed (the record as written)
    recorded: Callable[[PodNetwork], None]
    #: no write carried it: (the failure, whether a write was sent) undoes the claims
    not_recorded: Callable[[BaseException, bool], None]
    #: the node as the allocation was made on it: its route is told the same
    node: NodeContext | None = None


class AllocatePath(PodNetworkSteps):
    """Allocate a Pending record; route an allocation not written yet."""

    def _namespace_annotations(self, namespace: str) -> dict[str, str]:
        """The namespace's ``podnet.io/`` annotations. A namespace the cache has not seen
        yet (created a moment before its pod) is read from the API server: its annotations
        may pick the pod's subnet, and an address is never moved once given."""
        cached = self.caches.namespaces.get(namespace)
        if cached is not None or not namespace:
            return cached.annotations if cached is not None else {}
        try:
            return namespace_annotations(self.records.cluster.get(NAMESPACE, namespace))
        except NotFound:
            return {}  # gone, and its pods with it

    def _namespace_view(self, namespace: str) -> NamespaceInfo:
        """The namespace's annotations and labels, read as :meth:`_namespace_annotations`
        reads them."""
        cached = self.caches.namespaces.get(namespace)
        if cached is not None or not namespace:
            return cached or NamespaceInfo()
        try:
            return namespace_info(self.records.cluster.get(NAMESPACE, namespace))
        except NotFound:
            return NamespaceInfo()

    def _allocate(self, pn: PodNetwork, pod: PodInfo, choice: Choice | None = None
                  ) -> PodNetwork | Unwritten:
        """Allocate an address for a Pending record: the record as it was when nothing
        was allocated (it waits), or the allocation, not written yet: the route's write
        records it (:meth:`_route_unwritten`), one status write for both."""
        provider = pn.spec.provider
        key = pn.key
        info = self.placement.providers[provider]
        node_ctx = self.caches.node_context(pn.spec.node_name)
        if not self.caches.namespaces.has_synced:
            # the namespace's annotations may choose the address, and an address is never
            # moved later: wait for them (the cache's first list wakes this record)
            return pn
        reservation: Reservation | None = None
        # a namespace's IPPool object chooses among its members: no idle address will do
        takes_any = self._takes_any(pn) and (choice is None or choice.ip_pool is None)
        if info.uses_node_pool:
            pool = self.pools.get(provider, pn.spec.node_name)
            if not pool.synced:
                # the pool is rebuilt from inventory + records before any allocation
                pool.wait_for_address(key, pool.waiting.get(key),
                                      self.clock.monotonic(), queued=takes_any)
                self.enqueue.node(pn.spec.node_name)
                return pn
            if takes_any:
                # nothing a plain request could take: wait for the node's pass to grow
                # the pool and wake it, without a transition (no span, no provider call,
                # no write). Its turn comes in the order it arrived
                subnet = pool.waiting.get(key)
                if not pool.serves_next(key, subnet, self.clock.monotonic()):
                    self._wait(pn, pool, subnet, queued=True,
                               why=f"no idle address{f' in subnet {subnet}' if subnet else ''}"
                                   f" on node {pool.node}")
                    return pn
            subnet_obj = choice.subnet if choice is not None else None
            reservation = self.ledger.reserve(
                pool, key, self.clock.monotonic(), prefer=self._prefer.get(key),
                refuse=None if subnet_obj is None else functools.partial(_kept_from,
                                                                         subnet_obj))
            traced = self._first_trace.get(key)
            if traced is not None and not pn.status.traceparent:
                pn = attrs.evolve(pn, status=attrs.evolve(pn.status, traceparent=traced))
        ctx = AllocateContext(pod_network=pn, node=node_ctx, pod=pod, pool=reservation,
                              namespace_annotations=self._namespace_annotations(
                                  pn.metadata.namespace or ""),
                              subnet=choice.subnet if choice is not None else None,
                              ip_pool=choice.ip_pool if choice is not None else None,
                              network_policies=self._policies_of(pn, pod))
        claims: list[Claim] = []
        given: list[str] = []

        def allocate(span: TransitionSpan) -> PodNetwork:
            answer = self._take_back(pn, ctx, reservation)
            if answer is None:
                answer = self._ask(ctx, reservation)
            if answer is None:
                raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} did not allocate")
            allocation = answer
            claims.append(self._claim(pn, allocation, reservation))
            given.append(allocation.ip)
            # sealed in the write that names the addresses: the restart's tie-break's
            # evidence of who podnet gave them to, never behind the record
            seal = address_seal(pn.metadata.uid, allocation.ip, allocation.ipv6)
            return self._phase_record(pn, Phase.ALLOCATED, span, ip=allocation.ip,
                                      ipv6=allocation.ipv6, address_seal=seal,
                                      mac=allocation.mac,
                                      subnet=allocation.subnet, gateway=allocation.gateway,
                                      interface=allocation.interface,
                                      **pod_interface_fields(allocation))

        def not_allocated(exc: BaseException, written: bool = False) -> None:
            # ``written``: a write naming the address was sent. One whose answer was lost
            # may have landed: the address stays with this record until a later write
            # proves otherwise (a 409 or 404 proves it did not)
            maybe_written = written and not isinstance(exc, Conflict | NotFound)
            if not maybe_written:
                for claim in reversed(claims):
                    claim.undo()
                if reservation is not None:
                    reservation.rollback()
            elif given:
                # asking again, it is handed the address it holds, not one more idle one
                # (each unanswered try held another, until they filled the node and the
                # record waited for ever for one more)
                self._prefer[key] = given[-1]
            if reservation is not None and not isinstance(exc, PoolEmpty):
                # not waiting for the pool (that is PoolEmpty's answer): a stale waiter
                # would keep the node's idle addresses from ever being trimmed, and a
                # static address may need that room on an interface (the queue retries)
                self.pools.get(provider, pn.spec.node_name).stop_waiting(pn.key)

        updated = self._run(pn, "allocate", allocate, undo=not_allocated)
        if updated is None:
            return pn
        return Unwritten(updated, functools.partial(self._allocation_recorded, reservation),
                         not_allocated, node_ctx)

    def _allocation_recorded(self, reservation: Reservation | None, updated: PodNetwork
                             ) -> None:
        """A write naming the allocation landed: what earlier, unanswered writes held for
        the record is free, and the pool knows the address the record names."""
        key = updated.key
        self._prefer.pop(key, None)
        self._first_trace.pop(key, None)
        self.ledger.recorded(updated, reservation)

    def _route_unwritten(self, allocated: Unwritten, pod: PodInfo) -> PodNetwork:
        """Route an allocation not written yet: the Routed write records the address and
        the route at once. A failed route records the address with its Ready=False
        condition (:meth:`_failed`); when no write named it for certain, the claims are
        undone."""
        staged = allocated.record
        try:
            routed = self._route(staged, pod, allocated.node)
        except BaseException as exc:
            current = self.caches.pod_networks.get(staged.key)
            if (current is not None and current.status.phase is Phase.ALLOCATED
                    and current.status.ip == staged.status.ip
                    and current.metadata.resource_version != staged.metadata.resource_version):
                allocated.recorded(current)  # the failure's condition write carried it
            else:
                # a 409 or 404 on the write proves it did not land; anything else may have
                allocated.not_recorded(exc.__cause__ if isinstance(exc.__cause__, NotFound)
                                       else exc, True)
            raise
        if routed is staged:
            # not routed and nothing written (a wait): the allocation is recorded now
            routed = self.records.update_status(POD_NETWORK, staged)
        allocated.recorded(routed)
        return routed

    def _take_back(self, pn: PodNetwork, ctx: AllocateContext,
                   reservation: Reservation | None) -> Allocation | None:
        """The address this pod network had, asked for as a static address where the pool
        does not hold it (the cloud lost it): the pod keeps its address where the cloud
        gives it back. None when it did not (a new address follows) or nothing is due."""
        prefer = self._prefer.get(pn.key)
        req = pn.spec.requests
        if prefer is None or req.ip_address or req.ip_pool or req.subnets:
            return None
        pool = self.pools.find(pn.spec.provider, pn.spec.node_name)
        if reservation is not None and pool is not None and prefer in pool.addresses:
            return None  # in the pool: the reservation hands it out first
        asked = attrs.evolve(pn, spec=attrs.evolve(pn.spec, requests=attrs.evolve(
            req, ip_address=prefer)))
        try:
            answer = self._ask(attrs.evolve(ctx, pod_network=asked), reservation)
        except (PodnetError, ProviderError) as exc:
            log.info("%s: address %s not taken back: %s", pn.key, prefer, exc)
            answer = None
        if answer is None or answer.ip != prefer:
            self._prefer.pop(pn.key, None)
            if reservation is not None:
                reservation.rollback()
            return None
        return answer

    def _ask(self, ctx: AllocateContext, reservation: Reservation | None) -> Allocation | None:
        """The provider's allocation for ``ctx``; a pool provider's request is resolved
        against the node's pool first (core's checks and messages, the same for all)."""
        pn = ctx.pod_network
        provider = pn.spec.provider
        if reservation is not None:
            node = ctx.node

            def space() -> AddressSpace | None:
                return self.gateway.address_space(provider, node)

            requests = pn.spec.requests
            if ctx.ip_pool is not None and requests.ip_address is None:
                # an IPPool object: its members are the address list the pool path reads
                requests = attrs.evolve(requests, ip_pool=tuple(ctx.ip_pool.members()))
            ctx = evolve(ctx, request=resolve(
                requests, owner=pn.key, node=pn.spec.node_name, provider=provider,
                pool=reservation, space=space))
        return self.gateway.allocate(provider, ctx)

    def _claim(self, pn: PodNetwork, allocation: Allocation,
               reservation: Reservation | None) -> Claim:
        """The ledger makes the answer this record's before it is written (the second of
        two racing records is refused there); an address the pool thought idle is held
        off for the reuse cooldown (at least until the next look at a waiting record)."""
        def hold_off_until() -> float:
            policy = self.placement.policy(pn.spec.provider)
            return self.clock.monotonic() + max(policy.reuse_cooldown, WAIT_RECHECK)

        return self.ledger.claim(pn, allocation, reservation, hold_off_until=hold_off_until)


def pod_interface_fields(allocation: Allocation) -> dict[str, Any]:
    """What the pod's interface needs beside its address, as the record's status keeps
    it: the prefix length (the allocation's, else its CIDR's, else a host route's), the
    IPv6 half's, the routes (a default route via the gateway when the provider names
    none) and the MTU."""
    prefix = allocation.prefix_length
    if prefix is None and allocation.cidr:
        prefix = ipaddress.ip_network(allocation.cidr, strict=False).prefixlen
    if prefix is None:
        prefix = 32
    routes = allocation.routes
    if not routes and allocation.gateway:
        routes = (Route(dst="0.0.0.0/0", gw=allocation.gateway),)
    v6_prefix = allocation.ipv6_prefix_length
    if v6_prefix is None and allocation.ipv6:
        v6_prefix = 128
    return {"prefix_length": prefix, "ipv6_prefix_length": v6_prefix,
            "ipv6_gateway": allocation.ipv6_gateway, "routes": tuple(routes),
            "mtu": allocation.mtu}


def _kept_from(subnet: SubnetInfo, address: str) -> bool:
    """Whether a pod network on ``subnet`` must not be handed ``address``: one of its
    excludeIPs, or its gateway (a cloud may have put either on the node)."""
    return address in subnet.gateways or subnet.excludes(address)
