"""The node agent's report to the controller: its node's Lease.

The controller gives a released address back only once the node's agent says the old
interface is gone (``podnet.core.unplug``). The agent says it in one object per node, the
Lease ``podnet-node-<node>`` in podnet's namespace (the wire format is
``podnet.core.objects.agent_report_lease``), rewritten when what it says changes, at most
once per ``batch`` seconds (a burst of pods leaving one node costs a few writes, not one
per pod), and renewed though nothing changed (the heartbeat, below): a Lease that runs
out says its agent is dead or cut off, which ``podnet status`` shows.

The report names its writer as a real Lease does: ``holderIdentity`` is
``<host id>/<instance>`` (:func:`default_host_id`, a fresh instance id per start) and
``renewTime`` is renewed every third of ``leaseDurationSeconds`` (3 writes a minute with
the default 60 s; the reporter looks every ``refresh`` seconds, one GET). No failure ends
the reporter's loop: a pass that fails is retried a second later. The reporter reads the
Lease back on every pass and writes it again when it was deleted, unlabelled or edited. A
Lease held by an agent of another host whose renewal is still live is not taken over: the
reporter says so (:attr:`NodeReporter.conflict`, an error in the log) and the agent stays
not ready, so two hosts never write one node's report (an agent restarted on its own host
takes its report over at once: its list is derived again from the host).

Beside what the handshake needs, a node whose providers' dataplanes report annotations
(``podnet.linux.hooks.ReportsAnnotations``) says what its netlink has of them: the ENI
dataplane's ``podnet.linux.eni.ANNOTATION_ENI``, the ENI devices found, by MAC, and the
table each pod address's rule looks up (bounded, see ``podnet.linux.eni.EniSummary``), so
``podnet status`` and ``podnet audit``, which cannot see a node's netlink, can. Nothing
pokes the reporter when a rule changes by hand: it computes again every ``refresh``
seconds, and writes only when something changed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import attrs

from podnet.core.clock import SystemClock, format_micro_time
from podnet.core.cluster.port import LEASE, AlreadyExists, ApiError, Cluster, Conflict, NotFound
from podnet.core.models import AgentReport
from podnet.core.objects import (
    AGENT_LEASE_SECONDS,
    LABEL_AGENT_NODE,
    agent_lease_name,
    agent_report,
    agent_report_lease,
    holder_host,
)

log = logging.getLogger("podnet.node")

#: seconds a change waits for the next ones before the report is written
DEFAULT_BATCH = 0.2
#: seconds after which the report is computed again though nothing poked it
DEFAULT_REFRESH = 5.0
#: seconds after its last write that a report whose only news is more plugged records
#: waits (nothing waits for those: the controller releases on the unplugged tokens)
DEFAULT_HOLD = 2.0


def default_host_id() -> str:
    """This host's id in its agent's reports and on the records it plugs: the machine id
    (the boot id where the image has none) and the inode of the agent's network namespace
    (the interfaces it plugs are that namespace's: two agents in two namespaces of one
    machine are two hosts). No ``/``: it is the first part of a holder identity."""
    machine = ""
    for path in ("/etc/machine-id", "/var/lib/dbus/machine-id",
                 "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path) as f:
                machine = f.read().strip()
        except OSError:
            continue
        if machine:
            break
    netns = os.stat("/proc/self/ns/net").st_ino
    return f"{machine.replace('/', '_') or 'unknown'}.{netns}"


class NodeReporter:
    """Writes what ``compute`` says to the node's Lease whenever it changes, renews it, and
    writes it again when someone else deleted or changed it."""

    def __init__(self, cluster: Cluster, node: str, namespace: str,
                 compute: Callable[[], AgentReport], *, batch: float = DEFAULT_BATCH,
                 annotations: Callable[[], dict[str, str]] | None = None,
                 refresh: float = DEFAULT_REFRESH, host: str | None = None,
                 lease_seconds: int = AGENT_LEASE_SECONDS, hold: float = DEFAULT_HOLD
                 ) -> None:
        self.cluster = cluster
        self.node = node
        self.namespace = namespace
        self.compute = compute
        #: the host this agent runs on, and this start of it: the report's writer
        self.host = host or default_host_id()
        self.holder = f"{self.host}/{uuid.uuid4().hex[:12]}"
        self.lease_seconds = lease_seconds
        #: why the report is not this agent's to write (another host's agent holds it);
        #: None when it is
        self.conflict: str | None = None
        self._renewed = 0.0
        #: the renewTime last written: a Lease that says another was renewed by someone
        #: else (or made to look run out), and is written again
        self._renew_time: str | None = None
        #: more annotations of the Lease (what the dataplane has in place)
        self.annotations = annotations or dict
        self.batch = batch
        self.refresh = refresh
        self.hold = hold
        #: when (monotonic) a report held back for adding plugged records alone is due
        self._held_until: float | None = None
        #: API writes made, by verb: what the handshake costs
        self.writes: Counter[str] = Counter()
        #: of the updates, those that said nothing new (the heartbeat's renewals alone)
        self.renewals = 0
        #: report passes that failed, by stage (compute: the dataplane's state could not
        #: be read; write: the API server refused or did not answer)
        self.failures: Counter[str] = Counter()
        #: why the last report could not be computed (None when it could)
        self.compute_failure: str | None = None
        #: when (monotonic) the Lease was last written; None before the first write
        self.last_write: float | None = None
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

    def run(self, stop: threading.Event, on_turn: Callable[[], None] = lambda: None) -> None:
        """Write the report when poked, and look again every ``refresh`` seconds (the
        renewal, the heartbeat, is due every third of the Lease's duration) until
        ``stop``; ``on_turn`` is called at each turn of the loop (liveness)."""
        self._dirty.set()  # the first report, at start
        looked = time.monotonic()
        while not stop.is_set():
            on_turn()
            held = self._held_until
            wait = 1.0 if held is None else min(1.0, max(0.0, held - time.monotonic()))
            # poked, a held report due, or time to look again (the stop seen within a
            # second either way)
            if (not self._dirty.wait(timeout=wait)
                    and time.monotonic() - looked < self.refresh
                    and (held is None or time.monotonic() < held)):
                continue
            looked = time.monotonic()
            stop.wait(self.batch)  # let the rest of a burst arrive
            self._dirty.clear()
            try:
                self.flush(hold=self.hold)
            except ApiError as exc:
                self.failures["write"] += 1
                log.warning("node %s: report not written, retried: %s", self.node, exc)
                self._dirty.set()
                stop.wait(1.0)
            except Exception:
                # the loop goes on, or the Lease would stop being renewed and a live
                # agent look like a dead one (or a dead one like a quiet one)
                log.exception("node %s: report not written, retried", self.node)
                self._dirty.set()
                stop.wait(1.0)

    def flush(self, *, hold: float = 0.0) -> bool:
        """Write the report if the Lease does not say it (changed since the last write,
        deleted, unlabelled or edited by someone else) or its renewal is due; whether it
        wrote. Another host's live report is left alone (:attr:`conflict`). ``hold``:
        a report whose only news is more plugged records is not written (nor the Lease
        read) until ``hold`` seconds after the last write; a new release token, a record
        no longer plugged or new annotations are written at once."""
        try:
            report = attrs.evolve(self.compute(), holder=self.holder)
            more = self.annotations()
        except Exception as exc:
            self.failures["compute"] += 1
            self.compute_failure = f"{type(exc).__name__}: {exc}"
            raise
        self.compute_failure = None
        written, last = self._written, self.last_write
        if (hold > 0 and written is not None and last is not None
                and report.unplugged == written.unplugged and report.plugged > written.plugged
                and more == self._written_annotations and self.conflict is None
                and time.monotonic() - self._renewed < self.lease_seconds / 3
                and (due := last + hold) > time.monotonic()):
            self._held_until = due
            return False
        self._held_until = None
        name = agent_lease_name(self.node)
        try:
            current = self.cluster.get(LEASE, name, self.namespace)
        except NotFound:
            current = None
        if current is not None and not self._ours_to_write(current):
            return False
        due = time.monotonic() - self._renewed >= self.lease_seconds / 3
        if (current is not None and not due and report == self._written
                and more == self._written_annotations and self._says(current, report, more)):
            return False
        renew_time = format_micro_time(self._clock.now())
        lease = agent_report_lease(report, self.namespace, renew_time)
        lease["spec"]["leaseDurationSeconds"] = self.lease_seconds
        lease["metadata"]["annotations"].update(more)
        if current is None:
            if self._written is not None:
                log.warning("node %s: its report %s/%s was deleted; written again",
                            self.node, self.namespace, name)
            try:
                self.cluster.create(LEASE, lease)
            except AlreadyExists:
                self._dirty.set()  # someone else made it meanwhile: read again
                return False
            self.writes["create"] += 1
            # nobody held it and this agent made it: its own again (a conflict seen
            # before the other host's report was deleted is over)
            self.conflict = None
        else:
            if self._written is not None and not self._says(current, self._written,
                                                            self._written_annotations or {}):
                log.warning("node %s: its report %s/%s was changed by someone else; "
                            "written again", self.node, self.namespace, name)
            lease["metadata"]["resourceVersion"] = current["metadata"].get("resourceVersion")
            try:
                self.cluster.update(LEASE, lease)
            except Conflict:
                self._dirty.set()  # someone else wrote it: read again, write again
                return False
            self.writes["update"] += 1
            if (report == self._written and more == self._written_annotations
                    and self._says(current, report, more)):
                self.renewals += 1
        self._renewed = self.last_write = time.monotonic()
        self._renew_time = renew_time
        self._written = report
        self._written_annotations = more
        return True

    def _ours_to_write(self, current: Mapping[str, Any]) -> bool:
        """Whether the Lease is this agent's to write: its own, an earlier start's on
        this host, nobody's, or another host's whose renewal ran out. Sets
        :attr:`conflict`."""
        spec = current.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if not holder or holder == self.holder or holder_host(holder) == self.host:
            self.conflict = None
            return True
        seen = agent_report(current)
        renewed = seen.renew_time if seen is not None else None
        duration = spec.get("leaseDurationSeconds")
        duration = duration if isinstance(duration, int) else self.lease_seconds
        if renewed is None or renewed + timedelta(seconds=duration) <= self._clock.now():
            if self.conflict is not None or self._written is not None:
                log.warning("node %s: its report's holder %s did not renew it within %d s; "
                            "this agent (%s) takes it over", self.node, holder, duration,
                            self.holder)
            self.conflict = None
            return True
        conflict = (f"node {self.node}: its report {self.namespace}/"
                    f"{agent_lease_name(self.node)} is held by {holder}, an agent of another "
                    f"host, renewed within {duration} s: this agent ({self.holder}) does "
                    "not take it over and stays not ready (two agents run under one node "
                    "name: stop one)")
        if conflict != self.conflict:
            log.error("%s", conflict)
        self.conflict = conflict  # looked at again every refresh: taken over once it runs out
        return False

    def _says(self, current: Mapping[str, Any], report: AgentReport,
              more: Mapping[str, str]) -> bool:
        """Whether the Lease says ``report`` (and ``more``), as its writer, labelled, with
        the renewal it last wrote."""
        meta = current.get("metadata") or {}
        if (meta.get("labels") or {}).get(LABEL_AGENT_NODE) != self.node:
            return False
        spec = current.get("spec") or {}
        if (str(spec.get("holderIdentity") or "") != self.holder
                or spec.get("renewTime") != self._renew_time
                or spec.get("leaseDurationSeconds") != self.lease_seconds):
            return False
        want = agent_report_lease(report, self.namespace, "")["metadata"]["annotations"]
        have = meta.get("annotations") or {}
        return all(have.get(k) == v for k, v in {**want, **more}.items())
