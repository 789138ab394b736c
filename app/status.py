"""``podnet status`` and ``podnet audit``: what the records say, and whether the clouds agree.

Both commands only read: they list the records once through the official-client adapter
and never write, so an operator can run them beside a live controller. ``status`` shows
the records as they are; ``audit`` asks each node-pool provider for its node inventories
and compares, which finds what the controller itself cannot see while it is down or
misconfigured: addresses leaked in the cloud, and records whose address the cloud lost.

The CLI builds its parser on every command, so this module imports only the standard
library, attrs and the clock (its timestamp format) at import time; the client, the
converter and the plugins are imported when a command runs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import attrs

from podnet.core.clock import format_time

if TYPE_CHECKING:
    from podnet.core.cluster.kube import KubeCluster
    from podnet.core.cluster.port import Cluster, Obj
    from podnet.core.config import Config
    from podnet.core.models import AgentReport, Condition, NodeInfo, NodeNetwork, PodNetwork
    from podnet.core.plugin import Providers
    from podnet.linux.eni import EniSummary

__all__ = [
    "AuditReport",
    "Records",
    "add_audit_arguments",
    "add_status_arguments",
    "audit",
    "read_records",
    "run_audit",
    "run_status",
    "status_report",
]

#: Exit statuses: clean, findings (audit only), usage or configuration errors.
EXIT_OK, EXIT_FOUND, EXIT_USAGE = 0, 1, 2
NO_NODE_POOL = "not audited (no node pool)"
NOT_LOADED = "not audited (provider not loaded)"
NODE_GONE = "not audited (Node object is gone)"
#: how long a record may outlive its pod, or a pool keep an address for a record that is
#: gone, before audit calls it a finding (the controller releases both within seconds)
DEFAULT_GRACE = 300.0


# --- arguments --------------------------------------------------------------------------------


def _cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=None,
                        help="kubeconfig file (default: in-cluster config, else $KUBECONFIG)")
    parser.add_argument("--context", default=None,
                        help="the kubeconfig context to use (default: its current context)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table",
                        help="a table for people, or JSON for scripts (default %(default)s)")


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    _cluster_arguments(parser)
    parser.add_argument("--node", default=None, help="only this node and its pod networks")
    parser.add_argument("--namespace", default=None, help="only pod networks in this namespace")
    parser.add_argument("--agent-namespace", default="kube-system",
                        help="podnet's namespace, where the node agents report "
                             "(default %(default)s)")


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    _cluster_arguments(parser)
    parser.add_argument("--config", required=True, help="the controller's config file (YAML)")
    parser.add_argument("--provider", action="append", default=[],
                        help="enable this built-in provider (repeatable; default: all installed)")
    parser.add_argument("--agent-namespace", default="kube-system",
                        help="podnet's namespace, where the node agents report what their "
                             "ENI dataplane has in place (default %(default)s)")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE,
                        help="seconds a record may outlive its pod, or a pool keep a gone "
                        f"record's address, before it is a finding (default {DEFAULT_GRACE:g})")


# --- reading the records ----------------------------------------------------------------------


@attrs.frozen
class Unreadable:
    """A record that does not parse: shown with its error, never used for decisions."""

    kind: str  # "NodeNetwork" | "PodNetwork"
    name: str  # node name, or namespace/name
    node: str | None
    provider: str | None
    error: str
    #: addresses its raw status claims: an audit must not call them leaked
    addresses: tuple[str, ...] = ()


@attrs.frozen
class Records:
    node_networks: tuple[NodeNetwork, ...]
    pod_networks: tuple[PodNetwork, ...]
    unreadable: tuple[Unreadable, ...]
    #: the node agents' reports (their Leases), by node
    agents: tuple[AgentReport, ...] = ()
    #: node -> what its agent says of its ENI dataplane (a string: why it does not parse)
    dataplanes: tuple[tuple[str, EniSummary | str], ...] = ()

    def dataplane_of(self, node: str | None) -> EniSummary | str | None:
        return dict(self.dataplanes).get(node or "")


def _dig(obj: Mapping[str, Any], *path: str) -> str | None:
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value if isinstance(value, str) else None


def read_records(cluster: Cluster, agent_namespace: str | None = None) -> Records:
    """Every NodeNetwork and PodNetwork, parsed; those that do not parse set apart; with
    ``agent_namespace``, the node agents' reports there too."""
    from podnet.core.cluster.port import NODE_NETWORK, POD_NETWORK
    from podnet.core.convert import RecordError, from_wire
    from podnet.core.models import NodeNetwork, PodNetwork

    node_networks: list[NodeNetwork] = []
    pod_networks: list[PodNetwork] = []
    unreadable: list[Unreadable] = []
    for obj in cluster.list(NODE_NETWORK).items:
        try:
            node_networks.append(from_wire(NodeNetwork, obj))
        except RecordError as exc:
            name = _dig(obj, "metadata", "name") or "?"
            unreadable.append(Unreadable("NodeNetwork", name, name,
                                         _dig(obj, "spec", "provider"), str(exc)))
    for obj in cluster.list(POD_NETWORK).items:
        try:
            pod_networks.append(from_wire(PodNetwork, obj))
        except RecordError as exc:
            key = f"{_dig(obj, 'metadata', 'namespace')}/{_dig(obj, 'metadata', 'name') or '?'}"
            claimed = tuple(a for a in (_dig(obj, "status", "ip"), _dig(obj, "status", "ipv6"))
                            if a)
            unreadable.append(Unreadable("PodNetwork", key, _dig(obj, "spec", "nodeName"),
                                         _dig(obj, "spec", "provider"), str(exc), claimed))
    agents: list[AgentReport] = []
    dataplanes: list[tuple[str, EniSummary | str]] = []
    if agent_namespace is not None:
        from podnet.app.node.report import ANNOTATION_ENI
        from podnet.core.cluster.port import LEASE
        from podnet.core.objects import LABEL_AGENT_NODE, agent_report
        from podnet.linux.eni import EniSummary

        for obj in cluster.list(LEASE, agent_namespace, label_selector=LABEL_AGENT_NODE).items:
            report = agent_report(obj)
            if report is None:
                continue
            agents.append(report)
            text = _dig(obj, "metadata", "annotations", ANNOTATION_ENI)
            if text is not None:
                try:
                    dataplanes.append((report.node, EniSummary.from_json(text)))
                except ValueError as exc:
                    dataplanes.append((report.node, f"{ANNOTATION_ENI}: {exc}"))
    return Records(
        tuple(sorted(node_networks, key=lambda nn: nn.metadata.name)),
        tuple(sorted(pod_networks, key=lambda pn: pn.key)),
        tuple(sorted(unreadable, key=lambda u: (u.kind, u.name))),
        tuple(sorted(agents, key=lambda a: a.node)),
        tuple(sorted(dataplanes, key=lambda d: d[0])),
    )


