# Over 800 lines on purpose: the provider contract is one module of hooks, as pytest's
# hookspec.py is, each with the docstring a third-party author reads; splitting it would
# send them to several files for one list of calls.
"""The provider contract: every hook podnet calls, typed and documented.

A provider is a pluggy plugin of project ``podnet``. Each hook is either **routed** to
the one provider it names or **broadcast** to every plugin: each hookspec declares which
(:func:`~podnet.hookspecs.routing.routed`, :func:`~podnet.hookspecs.routing.broadcast`),
:data:`~podnet.hookspecs.routing.ROUTING` holds the declarations, and core's gateway
refuses a call that does not match its hook's. A routed hook reaches the plugin that
declared the provider it names and the plugins that declare no provider, never another
provider's plugin, so a provider needs no check of the name it is called for.

**One door.** Everything a provider may import from podnet is here: this module (the
hooks, ``hookimpl``), :mod:`~podnet.hookspecs.models`, :mod:`~podnet.hookspecs.types`,
:mod:`~podnet.hookspecs.errors`, :mod:`~podnet.hookspecs.policy`,
:mod:`~podnet.hookspecs.annotations` (reading ``podnet.io/*`` values),
:mod:`~podnet.hookspecs.sections` (a provider's config section),
:mod:`~podnet.hookspecs.routing`, :mod:`~podnet.hookspecs.demo`;
and the node-side library ``podnet.linux``. Nothing of ``podnet.core``.

**The contract's version is the package's** (:data:`CONTRACT_VERSION`; a test holds them
equal). What changed when:

- 0.9.0: ``NodeContext.read_only`` (a report's read of ``podnet_node_inventory``:
  change nothing); ``NodeInfo.uninitialized`` (the cloud controller manager has not
  initialized the node yet: its labels may still come); ``CloudInterface.trunk`` is made
  by the ECS provider at pool build when its ``trunk`` setting is on; KubeVirt live
  migration: ``models.LABEL_MIGRATION_JOB`` (the target pod's label),
  ``ANNOTATION_MIGRATION_SOURCE``/``_NODE`` (on the VM's record while it migrates: a
  provider binds the VM's port on both nodes meanwhile, as OVN does; the source node is
  a label too, ``LABEL_MIGRATION_SOURCE_NODE``, which the source node's agent lists);
  ``netpol.PolicyRealization.waiting`` (not programmed yet, and no failure: the
  dataplane has not caught up; core says Pending and asks again soon).
- 0.8.0: NetworkPolicy (:mod:`~podnet.hookspecs.netpol`: core resolves each policy to
  :class:`~podnet.hookspecs.netpol.ResolvedPolicy`): ``podnet_network_policy`` for a
  provider that enforces it itself (``ProviderInfo.network_policy`` is
  ``Enforcement.PROVIDER``; every other provider's pods are enforced by the node agent);
  ``PodInfo.named_ports`` (the containers' named ports);
  ``AllocateContext.network_policies`` and ``PodNetworkContext.network_policies`` (the
  policies selecting the pod, for such a provider: a new port joins them as it is made).
- 0.7.0: networks as Kubernetes objects (:mod:`~podnet.hookspecs.networks`: Subnet,
  IPPool, SecurityGroup): ``podnet_subnet_parameters`` checks and realizes a Subnet's
  provider parameters, ``podnet_networks_changed`` hands a provider what is usable,
  ``podnet_config_networks`` says what its config section declares (the migration);
  ``AllocateContext.subnet`` and ``.ip_pool`` (core's choice for the pod network),
  ``NodeContext.subnets`` (the Subnets a node's pods may use).
- 0.6.0: one door (everything a provider imports comes from ``podnet.hookspecs``;
  ``podnet.core`` is no longer public to providers); routing is data the gateway checks
  (:data:`~podnet.hookspecs.routing.ROUTING`); ``podnet_unknown_machines``; a node-side
  dataplane may offer what the agent reports of it (``report_annotations``, the optional
  ``podnet.linux.hooks.ReportsAnnotations``) instead of the agent knowing its class.
- 0.5.0: a node that left the cluster is given back through the node pool hooks
  (inventory, shrink, dispose) before ``podnet_node_removed``; ``podnet_sweep`` serves
  node-pool providers too.
- 0.4.0: ``podnet_cloud_limiter``'s ``limiter.observe`` reports each request per API.
- 0.3.0: routed hooks (before, every hook went to every plugin and each answered only for
  its own name); ``podnet_address_space``; the node agent's ``podnet_plug``,
  ``podnet_unplug``, ``podnet_check_plug``, ``podnet_plugs``.
- 0.2.0: ``podnet_cloud_limiter``, ``podnet_node_check``, ``podnet_sweep``,
  ``podnet_node_removed``.
- 0.1.0: the first contract.

Every hook must be idempotent: the engine may call it again after a crash, with the same
arguments, and the second call must converge to the same outcome without creating a
second resource. Hooks raise :class:`podnet.hookspecs.errors.ProviderError` (or the SDK's own
exception, classified by ``podnet_classify_error``) when they fail; the engine then leaves
the machine's state unchanged, records a condition and an Event, and retries with backoff.

Order in which the engine calls them (see docs/writing-a-provider.md):

1. ``podnet_register_provider``, ``podnet_configure``, ``podnet_cloud_limiter`` — once,
   at start.
2. ``podnet_select_provider``, ``podnet_select_networks`` — per node and per pod.
3. ``podnet_node_inventory`` — per node, before its pool is used, and on resync;
   ``podnet_unknown_machines`` — by ``podnet audit`` only: the machines no Node and no
   record names, whose inventories it reads.
4. ``podnet_interface_create`` / ``podnet_interface_dispose``,
   ``podnet_pool_grow`` / ``podnet_pool_shrink`` — by the node pool reconciler.
5. ``podnet_node_check`` — by the node pool reconciler, at most every
   ``node_check_period`` per node, after a successful pass: read-only findings.
   ``podnet_network_policy`` — by the NetworkPolicy reconciler, per policy, for a provider
   that enforces policy itself; ``podnet_network_policy_keys`` — once at start, to find
   what policies deleted meanwhile left.
6. ``podnet_address_space`` (for a request naming an address, a pool or subnets) →
   ``podnet_allocate`` → ``podnet_route`` → (``podnet_verify`` on resync) →
   ``podnet_release`` — by the pod network reconciler, one per transition.
7. ``podnet_hold_address`` — while a sticky pod network waits for its pod to return.
8. ``podnet_sweep`` — by the garbage collector, every ``gc_period``, for every provider:
   remove what no record owns any more (own address management), or interfaces made and
   no inventory lists (node pools).
   A node that left the cluster: ``podnet_node_inventory``, ``podnet_pool_shrink`` and
   ``podnet_interface_dispose`` give back what podnet made for it, then
   ``podnet_node_removed`` — once core dropped its pool and record: forget it.
9. ``podnet_plugs``, ``podnet_plug``, ``podnet_check_plug``, ``podnet_unplug`` — by the
   node agent (``podnet node``) on each node, for the container runtime's CNI requests
   and its own reconciliation of the host against the records.
10. ``podnet_classify_error`` — whenever a hook raised something not a ProviderError.
11. ``podnet_transition`` — after every transition attempt, to every plugin.

Routed calls go through core's provider gateway (``podnet.core.gateway``), which also
checks the fence, traces, counts and times each call, classifies what it raised and
checks its answer.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pluggy

from podnet.hookspecs.errors import ErrorKind
from podnet.hookspecs.models import NodeInfo, PodInfo
from podnet.hookspecs.netpol import PolicyRealization, ResolvedPolicy
from podnet.hookspecs.networks import Networks, SubnetInfo, SubnetRealization
from podnet.hookspecs.routing import ROUTING, HookRouting, Routing, broadcast, routed
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CheckResult,
    CloudInterface,
    CloudLimiter,
    Inventory,
    NetworkAttachment,
    NodeContext,
    NodeFinding,
    Plug,
    PlugContext,
    PlugResult,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    RouteResult,
    TransitionEvent,
    UnplugContext,
    VerifyResult,
)

PROJECT = "podnet"
#: Entry-point group third-party plugins are discovered through.
ENTRY_POINT_GROUP = "podnet.plugins"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: the contract's version: the package's (a test holds them equal); what changed in
#: each is listed above
CONTRACT_VERSION = "0.9.0"

__all__ = [
    "CONTRACT_VERSION",
    "ENTRY_POINT_GROUP",
    "PROJECT",
    "ROUTING",
    "HookRouting",
    "Routing",
    "hookimpl",
    "hookspec",
]


# --- registration and configuration ----------------------------------------------------


@broadcast("every plugin is asked, each on its own (so core knows which plugin declared "
           "which provider)")
@hookspec
def podnet_register_provider() -> ProviderInfo | None:
    """Declare the provider this plugin implements.

    :return: the provider's name, version and policy defaults, or ``None`` for a plugin
        that only listens (e.g. to ``podnet_transition``).

    Called on every plugin once at start; all results are collected. Two plugins
    declaring the same name is a start-up error.

    .. versionadded:: 0.1.0
    """


@routed()
@hookspec
def podnet_configure(provider: str, config: Mapping[str, Any]) -> None:
    """Hand a provider its section of the config file (endpoint, credentials, subnets).

    :param provider: the provider the section belongs to: yours (the call is routed).
    :param config: the section, already parsed; never log it, it may hold credentials.
    :raise ConfigError: naming the offending key, when the section is invalid.

    Called once per configured provider, before anything else runs.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed()
