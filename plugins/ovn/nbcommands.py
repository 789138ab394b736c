"""The provider's Northbound commands: what one pod's port, a router's infrastructure,
its external networks and the security groups' port groups and ACLs must look like,
each an idempotent ovsdbapp command that reads the rows it finds and writes only what
differs. The client (``podnet.plugins.ovn.nb``) batches them into transactions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ovs.db import data as ovs_data
from ovs.db import types as ovs_types
from ovsdbapp.backend.ovs_idl import command as ovs_command

from podnet.plugins.ovn.rows import (
    BINDING_OPTIONS,
    GROUPS,
    KEY,
    OWNER,
    OWNER_VALUE,
    ROLE,
    ROLE_EXTERNAL,
    ROLE_ROUTER_LINK,
    ROLE_STATEFUL,
    ROLE_VIP,
    ROUTER,
    STATEFUL_ACLS,
    VIPS,
    ExternalNet,
    RouterLink,
    binding_options,
    settled_datum,
    vip_port_name,
)
from podnet.plugins.ovn.secgroups import ACL_GROUP, Acl


class PortSpec:
    """What one logical switch port should look like, and what goes with it."""

    __slots__ = (
        "addresses",
        "external_ids",
        "name",
        "nats",
        "options",
        "policy_groups",
        "port_groups",
        "port_security",
        "router",
        "routes",
        "switch",
        "vips",
    )

    def __init__(self, name: str, switch: str, addresses: Sequence[str],
                 external_ids: Mapping[str, str], port_security: Sequence[str] = (),
                 port_groups: Sequence[str] | None = None, router: str | None = None,
                 nats: Sequence[tuple[str, str, str]] = (),
                 routes: Sequence[tuple[str, str]] = (),
                 vips: Sequence[str] | None = None,
                 policy_groups: Sequence[str] = (),
                 options: Mapping[str, str] | None = None) -> None:
        self.name = name
        self.switch = switch
        self.addresses = list(addresses)
        self.external_ids = dict(external_ids)
        self.port_security = list(port_security)
        #: None: leave memberships alone (allocate); a list: exactly these podnet groups
        self.port_groups = None if port_groups is None else list(port_groups)
        self.router = router
        #: (type, external_ip, logical_ip)
        self.nats = list(nats)
        #: (ip_prefix, nexthop), source-IP policy
        self.routes = list(routes)
        #: None: leave the VIPs' virtual ports alone; a list: exactly these, one
        #: ``type=virtual`` port each on the switch, this port their virtual parent
        self.vips = None if vips is None else list(vips)
        #: the port groups of the NetworkPolicies that select the pod, joined when they
        #: exist (never left here: the policy's own writes keep its membership), so a new
        #: port is restricted from its first packet, not once the policy's call comes
        self.policy_groups = list(policy_groups)
        #: the port's binding options podnet owns (:data:`BINDING_OPTIONS`), exactly these;
        #: other options of the port are left alone
        self.options = dict(options or {})


def _find_by_key(table: Any, key: str) -> list[Any]:
    return [row for row in table.rows.values() if row.external_ids.get(KEY) == key]


class EnsurePort(ovs_command.BaseCommand):
    """Create or correct a port, its switch, its group memberships, its NAT and routes."""

    def __init__(self, api: Any, spec: PortSpec) -> None:
        super().__init__(api)
        self.spec = spec

    def run_idl(self, txn: Any) -> None:
        s = self.spec
        api = self.api
        tables = api.tables
        key = s.external_ids[KEY]
        ls = by_name(tables["Logical_Switch"], s.switch)
        if ls is None:
            raise RuntimeError(f"logical switch {s.switch} is missing")
        lsp = api.lookup("Logical_Switch_Port", s.name, default=None)
        new = lsp is None
        if lsp is None:
            lsp = txn.insert(tables["Logical_Switch_Port"])
            lsp.name = s.name
            lsp.addresses = s.addresses
            lsp.port_security = s.port_security
            ls.addvalue("ports", lsp)
        else:
            # an existing port is on a switch (a port no switch holds is gone); moving it
            # to another subnet's switch is not a thing a record does
            if list(lsp.addresses) != s.addresses:
                lsp.addresses = s.addresses
            if list(lsp.port_security) != s.port_security:
                lsp.port_security = s.port_security
        if new and s.options:
            lsp.options = s.options
        elif not new and binding_options(lsp) != s.options:
            lsp.options = {**{k: v for k, v in dict(lsp.options).items()
                              if k not in BINDING_OPTIONS}, **s.options}
        if s.port_groups is not None:
            # memberships podnet gave the port are remembered on it: no scan of the groups
            before = set() if new else set(
                filter(None, lsp.external_ids.get(GROUPS, "").split(",")))
            wanted = set(s.port_groups)
            for name in sorted(before - wanted):
                pg = api.lookup("Port_Group", name, default=None)
                if pg is not None:
                    pg.delvalue("ports", lsp)
            for name in sorted(wanted):
                pg = api.lookup("Port_Group", name, default=None)
                if pg is None:
                    raise RuntimeError(f"port group {name} is missing")
                pg.addvalue("ports", lsp)  # a no-op for a member: converges after drift
            s.external_ids[GROUPS] = ",".join(sorted(wanted))
        elif not new and GROUPS in lsp.external_ids:
            s.external_ids[GROUPS] = lsp.external_ids[GROUPS]
        for name in sorted(set(s.policy_groups)):
            pg = api.lookup("Port_Group", name, default=None)
            if pg is not None:  # a policy not programmed yet adds the port itself
                pg.addvalue("ports", lsp)
        if s.vips is not None:
            before_vips = set() if new else set(
                filter(None, lsp.external_ids.get(VIPS, "").split(",")))
            self._virtual_ports(txn, ls, key, before_vips)
            if s.vips:
                s.external_ids[VIPS] = ",".join(s.vips)
            else:
                s.external_ids.pop(VIPS, None)
        elif not new and VIPS in lsp.external_ids:
            s.external_ids[VIPS] = lsp.external_ids[VIPS]
        if new or dict(lsp.external_ids) != s.external_ids:
            lsp.external_ids = s.external_ids
        if s.router is not None or s.nats or s.routes:
            self._nat_and_routes(txn, key)

    def _virtual_ports(self, txn: Any, ls: Any, key: str, before: set[str]) -> None:
        """One ``type=virtual`` port per VIP, ``options:virtual-ip`` the VIP and
        ``options:virtual-parents`` this port (the one that may claim it); the ports of
        VIPs the pod no longer lists are removed."""
        s = self.spec
        api = self.api
        assert s.vips is not None
        marks = {KEY: key, OWNER: OWNER_VALUE, ROLE: ROLE_VIP}
        for ip in sorted(before - set(s.vips)):
            vport = api.lookup("Logical_Switch_Port", vip_port_name(s.switch, ip), default=None)
            if vport is not None and vport.external_ids.get(KEY) == key:
                _remove_port(api, txn, vport)
        for ip in s.vips:
            name = vip_port_name(s.switch, ip)
            options = {"virtual-ip": ip, "virtual-parents": s.name}
            vport = api.lookup("Logical_Switch_Port", name, default=None)
            if vport is None:
                vport = txn.insert(api.tables["Logical_Switch_Port"])
                vport.name = name
                vport.type = "virtual"
                vport.options = options
                vport.external_ids = marks
                ls.addvalue("ports", vport)
                continue
            if vport.external_ids.get(KEY) != key:
                # the IPAM holds every VIP for one record: someone else's port is in the way
                raise RuntimeError(f"virtual port {name} belongs to "
                                   f"{vport.external_ids.get(KEY) or 'another owner'}")
            if vport.type != "virtual":
                vport.type = "virtual"
            if any(vport.options.get(k) != v for k, v in options.items()):
                vport.options = {**vport.options, **options}
            if dict(vport.external_ids) != marks:
                vport.external_ids = marks

    def _nat_and_routes(self, txn: Any, key: str) -> None:
        s = self.spec
        api = self.api
        tables = api.tables
        lr = by_name(tables["Logical_Router"], s.router) if s.router else None
        if lr is None and s.router:
            raise RuntimeError(f"logical router {s.router} is missing")
        have_nat = {(n.type, n.external_ip, n.logical_ip): n
                    for n in _find_by_key(tables["NAT"], key)}
        for triple, row in have_nat.items():
            if triple not in s.nats:
                for router in tables["Logical_Router"].rows.values():
                    if any(n.uuid == row.uuid for n in router.nat):
                        router.delvalue("nat", row)
                row.delete()
        for kind, external, logical in s.nats:
            if (kind, external, logical) in have_nat or lr is None:
                continue
            nat = txn.insert(tables["NAT"])
            nat.type = kind
            nat.external_ip = external
            nat.logical_ip = logical
            nat.external_ids = {KEY: key, OWNER: OWNER_VALUE}
            lr.addvalue("nat", nat)
        have_route = {(r.ip_prefix, r.nexthop): r
                      for r in _find_by_key(tables["Logical_Router_Static_Route"], key)}
        for pair, row in have_route.items():
            if pair not in s.routes:
                for router in tables["Logical_Router"].rows.values():
                    if any(r.uuid == row.uuid for r in router.static_routes):
                        router.delvalue("static_routes", row)
                row.delete()
        for prefix, nexthop in s.routes:
            if (prefix, nexthop) in have_route or lr is None:
                continue
            route = txn.insert(tables["Logical_Router_Static_Route"])
            route.ip_prefix = prefix
            route.nexthop = nexthop
            route.policy = "src-ip"
            route.external_ids = {KEY: key, OWNER: OWNER_VALUE}
            lr.addvalue("static_routes", route)


def holds(row: Any, column: str, member: Any) -> bool:
    """Whether the set of row references ``column`` of ``row`` holds ``member``, looked up
    in the row's datum: reading the column builds a sorted list of every row it names (a
    group of 1,000 ports: 1,000 rows sorted per check, quadratic over a burst)."""
    datum = settled_datum(row, column)
    if datum is None:
        return any(r.uuid == member.uuid for r in getattr(row, column))
    return ovs_data.Atom(ovs_types.UuidType, member.uuid) in datum.values


def _member_uuids(row: Any, column: str) -> list[Any]:
    """The uuids a set of row references holds, from its datum when it is settled."""
    datum = settled_datum(row, column)
    if datum is None:
        return [r.uuid for r in getattr(row, column)]
    return [atom.value for atom in datum.values]


def by_name(table: Any, name: str | None) -> Any:
    for row in table.rows.values():
        if row.name == name:
            return row
    return None


def named(table: Any, name: str) -> Any:
    """The row of ``table`` named ``name`` (None: none), from the IDL's index of the
    table's names: ovsdbapp's ``lookup`` first parses the name as a UUID (an exception
    raised and caught per name) and raises another when nothing matches, five times the
    cost of the index's own search."""
    rows = table.rows
    index = rows.indexes.get("name")
    if index is None:
        return by_name(table, name)
    entry = rows.IndexEntry(name=name)
    return next(index.irange(entry, entry), None)


