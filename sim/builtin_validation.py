"""Upstream's Go validation of the built-in kinds, the rules a pod network's tests meet.

Each function names the upstream function it follows (``pkg/apis/core/validation/
validation.go`` unless said otherwise; apimachinery's name and label rules and the
``field.Error`` wording are :mod:`podnet.sim.field_rules`). What is checked:

* every kind: ``metadata.name`` (DNS-1123 subdomain; a label for namespaces),
  ``metadata.labels`` keys and values, ``metadata.annotations`` keys and total size;
* pods (``ValidatePodCreate``/``ValidatePodSpec``): at least one container, unique
  container names across init and regular containers, DNS-label names, an image, the
  enums (``restartPolicy``, ``dnsPolicy``, ``imagePullPolicy``, port ``protocol``, toleration
  ``operator``/``effect``), port ranges, ``nodeName``, ``nodeSelector``,
  ``activeDeadlineSeconds``; on update ``ValidatePodUpdate``'s immutability; on a status
  write ``validatePodIPs`` and the terminal-phase rule;
* nodes (``ValidateNode``/``ValidateNodeUpdate``): ``podCIDRs``, taints, and that
  ``podCIDRs`` and ``providerID`` change only from unset;
* leases (``pkg/apis/coordination/validation``, ``ValidateLeaseSpec``); configmap and
  secret keys (``IsConfigMapKey``);
* network policies (:mod:`podnet.sim.networking_validation`): label selectors, peers,
  ports, ``ipBlock`` and ``policyTypes``; stored with upstream's defaults.

IP and CIDR fields (pod IPs, node podCIDRs, ipBlock) are read with v1.32's sloppy
parsers: leading zeros and host bits pass, as on the real server.

Not checked (the rest of validation.go): volumes, probes, security contexts, resources,
affinity, events' involved objects, and everything behind a feature gate.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from podnet.core.cluster.port import LEASE, NAMESPACE, NETWORK_POLICY, NODE, POD, Kind, Obj

from .field_rules import (
    ANNOTATIONS_LIMIT,
    Errors,
    as_dict,
    as_list,
    config_key,
    dns1123_label,
    dns1123_subdomain,
    go_value,
    qualified_name,
    range_error,
    validate_annotations,
    validate_labels,
)
from .networking_validation import network_policy, network_policy_defaults
from .schema import FieldError
from .sloppy_ip import ip_family, parse_cidr, parse_ip

__all__ = [
    "ANNOTATIONS_LIMIT",
    "dns1123_label",
    "dns1123_subdomain",
    "name_errors",
    "normalize",
    "qualified_name",
    "validate",
]

# --- metadata --------------------------------------------------------------------------


def name_errors(kind: Kind, name: str) -> tuple[str, ...]:
    """The name rule of ``kind``: ``ValidateNamespaceName`` is a DNS label, the served
    others (pods, nodes, configmaps, secrets, ...) ``NameIsDNSSubdomain``."""
    return dns1123_label(name) if kind == NAMESPACE else dns1123_subdomain(name)


def _object_meta(errs: Errors, kind: Kind, meta: Mapping[str, Any]) -> None:
    """``ValidateObjectMetaAccessor``: the name, labels and annotations."""
    name = meta.get("name")
    if isinstance(name, str) and name:
        errs.invalid_each("metadata.name", name, name_errors(kind, name))
    validate_labels(errs, meta.get("labels"), "metadata.labels")
    validate_annotations(errs, meta.get("annotations"), "metadata.annotations")


# --- pods ------------------------------------------------------------------------------

_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_DNS_POLICIES: Final = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")  # sets.List: sorted
_PROTOCOLS: Final = ("SCTP", "TCP", "UDP")  # sets.List: sorted
_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_TERMINAL: Final = ("Succeeded", "Failed")
_MAX_INT32: Final = 2**31 - 1


def _containers(errs: Errors, items: list[Any], path: str, names: set[str]) -> None:
    """``validateContainers`` / ``validateInitContainers`` (their common part)."""
    for i, ctr in enumerate(items):
        ctr = as_dict(ctr)
        at = f"{path}[{i}]"
        name = ctr.get("name") or ""
        if not name:
            errs.required(f"{at}.name")
        else:
            errs.invalid_each(f"{at}.name", name, dns1123_label(name))
            if name in names:
                errs.duplicate(f"{at}.name", name)
            names.add(name)
        image = ctr.get("image") or ""
        if not image:
            errs.required(f"{at}.image")
        elif image.strip() != image:
            errs.invalid(f"{at}.image", image, "must not have leading or trailing whitespace")
        errs.enum(f"{at}.imagePullPolicy", ctr.get("imagePullPolicy"), _PULL_POLICIES)
        for j, port in enumerate(as_list(ctr.get("ports"))):
            port = as_dict(port)
            where = f"{at}.ports[{j}]"
            number = port.get("containerPort") or 0
            if not number:
                errs.required(f"{where}.containerPort")
            elif not 1 <= number <= 65535:  # IsValidPortNum
                errs.invalid(f"{where}.containerPort", number, range_error(1, 65535))
            host = port.get("hostPort") or 0
            if host and not 1 <= host <= 65535:
                errs.invalid(f"{where}.hostPort", host, range_error(1, 65535))
            protocol = port.get("protocol") or ""
            if not protocol:
                errs.required(f"{where}.protocol")
            elif protocol not in _PROTOCOLS:
                errs.not_supported(f"{where}.protocol", protocol, _PROTOCOLS)


def _tolerations(errs: Errors, items: list[Any], path: str) -> None:
    """``ValidateTolerations``: key, operator and effect."""
    for i, tol in enumerate(items):
        tol = as_dict(tol)
        at = f"{path}[{i}]"
        key = tol.get("key") or ""
        if key:
            errs.invalid_each(f"{at}.key", key, qualified_name(key))
        operator = tol.get("operator") or ""
        if not key and operator != "Exists":
            errs.invalid(f"{at}.operator", operator,
                         "operator must be Exists when `key` is empty, which means \"match "
                         "all values and all keys\"")
        if operator == "Exists" and tol.get("value"):
            errs.invalid(f"{at}.operator", tol.get("value"),
                         "value must be empty when `operator` is 'Exists'")
        elif operator not in ("", *_TOLERATION_OPERATORS):
            errs.not_supported(f"{at}.operator", operator, _TOLERATION_OPERATORS)
        effect = tol.get("effect") or ""
        if effect and effect not in _TAINT_EFFECTS:
            errs.not_supported(f"{at}.effect", effect, _TAINT_EFFECTS)


def _pod_spec(errs: Errors, spec: Mapping[str, Any]) -> None:
    """``ValidatePodSpec``, the parts listed in the module docstring."""
    containers = as_list(spec.get("containers"))
    names: set[str] = set()
    if not containers:
        errs.required("spec.containers")
    _containers(errs, as_list(spec.get("initContainers")), "spec.initContainers", names)
    _containers(errs, containers, "spec.containers", names)
    restart = spec.get("restartPolicy")
    if restart is not None:
        errs.enum("spec.restartPolicy", restart, _RESTART_POLICIES)
    dns = spec.get("dnsPolicy")
    if dns is not None:
        errs.enum("spec.dnsPolicy", dns, _DNS_POLICIES)
    node = spec.get("nodeName") or ""
    if node:
        errs.invalid_each("spec.nodeName", node, dns1123_subdomain(node))
    validate_labels(errs, spec.get("nodeSelector"), "spec.nodeSelector")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= _MAX_INT32:
        errs.invalid("spec.activeDeadlineSeconds", deadline, range_error(1, _MAX_INT32))
    _tolerations(errs, as_list(spec.get("tolerations")), "spec.tolerations")


def _go_list(type_: str, field: str, values: Iterable[str]) -> str:
    """A Go slice of one-field structs as ``%#v`` prints it."""
    inner = ", ".join(f"{type_}{{{field}:{json.dumps(v)}}}" for v in values)
    return f"[]{type_}{{{inner}}}"


