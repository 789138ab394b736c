"""The ECS provider's config section (``providers.ecs``), its defaults and the ECS error
codes it classifies: what the provider reads before it makes any cloud call."""


from __future__ import annotations

import re
from typing import Any

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
#: DescribeNetworkInterfaces' ``Type`` of a trunk ENI, and the ``InstanceType`` value
#: CreateNetworkInterface makes one with (its default is ``Secondary``)
TRUNK = "Trunk"
#: the error code AttachNetworkInterface answers a trunk ENI with on an instance type
#: that does not support trunking
NO_TRUNKING = "InvalidOperation.InstanceTypeNotSupportEniTrunking"

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
    #: a trunk ENI attached to an instance whose type does not support trunking
    NO_TRUNKING: ErrorKind.FATAL,
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


#: where the provider's credentials come from (``credentials``), each through
#: ``alibabacloud_credentials``: a RAM user's access key; the SDK's default chain
#: (environment, OIDC from the environment, profiles, the instance's RAM role); the
#: instance's RAM role from the metadata service; RRSA's AssumeRoleWithOIDC
CREDENTIAL_MODES = ("access_key", "default", "ecs_ram_role", "oidc_role_arn")
#: the keys each mode reads besides ``credentials`` (any other mode refuses them)
MODE_KEYS: dict[str, tuple[str, ...]] = {
    "access_key": ("access_key_id", "access_key_secret"),
    "ecs_ram_role": ("role_name",),
    "oidc_role_arn": ("role_arn", "oidc_provider_arn", "oidc_token_file", "sts_endpoint"),
}
#: the environment variables the SDK reads in place of a key left out
ENVIRONMENT: dict[str, str] = {
    "access_key_id": "ALIBABA_CLOUD_ACCESS_KEY_ID",
    "access_key_secret": "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
    "role_arn": "ALIBABA_CLOUD_ROLE_ARN",
    "oidc_provider_arn": "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
    "oidc_token_file": "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
}
ROLE_ARN = re.compile(r"^acs:ram::\d+:role/[A-Za-z0-9._@-]{1,64}$")
OIDC_PROVIDER_ARN = re.compile(r"^acs:ram::\d+:oidc-provider/[A-Za-z0-9._-]{1,128}$")
PROXY = re.compile(r"^https?://[^/\s]+$")
#: RAM role session names: 2..64 of letters, digits, ``.@-_``
SESSION_NAME = re.compile(r"^[A-Za-z0-9.@_-]{2,64}$")


def _matching(pattern: re.Pattern[str], what: str) -> Any:
    def check(value: str) -> str:
        value = value.strip()
        if not pattern.match(value):
            raise ValueError(f"expected {what}, got {value!r}")
        return value

    return rule(check)


def _check_config(cfg: EcsConfig) -> None:
    # ``vswitches`` may be empty: Subnet objects then name the vSwitches
    if not cfg.security_groups:
        raise invalid("at least one security group id is required", "security_groups")
    mine = MODE_KEYS.get(cfg.credentials, ())
    for mode, keys in MODE_KEYS.items():
        for key in keys:
            if key not in mine and getattr(cfg, key) is not None:
                raise invalid(f"only read with credentials: {mode} (credentials is "
                              f"{cfg.credentials})", key)


@section(check=_check_config)
@attrs.frozen
class EcsConfig:
    """The section ``providers.ecs`` (see the module docstring)."""

    endpoint: str = attrs.field(default="ecs.aliyuncs.com", metadata=text(strip=True))
    region: str = attrs.field(default="cn-hangzhou", metadata=text(strip=True))
    protocol: str = attrs.field(default="https", metadata=one_of("http", "https"))
    #: where the credentials come from: one of CREDENTIAL_MODES
    credentials: str = attrs.field(default="access_key", metadata=one_of(*CREDENTIAL_MODES))
    #: access_key: else the environment's ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET; never
    #: kept here
    access_key_id: str | None = attrs.field(default=None, repr=False,
                                            metadata=text(secret=True))
    access_key_secret: str | None = attrs.field(default=None, repr=False,
                                                metadata=text(secret=True))
    #: ecs_ram_role: the instance's RAM role (None: the one the metadata service names)
    role_name: str | None = attrs.field(default=None, metadata=_matching(
        re.compile(r"^[A-Za-z0-9._@-]{1,64}$"), "a RAM role name"))
    #: oidc_role_arn (RRSA): else the environment's ALIBABA_CLOUD_ROLE_ARN,
    #: ALIBABA_CLOUD_OIDC_PROVIDER_ARN and ALIBABA_CLOUD_OIDC_TOKEN_FILE
    role_arn: str | None = attrs.field(default=None, metadata=_matching(
        ROLE_ARN, "a role ARN acs:ram::<account>:role/<name>"))
    oidc_provider_arn: str | None = attrs.field(default=None, metadata=_matching(
        OIDC_PROVIDER_ARN, "an OIDC provider ARN acs:ram::<account>:oidc-provider/<name>"))
    oidc_token_file: str | None = attrs.field(default=None, metadata=text(strip=True))
    #: the STS endpoint AssumeRoleWithOIDC goes to (None: the SDK's, sts.aliyuncs.com or
    #: the environment's ALIBABA_CLOUD_STS_REGION)
    sts_endpoint: str | None = attrs.field(default=None, metadata=text(strip=True))
    role_session_name: str = attrs.field(default="podnet", metadata=_matching(
        SESSION_NAME, "2 to 64 letters, digits or .@-_"))
    #: seconds an AssumeRoleWithOIDC session lasts (the SDK renews it 15 min before)
    session_duration: int = attrs.field(default=3600, metadata=between(900, 43200))
    #: the HTTP proxy the SDK reaches the metadata service and STS through (the SDK's
    #: HttpOptions.proxy; None: none)
    credentials_proxy: str | None = attrs.field(default=None, metadata=_matching(
        PROXY, "a proxy URL http://host:port"))
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
    #: Terway's ``enable_eni_trunking``: each node whose instance type supports trunking
    #: gets a trunk ENI at pool build, when none is attached and an adapter is free; the
    #: adapter is reserved (one secondary ENI fewer for pod addresses), never disposed
    trunk: bool = False

    @property
    def dual(self) -> bool:
        return self.ip_stack == "dual"


