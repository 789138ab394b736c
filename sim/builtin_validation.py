"""Upstream's Go validation of the built-in kinds, the rules a pod network's tests meet.

Each function names the upstream function it follows (``pkg/apis/core/validation/
validation.go`` unless said otherwise, and ``staging/src/k8s.io/apimachinery``'s
``pkg/util/validation/validation.go`` for the name and label rules); messages are worded
as upstream's ``field.Error`` prints them (``Invalid value: "x": ...``, ``Unsupported
value``, ``Required value``, ``Duplicate value``, ``Forbidden``, ``Too long``). What is
checked:

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
  secret keys (``IsConfigMapKey``).

Not checked (the rest of validation.go): volumes, probes, security contexts, resources,
affinity, events' involved objects, and everything behind a feature gate.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, NamedTuple

from podnet.core.cluster.port import LEASE, NAMESPACE, NETWORK_POLICY, NODE, POD, Kind, Obj

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

# --- the apimachinery rules ------------------------------------------------------------

_DNS_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_FMT: Final = _DNS_LABEL_FMT + r"(\." + _DNS_LABEL_FMT + ")*"
_QNAME_FMT: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT: Final = "(" + _QNAME_FMT + ")?"
_CONFIG_KEY_FMT: Final = "[-._a-zA-Z0-9]+"
_DNS_LABEL: Final = re.compile(_DNS_LABEL_FMT)
_DNS_SUBDOMAIN: Final = re.compile(_DNS_SUBDOMAIN_FMT)
_QNAME: Final = re.compile(_QNAME_FMT)
_LABEL_VALUE: Final = re.compile(_LABEL_VALUE_FMT)
_CONFIG_KEY: Final = re.compile(_CONFIG_KEY_FMT)

#: how many distinct strings each name rule remembers its answer for: a cluster's pods
#: repeat their label keys and values, node names and images
_CACHED: Final = 16384

#: apimachinery's TotalAnnotationSizeLimitB: keys and values together
ANNOTATIONS_LIMIT: Final = 256 * 1024


def _regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``: the message, examples, and the pattern (upstream's spacing)."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


@lru_cache(maxsize=_CACHED)
def dns1123_label(value: str) -> tuple[str, ...]:
    """``IsDNS1123Label``."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not _DNS_LABEL.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
            "or '-', and must start and end with an alphanumeric character",
            _DNS_LABEL_FMT, "my-name", "123-abc"))
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def dns1123_subdomain(value: str) -> tuple[str, ...]:
    """``IsDNS1123Subdomain``."""
    errs = []
    if len(value) > 253:
        errs.append(_max_len(253))
    if not _DNS_SUBDOMAIN.fullmatch(value):
        errs.append(_regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character",
            _DNS_SUBDOMAIN_FMT, "example.com"))
    return tuple(errs)


_QNAME_MESSAGE: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character"
)


