"""The OVN provider's state and its Northbound connection: the client (made on first
use, the IPAM rebuilt from the ports found there), configuration, the routers' external
networks and the security groups' port groups and ACLs kept in step with it. The hooks
(``podnet.plugins.ovn.provider``) are built on it."""


from __future__ import annotations

import ipaddress
import logging
import threading
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from podnet.hookspecs.annotations import annotation_field as _field
from podnet.hookspecs.errors import ConfigError, InvalidRequest
from podnet.hookspecs.models import (
    PodNetwork,
)
from podnet.hookspecs.netpol import PolicyFinding, PolicyRealization, ResolvedPolicy
from podnet.hookspecs.networks import IPPoolInfo, Networks, SecurityGroupInfo, SubnetInfo
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import (
    config_key,
    read_section,
)
from podnet.plugins.ovn.config import (
    DEFAULT_BATCH_WINDOW,
    EXT_IP,
    EXT_IPV6,
    EXT_NODE,
    EXT_SUBNET,
    NAME,
    OvnConfig,
)
from podnet.plugins.ovn.ipam import (
    DEFAULT_SUBNET,
    Held,
    Ipam,
    Router,
    Subnet,
    port_addresses,
    router_of,
    subnet_of,
    virtual_ip,
)
from podnet.plugins.ovn.netpol import policy_rows
from podnet.plugins.ovn.objects import (
    SubnetParameters,
    check_parameters,
    group_body,
    subnet_from_info,
)
from podnet.plugins.ovn.rows import (
    GROUPS,
    KEY,
    OWNER,
    OWNER_VALUE,
    ROLE,
    ROLE_ROUTER_LINK,
    ROLE_VIP,
    ExternalNet,
)
from podnet.plugins.ovn.secgroups import (
    Acl,
    BadGroup,
    SecurityGroup,
    acls_by_port_group,
    parse_groups,
    port_group_of,
)

if TYPE_CHECKING:
    from podnet.plugins.ovn.dataplane import OvsDataplane
    from podnet.plugins.ovn.nb import NbClient

log = logging.getLogger(__name__)


