"""Garbage collection: what no event will ever bring back to a reconciler's attention.

- records whose pod or node is gone are queued for their pod (level-triggered catch-all:
  a missed watch event cannot strand a record);
- pools of nodes that left the cluster are dropped;
- each node's inventory is read again every ``gc_period``: an address the cloud has that
  no record owns and no pool holds becomes a suspect (mark), and is deleted in the cloud
  once it has stayed a suspect for ``leaked_ip_expiry`` (sweep) — unless a record turns
  out to own it, which clears it;
- providers with their own address management report every ``gc_period`` what no record
  owns (``podnet_sweep``); what stays an orphan for ``leaked_ip_expiry`` they remove.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from podnet.core.cluster.port import POD_NETWORK
from podnet.core.reconcile.result import Result
from podnet.hookspecs.types import NodeContext, PoolEntry

if TYPE_CHECKING:
    from podnet.core.engine import Engine
    from podnet.core.gateway import ProviderGateway
    from podnet.core.pool import NodePool

log = logging.getLogger("podnet.gc")


class GarbageCollector:
    def __init__(self, engine: Engine, gateway: ProviderGateway) -> None:
        self.e = engine
        self.gateway = gateway
        self.swept: int = 0
        #: monotonic time each own-IPAM provider was last swept
        self._swept_at: dict[str, float] = {}
        #: provider -> orphan name -> monotonic time first reported
        self._orphans: dict[str, dict[str, float]] = {}

    def reconcile(self, _key: str) -> Result:
        e = self.e
        for pn in e.pod_networks.values():
            pod = e.pods.get(f"{pn.metadata.namespace}/{pn.spec.pod_name}")
            if pod is None or pod.uid != pn.spec.pod_uid or e.nodes.get(pn.spec.node_name) is None:
                e.enqueue_pod(e.pod_key_of(pn))
        period = min((e.policy(p).gc_period for p in e.providers.names()), default=60.0)
        for pool in e.pools.all():
            if e.nodes.get(pool.node) is None:
                e.nodepools.node_removed(pool.node)
                continue
            if pool.synced:
                try:
                    self._resync(pool)
                except Exception as exc:
                    log.info("gc of node %s: %s", pool.node, exc)
        self._sweep_own_ipam()
        return Result(requeue_after=period)

    def _sweep_own_ipam(self) -> None:
        """``podnet_sweep`` for each provider without node pools, once its period is due."""
        e = self.e
        if not e.pod_networks.has_synced:
            return  # an unsynced cache would make every port look ownerless
        now = e.clock.monotonic()
        for name in e.providers.names():
            if e.providers[name].uses_node_pool:
                continue
            policy = e.policy(name)
            last = self._swept_at.get(name)
            if last is not None and now - last < policy.gc_period:
                continue
            self._swept_at[name] = now
            owners = {pn.key for pn in e.pod_networks.values() if pn.spec.provider == name}
            owners |= e.unreadable_keys(POD_NETWORK)  # a record that does not parse still owns
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

    def _owners(self, pool: NodePool) -> dict[str, str]:
        """address -> the record naming it: IPv4 and (dual stack) IPv6 addresses."""
        out: dict[str, str] = {}
        for pn in self.e.pod_networks.by_index("node", pool.node):
            if pn.spec.provider != pool.provider:
                continue
            if pn.status.ip:
                out[pn.status.ip] = pn.key
            if pn.status.ipv6 and pool.dual_stack:
                out[pn.status.ipv6] = pn.key
        return out

    def _resync(self, pool: NodePool) -> None:
        e = self.e
        policy = e.policy(pool.provider)
        now = e.clock.monotonic()
        if now - pool.inventory_at < policy.gc_period:
            return
        node = e.nodes.get(pool.node)
        if node is None:
            return
        inventory = e.nodepools.inventory(node, e.node_networks.get(pool.node), pool.provider)
        owners = self._owners(pool)
        e.podnetworks.lost_by_cloud(pool.observe(inventory, owners, now))
        expired = pool.expired_suspects(policy, now, owners)
        if not expired:
            return
        where = {**inventory.all_ips(), **inventory.all_ipv6()}
        entries = [PoolEntry(ip, where[ip].id, where[ip].subnet) for ip in expired if ip in where]
        gone = self.gateway.pool_shrink(
            pool.provider, NodeContext(node=node, network=e.node_networks.get(pool.node)),
            entries)
        deleted = gone or ()
        pool.suspects_deleted(deleted)
        self.swept += len(deleted)
        log.info("node %s: deleted %d leaked addresses", pool.node, len(deleted))
