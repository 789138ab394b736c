"""Attachment networks from Multus NetworkAttachmentDefinitions.

A pod lists its attachments in ``k8s.v1.cni.cncf.io/networks``, as Multus reads it:

- a comma-separated list of ``name``, ``namespace/name`` and either with ``@interface``
  (names are DNS-1123 labels; white space around the parts is dropped; an empty
  namespace is the pod's own, an empty interface is none);
- or, when the value holds any of ``[``, ``{`` or ``"``, a JSON list of objects with
  ``name`` (required), ``namespace``, ``interface``, ``ips`` (addresses or CIDRs),
  ``mac``, ``default-route`` and the keys podnet leaves to other plugins
  (``portMappings``, ``bandwidth``, ``cni-args``, ...). The deprecated
  ``interfaceRequest`` stands for ``interface`` when that is absent.

Multus names an attachment's interface as the entry asks, else ``net<position>``
(``net1`` for the first entry, whatever the others ask): :func:`interface_of`.

Each entry names a NetworkAttachmentDefinition (the pod's namespace unless the entry
names one). Its ``spec.config`` (one plugin, or a conflist's ``plugins``) is podnet's when
a plugin's ``type`` is ``podnet-cni`` or its ``ipam.type`` is ``podnet-ipam``
(:func:`read_nad`); podnet then keeps one PodNetwork for it, network
``<nad-namespace>/<nad-name>`` (:func:`nad_network`: the ``/`` tells it from the networks
of ``podnet.io/networks``, which are DNS-1123 labels). Other NADs are their plugins'.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Mapping
from typing import Any

import attrs

from podnet.core.errors import InvalidRequest
from podnet.hookspecs.annotations import (
    check_interface_name,
    check_ip_address,
    check_mac,
    check_references,
    is_dns1123_label,
    show,
)

#: the pod annotation Multus reads
MULTUS_NETWORKS = "k8s.v1.cni.cncf.io/networks"
FIELD = f"metadata.annotations[{MULTUS_NETWORKS}]"
#: the plugin names that make a NAD podnet's
CNI_TYPE = "podnet-cni"
IPAM_TYPE = "podnet-ipam"

#: the JSON form's keys podnet reads
_READ = ("name", "namespace", "interface", "interfaceRequest", "ips", "mac", "default-route")
#: keys Multus knows that podnet leaves to the NAD's plugin (or to Multus)
_OTHERS = ("portMappings", "bandwidth", "cni-args", "infiniband-guid", "deviceID",
           "ipam-claim-reference")
_KNOWN = frozenset((*_READ, *_OTHERS))
#: the characters that make Multus read the value as JSON
_JSON_MARKS = re.compile(r'[\[{"]')
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: the hardware address forms Multus accepts for ``mac`` (6, 8 or 20 octets, ``:`` or
#: ``-`` between them, or dotted groups of four hex digits)
_HW = re.compile(r"([0-9a-fA-F]{2}([:-])[0-9a-fA-F]{2}(\2[0-9a-fA-F]{2}){4}"
                 r"((\2[0-9a-fA-F]{2}){2}((\2[0-9a-fA-F]{2}){12})?)?"
                 r"|[0-9a-fA-F]{4}(\.[0-9a-fA-F]{4}){2}(\.[0-9a-fA-F]{4}){0,7})")


@attrs.frozen
class Selection:
    """One entry of the annotation: the NAD it names, the interface Multus makes for it
    and what it asks for (validated as Multus validates it; podnet's own checks come
    when the NAD turns out to be podnet's)."""

    #: 1-based position in the annotation (Multus's ``net<position>``)
    position: int
    namespace: str
    name: str
    interface: str
    ips: tuple[str, ...] = ()
    mac: str | None = None
    default_route: tuple[str, ...] = ()

    @property
    def network(self) -> str:
        return nad_network(self.namespace, self.name)

    @property
    def entry(self) -> str:
        """How an error names the entry: its position and NAD."""
        return f"entry {self.position} ({self.namespace}/{self.name})"


def nad_network(namespace: str, name: str) -> str:
    """The podnet network of a NAD: ``<namespace>/<name>``."""
    return f"{namespace}/{name}"


def is_nad_network(network: str) -> bool:
    """Whether ``network`` is a NAD's (``podnet.io/networks`` names have no ``/``)."""
    return "/" in network


def _bad(position: int | None, message: str) -> InvalidRequest:
    where = f"entry {position}: " if position is not None else ""
    return InvalidRequest(FIELD, f"{where}{message}")


def parse_selections(annotations: Mapping[str, str], namespace: str) -> tuple[Selection, ...]:
    """The pod's Multus attachments, in order; none when the annotation is absent or
    empty (as Multus reads it).

    :raises InvalidRequest: naming the annotation and the entry, for what Multus would
        refuse (and for two entries given one interface name, which no runtime can make)
    """
    raw = annotations.get(MULTUS_NETWORKS)
    if not raw:
        return ()
    if _JSON_MARKS.search(raw):
        found = _from_json(raw, namespace)
    else:
        found = tuple(_from_item(i, item.strip(), namespace)
                      for i, item in enumerate(raw.split(","), 1))
    seen: dict[str, int] = {}
    for s in found:
        if s.interface in seen:
            raise _bad(s.position, f"interface {s.interface} is also entry {seen[s.interface]}"
                                   "'s: each attachment needs its own interface name")
        seen[s.interface] = s.position
    return found


def selected_networks(annotations: Mapping[str, str], namespace: str) -> tuple[str, ...]:
    """The NAD networks the annotation names; none when it does not parse (for indexes
    and requeues, which must not fail: the pod's own pass reports the error)."""
    try:
        return tuple(s.network for s in parse_selections(annotations, namespace))
    except InvalidRequest:
        return ()


def interface_of(position: int, requested: str | None) -> str:
    """The interface Multus makes for the entry at ``position``."""
    return requested or f"net{position}"


def _from_item(position: int, item: str, pod_namespace: str) -> Selection:
    if not item:
        raise _bad(position, "empty entry: expected name, namespace/name or name@interface")
    parts = item.split("/")
    if len(parts) > 2:
        raise _bad(position, f"{show(item)} has more than one '/' (namespace/name)")
    namespace, rest = (parts[0].strip(), parts[1]) if len(parts) == 2 else ("", parts[0])
    at = rest.split("@")
    if len(at) > 2:
        raise _bad(position, f"{show(item)} has more than one '@' (name@interface)")
    name = at[0].strip()
    interface = at[1].strip() if len(at) == 2 else ""
    if not name:
        raise _bad(position, f"{show(item)} names no NetworkAttachmentDefinition")
    for what, value in (("namespace", namespace), ("name", name)):
        if value and not is_dns1123_label(value):
            raise _bad(position, f"{what} {show(value)} in {show(item)} is not a DNS-1123 "
                                 "label (lower case letters, digits and '-')")
    return Selection(position, namespace or pod_namespace, name,
                     interface_of(position, _interface(position, interface)))


def _interface(position: int, value: str) -> str | None:
    if not value:
        return None
    try:
        return check_interface_name(value)
    except ValueError as exc:
        raise _bad(position, str(exc)) from None


def _from_json(raw: str, pod_namespace: str) -> tuple[Selection, ...]:
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise _bad(None, f"not valid JSON ({exc}) in {show(raw)}") from None
    if data is None:
        return ()
    if not isinstance(data, list):
        raise _bad(None, f"the JSON form is a list of objects, got {type(data).__name__} "
                         f"in {show(raw)}")
    return tuple(_from_object(i, item, pod_namespace) for i, item in enumerate(data, 1))


def _string(position: int, item: Mapping[str, Any], key: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _bad(position, f"{key}: must be a string, got {show(value)}")
    return value


def _strings(position: int, item: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = item.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _bad(position, f"{key}: must be a list of strings, got {show(value)}")
    return tuple(value)


def _from_object(position: int, item: Any, pod_namespace: str) -> Selection:
    if not isinstance(item, dict):
        raise _bad(position, f"must be an object, got {show(item)}")
    for key in item:
        if key not in _KNOWN:
            meant = difflib.get_close_matches(key, sorted(_KNOWN), n=1, cutoff=0.75)
            if meant and meant[0] not in item:
                raise _bad(position, f"unknown key {show(key)} (did you mean {meant[0]!r}?)")
    name = _string(position, item, "name").strip()
    namespace = _string(position, item, "namespace").strip()
    if not name:
        raise _bad(position, "name: missing (the NetworkAttachmentDefinition's name)")
    if _SUBDOMAIN.fullmatch(name) is None or len(name) > 253:
        raise _bad(position, f"name {show(name)} is not a Kubernetes object name "
                             "(a DNS-1123 subdomain)")
    if namespace and not is_dns1123_label(namespace):
        raise _bad(position, f"namespace {show(namespace)} is not a DNS-1123 label")
    interface = (_string(position, item, "interface")
                 or _string(position, item, "interfaceRequest")).strip()
    ips = _strings(position, item, "ips")
    for ip in ips:
        try:
            (ipaddress.ip_interface if "/" in ip else ipaddress.ip_address)(ip)
        except ValueError:
            raise _bad(position, f"ips: {show(ip)} is not an IP address or CIDR") from None
    mac = _string(position, item, "mac") or None
    if mac is not None and _HW.fullmatch(mac) is None:
        raise _bad(position, f"mac: {show(mac)} is not a hardware address")
    routes = _strings(position, item, "default-route")
    for gw in routes:
        try:
            ipaddress.ip_address(gw)
        except ValueError:
            raise _bad(position, f"default-route: {show(gw)} is not an IP address") from None
    return Selection(position, namespace or pod_namespace, name,
                     interface_of(position, _interface(position, interface)),
                     ips=ips, mac=mac, default_route=routes)


# --- what a selection asks of podnet ---------------------------------------------------


def podnet_request(selection: Selection) -> tuple[str | None, str | None]:
    """(ip_address, mac_address) of a podnet NAD's entry, as podnet's request takes them.

    :raises ValueError: what podnet cannot serve, naming the key
    """
    if selection.default_route:
        raise ValueError("default-route: podnet keeps the pod's default route on its "
                         "default network; an attachment gets none")
    ip = None
    if selection.ips:
        addresses = [a.split("/")[0] for a in selection.ips]
        try:
            ip = check_ip_address(",".join(addresses))
        except ValueError as exc:
            raise ValueError(f"ips: {exc}") from None
    mac = None
    if selection.mac is not None:
        try:
            mac = check_mac(selection.mac.replace("-", ":"))
        except ValueError as exc:
            raise ValueError(f"mac: {exc}") from None
    return ip, mac


# --- NetworkAttachmentDefinitions ---------------------------------------------------------


@attrs.frozen
class NadInfo:
    """What podnet reads of a NetworkAttachmentDefinition (the informer's lean value)."""

    namespace: str
    name: str
    #: whether its config names podnet (a plugin of type podnet-cni, or an IPAM of type
    #: podnet-ipam), or mentions podnet in a config podnet cannot read
    podnet: bool = False
    #: why podnet cannot read it (naming the field), or None
    problem: str | None = None
    #: ``cni`` (podnet-cni plumbs) or ``ipam`` (another plugin plumbs)
    role: str | None = None
    #: the Subnet it names (``subnet``), the provider it names (``provider``)
    subnet: str | None = None
    provider: str | None = None
    #: the config's name (the CNI network name its delegate calls carry)
    config_name: str | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def read_nad(obj: Mapping[str, Any]) -> NadInfo:
    """The NAD as podnet reads it: whose it is and what it names (informer transform)."""
    meta = obj.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    spec = obj.get("spec")
    raw = spec.get("config") if isinstance(spec, dict) else None
    info = NadInfo(namespace, name)
    if not isinstance(raw, str) or not raw.strip():
        # Multus then reads a file of the node's: nothing podnet can see
        return info
    mentions = CNI_TYPE in raw or IPAM_TYPE in raw
    try:
        config = json.loads(raw)
    except ValueError as exc:
        return attrs.evolve(info, podnet=mentions,
                            problem=f"spec.config: not valid JSON: {exc}") if mentions else info
    if not isinstance(config, dict):
        return attrs.evolve(info, podnet=True, problem="spec.config: not a JSON object, "
                            f"got {type(config).__name__}") if mentions else info
    config_name = config.get("name") if isinstance(config.get("name"), str) else None
    info = attrs.evolve(info, config_name=config_name or name)
    if "plugins" in config:
        plugins = config["plugins"]
        if not isinstance(plugins, list):
            return attrs.evolve(info, podnet=True, problem="spec.config: plugins: must be a "
                                "list of plugin objects") if mentions else info
        candidates = [(f"plugins[{i}].", p) for i, p in enumerate(plugins)]
    else:
        candidates = [("", config)]
    ours = [(where, p) for where, p in candidates if isinstance(p, dict) and _names_podnet(p)]
    if not ours:
        return info
    if len(ours) > 1:
        return attrs.evolve(info, podnet=True, problem=(
            f"spec.config: {ours[0][0].rstrip('.')} and {ours[1][0].rstrip('.')} both name "
            "podnet: one podnet plugin per NetworkAttachmentDefinition"))
    where, plugin = ours[0]
    role = "cni" if plugin.get("type") == CNI_TYPE else "ipam"
    section, prefix = (plugin, where) if role == "cni" else (plugin["ipam"], f"{where}ipam.")
    info = attrs.evolve(info, podnet=True, role=role)
    subnet = section.get("subnet")
    if subnet is None:
        if role == "cni":
            return attrs.evolve(info, problem=(
                f"spec.config: {prefix}subnet: missing (podnet-cni needs the name of the "
                "Subnet its addresses come from)"))
    else:
        try:
            if not isinstance(subnet, str):
                raise ValueError(f"must be a string, got {show(subnet)}")
            (subnet,) = check_references([subnet.strip()])
        except ValueError as exc:
            return attrs.evolve(info, problem=f"spec.config: {prefix}subnet: {exc}")
    provider = section.get("provider")
    if provider is not None and (not isinstance(provider, str) or not provider.strip()):
        return attrs.evolve(info, problem=f"spec.config: {prefix}provider: must be a "
                                          f"provider's name, got {show(provider)}")
    return attrs.evolve(info, subnet=subnet, provider=provider.strip() if provider else None)


def _names_podnet(plugin: Mapping[str, Any]) -> bool:
    ipam = plugin.get("ipam")
    return plugin.get("type") == CNI_TYPE or (
        isinstance(ipam, dict) and ipam.get("type") == IPAM_TYPE)