def _switch_of(api: Any, txn: Any, lsp: Any) -> Any:
    """The switch holding ``lsp`` (None: none): found in each switch's datum as the
    server last sent it (what this transaction takes off a switch is other ports'), or
    among the ports this transaction adds. Reading a switch's ports makes a row of every
    port (1,000 deletes sharing a transaction: 3 s instead of 0.6 s); an index of every
    switch's ports, made once per transaction, cost each of a burst's transactions a pass
    over every port of every switch."""
    atom = ovs_data.Atom(ovs_types.UuidType, lsp.uuid)
    for ls in api.tables["Logical_Switch"].rows.values():
        data = ls._data
        if data is not None and "ports" in data and atom in data["ports"].values:
            return ls
        added = (ls._mutations or {}).get("_inserts", {}).get("ports")
        if added and any(getattr(r, "uuid", r) == lsp.uuid for r in added):
            return ls
    return None


def _remove_port(api: Any, txn: Any, lsp: Any) -> None:
    """Take a port off the switch that holds it (whichever: a port moved behind podnet's
    back is found too) and delete it; port groups hold ports weakly: the database drops
    those references itself."""
    switch = _switch_of(api, txn, lsp)
    if switch is not None:
        switch.delvalue("ports", lsp)
    lsp.delete()


