"""The Baidu BBC provider: secondary addresses added in batches to a bare-metal instance's
one ENI, through bce-python-sdk.

``BbcClient.batch_add_ip`` / ``batch_delete_ip`` come from the SDK; the routes it lacks
(``batchAddIpCrossSubnet``, ``GET /v1/vpcPort/{instanceId}``) go through the same
client's signed-request path. The SDK's retries are off: core owns backoff, batching
and rate limits, the provider classifies errors.

Config section (``providers.bbc`` in the config file, or constructor keywords)::

    endpoint: bbc.bj.baidubce.com       # host[:port]; http unless protocol: https
    vpcEndpoint: bcc.bj.baidubce.com     # the subnet API (default: endpoint)
    credentials: access_key              # or sts, instance_role (below)
    accessKeyId / secretAccessKey        # or env BCE_ACCESS_KEY_ID / BCE_SECRET_ACCESS_KEY
    sessionToken                         # access_key only: the key is a temporary one (env
                                         # BCE_SESSION_TOKEN); sent as x-bce-security-token
    stsEndpoint: sts.bj.baidubce.com     # sts only
    stsSessionDuration: 3600             # sts only: seconds a session token lasts
    metadataEndpoint: 169.254.169.254    # instance_role only
    subnets: [sbn-a, sbn-b]              # candidate subnets for new addresses
    instanceTypeLabel: node.kubernetes.io/instance-type
    instanceTypePrefix: BBC              # label values starting so are BBC nodes
    instanceIdLabel: ...                 # else the instance id is the providerID's tail
    maxIpsPerNode: 40                    # secondary addresses one instance can hold
    ipStack: ipv4                        # or dual: an IPv4/IPv6 pair per pod (below)
    timeoutMs: 10000

Several subnets on the one ENI: the ENI's own subnet through ``batchAddIp``, any other
candidate through ``batchAddIpCrossSubnet``, most free addresses first; a subnet the cloud
reports empty is tried last, after a free-address check; every pool entry names the
subnet its address came from, so a release deletes it there and the record says it.

``ipStack: dual`` (the subnet of the instance's ENI must have an IPv6 CIDR): every pool
entry is a pair, the IPv4 half as above and the IPv6 half from ``batchAddIp`` with
``allocateMultiIpv6Addr`` (the count then counts IPv6 addresses; BBC adds IPv6 ones to
the ENI's own subnet only, there is no cross-subnet form), as many of each; an IPv6 call
that fails gives the IPv4 halves back at once. ``batchDelIp`` deletes both halves; the
vpcPort reply lists the IPv6 ones apart (``ipv6PrivateIpSet``). The pod gets both
addresses, the IPv6 one a /128 with the subnet's IPv6 gateway (its CIDR's first host).

Credentials: ``credentials: access_key`` (a key, maybe a temporary one with its
``sessionToken``), ``sts`` (session tokens from BCE STS) or ``instance_role`` (the
instance's IAM role): plugins/bbc/credentials.py.

On a node the plug hooks are the ENI dataplane (``podnet.linux.eni``): a routed veth per
pod and a rule from its address to the table of the machine's one ENI, the ENI's device
found by the MAC the record carries; see docs/node.md. Subnet objects: plugins/bbc/subnets.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
from baidubce.exception import BceError

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ConfigError, ErrorKind, ProviderError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.policy import Backoff, PoolPolicy, RateLimit
from podnet.hookspecs.sections import (
    at_least,
    between,
    config_key,
    ids,
    invalid,
    one_of,
    read_section,
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
    PodNetworkContext,
    PoolEntry,
    ProviderInfo,
    ReleaseResult,
    ResolvedRequest,
    RouteResult,
    Subnet,
    VerifyResult,
)
from podnet.linux.eni import POD_ROUTES, POD_ROUTES_DUAL, EniDataplane
from podnet.linux.hooks import DataplaneHooks
from podnet.plugins.bbc.api import (
    BbcApi,
    classify,
    has_code,
)
from podnet.plugins.bbc.credentials import (
    METADATA_ENDPOINT,
    InstanceRoleKeys,
    StaticKeys,
    StsKeys,
    error_code,
)
from podnet.plugins.bbc.replies import (
    Port,
    SubnetInfo,
)
from podnet.plugins.bbc.subnets import BbcSubnets, node_subnet_ids

NAME = "bbc"
__version__ = "0.1.0"

DEFAULT_TYPE_LABEL = "node.kubernetes.io/instance-type"
DEFAULT_TYPE_PREFIX = "BBC"
DEFAULT_MAX_IPS = 40

#: the keys each ``credentials`` mode reads (attribute, as written); any other mode
#: refuses them
MODE_KEYS: dict[str, tuple[tuple[str, str], ...]] = {
    "access_key": (("access_key_id", "accessKeyId"), ("secret_access_key", "secretAccessKey"),
                   ("session_token", "sessionToken")),
    "sts": (("access_key_id", "accessKeyId"), ("secret_access_key", "secretAccessKey"),
            ("sts_endpoint", "stsEndpoint")),
    "instance_role": (("metadata_endpoint", "metadataEndpoint"),),
}


def _check_config(cfg: BbcConfig) -> None:
    mine = MODE_KEYS[cfg.credentials]
    for mode, keys in MODE_KEYS.items():
        for attr, key in keys:
            if (attr, key) not in mine and getattr(cfg, attr) is not None:
                raise invalid(f"only read with credentials: {mode} (credentials is "
                              f"{cfg.credentials})", key)


#: BCE STS's endpoint when none is configured
DEFAULT_STS_ENDPOINT = "sts.bj.baidubce.com"


@section(camel=True, check=_check_config)
@attrs.frozen
class BbcConfig:
    """The section ``providers.bbc`` (camelCase keys, as the module docstring shows)."""

    endpoint: str | None = attrs.field(default=None, metadata=text())
    vpc_endpoint: str | None = attrs.field(default=None, metadata=text())
    protocol: str = attrs.field(default="http", metadata=one_of("http", "https"))
    #: ``access_key``: requests signed with the key given; ``sts``: with session tokens
    #: BCE STS issues for it; ``instance_role``: with the key of the IAM role bound to the
    #: instance, from its metadata service
    credentials: str = attrs.field(default="access_key",
                                   metadata=one_of("access_key", "sts", "instance_role"))
    access_key_id: str | None = attrs.field(default=None, repr=False,
                                            metadata=text(secret=True))
    secret_access_key: str | None = attrs.field(default=None, repr=False,
                                                metadata=text(secret=True))
    #: access_key: the key is a temporary one, this its token (else env BCE_SESSION_TOKEN)
    session_token: str | None = attrs.field(default=None, repr=False,
                                            metadata=text(secret=True))
    #: sts: where session tokens are asked for (host[:port], or a URL)
    sts_endpoint: str | None = attrs.field(default=None, metadata=text())
    sts_session_duration: int = attrs.field(default=3600, metadata=between(1, 129_600))
    #: instance_role: the metadata service (host[:port], or a URL; 169.254.169.254)
    metadata_endpoint: str | None = attrs.field(default=None, metadata=text())
    subnets: tuple[str, ...] = attrs.field(default=(), metadata=ids(what="subnet ids"))
    instance_type_label: str = attrs.field(default=DEFAULT_TYPE_LABEL, metadata=text())
    instance_type_prefix: str = attrs.field(default=DEFAULT_TYPE_PREFIX, metadata=text())
    instance_id_label: str | None = attrs.field(default=None, metadata=text())
    max_ips_per_node: int = attrs.field(default=DEFAULT_MAX_IPS, metadata=between(1, 4096))
    #: ``ipv4`` | ``dual`` (an IPv4/IPv6 pair per pod)
    ip_stack: str = attrs.field(default="ipv4", metadata=one_of("ipv4", "dual"))
    timeout_ms: int = attrs.field(default=10_000, metadata=at_least(1))


@attrs.define
class _InstanceState:
    port: Port | None = None
    #: last grow failed on quota or exhaustion: check before the next write call
    suspect: bool = False
    #: addresses a verify found missing: route puts them back
    missing: set[str] = attrs.field(factory=set)


class BbcProvider(BbcSubnets, DataplaneHooks):
    """The plugin. One per controller; its memory is a cache, rebuilt from the cloud."""

    _error_code = staticmethod(error_code)

    def __init__(self, *, endpoint: str | None = None, access_key_id: str | None = None,
                 secret_access_key: str | None = None, vpc_endpoint: str | None = None,
                 subnets: Sequence[str] = (), instance_type_label: str = DEFAULT_TYPE_LABEL,
                 instance_type_prefix: str = DEFAULT_TYPE_PREFIX,
                 instance_id_label: str | None = None, max_ips_per_node: int = DEFAULT_MAX_IPS,
                 ip_stack: str = "ipv4", policy: PoolPolicy | None = None, name: str = NAME,
                 api_factory: Callable[..., BbcApi] = BbcApi) -> None:
        self.name = name
        self.policy = policy or default_policy()
        self.subnets: tuple[str, ...] = tuple(subnets)
        self.instance_type_label = instance_type_label
        self.instance_type_prefix = instance_type_prefix
        self.instance_id_label = instance_id_label
        self.max_ips = max_ips_per_node
        #: ``ipv4`` or ``dual``
        self.ip_stack = ip_stack
        self._api_factory = api_factory
        self._api: BbcApi | None = None
        self._limiter: CloudLimiter | None = None
        self._lock = threading.Lock()
        #: the node agent's dataplane: the machine's one ENI, one table (its MAC is in
        #: every record, the allocation's ``mac``)
        self.dataplane = EniDataplane(NAME, lambda pn: pn.status.mac,
                                      record_mac_is_the_pods=False)
        self._instances: dict[str, _InstanceState] = {}
        #: node name -> its instance, to forget the instance when the node goes
        self._node_instance: dict[str, str] = {}
        #: subnets the cloud reported empty: tried last, and only after a free-IP check
        self.empty_subnets: set[str] = set()
        self._subnet_cache: dict[str, SubnetInfo] = {}
        if endpoint is not None:
            self._connect(endpoint, access_key_id, secret_access_key, vpc_endpoint, "http",
                          10_000)

    def __repr__(self) -> str:  # never the credentials
        return f"BbcProvider(name={self.name!r})"

    def _connect(self, endpoint: str, ak: str | None, sk: str | None, vpc: str | None,
                 protocol: str, timeout_ms: int, cfg: BbcConfig | None = None) -> None:
        if cfg is not None and cfg.credentials == "instance_role":
            role = InstanceRoleKeys(cfg.metadata_endpoint or METADATA_ENDPOINT, timeout_ms)
            self._api = self._api_factory(endpoint, "", "", vpc_endpoint=vpc,
                                          protocol=protocol, timeout_ms=timeout_ms, keys=role)
            self._api.limiter = self._limiter
            return
        ak = ak or os.environ.get("BCE_ACCESS_KEY_ID")
        sk = sk or os.environ.get("BCE_SECRET_ACCESS_KEY")
        for key, value, env in (("accessKeyId", ak, "BCE_ACCESS_KEY_ID"),
                                ("secretAccessKey", sk, "BCE_SECRET_ACCESS_KEY")):
            if not value:
                raise ConfigError(config_key(self.name, key), "credentials missing (config "
                                  f"or {env})")
        assert ak is not None and sk is not None
        keys: StaticKeys | StsKeys
        if cfg is not None and cfg.credentials == "sts":
            keys = StsKeys(ak, sk, endpoint=cfg.sts_endpoint or DEFAULT_STS_ENDPOINT,
                           duration=cfg.sts_session_duration, protocol=protocol,
                           timeout_ms=timeout_ms)
        else:
            token = (cfg.session_token if cfg is not None else None) or os.environ.get(
                "BCE_SESSION_TOKEN") or None
            keys = StaticKeys(ak, sk, token)
        self._api = self._api_factory(endpoint, ak, sk, vpc_endpoint=vpc, protocol=protocol,
                                      timeout_ms=timeout_ms, keys=keys)
        self._api.limiter = self._limiter

    @property
    def api(self) -> BbcApi:
        if self._api is None:
            raise ProviderError(ErrorKind.FATAL, f"provider {self.name} has no endpoint "
                                "configured", field=config_key(self.name, "endpoint"))
        return self._api

    # 1. registration and configuration

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(
            name=self.name, version=__version__, uses_node_pool=True, manages_interfaces=False,
            policy=self.policy, sticky_kinds=("StatefulSet",),
            description="Baidu BBC: secondary IPs in batches on the instance's one ENI",
        )

    @hookimpl
    def podnet_configure(self, provider: str, config: Mapping[str, Any]) -> None:
        # what the section leaves out stays as the provider was made; never the
        # connection, which only the section's endpoint and credentials make
        base = BbcConfig(subnets=self.subnets, max_ips_per_node=self.max_ips,
                         instance_type_label=self.instance_type_label,
                         instance_type_prefix=self.instance_type_prefix,
                         instance_id_label=self.instance_id_label, ip_stack=self.ip_stack)
        cfg = read_section(BbcConfig, provider, config, base)
        self.subnets = cfg.subnets
        self.max_ips = cfg.max_ips_per_node
        self.instance_type_label = cfg.instance_type_label
        self.instance_type_prefix = cfg.instance_type_prefix
        self.instance_id_label = cfg.instance_id_label
        self.ip_stack = cfg.ip_stack
        if cfg.endpoint is not None:
            self._connect(cfg.endpoint, cfg.access_key_id, cfg.secret_access_key,
                          cfg.vpc_endpoint, cfg.protocol, cfg.timeout_ms, cfg)

    @hookimpl
    def podnet_cloud_limiter(self, provider: str, limiter: CloudLimiter) -> bool | None:
        """Every SDK request (reads too) takes a token of its API's bucket first."""
        self._limiter = limiter
        if self._api is not None:
            self._api.limiter = limiter
        return True

    # 2. who serves what

    @hookimpl
    def podnet_select_provider(self, node: NodeInfo) -> str | None:
        value = node.labels.get(self.instance_type_label, "")
        if value and value.upper().startswith(self.instance_type_prefix.upper()):
            return self.name
        return None

    # helpers: the node's instance, its ENI, its subnets

    def instance_id(self, node: NodeInfo) -> str:
        instance = self._instance_of(node)
        if self._node_instance.get(node.name) != instance:
            with self._lock:
                self._node_instance[node.name] = instance
        return instance

    def _instance_of(self, node: NodeInfo) -> str:
        if self.instance_id_label:
            value = node.labels.get(self.instance_id_label)
            if value:
                return value
        pid = node.provider_id or ""
        tail = pid.rsplit("/", 1)[-1] if pid else ""
        if not tail:
            label = f" or label {self.instance_id_label}" if self.instance_id_label else ""
            raise ProviderError(ErrorKind.FATAL, f"node {node.name} names no BBC instance "
                                f"(spec.providerID{label})", field="spec.providerID")
        return tail

    @hookimpl
    def podnet_node_removed(self, provider: str, node: str) -> None:
        """The node left: its instance's cached port, suspicion and missing addresses go."""
        with self._lock:
            instance = self._node_instance.pop(node, None)
        if instance is not None:
            self.forget(instance)

    def _state(self, instance: str) -> _InstanceState:
        with self._lock:
            state = self._instances.get(instance)
            if state is None:
                state = self._instances[instance] = _InstanceState()
            return state

    def forget(self, instance: str) -> None:
        """Drop what the provider remembers about an instance."""
        with self._lock:
            self._instances.pop(instance, None)

    def remembered(self) -> set[str]:
        """The instances (and node names) the provider keeps state about."""
        with self._lock:
            return set(self._instances) | set(self._node_instance)

    def _port(self, instance: str, *, fresh: bool = False) -> Port:
        state = self._state(instance)
        if state.port is None or fresh:
            state.port = self.api.port(instance)
        return state.port

    def _subnet(self, subnet: str, *, fresh: bool = False) -> SubnetInfo:
        cached = self._subnet_cache.get(subnet)
        if cached is None or fresh:
            cached = self._subnet_cache[subnet] = self.api.subnet(subnet)
        return cached

    @property
    def dual(self) -> bool:
        return self.ip_stack == "dual"

    def _ipv6_cidr(self, port: Port) -> ipaddress.IPv6Network:
        """The IPv6 CIDR of the ENI's subnet, where every IPv6 half comes from.
        :raises ProviderError: FATAL, naming ``ipStack``, when the subnet has none."""
        cidr = self._subnet(port.subnet).ipv6_cidr
        if cidr is None:
            cidr = self._subnet(port.subnet, fresh=True).ipv6_cidr  # enabled since read?
        if cidr is None:
            raise ProviderError(ErrorKind.FATAL, f"ipStack dual: subnet {port.subnet} of ENI "
                                f"{port.eni_id} has no IPv6 CIDR",
                                field=config_key(self.name, "ipStack"), subject=port.subnet)
        return ipaddress.IPv6Network(cidr, strict=False)

    def _by_free(self, subnets: Sequence[str]) -> list[str]:
        """Candidate subnets, most free addresses first; unreadable ones last."""
        scored: list[tuple[int, int, str]] = []
        for i, s in enumerate(subnets):
            try:
                free = self._subnet(s, fresh=True).available
            except Exception:  # an unreadable subnet is tried last, not dropped
                free = -1
            scored.append((-free, i, s))
        return [s for _, _, s in sorted(scored)]

    # 3. inventory

    @hookimpl
    def podnet_node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        port = self._port(self.instance_id(node.node), fresh=True)
        return Inventory(
            interfaces=(CloudInterface(
                id=port.eni_id, mac=port.mac, subnet=port.subnet, primary=True,
                ips=tuple(ip.address for ip in port.secondary()),
                ipv6=tuple(ip.address for ip in port.secondary_ipv6()) if self.dual else ()),),
            max_interfaces=1, ips_per_interface=self.max_ips, dual_stack=self.dual)

    @hookimpl
    def podnet_unknown_machines(self, provider: str, known: Sequence[NodeInfo]
                                ) -> Sequence[NodeInfo] | None:
        names: set[str] = set()
        for node in known:
            try:
                names.add(self._instance_of(node))
            except ProviderError:
                continue  # names no instance: nothing of it to leave out
        return [NodeInfo(name=instance, uid="", provider_id=instance)
                for instance in self.api.instances() if instance not in names]

    # 4. pool

    def _precheck(self, instance: str, subnet: str, count: int) -> None:
        """After a quota or exhaustion failure: fail fast, with no write call, when the
        node is at its cap or the subnet has nothing left."""
        port = self._port(instance, fresh=True)
        held = len(port.secondary())
        if held >= self.max_ips:
            raise ProviderError(ErrorKind.QUOTA_EXCEEDED,
                                f"instance {instance} holds {held} secondary IPs, its cap is "
                                f"{self.max_ips} (checked before calling)", subject=instance)
        info = self._subnet(subnet, fresh=True)
        if info.available < 1:
            raise ProviderError(ErrorKind.SUBNET_EXHAUSTED,
                                f"subnet {subnet} has no free IP (checked before calling)",
                                subject=subnet)

    @hookimpl
    def podnet_pool_grow(self, provider: str, node: NodeContext,
                         interface: CloudInterface | None, count: int,
                         subnet: str | None) -> Sequence[PoolEntry] | None:
        instance = self.instance_id(node.node)
        state = self._state(instance)
        port = self._port(instance)
        count = max(1, min(count, self.max_ips))
        subnets = self.subnets_named(node, subnet) if subnet else list(self.candidates(node))
        if self.dual:
            self._ipv6_cidr(port)  # no IPv4 half added for a pair that cannot be made
        try:
            if not subnets:
                if state.suspect:
                    self._precheck(instance, port.subnet, count)
                added = self.api.add_ips(instance, count=count)
                entries = [PoolEntry(ip, port.eni_id, port.subnet) for ip in added]
            else:
                entries = self._grow_cross(instance, port, subnets, count, state.suspect)
            if self.dual:
                entries = self._pair(instance, entries)
        except Exception as exc:
            if classify(exc) in (ErrorKind.QUOTA_EXCEEDED, ErrorKind.SUBNET_EXHAUSTED):
                state.suspect = True
            if has_code(exc, "EniIdException"):
                state.port = None  # the ENI changed: read it again next time
            raise
        state.suspect = False
        return entries

    def _grow_cross(self, instance: str, port: Port, subnets: Sequence[str], count: int,
                    check: bool) -> list[PoolEntry]:
        ordered = self._by_free(subnets) if len(subnets) > 1 else list(subnets)
        ordered.sort(key=lambda s: s in self.empty_subnets)  # stable: marked ones last
        last: Exception | None = None
        for s in ordered:
            try:
                if check or s in self.empty_subnets:
                    self._precheck(instance, s, count)
                added = self.api.add_ips_cross_subnet(instance, port.eni_id, s, count)
            except Exception as exc:
                if classify(exc) is ErrorKind.SUBNET_EXHAUSTED:
                    self.empty_subnets.add(s)
                    last = exc
                    continue  # fall through to the next candidate
                raise
            self.empty_subnets.discard(s)
            return [PoolEntry(ip, port.eni_id, s) for ip in added]
        assert last is not None
        raise last

    def _pair(self, instance: str, entries: list[PoolEntry]) -> list[PoolEntry]:
        """An IPv6 half for each new IPv4 one. Fails whole: the IPv4 halves are given
        back before the error goes on (a crash between the calls leaves them to core's
        inventory, which hands unpaired halves back through ``podnet_pool_shrink``)."""
        try:
            v6 = self.api.add_ipv6(instance, count=len(entries))
        except Exception:
            with contextlib.suppress(Exception):
                self.api.delete_ips(instance, [e.address for e in entries])
            raise
        pairs = [attrs.evolve(e, ipv6=a) for e, a in zip(entries, v6, strict=False)]
        # fewer IPv6 ones than asked (never more): the rest of either family goes back
        extra = [e.address for e in entries[len(v6):]] + v6[len(entries):]
        if extra:
            with contextlib.suppress(Exception):
                self.api.delete_ips(instance, extra)
        return pairs

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        # a pair goes whole: both halves in one call (batchDelIp takes either family)
        wanted = [ip for e in entries for ip in (e.address, e.ipv6) if ip is not None]
        if not wanted:
            return []
        instance = self.instance_id(node.node)
        try:
            self.api.delete_ips(instance, wanted)
        except Exception as exc:
            if has_code(exc, "InstanceNotFound"):
                self.forget(instance)
                return wanted  # the instance is gone, and its addresses with it
            if not has_code(exc, "PrivateIPNotExistException"):
                raise
            # some are gone already: delete the rest
            present = self._port(instance, fresh=True).held()
            rest = [ip for ip in wanted if ip in present]
            if rest:
                self.api.delete_ips(instance, rest)
        self._state(instance).suspect = False
        return wanted

    # 5. one pod network

    @hookimpl
    def podnet_address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        """The ENI's subnet, where a requested address can be added, and the candidate
        subnets, from the subnet reads the provider keeps."""
        port = self._port(self.instance_id(node.node))
        primary = self._subnet(port.subnet)  # needed for any static address: raise
        subnets = [Subnet.first_host_gateway(port.subnet, primary.cidr,
                                             free=primary.available)]
        for s in dict.fromkeys(self.candidates(node)):
            if s == port.subnet:
                continue
            try:
                info: SubnetInfo | None = self._subnet(s)
            except (ProviderError, BceError):
                info = None  # unreadable now: served, matched by id only
            # batch_add_ip adds a named address to the ENI's own subnet only
            subnets.append(Subnet.first_host_gateway(
                s, info.cidr if info else None, takes_static=False,
                free=info.available if info else None))
        # dual stack: a static pair is served from the node's idle pairs
        return AddressSpace(subnets=tuple(subnets), pairs=self.dual)

    @hookimpl
    def podnet_allocate(self, context: AllocateContext) -> Allocation | None:
        request = context.request
        assert request is not None, "the BBC provider uses node pools"
        context.check_in_subnet(lambda: next(iter(node_subnet_ids(
            (context.subnet,) if context.subnet else ())), None))
        instance = self.instance_id(context.node.node)
        port = self._port(instance)
        entry = request.entry or self._add_static(context, request, instance, port)
        subnet = entry.subnet or port.subnet
        if self.dual and entry.ipv6 is None:
            raise ProviderError(ErrorKind.TRANSIENT, f"pool entry {entry.address} of node "
                                f"{context.node.node.name} has no IPv6 half (ipStack dual)",
                                field="status.ipv6")
        gateway6 = None
        if entry.ipv6 is not None:
            net6 = self._ipv6_cidr(port)
            gateway6 = str(next(net6.hosts()))
        gateway = cidr_text = None
        try:
            cidr = ipaddress.ip_network(self._subnet(subnet).cidr, strict=False)
            gateway, cidr_text = str(next(cidr.hosts())), str(cidr)
        except (ProviderError, BceError, StopIteration):
            gateway = None  # the subnet API is unreachable: the record goes without it
        # the pod's interface (the ENI dataplane): its address alone, the link-local
        # gateway; ``gateway`` stays the subnet's, the ENI's table's next hop
        return Allocation(ip=entry.address, mac=port.mac, subnet=subnet, gateway=gateway,
                          interface=port.eni_id, cidr=cidr_text, prefix_length=32,
                          ipv6=entry.ipv6, ipv6_gateway=gateway6,
                          ipv6_prefix_length=128 if entry.ipv6 else None,
                          routes=POD_ROUTES_DUAL if entry.ipv6 else POD_ROUTES)

    def _add_static(self, context: AllocateContext, request: ResolvedRequest, instance: str,
                    port: Port) -> PoolEntry:
        """Add the requested address core found outside the pool to the instance's ENI."""
        address = request.address
        assert address is not None
        if self.dual:
            # its IPv6 partner would be chosen outside the pool: not served
            raise request.refuse(f"{address} is not an idle pair on node "
                                 f"{context.node.node.name} (ipStack dual: a static "
                                 "address must be one the node's pool holds)")
        try:
            self.api.add_ips(instance, ips=[address])
        except Exception as exc:
            if not has_code(exc, "PrivateIpInUseException"):
                raise
            fresh = self._port(instance, fresh=True)
            if address not in {ip.address for ip in fresh.secondary()}:
                raise request.refuse(f"{address} is in use outside node "
                                     f"{context.node.node.name}") from None
        return PoolEntry(address, port.eni_id, port.subnet)

    @hookimpl
    def podnet_route(self, context: PodNetworkContext) -> RouteResult | None:
        pn = context.pod_network
        ip = pn.status.ip
        if ip is None:
            raise ProviderError(ErrorKind.FATAL, "route without an address", field="status.ip")
        node = context.node.node if context.node is not None else None
        if node is None:
            return RouteResult()
        instance = self.instance_id(node)
        state = self._state(instance)
        for address in (ip, pn.status.ipv6):
            if address is not None and address in state.missing:
                self._restore(instance, address)
                state.missing.discard(address)
        return RouteResult(interface=state.port.eni_id if state.port else None)

    def _restore(self, instance: str, ip: str) -> None:
        """A verify found ``ip`` gone from the ENI (maybe another record's, before the
        cloud handed it out again): put it back unless the instance has it now. An
        address in use elsewhere is not this pod's: never routed as if it were (GC finds
        it lost and the record is re-addressed)."""
        if ip in self._port(instance, fresh=True).held():
            return
        add = self.api.add_ipv6 if ipaddress.ip_address(ip).version == 6 else self.api.add_ips
        try:
            add(instance, ips=[ip])
        except Exception as exc:
            if not has_code(exc, "PrivateIpInUseException"):
                raise
            if ip not in self._port(instance, fresh=True).held():
                raise ProviderError(ErrorKind.CONFLICT, f"{ip} is in use outside "
                                    f"instance {instance}", field="status.ip") from None

    @hookimpl
    def podnet_verify(self, context: PodNetworkContext) -> VerifyResult | None:
        pn = context.pod_network
        if context.node is None or not pn.status.ip:
            return VerifyResult(ok=True)
        instance = self.instance_id(context.node.node)
        port = self._port(instance, fresh=True)
        if pn.status.ip not in {ip.address for ip in port.secondary()}:
            self._state(instance).missing.add(pn.status.ip)
            return VerifyResult(ok=False, reason=f"{pn.status.ip} is not on {port.eni_id}")
        if pn.status.ipv6 and pn.status.ipv6 not in {
                ip.address for ip in port.secondary_ipv6()}:
            self._state(instance).missing.add(pn.status.ipv6)
            return VerifyResult(ok=False, reason=f"{pn.status.ipv6} is not on {port.eni_id}")
        return VerifyResult(ok=True)

    @hookimpl
    def podnet_release(self, context: PodNetworkContext) -> ReleaseResult | None:
        # core keeps the address idle while the pool is under max_idle, else deletes it
        return ReleaseResult(return_to_pool=True)

    # the dataplane on a node (the node agent): podnet.linux.eni, its hooks from
    # DataplaneHooks. Errors:

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        return classify(error)


def default_policy() -> PoolPolicy:
    """CCE's BBC defaults (see ANCHORS.md)."""
    return PoolPolicy(
        min_idle=0, max_idle=6, batch_size=4, max_batch_size=10, halve_batch_on_quota=True,
        grow_backoff=Backoff(base=2.0, factor=2.0, cap=60.0),
        cloud_rate=RateLimit(rate=10.0, burst=5), leaked_ip_expiry=600.0,
        min_ip_lifetime=3.0, refill_period=5.0, backoff_cap_per_try=True,
    )


#: what the host registers as the built-in ``bbc`` plugin
plugin = BbcProvider()