def _families(errs: Errors, path: str, values: list[str], type_: str, field: str,
              what: str, parse: Callable[[str], Any]) -> None:
    """``validatePodIPs``/``ValidateNode``'s podCIDRs: at most one of each IP family, no
    duplicates."""
    if len(values) < 2:
        return
    try:
        versions = [parse(v).version for v in values]
    except ValueError:
        return  # already named as invalid
    if len(values) > 2 or versions[0] == versions[1]:
        errs.list.append(FieldError(
            path, "FieldValueInvalid",
            f"Invalid value: {_go_list(type_, field, values)}: may specify no more than "
            f"one {what} for each IP family"))
    seen: set[str] = set()
    for i, v in enumerate(values):
        if v in seen:
            errs.list.append(FieldError(f"{path}[{i}]", "FieldValueDuplicate",
                                        f"Duplicate value: {type_}{{{field}:{json.dumps(v)}}}"))
        seen.add(v)


class _Family(NamedTuple):
    version: int


def _ip(value: str) -> _Family:
    """``IsValidIP``: ``ParseIPSloppy`` (leading zeros allowed in v1.32); ValueError."""
    ip = parse_ip(value)
    if ip is None:
        raise ValueError(value)
    return _Family(ip_family(ip))


def _cidr(value: str) -> _Family:
    """``IsValidCIDR``: ``ParseCIDRSloppy`` (leading zeros and host bits allowed)."""
    net = parse_cidr(value)
    if net is None:
        raise ValueError(value)
    return _Family(net.family)


