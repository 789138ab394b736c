"""NetworkPolicy (networking.k8s.io/v1) as kube-apiserver v1.32 validates and defaults
it: ``pkg/apis/networking/validation`` (``ValidateNetworkPolicySpec``, ``...Peer``,
``...Port``, ``ValidateIPBlock``), apimachinery's ``ValidateLabelSelector`` and
``IsValidPortName``, and ``pkg/apis/networking/v1/defaults.go``. Messages are worded as
upstream's ``field.Error`` prints them (:mod:`podnet.sim.field_rules`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from podnet.core.cluster.port import Obj

from .field_rules import (
    Errors,
    GoLiteral,
    as_dict,
    as_list,
    label_value,
    max_len,
    qualified_name,
    range_error,
    validate_labels,
)
from .sloppy_ip import parse_cidr

__all__ = ["label_selector", "network_policy", "network_policy_defaults", "port_name"]

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
        errs.append(max_len(15))
    if not _PORT_NAME_CHARSET.fullmatch(value):
        errs.append("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)")
    if not _PORT_NAME_LETTER.search(value):
        errs.append("must contain at least one letter (a-z)")
    if "--" in value:
        errs.append("must not contain consecutive hyphens")
    if value.startswith("-") or value.endswith("-"):
        errs.append("must not begin or end with a hyphen")
    return tuple(errs)


def _port_number(errs: Errors, path: str, value: int) -> None:
    if not 1 <= value <= 65535:  # IsValidPortNum
        errs.invalid(path, value, range_error(1, 65535))


def label_selector(errs: Errors, selector: Any, path: str) -> None:
    """``ValidateLabelSelector`` (apimachinery metav1 validation): matchLabels as
    ``ValidateLabels``, then each requirement's operator and values, key and values."""
    selector = as_dict(selector)
    validate_labels(errs, selector.get("matchLabels"), f"{path}.matchLabels")
    for i, expr in enumerate(as_list(selector.get("matchExpressions"))):
        expr = as_dict(expr)
        at = f"{path}.matchExpressions[{i}]"
        operator, values = expr.get("operator") or "", as_list(expr.get("values"))
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


def _policy_port(errs: Errors, port: Mapping[str, Any], path: str) -> None:
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


def _ip_block(errs: Errors, block: Mapping[str, Any], path: str) -> None:
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
    for i, entry in enumerate(as_list(block.get("except"))):
        at = f"{path}.except[{i}]"
        entry = entry if isinstance(entry, str) else ""
        inner = parse_cidr(entry)
        if inner is None:
            errs.invalid(at, entry, _CIDR_MESSAGE)
        elif not network.contains(inner.ip) or network.ones >= inner.ones:
            errs.invalid(at, entry, "must be a strict subset of `cidr`")


def _peer(errs: Errors, peer: Mapping[str, Any], path: str) -> None:
    """``ValidateNetworkPolicyPeer``: at least one of the three, ipBlock alone."""
    count = 0
    for key in ("podSelector", "namespaceSelector"):
        if peer.get(key) is not None:
            count += 1
            label_selector(errs, peer[key], f"{path}.{key}")
    if peer.get("ipBlock") is not None:
        count += 1
        _ip_block(errs, as_dict(peer["ipBlock"]), f"{path}.ipBlock")
    if count == 0:
        errs.required(path, "must specify a peer")
    elif count > 1 and peer.get("ipBlock") is not None:
        errs.forbidden(path, "may not specify both ipBlock and another peer")


def network_policy(errs: Errors, policy: Obj) -> None:
    """``ValidateNetworkPolicySpec``: the pod selector, each rule's ports and peers (in
    upstream's order), policyTypes."""
    spec = as_dict(policy.get("spec"))
    label_selector(errs, spec.get("podSelector"), "spec.podSelector")
    for direction, peers in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(as_list(spec.get(direction))):
            rule = as_dict(rule)
            at = f"spec.{direction}[{i}]"
            for j, port in enumerate(as_list(rule.get("ports"))):
                _policy_port(errs, as_dict(port), f"{at}.ports[{j}]")
            for j, peer in enumerate(as_list(rule.get(peers))):
                _peer(errs, as_dict(peer), f"{at}.{peers}[{j}]")
    types = as_list(spec.get("policyTypes"))
    if len(types) > len(_POLICY_TYPES):
        shown = ", ".join(json.dumps(t) for t in types)
        errs.invalid("spec.policyTypes", GoLiteral(f"[]networking.PolicyType{{{shown}}}"),
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
