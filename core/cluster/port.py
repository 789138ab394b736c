"""What the engine needs from a Kubernetes cluster: the one port, two adapters.

Objects cross this port as plain JSON-shaped dicts exactly as the API server stores
them (camelCase keys, ``metadata.resourceVersion`` as a string). The in-memory adapter
(``podnet.sim.memory``, beside the emulator) and the official-client adapter must
behave alike; one contract suite runs against both.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Protocol

import attrs

Obj = dict[str, Any]


@attrs.frozen(cache_hash=True)  # a key of every cache and index: hashed on each lookup
class Kind:
    """A resource type: where it lives in the API and whether it is namespaced."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


POD = Kind("", "v1", "Pod", "pods", True)
NODE = Kind("", "v1", "Node", "nodes", False)
NAMESPACE = Kind("", "v1", "Namespace", "namespaces", False)
EVENT = Kind("", "v1", "Event", "events", True)
LEASE = Kind("coordination.k8s.io", "v1", "Lease", "leases", True)
POD_NETWORK = Kind("podnet.io", "v1alpha1", "PodNetwork", "podnetworks", True)
NODE_NETWORK = Kind("podnet.io", "v1alpha1", "NodeNetwork", "nodenetworks", False)
STATEFUL_SET = Kind("apps", "v1", "StatefulSet", "statefulsets", True)
CONFIG_MAP = Kind("", "v1", "ConfigMap", "configmaps", True)
#: the networks an operator declares (``podnet.hookspecs.networks``)
SUBNET = Kind("podnet.io", "v1alpha1", "Subnet", "subnets", False)
IP_POOL = Kind("podnet.io", "v1alpha1", "IPPool", "ippools", False)
SECURITY_GROUP = Kind("podnet.io", "v1alpha1", "SecurityGroup", "securitygroups", False)
#: the policies podnet enforces (``podnet.hookspecs.netpol``)
NETWORK_POLICY = Kind("networking.k8s.io", "v1", "NetworkPolicy", "networkpolicies", True)
#: Multus's attachment networks (not podnet's CRD: served where Multus is installed)
NAD = Kind("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition",
           "network-attachment-definitions", True)
#: KubeVirt's VMs (not podnet's CRD: served where KubeVirt is installed), read for the
#: state of their live migrations
VMI = Kind("kubevirt.io", "v1", "VirtualMachineInstance", "virtualmachineinstances", True)


class ApiError(Exception):
    """An error status from the API; ``code`` is the HTTP status."""

    code = 500
    reason = "InternalError"

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class Forbidden(ApiError):
    """403: refused whatever the object says (a create into a terminating namespace)."""

    code = 403
    reason = "Forbidden"


class NotFound(ApiError):
    code = 404
    reason = "NotFound"


class Conflict(ApiError):
    """409: a write carried a stale ``resourceVersion``."""

    code = 409
    reason = "Conflict"
    #: the writer read an old version: it reads again and retries. Optimistic
    #: concurrency at work, not a failure (no ERROR span, no failure count)
    stale_read = True


class AlreadyExists(Conflict):
    """409: create of a name that exists."""

    stale_read = False

    reason = "AlreadyExists"


class Gone(ApiError):
    """410: a watch asked for a ``resourceVersion`` the server no longer has."""

    code = 410
    reason = "Expired"


class TooLargeResourceVersion(ApiError):
    """504: a watch asked for a ``resourceVersion`` the server has not reached, as after
    a restore from an older snapshot: re-list (upstream's ``ResourceVersionTooLarge``)."""

    code = 504
    reason = "Timeout"


class Invalid(ApiError):
    """422: the object does not pass validation."""

    code = 422
    reason = "Invalid"


#: The parts of an object a reader uses, for a list that need not build the rest: each
#: key the reader reads -> ``True`` (its whole value), the parts of the object it holds
#: (a nested ``Fields``), or a list of one ``Fields`` (a list of objects, those parts of
#: each). A list given ``fields`` may leave out whatever they do not name (an adapter
#: that reads every object whole, or finds an object not shaped so, gives it whole).
Fields = Mapping[str, Any]


@attrs.frozen
class ListResult:
    #: the objects, or what ``transform`` made of each
    items: list[Any]
    resource_version: str


WatchType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
#: DeleteOptions.propagationPolicy: what happens to an object's dependents
Propagation = Literal["Orphan", "Background", "Foreground"]


@attrs.frozen
class WatchEvent:
    type: WatchType
    object: Obj


class Watch(Protocol):
    """A stream of events after a resourceVersion.

    ``poll`` returns the events available within ``timeout`` seconds (possibly none);
    once the server has dropped the watch (a timeout, a fault) ``closed`` is true and
    ``poll`` returns what was left. Raising :class:`Gone` means: re-list.
    """

    def poll(self, timeout: float = 0.0) -> list[WatchEvent]: ...

    def __iter__(self) -> Iterator[WatchEvent]: ...

    @property
    def closed(self) -> bool: ...

    @property
    def idle(self) -> bool:
        """Open with nothing to poll, at a glance (no lock): a caller that would not wait
        skips the poll. Only a hint: what arrives just after is polled the next time."""
        ...

    def stop(self) -> None: ...


def events_until_closed(watch: Watch, interval: float = 0.5) -> Iterator[WatchEvent]:
    """Every event of ``watch`` as it comes, until it is closed and drained: what iterating
    over a watch of either adapter does."""
    while True:
        events = watch.poll(interval)
        yield from events
        if not events and watch.closed:
            return


class Cluster(Protocol):
    """The engine's whole view of the API server."""

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj: ...

    def list(
        self,
        kind: Kind,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Callable[[Obj], Any] | None = None,
        *,
        fields: Fields | None = None,
    ) -> ListResult:
        """All matching objects. With ``transform``, ``items`` holds what it returned for
        each object, applied as pages arrive, so a large list never holds every raw
        object at once (100,000 raw pods are ~2 GiB; their cache entries ~0.1 GiB).
        With ``fields``, each object may hold only those parts (see ``Fields``)."""

    def watch(
        self,
        kind: Kind,
        resource_version: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: float | None = None,
    ) -> Watch: ...

    def create(self, kind: Kind, obj: Obj) -> Obj: ...

    def update(self, kind: Kind, obj: Obj) -> Obj:
        """Replace the object; 409 :class:`Conflict` when its resourceVersion is stale.
        Status is not changed by this call (status subresource semantics)."""

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        """Replace only ``status``; guarded by resourceVersion like ``update``."""

    def patch(
        self,
        kind: Kind,
        name: str,
        patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "strategic"] = "merge",
        subresource: Literal["status"] | None = None,
    ) -> Obj: ...

    def delete(
        self,
        kind: Kind,
        name: str,
        namespace: str | None = None,
        uid: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: Propagation | None = None,
    ) -> None:
        """Delete; with finalizers present only sets ``deletionTimestamp``. ``uid`` is a
        precondition: 409 when the live object has another uid. Dependents (owner
        references) are deleted by the cluster's garbage collector, or kept
        (``propagation_policy="Orphan"``), or first (``"Foreground"``)."""

    def emit_event(
        self,
        involved: Obj,
        reason: str,
        message: str,
        type: Literal["Normal", "Warning"] = "Normal",
    ) -> None:
        """Record a core/v1 Event about ``involved`` (any object with kind/metadata)."""
