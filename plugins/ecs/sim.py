"""A loopback Alibaba Cloud ECS: the ENI and private-IP APIs, spoken as the official SDK
(``alibabacloud_ecs20140526``) speaks them, over plain HTTP on 127.0.0.1.

Wire: ``POST /`` with the action in the ``x-acs-action`` header, every parameter in the
query string (lists flattened as ``Name.1``, ``Name.2``), JSON replies, errors as
``{"RequestId", "Code", "Message"}`` with the HTTP status ECS uses. Signatures are never
checked; with an ``auth`` hook (``podnet.sim.cloudauth.CredentialAuthority``) the request's
access key (``Authorization: ACS3-HMAC-SHA256 Credential=<id>,...``, or the older forms)
and security token (``x-acs-security-token``, or ``SecurityToken``) are: an unknown key is
refused ``InvalidAccessKeyId.NotFound``, a temporary key without its token
``MissingSecurityToken``, with another's ``InvalidSecurityToken.MismatchWithAccessKey``,
an expired one ``InvalidSecurityToken.Expired``. With ``secret_of`` too (the key's secret),
the V3 signature (``ACS3-HMAC-SHA256``: the canonical request of the method, path, sorted
query, signed headers and payload hash) is checked: ``SignatureDoesNotMatch``.

Modelled: instance types with their ENI, IPv4-per-ENI and IPv6-per-ENI limits and trunk
support (:data:`TRUNK_TYPES`), instances
with a primary ENI, vSwitches with a CIDR (and optionally an IPv6 CIDR) and a finite number
of free addresses, IPv6 addresses (AssignIpv6Addresses / UnassignIpv6Addresses, and
CreateNetworkInterface's ``Ipv6AddressCount``), ENI states (Available,
Attaching, InUse, Detaching) with a configurable latency, per-API rate limits answering
``Throttling``, injectable faults (a random error rate, scripted errors, a vSwitch running
dry, malformed replies; a scripted error on AssignIpv6Addresses makes half a dual-stack
pair) and a ground-truth view for tests (:meth:`EcsSimulator.addresses`, IPv6 included).
An ENI's security groups are kept from CreateNetworkInterface and changed by
ModifyNetworkInterfaceAttribute, or behind the controller's back with
:meth:`EcsSimulator.set_security_groups`. Tags as ECS keeps them: ``Tag.N.Key`` /
``Tag.N.Value`` on CreateNetworkInterface (N 1..20; a key of 1..128 characters not starting
with ``aliyun`` or ``acs:``, a value of up to 128; neither containing ``http://`` or
``https://``), returned by DescribeNetworkInterfaces (``Tags.Tag[].TagKey/TagValue``, with
the ENI's ``CreationTime``), which filters by ``Tag.N`` too (every one given must match; a
filter without a value matches the key alone), as well as by ``Type`` and ``Status``.
DescribeVSwitches lists the vSwitches (``VSwitchId``, ``ZoneId``, ``VpcId`` narrow them
down) with their zone, CIDR and free addresses, ``PageNumber`` / ``PageSize`` (10 by
default, at most 50). DescribeInstances lists the instances (``InstanceIds``, a JSON
array of up to 100, and ``InstanceType`` narrow them down) with their attached ENIs. Both
of these Describes page as ECS does: ``NextToken`` / ``MaxResults`` (10 by default, at
most 500 ENIs or 100 instances a page), or the older ``PageNumber`` / ``PageSize``.

Over 800 lines and kept whole on purpose: it is one model, the simulated region's state
(instances, ENIs, vSwitches, limits, faults) and one handler per ECS action reading and
changing it under one lock, followed by the query-string helpers those handlers share.
Split by action, each part would reach into the same state and lock.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import itertools
import json
import random
import socket
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit

import attrs

_T = TypeVar("_T")

#: instance types as the catalogue lists them: ENIs (primary included), IPv4 per ENI
#: (the ENI's primary address included), IPv6 per ENI
INSTANCE_TYPES: dict[str, tuple[int, int, int]] = {
    "ecs.g7.large": (3, 10, 10),
    "ecs.g7.xlarge": (4, 15, 15),
    "ecs.g7.2xlarge": (6, 15, 15),
    "ecs.g7.4xlarge": (8, 30, 30),
    "ecs.c7.large": (3, 10, 10),
    "ecs.t6-c1m1.large": (2, 2, 0),
    #: not in the catalogue: small limits so that tests create and dispose ENIs often
    "ecs.sim.tiny": (4, 4, 0),
    #: the same, with IPv6 (3 secondary IPv4 and 3 IPv6 per ENI): dual-stack tests
    "ecs.sim.tiny6": (4, 4, 3),
}

#: the instance types that take a trunk ENI (``EniTrunkSupported``), with their
#: ``EniTotalQuantity``: every network interface they take, member ENIs included (the
#: burstable t6 takes none; the totals are of the catalogue's shape, not its values). A
#: trunk ENI is made with CreateNetworkInterface's ``InstanceType=Trunk``, listed with
#: ``Type: Trunk``, and refused at AttachNetworkInterface on another type:
#: ``InvalidOperation.InstanceTypeNotSupportEniTrunking`` (403)
TRUNK_TYPES: dict[str, int] = {
    "ecs.g7.large": 8,
    "ecs.g7.xlarge": 12,
    "ecs.g7.2xlarge": 16,
    "ecs.g7.4xlarge": 24,
    "ecs.c7.large": 8,
    "ecs.sim.tiny": 8,
    "ecs.sim.tiny6": 8,
}
#: CreateNetworkInterface's ``InstanceType``: the kinds of ENI it makes (Secondary the
#: default)
CREATABLE_KINDS = ("Secondary", "Trunk")

#: how many tags an ENI (and a DescribeNetworkInterfaces filter) takes
MAX_TAGS = 20
#: a tag key's and a tag value's longest length
MAX_TAG_LENGTH = 128

#: the HTTP status ECS answers each error code with
STATUS: dict[str, int] = {
    "Throttling": 400,
    "InvalidVSwitchId.IpNotEnough": 403,
    "InvalidOperation.Ipv4CountExceeded": 403,
    "InvalidOperation.Ipv6CountExceeded": 403,
    "InvalidOperation.Ipv6NotEnabled": 400,
    "QuotaExceeded.PrivateIpAddress": 403,
    "EniPerInstanceLimitExceeded": 403,
    "Operation.Conflict": 403,
    "InvalidEniId.NotFound": 404,
    "InvalidEcsId.NotFound": 404,
    "InvalidVSwitchId.NotFound": 404,
    "InvalidOperation.InvalidEniState": 400,
    "InvalidOperation.InvalidEniType": 400,
    "InvalidOperation.InstanceTypeNotSupportEniTrunking": 403,
    "InvalidIp.IpUnassigned": 400,
    "InvalidPrivateIpAddress.Duplicated": 400,
    "IdempotentFailed": 400,
    "MissingParameter": 400,
    "InvalidParameter": 400,
    "InvalidAction": 400,
    "InvalidTagKey.Malformed": 400,
    "InvalidTagValue.Malformed": 400,
    "InvalidTagCount": 400,
    "Duplicate.TagKey": 400,
    "InternalError": 500,
    "ServiceUnavailable": 503,
    "InvalidAccessKeyId.NotFound": 404,
    "MissingSecurityToken": 400,
    "InvalidSecurityToken.MismatchWithAccessKey": 400,
    "InvalidSecurityToken.Expired": 400,
    "SignatureDoesNotMatch": 400,
}

#: the ``auth`` hook's verdicts (``podnet.sim.cloudauth.Verdict`` values) -> ECS's answer
AUTH_ERRORS: dict[str, tuple[str, str]] = {
    "unknown-key": ("InvalidAccessKeyId.NotFound", "Specified access key is not found."),
    "token-missing": ("MissingSecurityToken", "SecurityToken is mandatory for this key."),
    "token-mismatch": ("InvalidSecurityToken.MismatchWithAccessKey",
                       "Specified SecurityToken mismatch with the AccessKey."),
    "expired": ("InvalidSecurityToken.Expired", "Specified SecurityToken is expired."),
}


def request_credentials(headers: Mapping[str, str], params: Mapping[str, str]
                        ) -> tuple[str, str | None]:
    """The access key id and security token an SDK request carries (``""`` / None when
    it carries none): the V3 ``Authorization`` header, ``acs <id>:<signature>``, or the
    RPC query's ``AccessKeyId`` / ``SecurityToken``."""
    auth = headers.get("authorization") or ""
    key = ""
    if auth.startswith("ACS3-"):
        for part in auth.split(" ", 1)[-1].split(","):
            name, _, value = part.strip().partition("=")
            if name == "Credential":
                key = value
    elif auth.startswith("acs "):
        key = auth[4:].rpartition(":")[0]
    key = key or params.get("AccessKeyId", "")
    token = headers.get("x-acs-security-token") or params.get("SecurityToken") or None
    return key, token

