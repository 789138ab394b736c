"""The OVN provider: pod addresses from its own IPAM, written as logical switch ports,
port groups, NAT rules and routes into a real OVN Northbound database through ovsdbapp.

The Northbound database is the IPAM's durable memory: ``allocate`` writes the port with
its address before the engine records it, so an address survives a controller crash in
NB, and a restarted controller rebuilds its IPAM from the ports it finds there. An address
in NB that no record claims stays held (never handed to a second pod) until its port goes.
``route`` completes the port (port security, security groups, the node's group for a
distributed gateway, VIPs, EIP/SNAT with a source route); ``release`` removes it all.

The provider is four modules: ``config`` (its section and the names it writes),
``ipam`` (subnets, routers, the in-memory IPAM and the allocations made of them),
``northbound`` (the client, configuration, the rebuild from Northbound, external networks
and security groups, NetworkPolicy's rows from ``netpol`` written by ``nbpolicy``) and
this one, the hooks.
"""

from __future__ import annotations

import ipaddress
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.annotations import SUBNETS, check_references, is_ip, show
from podnet.hookspecs.annotations import annotation_field as _field
from podnet.hookspecs.errors import ErrorKind, InvalidRequest, ProviderError
from podnet.hookspecs.models import (
    DEFAULT_NETWORK,
    NodeInfo,
    PodInfo,
    PodNetwork,
    PodNetworkStatus,
)
from podnet.hookspecs.netpol import Enforcement, PolicyRealization, ResolvedPolicy
from podnet.hookspecs.networks import IPPoolInfo, Networks, SubnetInfo, SubnetRealization, expand
from podnet.hookspecs.types import (
    AllocateContext,
    Allocation,
    CheckResult,
    NetworkAttachment,
    Plug,
    PlugContext,
    PlugResult,
    PodNetworkContext,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    UnplugContext,
    VerifyResult,
)
from podnet.plugins.ovn.config import DEFAULT_OVS_DB as DEFAULT_OVS_DB  # the agent's default
from podnet.plugins.ovn.config import (
    EXT_IP,
    EXT_IPV6,
    EXT_MAC,
    EXT_NAMESPACE,
    EXT_NODE,
    EXT_POD,
    EXT_SUBNET,
    NETWORKS_ANNOTATION,
    IPAddress,
)
from podnet.plugins.ovn.config import NAME as NAME
from podnet.plugins.ovn.ipam import (
    Blocked,
    Held,
    Subnet,
    allocation_of,
    nat_rules,
    pg_name,
    port_name,
    statefulset_ordinal_of,
    virtual_ip,
    workload_wants,
)
from podnet.plugins.ovn.netpol import policy_port_group
from podnet.plugins.ovn.northbound import OvnNorthbound, log
from podnet.plugins.ovn.objects import config_networks
from podnet.plugins.ovn.rows import (
    GROUPS,
    KEY,
    OWNER,
    OWNER_VALUE,
    ROLE,
    ROLE_VIP,
    VIPS,
    RouterLink,
    binding_options,
    column,
    vip_port_name,
    vm_binding,
)
from podnet.plugins.ovn.secgroups import (
    Acl,
)

if TYPE_CHECKING:
    from podnet.plugins.ovn.nb import NbClient, PortSpec

__version__ = "0.1.0"


