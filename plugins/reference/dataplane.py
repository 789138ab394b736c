"""The reference provider's dataplane: a Linux bridge per network, a veth pair per pod
interface.

The host end of each pair sits on the network's bridge (``pnbr-<network>``), which holds
the gateway address; the pod end is made in the pod's network namespace (never moved
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
import ipaddress
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

from podnet.core.errors import ErrorKind, ProviderError
from podnet.hookspecs.types import CheckResult, Plug, PlugContext, PlugResult, UnplugContext

#: every host end is named ``pnv<10 hex>``, its peer (until it is renamed in the pod)
#: ``pnp<10 hex>``; the alias of a host end starts with this mark
HOST_PREFIX = "pnv"
PEER_PREFIX = "pnp"
ALIAS_MARK = "podnet:"
BRIDGE_PREFIX = "pnbr-"
#: Linux's limit on an interface's name
IFNAMSIZ = 15


def bridge_name(network: str) -> str:
    """The bridge of a network, within the kernel's name limit."""
    return (BRIDGE_PREFIX + network)[:IFNAMSIZ]


def veth_names(container_id: str, if_name: str) -> tuple[str, str]:
    """The host end's name and its peer's, stable for one container and interface."""
    digest = hashlib.blake2s(f"{container_id}/{if_name}".encode(), digest_size=5).hexdigest()
    return HOST_PREFIX + digest, PEER_PREFIX + digest


def _iproute() -> Any:
    from pyroute2 import IPRoute

    return IPRoute()


#: setns(2)'s type of a network namespace, and the netlink protocol of routing
_CLONE_NEWNET = 0x40000000
_NETLINK_ROUTE = 0


def _netns(path: str) -> Any:
    """An IPRoute speaking to the namespace at ``path``.

    A netlink socket belongs to the namespace it is made in, for its whole life. It is
    made by a short-lived thread that joins the namespace (a network namespace is per
    thread, so neither the caller nor the process moves, and the thread ends with it):
    well under a millisecond, where pyroute2's own NetNS forks a helper process for it
    (about 10 ms an ADD, more on a loaded machine)."""
    import ctypes
    import socket
    import threading

    from pyroute2 import IPRoute

    made: dict[str, Any] = {}

    def make() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code))
            finally:
                os.close(fd)
            made["socket"] = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM,
                                           _NETLINK_ROUTE)
        except BaseException as exc:  # handed to the caller's thread
            made["error"] = exc

    thread = threading.Thread(target=make, name="podnet-netns-socket")
    thread.start()
    thread.join()
    error = made.get("error")
    if isinstance(error, OSError):
        raise ProviderError(ErrorKind.FATAL, f"{path}: not a network namespace one can "
                                             f"join ({error.strerror})", field="netns")
    if error is not None:
        raise error
    return IPRoute(fileno=made["socket"].detach())


def _fail(message: str, field: str | None = None) -> ProviderError:
    return ProviderError(ErrorKind.TRANSIENT, message, field=field)


