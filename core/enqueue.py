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

    def pod(self, key: str, after: float = 0.0) -> None:
        if after > 0:
            self._queue.add_after(("pod", key), after)
        else:
            self._queue.add(("pod", key))

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
