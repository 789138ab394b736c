"""What the emulator serves: one :class:`Resource` per kind, with what discovery,
selectors and ``kubectl get``'s tables say of it; the built-ins' list and a podnet CRD's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
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
from podnet.sim.memory import STATUS_SUBRESOURCE

from .kinds import (
    CONFIG_MAP,
    EVENTS_V1,
    EVICTION_DISCOVERY,
    SECRET,
    SERVICE,
    SERVICE_ACCOUNT,
    VIEWS,
)
from .schema import CustomResource, PrinterColumn, find_path

__all__ = ["BUILTINS", "Cell", "Resource", "column", "crd_resource", "human_duration"]

VERBS: Final = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
STATUS_VERBS: Final = ["get", "patch", "update"]

#: one table cell of an object
Cell = Callable[[Obj], Any]


@dataclass(frozen=True)
class Resource:
    """One served resource: its kind and what discovery, selectors and tables say of it."""

    kind: Kind
    singular: str
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    #: field selectors the real server accepts; None leaves it to the cluster
    field_selectors: frozenset[str] | None = None
    crd: CustomResource | None = None
    #: table columns besides Name (and Age, unless the CRD declares its own)
    columns: tuple[tuple[Obj, Cell], ...] = field(default=(), compare=False)
    #: the kind whose store this one is a view of (events.k8s.io/v1 Events: core/v1's)
    stored_as: Kind | None = None

    @property
    def store_kind(self) -> Kind:
        return self.stored_as or self.kind

    def shown(self, obj: Obj) -> Obj:
        """A stored object as this resource shows it."""
        return VIEWS[self.kind][0](obj) if self.stored_as else obj

    def to_store(self, obj: Obj) -> Obj:
        """An object of this resource as its store keeps it."""
        return VIEWS[self.kind][1](obj) if self.stored_as else obj

    @property
    def has_status(self) -> bool:
        return self.kind in STATUS_SUBRESOURCE

    @property
    def age_column(self) -> bool:
        return self.crd is None or not self.crd.columns

    @property
    def list_kind(self) -> str:
        return self.crd.list_kind if self.crd else self.kind.kind + "List"

    def discovery(self) -> list[Obj]:
        main: Obj = {
            "name": self.kind.plural,
            "singularName": self.singular,
            "namespaced": self.kind.namespaced,
            "kind": self.kind.kind,
            "verbs": VERBS,
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        out = [main]
        if self.kind == POD:
            out.append(dict(EVICTION_DISCOVERY))
        if self.has_status:
            out.append(
                {
                    "name": f"{self.kind.plural}/status",
                    "singularName": "",
                    "namespaced": self.kind.namespaced,
                    "kind": self.kind.kind,
                    "verbs": STATUS_VERBS,
                }
            )
        return out


def column(name: str, type_: str = "string", priority: int = 0, **extra: str) -> Obj:
    base: Obj = {"name": name, "type": type_, "format": "", "description": "", "priority": priority}
    return base | extra


def human_duration(seconds: float) -> str:
    """An age as kubectl prints it (upstream's ``duration.HumanDuration``)."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = hours // 24 // 365, (hours // 24) % 365
        return f"{years}y{days}d" if days else f"{years}y"
    return f"{hours // 24 // 365}y"


_NAME_AND_NAMESPACE: Final = frozenset({"metadata.name", "metadata.namespace"})


#: pods and events, as the cluster's); their tables are ``tables``'.
BUILTINS: Final = (
    Resource(POD, "pod", ("po",), ("all",)),
    Resource(
        NODE,
        "node",
        ("no",),
        field_selectors=frozenset({"metadata.name", "spec.unschedulable"}),
    ),
    Resource(
        NAMESPACE,
        "namespace",
        ("ns",),
        field_selectors=frozenset({"metadata.name", "status.phase"}),
    ),
    Resource(EVENT, "event", ("ev",)),
    Resource(
        LEASE,
        "lease",
        field_selectors=_NAME_AND_NAMESPACE,
    ),
    Resource(
        CONFIG_MAP,
        "configmap",
        ("cm",),
        field_selectors=_NAME_AND_NAMESPACE,
    ),
    Resource(
        SECRET,
        "secret",
        field_selectors=_NAME_AND_NAMESPACE,
    ),
    Resource(
        SERVICE_ACCOUNT,
        "serviceaccount",
        ("sa",),
        field_selectors=_NAME_AND_NAMESPACE,
    ),
    Resource(
        SERVICE,
        "service",
        ("svc",),
        ("all",),
        field_selectors=frozenset({"metadata.name", "metadata.namespace", "spec.clusterIP",
                                   "spec.type"}),
    ),
    Resource(
        EVENTS_V1,
        "event",
        ("ev",),
        field_selectors=_NAME_AND_NAMESPACE,
        stored_as=EVENT,
    ),
    Resource(
        STATEFUL_SET,
        "statefulset",
        ("sts",),
        ("all",),
        field_selectors=_NAME_AND_NAMESPACE,
    ),
    Resource(
        NETWORK_POLICY,
        "networkpolicy",
        ("netpol",),
        field_selectors=_NAME_AND_NAMESPACE,
    ),
)


def _crd_cell(col: PrinterColumn) -> Cell:
    def cell(obj: Obj) -> Any:
        found = find_path(obj, col.json_path)
        if not found:
            return None
        value = found[0]  # upstream shows the first match only
        if col.type == "string":
            return value if isinstance(value, str) else json.dumps(value)
        if col.type == "integer" and isinstance(value, int | float):
            return int(value)
        if col.type == "number" and isinstance(value, int | float):
            return float(value)
        if col.type == "boolean" and isinstance(value, bool):
            return value
        if col.type == "date" and isinstance(value, str):
            return value  # made an age by the table builder, which knows the clock
        return None

    return cell


def crd_resource(crd: CustomResource) -> Resource:
    columns = tuple(
        (
            column(
                c.name,
                c.type,
                c.priority,
                format=c.format,
                description=c.description or f"Custom resource definition column (in JSONPath "
                f"format): {c.json_path}",
            ),
            _crd_cell(c),
        )
        for c in crd.columns
    )
    return Resource(
        crd.ref,
        crd.singular,
        crd.short_names,
        crd.categories,
        field_selectors=crd.field_selectors,
        crd=crd,
        columns=columns,
    )
