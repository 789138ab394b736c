"""The reference provider's stand-in cloud (:class:`ReferenceCloud`): nodes, their
interfaces and addresses, routes, and shared subnets (a VPC's), with latency, faults and
call counts; it survives controller restarts in a state file. The provider's hooks
(``podnet.plugins.reference.provider``) are its only client.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import ipaddress
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Collection, Iterator, Sequence

import attrs

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.networks import address_range


class ReferenceCloudError(Exception):
    """What the reference cloud raises; ``code`` is classified by ``podnet_classify_error``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


#: the reference cloud's error codes and the kinds core acts on
ERROR_KINDS = {
    "Throttling": ErrorKind.THROTTLED,
    "QuotaExceeded": ErrorKind.QUOTA_EXCEEDED,
    "SubnetExhausted": ErrorKind.SUBNET_EXHAUSTED,
    "NotFound": ErrorKind.NOT_FOUND,
    "Conflict": ErrorKind.CONFLICT,
    "InternalError": ErrorKind.TRANSIENT,
}


@attrs.define
class _Node:
    #: its podCIDR (None: a node whose pods use shared subnets only)
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    #: interface id -> addresses on it, in the order they were added
    interfaces: dict[str, list[str]] = attrs.field(factory=dict)
    next_interface: int = 1
    #: interface id -> the shared subnet it is in (not listed: the node's podCIDR), as an
    #: ENI is in one VPC subnet
    bound: dict[str, str] = attrs.field(factory=dict)


@attrs.frozen
class SharedSubnet:
    """A subnet of the reference cloud that every node may take addresses from (a VPC
    subnet): its block, the gateway, and what is never handed out (``excluded``, entries
    as :func:`~podnet.hookspecs.networks.address_range` reads them)."""

    name: str
    cidr: str
    gateway: str
    excluded: tuple[str, ...] = ()

    @functools.cached_property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
        return ipaddress.ip_network(self.cidr)

    @functools.cached_property
    def _ranges(self) -> list[tuple[int, int]]:
        return [(int(lo), int(hi)) for lo, hi in map(address_range, self.excluded)]

    def never(self, address: str) -> bool:
        """Whether ``address`` may never be a pod's: outside the block, the gateway, the
        network or broadcast address, or excluded."""
        ip = ipaddress.ip_address(address)
        net = self.network
        if ip.version != net.version or ip not in net or address == self.gateway:
            return True
        if net.version == 4 and net.prefixlen < 31 and ip in (net.network_address,
                                                               net.broadcast_address):
            return True
        return any(lo <= int(ip) <= hi for lo, hi in self._ranges)

    def free(self, used: Collection[str], count: int) -> list[str]:
        """Up to ``count`` addresses of the block none of ``used`` is, in order."""
        out: list[str] = []
        for host in self.network.hosts():
            if len(out) >= count:
                break
            ip = str(host)
            if ip not in used and not self.never(ip):
                out.append(ip)
        return out


