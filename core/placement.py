"""Which provider serves what, and with which policy: the operator's config over the
providers' own defaults and claims."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podnet.core.config import NodeProviderRule, apply_policy
from podnet.core.gateway import ProviderGateway
from podnet.core.models import NodeInfo
from podnet.core.plugin import Providers
from podnet.core.policy import PoolPolicy


class Policies:
    """Each provider's pool policy: its own defaults with the config's overrides merged
    over them (checked once, here)."""

    def __init__(self, providers: Providers,
                 overrides: Mapping[str, Mapping[str, Any]]) -> None:
        self._providers = providers
        self._policies = {
            name: apply_policy(f"policies.{name}", info.policy, dict(overrides.get(name, {})))
            for name, info in providers.infos.items()
        }

    def __call__(self, provider: str) -> PoolPolicy:
        try:
            return self._policies[provider]
        except KeyError:
            return self._providers[provider].policy


class Placement:
    """The registered providers, their policies, the provider of each node and of each
    attachment network."""

    def __init__(self, providers: Providers, policy: Policies, gateway: ProviderGateway, *,
                 default_provider: str | None, node_providers: tuple[NodeProviderRule, ...],
                 networks: Mapping[str, str]) -> None:
        self.providers = providers
        #: ``policy(provider)``: that provider's pool policy
        self.policy = policy
        self._gateway = gateway
        self.default_provider = default_provider
        self.node_providers = node_providers
        #: attachment network -> provider, from config
        self.networks = networks

    def provider_for_node(self, node: NodeInfo) -> str | None:
        """The operator's rules first, then the plugins' claims, then the default."""
        for rule in self.node_providers:
            if rule.selector.matches(node.labels):
                return rule.provider
        chosen = self._gateway.select_provider(node)
        if chosen is not None:
            return chosen
        return self.default_provider

    def why_unserved(self, node: NodeInfo) -> tuple[str, str]:
        """Why no provider serves ``node`` (:meth:`provider_for_node` chose none): an
        Event's reason and message, naming the config keys that would place it."""
        rules = (f"none of the {len(self.node_providers)} nodeProviders rules matches its "
                 "labels" if self.node_providers else "no nodeProviders rules are set")
        known = ", ".join(sorted(self.providers.names())) or "none"
        claim = self._gateway.claim(node)
        if claim is not None:
            return "UnknownProvider", (
                f"node {node.name}: no provider serves it, so its pods get no network: a "
                f"plugin claims it for provider {claim!r}, which is not registered "
                f"(providers: {known}); {rules}, and no defaultProvider is set")
        return "NoProvider", (
            f"node {node.name}: no provider serves it, so its pods get no network: {rules}, "
            f"no provider claims it, and no defaultProvider is set (providers: {known})")
