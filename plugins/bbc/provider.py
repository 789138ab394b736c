"""The Baidu BBC provider: secondary addresses added in batches to a bare-metal instance's
one ENI, through bce-python-sdk.

``BbcClient.batch_add_ip`` / ``batch_delete_ip`` come from the SDK; the routes it lacks
(``batchAddIpCrossSubnet``, ``GET /v1/vpcPort/{instanceId}``) go through the same
client's signed-request path. The SDK's retries are off: core owns backoff, batching
and rate limits, the provider classifies errors.

Config section (``providers.bbc`` in the config file, or constructor keywords)::

    endpoint: bbc.bj.baidubce.com       # host[:port]; http unless protocol: https
    vpcEndpoint: bcc.bj.baidubce.com     # the subnet API (default: endpoint)
    accessKeyId / secretAccessKey        # or env BCE_ACCESS_KEY_ID / BCE_SECRET_ACCESS_KEY
    subnets: [sbn-a, sbn-b]              # candidate subnets for new addresses
    instanceTypeLabel: node.kubernetes.io/instance-type
    instanceTypePrefix: BBC              # label values starting so are BBC nodes
    instanceIdLabel: ...                 # else the instance id is the providerID's tail
    maxIpsPerNode: 40                    # secondary addresses one instance can hold
    timeoutMs: 10000

On a node the plug hooks are the ENI dataplane (``podnet.linux.eni``): a routed veth per
pod and a rule from its address to the table of the machine's one ENI, the ENI's device
found by the MAC the record carries; see docs/node.md. Subnet objects: plugins/bbc/subnets.py.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs
from baidubce.auth.bce_credentials import BceCredentials
from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceError, BceHttpClientError, BceServerError
from baidubce.http import http_methods
from baidubce.retry.retry_policy import NoRetryPolicy
from baidubce.services.bbc.bbc_client import BbcClient
from baidubce.services.subnet.subnet_client import SubnetClient

from podnet.hookspecs import hookimpl
from podnet.hookspecs.errors import ConfigError, ErrorKind, ProviderError
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.policy import Backoff, PoolPolicy, RateLimit
from podnet.hookspecs.sections import (
    at_least,
    between,
    config_key,
    ids,
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
from podnet.linux.eni import POD_ROUTES, EniDataplane
from podnet.linux.hooks import DataplaneHooks
from podnet.plugins.bbc.subnets import BbcSubnets, node_subnet_ids

NAME = "bbc"
#: the APIs as BBC meters them (one bucket each): the names core's limiter keys on
API_ADD = "batchAddIp"
API_DEL = "batchDelIp"
API_ADD_CROSS = "batchAddIpCrossSubnet"
API_PORT = "vpcPort"
API_SUBNET = "getSubnet"
API_LIST = "listInstances"
__version__ = "0.1.0"

DEFAULT_TYPE_LABEL = "node.kubernetes.io/instance-type"
DEFAULT_TYPE_PREFIX = "BBC"
DEFAULT_MAX_IPS = 40

#: BBC error codes (matched as substrings of the answer's code, as the reference does)
ERROR_CODES: tuple[tuple[str, ErrorKind], ...] = (
    ("ExceedLimitException", ErrorKind.QUOTA_EXCEEDED),
    ("VmMemoryCanNotAttachMoreIpException", ErrorKind.QUOTA_EXCEEDED),
    ("QuotaLimitExceeded", ErrorKind.QUOTA_EXCEEDED),
    ("SubnetHasNoMoreIpException", ErrorKind.SUBNET_EXHAUSTED),
    ("RateLimit", ErrorKind.THROTTLED),
    ("PrivateIPNotExistException", ErrorKind.NOT_FOUND),
    ("PrivateIpInUseException", ErrorKind.CONFLICT),
    ("EniIdException", ErrorKind.CONFLICT),
    ("InstanceNotFound", ErrorKind.NOT_FOUND),
    ("NoSuchObject", ErrorKind.NOT_FOUND),
    ("InvalidSubnetId", ErrorKind.SUBNET_EXHAUSTED),
)


@section(camel=True)
@attrs.frozen
class BbcConfig:
    """The section ``providers.bbc`` (camelCase keys, as the module docstring shows)."""

    endpoint: str | None = attrs.field(default=None, metadata=text())
    vpc_endpoint: str | None = attrs.field(default=None, metadata=text())
    protocol: str = attrs.field(default="http", metadata=one_of("http", "https"))
    access_key_id: str | None = attrs.field(default=None, repr=False,
                                            metadata=text(secret=True))
    secret_access_key: str | None = attrs.field(default=None, repr=False,
                                                metadata=text(secret=True))
    subnets: tuple[str, ...] = attrs.field(default=(), metadata=ids(what="subnet ids"))
    instance_type_label: str = attrs.field(default=DEFAULT_TYPE_LABEL, metadata=text())
    instance_type_prefix: str = attrs.field(default=DEFAULT_TYPE_PREFIX, metadata=text())
    instance_id_label: str | None = attrs.field(default=None, metadata=text())
    max_ips_per_node: int = attrs.field(default=DEFAULT_MAX_IPS, metadata=between(1, 4096))
    timeout_ms: int = attrs.field(default=10_000, metadata=at_least(1))


def error_code(error: BaseException) -> tuple[str | None, int | None]:
    """The BBC code and HTTP status of an SDK error (``None`` when it has none)."""
    inner: BaseException | None = error
    if isinstance(error, BceHttpClientError):
        inner = error.last_error
    if isinstance(inner, BceServerError):
        code = inner.code
        if isinstance(code, bytes):
            code = code.decode(errors="replace")
        return (str(code) if code is not None else None), inner.status_code
    return None, None


def classify(error: BaseException) -> ErrorKind | None:
    """The kind of an SDK error; ``None`` for what is not an SDK error."""
    if isinstance(error, ProviderError):
        return error.kind
    if not isinstance(error, BceError):
        return None
    code, status = error_code(error)
    if code:
        for needle, kind in ERROR_CODES:
            if needle in code:
                return kind
    if status is not None and status >= 500:
        return ErrorKind.TRANSIENT
    if status == 429:
        return ErrorKind.THROTTLED
    return ErrorKind.TRANSIENT


def _has_code(error: BaseException, needle: str) -> bool:
    code, _ = error_code(error)
    return bool(code) and needle in str(code)


@attrs.frozen
class PortIp:
    address: str
    subnet: str
    primary: bool


@attrs.frozen
class Port:
    """What ``GET /v1/vpcPort/{instanceId}`` says: the instance's one ENI."""

    eni_id: str
    mac: str | None
    subnet: str
    status: str
    ips: tuple[PortIp, ...]

    def secondary(self) -> list[PortIp]:
        return [ip for ip in self.ips if not ip.primary]


