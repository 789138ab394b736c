"""The release handshake: a released address is handed to another pod only once the old
pod's interface is gone, on positive evidence (GOALS.md R8).

The kubelet may remove a pod from the API before the runtime has torn down its sandbox,
so a record can be Releasing while its address still sits on an interface in the old
pod. Giving the address to a new pod then puts it on two interfaces at once.

Two things make the evidence:

- **The record says who may hold an interface for it.** Before a node agent plugs a
  record (or grants it to another CNI plugin), it writes its host id onto the record
  (``podnet.io/plugged-on``, ``podnet.core.objects.plugged_on``), guarded by the record's
  resourceVersion: every Releasing version of a plugged record names the hosts that may
  hold its interface. That is durable where a report is not: a report deleted, unlabelled
  or overwritten changes nothing the record says.
- **The host's own agent says the interface is gone.** The agent reports, in its node's
  Lease (``podnet.core.objects.agent_report``), the release tokens of the Releasing records
  it has seen and holds no interface for (uid and when it turned Releasing,
  ``podnet.core.objects.release_token``); once it has seen a record Releasing it never
  plugs it again, so its word is final. The Lease names its writer
  (``holderIdentity``: ``<host id>/<instance>``); an acknowledgement counts only from a
  report written by a host the record names, whichever instance of it: an agent restarted
  on the same host derives its list again from what is on the host. A report whose lists
  do not match its writer's digest (edited by hand) acknowledges nothing.

A Releasing record's address goes back when any of these holds:

- the record names hosts, and the node's report is written by the one host it names and
  lists the record's release token (a record two hosts plugged, an agent of another host
  having taken the node's name over, waits for the node to go);
- the node is gone (nothing runs there any more);
- the record names no host (no agent of this version plugged it) and: the node has no
  agent report at all (a node without podnet's node side: nothing to wait for), or its
  report lists the token, or the provider's ``unplug_timeout`` passed (the handshake of
  agents before 0.4, whose plugs are not written onto the record).

``unplug_timeout`` frees no address a host is named for: a missing, edited or other
writer's report, an agent that is down or a runtime that never sends DEL is no evidence
that the interface is gone. Once it passes, the wait is logged (a warning, once per
record: the address is held for the agent of that host) and ``podnet audit`` lists the
record; the operator ends it by bringing the agent back (it unplugs what no record wants
and reports it) or by deleting the Node. Waiting is not failing: no transition fails.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.models import AgentReport, PodNetwork
from podnet.core.objects import holder_host, plugged_on, release_token
from podnet.core.policy import PoolPolicy

log = logging.getLogger("podnet.unplug")


def acknowledged(pn: PodNetwork, report: AgentReport | None) -> bool:
    """Whether ``report`` is the word of the one host ``pn`` names that its interface is
    gone (a record naming no host: any report's word, as before 0.4)."""
    if report is None or release_token(pn) not in report.unplugged:
        return False
    hosts = plugged_on(pn)
    return not hosts or hosts == {holder_host(report.holder)}


class UnplugGate:
    """Whether a Releasing record's address may be given back yet."""

    def __init__(self, caches: Caches, clock: Clock,
                 policy: Callable[[str], PoolPolicy]) -> None:
        self.caches = caches
        self.clock = clock
        self.policy = policy
        #: uid -> when a Releasing record without a transition time was first seen
        self._first_seen: dict[str, float] = {}
        #: uids of held records whose wait outlived the timeout and was logged
        self._overdue: set[str] = set()

    def wait(self, pn: PodNetwork) -> float | None:
        """Seconds to look again in while ``pn``'s interface may still exist on its node;
        None when its address may go now."""
        node = pn.spec.node_name
        uid = pn.metadata.uid or pn.key
        hosts = plugged_on(pn)
        # reports not listed yet (or not readable: RBAC): the timeout still bounds the wait
        # of a record no host is named for
        synced = self.caches.agent_reports.has_synced
        report = self.caches.agent_report_of(node) if synced else None
        if synced and report is None and not hosts:
            return None
        node_gone = self.caches.nodes.has_synced and self.caches.nodes.get(node) is None
        if node_gone or acknowledged(pn, report):
            self._first_seen.pop(uid, None)
            self._overdue.discard(uid)
            return None
        timeout = self.policy(pn.spec.provider).unplug_timeout
        since = pn.status.last_transition_time
        if since is not None:
            waited = (self.clock.now() - since).total_seconds()
        else:  # a hand-made record: timed from when this replica first saw it
            waited = self.clock.monotonic() - self._first_seen.setdefault(
                uid, self.clock.monotonic())
        left = timeout - waited
        if left > 0:
            return left
        if hosts:
            # no evidence the interface is gone: held; the report's change wakes the key
            if uid not in self._overdue:
                self._overdue.add(uid)
                log.warning(
                    "PodNetwork %s: its address %s is held: node %s's agent on %s has not "
                    "reported its interface gone within %g s (%s); it is reused only once "
                    "it does, or the node is gone", pn.key, pn.status.ip, node,
                    ", ".join(sorted(hosts)), timeout, self._why(report, hosts))
            return max(timeout, 1.0)
        log.info("PodNetwork %s: the agent of node %s did not report its interface gone "
                 "within %g s; its address is released", pn.key, node, timeout)
        self._first_seen.pop(uid, None)
        return None

    @staticmethod
    def _why(report: AgentReport | None, hosts: frozenset[str]) -> str:
        if report is None:
            return "the node has no report"
        if report.edited:
            return "its report was edited by hand"
        writer = holder_host(report.holder)
        if {writer} != hosts:
            return f"its report is written by {writer or 'nobody'}"
        return "the agent still holds it or is behind"
