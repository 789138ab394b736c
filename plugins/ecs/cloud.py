"""The ECS provider's side of the cloud: the SDK client and its one call path, and what
the provider reads and keeps of the cloud (instances, their limits, ENIs, vSwitches).
The hooks (``podnet.plugins.ecs.provider``) are built on it."""


from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import attrs

from podnet.hookspecs.errors import ConfigError, ErrorKind, ProviderError
from podnet.hookspecs.models import PodNetwork
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.sections import config_key
from podnet.hookspecs.types import (
    CloudLimiter,
    NodeContext,
)
from podnet.plugins.ecs.config import (
    DESCRIPTION_PREFIX,
    ENVIRONMENT,
    INSTANCE_LABEL,
    INSTANCE_TAG,
    MAX_INSTANCE_IDS,
    NAME,
    OIDC_PROVIDER_ARN,
    POLICY,
    PROVIDER_ID,
    ROLE_ARN,
    SETTLED_GRACE,
    TRANSITIONAL,
    TYPE_LABEL,
    ZONE_LABEL,
    EcsConfig,
    classify,
    error_code,
)


@attrs.frozen
class Limits:
    enis: int
    ipv4: int
    ipv6: int
    #: DescribeInstanceTypes' ``EniTrunkSupported``, and room for member ENIs beside the
    #: adapters (``EniTotalQuantity`` over ``EniQuantity``): a trunk ENI is worth making
    trunk: bool = False


@attrs.frozen
class VSwitch:
    """What DescribeVSwitches says of one vSwitch."""

    id: str
    zone: str
    #: None: the cloud's answer was not a CIDR
    cidr: ipaddress.IPv4Network | None
    #: free addresses
    free: int


#: vSwitches a DescribeVSwitches page holds (its most)
VSWITCH_PAGE = 50


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
    zone: str = ""

    @property
    def made_by_podnet(self) -> bool:
        """A secondary ENI podnet created: its tag, or (made before tagging) its
        description."""
        return self.kind == "Secondary" and (
            any(k == INSTANCE_TAG for k, _ in self.tags)
            or self.description.startswith(DESCRIPTION_PREFIX))

    def made_for(self, instance: str) -> bool:
        """A secondary ENI podnet created for ``instance``'s pool (its tag's value, or
        an older ENI's description, names it)."""
        return self.kind == "Secondary" and (
            (INSTANCE_TAG, instance) in self.tags
            or self.description == f"{DESCRIPTION_PREFIX}{instance}")