def _connect(args: argparse.Namespace) -> KubeCluster:
    """The cluster as ``podnet run`` finds it; ConfigError when there is no way in."""
    from podnet.core.cluster.kube import KubeCluster

    return KubeCluster.connect(args.kubeconfig, args.context)


#: Phases in which a record owns its address, as the engine counts them when it rebuilds a pool.
OWNING_PHASES = frozenset({"Allocated", "Routed", "Releasing"})


def _addresses(pn: PodNetwork) -> Iterator[str]:
    """The addresses ``pn`` owns: none before it is allocated."""
    if str(pn.status.phase) in OWNING_PHASES:
        for address in (pn.status.ip, pn.status.ipv6):
            if address:
                yield address


def _owned(records: Records) -> dict[tuple[str, str], PodNetwork | None]:
    """(provider, address) -> the record owning it (None: a record that does not parse
    claims it). Ownership comes from the records, never from a NodeNetwork's ``owner``
    fields: the engine rewrites those only when the pool's shape changes, so they lag."""
    owned: dict[tuple[str, str], PodNetwork | None] = {}
    for pn in records.pod_networks:
        for address in _addresses(pn):
            owned[(pn.spec.provider, address)] = pn
    for bad in records.unreadable:
        for address in bad.addresses:
            owned.setdefault((bad.provider or "", address), None)
    return owned


