"""A simulated VPC that forwards the way the cloud says, for packet tests of an ENI
dataplane (the ECS provider's, or a third-party cloud provider's with its own simulator)
and for the demo's ENI nodes. The test kit's face is :mod:`podnet.testing.vpcbed`.

Nodes are network namespaces (anything with a ``name`` and a ``netns``: an
:class:`podnet.testing.nodebed.NodeNamespace`, say), whose control network (the
apiserver, the cloud's API) stays apart from the VPC. The VPC is one more namespace.
Each ENI the cloud says is attached (InUse) to a node's instance appears in that node's
namespace as an interface named ``eni<n>`` with the ENI's MAC: one end of a veth whose
other end is a port of the VPC namespace. The VPC:

- holds each subnet's gateway address (a /32 on every port, so each ENI reaches its
  gateway on its own link);
- routes each private address of an ENI to that ENI's port only, with a permanent
  neighbour entry to the ENI's MAC (the VPC knows where it put an address; it never
  asks);
- has no other route: an address no ENI holds is dropped;
- checks sources: a packet an ENI sends from an address the cloud did not put on that
  ENI is dropped, as a VPC's source check drops it (a policy rule per address, ``iif
  <port> from <address> lookup main``, before a ``blackhole`` rule; ``rp_filter`` would
  also drop the ARP requests a node sends from its underlay address for the gateway).

IPv6 the same way: each port holds its subnet's IPv6 gateway too, each IPv6 address of an
ENI is routed to its port only (a /128, a permanent neighbour entry) and checked as a
source there; the nodes forward IPv6 (what a dual-stack node's setup does).

So an address podnet thinks is on ENI A but the cloud put on ENI B does not work, either
way. The primary ENI appears too (its MAC, no address: the node's own address stays on
the underlay), so a dataplane finds it where it would on a real instance.

The cloud's state is read by a function the bed is given, returning :class:`AttachedEni`
values (:func:`attached_state` reads the ECS and BBC simulators'). :meth:`VpcBed.sync` programs the
VPC from it; :meth:`VpcBed.follow` does that in a thread whenever the state changed, so
ENIs the controller creates appear while a test runs. A test that changes the cloud's
state behind podnet's back calls :meth:`VpcBed.sync` before it looks at packets::

    vpc = Vpc("pnvpc-1", lambda: attached_state(sim))
    vpc.add_node(node, "i-123")   # a node's namespace and its instance
    vpc.follow()
    ...
    vpc.cleanup()                 # in a finally, before the nodes' namespaces go
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import attrs

from podnet.linux.netns import add_netns, del_netns, iproute, netns_path

__all__ = ["DEVICE_PREFIX", "AttachedEni", "Node", "Vpc", "attached_enis", "attached_state"]


class Node(Protocol):
    """A node of the VPC: its name, and its network namespace's name."""

    @property
    def name(self) -> str: ...

    @property
    def netns(self) -> str: ...

#: the ENI devices in a node's namespace are ``eni0``, ``eni1``, ... in attach order
DEVICE_PREFIX = "eni"
#: the VPC's routes and rules are made with this protocol number, so a sync finds its own
_PROTO = 99
#: the priorities of the source rules and of the blackhole rule after them
_SOURCE = 1000
_BLACKHOLE = 32000
_IFA_F_NODAD = 0x02
_FAMILIES = ((socket.AF_INET, 32), (socket.AF_INET6, 128))


@attrs.frozen
class AttachedEni:
    """One ENI the cloud says is attached: its instance, MAC, the gateway of its subnet
    and its private addresses (IPv4), its IPv6 addresses and its subnet's IPv6 gateway."""

    id: str
    instance: str
    mac: str
    gateway: str
    addresses: tuple[str, ...]
    ipv6: tuple[str, ...] = ()
    gateway6: str | None = None


def attached_state(sim: Any) -> list[AttachedEni]:
    """A simulator's attached ENIs, from its ``attached()`` (``EcsSimulator``'s and
    ``BbcSimulator``'s: dicts with ``id``, ``instance``, ``mac``, ``gateway`` and
    ``addresses``, and optionally ``ipv6`` and ``gateway6``)."""
    return attached_enis(sim.attached())