def _index(ipr: Any, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return int(found[0]) if found else None


def _attr(msg: Any, name: str) -> Any:
    return msg.get_attr(name)


@contextlib.contextmanager
def _closing(obj: Any) -> Iterator[Any]:
    try:
        yield obj
    finally:
        obj.close()


class BridgeDataplane:
    """Plug, check, unplug and list the veth pairs of one host."""

    def plug(self, context: PlugContext) -> PlugResult:
        pn = context.pod_network
        st = pn.status
        if not context.netns:
            raise ProviderError(ErrorKind.FATAL, "no network namespace to plug into",
                                field="netns")
        if not os.path.exists(context.netns):
            raise ProviderError(ErrorKind.FATAL, f"{context.netns}: no such namespace",
                                field="netns")
        if st.ip is None or st.mac is None:
            raise ProviderError(ErrorKind.FATAL, f"{pn.key} has no address or MAC",
                                field="status.ip")
        prefix = st.prefix_length if st.prefix_length is not None else 32
        host, peer = veth_names(context.container_id, context.if_name)
        alias = ALIAS_MARK + json.dumps(
            {"c": context.container_id, "i": context.if_name, "n": pn.spec.network,
             "k": pn.key}, separators=(",", ":"))
        with _closing(_iproute()) as ipr:
            bridge = self._bridge(ipr, pn.spec.network, st.gateway, prefix, st.mtu)
            with _closing(_netns(context.netns)) as ns:
                inside = _index(ns, context.if_name)
                host_index = _index(ipr, host)
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
                    # a peer left on the host by an older version of this step
                    stale = _index(ipr, peer)
                    if stale is not None:
                        ipr.link("del", index=stale)
                    # the pod's end is made in the pod's namespace, with its name and MAC:
                    # moving a link between namespaces waits for the kernel's RCU grace
                    # periods (15-25 ms), and one request makes both ends or none
                    pod_end: dict[str, Any] = {"ifname": context.if_name, "address": st.mac}
                    if st.mtu:
                        pod_end["mtu"] = st.mtu
                    fd = os.open(context.netns, os.O_RDONLY | os.O_CLOEXEC)
                    try:
                        ipr.link("add", ifname=host, kind="veth",
                                 peer={**pod_end, "net_ns_fd": fd})
                    finally:
                        os.close(fd)
                    host_index = _index(ipr, host)
                    inside = _index(ns, context.if_name)
                    if host_index is None or inside is None:
                        raise _fail(f"veth {host} was not created")
                    # marked at once: a leftover of a crash right after is still found
                    ipr.link("set", index=host_index, ifalias=alias)
                settings: dict[str, Any] = {"master": bridge, "state": "up", "ifalias": alias}
                if st.mtu:
                    settings["mtu"] = st.mtu
                ipr.link("set", index=host_index, **settings)
                assert inside is not None  # found, or just made
                self._inside(ns, inside, context, prefix)
        return PlugResult(name=context.if_name, mac=st.mac.lower(), sandbox=context.netns,
                          host_interface=host)

    def _bridge(self, ipr: Any, network: str, gateway: str | None, prefix: int,
                mtu: int | None) -> int:
        name = bridge_name(network)
        index = _index(ipr, name)
        if index is None:
            with contextlib.suppress(Exception):  # another plug made it meanwhile
                ipr.link("add", ifname=name, kind="bridge")
            index = _index(ipr, name)
            if index is None:
                raise _fail(f"bridge {name} was not created")
        if gateway:
            have = {_attr(a, "IFA_ADDRESS") for a in ipr.get_addr(index=index)}
            if gateway not in have:
                try:
                    ipr.addr("add", index=index, address=gateway, prefixlen=prefix)
                except Exception as exc:
                    if getattr(exc, "code", None) != errno.EEXIST:
                        raise
        ipr.link("set", index=index, state="up")
        return index

    def _inside(self, ns: Any, index: int, context: PlugContext, prefix: int) -> None:
        st = context.pod_network.status
        settings: dict[str, Any] = {"address": st.mac, "state": "up"}
        if st.mtu:
            settings["mtu"] = st.mtu
        ns.link("set", index=index, state="down")
        ns.link("set", index=index, **settings)
        lo = _index(ns, "lo")
        if lo is not None:
            ns.link("set", index=lo, state="up")
        have = {(_attr(a, "IFA_ADDRESS"), a["prefixlen"]) for a in ns.get_addr(index=index)}
        wanted = {(st.ip, prefix)}
        if st.ipv6:
            wanted.add((st.ipv6, st.ipv6_prefix_length or 128))
        for address, length in have - wanted:
            if ipaddress.ip_address(address).is_link_local:
                continue
            ns.addr("del", index=index, address=address, prefixlen=length)
        for address, length in wanted - have:
            ns.addr("add", index=index, address=address, prefixlen=length)
        for route in st.routes:
            spec: dict[str, Any] = {"dst": route.dst, "oif": index}
            if route.gw:
                spec["gateway"] = route.gw
            ns.route("replace", **spec)

    def check(self, context: PlugContext) -> CheckResult:
        st = context.pod_network.status
        if not context.netns or not os.path.exists(context.netns):
            return CheckResult(ok=False, reason=f"network namespace {context.netns} is gone")
        host, _ = veth_names(context.container_id, context.if_name)
        with _closing(_iproute()) as ipr:
            if _index(ipr, host) is None:
                return CheckResult(ok=False, reason=f"host end {host} is missing")
        with _closing(_netns(context.netns)) as ns:
            index = _index(ns, context.if_name)
            if index is None:
                return CheckResult(ok=False, reason=f"{context.if_name} is missing")
            link = ns.get_links(index)[0]
            mac = str(_attr(link, "IFLA_ADDRESS")).lower()
            if st.mac and mac != st.mac.lower():
                return CheckResult(ok=False, reason=f"{context.if_name} has MAC {mac}, "
                                                    f"the record {st.mac}")
            if st.mtu and _attr(link, "IFLA_MTU") != st.mtu:
                return CheckResult(ok=False, reason=f"{context.if_name} has MTU "
                                                    f"{_attr(link, 'IFLA_MTU')}, "
                                                    f"the record {st.mtu}")
            have = {_attr(a, "IFA_ADDRESS") for a in ns.get_addr(index=index)}
            if st.ip not in have:
                return CheckResult(ok=False, reason=f"{context.if_name} lacks {st.ip}")
            gateways = {_attr(r, "RTA_GATEWAY") for r in ns.get_routes(oif=index)}
            for route in st.routes:
                if route.gw and route.gw not in gateways:
                    return CheckResult(ok=False, reason=f"no route to {route.dst} via "
                                                        f"{route.gw}")
        return CheckResult(ok=True)

    def unplug(self, context: UnplugContext) -> None:
        host, _ = veth_names(context.container_id, context.if_name)
        with _closing(_iproute()) as ipr:
            index = _index(ipr, host)
            if index is not None:
                try:
                    # deleting one end deletes the pair, the pod's end too
                    ipr.link("del", index=index)
                except Exception as exc:
                    if getattr(exc, "code", None) != errno.ENODEV:
                        raise

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


# --- listing links: a lean netlink dump ---------------------------------------------------

_RTM_NEWLINK = 16
_RTM_GETLINK = 18
_NLM_F_REQUEST_DUMP = 0x301  # NLM_F_REQUEST | NLM_F_DUMP
_NLM_F_DUMP_INTR = 0x10
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_IFLA_IFNAME = 3
_IFLA_IFALIAS = 20
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port
_IFINFOMSG = struct.Struct("=BxHiII")  # family, type, index, flags, change
_RTATTR = struct.Struct("=HH")  # length, type


def _align(length: int) -> int:
    return (length + 3) & ~3


def link_aliases(attempts: int = 3) -> dict[str, str]:
    """Every link of this thread's namespace that has an alias: name -> alias.

    One RTM_GETLINK dump read for two attributes only: every DEL and GC lists what was
    plugged, and pyroute2 decoding every attribute of every link costs about 0.3 ms a
    link (30 ms on a node of 100 pods), this about 0.02. A dump that a concurrent change
    interrupted (``NLM_F_DUMP_INTR``) is read again."""
    for _ in range(attempts):
        found, interrupted = _dump_aliases()
        if not interrupted:
            return found
    raise _fail(f"the link dump was interrupted by changes {attempts} times in a row")


def _dump_aliases() -> tuple[dict[str, str], bool]:
    import socket

    found: dict[str, str] = {}
    interrupted = False
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        body = _IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
        sequence = 1
        sock.send(_NLMSG_HEADER.pack(_NLMSG_HEADER.size + len(body), _RTM_GETLINK,
                                     _NLM_F_REQUEST_DUMP, sequence, 0) + body)
        while True:
            data = sock.recv(1 << 18)
            offset = 0
            while offset + _NLMSG_HEADER.size <= len(data):
                length, kind, flags, seq, _ = _NLMSG_HEADER.unpack_from(data, offset)
                if length < _NLMSG_HEADER.size:
                    raise _fail(f"a malformed netlink message (length {length})")
                if seq == sequence:
                    if kind == _NLMSG_DONE:
                        return found, interrupted
                    if kind == _NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, offset + _NLMSG_HEADER.size)
                        raise _fail(f"the link dump failed: {os.strerror(-code)}")
                    interrupted |= bool(flags & _NLM_F_DUMP_INTR)
                    if kind == _RTM_NEWLINK:  # one link
                        name, alias = _name_and_alias(data, offset, length)
                        if name and alias:
                            found[name] = alias
                offset += _align(length)


def _name_and_alias(data: bytes, offset: int, length: int) -> tuple[str | None, str | None]:
    name = alias = None
    position = offset + _NLMSG_HEADER.size + _IFINFOMSG.size
    end = offset + length
    while position + _RTATTR.size <= end:
        size, kind = _RTATTR.unpack_from(data, position)
        if size < _RTATTR.size:
            break
        if kind in (_IFLA_IFNAME, _IFLA_IFALIAS):
            value = data[position + _RTATTR.size:position + size].split(b"\0", 1)[0]
            text = value.decode("utf-8", "replace")
            if kind == _IFLA_IFNAME:
                name = text
            else:
                alias = text
        position += _align(size)
    return name, alias