@hookspec(firstresult=True)
def podnet_cloud_limiter(provider: str, limiter: CloudLimiter) -> bool | None:
    """Hand a provider the client-side rate limiter of its cloud calls.

    ``limiter`` holds one token bucket per cloud API (action), as clouds meter calls:
    the policy's ``cloud_rate`` for every API, ``cloud_rates`` overriding it per API
    name. Take a token with ``limiter.acquire(api)`` before *every* SDK request —
    reads (inventory, describes, polls) as well as writes — in the one place your
    client wrapper sends them; it waits on core's clock for the API's next slot. Name
    each API as the cloud meters it (its action name), so operators can set
    ``cloudRates`` to the cloud's published limits. A cloud's throttled answer must
    still be classified ``throttled``. Once each request answered or failed, report it
    with ``limiter.observe(api, seconds, error_kind_or_None)``: operators see latency and
    errors per cloud API by that name (since 0.4.0).

    On an engine worker, the first request of a node's pool read
    (``podnet_node_inventory``) or grow (``podnet_pool_grow``) whose token is not there
    yet does not wait: ``acquire`` raises a ``ProviderError`` of kind ``throttled``
    (core's ``CloudWait``) having reserved the slot, and core calls the hook again then
    (the worker serves other nodes meanwhile). Let it propagate as it is, before
    anything was sent; a later request of the same hook call waits as before.

    :return: ``True`` when you take its tokens before each call; ``None`` when you do
        not: core then keeps limiting your
        ``podnet_pool_grow`` / ``podnet_pool_shrink`` / ``podnet_interface_dispose``
        calls with one bucket of its own, and nothing else.

    Called once per registered provider when the engine starts, after
    ``podnet_configure``.

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.4.0
       ``limiter.observe`` reports each request's latency and failure per API.
    """


