"""``podnet audit``: whether the clouds agree with the records.

It asks each node-pool provider for its node inventories and compares them with the
records (read once, never written, as ``podnet status`` reads them: :mod:`podnet.app.records`),
which finds what the controller itself cannot see while it is down or misconfigured:
addresses leaked in the cloud, and records whose address the cloud lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

if TYPE_CHECKING:
    from podnet.core.cluster.port import Cluster, Obj
    from podnet.core.config import Config
    from podnet.core.models import NodeInfo, NodeNetwork, PodNetwork
    from podnet.core.plugin import Providers
from podnet.app.records import (
    EXIT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    Records,
    address_owners,
    cell,
    cluster_arguments,
    connect,
    dig,
    error_line,
    one_line_of,
    owned_addresses,
    read_records,
    show,
)

__all__ = [
    "NODE_GONE",
    "NOT_LOADED",
    "NO_NODE_POOL",
    "AuditReport",
    "add_audit_arguments",
    "audit",
    "provider_chooser",
    "run_audit",
]

NO_NODE_POOL = "not audited (no node pool)"
NOT_LOADED = "not audited (provider not loaded)"
NODE_GONE = "not audited (Node object is gone)"
#: how long a record may outlive its pod before audit calls it a finding (the controller
#: releases it within seconds)
DEFAULT_GRACE = 300.0



def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    cluster_arguments(parser)
    parser.add_argument("--config", required=True, help="the controller's config file (YAML)")
    parser.add_argument("--provider", action="append", default=[],
                        help="enable this built-in provider (repeatable; default: all installed)")
    parser.add_argument("--agent-namespace", default="kube-system",
                        help="podnet's namespace, where the node agents report what their "
                             "ENI dataplane has in place (default %(default)s)")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                        help="seconds a record may outlive its pod before it is a finding "
                        f"(default {DEFAULT_GRACE:g})")



@attrs.frozen
class Unowned:
    """An address the cloud has on a node that no record owns and no pool holds: a leak."""

    node: str
    provider: str
    ip: str
    interface: str


@attrs.frozen
class Unrecorded:
    """An address on a machine no Node and no NodeNetwork names: what podnet made for a
    node whose record was let go before another named its pool, then the Node deleted.
    Nothing will give it back (the controller only looks at machines a record names)."""

    machine: str
    provider: str
    ip: str
    interface: str


@attrs.frozen
class Lost:
    """A record whose address the cloud no longer has anywhere the audit looked."""

    pod_network: str
    node: str
    ip: str


@attrs.frozen
class Misplaced:
    """A record whose address the cloud has on another node than the record's."""

    pod_network: str
    node: str
    ip: str
    cloud_node: str
    interface: str


@attrs.frozen
class Duplicate:
    """One address recorded by two or more PodNetworks: two pods would share it.
    ``edited``: those whose seal says podnet did not give them the addresses they name (a
    hand edit); a record an older podnet wrote has no seal and is never listed there."""

    provider: str
    ip: str
    pod_networks: tuple[str, ...]
    edited: tuple[str, ...] = ()


@attrs.frozen
class Gone:
    """An owner that is gone: a record whose pod no longer exists (past the grace)."""

    pod_network: str
    node: str | None
    ip: str | None
    reason: str


@attrs.frozen
class WrongEni:
    """A pod address whose rule on its node looks up another table than the one of the
    ENI its record (and the node's NodeNetwork) says holds the address: the pod's packets
    leave through an ENI that does not have it, and the VPC drops them."""

    pod_network: str
    node: str
    ip: str
    #: the ENI that holds the address, and the ENI (or ``table <n>``) its rule points at
    eni: str
    rule_eni: str


@attrs.frozen
class AuditError:
    """A node the audit could not judge: its inventory call failed, or its record is bad."""

    node: str | None
    provider: str | None
    error: str


