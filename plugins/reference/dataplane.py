"""The reference provider's dataplane: a Linux bridge per network, a veth pair per pod
interface.

The host end of each pair sits on the network's bridge (``pnbr-<network>``), which holds
the gateway address under a MAC of its own, set when it is made (:func:`bridge_mac`):
the kernel keeps a set MAC, where a bridge's unset one follows the lowest of its ports'
and is zeroed with its last, changing the gateway's MAC under every pod that cached it.
The pod end is made in the pod's network namespace (never moved
there: a move waits for the kernel's RCU grace periods), named as the runtime asked and
given the record's MAC and MTU, then its address, prefix and routes. Everything goes
through netlink (pyroute2); the pod namespace's netlink socket is made by a thread that
joins the namespace, not by a forked helper.

The host end's name is derived from the container id and the interface name, so a
second plug finds the first one's; its alias (``IFLA_IFALIAS``) records whose it is, so
the agent can list what it plugged after a restart and remove leftovers.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from typing import Any

from podnet.hookspecs.errors import ErrorKind, ProviderError
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
    IFNAMSIZ,
    closing,
    configure_pod_end,
    delete_link,
    failure,
    link_aliases,
    link_index,
    link_of,
    make_pair,
    pod_end_differs,
    pod_namespace,
)
from podnet.linux.veth import veth_names as _veth_names

#: every host end is named ``pnv<10 hex>``, its peer (until it is renamed in the pod)
#: ``pnp<10 hex>``; the alias of a host end starts with this mark
HOST_PREFIX = "pnv"
PEER_PREFIX = "pnp"
ALIAS_MARK = "podnet:"
BRIDGE_PREFIX = "pnbr-"


def bridge_mac(bridge: str) -> str:
    """The MAC of bridge ``bridge``: locally administered unicast, derived from its name
    (so the same after the bridge is made again), first octet 0x0e where the reference
    provider's pod MACs have 0x0a."""
    digest = hashlib.blake2s(f"bridge/{bridge}".encode(), digest_size=5).digest()
    return "0e:" + ":".join(f"{b:02x}" for b in digest)


def bridge_name(network: str) -> str:
    """The bridge of a network, within the kernel's name limit: a longer name is cut and
    given a digest of the whole after a '.', which no network name has (two networks
    sharing a prefix never share a bridge). A NAD's network (``namespace/name``, whose
    '/' no interface name may hold, and whose name may hold a '.') always takes that
    form, its '/' as '_'."""
    name = BRIDGE_PREFIX + network
    if len(name.encode()) <= IFNAMSIZ and "/" not in network:
        return name
    digest = hashlib.blake2s(network.encode(), digest_size=3).hexdigest()
    return f"{name.replace('/', '_')[:IFNAMSIZ - len(digest) - 1]}.{digest}"


def host_alias(container_id: str, if_name: str, network: str, key: str) -> str:
    """A host end's mark: whose it is. The kernel keeps 255 bytes of an alias; a record
    key too long for it is kept as its digest (the agent takes that back to the key)."""
    mark = {"c": container_id, "i": if_name, "n": network, "k": key}
    alias = ALIAS_MARK + json.dumps(mark, separators=(",", ":"))
    if len(alias.encode()) > IFALIASZ:
        alias = ALIAS_MARK + json.dumps({**mark, "k": owner_digest(key)},
                                        separators=(",", ":"))
    return alias


def veth_names(container_id: str, if_name: str) -> tuple[str, str]:
    """The host end's name and its peer's, stable for one container and interface."""
    return _veth_names(HOST_PREFIX, PEER_PREFIX, container_id, if_name)