# --- who serves what ---------------------------------------------------------------------


@broadcast("every plugin is asked, until one claims the node")
@hookspec(firstresult=True)
def podnet_select_provider(node: NodeInfo) -> str | None:
    """Name the provider that serves this node's default network.

    :return: a provider name, or ``None`` when this plugin does not claim the node.

    First result wins. The operator's ``nodeProviders`` rules in the config file are
    consulted before any plugin; when neither a rule nor a plugin claims a node, the
    configured default provider serves it.

    .. versionchanged:: 0.2.0 config rules come first.

    .. versionadded:: 0.1.0
    """


@broadcast("every plugin is asked; the answers are concatenated")
@hookspec
def podnet_select_networks(pod: PodInfo, node: NodeInfo) -> Sequence[NetworkAttachment] | None:
    """Name extra networks this pod attaches to, besides its default network.

    :return: attachments this plugin serves for the pod; results of all plugins are
        concatenated. Each attachment gets its own PodNetwork, machine and trace. The
        config file's ``networks`` (network -> provider) win over a plugin's claim of the
        same network; a network the pod names in ``podnet.io/networks`` that nobody
        serves gets a PodNetwork with a ``Ready=False`` condition saying so.

    .. versionadded:: 0.1.0
    """


# --- node inventory and pool -------------------------------------------------------------


@routed()
@hookspec(firstresult=True)
def podnet_node_inventory(provider: str, node: NodeContext) -> Inventory | None:
    """Report what the cloud says is attached to ``node``: interfaces and their addresses.

    The engine rebuilds the node's pool from this plus the PodNetwork records before it
    allocates anything on the node, and compares them again on resync.

    An interface reported with ``pooled=False`` holds no pod address (an ECS instance's
    primary ENI): core never puts pod addresses on it, never counts it toward
    ``max_interfaces``, never disposes it, and ignores the addresses it reports.

    With ``Inventory.dual_stack`` every pod address is an IPv4/IPv6 pair on one
    interface: report each interface's IPv6 addresses, unpaired, in ``ipv6``. Core pairs
    them: the pairs the records name first (``status.ip`` + ``status.ipv6``, then the
    NodeNetwork's recorded pool), then the remaining idle ones in order. An address
    podnet knows left without its partner is an invalid half: never handed out, given
    back through ``podnet_pool_shrink``.

    :return: the inventory (``None`` is an error: core cannot use the node's pool).

    Also read once for a node that left the cluster, to give back what podnet made for
    it (``node`` as ``podnet_pool_shrink`` describes it for such a node): raise a
    ``not_found`` error when the cloud no longer has the instance.

    ``podnet audit`` reads it too, with ``node.read_only``: report, change nothing (a
    provider that makes something at pool build, as ECS's trunk ENI, makes it only when
    the call is not read-only).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       ``CloudInterface.pooled``; dual stack (``Inventory.dual_stack``,
       ``CloudInterface.ipv6``).
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       read for a node that left the cluster too.
    .. versionchanged:: 0.9.0
       ``NodeContext.read_only``.
    """


