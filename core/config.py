"""The controller's config file: which providers, their sections, policies, host settings.

YAML (or JSON, which is YAML)::

    defaultProvider: reference
    nodeProviders:            # first match wins, before any plugin's own claim
      - provider: bbc
        nodeSelector: "node.kubernetes.io/instance-type in (bbc.g5.c32m128)"
    networks:                 # attachment networks a pod names in podnet.io/networks
      overlay: {provider: ovn}
    providers:
      reference:              # the section handed to podnet_configure (may hold secrets)
        latency_ms: 0
    policies:
      reference:              # PoolPolicy overrides, snake_case or camelCase keys
        minIdle: 2
        maxIdle: 8
    workers: 4
    workerStallSeconds: 120     # /healthz fails when ready keys wait this long for a worker
    listen: 127.0.0.1:8080
    networkPolicy: podnet       # or none: NetworkPolicy is left to an engine chained after podnet
    leaderElection:
      enabled: true
      namespace: kube-system
      name: podnet
      leaseDurationSeconds: 15
      renewDeadlineSeconds: 10
      retryPeriodSeconds: 2

Every error names the offending key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from podnet.core.annotations import is_dns1123_label
from podnet.core.cluster.port import Invalid
from podnet.core.cluster.selectors import LabelSelector, parse_label_selector
from podnet.core.errors import ConfigError
from podnet.core.policy import Backoff, PoolPolicy, RateLimit

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _snake(key: str) -> str:
    return _CAMEL.sub("_", key).lower()


@attrs.frozen
class LeaderElectionConfig:
    enabled: bool = True
    namespace: str = "kube-system"
    name: str = "podnet"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@attrs.frozen
class NodeProviderRule:
    """Nodes whose labels match ``selector`` have their default network served by
    ``provider``."""

    provider: str
    selector: LabelSelector
    #: the selector as written, for messages
    text: str = ""


@attrs.frozen
class Config:
    default_provider: str | None = None
    node_providers: tuple[NodeProviderRule, ...] = ()
    #: attachment network name -> provider serving it
    networks: dict[str, str] = attrs.field(factory=dict)
    providers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    #: validated PoolPolicy overrides per provider, merged over the provider's defaults
    policies: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    workers: int = 4
    #: health fails when keys are ready and no worker took one for this long (seconds)
    worker_stall_seconds: float = 120.0
    listen: str = "127.0.0.1:8080"
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    #: who enforces NetworkPolicy: ``podnet`` (its providers and node agents), or
    #: ``none`` (another engine chained after podnet, e.g. Cilium or Calico in
    #: policy-only mode: podnet programs nothing and removes what it had)
    network_policy: str = "podnet"


_TOP_KEYS = {"defaultProvider", "nodeProviders", "networks", "providers", "policies", "workers",
             "workerStallSeconds", "listen", "leaderElection", "networkPolicy"}
#: the values of ``networkPolicy``
NETWORK_POLICY_ENGINES = ("podnet", "none")
_LEADER_KEYS = {
    "enabled": ("enabled", bool),
    "namespace": ("namespace", str),
    "name": ("name", str),
    "leaseDurationSeconds": ("lease_duration", float),
    "renewDeadlineSeconds": ("renew_deadline", float),
    "retryPeriodSeconds": ("retry_period", float),
}


def load_config(path: str | Path) -> Config:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError("--config", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError("--config", f"{path} is not valid YAML: {exc}") from None
    if data is None:
        # an empty file is a mount or a key gone wrong (a ConfigMap key the volume does
        # not have), never a wish for every default: that is written ``{}``
        raise ConfigError("--config", f"{path} is empty (no settings, only comments or "
                          "blank lines); write {} to mean every default")
    return parse_config(data)


def with_overrides(config: Config, *, workers: int | None = None,
                   listen: str | None = None) -> Config:
    """``config`` with the command line's values over it, each checked as the file's is
    (``--workers 0`` is refused, not read as "the config's value")."""
    if workers is not None:
        _check_workers("--workers", workers)
        config = attrs.evolve(config, workers=workers)
    if listen is not None:
        parse_listen("--listen", listen)
        config = attrs.evolve(config, listen=listen)
    return config


def _check_workers(key: str, workers: object) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 256:
        raise ConfigError(key, f"expected a whole number from 1 to 256, got {workers!r}")


def parse_config(data: object) -> Config:
    if not isinstance(data, Mapping):
        raise ConfigError("(top level)", f"expected a mapping, got {type(data).__name__}")
    for key in data:
        if key not in _TOP_KEYS:
            raise ConfigError(str(key), f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})")
    providers = data.get("providers") or {}
    if not isinstance(providers, Mapping):
        raise ConfigError("providers", "expected a mapping of provider name to section")
    sections: dict[str, dict[str, Any]] = {}
    for name, section in providers.items():
        if not isinstance(section, Mapping | None):
            raise ConfigError(f"providers.{name}", "expected a mapping")
        sections[str(name)] = dict(section or {})
    default = data.get("defaultProvider")
    if default is not None and not isinstance(default, str):
        raise ConfigError("defaultProvider", f"expected a provider name, got {default!r}")
    policies_raw = data.get("policies") or {}
    if not isinstance(policies_raw, Mapping):
        raise ConfigError("policies", "expected a mapping of provider name to policy")
    policies = {str(name): policy_overrides(f"policies.{name}", raw)
                for name, raw in policies_raw.items()}
    workers = data.get("workers", 4)
    _check_workers("workers", workers)
    stall = data.get("workerStallSeconds", 120.0)
    if isinstance(stall, bool) or not isinstance(stall, int | float) or not stall > 0:
        raise ConfigError("workerStallSeconds", f"expected seconds > 0, got {stall!r}")
    listen = data.get("listen", "127.0.0.1:8080")
    parse_listen("listen", listen)
    network_policy = data.get("networkPolicy", "podnet")
    if network_policy not in NETWORK_POLICY_ENGINES:
        raise ConfigError("networkPolicy", f"expected podnet or none, got {network_policy!r}")
    return Config(
        default_provider=default, node_providers=_node_providers(data.get("nodeProviders")),
        networks=_networks(data.get("networks")), providers=sections, policies=policies,
        workers=workers, worker_stall_seconds=float(stall), listen=listen,
        leader_election=_leader(data.get("leaderElection") or {}),
        network_policy=network_policy,
    )


def _node_providers(raw: object) -> tuple[NodeProviderRule, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("nodeProviders", "expected a list of {provider, nodeSelector}")
    rules = []
    for i, item in enumerate(raw):
        where = f"nodeProviders[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(where, "expected a mapping with provider and nodeSelector")
        for key in item:
            if key not in ("provider", "nodeSelector"):
                raise ConfigError(f"{where}.{key}", "unknown key (known: nodeSelector, provider)")
        provider = item.get("provider")
        if not isinstance(provider, str) or not provider:
            raise ConfigError(f"{where}.provider", f"expected a provider name, got {provider!r}")
        text = item.get("nodeSelector")
        if not isinstance(text, str) or not text.strip():
            # an empty selector would claim every node: say what was meant instead
            raise ConfigError(f"{where}.nodeSelector", "expected a label selector such as "
                              "'node.kubernetes.io/instance-type in (a,b)'; to serve every "
                              "node, set defaultProvider")
        try:
            selector = parse_label_selector(text)
        except Invalid as exc:
            raise ConfigError(f"{where}.nodeSelector", str(exc)) from None
        rules.append(NodeProviderRule(provider=provider, selector=selector, text=text))
    return tuple(rules)


def _networks(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ConfigError("networks", "expected a mapping of network name to {provider}")
    out: dict[str, str] = {}
    for name, item in raw.items():
        where = f"networks.{name}"
        if not isinstance(name, str) or not is_dns1123_label(name) or name == "default":
            raise ConfigError(where, "a network name is a DNS-1123 label other than 'default'")
        if not isinstance(item, Mapping):
            raise ConfigError(where, "expected a mapping with provider")
        for key in item:
            if key != "provider":
                raise ConfigError(f"{where}.{key}", "unknown key (known: provider)")
        provider = item.get("provider")
        if not isinstance(provider, str) or not provider:
            raise ConfigError(f"{where}.provider", f"expected a provider name, got {provider!r}")
        out[name] = provider
    return out


def parse_listen(key: str, value: object) -> tuple[str, int]:
    if not isinstance(value, str) or ":" not in value:
        raise ConfigError(key, f"expected HOST:PORT, got {value!r}")
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(key, f"bad port in {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _leader(raw: object) -> LeaderElectionConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError("leaderElection", "expected a mapping")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _LEADER_KEYS:
            raise ConfigError(f"leaderElection.{key}", "unknown key")
        field, typ = _LEADER_KEYS[key]
        if typ is float and isinstance(value, int | float) and not isinstance(value, bool):
            if value <= 0:
                raise ConfigError(f"leaderElection.{key}", f"must be > 0, got {value}")
            values[field] = float(value)
        elif isinstance(value, typ) and not (typ is not bool and isinstance(value, bool)):
            values[field] = value
        else:
            raise ConfigError(f"leaderElection.{key}", f"expected {typ.__name__}, got {value!r}")
    cfg = LeaderElectionConfig(**values)
    if not cfg.lease_duration > cfg.renew_deadline > cfg.retry_period:
        raise ConfigError("leaderElection", "needs leaseDuration > renewDeadline > retryPeriod")
    return cfg


_NESTED = {"cloud_rate": RateLimit, "grow_backoff": Backoff}


def policy_overrides(where: str, raw: object) -> dict[str, Any]:
    """PoolPolicy overrides from a mapping; unknown keys and bad values name the key."""
    if not isinstance(raw, Mapping):
        raise ConfigError(where, "expected a mapping")
    fields = {f.name: f for f in attrs.fields(PoolPolicy)}
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = _snake(str(key))
        if name not in fields:
            raise ConfigError(f"{where}.{key}", "unknown policy key")
        if name == "cloud_rates":
            if not isinstance(value, Mapping):
                raise ConfigError(f"{where}.{key}", "expected a mapping of API name to "
                                                    "{rate, burst}")
            values[name] = tuple(
                (str(api), _nested(f"{where}.{key}.{api}", RateLimit, limit))
                for api, limit in value.items())
        elif name in _NESTED:
            values[name] = _nested(f"{where}.{key}", _NESTED[name], value)
        elif isinstance(value, bool) != (fields[name].type in (bool, "bool")):
            raise ConfigError(f"{where}.{key}", f"wrong type: {value!r}")
        elif not isinstance(value, int | float):
            raise ConfigError(f"{where}.{key}", f"expected a number, got {value!r}")
        else:
            values[name] = value
    apply_policy(where, PoolPolicy(), values)  # each value valid on its own
    return values


def _nested(where: str, cls: type[Any], value: object) -> Any:
    if not isinstance(value, Mapping):
        raise ConfigError(where, "expected a mapping")
    nested = {_snake(str(k)): v for k, v in value.items()}
    known = {f.name for f in attrs.fields(cls)}
    for k in nested:
        if k not in known:
            raise ConfigError(f"{where}.{k}", "unknown key")
    return _build(where, cls, nested)


def apply_policy(where: str, base: PoolPolicy, overrides: Mapping[str, Any]) -> PoolPolicy:
    """The provider's defaults with the operator's overrides; checked as a whole."""
    policy: PoolPolicy = _build(where, PoolPolicy, dict(overrides), base)
    return policy


def _build(where: str, cls: type[Any], values: dict[str, Any], base: Any = None) -> Any:
    try:
        return attrs.evolve(base, **values) if base is not None else cls(**values)
    except ConfigError as exc:
        raise ConfigError(f"{where}.{exc.key}", str(exc).split(": ", 1)[-1]) from None