def _pod_status(errs: Errors, status: Mapping[str, Any]) -> None:
    """``validatePodIPs`` and ``validateHostIPs``."""
    for key in ("podIPs", "hostIPs"):
        path = f"status.{key}"
        ips = [as_dict(p).get("ip") or "" for p in as_list(status.get(key))]
        for i, ip in enumerate(ips):
            try:
                _ip(ip)
            except ValueError:
                errs.invalid(f"{path}[{i}]", ip,
                             "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")
        type_ = "core.PodIP" if key == "podIPs" else "core.HostIP"
        _families(errs, path, ips, type_, "IP", "IP", _ip)


def _pod_update(errs: Errors, new: Obj, old: Obj) -> None:
    """``ValidatePodUpdate``: what an update may change of a pod's spec. Upstream ends
    the Forbidden message with ``cmp.Diff`` of the Go structs; here it ends with one line
    per changed field of ``spec`` (old -> new)."""
    spec, before = as_dict(new.get("spec")), as_dict(old.get("spec"))
    if spec == before:
        return
    for key in ("containers", "initContainers"):
        now, was = as_list(spec.get(key)), as_list(before.get(key))
        if len(now) != len(was):
            errs.forbidden(f"spec.{key}", "pod updates may not add or remove containers")
            return
    deadline, was_deadline = spec.get("activeDeadlineSeconds"), before.get("activeDeadlineSeconds")
    if deadline is not None:
        if not 0 <= deadline <= _MAX_INT32:
            errs.invalid("spec.activeDeadlineSeconds", deadline, range_error(0, _MAX_INT32))
            return
        if was_deadline is not None and was_deadline < deadline:
            errs.invalid("spec.activeDeadlineSeconds", deadline,
                         "must be less than or equal to previous value")
            return
    elif was_deadline is not None:
        errs.invalid("spec.activeDeadlineSeconds", None,
                     "must not update from a positive integer to nil value")
    _only_added_tolerations(errs, as_list(spec.get("tolerations")),
                            as_list(before.get("tolerations")))
    old_gates = {as_dict(g).get("name") for g in as_list(before.get("schedulingGates"))}
    for gate in as_list(spec.get("schedulingGates")):
        if as_dict(gate).get("name") not in old_gates:
            errs.forbidden("spec.schedulingGates", "only deletion is allowed, but found new "
                           f"scheduling gate '{as_dict(gate).get('name')}'")
    munged = dict(spec)
    for key in ("containers", "initContainers"):
        if key in spec:
            munged[key] = [
                {**as_dict(c), "image": as_dict(w).get("image")}
                if "image" in as_dict(w) else {k: v for k, v in as_dict(c).items() if k != "image"}
                for c, w in zip(as_list(spec[key]), as_list(before.get(key)), strict=True)
            ]
    for key in ("activeDeadlineSeconds", "tolerations", "schedulingGates"):
        munged.pop(key, None)
        if key in before:
            munged[key] = before[key]
    grace, was_grace = munged.get("terminationGracePeriodSeconds"), before.get(
        "terminationGracePeriodSeconds")
    if was_grace is not None and was_grace < 0 and grace == 1:
        munged["terminationGracePeriodSeconds"] = was_grace  # the one change allowed
    if munged != before:
        changed = sorted(k for k in {*munged, *before} if munged.get(k) != before.get(k))
        diff = "\n".join(
            f"  spec.{k}: {go_value(before.get(k))} -> {go_value(munged.get(k))}"
            for k in changed
        )
        errs.forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
            f"(allow it to be set to 1 if it was previously negative)\n{diff}",
        )


