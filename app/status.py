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
from datetime import UTC, datetime, timedelta
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
    error_line,
    read_records,
    show,
)
from podnet.app.statuswhy import (
    EXIT_UNKNOWN,
    Scene,
    leader_row,
    pod_key,
    read_scene,
    unknown_name,
    why_no_record,
)

__all__ = [
    "add_status_arguments",
    "run_status",
    "status_report",
]


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    cluster_arguments(parser)
    parser.add_argument("--node", default=None,
                        help="only this node, its pods and its agent (exit 1 when no Node, "
                             "record or agent report has that name)")
    parser.add_argument("--namespace", default=None,
                        help="only pods in this namespace")
    parser.add_argument("--pod", default=None, type=_pod_name, metavar="NAMESPACE/NAME",
                        help="only this pod: its networks, or why it has none yet (not "
                             "scheduled, host network, its node not served, no leader), its "
                             "node and its node's agent (exit 1 when no Pod or record has "
                             "that name)")
    parser.add_argument("--agent-namespace", default="kube-system",
                        help="podnet's namespace, where the node agents report and the "
                             "controller's leader Lease is (the config's "
                             "leaderElection.namespace; default %(default)s)")
    parser.add_argument("--leader-lease", default="podnet",
                        help="the controller's leader Lease (the config's "
                             "leaderElection.name; default %(default)s)")
    parser.add_argument("--policies", action="store_true",
                        help="also each NetworkPolicy: its members, the nodes that "
                             "programmed it and those pending, what of it is not enforced")



STATUS_EPILOG = """\
what it shows, and how to read it:
  leader        which controller replica leads (the Lease): held, or missing, released
                or expired, when no replica writes and so no pod gets a network
  pod networks  each pod's networks and phase; a pod without a record (phase NoRecord)
                says why: not scheduled, or not made yet (waiting); host network,
                finished, past its deletion grace (none is due: shown with --pod only);
                its node missing, served by no provider (the controller's Warning Event
                on the Node), or no leader (a problem); a pod whose node agent is not
                live says so (its sandbox cannot be plumbed)
  node agents   live, stale (not renewed: the agent is down or cut off) or missing
output:
  boxes on a terminal; plain columns when piped (empty cells are -, one row a line);
  -o json for scripts, every view included
exit status:
  0 shown; 1 --node or --pod names nothing; 2 a usage, kubeconfig or API server
  problem (one line on stderr)
"""


def _pod_name(text: str) -> str:
    namespace, _, name = text.partition("/")
    if not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"expected NAMESPACE/NAME, got {text!r}")
    return text


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
            # what an interface holding no pool address is there for (None: the pool's)
            "role": ("trunk" if itf.trunk else "primary" if itf.primary
                     else None if itf.pooled else "unpooled"),
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


#: seconds an agent's report stays its writer's after its last renewal, when the Lease
#: does not say (``podnet.core.objects.AGENT_LEASE_SECONDS``: not imported at start)
_AGENT_LEASE_SECONDS = 60


def _agent_state(report: Any, now: datetime) -> tuple[str, str | None, str | None]:
    """(state, when the report runs out, why it is not live): ``live`` while renewed
    within its Lease's duration, ``stale`` once not (the agent is dead or cut off from
    the API server: its heartbeat renews every third of the duration)."""
    duration = report.lease_seconds or _AGENT_LEASE_SECONDS
    if report.renew_time is None:
        return "stale", None, "its report was never renewed (no renewTime)"
    expires = report.renew_time + timedelta(seconds=duration)
    if expires > now:
        return "live", format_time(expires), None
    ago = int((now - report.renew_time).total_seconds())
    return "stale", format_time(expires), (
        f"its report was last renewed {ago} s ago (renewed every {duration // 3} s, "
        f"runs out after {duration} s): the agent is down or cannot reach the API server")


