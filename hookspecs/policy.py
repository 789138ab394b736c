"""Pool, batching, rate-limit, backoff and inhibit policies, with the reference defaults.

Policies are core's; each provider supplies its own defaults through ``ProviderInfo`` and
operators override them per provider in the config file. Durations are seconds.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from podnet.hookspecs.errors import ConfigError


def _non_negative(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ConfigError(attribute.name, f"must be >= 0, got {value!r}")


def _positive(_inst: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ConfigError(attribute.name, f"must be > 0, got {value!r}")


@attrs.frozen
class RateLimit:
    """A token bucket: ``rate`` tokens per second, at most ``burst`` saved up."""

    rate: float = attrs.field(default=10.0, validator=_positive)
    burst: int = attrs.field(default=5, validator=_positive)


@attrs.frozen
class Backoff:
    """Exponential backoff ``base * factor**n`` capped at ``cap``, for any failure count."""

    base: float = attrs.field(default=2.0, validator=_positive)
    factor: float = attrs.field(default=2.0, validator=_positive)
    cap: float = attrs.field(default=60.0, validator=_positive)

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        exponent = failures - 1
        # past the exponent that reaches the cap, the power itself would overflow a float
        # (2.0 ** 1024 raises) long before a key stops failing: saturate without computing it
        if self.factor > 1 and exponent >= (
                (math.log(self.cap) - math.log(self.base)) / math.log(self.factor)):
            return float(self.cap)
        return float(min(self.cap, self.base * self.factor ** exponent))


@attrs.frozen
class PoolPolicy:
    """How one provider's node pools behave. Defaults follow the reference systems."""

    #: idle addresses kept ready on each node
    min_idle: int = attrs.field(default=0, validator=_non_negative)
    max_idle: int = attrs.field(default=6, validator=_non_negative)
    #: addresses asked for in one cloud call (BBC: 4; ECS: up to 10)
    batch_size: int = attrs.field(default=4, validator=_positive)
    max_batch_size: int = attrs.field(default=10, validator=_positive)
    #: halve the batch on quota / exhaustion errors (BBC's rule)
    halve_batch_on_quota: bool = True
    #: gather demand this long before one grow call (ECS: 0.3 s)
    aggregation_window: float = attrs.field(default=0.0, validator=_non_negative)
    #: a released address is not handed out again before this
    reuse_cooldown: float = attrs.field(default=30.0, validator=_non_negative)
    #: an idle address younger than this is not given back: a cloud whose reads lag its
    #: writes may answer "not found" for it, and that answer must not be believed (BBC: 3 s)
    min_ip_lifetime: float = attrs.field(default=0.0, validator=_non_negative)
    #: cloud addresses nobody owns and no pool holds are deleted after this
    leaked_ip_expiry: float = attrs.field(default=600.0, validator=_non_negative)
    #: interface blocked this long when its subnet has no address left
    inhibit_exhausted: float = attrs.field(default=600.0, validator=_non_negative)
    #: interface blocked this long on an interface-count or IP-count limit
    inhibit_quota: float = attrs.field(default=60.0, validator=_non_negative)
    #: top-up to min_idle / trim to max_idle period
    refill_period: float = attrs.field(default=5.0, validator=_positive)
    #: routed pod networks are verified against the provider this often
    verify_period: float = attrs.field(default=300.0, validator=_positive)
    #: each node is checked by the provider (``podnet_node_check``) this often; 0: never
    node_check_period: float = attrs.field(default=300.0, validator=_non_negative)
    #: garbage collection period
    gc_period: float = attrs.field(default=60.0, validator=_positive)
    #: interface disposals one node pass makes before it yields (a node's interface
    #: operations never overlap: its queue key never runs twice at once)
    max_interface_ops: int = attrs.field(default=3, validator=_positive)
    #: a sticky pod's address is held this long after its pod is gone
    sticky_hold: float = attrs.field(default=300.0, validator=_non_negative)
    #: how long a released address waits for its node agent to report the old interface
    #: gone before the wait is logged as overdue (since 0.3.0). It frees only an address
    #: no agent wrote its host onto (nodes without an agent report do not wait at all);
    #: one a host is named for waits for that host's word or the Node's deletion (0.5.0)
    unplug_timeout: float = attrs.field(default=120.0, validator=_non_negative)
    #: client-side bucket of each cloud API (action) a provider calls, when
    #: ``cloud_rates`` names none for it
    cloud_rate: RateLimit = RateLimit()
    #: per-API overrides of ``cloud_rate``: (API name, its bucket) pairs; in the config
    #: file a mapping ``cloudRates: {DescribeNetworkInterfaces: {rate: 5, burst: 2}}``
    cloud_rates: tuple[tuple[str, RateLimit], ...] = ()
    grow_backoff: Backoff = Backoff()
    #: cap each grow backoff at cap / (log2(batch_size)+1) / #subnets (CCE's BBC rule)
    backoff_cap_per_try: bool = False

    def __attrs_post_init__(self) -> None:
        if self.min_idle > self.max_idle:
            raise ConfigError("min_idle", f"{self.min_idle} exceeds max_idle {self.max_idle}")
        if self.batch_size > self.max_batch_size:
            raise ConfigError(
                "batch_size", f"{self.batch_size} exceeds max_batch_size {self.max_batch_size}"
            )

    def clamp(self, capacity: int) -> PoolPolicy:
        """Bounds no larger than what the node can physically hold."""
        max_idle = min(self.max_idle, capacity)
        min_idle = min(self.min_idle, max_idle)
        return attrs.evolve(self, min_idle=min_idle, max_idle=max_idle)

