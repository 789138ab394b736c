"""A loopback Baidu BBC simulator that speaks the wire format bce-python-sdk sends.

Routes (the SDK adds ``/v1``; signatures are never checked; with an ``auth`` hook,
``podnet.sim.cloudauth.CredentialAuthority``, the ``bce-auth-v1/<access key>/...`` key and
the ``x-bce-security-token`` header are: an unknown key is refused 403
``InvalidAccessKeyId``, a temporary key without its own token or past its expiry 403
``AccessDenied``; with ``secret_of`` too, the ``bce-auth-v1`` signature is checked, 400
``SignatureDoesNotMatch``):

- ``PUT /v1/instance/batchAddIp`` ``{instanceId, privateIps?, secondaryPrivateIpAddressCount?,
  allocateMultiIpv6Addr?}`` -> ``{privateIps: [...]}``; with ``allocateMultiIpv6Addr: true``
  the count (or the named addresses) are IPv6 ones, from the IPv6 CIDR of the ENI's subnet
  (a subnet without one: 400 ``BadRequest``), held up to the instance's IPv6 cap
  (``ExceedLimitException``); ``batchDelIp`` takes addresses of either family
- ``PUT /v1/instance/batchDelIp`` ``{instanceId, privateIps}``
- ``PUT /v1/instance/batchAddIpCrossSubnet``
  ``{instanceId, singleEniAndSubentIps: [{eniId, subnetId, secondaryPrivateIpAddressCount}]}``
- ``GET /v1/vpcPort/{instanceId}`` -> ``{eniId, macAddress, subnetId, status, privateIpSet,
  ipv6PrivateIpSet}`` (the IPv6 addresses apart, as BCE's ENI replies list them)
- ``GET /v1/subnet/{subnetId}`` -> ``{subnet: {subnetId, zoneName, cidr, ..., availableIp}}``
  (an unknown id: 404 ``NoSuchObject``) and ``GET /v1/subnet`` (``marker`` / ``maxKeys``
  pages, ``subnetIds`` / ``zoneName`` / ``vpcId`` filters)

The model: instances with one primary ENI and a cap on secondary addresses of each family,
subnets with a CIDR (maybe an IPv6 CIDR too) and finite free addresses. Errors are
``{code, message, requestId}`` with BBC's codes. Latency, per-API token buckets, random
and scripted faults; :meth:`addresses` is the ground truth (both families).
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import ipaddress
import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, quote, urlsplit

import attrs

API_ADD = "batchAddIp"
API_DEL = "batchDelIp"
API_ADD_CROSS = "batchAddIpCrossSubnet"
API_PORT = "vpcPort"
API_SUBNET = "getSubnet"
API_SUBNETS = "listSubnets"
API_LIST = "listInstances"
WRITE_APIS = (API_ADD, API_DEL, API_ADD_CROSS)


class SimError(Exception):
    """An error answer: HTTP status, BBC code, message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


@attrs.define
class _Subnet:
    id: str
    network: ipaddress.IPv4Network
    used: set[str] = attrs.field(factory=set)
    zone: str = "cn-bj-a"
    #: the subnet's IPv6 CIDR (a /64), None: the subnet has no IPv6
    network6: ipaddress.IPv6Network | None = None
    #: IPv6 addresses the subnet still hands out (a /64 is never full; tests shrink it)
    free6: int = 1 << 16

    def hosts_free(self) -> int:
        # the network address, the gateway (first host) and broadcast are never handed out
        return max(0, self.network.num_addresses - 3) - len(self.used)

    def take(self, count: int) -> list[str]:
        out: list[str] = []
        hosts = self.network.hosts()
        next(hosts, None)  # gateway
        for host in hosts:
            if len(out) >= count:
                break
            ip = str(host)
            if ip not in self.used:
                out.append(ip)
        self.used.update(out)
        return out

    def hosts6_free(self) -> int:
        return self.free6 if self.network6 is not None else 0

    def take6(self, count: int) -> list[str]:
        assert self.network6 is not None
        out: list[str] = []
        hosts = self.network6.hosts()
        next(hosts, None)  # the gateway
        for host in hosts:
            if len(out) >= count:
                break
            ip = str(host)
            if ip not in self.used:
                out.append(ip)
        self.used.update(out)
        self.free6 -= len(out)
        return out


