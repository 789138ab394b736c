"""Names podnet gives its rows in the Northbound database (no ovsdbapp import here, so
the provider module loads even where ovsdbapp is missing and says so when first used)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from podnet.hookspecs.models import ANNOTATION_MIGRATION_SOURCE_NODE, LABEL_VM, PodNetwork

__all__ = ["GROUPS", "KEY", "OWNER", "OWNER_VALUE", "ROLE", "ROLE_EXTERNAL", "ROLE_ROUTER_LINK",
           "ROLE_STATEFUL", "ROLE_VIP", "ROUTER", "STATEFUL_ACLS", "VIPS", "ExternalNet",
           "RouterLink", "column", "link_mac", "settled_datum", "vip_port_name"]

#: external_ids key naming the PodNetwork record a row belongs to
KEY = "podnet/key"
OWNER = "podnet/owner"
OWNER_VALUE = "podnet"
#: the port groups podnet put a port in, comma-separated, on the port
GROUPS = "podnet/groups"
#: what an infrastructure row of podnet's is for (pods' ports carry no role, but a KEY)
ROLE = "podnet/role"
ROLE_ROUTER_LINK = "router-link"
#: a router's external network: its switch and that switch's localnet port
ROLE_EXTERNAL = "external"
#: on an external switch: the router it belongs to
ROUTER = "podnet/router"
#: on a pods' switch: one of its two lowest-priority ``allow-related`` ACLs, which keep
#: the switch stateful for its whole life (see ``STATEFUL_ACLS``)
ROLE_STATEFUL = "stateful"
#: (direction, priority, match, action) of those ACLs. northd sends a switch's traffic
#: through conntrack only while the switch has a stateful ACL; in a stateless spell the
#: entries made before are neither updated nor removed, and trusted again (or found
#: invalid) once a policy or security group returns: the verdict would depend on history.
#: Below every ACL of podnet's, they allow what the switch allows without them.
STATEFUL_ACLS = (("from-lport", 0, "ip", "allow-related"),
                 ("to-lport", 0, "ip", "allow-related"))
#: a virtual port (``type=virtual``) holding one of a pod's VIPs (``podnet.io/vips``);
#: its KEY is the record's, like the pod's own port
ROLE_VIP = "vip"
#: the VIPs podnet made virtual ports for, comma-separated, on the pod's own port
VIPS = "podnet/vips"


def vip_port_name(switch: str, ip: str) -> str:
    """The virtual port holding VIP ``ip`` on ``switch`` (named as Kube-OVN names them)."""
    return f"{switch}-vip-{ip}"


def link_mac(router: str, subnet: str) -> str:
    """The router port's MAC: derived from the names (stable across restarts and
    controllers), locally administered and unicast, with first octet ``0e`` (the pods'
    generated MACs start with ``0a``)."""
    digest = hashlib.sha256(f"{router}\0{subnet}".encode()).digest()
    return "0e:" + ":".join(f"{b:02x}" for b in digest[:5])


class RouterLink:
    """What connects a subnet's logical switch to its logical router: a router port
    ``{router}-{subnet}`` holding the gateway addresses, and a switch port
    ``{subnet}-{router}`` of type ``router`` pointing at it."""

    __slots__ = ("lrp", "lsp", "mac", "networks", "router", "switch")

    def __init__(self, router: str, switch: str, networks: Sequence[str]) -> None:
        self.router = router
        self.switch = switch
        self.lrp = f"{router}-{switch}"
        self.lsp = f"{switch}-{router}"
        self.mac = link_mac(router, switch)
        #: "gateway/prefixlen", one per family of the subnet
        self.networks = list(networks)

    def __repr__(self) -> str:
        return f"RouterLink({self.lrp} {self.mac} {self.networks} <-> {self.lsp})"


class ExternalNet:
    """A router's way out: a logical switch ``ext-{router}`` with a ``localnet`` port
    ``ext-{router}-localnet`` (its ``network_name`` is what a chassis maps to a bridge in
    ``ovn-bridge-mappings``), joined to the router by a :class:`RouterLink` whose router
    port holds the router's external address and is a distributed gateway port: its
    ``Gateway_Chassis`` rows (``chassis`` first = highest priority) say where NAT runs."""

    __slots__ = ("chassis", "gateway", "link", "localnet", "network_name", "snat", "switch")

    def __init__(self, router: str, address: str, gateway: str, network_name: str,
                 chassis: Sequence[str]) -> None:
        self.switch = f"ext-{router}"
        self.localnet = f"{self.switch}-localnet"
        self.link = RouterLink(router, self.switch, [address])
        self.gateway = gateway
        self.network_name = network_name
        self.chassis = list(chassis)
        #: the router-wide ``snat`` rules (external address, a subnet's CIDR): every pod
        #: of the router's subnets leaves translated (a pod's own eip or snat rule, a /32,
        #: comes first); set from the subnets when written
        self.snat: list[tuple[str, str]] = []

    @property
    def family(self) -> int:
        return 6 if ":" in self.gateway else 4

    def default_route(self) -> tuple[str, str]:
        """(prefix, next hop) of the router's default route."""
        return ("::/0" if self.family == 6 else "0.0.0.0/0", self.gateway)

    @property
    def router(self) -> str:
        return self.link.router

    def gateway_chassis(self) -> dict[str, tuple[str, int]]:
        """``Gateway_Chassis`` name -> (chassis, priority), as ``ovn-nbctl
        lrp-set-gateway-chassis`` names them."""
        count = len(self.chassis)
        return {f"{self.link.lrp}-{c}": (c, count - i) for i, c in enumerate(self.chassis)}

    def __repr__(self) -> str:
        return (f"ExternalNet({self.link!r} via {self.gateway}, {self.localnet} on "
                f"{self.network_name}, chassis {self.chassis})")