@attrs.frozen
class SubnetInfo:
    id: str
    cidr: str
    available: int
    zone: str = ""


def _bad_reply(what: str, field: str, detail: str) -> ProviderError:
    return ProviderError(ErrorKind.FATAL, f"malformed {what} reply: {detail}",
                         field=f"{what}.{field}", code="MalformedReply")


def parse_port(data: Any) -> Port:
    """Validate a vpcPort reply; a malformed one is a ProviderError naming the field."""
    what = "vpcPort"
    if not isinstance(data, dict):
        raise _bad_reply(what, "", f"expected an object, got {type(data).__name__}")
    eni = data.get("eniId")
    if not isinstance(eni, str) or not eni:
        raise _bad_reply(what, "eniId", f"expected an ENI id, got {eni!r}")
    subnet = data.get("subnetId")
    if not isinstance(subnet, str) or not subnet:
        raise _bad_reply(what, "subnetId", f"expected a subnet id, got {subnet!r}")
    mac = data.get("macAddress")
    if mac is not None and not isinstance(mac, str):
        raise _bad_reply(what, "macAddress", f"expected a MAC, got {mac!r}")
    items = data.get("privateIpSet")
    if not isinstance(items, list):
        raise _bad_reply(what, "privateIpSet", f"expected a list, got {items!r}")
    ips: list[PortIp] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"privateIpSet[{i}]"
        if not isinstance(item, dict):
            raise _bad_reply(what, where, f"expected an object, got {item!r}")
        address = item.get("privateIpAddress")
        try:
            parsed = ipaddress.ip_address(address if isinstance(address, str) else "")
        except ValueError:
            raise _bad_reply(what, f"{where}.privateIpAddress",
                             f"not an IP address: {address!r}") from None
        if str(parsed) in seen:
            raise _bad_reply(what, f"{where}.privateIpAddress", f"{address} listed twice")
        seen.add(str(parsed))
        ip_subnet = item.get("subnetId") or subnet
        if not isinstance(ip_subnet, str):
            raise _bad_reply(what, f"{where}.subnetId", f"expected a subnet id, got {ip_subnet!r}")
        ips.append(PortIp(str(parsed), ip_subnet, item.get("primary") is True))
    return Port(eni_id=eni, mac=mac, subnet=subnet, status=str(data.get("status") or ""),
                ips=tuple(ips))