def status_report(records: Records, *, node: str | None = None,
                  namespace: str | None = None,
                  policies: Sequence[Mapping[str, Any]] | None = None,
                  now: datetime | None = None, scene: Scene | None = None,
                  pod: str | None = None) -> dict[str, Any]:
    """``{"nodes": [...], "pods": [...], "agents": [...], "subnets": [...],
    "ip_pools": [...]}``, rows sorted by name; every row of a list has the same keys,
    unreadable records included (their fields null, ``error`` set). ``node`` narrows the
    nodes, pods and agents, ``namespace`` the pods; pool counts always use every record.
    A Subnet's and an IPPool's counts are what their status says (the controller keeps
    them), ``None`` where it says nothing yet. With ``policies`` (the NetworkPolicy
    objects), ``"policies"`` too (:func:`policy_row`; ``namespace`` narrows them).

    ``agents`` has a row per node agent's report and per node podnet serves (it has a
    NodeNetwork or PodNetworks) without one: ``state`` is ``live``, ``stale`` (not
    renewed within its Lease's duration as of ``now``, default the present) or
    ``missing`` (no report), ``problem`` says why in a sentence.

    With ``scene`` (the Pods, Nodes, Warnings and Lease), ``"leader"`` too
    (:func:`leader_row`), and a row for each pod without a record that is due one or
    waits for one, its ``no_record`` saying why (:func:`why_no_record`; a pod on the host
    network or finished is listed only when ``pod`` names it). Every pod row has ``node``,
    ``no_record`` (None: it has records) and ``agent``: its node's agent when not live
    (``{"state", "problem"}``), else None. ``pod`` (``namespace/name``) narrows to that
    pod, its node and its node's agent."""
    now = now or datetime.now(UTC)
    target: tuple[str, str] | None = None
    if pod is not None:
        namespace, _, pod_name = pod.partition("/")
        target = (namespace, pod_name)
        pod_node = next((dig(p, "spec", "nodeName") for p in (scene.pods if scene else ())
                         if pod_key(p) == target), None) or next(
            (pn.spec.node_name for pn in records.pod_networks
             if (pn.metadata.namespace, pn.spec.pod_name) == target), None)
        if node is None:
            node = pod_node or ""  # not scheduled: no node of its own ("" names none)
    owned = address_owners(records)
    nodes = [_node_row(nn, owned) for nn in records.node_networks
             if node is None or nn.metadata.name == node]
    pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for pn in records.pod_networks:
        if (node is None or pn.spec.node_name == node) and (
                namespace is None or pn.metadata.namespace == namespace):
            pods.setdefault((pn.metadata.namespace or "", pn.spec.pod_name), []).append(
                _network_row(pn))
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
            bad_namespace, _, name = bad.name.partition("/")
            # its pod is unknown when the record does not parse: list it under its own name
            pods.setdefault((bad_namespace, name), []).append({
                "record": name, "network": None, "provider": bad.provider, "phase": None,
                "ip": None, "ipv6": None, "node": bad.node, "interface": None,
                "not_ready": None, "error": bad.error,
            })
    from podnet.core.models import Phase
    from podnet.core.unplug import acknowledged

    def waiting_on(name: str, report: Any) -> list[str]:
        # Releasing records of the node whose interfaces its report does not say are gone
        # (in the word of the host that plugged them): their addresses wait (the release
        # handshake)
        return sorted(pn.key for pn in records.pod_networks
                      if pn.spec.node_name == name and pn.status.phase is Phase.RELEASING
                      and not acknowledged(pn, report))

    agents = []
    for report in records.agents:
        if node is not None and report.node != node:
            continue
        state, expires, problem = _agent_state(report, now)
        agents.append({"node": report.node, "holder": report.holder, "edited": report.edited,
                       "plugged": len(report.plugged),
                       "waiting_for_unplug": waiting_on(report.node, report),
                       "reported": _time(report.renew_time),
                       "eni_dataplane": _dataplane_row(records.dataplane_of(report.node)),
                       "state": state, "expires": expires, "problem": problem})
    # the nodes podnet serves whose agent never reported (or whose report was deleted)
    reported = {r.node for r in records.agents}
    served = ({nn.metadata.name for nn in records.node_networks}
              | {pn.spec.node_name for pn in records.pod_networks if pn.spec.node_name}
              | {bad.node for bad in records.unreadable if bad.node})
    for name in sorted(served - reported):
        if node is not None and name != node:
            continue
        agents.append({"node": name, "holder": None, "edited": False, "plugged": 0,
                       "waiting_for_unplug": waiting_on(name, None), "reported": None,
                       "eni_dataplane": None, "state": "missing", "expires": None,
                       "problem": "no report: no agent has run on this node, or its "
                                  "report was deleted"})
    agents.sort(key=lambda a: str(a["node"]))
    if target is not None:
        pods = {k: v for k, v in pods.items() if k == target}
    extra: dict[str, Any] = {}
    pod_nodes: dict[tuple[str, str], str | None] = {}
    no_record: dict[tuple[str, str], dict[str, Any]] = {}
    if scene is not None:
        leader = extra["leader"] = leader_row(scene, now)
        recorded = {(pn.metadata.namespace or "", pn.spec.pod_name)
                    for pn in records.pod_networks} | {
            tuple(bad.name.partition("/")[::2]) for bad in records.unreadable
            if bad.kind == "PodNetwork"}
        by_name = {dig(n, "metadata", "name") or "": n for n in scene.nodes}
        for p in scene.pods:
            key = pod_key(p)
            pod_nodes[key] = dig(p, "spec", "nodeName")
            if key in recorded or (target is not None and key != target) or (
                    namespace is not None and key[0] != namespace) or (
                    node is not None and pod_nodes[key] != node):
                continue
            why = why_no_record(p, by_name, scene, leader, served, now)
            if why["state"] == "expected" and target is None:
                continue  # no network is due: listed only when asked for by name
            pods[key] = []
            no_record[key] = why
    live = {a["node"]: a for a in agents}

    def agent_of(node_name: str | None) -> dict[str, Any] | None:
        row = live.get(node_name)
        if row is None or row["state"] == "live":
            return None
        return {"state": row["state"], "problem": row["problem"]}

    def pod_row(key: tuple[str, str], rows: list[dict[str, Any]]) -> dict[str, Any]:
        where = pod_nodes.get(key) or next((r["node"] for r in rows if r["node"]), None)
        return {"namespace": key[0], "name": key[1], "node": where,
                "networks": sorted(rows, key=lambda r: (str(r["network"]), str(r["record"]))),
                "no_record": no_record.get(key),
                # the agent matters once the pod is due a network
                "agent": None if no_record.get(key, {}).get("state") == "expected"
                else agent_of(where)}

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
        "pods": [pod_row(key, rows) for key, rows in sorted(pods.items())],
    }