class EcsCloud:
    """The SDK, and the provider's reads and memory of the cloud. One per plugin."""

    def __init__(self, *, name: str = NAME, policy: PoolPolicy | None = None) -> None:
        self.name = name
        self.policy = policy or POLICY
        self.config = EcsConfig()
        #: the credentials client (``alibabacloud_credentials``) every SDK client asks for
        #: the current key before each request: it refreshes temporary ones itself
        self._credentials: Any = None
        self._local = threading.local()
        self._lock = threading.Lock()
        self._limits: dict[str, Limits] = {}
        self._cidrs: dict[str, ipaddress.IPv4Network] = {}
        #: ENIs made whose rollback failed: deleted again on the node's next inventory
        #: (after a restart, the sweep finds them by their tag)
        self._orphans: dict[str, set[str]] = {}
        #: ENIs this process created and is attaching now: never swept
        self._creating: set[str] = set()
        #: instance types whose instances refused a trunk ENI (the catalogue said they
        #: take one): no trunk is made for them again
        self._no_trunk: set[str] = set()
        self._random = random.Random(0)
        #: what the cloud last said is on each instance: instance -> (when, ip -> ENI
        #: status); kept up to date by the provider's own writes, so that route does not
        #: describe the node's ENIs once per pod
        self._seen: dict[str, tuple[float, dict[str, str]]] = {}
        #: node name -> its instance, to forget the instance when the node goes
        self._node_instance: dict[str, str] = {}
        #: instance -> its zone, as its ENIs say (a node without the zone label)
        self._zones: dict[str, str] = {}
        #: how long verify trusts that view (seconds, wall clock)
        self.verify_cache_ttl = 1.0
        self._generation = 0
        self.sdk_calls: dict[str, int] = {}
        #: core's buckets per API action (``podnet_cloud_limiter``)
        self._limiter: CloudLimiter | None = None

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is not None and getattr(self._local, "generation", -1) == self._generation:
            return client
        if self._credentials is None:
            raise ProviderError(ErrorKind.FATAL, "the ecs provider is not configured "
                                                 "(no credentials)")
        from alibabacloud_ecs20140526.client import Client
        from alibabacloud_tea_openapi import models as open_api_models

        cfg = self.config
        ms = int(cfg.timeout * 1000)
        # the credentials client, not its current key: a temporary key is renewed there
        client = Client(open_api_models.Config(
            credential=self._credentials, region_id=cfg.region,
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
            missing = _credential_error(exc)
            if missing is not None:
                # the key could not be had (metadata service, STS, token file): the SDK's
                # message names the source and its answer, never a key
                code = f"no credentials ({self.config.credentials}): {missing}"
            raise ProviderError(kind, f"{api}: {code}{f' ({subject})' if subject else ''}",
                                subject=subject) from None
        if limiter is not None:
            limiter.observe(api, time.perf_counter() - started)
        body = getattr(response, "body", None)
        if body is None:
            raise ProviderError(ErrorKind.TRANSIENT, f"{api}: empty reply", subject=subject)
        return body

    def instance_id(self, node: NodeContext) -> str:
        instance = self._instance_of(node)
        if self._node_instance.get(node.node.name) != instance:
            with self._lock:
                self._node_instance[node.node.name] = instance
        return instance

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
            m = PROVIDER_ID.match(n.provider_id)
            if m:
                return m.group(1)
        label = n.labels.get(INSTANCE_LABEL)
        if label:
            return label
        raise ProviderError(ErrorKind.FATAL, f"node {n.name}: no ECS instance id (spec."
                            "providerID '<region>.i-...', the label "
                            f"{INSTANCE_LABEL} or the config's instance_ids)",
                            field="spec.providerID")

    def zone_of(self, node: NodeContext) -> str | None:
        """The node's zone: its ``topology.kubernetes.io/zone`` label, else its instance's,
        as its ENIs said (read once); None when neither says."""
        label = node.node.labels.get(ZONE_LABEL)
        if label:
            return label
        instance = self.instance_id(node)
        with self._lock:
            zone = self._zones.get(instance)
        if zone is None:
            self.describe_enis(instance=instance)
            with self._lock:
                zone = self._zones.get(instance)
        return zone

    def instance_type_of(self, node: NodeContext) -> str:
        n = node.node
        itype = self.config.instance_type or n.labels.get(TYPE_LABEL)
        if not itype:
            raise ProviderError(ErrorKind.FATAL, f"node {n.name}: no instance type (label "
                                f"{TYPE_LABEL} or the config's instance_type)",
                                field=f"metadata.labels[{TYPE_LABEL}]")
        return itype

    def limits(self, node: NodeContext) -> Limits:
        itype = self.instance_type_of(node)
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
        total = getattr(t, "eni_total_quantity", None)
        members = total - enis if isinstance(total, int) else 0
        limits = Limits(enis=enis, ipv4=ipv4, ipv6=int(getattr(t, "eni_ipv_6address_quantity",
                                                                0) or 0),
                        trunk=getattr(t, "eni_trunk_supported", None) is True and members > 0)
        with self._lock:
            self._limits[itype] = limits
        return limits

    def max_interfaces(self, limits: Limits, *, trunk: bool = False) -> int:
        """Terway's secondary-ENI count ``EniQuantity * ratio + shift - 1`` (capped by
        ``max_enis``): the pool's interfaces. The primary ENI is reported
        ``pooled=False`` and core does not count it; nor a trunk ENI (``trunk``: one is
        attached), whose adapter is taken out of the count instead, as Terway's trunk
        takes one of its ENI slots: its pods are member ENIs, not pool addresses."""
        cfg = self.config
        secondary = int(limits.enis * cfg.eni_cap_ratio) + cfg.eni_cap_shift - 1
        if cfg.max_enis:
            secondary = min(secondary, cfg.max_enis)
        return max(1, secondary - (1 if trunk else 0))

    def describe_enis(self, *, instance: str | None = None, ids: Sequence[str] = (),
                      status: str | None = None, kind: str | None = None,
                      tag: tuple[str, str] | None = None) -> list[_Eni]:
        from alibabacloud_ecs20140526 import models as m

        out: list[_Eni] = []
        token: str | None = None
        tags = ([m.DescribeNetworkInterfacesRequestTag(key=tag[0], value=tag[1])]
                if tag is not None else None)
        for _ in range(100):
            req = m.DescribeNetworkInterfacesRequest(
                region_id=self.config.region, instance_id=instance,
                network_interface_id=list(ids) or None, status=status, type=kind,
                tag=tags, max_results=500, next_token=token)
            body = self._call("DescribeNetworkInterfaces", req, subject=instance)
            for raw in _items(body, "network_interface_sets", "network_interface_set"):
                out.append(_eni_of(raw))
            token = getattr(body, "next_token", None) or None
            if not token:
                break
        if (instance is not None and not ids and status is None and kind is None
                and tag is None):
            view = {ip: eni.status for eni in out for ip in (*eni.secondary, *eni.ipv6)}
            zone = next((eni.zone for eni in out if eni.zone), None)
            with self._lock:
                self._seen[instance] = (time.monotonic(), view)
                if zone:
                    self._zones[instance] = zone
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

    def _vswitches(self, zone: str | None = None) -> dict[str, VSwitch]:
        """Every vSwitch of the region the cloud reports (of ``zone`` only, when given):
        id -> its zone, CIDR and free addresses. DescribeVSwitches, 50 a page, every
        page."""
        from alibabacloud_ecs20140526 import models as m

        out: dict[str, VSwitch] = {}
        number = 1
        while True:
            body = self._call("DescribeVSwitches", m.DescribeVSwitchesRequest(
                region_id=self.config.region, zone_id=zone, page_number=number,
                page_size=VSWITCH_PAGE))
            if getattr(body, "v_switches", None) is None:
                raise ProviderError(ErrorKind.TRANSIENT, "DescribeVSwitches: malformed "
                                    "reply (no VSwitches)")
            page = _items(body, "v_switches", "v_switch")
            for v in page:
                vid = getattr(v, "v_switch_id", None)
                if not vid:
                    continue
                try:
                    cidr: ipaddress.IPv4Network | None = ipaddress.IPv4Network(v.cidr_block)
                except (ValueError, TypeError):
                    cidr = None
                free = getattr(v, "available_ip_address_count", None)
                out[vid] = VSwitch(id=vid, zone=str(getattr(v, "zone_id", "") or ""),
                                   cidr=cidr, free=int(free) if isinstance(free, int) else 0)
                if cidr is not None:
                    with self._lock:
                        self._cidrs[vid] = cidr
            total = getattr(body, "total_count", None)
            if (len(page) < VSWITCH_PAGE or not isinstance(total, int)
                    or number * VSWITCH_PAGE >= total or number >= 1000):
                return out
            number += 1

    def _cidr_map(self, wanted: Sequence[str] = ()) -> dict[str, ipaddress.IPv4Network]:
        """The CIDRs of the configured vSwitches and of ``wanted``: kept, read once."""
        with self._lock:
            known = dict(self._cidrs)
        if all(v in known for v in (*self.config.vswitches, *wanted)):
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

    def ips_per_eni(self, limits: Limits) -> int:
        """Pod addresses per secondary ENI: its IPv4 addresses but the primary one; in
        dual stack, pairs, so also no more than its IPv6 addresses (Terway's rule)."""
        ipv4 = max(0, limits.ipv4 - 1)
        return min(ipv4, limits.ipv6) if self.config.dual else ipv4

    def choose_vswitch(self, wanted: str | None, count: int,
                       candidates: Sequence[str] = ()) -> str:
        """The vSwitch of a new ENI: ``wanted``, else by the configured policy among
        ``candidates`` (the configured ones when none are given) with room."""
        candidates = [wanted] if wanted else list(candidates or self.config.vswitches)
        seen = self._vswitches()
        ready = [(v, seen[v].free) for v in candidates if v in seen and seen[v].free >= count + 1]
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

    def _wait(self, eni_id: str, status: str, timeout: float | None = None) -> _Eni:
        """Poll until the ENI is in ``status``. A settled other state (not Attaching,
        Detaching, Creating, Deleting) for longer than ``SETTLED_GRACE`` means the change
        was never made (a lost or refused call): give up then rather than poll to the
        deadline, and let the caller's retry decide."""
        started = time.monotonic()
        deadline = started + (self.config.attach_timeout if timeout is None else timeout)
        settled_deadline = started + SETTLED_GRACE
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
            moving = found[0].status in TRANSITIONAL
            if now >= deadline or (not moving and now >= settled_deadline):
                raise ProviderError(ErrorKind.TRANSIENT, f"ENI {eni_id} is still "
                                    f"{found[0].status}, not {status}", subject=eni_id)
            time.sleep(self.config.poll_interval)

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

    def _mac_of(self, pn: PodNetwork) -> str | None:
        found = self.describe_enis(ids=[pn.status.interface or ""])
        return found[0].mac if found else None


# --- helpers ------------------------------------------------------------------------------


def credentials_client(cfg: EcsConfig, provider: str) -> Any:
    """The ``alibabacloud_credentials`` client of ``cfg.credentials``, its keys resolved
    (the section's, else the environment's).

    :raise ConfigError: naming the key that is missing or wrong.
    """
    from alibabacloud_credentials.client import Client
    from alibabacloud_credentials.http import HttpOptions
    from alibabacloud_credentials.models import Config
    from alibabacloud_credentials.provider import (
        EcsRamRoleCredentialsProvider,
        OIDCRoleArnCredentialsProvider,
    )

    def given(key: str) -> str:
        value = getattr(cfg, key) or os.environ.get(ENVIRONMENT[key], "").strip()
        if not value:
            raise ConfigError(config_key(provider, key), "missing: set it or the "
                              f"environment's {ENVIRONMENT[key]}")
        return str(value)

    ms = int(cfg.timeout * 1000)
    http = HttpOptions(proxy=cfg.credentials_proxy, connect_timeout=ms, read_timeout=ms)
    mode = cfg.credentials
    try:
        if mode == "access_key":
            return Client(Config(type="access_key", access_key_id=given("access_key_id"),
                                 access_key_secret=given("access_key_secret")))
        if mode == "default":
            return Client()
        if mode == "ecs_ram_role":
            # refreshed by the caller that finds it stale (15 min before it expires),
            # not by a scheduler thread of its own per configure
            return Client(provider=EcsRamRoleCredentialsProvider(
                role_name=cfg.role_name, http_options=http, async_update_enabled=False))
        token_file = given("oidc_token_file")
        role_arn, oidc_arn = given("role_arn"), given("oidc_provider_arn")
        for key, value, pattern in (("role_arn", role_arn, ROLE_ARN),
                                    ("oidc_provider_arn", oidc_arn, OIDC_PROVIDER_ARN)):
            if not pattern.match(value):  # from the environment: not checked yet
                raise ConfigError(config_key(provider, key), f"{ENVIRONMENT[key]} is not "
                                  "an ARN of the expected form")
        try:
            with open(token_file, encoding="utf-8") as f:
                readable = bool(f.read(1))
        except OSError as exc:
            raise ConfigError(config_key(provider, "oidc_token_file"),
                              f"cannot read {token_file}: {exc.strerror}") from None
        if not readable:
            raise ConfigError(config_key(provider, "oidc_token_file"),
                              f"{token_file} is empty")
        return Client(provider=OIDCRoleArnCredentialsProvider(
            role_arn=role_arn, oidc_provider_arn=oidc_arn, oidc_token_file_path=token_file,
            role_session_name=cfg.role_session_name, duration_seconds=cfg.session_duration,
            sts_endpoint=cfg.sts_endpoint, http_options=http))
    except ValueError as exc:
        # the SDK refuses what its environment forbids (ALIBABA_CLOUD_ECS_METADATA_DISABLED)
        raise ConfigError(config_key(provider, "credentials"), str(exc)) from None


def _credential_error(exc: BaseException) -> BaseException | None:
    """The credentials client's failure, when that is what ``exc`` is (the SDK's runtime
    wraps what a request raises before it is sent in an ``UnretryableException``)."""
    try:
        from alibabacloud_credentials.exceptions import CredentialException
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return None
    inner: BaseException | None = getattr(exc, "inner_exception", None)
    for candidate in (exc, inner):
        if isinstance(candidate, CredentialException):
            found: BaseException = candidate
            return found
    return None



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
                tags=tags, instance=str(getattr(raw, "instance_id", "") or "") or None,
                zone=str(getattr(raw, "zone_id", "") or ""))


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