@lru_cache(maxsize=_CACHED)
def qualified_name(value: str) -> tuple[str, ...]:
    """``IsQualifiedName``: a label or annotation key (``prefix/name``)."""
    errs = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix)]
    else:
        return (
            "a qualified name "
            + _regex_error(_QNAME_MESSAGE, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
        )
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part " + _max_len(63))
    if name and not _QNAME.fullmatch(name):
        errs.append(
            "name part " + _regex_error(_QNAME_MESSAGE, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def label_value(value: str) -> tuple[str, ...]:
    """``IsValidLabelValue``."""
    errs = []
    if len(value) > 63:
        errs.append(_max_len(63))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(_regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character",
            _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return tuple(errs)


@lru_cache(maxsize=_CACHED)
def config_key(value: str) -> tuple[str, ...]:
    """``IsConfigMapKey`` (configmap and secret data keys)."""
    errs = []
    if len(value) > 253:
        errs.append(_max_len(253))
    if not _CONFIG_KEY.fullmatch(value):
        errs.append(_regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            _CONFIG_KEY_FMT, "key.name", "KEY_NAME", "key-name"))
    if value in (".", ".."):
        errs.append(f"must not be '{value}'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return tuple(errs)


# --- field.Error -----------------------------------------------------------------------


class _GoLiteral(str):
    """A value already spelled as Go's ``%#v`` prints it (a typed slice)."""


def _go_value(value: Any) -> str:
    """A bad value as ``field.Error`` prints it: strings quoted, numbers and bools bare."""
    if isinstance(value, _GoLiteral):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


class _Errors:
    def __init__(self) -> None:
        self.list: list[FieldError] = []

    def required(self, path: str, detail: str = "") -> None:
        self.list.append(FieldError(path, "FieldValueRequired",
                                    "Required value" + (f": {detail}" if detail else "")))

    def invalid(self, path: str, value: Any, detail: str) -> None:
        self.list.append(FieldError(path, "FieldValueInvalid",
                                    f"Invalid value: {_go_value(value)}: {detail}"))

    def invalid_each(self, path: str, value: str, messages: Iterable[str]) -> None:
        for m in messages:
            self.invalid(path, value, m)

    def not_supported(self, path: str, value: Any, valid: Sequence[str]) -> None:
        allowed = ", ".join(json.dumps(v) for v in valid)
        self.list.append(FieldError(
            path, "FieldValueNotSupported",
            f"Unsupported value: {_go_value(value)}: supported values: {allowed}"))

    def duplicate(self, path: str, value: Any) -> None:
        self.list.append(FieldError(path, "FieldValueDuplicate",
                                    f"Duplicate value: {_go_value(value)}"))

    def forbidden(self, path: str, detail: str) -> None:
        self.list.append(FieldError(path, "FieldValueForbidden", f"Forbidden: {detail}"))

    def too_long(self, path: str, limit: int) -> None:
        self.list.append(FieldError(path, "FieldValueTooLong",
                                    f"Too long: may not be more than {limit} bytes"))

    def enum(self, path: str, value: Any, valid: Sequence[str]) -> None:
        """The switch most enum checks are: empty is Required, unknown NotSupported."""
        if not value:
            self.required(path)
        elif value not in valid:
            self.not_supported(path, value, valid)


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --- metadata --------------------------------------------------------------------------


def name_errors(kind: Kind, name: str) -> tuple[str, ...]:
    """The name rule of ``kind``: ``ValidateNamespaceName`` is a DNS label, the served
    others (pods, nodes, configmaps, secrets, ...) ``NameIsDNSSubdomain``."""
    return dns1123_label(name) if kind == NAMESPACE else dns1123_subdomain(name)


def _labels(errs: _Errors, labels: Any, path: str) -> None:
    """``ValidateLabels`` (metav1 validation): each key a qualified name, each value a
    label value; every error names the map, not the key."""
    for key, value in _dict(labels).items():
        errs.invalid_each(path, key, qualified_name(key))
        if isinstance(value, str):
            errs.invalid_each(path, value, label_value(value))


def _annotations(errs: _Errors, annotations: Any, path: str) -> None:
    """``ValidateAnnotations`` (apimachinery objectmeta.go)."""
    total = 0
    for key, value in _dict(annotations).items():
        errs.invalid_each(path, key, qualified_name(key.lower()))
        total += len(key) + len(value if isinstance(value, str) else "")
    if total > ANNOTATIONS_LIMIT:
        errs.too_long(path, ANNOTATIONS_LIMIT)


def _object_meta(errs: _Errors, kind: Kind, meta: Mapping[str, Any]) -> None:
    """``ValidateObjectMetaAccessor``: the name, labels and annotations."""
    name = meta.get("name")
    if isinstance(name, str) and name:
        errs.invalid_each("metadata.name", name, name_errors(kind, name))
    _labels(errs, meta.get("labels"), "metadata.labels")
    _annotations(errs, meta.get("annotations"), "metadata.annotations")


# --- pods ------------------------------------------------------------------------------

_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_DNS_POLICIES: Final = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_PULL_POLICIES: Final = ("Always", "IfNotPresent", "Never")  # sets.List: sorted
_PROTOCOLS: Final = ("SCTP", "TCP", "UDP")  # sets.List: sorted
_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_TERMINAL: Final = ("Succeeded", "Failed")
_MAX_INT32: Final = 2**31 - 1


def _range_error(low: int, high: int) -> str:
    return f"must be between {low} and {high}, inclusive"


def _containers(errs: _Errors, items: list[Any], path: str, names: set[str]) -> None:
    """``validateContainers`` / ``validateInitContainers`` (their common part)."""
    for i, ctr in enumerate(items):
        ctr = _dict(ctr)
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
        for j, port in enumerate(_list(ctr.get("ports"))):
            port = _dict(port)
            where = f"{at}.ports[{j}]"
            number = port.get("containerPort") or 0
            if not number:
                errs.required(f"{where}.containerPort")
            elif not 1 <= number <= 65535:  # IsValidPortNum
                errs.invalid(f"{where}.containerPort", number, _range_error(1, 65535))
            host = port.get("hostPort") or 0
            if host and not 1 <= host <= 65535:
                errs.invalid(f"{where}.hostPort", host, _range_error(1, 65535))
            protocol = port.get("protocol") or ""
            if not protocol:
                errs.required(f"{where}.protocol")
            elif protocol not in _PROTOCOLS:
                errs.not_supported(f"{where}.protocol", protocol, _PROTOCOLS)


def _tolerations(errs: _Errors, items: list[Any], path: str) -> None:
    """``ValidateTolerations``: key, operator and effect."""
    for i, tol in enumerate(items):
        tol = _dict(tol)
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


def _pod_spec(errs: _Errors, spec: Mapping[str, Any]) -> None:
    """``ValidatePodSpec``, the parts listed in the module docstring."""
    containers = _list(spec.get("containers"))
    names: set[str] = set()
    if not containers:
        errs.required("spec.containers")
    _containers(errs, _list(spec.get("initContainers")), "spec.initContainers", names)
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
    _labels(errs, spec.get("nodeSelector"), "spec.nodeSelector")
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and not 1 <= deadline <= _MAX_INT32:
        errs.invalid("spec.activeDeadlineSeconds", deadline, _range_error(1, _MAX_INT32))
    _tolerations(errs, _list(spec.get("tolerations")), "spec.tolerations")


def _go_list(type_: str, field: str, values: Iterable[str]) -> str:
    """A Go slice of one-field structs as ``%#v`` prints it."""
    inner = ", ".join(f"{type_}{{{field}:{json.dumps(v)}}}" for v in values)
    return f"[]{type_}{{{inner}}}"


def _families(errs: _Errors, path: str, values: list[str], type_: str, field: str,
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


def _pod_status(errs: _Errors, status: Mapping[str, Any]) -> None:
    """``validatePodIPs`` and ``validateHostIPs``."""
    for key in ("podIPs", "hostIPs"):
        path = f"status.{key}"
        ips = [_dict(p).get("ip") or "" for p in _list(status.get(key))]
        for i, ip in enumerate(ips):
            try:
                _ip(ip)
            except ValueError:
                errs.invalid(f"{path}[{i}]", ip,
                             "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")
        type_ = "core.PodIP" if key == "podIPs" else "core.HostIP"
        _families(errs, path, ips, type_, "IP", "IP", _ip)


def _pod_update(errs: _Errors, new: Obj, old: Obj) -> None:
    """``ValidatePodUpdate``: what an update may change of a pod's spec. Upstream ends
    the Forbidden message with ``cmp.Diff`` of the Go structs; here it ends with one line
    per changed field of ``spec`` (old -> new)."""
    spec, before = _dict(new.get("spec")), _dict(old.get("spec"))
    if spec == before:
        return
    for key in ("containers", "initContainers"):
        now, was = _list(spec.get(key)), _list(before.get(key))
        if len(now) != len(was):
            errs.forbidden(f"spec.{key}", "pod updates may not add or remove containers")
            return
    deadline, was_deadline = spec.get("activeDeadlineSeconds"), before.get("activeDeadlineSeconds")
    if deadline is not None:
        if not 0 <= deadline <= _MAX_INT32:
            errs.invalid("spec.activeDeadlineSeconds", deadline, _range_error(0, _MAX_INT32))
            return
        if was_deadline is not None and was_deadline < deadline:
            errs.invalid("spec.activeDeadlineSeconds", deadline,
                         "must be less than or equal to previous value")
            return
    elif was_deadline is not None:
        errs.invalid("spec.activeDeadlineSeconds", None,
                     "must not update from a positive integer to nil value")
    _only_added_tolerations(errs, _list(spec.get("tolerations")),
                            _list(before.get("tolerations")))
    old_gates = {_dict(g).get("name") for g in _list(before.get("schedulingGates"))}
    for gate in _list(spec.get("schedulingGates")):
        if _dict(gate).get("name") not in old_gates:
            errs.forbidden("spec.schedulingGates", "only deletion is allowed, but found new "
                           f"scheduling gate '{_dict(gate).get('name')}'")
    munged = dict(spec)
    for key in ("containers", "initContainers"):
        if key in spec:
            munged[key] = [
                {**_dict(c), "image": _dict(w).get("image")}
                if "image" in _dict(w) else {k: v for k, v in _dict(c).items() if k != "image"}
                for c, w in zip(_list(spec[key]), _list(before.get(key)), strict=True)
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
            f"  spec.{k}: {_go_value(before.get(k))} -> {_go_value(munged.get(k))}"
            for k in changed
        )
        errs.forbidden(
            "spec",
            "pod updates may not change fields other than `spec.containers[*].image`,"
            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
            "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
            f"(allow it to be set to 1 if it was previously negative)\n{diff}",
        )


def _only_added_tolerations(errs: _Errors, now: list[Any], was: list[Any]) -> None:
    """``validateOnlyAddedTolerations``: an existing toleration stays, only its
    ``tolerationSeconds`` may change."""
    for old in was:
        bare = {k: v for k, v in _dict(old).items() if k != "tolerationSeconds"}
        if not any({k: v for k, v in _dict(t).items() if k != "tolerationSeconds"} == bare
                   for t in now):
            errs.forbidden("spec.tolerations",
                           "existing toleration can not be modified except its tolerationSeconds")
            return


def _pod_status_update(errs: _Errors, new: Obj, old: Obj) -> None:
    """``ValidatePodStatusUpdate``: a terminal phase stays terminal."""
    phase = _dict(new.get("status")).get("phase")
    was = _dict(old.get("status")).get("phase")
    if was in _TERMINAL and phase != was:
        errs.forbidden("status.phase", "may not be transitioned to non-terminal phase")


# --- nodes, leases, data ---------------------------------------------------------------


def _node(errs: _Errors, node: Obj) -> None:
    """``ValidateNode``: podCIDRs and taints."""
    spec = _dict(node.get("spec"))
    cidrs = [c for c in _list(spec.get("podCIDRs")) if isinstance(c, str)]
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
    for i, taint in enumerate(_list(spec.get("taints"))):
        taint = _dict(taint)
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


def _node_update(errs: _Errors, new: Obj, old: Obj) -> None:
    """``ValidateNodeUpdate``: podCIDRs and providerID change only from unset."""
    spec, before = _dict(new.get("spec")), _dict(old.get("spec"))
    was = _list(before.get("podCIDRs"))
    if was and _list(spec.get("podCIDRs")) != was:
        errs.forbidden("spec.podCIDRs",
                       'node updates may not change podCIDR except from "" to valid')
    if before.get("providerID") and spec.get("providerID") != before.get("providerID"):
        errs.forbidden("spec.providerID",
                       'node updates may not change providerID except from "" to valid')


def _lease(errs: _Errors, lease: Obj) -> None:
    """``ValidateLeaseSpec`` (pkg/apis/coordination/validation)."""
    spec = _dict(lease.get("spec"))
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and duration <= 0:
        errs.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")
    transitions = spec.get("leaseTransitions")
    if transitions is not None and transitions < 0:
        errs.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errs.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined")


def _data_keys(errs: _Errors, obj: Obj) -> None:
    """``ValidateConfigMap``/``ValidateSecret``: each data key a config key."""
    for field in ("data", "binaryData"):
        for key in _dict(obj.get(field)):
            errs.invalid_each(f"{field}[{key}]", key, config_key(key))


# --- network policies (pkg/apis/networking/validation) ---------------------------------

_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_POLICY_PROTOCOLS: Final = ("TCP", "UDP", "SCTP")  # upstream's order in the message
_POLICY_TYPES: Final = ("Ingress", "Egress")
_PORT_NAME_CHARSET: Final = re.compile("[-a-z0-9]+")
_PORT_NAME_LETTER: Final = re.compile("[a-z]")
_CIDR_MESSAGE: Final = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"


def port_name(value: str) -> tuple[str, ...]:
    """``IsValidPortName`` (an IANA_SVC_NAME)."""
    errs = []
    if len(value) > 15:
        errs.append(_max_len(15))
    if not _PORT_NAME_CHARSET.fullmatch(value):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_LETTER.search(value):
        errs.append("must contain at least one letter (a-z)")
    if "--" in value:
        errs.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return tuple(errs)


def _port_number(errs: _Errors, path: str, value: int) -> None:
    if not 1 <= value <= 65535:  # IsValidPortNum
        errs.invalid(path, value, _range_error(1, 65535))


def label_selector(errs: _Errors, selector: Any, path: str) -> None:
    """``ValidateLabelSelector`` (apimachinery metav1 validation): matchLabels as
    ``ValidateLabels``, then each requirement's operator and values, key and values."""
    selector = _dict(selector)
    _labels(errs, selector.get("matchLabels"), f"{path}.matchLabels")
    for i, expr in enumerate(_list(selector.get("matchExpressions"))):
        expr = _dict(expr)
        at = f"{path}.matchExpressions[{i}]"
        operator, values = expr.get("operator") or "", _list(expr.get("values"))
        if operator in ("In", "NotIn"):
            if not values:
                errs.required(f"{at}.values", "must be specified when `operator` is 'In' or "
                              "'NotIn'")
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                errs.forbidden(f"{at}.values", "may not be specified when `operator` is "
                               "'Exists' or 'DoesNotExist'")
        else:
            errs.invalid(f"{at}.operator", operator, "not a valid selector operator")
        key = expr.get("key") or ""
        errs.invalid_each(f"{at}.key", key, qualified_name(key))
        for j, value in enumerate(values):
            if isinstance(value, str):
                errs.invalid_each(f"{at}.values[{j}]", value, label_value(value))


def _policy_port(errs: _Errors, port: Mapping[str, Any], path: str) -> None:
    """``ValidateNetworkPolicyPort``."""
    protocol = port.get("protocol")
    if protocol is not None and protocol not in _POLICY_PROTOCOLS:
        errs.not_supported(f"{path}.protocol", protocol, _POLICY_PROTOCOLS)
    number, end = port.get("port"), port.get("endPort")
    if isinstance(number, int):
        _port_number(errs, f"{path}.port", number)
        if end is not None:
            if end < number:
                # upstream names the port's value here, not the endPort's
                errs.invalid(f"{path}.endPort", number, "must be greater than or equal to `port`")
            _port_number(errs, f"{path}.endPort", end)
    elif isinstance(number, str):
        if end is not None:
            errs.invalid(f"{path}.endPort", end, "may not be specified when `port` is non-numeric")
        errs.invalid_each(f"{path}.port", number, port_name(number))
    elif end is not None:
        errs.invalid(f"{path}.endPort", end, "may not be specified when `port` is not specified")


def _ip_block(errs: _Errors, block: Mapping[str, Any], path: str) -> None:
    """``ValidateIPBlock``: the cidr and each except entry are CIDRs as ``IsValidCIDR``
    reads them (ParseCIDRSloppy in v1.32), each except strictly inside the cidr."""
    cidr = block.get("cidr") or ""
    if not cidr:
        errs.required(f"{path}.cidr")
        return
    network = parse_cidr(cidr)
    if network is None:
        errs.invalid(f"{path}.cidr", cidr, _CIDR_MESSAGE)
        return
    for i, entry in enumerate(_list(block.get("except"))):
        at = f"{path}.except[{i}]"
        entry = entry if isinstance(entry, str) else ""
        inner = parse_cidr(entry)
        if inner is None:
            errs.invalid(at, entry, _CIDR_MESSAGE)
        elif not network.contains(inner.ip) or network.ones >= inner.ones:
            errs.invalid(at, entry, "must be a strict subset of `cidr`")


def _peer(errs: _Errors, peer: Mapping[str, Any], path: str) -> None:
    """``ValidateNetworkPolicyPeer``: at least one of the three, ipBlock alone."""
    count = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            count += 1
            label_selector(errs, peer[key], f"{path}.{key}")
    if peer.get("ipBlock") is not None:
        count += 1
        _ip_block(errs, _dict(peer["ipBlock"]), f"{path}.ipBlock")
    if count == 0:
        errs.required(path, "must specify a peer")
    elif count > 1 and peer.get("ipBlock") is not None:
        errs.forbidden(path, "may not specify both ipBlock and another peer")


def _network_policy(errs: _Errors, policy: Obj) -> None:
    """``ValidateNetworkPolicySpec``: the pod selector, each rule's ports and peers (in
    upstream's order), policyTypes."""
    spec = _dict(policy.get("spec"))
    label_selector(errs, spec.get("podSelector"), "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(_list(spec.get(direction))):
            rule = _dict(rule)
            at = f"spec.{direction}[{i}]"
            for j, port in enumerate(_list(rule.get("ports"))):
                _policy_port(errs, _dict(port), f"{at}.ports[{j}]")
            for j, peer in enumerate(_list(rule.get(peers))):
                _peer(errs, _dict(peer), f"{at}.{peers}[{j}]")
    types = _list(spec.get("policyTypes"))
    if len(types) > len(_POLICY_TYPES):
        shown = ", ".join(json.dumps(t) for t in types)
        errs.invalid("spec.policyTypes", _GoLiteral(f"[]networking.PolicyType{{{shown}}}"),
                     "may not specify more than two policyTypes")
        return
    for i, kind in enumerate(types):
        if kind not in _POLICY_TYPES:
            errs.not_supported(f"spec.policyTypes[{i}]", kind, _POLICY_TYPES)


def _omit_empty(obj: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    """``obj`` without the ``omitempty`` fields that are empty: Go's encoder drops them,
    so a stored ``ingress: []`` reads back as no ``ingress``."""
    return {k: v for k, v in obj.items() if k not in keys or v not in ([], {}, None)}


def _selector_defaults(selector: Any) -> Any:
    if not isinstance(selector, dict):
        return selector
    out = _omit_empty(selector, "matchLabels", "matchExpressions")
    if isinstance(out.get("matchExpressions"), list):
        out["matchExpressions"] = [_omit_empty(e, "values") if isinstance(e, dict) else e
                                   for e in out["matchExpressions"]]
    return out


def _peer_defaults(peer: Any) -> Any:
    if not isinstance(peer, dict):
        return peer
    out = dict(peer)
    for key in ("podSelector", "namespaceSelector"):
        if key in out:
            out[key] = _selector_defaults(out[key])
    if isinstance(out.get("ipBlock"), dict):
        # cidr has no omitempty: Go always writes it
        out["ipBlock"] = _omit_empty({"cidr": "", **out["ipBlock"]}, "except")
    return out


def _rule_defaults(rule: Any, peers: str) -> Any:
    if not isinstance(rule, dict):
        return rule
    out = _omit_empty(rule, "ports", peers)
    if isinstance(out.get("ports"), list):
        # SetDefaults_NetworkPolicyPort: an absent protocol is TCP (an empty one stays)
        out["ports"] = [{**p, "protocol": p.get("protocol", "TCP")} if isinstance(p, dict)
                        else p for p in out["ports"]]
    if isinstance(out.get(peers), list):
        out[peers] = [_peer_defaults(p) for p in out[peers]]
    return out


def network_policy_defaults(policy: Obj) -> Obj:
    """A NetworkPolicy as a v1.32 server stores it: ``SetDefaults_NetworkPolicy``
    (``policyTypes`` [Ingress], plus Egress when there are egress rules, when it is
    empty) and ``SetDefaults_NetworkPolicyPort`` (protocol TCP); ``spec`` and
    ``spec.podSelector`` always written (Go structs, not pointers); empty ``omitempty``
    lists and maps left out, as Go's encoder does."""
    spec = policy.get("spec")
    spec = dict(spec) if isinstance(spec, dict) else {}
    spec = _omit_empty(spec, "ingress", "egress", "policyTypes")
    spec["podSelector"] = _selector_defaults(spec.get("podSelector") or {})
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        if isinstance(spec.get(direction), list):
            spec[direction] = [_rule_defaults(r, peers) for r in spec[direction]]
    if not spec.get("policyTypes"):
        spec["policyTypes"] = ["Ingress", "Egress"] if spec.get("egress") else ["Ingress"]
    return {**policy, "spec": spec}


# --- entry points ----------------------------------------------------------------------


def _pair(obj: Obj, part: str, one: str, many: str, field: str) -> None:
    """The v1 conversion of a singular and a plural field (``podIP``/``podIPs``): the
    singular one wins when both are set and differ, and is the plural's first."""
    holder = obj.get(part)
    if not isinstance(holder, dict):
        return
    single, plural = holder.get(one), holder.get(many)
    firsts = [_dict(p).get(field) if field else p for p in _list(plural)]
    if single and (not firsts or firsts[0] != single):
        obj[part] = {**holder, many: [{field: single} if field else single]}
    elif firsts and not single:
        obj[part] = {**holder, one: firsts[0]}


def normalize(kind: Kind, obj: Obj) -> Obj:
    """The stored form of a decoded object, as the v1 conversions leave it: ``podIP``,
    ``hostIP`` and ``podCIDR`` agree with the first of their plural (``Convert_v1_PodStatus_
    To_core_PodStatus``, ``Convert_v1_NodeSpec_To_core_NodeSpec``); container ports get
    protocol TCP (``SetDefaults_ContainerPort``)."""
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
    errs = _Errors()
    _object_meta(errs, kind, _dict(obj.get("metadata")))
    if kind == POD:
        if subresource != "status":
            _pod_spec(errs, _dict(obj.get("spec")))
            if old is not None:
                _pod_update(errs, obj, old)
        if old is not None:
            _pod_status(errs, _dict(obj.get("status")))
            if subresource == "status":
                _pod_status_update(errs, obj, old)
    elif kind == NODE:
        _node(errs, obj)
        if old is not None:
            _node_update(errs, obj, old)
    elif kind == LEASE:
        _lease(errs, obj)
    elif kind == NETWORK_POLICY:
        _network_policy(errs, obj)
    elif kind.group == "" and kind.kind in ("ConfigMap", "Secret"):
        _data_keys(errs, obj)
    return errs.list