@attrs.define
class _Instance:
    id: str
    eni_id: str
    mac: str
    subnet: str
    primary_ip: str
    ip_cap: int
    #: secondary address (either family) -> its subnet, in the order added
    ips: dict[str, str] = attrs.field(factory=dict)
    #: IPv6 addresses the instance can hold (None: as many as IPv4 ones)
    ipv6_cap: int | None = None

    def held(self, v6: bool) -> int:
        return sum(1 for ip in self.ips if (":" in ip) == v6)

    def cap(self, v6: bool) -> int:
        return (self.ip_cap if self.ipv6_cap is None else self.ipv6_cap) if v6 else self.ip_cap


class _Bucket:
    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False


class BbcSimulator:
    """The simulated cloud; :meth:`start` serves it on loopback HTTP."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0,
                 rate: float | None = None, fault_rate: float = 0.0, seed: int = 0,
                 auth: Callable[[str, str | None], str] | None = None,
                 secret_of: Callable[[str], str | None] | None = None) -> None:
        self.host = host
        #: checks each HTTP request's access key and session token (None: all pass)
        self.auth = auth
        #: a key's secret, to check the request's signature with (None: not checked)
        self.secret_of = secret_of
        #: access key ids of the requests that passed ``auth``, in order
        self.callers: list[str] = []
        self.port = port
        self.latency = latency
        #: per-API requests per second (burst = max(1, rate)); None: unlimited
        self.rate = rate
        self.fault_rate = fault_rate
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.instances: dict[str, _Instance] = {}
        self.subnets: dict[str, _Subnet] = {}
        self.calls: Counter[str] = Counter()
        #: calls answered ``RateLimit`` by the per-API rate limit, by API
        self.throttled: Counter[str] = Counter()
        #: errors to answer on the next calls of one API: api -> [(status, code)]
        self.scripted: dict[str, list[tuple[int, str]]] = {}
        #: malformed replies, for tests: (api, instance id) -> change of the reply
        self.mangle: dict[tuple[str, str], Callable[[dict[str, Any]], dict[str, Any]]] = {}
        self._buckets: dict[str, _Bucket] = {}
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ------------------------------------------------------------------

    def start(self) -> BbcSimulator:
        sim = self

        class Handler(_Handler):
            simulator = sim

        self._server = ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        server = self._server
        self._thread = threading.Thread(target=lambda: server.serve_forever(poll_interval=0.02),
                                        name="bbc-sim", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    @property
    def endpoint(self) -> str:
        """``host:port``, as BceClientConfiguration takes it."""
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def __enter__(self) -> BbcSimulator:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # --- the model, for tests --------------------------------------------------------

    def add_subnet(self, subnet_id: str, cidr: str, zone: str = "cn-bj-a",
                   ipv6_cidr: str | None = None) -> None:
        with self.lock:
            network = ipaddress.ip_network(cidr, strict=True)
            if not isinstance(network, ipaddress.IPv4Network):
                raise ValueError("IPv4 subnets only")
            network6 = ipaddress.ip_network(ipv6_cidr, strict=True) if ipv6_cidr else None
            if network6 is not None and not isinstance(network6, ipaddress.IPv6Network):
                raise ValueError(f"ipv6_cidr {ipv6_cidr} is not an IPv6 network")
            self.subnets[subnet_id] = _Subnet(subnet_id, network, zone=zone,
                                              network6=network6)

    def add_instance(self, instance_id: str, subnet_id: str, ip_cap: int = 40,
                     ipv6_cap: int | None = None) -> None:
        """An instance with its primary ENI in ``subnet_id`` (idempotent)."""
        with self.lock:
            if instance_id in self.instances:
                return
            subnet = self.subnets[subnet_id]
            got = subnet.take(1)
            if not got:
                raise ValueError(f"subnet {subnet_id} is full")
            digest = hashlib.blake2s(instance_id.encode(), digest_size=5).digest()
            self.instances[instance_id] = _Instance(
                id=instance_id, eni_id=f"eni-{digest.hex()[:10]}",
                mac="fa:" + ":".join(f"{b:02x}" for b in digest), subnet=subnet_id,
                primary_ip=got[0], ip_cap=ip_cap, ipv6_cap=ipv6_cap)

    def remove_instance(self, instance_id: str) -> None:
        with self.lock:
            inst = self.instances.pop(instance_id, None)
            if inst is None:
                return
            for ip, sid in [(inst.primary_ip, inst.subnet), *inst.ips.items()]:
                self._free(sid, ip)

    def reset(self) -> None:
        """Forget every instance, address, fault and count; subnets stay (empty)."""
        with self.lock:
            self.instances.clear()
            for subnet in self.subnets.values():
                subnet.free6 += sum(1 for ip in subnet.used if ":" in ip)
                subnet.used.clear()
            self.calls.clear()
            self.throttled.clear()
            self.scripted.clear()
            self.mangle.clear()
            self._buckets.clear()
            self.fault_rate = 0.0

    def add_outside(self, instance_id: str, ip: str | None = None) -> str:
        """An address added to the instance by someone else than podnet."""
        with self.lock:
            inst = self.instances[instance_id]
            subnet = self.subnets[inst.subnet]
            if ip is None:
                ip = subnet.take(1)[0]
            else:
                subnet.used.add(ip)
            inst.ips[ip] = inst.subnet
            return ip

    def attached(self) -> list[dict[str, Any]]:
        """Ground truth for a simulated VPC (``podnet.sim.vpc``): each instance's
        one ENI with its MAC, its subnet's gateway and its IPv4 addresses (the primary
        first), its IPv6 addresses and its subnet's IPv6 gateway."""
        with self.lock:
            out = []
            for i in self.instances.values():
                net6 = self.subnets[i.subnet].network6
                out.append({"id": i.eni_id, "instance": i.id, "mac": i.mac,
                            "gateway": str(next(self.subnets[i.subnet].network.hosts())),
                            "addresses": [i.primary_ip, *(a for a in i.ips if ":" not in a)],
                            "ipv6": [a for a in i.ips if ":" in a],
                            "gateway6": str(next(net6.hosts())) if net6 is not None else None})
            return out

    def script(self, api: str, code: str, status: int = 400, times: int = 1) -> None:
        """Answer the next ``times`` calls of ``api`` with the error ``code``."""
        with self.lock:
            self.scripted.setdefault(api, []).extend([(status, code)] * times)

    def addresses(self) -> dict[str, str]:
        """Ground truth: every secondary address -> instance id."""
        with self.lock:
            return {ip: inst.id for inst in self.instances.values() for ip in inst.ips}

    def forget(self, addresses: Sequence[str]) -> None:
        """Ground truth: the cloud loses these secondary addresses (restored from a
        backup, say): gone from their instances, free in their subnets, nobody told."""
        gone = set(addresses)
        with self.lock:
            for inst in self.instances.values():
                for ip in [ip for ip in inst.ips if ip in gone]:
                    self._free(inst.ips.pop(ip), ip)

    def _free(self, subnet_id: str, ip: str) -> None:
        subnet = self.subnets[subnet_id]
        if ip in subnet.used:
            subnet.used.discard(ip)
            if ":" in ip:
                subnet.free6 += 1

    def eni_of(self, instance_id: str) -> str:
        with self.lock:
            return self.instances[instance_id].eni_id

    def free_ips(self, subnet_id: str) -> int:
        with self.lock:
            return self.subnets[subnet_id].hosts_free()

    # --- the API ---------------------------------------------------------------------

    def _gate(self, api: str) -> None:
        """Count, delay, rate-limit and fault one call (before any change)."""
        with self.lock:
            self.calls[api] += 1
        if self.latency:
            time.sleep(self.latency)
        with self.lock:
            if self.rate is not None:
                bucket = self._buckets.get(api)
                if bucket is None:
                    bucket = self._buckets[api] = _Bucket(self.rate, max(1.0, self.rate))
                if not bucket.take():
                    self.throttled[api] += 1
                    raise SimError(429, "RateLimit", f"{api}: too many requests")
            scripted = self.scripted.get(api)
            if scripted:
                status, code = scripted.pop(0)
                raise SimError(status, code, f"{api} failed (scripted)")
            if self.fault_rate and self.random.random() < self.fault_rate:
                if self.random.random() < 0.5:
                    raise SimError(429, "RateLimit", f"{api}: too many requests (injected)")
                raise SimError(500, "InternalError", f"{api} failed (injected)")

    def _instance(self, body: dict[str, Any]) -> _Instance:
        iid = body.get("instanceId")
        if not isinstance(iid, str) or not iid:
            raise SimError(400, "MalformedJSON", "instanceId is required")
        inst = self.instances.get(iid)
        if inst is None:
            raise SimError(404, "InstanceNotFound", f"instance {iid} does not exist")
        return inst

    @staticmethod
    def _count(value: Any, name: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SimError(400, "MalformedJSON", f"{name} must be a positive integer")
        return value

    def _room(self, inst: _Instance, count: int, v6: bool = False) -> None:
        held, cap = inst.held(v6), inst.cap(v6)
        if held + count > cap:
            family = "IPv6" if v6 else "secondary"
            raise SimError(400, "ExceedLimitException",
                           f"instance {inst.id} can hold {cap} {family} IPs, has "
                           f"{held}, asked for {count} more")

    def batch_add(self, body: dict[str, Any]) -> dict[str, Any]:
        self._gate(API_ADD)
        with self.lock:
            inst = self._instance(body)
            subnet = self.subnets[inst.subnet]
            v6 = body.get("allocateMultiIpv6Addr")
            if v6 is not None and not isinstance(v6, bool):
                raise SimError(400, "MalformedJSON", "allocateMultiIpv6Addr must be a boolean")
            if v6:
                return self._batch_add_v6(inst, subnet, body)
            wanted = body.get("privateIps")
            if wanted is not None:
                if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
                    raise SimError(400, "MalformedJSON", "privateIps must be a list of IPs")
                self._room(inst, len(wanted))
                for ip in wanted:
                    try:
                        addr = ipaddress.ip_address(ip)
                    except ValueError:
                        raise SimError(400, "InvalidPrivateIp", f"{ip} is not an IP") from None
                    if addr not in subnet.network:
                        raise SimError(400, "InvalidPrivateIp",
                                       f"{ip} is outside subnet {subnet.id}")
                    if ip in subnet.used:
                        raise SimError(400, "PrivateIpInUseException", f"{ip} is in use")
                subnet.used.update(wanted)
                for ip in wanted:
                    inst.ips[ip] = subnet.id
                return {"privateIps": list(wanted)}
            count = self._count(body.get("secondaryPrivateIpAddressCount"),
                                "secondaryPrivateIpAddressCount")
            self._room(inst, count)
            if subnet.hosts_free() < count:
                raise SimError(400, "SubnetHasNoMoreIpException",
                               f"subnet {subnet.id} has {subnet.hosts_free()} free IPs")
            got = subnet.take(count)
            for ip in got:
                inst.ips[ip] = subnet.id
            return {"privateIps": got}

    def _batch_add_v6(self, inst: _Instance, subnet: _Subnet,
                      body: dict[str, Any]) -> dict[str, Any]:
        if subnet.network6 is None:
            raise SimError(400, "BadRequest", f"subnet {subnet.id} has no IPv6 CIDR")
        wanted = body.get("privateIps")
        if wanted is not None:
            if not isinstance(wanted, list) or not all(isinstance(i, str) for i in wanted):
                raise SimError(400, "MalformedJSON", "privateIps must be a list of IPs")
            self._room(inst, len(wanted), v6=True)
            for ip in wanted:
                try:
                    addr = ipaddress.ip_address(ip)
                except ValueError:
                    raise SimError(400, "InvalidPrivateIp", f"{ip} is not an IP") from None
                if addr not in subnet.network6:
                    raise SimError(400, "InvalidPrivateIp",
                                   f"{ip} is outside the IPv6 CIDR of subnet {subnet.id}")
                if str(addr) in subnet.used:
                    raise SimError(400, "PrivateIpInUseException", f"{ip} is in use")
            got = [str(ipaddress.ip_address(ip)) for ip in wanted]
            subnet.used.update(got)
            subnet.free6 -= len(got)
        else:
            count = self._count(body.get("secondaryPrivateIpAddressCount"),
                                "secondaryPrivateIpAddressCount")
            self._room(inst, count, v6=True)
            if subnet.hosts6_free() < count:
                raise SimError(400, "SubnetHasNoMoreIpException",
                               f"subnet {subnet.id} has {subnet.hosts6_free()} free IPv6 IPs")
            got = subnet.take6(count)
        for ip in got:
            inst.ips[ip] = subnet.id
        return {"privateIps": got}

    def batch_add_cross(self, body: dict[str, Any]) -> dict[str, Any]:
        self._gate(API_ADD_CROSS)
        with self.lock:
            inst = self._instance(body)
            items = body.get("singleEniAndSubentIps")
            if not isinstance(items, list) or not items:
                raise SimError(400, "MalformedJSON", "singleEniAndSubentIps is required")
            plan: list[tuple[_Subnet, int]] = []
            for item in items:
                if not isinstance(item, dict):
                    raise SimError(400, "MalformedJSON", "singleEniAndSubentIps items")
                if item.get("eniId") != inst.eni_id:
                    raise SimError(400, "EniIdException",
                                   f"ENI {item.get('eniId')} is not on {inst.id}")
                subnet = self.subnets.get(str(item.get("subnetId")))
                if subnet is None:
                    raise SimError(400, "InvalidSubnetId",
                                   f"subnet {item.get('subnetId')} does not exist")
                plan.append((subnet, self._count(item.get("secondaryPrivateIpAddressCount"),
                                                 "secondaryPrivateIpAddressCount")))
            self._room(inst, sum(n for _, n in plan))
            for subnet, n in plan:
                if subnet.hosts_free() < n:
                    raise SimError(400, "SubnetHasNoMoreIpException",
                                   f"subnet {subnet.id} has {subnet.hosts_free()} free IPs")
            out: list[str] = []
            for subnet, n in plan:
                for ip in subnet.take(n):
                    inst.ips[ip] = subnet.id
                    out.append(ip)
            return {"privateIps": out}

    def batch_delete(self, body: dict[str, Any]) -> dict[str, Any]:
        self._gate(API_DEL)
        with self.lock:
            inst = self._instance(body)
            ips = body.get("privateIps")
            if not isinstance(ips, list) or not ips or not all(isinstance(i, str) for i in ips):
                raise SimError(400, "MalformedJSON", "privateIps must be a non-empty list")
            missing = [ip for ip in ips if ip not in inst.ips]
            if missing:
                raise SimError(400, "PrivateIPNotExistException",
                               f"{', '.join(missing)} not on instance {inst.id}")
            for ip in ips:
                self._free(inst.ips.pop(ip), ip)
            return {}

    def vpc_port(self, instance_id: str) -> dict[str, Any]:
        self._gate(API_PORT)
        with self.lock:
            inst = self._instance({"instanceId": instance_id})
            ips = [{"privateIpAddress": inst.primary_ip, "subnetId": inst.subnet,
                    "primary": True}]
            ips += [{"privateIpAddress": ip, "subnetId": sid, "primary": False}
                    for ip, sid in inst.ips.items() if ":" not in ip]
            ips6 = [{"privateIpAddress": ip, "subnetId": sid, "primary": False}
                    for ip, sid in inst.ips.items() if ":" in ip]
            answer = {"eniId": inst.eni_id, "macAddress": inst.mac, "subnetId": inst.subnet,
                      "status": "available", "privateIpSet": ips, "ipv6PrivateIpSet": ips6}
            change = self.mangle.get((API_PORT, instance_id))
            return change(answer) if change is not None else answer

    def list_instances(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """``GET /v1/instance``: the instances, by id, a page of ``maxKeys`` after
        ``marker`` (an id)."""
        self._gate(API_LIST)
        marker = (query.get("marker") or [""])[0]
        keys = int((query.get("maxKeys") or ["1000"])[0])
        with self.lock:
            ids = sorted(i for i in self.instances if i > marker)
            page, rest = ids[:keys], ids[keys:]
            return {"marker": marker, "isTruncated": bool(rest),
                    "nextMarker": page[-1] if rest else "", "maxKeys": keys,
                    "instances": [{"id": i, "internalIp": self.instances[i].primary_ip}
                                  for i in page]}

    def _subnet_json(self, subnet: _Subnet) -> dict[str, Any]:
        return {"subnetId": subnet.id, "name": subnet.id, "zoneName": subnet.zone,
                "cidr": str(subnet.network), "vpcId": "vpc-sim", "subnetType": "BCC",
                "description": "", "availableIp": subnet.hosts_free(),
                "ipv6Cidr": str(subnet.network6) if subnet.network6 is not None else ""}

    def get_subnet(self, subnet_id: str) -> dict[str, Any]:
        self._gate(API_SUBNET)
        with self.lock:
            subnet = self.subnets.get(subnet_id)
            if subnet is None:
                raise SimError(404, "NoSuchObject", f"subnet {subnet_id} does not exist")
            return {"subnet": self._subnet_json(subnet)}

    def list_subnets(self, query: dict[str, list[str]]) -> dict[str, Any]:
        """``GET /v1/subnet``: the subnets by id (``subnetIds``, ``zoneName`` and ``vpcId``
        narrow them down), a page of ``maxKeys`` (1 to 1000, 1000 by default) after
        ``marker`` (an id)."""
        self._gate(API_SUBNETS)

        def one(name: str) -> str:
            return (query.get(name) or [""])[0]

        try:
            keys = int(one("maxKeys") or "1000")
        except ValueError:
            raise SimError(400, "InvalidParameter", "maxKeys must be a number") from None
        if not 1 <= keys <= 1000:
            raise SimError(400, "InvalidParameter", "maxKeys must be between 1 and 1000")
        marker, zone, vpc = one("marker"), one("zoneName"), one("vpcId")
        with self.lock:
            wanted: set[str] | None = None
            if "subnetIds" in query:
                wanted = {s.strip("[]'\" ") for v in query["subnetIds"] for s in v.split(",")}
            if marker and marker not in self.subnets:
                raise SimError(400, "InvalidMarker", f"marker {marker} is not a subnet")
            found = sorted((s for s in self.subnets.values()
                            if (wanted is None or s.id in wanted)
                            and (not zone or s.zone == zone)
                            and (not vpc or vpc == "vpc-sim")
                            and (not marker or s.id >= marker)), key=lambda s: s.id)
            page, rest = found[:keys], found[keys:]
            return {"subnets": [self._subnet_json(s) for s in page], "marker": marker,
                    "isTruncated": bool(rest), "nextMarker": rest[0].id if rest else "",
                    "maxKeys": keys}

    def authenticate(self, headers: Mapping[str, str], method: str = "GET",
                     target: str = "/") -> None:
        """Refuse a request whose key or session token ``auth`` does not accept, or (with
        ``secret_of``) whose signature is not the key's (``headers``: names in lower
        case; ``target``: the request line's path and query)."""
        if self.auth is None:
            return
        parts = (headers.get("authorization") or "").split("/")
        key = parts[1] if len(parts) > 2 and parts[0] == "bce-auth-v1" else ""
        verdict = self.auth(key, headers.get("x-bce-security-token") or None)
        if verdict == "unknown-key":
            raise SimError(403, "InvalidAccessKeyId", "the access key id does not exist")
        if verdict == "expired":
            raise SimError(403, "AccessDenied", "the session token has expired")
        if verdict != "ok":
            raise SimError(403, "AccessDenied", "the session token is not the access key's")
        if self.secret_of is not None:
            secret = self.secret_of(key)
            if secret is None or not _signed_v1(method, target, headers, secret):
                raise SimError(400, "SignatureDoesNotMatch", "the signature does not match")
        with self.lock:
            self.callers.append(key)

    def handle(self, method: str, path: str, query: dict[str, list[str]],
               body: dict[str, Any]) -> dict[str, Any]:
        if method == "PUT" and path == "/v1/instance/batchAddIp":
            return self.batch_add(body)
        if method == "PUT" and path == "/v1/instance/batchDelIp":
            return self.batch_delete(body)
        if method == "PUT" and path == "/v1/instance/batchAddIpCrossSubnet":
            return self.batch_add_cross(body)
        if method == "GET" and path.startswith("/v1/vpcPort/"):
            return self.vpc_port(path.removeprefix("/v1/vpcPort/"))
        if method == "GET" and path == "/v1/instance":
            return self.list_instances(query)
        if method == "GET" and path == "/v1/subnet":
            return self.list_subnets(query)
        if method == "GET" and path.startswith("/v1/subnet/"):
            return self.get_subnet(path.removeprefix("/v1/subnet/"))
        raise SimError(404, "NotFound", f"no route {method} {path}")


def _normalized(text: str) -> str:
    """BCE's encoding: every byte but ``A-Za-z0-9-_.~`` as ``%XX``."""
    return quote(text, safe="-_.~")


#: the headers a ``bce-auth-v1`` signature covers when it names none (and every x-bce-)
_SIGNED_BY_DEFAULT = frozenset({"host", "content-md5", "content-length", "content-type"})


def _signed_v1(method: str, target: str, headers: Mapping[str, str], secret: str) -> bool:
    """Whether the ``bce-auth-v1/<key>/<time>/<seconds>/<headers>/<signature>``
    Authorization header signs this request with ``secret``."""
    parts = (headers.get("authorization") or "").split("/")
    if len(parts) != 6 or parts[0] != "bce-auth-v1":
        return False
    named = [h for h in parts[4].split(";") if h]
    key_info = "/".join(parts[:4])
    signing_key = hmac.new(secret.encode(), key_info.encode(), hashlib.sha256).hexdigest()
    path, _, query = target.partition("?")
    canonical_query = "&".join(sorted(f"{_normalized(k)}={_normalized(v)}" for k, v in
                                      parse_qsl(query, keep_blank_values=True)))
    canonical_headers = "\n".join(sorted(
        f"{_normalized(k)}:{_normalized(v.strip())}" for k, v in headers.items()
        if v.strip() and (k in named if named else
                          k.startswith("x-bce-") or k in _SIGNED_BY_DEFAULT)))
    to_sign = "\n".join([method, path, canonical_query, canonical_headers])
    expected = hmac.new(signing_key.encode(), to_sign.encode(), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts[5])


class _Handler(BaseHTTPRequestHandler):
    simulator: BbcSimulator
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: the SDK's requests carry authorization headers

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        request_id = str(uuid.uuid4())
        try:
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                raise SimError(400, "MalformedJSON", "the body is not JSON") from None
            if not isinstance(body, dict):
                raise SimError(400, "MalformedJSON", "the body is not an object")
            self.simulator.authenticate({k.lower(): v for k, v in self.headers.items()},
                                        method, self.path)
            answer = self.simulator.handle(method, parts.path, parse_qs(parts.query), body)
            status = 200
        except SimError as exc:
            status = exc.status
            answer = {"code": exc.code, "message": exc.message, "requestId": request_id}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-bce-request-id", request_id)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_POST(self) -> None:
        self._serve("POST")


def main(argv: Sequence[str] | None = None) -> int:
    """``podnet sim bbc``: serve a simulator with a few subnets and instances."""
    parser = argparse.ArgumentParser(prog="podnet sim bbc")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--instances", type=int, default=3)
    parser.add_argument("--ip-cap", type=int, default=40)
    args = parser.parse_args(argv)
    sim = BbcSimulator(args.host, args.port, args.latency_ms / 1000, args.rate,
                       args.fault_rate, args.seed)
    sim.add_subnet("sbn-a", "10.64.0.0/16")
    sim.add_subnet("sbn-b", "10.65.0.0/16")
    for i in range(args.instances):
        sim.add_instance(f"i-{i:04d}", "sbn-a", args.ip_cap)
    sim.start()
    print(sim.url, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        sim.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
