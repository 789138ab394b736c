"""The ECS provider: ENI multi-IP pod networking on Alibaba Cloud, through the official SDK
(``alibabacloud_ecs20140526``) and nothing else.

Each node is an ECS instance. As in Terway's ENI multi-IP mode, pod addresses live only on
secondary ENIs the provider creates in a configured vSwitch, each holding up to
``EniPrivateIpAddressQuantity - 1`` secondary addresses; the instance's primary ENI is
reported ``pooled=False`` (never grown on, counted or detached). The pool's interfaces are
the secondary ENIs, at most Terway's ``EniQuantity * eni_cap_ratio + eni_cap_shift - 1``
(capped by ``max_enis``): a node whose secondary ENIs are full gets a new ENI. Core keeps
the pool (batching, aggregation, inhibit windows, rate limits); the provider makes one
cloud call per hook (two for a dual-stack grow or shrink) and reports what the cloud says.

``ip_stack: dual`` gives every pod an IPv4/IPv6 pair from one ENI, Terway's way: the
same count of each (AssignPrivateIpAddresses then AssignIpv6Addresses, a new ENI's
``Ipv6AddressCount``), at most ``EniIpv6AddressQuantity`` per ENI (an instance type
without IPv6 is a fatal error naming ``ecs.ip_stack``); a new ENI whose counts differ is
rolled back; IPv4 addresses whose IPv6 assign failed are unassigned again; shrink unassigns
both halves (UnassignPrivateIpAddresses + UnassignIpv6Addresses). The inventory reports
each ENI's IPv6 addresses unpaired: core pairs them by the records on a restart and zips
the idle rest; a half left over is never handed out and is given back. A static
``ip-address`` of ``<IPv4>,<IPv6>`` must be an idle pair of the node.

The node's instance id comes, in this order, from the ``instance_ids`` config map (node
name -> instance id), the node's ``spec.providerID`` (``<region>.<instance id>``, as the
Alibaba Cloud controller manager writes it, optionally with a ``scheme://`` prefix), or
the node label ``podnet.io/ecs-instance-id``. Its instance type from the ``instance_type``
config key, else the label ``node.kubernetes.io/instance-type``.

Config section (``providers.ecs``): ``endpoint``, ``region``, ``protocol`` (https),
``access_key_id`` / ``access_key_secret`` (or the environment's
``ALIBABA_CLOUD_ACCESS_KEY_ID`` / ``ALIBABA_CLOUD_ACCESS_KEY_SECRET``), ``vswitches`` (list),
``vswitch_policy`` (``ordered`` | ``most`` | ``random``), ``security_groups`` (list),
``instance_type``, ``instance_ids``, ``eni_cap_ratio`` (1.0), ``eni_cap_shift`` (0),
``max_enis`` (0: no cap), ``attach_timeout`` (s), ``poll_interval`` (s), ``timeout`` (s),
``ip_stack`` (``ipv4`` | ``dual``).

Every ENI podnet creates carries the tag ``podnet.io/instance=<instance id>`` (and, as
before 0.5.0, the description ``podnet:<instance id>``). The garbage collector's sweep
(``podnet_sweep``, every ``gc_period``: one DescribeNetworkInterfaces of the region's
Available secondary ENIs) reports those podnet marked, tag or description, and deletes
each once it has stayed Available for ``leaked_ip_expiry``: an ENI made and never
attached (the controller killed between CreateNetworkInterface and
AttachNetworkInterface), or detached and never deleted (killed in a rollback or a
dispose, or a rollback that failed before a restart). No inventory lists them.

``podnet audit`` asks the provider for the instances no Node and no NodeNetwork names
(``podnet_unknown_machines``): those an ENI podnet made (tag or description) is attached
to, found with one DescribeNetworkInterfaces of the region's secondary ENIs (then
DescribeInstances for their instance types); the audit reports the secondary addresses
of their secondary ENIs. Instances that hold no ENI
podnet made are never listed.

ENIs are created with the configured ``security_groups``; every ``node_check_period`` the
node check (``podnet_node_check``, one DescribeNetworkInterfaces per node) reports each
ENI podnet made whose security groups differ from them as a ``SecurityGroupDrift``
finding, which core turns into a Warning Event on the Node.
Credentials are kept only inside the SDK's config: never logged, traced or put in a
message.

On a node (``podnet node --config``, the same section) the plug hooks are the ENI
dataplane of ``plugins/ecs/dataplane.py``: a routed veth per pod and a policy rule from
the pod's address to a table per ENI whose default route is that ENI's device (found by
its MAC, asked of the cloud once per ENI); see docs/node.md.
"""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import attrs

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ConfigError, ErrorKind, PoolEmpty, ProviderError
from podnet.hookspecs.models import NodeInfo, PodNetwork
from podnet.hookspecs.policy import PoolPolicy, RateLimit
from podnet.hookspecs.sections import (
    between,
    config_key,
    ids,
    invalid,
    one_of,
    read_section,
    rule,
    section,
    text,
)
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CloudInterface,
    CloudLimiter,
    Inventory,
    NodeContext,
    NodeFinding,
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    ResolvedRequest,
    RouteResult,
    Subnet,
    VerifyResult,
)
from podnet.linux.hooks import DataplaneHooks
from podnet.plugins.ecs.dataplane import (
    POD_ROUTES,
    POD_ROUTES_DUAL,
    ecs_dataplane,
    ipv6_gateway,
)

NAME = "ecs"
__version__ = "0.1.0"

INSTANCE_LABEL = "podnet.io/ecs-instance-id"
TYPE_LABEL = "node.kubernetes.io/instance-type"
#: what the provider writes as the description of the ENIs it creates (the only mark of
#: the ENIs made before 0.5.0, still read)
DESCRIPTION_PREFIX = "podnet:"
#: the tag every ENI podnet creates carries, its value the instance it was made for: the
#: durable mark the sweep (``podnet_sweep``) deletes by
INSTANCE_TAG = "podnet.io/instance"

#: ECS error codes and the kinds core acts on (matched exactly, then by prefix)
ERROR_KINDS: dict[str, ErrorKind] = {
    "Throttling": ErrorKind.THROTTLED,
    "InvalidVSwitchId.IpNotEnough": ErrorKind.SUBNET_EXHAUSTED,
    "InvalidOperation.Ipv4CountExceeded": ErrorKind.QUOTA_EXCEEDED,
    "InvalidOperation.Ipv6CountExceeded": ErrorKind.QUOTA_EXCEEDED,
    "QuotaExceeded.PrivateIpAddress": ErrorKind.QUOTA_EXCEEDED,
    "EniPerInstanceLimitExceeded": ErrorKind.QUOTA_EXCEEDED,
    "InvalidEniId.NotFound": ErrorKind.NOT_FOUND,
    "InvalidEcsId.NotFound": ErrorKind.NOT_FOUND,
    "InvalidIp.IpUnassigned": ErrorKind.NOT_FOUND,
    "Operation.Conflict": ErrorKind.CONFLICT,
    "IdempotentFailed": ErrorKind.CONFLICT,
    "InvalidPrivateIpAddress.Duplicated": ErrorKind.CONFLICT,
    "InvalidOperation.InvalidEniState": ErrorKind.TRANSIENT,
    "InvalidVSwitchId.NotFound": ErrorKind.FATAL,
}

