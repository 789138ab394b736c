"""The node agent's report to the controller: its node's Lease.

The controller gives a released address back only once the node's agent says the old
interface is gone (``podnet.core.unplug``). The agent says it in one object per node, the
Lease ``podnet-node-<node>`` in podnet's namespace (the wire format is
``podnet.core.objects.agent_report_lease``), rewritten only when what it says changes and
at most once per ``batch`` seconds: a burst of pods leaving one node costs a few writes,
not one per pod.

Beside what the handshake needs, a node whose providers use the ENI dataplane says what
its netlink has of it (:data:`ANNOTATION_ENI`: the ENI devices found, by MAC, and the
table each pod address's rule looks up; bounded, see ``podnet.linux.eni.EniSummary``), so
``podnet status`` and ``podnet audit``, which cannot see a node's netlink, can. Nothing
pokes the reporter when a rule changes by hand: it computes again every ``refresh``
seconds, and writes only when something changed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from podnet.core.clock import SystemClock, format_micro_time
from podnet.core.cluster.port import LEASE, ApiError, Cluster, Conflict, NotFound
from podnet.core.models import AgentReport
from podnet.core.objects import agent_lease_name, agent_report_lease

log = logging.getLogger("podnet.node")

#: seconds a change waits for the next ones before the report is written
DEFAULT_BATCH = 0.2
#: seconds after which the report is computed again though nothing poked it
DEFAULT_REFRESH = 5.0
#: the Lease annotation with the node's ENI dataplane summary (JSON)
ANNOTATION_ENI = "podnet.io/eni-dataplane"


class NodeReporter:
    """Writes what ``compute`` says to the node's Lease whenever it changes."""

    def __init__(self, cluster: Cluster, node: str, namespace: str,
                 compute: Callable[[], AgentReport], *, batch: float = DEFAULT_BATCH,
                 annotations: Callable[[], dict[str, str]] | None = None,
                 refresh: float = DEFAULT_REFRESH) -> None:
        self.cluster = cluster
        self.node = node
        self.namespace = namespace
        self.compute = compute
        #: more annotations of the Lease (what the dataplane has in place)
        self.annotations = annotations or dict
        self.batch = batch
        self.refresh = refresh
        #: API writes made, by verb: what the handshake costs
        self.writes: Counter[str] = Counter()
        self._dirty = threading.Event()
        self._written: AgentReport | None = None
        self._written_annotations: dict[str, str] | None = None
        self._clock = SystemClock()

    @property
    def written(self) -> AgentReport | None:
        """The report last written; None before the first."""
        return self._written

    def poke(self) -> None:
        """Something the report says may have changed."""
        self._dirty.set()

    def run(self, stop: threading.Event) -> None:
        self._dirty.set()  # the first report, at start
        looked = time.monotonic()
        while not stop.is_set():
            # poked, or time to look again (the stop seen within a second either way)
            if (not self._dirty.wait(timeout=1.0)
                    and time.monotonic() - looked < self.refresh):
                continue
            looked = time.monotonic()
            stop.wait(self.batch)  # let the rest of a burst arrive
            self._dirty.clear()
            try:
                self.flush()
            except ApiError as exc:
                log.warning("node %s: report not written, retried: %s", self.node, exc)
                self._dirty.set()
                stop.wait(1.0)

    def flush(self) -> bool:
        """Write the report if it differs from the last one written; whether it wrote."""
        report = self.compute()
        more = self.annotations()
        if report == self._written and more == self._written_annotations:
            return False
        lease = agent_report_lease(report, self.namespace, format_micro_time(self._clock.now()))
        lease["metadata"]["annotations"].update(more)
        name = agent_lease_name(self.node)
        try:
            current = self.cluster.get(LEASE, name, self.namespace)
        except NotFound:
            current = None
        if current is None:
            self.cluster.create(LEASE, lease)
            self.writes["create"] += 1
        else:
            lease["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            try:
                self.cluster.update(LEASE, lease)
            except Conflict:
                self._dirty.set()  # someone else wrote it: read again, write again
                return False
            self.writes["update"] += 1
        self._written = report
        self._written_annotations = more
        return True