@routed()
@hookspec(firstresult=True)
def podnet_unknown_machines(provider: str, known: Sequence[NodeInfo]
                            ) -> Sequence[NodeInfo] | None:
    """List the machines of ``provider``'s scope that none of ``known`` names, for
    ``podnet audit``: what podnet made on a machine whose Node and NodeNetwork are both
    gone (a record let go and the Node deleted before a new one named its pool) is seen
    by nothing else.

    :param provider: the provider being audited: yours (the call is routed).
    :param known: every Node of the cluster and every NodeNetwork's node (the record's
        ``spec.instanceId`` as ``provider_id``, None for a record without one): map each
        to your machine as you do for the other hooks (one you cannot map names none).
    :return: one ``NodeInfo`` per other machine your credentials can see (or, if you
        can tell what you made, per other machine holding some of it: ECS lists only
        the instances an ENI it tagged is attached to), its ``name`` what an operator
        knows it by (the instance id) and its ``provider_id`` (and any labels, an
        instance type say) what your ``podnet_node_inventory`` needs (called with
        ``network=None``): every address of a pooled interface it reports is a
        finding. ``None``: you cannot list machines (the audit says so).

    Never called by the controller. A read only: never change the cloud.

    .. versionadded:: 0.6.0
    """


@routed()
@hookspec(firstresult=True)
def podnet_pool_grow(
    provider: str, node: NodeContext, interface: CloudInterface | None, count: int,
    subnet: str | None,
) -> Sequence[PoolEntry] | None:
    """Add up to ``count`` addresses to ``interface`` (in ``subnet`` when given), in one call.

    Core decides how many (batch policy, demand, capacity) and on which interface; the
    provider makes one cloud call and reports the addresses it got, which may be fewer.
    A retry after a crash must not add a second batch the engine cannot see: the engine
    reads back the inventory after a failure, so addresses added by a lost call are found.

    ``interface`` is never one reported ``pooled=False``: when no pooled interface has
    room, core asks ``podnet_interface_create`` instead. On a dual-stack node each entry
    is a pair (``PoolEntry.ipv6`` set, both halves on ``interface``); give back what got
    no partner, or raise a ``transient`` error so that the inventory is read again. An
    entry without ``ipv6`` there is taken as an invalid half and given back.

    :return: the new entries (``None``: none).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       never a ``pooled=False`` interface; dual-stack pairs (``PoolEntry.ipv6``).
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed()
@hookspec(firstresult=True)
def podnet_pool_shrink(
    provider: str, node: NodeContext, entries: Sequence[PoolEntry]
) -> Sequence[str] | None:
    """Give idle addresses back to the cloud, batched.

    Already-absent addresses count as given back. :return: the addresses now gone
    (``None``: none).

    Also called for a node that left the cluster (its Node deleted, the machine maybe
    kept), with every address of it no record names, before its NodeNetwork's finalizer
    comes off. ``node.node`` is then the Node as core last saw it or, after a restart, as
    its NodeNetwork records it: name, uid and ``providerID`` (``spec.instanceId``) only;
    ``node.network`` is that record, maybe being deleted. An instance the cloud no longer
    has took its addresses with it: count them as given back.

    On a dual-stack node an entry with ``ipv6`` is a pair: give back both halves and
    return its ``address``. An entry without ``ipv6`` there is an invalid half, of either
    family (its ``address`` may be an IPv6 address).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       dual-stack pairs and invalid halves.
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       called for a node that left the cluster too.
    """


@routed()
@hookspec(firstresult=True)
def podnet_interface_create(
    provider: str, node: NodeContext, subnet: str | None, ip_count: int
) -> CloudInterface | None:
    """Create and attach a new interface with ``ip_count`` secondary addresses.

    Drives the ENI machine's ``attached`` (success) or ``fail`` (raise) trigger. A partial
    failure (created, not attached) must be rolled back by the provider or be visible in
    the next inventory so the engine disposes it. The process may die between the create
    and the attach, or in the rollback, where neither happens: mark the interface in the
    cloud as you create it, and find it again with ``podnet_sweep``. On a dual-stack node
    report as many IPv6 addresses in ``ipv6`` as IPv4 ones in ``ips``: core pairs them in
    order and gives back what is left unpaired.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       ``ipv6`` on a dual-stack node.
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       an interface a crash left unattached is the provider's ``podnet_sweep``'s.
    """


@routed()
@hookspec(firstresult=True)
def podnet_interface_dispose(
    provider: str, node: NodeContext, interface: CloudInterface
) -> bool | None:
    """Detach and delete an interface holding no address in use. Never a trunk, primary
    or unpooled (``pooled=False``) interface: the engine never asks for one, and a
    provider must refuse.

    :return: ``True`` once the cloud confirms it is gone (the ``gone`` trigger),
        ``False`` (or ``None``) while deletion is in progress.

    Also called for each interface of a node that left the cluster, once none of its
    addresses is left, with ``node`` as ``podnet_pool_shrink`` describes it for such a
    node; core calls again (after a wait, with no failed transition) until ``True``. An
    interface the cloud no longer has is gone (``True``); one still detaching answers
    ``False``.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       called for the interfaces of a node that left the cluster too.
    """


@routed()
@hookspec(firstresult=True)
def podnet_node_check(provider: str, node: NodeContext) -> Sequence[NodeFinding] | None:
    """Look for what is wrong on ``node`` that podnet cannot fix itself (e.g. an interface
    whose security groups drifted from the configured ones). Must make no write.

    Called by the node pool reconciler after a successful pass on a synced pool, at most
    every ``PoolPolicy.node_check_period`` seconds per node (``0`` disables it). Each
    distinct finding becomes one Warning Event (its ``reason`` and ``message``) on the Node
    and on its NodeNetwork, and the NodeNetwork's ``ProviderCheck`` condition lists them;
    a finding still there at the next check is not reported again. A check that raises is
    logged and tried again next period; it never fails the pool pass.

    :return: the findings (empty, or ``None``, when all is well).

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


