"""What a pod should have: the networks it wants now (which provider serves each, what
it asks for, whether its address is sticky), the records it may keep or take back, and
the names of its records."""

from __future__ import annotations

import hashlib

import attrs

from podnet.core.annotations import check_unknown_keys, parse_network_request, parse_networks
from podnet.core.attachments import (
    FIELD as MULTUS_FIELD,
)
from podnet.core.attachments import (
    MULTUS_NETWORKS,
    NadInfo,
    Selection,
    parse_selections,
    podnet_request,
)
from podnet.core.caches import Caches, pod_key_of
from podnet.core.clock import Clock
from podnet.core.cluster.port import NODE, NotFound
from podnet.core.errors import InvalidRequest
from podnet.core.gateway import ProviderGateway
from podnet.core.models import (
    ANNOTATION_MIGRATION_SOURCE,
    DEFAULT_NETWORK,
    NetworkRequest,
    NodeInfo,
    OwnerReference,
    Phase,
    PodInfo,
    PodNetwork,
)
from podnet.core.objects import is_migration_target, pod_is_sticky, pod_is_terminal, vm_of
from podnet.core.placement import Placement
from podnet.core.reconcile.podnetwork_wording import pod_ref
from podnet.core.records import RecordWriter
from podnet.hookspecs.networks import SubnetInfo

#: what a pod without ``podnet.io/`` annotations asks for
_NO_REQUEST = parse_network_request({})


@attrs.frozen
class Desired:
    provider: str
    request: NetworkRequest
    sticky: bool
    #: the problem with the pod's annotations, if any: recorded, nothing allocated
    invalid: InvalidRequest | None = None
    #: what is wrong with the annotations but harmless (unknown keys): said, not blocking
    warnings: tuple[str, ...] = ()


def record_name(pod: PodInfo, network: str, sticky: bool) -> str:
    """Sticky records are named after the pod alone, so a pod returning under the same
    name finds its address (a VM's pods after their VirtualMachineInstance, with a
    ``.vm`` suffix: each start names its pod anew); others carry the pod's uid, so a new
    pod under an old name never inherits a record by accident."""
    vm = vm_of(pod) if sticky else None
    if vm is not None:
        base = f"{vm}.{network}.vm"
    else:
        base = f"{pod.name}.{network}" if sticky else f"{pod.name}.{network}.{pod.uid[:8]}"
    # a NAD's network is ``namespace/name``: a '.' in the name (no network of
    # podnet.io/networks has one, a namespace neither)
    if "/" in network:
        base = base.replace("/", ".")
    if len(base) <= 253:
        return base
    digest = hashlib.sha256(base.encode()).hexdigest()[:10]
    # a DNS-1123 subdomain's labels end alphanumeric: trim what the cut left dangling
    return f"{base[:242].rstrip('.-')}.{digest}"


#: node name -> (the cached node asked about, the provider the placement named for it)
NodeProviders = dict[str, tuple[NodeInfo, str | None]]


