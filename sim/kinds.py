"""Built-in kinds a real deployment relies on, beyond what the cluster port needs.

* **Evictions** (``POST pods/NAME/eviction``, policy/v1): ``kubectl drain`` evicts when
  discovery lists the subresource. No PodDisruptionBudget is served, so an eviction is the
  pod's delete with the eviction's ``deleteOptions``, answered 201 with a Success
  ``Status`` (upstream ``EvictionREST.Create``, pkg/registry/core/pod/storage/eviction.go).
* **Services**: a ClusterIP from the service CIDR (``--service-cluster-ip-range``,
  10.96.0.0/12 here as kubeadm's), its first address kept for the ``kubernetes`` service in
  ``default``; dynamic addresses come from above the static band, at random, as upstream's
  allocator (pkg/registry/core/service/ipallocator); node ports from 30000-32767; the API's
  defaults; allocated values kept on an update that leaves them out, and refused (422)
  when changed (pkg/registry/core/service/strategy.go, ``patchAllocatedValues``).
* **The ``default`` ServiceAccount** of every namespace, as kube-controller-manager's
  serviceaccount controller makes it (and makes it again when it is deleted).
* **events.k8s.io/v1 Events**: the core/v1 events under their other version's field names
  (``note``, ``regarding``, ``reportingController``, ``deprecated*``), one store for both
  as upstream's.
* **Defaults on write**: a pod's spec defaults and, on create, ``phase: Pending`` and its
  QoS class; a Secret's ``stringData`` folded into ``data``.
"""

from __future__ import annotations

import base64
import ipaddress
import random
from collections.abc import Callable, Iterable
from typing import Any, Final

from podnet.core.cluster.port import (
    CONFIG_MAP,
    NAMESPACE,
    AlreadyExists,
    ApiError,
    Invalid,
    Kind,
    NotFound,
    Obj,
)
from podnet.sim.memory import InMemoryCluster

__all__ = [
    "CONFIG_MAP",
    "EVENTS_V1",
    "EVICTION_DISCOVERY",
    "SECRET",
    "SERVICE",
    "SERVICE_ACCOUNT",
    "VIEWS",
    "ServiceAllocator",
    "core_event",
    "default_service_account",
    "event_v1",
    "eviction_delete_options",
    "pod_defaults",
    "pod_spec_defaults",
    "secret_on_write",
]

SERVICE: Final = Kind("", "v1", "Service", "services", True)
SECRET: Final = Kind("", "v1", "Secret", "secrets", True)
SERVICE_ACCOUNT: Final = Kind("", "v1", "ServiceAccount", "serviceaccounts", True)
DEFAULT_SERVICE_CIDR: Final = "10.96.0.0/12"
NODE_PORTS: Final = range(30000, 32768)

#: how /api/v1 lists the subresource (kubectl drain looks for it there)
EVICTION_DISCOVERY: Final = {
    "name": "pods/eviction",
    "singularName": "",
    "namespaced": True,
    "group": "policy",
    "version": "v1",
    "kind": "Eviction",
    "verbs": ["create"],
}
_EVICTION_VERSIONS: Final = ("policy/v1", "policy/v1beta1")


def eviction_delete_options(eviction: Obj, name: str) -> Obj:
    """The DeleteOptions an Eviction body carries for pod ``name``; ValueError (a 400)
    when it is not an Eviction of that pod."""
    if eviction.get("kind") not in (None, "Eviction") or eviction.get("apiVersion") not in (
        None, *_EVICTION_VERSIONS):
        raise ValueError(f"the body is a {eviction.get('kind')} in "
                         f"{eviction.get('apiVersion')}, not a policy/v1 Eviction")
    meta = eviction.get("metadata") or {}
    if meta.get("name") not in (None, "", name):
        raise ValueError("name in URL does not match name in Eviction object")
    opts = eviction.get("deleteOptions") or {}
    if not isinstance(opts, dict):
        raise ValueError("deleteOptions: expected an object")
    return opts


