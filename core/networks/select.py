"""Which Subnet and IPPool a pod network of a provider takes (the same rules for every
provider), from the evaluation, the pod's request, its Namespace and its Node.

The Subnet: the pod's ``podnet.io/subnets`` first entry naming a Subnet object; else its
Namespace's ``podnet.io/subnets``; else a Subnet listing the namespace in ``namespaces``
or selecting its labels with ``namespaceSelector`` (oldest first); else the provider's
``default`` Subnet. Each only where its ``nodeSelector`` takes the node. A pod naming an
IPPool object and no Subnet takes the pool's Subnet. An entry that names no Subnet object
keeps its old meaning (a provider's own subnet id).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from podnet.core.annotations import IP_POOL, SUBNETS, annotation_field, is_ip
from podnet.core.errors import InvalidRequest
from podnet.core.networks.catalog import Evaluation
from podnet.hookspecs.networks import IPPoolInfo, Networks, SubnetInfo

SUBNETS_FIELD = annotation_field(SUBNETS)
POOL_FIELD = annotation_field(IP_POOL)


@attrs.frozen
class Choice:
    """What the pod network takes: ``subnet`` and ``ip_pool`` (None: none, or the provider
    has no Subnet objects), ``invalid`` (a named object that cannot serve), ``wait``
    (nothing selects it yet: why)."""

    subnet: SubnetInfo | None = None
    ip_pool: IPPoolInfo | None = None
    invalid: InvalidRequest | None = None
    wait: str | None = None


NONE = Choice()


class _NotYet(Exception):
    """A named object is Ready but its provider has not been told yet: a wait."""


def choose(ev: Evaluation, nets: Networks, *, provider: str, namespace: str,
           pod_subnets: Sequence[str], pod_pool: Sequence[str],
           namespace_annotations: Mapping[str, str], namespace_labels: Mapping[str, str],
           node: str, node_labels: Mapping[str, str]) -> Choice:
    """``ev``: every object's verdict (what a refusal says); ``nets``: what the provider
    was last told is usable, the only Subnets and pools a pod network takes."""
    if provider not in ev.with_subnets:
        return NONE
    try:
        pool = _named_pool(ev, nets, provider, pod_pool)
        subnet = _named(ev, nets, provider, pod_subnets, SUBNETS_FIELD, node, node_labels)
        if subnet is None and pool is not None:
            subnet = _named(ev, nets, provider, (pool.subnet,), POOL_FIELD, node,
                            node_labels)
        if subnet is None:
            listed = [s.strip() for s in
                      namespace_annotations.get(SUBNETS, "").split(",") if s.strip()]
            subnet = _named(ev, nets, provider, listed,
                            f"namespace {namespace} annotation {SUBNETS}", node, node_labels)
    except InvalidRequest as exc:
        return Choice(invalid=exc)
    except _NotYet as exc:
        return Choice(wait=str(exc))
    if subnet is None:
        for s in nets.subnets:  # oldest first
            if not _node_ok(s, node_labels):
                continue
            if namespace in s.namespaces or (
                    s.namespace_selector is not None
                    and s.namespace_selector.matches(namespace_labels)):
                subnet = s
                break
    if subnet is None:
        subnet = next((s for s in nets.subnets if s.default and _node_ok(s, node_labels)),
                      None)
    if subnet is None:
        return Choice(wait=f"no Subnet of provider {provider} serves namespace {namespace} "
                           f"on node {node} (none lists or selects it, and no default "
                           "Subnet takes the node)")
    if pool is not None:
        if pool.subnet != subnet.name:
            return Choice(invalid=InvalidRequest(
                POOL_FIELD, f"IPPool {pool.name} is in Subnet {pool.subnet}, but the pod "
                f"network's Subnet is {subnet.name}"))
        return Choice(subnet=subnet, ip_pool=pool)
    pool = next((p for p in nets.pools if p.subnet == subnet.name and namespace in p.namespaces),
                None)
    return Choice(subnet=subnet, ip_pool=pool)


def _node_ok(subnet: SubnetInfo, node_labels: Mapping[str, str]) -> bool:
    return subnet.node_selector is None or subnet.node_selector.matches(node_labels)


def _named(ev: Evaluation, nets: Networks, provider: str, names: Sequence[str], field: str,
           node: str, node_labels: Mapping[str, str]) -> SubnetInfo | None:
    """The first of ``names`` that is a Subnet object, checked; None when none is."""
    for name in names:
        entry = ev.subnets.get(name)
        if entry is None:
            continue  # a provider's own subnet id
        declared, verdict = entry
        info = declared.info
        if isinstance(info, SubnetInfo) and info.provider != provider:
            raise InvalidRequest(field, f"Subnet {name} is of provider {info.provider}, not "
                                 f"{provider}")
        if not verdict.ready:
            raise InvalidRequest(field, f"Subnet {name} is not Ready ({verdict.reason}: "
                                 f"{verdict.message})")
        ready = nets.subnet(name)
        if ready is None:
            raise _NotYet(f"Subnet {name} is Ready; provider {provider} is not told yet")
        if not _node_ok(ready, node_labels):
            raise InvalidRequest(field, f"Subnet {name}'s nodeSelector does not take node "
                                 f"{node}")
        return ready
    return None


def _named_pool(ev: Evaluation, nets: Networks, provider: str, names: Sequence[str]
                ) -> IPPoolInfo | None:
    """The IPPool object ``podnet.io/ip-pool`` names (one name that is not an address)."""
    if len(names) != 1 or is_ip(names[0]) or names[0] not in ev.pools:
        return None
    name = names[0]
    _, verdict = ev.pools[name]
    if not verdict.ready:
        raise InvalidRequest(POOL_FIELD, f"IPPool {name} is not Ready ({verdict.reason}: "
                             f"{verdict.message})")
    pool = nets.pool(name)
    if pool is None:
        # Ready, but not among what the provider was told: another provider's, or not
        # published yet
        declared = ev.pools[name][0].info
        entry = ev.subnets.get(declared.subnet) if isinstance(declared, IPPoolInfo) else None
        subnet = entry[0].info if entry is not None else None
        if isinstance(subnet, SubnetInfo) and subnet.provider != provider:
            raise InvalidRequest(POOL_FIELD, f"IPPool {name} is in Subnet {subnet.name} of "
                                 f"provider {subnet.provider}, not {provider}")
        raise _NotYet(f"IPPool {name} is Ready; provider {provider} is not told yet")
    return pool


def subnets_for_node(nets: Networks, node_labels: Mapping[str, str]) -> tuple[SubnetInfo, ...]:
    """The usable Subnets (as last told to their provider) whose nodeSelector takes the
    node (``NodeContext.subnets``)."""
    return tuple(s for s in nets.subnets if _node_ok(s, node_labels))