@attrs.frozen
class Skipped:
    provider: str
    reason: str
    nodes: tuple[str, ...]


@attrs.frozen
class StillPlugged:
    """An interface a node's agent reports for a record that no longer exists: the
    record's address went back (to the pool, to another pod) while the interface still
    holds it (the release handshake broken: GOALS.md R8)."""

    pod_network: str
    node: str
    #: who wrote the report (``<host id>/<instance>``)
    holder: str


@attrs.frozen
class AuditReport:
    unowned: tuple[Unowned, ...] = ()
    unrecorded: tuple[Unrecorded, ...] = ()
    lost: tuple[Lost, ...] = ()
    misplaced: tuple[Misplaced, ...] = ()
    errors: tuple[AuditError, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    duplicates: tuple[Duplicate, ...] = ()
    gone: tuple[Gone, ...] = ()
    wrong_eni: tuple[WrongEni, ...] = ()
    still_plugged: tuple[StillPlugged, ...] = ()

    @property
    def clean(self) -> bool:
        return not (self.unowned or self.unrecorded or self.lost or self.misplaced
                    or self.errors or self.duplicates or self.gone or self.wrong_eni
                    or self.still_plugged)

    def as_json(self) -> dict[str, list[dict[str, Any]]]:
        return {
            name: [attrs.asdict(row, recurse=False, value_serializer=_json_value)
                   for row in getattr(self, name)]
            for name in ("unowned", "unrecorded", "lost", "misplaced", "duplicates", "gone",
                         "wrong_eni", "still_plugged", "errors", "skipped")
        }


def _json_value(_inst: Any, _field: Any, value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def provider_chooser(config: Config, providers: Providers) -> Callable[[NodeInfo], str | None]:
    """Which provider serves a node, as ``podnet run`` decides it: the config's
    ``nodeProviders`` first, then the plugins' claims, then ``defaultProvider``."""

    def choose(node: NodeInfo) -> str | None:
        for rule in config.node_providers:
            if rule.selector.matches(node.labels):
                return rule.provider
        chosen: object = providers.broadcast("podnet_select_provider")(node=node)
        if chosen is not None and chosen in providers:
            return str(chosen)
        return config.default_provider

    return choose


def audit(records: Records, nodes: Mapping[str, Obj], providers: Providers, *,
          choose: Callable[[NodeInfo], str | None] | None = None,
          pods: Mapping[str, Obj] | None = None, now: datetime | None = None,
          grace: float = DEFAULT_GRACE, configured: Sequence[str] = (),
          record_exists: Callable[[str], bool] | None = None) -> AuditReport:
    """Compare the records with each node-pool provider's inventory of each node, and
    with what the node agents report they hold.

    Addresses are compared per provider: two providers may well reuse one private range.
    With ``choose`` (which provider serves a node), nodes without a NodeNetwork that a
    node-pool provider serves are asked about too: their instance may be unknown to the
    cloud, or hold addresses nobody owns. With ``pods`` (``namespace/name`` -> Pod), a
    record whose pod is gone for longer than ``grace`` seconds is a finding.

    Each node-pool provider that is ``configured`` or serves an audited node is asked
    for the machines no Node and no NodeNetwork names (``podnet_unknown_machines``):
    every address on one of them is a finding (``unrecorded``), since the controller
    never looks at such a machine.

    An interface an agent reports (``records.agents``) for a record that does not exist
    is a finding (``still_plugged``), once ``record_exists`` (``namespace/name`` -> whether
    the API server has it now) confirms it is gone: the reports are read after the
    records, and a record made meanwhile is no finding. A report edited by hand is an
    error.
    """
    from podnet.core.objects import node_info
    from podnet.hookspecs.types import CloudInterface, Inventory, NodeContext

    errors: list[AuditError] = []
    skipped: dict[tuple[str, str], list[str]] = {}
    #: (provider, node) -> address -> the interface the cloud has it on
    clouds: dict[tuple[str, str], dict[str, CloudInterface]] = {}
    audited: dict[tuple[str, str], NodeNetwork | None] = {}
    to_ask: list[tuple[str, str, NodeNetwork | None]] = []
    for nn in records.node_networks:
        name, provider = nn.metadata.name, nn.spec.provider
        reason = (NOT_LOADED if provider not in providers
                  else NO_NODE_POOL if not providers[provider].uses_node_pool
                  else NODE_GONE if name not in nodes else None)
        if reason is not None:
            skipped.setdefault((provider, reason), []).append(name)
            continue
        to_ask.append((name, provider, nn))
    if choose is not None:
        # nodes podnet serves from a node pool but holds no NodeNetwork of (yet): the
        # cloud is asked about them too (an unreadable one is reported as such below)
        recorded = {nn.metadata.name for nn in records.node_networks} | {
            bad.name for bad in records.unreadable if bad.kind == "NodeNetwork"}
        for name in sorted(set(nodes) - recorded):
            chosen = choose(node_info(nodes[name]))
            if chosen is not None and chosen in providers and providers[chosen].uses_node_pool:
                to_ask.append((name, chosen, None))
    for name, provider, known in to_ask:
        context = NodeContext(node=node_info(nodes[name]), network=known, read_only=True)
        try:
            # routed: only that provider's plugin answers for its nodes
            inventory: object = providers.hook(provider, "podnet_node_inventory")(
                provider=provider, node=context)
        except Exception as exc:  # the provider's own SDK errors: report, go on
            errors.append(AuditError(name, provider, one_line_of(f"{type(exc).__name__}: {exc}")))
            continue
        if not isinstance(inventory, Inventory):
            errors.append(AuditError(name, provider, "the provider reported no inventory"))
            continue
        # both families (a dual-stack node's IPv6 halves are cloud addresses too)
        clouds[(provider, name)] = {**inventory.all_ips(), **inventory.all_ipv6()}
        audited[(provider, name)] = known
    for bad in records.unreadable:
        what = "record" if bad.kind == "NodeNetwork" else f"PodNetwork {bad.name}"
        errors.append(AuditError(bad.node, bad.provider, f"{what} does not parse: {bad.error}"))
    for report in records.agents:
        if report.edited:
            errors.append(AuditError(report.node, None, (
                "its agent's report was edited by someone else (its lists do not match "
                "its writer's digest): it acknowledges nothing until the agent writes it "
                "again")))

    unrecorded = _unrecorded(records, nodes, providers, errors, skipped,
                             {*configured, *(p for _, p, _ in to_ask)})

    owned = address_owners(records)
    where: dict[tuple[str, str], tuple[str, str]] = {}  # (provider, ip) -> (node, interface)
    for (provider, node), addresses in clouds.items():
        for address, itf in addresses.items():
            where.setdefault((provider, address), (node, itf.id))

    unowned: list[Unowned] = []
    for (provider, node), addresses in sorted(clouds.items()):
        # every address the NodeNetwork lists is in the node's pool, whatever its (lagging)
        # owner field says: the engine's own rule when it rebuilds a pool
        recorded_nn = audited[(provider, node)]
        pooled = {a for itf in (recorded_nn.status.interfaces if recorded_nn else ())
                  for ip in itf.ips for a in (ip.address, ip.ipv6) if a}
        for address, itf in sorted(addresses.items()):
            if (provider, address) not in owned and address not in pooled:
                unowned.append(Unowned(node, provider, address, itf.id))
    lost: list[Lost] = []
    misplaced: list[Misplaced] = []
    for pn in records.pod_networks:
        provider, node = pn.spec.provider, pn.spec.node_name
        on_node = clouds.get((provider, node))
        if on_node is None:
            continue  # its node was not audited: nothing to compare with
        for address in owned_addresses(pn):
            if address in on_node:
                continue
            elsewhere = where.get((provider, address))
            if elsewhere is None:
                lost.append(Lost(pn.key, node, address))
            else:
                misplaced.append(Misplaced(pn.key, node, address, *elsewhere))
    return AuditReport(
        unowned=tuple(unowned), unrecorded=unrecorded, lost=tuple(lost),
        misplaced=tuple(misplaced),
        errors=tuple(sorted(errors, key=lambda e: (e.node or "", e.provider or "", e.error))),
        skipped=tuple(Skipped(p, r, tuple(sorted(n))) for (p, r), n in sorted(skipped.items())),
        duplicates=_duplicates(records),
        gone=_gone(records, pods, now or datetime.now(UTC), grace),
        wrong_eni=_wrong_enis(records),
        still_plugged=_still_plugged(records, nodes, record_exists),
    )


NOT_LISTED = "machines not listed (the provider cannot list them)"


def _unrecorded(records: Records, nodes: Mapping[str, Obj], providers: Providers,
                errors: list[AuditError], skipped: dict[tuple[str, str], list[str]],
                asked: set[str]) -> tuple[Unrecorded, ...]:
    """The addresses on the machines of each provider in ``asked`` that no Node and no
    NodeNetwork names (their inventory read as a node that left would be)."""
    from podnet.core.models import NodeInfo
    from podnet.core.objects import node_info
    from podnet.hookspecs.types import Inventory, NodeContext

    # a record with no instanceId names its node by name alone: a provider that maps
    # names to machines (a config map, or the name is the machine) finds it by that
    known = [node_info(n) for n in nodes.values()] + [
        NodeInfo(name=nn.metadata.name, uid="", provider_id=nn.spec.instance_id)
        for nn in records.node_networks]
    found: list[Unrecorded] = []
    for provider in sorted(asked):
        if provider not in providers or not providers[provider].uses_node_pool:
            continue
        try:
            machines: object = providers.hook(provider, "podnet_unknown_machines")(
                provider=provider, known=known)
        except Exception as exc:  # the provider's own SDK errors: report, go on
            errors.append(AuditError(None, provider, one_line_of(
                f"listing its machines: {type(exc).__name__}: {exc}")))
            continue
        if machines is None:
            skipped.setdefault((provider, NOT_LISTED), [])
            continue
        for machine in machines:  # type: ignore[attr-defined]
            try:
                inventory: object = providers.hook(provider, "podnet_node_inventory")(
                    provider=provider, node=NodeContext(node=machine, network=None,
                                                        read_only=True))
            except Exception as exc:
                errors.append(AuditError(machine.name, provider, one_line_of(
                    f"machine no Node names: {type(exc).__name__}: {exc}")))
                continue
            if not isinstance(inventory, Inventory):
                errors.append(AuditError(machine.name, provider,
                                         "the provider reported no inventory"))
                continue
            addresses = {**inventory.all_ips(), **inventory.all_ipv6()}
            found.extend(Unrecorded(machine.name, provider, ip, itf.id)
                         for ip, itf in sorted(addresses.items()))
    return tuple(found)


def _still_plugged(records: Records, nodes: Mapping[str, Obj],
                   record_exists: Callable[[str], bool] | None) -> tuple[StillPlugged, ...]:
    """Records a node's agent still has an interface for, gone. A record is deleted only
    once the one host that plugged it reported its interface gone, and an agent never
    plugs a record it has seen Releasing: an interface reported for a gone record was
    released without that word (a gone Node's records are let go by design: not
    audited)."""
    keys = {pn.key for pn in records.pod_networks} | {
        bad.name for bad in records.unreadable if bad.kind == "PodNetwork"}
    found: list[StillPlugged] = []
    for report in records.agents:
        if report.edited or report.node not in nodes:
            continue
        for key in sorted(report.plugged - keys):
            if record_exists is not None and record_exists(key):
                continue  # made after the records were listed
            found.append(StillPlugged(key, report.node, report.holder))
    return tuple(sorted(found, key=lambda f: (f.node, f.pod_network)))


def _wrong_enis(records: Records) -> tuple[WrongEni, ...]:
    """Routed records whose address's rule, as the node's agent reports it, looks up
    another table than that of the device with their ENI's MAC (the NodeNetwork's)."""
    from podnet.core.models import Phase

    nns = {nn.metadata.name: nn for nn in records.node_networks}
    found: list[WrongEni] = []
    for pn in records.pod_networks:
        summary = records.dataplane_of(pn.spec.node_name)
        nn = nns.get(pn.spec.node_name)
        if (pn.status.phase is not Phase.ROUTED or not pn.status.interface or nn is None
                or summary is None or isinstance(summary, str)):
            continue
        macs = {itf.id: itf.mac.lower() for itf in nn.status.interfaces if itf.mac}
        enis = {mac: eni for eni, mac in macs.items()}
        mac = macs.get(pn.status.interface)
        want = summary.table_of_mac(mac) if mac else None
        if want is None:
            continue  # its device not found (yet): nothing to compare with
        for address in (pn.status.ip, pn.status.ipv6):
            tables = summary.tables_of(address) if address else None
            if address is None or tables is None or tables == (want,):
                continue  # no rule (not plugged, or left out of a long summary)
            for table in (t for t in tables if t != want):
                device = summary.device_of_table(table)
                other = (enis.get(device.mac, f"{device.name} ({device.mac})")
                         if device is not None else f"table {table}")
                found.append(WrongEni(pn.key, pn.spec.node_name, address,
                                      pn.status.interface, other))
    return tuple(sorted(found, key=lambda w: (w.node, w.ip)))


def _duplicates(records: Records) -> tuple[Duplicate, ...]:
    """Addresses (per provider) that more than one record owns."""
    from podnet.core.ledger import sealed

    holders: dict[tuple[str, str], list[PodNetwork]] = {}
    for pn in records.pod_networks:
        for address in owned_addresses(pn):
            holders.setdefault((pn.spec.provider, address), []).append(pn)
    return tuple(Duplicate(provider, ip, tuple(sorted(pn.key for pn in pns)),
                           tuple(sorted(pn.key for pn in pns if sealed(pn) is False)))
                 for (provider, ip), pns in sorted(holders.items()) if len(pns) > 1)


def _gone(records: Records, pods: Mapping[str, Obj] | None, now: datetime,
          grace: float) -> tuple[Gone, ...]:
    """Records whose pod no longer exists, each past ``grace`` (not sticky ones: those are
    held for a pod that may come back, by design). A record deleted by hand, its
    finalizer removed, leaves nothing to find here: its interface, while its pod still
    has it, is what its node's agent reports (``still_plugged``), and its address is the
    pool's again at the controller's next start."""
    found: list[Gone] = []
    if pods is None:
        return ()
    for pn in records.pod_networks:
        if pn.spec.sticky:
            continue
        pod = pods.get(f"{pn.metadata.namespace}/{pn.spec.pod_name}")
        if pod is not None and dig(pod, "metadata", "uid") == pn.spec.pod_uid:
            continue
        since = pn.status.last_transition_time or pn.metadata.creation_timestamp
        if since is None or (now - since).total_seconds() < grace:
            continue
        reason = ("its pod is gone" if pod is None
                  else f"its pod was replaced (uid {dig(pod, 'metadata', 'uid')})")
        ips: list[str | None] = [*owned_addresses(pn)] or [None]
        found.extend(Gone(pn.key, pn.spec.node_name, ip,
                          f"{reason} and the record is still here after {grace:g}s")
                     for ip in ips)
    return tuple(sorted(found, key=lambda g: (g.pod_network, g.ip or "")))


def run_audit(args: argparse.Namespace) -> int:
    from podnet.core.cluster.port import NODE, POD, ApiError
    from podnet.core.config import load_config
    from podnet.core.errors import ConfigError
    from podnet.core.plugin import Providers, load_plugins, new_plugin_manager

    try:
        # what ``podnet run`` does before its engine starts, so both see the same clouds
        config = load_config(args.config)
        pm = new_plugin_manager()
        load_plugins(pm, builtins=args.provider or None)
        providers = Providers(pm)
        for name, section in config.providers.items():
            providers.configure(name, section)
        with connect(args) as cluster:
            records = read_records(cluster, agent_namespace=args.agent_namespace)
            nodes = {str(n["metadata"]["name"]): n for n in cluster.list(NODE).items}
            pods = {f"{dig(p, 'metadata', 'namespace')}/{dig(p, 'metadata', 'name')}": p
                    for p in cluster.list(POD).items}
            report = audit(records, nodes, providers,
                           choose=provider_chooser(config, providers), pods=pods,
                           grace=args.grace, configured=sorted(config.providers),
                           record_exists=_record_exists(cluster))
    except (ConfigError, ApiError) as exc:
        print(f"podnet audit: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        print(json.dumps(report.as_json(), sort_keys=True))
    else:
        _print_audit(report)
    return EXIT_OK if report.clean else EXIT_FOUND


def _record_exists(cluster: Cluster) -> Callable[[str], bool]:
    from podnet.core.cluster.port import POD_NETWORK, NotFound
    from podnet.core.objects import record_finished

    def exists(key: str) -> bool:
        namespace, _, name = key.partition("/")
        try:
            obj = cluster.get(POD_NETWORK, name, namespace)
        except NotFound:
            return False
        return not record_finished(obj)

    return exists


def _print_audit(report: AuditReport) -> None:
    from rich.table import Table

    table = Table(title="podnet audit")
    for col in ("finding", "node", "provider", "ip", "detail"):
        table.add_column(col)
    for u in report.unowned:
        table.add_row("unowned", u.node, u.provider, u.ip,
                      f"on {u.interface}; no record owns it and no pool holds it")
    for r in report.unrecorded:
        table.add_row("unrecorded", r.machine, r.provider, r.ip,
                      f"on {r.interface}; a machine no Node and no NodeNetwork names")
    for lo in report.lost:
        table.add_row("lost", lo.node, "", lo.ip,
                      f"{lo.pod_network}: the cloud no longer has it")
    for m in report.misplaced:
        table.add_row("misplaced", m.node, "", m.ip,
                      f"{m.pod_network}: the cloud has it on {m.cloud_node} ({m.interface})")
    for d in report.duplicates:
        edited = (f"; not given by podnet (edited): {', '.join(d.edited)}" if d.edited
                  else "")
        table.add_row("duplicate", "", d.provider, d.ip,
                      f"recorded by {', '.join(d.pod_networks)}{edited}")
    for g in report.gone:
        table.add_row("gone", cell(g.node), "", cell(g.ip), f"{g.pod_network}: {g.reason}")
    for w in report.wrong_eni:
        table.add_row("wrong ENI", w.node, "", w.ip,
                      f"{w.pod_network}: its rule looks up the table of {w.rule_eni}, not "
                      f"of {w.eni}, which holds the address")
    for sp in report.still_plugged:
        table.add_row("still plugged", sp.node, "", "",
                      f"{sp.pod_network}: gone, and the node's agent ({sp.holder}) still has "
                      "its interface: its address was given back while the interface holds "
                      "it")
    for e in report.errors:
        table.add_row("error", cell(e.node), cell(e.provider), "", e.error)
    items: list[Any] = [table] if table.row_count else []
    items += [f"provider {s.provider}: {s.reason}: {', '.join(s.nodes)}"
              for s in report.skipped]
    if report.clean:
        items.append("clean: every cloud address is owned or pooled, every record's "
                     "address is where it says")
    show(*items)
