"""The plugin <-> agent protocol's values (docs/node.md): the CNI error codes and error
answer, the request's fields parsed once, the pod's interface names, and the results
built from the records."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from podnet.core.models import DEFAULT_NETWORK, PodNetwork
from podnet.core.objects import ready_condition
from podnet.hookspecs.types import PlugResult

DEFAULT_SOCKET = "/run/podnet/agent.sock"
DEFAULT_ADD_TIMEOUT = 30.0
DEFAULT_NAMESPACE = "kube-system"
RESULT_VERSION = "1.1.0"

#: CNI error codes the agent answers with (the specification's)
INCOMPATIBLE_VERSION = 1
INVALID_ENVIRONMENT = 4
DECODING_FAILURE = 6
INVALID = 7
TRY_AGAIN = 11
NOT_READY = 50
#: plugin-specific codes (the spec leaves 100 and up to plugins): CHECK found a
#: difference; a failure of podnet's own code (the same number: neither is the caller's)
CHECK_FAILED = 100
INTERNAL_ERROR = 100

_DEFAULT_ROUTES = frozenset({"0.0.0.0/0", "::/0"})
#: the Ready reason the controller writes for a request it will not serve as it is
INVALID_REQUEST = "InvalidRequest"


class CniError(Exception):
    """An answer of the CNI error kind: ``code``, ``msg``, ``details``; ``status`` is the
    HTTP status it travels with."""

    def __init__(self, code: int, msg: str, details: str = "", status: int = 400) -> None:
        super().__init__(msg)
        self.code = code
        self.msg = msg
        self.details = details
        self.status = status

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "msg": self.msg, "details": self.details}

    def answer(self, version: str) -> dict[str, Any]:
        """The specification's error object, as a plugin prints it for ``version``."""
        out: dict[str, Any] = {"cniVersion": version, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out


def body_field(body: Mapping[str, Any], name: str, *, optional: bool = False) -> Any:
    value = body.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise CniError(INVALID, f"{name}: missing or not a non-empty string")
    check_field(name, value)
    return value


# --- what each field may be: the agent checks them itself (a plugin may check nothing),
# so no value reaches a netlink call, a file name, a link alias or an API path unchecked

#: Linux's limit on an interface name (IFNAMSIZ less its NUL)
IFNAMSIZ = 15
#: the CNI spec's container id characters; the length podnet bounds it to (runtimes use
#: 64 hex digits): the id is kept in each host end's alias, which holds 255 bytes
CONTAINER_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
MAX_CONTAINER_ID = 64
#: Kubernetes' names: a namespace is a DNS-1123 label, a pod's name a DNS-1123 subdomain
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
NAMESPACE_NAME = re.compile(_DNS_LABEL)
POD_NAME = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def if_name_problem(value: str) -> str | None:
    """Why ``value`` cannot name a Linux interface (the kernel's rules), or None."""
    if not value:
        return "empty"
    if len(value.encode()) > IFNAMSIZ:
        return f"longer than {IFNAMSIZ} bytes"
    if value in (".", ".."):
        return "'.' and '..' name no interface"
    if any(c in "/:" or c.isspace() or not c.isprintable() for c in value):
        return "has '/', ':', white space or a control character"
    return None


def _container_id_problem(value: str) -> str | None:
    if len(value) > MAX_CONTAINER_ID:
        return f"longer than {MAX_CONTAINER_ID} characters"
    if not CONTAINER_ID.fullmatch(value):
        return "not a container id (a letter or digit, then letters, digits, '_', '-', '.')"
    return None


def _interface_problem(value: str) -> str | None:
    why = if_name_problem(value)
    return f"not an interface name: {why}" if why else None


def _matches(pattern: re.Pattern[str], limit: int, what: str) -> Any:
    return lambda value: None if len(value) <= limit and pattern.fullmatch(value) else what


#: each field's check: why a value is not what the field may be, or None
_FIELD_CHECKS: dict[str, Any] = {
    "containerId": _container_id_problem,
    "ifName": _interface_problem,
    "netns": lambda value: None if value.startswith("/") and "\0" not in value
    else "not an absolute path",
    "podNamespace": _matches(NAMESPACE_NAME, 63,
                             "not a Kubernetes namespace name (a DNS-1123 label)"),
    "podName": _matches(POD_NAME, 253, "not a Kubernetes pod name (a DNS-1123 subdomain)"),
    "podUid": _matches(UID, 128, "not a uid (letters, digits, '-', '_', '.'; at most 128)"),
}


def field_problem(name: str, value: str) -> str | None:
    """Why ``value`` is not what the request field ``name`` may be, or None."""
    check = _FIELD_CHECKS.get(name)
    return check(value) if check is not None else None


def check_field(name: str, value: str, *, shown_as: str | None = None,
                code: int = INVALID) -> None:
    """Error ``code`` (7) naming the field (as ``shown_as``: the plugin's environment
    variable that carries it) when ``value`` is not what ``name`` may be."""
    problem = field_problem(name, value)
    if problem is not None:
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise CniError(code, f"{shown_as or name}: {shown!r}: {problem}")


def attachment_list(found: Any, key: str) -> list[dict[str, str]]:
    """GC's list of the attachments to keep (the configuration's
    ``cni.dev/valid-attachments``, the request's ``validAttachments``), each reduced to
    ``containerID`` and ``ifname``; error 7 naming ``key`` when it is missing (a GC
    without it would remove every attachment of the network) or malformed."""
    if found is None:
        raise CniError(INVALID, f"{key}: missing (GC without it would remove every "
                                "attachment of the network)")
    if not isinstance(found, list):
        raise CniError(INVALID, f"{key}: must be a list, got {type(found).__name__}")
    attachments = []
    for i, item in enumerate(found):
        if not (isinstance(item, dict) and isinstance(item.get("containerID"), str)
                and isinstance(item.get("ifname"), str)):
            raise CniError(INVALID,
                           f"{key}[{i}]: must be an object with string containerID and ifname")
        attachments.append({"containerID": item["containerID"], "ifname": item["ifname"]})
    return attachments


@attrs.frozen
class CniRequest:
    """The fields of an add, check or del request (docs/node.md), parsed once."""

    container_id: str
    if_name: str
    netns: str | None
    namespace: str | None
    pod: str | None
    uid: str | None

    @classmethod
    def parse(cls, body: Mapping[str, Any], *, sandbox: bool = True) -> CniRequest:
        """``sandbox``: the request needs the netns and the pod (add, check); a del
        needs only the container and the interface."""
        netns = body.get("netns")
        config = body.get("config")
        if config is not None and not isinstance(config, dict):
            raise CniError(INVALID, "config: not a JSON object (the network configuration)")
        if not sandbox and isinstance(netns, str) and not netns.startswith("/"):
            netns = None  # a DEL needs no namespace: one it cannot use is none
        return cls(
            container_id=body_field(body, "containerId"), if_name=body_field(body, "ifName"),
            netns=(body_field(body, "netns") if sandbox
                   else netns if isinstance(netns, str) else None),
            namespace=body_field(body, "podNamespace", optional=not sandbox),
            pod=body_field(body, "podName", optional=not sandbox),
            uid=body_field(body, "podUid", optional=True))

    @property
    def pod_key(self) -> str:
        return f"{self.namespace}/{self.pod}"


#: a pod's networks in interface order: (network, the name the annotation gives or None)
Attachments = tuple[tuple[str, str | None], ...]


def interface_names(if_name: str, attachments: Attachments,
                    reserved: Iterable[str] = ()) -> list[str]:
    """The pod's interfaces: the runtime's name for the first network (the default one,
    or a Multus delegate's own), then for each attachment the name the annotation gives
    it, else the lowest free ``netN`` that is not ``reserved`` (the Multus
    attachments')."""
    taken = {if_name, *reserved, *(name for _, name in attachments[1:] if name)}
    names = [if_name]
    n = 0
    for _, name in attachments[1:]:
        if name is None:
            n += 1
            while f"net{n}" in taken:
                n += 1
            name = f"net{n}"
        names.append(name)
    return names


def raise_if_invalid(pn: PodNetwork | None) -> None:
    """Error 7 with the controller's reason when it found the pod's request invalid
    (``Ready=False``, reason ``InvalidRequest``): the record is not routed until the pod
    changes, so waiting is no use."""
    ready = ready_condition(pn) if pn is not None else None
    if pn is not None and ready is not None and ready.status == "False" \
            and ready.reason == INVALID_REQUEST:
        raise CniError(INVALID, ready.message or f"{pn.key}: invalid request",
                       details=f"PodNetwork {pn.key}: {INVALID_REQUEST}")


def why_not_routed(pn: PodNetwork | None) -> tuple[str, str]:
    """Why a pod's record is not Routed, as it says itself: (its phase and Ready
    condition, or that it does not exist yet; the Ready reason alone)."""
    if pn is None:
        return "no PodNetwork yet (the controller has not made it)", "NoPodNetwork"
    said = f"PodNetwork {pn.key} is {pn.status.phase.value}"
    ready = ready_condition(pn)
    if ready is None:
        return f"{said}, no Ready condition yet", pn.status.phase.value
    said += f", Ready={ready.status}" + (f" {ready.reason}" if ready.reason else "")
    return (f"{said}: {ready.message}" if ready.message else said), ready.reason or "Ready"


def without_default_routes(pn: PodNetwork) -> PodNetwork:
    """An attachment's record without default routes: the default network has the pod's
    default route."""
    routes = tuple(r for r in pn.status.routes if r.dst not in _DEFAULT_ROUTES)
    return attrs.evolve(pn, status=attrs.evolve(pn.status, routes=routes))


def result_ips(pn: PodNetwork, interface: int | None) -> list[dict[str, Any]]:
    """The record's addresses as CNI result ``ips`` (``interface`` left out when None: an
    IPAM result's addresses belong to the interface the caller makes)."""
    st = pn.status
    ips: list[dict[str, Any]] = []
    for address, prefix, gateway in ((st.ip, st.prefix_length or 32, st.gateway),
                                     (st.ipv6, st.ipv6_prefix_length or 128, st.ipv6_gateway)):
        if not address:
            continue
        ip: dict[str, Any] = {"address": f"{address}/{prefix}"}
        if gateway:
            ip["gateway"] = gateway
        if interface is not None:
            ip["interface"] = interface
        ips.append(ip)
    return ips


def result_routes(pn: PodNetwork) -> list[dict[str, Any]]:
    return [{"dst": route.dst, **({"gw": route.gw} if route.gw else {})}
            for route in pn.status.routes]


def cni_result(plugged: list[tuple[PodNetwork, PlugResult]]) -> dict[str, Any]:
    """The CNI 1.1.0 result of the interfaces plugged, in order."""
    interfaces: list[dict[str, Any]] = []
    ips: list[dict[str, Any]] = []
    routes: list[dict[str, Any]] = []
    for index, (pn, result) in enumerate(plugged):
        interfaces.append({"name": result.name, "mac": result.mac, "sandbox": result.sandbox})
        ips.extend(result_ips(pn, index))
        routes.extend(result_routes(pn))
    return {"cniVersion": RESULT_VERSION, "interfaces": interfaces, "ips": ips,
            "routes": routes, "dns": {}}


# --- IPAM only: the helpers of NodeAgent.ipam_* ----------------------------------------


def ipam_result(pn: PodNetwork) -> dict[str, Any]:
    """The CNI 1.1.0 IPAM result of one record: its addresses and routes, no interfaces."""
    return {"cniVersion": RESULT_VERSION, "ips": result_ips(pn, None),
            "routes": result_routes(pn), "dns": {}}


def as_plugged(pn: PodNetwork) -> PodNetwork:
    """The record as ADD would plug it: an attachment's without default routes."""
    return pn if pn.spec.network == DEFAULT_NETWORK else without_default_routes(pn)


def record_addresses(pn: PodNetwork) -> list[ipaddress.IPv4Interface | ipaddress.IPv6Interface]:
    return [ipaddress.ip_interface(ip["address"]) for ip in result_ips(pn, None)]


def ipam_request(body: Mapping[str, Any]) -> tuple[str, str, str | None, str]:
    """(namespace, pod, uid, network) of an IPAM request; error 7 naming the field."""
    body_field(body, "containerId")
    body_field(body, "ifName")
    return (body_field(body, "podNamespace"), body_field(body, "podName"),
            body_field(body, "podUid", optional=True), body_field(body, "network"))


def only_network(attachments: Attachments, network: str, namespace: str, pod: str
                  ) -> Attachments:
    """That network's attachment when the pod has it, else error 7: waiting would not
    make a record the pod does not ask for."""
    mine = tuple(a for a in attachments if a[0] == network)
    if not mine:
        names = ", ".join(n for n, _ in attachments)
        raise CniError(INVALID, f"ipam.network: pod {namespace}/{pod} has no network "
                                f"{network!r} (its networks: {names})")
    return mine