class EnsureInfra(ovs_command.BaseCommand):
    """Create the switches, routers and port groups ports refer to, when missing, give
    the ``stateful`` switches (new or old) their ``STATEFUL_ACLS`` where they lack them,
    and connect each subnet's switch to its router (create or correct the pair of
    ports)."""

    def __init__(self, api: Any, switches: Sequence[str], routers: Sequence[str],
                 port_groups: Sequence[str], links: Sequence[RouterLink] = (),
                 stateful: Sequence[str] = ()) -> None:
        super().__init__(api)
        self.switches = list(switches)
        self.routers = list(routers)
        self.port_groups = list(port_groups)
        self.links = list(links)
        self.stateful = list(stateful)

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        made: dict[tuple[str, str], Any] = {}
        for table, names in (("Logical_Switch", self.switches),
                             ("Logical_Router", self.routers),
                             ("Port_Group", self.port_groups)):
            for name in names:
                if by_name(tables[table], name) is None:
                    row = txn.insert(tables[table])
                    row.name = name
                    row.external_ids = {OWNER: OWNER_VALUE}
                    made[(table, name)] = row
        for name in self.stateful:
            new = made.get(("Logical_Switch", name))
            ls = new or by_name(tables["Logical_Switch"], name)
            if ls is None:
                raise RuntimeError(f"cannot make switch {name} stateful: it is missing")
            have = _stateful_keys(ls) if new is None else set()  # a new row has no acls
            for direction, priority, match, action in STATEFUL_ACLS:
                if (direction, priority, match, action) in have:
                    continue
                acl = txn.insert(tables["ACL"])
                acl.direction = direction
                acl.priority = priority
                acl.match = match
                acl.action = action
                acl.external_ids = {OWNER: OWNER_VALUE, ROLE: ROLE_STATEFUL}
                ls.addvalue("acls", acl)
        for link in self.links:
            lr = made.get(("Logical_Router", link.router)) or by_name(
                tables["Logical_Router"], link.router)
            ls = made.get(("Logical_Switch", link.switch)) or by_name(
                tables["Logical_Switch"], link.switch)
            if lr is None or ls is None:
                raise RuntimeError(f"cannot connect switch {link.switch} to router "
                                   f"{link.router}: one of them is missing")
            self._link(txn, link, lr, ls)

    def _link(self, txn: Any, link: RouterLink, lr: Any, ls: Any) -> None:
        tables = self.api.tables
        marks = {OWNER: OWNER_VALUE, ROLE: ROLE_ROUTER_LINK}
        lrp = by_name(tables["Logical_Router_Port"], link.lrp)
        if lrp is None:
            lrp = txn.insert(tables["Logical_Router_Port"])
            lrp.name = link.lrp
            lrp.mac = link.mac
            lrp.networks = link.networks
            lrp.external_ids = marks
            lr.addvalue("ports", lrp)
        else:
            # a router port is held by a router (it goes with it): it is on one already
            if lrp.mac != link.mac:
                lrp.mac = link.mac
            if sorted(lrp.networks) != sorted(link.networks):
                lrp.networks = link.networks  # set, never add: a changed gateway or prefix
            if any(lrp.external_ids.get(k) != v for k, v in marks.items()):
                lrp.external_ids = {**lrp.external_ids, **marks}
        lsp = self.api.lookup("Logical_Switch_Port", link.lsp, default=None)
        options = {"router-port": link.lrp}
        if lsp is None:
            lsp = txn.insert(tables["Logical_Switch_Port"])
            lsp.name = link.lsp
            lsp.type = "router"
            lsp.addresses = ["router"]
            lsp.options = options
            lsp.external_ids = marks
            ls.addvalue("ports", lsp)
        else:
            if lsp.type != "router":
                lsp.type = "router"
            if list(lsp.addresses) != ["router"]:
                lsp.addresses = ["router"]
            if lsp.options.get("router-port") != link.lrp:
                lsp.options = {**lsp.options, **options}
            if any(lsp.external_ids.get(k) != v for k, v in marks.items()):
                lsp.external_ids = {**lsp.external_ids, **marks}


