"""The node agent's state and its answers to the protocol's requests (``NodeAgent``).

Over 800 lines on purpose: every CNI verb (ADD, DEL, CHECK, GC, the IPAM ones) is a method
of the one object that holds what they share and must take in one order — the per-record
and per-container locks, the records' informer, the IPAM grants, the report; the pieces
that stand alone (protocol, grants, locks, report, server) are modules of their own.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

import attrs

from podnet.core.annotations import NETWORKS, annotation_field, parse_attachments
from podnet.core.attachments import MULTUS_NETWORKS, is_nad_network, parse_selections
from podnet.core.clock import SystemClock
from podnet.core.cluster.informer import Informer
from podnet.core.cluster.port import (
    POD,
    POD_NETWORK,
    ApiError,
    Cluster,
    Conflict,
    NotFound,
    Obj,
)
from podnet.core.convert import RecordError, from_wire
from podnet.core.errors import InvalidRequest, PodnetError
from podnet.core.fence import Fence
from podnet.core.gateway import ProviderGateway
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE_NODE,
    DEFAULT_NETWORK,
    LABEL_MIGRATION_SOURCE_NODE,
    LABEL_NODE,
    AgentReport,
    Phase,
    PodNetwork,
)
from podnet.core.objects import (
    ANNOTATION_PLUGGED_ON,
    plugged_on,
    record_finished,
    release_token,
)
from podnet.core.plugin import Providers
from podnet.core.tracing import (
    ATTR_CONTAINER,
    ATTR_INTERFACE,
    ATTR_IP,
    ATTR_NAMESPACE,
    ATTR_NODE,
    ATTR_POD,
    Tracing,
)
from podnet.hookspecs.netpol import Enforcement
from podnet.hookspecs.types import (
    OWNER_DIGEST_PREFIX,
    Plug,
    PlugContext,
    PlugResult,
    UnplugContext,
    owner_digest,
)
from podnet.linux.hooks import ReportsAnnotations
from podnet.linux.netns import load_netlink, network_namespace_id, own_network_namespaces
from podnet.linux.nftables import HostPort, NftablesError
from podnet.linux.veth import link_names
from podnet.node.grants import Cancelled, IpamGrants
from podnet.node.health import DEFAULT_STUCK_AFTER, Loops
from podnet.node.locks import KeyedLocks
from podnet.node.metrics import CNI, IPAM, AgentMetrics, instrumented
from podnet.node.netpol import PolicyEnforcer
from podnet.node.plugview import PlugView
from podnet.node.protocol import (
    CHECK_FAILED,
    DEFAULT_ADD_TIMEOUT,
    DEFAULT_NAMESPACE,
    INVALID,
    NOT_READY,
    TRY_AGAIN,
    Attachments,
    CniError,
    CniRequest,
    as_plugged,
    attachment_list,
    body_field,
    cni_result,
    interface_names,
    ipam_request,
    ipam_result,
    only_network,
    raise_if_invalid,
    record_addresses,
    why_not_routed,
)
from podnet.node.report import DEFAULT_BATCH, NodeReporter

log = logging.getLogger("podnet.node")

#: seconds between looks for attachments a running pod no longer asks for, beside the
#: looks a record's change wakes
DROPPED_PERIOD = 5.0


def _ipam_network_given(body: Mapping[str, Any]) -> bool:
    """Whether an IPAM request's config names its podnet network (``ipam.network``);
    without it the plugin asks for the default network, or, in a Multus delegate's call,
    for the network of the NAD whose interface it is."""
    config = body.get("config")
    ipam = config.get("ipam") if isinstance(config, dict) else None
    return isinstance(ipam, dict) and ipam.get("network") is not None


def _read_pod_network(obj: Obj) -> PodNetwork | None:
    if record_finished(obj):
        return None  # released: as good as deleted
    try:
        return from_wire(PodNetwork, obj)
    except RecordError as exc:
        log.warning("a PodNetwork does not parse, ignored: %s", exc)
        return None


class NodeAgent:
    """The agent's state and its answers to the protocol's requests."""

    def __init__(self, cluster: Cluster, providers: Providers, node: str, *,
                 add_timeout: float = DEFAULT_ADD_TIMEOUT,
                 tracing: Tracing | None = None, namespace: str = DEFAULT_NAMESPACE,
                 report_batch: float = DEFAULT_BATCH, state_dir: str | None = None,
                 host_id: str | None = None, network_policy: bool = True,
                 metrics: AgentMetrics | None = None,
                 stuck_after: float = DEFAULT_STUCK_AFTER) -> None:
        self.cluster = cluster
        #: its CNI requests counted and timed, its state read at scrape time
        self.metrics = metrics or AgentMetrics()
        #: its loops, each saying when it turns (liveness)
        self.loops = Loops(stuck_after)
        self.providers = providers
        self.node = node
        self.add_timeout = add_timeout
        self.calls: Counter[str] = Counter()
        self.tracing = tracing or Tracing(None)
        self.gateway = ProviderGateway(
            providers, policy=lambda name: providers[name].policy, clock=SystemClock(),
            fence=Fence(open_forever=True), tracing=self.tracing, calls=self.calls)
        self.records: Informer[PodNetwork] = Informer(
            cluster, POD_NETWORK, _read_pod_network, label_selector=f"{LABEL_NODE}={node}",
            name="podnetworks")
        self.records.add_index(
            "pod", lambda pn: [f"{pn.metadata.namespace}/{pn.spec.pod_name}"])
        self._changed = threading.Condition()
        self.records.add_handler(self._on_record)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: one request at a time per container: a runtime's retry waits for the first
        self._container_locks = KeyedLocks()
        #: one plug or unplug decision at a time per record, whatever the container:
        #: what holds a record's address is decided under its lock (one interface)
        self._record_locks = KeyedLocks()
        #: the node's own network namespaces (the agent's, the host's): never a pod's
        self._own_namespaces = own_network_namespaces()
        # loaded now, before its socket is served: on first use a burst's first ADDs
        # would queue on the import's lock (seconds on a loaded host)
        load_netlink()
        #: records being plugged right now (key -> how many requests), and the lock under
        #: which a plug is decided and the report computed: once the report says a
        #: Releasing record has no interface, no plug for it may start
        self._plugging: Counter[str] = Counter()
        self._state_lock = threading.Lock()
        #: counts the pluggings that ended, and when each record's last one did: a report
        #: lists the host's interfaces outside the state lock (a netlink dump a burst can
        #: make retry), so a plug that ended meanwhile counts as plugged
        self._plug_seq = 0
        self._plug_ended: dict[str, int] = {}
        #: one report computed at a time (the reporter's flush, a GET of the report)
        self._report_lock = threading.Lock()
        #: addresses handed to other CNI plugins (podnet-ipam), until their DEL
        self.grants = IpamGrants(os.path.join(state_dir, "ipam") if state_dir else None)
        #: the dataplanes that say what they have in place on this host, one per class:
        #: what one says is the host's, not its provider's records'
        self._reporting: dict[type, ReportsAnnotations] = {}
        for plugin in providers.plugins.values():
            dataplane = getattr(plugin, "dataplane", None)
            if isinstance(dataplane, ReportsAnnotations):
                self._reporting.setdefault(type(dataplane), dataplane)
        #: what each last said (kept while its netlink cannot be read)
        self._dataplane_said: dict[type, Mapping[str, str]] = {}
        self.reporter = NodeReporter(cluster, node, namespace, self.report, batch=report_batch,
                                     annotations=self.dataplane_annotations, host=host_id)
        #: what is plugged on this host: read from it at start, on the report's period
        #: and after a failure; between, as this agent's own plugs and unplugs left it
        self.plug_view = PlugView(self.providers.names,
                                  lambda p: self.gateway.plugs(p, self.node),
                                  period=self.reporter.refresh)
        #: this host's id: what the agent writes onto a record before it plugs it
        self.host = self.reporter.host
        #: NetworkPolicy for the pods it plugged (``network_policy`` False: another
        #: engine's, podnet's table removed)
        self.policy = PolicyEnforcer(
            cluster, node, ports=self.policy_ports, local_record=self._local_record,
            enforced=self._node_enforced, changed=self.reporter.poke,
            enforce=network_policy, loops=self.loops, observe=self.metrics.programmed)
        #: pods read from the API server for their networks (the node's pod informer did
        #: not have them)
        self.pod_reads = 0
        self._reporter_thread: threading.Thread | None = None
        self._dropped_thread: threading.Thread | None = None
        self.metrics.attach(self)

    # --- life --------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Its records listed and its first report written, and the report its own (no
        agent of another host holds it): it may plug."""
        return (self.records.has_synced and self.reporter.written is not None
                and self.reporter.conflict is None)

    def _not_ready(self) -> str:
        return self.reporter.conflict or ("podnet node agent is starting: its records are "
                                          "not listed or its first report not written yet")

    def start(self) -> None:
        """List the node's records, unplug leftovers of records that no longer exist,
        then follow the records in a thread."""
        # the namespace it serves in too (started inside a node's namespace, as the
        # demo does, it is not the one it was made in)
        self._own_namespaces |= own_network_namespaces()
        self.records.start()
        self.remove_leftovers()
        # the table rebuilt from the API before the first ADD: a restarted agent's pods
        # are never open meanwhile (the old table stays in the kernel until replaced)
        self.policy.start()
        # the first report before the first ADD (not ready until it is written: another
        # host's agent may hold the node's report)
        self.reporter.flush()
        self._thread = threading.Thread(target=self.records.run, args=(self._stop, 0.5),
                                        kwargs={"on_turn": self.loops.add("watch", 0.5).turn},
                                        name="podnet-node-informer", daemon=True)
        self._thread.start()
        reporting = self.loops.add("reporter", 1.0 + self.reporter.batch)
        self._reporter_thread = threading.Thread(
            target=self.reporter.run, args=(self._stop, reporting.turn),
            name="podnet-node-report", daemon=True)
        self._reporter_thread.start()
        self._dropped_thread = threading.Thread(target=self._follow_dropped,
                                                name="podnet-node-dropped", daemon=True)
        self._dropped_thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.loops.stopped = True
        with self._changed:
            self._changed.notify_all()
        self.records.stop()
        self.policy.stop()
        for thread in (self._thread, self._reporter_thread, self._dropped_thread):
            if thread is not None:
                thread.join(timeout=5)

    def _on_record(self, *_: object) -> None:
        with self._changed:
            self._changed.notify_all()
        self.reporter.poke()
        self.policy.poke()

    # --- NetworkPolicy -------------------------------------------------------------------

    def _node_enforced(self, provider: str) -> bool:
        """Whether this agent enforces NetworkPolicy for the provider's pods."""
        return (provider in self.providers
                and self.providers[provider].network_policy is Enforcement.NODE)

    def policy_ports(self) -> dict[str, HostPort]:
        """Pod key -> its default network's host interface and addresses, for the pods
        this host plugged of providers the node enforces policy for."""
        records = {pn.key: pn for pn in self.records.values()}
        out: dict[str, HostPort] = {}
        for _, plug in self._plugs(raw=True):
            pn = records.get(plug.owner or "")
            if (pn is None or pn.spec.network != DEFAULT_NETWORK or not plug.host_interface
                    or not self._node_enforced(pn.spec.provider)):
                continue
            out[f"{pn.metadata.namespace}/{pn.spec.pod_name}"] = HostPort(
                plug.host_interface, tuple(str(a.ip) for a in record_addresses(pn)))
        return out

    def _local_record(self, pod_key: str) -> tuple[str, str, tuple[str, ...]] | None:
        for pn in self.records.by_index("pod", pod_key):
            if pn.spec.network == DEFAULT_NETWORK:
                return (pod_key, pn.spec.provider,
                        tuple(str(a.ip) for a in record_addresses(pn)))
        return None

    def _admit(self, req: CniRequest, records: list[PodNetwork]) -> None:
        """The pod just plugged into the NetworkPolicy table before its ADD answers;
        error 11 when a policy selects it and the table cannot be programmed."""
        if not self.policy.enforce or not any(
                pn.spec.network == DEFAULT_NETWORK and self._node_enforced(pn.spec.provider)
                for pn in records):
            return  # another engine's policy (no pod read), or not a pod podnet enforces
        assert req.namespace is not None and req.pod is not None
        pod: Any = self.policy.pods.get(req.pod_key)
        if pod is None or (req.uid and pod.uid != req.uid):
            try:
                pod = self.cluster.get(POD, req.pod, req.namespace)
            except ApiError as exc:
                raise CniError(TRY_AGAIN, f"pod {req.pod_key}: {exc}", status=503) from exc
        try:
            self.policy.admit(pod)
        except NftablesError as exc:
            raise CniError(TRY_AGAIN, f"pod {req.pod_key}: a NetworkPolicy selects it and "
                                      f"could not be programmed: {exc}", status=503) from exc

    def report(self) -> AgentReport:
        """What the agent tells the controller: the records it has interfaces for (or is
        plugging), and the release tokens of the Releasing records it has none for."""
        with self._report_lock:
            with self._state_lock:
                start = self._plug_seq
            # the slow part, outside the lock every ADD takes: the host itself is read
            # on the report's period (and while the view is stale), else the view
            listed = {plug.owner for _, plug in self._plugs(raw=True,
                                                            fresh=self.plug_view.due())
                      if plug.owner}
            granted = self.grants.owners()
            with self._state_lock:
                plugged = listed | granted | set(self._plugging)
                plugged.update(k for k, seq in self._plug_ended.items() if seq > start)
                self._plug_ended = {k: seq for k, seq in self._plug_ended.items()
                                    if seq > start}
                unplugged = {release_token(pn) for pn in self.records.values()
                             if pn.status.phase is Phase.RELEASING and pn.key not in plugged}
        return AgentReport(node=self.node, holder=self.reporter.holder,
                           plugged=frozenset(plugged), unplugged=frozenset(unplugged))

    def _write_plugged_on(self, records: list[PodNetwork]) -> None:
        """Write this host onto each record before its interface is made (the release
        handshake's durable half: a Releasing record names the hosts whose word its
        address waits for, whatever becomes of their reports). Guarded by the
        resourceVersion the agent saw Routed: a record released meanwhile is not plugged.

        :raises CniError: 11 when a record changed or could not be written (retried)."""
        for pn in records:
            for _ in range(3):  # the cache behind this agent's own earlier write
                hosts = plugged_on(pn)
                if self.host in hosts:
                    break
                patch = {"metadata": {
                    "resourceVersion": pn.metadata.resource_version,
                    "annotations": {
                        ANNOTATION_PLUGGED_ON: ",".join(sorted({*hosts, self.host}))}}}
                try:
                    self.cluster.patch(POD_NETWORK, pn.metadata.name, patch,
                                       pn.metadata.namespace)
                    break
                except Conflict:
                    found = self._read_record(pn)
                except ApiError as exc:
                    raise CniError(TRY_AGAIN, f"PodNetwork {pn.key}: {ANNOTATION_PLUGGED_ON} "
                                              f"not written: {exc}", status=503) from exc
                if found is None or found.status.phase is not Phase.ROUTED:
                    raise CniError(TRY_AGAIN, f"PodNetwork {pn.key} is being released",
                                   status=503)
                pn = found
            else:
                raise CniError(TRY_AGAIN, f"PodNetwork {pn.key}: {ANNOTATION_PLUGGED_ON} not "
                                          "written: the record keeps changing", status=503)

    def _read_record(self, pn: PodNetwork) -> PodNetwork | None:
        try:
            return _read_pod_network(self.cluster.get(POD_NETWORK, pn.metadata.name,
                                                      pn.metadata.namespace))
        except NotFound:
            return None
        except ApiError as exc:
            raise CniError(TRY_AGAIN, f"PodNetwork {pn.key}: {exc}", status=503) from exc

    def dataplane_annotations(self) -> dict[str, str]:
        """The report's annotations saying what the dataplanes have in place on this host
        (``podnet.linux.hooks.ReportsAnnotations``; none without such a dataplane)."""
        said: dict[str, str] = {}
        for kind, dataplane in self._reporting.items():
            try:
                self._dataplane_said[kind] = dataplane.report_annotations()
            except OSError as exc:  # netlink unreadable now: the last summary stands
                log.warning("node %s: the %s could not be read: %s", self.node,
                            kind.__name__, exc)
            said.update(self._dataplane_said.get(kind, {}))
        said.update(self.policy.annotations())
        return said

    @contextlib.contextmanager
    def _plugging_of(self, records: list[PodNetwork]) -> Iterator[None]:
        """Mark ``records`` as being plugged, once each is still Routed in the cache;
        error 11 when one turned Releasing (its pod is gone: no interface for it)."""
        keys = [pn.key for pn in records]
        with self._state_lock:
            for pn in records:
                now = self.records.get(pn.key)
                if now is None or now.status.phase is not Phase.ROUTED:
                    raise CniError(TRY_AGAIN, f"PodNetwork {pn.key} is being released",
                                   status=503)
            self._plugging.update(keys)
        try:
            yield
        finally:
            with self._state_lock:
                self._plugging.subtract(keys)
                self._plugging += Counter()  # drop the zeros
                self._plug_seq += 1
                self._plug_ended.update(dict.fromkeys(keys, self._plug_seq))
            self.reporter.poke()

    def remove_leftovers(self) -> int:
        """Unplug what was plugged on this host for records that no longer exist or are
        Releasing (their pod is gone: the runtime's DEL, if it ever comes, finds nothing).
        A record migrating away (a VM's live migration from this node) is this node's
        too while it says so: the VM still runs here on its interface."""
        removed = 0
        migrating = self._migrating_away()
        known = {pn.key for pn in (*self.records.values(), *migrating)
                 if pn.status.phase is not Phase.RELEASING}
        for provider, plug in self._plugs(raw=True, fresh=True,
                                          more=[pn.key for pn in migrating]):
            if plug.owner is not None and plug.owner in known:
                continue
            log.info("removing leftover %s (%s of %s, record %s gone or Releasing)",
                     plug.host_interface, plug.if_name, plug.container_id, plug.owner)
            self._unplug(UnplugContext(
                provider=provider, network=plug.network, container_id=plug.container_id,
                if_name=plug.if_name), raw=True)
            removed += 1
        removed += self.grants.keep_only({*self.records.keys(), *(pn.key for pn in migrating)})
        self.reporter.poke()
        return removed

    def _migrating_away(self) -> list[PodNetwork]:
        """The records of VMs migrating away from this node: the controller labels and
        annotates them with it (``podnet.io/migration-source-node``) while they serve the
        migration's target on its node, until the migration ends."""
        listed = self.cluster.list(POD_NETWORK, None,
                                   f"{LABEL_MIGRATION_SOURCE_NODE}={self.node}").items
        return [pn for obj in listed if (pn := _read_pod_network(obj)) is not None
                and pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE_NODE) == self.node]

    def _plugs(self, *, raw: bool = False, fresh: bool = False,
               more: list[str] | None = None) -> list[tuple[str, Plug]]:
        """Every provider's plugs on this host, with their owners as record keys (a
        dataplane that kept a digest of a long key: taken back to the key, or None when
        no record of this node, nor one of the keys ``more``, has it): the agent's view
        (:class:`PlugView`), the host read again when ``fresh``. ``raw``: the gateway's
        errors as they are."""
        digests: dict[str, str] | None = None
        out: list[tuple[str, Plug]] = []
        found = (self.plug_view.plugs(fresh=fresh) if raw
                 else self._provider_call(lambda: self.plug_view.plugs(fresh=fresh)))
        for provider, plug in found:
            if plug.owner is not None and plug.owner.startswith(OWNER_DIGEST_PREFIX):
                if digests is None:
                    keys = [*self.records.keys(), *(more or ())]
                    digests = {owner_digest(k): k for k in keys}
                plug = attrs.evolve(plug, owner=digests.get(plug.owner))
            out.append((provider, plug))
        return out

    def _plug(self, context: PlugContext) -> PlugResult:
        """The record's provider plugs the interface; the view learns it (stale when the
        plug failed halfway, or says no host interface: the host's read will)."""
        pn = context.pod_network
        try:
            result: PlugResult = self._provider_call(self.gateway.plug, context)
        except BaseException:
            self.plug_view.failed()
            raise
        if result.host_interface is None:
            self.plug_view.failed()
        else:
            self.plug_view.plugged(pn.spec.provider, Plug(
                container_id=context.container_id, if_name=context.if_name,
                network=pn.spec.network, owner=pn.key,
                host_interface=result.host_interface))
        return result

    def _unplug(self, context: UnplugContext, *, raw: bool = False) -> None:
        """The provider unplugs the interface; the view learns it (stale when the
        unplug failed: what is left is not known). ``raw``: the gateway's errors as they
        are."""
        try:
            if raw:
                self.gateway.unplug(context)
            else:
                self._provider_call(self.gateway.unplug, context)
        except BaseException:
            self.plug_view.failed()
            raise
        self.plug_view.unplugged(context.provider, context.container_id, context.if_name)

    def _check_sandbox(self, netns: str) -> None:
        """Error 7 naming ``netns`` unless it is a network namespace other than the
        node's own: compared by identity, not path (``/proc/1/ns/net``, a bind mount of
        the agent's namespace). Checked before anything is touched."""
        try:
            identity = network_namespace_id(netns)
        except FileNotFoundError:
            raise CniError(INVALID, f"netns: {netns} does not exist") from None
        except ValueError as exc:
            raise CniError(INVALID, f"netns: {exc}: a sandbox is a network namespace"
                           ) from None
        except OSError as exc:
            raise CniError(INVALID, f"netns: {netns} cannot be opened: "
                                    f"{exc.strerror or exc}") from None
        if identity in self._own_namespaces:
            raise CniError(INVALID, f"netns: {netns} is the node's own network namespace "
                                    "(the agent's or the host's), not a pod's: podnet plugs "
                                    "nothing into it")

    # --- the pod's records -------------------------------------------------------------

    def _records_of(self, namespace: str, pod: str, uid: str | None) -> dict[str, PodNetwork]:
        """The pod's records on this node, by network."""
        out: dict[str, PodNetwork] = {}
        for pn in self.records.by_index("pod", f"{namespace}/{pod}"):
            if uid and pn.spec.pod_uid != uid:
                continue
            out[pn.spec.network] = pn
        return out

    def _networks_of(self, namespace: str, pod: str, if_name: str, uid: str | None = None
                     ) -> Attachments:
        """The networks a request for interface ``if_name`` of the pod serves, each with
        its interface name: the default network first, then the attachments of
        ``podnet.io/networks`` in order (named as the annotation says, else the lowest
        ``netN`` no Multus attachment takes). When ``if_name`` is the interface of an
        entry of the pod's ``k8s.v1.cni.cncf.io/networks``, the request is Multus's
        delegate call for that attachment alone: only its NAD's network.

        :raises CniError: 11 while the pod may still come (not found yet, not bound yet);
            7 when its records never will: a host-network pod, a pod bound to another
            node, another pod than the sandbox's (``podUid``), a malformed
            ``podnet.io/networks`` (or one naming the runtime's own interface)."""
        cached = self.policy.pods.get(f"{namespace}/{pod}")
        pod_uid: str | None
        if cached is not None and uid and cached.uid == uid:
            # the node's pod informer has this very pod (bound here: its field selector):
            # no API read; any other case (not there yet, an earlier pod of that name,
            # no uid to tell them apart) asks the API server
            pod_uid, host_network = cached.uid, cached.host_network
            bound, annotations = cached.node_name, cached.annotations
        else:
            self.pod_reads += 1
            try:
                obj = self.cluster.get(POD, pod, namespace)
            except NotFound:
                raise CniError(TRY_AGAIN, f"pod {namespace}/{pod} not found",
                               status=503) from None
            meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
            pod_uid, host_network = meta.get("uid"), bool(spec.get("hostNetwork"))
            bound, annotations = spec.get("nodeName"), meta.get("annotations") or {}
        who = f"pod {namespace}/{pod}"
        if host_network:
            raise CniError(INVALID, f"{who}: spec.hostNetwork is true: podnet serves no "
                                    "host-network pod (it needs no CNI ADD)")
        if uid and pod_uid and pod_uid != uid:
            raise CniError(INVALID, f"podUid: {uid} is not {who}'s uid {pod_uid} (the "
                                    "sandbox is an earlier pod's of that name)")
        if not bound:
            raise CniError(TRY_AGAIN, f"{who} is not bound to a node yet", status=503)
        if bound != self.node:
            raise CniError(INVALID, f"{who}: spec.nodeName is {bound}, not this node "
                                    f"{self.node}: its networks are set up there")
        try:
            attachments = parse_attachments(annotations)
            selections = parse_selections(annotations, namespace)
        except InvalidRequest as exc:
            raise CniError(INVALID, f"{who}: {exc}") from None
        multus = {s.interface: s for s in selections}
        for network, name in attachments:
            if name in multus:
                raise CniError(INVALID, f"{who}: {annotation_field(NETWORKS)}: {network} is "
                                        f"given the interface name {name}, which "
                                        f"{MULTUS_NETWORKS} gives {multus[name].entry}")
            if name == if_name:
                raise CniError(INVALID, f"{who}: {annotation_field(NETWORKS)}: {network} is "
                                        f"given the interface name {name}, which the runtime "
                                        "gives the default network")
        if if_name in multus:
            return ((multus[if_name].network, if_name),)
        all_of = ((DEFAULT_NETWORK, None), *attachments)
        names = interface_names(if_name, all_of, reserved=multus)
        return ((DEFAULT_NETWORK, None),
                *((network, name) for (network, _), name in zip(attachments, names[1:],
                                                               strict=True)))

    def _delegate_network(self, namespace: str, pod: str, if_name: str, uid: str | None
                          ) -> str | None:
        """The NAD network whose Multus interface ``if_name`` is, as far as the pod can
        be read now; None for any other interface."""
        with contextlib.suppress(CniError, ApiError):
            attachments = self._networks_of(namespace, pod, if_name, uid)
            if is_nad_network(attachments[0][0]):
                return attachments[0][0]
        return None

    def _wait_routed(self, namespace: str, pod: str, uid: str | None, if_name: str,
                     only: str | None = None, only_given: bool = True
                     ) -> tuple[Attachments, list[PodNetwork]]:
        """The pod's networks (or only the network ``only``) and every record of them,
        Routed, in interface order; error 11 when the wait runs out. A Multus delegate's
        network stands for ``only`` unless the caller named another (``only_given``)."""
        deadline = time.monotonic() + self.add_timeout
        attachments: Attachments | None = None
        missing: list[str] = []
        found: dict[str, PodNetwork] = {}
        # why the pod's networks are not known yet (not found, not bound)
        waiting_for_pod = ""
        while True:
            if attachments is None:
                try:
                    attachments = self._networks_of(namespace, pod, if_name, uid)
                except CniError as exc:
                    if exc.code != TRY_AGAIN:
                        raise  # it will never come: no use waiting
                    waiting_for_pod = exc.msg
                if attachments is not None and only is not None and not (
                        is_nad_network(attachments[0][0])
                        and (not only_given or only == attachments[0][0])):
                    attachments = only_network(attachments, only, namespace, pod)
            if attachments is not None:
                networks = [network for network, _ in attachments]
                found = self._records_of(namespace, pod, uid)
                missing = [n for n in networks
                           if n not in found or found[n].status.phase is not Phase.ROUTED]
                if not missing:
                    return attachments, [found[n] for n in networks]
                for network in missing:
                    raise_if_invalid(found.get(network))
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._not_routed(namespace, pod, missing if attachments is not None
                                       else None, found, waiting_for_pod)
            with self._changed:
                self._changed.wait(min(left, 1.0))

    def _not_routed(self, namespace: str, pod: str, missing: list[str] | None,
                    found: Mapping[str, PodNetwork], waiting_for_pod: str) -> CniError:
        """Error 11 for a wait that ran out, saying why: each missing record's phase and
        Ready condition (or that it does not exist yet), else why the pod's networks are
        not known (``missing`` None)."""
        if missing is None:
            why, reasons = [waiting_for_pod or "its networks are not known yet"], ["Pod"]
        else:
            said = [why_not_routed(found.get(network)) for network in missing]
            why = [f"network {network}: {text}" for network, (text, _) in zip(missing, said,
                                                                               strict=True)]
            reasons = [reason for _, reason in said]
        return CniError(TRY_AGAIN, f"pod {namespace}/{pod}: not Routed within "
                                   f"{self.add_timeout:g} s: {'; '.join(why)}",
                        details=", ".join(reasons), status=503)

    # --- the protocol ------------------------------------------------------------------

    @instrumented(CNI, "ADD")
    def add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = CniRequest.parse(body)
        assert req.netns is not None and req.namespace is not None and req.pod is not None
        self._check_sandbox(req.netns)
        if not self.ready:
            raise CniError(TRY_AGAIN, self._not_ready(), status=503)
        with self._container_locks.hold(req.container_id):
            attachments, records = self._wait_routed(req.namespace, req.pod, req.uid,
                                                     req.if_name)
            self._write_plugged_on(records)
            names = interface_names(req.if_name, attachments)
            results: list[tuple[PodNetwork, PlugResult]] = []
            # one record, one interface: under the records' locks, every other interface
            # of theirs goes before this sandbox's is made, whichever request comes first
            with self._record_locks.hold(*(pn.key for pn in records)), \
                    self._plugging_of(records), \
                    self._span("add", records[0], req, req.if_name):
                plugs = self._plugs()
                keys = {pn.key for pn in records}
                if any(plug.owner in keys for _, plug in plugs):
                    # these records have an interface already: what is refused or
                    # unplugged for it is decided on the host's word, not the view's
                    plugs = self._plugs(fresh=True)
                self._refuse_conflicts(req, records, names, plugs)
                self._unplug_older_sandboxes(records, req, plugs)
                for pn, name in zip(records, names, strict=True):
                    # an attachment (a Multus delegate's too) gets no default route
                    plugged = as_plugged(pn)
                    context = PlugContext(pod_network=plugged, container_id=req.container_id,
                                          if_name=name, netns=req.netns)
                    with self._span("plug", pn, req, name):
                        results.append((plugged, self._plug(context)))
                self._admit(req, records)
        return cni_result(results)

    def _refuse_conflicts(self, req: CniRequest, records: list[PodNetwork], names: list[str],
                          plugs: list[tuple[str, Plug]]) -> None:
        """Error 7, before anything is touched, for an ADD that could only end in one
        address on two interfaces or in a live sandbox unplugged for nothing:

        - the container has one of these records' interfaces under another name (the
          same container ADDed again with another ``CNI_IFNAME``);
        - another sandbox's interfaces would be unplugged for this one, and a name this
          sandbox needs is taken in its namespace by a link that is not podnet's (the
          plug would fail after the live sandbox lost its network). With no other
          sandbox, the provider's plug says so itself, touching nothing else."""
        wanted = {pn.key: name for pn, name in zip(records, names, strict=True)}
        for _, plug in plugs:
            if (plug.container_id == req.container_id and plug.owner in wanted
                    and plug.if_name != wanted[plug.owner]):
                raise CniError(INVALID, f"ifName: {req.if_name}: container "
                                        f"{req.container_id} already has PodNetwork "
                                        f"{plug.owner}'s interface, as {plug.if_name}: one "
                                        "record's address is on one interface (DEL it first)")
        if not any(plug.owner in wanted and plug.container_id != req.container_id
                   for _, plug in plugs):
            return
        assert req.netns is not None
        mine = {plug.if_name for _, plug in plugs if plug.container_id == req.container_id}
        try:
            taken = link_names(req.netns)
        except OSError as exc:
            raise CniError(INVALID, f"netns: {req.netns}: its links cannot be read: "
                                    f"{exc.strerror or exc}") from None
        for name in names:
            if name in taken and name not in mine:
                field = "ifName" if name == req.if_name else "podnet.io/networks"
                raise CniError(INVALID, f"{field}: {name} already exists in {req.netns} and "
                                        "is not podnet's: nothing was changed (the pod's "
                                        "other sandbox keeps its interfaces)")

    def _unplug_older_sandboxes(self, records: list[PodNetwork], req: CniRequest,
                                plugs: list[tuple[str, Plug]]) -> None:
        """One record, one interface: what another sandbox of the pod still has of these
        records goes before this one's is made (a sandbox the runtime recreated without
        its DEL reaching us: two interfaces would carry one address)."""
        mine = {pn.key: pn for pn in records}
        for provider, plug in plugs:
            if plug.owner not in mine or plug.container_id == req.container_id:
                continue
            log.info("pod %s: its new sandbox %s replaces %s; %s of %s unplugged",
                     req.pod_key, req.container_id, plug.container_id, plug.if_name,
                     plug.owner)
            with self._span("unplug", mine[plug.owner], req, plug.if_name):
                self._unplug(UnplugContext(
                    provider=provider, network=plug.network,
                    container_id=plug.container_id, if_name=plug.if_name,
                    pod_network=mine[plug.owner]))

    # --- attachments a running pod no longer asks for -----------------------------------

    def _follow_dropped(self) -> None:
        """:meth:`unplug_dropped` whenever the records change (and now and then)."""
        loop = self.loops.add("dropped-attachments", DROPPED_PERIOD)
        while not self._stop.is_set():
            loop.turn()
            try:
                self.unplug_dropped()
            except Exception:  # the next change or the next period tries again
                log.exception("node %s: unplugging dropped attachments failed", self.node)
            with self._changed:
                self._changed.wait(DROPPED_PERIOD)

    def unplug_dropped(self) -> int:
        """Unplug the interfaces of Releasing records whose pod runs on (same uid, not
        being deleted, on this node) and no longer asks for their network in
        ``podnet.io/networks``: the runtime sends no DEL for an attachment taken off a
        running pod, so the agent takes its interface away itself, and only then does
        its report call the record unplugged (the release handshake). A record deleted by
        hand while its pod still asks for the network keeps its interface (the pod keeps
        the address). How many interfaces were unplugged."""
        releasing = {pn.key: pn for pn in self.records.values()
                     if pn.status.phase is Phase.RELEASING
                     and pn.spec.network != DEFAULT_NETWORK}
        if not releasing:
            return 0
        held = [(provider, plug) for provider, plug in self._plugs()
                if plug.owner in releasing]
        unplugged = 0
        asked: dict[str, tuple[str | None, frozenset[str]] | None] = {}
        for provider, plug in held:
            assert plug.owner is not None
            pn = releasing[plug.owner]
            pod_key = f"{pn.metadata.namespace}/{pn.spec.pod_name}"
            if pod_key not in asked:
                asked[pod_key] = self._pod_networks_now(pn)
            now = asked[pod_key]
            if now is None or now[0] != pn.spec.pod_uid or pn.spec.network in now[1]:
                continue
            with self._record_locks.hold(pn.key):
                current = self.records.get(pn.key)
                if current is None or current.status.phase is not Phase.RELEASING:
                    continue  # taken up again meanwhile: its ADD decides
                log.info("pod %s no longer asks for network %s: %s of %s unplugged",
                         pod_key, pn.spec.network, plug.if_name, plug.container_id)
                with self.tracing.transition(
                        "node", "unplug", source=pn.status.phase.value,
                        provider=pn.spec.provider, obj=pn.key,
                        traceparent=pn.status.traceparent,
                        attributes={ATTR_CONTAINER: plug.container_id,
                                    ATTR_INTERFACE: plug.if_name, ATTR_NODE: self.node}):
                    self._unplug(UnplugContext(
                        provider=provider, network=plug.network,
                        container_id=plug.container_id, if_name=plug.if_name,
                        pod_network=pn))
                unplugged += 1
        if unplugged:
            self.reporter.poke()
        return unplugged

    def _pod_networks_now(self, pn: PodNetwork) -> tuple[str | None, frozenset[str]] | None:
        """(uid, networks asked for) of the record's pod as the API server has it now,
        when it runs on this node and is not being deleted; None otherwise, or when it
        cannot be read (nothing is unplugged on a guess)."""
        try:
            obj = self.cluster.get(POD, pn.spec.pod_name, pn.metadata.namespace)
        except (NotFound, ApiError):
            return None
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        if meta.get("deletionTimestamp") or spec.get("nodeName") != self.node:
            return None
        annotations = meta.get("annotations") or {}
        try:
            networks = frozenset((*(n for n, _ in parse_attachments(annotations)),
                                  *(s.network for s in parse_selections(
                                      annotations, pn.metadata.namespace or ""))))
        except InvalidRequest:
            return None
        return meta.get("uid"), networks

    @instrumented(CNI, "DEL")
    def delete(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = CniRequest.parse(body, sandbox=False)
        with self._container_locks.hold(req.container_id):
            records = {pn.key: pn for pn in self.records.values()}
            unplugged: set[str] = set()
            plugs = self._plugs()
            interfaces = self._interfaces_of(req)
            # a Multus delegate's DEL (its attachment's interface, known by the pod's
            # annotation or by the record of what is plugged under that name) takes that
            # interface alone; the runtime's takes the sandbox's every interface
            delegate = any(is_nad_network(pn.spec.network) for name, pn in interfaces
                           if name == req.if_name) or any(
                plug.container_id == req.container_id and plug.if_name == req.if_name
                and (pn := records.get(plug.owner or "")) is not None
                and is_nad_network(pn.spec.network) for _, plug in plugs)
            for provider, plug in plugs:
                if plug.container_id != req.container_id or (
                        delegate and plug.if_name != req.if_name):
                    continue
                pn = records.get(plug.owner or "")
                with self._span("unplug", pn, req, plug.if_name):
                    self._unplug(UnplugContext(
                        provider=provider, network=plug.network,
                        container_id=req.container_id, if_name=plug.if_name,
                        netns=req.netns, pod_network=pn))
                unplugged.add(plug.if_name)
                self.policy.poke()
            # what a plug interrupted before it was marked (the agent killed) is listed by
            # no provider: unplug the pod's interfaces by its records too (idempotent)
            for name, pn in interfaces:
                if name not in unplugged and (not delegate or name == req.if_name):
                    with self._span("unplug", pn, req, name):
                        self._unplug(UnplugContext(
                            provider=pn.spec.provider, network=pn.spec.network,
                            container_id=req.container_id, if_name=name, netns=req.netns,
                            pod_network=pn))
        self.reporter.poke()
        return {}

    def _interfaces_of(self, req: CniRequest) -> list[tuple[str, PodNetwork]]:
        """The interface names of the pod a request names, with their records on this
        node, as far as they are known (none when the request names no pod; the default
        network's alone when the pod can no longer be read)."""
        if req.namespace is None or req.pod is None:
            return []
        found = self._records_of(req.namespace, req.pod, req.uid)
        attachments: Attachments = ((DEFAULT_NETWORK, None),)
        with contextlib.suppress(CniError, ApiError):
            attachments = self._networks_of(req.namespace, req.pod, req.if_name)
        names = interface_names(req.if_name, attachments)
        return [(name, found[network])
                for (network, _), name in zip(attachments, names, strict=True)
                if network in found]

    @instrumented(CNI, "CHECK")
    def check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        req = CniRequest.parse(body)
        assert req.netns is not None and req.namespace is not None and req.pod is not None
        self._check_sandbox(req.netns)
        attachments = self._networks_of(req.namespace, req.pod, req.if_name)
        found = self._records_of(req.namespace, req.pod, req.uid)
        names = interface_names(req.if_name, attachments)
        for (network, _), name in zip(attachments, names, strict=True):
            pn = found.get(network)
            if pn is None or pn.status.phase is not Phase.ROUTED:
                raise CniError(CHECK_FAILED, f"network {network} of {req.pod_key} is not "
                                             f"Routed: {why_not_routed(pn)[0]}", status=409)
            context = PlugContext(pod_network=as_plugged(pn),
                                  container_id=req.container_id, if_name=name,
                                  netns=req.netns)
            with self._span("check", pn, req, name):
                verdict = self._provider_call(self.gateway.check_plug, context)
            if verdict is not None and not verdict.ok:
                raise CniError(CHECK_FAILED, f"{name}: {verdict.reason}", status=409)
        return {}

    def _span(self, step: str, pn: PodNetwork | None, req: CniRequest,
              if_name: str) -> AbstractContextManager[Any]:
        """A span of the agent's ``step`` in the record's own trace
        (``status.traceparent``), so a pod network's life from allocation to unplug is one
        trace; a plain root span when the record is gone."""
        if pn is None:
            return self.tracing.transition(
                "node", step, source="", provider="", obj=f"container/{req.container_id}",
                traceparent=None, attributes={ATTR_CONTAINER: req.container_id,
                                              ATTR_INTERFACE: if_name, ATTR_NODE: self.node})
        return self.tracing.transition(
            "node", step, source=pn.status.phase.value, provider=pn.spec.provider, obj=pn.key,
            traceparent=pn.status.traceparent, attributes={
                ATTR_CONTAINER: req.container_id, ATTR_INTERFACE: if_name,
                ATTR_NODE: self.node, ATTR_POD: pn.spec.pod_name,
                ATTR_NAMESPACE: pn.metadata.namespace, ATTR_IP: pn.status.ip})

    @instrumented(CNI, "GC")
    def gc(self, body: Mapping[str, Any]) -> dict[str, Any]:
        keep = {item["containerID"] for item in attachment_list(body.get("validAttachments"),
                                                                "validAttachments")}
        for provider, plug in self._plugs(fresh=True):
            # a listed container keeps all its interfaces (its attachments' too)
            if plug.container_id in keep:
                continue
            self._unplug(UnplugContext(
                provider=provider, network=plug.network, container_id=plug.container_id,
                if_name=plug.if_name))
        return {}

    # --- IPAM only (podnet-ipam: another plugin plumbs) ----------------------------------

    @instrumented(IPAM, "ADD")
    def ipam_add(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The addresses and routes of the pod's record of ``network``, once Routed (the
        same bounded wait as ADD); nothing is plugged."""
        namespace, pod, uid, network = ipam_request(body)
        container_id, if_name = body_field(body, "containerId"), body_field(body, "ifName")
        try:
            IpamGrants.name(container_id, if_name)
        except ValueError as exc:
            raise CniError(INVALID, f"containerId, ifName: {exc}") from None
        if not self.ready:
            raise CniError(TRY_AGAIN, self._not_ready(), status=503)
        # a DEL of the interface while this waits cancels it: nothing is granted after
        with self.grants.pending(container_id, if_name) as ticket:
            _, (pn,) = self._wait_routed(namespace, pod, uid, if_name, only=network,
                                         only_given=_ipam_network_given(body))
            # cancelled while it waited: this host is not written onto a record it will
            # never grant (a DEL after this check is caught at the grant)
            if ticket.cancelled:
                raise self._cancelled(container_id, if_name)
            self._write_plugged_on([pn])
            # granted while marked as plugging: no report can call the record unplugged
            # between
            with self._plugging_of([pn]):
                try:
                    self.grants.grant(container_id, if_name, pn.key, ticket)
                except Cancelled:
                    raise self._cancelled(container_id, if_name) from None
        return ipam_result(as_plugged(pn))

    @staticmethod
    def _cancelled(container_id: str, if_name: str) -> CniError:
        return CniError(TRY_AGAIN, f"containerId {container_id}, ifName {if_name}: a DEL "
                                   "came while this ADD waited for the record: nothing granted",
                        status=409)

    @instrumented(IPAM, "DEL")
    def ipam_del(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The grant goes (the calling plugin has removed its interface); the address is
        not released: the controller does that once the pod is gone, so a sandbox made
        again for the pod gets it back."""
        ipam_request(body)
        self.grants.revoke(body_field(body, "containerId"), body_field(body, "ifName"))
        self.reporter.poke()
        return {}

    @instrumented(IPAM, "CHECK")
    def ipam_check(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The caller's addresses (``config.prevResult.ips``) against the record's: each of
        the record's must be there, and no other address of the record's subnets."""
        namespace, pod, uid, network = ipam_request(body)
        config = body.get("config")
        prev = config.get("prevResult") if isinstance(config, dict) else None
        ips = prev.get("ips") if isinstance(prev, dict) else None
        if not isinstance(ips, list):
            raise CniError(INVALID, "prevResult.ips: missing (CHECK compares the caller's "
                                    "addresses with the record)")
        held = set()
        for i, ip in enumerate(ips):
            address = ip.get("address") if isinstance(ip, dict) else None
            try:
                if not isinstance(address, str):
                    raise ValueError(address)
                held.add(ipaddress.ip_interface(address))
            except ValueError:
                raise CniError(INVALID, f"prevResult.ips[{i}].address: not an address with "
                                        f"a prefix: {address!r}") from None
        if not _ipam_network_given(body):
            # a Multus delegate's CHECK is about its attachment's record
            network = self._delegate_network(namespace, pod, body_field(body, "ifName"),
                                             uid) or network
        pn = self._records_of(namespace, pod, uid).get(network)
        if pn is None or pn.status.phase is not Phase.ROUTED:
            raise CniError(CHECK_FAILED, f"network {network} of {namespace}/{pod} is not "
                                         f"Routed: {why_not_routed(pn)[0]}", status=409)
        for want in record_addresses(pn):
            if want not in held:
                raise CniError(CHECK_FAILED, f"prevResult.ips: {want} of {pn.key} is missing",
                               status=409)
            stray = [h for h in held if h != want and h.network == want.network]
            if stray:
                raise CniError(CHECK_FAILED, f"prevResult.ips: {stray[0]} is in {pn.key}'s "
                                             f"subnet {want.network} but not its address",
                               status=409)
        return {}

    @instrumented(CNI, "STATUS")
    def status(self) -> dict[str, Any]:
        if not self.ready:
            raise CniError(NOT_READY, self._not_ready(), status=503)
        return {}

    def report_body(self) -> dict[str, Any]:
        """``GET /v1/agent/report``: what the agent last wrote to its Lease, and what the
        handshake has cost in API writes so far."""
        written = self.reporter.written
        return {"node": self.node, "holder": self.reporter.holder,
                "conflict": self.reporter.conflict,
                "plugged": sorted(written.plugged) if written else [],
                "unplugged": sorted(written.unplugged) if written else [],
                "writes": dict(self.reporter.writes),
                "renewals": self.reporter.renewals,
                "hostReads": self.plug_view.reads,
                "podReads": self.pod_reads,
                "networkPolicy": self.policy.describe()}

    def _provider_call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except PodnetError as exc:
            field = getattr(exc, "field", None)
            code = INVALID if field in ("netns", "ifName") else TRY_AGAIN
            # a request the provider refuses is the caller's to fix (400), not a fault
            raise CniError(code, str(exc), details=type(exc).__name__,
                           status=400 if code == INVALID else 500) from exc
        except ApiError as exc:
            raise CniError(TRY_AGAIN, str(exc), status=503) from exc
