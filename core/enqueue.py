"""What a controller may ask of the work queue: look at a pod or a node again, now or
later. Keys are ("pod", "namespace/name") and ("node", "name")."""

from __future__ import annotations

from collections.abc import Iterable

from podnet.core.caches import Caches, pod_key_of
from podnet.core.models import PodNetwork
from podnet.core.workqueue import WorkQueue

#: Queue keys: ("pod", "namespace/name"), ("node", "name"), ("gc", ""), ("invalid", key).
Key = tuple[str, str]


class Enqueuer:
    def __init__(self, queue: WorkQueue[Key], caches: Caches) -> None:
        self._queue = queue
        self._caches = caches
        #: pods queued while a start lists its caches, kept for its start-up pass
        self._deferred: set[str] | None = None

    def pod(self, key: str, after: float = 0.0) -> None:
        if after > 0:
            self._queue.add_after(("pod", key), after)
        elif self._deferred is not None:
            self._deferred.add(key)
        else:
            self._queue.add(("pod", key))

    def pods_after(self, keys: Iterable[str], after: float) -> None:
        """Each of these pods once ``after`` seconds have passed (one queue lock)."""
        self._queue.add_all_after([("pod", key) for key in keys], after)

    def defer_pods(self) -> None:
        """Pods queued from now on are kept aside until :meth:`deferred_pods` (a start's
        list: its start-up pass looks at them)."""
        self._deferred = set()

    def deferred_pods(self) -> set[str]:
        """The pods kept aside since :meth:`defer_pods`; pods are queued again from now."""
        deferred, self._deferred = self._deferred or set(), None
        return deferred

    def node(self, name: str, after: float = 0.0) -> None:
        if after > 0:
            self._queue.add_after(("node", name), after)
        else:
            self._queue.add(("node", name))

    def pod_of(self, pn: PodNetwork) -> None:
        """The pod a record belongs to."""
        self.pod(pod_key_of(pn))

    def wake(self, pn_keys: Iterable[str]) -> None:
        """Queue the pods of these PodNetwork keys again (those still cached)."""
        for pn_key in pn_keys:
            pn = self._caches.pod_networks.get(pn_key)
            if pn is not None:
                self.pod(pod_key_of(pn))