def _stateful_keys(ls: Any) -> set[tuple[str, int, str, str]]:
    return {(a.direction, a.priority, a.match, a.action) for a in ls.acls
            if a.external_ids.get(OWNER) == OWNER_VALUE
            and a.external_ids.get(ROLE) == ROLE_STATEFUL}


def stateful_ok(api: Any, switch: str) -> bool:
    """Whether the replica's switch ``switch`` exists with all its ``STATEFUL_ACLS``."""
    ls = by_name(api.tables["Logical_Switch"], switch)
    return ls is not None and set(STATEFUL_ACLS) <= _stateful_keys(ls)


def link_ok(api: Any, link: RouterLink) -> bool:
    """Whether the replica already has ``link`` as it should be (no write needed)."""
    tables = api.tables
    lrp = by_name(tables["Logical_Router_Port"], link.lrp)
    if lrp is None or lrp.mac != link.mac or sorted(lrp.networks) != sorted(link.networks):
        return False
    lsp = api.lookup("Logical_Switch_Port", link.lsp, default=None)
    return (lsp is not None and lsp.type == "router" and list(lsp.addresses) == ["router"]
            and lsp.options.get("router-port") == link.lrp
            and lrp.external_ids.get(ROLE) == ROLE_ROUTER_LINK
            and lsp.external_ids.get(ROLE) == ROLE_ROUTER_LINK
            and lrp.external_ids.get(OWNER) == OWNER_VALUE
            and lsp.external_ids.get(OWNER) == OWNER_VALUE)