#: ``Logical_Switch_Port.options`` keys podnet writes on a pod's port: where OVN may bind
#: it (a VM's node; both nodes while it live-migrates, the target blocked until its first
#: RARP — QEMU announces the moved VM with one — under ``activation-strategy=rarp``)
BINDING_OPTIONS = ("requested-chassis", "activation-strategy")


def settled_datum(row: Any, column: str) -> Any:
    """The column's datum as the server last sent it, or None when a transaction under
    way changes it (then only reading the column sees the change)."""
    data = row._data
    changes = row._changes
    if (data is None or column not in data or changes is None
            or changes.get(column) is not None or row._mutations):
        return None
    return data[column]  # a column at its default is made on reading: not .get


def column(row: Any, name: str) -> Any:
    """A row's column as reading the attribute gives it (a value, a sorted list or a
    dict of its own), converted once from its settled datum: the attribute converts the
    datum to Python, back to a datum checking every atom, and to Python again (a port's
    external ids: 15 times the cost, on every read of a port route and verify make)."""
    datum = settled_datum(row, name)
    return getattr(row, name) if datum is None else datum.to_python(row._uuid_to_row)


def binding_options(lsp: Any) -> dict[str, str]:
    """The port's options podnet owns, as NB has them."""
    return {k: v for k, v in column(lsp, "options").items() if k in BINDING_OPTIONS}


def vm_binding(pn: PodNetwork, node: str) -> dict[str, str]:
    """Where a KubeVirt VM's port may be bound (its chassis named after its node, as
    Kube-OVN's are): its node; during a live migration the source's node first (the main
    chassis, where the VM runs) and the target's, which OVN keeps blocked until the VM's
    RARP comes from there. Other pods' ports bind wherever their interface is."""
    if LABEL_VM not in pn.metadata.labels or not node:
        return {}
    source = pn.metadata.annotations.get(ANNOTATION_MIGRATION_SOURCE_NODE)
    if source and source != node:
        return {"requested-chassis": f"{source},{node}", "activation-strategy": "rarp"}
    return {"requested-chassis": node}