def run_status(args: argparse.Namespace) -> int:
    from podnet.core.cluster.port import ApiError
    from podnet.core.errors import ConfigError

    namespace = args.namespace
    if args.pod is not None:
        in_namespace = args.pod.partition("/")[0]
        if namespace is not None and namespace != in_namespace:
            print(f"podnet status: --pod {args.pod} is not in --namespace {namespace}",
                  file=sys.stderr)
            return EXIT_USAGE
        namespace = in_namespace
    policies: list[Mapping[str, Any]] | None = None
    try:
        with connect(args) as cluster:
            records = read_records(cluster, agent_namespace=args.agent_namespace)
            scene = read_scene(cluster, namespace=namespace,
                               lease_namespace=args.agent_namespace,
                               lease_name=args.leader_lease)
            if args.policies:
                policies = _read_policies(cluster, namespace)
    except (ConfigError, ApiError) as exc:
        print(f"podnet status: {error_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    unknown = unknown_name(records, scene, node=args.node, pod=args.pod)
    if unknown is not None:
        print(f"podnet status: {unknown}", file=sys.stderr)
        return EXIT_UNKNOWN
    report = status_report(records, node=args.node, namespace=namespace,
                           policies=policies, scene=scene, pod=args.pod)
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
            role = f" ({itf['role']})" if itf.get("role") else ""
            nodes.add_row(*head, f"{itf['id']}{role}", itf["state"], cell(itf["subnet"]),
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
        agent = p.get("agent")
        agent_said = f"node agent {agent['state']}: {agent['problem']}" if agent else ""
        why = p.get("no_record")
        if why is not None:
            # one word in the phase column (plain output is split on spaces)
            pods.add_row(pod, "", "", "NoRecord", "", "", cell(p.get("node")), "",
                         "\n".join(x for x in (
                             f"{why['state']}: {why['reason']}: {why['message']}",
                             agent_said) if x))
        for net in p["networks"]:
            problem = f"invalid: {net['error']}" if net["error"] else _problem(net["not_ready"])
            if agent_said and net["phase"] != "Releasing":
                problem = "\n".join(x for x in (problem, agent_said) if x)
            pods.add_row(pod, cell(net["network"]), cell(net["provider"]), cell(net["phase"]),
                         cell(net["ip"]), cell(net["ipv6"]), cell(net["node"]),
                         cell(net["interface"]), problem)
            pod = ""
    agents = Table(title="node agents")
    for col in ("node", "agent", "holder", "interfaces", "waiting for unplug", "reported",
                "ENI devices", "problem"):
        agents.add_column(col, justify="right" if col == "interfaces" else "left")
    for a in report["agents"]:
        holder = cell(a["holder"]) + (" (edited by hand)" if a["edited"] else "")
        agents.add_row(a["node"], a["state"], holder, str(a["plugged"]),
                       ", ".join(a["waiting_for_unplug"]), cell(a["reported"]),
                       _devices_cell(a["eni_dataplane"]), a["problem"] or "")
    items: list[Any] = []
    if "leader" in report:
        items.append(_leader_table(report["leader"]))
    if report["subnets"]:
        items.append(_subnets_table(report["subnets"]))
    if report["ip_pools"]:
        items.append(_pools_table(report["ip_pools"]))
    items += [nodes, pods]
    if report["agents"]:
        items.append(agents)
    if "policies" in report:
        items.append(_policies_table(report["policies"]))
    show(*items)


def _leader_table(row: Mapping[str, Any]) -> Any:
    from rich.table import Table

    table = Table(title="leader")
    for col in ("lease", "state", "holder", "renewed", "expires", "problem"):
        table.add_column(col)
    table.add_row(row["lease"], row["state"], cell(row["holder"]), cell(row["renewed"]),
                  cell(row["expires"]), row["problem"] or "")
    return table


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