def _time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _not_true(conditions: Sequence[Condition], type_: str) -> dict[str, str] | None:
    """The condition of ``type_`` when it is not True (missing counts as fine: not yet
    written is not a failure to report)."""
    for cond in conditions:
        if cond.type == type_ and cond.status != "True":
            return {"status": cond.status, "reason": cond.reason, "message": cond.message}
    return None


# --- podnet status ----------------------------------------------------------------------------


def _node_row(nn: NodeNetwork, owned: Mapping[tuple[str, str], object]) -> dict[str, Any]:
    interfaces = []
    for itf in nn.status.interfaces:
        idle = sum((nn.spec.provider, ip.address) not in owned for ip in itf.ips)
        interfaces.append({
            "id": itf.id, "state": str(itf.state), "subnet": itf.subnet, "idle": idle,
            "allocated": len(itf.ips) - idle, "inhibited_until": _time(itf.inhibited_until),
        })
    return {
        "name": nn.metadata.name, "provider": nn.spec.provider,
        "instance_id": nn.spec.instance_id, "interfaces": interfaces,
        "idle": sum(i["idle"] for i in interfaces),
        "allocated": sum(i["allocated"] for i in interfaces),
        "pool_not_ready": _not_true(nn.status.conditions, "PoolReady"), "error": None,
    }


def _network_row(pn: PodNetwork) -> dict[str, Any]:
    s = pn.status
    return {
        "record": pn.metadata.name, "network": pn.spec.network, "provider": pn.spec.provider,
        "phase": str(s.phase), "ip": s.ip, "ipv6": s.ipv6, "node": pn.spec.node_name,
        "interface": s.interface, "not_ready": _not_true(s.conditions, "Ready"), "error": None,
    }


def _dataplane_row(summary: EniSummary | str | None) -> dict[str, Any] | None:
    """What a node's agent says of its ENI dataplane: each ENI device (by MAC) with its
    table, its default gateways and how many rules look it up; rules to other tables."""
    if summary is None:
        return None
    if isinstance(summary, str):
        return {"devices": [], "rules": 0, "rules_elsewhere": 0, "error": summary}
    counts: dict[int, int] = {}
    for _, tables in summary.rules:
        for table in tables:
            counts[table] = counts.get(table, 0) + 1
    known = {d.table for d in summary.devices}
    return {"devices": [{"mac": d.mac, "name": d.name, "table": d.table,
                         "gateway": d.gateway, "gateway6": d.gateway6,
                         "rules": counts.get(d.table, 0)} for d in summary.devices],
            "rules": summary.rules_total,
            "rules_elsewhere": sum(n for t, n in counts.items() if t not in known),
            "error": None}


