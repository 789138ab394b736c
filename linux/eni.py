"""An ENI dataplane on a node, for the cloud providers whose pod addresses are secondary
addresses of elastic network interfaces (ECS, BBC): a pod's traffic leaves through the ENI
that holds its address.

A VPC delivers a secondary address only to the ENI it is assigned to, and drops what an
ENI sends from an address it does not hold; so each pod interface is a veth pair, routed,
never bridged:

- on the host, a /32 route to the pod via the host end (``proto`` :data:`PROTO`), and a
  policy rule ``from <pod address> iif <host end> lookup <table of its ENI>`` at priority
  :data:`RULE_PRIORITY` (marked with protocol :data:`PROTO`). The rule is for what the pod
  sends only: a packet from the pod that the VPC brings back to another pod of this node
  (through another ENI) comes in on an ENI and takes the main table's /32 route;
- per ENI, table :data:`TABLE_BASE` + the ifindex of the ENI's device, whose default
  route goes through that device to its subnet's gateway (``onlink``: the device has no
  address); with a dual-stack record the table's IPv6 default route goes through the
  same device to the subnet's IPv6 gateway (``status.ipv6Gateway``). The device is the
  link with the ENI's MAC, which the provider answers
  (``mac_of``; asked once per ENI: an ENI's MAC never changes). An ifindex is
  unique on the host while the device exists; a re-attached ENI gets another device,
  another index and a fresh table, and the kernel empties the old one with its device;
- in the pod, its address as a /32 and a default route via the link-local gateway
  :data:`GATEWAY` on the veth, with a permanent neighbour entry for it (the host end's
  MAC): the pod never needs an answer to an ARP request, and the host end needs no
  address. The host has a permanent neighbour entry for the pod too. A dual-stack pod
  gets the same in IPv6: its address as a /128 (no duplicate detection: the VPC gave it
  to this pod alone), a default route via :data:`GATEWAY6` on the veth with a permanent
  neighbour entry, and on the host a /128 route and a rule ``from <ipv6>``. The host
  forwards IPv6 (``net.ipv6.conf.all.forwarding``) as it forwards IPv4: the node's
  setup, not the plug's.

Traffic from a pod to another pod of the same node goes out through its ENI and back (the
VPC routes it). The node's own addresses are the local table's, whose rule comes first;
everything else a pod sends, to other hosts of the node's underlay too, goes to its ENI.

Unplug removes the rule, the route and the pair. ``plugs`` lists the host ends (their
alias records whose they are) and, as leftovers with no owner, each rule of podnet's
whose address no host end has (``if_name`` :data:`ORPHAN_RULE`, ``container_id`` the
address): the agent's start-up reconcile unplugs them, which deletes the rule.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

import attrs

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.models import PodNetwork, Route
from podnet.hookspecs.types import (
    CheckResult,
    Plug,
    PlugContext,
    PlugResult,
    UnplugContext,
    owner_digest,
)
from podnet.linux.netns import iproute
from podnet.linux.veth import (
    IFALIASZ,
    closing,
    configure_pod_end,
    delete_link,
    failure,
    link_aliases,
    link_index,
    make_pair,
    pod_end_differs,
    pod_namespace,
)
from podnet.linux.veth import veth_names as _veth_names

#: host ends are ``pne<10 hex>``, their peers (until renamed in the pod) ``pnq<10 hex>``
HOST_PREFIX = "pne"
PEER_PREFIX = "pnq"
ALIAS_MARK = "podnet-eni:"
#: the pod's gateway: link-local, answered by a permanent neighbour entry in the pod
GATEWAY = "169.254.1.1"
#: the routes a pod's record says its interface gets (the allocation's ``routes``, with
#: ``prefix_length`` 32): what the runtime's CNI result then shows
POD_ROUTES = (Route(dst="0.0.0.0/0", gw=GATEWAY),)
#: the pod's IPv6 gateway, link-local on the veth like the IPv4 one
GATEWAY6 = "fe80::1"
#: a dual-stack pod's routes
POD_ROUTES_DUAL = (*POD_ROUTES, Route(dst="::/0", gw=GATEWAY6))
#: an ENI's table is this plus its device's ifindex
TABLE_BASE = 1000
#: the priority of the per-pod rules (before main, 32766)
RULE_PRIORITY = 2000
#: the protocol number marking podnet's routes and rules (``ip rule show proto 98``)
PROTO = 98
#: the node report's annotation with the host's ENI summary (JSON, :class:`EniSummary`)
ANNOTATION_ENI = "podnet.io/eni-dataplane"
#: the ``if_name`` of a leftover rule in :meth:`EniDataplane.plugs`
ORPHAN_RULE = "eni-rule"
_NUD_PERMANENT = 0x80
_RTNH_F_ONLINK = 4
_IFF_UP = 1
_IFA_F_NODAD = 0x02
_RT_SCOPE_LINK = 253


def _family(address: str) -> int:
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def _host_length(address: str) -> int:
    return 128 if ":" in address else 32


def _host_route_oifs(ipr: Any, address: str) -> list[Any]:
    """The output devices of the main table's routes to ``address`` (a lookup: a family
    with no route at all answers ENETUNREACH, which is none)."""
    try:
        routes = ipr.get_routes(family=_family(address), dst=address,
                                dst_len=_host_length(address), table=254)
    except Exception as exc:
        if getattr(exc, "code", None) in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return []
        raise
    return [r.get_attr("RTA_OIF") for r in routes]


def veth_names(container_id: str, if_name: str) -> tuple[str, str]:
    """The host end's name and its peer's, stable for one container and interface."""
    return _veth_names(HOST_PREFIX, PEER_PREFIX, container_id, if_name)


def pod_mac(address: str) -> str:
    """The pod interface's MAC when the record names none: locally administered, stable
    for the address (ENI addresses have no MAC of their own; the VPC never sees it)."""
    digest = hashlib.blake2s(address.encode(), digest_size=5).digest()
    return "02:" + ":".join(f"{b:02x}" for b in digest)


def table_of(device_index: int) -> int:
    return TABLE_BASE + device_index


class EniDataplane:
    """Plug, check, unplug and list the pod interfaces of one host.

    ``provider`` is whose host ends these are. ``mac_of`` answers the MAC of the ENI a
    record's address is on (its ``status.interface``; None: no such ENI); it is asked
    once per ENI.
    ``record_mac_is_the_pods``: the record's ``status.mac`` is the pod interface's (ECS);
    False when it is the ENI's (BBC's records carry the machine's ENI MAC), and the pod
    gets :func:`pod_mac`."""

    def __init__(self, provider: str, mac_of: Callable[[PodNetwork], str | None], *,
                 record_mac_is_the_pods: bool = True) -> None:
        #: the host ends' marks name it: one agent may serve two ENI providers
        self.provider = provider
        self._mac_of = mac_of
        self._pod_mac_in_record = record_mac_is_the_pods
        self._macs: dict[str, str] = {}
        self._lock = threading.Lock()

    def report_annotations(self) -> dict[str, str]:
        """The node report's summary of this host's ENI dataplane (the capability
        ``podnet.linux.hooks.ReportsAnnotations``)."""
        return {ANNOTATION_ENI: host_summary().to_json()}

    # --- the ENI -------------------------------------------------------------------------

    def eni_mac(self, pn: PodNetwork) -> str:
        eni_id = pn.status.interface or ""
        with self._lock:
            mac = self._macs.get(eni_id)
        if mac is None:
            found = self._mac_of(pn)
            if not found:
                raise ProviderError(ErrorKind.NOT_FOUND, f"ENI {eni_id} does not exist",
                                    field="status.interface", subject=eni_id)
            mac = found.lower()
            with self._lock:
                self._macs[eni_id] = mac
        return mac

    @staticmethod
    def device_of(ipr: Any, mac: str) -> int | None:
        """The index of the link with ``mac`` that is not one of podnet's host ends."""
        for link in ipr.get_links():
            name = str(link.get_attr("IFLA_IFNAME"))
            if (str(link.get_attr("IFLA_ADDRESS")).lower() == mac
                    and not name.startswith((HOST_PREFIX, PEER_PREFIX))):
                return int(link["index"])
        return None

    def _table(self, ipr: Any, pn: PodNetwork, gateway: str, gateway6: str | None) -> int:
        """The ENI's table, its default route in place; transient while the ENI's device
        is not on this host yet (the attach is still on its way)."""
        eni_id = pn.status.interface
        mac = self.eni_mac(pn)
        device = self.device_of(ipr, mac)
        if device is None:
            raise failure(f"ENI {eni_id} (MAC {mac}) has no device on this host",
                          field="status.interface")
        if not ipr.get_links(device)[0]["flags"] & _IFF_UP:
            # a hot-plugged ENI's device appears down (the attach is done, the node's
            # network setup has not run yet): routes through it fail with ENETDOWN
            ipr.link("set", index=device, state="up")
        table = table_of(device)
        ipr.route("replace", dst="0.0.0.0/0", table=table, gateway=gateway, oif=device,
                  flags=_RTNH_F_ONLINK, proto=PROTO)
        if gateway6:
            ipr.route("replace", family=socket.AF_INET6, dst="::/0", table=table,
                      gateway=gateway6, oif=device, flags=_RTNH_F_ONLINK, proto=PROTO)
        return table

    # --- the hooks' work -----------------------------------------------------------------

    def plug(self, context: PlugContext) -> PlugResult:
        pn = context.pod_network
        st = pn.status
        for value, field in ((st.ip, "status.ip"), (st.interface, "status.interface"),
                             (st.gateway, "status.gateway")):
            if not value:
                raise ProviderError(ErrorKind.FATAL, f"PodNetwork {pn.key} has no "
                                    f"{field.split('.')[1]}", field=field)
        assert st.ip and st.interface and st.gateway
        if st.ipv6 and not st.ipv6_gateway:
            raise ProviderError(ErrorKind.FATAL, f"PodNetwork {pn.key} has an IPv6 address "
                                "and no IPv6 gateway", field="status.ipv6Gateway")
        mac = ((st.mac if self._pod_mac_in_record else None) or pod_mac(st.ip)).lower()
        host, peer = veth_names(context.container_id, context.if_name)
        mark = {"c": context.container_id, "i": context.if_name, "n": pn.spec.network,
                "k": pn.key, "a": st.ip, "p": self.provider}
        alias = ALIAS_MARK + json.dumps({**mark, "a6": st.ipv6} if st.ipv6 else mark,
                                        separators=(",", ":"))
        if len(alias.encode()) > IFALIASZ:
            # the kernel keeps 255 bytes of an alias: the IPv6 address goes (its rule
            # names the host end, which is how unplug and plugs find it then)
            alias = ALIAS_MARK + json.dumps(mark, separators=(",", ":"))
        if len(alias.encode()) > IFALIASZ:
            # then a long record key goes as its digest (the agent takes it back)
            alias = ALIAS_MARK + json.dumps({**mark, "k": owner_digest(pn.key)},
                                            separators=(",", ":"))
        with closing(pod_namespace(context.netns)) as ns, closing(iproute()) as ipr:
            assert context.netns is not None  # pod_namespace checked it
            table = self._table(ipr, pn, st.gateway, st.ipv6_gateway if st.ipv6 else None)
            inside = link_index(ns, context.if_name)
            host_index = link_index(ipr, host)
            if host_index is not None and inside is None:
                ipr.link("del", index=host_index)  # half made: made again
                host_index = None
            if host_index is None:
                if inside is not None:
                    raise ProviderError(
                        ErrorKind.FATAL, f"{context.if_name} already exists in "
                        f"{context.netns} and is not podnet's", field="ifName")
                delete_link(ipr, peer)
                host_index = make_pair(ipr, host, context.netns, context.if_name, mac,
                                       st.mtu)
                inside = link_index(ns, context.if_name)
                if inside is None:
                    raise failure(f"veth {host} was not created")
                ipr.link("set", index=host_index, ifalias=alias)  # marked at once
            settings: dict[str, Any] = {"state": "up", "ifalias": alias}
            if st.mtu:
                settings["mtu"] = st.mtu
            ipr.link("set", index=host_index, **settings)
            host_mac = str(ipr.get_links(host_index)[0].get_attr("IFLA_ADDRESS"))
            assert inside is not None
            # the pod: its address alone (a /32), the link-local gateway's MAC known
            configure_pod_end(ns, inside, attrs.evolve(st, mac=mac, routes=(), ipv6=None),
                              32)
            ns.neigh("replace", dst=GATEWAY, lladdr=host_mac, ifindex=inside,
                     state=_NUD_PERMANENT)
            ns.route("replace", dst=f"{GATEWAY}/32", oif=inside, scope=253)  # link
            ns.route("replace", dst="0.0.0.0/0", gateway=GATEWAY, oif=inside)
            if st.ipv6:
                self._pod_ipv6(ns, inside, st.ipv6, host_mac)
            # the host: to the pod by its veth, from the pod by its ENI's table
            for address in (st.ip, st.ipv6):
                if not address:
                    continue
                ipr.neigh("replace", family=_family(address), dst=address, lladdr=mac,
                          ifindex=host_index, state=_NUD_PERMANENT)
                ipr.route("replace", family=_family(address),
                          dst=f"{address}/{_host_length(address)}", oif=host_index,
                          scope=_RT_SCOPE_LINK if ":" not in address else 0, proto=PROTO)
                self._rule(ipr, address, table, host)
        return PlugResult(name=context.if_name, mac=mac, sandbox=context.netns,
                          host_interface=host)

    @staticmethod
    def _pod_ipv6(ns: Any, inside: int, address: str, host_mac: str) -> None:
        """The pod's IPv6 half: its address alone, usable at once, and the link-local
        gateway's MAC known."""
        have = {(a.get_attr("IFA_ADDRESS"), a["prefixlen"])
                for a in ns.get_addr(family=socket.AF_INET6, index=inside)}
        if (address, 128) not in have:
            ns.addr("add", index=inside, address=address, prefixlen=128,
                    flags=_IFA_F_NODAD)
        ns.neigh("replace", family=socket.AF_INET6, dst=GATEWAY6, lladdr=host_mac,
                 ifindex=inside, state=_NUD_PERMANENT)
        ns.route("replace", family=socket.AF_INET6, dst="::/0", gateway=GATEWAY6,
                 oif=inside)

    @staticmethod
    def _rules_from(ipr: Any, address: str) -> list[Any]:
        length = _host_length(address)
        return [r for r in ipr.get_rules(family=_family(address))
                if r.get_attr("FRA_PRIORITY") == RULE_PRIORITY
                and r.get_attr("FRA_SRC") == address and r["src_len"] == length]

    def _rule(self, ipr: Any, address: str, table: int, host: str) -> None:
        """Exactly one rule from ``address`` coming in on ``host``, to ``table``."""
        found = False
        for rule in self._rules_from(ipr, address):
            if (rule.get_attr("FRA_TABLE") == table and rule.get_attr("FRA_IIFNAME") == host
                    and not found):
                found = True
                continue
            self._delete_rule(ipr, rule)
        if not found:
            ipr.rule("add", family=_family(address), src=address,
                     src_len=_host_length(address), iifname=host, table=table,
                     priority=RULE_PRIORITY, FRA_PROTOCOL=PROTO)

    @staticmethod
    def _delete_rule(ipr: Any, rule: Any) -> None:
        src = str(rule.get_attr("FRA_SRC"))
        spec: dict[str, Any] = {"family": _family(src), "src": src,
                                "src_len": _host_length(src), "table": rule.get_attr("FRA_TABLE"),
                                "priority": RULE_PRIORITY}
        if rule.get_attr("FRA_IIFNAME"):
            spec["iifname"] = rule.get_attr("FRA_IIFNAME")
        try:
            ipr.rule("del", **spec)
        except Exception as exc:
            if getattr(exc, "code", None) not in (errno.ENOENT, errno.ESRCH):
                raise

    def check(self, context: PlugContext) -> CheckResult:
        if not context.netns or not os.path.exists(context.netns):
            return CheckResult(ok=False, reason=f"network namespace {context.netns} is gone")
        st = context.pod_network.status
        host, _ = veth_names(context.container_id, context.if_name)
        with closing(iproute()) as ipr:
            host_index = link_index(ipr, host)
            if host_index is None:
                return CheckResult(ok=False, reason=f"host end {host} is missing")
            if st.ip:
                for address in (st.ip, st.ipv6):
                    if address and host_index not in _host_route_oifs(ipr, address):
                        return CheckResult(ok=False,
                                           reason=f"no host route to {address} via {host}")
                if st.interface:
                    device = self.device_of(ipr, self.eni_mac(context.pod_network))
                    want = table_of(device) if device is not None else None
                    for address in (st.ip, st.ipv6):
                        if not address:
                            continue
                        tables = [r.get_attr("FRA_TABLE")
                                  for r in self._rules_from(ipr, address)]
                        if tables != [want]:
                            return CheckResult(ok=False, reason=(
                                f"the rules from {address} look up {tables or 'nothing'}, "
                                f"not {want} (ENI {st.interface})"))
        with closing(pod_namespace(context.netns)) as ns:
            pod = attrs.evolve(st, routes=(),
                               mac=st.mac if self._pod_mac_in_record else None)
            reason = pod_end_differs(ns, context.if_name, pod)
        return CheckResult(ok=False, reason=reason) if reason else CheckResult(ok=True)

    def unplug(self, context: UnplugContext) -> None:
        with closing(iproute()) as ipr:
            if context.if_name == ORPHAN_RULE:
                orphan = context.container_id
                marks = self._marks()
                if orphan not in self._addresses():
                    for rule in self._rules_from(ipr, orphan):
                        if rule.get_attr("FRA_IIFNAME") not in marks:  # no live pod's
                            self._delete_rule(ipr, rule)
                return
            host, _ = veth_names(context.container_id, context.if_name)
            addresses = self._addresses_of(host)
            if not addresses and context.pod_network is not None:
                st = context.pod_network.status
                addresses = [a for a in (st.ip, st.ipv6) if a]
            # the rules coming in on the host end: an address a short mark left out
            addresses += [str(r.get_attr("FRA_SRC")) for family in (socket.AF_INET,
                                                                  socket.AF_INET6)
                          for r in ipr.get_rules(family=family)
                          if r.get_attr("FRA_PRIORITY") == RULE_PRIORITY
                          and r.get_attr("FRA_IIFNAME") == host
                          and str(r.get_attr("FRA_SRC")) not in addresses]
            index = link_index(ipr, host)
            for address in addresses:
                # the rule first: a crash after leaves a host end, which plugs lists
                for rule in self._rules_from(ipr, address):
                    self._delete_rule(ipr, rule)
                family, length = _family(address), _host_length(address)
                if index is not None and index in _host_route_oifs(ipr, address):
                    try:
                        ipr.route("del", family=family, dst=f"{address}/{length}",
                                  oif=index, proto=PROTO)
                    except Exception as exc:  # gone meanwhile: what unplug wants
                        if getattr(exc, "code", None) != errno.ESRCH:
                            raise
            delete_link(ipr, host)  # the pair goes with it, the pod's end too

    # --- what is plugged -----------------------------------------------------------------

    @staticmethod
    def _marks() -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for name, alias in link_aliases().items():
            if name.startswith(HOST_PREFIX) and alias.startswith(ALIAS_MARK):
                try:
                    mark = json.loads(alias[len(ALIAS_MARK):])
                except ValueError:
                    continue
                if isinstance(mark, dict):
                    out[name] = mark
        return out

    def _addresses_of(self, host: str) -> list[str]:
        mark = self._marks().get(host) or {}
        return [str(mark[k]) for k in ("a", "a6") if mark.get(k)]

    def _addresses(self) -> set[str]:
        return {str(m[k]) for m in self._marks().values() for k in ("a", "a6") if m.get(k)}

    def plugs(self) -> list[Plug]:
        out: list[Plug] = []
        marks = self._marks()
        for name, mark in marks.items():
            if mark.get("p") != self.provider:
                continue
            try:
                out.append(Plug(container_id=str(mark["c"]), if_name=str(mark["i"]),
                                network=str(mark["n"]), owner=mark.get("k"),
                                host_interface=name))
            except KeyError:
                continue
        plugged = {str(m[k]) for m in marks.values() for k in ("a", "a6") if m.get(k)}
        with closing(iproute()) as ipr:
            for family in (socket.AF_INET, socket.AF_INET6):
                for rule in ipr.get_rules(family=family):
                    address = rule.get_attr("FRA_SRC")
                    if (rule.get_attr("FRA_PRIORITY") == RULE_PRIORITY
                            and rule.get_attr("FRA_PROTOCOL") == PROTO
                            and address and address not in plugged
                            and rule.get_attr("FRA_IIFNAME") not in marks):
                        out.append(Plug(container_id=address, if_name=ORPHAN_RULE,
                                        network="default", owner=None))
        return out