class OvnNorthbound:
    """The provider's subnets, routers, IPAM and Northbound client."""

    def __init__(self, remote: str | None = None, subnets: Sequence[Mapping[str, Any]] = (),
                 *, name: str = NAME, timeout: float = 10.0,
                 batch_window: float = DEFAULT_BATCH_WINDOW,
                 routers: Sequence[Mapping[str, Any]] = (), seed: int | None = None,
                 networks: Mapping[str, str] | None = None,
                 policy: PoolPolicy | None = None,
                 workload_exists: Callable[[str, str, str, str], bool | None] | None = None,
                 reconnect_backoff_ms: tuple[int, int] | None = None,
                 security_groups: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.remote = remote
        self.timeout = timeout
        #: (min, max) between reconnect attempts after the NB server went away
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.batch_window = batch_window
        self.policy = policy or PoolPolicy(reuse_cooldown=0.0)
        #: the subnets serving: the config section's, and the Subnet objects' (an object
        #: wins over a config subnet of its name)
        self.subnets: dict[str, Subnet] = {}
        #: the config section's subnets; whether the section declares any (else the
        #: built-in ovn-default serves, and is not migrated to an object)
        self._config_subnets: dict[str, Subnet] = {}
        self._declared_subnets = bool(subnets)
        #: the Subnet objects' (``podnet_networks_changed``), and the views they came from
        self._object_subnets: dict[str, Subnet] = {}
        self._object_infos: dict[str, SubnetInfo] = {}
        #: subnets no longer served, kept for the ports still on them (route, verify and
        #: release of a pod on a Subnet removed from the set keep working)
        self.retired: dict[str, Subnet] = {}
        #: Subnet objects core handed to allocate before podnet_networks_changed did
        self._fresh: dict[str, Subnet] = {}
        #: IPPool objects by name
        self.pools: dict[str, IPPoolInfo] = {}
        #: the config section's security groups (raw) and the SecurityGroup objects
        self._config_groups: dict[str, Any] = {}
        self._object_groups: dict[str, SecurityGroupInfo] = {}
        #: attachment networks this provider serves (``podnet.io/networks``) -> subnet
        self.networks: dict[str, str] = {}
        self.routers: dict[str, Router] = {}
        self.ipam = Ipam(seed)
        #: ports podnet did not make -> the addresses of theirs the IPAM holds
        self._foreign: dict[str, list[str]] = {}
        self.lock = threading.RLock()
        #: a NetworkPolicy's products against a sync of the security groups (taken under
        #: ``lock`` by the sync, never the other way)
        self._policy_lock = threading.Lock()
        self._client: NbClient | None = None
        self._synced = False
        #: the node agent's dataplane (made on first use: the controller never needs it)
        self._dataplane: OvsDataplane | None = None
        #: hook calls that did work, by hook (for the demo's summary)
        self.calls: Counter[str] = Counter()
        #: (kind, namespace, workload name, pod name) -> whether the workload still wants
        #: that pod (exists, and for a StatefulSet, has replicas above the pod's ordinal);
        #: None: cannot tell, core's sticky_hold window decides
        self.workload_exists = workload_exists
        #: security groups by name, each checked on its own (a bad one is a BadGroup)
        self.security_groups: dict[str, SecurityGroup | BadGroup] = {}
        #: the groups' ACLs are to be written and unused groups swept (at the next use of
        #: the client: after a start, a reconnect to a new NB, or a config change)
        self._sg_dirty = True
        #: the routers' external networks are to be written (and removed ones deleted)
        self._ext_dirty = True
        #: NetworkPolicy key -> the nb_cfg of the last transaction that changed its rows
        self._flows_target: dict[str, int] = {}
        self.config = OvnConfig()
        self._configure({"subnets": list(subnets) or [DEFAULT_SUBNET],
                         "routers": list(routers), "networks": dict(networks or {}),
                         "security_groups": dict(security_groups or {})},
                        initial=True)

    def nb_addresses(self) -> dict[str, str]:
        """The primary address (IPv4, or IPv6 on a v6-only subnet) of every podnet port in
        NB -> the node its external_ids name: what records carry in ``status.ip``."""
        out: dict[str, str] = {}
        for lsp in self.client.ports():
            ext = lsp.external_ids
            if ext.get(OWNER) != OWNER_VALUE:
                continue
            ip = ext.get(EXT_IP) or ext.get(EXT_IPV6)
            if ip:
                out[ip] = ext.get(EXT_NODE, "")
        return out

    @property
    def client(self) -> NbClient:
        client = self._client
        if (client is not None and self._synced and not self._sg_dirty
                and not self._ext_dirty and not client.has_port_changes()):
            return client  # nothing to bring up to date: no wait for the provider's lock
        with self.lock:
            if self._client is None:
                if not self.remote:
                    raise ConfigError(config_key(self.name, "remote"),
                                      "no Northbound remote configured")
                try:
                    from podnet.plugins.ovn.nb import NbClient
                except ImportError as exc:  # pragma: no cover - a broken install
                    raise ConfigError(config_key(self.name), f"the OVN provider needs ovsdbapp and "
                                      f"ovs (pip install ovsdbapp): {exc}") from None
                self._client = NbClient(self.remote, self.timeout, self.batch_window,
                                        self.reconnect_backoff_ms)
            if not self._synced:
                self._rebuild(self._client)
                self._synced = True
            else:
                self._follow_foreign_ports(self._client)
            if self._sg_dirty:
                self._sync_security_groups(self._client)
                self._sg_dirty = False
            if self._ext_dirty:
                self._client.ensure_externals(self._externals())
                self._ext_dirty = False
            return self._client

    @property
    def dataplane(self) -> OvsDataplane:
        with self.lock:
            if self._dataplane is None:
                from podnet.plugins.ovn.dataplane import OvsDataplane

                cfg = self.config
                self._dataplane = OvsDataplane(cfg.ovs_db, cfg.integration_bridge,
                                               bind_timeout=cfg.bind_timeout,
                                               timeout=self.timeout)
            return self._dataplane

    def close(self) -> None:
        with self.lock:
            if self._client is not None:
                self._client.close()
            self._client = None
            self._synced = False
            self._sg_dirty = True
            self._ext_dirty = True
            if self._dataplane is not None:
                self._dataplane.close()
            self._dataplane = None

    def _externals(self) -> list[ExternalNet]:
        """The routers' external networks, each with a ``snat`` rule to the router's
        ``external_ip`` for each of its subnets' CIDRs of the external family."""
        nets = []
        # a retired subnet's pods keep leaving translated
        subnets = {**self.retired, **self.subnets}
        for router in self.routers.values():
            ext = router.external
            if ext is None:
                continue
            ext.snat = [(router.external_ip or "", str(net))
                        for s in subnets.values() if s.router == router.name
                        for net in s.networks() if net.version == ext.family]
            nets.append(ext)
        return nets

    def _repair_external(self, client: NbClient, routers: Sequence[str]) -> None:
        """A router's external network changed behind podnet's back (or NB lost it) is
        written again before a pod of it is routed (reads only when it is as it should)."""
        nets = [r.external for name in routers
                if (r := self.routers.get(name)) is not None and r.external is not None]
        if nets and not all(client.external_ok(e) for e in nets):
            with self.lock:
                client.ensure_externals(self._externals())

    def _rebuild(self, client: NbClient) -> None:
        """Every address on a port in NB is held: podnet's ports by their record, the
        others (router ports, someone else's) by nobody."""
        with client.reading():  # the notes and the replica as of one moment
            client.port_changes()  # what the rebuild reads supersedes the notes so far
            ports = client.ports()
            router_ports = client.rows("Logical_Router_Port")
        ipam = Ipam()
        ipam.random = self.ipam.random
        self._foreign = {}
        for lsp in ports:
            ext = dict(lsp.external_ids)
            vip = virtual_ip(lsp)
            if ext.get(OWNER) == OWNER_VALUE:
                if vip and ext.get(ROLE) == ROLE_VIP and ext.get(KEY):
                    # a pod's VIP: held for the pod's port (named after the same key)
                    ipam.take_vips(ext[KEY], [vip])
                    continue
                for ips, mac in port_addresses(lsp.addresses):
                    ipam.take(lsp.name, ips, mac)
            else:
                addresses = list(lsp.addresses) + ([f"virtual {vip}"] if vip else [])
                self._hold_foreign(ipam, lsp.name, addresses)
        # a router's own addresses (podnet's gateways among them) and MACs: never a pod's
        for lrp in router_ports:
            for network in lrp.networks:
                ipam.used.setdefault(str(network).split("/")[0], Held(None))
            if lrp.mac:
                ipam.macs.setdefault(str(lrp.mac).lower(), f"router port {lrp.name}")
        self.ipam = ipam

    def _hold_foreign(self, ipam: Ipam, name: str, addresses: Sequence[str]) -> None:
        """Hold the addresses of a port podnet did not make (never handed to a pod)."""
        held = []
        for ips, mac in port_addresses(addresses):
            ipam.take(f"foreign:{name}", ips, mac)
            for ip in ips:
                ipam.used[ip] = Held(None)
            held.extend(ips)
        self._foreign[name] = held

    def _release_foreign(self, ipam: Ipam, name: str) -> None:
        for ip in self._foreign.pop(name, ()):
            held = ipam.used.get(ip)
            if held is not None and held.port is None:
                del ipam.used[ip]
        ipam.free(f"foreign:{name}")

    def _follow_foreign_ports(self, client: NbClient) -> None:
        """Apply the NB changes to ports others own since the last look: a port someone
        creates after podnet read NB must not have its address handed out."""
        for event, name, ext, addresses in client.port_changes():
            if ext.get(OWNER) == OWNER_VALUE:
                continue  # podnet's own: the records decide
            self._release_foreign(self.ipam, name)
            if event != "delete":
                self._hold_foreign(self.ipam, name, addresses)

    def _configure(self, config: Mapping[str, Any], *, initial: bool = False) -> None:
        """Read a section: keys it leaves out keep their values (subnets, routers and
        networks are checked together as they result)."""
        base = None if initial else self.config
        cfg = read_section(OvnConfig, self.name, config, base)
        if "remote" in config:
            self.remote = cfg.remote
        if "timeout" in config:
            self.timeout = cfg.timeout
        if "batch_window_ms" in config:
            self.batch_window = cfg.batch_window_ms / 1000
        if "reconnect_backoff_ms" in config and cfg.reconnect_backoff_ms is not None:
            low, high = cfg.reconnect_backoff_ms
            self.reconnect_backoff_ms = (low, high)
        if "seed" in config and cfg.seed is not None:
            self.ipam.random.seed(cfg.seed)
        routers = {r.name: router_of(r) for r in cfg.routers} \
            if initial or "routers" in config else {}
        if initial or "routers" in config:
            self._ext_dirty = True
        if initial or "subnets" in config:
            subnets = [subnet_of(s) for s in cfg.subnets]
            if not any(s.default for s in subnets):
                subnets[0].default = True
            for s in subnets:
                if s.router and s.router not in routers:
                    routers[s.router] = Router(s.router)
            self._config_subnets = {s.name: s for s in subnets}
            if not initial:
                self._declared_subnets = True
        self.routers = routers or self.routers
        if initial or "subnets" in config:
            self._merge_subnets()
        if initial or "networks" in config:
            self.networks = dict(cfg.networks)
        if initial or "security_groups" in config:
            self._config_groups = dict(cfg.security_groups)
            self._merge_groups(force=True)
        if {"ovs_db", "integration_bridge", "bind_timeout"} & set(config):
            if self._dataplane is not None:
                self._dataplane.close()
            self._dataplane = None
        self.config = cfg

    def _groups_of(self, pn: PodNetwork) -> list[SecurityGroup]:
        """The checked security groups the pod names (``podnet.io/security-groups``): an
        unknown or a bad one is the pod's ``InvalidRequest``, naming the group's key."""
        out = []
        for name in pn.spec.requests.security_groups:
            group = self.security_groups.get(name)
            if group is None:
                known = ", ".join(sorted(self.security_groups)) or "none"
                where = config_key(self.name, "security_groups")
                if self._object_groups:
                    where = f"SecurityGroup objects and {where}"
                raise InvalidRequest(_field("security-groups"), f"unknown security group "
                                     f"{name!r}; defined ({where}): {known}")
            if isinstance(group, BadGroup):
                raise InvalidRequest(group.field, f"security group {name} (named in "
                                     f"{_field('security-groups')}): {group.message}")
            out.append(group)
        return out

    def _acls_of(self, pn: PodNetwork) -> tuple[dict[str, list[Acl]], list[str]]:
        """The ACLs of the pod's groups by port group, and the port groups of the peers
        their rules name (northd makes the peers' address sets from them)."""
        groups = self._groups_of(pn)
        if not groups:
            return {}, []
        peers = sorted({port_group_of(p) for g in groups for p in g.peers()})
        return acls_by_port_group(groups), peers

    def _sync_security_groups(self, client: NbClient) -> None:
        """Every good group's ACLs as configured (a changed rule replaces the old ACL, a
        restart writes nothing that is there already); podnet's ``sg_`` port groups of
        groups no longer defined are deleted once they have no member (a group still
        holding pods keeps its last rules: fail closed, not open). A bad group's rows
        are left as they are."""
        good = [g for g in self.security_groups.values() if isinstance(g, SecurityGroup)]
        known = {port_group_of(n) for n in self.security_groups}
        # the peers' port groups too (a bad peer's: good rules name its address sets)
        client.ensure_infra(port_groups=sorted(
            {g.port_group for g in good} | {port_group_of(p) for g in good
                                            for p in g.peers()}))
        # the NetworkPolicies' products with the groups' rules follow them (netpol.py)
        with self._policy_lock:
            client.ensure_acls(acls_by_port_group(good), policies=[
                self.security_groups[n] for n in sorted(self.security_groups)])
        stale = [pg.name for pg in client.rows("Port_Group")
                 if pg.name.startswith("sg_") and pg.name not in known
                 and pg.external_ids.get(OWNER) == OWNER_VALUE and not pg.ports]
        client.delete_empty_port_groups(stale)

    # --- NetworkPolicy (netpol.py: the rows; nbpolicy.py: the commands) ------------------

    def program_policy(self, key: str, policy: ResolvedPolicy | None) -> PolicyRealization:
        """Make NB hold what ``policy`` says for ``key`` (nothing for ``None``), in one
        transaction, none when it does already."""
        client = self.client
        if policy is None:
            client.delete_policy(key)
            with self.lock:
                self._flows_target.pop(key, None)
            return PolicyRealization(programmed=True)
        if policy.key != key:
            raise InvalidRequest("metadata.name", f"NetworkPolicy {key}: the resolved "
                                 f"policy is {policy.key}")
        from podnet.plugins.ovn.nbpolicy import member_ports

        with self.lock:  # where the IPAM says each address is: a lookup, not a scan
            known = {a: held.port for m in policy.members for a in m.addresses
                     if (held := self.ipam.used.get(a)) is not None}
        with client.reading():
            ports = member_ports(client.api, policy.members, known)
        # the groups read and the products written with no sync of the groups between
        # them (its refresh would be undone by products of the groups before it); never
        # self.lock inside: the sync takes this lock under it
        with self._policy_lock:
            current = self.security_groups  # replaced whole, never changed in place
            rows = policy_rows(policy, ports, [current[n] for n in sorted(current)])
            written = client.ensure_policy(rows)
        if rows.missing:
            # allocate writes a pod's port before its record has an address: a member
            # without one is a record not written yet, or a port removed meanwhile
            return PolicyRealization(
                programmed=False, findings=rows.findings,
                message=f"no logical switch port in NB yet for {', '.join(rows.missing)}; "
                        "the other members are programmed")
        return self._installed(key, written, rows.findings)

    def _installed(self, key: str, written: int | None,
                   findings: tuple[PolicyFinding, ...]) -> PolicyRealization:
        """Programmed once the chassis have installed the flows of ``key``'s last change
        (``written``: the nb_cfg of this call's transaction; ``None``: NB held the rows
        already, the last one this provider made for it counts, or NB's current one):
        a committed transaction is not yet a flow on a chassis."""
        timeout = self.config.flows_timeout
        if written is not None:
            with self.lock:
                self._flows_target[key] = written
        if not timeout:
            return PolicyRealization(programmed=True, findings=findings)
        client = self.client
        with self.lock:
            target = self._flows_target.get(key)
        if target is None:
            target = client.flows_state().nb_cfg
        # only the call that wrote waits: a call asking again looks once (core asks again
        # a second later), so a chassis that is down does not hold the workers
        state = client.wait_installed(target, timeout if written is not None else 0.0)
        if state.installed(target):
            return PolicyRealization(programmed=True, findings=findings)
        where = ("ovn-northd has not put it in the Southbound database yet"
                 if state.sb_cfg < target else "not every chassis has installed its flows")
        return PolicyRealization(
            programmed=False, waiting=True, findings=findings,
            message=f"written to NB (nb_cfg {target}); {where} (sb_cfg {state.sb_cfg}, "
                    f"hv_cfg {state.hv_cfg})")

    # --- networks declared as objects ------------------------------------------------------

    def _merge_subnets(self) -> None:
        """The serving table: the config's subnets, the objects' over them; a subnet that
        leaves it is kept as retired (its pods' ports keep working), one that comes back
        serves again (call under ``self.lock``)."""
        merged = {**self._config_subnets, **self._object_subnets}
        for name, old in self.subnets.items():
            if name not in merged:
                self.retired[name] = old
        for name in merged:
            self.retired.pop(name, None)
        self.subnets = merged
        self._ext_dirty = True  # the routers' snat rules follow their subnets

    def _merge_groups(self, *, force: bool = False) -> None:
        """The security groups: the config's, the objects' over them, each checked on its
        own (a bad one fails only the pods naming it); written at the next use of NB when
        they changed."""
        raw: dict[str, Any] = dict(self._config_groups)
        where: dict[str, str] = {}
        for name, group in self._object_groups.items():
            raw[name] = group_body(group)
            where[name] = f"securitygroup[{name}].spec"
        groups = parse_groups(raw, config_key(self.name, "security_groups"), where)
        if force or groups != self.security_groups:
            self.security_groups = groups
            self._sg_dirty = True

    def _switches_besides(self, name: str, in_use: Collection[str] = ()) -> dict[str, str]:
        """The logical switches the other subnets use -> who uses it (``in_use``: the
        subnets whose pods' ports are in NB: a removed one among them still uses its
        switch)."""
        used = {s.switch: f"config subnet {n}" for n, s in self._config_subnets.items()
                if n != name and n not in self._object_subnets}
        used.update({s.switch: f"Subnet {n}" for n, s in self._object_subnets.items()
                     if n != name})
        used.update({s.switch: f"Subnet {n} (removed; its pods' ports are still there)"
                     for n, s in self.retired.items() if n != name and n in in_use})
        return used

    def _subnets_in_use(self) -> set[str]:
        """The subnets podnet's pod ports in NB name (a read of the replica)."""
        if not self.remote:
            return set()
        return {ext.get(EXT_SUBNET, "") for lsp in self.client.ports()
                if (ext := lsp.external_ids).get(OWNER) == OWNER_VALUE and KEY in ext
                and ROLE not in ext}

    def _check_subnet(self, info: SubnetInfo, switches: Mapping[str, str] | None = None,
                      *, in_use: Collection[str] | None = None) -> SubnetParameters:
        """A Subnet object's OVN parameters checked against the config and the other
        subnets (call under ``self.lock``). ``in_use``: the subnets with ports in NB,
        when the caller may read NB (``podnet_subnet_parameters``): a removed Subnet
        without ports no longer holds its switch or its name's."""
        reserved = {r.external.switch: f"router {r.name}'s external switch"
                    for r in self.routers.values() if r.external is not None}
        params = check_parameters(
            info, routers=self.routers.keys(), provider_mtu=self.config.mtu,
            switches=self._switches_besides(info.name, in_use or ()) if switches is None
            else switches, reserved=reserved)
        current = self.subnets.get(info.name) or self.retired.get(info.name)
        if (current is not None and current.switch != params.logical_switch
                and info.name not in self.subnets and in_use is not None
                and info.name not in in_use):
            # removed, and nothing of it is left in NB: a new Subnet of its name
            self.retired.pop(info.name, None)
            current = None
        if current is not None and current.switch != params.logical_switch:
            raise InvalidRequest("spec.parameters.logicalSwitch", f"Subnet {info.name}: "
                                 f"switch {params.logical_switch} differs from switch "
                                 f"{current.switch}, where the {current.describe()} has its "
                                 "pods' ports; a Subnet's switch does not change (make "
                                 "another Subnet)")
        return params

    def _object_subnet(self, info: SubnetInfo) -> Subnet:
        """The IPAM's view of a Subnet object (the one kept when ``info`` is the view
        ``podnet_networks_changed`` gave; made afresh when core's is newer)."""
        if self._object_infos.get(info.name) == info:
            return self._object_subnets[info.name]
        params = self._check_subnet(info)
        config = self._config_subnets.get(info.name)
        made = subnet_from_info(info, params, list(self.pools.values()),
                                config.ip_pools if config is not None else None)
        # route and verify find it until podnet_networks_changed brings the same view
        self._fresh[info.name] = made
        return made

    def _apply_networks(self, networks: Networks) -> None:
        """Serve what ``networks`` declares (call under ``self.lock``). A Subnet whose
        parameters fail here (a switch another Subnet took meanwhile) is left out and
        logged: core's next ``podnet_subnet_parameters`` marks it not Ready."""
        self.pools = {p.name: p for p in networks.pools}
        subnets: dict[str, Subnet] = {}
        infos: dict[str, SubnetInfo] = {}
        used = {s.switch: f"config subnet {n}" for n, s in self._config_subnets.items()
                if networks.subnet(n) is None}
        # the ones serving already first: a newcomer never takes a serving one's switch
        ordered = sorted(networks.subnets, key=lambda i: i.name not in self._object_subnets)
        for info in ordered:
            try:
                params = self._check_subnet(info, used)
                config = self._config_subnets.get(info.name)
                subnet = subnet_from_info(info, params, networks.pools,
                                          config.ip_pools if config is not None else None)
            except (InvalidRequest, ValueError) as exc:
                log.warning("provider %s: %s is not served: %s", self.name,
                            info.describe(), exc)
                continue
            used[subnet.switch] = f"Subnet {info.name}"
            subnets[info.name] = subnet
            infos[info.name] = info
        self._object_subnets = subnets
        self._object_infos = infos
        self._fresh = {}
        self._merge_subnets()
        self._object_groups = {g.name: g for g in networks.security_groups}
        self._merge_groups()

    def _recover_subnet(self, pn: PodNetwork) -> Subnet | None:
        """The subnet of a record that names one neither served nor retired (its Subnet
        left the set, or turned not Ready, before this controller started): what the
        record and its port in NB say. The switch holding the port, the router linked to
        that switch, the record's own block and gateway; a distributed gateway when the
        port is in a node's group. Kept as retired; ``None`` when NB has no such port."""
        st = pn.status
        if not st.subnet or not (st.ip or st.ipv6) or not self.remote:
            return None
        client = self.client
        name = st.interface or f"{pn.metadata.namespace}/{pn.metadata.name}"
        with client.reading() as tables:
            lsp = next((p for p in tables["Logical_Switch_Port"].rows.values()
                        if p.name == name), None)
            if lsp is None:
                return None
            switch = next((ls for ls in tables["Logical_Switch"].rows.values()
                           if any(p.uuid == lsp.uuid for p in ls.ports)), None)
            if switch is None:
                return None
            router = None
            for port in switch.ports:
                lrp = dict(port.options).get("router-port") if port.type == "router" else None
                if lrp and port.external_ids.get(ROLE) == ROLE_ROUTER_LINK:
                    router = next((lr.name for lr in tables["Logical_Router"].rows.values()
                                   if any(p.name == lrp for p in lr.ports)), None)
            groups = lsp.external_ids.get(GROUPS, "").split(",")
        nets = {}
        for ip, prefix in ((st.ip, st.prefix_length), (st.ipv6, st.ipv6_prefix_length)):
            if ip:
                addr = ipaddress.ip_address(ip)
                bits = prefix if prefix is not None else addr.max_prefixlen
                nets[addr.version] = ipaddress.ip_network(f"{ip}/{bits}", strict=False)
        v4, v6 = nets.get(4), nets.get(6)
        gateway6 = st.ipv6_gateway or (st.gateway if v4 is None else None)
        subnet = Subnet(
            name=st.subnet, v4=v4 if isinstance(v4, ipaddress.IPv4Network) else None,
            v6=v6 if isinstance(v6, ipaddress.IPv6Network) else None,
            gateway=st.gateway if v4 is not None else None, gateway6=gateway6,
            gateway_type="distributed" if any(g.startswith("node_") for g in groups)
            else "centralized", router=router if router in self.routers else None,
            mtu=st.mtu, switch=switch.name, recovered=True)
        log.warning("provider %s: record %s names subnet %s, which is not served; its "
                    "port is kept as NB has it (switch %s)", self.name, pn.key, st.subnet,
                    switch.name)
        with self.lock:
            self.retired.setdefault(st.subnet, subnet)
            return self.retired[st.subnet]