class BridgeDataplane:
    """Plug, check, unplug and list the veth pairs of one host."""

    def plug(self, context: PlugContext) -> PlugResult:
        pn = context.pod_network
        st = pn.status
        if st.ip is None or st.mac is None:
            raise ProviderError(ErrorKind.FATAL, f"{pn.key} has no address or MAC",
                                field="status.ip")
        prefix = st.prefix_length if st.prefix_length is not None else 32
        host, peer = veth_names(context.container_id, context.if_name)
        alias = host_alias(context.container_id, context.if_name, pn.spec.network, pn.key)
        with closing(pod_namespace(context.netns)) as ns, closing(iproute()) as ipr:
            assert context.netns is not None  # pod_namespace checked it
            bridge = self._bridge(ipr, pn.spec.network, st.gateway, prefix, st.mtu)
            inside = link_index(ns, context.if_name)
            host_index = link_index(ipr, host)
            made = False
            if host_index is not None and inside is None:
                # half made (the agent died between the steps, or an older version's
                # peer was never renamed; the peer goes with it): made again
                ipr.link("del", index=host_index)
                host_index = None
            if host_index is None:
                if inside is not None:
                    raise ProviderError(
                        ErrorKind.FATAL,
                        f"{context.if_name} already exists in {context.netns} and is "
                        "not podnet's", field="ifName")
                delete_link(ipr, peer)  # a peer left on the host by an older version
                host_index = make_pair(ipr, host, context.netns, context.if_name, st.mac,
                                       st.mtu)
                made = True
                inside = link_index(ns, context.if_name)
                if inside is None:
                    raise failure(f"veth {host} was not created")
                # marked at once: a leftover of a crash right after is still found
                ipr.link("set", index=host_index, ifalias=alias)
            settings: dict[str, Any] = {"master": bridge, "state": "up", "ifalias": alias}
            if st.mtu:
                settings["mtu"] = st.mtu
            ipr.link("set", index=host_index, **settings)
            assert inside is not None  # found, or just made
            configure_pod_end(ns, inside, st, prefix, made=made)
        return PlugResult(name=context.if_name, mac=st.mac.lower(), sandbox=context.netns,
                          host_interface=host)

    def _bridge(self, ipr: Any, network: str, gateway: str | None, prefix: int,
                mtu: int | None) -> int:
        name = bridge_name(network)
        mac = bridge_mac(name)
        found = link_of(ipr, name)
        if found is None:
            with contextlib.suppress(Exception):  # another plug made it meanwhile
                ipr.link("add", ifname=name, kind="bridge", address=mac)
            found = link_of(ipr, name)
            if found is None:
                raise failure(f"bridge {name} was not created")
        index, current = found
        if current != mac:
            # made by an older version (or by hand) without a MAC of its own: set once,
            # it no longer changes as ports come and go
            ipr.link("set", index=index, address=mac)
        if gateway:
            # added on every plug, "exists" taken as done: one request, where reading
            # the addresses back first (a dump) cost the plug more than its veth
            try:
                ipr.addr("add", index=index, address=gateway, prefixlen=prefix)
            except Exception as exc:
                if getattr(exc, "code", None) != errno.EEXIST:
                    raise
        ipr.link("set", index=index, state="up")
        return index

    def check(self, context: PlugContext) -> CheckResult:
        if not context.netns or not os.path.exists(context.netns):
            return CheckResult(ok=False, reason=f"network namespace {context.netns} is gone")
        host, _ = veth_names(context.container_id, context.if_name)
        with closing(iproute()) as ipr:
            if link_index(ipr, host) is None:
                return CheckResult(ok=False, reason=f"host end {host} is missing")
        with closing(pod_namespace(context.netns)) as ns:
            reason = pod_end_differs(ns, context.if_name, context.pod_network.status)
        return CheckResult(ok=False, reason=reason) if reason else CheckResult(ok=True)

    def unplug(self, context: UnplugContext) -> None:
        host, _ = veth_names(context.container_id, context.if_name)
        with closing(iproute()) as ipr:
            delete_link(ipr, host)  # the pair goes with it, the pod's end too

    def plugs(self) -> list[Plug]:
        out: list[Plug] = []
        for name, alias in link_aliases().items():
            if not name.startswith(HOST_PREFIX) or not alias.startswith(ALIAS_MARK):
                continue
            try:
                mark = json.loads(alias[len(ALIAS_MARK):])
                out.append(Plug(container_id=str(mark["c"]), if_name=str(mark["i"]),
                                network=str(mark["n"]), owner=mark.get("k"),
                                host_interface=name))
            except (ValueError, KeyError, TypeError):
                continue
        return out
