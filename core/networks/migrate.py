"""The migration of a config file's networks to objects.

A config that still declares subnets, pools, security groups or attachment networks in a
provider's section keeps working; on the first start as leader, the controller asks each
provider what its section declares (``podnet_config_networks``) and creates the Subnet,
IPPool and SecurityGroup objects that do not exist yet, once. An object of the same name
is the operator's and is never overwritten (nor compared: the operator may have edited
it). A refused object (the API server's validation) is reported and the others are still
made. What was made carries the annotation :data:`MIGRATED_FROM` naming the section.

"Once" is kept in a ConfigMap of the controller's namespace (:data:`MARKER`): every object
migrated (made, or found made) is listed there, and a later start makes none of them
again, so an operator who deletes a migrated Subnet keeps it deleted while the config file
still declares it; an entry the config gains later is migrated at the next start.

The objects are written in their wire form (the CRDs in ``sim/crds/``), as plain dicts.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from podnet.core.cluster.port import (
    CONFIG_MAP,
    IP_POOL,
    SECURITY_GROUP,
    SUBNET,
    AlreadyExists,
    Cluster,
    Forbidden,
    Invalid,
    Kind,
    NotFound,
)
from podnet.hookspecs.networks import (
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SecurityRule,
    SelectorTerm,
    SubnetInfo,
)

__all__ = [
    "MIGRATED_FROM",
    "Migration",
    "ip_pool_object",
    "migrate_networks",
    "security_group_object",
    "subnet_object",
]

log = logging.getLogger(__name__)

#: on each object the migration made: the config section it came from
MIGRATED_FROM = "podnet.io/migrated-from"
#: the ConfigMap (in the controller's namespace) listing what was migrated, one
#: ``Kind/name`` a line under :data:`MARKER_KEY`
MARKER = "podnet-networks-migrated"
MARKER_KEY = "objects"


@attrs.frozen
class Migration:
    """What one migration did, per object (``"Subnet blue"``)."""

    created: tuple[str, ...] = ()
    #: an object of that name existed: left as it is
    kept: tuple[str, ...] = ()
    #: the API server refused it (``"Subnet blue: <why>"``); the others were still made
    refused: tuple[str, ...] = ()
    #: migrated at an earlier start (the marker lists it): not made again
    done_before: tuple[str, ...] = ()


def _selector(term: SelectorTerm | None) -> dict[str, Any] | None:
    if term is None:
        return None
    out: dict[str, Any] = {}
    if term.match_labels:
        out["matchLabels"] = dict(term.match_labels)
    if term.match_expressions:
        out["matchExpressions"] = [
            {"key": key, "operator": op, **({"values": list(values)} if values else {})}
            for key, op, values in term.match_expressions
        ]
    return out


def _metadata(name: str, source: str) -> dict[str, Any]:
    return {"name": name, "annotations": {MIGRATED_FROM: source}}


def subnet_object(subnet: SubnetInfo, source: str) -> dict[str, Any]:
    """A Subnet in its wire form; fields left at their default are left out."""
    spec: dict[str, Any] = {"provider": subnet.provider, "cidrBlock": ",".join(subnet.cidrs)}
    if subnet.gateways:
        spec["gateway"] = ",".join(subnet.gateways)
    if subnet.excluded:
        spec["excludeIPs"] = list(subnet.excluded)
    if subnet.namespaces:
        spec["namespaces"] = list(subnet.namespaces)
    for key, term in (("namespaceSelector", subnet.namespace_selector),
                      ("nodeSelector", subnet.node_selector)):
        shown = _selector(term)
        if shown is not None:
            spec[key] = shown
    if subnet.default:
        spec["default"] = True
    if subnet.parameters:
        spec["parameters"] = dict(subnet.parameters)
    return {"apiVersion": SUBNET.api_version, "kind": SUBNET.kind,
            "metadata": _metadata(subnet.name, source), "spec": spec}


def ip_pool_object(pool: IPPoolInfo, source: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"subnet": pool.subnet, "addresses": list(pool.addresses)}
    if pool.namespaces:
        spec["namespaces"] = list(pool.namespaces)
    return {"apiVersion": IP_POOL.api_version, "kind": IP_POOL.kind,
            "metadata": _metadata(pool.name, source), "spec": spec}


def _rule(rule: SecurityRule, peer: str) -> dict[str, Any]:
    out: dict[str, Any] = {"protocol": rule.protocol}
    if rule.ports is not None:
        low, high = rule.ports
        out["port"] = str(low) if low == high else f"{low}-{high}"
    if rule.cidrs:
        out[peer] = list(rule.cidrs)
    if rule.groups:
        out["groups"] = list(rule.groups)
    return out


def security_group_object(group: SecurityGroupInfo, source: str) -> dict[str, Any]:
    """A SecurityGroup in its wire form: the rule keys of the OVN section's groups. A
    direction that is not restricted (one allow-all rule: how a section's left-out
    direction reads) is left out; one that allows nothing is an empty list."""
    spec: dict[str, Any] = {}
    for side, rules, peer in (("ingress", group.ingress, "from"),
                              ("egress", group.egress, "to")):
        if rules != (SecurityRule(),):
            spec[side] = [_rule(r, peer) for r in rules]
    return {"apiVersion": SECURITY_GROUP.api_version, "kind": SECURITY_GROUP.kind,
            "metadata": _metadata(group.name, source), "spec": spec}


def _objects(declared: Mapping[str, Networks]
             ) -> Iterable[tuple[Kind, dict[str, Any]]]:
    """Every object the sections declare, Subnets first (a pool names its Subnet), each
    name once: a security group two sections declare is the first one's."""
    seen: set[tuple[str, str]] = set()
    ordered = sorted(declared.items())
    wanted: list[tuple[Kind, str, str, dict[str, Any]]] = []
    for provider, networks in ordered:
        source = f"providers.{provider}"
        wanted += [(SUBNET, provider, s.name, subnet_object(s, source))
                   for s in networks.subnets]
    for provider, networks in ordered:
        source = f"providers.{provider}"
        wanted += [(IP_POOL, provider, p.name, ip_pool_object(p, source))
                   for p in networks.pools]
    for provider, networks in ordered:
        source = f"providers.{provider}"
        wanted += [(SECURITY_GROUP, provider, g.name, security_group_object(g, source))
                   for g in networks.security_groups]
    for kind, provider, name, obj in wanted:
        if (kind.kind, name) in seen:
            log.warning("migration: %s %s is declared by more than one section; the first "
                        "one's is used (providers.%s's is not)", kind.kind, name, provider)
            continue
        seen.add((kind.kind, name))
        yield kind, obj