def parse_added(data: Any, what: str) -> list[str]:
    if not isinstance(data, dict) or not isinstance(data.get("privateIps"), list):
        raise _bad_reply(what, "privateIps", f"expected a list, got {data!r}")
    out = []
    for i, ip in enumerate(data["privateIps"]):
        try:
            out.append(str(ipaddress.ip_address(ip if isinstance(ip, str) else "")))
        except ValueError:
            raise _bad_reply(what, f"privateIps[{i}]", f"not an IP address: {ip!r}") from None
    return out


def parse_subnet(data: Any, subnet_id: str) -> SubnetInfo:
    what = "subnet"
    body = data.get("subnet") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise _bad_reply(what, "subnet", f"expected an object for {subnet_id}")
    cidr, available = body.get("cidr"), body.get("availableIp")
    try:
        ipaddress.ip_network(cidr if isinstance(cidr, str) else "", strict=False)
    except ValueError:
        raise _bad_reply(what, "cidr", f"not a CIDR: {cidr!r}") from None
    if isinstance(available, bool) or not isinstance(available, int) or available < 0:
        raise _bad_reply(what, "availableIp", f"expected a count, got {available!r}")
    zone = body.get("zoneName")
    return SubnetInfo(id=str(body.get("subnetId") or subnet_id), cidr=str(cidr),
                      available=available, zone=zone if isinstance(zone, str) else "")