def _external_marks(ext: ExternalNet) -> dict[str, str]:
    return {OWNER: OWNER_VALUE, ROLE: ROLE_EXTERNAL, ROUTER: ext.router}


def external_ok(api: Any, ext: ExternalNet) -> bool:
    """Whether the replica has ``ext``'s switch marks, localnet port and gateway chassis
    as they should be (its router link is :func:`link_ok`'s)."""
    tables = api.tables
    marks = _external_marks(ext)
    ls = by_name(tables["Logical_Switch"], ext.switch)
    lrp = by_name(tables["Logical_Router_Port"], ext.link.lrp)
    ln = api.lookup("Logical_Switch_Port", ext.localnet, default=None)
    if ls is None or lrp is None or ln is None:
        return False
    if any(ls.external_ids.get(k) != v for k, v in marks.items()):
        return False
    if (ln.type != "localnet" or list(ln.addresses) != ["unknown"]
            or ln.options.get("network_name") != ext.network_name
            or not any(p.uuid == ln.uuid for p in ls.ports)):
        return False
    have = {gc.name: (gc.chassis_name, int(gc.priority)) for gc in lrp.gateway_chassis}
    if have != ext.gateway_chassis():
        return False
    lr = by_name(tables["Logical_Router"], ext.router)
    if lr is None:
        return False
    nats, routes = _router_rows(lr, ext.router)
    return bool(set(nats) == {("snat", e, c) for e, c in ext.snat}
                and set(routes) == {ext.default_route()})


def _router_rows(lr: Any, router: str) -> tuple[dict[tuple[str, str, str], Any],
                                                dict[tuple[str, str], Any]]:
    """The router-wide NAT rules and routes podnet wrote for ``router``'s external
    network (not the pods': those carry a record's key)."""
    def ours(row: Any) -> bool:
        ids: dict[str, str] = dict(row.external_ids)
        return (ids.get(OWNER) == OWNER_VALUE and ids.get(ROLE) == ROLE_EXTERNAL
                and ids.get(ROUTER) == router)

    nats = {(n.type, n.external_ip, n.logical_ip): n for n in lr.nat if ours(n)}
    routes = {(r.ip_prefix, r.nexthop): r for r in lr.static_routes if ours(r)}
    return nats, routes