# --- what is in place on this host, in short (the agent's report, ``podnet status``) -------

#: the most rules a summary lists (its JSON stays within a few kB on a full node; the
#: count of all of them is kept beside)
SUMMARY_RULES = 256


@attrs.frozen
class EniDevice:
    """An ENI's device found on the host: its table, and that table's default gateway."""

    mac: str
    name: str
    table: int
    gateway: str | None = None
    gateway6: str | None = None


@attrs.frozen
class EniSummary:
    """The ENI devices with a table of podnet's, and the tables each pod address's rules
    look up (the first :data:`SUMMARY_RULES` addresses, ``rules_total`` of them all)."""

    devices: tuple[EniDevice, ...] = ()
    rules: tuple[tuple[str, tuple[int, ...]], ...] = ()
    rules_total: int = 0

    def table_of_mac(self, mac: str) -> int | None:
        return next((d.table for d in self.devices if d.mac == mac.lower()), None)

    def device_of_table(self, table: int) -> EniDevice | None:
        return next((d for d in self.devices if d.table == table), None)

    def tables_of(self, address: str) -> tuple[int, ...] | None:
        """The tables ``address``'s rules look up; None when the summary does not say
        (no rule, or left out of a long list)."""
        return dict(self.rules).get(address)

    @property
    def complete(self) -> bool:
        return len(self.rules) == self.rules_total

    def to_json(self) -> str:
        return json.dumps({
            "devices": [{k: v for k, v in attrs.asdict(d).items() if v is not None}
                        for d in self.devices],
            "rules": {address: list(tables) for address, tables in self.rules},
            "rulesTotal": self.rules_total}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> EniSummary:
        """The summary ``text`` says; ValueError naming what is malformed."""
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        devices = []
        for i, d in enumerate(data.get("devices") or []):
            try:
                devices.append(EniDevice(mac=str(d["mac"]), name=str(d["name"]),
                                         table=int(d["table"]), gateway=d.get("gateway"),
                                         gateway6=d.get("gateway6")))
            except (KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"devices[{i}]: {exc!r}") from None
        rules = data.get("rules") or {}
        if not isinstance(rules, dict):
            raise ValueError("rules: not an object")
        try:
            listed = tuple(sorted((str(a), tuple(int(t) for t in ts)) for a, ts in rules.items()))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"rules: {exc!r}") from None
        total = data.get("rulesTotal", len(listed))
        if not isinstance(total, int):
            raise ValueError("rulesTotal: not an integer")
        return cls(devices=tuple(devices), rules=listed, rules_total=total)