def status_report(records: Records, *, node: str | None = None,
                  namespace: str | None = None) -> dict[str, Any]:
    """``{"nodes": [...], "pods": [...]}``, rows sorted by name; every row of a list has the
    same keys, unreadable records included (their fields null, ``error`` set). ``node``
    narrows both lists, ``namespace`` the pods; pool counts always use every record."""
    owned = _owned(records)
    nodes = [_node_row(nn, owned) for nn in records.node_networks
             if node is None or nn.metadata.name == node]
    pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pn in records.pod_networks:
        if (node is None or pn.spec.node_name == node) and (
                namespace is None or pn.metadata.namespace == namespace):
            pod = (pn.metadata.namespace or "", pn.spec.pod_name)
            pods.setdefault(pod, []).append(_network_row(pn))
    for bad in records.unreadable:
        if node is not None and bad.node != node:
            continue
        if namespace is not None and bad.kind == "PodNetwork" and not bad.name.startswith(
                f"{namespace}/"):
            continue
        if bad.kind == "NodeNetwork":
            nodes.append({"name": bad.name, "provider": bad.provider, "instance_id": None,
                          "interfaces": [], "idle": 0, "allocated": 0, "pool_not_ready": None,
                          "error": bad.error})
        else:
            namespace, _, name = bad.name.partition("/")
            # its pod is unknown when the record does not parse: list it under its own name
            pods.setdefault((namespace, name), []).append({
                "record": name, "network": None, "provider": bad.provider, "phase": None,
                "ip": None, "ipv6": None, "node": bad.node, "interface": None,
                "not_ready": None, "error": bad.error,
            })
    from podnet.core.models import Phase
    from podnet.core.unplug import acknowledged

    agents = []
    for report in records.agents:
        if node is not None and report.node != node:
            continue
        # Releasing records of the node whose interfaces its report does not say are gone
        # (in the word of the host that plugged them): their addresses wait (the release
        # handshake)
        waiting = sorted(pn.key for pn in records.pod_networks
                         if pn.spec.node_name == report.node
                         and pn.status.phase is Phase.RELEASING
                         and not acknowledged(pn, report))
        agents.append({"node": report.node, "holder": report.holder, "edited": report.edited,
                       "plugged": len(report.plugged),
                       "waiting_for_unplug": waiting, "reported": _time(report.renew_time),
                       "eni_dataplane": _dataplane_row(records.dataplane_of(report.node))})
    return {
        "agents": agents,
        "nodes": sorted(nodes, key=lambda n: str(n["name"])),
        "pods": [
            {"namespace": ns, "name": name,
             "networks": sorted(rows, key=lambda r: (str(r["network"]), str(r["record"])))}
            for (ns, name), rows in sorted(pods.items())
        ],
    }


