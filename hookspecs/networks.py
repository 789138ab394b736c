"""The networks an operator declares as Kubernetes objects, as providers see them.

Three cluster-scoped kinds of group ``podnet.io`` (version ``v1alpha1``) describe the
networks podnet serves: a ``Subnet`` (an address block of one provider and who may use
it), an ``IPPool`` (named addresses inside one Subnet, for static and sticky requests and
for namespaces that must use them) and a ``SecurityGroup`` (rules applied to the ports of
the pods that name it). Core watches them, checks what one object cannot say about itself
(two Subnets that overlap, a pool outside its Subnet), keeps their status (usage counts,
conditions), and tells each provider what is usable through ``podnet_networks_changed``;
it chooses a pod network's Subnet and pool (:class:`SubnetInfo`, :class:`IPPoolInfo` on
:class:`~podnet.hookspecs.types.AllocateContext`) by the same rules for every provider.

Like :mod:`podnet.hookspecs.models`, these classes carry no wire rules: core's converter
maps them from the objects' camelCase JSON. Providers may import this module.

.. versionadded:: 0.7.0
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import attrs

from podnet.hookspecs.errors import InvalidRequest

SUBNET_KIND = "Subnet"
IP_POOL_KIND = "IPPool"
SECURITY_GROUP_KIND = "SecurityGroup"
#: kept on a Subnet or IPPool while a record holds one of its addresses
NETWORK_FINALIZER = "podnet.io/network-in-use"

#: where a Subnet's provider parameters are (the field a refusal of one names)
PARAMETERS_FIELD = "spec.parameters"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def address_range(item: str) -> tuple[IPAddress, IPAddress]:
    """The first and last address of an entry of ``excludeIPs`` or an IPPool's
    ``addresses``: one address, a range ``FIRST..LAST`` (both ends included, one family,
    first ≤ last) or a CIDR. :raises ValueError: naming what is wrong with ``item``."""
    text = item.strip()
    try:
        if ".." in text:
            lo_s, hi_s = text.split("..", 1)
            lo, hi = ipaddress.ip_address(lo_s.strip()), ipaddress.ip_address(hi_s.strip())
        elif "/" in text:
            net = ipaddress.ip_network(text, strict=True)
            return net.network_address, net.broadcast_address
        else:
            addr = ipaddress.ip_address(text)
            return addr, addr
    except ValueError:
        raise ValueError(f"{item!r} is not an address, a range FIRST..LAST or a CIDR "
                         "(with no host bits set)") from None
    if lo.version != hi.version:
        raise ValueError(f"{item!r}: the ends are of two families")
    if int(hi) < int(lo):
        raise ValueError(f"{item!r}: the range is backwards ({hi} < {lo})")
    return lo, hi


def expand(items: tuple[str, ...], limit: int = 1 << 20) -> Iterator[IPAddress]:
    """Every address of ``items`` (entries as :func:`address_range` reads them), in
    order; at most ``limit`` (a /8 excluded is counted, not listed)."""
    n = 0
    for item in items:
        lo, hi = address_range(item)
        for i in range(int(lo), int(hi) + 1):
            if n >= limit:
                return
            n += 1
            yield ipaddress.ip_address(i)


def sole_parameter(subnet: SubnetInfo, key: str, provider: str, wanted: str) -> Any:
    """The value of ``key``, the one parameter ``provider`` takes in a Subnet's
    ``spec.parameters``: the parameters must be a map, hold no other key and hold this
    one (``wanted`` says what it is, for the refusal). :raises InvalidRequest: naming
    the parameter."""
    params: Any = subnet.parameters or {}
    if not isinstance(params, Mapping):
        raise InvalidRequest(PARAMETERS_FIELD, f"Subnet {subnet.name}: parameters must be a "
                             f"map, got {type(params).__name__}")
    for other in params:
        if other != key:
            raise InvalidRequest(f"{PARAMETERS_FIELD}.{other}", f"Subnet {subnet.name}: "
                                 f"unknown parameter {other!r}: the {provider} provider "
                                 f"takes {key} only")
    raw = params.get(key)
    if raw is None:
        raise InvalidRequest(f"{PARAMETERS_FIELD}.{key}", f"Subnet {subnet.name}: required: "
                             f"{wanted} that serve the Subnet")
    return raw


def covering_block(cidrs: Iterable[IPNetwork]) -> IPNetwork:
    """The smallest CIDR holding every one of ``cidrs`` (one family; at least one): what
    a provider's migration declares for a set of cloud subnets."""
    nets = list(cidrs)
    block = nets[0]
    while not all(n.subnet_of(block) for n in nets):  # type: ignore[arg-type]
        block = block.supernet()
    return block