class ReferenceCloud:
    """A stand-in cloud: nodes, interfaces, addresses, routes, shared subnets; latency
    and faults."""

    def __init__(self, *, latency: float = 0.0, fault_rate: float = 0.0, seed: int = 0,
                 max_interfaces: int = 4, ips_per_interface: int = 32) -> None:
        self.lock = threading.Lock()
        self.nodes: dict[str, _Node] = {}
        self.routes: dict[str, str] = {}  # address -> pod network key
        #: shared subnets by name (Subnet objects put them here)
        self.subnets: dict[str, SharedSubnet] = {}
        self.latency = latency
        self.fault_rate = fault_rate
        self.random = random.Random(seed)
        self.max_interfaces = max_interfaces
        self.ips_per_interface = ips_per_interface
        self.calls: Counter[str] = Counter()
        #: faults to raise on the next calls of one API, for tests: api -> [codes]
        self.scripted: dict[str, list[str]] = {}
        #: where the cloud keeps its state when it must outlive the controller process
        self.state_file: str | None = None

    # --- persistence: a real cloud survives the controller's crashes; so does this one -----

    def persist_to(self, path: str) -> None:
        """Keep the state in ``path``: every call reads it first and writes changes back,
        under a file lock, so several controller processes (a leader and its standby)
        see one cloud, as they would a real one."""
        with self.lock:
            self.state_file = path
            with self._file_lock():
                if not os.path.exists(path):
                    self._save_locked()
                self._load_locked()

    def _load_locked(self) -> None:
        if self.state_file is None:
            return
        with open(self.state_file, encoding="utf-8") as f:
            data = json.load(f)
        self.nodes = {
            name: _Node(cidr=ipaddress.ip_network(n["cidr"]) if n["cidr"] else None,
                        interfaces=n["interfaces"], next_interface=n["nextInterface"],
                        bound=dict(n.get("bound", {})))
            for name, n in data["nodes"].items()
        }
        self.routes = dict(data["routes"])
        self.subnets = {name: SharedSubnet(name=name, cidr=v["cidr"], gateway=v["gateway"],
                                           excluded=tuple(v["excluded"]))
                        for name, v in data.get("subnets", {}).items()}

    @contextlib.contextmanager
    def _file_lock(self) -> Iterator[None]:
        if self.state_file is None:
            yield
            return
        with open(f"{self.state_file}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _txn(self) -> contextlib.AbstractContextManager[object]:
        """One cloud call: the process lock, and with a state file, the file's truth."""
        if self.state_file is None:
            return self.lock  # all in this process: its lock is the whole transaction
        return self._file_txn()

    @contextlib.contextmanager
    def _file_txn(self) -> Iterator[None]:
        with self.lock, self._file_lock():
            self._load_locked()
            yield

    def _save_locked(self) -> None:
        if self.state_file is None:
            return
        data = {
            "nodes": {name: {"cidr": str(n.cidr) if n.cidr is not None else None,
                             "interfaces": n.interfaces, "nextInterface": n.next_interface,
                             "bound": n.bound}
                      for name, n in self.nodes.items()},
            "routes": self.routes,
            "subnets": {name: {"cidr": v.cidr, "gateway": v.gateway,
                               "excluded": list(v.excluded)}
                        for name, v in self.subnets.items()},
        }
        tmp = f"{self.state_file}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, self.state_file)  # atomic: a crash leaves the old or the new state

    def _call(self, api: str) -> None:
        self.calls[api] += 1
        if self.latency:
            time.sleep(self.latency)
        scripted = self.scripted.get(api)
        if scripted:
            raise ReferenceCloudError(scripted.pop(0), f"{api} failed (scripted)")
        if self.fault_rate and self.random.random() < self.fault_rate:
            code = self.random.choice(["Throttling", "InternalError"])
            raise ReferenceCloudError(code, f"{api} failed (injected)")

    def _node(self, name: str, cidr: str | None, shared: bool = False) -> _Node:
        """Node ``name``, kept from its first call on; ``shared``: its pods may use shared
        subnets, so it needs no podCIDR."""
        node = self.nodes.get(name)
        if node is None:
            if not cidr and shared:
                node = self.nodes[name] = _Node(cidr=None, interfaces={"eth0": []})
                self._save_locked()
                return node
            if not cidr:
                raise ProviderError(ErrorKind.FATAL, f"node {name} has no podCIDR",
                                    field="spec.podCIDR")
            try:
                network = ipaddress.ip_network(cidr, strict=True)
            except ValueError as exc:
                raise ProviderError(ErrorKind.FATAL, f"node {name}: {exc}",
                                    field="spec.podCIDR") from None
            node = self.nodes[name] = _Node(cidr=network, interfaces={"eth0": []})
            self._save_locked()
        elif node.cidr is None and cidr:
            # first seen for its shared subnets only, it has a podCIDR now
            node.cidr = ipaddress.ip_network(cidr, strict=False)
            self._save_locked()
        return node

    # --- the "cloud API" ------------------------------------------------------------------

    def describe(self, name: str, cidr: str | None, shared: bool = False
                 ) -> dict[str, list[str]]:
        self._call("Describe")
        with self._txn():
            return {k: list(v) for k, v in self._node(name, cidr, shared).interfaces.items()}

    def capacity(self, name: str, cidr: str | None, shared: bool = False) -> tuple[int, int]:
        with self._txn():
            return self.capacity_unlocked(self._node(name, cidr, shared))

    def put_subnet(self, subnet: SharedSubnet) -> None:
        """Make or change a shared subnet (its block, gateway, exclusions). Addresses
        nodes hold stay theirs, also those now outside it or excluded."""
        self._call("PutSubnet")
        with self._txn():
            if self.subnets.get(subnet.name) != subnet:
                self.subnets[subnet.name] = subnet
                self._save_locked()

    def interface_subnets(self, name: str) -> dict[str, str]:
        """Node ``name``'s interfaces that are in a shared subnet -> its name (part of
        what Describe answers; the others are in the node's podCIDR)."""
        with self._txn():
            node = self.nodes.get(name)
            return dict(node.bound) if node is not None else {}

    def add(self, name: str, cidr: str | None, interface: str, count: int,
            address: str | None = None, subnet: str | None = None) -> list[str]:
        """Attach ``count`` free addresses (or ``address``) to ``interface`` of node
        ``name``, from the subnet the interface is in: the node's podCIDR, or a shared
        subnet, where an address is on one node of the cloud at a time. ``subnet``: the
        shared subnet the caller expects it in; the first interface of a node without a
        podCIDR is put into it."""
        self._call("AddAddresses")
        with self._txn():
            node = self._node(name, cidr, shared=subnet is not None)
            if interface not in node.interfaces:
                raise ReferenceCloudError("NotFound", f"interface {interface} not on {name}")
            bound = node.bound.get(interface)
            if bound is None and subnet is not None and node.cidr is None \
                    and not node.interfaces[interface]:
                bound = subnet  # bound below, once the subnet is known to exist
            if bound != subnet and subnet is not None:
                raise ReferenceCloudError("Conflict", f"interface {interface} of {name} is "
                                          f"in {bound or 'the node podCIDR'}, not subnet "
                                          f"{subnet}")
            if bound is not None:
                return self._add_shared(node, name, interface, count, address, bound)
            used = {ip for ips in node.interfaces.values() for ip in ips}
            if node.cidr is None:
                raise ProviderError(ErrorKind.FATAL, f"node {name} has no podCIDR",
                                    field="spec.podCIDR")
            if address is not None:
                if address in node.interfaces[interface]:
                    return [address]
                if address in used:
                    raise ReferenceCloudError("Conflict", f"{address} is on another interface")
                node.interfaces[interface].append(address)
                self._save_locked()
                return [address]
            _, per = self.capacity_unlocked(node)
            room = per - len(node.interfaces[interface])
            if room <= 0:
                raise ReferenceCloudError("QuotaExceeded", f"interface {interface} is full")
            out: list[str] = []
            hosts = node.cidr.hosts()
            next(hosts, None)  # the first host is the gateway
            for host in hosts:
                if len(out) >= min(count, room):
                    break
                ip = str(host)
                if ip not in used and not self._kept_by_a_subnet(host):
                    out.append(ip)
            if not out:
                raise ReferenceCloudError("SubnetExhausted", f"{node.cidr} has no address left")
            node.interfaces[interface].extend(out)
            self._save_locked()
            return out

    def _kept_by_a_subnet(self, host: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """Whether a shared subnet whose block holds ``host`` (a podCIDR carved from it)
        keeps it from every pod: its gateway or one of its exclusions."""
        return any(host.version == s.network.version and host in s.network
                   and s.never(str(host)) for s in self.subnets.values())

    def capacity_unlocked(self, node: _Node) -> tuple[int, int]:
        if node.cidr is None:  # shared subnets only: their free addresses are the limit
            return self.max_interfaces, self.ips_per_interface
        usable = max(0, node.cidr.num_addresses - 2)  # network and gateway
        return self.max_interfaces, min(self.ips_per_interface, usable // self.max_interfaces)

    def _owners(self) -> dict[str, str]:
        """Every attached address -> its node."""
        return {ip: n for n, node in self.nodes.items()
                for ips in node.interfaces.values() for ip in ips}

    def _add_shared(self, node: _Node, name: str, interface: str, count: int,
                    address: str | None, subnet_name: str) -> list[str]:
        subnet = self.subnets.get(subnet_name)
        if subnet is None:
            raise ReferenceCloudError("NotFound", f"subnet {subnet_name} does not exist")
        owner = self._owners()
        if address is not None:
            # excluded since it was attached, too: a pod may not ask for it now
            if subnet.never(address):
                raise ReferenceCloudError("Conflict", f"{address} is not an address of "
                                          f"subnet {subnet_name} a pod may have")
            if address in node.interfaces[interface]:
                return [address]
            if address in owner:
                raise ReferenceCloudError("Conflict", f"{address} is on node {owner[address]}")
            node.bound[interface] = subnet_name
            node.interfaces[interface].append(address)
            self._save_locked()
            return [address]
        _, per = self.capacity_unlocked(node)
        room = per - len(node.interfaces[interface])
        if room <= 0:
            raise ReferenceCloudError("QuotaExceeded", f"interface {interface} is full")
        out = subnet.free(owner.keys(), min(count, room))
        if not out:
            raise ReferenceCloudError("SubnetExhausted", f"subnet {subnet_name} "
                                      f"({subnet.cidr}) has no address left")
        node.bound[interface] = subnet_name
        node.interfaces[interface].extend(out)
        self._save_locked()
        return out

    def remove(self, name: str, addresses: Sequence[str]) -> list[str]:
        self._call("RemoveAddresses")
        with self._txn():
            node = self.nodes.get(name)
            if node is None:
                return list(addresses)
            gone = set(addresses)
            for ips in node.interfaces.values():
                ips[:] = [ip for ip in ips if ip not in gone]
            self._save_locked()
            return list(addresses)

    def forget(self, name: str, addresses: Sequence[str]) -> None:
        """The cloud loses these addresses of node ``name`` (restored from a backup, say):
        no API call, no fault, nobody told."""
        with self._txn():
            node = self.nodes.get(name)
            gone = set(addresses)
            for ips in node.interfaces.values() if node is not None else ():
                ips[:] = [ip for ip in ips if ip not in gone]
            self._save_locked()

    def create_interface(self, name: str, cidr: str | None, count: int,
                         subnet: str | None = None) -> tuple[str, list[str]]:
        self._call("CreateInterface")
        with self._txn():
            node = self._node(name, cidr, shared=subnet is not None)
            if len(node.interfaces) >= self.max_interfaces:
                raise ReferenceCloudError("QuotaExceeded", f"{name} has all its interfaces")
            shared = self.subnets.get(subnet) if subnet is not None else None
            if subnet is not None and shared is None:
                raise ReferenceCloudError("NotFound", f"subnet {subnet} does not exist")
            if shared is not None and count and not shared.free(self._owners().keys(), 1):
                # as a cloud does: no interface made in a subnet with no address left
                raise ReferenceCloudError("SubnetExhausted", f"subnet {subnet} "
                                          f"({shared.cidr}) has no address left")
            itf = f"eth{node.next_interface}"
            node.next_interface += 1
            node.interfaces[itf] = []
            if subnet is not None:
                node.bound[itf] = subnet
            self._save_locked()
        return itf, self.add(name, cidr, itf, count, subnet=subnet) if count else []

    def delete_interface(self, name: str, interface: str) -> None:
        self._call("DeleteInterface")
        with self._txn():
            node = self.nodes.get(name)
            if node is None or interface not in node.interfaces:
                return
            if interface == "eth0":
                raise ReferenceCloudError("Conflict", "the primary interface stays")
            if node.interfaces[interface]:
                raise ReferenceCloudError("Conflict", f"{interface} still has addresses")
            del node.interfaces[interface]
            node.bound.pop(interface, None)
            self._save_locked()

    def set_route(self, address: str, key: str) -> None:
        self._call("SetRoute")
        with self._txn():
            self.routes[address] = key
            self._save_locked()

    def delete_route(self, address: str, key: str) -> None:
        self._call("DeleteRoute")
        with self._txn():
            if self.routes.get(address) == key:
                del self.routes[address]
                self._save_locked()

    def route_of(self, address: str) -> str | None:
        with self._txn():
            return self.routes.get(address)

    def machines(self) -> list[str]:
        """The nodes the cloud knows (it keeps one once it has seen it)."""
        self._call("List")
        with self._txn():
            return sorted(self.nodes)

    def all_addresses(self) -> dict[str, str]:
        """Ground truth: every attached address -> node name."""
        with self._txn():
            return {ip: name for name, node in self.nodes.items()
                    for ips in node.interfaces.values() for ip in ips}