class EnsureExternal(ovs_command.BaseCommand):
    """Mark a router's external switch, and create or correct its localnet port and its
    gateway port's ``Gateway_Chassis`` rows (set, never added to: a chassis removed from
    the config loses its row). The switch and the router link exist already
    (:meth:`NbClient.ensure_infra`)."""

    def __init__(self, api: Any, ext: ExternalNet) -> None:
        super().__init__(api)
        self.ext = ext

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        ext = self.ext
        marks = _external_marks(ext)
        ls = by_name(tables["Logical_Switch"], ext.switch)
        lrp = by_name(tables["Logical_Router_Port"], ext.link.lrp)
        if ls is None or lrp is None:
            raise RuntimeError(f"external switch {ext.switch} or router port "
                               f"{ext.link.lrp} is missing")
        if any(ls.external_ids.get(k) != v for k, v in marks.items()):
            ls.external_ids = {**ls.external_ids, **marks}
        ln = self.api.lookup("Logical_Switch_Port", ext.localnet, default=None)
        if ln is None:
            ln = txn.insert(tables["Logical_Switch_Port"])
            ln.name = ext.localnet
            ln.external_ids = marks
            ln.type = "localnet"
            ln.addresses = ["unknown"]  # it stands for every host on the physical network
            ln.options = {"network_name": ext.network_name}
            ls.addvalue("ports", ln)
        else:
            if ln.type != "localnet":
                ln.type = "localnet"
            if list(ln.addresses) != ["unknown"]:
                ln.addresses = ["unknown"]
            if ln.options.get("network_name") != ext.network_name:
                ln.options = {**ln.options, "network_name": ext.network_name}
            if not any(p.uuid == ln.uuid for p in ls.ports):
                ls.addvalue("ports", ln)
        self._router_rows(txn, marks)
        want = ext.gateway_chassis()
        for gc in list(lrp.gateway_chassis):
            if want.get(gc.name) != (gc.chassis_name, int(gc.priority)):
                lrp.delvalue("gateway_chassis", gc)  # not root: the database drops it
            else:
                want.pop(gc.name)
        for name, (chassis, priority) in want.items():
            gc = txn.insert(tables["Gateway_Chassis"])
            gc.name = name
            gc.chassis_name = chassis
            gc.priority = priority
            gc.external_ids = {OWNER: OWNER_VALUE}
            lrp.addvalue("gateway_chassis", gc)

    def _router_rows(self, txn: Any, marks: dict[str, str]) -> None:
        """The default route via the external gateway and the subnets' snat rules, set
        (a subnet gone from the router loses its rule)."""
        tables = self.api.tables
        ext = self.ext
        lr = by_name(tables["Logical_Router"], ext.router)
        nats, routes = _router_rows(lr, ext.router)
        want_nat = {("snat", e, c) for e, c in ext.snat}
        for triple, row in nats.items():
            if triple not in want_nat:
                lr.delvalue("nat", row)
        for kind, external, logical in sorted(want_nat - set(nats)):
            nat = txn.insert(tables["NAT"])
            nat.type = kind
            nat.external_ip = external
            nat.logical_ip = logical
            nat.external_ids = marks
            lr.addvalue("nat", nat)
        want_route = ext.default_route()
        for pair, row in routes.items():
            if pair != want_route:
                lr.delvalue("static_routes", row)
        if want_route not in routes:
            route = txn.insert(tables["Logical_Router_Static_Route"])
            route.ip_prefix, route.nexthop = want_route
            route.external_ids = marks
            lr.addvalue("static_routes", route)


class DeleteExternals(ovs_command.BaseCommand):
    """Delete podnet's external networks of routers not in ``keep``: the switch (its
    ports go with it) and the router's port on it (its gateway chassis go with it)."""

    def __init__(self, api: Any, keep: Sequence[str]) -> None:
        super().__init__(api)
        self.keep = set(keep)

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        for ls in list(tables["Logical_Switch"].rows.values()):
            ext = ls.external_ids
            if ext.get(OWNER) != OWNER_VALUE or ext.get(ROLE) != ROLE_EXTERNAL:
                continue
            router = ext.get(ROUTER, "")
            if router in self.keep:
                continue
            lrp_name = RouterLink(router, ls.name, []).lrp
            for lr in tables["Logical_Router"].rows.values():
                for lrp in list(lr.ports):
                    if lrp.name == lrp_name:
                        lr.delvalue("ports", lrp)
                nats, routes = _router_rows(lr, router)
                for row in nats.values():
                    lr.delvalue("nat", row)
                for row in routes.values():
                    lr.delvalue("static_routes", row)
            ls.delete()


def external_switches(api: Any) -> dict[str, str]:
    """podnet's external switches in the replica: router -> switch."""
    return {ls.external_ids.get(ROUTER, ""): ls.name
            for ls in api.tables["Logical_Switch"].rows.values()
            if ls.external_ids.get(OWNER) == OWNER_VALUE
            and ls.external_ids.get(ROLE) == ROLE_EXTERNAL}


def _acl_key(row: Any) -> tuple[str, int, str, str]:
    return (row.direction, int(row.priority), row.match, row.action)


