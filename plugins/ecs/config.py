"""The ECS provider's config section (``providers.ecs``), its defaults and the ECS error
codes it classifies: what the provider reads before it makes any cloud call."""


from __future__ import annotations

import re

import attrs

from podnet.hookspecs.errors import ErrorKind
from podnet.hookspecs.policy import PoolPolicy, RateLimit
from podnet.hookspecs.sections import (
    between,
    ids,
    invalid,
    one_of,
    rule,
    section,
    text,
)

NAME = "ecs"

INSTANCE_LABEL = "podnet.io/ecs-instance-id"
TYPE_LABEL = "node.kubernetes.io/instance-type"
#: the node's zone, as the Alibaba Cloud controller manager labels it
ZONE_LABEL = "topology.kubernetes.io/zone"
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
TRANSITIONAL = frozenset({"Attaching", "Detaching", "Creating", "Deleting"})
#: how long a settled, unwanted state may be a replica's lag before it counts as final
SETTLED_GRACE = 2.0
#: how many ids DescribeInstances takes (``InstanceIds``), and the most a page holds
MAX_INSTANCE_IDS = 100
PROVIDER_ID = re.compile(r"^(?:[a-z]+://)?(?:[a-z0-9-]+\.)?(i-[A-Za-z0-9]+)$")


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
    # ``vswitches`` may be empty: Subnet objects then name the vSwitches
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