class Wants:
    """The networks each pod wants, as the caches, the placement and the plugins say.
    Takes the caches, the writer (an Event on a pod bound to a missing node), the
    gateway (attachments the plugins select), the placement and the clock."""

    def __init__(self, *, caches: Caches, records: RecordWriter, gateway: ProviderGateway,
                 placement: Placement, clock: Clock) -> None:
        self.caches = caches
        self.records = records
        self.gateway = gateway
        self.placement = placement
        self.clock = clock
        #: pod key -> what was last said on a pod that has no record to carry it (its
        #: node does not exist): said once per pod and reason, again when it changes
        self._said: dict[str, str] = {}

    def forget(self, pod_key: str) -> None:
        """The pod is gone: what was said about it may be said again."""
        self._said.pop(pod_key, None)

    def held_for_vm(self, pod: PodInfo, have: list[PodNetwork],
                     desired: dict[str, Desired]) -> list[PodNetwork]:
        """The held records of the VM whose pod ``pod`` is, for networks it has no record
        of: a VM's new pod takes its addresses back. A live migration's target takes the
        record of its running source once routed (the VM keeps its address across the
        move); one migration at a time."""
        vm = vm_of(pod)
        if vm is None:
            return []
        state = self.caches.migration_of(pod)
        if state is not None and state.ended_without_target:
            return []  # KubeVirt says its migration failed or was aborted: the VM stays
        mine = {pn.spec.network for pn in have}
        out = []
        for pn in self.caches.pod_networks.by_index("vm", f"{pod.namespace}/{vm}"):
            want = desired.get(pn.spec.network)
            if (want is None or not want.sticky or pn.spec.network in mine
                    or want.provider != pn.spec.provider
                    or pn.metadata.deletion_timestamp is not None):
                continue
            if (state is not None and state.source_pod is not None
                    and state.source_pod != pn.spec.pod_name and not self._pod_gone(pn)):
                # KubeVirt names another pod as the migration's source: this record
                # serves a pod of the VM that stays (it is not the one that moves)
                continue
            if (pn.status.phase is not Phase.RELEASING and not self._pod_gone(pn)
                    and not (is_migration_target(pod) and pn.spec.pod_name != pod.name
                             and pn.status.phase is Phase.ROUTED
                             and ANNOTATION_MIGRATION_SOURCE not in pn.metadata.annotations)):
                continue  # its pod still runs and this one is no migration's target
            if (self.placement.providers[pn.spec.provider].uses_node_pool
                    and pn.spec.node_name != pod.node_name):
                continue  # a node pool's address cannot follow the VM to another node
            out.append(pn)
        return out

    def _pod_gone(self, pn: PodNetwork) -> bool:
        """Whether the pod a record serves is gone, replaced or finished, as the cache
        has it (its own pass may not have come yet)."""
        old = self.caches.pods.get(pod_key_of(pn))
        return old is None or old.uid != pn.spec.pod_uid or pod_is_terminal(old)

    def desired(self, pod: PodInfo | None,
                providers: NodeProviders | None = None) -> dict[str, Desired]:
        """The networks a pod should have now; empty when its networks must go.
        ``providers``: the nodes' providers as asked for looks taken together (a start's
        look at one node's pods), asked again only for a node whose cached value changed."""
        if pod is None or pod.host_network or not pod.node_name:
            return {}
        if pod_is_terminal(pod):
            return {}
        if pod.deletion_timestamp is not None and self.clock.now() >= pod.deletion_timestamp:
            return {}  # past its deletion grace: the pod no longer runs
        node = self.caches.nodes.get(pod.node_name)
        if node is None:
            self._say_node_missing(pod)
            return {}
        self._said.pop(pod.key, None)
        if node.deletion_timestamp is not None:
            return {}
        if providers is None:
            provider = self.placement.provider_for_node(node)
        else:
            asked = providers.get(node.name)
            if asked is None or asked[0] is not node:
                asked = providers[node.name] = (node, self.placement.provider_for_node(node))
            provider = asked[1]
        if provider is None:
            return {}
        invalid = None
        names: tuple[str, ...] = ()
        selections: tuple[Selection, ...] = ()
        warnings: tuple[str, ...] = ()
        request = _NO_REQUEST  # most pods carry no podnet.io/ annotation: nothing to read
        if pod.annotations:
            try:
                request = parse_network_request(pod.annotations)
                names = parse_networks(pod.annotations)
                warnings = check_unknown_keys(pod.annotations)
                if MULTUS_NETWORKS in pod.annotations:
                    selections = parse_selections(pod.annotations, pod.namespace)
            except InvalidRequest as exc:
                request, invalid = NetworkRequest(), exc
        info = self.placement.providers[provider]
        sticky = pod_is_sticky(pod, info.sticky_kinds)
        out = {DEFAULT_NETWORK: Desired(provider, request, sticky, invalid, warnings)}
        # who serves each attachment: the operator's config first, then the plugins
        served_by = {n: self.placement.networks[n] for n in names if n in self.placement.networks}
        for attachment in self.gateway.select_networks(pod, node):
            if attachment.provider in self.placement.providers:
                served_by.setdefault(attachment.network, attachment.provider)
        for network in dict.fromkeys((*names, *served_by)):
            if network in served_by:
                out[network] = self._attachment(pod, node, provider, network,
                                                served_by[network])
            else:
                # still a record, so the pod's owner sees why on `kubectl get pn`
                known = sorted({*self.placement.networks, *served_by}) or ["none"]
                out[network] = Desired(provider, NetworkRequest(), False, InvalidRequest(
                    f"networks[{network}]", f"network {network!r} is not served by any "
                    f"provider (configured: {', '.join(known)})"))
        if selections:
            self._multus(pod, node, provider, selections, out)
        if invalid is not None:
            # one answer for the pod's annotations: when they are wrong, none of its
            # networks is set up (an attachment a plugin read from the raw annotation
            # included), each record saying why. The pod cannot start without its default
            # network, and an attachment routed for it would only hold an address
            out = {n: d if d.invalid is not None else attrs.evolve(d, invalid=invalid)
                   for n, d in out.items()}
        return out

    def _say_node_missing(self, pod: PodInfo) -> None:
        """A pod bound to a node that does not exist gets no record (no provider serves a
        node that is not there): an Event on the Pod says so, once per pod. The node's
        arrival requeues its pods (``_on_node``), which then go on as usual."""
        message = (f"pod {pod.key} is bound to node {pod.node_name}, which does not exist: "
                   "no network is set up for it until the node is there")
        if self._said.get(pod.key) == message:
            return
        try:
            self.records.cluster.get(NODE, pod.node_name or "")
            return  # it does: the node cache is behind, and its event requeues the pod
        except NotFound:
            pass
        self._said[pod.key] = message
        self.records.event(pod_ref(pod), "NodeNotFound", message)

    def _attachment(self, pod: PodInfo, node: NodeInfo, default_provider: str, network: str,
                    provider: str) -> Desired:
        served = self.placement.providers[provider]
        problem = None
        if served.uses_node_pool and provider != default_provider:
            # a node has one pool owner: its default network's provider
            problem = InvalidRequest(
                f"networks[{network}]",
                f"provider {provider!r} allocates from node pools, but node {node.name}'s "
                f"pool belongs to {default_provider!r}; an attachment network needs a "
                "provider with its own address management")
        return Desired(provider, NetworkRequest(),
                       pod_is_sticky(pod, served.sticky_kinds), problem)

    def _multus(self, pod: PodInfo, node: NodeInfo, default_provider: str,
                selections: tuple[Selection, ...], out: dict[str, Desired]) -> None:
        """One record per Multus attachment whose NetworkAttachmentDefinition is
        podnet's (``core.attachments``), into ``out``; a NAD that is not there (yet: its
        creation requeues the pod) or not podnet's gets none."""
        if not self.caches.nads.has_synced:
            # the NADs are not listed yet (a start, an API server that refuses the list):
            # what the pod's records say stands until they are, never released on a guess
            for pn in self.caches.pod_networks.by_index("pod", pod.key):
                if any(s.network == pn.spec.network for s in selections):
                    out[pn.spec.network] = Desired(pn.spec.provider, pn.spec.requests,
                                                   pn.spec.sticky)
            return
        for selection in selections:
            nad = self.caches.nads.get(f"{selection.namespace}/{selection.name}")
            if nad is None or not nad.podnet:
                continue
            network = selection.network
            if network in out:
                out[network] = Desired(out[network].provider, NetworkRequest(), False,
                                       InvalidRequest(MULTUS_FIELD, (
                    f"{selection.entry}: names NetworkAttachmentDefinition {nad.key} again: "
                    "podnet gives a pod one interface per network")))
                continue
            out[network] = self._nad_attachment(pod, node, default_provider, selection, nad)

    def _nad_attachment(self, pod: PodInfo, node: NodeInfo, default_provider: str,
                        selection: Selection, nad: NadInfo) -> Desired:
        where = f"NetworkAttachmentDefinition {nad.key}"
        # the config's ``provider``, else the provider of the Subnet object it names, else
        # the pod's default provider (the subnet is then one of its own)
        provider = nad.provider or self._provider_of_subnet(nad.subnet) or default_provider
        if nad.problem is not None:
            return Desired(default_provider, NetworkRequest(), False,
                           InvalidRequest(where, nad.problem))
        if provider not in self.placement.providers:
            known = ", ".join(sorted(self.placement.providers.names())) or "none"
            return Desired(default_provider, NetworkRequest(), False, InvalidRequest(
                where, f"spec.config: provider: {provider!r} is not a configured provider "
                       f"(configured: {known})"))
        try:
            ip, mac = podnet_request(selection)
        except ValueError as exc:
            return Desired(provider, NetworkRequest(), False,
                           InvalidRequest(MULTUS_FIELD, f"{selection.entry}: {exc}"))
        want = self._attachment(pod, node, default_provider, selection.network, provider)
        return attrs.evolve(want, request=NetworkRequest(
            subnets=(nad.subnet,) if nad.subnet else (), ip_address=ip, mac_address=mac))

    def _provider_of_subnet(self, name: str | None) -> str | None:
        """The provider of the Subnet object ``name`` (None: no such object, or one whose
        spec does not read)."""
        declared = self.caches.subnets.get(name) if name else None
        info = declared.info if declared is not None else None
        return info.provider if isinstance(info, SubnetInfo) else None

    def wanted(self, pn: PodNetwork, pod: PodInfo | None, desired: dict[str, Desired]) -> bool:
        if pod is None or pn.metadata.deletion_timestamp is not None:
            return False
        want = desired.get(pn.spec.network)
        if want is None or want.provider != pn.spec.provider:
            return False
        if (pn.spec.node_name != pod.node_name
                and self.placement.providers[pn.spec.provider].uses_node_pool):
            return False  # an address from one node's pool cannot follow its pod elsewhere
        if ANNOTATION_MIGRATION_SOURCE in pn.metadata.annotations:
            state = self.caches.migration_of(pod)
            if state is not None and state.ended_without_target:
                # KubeVirt says the migration failed or was aborted while its target
                # pod still runs: the source gets the record back
                return False
        if pn.spec.pod_uid == pod.uid:
            return pn.status.phase is not Phase.RELEASING or pn.spec.sticky
        # another pod under the same name: only a sticky record carries over
        return pn.spec.sticky and want.sticky


def sticky_owner(pod: PodInfo) -> OwnerReference | None:
    for ref in pod.owner_references:
        if ref.controller:
            return OwnerReference(api_version=ref.api_version, kind=ref.kind, name=ref.name,
                                  uid=ref.uid)
    return None