class OvnProvider(OvnNorthbound):
    """The plugin. Configure it (``podnet_configure``) or pass ``remote`` and subnets."""

    # --- hooks: registration ---------------------------------------------------------------

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=False,
            manages_interfaces=False, policy=self.policy,
            sticky_kinds=("StatefulSet", "VirtualMachineInstance"),
            network_policy=Enforcement.PROVIDER,
            description="OVN overlay: logical switch ports in the Northbound DB",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        with self.lock:
            self._configure(config)

    @hookimpl
    def podnet_select_networks(self, pod: PodInfo, node: NodeInfo
                               ) -> Sequence[NetworkAttachment] | None:
        """The attachment networks of ``podnet.io/networks`` that this provider serves;
        core validates the annotation, and unplugs a network the pod no longer names."""
        raw = pod.annotations.get(NETWORKS_ANNOTATION, "")
        names = [n.strip() for n in raw.split(",") if n.strip()]
        mine = [NetworkAttachment(network=n, provider=self.name)
                for n in names if n in self.networks]
        return mine or None

    # --- networks declared as objects ---------------------------------------------------

    @hookimpl
    def podnet_subnet_parameters(self, provider: str, subnet: SubnetInfo
                                 ) -> SubnetRealization | None:
        """Check a Subnet's OVN parameters (``logicalSwitch``, ``gatewayType``,
        ``router``, ``mtu``, ``vipsRange``); nothing is written to NB here: the switch (and
        its router link) are made when its first pod is."""
        with self.lock:
            # a removed Subnet holds its switch while its pods' ports are in NB
            in_use = self._subnets_in_use() if self.retired else None
            params = self._check_subnet(subnet, in_use=in_use)
        return SubnetRealization(details=params.details(), summary=params.summary())

    @hookimpl
    def podnet_networks_changed(self, provider: str, networks: Networks) -> None:
        """Serve ``networks`` from now on (a notification: it raises nothing; a Subnet
        it cannot serve is left out and logged)."""
        with self.lock:
            try:
                self._apply_networks(networks)
            except Exception:  # a notification must not fail core's pass
                log.exception("provider %s: networks of revision %s not applied",
                              self.name, networks.revision)

    @hookimpl
    def podnet_config_networks(self, provider: str) -> Networks | None:
        with self.lock:
            return config_networks(self.name, self.config, self._config_groups,
                                   self._declared_subnets)

    # --- NetworkPolicy (netpol.py: the rows; nbpolicy.py: the commands) ------------------

    @hookimpl
    def podnet_network_policy(self, provider: str, key: str, policy: ResolvedPolicy | None
                              ) -> PolicyRealization | None:
        """The policy's port group, address sets and ACLs, made what ``policy`` says in
        one transaction (none when NB has them already); ``None``: all of them removed."""
        self.calls["network_policy"] += 1
        return self.program_policy(key, policy)

    @hookimpl
    def podnet_network_policy_keys(self, provider: str) -> Collection[str] | None:
        return sorted(self.client.policy_keys()) if self.remote else None

    # --- allocate ----------------------------------------------------------------------------

    def _subnet_for(self, pn: PodNetwork, context: AllocateContext) -> Subnet:
        """Core's choice (``context.subnet``) when the provider has Subnet objects; else
        the config's rules: the pod's annotation, its Namespace's, the namespaces a
        subnet lists, the default."""
        if context.subnet is not None:
            return self._object_subnet(context.subnet)
        namespace_annotations = context.namespace_annotations
        req = pn.spec.requests
        if pn.spec.network != DEFAULT_NETWORK:
            attached = self.networks.get(pn.spec.network)
            if attached is None:
                raise InvalidRequest(_field("networks"), f"network {pn.spec.network!r} is not "
                                     f"served by provider {self.name}")
            return self.subnets[attached]
        if req.subnets:
            for name in req.subnets:
                if name not in self.subnets:
                    raise InvalidRequest(_field("subnets"), f"unknown subnet {name!r}; known: "
                                         f"{', '.join(sorted(self.subnets))}")
            return self.subnets[req.subnets[0]]
        chosen = self._namespace_subnet(pn.metadata.namespace or "", namespace_annotations)
        if chosen is not None:
            return chosen
        for s in self.subnets.values():
            if pn.metadata.namespace in s.namespaces:
                return s
        return next(s for s in self.subnets.values() if s.default)

    def _namespace_subnet(self, namespace: str, annotations: Mapping[str, str]
                          ) -> Subnet | None:
        """``podnet.io/subnets`` on the pod's Namespace (its first entry), if any."""
        raw = annotations.get(SUBNETS)
        if raw is None:
            return None
        field = f"namespace[{namespace}].metadata.annotations[{SUBNETS}]"
        try:
            if not raw.strip():
                raise ValueError(f"empty value {show(raw)}")
            names = check_references([p.strip() for p in raw.split(",")])
        except ValueError as exc:
            message = str(exc) if show(raw) in str(exc) else f"{exc} in {show(raw)}"
            raise InvalidRequest(field, f"Namespace {namespace}: {message}") from None
        for name in names:
            if name not in self.subnets:
                raise InvalidRequest(field, f"Namespace {namespace} names unknown subnet "
                                     f"{name!r}; known: {', '.join(sorted(self.subnets))}")
        return self.subnets[names[0]]

    @staticmethod
    def _blocked(subnet: Subnet, node: NodeInfo | None, *, vips: bool = False) -> Blocked:
        """What a pod may not take on ``subnet`` (``vips``: as a VIP, which the Subnet's
        ``vipsRange`` is for, rather than as its own address)."""
        blocked: dict[str, str] = {}
        for gw in (subnet.gateway, subnet.gateway6):
            if gw:
                blocked[gw] = "the subnet's gateway"
        if node is not None:
            for ip in node.internal_ips:
                blocked[ip] = f"node {node.name}'s internal address"
        ranges = [(subnet.excluded, "an excluded address")]
        if not vips:
            ranges.append((subnet.vips_range, "kept for VIPs (the Subnet's vipsRange)"))
        return Blocked(blocked, ranges)

    def _claim_vips(self, pn: PodNetwork, subnet: Subnet, node: NodeInfo | None, name: str,
                    own: Sequence[str]) -> list[str]:
        """Check the pod's VIPs (``podnet.io/vips``) and hold them in the IPAM for its
        port (call under ``self.lock``): each must be in the subnet and free, or already
        this port's VIP. :return: the VIPs newly taken (to give back if the write fails).
        """
        vips = list(pn.spec.requests.vips)
        if not vips:
            return []  # nothing to check or take (VIPs dropped are route's drop_vips)
        blocked = self._blocked(subnet, node, vips=True)
        held = self.ipam.vips_of(name)
        for vip in vips:
            if vip in held:
                continue  # the pod's already: never taken from it by a later change
            self._check_wanted(vip, subnet, blocked, "vips")
            if subnet.vips_range and vip not in subnet.vips_range:
                raise InvalidRequest(_field("vips"), f"VIP {vip} is outside the vipsRange of "
                                     f"{subnet.describe()}")
            if vip in own:
                raise InvalidRequest(_field("vips"), f"VIP {vip} is the pod's own address")
            holder = self.ipam.used.get(vip)
            if holder is not None and not (holder.port == name and holder.vip):
                owner = holder.port or "a port podnet does not own"
                what = "a VIP of" if holder.vip else "the address of"
                raise ProviderError(ErrorKind.CONFLICT, f"VIP {vip} is already {what} "
                                    f"{owner}", field=_field("vips"))
        new = [vip for vip in vips if vip not in self.ipam.vips_of(name)]
        self.ipam.take_vips(name, new)
        return new

    @staticmethod
    def _unusable(ip: str, subnet: Subnet, blocked: Blocked) -> str | None:
        """Why ``ip`` cannot be a pod's on ``subnet`` (``None``: it can, if free)."""
        addr = ipaddress.ip_address(ip)
        net = subnet.v4 if addr.version == 4 else subnet.v6
        if net is None or addr not in net or addr in (net.network_address,) or (
                addr.version == 4 and addr == net.broadcast_address):
            return f"outside {subnet.describe()}"
        why = blocked.reason(str(addr))
        return None if why is None else f"{why} in {subnet.describe()}"

    def _check_wanted(self, ip: str, subnet: Subnet, blocked: Blocked, field: str
                      ) -> IPAddress:
        why = self._unusable(ip, subnet, blocked)
        if why is not None:
            raise InvalidRequest(_field(field), f"{ip} is {why}")
        return ipaddress.ip_address(ip)

    def _pick(self, pn: PodNetwork, ctx: AllocateContext, subnet: Subnet, name: str
              ) -> tuple[str | None, str | None]:
        req = pn.spec.requests
        blocked = self._blocked(subnet, ctx.node.node)
        v4: str | None = None
        v6: str | None = None
        if req.ip_address:
            for ip in req.ip_address.split(","):
                addr = self._check_wanted(ip.strip(), subnet, blocked, "ip-address")
                owner = self.ipam.owner(str(addr))
                if owner is not None and owner != name:
                    raise ProviderError(ErrorKind.CONFLICT, f"{addr} is already used by {owner}",
                                        field=_field("ip-address"))
                if addr.version == 4:
                    v4 = str(addr)
                else:
                    v6 = str(addr)
            return v4, v6
        if ctx.ip_pool is not None:
            return self._from_pool(pn, ctx, ctx.ip_pool, subnet, name, blocked)
        if req.ip_pool:
            pool = list(req.ip_pool)
            if len(pool) == 1 and not is_ip(pool[0]):
                named = subnet.ip_pools.get(pool[0])
                found = self.pools.get(pool[0])
                if named is None and found is not None and found.subnet == subnet.name:
                    return self._from_pool(pn, ctx, found, subnet, name, blocked)
                if named is None:
                    raise InvalidRequest(_field("ip-pool"), f"no IP pool {pool[0]!r} in "
                                         f"{subnet.describe()}")
                pool = list(named)
            for ip in pool:
                self._check_wanted(ip, subnet, blocked, "ip-pool")
            ordinal = statefulset_ordinal_of(ctx, pn)
            candidates = pool
            if ordinal is not None and ordinal < len(pool):
                candidates = [pool[ordinal]]
            for ip in candidates:
                owner = self.ipam.owner(ip)
                if ip not in req.vips and (owner is None or owner == name):
                    v4, v6 = (ip, None) if ipaddress.ip_address(ip).version == 4 else (None, ip)
                    return v4, v6
            raise ProviderError(ErrorKind.SUBNET_EXHAUSTED,
                                f"every address of the IP pool is in use ({', '.join(pool)})",
                                field=_field("ip-pool"))
        # the pod's own VIPs are not free for it either (held once the address is chosen),
        # nor are the addresses of the Subnet's IP pools (kept for the pools' pods)
        avoid = Blocked(blocked.addresses, [*blocked.ranges, *subnet.pooled]).plus(
            req.vips, "one of the pod's VIPs")
        if subnet.v4 is not None:
            v4 = self.ipam.random_free(subnet.v4, avoid)
            if v4 is None:
                raise ProviderError(ErrorKind.SUBNET_EXHAUSTED, f"{subnet.describe()} is full",
                                    subject=subnet.name)
        if subnet.v6 is not None:
            v6 = self.ipam.random_free(subnet.v6, avoid)
            if v6 is None:
                raise ProviderError(ErrorKind.SUBNET_EXHAUSTED, f"{subnet.describe()} is full",
                                    subject=subnet.name)
        return v4, v6

    def _from_pool(self, pn: PodNetwork, ctx: AllocateContext, pool: IPPoolInfo,
                   subnet: Subnet, name: str, blocked: Blocked
                   ) -> tuple[str | None, str | None]:
        """An address of IPPool ``pool``: a StatefulSet pod's the one at its ordinal,
        another pod's the first free one (members the Subnet does not allow now, excluded
        or narrowed away, are passed over)."""
        req = pn.spec.requests
        field = _field("ip-pool") if req.ip_pool else f"ippool[{pool.name}].spec.addresses"
        ordinal = statefulset_ordinal_of(ctx, pn)
        members: Iterable[IPAddress] = expand(pool.addresses)
        if ordinal is not None:
            at = next(itertools.islice(expand(pool.addresses), ordinal, None), None)
            if at is not None:
                why = self._unusable(str(at), subnet, blocked)
                if why is not None:
                    raise InvalidRequest(field, f"{at}, the address at ordinal {ordinal} of "
                                         f"IPPool {pool.name}, is {why}")
                members = [at]
        for addr in members:
            ip = str(addr)
            if ip in req.vips or self._unusable(ip, subnet, blocked) is not None:
                continue
            owner = self.ipam.owner(ip)
            if owner is None or owner == name:
                return (ip, None) if addr.version == 4 else (None, ip)
        raise ProviderError(ErrorKind.SUBNET_EXHAUSTED, f"every address of IPPool {pool.name} "
                            f"({', '.join(pool.addresses)}) is in use",
                            field=field if req.ip_pool else None, subject=pool.name)

    def _external_ids(self, pn: PodNetwork, subnet: str, v4: str | None, v6: str | None,
                      mac: str, node: str) -> dict[str, str]:
        ext: dict[str, str] = {KEY: pn.key, OWNER: OWNER_VALUE, EXT_POD: pn.spec.pod_name,
               EXT_NAMESPACE: pn.metadata.namespace or "", EXT_SUBNET: subnet, EXT_NODE: node,
               EXT_MAC: mac}
        if v4:
            ext[EXT_IP] = v4
        if v6:
            ext[EXT_IPV6] = v6
        return ext

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        self.calls["allocate"] += 1
        client = self.client
        name = port_name(pn)
        # read before the provider's lock: other callers' allocations need not wait for
        # the replica (only this record's allocate makes its port)
        existing = client.port(name)
        with self.lock:
            if existing is not None and column(existing, "external_ids").get(KEY) == pn.key:
                found = self._allocation_of(existing)
                if found is not None:
                    return found
            subnet = self._subnet_for(pn, context)
            v4, v6 = self._pick(pn, context, subnet, name)
            mac = pn.spec.requests.mac_address
            if mac:
                mac = mac.lower()
                owner = self.ipam.macs.get(mac)
                if owner is not None and owner != name:
                    raise ProviderError(ErrorKind.CONFLICT, f"MAC {mac} is already used by "
                                        f"{owner}", field=_field("mac-address"))
            else:
                mac = self.ipam.new_mac()
            ips = [ip for ip in (v4, v6) if ip]
            self.ipam.free(name)
            self.ipam.take(name, ips, mac)
            try:
                # the VIPs are held with the address, and written with the port: NB
                # remembers them across a restart before anything else may take them
                vips = list(pn.spec.requests.vips)
                self._claim_vips(pn, subnet, context.node.node, name, ips)
            except BaseException:
                self.ipam.free(name)
                raise
        from podnet.plugins.ovn.nb import PortSpec, outcome_unknown

        allocation = allocation_of(subnet, v4, v6, mac, name, self.config.mtu)
        routed = self._routed_port(pn, allocation)
        spec = PortSpec(name, subnet.switch, [" ".join([mac, *ips])],
                        self._external_ids(pn, subnet.name, v4, v6, mac, pn.spec.node_name),
                        vips=vips) if routed is None else routed[0]
        spec.policy_groups = [policy_port_group(k) for k in context.network_policies]
        try:
            if routed is None:
                client.ensure_infra(switches=[subnet.switch])
            else:
                # the port as route makes it: the route that follows finds it in place and
                # writes nothing (one transaction per pod network instead of two). Its
                # groups and their rules first (what was confirmed is not read again)
                groups, acls = routed[1], routed[2]
                if not (client.infra_ok([subnet.switch], groups)
                        and (not acls or client.acls_ok(acls))):
                    client.ensure_infra(switches=[subnet.switch], port_groups=groups)
                    if acls:
                        client.ensure_acls(acls)
            client.run([client.ensure_port(spec)])
        except BaseException as exc:
            # a write whose answer never came may still be committed: its address stays
            # held for this record, which takes it back when it asks again or frees it
            # when it is released (freed, another pod could take it meanwhile and sit on
            # one address with this record's port once NB applies the write)
            if not outcome_unknown(exc):
                with self.lock:
                    self.ipam.free(name)
            raise
        return allocation

    def _routed_port(self, pn: PodNetwork, allocation: Allocation
                     ) -> tuple[PortSpec, list[str], dict[str, list[Acl]]] | None:
        """The port as ``route`` will want it once the record holds ``allocation``, with
        the port groups it needs and their ACLs; None when route has more to do than the
        port (a router: NAT, routes, the subnet's link) or the request is one route must
        refuse (its error belongs to route, on the record)."""
        status = PodNetworkStatus(ip=allocation.ip, ipv6=allocation.ipv6,
                                  mac=allocation.mac, subnet=allocation.subnet)
        try:
            spec, groups, routers = self._desired(attrs.evolve(pn, status=status),
                                                  pn.spec.node_name)
            acls, peers = self._acls_of(pn)
        except (InvalidRequest, ProviderError):
            return None
        if routers or spec.router is not None:
            return None
        return spec, [*groups, *peers], acls

    @staticmethod
    def _routed_in_place(client: NbClient, spec: PortSpec, groups: Sequence[str],
                         acls: Mapping[str, Sequence[Acl]]) -> bool:
        """Whether NB (the replica) holds what route would write for a port without a
        router: the switch, the port groups (the port's and its peers') with their ACLs
        (not read again while nothing changed them), and the port exactly as ``spec``
        (exactly its podnet groups, in one read)."""
        assert spec.port_groups is not None
        if not client.infra_ok([spec.switch], groups):
            return False
        if acls and not client.acls_ok(acls):
            return False
        with client.reading():
            lsp = client.port(spec.name)
            if lsp is None:
                return False
            ext = column(lsp, "external_ids")
            if ext.get(GROUPS, "") != ",".join(sorted(set(spec.port_groups))):
                return False
            return OvnProvider._compare(client, spec, spec.port_groups, None, (lsp, ext)).ok

    def _allocation_of(self, lsp: Any) -> Allocation | None:
        ext = column(lsp, "external_ids")
        v4, v6, mac = ext.get(EXT_IP), ext.get(EXT_IPV6), ext.get(EXT_MAC)
        subnet = self._record_subnet(ext.get(EXT_SUBNET, ""))
        if not (v4 or v6) or subnet is None:
            return None
        self.ipam.take(lsp.name, [ip for ip in (v4, v6) if ip], mac)
        return allocation_of(subnet, v4, v6, mac, lsp.name, self.config.mtu)

    # --- route / verify ------------------------------------------------------------------------

    def _record_subnet(self, name: str) -> Subnet | None:
        """A record's subnet: serving, or retired (no new pod; its ports keep working)."""
        return self.subnets.get(name) or self.retired.get(name) or self._fresh.get(name)

    def _known_subnet(self, pn: PodNetwork) -> Subnet:
        subnet = self._record_subnet(pn.status.subnet or "") or self._recover_subnet(pn)
        if subnet is None:
            raise ProviderError(ErrorKind.FATAL, f"record {pn.key} names subnet "
                                f"{pn.status.subnet!r}, which is not configured",
                                field="status.subnet")
        return subnet

    def _desired(self, pn: PodNetwork, node: str) -> tuple[PortSpec, list[str], list[str]]:
        """The port as it should be, the port groups and the routers it needs."""
        st = pn.status
        req = pn.spec.requests
        subnet = self._known_subnet(pn)
        ips = [ip for ip in (st.ip, st.ipv6) if ip]
        mac = st.mac or ""
        # as Kube-OVN: the addresses are the pod's own; its VIPs are virtual ports of their
        # own (this port their parent), which port security lets the pod send from
        entry = " ".join([mac, *ips])
        security = [" ".join([mac, *ips, *req.vips])] if req.port_security else []
        groups = [g.port_group for g in self._groups_of(pn)]
        nated = bool(req.eip or req.snat)
        if subnet.gateway_type == "distributed" and node and not nated:
            # an EIP/SNAT pod leaves its node's group (as Kube-OVN does): its traffic
            # takes the source route to the router's gateway, not the node's
            groups.append(pg_name("node", node))
        router = self.routers.get(subnet.router) if subnet.router else None
        if nated and router is None:
            raise InvalidRequest(_field("eip" if req.eip else "snat"),
                                 f"{subnet.describe()} has no router for NAT")
        v4 = st.ip if st.ip and ipaddress.ip_address(st.ip).version == 4 else None
        v6 = st.ipv6 or (st.ip if st.ip and not v4 else None)
        nats, routes = nat_rules(req.eip, req.snat, router, v4, v6) if router else ([], [])
        from podnet.plugins.ovn.nb import PortSpec

        spec = PortSpec(
            port_name(pn), subnet.switch, [entry],
            self._external_ids(pn, subnet.name, v4, v6, mac, node),
            port_security=security,
            port_groups=groups, router=router.name if router else None,
            nats=nats, routes=routes, vips=list(req.vips),
            options=vm_binding(pn, node))
        return spec, groups, [router.name] if router else []

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        self.calls["route"] += 1
        if not pn.status.ip or not pn.status.mac:
            raise ProviderError(ErrorKind.FATAL, f"record {pn.key} has no address to route",
                                field="status.ip")
        client = self.client
        spec, groups, routers = self._desired(pn, pn.spec.node_name)
        spec.policy_groups = [policy_port_group(k) for k in context.network_policies]
        subnet = self._known_subnet(pn)
        own = [ip for ip in (pn.status.ip, pn.status.ipv6) if ip]
        node = context.node.node if context.node is not None else None
        with self.lock:
            self.ipam.take(spec.name, own, pn.status.mac)
            # VIPs added since the last route are checked and held before anything is
            # written; those the pod no longer lists are freed once their ports are gone
            taken = self._claim_vips(pn, subnet, node, spec.name, own)
        link = subnet.router_link() if routers else None
        try:
            # the peers' port groups before the rules naming their address sets, and the
            # rules before the port joins: a port never is in a group that lacks them
            acls, peers = self._acls_of(pn)
            if routers or not self._routed_in_place(client, spec, [*groups, *peers], acls):
                client.ensure_infra(switches=[spec.switch], routers=routers,
                                    port_groups=[*groups, *peers],
                                    links=[link] if link is not None else [])
                if acls:
                    client.ensure_acls(acls)
                self._repair_external(client, routers)
                client.run([client.ensure_port(spec)])
        except BaseException as exc:
            from podnet.plugins.ovn.nb import outcome_unknown

            # the VIPs go back only when the port write surely did not land (see allocate)
            if not outcome_unknown(exc):
                with self.lock:
                    for vip in taken:
                        self.ipam.used.pop(vip, None)
            raise
        with self.lock:
            self.ipam.drop_vips(spec.name, keep=pn.spec.requests.vips)
        return RouteResult(interface=spec.name)

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        pn = context.pod_network
        self.calls["verify"] += 1
        client = self.client
        try:
            self._groups_of(pn)
        except InvalidRequest as exc:
            # a group made bad (or undefined) under a running pod: the repair's route says
            # so on the pod; its port keeps the group's last rules meanwhile
            return VerifyResult(ok=False, reason=str(exc))
        spec, groups, routers = self._desired(pn, pn.spec.node_name)
        link = self._known_subnet(pn).router_link() if routers else None
        acls, _ = self._acls_of(pn)
        with client.reading():  # the port, its groups and its router link as of one moment
            result = self._compare(client, spec, groups, link)
        if result.ok and acls and not client.acls_ok(acls):
            return VerifyResult(ok=False, reason="the ACLs of port groups "
                                f"{', '.join(sorted(acls))} differ from their security groups")
        return result

    @staticmethod
    def _compare(client: NbClient, spec: PortSpec, groups: Sequence[str],
                 link: RouterLink | None, read: tuple[Any, dict[str, str]] | None = None
                 ) -> VerifyResult:
        """``read``: the port and its external ids, already read under the same lock
        (reading a column of the replica converts all of it, each time)."""
        lsp, ext = read if read is not None else (client.port(spec.name), None)
        if lsp is None:
            return VerifyResult(ok=False, reason=f"logical switch port {spec.name} is missing")
        if ext is None:
            ext = column(lsp, "external_ids")
        addresses = column(lsp, "addresses")
        if addresses != spec.addresses:
            return VerifyResult(ok=False, reason=f"port {spec.name} has addresses "
                                f"{addresses}, wants {spec.addresses}")
        security = column(lsp, "port_security")
        if security != spec.port_security:
            return VerifyResult(ok=False, reason=f"port {spec.name} has port security "
                                f"{security}, wants {spec.port_security}")
        if binding_options(lsp) != spec.options:
            return VerifyResult(ok=False, reason=f"port {spec.name} is bound by "
                                f"{binding_options(lsp)}, wants {spec.options}")
        recorded = dict(ext)
        recorded.pop(GROUPS, None)
        had_vips = recorded.pop(VIPS, "")
        if recorded != spec.external_ids:
            return VerifyResult(ok=False, reason=f"port {spec.name}'s external_ids changed")
        wanted_vips = spec.vips or []
        if had_vips != ",".join(wanted_vips):
            return VerifyResult(ok=False, reason=f"port {spec.name} has VIPs {had_vips!r}, "
                                f"wants {','.join(wanted_vips)!r}")
        for vip in wanted_vips:
            name = vip_port_name(spec.switch, vip)
            vport = client.port(name)
            if (vport is None or virtual_ip(vport) != vip
                    or vport.external_ids.get(KEY) != spec.external_ids[KEY]
                    or spec.name not in vport.options.get("virtual-parents", "").split(",")):
                return VerifyResult(ok=False, reason=f"virtual port {name} of VIP {vip} is "
                                    "missing or changed")
        missing = [g for g in groups if not client.in_port_group(g, lsp)]
        if missing:
            return VerifyResult(ok=False, reason=f"port {spec.name} is not in {missing}")
        # podnet's groups it should have left (a Subnet's gateway type changed, say)
        extra = sorted(set(filter(None, ext.get(GROUPS, "").split(","))) - set(groups))
        if extra and any(client.in_port_group(g, lsp) for g in extra):
            return VerifyResult(ok=False, reason=f"port {spec.name} is still in {extra}")
        # the subnet's way out: route re-makes it (shared, so the first repair mends it)
        if link is not None and not client.link_ok(link):
            return VerifyResult(ok=False, reason=f"router link {link.lrp}/{link.lsp} of "
                                f"subnet {spec.switch} is missing or changed")
        return VerifyResult(ok=True)

    # --- release ---------------------------------------------------------------------------

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        pn = context.pod_network
        self.calls["release"] += 1
        client = self.client
        name = port_name(pn)
        client.run([client.delete_port(name, pn.key)])
        with self.lock:
            self.ipam.free(name)
        return ReleaseResult(return_to_pool=False)

    @hookimpl
    def podnet_sweep(self, provider: str, owners: Collection[str],
                     remove: Collection[str]) -> Sequence[str] | None:
        """podnet's ports (marked in external_ids) whose record is gone: those core says
        stayed orphans long enough are deleted with their routes and NAT, and their
        addresses freed; the others are reported. Without a Northbound remote there is
        nothing of podnet's to sweep: no answer, not an error."""
        if not self.remote:
            return None
        client = self.client
        self._sync_security_groups(client)  # and the groups no pod uses any more
        # a port's external ids name its record (a pod's port is also named after it,
        # port_name); candidates are pods' ports (a key, no type, no role) and their VIPs'
        # virtual ports (role vip), owned by the same record: the router links podnet
        # made carry traffic for every pod of their subnet
        orphans: dict[str, tuple[str, str | None]] = {}
        for lsp in client.ports():
            ext = lsp.external_ids
            key = ext.get(KEY)
            if ext.get(OWNER) != OWNER_VALUE or key is None or key in owners:
                continue
            if ROLE not in ext and not lsp.type:
                orphans[lsp.name] = (key, None)
            elif ext.get(ROLE) == ROLE_VIP and lsp.type == "virtual":
                orphans[lsp.name] = (key, virtual_ip(lsp))
        doomed = [name for name in orphans if name in remove]
        if doomed:
            self.calls["sweep"] += len(doomed)
            client.run([client.delete_port(name, orphans[name][0]) for name in doomed])
            with self.lock:
                for name in doomed:
                    key, vip = orphans[name]
                    if vip is None:
                        self.ipam.free(name)
                    elif self.ipam.used.get(vip) == Held(key, vip=True):
                        del self.ipam.used[vip]
        return [name for name in orphans if name not in remove]

    @hookimpl
    def podnet_hold_address(self, context: PodNetworkContext) -> bool | None:
        """Hold a StatefulSet pod's address while its StatefulSet (the same one: same
        uid) still counts the pod's ordinal among its replicas; release it at once when it
        scaled below the ordinal or is gone. ``workload_exists``, when given, is asked
        first; what core does not know is left to the ``sticky_hold`` window."""
        pn = context.pod_network
        owner = next((o for o in pn.metadata.owner_references), None)
        if owner is None:
            return None
        if self.workload_exists is not None:
            exists = self.workload_exists(owner.kind, pn.metadata.namespace or "", owner.name,
                                          pn.spec.pod_name)
            if exists is not None:
                return exists
        return workload_wants(context.workload, owner.kind, owner.name, owner.uid,
                               pn.spec.pod_name)

    # --- the dataplane on a node (the node agent): ports of the integration bridge -------

    @hookimpl
    def podnet_plug(self, context: PlugContext) -> PlugResult | None:
        return self.dataplane.plug(context, self._lsp_of(context))

    @hookimpl
    def podnet_unplug(self, context: UnplugContext) -> None:
        self.dataplane.unplug(context)

    @hookimpl
    def podnet_check_plug(self, context: PlugContext) -> CheckResult | None:
        return self.dataplane.check(context, self._lsp_of(context))

    @hookimpl
    def podnet_plugs(self, provider: str, node: str) -> Sequence[Plug] | None:
        return self.dataplane.plugs()

    @staticmethod
    def _lsp_of(context: PlugContext) -> str:
        """The record's logical switch port (allocate names it in ``status.interface``)."""
        pn = context.pod_network
        return pn.status.interface or port_name(pn)

    # --- errors ----------------------------------------------------------------------------

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        try:
            from ovsdbapp.exceptions import OvsdbAppException
        except ImportError:  # pragma: no cover - a broken install
            pass
        else:
            if isinstance(error, OvsdbAppException):
                return ErrorKind.TRANSIENT
        if isinstance(error, RuntimeError) and str(error).startswith(
                ("OVSDB Error", "OVS transaction timed out")):
            return ErrorKind.TRANSIENT
        if isinstance(error, TimeoutError | ConnectionError):
            return ErrorKind.TRANSIENT
        return None

    # --- ground truth, for tests and the demo ----------------------------------------------


#: what the host registers as the built-in ``ovn`` plugin
plugin = OvnProvider()