def _only_added_tolerations(errs: Errors, now: list[Any], was: list[Any]) -> None:
    """``validateOnlyAddedTolerations``: an existing toleration stays, only its
    ``tolerationSeconds`` may change."""
    for old in was:
        bare = {k: v for k, v in as_dict(old).items() if k != "tolerationSeconds"}
        if not any({k: v for k, v in as_dict(t).items() if k != "tolerationSeconds"} == bare
                   for t in now):
            errs.forbidden("spec.tolerations",
                           "existing toleration can not be modified except its tolerationSeconds")
            return


def _pod_status_update(errs: Errors, new: Obj, old: Obj) -> None:
    """``ValidatePodStatusUpdate``: a terminal phase stays terminal."""
    phase = as_dict(new.get("status")).get("phase")
    was = as_dict(old.get("status")).get("phase")
    if was in _TERMINAL and phase != was:
        errs.forbidden("status.phase", "may not be transitioned to non-terminal phase")


# --- nodes, leases, data ---------------------------------------------------------------


def _node(errs: Errors, node: Obj) -> None:
    """``ValidateNode``: podCIDRs and taints."""
    spec = as_dict(node.get("spec"))
    cidrs = [c for c in as_list(spec.get("podCIDRs")) if isinstance(c, str)]
    for i, cidr in enumerate(cidrs):
        try:
            _cidr(cidr)
        except ValueError:
            errs.invalid(f"spec.podCIDRs[{i}]", cidr,
                         "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)")
    if len(cidrs) > 1:
        try:
            versions = [_cidr(c).version for c in cidrs]
        except ValueError:
            versions = []
        if versions and (len(cidrs) > 2 or versions[0] == versions[1]):
            errs.list.append(FieldError(
                "spec.podCIDRs", "FieldValueInvalid",
                f"Invalid value: []string{{{', '.join(json.dumps(c) for c in cidrs)}}}: may "
                "specify no more than one CIDR for each IP family"))
    seen: set[tuple[Any, Any]] = set()
    for i, taint in enumerate(as_list(spec.get("taints"))):
        taint = as_dict(taint)
        at = f"spec.taints[{i}]"
        key = taint.get("key") or ""
        if not key:
            errs.required(f"{at}.key")
        else:
            errs.invalid_each(f"{at}.key", key, qualified_name(key))
        effect = taint.get("effect") or ""
        if not effect:
            errs.required(f"{at}.effect")
        elif effect not in _TAINT_EFFECTS:
            errs.not_supported(f"{at}.effect", effect, _TAINT_EFFECTS)
        if (key, effect) in seen:
            errs.duplicate(f"{at}.effect", effect)
        seen.add((key, effect))


def _node_update(errs: Errors, new: Obj, old: Obj) -> None:
    """``ValidateNodeUpdate``: podCIDRs and providerID change only from unset."""
    spec, before = as_dict(new.get("spec")), as_dict(old.get("spec"))
    was = as_list(before.get("podCIDRs"))
    if was and as_list(spec.get("podCIDRs")) != was:
        errs.forbidden("spec.podCIDRs",
                       'node updates may not change podCIDR except from "" to valid')
    if before.get("providerID") and spec.get("providerID") != before.get("providerID"):
        errs.forbidden("spec.providerID",
                       'node updates may not change providerID except from "" to valid')