#: Terway's eni-multi-ip defaults: idle 0..5, up to 10 addresses per call after a
#: 300 ms gathering wait, ENI blocked 10 min on vSwitch exhaustion and 1 min on a limit,
#: at most 3 ENI operations per node at once; AssignPrivateIpAddresses 400/min
POLICY = PoolPolicy(min_idle=0, max_idle=5, batch_size=10, max_batch_size=10,
                    aggregation_window=0.3, inhibit_exhausted=600.0, inhibit_quota=60.0,
                    max_interface_ops=3, cloud_rate=RateLimit(rate=400 / 60, burst=10))

#: ENI states on the way to another: worth waiting for
_TRANSITIONAL = frozenset({"Attaching", "Detaching", "Creating", "Deleting"})
#: how long a settled, unwanted state may be a replica's lag before it counts as final
_SETTLED_GRACE = 2.0
#: how many ids DescribeInstances takes (``InstanceIds``), and the most a page holds
MAX_INSTANCE_IDS = 100
_PROVIDER_ID = re.compile(r"^(?:[a-z]+://)?(?:[a-z0-9-]+\.)?(i-[A-Za-z0-9]+)$")


def error_code(error: BaseException) -> str | None:
    """The ECS error code an SDK exception carries, if any."""
    code = getattr(error, "code", None)
    return code if isinstance(code, str) and code else None


def classify(error: BaseException) -> ErrorKind | None:
    """The kind of an SDK exception; ``None`` when it is not one."""
    try:
        from Tea.exceptions import TeaException
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return None
    if not isinstance(error, TeaException):
        return None
    code = error_code(error) or ""
    kind = ERROR_KINDS.get(code)
    if kind is None:
        for prefix, k in ERROR_KINDS.items():
            if code.startswith(prefix + "."):
                kind = k
                break
    if kind is not None:
        return kind
    status = getattr(error, "status_code", None) or getattr(error, "statusCode", None)
    if isinstance(status, int) and status >= 500:
        return ErrorKind.TRANSIENT
    return ErrorKind.TRANSIENT


def _instance_ids(ids: dict[str, str]) -> dict[str, str]:
    if not all(ids.values()):
        raise ValueError("expected a map of node name to instance id")
    return ids


def _check_config(cfg: EcsConfig) -> None:
    if not cfg.vswitches:
        raise invalid("at least one vSwitch id is required", "vswitches")
    if not cfg.security_groups:
        raise invalid("at least one security group id is required", "security_groups")


@section(check=_check_config)
@attrs.frozen
class EcsConfig:
    """The section ``providers.ecs`` (see the module docstring)."""

    endpoint: str = attrs.field(default="ecs.aliyuncs.com", metadata=text(strip=True))
    region: str = attrs.field(default="cn-hangzhou", metadata=text(strip=True))
    protocol: str = attrs.field(default="https", metadata=one_of("http", "https"))
    #: else the environment's ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET; never kept here
    access_key_id: str | None = attrs.field(default=None, repr=False,
                                            metadata=text(secret=True))
    access_key_secret: str | None = attrs.field(default=None, repr=False,
                                                metadata=text(secret=True))
    vswitches: tuple[str, ...] = attrs.field(default=(), metadata=ids(comma=True))
    vswitch_policy: str = attrs.field(default="ordered",
                                      metadata=one_of("ordered", "most", "random"))
    security_groups: tuple[str, ...] = attrs.field(default=(), metadata=ids(comma=True))
    instance_type: str | None = attrs.field(default=None, metadata=text(strip=True))
    #: node name -> instance id
    instance_ids: dict[str, str] = attrs.field(factory=dict, metadata=rule(_instance_ids))
    eni_cap_ratio: float = attrs.field(default=1.0, metadata=between(0, 1))
    eni_cap_shift: int = attrs.field(default=0, metadata=between(-64, 64))
    max_enis: int = attrs.field(default=0, metadata=between(0, 64))
    attach_timeout: float = attrs.field(default=30.0, metadata=between(0, 3600))
    poll_interval: float = attrs.field(default=0.05, metadata=between(0, 60))
    timeout: float = attrs.field(default=10.0, metadata=between(0.1, 600))
    seed: int = attrs.field(default=0, metadata=between(0, 2**32))
    #: ``ipv4`` | ``dual`` (IPv4/IPv6 pairs)
    ip_stack: str = attrs.field(default="ipv4", metadata=one_of("ipv4", "dual"))

    @property
    def dual(self) -> bool:
        return self.ip_stack == "dual"


@attrs.frozen
class _Limits:
    enis: int
    ipv4: int
    ipv6: int


@attrs.frozen
class _Eni:
    id: str
    status: str
    kind: str
    vswitch: str
    mac: str | None
    primary_ip: str | None
    secondary: tuple[str, ...]
    security_groups: tuple[str, ...]
    description: str = ""
    ipv6: tuple[str, ...] = ()
    tags: tuple[tuple[str, str], ...] = ()
    #: the instance it is attached to (None: detached)
    instance: str | None = None

    @property
    def made_by_podnet(self) -> bool:
        """A secondary ENI podnet created: its tag, or (made before tagging) its
        description."""
        return self.kind == "Secondary" and (
            any(k == INSTANCE_TAG for k, _ in self.tags)
            or self.description.startswith(DESCRIPTION_PREFIX))


