"""A pod interface as a veth pair: its host end here, its pod end in the pod's network
namespace, configured as the record says (MAC, MTU, address and prefix, routes).

The pod end is made in the pod's namespace with its name, MAC and MTU in the one request
that makes the pair (never moved there afterwards: a move between namespaces waits for
the kernel's RCU grace periods, 15-25 ms), so a crash leaves both ends or none. Host end
names derive from the container id and the interface name, so a second plug finds the
first one's; a dataplane marks its host ends (an alias) to list them after a restart,
which :func:`link_aliases` reads in one lean netlink dump.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import ipaddress
import os
import random
import socket
import struct
import time
from collections.abc import Iterator
from typing import Any

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.models import PodNetworkStatus
from podnet.linux.netns import iproute, run_in_netns

#: Linux's limit on an interface's name, and on an alias
IFNAMSIZ = 15
IFALIASZ = 255


def failure(message: str, field: str | None = None) -> ProviderError:
    """A plumbing step that did not take: transient (the runtime's retry redoes it)."""
    return ProviderError(ErrorKind.TRANSIENT, message, field=field)


def veth_names(host_prefix: str, peer_prefix: str, container_id: str, if_name: str
               ) -> tuple[str, str]:
    """The host end's name and a peer name, stable for one container and interface, each a
    prefix and 10 hex digits (within :data:`IFNAMSIZ` for prefixes of up to 5)."""
    digest = hashlib.blake2s(f"{container_id}/{if_name}".encode(), digest_size=5).hexdigest()
    return host_prefix + digest, peer_prefix + digest


def link_index(ipr: Any, name: str) -> int | None:
    found = ipr.link_lookup(ifname=name)
    return int(found[0]) if found else None


def link_of(ipr: Any, name: str) -> tuple[int, str] | None:
    """Link ``name``'s index and MAC (lower case), in one request; None when there is no
    such link."""
    try:
        # a GET by name: pyroute2's get_links(ifname=) dumps every link and filters
        (link,) = ipr.link("get", ifname=name)
    except Exception as exc:
        if getattr(exc, "code", None) == errno.ENODEV:
            return None
        raise
    return int(link["index"]), str(link.get_attr("IFLA_ADDRESS") or "").lower()


@contextlib.contextmanager
def closing(obj: Any) -> Iterator[Any]:
    try:
        yield obj
    finally:
        obj.close()


def pod_namespace(path: str | None) -> Any:
    """An IPRoute in the pod's namespace at ``path``; a fatal error naming ``netns`` when
    there is none (a retry would not make one)."""
    if not path:
        raise ProviderError(ErrorKind.FATAL, "no network namespace to plug into",
                            field="netns")
    if not os.path.exists(path):
        raise ProviderError(ErrorKind.FATAL, f"{path}: no such namespace", field="netns")
    try:
        return iproute(path)
    except OSError as exc:
        raise ProviderError(ErrorKind.FATAL, f"{path}: not a network namespace one can "
                                             f"join ({exc.strerror or exc})",
                            field="netns") from exc


def link_names(netns: str) -> set[str]:
    """The names of the links in the namespace at ``netns``. :raise OSError: it cannot
    be joined."""
    with closing(iproute(netns)) as ns:
        return {str(link.get_attr("IFLA_IFNAME")) for link in ns.get_links()}


def make_pair(ipr: Any, host: str, netns: str, if_name: str, mac: str,
              mtu: int | None) -> int:
    """A veth pair: ``host`` in ``ipr``'s namespace, its peer made in the namespace at
    ``netns`` as ``if_name`` with ``mac`` (and ``mtu``); the host end's index."""
    pod_end: dict[str, Any] = {"ifname": if_name, "address": mac}
    if mtu:
        pod_end["mtu"] = mtu
    fd = os.open(netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        ipr.link("add", ifname=host, kind="veth", peer={**pod_end, "net_ns_fd": fd})
    finally:
        os.close(fd)
    index = link_index(ipr, host)
    if index is None:
        raise failure(f"veth {host} was not created")
    return index


def delete_link(ipr: Any, name: str) -> None:
    """Delete link ``name`` (a veth: its pair too); nothing when it is not there."""
    index = link_index(ipr, name)
    if index is None:
        return
    try:
        ipr.link("del", index=index)
    except Exception as exc:
        if getattr(exc, "code", None) != errno.ENODEV:
            raise


def configure_pod_end(ns: Any, index: int, status: PodNetworkStatus, prefix: int, *,
                      made: bool = False) -> None:
    """Give the pod's interface what its record says: up with its MAC and MTU, its
    addresses (``prefix`` for the IPv4 one) and nothing else but link-local ones, its
    routes; the namespace's loopback up. Idempotent. ``made``: the interface was just
    made by :func:`make_pair` with the record's MAC and MTU, so it has no address yet
    and is brought up without being taken down first (two requests fewer, and no dump
    of its addresses)."""
    settings: dict[str, Any] = {"state": "up"}
    if status.mac:
        settings["address"] = status.mac
    if status.mtu:
        settings["mtu"] = status.mtu
    if not made:
        ns.link("set", index=index, state="down")
    ns.link("set", index=index, **settings)
    lo = link_index(ns, "lo")
    if lo is not None:
        ns.link("set", index=lo, state="up")
    have: set[tuple[str, int]] = set() if made else {
        (a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ns.get_addr(index=index)}
    wanted = {(status.ip, prefix)} if status.ip else set()
    if status.ipv6:
        wanted.add((status.ipv6, status.ipv6_prefix_length or 128))
    for address, length in have - wanted:
        if ipaddress.ip_address(address).is_link_local:
            continue
        ns.addr("del", index=index, address=address, prefixlen=length)
    for address, length in wanted - have:
        ns.addr("add", index=index, address=address, prefixlen=length)
    for route in status.routes:
        spec: dict[str, Any] = {"dst": route.dst, "oif": index}
        if route.gw:
            spec["gateway"] = route.gw
        ns.route("replace", **spec)


def pod_end_differs(ns: Any, if_name: str, status: PodNetworkStatus) -> str | None:
    """What about the pod's interface differs from its record (missing, another MAC, MTU
    or address, a route's gateway missing); None when nothing does. Read only."""
    index = link_index(ns, if_name)
    if index is None:
        return f"{if_name} is missing"
    link = ns.get_links(index)[0]
    mac = str(link.get_attr("IFLA_ADDRESS")).lower()
    if status.mac and mac != status.mac.lower():
        return f"{if_name} has MAC {mac}, the record {status.mac}"
    if status.mtu and link.get_attr("IFLA_MTU") != status.mtu:
        return f"{if_name} has MTU {link.get_attr('IFLA_MTU')}, the record {status.mtu}"
    have = {a.get_attr("IFA_ADDRESS") for a in ns.get_addr(index=index)}
    for address in (status.ip, status.ipv6):
        if address and address not in have:
            return f"{if_name} lacks {address}"
    gateways = {r.get_attr("RTA_GATEWAY") for r in ns.get_routes(oif=index)}
    for route in status.routes:
        if route.gw and route.gw not in gateways:
            return f"no route to {route.dst} via {route.gw}"
    return None


# --- transmit checksum offload --------------------------------------------------------------
# A userspace datapath (OVS netdev) computes no checksums a veth left to "the device": with
# offload on, ping works and TCP silently fails. No ethtool binary is needed for it.

_ETHTOOL_GTXCSUM = 0x16
_ETHTOOL_STXCSUM = 0x17
_SIOCETHTOOL = 0x8946


class _EthtoolValue(ctypes.Structure):
    _fields_ = [("cmd", ctypes.c_uint32), ("data", ctypes.c_uint32)]


class _Ifreq(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char * 16), ("data", ctypes.c_void_p),
                ("pad", ctypes.c_char * 16)]


def _ethtool(netns: str, if_name: str, cmd: int, data: int = 0) -> int:
    def call() -> int:
        value = _EthtoolValue(cmd, data)
        req = _Ifreq(if_name.encode(), ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), _SIOCETHTOOL, req)
        return int(value.data)

    try:
        return run_in_netns(netns, call)
    except OSError as exc:
        raise failure(f"ethtool on {if_name} in {netns}: {exc}") from exc


def tx_checksum_on(netns: str, if_name: str) -> bool:
    """Whether ``if_name`` in ``netns`` leaves its transmit checksums to the device."""
    return bool(_ethtool(netns, if_name, _ETHTOOL_GTXCSUM))


def set_tx_checksum(netns: str, if_name: str, on: bool) -> None:
    _ethtool(netns, if_name, _ETHTOOL_STXCSUM, int(on))


# --- listing links: a lean netlink dump ---------------------------------------------------

_NETLINK_ROUTE = 0
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


#: how long a dump that concurrent link changes keep interrupting is read again
DUMP_PATIENCE = 2.0
#: reads of an interrupted dump before the patience may end them: on a loaded node one
#: dump alone can outlast the patience, and a burst of plugs interrupts several in a row
DUMP_MIN_ATTEMPTS = 8


def link_aliases(patience: float = DUMP_PATIENCE) -> dict[str, str]:
    """Every link of this thread's namespace that has an alias: name -> alias.

    One RTM_GETLINK dump read for two attributes only: every DEL and GC lists what was
    plugged, and pyroute2 decoding every attribute of every link costs about 0.3 ms a
    link (30 ms on a node of 100 pods), this about 0.02. A dump that a concurrent change
    interrupted (``NLM_F_DUMP_INTR``) is read again, after a short random pause that
    doubles each time (a burst of pods plugged at once interrupts several in a row), for
    ``patience`` seconds at most once it has been read :data:`DUMP_MIN_ATTEMPTS` times."""
    deadline = time.monotonic() + patience
    pause, attempts = 0.001, 0
    while True:
        found, interrupted = _dump_aliases()
        attempts += 1
        if not interrupted:
            return found
        if attempts >= DUMP_MIN_ATTEMPTS and time.monotonic() + pause > deadline:
            raise failure(f"the link dump was interrupted by changes {attempts} times "
                          f"in a row over {patience:g} s")
        time.sleep(pause * (0.5 + random.random()))
        pause = min(pause * 2, 0.05)


def _dump_aliases() -> tuple[dict[str, str], bool]:
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
                    raise failure(f"a malformed netlink message (length {length})")
                if seq == sequence:
                    if kind == _NLMSG_DONE:
                        return found, interrupted
                    if kind == _NLMSG_ERROR:
                        (code,) = struct.unpack_from("=i", data, offset + _NLMSG_HEADER.size)
                        raise failure(f"the link dump failed: {os.strerror(-code)}")
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