def _lease(errs: Errors, lease: Obj) -> None:
    """``ValidateLeaseSpec`` (pkg/apis/coordination/validation)."""
    spec = as_dict(lease.get("spec"))
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errs.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errs.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errs.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined")


def _data_keys(errs: Errors, obj: Obj) -> None:
    """``ValidateConfigMap``/``ValidateSecret``: each data key a config key."""
    for field in ("data", "binaryData"):
        for key in as_dict(obj.get(field)):
            errs.invalid_each(f"{field}[{key}]", key, config_key(key))


# --- entry points ----------------------------------------------------------------------


def _pair(obj: Obj, part: str, one: str, many: str, field: str) -> None:
    """The v1 conversion of a singular and a plural field (``podIP``/``podIPs``): the
    singular one wins when both are set and differ, and is the plural's first."""
    holder = obj.get(part)
    if not isinstance(holder, dict):
        return
    single, plural = holder.get(one), holder.get(many)
    firsts = [as_dict(p).get(field) if field else p for p in as_list(plural)]
    if single and (not firsts or firsts[0] != single):
        obj[part] = {**holder, many: [{field: single} if field else single]}
    elif firsts and not single:
        obj[part] = {**holder, one: firsts[0]}


def normalize(kind: Kind, obj: Obj) -> Obj:
    """The stored form of a decoded object, as the v1 conversions leave it: ``podIP``,
    ``hostIP`` and ``podCIDR`` agree with the first of their plural (``Convert_v1_PodStatus_
    To_core_PodStatus``, ``Convert_v1_NodeSpec_To_core_NodeSpec``); container ports get
    protocol TCP (``SetDefaults_ContainerPort``); a NetworkPolicy gets its defaults
    (``networking_validation.network_policy_defaults``)."""
    if kind == POD:
        obj = dict(obj)
        _pair(obj, "status", "podIP", "podIPs", "ip")
        _pair(obj, "status", "hostIP", "hostIPs", "ip")
        spec = obj.get("spec")
        if isinstance(spec, dict):
            for key in ("containers", "initContainers"):
                ctrs = spec.get(key)
                if isinstance(ctrs, list) and any(isinstance(c, dict) and c.get("ports")
                                                  for c in ctrs):
                    spec = {**spec, key: [_ports_defaulted(c) for c in ctrs]}
            obj["spec"] = spec
    elif kind == NODE:
        obj = dict(obj)
        _pair(obj, "spec", "podCIDR", "podCIDRs", "")
    elif kind == NETWORK_POLICY:
        obj = network_policy_defaults(obj)
    return obj


def _ports_defaulted(ctr: Any) -> Any:
    if not isinstance(ctr, dict) or not isinstance(ctr.get("ports"), list):
        return ctr
    ports = [{**p, "protocol": p.get("protocol") or "TCP"} if isinstance(p, dict) else p
             for p in ctr["ports"]]
    return {**ctr, "ports": ports}


def validate(kind: Kind, obj: Obj, old: Obj | None, subresource: str | None) -> list[FieldError]:
    """The errors upstream's validation finds in ``obj`` (``old``: the stored object on an
    update, None on create; ``subresource``: "status" for a status write)."""
    errs = Errors()
    _object_meta(errs, kind, as_dict(obj.get("metadata")))
    if kind == POD:
        if subresource != "status":
            _pod_spec(errs, as_dict(obj.get("spec")))
            if old is not None:
                _pod_update(errs, obj, old)
        if old is not None:
            _pod_status(errs, as_dict(obj.get("status")))
            if subresource == "status":
                _pod_status_update(errs, obj, old)
    elif kind == NODE:
        _node(errs, obj)
        if old is not None:
            _node_update(errs, obj, old)
    elif kind == LEASE:
        _lease(errs, obj)
    elif kind == NETWORK_POLICY:
        network_policy(errs, obj)
    elif kind.group == "" and kind.kind in ("ConfigMap", "Secret"):
        _data_keys(errs, obj)
    return errs.list
