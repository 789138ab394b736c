"""The node-pool reconciler's passes with nothing to do: a pass over a pool in the state
its last pass changed nothing in is skipped until that state changes or the clock says
(:class:`QuietPasses`, a part of :class:`podnet.core.reconcile.nodepool.NodePoolReconciler`).
A restart's timed passes every refill period (10,000-15,000 at 5,000 nodes) mostly find
nothing to do."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.models import InterfaceState, NodeInfo, NodeNetwork
from podnet.core.placement import Placement
from podnet.core.policy import PoolPolicy
from podnet.core.pool import NodePool
from podnet.core.poolservice import PoolService
from podnet.core.reconcile.result import Result


class QuietPasses:
    """Remembers, per node, the state a pass found nothing to do in (``_quiet``)."""

    caches: Caches
    clock: Clock
    placement: Placement
    service: PoolService
    _next_check: dict[str, float]
    _quiet: dict[str, tuple[Any, ...]]
    policy_for: Callable[[str, NodeNetwork, NodePool], PoolPolicy]

    def _quiet_state(self, node: NodeInfo, nn: NodeNetwork, pool: NodePool,
                     policy: PoolPolicy) -> tuple[Any, ...] | None:
        """What a pass of a synced pool depends on, when none of it waits on the clock
        (no pod network waiting, no address in cooldown, no interface but a ready one,
        no suspect address, no failed or blocked grow, no pool write put off); None
        otherwise. Equal states make passes that do the same."""
        if not pool.synced or pool.waiting or nn.metadata.name in self.service.unwritten:
            return None
        now = self.clock.monotonic()
        with pool.lock:
            if (pool.suspects or pool.last_error is not None or pool.grow_failures
                    or pool.grow_blocked_until > now):
                return None
            # one flat list, not a tuple per address: kept for every quiet node (5,000
            # after a restart), it is ~2 KiB a node rather than ~5
            addresses: list[Any] = []
            for a in pool.addresses.values():
                if a.cooldown_until > now:
                    return None
                addresses += (a.address, a.owner, a.interface, a.subnet, a.ipv6, a.half)
            interfaces = []
            for itf in pool.interfaces.values():
                if itf.state is not InterfaceState.READY or itf.inhibited_until > now:
                    return None
                interfaces.append((itf.id, itf.subnet, itf.pooled, itf.primary, itf.trunk))
        subnets = self.caches.subnets_of_node
        # what else a pass reads: the provider as configured, the Subnets the node's pods
        # may use (a shrink gives back the idle addresses they exclude)
        return (node, nn, policy, self.placement.providers[pool.provider],
                subnets(node) if subnets is not None else (), pool.batch, pool.inventory_at,
                pool.max_interfaces, pool.ips_per_interface, pool.dual_stack,
                tuple(addresses), tuple(interfaces))

    def _timer(self, name: str, policy: PoolPolicy) -> float:
        """Seconds until the node's pass is due by the clock alone: the refill period,
        or the provider's node check when that comes first (0: due now)."""
        due = policy.refill_period
        check = self._next_check.get(name)
        if policy.node_check_period > 0:
            if check is None:
                return 0.0  # never checked: the pass schedules the first check
            due = min(due, check - self.clock.monotonic())
        return max(due, 0.0)

    def _remember_quiet(self, name: str, node: NodeInfo, pool: NodePool,
                        start: tuple[Any, ...] | None, result: Result) -> None:
        """Remember the state of a pass that changed nothing (no address, owner,
        interface or record write: its state at the end is the one it started from, or
        the one its rebuild made) and asked to be looked at again only by the clock; it
        is called only when the pass found the record listing the pool as it is (a
        record behind it, its owners caught up a refill period after their last write,
        is written by a later pass). Its next passes are skipped while that state holds
        (:meth:`reconcile`)."""
        if start is None or result.requeue_after is None:
            return
        current = self.caches.node_networks.get(name)
        if current is None:
            return
        policy = self.policy_for(pool.provider, current, pool)
        if result.requeue_after < self._timer(name, policy) - 1e-3:
            return  # something in it is due sooner than the clock's passes
        end = self._quiet_state(node, current, pool, policy)
        if end is not None and end == start:
            self._quiet[name] = end