def acls_differ(api: Any, group: str, acls: Sequence[Acl]) -> bool:
    """Whether port group ``group``'s podnet ACLs are other than ``acls`` (or it is
    missing): ACLs others put on it do not count."""
    pg = api.lookup("Port_Group", group, default=None)
    if pg is None:
        return True
    have = sorted(_acl_key(a) for a in pg.acls if a.external_ids.get(OWNER) == OWNER_VALUE)
    return have != sorted((a.direction, a.priority, a.match, a.action) for a in acls)


class EnsureAcls(ovs_command.BaseCommand):
    """Make each port group's podnet ACLs exactly the ones given (creating the group when
    missing): ACLs already there stay, duplicates and ones no longer wanted go."""

    def __init__(self, api: Any, acls: Mapping[str, Sequence[Acl]]) -> None:
        super().__init__(api)
        self.acls = {group: list(rows) for group, rows in acls.items()}

    def run_idl(self, txn: Any) -> None:
        tables = self.api.tables
        for group, wanted in self.acls.items():
            pg = self.api.lookup("Port_Group", group, default=None)
            existing: list[Any] = []
            if pg is None:
                pg = txn.insert(tables["Port_Group"])
                pg.name = group
                pg.external_ids = {OWNER: OWNER_VALUE}
            else:
                existing = list(pg.acls)
            keys = {(a.direction, a.priority, a.match, a.action) for a in wanted}
            kept: set[tuple[str, int, str, str]] = set()
            for row in existing:
                if row.external_ids.get(OWNER) != OWNER_VALUE:
                    continue  # someone else's ACL on the group: not podnet's to judge
                key = _acl_key(row)
                if key in keys and key not in kept:
                    kept.add(key)
                    continue
                pg.delvalue("acls", row)  # ACL rows are not roots: unreferenced, they go
            for a in wanted:
                key = (a.direction, a.priority, a.match, a.action)
                if key in kept:
                    continue
                kept.add(key)
                acl = txn.insert(tables["ACL"])
                acl.direction = a.direction
                acl.priority = a.priority
                acl.match = a.match
                acl.action = a.action
                acl.external_ids = {OWNER: OWNER_VALUE, ACL_GROUP: group}
                pg.addvalue("acls", acl)


class DeletePortGroups(ovs_command.BaseCommand):
    """Delete podnet's port groups of these names that have no member (their ACLs go
    with them)."""

    def __init__(self, api: Any, names: Sequence[str]) -> None:
        super().__init__(api)
        self.names = list(names)

    def run_idl(self, txn: Any) -> None:
        for name in self.names:
            pg = self.api.lookup("Port_Group", name, default=None)
            if pg is not None and not pg.ports and pg.external_ids.get(OWNER) == OWNER_VALUE:
                pg.delete()


class DeletePort(ovs_command.BaseCommand):
    """Remove a port and every NAT rule and route carrying its record's key."""

    def __init__(self, api: Any, name: str, key: str) -> None:
        super().__init__(api)
        self.name = name
        self.key = key

    def run_idl(self, txn: Any) -> None:
        api = self.api
        tables = api.tables
        lsp = api.lookup("Logical_Switch_Port", self.name, default=None)
        if lsp is not None and lsp.external_ids.get(KEY) in (self.key, None):
            # the VIPs' ports are named after the switch (a Subnet object's may differ
            # from its name)
            holder = _switch_of(api, txn, lsp)
            switch = holder.name if holder is not None else lsp.external_ids.get("subnet")
            # the VIPs' virtual ports go with the pod's port (named on it)
            for ip in filter(None, lsp.external_ids.get(VIPS, "").split(",")):
                vport = api.lookup("Logical_Switch_Port", vip_port_name(switch or "", ip),
                                   default=None)
                if vport is not None and vport.external_ids.get(KEY) == self.key:
                    _remove_port(api, txn, vport)
            _remove_port(api, txn, lsp)
        for table, column in (("NAT", "nat"), ("Logical_Router_Static_Route", "static_routes")):
            rows = _find_by_key(tables[table], self.key)
            if not rows:
                continue
            ids = {r.uuid for r in rows}
            for router in tables["Logical_Router"].rows.values():
                for ref in list(getattr(router, column)):
                    if ref.uuid in ids:
                        router.delvalue(column, ref)
            for row in rows:
                row.delete()