def run_status(args: argparse.Namespace) -> int:
    from podnet.core.cluster.port import ApiError
    from podnet.core.errors import ConfigError

    try:
        with _connect(args) as cluster:
            records = read_records(cluster, agent_namespace=args.agent_namespace)
    except (ConfigError, ApiError) as exc:
        print(f"podnet status: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    report = status_report(records, node=args.node, namespace=args.namespace)
    if args.output == "json":
        print(json.dumps(report, sort_keys=True))
    else:
        _print_status(report)
    return EXIT_OK


def _one_line(message: object) -> str:
    """One line, credentials hidden: provider and client errors may quote a request."""
    from podnet.core.errors import one_line

    return one_line(message)


def _cell(value: Any) -> str:
    return "" if value is None else str(value)


def _console() -> Any:
    from rich.console import Console

    # every string printed comes from the records or the cloud: none is rich markup
    # ("metadata.annotations[podnet.io/networks]" is text, not a style tag) or an emoji code
    console = Console(markup=False, emoji=False, highlight=False)
    if console.is_terminal:
        return console
    # piped output is read by people and by grep: do not squeeze it to 80 columns
    return Console(width=200, markup=False, emoji=False, highlight=False)


def _problem(cond: Mapping[str, str] | None) -> str:
    if cond is None:
        return ""
    return f"{cond['reason']}: {cond['message']}" if cond["message"] else cond["reason"]


def _devices_cell(row: Mapping[str, Any] | None) -> str:
    """``eni1 02:..:01 table 1005 via 10.0.0.1, 2 rules``, one line per device."""
    if row is None:
        return ""
    if row["error"]:
        return f"invalid: {row['error']}"
    lines = [f"{d['name']} {d['mac']} table {d['table']} via "
             f"{', '.join(g for g in (d['gateway'], d['gateway6']) if g)}, {d['rules']} rules"
             for d in row["devices"]]
    if row["rules_elsewhere"]:
        lines.append(f"{row['rules_elsewhere']} rules to a table without a device")
    return "\n".join(lines) or "no ENI device with a table"


def _print_status(report: Mapping[str, Any]) -> None:
    from rich.table import Table

    nodes = Table(title="node pools")
    for col in ("node", "provider", "instance", "interface", "state", "subnet", "idle",
                "allocated", "inhibited until", "problem"):
        nodes.add_column(col, justify="right" if col in ("idle", "allocated") else "left")
    for n in report["nodes"]:
        head = [n["name"], _cell(n["provider"]), _cell(n["instance_id"])]
        for itf in n["interfaces"]:
            nodes.add_row(*head, itf["id"], itf["state"], _cell(itf["subnet"]),
                          str(itf["idle"]), str(itf["allocated"]),
                          _cell(itf["inhibited_until"]), "")
            head = ["", "", ""]
        problem = f"invalid: {n['error']}" if n["error"] else _problem(n["pool_not_ready"])
        if problem and not n["error"]:
            problem = f"PoolReady={n['pool_not_ready']['status']} {problem}"
        nodes.add_row(*head, "total", "", "", str(n["idle"]), str(n["allocated"]), "", problem,
                      end_section=True)
    pods = Table(title="pod networks")
    for col in ("pod", "network", "provider", "phase", "ip", "ipv6", "node", "interface",
                "problem"):
        pods.add_column(col)
    for p in report["pods"]:
        pod = f"{p['namespace']}/{p['name']}"
        for net in p["networks"]:
            problem = f"invalid: {net['error']}" if net["error"] else _problem(net["not_ready"])
            pods.add_row(pod, _cell(net["network"]), _cell(net["provider"]), _cell(net["phase"]),
                         _cell(net["ip"]), _cell(net["ipv6"]), _cell(net["node"]),
                         _cell(net["interface"]), problem)
            pod = ""
    agents = Table(title="node agents")
    for col in ("node", "holder", "interfaces", "waiting for unplug", "reported",
                "ENI devices"):
        agents.add_column(col, justify="right" if col == "interfaces" else "left")
    for a in report["agents"]:
        holder = a["holder"] + (" (edited by hand)" if a["edited"] else "")
        agents.add_row(a["node"], holder, str(a["plugged"]), ", ".join(a["waiting_for_unplug"]),
                       _cell(a["reported"]), _devices_cell(a["eni_dataplane"]))
    console = _console()
    console.print(nodes)
    console.print(pods)
    if report["agents"]:
        console.print(agents)


# --- podnet audit -----------------------------------------------------------------------------


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
    """One address recorded by two or more PodNetworks: two pods would share it."""

    provider: str
    ip: str
    pod_networks: tuple[str, ...]


@attrs.frozen
class Gone:
    """An owner that is gone: a record whose pod no longer exists (past the grace), or a
    node pool still holding an address for a record that no longer exists."""

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
        context = NodeContext(node=node_info(nodes[name]), network=known)
        try:
            # routed: only that provider's plugin answers for its nodes
            inventory: object = providers.hook(provider, "podnet_node_inventory")(
                provider=provider, node=context)
        except Exception as exc:  # the provider's own SDK errors: report, go on
            errors.append(AuditError(name, provider, _one_line(f"{type(exc).__name__}: {exc}")))
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

    owned = _owned(records)
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
        for address in _addresses(pn):
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
            errors.append(AuditError(None, provider, _one_line(
                f"listing its machines: {type(exc).__name__}: {exc}")))
            continue
        if machines is None:
            skipped.setdefault((provider, NOT_LISTED), [])
            continue
        for machine in machines:  # type: ignore[attr-defined]
            try:
                inventory: object = providers.hook(provider, "podnet_node_inventory")(
                    provider=provider, node=NodeContext(node=machine, network=None))
            except Exception as exc:
                errors.append(AuditError(machine.name, provider, _one_line(
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
    holders: dict[tuple[str, str], list[str]] = {}
    for pn in records.pod_networks:
        for address in _addresses(pn):
            holders.setdefault((pn.spec.provider, address), []).append(pn.key)
    return tuple(Duplicate(provider, ip, tuple(sorted(keys)))
                 for (provider, ip), keys in sorted(holders.items()) if len(keys) > 1)


def _gone(records: Records, pods: Mapping[str, Obj] | None, now: datetime,
          grace: float) -> tuple[Gone, ...]:
    """Owners that are gone, each past ``grace``: records whose pod no longer exists (not
    sticky ones: those are held for a pod that may come back, by design), and addresses
    a NodeNetwork lists as owned by a record that does not exist (its finalizer removed
    by hand, say: the pool would keep the address for nobody)."""
    from podnet.core.pool import SHRINKING

    found: list[Gone] = []
    if pods is not None:
        for pn in records.pod_networks:
            if pn.spec.sticky:
                continue
            pod = pods.get(f"{pn.metadata.namespace}/{pn.spec.pod_name}")
            if pod is not None and _dig(pod, "metadata", "uid") == pn.spec.pod_uid:
                continue
            since = pn.status.last_transition_time or pn.metadata.creation_timestamp
            if since is None or (now - since).total_seconds() < grace:
                continue
            reason = ("its pod is gone" if pod is None
                      else f"its pod was replaced (uid {_dig(pod, 'metadata', 'uid')})")
            ips: list[str | None] = [*_addresses(pn)] or [None]
            found.extend(Gone(pn.key, pn.spec.node_name, ip,
                              f"{reason} and the record is still here after {grace:g}s")
                         for ip in ips)
    keys = {pn.key for pn in records.pod_networks} | {
        bad.name for bad in records.unreadable if bad.kind == "PodNetwork"}
    for nn in records.node_networks:
        synced = nn.status.last_inventory_sync
        if synced is None or (now - synced).total_seconds() < grace:
            continue  # owner fields lag: they catch up at most once a refill period
        for itf in nn.status.interfaces:
            for ip in itf.ips:
                if ip.owner and ip.owner != SHRINKING and ip.owner not in keys:
                    found.append(Gone(ip.owner, nn.metadata.name, ip.address,
                                      "the node's pool holds the address for a record that "
                                      "no longer exists"))
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
        with _connect(args) as cluster:
            records = read_records(cluster, agent_namespace=args.agent_namespace)
            nodes = {str(n["metadata"]["name"]): n for n in cluster.list(NODE).items}
            pods = {f"{_dig(p, 'metadata', 'namespace')}/{_dig(p, 'metadata', 'name')}": p
                    for p in cluster.list(POD).items}
            report = audit(records, nodes, providers,
                           choose=provider_chooser(config, providers), pods=pods,
                           grace=args.grace, configured=sorted(config.providers),
                           record_exists=_record_exists(cluster))
    except (ConfigError, ApiError) as exc:
        print(f"podnet audit: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    if args.output == "json":
        print(json.dumps(report.as_json(), sort_keys=True))
    else:
        _print_audit(report)
    return EXIT_OK if report.clean else EXIT_FOUND


def _record_exists(cluster: Cluster) -> Callable[[str], bool]:
    from podnet.core.cluster.port import POD_NETWORK, NotFound

    def exists(key: str) -> bool:
        namespace, _, name = key.partition("/")
        try:
            cluster.get(POD_NETWORK, name, namespace)
        except NotFound:
            return False
        return True

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
        table.add_row("duplicate", "", d.provider, d.ip,
                      f"recorded by {', '.join(d.pod_networks)}")
    for g in report.gone:
        table.add_row("gone", _cell(g.node), "", _cell(g.ip), f"{g.pod_network}: {g.reason}")
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
        table.add_row("error", _cell(e.node), _cell(e.provider), "", e.error)
    console = _console()
    if table.row_count:
        console.print(table)
    for s in report.skipped:
        console.print(f"provider {s.provider}: {s.reason}: {', '.join(s.nodes)}")
    if report.clean:
        console.print("clean: every cloud address is owned or pooled, every record's "
                      "address is where it says")