class EcsProvider(DataplaneHooks):
    """The plugin. One instance per controller process."""

    def __init__(self, *, name: str = NAME, policy: PoolPolicy | None = None) -> None:
        self.name = name
        self.policy = policy or POLICY
        self.config = EcsConfig()
        self._credentials: tuple[str, str] | None = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._limits: dict[str, _Limits] = {}
        self._cidrs: dict[str, ipaddress.IPv4Network] = {}
        #: ENIs made whose rollback failed: deleted again on the node's next inventory
        #: (after a restart, the sweep finds them by their tag)
        self._orphans: dict[str, set[str]] = {}
        #: ENIs this process created and is attaching now: never swept
        self._creating: set[str] = set()
        self._random = random.Random(0)
        #: what the cloud last said is on each instance: instance -> (when, ip -> ENI
        #: status); kept up to date by the provider's own writes, so that route does not
        #: describe the node's ENIs once per pod
        self._seen: dict[str, tuple[float, dict[str, str]]] = {}
        #: node name -> its instance, to forget the instance when the node goes
        self._node_instance: dict[str, str] = {}
        #: how long verify trusts that view (seconds, wall clock)
        self.verify_cache_ttl = 1.0
        self._generation = 0
        self.sdk_calls: dict[str, int] = {}
        #: core's buckets per API action (``podnet_cloud_limiter``)
        self._limiter: CloudLimiter | None = None
        #: the node agent's dataplane (plugins/ecs/dataplane.py)
        self.dataplane = ecs_dataplane(name, self._mac_of)

    # --- the SDK ------------------------------------------------------------------------

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is not None and getattr(self._local, "generation", -1) == self._generation:
            return client
        if self._credentials is None:
            raise ProviderError(ErrorKind.FATAL, "the ecs provider is not configured "
                                                 "(no access key)")
        from alibabacloud_ecs20140526.client import Client
        from alibabacloud_tea_openapi import models as open_api_models

        key_id, secret = self._credentials
        cfg = self.config
        ms = int(cfg.timeout * 1000)
        client = Client(open_api_models.Config(
            access_key_id=key_id, access_key_secret=secret, region_id=cfg.region,
            endpoint=cfg.endpoint, protocol=cfg.protocol, read_timeout=ms,
            connect_timeout=ms))
        self._local.client = client
        self._local.generation = self._generation
        return client

    def close(self) -> None:
        """Drop the SDK's kept-alive connections to this provider's endpoint.

        The SDK's runtime (darabonba, or Tea in older releases) keeps one HTTP session per
        endpoint for the life of the process, in a class attribute with no public way to
        close it. A controller needs no close; tests and demos that start many simulators
        (one port each) would otherwise keep a socket per endpoint.
        """
        endpoint = self.config.endpoint if self.config is not None else None
        if endpoint:
            _close_sdk_sessions(endpoint)

    def _call(self, api: str, request: Any, subject: str | None = None) -> Any:
        """One SDK call; its error comes back as a ProviderError core can act on (the
        ``subject`` names the vSwitch or ENI to blame)."""
        method = getattr(self._client(), _snake(api))
        limiter = self._limiter
        if limiter is not None:
            limiter.acquire(api)  # every request, reads and polls too: one bucket per API
        with self._lock:
            self.sdk_calls[api] = self.sdk_calls.get(api, 0) + 1
        started = time.perf_counter()
        try:
            response = method(request)
        except ProviderError as exc:
            if limiter is not None:
                limiter.observe(api, time.perf_counter() - started, exc.kind.value)
            raise
        except Exception as exc:
            kind = classify(exc) or ErrorKind.TRANSIENT
            if limiter is not None:
                limiter.observe(api, time.perf_counter() - started, kind.value)
            code = error_code(exc) or type(exc).__name__
            raise ProviderError(kind, f"{api}: {code}{f' ({subject})' if subject else ''}",
                                subject=subject) from None
        if limiter is not None:
            limiter.observe(api, time.perf_counter() - started)
        body = getattr(response, "body", None)
        if body is None:
            raise ProviderError(ErrorKind.TRANSIENT, f"{api}: empty reply", subject=subject)
        return body

    # --- registration and configuration -------------------------------------------------

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=True, manages_interfaces=True,
            policy=self.policy, sticky_kinds=("StatefulSet",),
            description="Alibaba Cloud ECS: ENI multi-IP through alibabacloud_ecs20140526",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        cfg = read_section(EcsConfig, provider, config)
        credentials = []
        for key, value in (("access_key_id", cfg.access_key_id),
                           ("access_key_secret", cfg.access_key_secret)):
            value = value or os.environ.get(f"ALIBABA_CLOUD_{key.upper()}")
            if not value:
                raise ConfigError(config_key(provider, key), "missing: set it or the "
                                  f"environment's ALIBABA_CLOUD_{key.upper()}")
            credentials.append(value)
        self._random.seed(cfg.seed)
        with self._lock:
            # the credentials live on in the SDK's config only
            self.config = attrs.evolve(cfg, access_key_id=None, access_key_secret=None)
            self._credentials = (credentials[0], credentials[1])
            self._generation += 1
            self._limits.clear()
            self._cidrs.clear()

    @hookimpl
    def podnet_cloud_limiter(self, provider: str, limiter: CloudLimiter) -> bool | None:
        """Every SDK request (describes and attach polls too) takes a token of its
        action's bucket first, as Terway meters each ECS API on its own."""
        self._limiter = limiter
        return True

    # --- helpers ------------------------------------------------------------------------

    def instance_id(self, node: NodeContext) -> str:
        instance = self._instance_of(node)
        if self._node_instance.get(node.node.name) != instance:
            with self._lock:
                self._node_instance[node.node.name] = instance
        return instance

    @hookimpl
    def podnet_node_removed(self, provider: str, node: str) -> None:
        """The node left: the view of its instance's ENIs goes. ENIs whose rollback
        failed (``_orphans``) stay remembered: they are cloud objects still to delete,
        not a cache."""
        with self._lock:
            instance = self._node_instance.pop(node, None)
            if instance is not None:
                self._seen.pop(instance, None)

    def remembered(self) -> set[str]:
        """The instances (and node names) the provider keeps a view of."""
        with self._lock:
            return set(self._seen) | set(self._node_instance)

    def _instance_of(self, node: NodeContext) -> str:
        n = node.node
        mapped = self.config.instance_ids.get(n.name)
        if mapped:
            return mapped
        if n.provider_id:
            m = _PROVIDER_ID.match(n.provider_id)
            if m:
                return m.group(1)
        label = n.labels.get(INSTANCE_LABEL)
        if label:
            return label
        raise ProviderError(ErrorKind.FATAL, f"node {n.name}: no ECS instance id (spec."
                            "providerID '<region>.i-...', the label "
                            f"{INSTANCE_LABEL} or the config's instance_ids)",
                            field="spec.providerID")

    def limits(self, node: NodeContext) -> _Limits:
        n = node.node
        itype = self.config.instance_type or n.labels.get(TYPE_LABEL)
        if not itype:
            raise ProviderError(ErrorKind.FATAL, f"node {n.name}: no instance type (label "
                                f"{TYPE_LABEL} or the config's instance_type)",
                                field=f"metadata.labels[{TYPE_LABEL}]")
        with self._lock:
            cached = self._limits.get(itype)
        if cached is not None:
            return cached
        from alibabacloud_ecs20140526 import models as m

        body = self._call("DescribeInstanceTypes",
                          m.DescribeInstanceTypesRequest(instance_types=[itype]))
        found = [t for t in _items(body, "instance_types", "instance_type")
                 if getattr(t, "instance_type_id", None) == itype]
        if not found:
            raise ProviderError(ErrorKind.FATAL, f"instance type {itype} is unknown to ECS",
                                field=f"metadata.labels[{TYPE_LABEL}]")
        t = found[0]
        enis, ipv4 = getattr(t, "eni_quantity", None), getattr(t, "eni_private_ip_address_quantity",
                                                               None)
        if not isinstance(enis, int) or not isinstance(ipv4, int) or enis < 1 or ipv4 < 1:
            raise ProviderError(ErrorKind.TRANSIENT, f"DescribeInstanceTypes: malformed reply "
                                f"for {itype} (EniQuantity / EniPrivateIpAddressQuantity)")
        limits = _Limits(enis=enis, ipv4=ipv4, ipv6=int(getattr(t, "eni_ipv_6address_quantity",
                                                                0) or 0))
        with self._lock:
            self._limits[itype] = limits
        return limits

    def max_interfaces(self, limits: _Limits) -> int:
        """Terway's secondary-ENI count ``EniQuantity * ratio + shift - 1`` (capped by
        ``max_enis``): the pool's interfaces. The primary ENI is reported
        ``pooled=False`` and core does not count it."""
        cfg = self.config
        secondary = int(limits.enis * cfg.eni_cap_ratio) + cfg.eni_cap_shift - 1
        if cfg.max_enis:
            secondary = min(secondary, cfg.max_enis)
        return max(1, secondary)

    def describe_enis(self, *, instance: str | None = None, ids: Sequence[str] = (),
                      status: str | None = None, kind: str | None = None) -> list[_Eni]:
        from alibabacloud_ecs20140526 import models as m

        out: list[_Eni] = []
        token: str | None = None
        for _ in range(100):
            req = m.DescribeNetworkInterfacesRequest(
                region_id=self.config.region, instance_id=instance,
                network_interface_id=list(ids) or None, status=status, type=kind,
                max_results=500, next_token=token)
            body = self._call("DescribeNetworkInterfaces", req, subject=instance)
            for raw in _items(body, "network_interface_sets", "network_interface_set"):
                out.append(_eni_of(raw))
            token = getattr(body, "next_token", None) or None
            if not token:
                break
        if instance is not None and not ids and status is None and kind is None:
            view = {ip: eni.status for eni in out for ip in (*eni.secondary, *eni.ipv6)}
            with self._lock:
                self._seen[instance] = (time.monotonic(), view)
        return out

    def _note(self, instance: str, added: Sequence[str] = (), removed: Sequence[str] = (),
              status: str = "InUse") -> None:
        """Keep the instance's view in step with a write the provider made."""
        with self._lock:
            seen = self._seen.get(instance)
            if seen is None:
                return
            view = seen[1]
            for ip in removed:
                view.pop(ip, None)
            for ip in added:
                view[ip] = status

    def _vswitches(self) -> dict[str, tuple[ipaddress.IPv4Network | None, int]]:
        """Every vSwitch of the region the cloud reports: id -> (CIDR, free addresses)."""
        from alibabacloud_ecs20140526 import models as m

        body = self._call("DescribeVSwitches",
                          m.DescribeVSwitchesRequest(region_id=self.config.region,
                                                     page_size=50))
        out: dict[str, tuple[ipaddress.IPv4Network | None, int]] = {}
        for v in _items(body, "v_switches", "v_switch"):
            vid = getattr(v, "v_switch_id", None)
            if not vid:
                continue
            try:
                cidr: ipaddress.IPv4Network | None = ipaddress.IPv4Network(v.cidr_block)
            except (ValueError, TypeError):
                cidr = None
            free = getattr(v, "available_ip_address_count", None)
            out[vid] = (cidr, int(free) if isinstance(free, int) else 0)
            if cidr is not None:
                with self._lock:
                    self._cidrs[vid] = cidr
        return out

    def _cidr_map(self) -> dict[str, ipaddress.IPv4Network]:
        with self._lock:
            known = dict(self._cidrs)
        if all(v in known for v in self.config.vswitches):
            return known
        self._vswitches()
        with self._lock:
            return dict(self._cidrs)

    def _drop_orphans(self, instance: str) -> None:
        with self._lock:
            orphans = set(self._orphans.get(instance, ()))
        for eni_id in orphans:
            try:
                self._delete(eni_id)
            except ProviderError as exc:
                if exc.kind is not ErrorKind.NOT_FOUND:
                    continue
            with self._lock:
                self._orphans.get(instance, set()).discard(eni_id)

    def _delete(self, eni_id: str) -> None:
        from alibabacloud_ecs20140526 import models as m

        self._call("DeleteNetworkInterface",
                   m.DeleteNetworkInterfaceRequest(region_id=self.config.region,
                                                   network_interface_id=eni_id),
                   subject=eni_id)

    # --- inventory ----------------------------------------------------------------------

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        instance = self.instance_id(node)
        limits = self.limits(node)
        dual = self.config.dual
        if dual and limits.ipv6 < 1:
            key = config_key(self.name, "ip_stack")
            raise ProviderError(ErrorKind.FATAL, f"config {key}: dual needs IPv6 on the ENIs, "
                                f"and node {node.node.name}'s instance type has none "
                                "(EniIpv6AddressQuantity 0): set ipv4, or use an instance "
                                "type with IPv6", field=key)
        self._drop_orphans(instance)
        interfaces = []
        enis = self.describe_enis(instance=instance)
        if not any(eni.kind == "Primary" for eni in enis):
            # every instance has its primary ENI: ECS answers an unknown InstanceId with an
            # empty list, not an error, and a pool grown on it would leak the new ENIs
            raise ProviderError(ErrorKind.NOT_FOUND, f"node {node.node.name}: ECS has no "
                                f"instance {instance} (no primary ENI is attached to it)",
                                field="spec.providerID", subject=instance)
        for eni in enis:
            if eni.status not in ("InUse", "Attaching"):
                continue  # detaching: on its way out, nothing to pool on it
            primary = eni.kind == "Primary"
            # Terway never puts pod addresses on the primary ENI: not pooled
            interfaces.append(CloudInterface(
                id=eni.id, mac=eni.mac, subnet=eni.vswitch, primary=primary,
                trunk=eni.kind == "Trunk", ips=eni.secondary, pooled=not primary,
                ipv6=eni.ipv6 if dual else ()))
        interfaces.sort(key=lambda i: (not i.primary, i.id))
        return Inventory(interfaces=tuple(interfaces),
                         max_interfaces=self.max_interfaces(limits),
                         ips_per_interface=self.ips_per_eni(limits), dual_stack=dual)

    def ips_per_eni(self, limits: _Limits) -> int:
        """Pod addresses per secondary ENI: its IPv4 addresses but the primary one; in
        dual stack, pairs, so also no more than its IPv6 addresses (Terway's rule)."""
        ipv4 = max(0, limits.ipv4 - 1)
        return min(ipv4, limits.ipv6) if self.config.dual else ipv4

    @hookimpl
    def podnet_node_check(self, provider: str, node: NodeContext
                          ) -> Sequence[NodeFinding] | None:
        """One DescribeNetworkInterfaces for the node's instance: each secondary ENI podnet
        made (its description) whose security groups are not the configured ones, as a
        set, is a ``SecurityGroupDrift`` finding. Reads only."""
        instance = self.instance_id(node)
        expected = set(self.config.security_groups)
        findings = []
        for eni in self.describe_enis(instance=instance):
            if not eni.made_by_podnet:
                continue  # the primary ENI, a trunk, or an ENI someone else made
            actual = set(eni.security_groups)
            if actual == expected:
                continue
            findings.append(NodeFinding(
                reason="SecurityGroupDrift", interface=eni.id,
                message=f"ENI {eni.id} of instance {instance} has security groups "
                        f"[{', '.join(sorted(actual))}], expected "
                        f"[{', '.join(sorted(expected))}]"))
        return findings

    # --- pool ---------------------------------------------------------------------------

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        if interface is None or interface.primary or not interface.pooled:
            # core grows only on the secondary ENIs it pools, and asks for a new ENI
            # (podnet_interface_create) when none has room: never the primary ENI
            raise ProviderError(ErrorKind.FATAL, "pod addresses go on secondary ENIs only, "
                                f"not on {interface.id if interface else 'no ENI'}",
                                subject=interface.id if interface else None)
        if interface.trunk:
            raise ProviderError(ErrorKind.FATAL, f"{interface.id} is a trunk ENI")
        if count <= 0:
            return []
        subject = interface.subnet or interface.id
        body = self._call("AssignPrivateIpAddresses", m.AssignPrivateIpAddressesRequest(
            region_id=self.config.region, network_interface_id=interface.id,
            secondary_private_ip_address_count=count), subject=subject)
        assigned = getattr(body, "assigned_private_ip_addresses_set", None)
        ip_set = getattr(assigned, "private_ip_set", None)
        ips = getattr(ip_set, "private_ip_address", None)
        if not isinstance(ips, list) or not all(isinstance(ip, str) for ip in ips):
            # the addresses were assigned: the next inventory finds them
            raise ProviderError(ErrorKind.TRANSIENT, "AssignPrivateIpAddresses: malformed "
                                "reply (no AssignedPrivateIpAddressesSet.PrivateIpSet)",
                                subject=interface.id)
        self._note(instance, added=ips)
        if not self.config.dual or not ips:
            return [PoolEntry(ip, interface.id, interface.subnet) for ip in ips]
        v6 = self._assign_ipv6(instance, interface.id, ips, subject)
        return [PoolEntry(ip, interface.id, interface.subnet, ip6)
                for ip, ip6 in zip(ips, v6, strict=True)]

    def _assign_ipv6(self, instance: str, eni_id: str, ips: Sequence[str],
                     subject: str) -> list[str]:
        """As many IPv6 addresses as ``ips`` (just assigned) on ``eni_id``, for pairs.

        Terway's rule: a half pair is never handed out. Addresses that get no partner are
        unassigned again; if that fails too, the error is ``transient`` so that core
        reads the inventory again, finds the halves, and gives them back.
        """
        from alibabacloud_ecs20140526 import models as m

        try:
            body = self._call("AssignIpv6Addresses", m.AssignIpv6AddressesRequest(
                region_id=self.config.region, network_interface_id=eni_id,
                ipv_6address_count=len(ips)), subject=subject)
            got = getattr(getattr(body, "ipv_6sets", None), "ipv_6address", None)
            if not isinstance(got, list) or not all(isinstance(ip, str) for ip in got):
                raise ProviderError(ErrorKind.TRANSIENT, "AssignIpv6Addresses: malformed "
                                    "reply (no Ipv6Sets.Ipv6Address)", subject=eni_id)
        except ProviderError as exc:
            self._give_back_halves(instance, eni_id, ips, (), exc)
            raise
        self._note(instance, added=got)
        if len(got) != len(ips):
            self._give_back_halves(instance, eni_id, ips[len(got):], got[len(ips):], None)
        return got[: len(ips)]

    def _give_back_halves(self, instance: str, eni_id: str, ips: Sequence[str],
                          ipv6: Sequence[str], cause: ProviderError | None) -> None:
        try:
            if ips:
                self._unassign(eni_id, ips)
            if ipv6:
                self._unassign(eni_id, ipv6, ipv6=True)
        except ProviderError as exc:
            raise ProviderError(ErrorKind.TRANSIENT, f"{cause or 'IPv6 shortfall'}; "
                                f"giving back the unpaired halves failed too: {exc}",
                                subject=eni_id) from None
        self._note(instance, removed=[*ips, *ipv6])

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        if not entries:
            return []
        instance = self.instance_id(node)
        # a pair's two halves, and invalid halves of either family, all given back
        by_eni: dict[str | None, list[str]] = {}
        for e in entries:
            by_eni.setdefault(e.interface, []).extend(
                ip for ip in (e.address, e.ipv6) if ip is not None)
        if None in by_eni:
            # interface unknown: find each address on the node's ENIs
            loose = set(by_eni.pop(None))
            for eni in self.describe_enis(instance=instance):
                here = [ip for ip in (*eni.secondary, *eni.ipv6) if ip in loose]
                if here:
                    by_eni.setdefault(eni.id, []).extend(here)
        for eni_id, ips in by_eni.items():
            assert eni_id is not None
            v4 = [ip for ip in ips if ":" not in ip]
            v6 = [ip for ip in ips if ":" in ip]
            if v4:
                self._unassign(eni_id, v4)
            if v6:
                self._unassign(eni_id, v6, ipv6=True)
            self._note(instance, removed=ips)
        # unassigned now, or on none of the node's ENIs (already gone): all gone
        return list(dict.fromkeys(e.address for e in entries))

    def _unassign(self, eni_id: str, ips: Sequence[str], *, ipv6: bool = False) -> None:
        """Give ``ips`` (IPv4, or IPv6 with ``ipv6``) of one ENI back; when some are
        already gone (or the ENI is), give back only what is still there."""
        from alibabacloud_ecs20140526 import models as m

        def call(addresses: Sequence[str]) -> None:
            if ipv6:
                self._call("UnassignIpv6Addresses", m.UnassignIpv6AddressesRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    ipv_6address=list(addresses)), subject=eni_id)
            else:
                self._call("UnassignPrivateIpAddresses", m.UnassignPrivateIpAddressesRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    private_ip_address=list(addresses)), subject=eni_id)

        try:
            call(ips)
        except ProviderError as exc:
            if exc.kind is not ErrorKind.NOT_FOUND:
                raise
            found = self.describe_enis(ids=[eni_id])
            held = (found[0].ipv6 if ipv6 else found[0].secondary) if found else ()
            still = [ip for ip in ips if ip in held]
            if still:
                call(still)

    # --- interfaces ---------------------------------------------------------------------

    def choose_vswitch(self, wanted: str | None, count: int) -> str:
        """The vSwitch of a new ENI, by the configured policy, among those with room."""
        candidates = [wanted] if wanted else list(self.config.vswitches)
        seen = self._vswitches()
        ready = [(v, seen[v][1]) for v in candidates if v in seen and seen[v][1] >= count + 1]
        if not ready:
            unknown = [v for v in candidates if v not in seen]
            if unknown and len(unknown) == len(candidates):
                raise ProviderError(ErrorKind.FATAL, f"vSwitch {', '.join(unknown)} does not "
                                    "exist", subject=unknown[0])
            names = ", ".join(candidates)
            raise ProviderError(ErrorKind.SUBNET_EXHAUSTED,
                                f"vSwitch {names} has not enough free addresses "
                                f"for a new ENI with {count}", subject=candidates[0])
        policy = self.config.vswitch_policy
        if policy == "most":
            return max(ready, key=lambda r: r[1])[0]
        if policy == "random":
            return self._random.choice(ready)[0]
        return ready[0][0]

    @hookimpl
    def podnet_interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                                ip_count: int) -> CloudInterface | None:
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        limits = self.limits(node)
        count = max(0, min(ip_count, self.ips_per_eni(limits)))
        dual = self.config.dual
        vswitch = self.choose_vswitch(subnet, count)
        body = self._call("CreateNetworkInterface", m.CreateNetworkInterfaceRequest(
            region_id=self.config.region, v_switch_id=vswitch,
            security_group_ids=list(self.config.security_groups),
            secondary_private_ip_address_count=count or None,
            ipv_6address_count=(count or None) if dual else None,
            description=f"{DESCRIPTION_PREFIX}{instance}",
            tag=[m.CreateNetworkInterfaceRequestTag(key=INSTANCE_TAG, value=instance)]),
            subject=vswitch)
        eni_id = getattr(body, "network_interface_id", None)
        if not isinstance(eni_id, str) or not eni_id:
            # made, maybe: the sweep finds it by its tag
            raise ProviderError(ErrorKind.TRANSIENT,
                                "CreateNetworkInterface: malformed reply (no NetworkInterfaceId)",
                                subject=vswitch)
        with self._lock:
            self._creating.add(eni_id)
        try:
            return self._attach_new(instance, eni_id, dual)
        finally:
            with self._lock:
                self._creating.discard(eni_id)

    def _attach_new(self, instance: str, eni_id: str, dual: bool) -> CloudInterface:
        """Attach the ENI just made and wait for it; roll it back on any failure."""
        from alibabacloud_ecs20140526 import models as m

        try:
            self._call("AttachNetworkInterface", m.AttachNetworkInterfaceRequest(
                region_id=self.config.region, network_interface_id=eni_id,
                instance_id=instance), subject=eni_id)
            eni = self._wait(eni_id, "InUse")
            if dual and len(eni.ipv6) != len(eni.secondary):
                # Terway: a new ENI whose IPv4 and IPv6 counts differ is rolled back
                raise ProviderError(ErrorKind.TRANSIENT, f"ENI {eni_id} came with "
                                    f"{len(eni.secondary)} IPv4 and {len(eni.ipv6)} IPv6 "
                                    "addresses: rolled back", subject=eni_id)
        except BaseException:
            self._rollback(instance, eni_id)
            raise
        self._note(instance, added=(*eni.secondary, *eni.ipv6))
        return CloudInterface(id=eni.id, mac=eni.mac, subnet=eni.vswitch, ips=eni.secondary,
                              ipv6=eni.ipv6 if dual else ())

    def _rollback(self, instance: str, eni_id: str) -> None:
        """A made ENI that never got attached goes again; if that fails too, the node's
        next inventory retries (and, should this process die first, the sweep)."""
        from alibabacloud_ecs20140526 import models as m

        try:
            found = self.describe_enis(ids=[eni_id])
            if found and found[0].status in ("InUse", "Attaching"):
                self._call("DetachNetworkInterface", m.DetachNetworkInterfaceRequest(
                    region_id=self.config.region, network_interface_id=eni_id,
                    instance_id=instance), subject=eni_id)
                self._wait(eni_id, "Available")
            self._delete(eni_id)
        except ProviderError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return
            with self._lock:
                self._orphans.setdefault(instance, set()).add(eni_id)

    def _wait(self, eni_id: str, status: str, timeout: float | None = None) -> _Eni:
        """Poll until the ENI is in ``status``. A settled other state (not Attaching,
        Detaching, Creating, Deleting) for longer than ``_SETTLED_GRACE`` means the change
        was never made (a lost or refused call): give up then rather than poll to the
        deadline, and let the caller's retry decide."""
        started = time.monotonic()
        deadline = started + (self.config.attach_timeout if timeout is None else timeout)
        settled_deadline = started + _SETTLED_GRACE
        while True:
            try:
                found = self.describe_enis(ids=[eni_id])
            except ProviderError as exc:
                # a throttled poll says nothing about the ENI: poll again while there is
                # time (rolling back an ENI that attached fine costs two more writes)
                if exc.kind is not ErrorKind.THROTTLED or time.monotonic() >= deadline:
                    raise
                time.sleep(max(self.config.poll_interval, 0.05))
                continue
            if not found:
                raise ProviderError(ErrorKind.NOT_FOUND, f"ENI {eni_id} is gone",
                                    subject=eni_id)
            if found[0].status == status:
                return found[0]
            now = time.monotonic()
            moving = found[0].status in _TRANSITIONAL
            if now >= deadline or (not moving and now >= settled_deadline):
                raise ProviderError(ErrorKind.TRANSIENT, f"ENI {eni_id} is still "
                                    f"{found[0].status}, not {status}", subject=eni_id)
            time.sleep(self.config.poll_interval)

    @hookimpl
    def podnet_interface_dispose(self, provider: str, node: NodeContext,
                                 interface: CloudInterface) -> bool | None:
        if interface.primary or interface.trunk or not interface.pooled:
            raise ProviderError(ErrorKind.FATAL, f"{interface.id} is a primary or trunk ENI: "
                                "never disposed", subject=interface.id)
        from alibabacloud_ecs20140526 import models as m

        instance = self.instance_id(node)
        found = self.describe_enis(ids=[interface.id])
        if not found:
            return True
        eni = found[0]
        if eni.kind != "Secondary":
            raise ProviderError(ErrorKind.FATAL, f"{eni.id} is a {eni.kind} ENI: never "
                                "disposed", subject=eni.id)
        self._note(instance, removed=(*eni.secondary, *eni.ipv6))
        if eni.status in ("InUse", "Attaching"):
            self._call("DetachNetworkInterface", m.DetachNetworkInterfaceRequest(
                region_id=self.config.region, network_interface_id=eni.id,
                instance_id=instance), subject=eni.id)
            try:
                eni = self._wait(eni.id, "Available", timeout=min(5.0,
                                                                   self.config.attach_timeout))
            except ProviderError as exc:
                # gone already, or still detaching (core asks again)
                return exc.kind is ErrorKind.NOT_FOUND
        if eni.status != "Available":
            return False
        try:
            self._delete(eni.id)
        except ProviderError as exc:
            if exc.kind is ErrorKind.NOT_FOUND:
                return True
            raise
        return True

    # --- machines no Node and no record names (podnet audit) ----------------------------

    @hookimpl
    def podnet_unknown_machines(self, provider: str, known: Sequence[NodeInfo]
                                ) -> Sequence[NodeInfo] | None:
        """The instances an ENI podnet made (its tag, or an older ENI's description) is
        attached to that none of ``known`` names: what podnet made for a node whose Node
        and record are both gone. An instance holding no such ENI is never listed, so
        ENIs others made (another cluster's, a hand-made one) on the instances of the
        region are no finding; on a listed one, the audit reads the inventory, as the
        controller pools it: the secondary addresses of its secondary ENIs.

        One DescribeNetworkInterfaces of the region's secondary ENIs (500 a page), then
        one DescribeInstances per 100 of those instances, for the instance type the
        inventory needs; an instance ECS no longer has is left out (its ENIs were detached
        when it was released, and the sweep deletes them). Reads only.
        """
        names: set[str] = set()
        for node in known:
            try:
                names.add(self._instance_of(NodeContext(node=node)))
            except ProviderError:
                continue  # names no instance: nothing of it to leave out
        holding = sorted({eni.instance for eni in self.describe_enis(kind="Secondary")
                          if eni.made_by_podnet and eni.instance
                          and eni.status in ("InUse", "Attaching")} - names)
        types = self.instance_types(holding)
        region = self.config.region
        return [NodeInfo(name=instance, uid="", provider_id=f"{region}.{instance}",
                         labels={TYPE_LABEL: types[instance]})
                for instance in holding if instance in types]

    def instance_types(self, instances: Sequence[str]) -> dict[str, str]:
        """Each of ``instances`` ECS has -> its instance type: DescribeInstances, 100 ids
        a call (its ``InstanceIds`` limit), every page."""
        from alibabacloud_ecs20140526 import models as m

        out: dict[str, str] = {}
        for start in range(0, len(instances), MAX_INSTANCE_IDS):
            token: str | None = None
            for _ in range(MAX_INSTANCE_IDS):
                body = self._call("DescribeInstances", m.DescribeInstancesRequest(
                    region_id=self.config.region,
                    instance_ids=json.dumps(list(instances[start:start + MAX_INSTANCE_IDS])),
                    max_results=MAX_INSTANCE_IDS, next_token=token))
                if getattr(body, "instances", None) is None:
                    raise ProviderError(ErrorKind.TRANSIENT, "DescribeInstances: malformed "
                                        "reply (no Instances)")
                for raw in _items(body, "instances", "instance"):
                    instance = getattr(raw, "instance_id", None)
                    itype = getattr(raw, "instance_type", None)
                    if not isinstance(instance, str) or not instance or not isinstance(
                            itype, str) or not itype:
                        raise ProviderError(ErrorKind.TRANSIENT, "DescribeInstances: "
                                            "malformed reply (an instance without InstanceId "
                                            "or InstanceType)")
                    out[instance] = itype
                token = getattr(body, "next_token", None) or None
                if not token:
                    break
        return out

    # --- ENIs nobody attached ---------------------------------------------------------

    @hookimpl
    def podnet_sweep(self, provider: str, owners: Collection[str],
                     remove: Collection[str]) -> Sequence[str] | None:
        """The region's detached ENIs podnet made (its tag, or an older ENI's description),
        as Terway's GC finds them: created and never attached (the controller died between
        CreateNetworkInterface and AttachNetworkInterface), or detached and never deleted
        (it died in a rollback or a dispose, or the delete failed and its memory went).
        No inventory lists them: they are on no instance.

        One DescribeNetworkInterfaces (``Status=Available``, ``Type=Secondary``; one per
        500) a call; each ENI in ``remove`` (reported for ``leaked_ip_expiry``, far longer
        than any create-to-attach) that this answer still shows Available is deleted —
        never one this process is attaching now, and the cloud refuses to delete one that
        got attached since. ``owners`` name records, never an ENI: unused. A delete answered
        not-found is done; throttled, the rest wait for the next period (still reported,
        so their first-seen times stay).
        """
        found = self.describe_enis(status="Available", kind="Secondary")
        with self._lock:
            creating = set(self._creating)
        orphans = [e.id for e in found if e.made_by_podnet and e.status == "Available"
                   and e.id not in creating]
        doomed = set(remove)
        left: list[str] = []
        throttled = False
        for eni_id in orphans:
            if eni_id not in doomed or throttled:
                left.append(eni_id)
                continue
            try:
                self._delete(eni_id)
            except ProviderError as exc:
                if exc.kind is ErrorKind.NOT_FOUND:
                    continue
                # attached since, say: the next period's answer leaves it out
                throttled = exc.kind is ErrorKind.THROTTLED
                left.append(eni_id)
                continue
            with self._lock:
                for held in self._orphans.values():
                    held.discard(eni_id)
        return left

    # --- one pod network ----------------------------------------------------------------

    @hookimpl
    def podnet_address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        """The configured vSwitches with their CIDRs (read once, then kept)."""
        cidrs = self._cidr_map()
        return AddressSpace(subnets=tuple(
            Subnet.first_host_gateway(v, str(cidrs[v]) if v in cidrs else None)
            for v in self.config.vswitches), pairs=self.config.dual)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        pn = context.pod_network
        request = context.request
        if request is None:
            raise ProviderError(ErrorKind.FATAL, "the ecs provider uses node pools")
        entry = request.entry or self._add_static(context, request)
        cidr = self._cidr_map().get(entry.subnet or "")
        gateway = str(next(cidr.hosts())) if cidr is not None else None
        cidr_text = str(cidr) if cidr is not None else None
        if self.config.dual and entry.ipv6 is None:
            # core never hands out half a pair; a provider's own static add is paired
            raise ProviderError(ErrorKind.FATAL, f"{entry.address} has no IPv6 partner",
                                field="status.ipv6")
        # what the pod's interface gets (the ENI dataplane): its address alone, the
        # link-local gateway; ``gateway`` stays the vSwitch's, the ENI's table's next hop
        return Allocation(ip=entry.address, ipv6=entry.ipv6, mac=pn.spec.requests.mac_address,
                          subnet=entry.subnet, gateway=gateway, interface=entry.interface,
                          cidr=cidr_text, prefix_length=32,
                          ipv6_prefix_length=128 if entry.ipv6 else None,
                          ipv6_gateway=ipv6_gateway(entry.ipv6) if entry.ipv6 else None,
                          routes=POD_ROUTES_DUAL if entry.ipv6 else POD_ROUTES)

    def _add_static(self, context: AllocateContext, request: ResolvedRequest) -> PoolEntry:
        """Assign the requested address core found outside the pool to an ENI of the node
        in its vSwitch."""
        from alibabacloud_ecs20140526 import models as m

        address, subnet = request.address, request.subnet
        assert address is not None and subnet is not None
        vswitch = subnet.id
        instance = self.instance_id(context.node)
        # pods go on secondary ENIs only: never the primary one, never a trunk
        enis = [e for e in self.describe_enis(instance=instance)
                if e.vswitch == vswitch and e.status == "InUse"
                and e.kind not in ("Trunk", "Primary")]
        for eni in enis:
            if address in eni.secondary and not self.config.dual:
                return PoolEntry(address, eni.id, vswitch)
        if not enis:
            raise PoolEmpty(f"no ENI of the node in vSwitch {vswitch} for {address}",
                            subnet=vswitch)
        if self.config.dual:
            # its IPv6 partner would have to be chosen outside the pool: not served
            raise request.refuse(f"{address} is not an idle pair on node "
                                 f"{context.node.node.name} (ip_stack dual: a static "
                                 "address must be one the node's pool holds)")
        eni = min(enis, key=lambda e: len(e.secondary))
        self._call("AssignPrivateIpAddresses", m.AssignPrivateIpAddressesRequest(
            region_id=self.config.region, network_interface_id=eni.id,
            private_ip_address=[address]), subject=vswitch)
        self._note(instance, added=[address])
        return PoolEntry(address, eni.id, vswitch)

    def _on_node(self, context: PodNetworkContext, max_age: float | None) -> tuple[bool, str]:
        """Whether the recorded address (and, dual stack, its IPv6 half) is on an InUse ENI
        of the node: from the view the provider keeps when it is there and (``max_age``)
        fresh enough, else described."""
        pn = context.pod_network
        ip = pn.status.ip
        if ip is None:
            return False, "no address recorded"
        if context.node is None:
            return False, "no node"
        instance = self.instance_id(context.node)
        # dual stack: the IPv6 half must be there too
        ip6 = pn.status.ipv6 if self.config.dual else None
        with self._lock:
            seen = self._seen.get(instance)
        if seen is not None and all(seen[1].get(a) == "InUse" for a in (ip, ip6) if a) and (
                max_age is None or time.monotonic() - seen[0] <= max_age):
            return True, ""
        for eni in self.describe_enis(instance=instance):
            if ip in eni.secondary:
                if eni.status != "InUse":
                    return False, f"{ip} is on {eni.id}, which is {eni.status}"
                if ip6 is not None and ip6 not in eni.ipv6:
                    return False, f"{ip6}, the IPv6 half of {ip}, is not on {eni.id}"
                return True, ""
        return False, f"{ip} is on no ENI of instance {instance}"

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        if pn.status.ip is None:
            raise ProviderError(ErrorKind.FATAL, "route without an address", field="status.ip")
        ok, reason = self._on_node(context, None)
        if not ok:
            raise ProviderError(ErrorKind.NOT_FOUND, reason)
        return RouteResult()

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        ok, reason = self._on_node(context, self.verify_cache_ttl)
        return VerifyResult(ok=ok, reason=reason)

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        # nothing to undo on the ENI: the address goes back to the node's pool, and core
        # keeps it idle or unassigns it (pool_shrink)
        return ReleaseResult(return_to_pool=True)

    # --- the dataplane on a node (the node agent): a routed veth pair, a table per ENI;
    # its four hooks come from DataplaneHooks (self.dataplane) ---------------------------

    def _mac_of(self, pn: PodNetwork) -> str | None:
        found = self.describe_enis(ids=[pn.status.interface or ""])
        return found[0].mac if found else None

    # --- errors -------------------------------------------------------------------------

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        return classify(error)