def default_service_account(cluster: InMemoryCluster, namespace: str) -> None:
    """Make ``namespace``'s ``default`` ServiceAccount unless it has one or is going."""
    try:
        ns = cluster.get(NAMESPACE, namespace)
    except NotFound:
        return
    if ns["metadata"].get("deletionTimestamp"):
        return
    try:
        cluster.create(SERVICE_ACCOUNT, {"metadata": {"name": "default", "namespace": namespace}})
    except AlreadyExists:
        pass
    except ApiError:
        pass  # the namespace went meanwhile, or an injected fault: the controller's retry


# --- services -------------------------------------------------------------------------


def _invalid(name: str, field: str, value: Any, detail: str) -> Invalid:
    return Invalid(f'Service "{name}" is invalid: {field}: Invalid value: {value!r}: {detail}')


class ServiceAllocator:
    """ClusterIPs and node ports for services; what is taken is read from the stored
    services each time (a deleted service's address is free again at once)."""

    def __init__(self, cidr: str = DEFAULT_SERVICE_CIDR, rng: random.Random | None = None
                 ) -> None:
        self.network = ipaddress.ip_network(cidr)
        if self.network.num_addresses < 8:
            raise ValueError(f"service CIDR {cidr} is too small")
        self._rng = rng or random.Random()
        size = self.network.num_addresses - 2  # no network or broadcast address
        # upstream's static band: min(max(16, size/16), 256) low addresses for requests
        self._static = min(max(16, size // 16), 256)

    @property
    def kubernetes_ip(self) -> str:
        """The first address: the ``kubernetes`` service's."""
        return str(self.network.network_address + 1)

    def _taken(self, services: Iterable[Obj]) -> tuple[set[str], set[int]]:
        ips: set[str] = set()
        ports: set[int] = set()
        for svc in services:
            spec = svc.get("spec") or {}
            ips.update(ip for ip in spec.get("clusterIPs") or [spec.get("clusterIP")]
                       if ip and ip != "None")
            ports.update(p["nodePort"] for p in spec.get("ports") or ()
                         if isinstance(p, dict) and p.get("nodePort"))
        return ips, ports

    def _free_ip(self, taken: set[str]) -> str:
        size = self.network.num_addresses - 2
        for _ in range(64):
            offset = self._rng.randrange(self._static + 1, size + 1)
            ip = str(self.network.network_address + offset)
            if ip not in taken:
                return ip
        for offset in (*range(self._static + 1, size + 1), *range(1, self._static + 1)):
            ip = str(self.network.network_address + offset)
            if ip not in taken:
                return ip
        raise Invalid("spec.clusterIPs: Internal error: failed to allocate a serviceIP: "
                      "range is full")

    def on_create(self, cluster: InMemoryCluster, svc: Obj) -> Obj:
        """``svc`` with the API's defaults and its allocations (the caller holds the
        cluster's lock until it is stored)."""
        name = str((svc.get("metadata") or {}).get("name") or "")
        listed = cluster.list(SERVICE).items
        ips, ports = self._taken(listed)
        spec = dict(svc.get("spec") or {})
        kind = spec.setdefault("type", "ClusterIP")
        if kind not in ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName"):
            raise Invalid(f'Service "{name}" is invalid: spec.type: Unsupported value: '
                          f'"{kind}": supported values: "ClusterIP", "ExternalName", '
                          '"LoadBalancer", "NodePort"')
        spec.setdefault("sessionAffinity", "None")
        spec["ports"] = [_port_defaults(p) for p in spec.get("ports") or ()]
        if kind == "ExternalName":
            return {**svc, "spec": spec}
        spec.setdefault("internalTrafficPolicy", "Cluster")
        requested = spec.get("clusterIP") or (spec.get("clusterIPs") or [None])[0]
        if requested == "None":
            ip = "None"
        elif requested:
            try:
                inside = ipaddress.ip_address(requested) in self.network
            except ValueError:
                raise _invalid(name, "spec.clusterIPs[0]", requested,
                               "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"
                               ) from None
            if not inside:
                raise _invalid(name, "spec.clusterIPs", [requested],
                               f"failed to allocate IP {requested}: provided IP is not in the "
                               f"valid range. The range of valid IPs is {self.network}")
            if requested in ips:
                raise _invalid(name, "spec.clusterIPs", [requested],
                               f"failed to allocate IP {requested}: provided IP is already "
                               "allocated")
            ip = requested
        else:
            ip = self._free_ip(ips)
        spec["clusterIP"], spec["clusterIPs"] = ip, [ip]
        spec.setdefault("ipFamilies", [f"IPv{self.network.version}"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        if kind in ("NodePort", "LoadBalancer"):
            spec.setdefault("externalTrafficPolicy", "Cluster")
            for port in spec["ports"]:
                if not port.get("nodePort"):
                    port["nodePort"] = self._free_port(ports)
                ports.add(port["nodePort"])
        out = {**svc, "spec": spec}
        if kind == "LoadBalancer":
            out.setdefault("status", {"loadBalancer": {}})
        else:
            out["status"] = {"loadBalancer": {}}
        return out

    def _free_port(self, taken: set[int]) -> int:
        free = [p for p in NODE_PORTS if p not in taken]
        if not free:
            raise Invalid("spec.ports[0].nodePort: Internal error: range is full")
        return self._rng.choice(free)

    def on_update(self, old: Obj, new: Obj) -> Obj:
        """``new`` with ``old``'s allocations where it leaves them out; 422 when it
        changes a ClusterIP."""
        name = str(old["metadata"]["name"])
        spec, was = dict(new.get("spec") or {}), old.get("spec") or {}
        if was.get("clusterIP") and spec.get("type", was.get("type")) != "ExternalName":
            for key in ("clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"):
                if not spec.get(key) and was.get(key):
                    spec[key] = was[key]
            if spec.get("clusterIPs") != was.get("clusterIPs"):
                raise _invalid(name, "spec.clusterIPs[0]", spec.get("clusterIPs"),
                               "may not change once set")
        return {**new, "spec": spec}

    def kubernetes_service(self, port: int) -> Obj:
        """The ``kubernetes`` service kube-apiserver keeps in ``default``, pointing at
        ``port``."""
        ip = self.kubernetes_ip
        return {
            "metadata": {"name": "kubernetes", "namespace": "default",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {
                "ports": [{"name": "https", "protocol": "TCP", "port": 443, "targetPort": port}],
                "clusterIP": ip, "clusterIPs": [ip], "type": "ClusterIP",
                "sessionAffinity": "None", "ipFamilies": [f"IPv{self.network.version}"],
                "ipFamilyPolicy": "SingleStack", "internalTrafficPolicy": "Cluster",
            },
            "status": {"loadBalancer": {}},
        }


def _port_defaults(port: Any) -> Any:
    if not isinstance(port, dict):
        return port
    out = {"protocol": "TCP", **port}
    if "targetPort" not in out and "port" in out:
        out["targetPort"] = out["port"]
    return out


# --- events.k8s.io/v1 -------------------------------------------------------------------

#: events.k8s.io/v1 Events: the core/v1 events seen through another version (one store)
EVENTS_V1: Final = Kind("events.k8s.io", "v1", "Event", "events", True)
#: core/v1 name -> events.k8s.io/v1 name; the rest are the same in both
#: (pkg/apis/events/v1/conversion.go, ``Convert_v1_Event_To_core_Event`` and back)
_EVENT_RENAMES: Final = {
    "involvedObject": "regarding",
    "message": "note",
    "reportingComponent": "reportingController",
    "source": "deprecatedSource",
    "firstTimestamp": "deprecatedFirstTimestamp",
    "lastTimestamp": "deprecatedLastTimestamp",
    "count": "deprecatedCount",
}
_EVENT_RENAMES_BACK: Final = {v: k for k, v in _EVENT_RENAMES.items()}


def event_v1(core_event: Obj) -> Obj:
    """A stored core/v1 Event as events.k8s.io/v1 shows it."""
    out = {_EVENT_RENAMES.get(k, k): v for k, v in core_event.items()}
    out["apiVersion"] = EVENTS_V1.api_version
    out["kind"] = "Event"
    return out


def core_event(event: Obj) -> Obj:
    """An events.k8s.io/v1 Event as the core/v1 store keeps it (fields of core/v1's name
    that events.k8s.io/v1 lacks are not carried: ``message`` is ``note`` there)."""
    out = {_EVENT_RENAMES_BACK.get(k, k): v for k, v in event.items()
           if k not in _EVENT_RENAMES}
    out["apiVersion"] = "v1"
    out["kind"] = "Event"
    return out


#: the view kinds: how a stored object is shown, and how a shown one is stored
VIEWS: Final[dict[Kind, tuple[Callable[[Obj], Obj], Callable[[Obj], Obj]]]] = {
    EVENTS_V1: (event_v1, core_event),
}


# --- defaults on write ---------------------------------------------------------------------


def secret_on_write(secret: Obj) -> Obj:
    """A Secret as upstream stores it: ``stringData`` (write-only) folded into ``data`` as
    base64, ``type`` Opaque when unset."""
    out = {**secret, "type": secret.get("type") or "Opaque"}
    strings = out.pop("stringData", None)
    if isinstance(strings, dict):
        data = dict(out.get("data") or {})
        for key, value in strings.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
        out["data"] = data
    return out



_POD_SPEC_DEFAULTS: Final = {
    "restartPolicy": "Always",
    "dnsPolicy": "ClusterFirst",
    "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30,
    "securityContext": {},
    "enableServiceLinks": True,
}
_CONTAINER_DEFAULTS: Final = {
    "terminationMessagePath": "/dev/termination-log",
    "terminationMessagePolicy": "File",
    "resources": {},
}


def _pull_policy(image: Any) -> str:
    # upstream: Always for a ":latest" or untagged image, else IfNotPresent
    if not isinstance(image, str) or "@" in image:
        return "IfNotPresent"
    tail = image.rsplit("/", 1)[-1]
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _qos_class(containers: list[Any]) -> str:
    """The pod's QoS class (upstream's ``GetPodQOS``, for cpu and memory)."""
    requests_any = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") if isinstance(c, dict) else None
        res = res if isinstance(res, dict) else {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            requests_any = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if not requests_any:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_spec_defaults(pod: Obj) -> Obj:
    """``pod`` with the API's defaults filled into ``spec`` and its containers
    (``SetDefaults_PodSpec``, ``SetDefaults_Container``). Upstream defaults every object it
    decodes, so a create, a PUT and the result of a patch all get them."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    spec = {**_POD_SPEC_DEFAULTS, **spec}
    for key in ("containers", "initContainers"):
        if isinstance(spec.get(key), list):
            spec[key] = [
                {**_CONTAINER_DEFAULTS, "imagePullPolicy": _pull_policy(c.get("image")), **c}
                if isinstance(c, dict) else c
                for c in spec[key]
            ]
    return {**pod, "spec": spec}


def pod_defaults(pod: Obj) -> Obj:
    """A new pod as upstream stores it: :func:`pod_spec_defaults`, the status replaced by
    ``phase: Pending`` and the QoS class (the pod strategy's ``PrepareForCreate``)."""
    pod = pod_spec_defaults(pod)
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return pod
    containers = spec.get("containers")
    qos = _qos_class(containers if isinstance(containers, list) else [])
    return {**pod, "status": {"phase": "Pending", "qosClass": qos}}