@attrs.frozen
class SelectorTerm:
    """A ``namespaceSelector`` or ``nodeSelector`` as written (``matchLabels``,
    ``matchExpressions``); core evaluates it, a provider needs only to show it."""

    match_labels: Mapping[str, str] = attrs.field(factory=dict)
    #: ``(key, operator, values)``: ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``
    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.match_labels and not self.match_expressions

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy every term (an empty selector matches all)."""
        for k, v in self.match_labels.items():
            if labels.get(k) != v:
                return False
        for key, op, values in self.match_expressions:
            have = labels.get(key)
            if op == "In" and have not in values:
                return False
            if op == "NotIn" and have is not None and have in values:
                return False
            if op == "Exists" and have is None:
                return False
            if op == "DoesNotExist" and have is not None:
                return False
        return True


@attrs.frozen
class SubnetInfo:
    """One Subnet object: what its spec says, as core checked it.

    ``cidrs`` is one IPv4 block, one IPv6 block or one of each; ``gateways`` one per
    family (each block's first host when the spec names none); ``excluded`` the entries
    of ``excludeIPs`` as written (:func:`address_range`). ``parameters`` are the
    provider's own (``spec.parameters``), checked by ``podnet_subnet_parameters``;
    ``realized`` what that hook answered (e.g. the cloud subnets and CIDRs it read).
    """

    name: str
    provider: str
    cidrs: tuple[str, ...]
    gateways: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()
    #: pods of these namespaces use this Subnet (before their provider's default)
    namespaces: tuple[str, ...] = ()
    namespace_selector: SelectorTerm | None = None
    #: only pods on nodes whose labels match may use it (``None``: every node)
    node_selector: SelectorTerm | None = None
    #: the provider's default Subnet: pods no other rule places use it
    default: bool = False
    parameters: Mapping[str, Any] = attrs.field(factory=dict)
    realized: Mapping[str, Any] = attrs.field(factory=dict)
    #: the object's metadata.generation this view was made from
    generation: int = 0
    uid: str = ""

    def networks(self) -> list[IPNetwork]:
        return [ipaddress.ip_network(c) for c in self.cidrs]

    def network(self, version: int) -> IPNetwork | None:
        return next((n for n in self.networks() if n.version == version), None)

    def gateway(self, version: int) -> str | None:
        return next((g for g in self.gateways if ipaddress.ip_address(g).version == version),
                    None)

    def contains(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip.version == n.version and ip in n for n in self.networks())

    def excludes(self, address: str) -> bool:
        """Whether ``address`` is one of ``excludeIPs`` (never handed to a new pod)."""
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        for item in self.excluded:
            lo, hi = address_range(item)
            if ip.version == lo.version and int(lo) <= int(ip) <= int(hi):
                return True
        return False

    def describe(self) -> str:
        return f"Subnet {self.name} ({', '.join(self.cidrs)})"


@attrs.frozen
class IPPoolInfo:
    """One IPPool object: named addresses inside one Subnet (``subnet``).

    A pod names it in ``podnet.io/ip-pool``; a StatefulSet's pod takes the address at
    its ordinal, others the first free one. ``namespaces``: pods of these namespaces
    take their addresses from this pool (before their Subnet's free addresses).
    """

    name: str
    subnet: str
    #: entries as :func:`address_range` reads them, in the order written
    addresses: tuple[str, ...]
    namespaces: tuple[str, ...] = ()
    generation: int = 0
    uid: str = ""

    def members(self, limit: int = 65536) -> list[str]:
        """The pool's addresses in order (an ordinal picks the one at its index)."""
        return [str(a) for a in expand(self.addresses, limit)]


@attrs.frozen
class SecurityRule:
    """One allow rule of a SecurityGroup: traffic of ``protocol`` (``all``, ``tcp``,
    ``udp``, ``icmp``) to ``ports`` (one port ``(80, 80)`` or a range; ``None``: all),
    from (ingress) or to (egress) ``cidrs`` and the pods of ``groups``; neither: anywhere.
    What no rule of a member's groups allows is dropped."""

    protocol: str = "all"
    ports: tuple[int, int] | None = None
    cidrs: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@attrs.frozen
class SecurityGroupInfo:
    """One SecurityGroup object: its rules each way. Pods name groups in
    ``podnet.io/security-groups``; a change applies to running pods. A direction the
    object leaves out is not restricted (core hands it as one allow-all rule,
    ``(SecurityRule(),)``); one written as an empty list allows nothing."""

    name: str
    ingress: tuple[SecurityRule, ...] = ()
    egress: tuple[SecurityRule, ...] = ()
    generation: int = 0
    uid: str = ""


@attrs.frozen
class Networks:
    """What is usable now, per provider (``podnet_networks_changed``): the Ready
    Subnets of the provider, the Ready IPPools inside them, and every Ready
    SecurityGroup (groups are not per provider). ``revision`` grows with each change."""

    subnets: tuple[SubnetInfo, ...] = ()
    pools: tuple[IPPoolInfo, ...] = ()
    security_groups: tuple[SecurityGroupInfo, ...] = ()
    revision: int = 0

    def subnet(self, name: str) -> SubnetInfo | None:
        return next((s for s in self.subnets if s.name == name), None)

    def pool(self, name: str) -> IPPoolInfo | None:
        return next((p for p in self.pools if p.name == name), None)

    def security_group(self, name: str) -> SecurityGroupInfo | None:
        return next((g for g in self.security_groups if g.name == name), None)


@attrs.frozen
class SubnetRealization:
    """A provider's answer to ``podnet_subnet_parameters``: what it read or made for a
    Subnet, shown in the Subnet's status (``status.provider``) and handed back in
    :attr:`SubnetInfo.realized` (e.g. ECS: each vSwitch's zone and CIDR). Never secrets."""

    details: Mapping[str, Any] = attrs.field(factory=dict)
    #: a short line for ``kubectl get`` / ``podnet status`` (e.g. ``2 vSwitches``)
    summary: str = ""