# --- helpers ------------------------------------------------------------------------------


def _snake(api: str) -> str:
    special = {"DescribeVSwitches": "describe_vswitches",
               "AssignIpv6Addresses": "assign_ipv_6addresses",
               "UnassignIpv6Addresses": "unassign_ipv_6addresses"}
    if api in special:
        return special[api]
    return re.sub(r"(?<!^)(?=[A-Z])", "_", api).lower()


def _items(body: Any, outer: str, inner: str) -> list[Any]:
    holder = getattr(body, outer, None)
    items = getattr(holder, inner, None) if holder is not None else None
    return list(items) if isinstance(items, list) else []


def _eni_of(raw: Any) -> _Eni:
    ips = _items(raw, "private_ip_sets", "private_ip_set")
    eni_id = getattr(raw, "network_interface_id", None)
    if not isinstance(eni_id, str) or not eni_id:
        raise ProviderError(ErrorKind.TRANSIENT, "DescribeNetworkInterfaces: malformed reply "
                            "(an ENI without NetworkInterfaceId)")
    if getattr(raw, "private_ip_sets", None) is None:
        raise ProviderError(ErrorKind.TRANSIENT, "DescribeNetworkInterfaces: malformed reply "
                            f"({eni_id} has no PrivateIpSets)", subject=eni_id)
    primary_ip = getattr(raw, "private_ip_address", None)
    secondary = tuple(str(p.private_ip_address) for p in ips
                      if not getattr(p, "primary", False) and p.private_ip_address
                      and p.private_ip_address != primary_ip)
    groups = _items(raw, "security_group_ids", "security_group_id")
    tags = tuple((str(t.tag_key), str(getattr(t, "tag_value", "") or ""))
                 for t in _items(raw, "tags", "tag") if getattr(t, "tag_key", None))
    ipv6 = tuple(str(a.ipv_6address) for a in _items(raw, "ipv_6sets", "ipv_6set")
                 if getattr(a, "ipv_6address", None))
    return _Eni(id=eni_id, status=str(getattr(raw, "status", "") or ""),
                kind=str(getattr(raw, "type", "") or "Secondary"),
                vswitch=str(getattr(raw, "v_switch_id", "") or ""),
                mac=getattr(raw, "mac_address", None), primary_ip=primary_ip,
                secondary=secondary, security_groups=tuple(str(g) for g in groups),
                description=str(getattr(raw, "description", "") or ""), ipv6=ipv6,
                tags=tags, instance=str(getattr(raw, "instance_id", "") or "") or None)



Callback = Callable[[], None]

#: what the host registers as the built-in ``ecs`` plugin
plugin = EcsProvider()


def _close_sdk_sessions(endpoint: str) -> None:
    import importlib

    for module, cls in (("darabonba.core", "DaraCore"), ("Tea.core", "TeaCore")):
        try:
            runtime = getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError):
            continue
        sessions = getattr(runtime, "_sessions", None)
        if not isinstance(sessions, dict):
            continue
        for key in [k for k in list(sessions) if endpoint in k]:
            session = sessions.pop(key, None)
            if session is None:
                continue
            # urllib3 2 drops a cleared pool without closing it: its idle sockets would
            # wait for a full garbage collection. Close them now.
            for adapter in session.adapters.values():
                pools = getattr(getattr(adapter, "poolmanager", None), "pools", None)
                if pools is None:
                    continue
                for pool_key in list(pools.keys()):
                    pool = pools.get(pool_key)
                    if pool is not None:
                        pool.close()
            session.close()