APIS = ("DescribeInstanceTypes", "DescribeNetworkInterfaces", "CreateNetworkInterface",
        "AttachNetworkInterface", "AssignPrivateIpAddresses", "UnassignPrivateIpAddresses",
        "DetachNetworkInterface", "DeleteNetworkInterface", "DescribeVSwitches",
        "ModifyNetworkInterfaceAttribute", "AssignIpv6Addresses", "UnassignIpv6Addresses",
        "DescribeInstances")

#: entries per page: the default, and the most DescribeNetworkInterfaces and
#: DescribeInstances return (``MaxResults`` / ``PageSize`` beyond it gets this many)
PAGE_DEFAULT = 10
PAGE_MOST = {"DescribeNetworkInterfaces": 500, "DescribeInstances": 100,
             "DescribeVSwitches": 50}
#: how many ids DescribeInstances' ``InstanceIds`` (a JSON array) takes
MAX_INSTANCE_IDS = 100
#: what the simulator's NextToken values start with (anything else is refused)
_TOKEN = "sim-next:"


class EcsError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = STATUS.get(code, 400)


@attrs.define
class VSwitch:
    id: str
    cidr: ipaddress.IPv4Network
    zone: str = "cn-hangzhou-k"
    #: addresses handed out (ENI primaries and secondaries)
    used: set[str] = attrs.field(factory=set)
    #: a fault: the vSwitch answers as if it had no free address
    dry: bool = False
    #: a cap on the free addresses (None: the CIDR's size decides)
    limit: int | None = None
    #: the IPv6 CIDR (None: the vSwitch has no IPv6)
    ipv6_cidr: ipaddress.IPv6Network | None = None
    used6: set[str] = attrs.field(factory=set)

    def take6(self, count: int) -> list[str]:
        if count <= 0:
            return []
        if self.ipv6_cidr is None:
            raise EcsError("InvalidOperation.Ipv6NotEnabled",
                           f"The vSwitch {self.id} has no IPv6 CIDR block.")
        if self.dry:
            raise EcsError("InvalidVSwitchId.IpNotEnough",
                           f"The vSwitch {self.id} has not enough free IP addresses.")
        out: list[str] = []
        base = int(self.ipv6_cidr.network_address)
        n = 2  # ::1 is the gateway
        while len(out) < count:
            ip = str(ipaddress.IPv6Address(base + n))
            n += 1
            if ip not in self.used6:
                out.append(ip)
        self.used6.update(out)
        return out

    def claim6(self, ips: Sequence[str]) -> None:
        if self.ipv6_cidr is None:
            raise EcsError("InvalidOperation.Ipv6NotEnabled",
                           f"The vSwitch {self.id} has no IPv6 CIDR block.")
        for ip in ips:
            try:
                addr = ipaddress.IPv6Address(ip)
            except ValueError:
                raise EcsError("InvalidParameter", f"{ip} is not an IPv6 address") from None
            if addr not in self.ipv6_cidr:
                raise EcsError("InvalidParameter", f"{ip} is not in vSwitch {self.id}")
            if ip in self.used6:
                raise EcsError("InvalidPrivateIpAddress.Duplicated", f"{ip} is in use")
        self.used6.update(ips)

    def usable(self) -> Iterator[str]:
        hosts = self.cidr.hosts()
        next(hosts, None)  # the gateway
        for host in hosts:
            yield str(host)

    def total(self) -> int:
        n = max(0, self.cidr.num_addresses - 3)  # network, gateway, broadcast
        return n if self.limit is None else min(n, self.limit + len(self.used))

    def available(self) -> int:
        return 0 if self.dry else max(0, self.total() - len(self.used))

    def take(self, count: int) -> list[str]:
        if count > self.available():
            raise EcsError("InvalidVSwitchId.IpNotEnough",
                           f"The vSwitch {self.id} has not enough free IP addresses.")
        out: list[str] = []
        for ip in self.usable():
            if len(out) >= count:
                break
            if ip not in self.used:
                out.append(ip)
        self.used.update(out)
        return out