# --- the networks declared as objects ---------------------------------------------------


@routed()
@hookspec(firstresult=True)
def podnet_subnet_parameters(provider: str, subnet: SubnetInfo) -> SubnetRealization | None:
    """Check a Subnet's provider parameters (``spec.parameters``) and realize what the
    provider needs for it: read back what the cloud has (ECS: each vSwitch's zone and
    CIDR; BBC: each subnet's CIDR), make what must exist before a pod uses it. Core has
    already checked everything else of the spec (CIDRs, gateway, exclusions, selectors,
    overlaps with the provider's other Subnets).

    Raise :class:`~podnet.hookspecs.errors.InvalidRequest` with ``field`` naming the
    parameter (``spec.parameters.vSwitchIds``) for a parameter that is unknown, malformed
    or disagrees with the cloud (a vSwitch whose CIDR is outside ``cidrs``): core marks the
    Subnet not Ready with that message (condition and Warning Event), and no pod gets an
    address from it. Raise a transient ``ProviderError`` when the cloud cannot answer now:
    core retries with backoff, the Subnet stays as it was.

    Called by the Subnet reconciler for each new generation of a Subnet of ``provider``,
    and again on resync; idempotent (make nothing twice: find what an earlier call made).

    :return: what was read or made (shown in ``status.provider``, handed back in
        :attr:`SubnetInfo.realized`); ``None``: the parameters are accepted as they are
        (a provider that takes none refuses any in its implementation).

    .. versionadded:: 0.7.0
    """


@routed()
@hookspec
def podnet_networks_changed(provider: str, networks: Networks) -> None:
    """The usable networks of ``provider`` changed: ``networks`` is the whole set now (its
    Ready Subnets and their Ready IPPools, every Ready SecurityGroup), not a difference.
    Serve new pod networks from it: a Subnet created is usable from this call on; a
    Subnet gone from the set gets no new pod; an address excluded or narrowed away that a
    pod holds stays the pod's (core reports it; never free it here). A SecurityGroup that
    changed applies to the running pods naming it (their records are queued: ``verify``
    finds the difference, ``route`` writes it).

    Called once before core's first pod network pass (with what the first list found,
    possibly nothing: the config file's networks then serve as before), then after every
    change, from one thread at a time. A notification: keep the set, make no cloud call
    that could block; raise nothing.

    .. versionadded:: 0.7.0
    """


