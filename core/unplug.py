"""The release handshake: a released address is handed to another pod only once the old
pod's interface is gone.

The kubelet may remove a pod from the API before the runtime has torn down its sandbox,
so a record can be Releasing while its address still sits on an interface in the old
pod. Giving the address to a new pod then puts it on two interfaces at once. The node
agent (``podnet node``) therefore reports, in its node's Lease, the uids of the Releasing
records it has seen and holds no interface for (``podnet.core.objects.agent_report``):
once it has seen a record Releasing it never plugs it again, so its word is final.

A Releasing record's address goes back when any of these holds:

- the node's agent lists the record as unplugged (its release token: uid and when it
  turned Releasing, ``podnet.core.objects.release_token``);
- the node has no agent report at all (a node without podnet's node side: nothing to
  wait for);
- the node is gone (nothing runs there any more);
- the provider's ``unplug_timeout`` passed since the record turned Releasing (an agent
  that is down, or a runtime that never sends DEL, cannot hold an address for ever).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.models import PodNetwork
from podnet.core.objects import release_token
from podnet.core.policy import PoolPolicy

log = logging.getLogger("podnet.unplug")


class UnplugGate:
    """Whether a Releasing record's address may be given back yet."""

    def __init__(self, caches: Caches, clock: Clock,
                 policy: Callable[[str], PoolPolicy]) -> None:
        self.caches = caches
        self.clock = clock
        self.policy = policy
        #: uid -> when a Releasing record without a transition time was first seen
        self._first_seen: dict[str, float] = {}

    def wait(self, pn: PodNetwork) -> float | None:
        """Seconds to look again in while ``pn``'s interface may still exist on its node;
        None when its address may go now."""
        node = pn.spec.node_name
        uid = pn.metadata.uid or pn.key
        token = release_token(pn)
        # reports not listed yet (or not readable: RBAC): the timeout still bounds the wait
        synced = self.caches.agent_reports.has_synced
        report = self.caches.agent_report_of(node) if synced else None
        if synced and report is None:
            return None
        node_gone = self.caches.nodes.has_synced and self.caches.nodes.get(node) is None
        if node_gone or (report is not None and token in report.unplugged):
            self._first_seen.pop(uid, None)
            return None
        timeout = self.policy(pn.spec.provider).unplug_timeout
        since = pn.status.last_transition_time
        if since is not None:
            waited = (self.clock.now() - since).total_seconds()
        else:  # a hand-made record: timed from when this replica first saw it
            waited = self.clock.monotonic() - self._first_seen.setdefault(
                uid, self.clock.monotonic())
        left = timeout - waited
        if left <= 0:
            log.info("PodNetwork %s: the agent of node %s did not report its interface gone "
                     "within %g s; its address is released", pn.key, node, timeout)
            self._first_seen.pop(uid, None)
            return None
        return left