@attrs.define
class Eni:
    id: str
    vswitch: str
    mac: str
    primary_ip: str
    kind: str = "Secondary"  # Primary | Secondary | Trunk
    status: str = "Available"  # Available | Attaching | InUse | Detaching
    instance_id: str | None = None
    #: the instance it was created for / last attached to (ground truth of a detached ENI)
    owner: str | None = None
    secondary: list[str] = attrs.field(factory=list)
    ipv6: list[str] = attrs.field(factory=list)
    security_groups: list[str] = attrs.field(factory=list)
    description: str = ""
    #: tag key -> value, in the order given
    tags: dict[str, str] = attrs.field(factory=dict)
    #: CreationTime as ECS writes it (UTC, to the second)
    created: str = ""
    #: when (time.monotonic) a pending state change completes, and to what
    settles_at: float = 0.0
    settles_to: str | None = None


@attrs.define
class Instance:
    id: str
    type: str
    primary_eni: str


class _Bucket:
    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.tokens = max(1.0, rate)
        self.stamp = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(max(1.0, self.rate), self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class _ClosingHTTPServer(ThreadingHTTPServer):
    """Closes its clients' kept-alive connections on stop: a stopped simulator must not
    leave a handler thread and a socket per client behind (tests start hundreds)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self._connections_lock:
            connections, self._connections = self._connections, set()
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()


class EcsSimulator:
    """The loopback ECS. ``rate``: calls per second per API (a number, or a mapping of API
    name to rate); ``latency``: seconds each call and each ENI state change takes."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 rate: float | Mapping[str, float] | None = None, fault_rate: float = 0.0,
                 seed: int = 0, region: str = "cn-hangzhou",
                 auth: Callable[[str, str | None], str] | None = None,
                 secret_of: Callable[[str], str | None] | None = None) -> None:
        self.host = host
        #: checks each HTTP request's access key and token (None: every request passes)
        self.auth = auth
        #: a key's secret, to check the request's signature with (None: not checked)
        self.secret_of = secret_of
        #: access key ids of the requests that passed ``auth``, in order
        self.callers: list[str] = []
        self.port = port
        self.latency = latency
        #: seconds an ENI stays Attaching / Detaching (defaults to the call latency)
        self.state_latency = latency
        self.fault_rate = fault_rate
        #: share of calls answered ``Throttling`` at random (on top of the rate limits)
        self.throttle_rate = 0.0
        self.region = region
        self.random = random.Random(seed)
        self.lock = threading.RLock()
        self.calls: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()
        self.vswitches: dict[str, VSwitch] = {}
        self.instances: dict[str, Instance] = {}
        self.enis: dict[str, Eni] = {}
        #: errors to answer the next calls of one API with: api -> [codes]
        self.scripted: dict[str, list[str]] = {}
        #: keys to drop from the next reply of one API (malformed replies): api -> [keys]
        self.malformed: dict[str, list[str]] = {}
        #: keys to drop from every reply of one API to calls with these parameters:
        #: api -> [(key, parameters)]
        self.malformed_when: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._rates: dict[str, float] = {}
        self.set_rate(rate)
        self._ids = itertools.count(1)
        self._server: _ClosingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> EcsSimulator:
        if self._server is not None:
            return self
        sim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                sim._handle(self)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = _ClosingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        # a short poll: stop() (shutdown) waits for the loop to notice
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,),
                                        name="ecs-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> EcsSimulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """``host:port``, as the SDK's ``Config.endpoint`` takes it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    # --- the world ----------------------------------------------------------------------

    def set_rate(self, rate: float | Mapping[str, float] | None) -> None:
        with self.lock:
            if rate is None:
                self._rates = {}
            elif isinstance(rate, Mapping):
                self._rates = {k: float(v) for k, v in rate.items()}
            else:
                self._rates = {api: float(rate) for api in APIS}
            self._buckets = {api: _Bucket(r) for api, r in self._rates.items() if r > 0}

    def add_vswitch(self, id: str, cidr: str, *, zone: str = "cn-hangzhou-k",
                    limit: int | None = None, ipv6_cidr: str | None = None) -> VSwitch:
        with self.lock:
            vsw = self.vswitches[id] = VSwitch(
                id=id, cidr=ipaddress.IPv4Network(cidr), zone=zone, limit=limit,
                ipv6_cidr=ipaddress.IPv6Network(ipv6_cidr) if ipv6_cidr else None)
            return vsw

    def add_instance(self, instance_id: str, instance_type: str = "ecs.g7.large",
                     vswitch: str | None = None) -> Instance:
        """An instance with its primary ENI (InUse, one address) in ``vswitch``."""
        with self.lock:
            if instance_id in self.instances:
                return self.instances[instance_id]
            if instance_type not in INSTANCE_TYPES:
                raise ValueError(f"unknown instance type {instance_type}")
            vsw = self._vswitch(vswitch or next(iter(self.vswitches)))
            eni = self._new_eni(vsw, [], kind="Primary")
            eni.status, eni.instance_id, eni.owner = "InUse", instance_id, instance_id
            inst = self.instances[instance_id] = Instance(instance_id, instance_type, eni.id)
            return inst

    def exhaust(self, vswitch: str, dry: bool = True) -> None:
        """A vSwitch running dry (``dry=False``: it has addresses again)."""
        with self.lock:
            self.vswitches[vswitch].dry = dry

    def fail_next(self, api: str, code: str, times: int = 1) -> None:
        with self.lock:
            self.scripted.setdefault(api, []).extend([code] * times)

    def clear_scripted(self) -> None:
        """No failure of :meth:`fail_next` left to answer (the rates stay)."""
        with self.lock:
            self.scripted.clear()

    def malform_next(self, api: str, key: str) -> None:
        """Drop ``key`` (anywhere in the reply) from the next reply of ``api``."""
        with self.lock:
            self.malformed.setdefault(api, []).append(key)

    def malform_when(self, api: str, key: str, **params: str) -> None:
        """Drop ``key`` from every reply of ``api`` to a call with ``params`` (e.g.
        ``InstanceId='i-1'``), until :meth:`clear_faults`."""
        with self.lock:
            self.malformed_when.setdefault(api, []).append((key, dict(params)))

    def clear_faults(self) -> None:
        with self.lock:
            self.scripted.clear()
            self.malformed.clear()
            self.malformed_when.clear()
            self.fault_rate = self.throttle_rate = 0.0
            for vsw in self.vswitches.values():
                vsw.dry = False

    def addresses(self) -> dict[str, str]:
        """Ground truth: every secondary address (and every IPv6 address) of every ENI ->
        the instance the ENI is attached to (or was made for, when detached)."""
        with self.lock:
            self._settle_all()
            return {ip: eni.instance_id or eni.owner or ""
                    for eni in self.enis.values() for ip in (*eni.secondary, *eni.ipv6)}

    def drop_ipv6(self, address: str) -> None:
        """Ground truth: an IPv6 address leaves its ENI behind the controller's back (its
        IPv4 partner is then half a pair)."""
        with self.lock:
            for eni in self.enis.values():
                if address in eni.ipv6:
                    eni.ipv6.remove(address)
                    self.vswitches[eni.vswitch].used6.discard(address)

    def forget(self, addresses: Sequence[str]) -> None:
        """Ground truth: the cloud loses these secondary addresses (restored from a
        backup, say): gone from their ENIs, free in their vSwitch, nobody told."""
        gone = set(addresses)
        with self.lock:
            for eni in self.enis.values():
                for ip in [ip for ip in eni.secondary if ip in gone]:
                    eni.secondary.remove(ip)
                    self.vswitches[eni.vswitch].used.discard(ip)

    def attached(self) -> list[dict[str, Any]]:
        """Ground truth for a simulated VPC (``podnet.sim.vpc``): every InUse ENI
        with its instance, MAC, vSwitch gateway and private IPv4 addresses (its primary
        first), and its IPv6 addresses with the vSwitch's IPv6 gateway (its CIDR's first
        host; None without IPv6)."""
        with self.lock:
            self._settle_all()
            out = []
            for e in self.enis.values():
                if e.status != "InUse" or not e.instance_id:
                    continue
                vsw = self.vswitches[e.vswitch]
                out.append({"id": e.id, "instance": e.instance_id, "mac": e.mac,
                            "gateway": str(next(vsw.cidr.hosts())),
                            "addresses": [e.primary_ip, *e.secondary], "ipv6": list(e.ipv6),
                            "gateway6": str(vsw.ipv6_cidr.network_address + 1)
                            if vsw.ipv6_cidr is not None else None})
            return out

    def move_address(self, address: str, eni_id: str) -> None:
        """Ground truth: the cloud puts secondary ``address`` on ENI ``eni_id`` (same
        vSwitch) behind the controller's back."""
        with self.lock:
            target = self._eni(eni_id)
            for eni in self.enis.values():
                if address in eni.secondary:
                    eni.secondary.remove(address)
            target.secondary.append(address)

    def eni_states(self) -> dict[str, str]:
        with self.lock:
            self._settle_all()
            return {eni.id: eni.status for eni in self.enis.values()}

    def set_security_groups(self, eni_id: str, groups: Sequence[str]) -> None:
        """Ground truth: give an ENI other security groups, as someone with the console
        would (no API call counted, no fault or rate limit)."""
        with self.lock:
            self._eni(eni_id).security_groups = list(groups)

    def enis_of(self, instance_id: str) -> list[Eni]:
        with self.lock:
            self._settle_all()
            return [e for e in self.enis.values()
                    if e.instance_id == instance_id or e.owner == instance_id]

    # --- internals ----------------------------------------------------------------------

    def _new_id(self, prefix: str) -> str:
        salt = uuid.UUID(int=self.random.getrandbits(128)).hex[:8]
        return f"{prefix}-{next(self._ids):08x}{salt}"

    def _new_eni(self, vsw: VSwitch, secondary: Sequence[str] | int, *,
                 kind: str = "Secondary") -> Eni:
        count = secondary if isinstance(secondary, int) else len(secondary)
        if isinstance(secondary, int):
            ips = vsw.take(1 + count)
        else:
            self._claim(vsw, secondary)
            ips = vsw.take(1) + list(secondary)
        eni_id = self._new_id("eni")
        mac = "00:16:3e:" + ":".join(f"{self.random.randrange(256):02x}" for _ in range(3))
        eni = self.enis[eni_id] = Eni(id=eni_id, vswitch=vsw.id, mac=mac, primary_ip=ips[0],
                                      kind=kind, secondary=ips[1:])
        return eni

    def _claim(self, vsw: VSwitch, ips: Sequence[str]) -> None:
        for ip in ips:
            try:
                addr = ipaddress.IPv4Address(ip)
            except ValueError:
                raise EcsError("InvalidParameter", f"{ip} is not an IPv4 address") from None
            if addr not in vsw.cidr:
                raise EcsError("InvalidParameter", f"{ip} is not in vSwitch {vsw.id}")
            if ip in vsw.used:
                raise EcsError("InvalidPrivateIpAddress.Duplicated", f"{ip} is in use")
        if vsw.dry:
            raise EcsError("InvalidVSwitchId.IpNotEnough",
                           f"The vSwitch {vsw.id} has not enough free IP addresses.")
        vsw.used.update(ips)

    def _vswitch(self, vsw_id: str) -> VSwitch:
        vsw = self.vswitches.get(vsw_id)
        if vsw is None:
            raise EcsError("InvalidVSwitchId.NotFound", f"The vSwitch {vsw_id} does not exist.")
        return vsw

    def _eni(self, eni_id: str | None) -> Eni:
        if not eni_id:
            raise EcsError("MissingParameter", "NetworkInterfaceId is mandatory")
        eni = self.enis.get(eni_id)
        if eni is None:
            raise EcsError("InvalidEniId.NotFound", f"The ENI {eni_id} does not exist.")
        self._settle(eni)
        return eni

    def _instance(self, instance_id: str | None) -> Instance:
        inst = self.instances.get(instance_id or "")
        if inst is None:
            raise EcsError("InvalidEcsId.NotFound", f"The instance {instance_id} does not exist.")
        return inst

    def _settle(self, eni: Eni) -> None:
        if eni.settles_to is not None and time.monotonic() >= eni.settles_at:
            eni.status = eni.settles_to
            eni.settles_to = None
            if eni.status == "Available":
                eni.instance_id = None

    def _settle_all(self) -> None:
        for eni in self.enis.values():
            self._settle(eni)

    def _change(self, eni: Eni, transient: str, final: str) -> None:
        if self.state_latency > 0:
            eni.status, eni.settles_to = transient, final
            eni.settles_at = time.monotonic() + self.state_latency
        else:
            eni.status = final
            if final == "Available":
                eni.instance_id = None

    # --- HTTP ---------------------------------------------------------------------------

    def _handle(self, req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("content-length") or 0)
        body = req.rfile.read(length) if length else b""
        params: dict[str, str] = dict(parse_qsl(urlsplit(req.path).query,
                                                keep_blank_values=True))
        if body and "json" not in (req.headers.get("content-type") or ""):
            params.update(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
        action = req.headers.get("x-acs-action") or params.get("Action") or ""
        request_id = str(uuid.UUID(int=self.random.getrandbits(128)))
        try:
            self._authenticate(req, params, body)
            reply = self.dispatch(action, params)
            status = 200
            reply = {"RequestId": request_id, **reply}
        except EcsError as exc:
            status = exc.status
            reply = {"RequestId": request_id, "Code": exc.code, "Message": exc.message,
                     "HostId": "ecs.aliyuncs.com"}
        data = json.dumps(reply).encode()
        req.send_response(status)
        req.send_header("Content-Type", "application/json;charset=utf-8")
        req.send_header("Content-Length", str(len(data)))
        req.send_header("x-acs-request-id", request_id)
        req.end_headers()
        req.wfile.write(data)

    def _authenticate(self, req: BaseHTTPRequestHandler, params: Mapping[str, str],
                      body: bytes) -> None:
        if self.auth is None:
            return
        headers = {k.lower(): v for k, v in req.headers.items()}
        key, token = request_credentials(headers, params)
        verdict = self.auth(key, token)
        if verdict in AUTH_ERRORS:
            raise EcsError(*AUTH_ERRORS[verdict])
        secret = self.secret_of(key) if self.secret_of is not None else None
        if self.secret_of is not None and (
                secret is None or not _signed_v3(req.command, req.path, headers, body, secret)):
            raise EcsError("SignatureDoesNotMatch", "The request signature does not conform "
                           "to Aliyun standards.")
        with self.lock:
            self.callers.append(key)

    def dispatch(self, action: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One API call, without HTTP: what the server answers (raises :class:`EcsError`)."""
        handler = getattr(self, f"_api_{action}", None)
        if action not in APIS or handler is None:
            raise EcsError("InvalidAction", f"{action or 'no action'} is not supported")
        with self.lock:
            self.calls[action] += 1
            bucket = self._buckets.get(action)
            throttled = bucket is not None and not bucket.take()
            scripted = self.scripted.get(action)
            code = scripted.pop(0) if scripted else None
            injected = (self.fault_rate > 0 and code is None and not throttled
                        and self.random.random() < self.fault_rate)
            if injected:
                code = self.random.choice(["Throttling", "InternalError", "ServiceUnavailable"])
            elif (code is None and not throttled and self.throttle_rate > 0
                  and self.random.random() < self.throttle_rate):
                code, injected = "Throttling", True
        if self.latency:
            time.sleep(self.latency)
        if throttled:
            with self.lock:
                self.throttled[action] += 1
            raise EcsError("Throttling", "Request was denied due to request throttling.")
        if code is not None:
            raise EcsError(code, f"{action} failed ({'injected' if injected else 'scripted'})")
        with self.lock:
            reply: dict[str, Any] = handler(params)
            drop = self.malformed.get(action)
            if drop:
                reply = _drop_key(reply, drop.pop(0))
            for key, when in self.malformed_when.get(action, ()):
                if all(params.get(k) == v for k, v in when.items()):
                    reply = _drop_key(reply, key)
            return reply

    # --- the APIs -----------------------------------------------------------------------

    def _api_DescribeInstanceTypes(self, p: Mapping[str, str]) -> dict[str, Any]:
        wanted = _list(p, "InstanceTypes")
        out = []
        for name, (enis, ips, ipv6) in INSTANCE_TYPES.items():
            if wanted and name not in wanted:
                continue
            out.append({"InstanceTypeId": name, "EniQuantity": enis,
                        "EniTotalQuantity": TRUNK_TYPES.get(name, enis),
                        "EniPrivateIpAddressQuantity": ips,
                        "EniIpv6AddressQuantity": ipv6, "EniTrunkSupported": name in TRUNK_TYPES})
        return {"InstanceTypes": {"InstanceType": out}}

    def _eni_view(self, eni: Eni) -> dict[str, Any]:
        ips = [{"PrivateIpAddress": eni.primary_ip, "Primary": True}]
        ips += [{"PrivateIpAddress": ip, "Primary": False} for ip in eni.secondary]
        return {
            "NetworkInterfaceId": eni.id, "Status": eni.status, "Type": eni.kind,
            "InstanceId": eni.instance_id or "", "VSwitchId": eni.vswitch,
            "ZoneId": self.vswitches[eni.vswitch].zone, "VpcId": "vpc-sim",
            "MacAddress": eni.mac, "PrivateIpAddress": eni.primary_ip,
            "Description": eni.description, "CreationTime": eni.created,
            "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in eni.tags.items()]},
            "PrivateIpSets": {"PrivateIpSet": ips},
            "Ipv6Sets": {"Ipv6Set": [{"Ipv6Address": a} for a in eni.ipv6]},
            "SecurityGroupIds": {"SecurityGroupId": list(eni.security_groups)},
        }

    def _api_DescribeNetworkInterfaces(self, p: Mapping[str, str]) -> dict[str, Any]:
        ids = set(_list(p, "NetworkInterfaceId"))
        instance = p.get("InstanceId")
        status = p.get("Status")
        vsw = p.get("VSwitchId")
        kind = p.get("Type")
        wanted = _tag_filter(p)
        self._settle_all()
        found = [e for e in self.enis.values()
                 if (not ids or e.id in ids) and (not instance or e.instance_id == instance)
                 and (not status or e.status == status) and (not vsw or e.vswitch == vsw)
                 and (not kind or e.kind == kind)
                 and all(k in e.tags and (v is None or e.tags[k] == v) for k, v in wanted)]
        page, paging = _page(sorted(found, key=lambda e: e.id), p, lambda e: e.id,
                             PAGE_MOST["DescribeNetworkInterfaces"])
        return {"NetworkInterfaceSets": {"NetworkInterfaceSet": [self._eni_view(e)
                                                                  for e in page]},
                **paging}

    def _instance_view(self, inst: Instance) -> dict[str, Any]:
        primary = self.enis[inst.primary_eni]
        attached = sorted((e for e in self.enis.values() if e.instance_id == inst.id),
                          key=lambda e: (e.kind != "Primary", e.id))
        return {
            "InstanceId": inst.id, "InstanceType": inst.type, "RegionId": self.region,
            "ZoneId": self.vswitches[primary.vswitch].zone, "Status": "Running",
            "InstanceNetworkType": "vpc",
            "VpcAttributes": {"VpcId": "vpc-sim", "VSwitchId": primary.vswitch,
                              "PrivateIpAddress": {"IpAddress": [primary.primary_ip]}},
            "NetworkInterfaces": {"NetworkInterface": [{
                "NetworkInterfaceId": e.id, "Type": e.kind, "MacAddress": e.mac,
                "PrimaryIpAddress": e.primary_ip,
                "PrivateIpSets": {"PrivateIpSet": [
                    {"PrivateIpAddress": ip, "Primary": ip == e.primary_ip}
                    for ip in (e.primary_ip, *e.secondary)]},
                "Ipv6Sets": {"Ipv6Set": [{"Ipv6Address": a} for a in e.ipv6]},
            } for e in attached]},
        }

    def _api_DescribeInstances(self, p: Mapping[str, str]) -> dict[str, Any]:
        """The region's instances (``InstanceIds``, a JSON array of up to 100, narrows them
        down; an id ECS does not know is left out, not an error), paged."""
        wanted = _list(p, "InstanceIds")
        if "InstanceIds" in p and not wanted and p["InstanceIds"].strip() not in ("", "[]"):
            raise EcsError("InvalidParameter", "InstanceIds must be a JSON array of ids")
        if len(wanted) > MAX_INSTANCE_IDS:
            raise EcsError("InvalidParameter", f"InstanceIds takes at most "
                                               f"{MAX_INSTANCE_IDS} ids")
        itype = p.get("InstanceType")
        self._settle_all()
        found = [i for i in sorted(self.instances.values(), key=lambda i: i.id)
                 if (not wanted or i.id in wanted) and (not itype or i.type == itype)]
        page, paging = _page(found, p, lambda i: i.id, PAGE_MOST["DescribeInstances"])
        return {"Instances": {"Instance": [self._instance_view(i) for i in page]}, **paging}

    def _api_DescribeVSwitches(self, p: Mapping[str, str]) -> dict[str, Any]:
        """The region's vSwitches, as ECS lists them: filtered by ``VSwitchId``, ``ZoneId``
        and ``VpcId`` (an id nobody has: an empty page, not an error), sorted by id, page
        ``PageNumber`` of ``PageSize`` (10 by default, at most 50)."""
        if not p.get("RegionId"):
            raise EcsError("MissingParameter", "The input parameter RegionId that is "
                                               "mandatory for processing this request is "
                                               "not supplied.")
        wanted, zone, vpc = p.get("VSwitchId"), p.get("ZoneId"), p.get("VpcId")
        found = [v for v in sorted(self.vswitches.values(), key=lambda v: v.id)
                 if (not wanted or v.id == wanted) and (not zone or v.zone == zone)
                 and (not vpc or vpc == "vpc-sim")]
        number = _int(p, "PageNumber", 1)
        per = _int(p, "PageSize", PAGE_DEFAULT)
        if number < 1:
            raise EcsError("InvalidParameter", "PageNumber must be 1 or more")
        if not 1 <= per <= PAGE_MOST["DescribeVSwitches"]:
            raise EcsError("InvalidParameter", "PageSize must be between 1 and "
                                               f"{PAGE_MOST['DescribeVSwitches']}")
        page = found[(number - 1) * per:number * per]
        out = [{"VSwitchId": v.id, "CidrBlock": str(v.cidr), "ZoneId": v.zone,
                "VpcId": "vpc-sim", "Status": "Available", "VSwitchName": v.id,
                "AvailableIpAddressCount": v.available(), "IsDefault": False}
               for v in page]
        return {"VSwitches": {"VSwitch": out}, "TotalCount": len(found),
                "PageNumber": number, "PageSize": per}

    def _api_CreateNetworkInterface(self, p: Mapping[str, str]) -> dict[str, Any]:
        vsw = self._vswitch(p.get("VSwitchId") or "")
        groups = _list(p, "SecurityGroupIds") or ([p["SecurityGroupId"]]
                                                   if p.get("SecurityGroupId") else [])
        if not groups:
            raise EcsError("MissingParameter", "SecurityGroupId is mandatory")
        explicit = _list(p, "PrivateIpAddress")
        count = _int(p, "SecondaryPrivateIpAddressCount", 0)
        if count and explicit:
            raise EcsError("InvalidParameter", "give a count or addresses, not both")
        if 1 + max(count, len(explicit)) > max(v[1] for v in INSTANCE_TYPES.values()):
            raise EcsError("InvalidOperation.Ipv4CountExceeded", "too many addresses")
        explicit6 = _list(p, "Ipv6Address")
        count6 = _int(p, "Ipv6AddressCount", 0)
        if count6 and explicit6:
            raise EcsError("InvalidParameter", "give an IPv6 count or addresses, not both")
        if (count6 or explicit6) and vsw.ipv6_cidr is None:
            raise EcsError("InvalidOperation.Ipv6NotEnabled",
                           f"The vSwitch {vsw.id} has no IPv6 CIDR block.")
        kind = p.get("InstanceType") or "Secondary"
        if kind not in CREATABLE_KINDS:
            raise EcsError("InvalidParameter", f"The specified InstanceType {kind} is not "
                                               f"valid ({' or '.join(CREATABLE_KINDS)}).")
        tags = _tags(p)
        eni = self._new_eni(vsw, explicit or count, kind=kind)
        eni.tags = tags
        eni.created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if explicit6:
            vsw.claim6(explicit6)
            eni.ipv6 = list(explicit6)
        else:
            eni.ipv6 = vsw.take6(count6)
        eni.security_groups = groups
        eni.description = p.get("Description", "")
        eni.owner = _owner_of(eni.description, tags)
        view = self._eni_view(eni)
        return {k: view[k] for k in ("NetworkInterfaceId", "Status", "Type", "VSwitchId",
                                     "ZoneId", "VpcId", "MacAddress", "PrivateIpAddress",
                                     "PrivateIpSets", "SecurityGroupIds", "Ipv6Sets")}

    def _api_AttachNetworkInterface(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        inst = self._instance(p.get("InstanceId"))
        if eni.instance_id == inst.id and eni.status in ("Attaching", "InUse"):
            return {}  # already there
        if eni.status != "Available":
            raise EcsError("InvalidOperation.InvalidEniState",
                           f"The ENI {eni.id} is {eni.status}.")
        if eni.kind == "Trunk" and inst.type not in TRUNK_TYPES:
            raise EcsError("InvalidOperation.InstanceTypeNotSupportEniTrunking",
                           f"The instance type {inst.type} of {inst.id} does not support "
                           "ENI trunking.")
        self._settle_all()
        attached = [e for e in self.enis.values() if e.instance_id == inst.id]
        if len(attached) >= INSTANCE_TYPES[inst.type][0]:
            raise EcsError("EniPerInstanceLimitExceeded",
                           f"The instance {inst.id} has all its network interfaces.")
        eni.instance_id = eni.owner = inst.id
        self._change(eni, "Attaching", "InUse")
        return {}

    def _api_DetachNetworkInterface(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        if eni.kind == "Primary":
            raise EcsError("InvalidOperation.InvalidEniType", f"{eni.id} is a {eni.kind} ENI")
        if eni.status == "Detaching":
            return {}
        if eni.status != "InUse":
            raise EcsError("InvalidOperation.InvalidEniState",
                           f"The ENI {eni.id} is {eni.status}.")
        if p.get("InstanceId") and p["InstanceId"] != eni.instance_id:
            raise EcsError("InvalidEcsId.NotFound", f"{eni.id} is not on {p['InstanceId']}")
        self._change(eni, "Detaching", "Available")
        return {}

    def _api_DeleteNetworkInterface(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        if eni.kind == "Primary":
            raise EcsError("InvalidOperation.InvalidEniType", f"{eni.id} is a {eni.kind} ENI")
        if eni.status != "Available":
            raise EcsError("InvalidOperation.InvalidEniState",
                           f"The ENI {eni.id} is {eni.status}.")
        vsw = self.vswitches[eni.vswitch]
        vsw.used.difference_update([eni.primary_ip, *eni.secondary])
        vsw.used6.difference_update(eni.ipv6)
        del self.enis[eni.id]
        return {}

    def _api_ModifyNetworkInterfaceAttribute(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        groups = _list(p, "SecurityGroupId")
        if len(groups) > 5:
            raise EcsError("InvalidParameter", "at most 5 security groups per ENI")
        if groups:
            eni.security_groups = list(dict.fromkeys(groups))
        if "Description" in p:
            eni.description = p["Description"]
        return {}

    def _limit(self, eni: Eni, column: int) -> int:
        """The ENI's instance type's limit: column 1 IPv4 per ENI, 2 IPv6 per ENI."""
        inst = self.instances.get(eni.instance_id or eni.owner or "")
        return INSTANCE_TYPES[inst.type][column] if inst else 10

    def _assignable(self, p: Mapping[str, str]) -> Eni:
        """The ENI an assign names, if it is in a state that takes addresses."""
        eni = self._eni(p.get("NetworkInterfaceId"))
        if eni.status not in ("InUse", "Available"):
            raise EcsError("InvalidOperation.InvalidEniState",
                           f"The ENI {eni.id} is {eni.status}.")
        return eni

    def _api_AssignPrivateIpAddresses(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._assignable(p)
        explicit = _list(p, "PrivateIpAddress")
        count = _int(p, "SecondaryPrivateIpAddressCount", 0)
        if not explicit and count <= 0:
            raise EcsError("MissingParameter", "SecondaryPrivateIpAddressCount or "
                                               "PrivateIpAddress is mandatory")
        wanted = len(explicit) or count
        if 1 + len(eni.secondary) + wanted > self._limit(eni, 1):
            raise EcsError("InvalidOperation.Ipv4CountExceeded",
                           f"The ENI {eni.id} cannot take {wanted} more IPv4 addresses.")
        vsw = self.vswitches[eni.vswitch]
        if explicit:
            self._claim(vsw, explicit)
            got = list(explicit)
        else:
            got = vsw.take(count)
        eni.secondary.extend(got)
        return {"AssignedPrivateIpAddressesSet": {
            "NetworkInterfaceId": eni.id, "PrivateIpSet": {"PrivateIpAddress": got}}}

    def _api_AssignIpv6Addresses(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._assignable(p)
        explicit = _list(p, "Ipv6Address")
        count = _int(p, "Ipv6AddressCount", 0)
        if not explicit and count <= 0:
            raise EcsError("MissingParameter", "Ipv6AddressCount or Ipv6Address is mandatory")
        if explicit and count:
            raise EcsError("InvalidParameter", "give a count or addresses, not both")
        wanted = len(explicit) or count
        if len(eni.ipv6) + wanted > self._limit(eni, 2):
            raise EcsError("InvalidOperation.Ipv6CountExceeded",
                           f"The ENI {eni.id} cannot take {wanted} more IPv6 addresses.")
        vsw = self.vswitches[eni.vswitch]
        if explicit:
            vsw.claim6(explicit)
            got = list(explicit)
        else:
            got = vsw.take6(count)
        eni.ipv6.extend(got)
        return {"NetworkInterfaceId": eni.id, "Ipv6Sets": {"Ipv6Address": got}}

    def _api_UnassignIpv6Addresses(self, p: Mapping[str, str]) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        ips = _list(p, "Ipv6Address")
        if not ips:
            raise EcsError("MissingParameter", "Ipv6Address is mandatory")
        missing = [ip for ip in ips if ip not in eni.ipv6]
        if missing:
            raise EcsError("InvalidIp.IpUnassigned",
                           f"{', '.join(missing)} not assigned to {eni.id}")
        eni.ipv6 = [ip for ip in eni.ipv6 if ip not in ips]
        self.vswitches[eni.vswitch].used6.difference_update(ips)
        return {}

    def _api_UnassignPrivateIpAddresses(self, p: Mapping[str, str]
                                        ) -> dict[str, Any]:
        eni = self._eni(p.get("NetworkInterfaceId"))
        ips = _list(p, "PrivateIpAddress")
        if not ips:
            raise EcsError("MissingParameter", "PrivateIpAddress is mandatory")
        if eni.primary_ip in ips:
            raise EcsError("InvalidOperation.InvalidEniState",
                           f"{eni.primary_ip} is the primary address of {eni.id}")
        missing = [ip for ip in ips if ip not in eni.secondary]
        if missing:
            raise EcsError("InvalidIp.IpUnassigned",
                           f"{', '.join(missing)} not assigned to {eni.id}")
        eni.secondary = [ip for ip in eni.secondary if ip not in ips]
        self.vswitches[eni.vswitch].used.difference_update(ips)
        return {}


def _signed_v3(method: str, target: str, headers: Mapping[str, str], body: bytes,
               secret: str) -> bool:
    """Whether an ``ACS3-HMAC-SHA256`` Authorization header signs this request with
    ``secret`` (``headers``: names in lower case)."""
    scheme, _, rest = (headers.get("authorization") or "").partition(" ")
    if scheme != "ACS3-HMAC-SHA256":
        return False
    fields = dict(part.strip().partition("=")[::2] for part in rest.split(","))
    signed = [h for h in fields.get("SignedHeaders", "").split(";") if h]
    payload = headers.get("x-acs-content-sha256", "")
    if not signed or payload != hashlib.sha256(body).hexdigest():
        return False
    parts = urlsplit(target)
    query = sorted(parse_qsl(parts.query, keep_blank_values=True))
    canonical = "\n".join([
        method, parts.path or "/",
        "&".join(f"{k}={quote(v, safe='~')}" for k, v in query),
        "".join(f"{h}:{headers.get(h, '').strip()}\n" for h in signed),
        ";".join(signed), payload])
    to_sign = f"{scheme}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    expected = hmac.new(secret.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields.get("Signature", ""))


def _owner_of(description: str, tags: Mapping[str, str]) -> str | None:
    # the provider tags the ENIs it makes with their instance (and, before it tagged them,
    # wrote "podnet:<instance id>" as their description)
    if tags.get("podnet.io/instance"):
        return tags["podnet.io/instance"]
    if description.startswith("podnet:"):
        return description.split(":", 1)[1] or None
    return None


def _numbered(p: Mapping[str, str], name: str) -> dict[int, dict[str, str]]:
    """``Name.N.Field`` parameters: N -> field -> value."""
    out: dict[int, dict[str, str]] = {}
    prefix = f"{name}."
    for key, value in p.items():
        if not key.startswith(prefix):
            continue
        n, _, field = key[len(prefix):].partition(".")
        if n.isdigit() and field:
            out.setdefault(int(n), {})[field] = value
    return out


def _check_tag_count(numbered: Mapping[int, Any]) -> None:
    if any(n < 1 or n > MAX_TAGS for n in numbered):
        raise EcsError("InvalidTagCount", "The specified tags are beyond the permitted "
                                          f"range (Tag.N: N from 1 to {MAX_TAGS}).")


def _tags(p: Mapping[str, str]) -> dict[str, str]:
    """CreateNetworkInterface's ``Tag.N.Key`` / ``Tag.N.Value``, checked as ECS does."""
    numbered = _numbered(p, "Tag")
    _check_tag_count(numbered)
    out: dict[str, str] = {}
    for n in sorted(numbered):
        key, value = numbered[n].get("Key", ""), numbered[n].get("Value", "")
        if (not key or len(key) > MAX_TAG_LENGTH or key.lower().startswith(("aliyun", "acs:"))
                or "http://" in key or "https://" in key):
            raise EcsError("InvalidTagKey.Malformed", f"The specified Tag.{n}.Key is not "
                                                      "valid.")
        if len(value) > MAX_TAG_LENGTH or "http://" in value or "https://" in value:
            raise EcsError("InvalidTagValue.Malformed", f"The specified Tag.{n}.Value is not "
                                                        "valid.")
        if key in out:
            raise EcsError("Duplicate.TagKey", f"The Tag.{n}.Key contains a duplicate key.")
        out[key] = value
    return out


def _tag_filter(p: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """DescribeNetworkInterfaces' ``Tag.N``: (key, value or None for the key alone)."""
    numbered = _numbered(p, "Tag")
    _check_tag_count(numbered)
    out: list[tuple[str, str | None]] = []
    for n in sorted(numbered):
        key = numbered[n].get("Key", "")
        if not key:
            raise EcsError("InvalidTagKey.Malformed", f"The specified Tag.{n}.Key is not "
                                                      "valid.")
        out.append((key, numbered[n].get("Value")))
    return out


def _list(p: Mapping[str, str], name: str) -> list[str]:
    out: list[tuple[int, str]] = []
    prefix = f"{name}."
    for key, value in p.items():
        if key.startswith(prefix) and key[len(prefix):].isdigit():
            out.append((int(key[len(prefix):]), value))
    if not out and p.get(name, "").startswith("["):
        try:
            parsed = json.loads(p[name])
        except ValueError:
            parsed = []
        return [str(v) for v in parsed]
    return [v for _, v in sorted(out)]


def _int(p: Mapping[str, str], name: str, default: int) -> int:
    raw = p.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise EcsError("InvalidParameter", f"{name} must be a number") from None


def _page(items: Sequence[_T], p: Mapping[str, str], key: Callable[[_T], str],
          most: int) -> tuple[list[_T], dict[str, Any]]:
    """One page of ``items`` (sorted by ``key``) as ECS pages a Describe: after
    ``NextToken`` (a token an earlier page returned: the key it ended at), ``MaxResults``
    of them (fewer than 10 or none: 10; more than ``most``: ``most``); or, the older way,
    page ``PageNumber`` of ``PageSize`` (1 to ``most``). The reply's ``NextToken`` is
    empty on the last page."""
    def size(name: str, low: int) -> int:
        wanted = _int(p, name, PAGE_DEFAULT)
        return min(most, max(low, wanted))

    if (p.get("NextToken") or "MaxResults" in p
            or not ("PageNumber" in p or "PageSize" in p)):
        token = p.get("NextToken") or ""
        if token and not token.startswith(_TOKEN):
            raise EcsError("InvalidParameter", "The specified NextToken is not valid.")
        after = token.removeprefix(_TOKEN)
        per = size("MaxResults", PAGE_DEFAULT)
        rest = [item for item in items if key(item) > after] if token else list(items)
        page = rest[:per]
        more = len(rest) > per
        return page, {"TotalCount": len(items),
                      "NextToken": f"{_TOKEN}{key(page[-1])}" if more else ""}
    number = _int(p, "PageNumber", 1)
    if number < 1:
        raise EcsError("InvalidParameter", "PageNumber must be 1 or more")
    per = size("PageSize", 1)
    page = list(items[(number - 1) * per:number * per])
    return page, {"TotalCount": len(items), "PageNumber": number, "PageSize": per,
                  "NextToken": ""}


def _drop_key(value: Any, key: str) -> Any:
    if isinstance(value, dict):
        return {k: _drop_key(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [_drop_key(v, key) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """``podnet sim ecs``: serve a loopback ECS until interrupted; prints its URL."""
    parser = argparse.ArgumentParser(prog="podnet sim ecs")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--rate", type=float, default=None, help="calls/s per API")
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vswitch", action="append", default=[],
                        help="ID=CIDR (repeatable); default vsw-sim-1=10.0.0.0/16")
    parser.add_argument("--instance", action="append", default=[],
                        help="ID[=TYPE] (repeatable)")
    parser.add_argument("--instances", type=int, default=0,
                        help="also add this many instances, i-ecs0000, i-ecs0001, ...")
    parser.add_argument("--instance-type", default="ecs.g7.large",
                        help="the type of --instances' instances and of an --instance "
                             "given without one")
    args = parser.parse_args(argv)
    sim = EcsSimulator(host=args.host, port=args.port, latency=args.latency_ms / 1000,
                       rate=args.rate, fault_rate=args.fault_rate, seed=args.seed)
    for spec in args.vswitch or ["vsw-sim-1=10.0.0.0/16"]:
        vid, _, cidr = spec.partition("=")
        sim.add_vswitch(vid, cidr)
    for spec in args.instance:
        iid, _, itype = spec.partition("=")
        sim.add_instance(iid, itype or args.instance_type)
    for i in range(args.instances):
        sim.add_instance(f"i-ecs{i:04d}", args.instance_type)
    sim.start()
    print(sim.url, flush=True)
    try:
        _serve_until_interrupted()
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    return 0


def _serve_until_interrupted() -> None:
    threading.Event().wait()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
