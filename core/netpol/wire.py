"""A ``networking.k8s.io/v1`` NetworkPolicy read from its JSON: :func:`read_policy`.

The reading never raises for an object the API server stored: a part that cannot be read
(an ``ipBlock`` that is not a CIDR, an ``except`` outside its block, a selector with an
unknown operator, ``endPort`` with a named port, a field podnet does not know) becomes a
:class:`~podnet.hookspecs.netpol.PolicyFinding` naming its field path, and that part
matches nothing. A finding never opens traffic: an unreadable peer, port or rule allows
nothing, and a direction stays restricted with what could be read.

Values are read as the API server reads them: ``policyTypes`` defaults to ``Ingress``
(plus ``Egress`` when ``spec.egress`` has a rule) when absent or empty; an empty or
absent ``from``/``to`` is any peer and an empty or absent ``ports`` every port; a port's
protocol defaults to TCP. An ``ipBlock`` CIDR is parsed as the API's lenient parser does:
IPv4 octets with leading zeros are decimal (``010.0.0.0/8`` is ``10.0.0.0/8``) and host
bits are allowed and dropped (``10.0.0.1/24`` is ``10.0.0.0/24``, no finding: the API
accepts it as written). ``except`` blocks are cut out of their CIDR here, as the fewest
prefixes that cover the rest.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

import attrs

from podnet.core.netpol.status import STATUS_ANNOTATION
from podnet.hookspecs.netpol import FindingReason, PolicyFinding, Protocol

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the namespace label the API server sets on every namespace (its name): core reads it
#: even when a namespace object does not carry it yet
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

INGRESS = "Ingress"
EGRESS = "Egress"

_SPEC_FIELDS = frozenset({"podSelector", "policyTypes", "ingress", "egress"})
_RULE_FIELDS = {INGRESS: frozenset({"from", "ports"}), EGRESS: frozenset({"to", "ports"})}
_PEER_FIELDS = frozenset({"podSelector", "namespaceSelector", "ipBlock"})
_IPBLOCK_FIELDS = frozenset({"cidr", "except"})
_PORT_FIELDS = frozenset({"protocol", "port", "endPort"})
_SELECTOR_FIELDS = frozenset({"matchLabels", "matchExpressions"})
_EXPRESSION_FIELDS = frozenset({"key", "operator", "values"})
_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
#: a container port name (IANA service name): lower-case letters, digits and inner
#: single hyphens, at least one letter, at most 15 characters
_PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?=[a-z0-9])){0,14}$")
_SLOPPY_V4 = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+)(?:/(\d+))?$")


@attrs.frozen
class Selector:
    """A label selector (``matchLabels`` and ``matchExpressions`` as requirements
    ``(key, operator, values)``); ``valid=False``: unreadable, it matches nothing."""

    requirements: tuple[tuple[str, str, frozenset[str]], ...] = ()
    valid: bool = True

    @property
    def everything(self) -> bool:
        return self.valid and not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        if not self.valid:
            return False
        for key, op, values in self.requirements:
            have = labels.get(key)
            if op == "In":
                if have is None or have not in values:
                    return False
            elif op == "NotIn":
                if have is not None and have in values:
                    return False
            elif op == "Exists":
                if have is None:
                    return False
            elif have is not None:  # DoesNotExist
                return False
        return True


#: the empty selector: every pod (or namespace)
EVERYTHING = Selector()
NOTHING = Selector(valid=False)


@attrs.frozen
class PeerSpec:
    """One ``from``/``to`` entry. Pods: ``pod_selector`` and/or ``namespace_selector``
    (``namespace_selector`` None: the policy's own namespace); or CIDRs: ``cidrs``, the
    ``ipBlock`` with its ``except`` blocks cut out. ``valid=False``: it matches nothing."""

    pod_selector: Selector | None = None
    namespace_selector: Selector | None = None
    cidrs: tuple[str, ...] | None = None
    valid: bool = True

    @property
    def selects_pods(self) -> bool:
        return self.valid and self.cidrs is None


@attrs.frozen
class PortSpec:
    """One ``ports`` entry: a number, a range ``port``..``end_port``, a container port by
    ``name``, or (``port`` and ``name`` None) every port of ``protocol``."""

    protocol: Protocol = Protocol.TCP
    port: int | None = None
    end_port: int | None = None
    name: str | None = None


@attrs.frozen
class RuleSpec:
    """One ingress or egress rule. ``peers`` None: any peer; ``ports`` None: every port;
    an empty tuple in either: the rule allows nothing (every entry was unreadable)."""

    peers: tuple[PeerSpec, ...] | None = None
    ports: tuple[PortSpec, ...] | None = None

    @property
    def allows_nothing(self) -> bool:
        return self.peers == () or self.ports == ()


@attrs.frozen
class PolicySpec:
    """A NetworkPolicy as core read it. ``ingress``/``egress``: None when the policy does
    not restrict that direction (its ``policyTypes``), else its rules."""

    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    pod_selector: Selector = EVERYTHING
    ingress: tuple[RuleSpec, ...] | None = ()
    egress: tuple[RuleSpec, ...] | None = None
    findings: tuple[PolicyFinding, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def rules(self) -> tuple[tuple[str, tuple[RuleSpec, ...]], ...]:
        """The restricted directions with their rules: ``(("Ingress", ...), ...)``."""
        out = []
        if self.ingress is not None:
            out.append((INGRESS, self.ingress))
        if self.egress is not None:
            out.append((EGRESS, self.egress))
        return tuple(out)


@attrs.frozen
class StoredPolicy:
    """A NetworkPolicy as core's cache keeps it: read, with the status annotation it
    carries (what the controller last wrote)."""

    spec: PolicySpec
    status: str | None = None


def stored_policy(obj: Mapping[str, Any]) -> StoredPolicy:
    """The cache's view of a NetworkPolicy object (never raises)."""
    meta = obj.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    status = annotations.get(STATUS_ANNOTATION) if isinstance(annotations, Mapping) else None
    return StoredPolicy(read_policy(obj), status if isinstance(status, str) else None)


class _Reader:
    """Collects findings while one policy is read."""

    def __init__(self) -> None:
        self.findings: list[PolicyFinding] = []

    def invalid(self, field: str, message: str) -> None:
        self.findings.append(PolicyFinding(field, FindingReason.INVALID_VALUE, message))

    def unknown(self, obj: Mapping[str, Any], known: frozenset[str], field: str,
                effect: str) -> bool:
        """Finds the keys of ``obj`` podnet does not know; True when there are any."""
        extra = sorted(str(k) for k in obj if k not in known)
        for key in extra:
            self.findings.append(PolicyFinding(
                f"{field}.{key}", FindingReason.UNSUPPORTED_FIELD,
                f"podnet does not know the field {key!r}: {effect}"))
        return bool(extra)

    # --- selectors ---------------------------------------------------------------------

    def selector(self, raw: Any, field: str) -> Selector:
        if raw is None:
            return EVERYTHING
        if not isinstance(raw, Mapping):
            self.invalid(field, f"a label selector must be an object, not {_kind(raw)}; "
                                "it matches nothing")
            return NOTHING
        ok = not self.unknown(raw, _SELECTOR_FIELDS, field, "the selector matches nothing")
        reqs: list[tuple[str, str, frozenset[str]]] = []
        labels = raw.get("matchLabels")
        if isinstance(labels, Mapping):
            for k, v in sorted(labels.items(), key=lambda kv: str(kv[0])):
                if not isinstance(k, str) or not isinstance(v, str):
                    self.invalid(f"{field}.matchLabels", f"label {k!r}: {v!r} is not a "
                                 "string pair; the selector matches nothing")
                    ok = False
                    continue
                reqs.append((k, "In", frozenset((v,))))
        elif labels is not None:
            self.invalid(f"{field}.matchLabels", f"must be an object, not {_kind(labels)}; "
                         "the selector matches nothing")
            ok = False
        exprs = raw.get("matchExpressions")
        if isinstance(exprs, list):
            for i, expr in enumerate(exprs):
                req = self._expression(expr, f"{field}.matchExpressions[{i}]")
                if req is None:
                    ok = False
                else:
                    reqs.append(req)
        elif exprs is not None:
            self.invalid(f"{field}.matchExpressions", f"must be a list, not {_kind(exprs)}; "
                         "the selector matches nothing")
            ok = False
        return Selector(tuple(reqs)) if ok else NOTHING

    def _expression(self, expr: Any, field: str) -> tuple[str, str, frozenset[str]] | None:
        effect = "the selector matches nothing"
        if not isinstance(expr, Mapping):
            self.invalid(field, f"must be an object, not {_kind(expr)}; {effect}")
            return None
        if self.unknown(expr, _EXPRESSION_FIELDS, field, effect):
            return None
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values")
        if not isinstance(key, str) or not key:
            self.invalid(f"{field}.key", f"a label key is required; {effect}")
            return None
        if op not in _OPERATORS:
            self.invalid(f"{field}.operator", f"{op!r} is not an operator (In, NotIn, "
                         f"Exists, DoesNotExist); {effect}")
            return None
        if values is not None and not (
                isinstance(values, list) and all(isinstance(v, str) for v in values)):
            self.invalid(f"{field}.values", f"must be a list of strings; {effect}")
            return None
        if op in ("In", "NotIn") and not values:
            self.invalid(f"{field}.values", f"operator {op} needs at least one value; {effect}")
            return None
        if op in ("Exists", "DoesNotExist") and values:
            self.invalid(f"{field}.values", f"operator {op} takes no values; {effect}")
            return None
        return (key, str(op), frozenset(values or ()))

    # --- peers -------------------------------------------------------------------------

    def peer(self, raw: Any, field: str) -> PeerSpec | None:
        """One peer, or None when it is unreadable (it matches nothing)."""
        effect = "this peer matches nothing"
        if not isinstance(raw, Mapping):
            self.invalid(field, f"a peer must be an object, not {_kind(raw)}; {effect}")
            return None
        if self.unknown(raw, _PEER_FIELDS, field, effect):
            return None
        block = raw.get("ipBlock")
        if block is not None:
            if raw.get("podSelector") is not None or raw.get("namespaceSelector") is not None:
                self.invalid(field, f"ipBlock cannot be combined with a selector; {effect}")
                return None
            cidrs = self.ip_block(block, f"{field}.ipBlock")
            return None if cidrs is None else PeerSpec(cidrs=cidrs)
        pods, namespaces = raw.get("podSelector"), raw.get("namespaceSelector")
        if pods is None and namespaces is None:
            self.invalid(field, f"a peer needs podSelector, namespaceSelector or ipBlock; "
                                f"{effect}")
            return None
        pod_sel = None if pods is None else self.selector(pods, f"{field}.podSelector")
        ns_sel = (None if namespaces is None
                  else self.selector(namespaces, f"{field}.namespaceSelector"))
        if (pod_sel is not None and not pod_sel.valid) or (ns_sel is not None and not ns_sel.valid):
            return None
        return PeerSpec(pod_selector=pod_sel, namespace_selector=ns_sel)

    def ip_block(self, raw: Any, field: str) -> tuple[str, ...] | None:
        effect = "this peer matches nothing"
        if not isinstance(raw, Mapping):
            self.invalid(field, f"must be an object, not {_kind(raw)}; {effect}")
            return None
        if self.unknown(raw, _IPBLOCK_FIELDS, field, effect):
            return None
        text = raw.get("cidr")
        block = parse_cidr(text)
        if block is None:
            self.invalid(f"{field}.cidr", f"{text!r} is not a CIDR; {effect}")
            return None
        excepts = raw.get("except")
        if excepts is not None and not isinstance(excepts, list):
            self.invalid(f"{field}.except", f"must be a list of CIDRs; {effect}")
            return None
        cut: list[IPNetwork] = []
        for i, text in enumerate(excepts or ()):
            net = parse_cidr(text)
            if net is None:
                self.invalid(f"{field}.except[{i}]", f"{text!r} is not a CIDR; {effect}")
                return None
            if net.version != block.version or not net.subnet_of(block) or net == block:  # type: ignore[arg-type]
                self.invalid(f"{field}.except[{i}]", f"{text!r} is not inside the block "
                             f"{str(block)!r} (it must be a strict subset); {effect}")
                return None
            cut.append(net)
        return tuple(str(n) for n in exclude(block, cut))

    # --- ports -------------------------------------------------------------------------

    def port(self, raw: Any, field: str) -> PortSpec | None:
        effect = "this port matches nothing"
        if not isinstance(raw, Mapping):
            self.invalid(field, f"a port must be an object, not {_kind(raw)}; {effect}")
            return None
        if self.unknown(raw, _PORT_FIELDS, field, effect):
            return None
        proto_raw = raw.get("protocol")
        if proto_raw is None:
            protocol = Protocol.TCP
        elif proto_raw in Protocol.__members__.values():
            protocol = Protocol(proto_raw)
        else:
            self.invalid(f"{field}.protocol", f"{proto_raw!r} is not TCP, UDP or SCTP; {effect}")
            return None
        port, end = raw.get("port"), raw.get("endPort")
        if port is None:
            if end is not None:
                self.invalid(f"{field}.endPort", f"endPort needs a numeric port; {effect}")
                return None
            return PortSpec(protocol)
        if isinstance(port, str):
            if not _PORT_NAME.match(port):
                self.invalid(f"{field}.port", f"{port!r} is not a port number or a port "
                             f"name; {effect}")
                return None
            if end is not None:
                self.invalid(f"{field}.endPort", f"endPort cannot be used with the named "
                             f"port {port!r}; {effect}")
                return None
            return PortSpec(protocol, name=port)
        if not _is_port(port):
            self.invalid(f"{field}.port", f"{port!r} is not a port (1-65535); {effect}")
            return None
        if end is None:
            return PortSpec(protocol, port=port)
        if not _is_port(end) or end < port:
            self.invalid(f"{field}.endPort", f"{end!r} is not a port from {port} to 65535; "
                                             f"{effect}")
            return None
        return PortSpec(protocol, port=port, end_port=end)

    # --- rules -------------------------------------------------------------------------

    def rule(self, raw: Any, direction: str, field: str) -> RuleSpec:
        effect = "this rule allows nothing"
        if not isinstance(raw, Mapping):
            self.invalid(field, f"a rule must be an object, not {_kind(raw)}; {effect}")
            return RuleSpec(peers=())
        if self.unknown(raw, _RULE_FIELDS[direction], field, effect):
            return RuleSpec(peers=())
        peer_key = "from" if direction == INGRESS else "to"
        peers: tuple[PeerSpec, ...] | None = None
        raw_peers = raw.get(peer_key)
        if isinstance(raw_peers, list) and raw_peers:
            read = (self.peer(p, f"{field}.{peer_key}[{i}]") for i, p in enumerate(raw_peers))
            peers = tuple(p for p in read if p is not None)
        elif raw_peers is not None and not isinstance(raw_peers, list):
            self.invalid(f"{field}.{peer_key}", f"must be a list, not {_kind(raw_peers)}; "
                                                f"{effect}")
            peers = ()
        ports: tuple[PortSpec, ...] | None = None
        raw_ports = raw.get("ports")
        if isinstance(raw_ports, list) and raw_ports:
            readp = (self.port(p, f"{field}.ports[{i}]") for i, p in enumerate(raw_ports))
            ports = tuple(p for p in readp if p is not None)
        elif raw_ports is not None and not isinstance(raw_ports, list):
            self.invalid(f"{field}.ports", f"must be a list, not {_kind(raw_ports)}; {effect}")
            ports = ()
        return RuleSpec(peers=peers, ports=ports)

    def rules(self, raw: Any, direction: str, field: str) -> tuple[RuleSpec, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.invalid(field, f"must be a list, not {_kind(raw)}; the direction allows "
                                "nothing")
            return ()
        return tuple(self.rule(r, direction, f"{field}[{i}]") for i, r in enumerate(raw))

    def policy_types(self, spec: Mapping[str, Any]) -> tuple[bool, bool]:
        """Whether the policy restricts (ingress, egress)."""
        raw = spec.get("policyTypes")
        types: set[str] = set()
        if isinstance(raw, list):
            for i, value in enumerate(raw):
                if value in (INGRESS, EGRESS):
                    types.add(value)
                else:
                    self.invalid(f"spec.policyTypes[{i}]",
                                 f"{value!r} is not Ingress or Egress; it is ignored")
        elif raw is not None:
            self.invalid("spec.policyTypes", f"must be a list, not {_kind(raw)}; the "
                                             "default applies")
        if not types:
            # the API's default: Ingress, and Egress when the policy has egress rules
            egress = spec.get("egress")
            return True, isinstance(egress, list) and bool(egress)
        return INGRESS in types, EGRESS in types


def read_policy(obj: Mapping[str, Any]) -> PolicySpec:
    """The policy ``obj`` (its JSON as the API returns it), with its findings; never
    raises."""
    reader = _Reader()
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        if spec is not None:
            reader.invalid("spec", f"must be an object, not {_kind(spec)}")
        spec = {}
    reader.unknown(spec, _SPEC_FIELDS, "spec", "it is ignored, the rest is enforced")
    pod_selector = reader.selector(spec.get("podSelector"), "spec.podSelector")
    if not pod_selector.valid:
        reader.findings.append(PolicyFinding(
            "spec.podSelector", FindingReason.INVALID_VALUE,
            "the policy selects no pod while its podSelector cannot be read"))
    restricts_ingress, restricts_egress = reader.policy_types(spec)
    ingress = reader.rules(spec.get("ingress"), INGRESS, "spec.ingress")
    egress = reader.rules(spec.get("egress"), EGRESS, "spec.egress")
    generation = meta.get("generation")
    return PolicySpec(
        namespace=_str(meta.get("namespace")) or "default",
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        generation=generation if isinstance(generation, int) else 0,
        pod_selector=pod_selector,
        ingress=ingress if restricts_ingress else None,
        egress=egress if restricts_egress else None,
        findings=tuple(reader.findings),
    )


def parse_cidr(text: Any) -> IPNetwork | None:
    """A CIDR as the API server's lenient parser reads it (IPv4 leading zeros are
    decimal; host bits are dropped), or None."""
    if not isinstance(text, str) or "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        pass
    m = _SLOPPY_V4.match(text.strip())
    if m is None or m.group(5) is None:
        return None
    octets = [int(g) for g in m.groups()[:4]]
    if any(o > 255 for o in octets):
        return None
    try:
        return ipaddress.ip_network(f"{'.'.join(map(str, octets))}/{int(m.group(5))}",
                                    strict=False)
    except ValueError:
        return None


def exclude(block: IPNetwork, cut: list[IPNetwork]) -> list[IPNetwork]:
    """``block`` minus every network of ``cut`` (each inside it), as the fewest prefixes."""
    pieces: list[IPNetwork] = [block]
    for net in cut:
        out: list[IPNetwork] = []
        for piece in pieces:
            if piece.subnet_of(net):  # type: ignore[arg-type]
                continue
            if net.subnet_of(piece):  # type: ignore[arg-type]
                out.extend(piece.address_exclude(net))  # type: ignore[arg-type]
            else:
                out.append(piece)
        pieces = out
    return list(ipaddress.collapse_addresses(pieces))  # type: ignore[type-var]


def _is_port(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 65535


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
