"""A node's pool as the cloud and the records have it: the service the node pool
reconciler, a node's leave and the garbage collector share (none of them takes another).

- :meth:`PoolService.inventory`: what the provider says the node has;
- :meth:`PoolService.rebuild`: the pool rebuilt from the inventory (what exists), the
  records (who owns it: :meth:`~podnet.core.ledger.Ledger.rebuild_owner` breaks a tie)
  and the last recorded pool (which idle addresses were podnet's);
- :meth:`PoolService.status` and :meth:`PoolService.write`: the pool as the NodeNetwork's
  status says it, and the write that records it;
- :meth:`PoolService.eni`: an interface moved through the ENI machine.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from random import Random
from typing import TypeVar, overload

import attrs

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.cluster.port import NODE_NETWORK, Conflict, NotFound
from podnet.core.drift import LostAddresses
from podnet.core.enqueue import Enqueuer
from podnet.core.errors import ErrorKind, ProviderError
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger
from podnet.core.machines import DELETED, ENI_MACHINE, recorded_as, state_of
from podnet.core.models import (
    Condition,
    InterfaceState,
    InterfaceStatus,
    IpStatus,
    NodeInfo,
    NodeNetwork,
    Phase,
    PodNetwork,
    set_condition,
)
from podnet.core.pool import Interface, NodePool
from podnet.core.records import RecordWriter
from podnet.core.tracing import ATTR_INTERFACE, ATTR_NODE
from podnet.core.transition import Subject, Transitions
from podnet.hookspecs.types import Inventory

log = logging.getLogger("podnet.nodepool")

T = TypeVar("T")

#: the NodeNetwork condition that says whether its pool can serve (and grow)
POOL_READY = "PoolReady"


class PoolService:
    """Takes the parts it uses: the caches, the writer of the NodeNetworks and Events,
    the queue (waiters woken by a rebuild), the provider gateway, the transition runner
    (the ENI machine), where lost addresses are said, the clock and a seeded random
    source (jitter of a leave's waits)."""

    def __init__(self, *, caches: Caches, records: RecordWriter, enqueue: Enqueuer,
                 gateway: ProviderGateway, transitions: Transitions, lost: LostAddresses,
                 clock: Clock, random: Random) -> None:
        self.caches = caches
        self.records = records
        self.enqueue = enqueue
        self.gateway = gateway
        self.transitions = transitions
        self.lost = lost
        self.clock = clock
        self.random = random
        #: node name -> the Node as last seen while it was in the cluster: who the
        #: provider is told about when the node has left (else what its record says)
        self.last_seen: dict[str, NodeInfo] = {}
        #: node -> when (monotonic) its pool first differed from its record unwritten: a
        #: busy pool's changes coalesce into one write
        self.unwritten: dict[str, float] = {}

    def inventory(self, node: NodeInfo, nn: NodeNetwork | None, provider: str) -> Inventory:
        ctx = self.caches.context(node, nn)
        inventory = self.gateway.node_inventory(provider, ctx)
        if inventory is None:
            raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} gave no inventory")
        return inventory


    def rebuild(self, node: NodeInfo, nn: NodeNetwork | None, provider: str, pool: NodePool,
                 inventory: Inventory | None = None, *, leaving: bool = False,
                 cooldown: float = 0.0) -> None:
        """Inventory (what exists) + records (who owns it) + last pool (what was idle).

        ``leaving``: the node left the cluster; every address of the inventory no record
        owns is the pool's (to give back: nothing will hand it out), and no record is
        said to have lost its address (they are all released).

        Every address on an interface the provider made for the pool
        (``CloudInterface.made``) is podnet's: one the last recorded pool does not list
        (on an interface made, or grown, by a run that died before writing the pool) is
        no suspect. It may have been handed out before the death, its record then removed
        by hand (a pool's write waits while pods wait): it is idle after ``cooldown``
        (the policy's reuse cooldown), as a running pool gives back the address of a
        record removed by hand."""
        if inventory is None:
            inventory = self.inventory(node, nn, provider)
        recorded_interfaces = nn.status.interfaces if nn is not None else ()
        #: who the last recorded pool says owns each address, where an older podnet wrote
        #: owners (this one writes none): a tie-break among records without a seal
        recorded_owner = {ip.address: ip.owner for itf in recorded_interfaces
                          for ip in itf.ips if ip.owner}
        #: and the IPv4 each IPv6 was paired with (dual stack): what a hand edit of
        #: status.ip contradicts
        recorded_pairs = {ip.ipv6: ip.address for itf in recorded_interfaces
                          for ip in itf.ips if ip.ipv6}
        claims: dict[str, list[PodNetwork]] = {}
        for pn in self.caches.pod_networks.by_index("node", node.name):
            if pn.spec.provider == provider and pn.status.ip and pn.status.phase in (
                Phase.ALLOCATED, Phase.ROUTED, Phase.RELEASING,
            ):
                claims.setdefault(pn.status.ip, []).append(pn)
        owners: dict[str, str] = {}
        #: IPv4 -> IPv6 as the records pair them (dual stack): pod networks first
        pairs: dict[str, str] = {}
        #: IPv6 halves named by records that lost their IPv4 to another record (IPv6 ->
        #: the record): in use by their pod until it is re-addressed, so neither handed
        #: out nor given back
        held6: dict[str, str] = {}
        for address, named in claims.items():
            winner = Ledger.rebuild_owner(named, recorded_owner.get(address),
                                          recorded_pairs)
            owners[address] = winner.key
            if winner.status.ipv6:
                pairs[address] = winner.status.ipv6
            for pn in named:
                if pn is winner:
                    continue
                log.error("address %s recorded by %s and %s", address, winner.key, pn.key)
                self.records.event(pn, "DuplicateAddress",
                                   f"address {address} is also recorded by {winner.key}")
                if pn.status.ipv6:
                    held6[pn.status.ipv6] = pn.key
        pooled = {ip.address for itf in recorded_interfaces for ip in itf.ips}
        named6 = set(pairs.values())
        for itf_status in recorded_interfaces:
            for ip in itf_status.ips:
                if ip.ipv6:
                    pooled.add(ip.ipv6)
                    if ip.address not in pairs and ip.ipv6 not in named6:
                        pairs[ip.address] = ip.ipv6  # the last recorded pool's pairs
        cooling = {ip for itf in inventory.interfaces if itf.made and itf.pooled
                   for ip in (*itf.ips, *itf.ipv6)} - pooled
        if leaving:
            pooled |= set(inventory.all_ips()) | set(inventory.all_ipv6())
            cooling = set()  # given back, never handed out
        now = self.clock.monotonic()
        # a node that left: each such half is its record's in the pool, and goes back with
        # it (as a suspect it would stay on the machine: no GC looks at the node again)
        lost = pool.rebuild(inventory, owners, pooled | cooling, now, pairs,
                            () if leaving else held6, owned6=held6 if leaving else None,
                            cooling=cooling, cooling_until=now + cooldown)
        pool.resume(recorded_interfaces, now, self.clock.now())
        if not leaving:
            self.lost.report(lost)
            self.enqueue.wake(dict(pool.waiting))


    def status(self, pool: NodePool) -> tuple[InterfaceStatus, ...]:
        """The pool as the record's ``status.interfaces`` says it."""
        mono, wall = self.clock.monotonic(), self.clock.now()
        with pool.lock:
            by_itf: dict[str | None, list[IpStatus]] = {}
            for a in sorted(pool.addresses.values(), key=lambda a: a.address):
                # no owner: the PodNetworks name theirs, and listing them here cost the
                # node's record a write after each change (two a node for a pod's life)
                by_itf.setdefault(a.interface, []).append(
                    IpStatus(address=a.address, subnet=a.subnet, ipv6=a.ipv6))
            interfaces = []
            for itf in pool.interfaces.values():
                until = None
                if itf.inhibited_until > mono:
                    until = wall + timedelta(seconds=itf.inhibited_until - mono)
                interfaces.append(InterfaceStatus(
                    id=itf.id, state=itf.state, mac=itf.mac, subnet=itf.subnet,
                    primary=itf.primary, trunk=itf.trunk, ips=tuple(by_itf.get(itf.id, ())),
                    pooled=itf.pooled,
                    inhibited_until=until.replace(microsecond=0) if until else None,
                ))
        return tuple(interfaces)


    def write(self, nn: NodeNetwork, pool: NodePool,
               interfaces: tuple[InterfaceStatus, ...] | None = None) -> None:
        wall = self.clock.now()
        if interfaces is None:
            interfaces = self.status(pool)
        current = self.caches.node_networks.get(nn.metadata.name) or nn
        if (current.status.last_inventory_sync is not None
                and current.status.interfaces == interfaces):
            self.unwritten.pop(nn.metadata.name, None)
            return  # the record says it already (a restart's rebuild, mostly): no write
        conditions = current.status.conditions
        if pool.last_error is None and not any(c.type == POOL_READY for c in conditions):
            # the first pool write says the pool serves, in the same write: `kubectl wait
            # --for=condition=PoolReady` returns (a problem is _report's, with its Event)
            conditions = set_condition(conditions, Condition(
                type=POOL_READY, status="True", reason="Ready", last_transition_time=wall,
                observed_generation=current.metadata.generation))
        status = attrs.evolve(nn.status, interfaces=interfaces, last_inventory_sync=wall,
                              conditions=conditions)
        try:
            self.records.update_status(NODE_NETWORK, attrs.evolve(current, status=status))
        except (Conflict, NotFound):
            self.enqueue.node(nn.metadata.name)  # written again from a fresh read
            return
        self.unwritten.pop(nn.metadata.name, None)


    @overload
    def eni(self, node: NodeInfo, provider: str, itf: Interface, trigger: str) -> None: ...

    @overload
    def eni(self, node: NodeInfo, provider: str, itf: Interface, trigger: str,
             action: Callable[[], T]) -> T: ...

    def eni(self, node: NodeInfo, provider: str, itf: Interface, trigger: str,
             action: Callable[[], T] | None = None) -> T | None:
        """Fire ``trigger`` on ``itf``, running ``action`` (the provider call) first; the
        interface's state follows. Raises what failed, the state unchanged."""
        source = state_of(itf.state)
        subject = Subject(key=f"{node.name}/{itf.id}", provider=provider, state=source,
                          span_attributes={ATTR_NODE: node.name, ATTR_INTERFACE: itf.id})
        result = self.transitions.run(ENI_MACHINE, subject, trigger,
                                      lambda _span: action() if action is not None else None)
        dest = ENI_MACHINE.target(trigger, source)
        if dest != DELETED:
            itf.state = recorded_as(InterfaceState, dest)
        return result

