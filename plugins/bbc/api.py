"""The BBC and VPC calls the BBC provider makes, through bce-python-sdk with its retries
off (core owns backoff, batching and rate limits), and how their errors are classified."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from baidubce.bce_client_configuration import BceClientConfiguration
from baidubce.exception import BceError
from baidubce.http import http_methods
from baidubce.retry.retry_policy import NoRetryPolicy

from podnet.hookspecs.errors import ErrorKind, ProviderError
from podnet.hookspecs.types import CloudLimiter
from podnet.plugins.bbc.credentials import (
    RenewedKeys,
    SignedBbcClient,
    SignedSubnetClient,
    StaticKeys,
    endpoint_url,
    error_code,
    reply_json,
)
from podnet.plugins.bbc.replies import (
    Port,
    SubnetInfo,
    bad_reply,
    parse_added,
    parse_port,
    parse_subnet,
)

#: the APIs as BBC meters them (one bucket each): the names core's limiter keys on
API_ADD = "batchAddIp"
API_DEL = "batchDelIp"
API_ADD_CROSS = "batchAddIpCrossSubnet"
API_PORT = "vpcPort"
API_SUBNET = "getSubnet"
API_LIST = "listInstances"

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


def has_code(error: BaseException, needle: str) -> bool:
    code, _ = error_code(error)
    return bool(code) and needle in str(code)


class BbcApi:
    """The BBC and VPC calls podnet makes, through bce-python-sdk, retries off. ``keys``
    (else the key given) signs each request."""

    def __init__(self, endpoint: str, access_key_id: str, secret_access_key: str, *,
                 vpc_endpoint: str | None = None, protocol: str = "http",
                 timeout_ms: int = 10_000, keys: StaticKeys | RenewedKeys | None = None
                 ) -> None:
        source = keys or StaticKeys(access_key_id, secret_access_key)

        def config(host: str) -> BceClientConfiguration:
            return BceClientConfiguration(
                endpoint=endpoint_url(host, protocol), retry_policy=NoRetryPolicy(),
                connection_timeout_in_mills=timeout_ms)

        # the SDK logs request headers and signing input (the Authorization header names the
        # access key) at DEBUG: keep it quiet unless someone set its level on purpose
        sdk_log = logging.getLogger("baidubce")
        if sdk_log.level == logging.NOTSET:
            sdk_log.setLevel(logging.INFO)
        self.bbc = SignedBbcClient(config(endpoint))
        self.bbc.keys = source
        self.vpc = SignedSubnetClient(config(vpc_endpoint or endpoint))
        self.vpc.keys = source
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

    _json = staticmethod(reply_json)

    def add_ips(self, instance_id: str, count: int | None = None,
                ips: Sequence[str] | None = None) -> list[str]:
        with self._request(API_ADD):
            reply = self.bbc.batch_add_ip(
                instance_id, private_ips=list(ips) if ips is not None else None,
                secondary_private_ip_address_count=count)
        return parse_added(self._json(reply), "batchAddIp")

    def add_ipv6(self, instance_id: str, count: int | None = None,
                 ips: Sequence[str] | None = None) -> list[str]:
        """IPv6 addresses to the instance's ENI, in its subnet's IPv6 CIDR: ``batchAddIp``
        with ``allocateMultiIpv6Addr`` (sent as such: older SDKs lack the keyword)."""
        body: dict[str, Any] = {"instanceId": instance_id, "allocateMultiIpv6Addr": True}
        if ips is not None:
            body["privateIps"] = list(ips)
        else:
            body["secondaryPrivateIpAddressCount"] = count
        with self._request(API_ADD):
            reply = self.bbc._send_request(http_methods.PUT, b"/instance/batchAddIp",
                                           json.dumps(body))
        added = parse_added(self._json(reply), "batchAddIp")
        for i, ip in enumerate(added):
            if ipaddress.ip_address(ip).version != 6:
                raise bad_reply("batchAddIp", f"privateIps[{i}]",
                                f"asked for IPv6 addresses, got {ip}")
        return added

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
                raise bad_reply("listInstances", "instances", "not a list")
            for item in page:
                ident = item.get("id") if isinstance(item, dict) else None
                if not isinstance(ident, str) or not ident:
                    raise bad_reply("listInstances", "instances[].id", "missing")
                found.append(ident)
            marker = reply.get("nextMarker")
            if not reply.get("isTruncated") or not marker:
                return found

    def subnet(self, subnet_id: str) -> SubnetInfo:
        with self._request(API_SUBNET):
            reply = self.vpc.get_subnet(subnet_id)
        return parse_subnet(self._json(reply), subnet_id)