def host_summary(limit: int = SUMMARY_RULES) -> EniSummary:
    """What this thread's namespace has of podnet's ENI dataplane: each table of podnet's
    with a default route (its device, found by index, named by its MAC), and each pod
    address's rules (both families)."""
    with closing(iproute()) as ipr:
        links = {int(link["index"]): link for link in ipr.get_links()}
        found: dict[int, dict[str, Any]] = {}
        for family, key in ((socket.AF_INET, "gateway"), (socket.AF_INET6, "gateway6")):
            for route in ipr.get_routes(family=family, proto=PROTO):  # every table
                table = int(route.get_attr("RTA_TABLE") or route["table"])
                if table < TABLE_BASE or route["dst_len"] != 0:
                    continue
                link = links.get(int(route.get_attr("RTA_OIF") or 0))
                if link is None:
                    continue
                entry = found.setdefault(table, {
                    "mac": str(link.get_attr("IFLA_ADDRESS")).lower(),
                    "name": str(link.get_attr("IFLA_IFNAME")), "table": table})
                entry[key] = route.get_attr("RTA_GATEWAY")
        rules: dict[str, list[int]] = {}
        for family in (socket.AF_INET, socket.AF_INET6):
            for rule in ipr.get_rules(family=family):
                address = rule.get_attr("FRA_SRC")
                if (rule.get_attr("FRA_PRIORITY") == RULE_PRIORITY
                        and rule.get_attr("FRA_PROTOCOL") == PROTO and address):
                    rules.setdefault(str(address), []).append(int(rule.get_attr("FRA_TABLE")))
    listed = sorted(rules.items())
    return EniSummary(
        devices=tuple(EniDevice(**found[t]) for t in sorted(found)),
        rules=tuple((a, tuple(sorted(ts))) for a, ts in listed[:limit]),
        rules_total=len(listed))