def _marker(cluster: Cluster, namespace: str) -> tuple[dict[str, Any] | None, set[str]]:
    try:
        obj = cluster.get(CONFIG_MAP, MARKER, namespace)
    except NotFound:
        return None, set()
    text = (obj.get("data") or {}).get(MARKER_KEY, "")
    return obj, {line for line in text.splitlines() if line.strip()}


def _save_marker(cluster: Cluster, namespace: str, obj: dict[str, Any] | None,
                 done: set[str]) -> None:
    data = {MARKER_KEY: "".join(f"{line}\n" for line in sorted(done))}
    if obj is None:
        cluster.create(CONFIG_MAP, {"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": MARKER, "namespace": namespace},
                                    "data": data})
    else:
        cluster.update(CONFIG_MAP, {**obj, "data": data})


def migrate_networks(cluster: Cluster, declared: Mapping[str, Networks | None],
                     namespace: str | None = None) -> Migration:
    """Create each object ``declared`` (provider -> what its config section declares)
    that does not exist yet; never overwrite one. With ``namespace``, the marker
    ConfigMap there says what an earlier start migrated (not made again) and is updated
    with what this one did. Logs and answers what it did.
    :raises ApiError: other than 422/403 (a retry makes only what is still missing)."""
    created: list[str] = []
    kept: list[str] = []
    refused: list[str] = []
    before: list[str] = []
    present = {p: n for p, n in declared.items() if n is not None}
    marker, done = _marker(cluster, namespace) if namespace else (None, set())
    for kind, obj in _objects(present):
        what = f"{kind.kind} {obj['metadata']['name']}"
        entry = f"{kind.kind}/{obj['metadata']['name']}"
        if entry in done:
            before.append(what)
            continue
        source = obj["metadata"]["annotations"][MIGRATED_FROM]
        try:
            cluster.create(kind, obj)
        except AlreadyExists:
            kept.append(what)
            done.add(entry)
            log.info("migration: %s exists; the config's (%s) is not applied over it",
                     what, source)
            continue
        except (Invalid, Forbidden) as exc:
            # one refused object stops no other (nothing else depends on its creation);
            # any other error (the API server unavailable) ends the run for the caller to
            # retry: what was made is kept the next time
            refused.append(f"{what}: {exc}")
            log.error("migration: %s from %s was refused: %s", what, source, exc)
            continue
        created.append(what)
        done.add(entry)
        log.info("migration: created %s from %s", what, source)
    if namespace and (created or kept):
        try:
            _save_marker(cluster, namespace, marker, done)
        except (Invalid, Forbidden) as exc:
            # the objects are made; without the marker a later start finds them (kept),
            # and only one an operator deleted meanwhile would be made again
            log.error("migration: could not record what was migrated in ConfigMap %s/%s: "
                      "%s", namespace, MARKER, exc)
    return Migration(tuple(created), tuple(kept), tuple(refused), tuple(before))
