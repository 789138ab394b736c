"""Why a pod has no network yet, for ``podnet status``: what besides the records says so
(the Pods, the Nodes, the controller's Warnings on a node no provider serves, the leader
Lease), read once, and the names a filter asks for that the cluster does not have.

Imported when ``status`` runs (standard library, attrs and the clock at import time)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import attrs

from podnet.app.records import Records, dig
from podnet.core.clock import format_time

__all__ = [
    "EXIT_UNKNOWN",
    "UNSERVED_REASONS",
    "Scene",
    "leader_row",
    "pod_key",
    "read_scene",
    "unknown_name",
    "why_no_record",
]


def _part(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


@attrs.frozen
class Scene:
    """What besides the records says why a pod has no network: the Pods and Nodes, the
    controller's Warnings that a node is served by no provider, the leader Lease."""

    pods: tuple[Mapping[str, Any], ...] = ()
    nodes: tuple[Mapping[str, Any], ...] = ()
    #: node name -> (reason, message, when) of the controller's last NoProvider or
    #: UnknownProvider Warning on it
    unserved: Mapping[str, tuple[str, str, str | None]] = attrs.field(factory=dict)
    #: the leader Lease as served; None: there is none
    lease: Mapping[str, Any] | None = None
    lease_name: str = "kube-system/podnet"


#: the node reconciler's reasons for a node no provider serves (core.placement)
UNSERVED_REASONS = ("NoProvider", "UnknownProvider")


def read_scene(cluster: Any, *, namespace: str | None, lease_namespace: str,
               lease_name: str) -> Scene:
    """The Pods (of ``namespace``), Nodes, Node Warnings and the leader Lease, each
    listed once."""
    from podnet.core.cluster.port import EVENT, LEASE, NODE, POD, NotFound

    pods = tuple(cluster.list(POD, namespace).items)
    nodes = tuple(cluster.list(NODE).items)
    unserved: dict[str, tuple[str, str, str | None]] = {}
    events = cluster.list(EVENT, None, field_selector="involvedObject.kind=Node").items
    for ev in sorted(events, key=lambda e: str(e.get("lastTimestamp") or "")):
        if ev.get("reason") in UNSERVED_REASONS:
            name = dig(ev, "involvedObject", "name") or ""
            unserved[name] = (str(ev["reason"]), str(ev.get("message") or ""),
                              ev.get("lastTimestamp"))
    try:
        lease: Mapping[str, Any] | None = cluster.get(LEASE, lease_name, lease_namespace)
    except NotFound:
        lease = None
    return Scene(pods, nodes, unserved, lease, f"{lease_namespace}/{lease_name}")


def leader_row(scene: Scene, now: datetime) -> dict[str, Any]:
    """Which replica leads, as the Lease says: ``state`` is ``held``, ``expired`` (not
    renewed within its duration: the leader is down or cut off), ``released`` (its holder
    gave it up) or ``missing`` (no Lease), ``problem`` says what that means."""
    from podnet.core.clock import parse_time

    row: dict[str, Any] = {"lease": scene.lease_name, "holder": None, "state": "missing",
                           "renewed": None, "expires": None, "problem": None}
    lease = scene.lease
    if lease is None:
        row["problem"] = (f"no Lease {scene.lease_name}: no controller has run with leader "
                          "election here (a controller run with --no-leader-elect takes "
                          "none; --agent-namespace and --leader-lease name another)")
        return row
    spec = _part(lease, "spec")
    holder = spec.get("holderIdentity") or None
    row["holder"] = holder
    renewed = spec.get("renewTime")
    when = None
    if isinstance(renewed, str):
        try:
            when = parse_time(renewed)
        except ValueError:
            when = None
    row["renewed"] = None if when is None else format_time(when)
    if holder is None:
        row["state"] = "released"
        row["problem"] = "its last holder released it: no replica leads, none writes"
        return row
    duration = spec.get("leaseDurationSeconds")
    duration = duration if isinstance(duration, int) and duration > 0 else 15
    if when is None:
        row["state"] = "expired"
        row["problem"] = f"held by {holder}, never renewed: no replica surely leads"
        return row
    expires = when + timedelta(seconds=duration)
    row["expires"] = format_time(expires)
    if expires > now:
        row["state"] = "held"
        return row
    ago = int((now - when).total_seconds())
    row["state"] = "expired"
    row["problem"] = (f"{holder} last renewed it {ago} s ago (it runs out after "
                      f"{duration} s): no replica leads, none writes; the controller is "
                      "down or cannot reach the API server")
    return row