@routed()
@hookspec(firstresult=True)
def podnet_config_networks(provider: str) -> Networks | None:
    """The networks ``provider``'s config section declares the old way (subnets, IP
    pools, security groups in ``providers.<name>``), as the objects that declare them
    now: on its first start as leader, core creates each one no object of its kind and
    name exists for (never overwriting an operator's), and logs what it made. Read what
    the cloud has where the config lacks it (a vSwitch's CIDR); raise a transient
    ``ProviderError`` when it cannot answer now (core tries again at the next start).

    :return: the declared networks; ``None``: the section declares none.

    .. versionadded:: 0.7.0
    """


# --- NetworkPolicy ----------------------------------------------------------------------


@routed()
@hookspec(firstresult=True)
def podnet_network_policy(
    provider: str, key: str, policy: ResolvedPolicy | None
) -> PolicyRealization | None:
    """Program NetworkPolicy ``key`` (``namespace/name``) for ``provider``'s pods, as
    ``policy`` says it now: the whole policy, not a difference. ``policy.members`` holds
    only this provider's pods; its rules' peers are every pod's addresses, of any
    provider. ``None``: the policy is gone, or selects none of this provider's pods
    any more — remove everything programmed for ``key``.

    Called only for a provider whose :attr:`ProviderInfo.network_policy
    <podnet.hookspecs.types.ProviderInfo.network_policy>` is ``Enforcement.PROVIDER``, by
    core's policy reconciler, after every change that alters the resolved policy (the
    policy, a pod's labels, addresses or named ports, a namespace's labels), on resync,
    and once per key found at start (a policy deleted while the controller was down is
    called with ``None``). Keys are never called concurrently with themselves. Idempotent
    and level-based: converge what the dataplane has for ``key`` to ``policy`` in one
    transaction where the dataplane has them (a change never opens a window where a
    denied flow passes); find what an earlier call made by ``key``.

    Raise a transient ``ProviderError`` when the dataplane cannot be reached: core retries
    with backoff and the policy's condition says it is not programmed.

    Programmed means enforced where the pods are, not only accepted by a control plane:
    a provider whose dataplane applies changes later answers ``waiting=True`` until it
    has (core asks again soon, shows the policy ``Pending``, raises no Event).

    :return: programmed or why not, and what the dataplane could not enforce; ``None``:
        programmed.

    .. versionadded:: 0.8.0
    .. versionchanged:: 0.9.0 ``PolicyRealization.waiting``
    """


@routed()
@hookspec(firstresult=True)
def podnet_network_policy_keys(provider: str) -> Collection[str] | None:
    """The keys (``namespace/name``) of every NetworkPolicy ``provider`` has something
    programmed for, read from the dataplane (core calls ``podnet_network_policy`` with
    ``None`` for each one no policy has any more: one deleted while the controller was
    down). Read only.

    :return: the keys; ``None``: the provider enforces no policy.

    .. versionadded:: 0.8.0
    """


# --- one pod network ---------------------------------------------------------------------


