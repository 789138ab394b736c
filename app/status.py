"""``podnet status``: what the records say (``podnet audit``, in :mod:`podnet.app.audit`:
whether the clouds agree).

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
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from podnet.core.clock import format_time

if TYPE_CHECKING:
    from podnet.core.models import Condition, NodeNetwork, PodNetwork
    from podnet.linux.eni import EniSummary
from podnet.app.records import (
    EXIT_OK,
    EXIT_USAGE,
    Records,
    address_owners,
    cell,
    cluster_arguments,
    connect,
    dig,
    make_console,
    one_line_of,
    read_records,
)

__all__ = [
    "add_status_arguments",
    "run_status",
    "status_report",
]


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    cluster_arguments(parser)
    parser.add_argument("--node", default=None, help="only this node and its pod networks")
    parser.add_argument("--namespace", default=None, help="only pod networks in this namespace")
    parser.add_argument("--agent-namespace", default="kube-system",
                        help="podnet's namespace, where the node agents report "
                             "(default %(default)s)")
    parser.add_argument("--policies", action="store_true",
                        help="also each NetworkPolicy: its members, the nodes that "
                             "programmed it and those pending, what of it is not enforced")



def _time(value: datetime | None) -> str | None:
    return None if value is None else format_time(value)


def _not_true(conditions: Sequence[Condition], type_: str) -> dict[str, str] | None:
    """The condition of ``type_`` when it is not True (missing counts as fine: not yet
    written is not a failure to report)."""
    for cond in conditions:
        if cond.type == type_ and cond.status != "True":
            return {"status": cond.status, "reason": cond.reason, "message": cond.message}
    return None



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


def _count(status: Mapping[str, Any], key: str) -> int | float | None:
    value = status.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _ready_problem(status: Mapping[str, Any]) -> dict[str, str] | None:
    """The Ready condition of a network object when it is not True (written by the
    controller: missing means not yet checked, which ``phase`` says)."""
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == "Ready" and (
                cond.get("status") != "True"):
            return {"status": str(cond.get("status")), "reason": str(cond.get("reason") or ""),
                    "message": str(cond.get("message") or "")}
    return None


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _subnet_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec, status = _part(obj, "spec"), _part(obj, "status")
    outside = status.get("outsideIPs")
    return {
        "name": dig(obj, "metadata", "name"), "provider": dig(obj, "spec", "provider"),
        "cidr": dig(obj, "spec", "cidrBlock"), "default": spec.get("default") is True,
        "phase": status.get("phase"),
        **{f"v{v}_{what}": _count(status, f"v{v}{key}IPs")
           for v in (4, 6) for what, key in (("available", "Available"), ("using", "Using"),
                                             ("reserved", "Reserved"),
                                             ("excluded", "Excluded"))},
        "outside": len(outside) if isinstance(outside, list) else 0,
        "not_ready": _ready_problem(status),
    }


def _pool_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    status = _part(obj, "status")
    held = status.get("held")
    return {
        "name": dig(obj, "metadata", "name"), "subnet": dig(obj, "spec", "subnet"),
        "phase": status.get("phase"),
        **{f"v{v}_{what}": _count(status, f"v{v}{key}IPs")
           for v in (4, 6) for what, key in (("available", "Available"), ("using", "Using"))},
        "held": len(held) if isinstance(held, list) else 0,
        "not_ready": _ready_problem(status),
    }


def policy_row(obj: Mapping[str, Any]) -> dict[str, Any]:
    """One NetworkPolicy: what the controller's status annotation says of it (members,
    nodes programmed, pending and failed, its conditions; None where it wrote nothing
    yet), and what of it podnet does not enforce as written (read here, from its spec)."""
    from podnet.core.netpol.status import ACCEPTED, PROGRAMMED, STATUS_ANNOTATION, read_status
    from podnet.core.netpol.wire import read_policy

    spec = read_policy(obj)
    status = read_status(dig(obj, "metadata", "annotations", STATUS_ANNOTATION))

    def condition(type_: str) -> dict[str, str] | None:
        c = status.condition(type_) if status is not None else None
        return None if c is None else {"status": c.status, "reason": c.reason,
                                       "message": c.message}

    return {
        "namespace": spec.namespace, "name": spec.name, "generation": spec.generation,
        "observed_generation": None if status is None else status.observed_generation,
        "members": None if status is None else status.members,
        "nodes_programmed": None if status is None else status.nodes_programmed,
        "nodes_pending": [] if status is None else list(status.nodes_pending),
        "nodes_failed": {} if status is None else dict(status.nodes_failed),
        "accepted": condition(ACCEPTED), "programmed": condition(PROGRAMMED),
        "findings": [{"field": f.field, "reason": f.reason.value, "message": f.message}
                     for f in spec.findings],
    }


def status_report(records: Records, *, node: str | None = None,
                  namespace: str | None = None,
                  policies: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """``{"nodes": [...], "pods": [...], "agents": [...], "subnets": [...],
    "ip_pools": [...]}``, rows sorted by name; every row of a list has the same keys,
    unreadable records included (their fields null, ``error`` set). ``node`` narrows the
    nodes, pods and agents, ``namespace`` the pods; pool counts always use every record.
    A Subnet's and an IPPool's counts are what their status says (the controller keeps
    them), ``None`` where it says nothing yet. With ``policies`` (the NetworkPolicy
    objects), ``"policies"`` too (:func:`policy_row`; ``namespace`` narrows them)."""
    owned = address_owners(records)
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
    extra: dict[str, Any] = {}
    if policies is not None:
        rows = [policy_row(o) for o in policies]
        extra["policies"] = sorted(
            (r for r in rows if namespace is None or r["namespace"] == namespace),
            key=lambda r: (r["namespace"], r["name"]))
    return {
        **extra,
        "agents": agents,
        "subnets": [_subnet_row(o) for o in records.subnets],
        "ip_pools": [_pool_row(o) for o in records.ip_pools],
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

    policies: list[Mapping[str, Any]] | None = None
    try:
        with connect(args) as cluster:
            records = read_records(cluster, agent_namespace=args.agent_namespace)
            if args.policies:
                policies = _read_policies(cluster, args.namespace)
    except (ConfigError, ApiError) as exc:
        print(f"podnet status: {one_line_of(exc)}", file=sys.stderr)
        return EXIT_USAGE
    report = status_report(records, node=args.node, namespace=args.namespace,
                           policies=policies)
    if args.output == "json":
        print(json.dumps(report, sort_keys=True))
    else:
        _print_status(report)
    return EXIT_OK


def _read_policies(cluster: Any, namespace: str | None) -> list[Mapping[str, Any]]:
    """Every NetworkPolicy (of ``namespace``); none when the cluster does not serve them."""
    from podnet.core.cluster.port import NETWORK_POLICY, NotFound

    try:
        return list(cluster.list(NETWORK_POLICY, namespace).items)
    except NotFound:
        return []


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
        head = [n["name"], cell(n["provider"]), cell(n["instance_id"])]
        for itf in n["interfaces"]:
            nodes.add_row(*head, itf["id"], itf["state"], cell(itf["subnet"]),
                          str(itf["idle"]), str(itf["allocated"]),
                          cell(itf["inhibited_until"]), "")
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
            pods.add_row(pod, cell(net["network"]), cell(net["provider"]), cell(net["phase"]),
                         cell(net["ip"]), cell(net["ipv6"]), cell(net["node"]),
                         cell(net["interface"]), problem)
            pod = ""
    agents = Table(title="node agents")
    for col in ("node", "holder", "interfaces", "waiting for unplug", "reported",
                "ENI devices"):
        agents.add_column(col, justify="right" if col == "interfaces" else "left")
    for a in report["agents"]:
        holder = a["holder"] + (" (edited by hand)" if a["edited"] else "")
        agents.add_row(a["node"], holder, str(a["plugged"]), ", ".join(a["waiting_for_unplug"]),
                       cell(a["reported"]), _devices_cell(a["eni_dataplane"]))
    console = make_console()
    if report["subnets"]:
        console.print(_subnets_table(report["subnets"]))
    if report["ip_pools"]:
        console.print(_pools_table(report["ip_pools"]))
    console.print(nodes)
    console.print(pods)
    if report["agents"]:
        console.print(agents)
    if "policies" in report:
        console.print(_policies_table(report["policies"]))


def _policies_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="network policies")
    for col in ("policy", "members", "nodes programmed", "pending", "failed", "programmed",
                "not enforced as written"):
        table.add_column(col, justify="right" if col in ("members", "nodes programmed")
                         else "left")
    for r in rows:
        programmed = r["programmed"]
        state = "" if programmed is None else (
            programmed["reason"] if programmed["status"] == "True"
            else f"{programmed['status']} {programmed['reason']}")
        if r["observed_generation"] is not None and r["observed_generation"] != r["generation"]:
            state += f" (generation {r['observed_generation']} of {r['generation']})"
        findings = "\n".join(f"{f['field']}: {f['reason']}" for f in r["findings"])
        table.add_row(f"{r['namespace']}/{r['name']}", cell(r["members"]),
                      cell(r["nodes_programmed"]), ", ".join(r["nodes_pending"]),
                      "\n".join(f"{n}: {m}" for n, m in sorted(r["nodes_failed"].items())),
                      state.strip(), findings)
    return table


def _usage(available: Any, using: Any) -> str:
    """``3 / 250`` (in use / in use and available); empty until the status says."""
    if available is None and using is None:
        return ""
    a, u = available or 0, using or 0
    return f"{u:g} / {a + u:g}" if isinstance(a + u, float) else f"{u} / {a + u}"


def _subnets_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="subnets")
    for col in ("subnet", "provider", "cidr", "phase", "v4 in use / total", "v4 reserved",
                "v4 excluded", "v6 in use / total", "outside", "problem"):
        table.add_column(col, justify="right" if col.startswith(("v4", "v6", "outside"))
                         else "left")
    for r in rows:
        name = cell(r["name"]) + (" (default)" if r["default"] else "")
        problem = _problem(r["not_ready"])
        table.add_row(name, cell(r["provider"]), cell(r["cidr"]), cell(r["phase"]),
                      _usage(r["v4_available"], r["v4_using"]), cell(r["v4_reserved"]),
                      cell(r["v4_excluded"]), _usage(r["v6_available"], r["v6_using"]),
                      str(r["outside"]) if r["outside"] else "", problem)
    return table


def _pools_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    from rich.table import Table

    table = Table(title="IP pools")
    for col in ("pool", "subnet", "phase", "v4 in use / total", "v6 in use / total",
                "problem"):
        table.add_column(col, justify="right" if col.startswith(("v4", "v6")) else "left")
    for r in rows:
        table.add_row(cell(r["name"]), cell(r["subnet"]), cell(r["phase"]),
                      _usage(r["v4_available"], r["v4_using"]),
                      _usage(r["v6_available"], r["v6_using"]), _problem(r["not_ready"]))
    return table