class BbcApi:
    """The BBC and VPC calls podnet makes, through bce-python-sdk, retries off."""

    def __init__(self, endpoint: str, access_key_id: str, secret_access_key: str, *,
                 vpc_endpoint: str | None = None, protocol: str = "http",
                 timeout_ms: int = 10_000) -> None:
        def config(host: str) -> BceClientConfiguration:
            return BceClientConfiguration(
                credentials=BceCredentials(access_key_id, secret_access_key),
                endpoint=host if "://" in host else f"{protocol}://{host}",
                retry_policy=NoRetryPolicy(), connection_timeout_in_mills=timeout_ms)

        # the SDK logs request headers and signing input (the Authorization header names the
        # access key) at DEBUG: keep it quiet unless someone set its level on purpose
        sdk_log = logging.getLogger("baidubce")
        if sdk_log.level == logging.NOTSET:
            sdk_log.setLevel(logging.INFO)
        self.bbc = BbcClient(config(endpoint))
        self.vpc = SubnetClient(config(vpc_endpoint or endpoint))
        #: core's buckets per API (``podnet_cloud_limiter``): one token before each request
        self.limiter: CloudLimiter | None = None

    @contextlib.contextmanager
    def _request(self, api: str) -> Iterator[None]:
        """One SDK request of ``api``: its token first, then its latency and failure
        reported per API (``limiter.observe``)."""
        limiter = self.limiter
        if limiter is None:
            yield
            return
        limiter.acquire(api)
        started = time.perf_counter()
        try:
            yield
        except Exception as exc:
            kind = exc.kind if isinstance(exc, ProviderError) else classify(exc)
            limiter.observe(api, time.perf_counter() - started,
                            (kind or ErrorKind.TRANSIENT).value)
            raise
        limiter.observe(api, time.perf_counter() - started)

    def __repr__(self) -> str:  # never the credentials
        return "BbcApi()"

    @staticmethod
    def _json(response: Any) -> Any:
        raw = getattr(response, "raw_data", None)
        if raw is None:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise ProviderError(ErrorKind.TRANSIENT, "reply is not JSON",
                                code="MalformedReply") from None

    def add_ips(self, instance_id: str, count: int | None = None,
                ips: Sequence[str] | None = None) -> list[str]:
        with self._request(API_ADD):
            reply = self.bbc.batch_add_ip(
                instance_id, private_ips=list(ips) if ips is not None else None,
                secondary_private_ip_address_count=count)
        return parse_added(self._json(reply), "batchAddIp")

    def add_ips_cross_subnet(self, instance_id: str, eni_id: str, subnet_id: str,
                             count: int) -> list[str]:
        body = {"instanceId": instance_id, "singleEniAndSubentIps": [
            {"eniId": eni_id, "subnetId": subnet_id, "secondaryPrivateIpAddressCount": count}]}
        with self._request(API_ADD_CROSS):
            reply = self.bbc._send_request(http_methods.PUT,
                                           b"/instance/batchAddIpCrossSubnet", json.dumps(body))
        return parse_added(self._json(reply), "batchAddIpCrossSubnet")

    def delete_ips(self, instance_id: str, ips: Sequence[str]) -> None:
        with self._request(API_DEL):
            self.bbc.batch_delete_ip(instance_id, list(ips))

    def port(self, instance_id: str) -> Port:
        path = b"/vpcPort/" + instance_id.encode()
        with self._request(API_PORT):
            reply = self.bbc._send_request(http_methods.GET, path)
        return parse_port(self._json(reply))

    def instances(self) -> list[str]:
        """The ids of every instance the credentials see, page by page."""
        found: list[str] = []
        marker: str | None = None
        while True:
            with self._request(API_LIST):
                reply = self._json(self.bbc.list_instances(marker=marker))
            page = reply.get("instances") if isinstance(reply, dict) else None
            if not isinstance(page, list):
                raise _bad_reply("listInstances", "instances", "not a list")
            for item in page:
                ident = item.get("id") if isinstance(item, dict) else None
                if not isinstance(ident, str) or not ident:
                    raise _bad_reply("listInstances", "instances[].id", "missing")
                found.append(ident)
            marker = reply.get("nextMarker")
            if not reply.get("isTruncated") or not marker:
                return found

    def subnet(self, subnet_id: str) -> SubnetInfo:
        with self._request(API_SUBNET):
            reply = self.vpc.get_subnet(subnet_id)
        return parse_subnet(self._json(reply), subnet_id)


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
                 policy: PoolPolicy | None = None, name: str = NAME,
                 api_factory: Callable[..., BbcApi] = BbcApi) -> None:
        self.name = name
        self.policy = policy or default_policy()
        self.subnets: tuple[str, ...] = tuple(subnets)
        self.instance_type_label = instance_type_label
        self.instance_type_prefix = instance_type_prefix
        self.instance_id_label = instance_id_label
        self.max_ips = max_ips_per_node
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
                 protocol: str, timeout_ms: int) -> None:
        ak = ak or os.environ.get("BCE_ACCESS_KEY_ID")
        sk = sk or os.environ.get("BCE_SECRET_ACCESS_KEY")
        if not ak or not sk:
            raise ConfigError(config_key(self.name, "accessKeyId"),
                              "credentials missing (config or BCE_ACCESS_KEY_ID / "
                              "BCE_SECRET_ACCESS_KEY)")
        self._api = self._api_factory(endpoint, ak, sk, vpc_endpoint=vpc, protocol=protocol,
                                      timeout_ms=timeout_ms)
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
                         instance_id_label=self.instance_id_label)
        cfg = read_section(BbcConfig, provider, config, base)
        self.subnets = cfg.subnets
        self.max_ips = cfg.max_ips_per_node
        self.instance_type_label = cfg.instance_type_label
        self.instance_type_prefix = cfg.instance_type_prefix
        self.instance_id_label = cfg.instance_id_label
        if cfg.endpoint is not None:
            self._connect(cfg.endpoint, cfg.access_key_id, cfg.secret_access_key,
                          cfg.vpc_endpoint, cfg.protocol, cfg.timeout_ms)

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
                ips=tuple(ip.address for ip in port.secondary())),),
            max_interfaces=1, ips_per_interface=self.max_ips)

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
        try:
            if not subnets:
                if state.suspect:
                    self._precheck(instance, port.subnet, count)
                added = self.api.add_ips(instance, count=count)
                entries = [PoolEntry(ip, port.eni_id, port.subnet) for ip in added]
            else:
                entries = self._grow_cross(instance, port, subnets, count, state.suspect)
        except Exception as exc:
            if classify(exc) in (ErrorKind.QUOTA_EXCEEDED, ErrorKind.SUBNET_EXHAUSTED):
                state.suspect = True
            if _has_code(exc, "EniIdException"):
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

    @hookimpl
    def podnet_pool_shrink(self, provider: str, node: NodeContext,
                           entries: Sequence[PoolEntry]) -> Sequence[str] | None:
        wanted = [e.address for e in entries]
        if not wanted:
            return []
        instance = self.instance_id(node.node)
        try:
            self.api.delete_ips(instance, wanted)
        except Exception as exc:
            if _has_code(exc, "InstanceNotFound"):
                self.forget(instance)
                return wanted  # the instance is gone, and its addresses with it
            if not _has_code(exc, "PrivateIPNotExistException"):
                raise
            # some are gone already: delete the rest
            present = {ip.address for ip in self._port(instance, fresh=True).secondary()}
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
        return AddressSpace(subnets=tuple(subnets))

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
                          routes=POD_ROUTES)

    def _add_static(self, context: AllocateContext, request: ResolvedRequest, instance: str,
                    port: Port) -> PoolEntry:
        """Add the requested address core found outside the pool to the instance's ENI."""
        address = request.address
        assert address is not None
        try:
            self.api.add_ips(instance, ips=[address])
        except Exception as exc:
            if not _has_code(exc, "PrivateIpInUseException"):
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
        if ip in state.missing:
            # a verify found it gone from the ENI (maybe another record's, before the cloud
            # handed it out again): put it back unless the instance has it now. An address
            # in use elsewhere is not this pod's: never routed as if it were (GC finds it
            # lost and the record is re-addressed)
            if ip not in {a.address for a in self._port(instance, fresh=True).secondary()}:
                try:
                    self.api.add_ips(instance, ips=[ip])
                except Exception as exc:
                    if not _has_code(exc, "PrivateIpInUseException"):
                        raise
                    if ip not in {a.address
                                  for a in self._port(instance, fresh=True).secondary()}:
                        raise ProviderError(ErrorKind.CONFLICT, f"{ip} is in use outside "
                                            f"instance {instance}", field="status.ip") from None
            state.missing.discard(ip)
        return RouteResult(interface=state.port.eni_id if state.port else None)

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