def pod_key(pod: Mapping[str, Any]) -> tuple[str, str]:
    return dig(pod, "metadata", "namespace") or "", dig(pod, "metadata", "name") or ""


def why_no_record(pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]],
                  scene: Scene, leader: Mapping[str, Any], served: set[str],
                  now: datetime) -> dict[str, Any]:
    """Why a pod has no PodNetwork, as the controller decides (``podnet_desired``'s
    order): ``state`` is ``expected`` (no network is due), ``waiting`` (one will be, by
    itself) or ``problem`` (none will be until someone acts); ``reason`` a word,
    ``message`` a sentence."""
    from podnet.core.clock import parse_time

    key = "/".join(pod_key(pod))
    spec, status = _part(pod, "spec"), _part(pod, "status")
    node_name = spec.get("nodeName")

    def said(state: str, reason: str, message: str) -> dict[str, Any]:
        return {"state": state, "reason": reason, "message": message}

    if spec.get("hostNetwork") is True:
        return said("expected", "HostNetwork", f"pod {key} uses its node's network "
                    "(hostNetwork): podnet gives it none")
    if not node_name:
        return said("waiting", "NotScheduled", f"pod {key} is not scheduled to a node yet: "
                    "its network is set up on the node it is bound to")
    if status.get("phase") in ("Succeeded", "Failed"):
        return said("expected", "Finished", f"pod {key} has finished "
                    f"({status.get('phase')}): its networks were given back")
    deleting = dig(pod, "metadata", "deletionTimestamp")
    if deleting is not None:
        try:
            past = parse_time(deleting) <= now
        except ValueError:
            past = False
        if past:
            return said("expected", "Terminating", f"pod {key} is past its deletion "
                        "grace: its networks are given back")
    node = nodes.get(node_name)
    if node is None:
        return said("problem", "NodeMissing", f"pod {key} is bound to node {node_name}, "
                    "which does not exist: no network is set up for it until it is there")
    if dig(node, "metadata", "deletionTimestamp") is not None:
        return said("expected", "NodeLeaving", f"its node {node_name} is being deleted: "
                    "no network is set up on it")
    warning = scene.unserved.get(node_name)
    if warning is not None and node_name not in served:
        reason, message, when = warning
        return said("problem", reason, message + (f" (the controller's Warning on node "
                                                  f"{node_name}, {when})" if when else ""))
    if leader["state"] != "held":
        return said("problem", "NoLeader", f"no record yet, and none is made while the "
                    f"Lease {leader['lease']} is {leader['state']}: {leader['problem']}")
    return said("waiting", "NoRecordYet", f"no record yet: the leader {leader['holder']} "
                "has not made one (a new pod gets one within seconds; if it lasts, look "
                f"for pod {key} in the controller's log and Events)")


#: exit status when --node or --pod names nothing (kubectl get's, for a
#: name not found); 2 stays a usage or connection problem
EXIT_UNKNOWN = 1


def unknown_name(records: Records, scene: Scene, *, node: str | None,
                 pod: str | None) -> str | None:
    """What a filter names that the cluster does not have, in a line; None: all known.
    A name is known while anything podnet shows has it: a node gone with its records
    left is still a node to ask about."""
    if node is not None and node not in (
            {dig(n, "metadata", "name") for n in scene.nodes}
            | {nn.metadata.name for nn in records.node_networks}
            | {pn.spec.node_name for pn in records.pod_networks}
            | {bad.node for bad in records.unreadable} | {a.node for a in records.agents}):
        return f"--node {node}: no Node, record or agent report has that name"
    if pod is not None:
        target = tuple(pod.partition("/")[::2])
        if target not in ({pod_key(p) for p in scene.pods}
                          | {(pn.metadata.namespace or "", pn.spec.pod_name)
                             for pn in records.pod_networks}
                          | {tuple(bad.name.partition("/")[::2])
                             for bad in records.unreadable if bad.kind == "PodNetwork"}):
            return f"--pod {pod}: no Pod or PodNetwork has that name"
    # a --namespace with nothing in it is a filter that matched nothing, as for kubectl
    return None
