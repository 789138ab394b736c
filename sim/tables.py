"""Server-side tables (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``) of the
built-in kinds, with kube-apiserver's columns and cells.

Each kind's columns, their types and priorities (1: shown by ``-o wide`` only) and the
cell rules are upstream's printers (pkg/printers/internalversion/printers.go: ``printPod``,
``printNode``, ``printEvent``, ``printNamespace``, ``printConfigMap``, ``printSecret``,
``printServiceAccount``, ``printLease``, ``printService``, ``printStatefulSet``,
``printNetworkPolicy``). The server fills every column, wide ones included (its table
convertor asks for Wide), and kubectl hides those of priority 1 unless ``-o wide``.
Descriptions are upstream's where printers.go spells them out; those it takes from the
API's field docs are left empty.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

from podnet.core.cluster.port import (
    EVENT,
    LEASE,
    NAMESPACE,
    NETWORK_POLICY,
    NODE,
    POD,
    STATEFUL_SET,
    Kind,
    Obj,
)

from .kinds import CONFIG_MAP, SECRET, SERVICE, SERVICE_ACCOUNT

__all__ = ["Since", "columns_of", "has_table", "rows_of"]

#: the age of a timestamp as the printers show it (None: no timestamp, shown as <unknown>)
Since = Callable[[Any], "str | None"]
Row = Callable[[Obj, "Since"], tuple[list[Any], list[Obj]]]

_NAME_DOC: Final = (
    "Name must be unique within a namespace. Is required when creating resources, although "
    "some resources may allow a client to request the generation of an appropriate name "
    "automatically. Name is primarily intended for creation idempotence and configuration "
    "definition. Cannot be updated. More info: "
    "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
)
_AGE_DOC: Final = (
    "CreationTimestamp is a timestamp representing the server time when this object was "
    "created. It is not guaranteed to be set in happens-before order across separate "
    "operations. Clients may not set this value. It is represented in RFC3339 form and is "
    "in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"
    "#metadata"
)


def _col(name: str, priority: int = 0, description: str = "", type_: str = "string",
         format_: str = "") -> Obj:
    return {"name": name, "type": type_, "format": format_, "description": description,
            "priority": priority}


_NAME: Final = _col("Name", description=_NAME_DOC, format_="name")
_AGE: Final = _col("Age", description=_AGE_DOC)


def _get(obj: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _since(since: Since, timestamp: Any) -> str:
    # translateTimestampSince: a zero time is <unknown>
    return since(timestamp) or "<unknown>"


def _name(obj: Obj) -> str:
    return str(_get(obj, "metadata", "name") or "")


def _age(obj: Obj, since: Since) -> str:
    return _since(since, _get(obj, "metadata", "creationTimestamp"))


# --- pods -----------------------------------------------------------------------------

_POD_COLUMNS: Final = (
    _NAME,
    _col("Ready", description="The aggregate readiness state of this pod for accepting "
         "traffic."),
    _col("Status", description="The aggregate status of the containers in this pod."),
    _col("Restarts", description="The number of times the containers in this pod have been "
         "restarted and when the last container in this pod has restarted."),
    _AGE,
    _col("IP", 1),
    _col("Node", 1),
    _col("Nominated Node", 1),
    _col("Readiness Gates", 1),
)
_POD_DONE: Final = {
    "Succeeded": [{"type": "Completed", "status": "True", "reason": "Succeeded",
                   "message": "The pod has completed successfully."}],
    "Failed": [{"type": "Completed", "status": "True", "reason": "Failed",
                "message": "The pod failed."}],
}


def _terminated_reason(term: Obj, prefix: str = "") -> str:
    if term.get("reason"):
        return prefix + str(term["reason"])
    if term.get("signal"):
        return f"{prefix}Signal:{term['signal']}"
    return f"{prefix}ExitCode:{term.get('exitCode') or 0}"


def _later(current: str | None, candidate: Any) -> str | None:
    if isinstance(candidate, str) and candidate and (current is None or candidate > current):
        return candidate
    return current


def _pod_row(pod: Obj, since: Since) -> tuple[list[Any], list[Obj]]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    conditions = [c for c in status.get("conditions") or () if isinstance(c, dict)]
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    if any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
           for c in conditions):
        reason = "SchedulingGated"
    init_specs = {c.get("name"): c for c in spec.get("initContainers") or ()
                  if isinstance(c, dict)}
    sidecars = {n for n, c in init_specs.items() if c.get("restartPolicy") == "Always"}
    total = len(spec.get("containers") or ()) + len(sidecars)
    ready = restarts = sidecar_restarts = 0
    last_restart: str | None = None
    last_sidecar_restart: str | None = None
    initializing = False
    for i, cs in enumerate(status.get("initContainerStatuses") or ()):
        state = cs.get("state") or {}
        finished = _get(cs, "lastState", "terminated", "finishedAt")
        restarts += int(cs.get("restartCount") or 0)
        last_restart = _later(last_restart, finished)
        sidecar = cs.get("name") in sidecars
        if sidecar:
            sidecar_restarts += int(cs.get("restartCount") or 0)
            last_sidecar_restart = _later(last_sidecar_restart, finished)
        term, waiting = state.get("terminated"), state.get("waiting")
        if term is not None and (term.get("exitCode") or 0) == 0:
            continue
        if sidecar and cs.get("started"):
            ready += 1 if cs.get("ready") else 0
            continue
        if term is not None:
            reason = _terminated_reason(term, "Init:")
        elif waiting and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            reason = "Init:" + str(waiting["reason"])
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break
    initialized = any(c.get("type") == "Initialized" and c.get("status") == "True"
                      for c in conditions)
    if not initializing or initialized:
        restarts, last_restart = sidecar_restarts, last_sidecar_restart
        running = False
        for cs in reversed(status.get("containerStatuses") or ()):
            state = cs.get("state") or {}
            restarts += int(cs.get("restartCount") or 0)
            last_restart = _later(last_restart, _get(cs, "lastState", "terminated", "finishedAt"))
            waiting, term = state.get("waiting"), state.get("terminated")
            if waiting and waiting.get("reason"):
                reason = str(waiting["reason"])
            elif term is not None:
                reason = _terminated_reason(term)
            elif cs.get("ready") and state.get("running") is not None:
                running = True
                ready += 1
        if reason == "Completed" and running:
            has_ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in conditions)
            reason = "Running" if has_ready else "NotReady"
    deleting = bool(_get(pod, "metadata", "deletionTimestamp"))
    if deleting and status.get("reason") == "NodeLost":
        reason = "Unknown"
    elif deleting and phase not in ("Succeeded", "Failed"):
        reason = "Terminating"
    shown_restarts = str(restarts)
    if restarts and last_restart:
        shown_restarts = f"{restarts} ({_since(since, last_restart)} ago)"
    ips = status.get("podIPs") or []
    ip = (ips[0].get("ip") if ips and isinstance(ips[0], dict) else None) or status.get("podIP")
    gates = spec.get("readinessGates") or []
    shown_gates = "<none>"
    if gates:
        by_type: dict[Any, Obj] = {}
        for c in conditions:
            by_type.setdefault(c.get("type"), c)  # the first of a type counts, as upstream
        true = sum(1 for g in gates
                   if _get(by_type.get(g.get("conditionType")), "status") == "True")
        shown_gates = f"{true}/{len(gates)}"
    cells = [_name(pod), f"{ready}/{total}", reason, shown_restarts, _age(pod, since),
             ip or "<none>", spec.get("nodeName") or "<none>",
             status.get("nominatedNodeName") or "<none>", shown_gates]
    return cells, list(_POD_DONE.get(phase, ()))


# --- nodes ----------------------------------------------------------------------------

_NODE_COLUMNS: Final = (
    _NAME,
    _col("Status", description="The status of the node"),
    _col("Roles", description="The roles of the node"),
    _AGE,
    _col("Version"),
    _col("Internal-IP", 1),
    _col("External-IP", 1),
    _col("OS-Image", 1),
    _col("Kernel-Version", 1),
    _col("Container-Runtime", 1),
)
_ROLE_PREFIX: Final = "node-role.kubernetes.io/"


def _node_address(node: Obj, kind: str) -> str:
    for addr in _get(node, "status", "addresses") or ():
        if isinstance(addr, dict) and addr.get("type") == kind:
            return str(addr.get("address") or "")
    return "<none>"


def _node_row(node: Obj, since: Since) -> tuple[list[Any], list[Obj]]:
    status = []
    for cond in _get(node, "status", "conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            status = ["Ready" if cond.get("status") == "True" else "NotReady"]
    status = status or ["Unknown"]
    if _get(node, "spec", "unschedulable"):
        status.append("SchedulingDisabled")
    roles = set()
    for key, value in (_get(node, "metadata", "labels") or {}).items():
        if key.startswith(_ROLE_PREFIX) and key[len(_ROLE_PREFIX):]:
            roles.add(key[len(_ROLE_PREFIX):])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = _get(node, "status", "nodeInfo") or {}
    cells = [_name(node), ",".join(status), ",".join(sorted(roles)) or "<none>",
             _age(node, since), info.get("kubeletVersion") or "",
             _node_address(node, "InternalIP"), _node_address(node, "ExternalIP"),
             info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
             info.get("containerRuntimeVersion") or "<unknown>"]
    return cells, []


# --- events ---------------------------------------------------------------------------

_EVENT_COLUMNS: Final = (
    _col("Last Seen"),
    _col("Type"),
    _col("Reason"),
    _col("Object"),
    _col("Subobject", 1),
    _col("Source", 1),
    _col("Message"),
    _col("First Seen", 1),
    _col("Count", 1),
    _col("Name", 1, format_="name"),
)


def _event_source(ev: Obj) -> str:
    source = ev.get("source") or {}
    component = source.get("component") or ev.get("reportingComponent") or ""
    instance = source.get("host") or ev.get("reportingInstance") or ""
    if not component:
        return ""
    return f"{component}, {instance}" if instance else component


def _event_row(ev: Obj, since: Since) -> tuple[list[Any], list[Obj]]:
    first = (_since(since, ev["firstTimestamp"]) if ev.get("firstTimestamp")
             else _since(since, ev.get("eventTime")))
    last = _since(since, ev["lastTimestamp"]) if ev.get("lastTimestamp") else first
    count = int(ev.get("count") or 0)
    series = ev.get("series")
    if isinstance(series, dict):
        last = _since(since, series.get("lastObservedTime"))
        count = int(series.get("count") or 0)
    elif count == 0:
        count = 1  # singleton events of the new API carry no count
    ref = ev.get("involvedObject") or {}
    kind = str(ref.get("kind") or "").lower()
    target = f"{kind}/{ref['name']}" if ref.get("name") else kind
    cells = [last, ev.get("type") or "", ev.get("reason") or "", target,
             ref.get("fieldPath") or "", _event_source(ev),
             str(ev.get("message") or "").strip(), first, count, _name(ev)]
    return cells, []


# --- the smaller kinds ----------------------------------------------------------------


def _simple(*cells: Callable[[Obj], Any], age_at: int | None = None) -> Row:
    """Name, then ``cells``, with Age at position ``age_at`` (after all when None)."""

    def row(obj: Obj, since: Since) -> tuple[list[Any], list[Obj]]:
        out = [_name(obj), *(c(obj) for c in cells)]
        out.insert(len(out) if age_at is None else age_at, _age(obj, since))
        return out, []

    return row


def _data_count(obj: Obj) -> int:
    return len(obj.get("data") or {}) + len(obj.get("binaryData") or {})


def _service_external_ip(svc: Obj) -> str:
    spec = svc.get("spec") or {}
    external = [str(ip) for ip in spec.get("externalIPs") or ()]
    kind = spec.get("type") or "ClusterIP"
    if kind in ("ClusterIP", "NodePort"):
        return ",".join(external) or "<none>"
    if kind == "LoadBalancer":
        lb = [str(i.get("ip") or i.get("hostname") or "")
              for i in _get(svc, "status", "loadBalancer", "ingress") or ()
              if isinstance(i, dict)]
        return ",".join([p for p in lb if p] + external) or "<pending>"
    if kind == "ExternalName":
        return str(spec.get("externalName") or "")
    return "<unknown>"


def _service_ports(svc: Obj) -> str:
    pieces = []
    for port in _get(svc, "spec", "ports") or ():
        proto = port.get("protocol") or "TCP"
        if port.get("nodePort"):
            pieces.append(f"{port.get('port')}:{port['nodePort']}/{proto}")
        else:
            pieces.append(f"{port.get('port')}/{proto}")
    return ",".join(pieces) or "<none>"


def _selector(svc: Obj) -> str:
    sel = _get(svc, "spec", "selector") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(sel.items())) or "<none>"


def _cluster_ip(svc: Obj) -> str:
    ips = _get(svc, "spec", "clusterIPs") or []
    return str(ips[0]) if ips else "<none>"


def _containers(obj: Obj, key: str) -> str:
    found = _get(obj, "spec", "template", "spec", "containers") or ()
    return ",".join(str(c.get(key) or "") for c in found if isinstance(c, dict))


def _replicas(sts: Obj) -> str:
    want = _get(sts, "spec", "replicas")
    return f"{_get(sts, 'status', 'readyReplicas') or 0}/{1 if want is None else want}"


_SELECTOR_OPERATORS: Final = {"In": " in ", "NotIn": " notin ", "Exists": "",
                                "DoesNotExist": ""}


def format_label_selector(selector: Any) -> str:
    """``metav1.FormatLabelSelector``: the selector as ``labels.Selector.String`` spells
    it (requirements sorted by key, set values sorted), ``<none>`` when it selects
    everything, ``<error>`` when it cannot be made a selector."""
    if not isinstance(selector, dict):
        return "<none>"
    found: list[tuple[str, str]] = []
    for key, value in sorted((selector.get("matchLabels") or {}).items()):
        found.append((key, f"{key}={value}"))
    for expr in selector.get("matchExpressions") or ():
        if not isinstance(expr, dict):
            return "<error>"
        key, op = str(expr.get("key") or ""), expr.get("operator")
        values = sorted(str(v) for v in expr.get("values") or ())
        if op not in _SELECTOR_OPERATORS or bool(values) != (op in ("In", "NotIn")):
            return "<error>"
        if op in ("In", "NotIn"):
            found.append((key, f"{key}{_SELECTOR_OPERATORS[op]}({','.join(values)})"))
        else:
            found.append((key, f"!{key}" if op == "DoesNotExist" else key))
    found.sort(key=lambda r: r[0])  # labels.Selector.Add sorts by key
    return ",".join(text for _, text in found) or "<none>"


_TABLES: Final[dict[Kind, tuple[Sequence[Obj], Row]]] = {
    POD: (_POD_COLUMNS, _pod_row),
    NODE: (_NODE_COLUMNS, _node_row),
    EVENT: (_EVENT_COLUMNS, _event_row),
    NAMESPACE: ((_NAME, _col("Status", description="The status of the namespace"), _AGE),
                _simple(lambda o: _get(o, "status", "phase") or "")),
    CONFIG_MAP: ((_NAME, _col("Data"), _AGE), _simple(_data_count)),
    SECRET: ((_NAME, _col("Type"), _col("Data"), _AGE),
              _simple(lambda o: o.get("type") or "", lambda o: len(o.get("data") or {}))),
    SERVICE_ACCOUNT: ((_NAME, _col("Secrets"), _AGE),
                       _simple(lambda o: len(o.get("secrets") or ()))),
    LEASE: ((_NAME, _col("Holder"), _AGE),
            _simple(lambda o: _get(o, "spec", "holderIdentity") or "")),
    SERVICE: ((_NAME, _col("Type"), _col("Cluster-IP"), _col("External-IP"),
                    _col("Port(s)"), _AGE, _col("Selector", 1)),
                   _simple(lambda o: _get(o, "spec", "type") or "", _cluster_ip,
                           _service_external_ip, _service_ports, _selector, age_at=5)),
    STATEFUL_SET: ((_NAME, _col("Ready", description="Number of the pod with ready state"),
                    _AGE, _col("Containers", 1), _col("Images", 1)),
                   _simple(_replicas, lambda o: _containers(o, "name"),
                           lambda o: _containers(o, "image"), age_at=2)),
    NETWORK_POLICY: ((_NAME, _col("Pod-Selector"), _AGE),
                     _simple(lambda o: format_label_selector(_get(o, "spec", "podSelector")))),
}


def has_table(kind: Kind) -> bool:
    return kind in _TABLES


def columns_of(kind: Kind) -> list[Obj]:
    return [dict(c) for c in _TABLES[kind][0]]


def rows_of(kind: Kind, objs: Sequence[Obj], since: Since) -> list[tuple[list[Any], list[Obj]]]:
    """Each object's cells and row conditions, in the order of :func:`columns_of`."""
    row = _TABLES[kind][1]
    return [row(obj, since) for obj in objs]
