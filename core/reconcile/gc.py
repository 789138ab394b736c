"""Garbage collection: what no event will ever bring back to a reconciler's attention.

- records whose pod or node is gone are queued for their pod (level-triggered catch-all:
  a missed watch event cannot strand a record);
- nodes that left the cluster (their pool, or a NodeNetwork whose node is gone or which
  is being deleted) are queued: their node pass gives back what podnet made for them
  before the record's finalizer comes off, even when they left while no replica ran;
- each node's inventory is read again every ``gc_period``: an address the cloud has that
  no record owns and no pool holds becomes a suspect (mark), and is deleted in the cloud
  once it has stayed a suspect for ``leaked_ip_expiry`` (sweep) — unless a record turns
  out to own it, which clears it;
- every provider reports every ``gc_period`` what of its own no record owns and no
  inventory lists (``podnet_sweep``: an overlay's ports, a cloud's interfaces made and
  never attached); what stays an orphan for ``leaked_ip_expiry`` it removes.
"""

from __future__ import annotations

import logging

from podnet.core.caches import Caches, pod_key_of
from podnet.core.clock import Clock
from podnet.core.cluster.port import POD_NETWORK
from podnet.core.drift import LostAddresses
from podnet.core.enqueue import Enqueuer
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger
from podnet.core.placement import Placement
from podnet.core.pool import NodePool, Pools
from podnet.core.poolservice import PoolService
from podnet.core.reconcile.result import Result
from podnet.hookspecs.types import PoolEntry

log = logging.getLogger("podnet.gc")


class GarbageCollector:
    """Takes the parts it uses: the caches it reads, the queue, the provider gateway,
    which provider and policy serve what, the node pools, the ledger (which record names
    an address of a node), the service that reads their inventories (no controller: a
    gone node's pool is its node pass's to drop), where lost addresses are said, and the
    clock."""

    def __init__(self, *, caches: Caches, enqueue: Enqueuer, gateway: ProviderGateway,
                 placement: Placement, pools: Pools, ledger: Ledger, service: PoolService,
                 lost: LostAddresses, clock: Clock) -> None:
        self.caches = caches
        self.enqueue = enqueue
        self.gateway = gateway
        self.placement = placement
        self.pools = pools
        self.ledger = ledger
        self.service = service
        self.lost = lost
        self.clock = clock
        self.swept: int = 0
        #: monotonic time each provider was last swept (podnet_sweep)
        self._swept_at: dict[str, float] = {}
        #: provider -> orphan name -> monotonic time first reported
        self._orphans: dict[str, dict[str, float]] = {}

    def reconcile(self, _key: str) -> Result:
        for pn in self.caches.pod_networks.values():
            pod = self.caches.pods.get(f"{pn.metadata.namespace}/{pn.spec.pod_name}")
            if (pod is None or pod.uid != pn.spec.pod_uid
                    or self.caches.nodes.get(pn.spec.node_name) is None):
                self.enqueue.pod(pod_key_of(pn))
        policy = self.placement.policy
        period = min((policy(p).gc_period for p in self.placement.providers.names()),
                     default=60.0)
        for pool in self.pools.all():
            node = self.caches.nodes.get(pool.node)
            if node is None or node.deletion_timestamp is not None:
                # its node pass gives back what podnet made for it, then drops the pool
                self.enqueue.node(pool.node)
                continue
            if pool.synced:
                try:
                    self._resync(pool)
                except Exception as exc:
                    log.info("gc of node %s: %s", pool.node, exc)
        if self.caches.nodes.has_synced:
            for nn in self.caches.node_networks.values():
                name = nn.metadata.name
                node = self.caches.nodes.get(name)
                if (node is None or node.deletion_timestamp is not None
                        or nn.metadata.deletion_timestamp is not None):
                    # a node that left while no replica ran (or half way through giving
                    # back its share): its record's finalizer waits for that pass
                    self.enqueue.node(name)
        self._sweep_providers()
        return Result(requeue_after=period)

    def _sweep_providers(self) -> None:
        """``podnet_sweep`` for each provider, once its period is due (node-pool providers
        too, since 0.5.0: interfaces no inventory lists)."""
        if not self.caches.pod_networks.has_synced:
            return  # an unsynced cache would make every port look ownerless
        now = self.clock.monotonic()
        for name in self.placement.providers.names():
            policy = self.placement.policy(name)
            last = self._swept_at.get(name)
            if last is not None and now - last < policy.gc_period:
                continue
            self._swept_at[name] = now
            owners = {pn.key for pn in self.caches.pod_networks.values()
                      if pn.spec.provider == name}
            # a record that does not parse still owns
            owners |= self.caches.unreadable_keys(POD_NETWORK)
            seen = self._orphans.setdefault(name, {})
            expired = frozenset(o for o, first in seen.items()
                                if now - first >= policy.leaked_ip_expiry and o not in owners)
            try:
                found = self.gateway.sweep(name, frozenset(owners), expired)
            except Exception as exc:
                log.info("sweep of provider %s: %s", name, exc)
                continue
            orphans = set(found or ())
            for item in sorted(expired - orphans):
                log.warning("provider %s: removed %s, which no PodNetwork owns", name, item)
                self.swept += 1
            self._orphans[name] = {o: seen.get(o, now) for o in orphans}

    def _resync(self, pool: NodePool) -> None:
        policy = self.placement.policy(pool.provider)
        now = self.clock.monotonic()
        if now - pool.inventory_at < policy.gc_period:
            return
        node = self.caches.nodes.get(pool.node)
        if node is None:
            return
        inventory = self.service.inventory(
            node, self.caches.node_networks.get(pool.node), pool.provider)
        owners = self.ledger.named_on(pool)
        self.lost.report(pool.observe(inventory, owners, now))
        expired = pool.expired_suspects(policy, now, owners)
        if not expired:
            return
        where = {**inventory.all_ips(), **inventory.all_ipv6()}
        entries = [PoolEntry(ip, where[ip].id, where[ip].subnet) for ip in expired if ip in where]
        gone = self.gateway.pool_shrink(
            pool.provider, self.caches.context(node, self.caches.node_networks.get(pool.node)),
            entries)
        deleted = gone or ()
        pool.suspects_deleted(deleted)
        self.swept += len(deleted)
        log.info("node %s: deleted %d leaked addresses", pool.node, len(deleted))