def attached_enis(rows: Iterable[Mapping[str, Any]]) -> list[AttachedEni]:
    """:class:`AttachedEni` values from a simulator's ``attached()`` rows."""
    return [AttachedEni(id=e["id"], instance=e["instance"], mac=e["mac"].lower(),
                        gateway=e["gateway"], addresses=tuple(e["addresses"]),
                        ipv6=tuple(e.get("ipv6") or ()), gateway6=e.get("gateway6"))
            for e in rows]


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


@attrs.define
class _Port:
    eni: AttachedEni
    node: Node
    device: str
    port: str


class Vpc:
    """The VPC namespace ``name`` and the ENI devices of the nodes added to it (see the
    module)."""

    def __init__(self, name: str, state: Callable[[], Iterable[AttachedEni]]) -> None:
        self.state = state
        self.name = name
        self.netns = netns_path(self.name)
        #: instance id -> its node
        self.instances: dict[str, Node] = {}
        #: ENI id -> its device and port
        self.ports: dict[str, _Port] = {}
        self._next_port = 0
        self._next_device: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last: list[AttachedEni] | None = None
        #: what went wrong in the :meth:`follow` thread
        self.errors: list[str] = []
        add_netns(self.name)
        try:
            for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                        "net.ipv4.conf.default.rp_filter=0", "net.ipv6.conf.all.forwarding=1"):
                _run("ip", "netns", "exec", self.name, "sysctl", "-q", "-w", key)
            # what no source rule lets through goes nowhere (the local table, rule 0,
            # still answers for the gateways)
            for family in ("-4", "-6"):
                _run("ip", family, "-n", self.name, "rule", "add", "priority",
                     str(_BLACKHOLE), "blackhole")
        except BaseException:
            del_netns(self.name)
            raise

    def add_node(self, node: Node, instance: str) -> None:
        """``node`` is ``instance`` of the cloud: the ENIs attached to it appear in it."""
        # the node forwards between its ENIs and its pods (a node's own setup)
        for key in ("net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"):
            _run("ip", "netns", "exec", node.netns, "sysctl", "-q", "-w", key)
        with self._lock:
            self.instances[instance] = node
            self._next_device.setdefault(node.name, 0)

    def devices(self, node: str) -> dict[str, str]:
        """ENI id -> its device's name in ``node``'s namespace."""
        with self._lock:
            return {eni: p.device for eni, p in self.ports.items() if p.node.name == node}

    def routes(self) -> dict[str, str]:
        """Address -> the ENI the VPC delivers it to (what it was last programmed with)."""
        with self._lock:
            return {a: eni for eni, p in self.ports.items()
                    for a in (*p.eni.addresses, *p.eni.ipv6)}

    # --- programming ---------------------------------------------------------------------

    def sync(self) -> None:
        """Program the VPC from the cloud's state now."""
        enis = sorted(self.state(), key=lambda e: e.id)
        with self._lock:
            self._apply(enis)
            self._last = enis

    def follow(self, period: float = 0.1) -> None:
        """Sync in a thread every ``period`` seconds when the state changed (until
        :meth:`cleanup`)."""
        def loop() -> None:
            while not self._stop.wait(period):
                try:
                    enis = sorted(self.state(), key=lambda e: e.id)
                    if enis != self._last:
                        with self._lock:
                            self._apply(enis)
                            self._last = enis
                except Exception as exc:  # kept for the test to see; the next pass retries
                    self.errors.append(repr(exc))

        self._thread = threading.Thread(target=loop, name="vpcbed", daemon=True)
        self._thread.start()

    def _apply(self, enis: list[AttachedEni]) -> None:
        wanted = {e.id: e for e in enis if e.instance in self.instances}
        for eni_id in [i for i in self.ports if i not in wanted
                       or self.ports[i].node is not self.instances[wanted[i].instance]]:
            # detached (or moved to another instance): its device goes with the veth
            port = self.ports.pop(eni_id)
            with contextlib.closing(iproute(self.netns)) as vpc:
                for index in vpc.link_lookup(ifname=port.port):
                    vpc.link("del", index=index)
        for eni_id, eni in wanted.items():
            if eni_id not in self.ports:
                self._attach(eni)
            else:
                self.ports[eni_id].eni = eni
        with contextlib.closing(iproute(self.netns)) as vpc:
            self._program(vpc, wanted)

    def _attach(self, eni: AttachedEni) -> None:
        node = self.instances[eni.instance]
        device = f"{DEVICE_PREFIX}{self._next_device[node.name]}"
        self._next_device[node.name] += 1
        port = f"p{self._next_port}"
        self._next_port += 1
        _run("ip", "-n", self.name, "link", "add", port, "type", "veth", "peer", "name",
             device, "address", eni.mac, "netns", node.netns)
        _run("ip", "-n", node.netns, "link", "set", device, "up")
        _run("ip", "-n", self.name, "link", "set", port, "up")
        self.ports[eni.id] = _Port(eni=eni, node=node, device=device, port=port)

    def _program(self, vpc: Any, wanted: Mapping[str, AttachedEni]) -> None:
        index = {p.port: vpc.link_lookup(ifname=p.port)[0] for p in self.ports.values()}
        # each port holds the gateway of its ENI's subnet (and its IPv6 gateway)
        for p in self.ports.values():
            have = {a.get_attr("IFA_ADDRESS") for a in vpc.get_addr(index=index[p.port])}
            if p.eni.gateway not in have:
                vpc.addr("add", index=index[p.port], address=p.eni.gateway, prefixlen=32)
            if p.eni.gateway6 and p.eni.gateway6 not in have:
                vpc.addr("add", index=index[p.port], address=p.eni.gateway6, prefixlen=128,
                         flags=_IFA_F_NODAD)
        for family, length in _FAMILIES:
            self._program_family(vpc, index, family, length)

    def _program_family(self, vpc: Any, index: Mapping[str, int], family: int,
                        length: int) -> None:
        def mine(p: _Port) -> tuple[str, ...]:
            return p.eni.ipv6 if family == socket.AF_INET6 else p.eni.addresses

        routes: dict[str, tuple[int, str]] = {}
        for p in self.ports.values():
            for address in mine(p):
                routes[address] = (index[p.port], p.eni.mac)
        for route in vpc.get_routes(family=family, table=254, proto=_PROTO):
            dst = route.get_attr("RTA_DST")
            oif = route.get_attr("RTA_OIF")
            if routes.get(dst, (None,))[0] != oif:
                with contextlib.suppress(Exception):  # its port went with a detach
                    vpc.route("del", family=family, dst=f"{dst}/{length}", oif=oif,
                              proto=_PROTO)
                with contextlib.suppress(Exception):
                    vpc.neigh("del", family=family, dst=dst, ifindex=oif)
        for address, (oif, mac) in routes.items():
            vpc.route("replace", family=family, dst=f"{address}/{length}", oif=oif,
                      proto=_PROTO)
            vpc.neigh("replace", family=family, dst=address, lladdr=mac, ifindex=oif,
                      state=0x80)  # PERMANENT
        # the source check: from each address only on its ENI's port
        sources = {(a, p.port) for p in self.ports.values() for a in mine(p)}
        have = set()
        for rule in vpc.get_rules(family=family):
            if rule.get_attr("FRA_PRIORITY") != _SOURCE:
                continue
            key = (rule.get_attr("FRA_SRC"), rule.get_attr("FRA_IIFNAME"))
            if key in sources:
                have.add(key)
            else:
                with contextlib.suppress(Exception):  # its port went with a detach
                    vpc.rule("del", family=family, priority=_SOURCE, src=key[0],
                             src_len=length, iifname=key[1], table=254)
        for address, port in sources - have:
            vpc.rule("add", family=family, priority=_SOURCE, src=address,
                     src_len=length, iifname=port, table=254, FRA_PROTOCOL=_PROTO)

    # --- the end ---------------------------------------------------------------------------

    def cleanup(self) -> None:
        """Stop following; remove the VPC namespace (every port, and with it every ENI
        device in the nodes)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        del_netns(self.name)
