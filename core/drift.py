"""What the node pool side learns about the cloud that the pod network side acts on:
addresses the cloud lost, and nodes whose pool cannot be read."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.convert import UnreadablePodNetwork
from podnet.core.enqueue import Enqueuer
from podnet.core.models import Phase, PodNetwork
from podnet.core.placement import Policies

log = logging.getLogger("podnet.podnetwork")


def too_young(pn: PodNetwork, policy: Policies, clock: Clock) -> bool:
    """Whether the record changed less than the minimum address lifetime ago: the cloud
    may not show its address yet, so its absence proves nothing."""
    since = pn.status.last_transition_time
    lifetime = policy(pn.spec.provider).min_ip_lifetime
    return since is not None and (clock.now() - since).total_seconds() < lifetime


class LostAddresses:
    """PodNetwork key -> the recorded address the cloud no longer has (reported by GC
    and the pool rebuild once the record is older than the minimum address lifetime);
    the pod network reconciler re-addresses those records and takes them out."""

    def __init__(self, caches: Caches, policy: Policies, clock: Clock,
                 enqueue: Enqueuer) -> None:
        self._caches = caches
        self._policy = policy
        self._clock = clock
        self._enqueue = enqueue
        self.by_key: dict[str, str] = {}

    def report(self, keys: Iterable[str]) -> None:
        """A fresh inventory lacks the addresses these records name. A record older than
        the minimum address lifetime (younger ones may just not be visible yet) is
        re-addressed: the same address where the cloud takes it back, else a new one."""
        for key in keys:
            pn = self._caches.pod_networks.get(key)
            if pn is None or isinstance(pn, UnreadablePodNetwork) or not pn.status.ip:
                continue
            if pn.status.phase not in (Phase.ALLOCATED, Phase.ROUTED):
                continue
            if too_young(pn, self._policy, self._clock):
                continue
            log.warning("%s records address %s, which the cloud no longer has", key,
                        pn.status.ip)
            self.by_key[key] = pn.status.ip
            self._enqueue.pod_of(pn)


class PoolProblems:
    """node -> why its pool cannot be read (its inventory fails: an instance the cloud
    does not have, say): written by the node pool reconciler, said by the pod networks
    waiting on that node."""

    def __init__(self) -> None:
        self.by_node: dict[str, str] = {}