@routed()
@hookspec(firstresult=True)
def podnet_address_space(provider: str, node: NodeContext) -> AddressSpace | None:
    """Say what a pool provider serves on a node: its subnets (id, CIDR, gateway, whether
    a requested address can be added there), and whether static addresses, IP pools and
    dual-stack pairs may be asked for.

    Core resolves a pod network's static address, IP pool and subnets against it and
    the node's pool before ``podnet_allocate``, with the same checks and messages for
    every provider (see :class:`~podnet.hookspecs.types.ResolvedRequest`). Called only
    for a request naming one of them, just before ``podnet_allocate``: answer from what
    you keep (a cached subnet read), not with a fresh cloud read each time. A subnet
    whose CIDR you cannot read now is listed with ``cidr=None``; raise when the answer
    cannot be given at all (the allocation is retried).

    :return: the address space; ``None`` (or no implementation): the provider serves
        plain requests only.

    .. versionadded:: 0.3.0
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_allocate(context: AllocateContext) -> Allocation | None:
    """Choose the address of a pending pod network (``pending → allocated``).

    For pool providers core has resolved the request already (``context.request``): it
    either reserved a pool entry (``request.entry``: answer with it) or names a requested
    address the pool does not hold (``request.address``, in ``request.subnet``): add that
    one to the node (treat "already there" as success) and answer with it; refuse what
    only your cloud can refuse with :class:`InvalidRequest` naming ``request.field``.
    Overlay providers (``context.pool`` is ``None``) allocate from their own IPAM and
    read ``context.pod_network.spec.requests`` themselves; invalid requests raise
    :class:`InvalidRequest` naming the field.

    ``context.namespace_annotations`` holds the ``podnet.io/*`` annotations of the pod's
    Namespace (a namespace-wide default, e.g. its subnet; the pod's own annotations, in
    ``spec.requests``, should win). Core allocates only once its Namespace cache is synced;
    a change to a Namespace later does not move pod networks already allocated.

    :return: the allocation (``None`` is an error: the pod network stays pending).

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       ``context.namespace_annotations``.
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider); pool providers get the request resolved by core (``context.request``).
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_route(context: PodNetworkContext) -> RouteResult | None:
    """Wire the recorded address into the dataplane (``allocated → routed``).

    Confirm the cloud attachment, or write the logical port, routes and NAT. Called again
    after ``repair`` and after crashes: must converge, never duplicate.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_verify(context: PodNetworkContext) -> VerifyResult | None:
    """Check a routed pod network against the dataplane, on resync only.

    A result with ``ok=False`` fires ``repair`` (``routed → allocated``) and then
    ``route`` again. Must make no write.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_release(context: PodNetworkContext) -> ReleaseResult | None:
    """Undo ``route`` and free the address (``releasing → deleted``).

    Called only when the pod is gone, terminal, or past its deletion grace. Idempotent:
    a second call after a crash finds nothing to do and succeeds.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_hold_address(context: PodNetworkContext) -> bool | None:
    """Whether a releasing sticky pod network should keep its address a while longer.

    ``True`` holds it (the pod may come back: ``reclaim``), ``False`` releases it now.
    ``None`` leaves it to core, whose rule is the same for every provider: released at
    once when ``context.workload`` says its StatefulSet will not bring the pod back
    (deleted, replaced by another of the same name, or scaled below the pod's ordinal),
    else held for the ``sticky_hold`` window. Answer only where yours differs (e.g. an
    overlay whose address may follow the pod to any node holds a wanted ordinal past
    the window).

    ``context.workload`` is the record's StatefulSet as core's cache sees it (its uid,
    ``replicas``, first ordinal; ``exists=False`` once it is deleted), or ``None`` when
    core does not know. Core asks again whenever that StatefulSet's replicas change or it
    is deleted, so a held record is released as soon as the answer turns ``False``.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.2.0
       ``context.workload``; ``None`` applies core's StatefulSet rule before the window.
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@routed()
@hookspec(firstresult=True)
def podnet_sweep(
    provider: str, owners: Collection[str], remove: Collection[str]
) -> Sequence[str] | None:
    """Find, and remove when told, what this provider wrote for pod networks that no
    longer exist.

    For providers with their own address management (``uses_node_pool=False``, e.g. an
    overlay's logical ports): a record deleted while its release never ran (a finalizer
    removed by hand, a namespace force-deleted) leaves its port and address behind, and
    no event will ever name it again.

    Node-pool providers are called too: core sweeps the addresses of the interfaces an
    inventory lists, but an interface created and never attached (the controller killed
    between the create and the attach, or in a rollback), or detached and never deleted,
    is on no node and in no inventory. Report such interfaces you marked at creation by
    their id (``owners`` name records, never an interface); delete one in ``remove`` only
    if it is still detached and you are not attaching it right now (the grace,
    ``leaked_ip_expiry``, is far longer than any create-to-attach).

    :param provider: the provider being swept: yours (the call is routed).
    :param owners: the key (``namespace/name``) of every PodNetwork record of this
        provider, from a synced cache, including records that do not parse.
    :param remove: orphans you reported before that have stayed orphans for the grace
        (``leaked_ip_expiry``): remove each one that still has no owner now.
    :return: the names of everything of yours no owner claims now, removed ones left out
        (core keeps the first-seen times; ``None``: none).

    Called by the garbage collector at most every ``gc_period``. Report and remove only
    what you created (mark it, e.g. in the port's external ids or the interface's cloud
    tags); idempotent: already gone counts as removed; a failure is logged and tried again
    next period (throttled half way: report the rest again, core keeps their first-seen
    times).

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       called for node-pool providers too (interfaces no inventory lists).
    """


@routed()
@hookspec
def podnet_node_removed(provider: str, node: str) -> None:
    """A node served by ``provider`` left the cluster (its Node deleted or being deleted),
    core gave back every address and interface podnet made for it (through
    ``podnet_pool_shrink`` and ``podnet_interface_dispose``; its NodeNetwork's finalizer
    held the record until then) and dropped its pool and record: forget what you keep
    about it (caches keyed by its instance, views of its interfaces). A notification:
    make no cloud call that could block, never raise (a plugin that raises is logged and
    the others still hear it).

    :param provider: the provider whose pool of the node was dropped: yours.
    :param node: the node's name (the Node object may be gone from core's caches: map
        the name to your own keys, e.g. the instance id, when you first see the node).

    Called by the node pool reconciler once the node's share is given back (the garbage
    collector queues a node no cache lists any more), once per dropped pool; a node that
    comes back under the same name starts afresh from its inventory.

    .. versionadded:: 0.2.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    .. versionchanged:: 0.5.0
       called once the node's addresses and interfaces are given back (before, at once:
       they were left in the cloud).
    """


# --- the dataplane on a node: called by the node agent ----------------------------------


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_plug(context: PlugContext) -> PlugResult | None:
    """Create the pod's interface for a Routed record in the pod's network namespace.

    :param context: the record (``context.pod_network``: its status carries the address,
        ``prefix_length``, ``gateway``, ``routes``, ``mac``, ``mtu``), the sandbox's
        ``container_id``, the path of its network namespace (``netns``) and the
        interface's name there (``if_name``).
    :return: the interface (its name, MAC, namespace and host side); ``None`` is an
        error (the runtime is told to try again).

    Called by the node agent for the runtime's ``ADD``, once every record of the pod is
    Routed, and never for another node's records. Idempotent: a second call for the same
    container and interface (the runtime retries; the agent restarted half way) finds what
    the first made and converges it, never a second interface; something half made is
    made again. Never allocate or release an address here: the record's is the one.

    .. versionadded:: 0.3.0
    """


@routed(by="context.provider")
@hookspec
def podnet_unplug(context: UnplugContext) -> None:
    """Remove what ``podnet_plug`` made for one interface: the pod's end and the host's.

    :param context: whose it is (``provider``, ``network``), the container and interface,
        the namespace's path (``None`` or gone when the sandbox is gone already), and the
        record when it still exists (``None`` for leftovers).

    Called by the node agent for the runtime's ``DEL``, for its ``GC`` (attachments the
    runtime no longer lists), and at start for leftovers of records that no longer
    exist. Idempotent: nothing there is success, and so is a network namespace that is
    gone. Leave shared host state (a bridge other pods use) in place; never release the
    address (the controller does, once the pod is gone).

    .. versionadded:: 0.3.0
    """


@routed(by="context.pod_network.spec.provider")
@hookspec(firstresult=True)
def podnet_check_plug(context: PlugContext) -> CheckResult | None:
    """Compare the pod's interface with its record, for the runtime's ``CHECK``.

    :return: ``ok=False`` with a reason naming what differs (the interface is missing,
        has another address, MAC, MTU or route); ``None``: the provider does not check.

    Read only: make no change, even to repair.

    .. versionadded:: 0.3.0
    """


@routed()
@hookspec(firstresult=True)
def podnet_plugs(provider: str, node: str) -> Sequence[Plug] | None:
    """Every interface this provider's dataplane has plugged on this host.

    :param provider: yours (the call is routed).
    :param node: the node the agent serves.
    :return: each plugged interface, with the container, interface name, network and the
        record it was plugged for (mark what you create so you can tell it from what is
        not yours); ``None``: none. A mark with no room for the record's key (a link
        alias holds 255 bytes) keeps :func:`podnet.hookspecs.types.owner_digest` of it:
        the agent takes that back to the key.

    Called by the node agent at start (to unplug leftovers of records that no longer
    exist) and for the runtime's ``GC``. Read only.

    .. versionadded:: 0.3.0
    """


# --- errors and listeners ----------------------------------------------------------------


@routed()
@hookspec(firstresult=True)
def podnet_classify_error(provider: str, error: BaseException) -> ErrorKind | None:
    """Map a provider's own exception (an SDK error) to a kind core can act on.

    :return: the kind, or ``None`` when the error is not one of your SDK's (a plain
        bug). Unclassified errors are treated as ``transient``.

    .. versionadded:: 0.1.0
    .. versionchanged:: 0.3.0
       routed (before, every plugin was called and answered only for its own
       provider).
    """


@broadcast("every plugin is told, each on its own")
@hookspec
def podnet_transition(event: TransitionEvent) -> None:
    """Notification after every transition attempt of any machine, to every plugin.

    Must not block. A listener that raises is logged and skipped; the others still get
    the event (the engine calls each listener on its own).

    .. versionadded:: 0.1.0
    """
