"""The wire shapes of the Subnet, IPPool and SecurityGroup objects (group ``podnet.io``,
version ``v1alpha1``), as :mod:`podnet.core.convert` reads and writes them: the spec as an
operator writes it (strict: an unknown key is an error naming it), the status as the
controller writes it. What providers see is :mod:`podnet.hookspecs.networks`, made from
these by :mod:`podnet.core.networks.checks`."""

from __future__ import annotations

from typing import Any

import attrs

from podnet.hookspecs.models import API_VERSION, Condition, ObjectMeta

#: fields whose wire key is not the camelCase of their name
RENAMED: dict[tuple[str, str], str] = {
    ("SubnetSpec", "exclude_ips"): "excludeIPs",
    ("SubnetStatus", "v4_available_ips"): "v4AvailableIPs",
    ("SubnetStatus", "v4_using_ips"): "v4UsingIPs",
    ("SubnetStatus", "v4_reserved_ips"): "v4ReservedIPs",
    ("SubnetStatus", "v4_excluded_ips"): "v4ExcludedIPs",
    ("SubnetStatus", "v6_available_ips"): "v6AvailableIPs",
    ("SubnetStatus", "v6_using_ips"): "v6UsingIPs",
    ("SubnetStatus", "v6_reserved_ips"): "v6ReservedIPs",
    ("SubnetStatus", "v6_excluded_ips"): "v6ExcludedIPs",
    ("SubnetStatus", "outside_ips"): "outsideIPs",
    ("IPPoolStatus", "v4_available_ips"): "v4AvailableIPs",
    ("IPPoolStatus", "v4_using_ips"): "v4UsingIPs",
    ("IPPoolStatus", "v6_available_ips"): "v6AvailableIPs",
    ("IPPoolStatus", "v6_using_ips"): "v6UsingIPs",
}


@attrs.frozen
class SelectorRequirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@attrs.frozen
class LabelSelector:
    match_labels: dict[str, str] = attrs.field(factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()


@attrs.frozen
class SubnetSpec:
    provider: str
    cidr_block: str
    gateway: str | None = None
    exclude_ips: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    node_selector: LabelSelector | None = None
    default: bool = False
    parameters: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class ProviderRealization:
    summary: str = ""
    details: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class SubnetStatus:
    phase: str = "Pending"
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    v4_available_ips: int | None = None
    v4_using_ips: int | None = None
    v4_reserved_ips: int | None = None
    v4_excluded_ips: int | None = None
    v6_available_ips: float | None = None
    v6_using_ips: float | None = None
    v6_reserved_ips: float | None = None
    v6_excluded_ips: float | None = None
    outside_ips: tuple[str, ...] = ()
    provider: ProviderRealization | None = None


@attrs.frozen
class Subnet:
    metadata: ObjectMeta
    spec: SubnetSpec
    api_version: str = API_VERSION
    kind: str = "Subnet"
    #: read as written (the controller's own): compared, never trusted for a decision
    status: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class IPPoolSpec:
    subnet: str
    addresses: tuple[str, ...]
    namespaces: tuple[str, ...] = ()


@attrs.frozen
class HeldAddress:
    ip: str
    pod_network: str


@attrs.frozen
class IPPoolStatus:
    phase: str = "Pending"
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    v4_available_ips: int | None = None
    v4_using_ips: int | None = None
    v6_available_ips: float | None = None
    v6_using_ips: float | None = None
    held: tuple[HeldAddress, ...] = ()


@attrs.frozen
class IPPool:
    metadata: ObjectMeta
    spec: IPPoolSpec
    api_version: str = API_VERSION
    kind: str = "IPPool"
    status: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class IngressRule:
    protocol: str = "all"
    port: str | None = None
    from_: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@attrs.frozen
class EgressRule:
    protocol: str = "all"
    port: str | None = None
    to: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@attrs.frozen
class SecurityGroupSpec:
    #: ``None``: the direction is left out (not restricted); ``()``: nothing allowed
    ingress: tuple[IngressRule, ...] | None = None
    egress: tuple[EgressRule, ...] | None = None


@attrs.frozen
class SecurityGroupStatus:
    phase: str = "Pending"
    observed_generation: int | None = None
    conditions: tuple[Condition, ...] = ()
    ingress_rules: int | None = None
    egress_rules: int | None = None


@attrs.frozen
class SecurityGroup:
    metadata: ObjectMeta
    spec: SecurityGroupSpec = SecurityGroupSpec()
    api_version: str = API_VERSION
    kind: str = "SecurityGroup"
    status: dict[str, Any] = attrs.field(factory=dict)
