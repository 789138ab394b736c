"""The provider gateway: the one way core calls its plugins.

**Routed calls.** A call for a provider reaches the plugin that declared it
(``podnet_register_provider``) and the plugins that declare no provider (hook wrappers
such as the test kit's fault injector, policy plugins), never another provider's plugin
(:meth:`Providers.hook <podnet.core.plugin.Providers.hook>`): routing decides who
answers, so no provider checks the name it is called for. Each routed call, one typed
method per hook:

- is checked against the fence first (a replica that may no longer lead calls nothing,
  reads included: nothing may act on them);
- is counted (``stats.provider_calls``), timed (``metrics.provider_call``) and runs in a
  CLIENT span, child of the current transition;
- has whatever the provider raised, other than podnet's own errors, turned into a
  :class:`ProviderError` whose kind ``podnet_classify_error`` (routed too) gives;
- has its answer checked where core relies on its shape (:mod:`podnet.core.validate`).

The calls the node pool reconciler makes to a provider's cloud are gated by core's token
bucket for that provider (:meth:`ProviderGateway.admit`), unless the provider takes the
per-API buckets it was handed at start (``podnet_cloud_limiter``) before each request.

Set-up (``podnet_configure``, through :meth:`Providers.configure
<podnet.core.plugin.Providers.configure>` before the gateway exists, and
``podnet_cloud_limiter``) and the ``podnet_node_removed`` notification are routed but
neither fenced nor traced: they happen before this replica may lead, or make no cloud
call.

**Routing is data.** Each hookspec declares whether it is routed or broadcast
(:data:`podnet.hookspecs.routing.ROUTING`); a routed call here is refused
(:class:`~podnet.core.plugin.MisroutedCall`) unless its hook is routed and its arguments
name the provider it is routed to, and a broadcast unless its hook is a broadcast.

**Broadcasts.** What is every plugin's business goes to every plugin: which provider
serves a node (``podnet_select_provider``), which extra networks a pod attaches to
(``podnet_select_networks``), and each transition (``podnet_transition``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import cast

from podnet.core.clock import Clock
from podnet.core.cluster.port import ApiError, Conflict, NotFound
from podnet.core.errors import ErrorKind, NotLeader, PodnetError, ProviderError, one_line
from podnet.core.fence import Fence
from podnet.core.metrics import Metrics
from podnet.core.models import NodeInfo, PodInfo
from podnet.core.plugin import DirectHook, MisroutedCall, Providers
from podnet.core.policy import PoolPolicy
from podnet.core.ratelimit import CloudLimiter, CloudWait, TokenBucket
from podnet.core.tracing import Tracing
from podnet.core.validate import (
    check_address_space,
    check_allocation,
    check_entries,
    check_findings,
    check_inventory,
)
from podnet.hookspecs.netpol import PolicyRealization, ResolvedPolicy
from podnet.hookspecs.networks import Networks, SubnetInfo, SubnetRealization
from podnet.hookspecs.routing import ROUTING, Routing
from podnet.hookspecs.types import (
    AddressSpace,
    AllocateContext,
    Allocation,
    CheckResult,
    CloudInterface,
    Inventory,
    NetworkAttachment,
    NodeContext,
    NodeFinding,
    Plug,
    PlugContext,
    PlugResult,
    PodNetworkContext,
    PoolEntry,
    ReleaseResult,
    RouteResult,
    TransitionEvent,
    UnplugContext,
    VerifyResult,
)

log = logging.getLogger("podnet.gateway")

#: transient failures in a row after which a provider is said to have stopped answering
#: (one lost answer among many is no outage worth a line)
UNANSWERED_AFTER = 3


class ProviderGateway:
    """Every call core makes into a provider, and the broadcasts to every plugin."""

    def __init__(self, providers: Providers, *, policy: Callable[[str], PoolPolicy],
                 clock: Clock, fence: Fence, tracing: Tracing, calls: Counter[str]) -> None:
        self.providers = providers
        self.pm = providers.pm
        #: routed hook -> where its arguments name the provider (its routing)
        self._named_by = {name: entry.name_path() for name, entry in ROUTING.items()
                          if entry.routing is Routing.ROUTED}
        # broadcast hooks' callers, their routing checked once (plugins registered later
        # join them: pluggy keeps one caller per hook)
        self._select_provider = DirectHook(providers.pm,
                                           providers.broadcast("podnet_select_provider"))
        self._select_networks = DirectHook(providers.pm,
                                           providers.broadcast("podnet_select_networks"))
        self._transition = providers.broadcast("podnet_transition")
        self._policy = policy
        self.clock = clock
        self.fence = fence
        self.tracing = tracing
        #: calls made, by ``provider.api`` (the engine's ``stats.provider_calls``)
        self.calls = calls
        #: set by the host to observe durations; None costs nothing
        self.metrics: Metrics | None = None
        #: per provider, its buckets per cloud API; ``self_limited``: the providers that
        #: take them before each cloud call themselves (``podnet_cloud_limiter``)
        self.cloud_limiters = {
            name: CloudLimiter(policy(name).cloud_rate, clock, dict(policy(name).cloud_rates))
            for name in providers.infos}
        self.self_limited = {
            name for name, limiter in self.cloud_limiters.items()
            if self._takes_tokens(name, limiter)}
        #: core's own bucket per provider, for those that are not self-limited
        self._buckets: dict[str, TokenBucket] = {}
        self._buckets_lock = threading.Lock()
        #: per provider, its transient failures in a row (none while it answers); past
        #: UNANSWERED_AFTER it "stopped answering", said once, and once when it is back
        self._failing: dict[str, int] = {}
        self._silent: set[str] = set()

    def _takes_tokens(self, provider: str, limiter: CloudLimiter) -> bool:
        """``podnet_cloud_limiter``: whether the provider takes the limiter's tokens
        before each cloud call itself."""
        answer: bool | None = self.providers.hook(provider, "podnet_cloud_limiter")(
            provider=provider, limiter=limiter)
        return answer is True

    # --- the one call path ------------------------------------------------------------

    def _call(self, provider: str, hook: str, /, **kwargs: object) -> object:
        """Call one provider hook, routed, inside a CLIENT span; raises what the provider
        raised, classified."""
        api = hook.removeprefix("podnet_")
        # the hook's routing, as its hookspec declares it: a routed hook (else this
        # raises), called for the provider its arguments name
        route = self.providers.direct(provider, hook)
        head, through = self._named_by[hook]  # routed: providers.hook raised otherwise
        named = kwargs[head] if through is None else through(kwargs[head])
        if named != provider:
            raise MisroutedCall(f"{hook} names provider {named!r} but was routed to "
                                f"{provider!r}")
        # before the call, not after: a cloud write of a replica that may no longer lead
        # must not leave the process (reads are refused too: nothing may act on them)
        self.fence.check(f"{provider}.{api}")
        self.calls[f"{provider}.{api}"] += 1
        metrics = self.metrics
        started = time.perf_counter() if metrics is not None else 0.0
        outcome = "error"
        with self.tracing.client(provider, api):
            try:
                answer: object = route(**kwargs)
                outcome = "ok"
                if self._failing:  # the common case costs this one test
                    self._answered(provider)
                return answer
            except PodnetError as exc:
                kind = getattr(exc, "kind", None)
                if kind is ErrorKind.POOL_EMPTY or isinstance(exc, CloudWait):
                    # nothing idle to take yet, or the call put off to its slot under the
                    # client's rate limit (nothing was called): a wait, not a failure
                    outcome = "waiting"
                elif kind is ErrorKind.TRANSIENT:
                    self._unanswered(provider, api, exc)
                raise
            except ApiError:
                raise
            except Exception as exc:
                # the provider boundary: past it, every error carries a kind core acts on
                kind = self.classify(provider, exc)
                # one line: SDK errors may carry whole tracebacks into conditions
                error = ProviderError(kind, one_line(f"{type(exc).__name__}: {exc}"),
                                      code=getattr(exc, "code", None))
                if kind is ErrorKind.TRANSIENT:
                    self._unanswered(provider, api, error)
                raise error from exc
            finally:
                if metrics is not None:
                    metrics.provider_call(provider, api, time.perf_counter() - started,
                                          outcome)

    def _unanswered(self, provider: str, api: str, exc: BaseException) -> None:
        """A transient failure (a timeout, a refused connection, a 5xx): the provider
        stopped answering once there were UNANSWERED_AFTER in a row."""
        failures = self._failing.get(provider, 0) + 1
        self._failing[provider] = failures
        if failures >= UNANSWERED_AFTER and provider not in self._silent:
            self._silent.add(provider)
            log.warning("provider %s stopped answering: %d calls in a row failed, the last "
                        "(%s) with %s", provider, failures, api, exc)

    def _answered(self, provider: str) -> None:
        if self._failing.pop(provider, None) is not None and provider in self._silent:
            self._silent.discard(provider)
            log.info("provider %s answers again", provider)

    def classify(self, provider: str, exc: BaseException) -> ErrorKind:
        """The kind of an error a call to ``provider`` raised: podnet's own and the API
        server's by their type, anything else as the provider classifies it
        (``transient`` when it does not)."""
        if isinstance(exc, ProviderError):
            return exc.kind
        if isinstance(exc, Conflict):
            return ErrorKind.CONFLICT
        if isinstance(exc, NotFound):
            return ErrorKind.NOT_FOUND
        if isinstance(exc, ApiError):
            return ErrorKind.TRANSIENT
        kind = self.classify_error(provider, exc)
        return kind if kind is not None else ErrorKind.TRANSIENT

    def classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        """``podnet_classify_error``: the provider's kind for its own error, or None."""
        try:
            kind: str | None = self.providers.hook(provider, "podnet_classify_error")(
                provider=provider, error=error)
        except Exception:  # a broken classifier must not hide the original error
            log.exception("podnet_classify_error failed for %s", provider)
            return None
        return ErrorKind(kind) if kind is not None else None

    # --- the cloud rate limit ---------------------------------------------------------

    def admit(self, provider: str) -> float:
        """Core's token bucket for ``provider``, taken before each of its pool and
        interface calls.

        :return: 0 when a token was taken; else the seconds until one is there (the
        caller requeues for then instead of sleeping on a worker). A provider that takes
        its per-API buckets itself (``podnet_cloud_limiter``) is not limited twice: 0 at
        once.
        """
        if provider in self.self_limited:
            return 0.0
        with self._buckets_lock:
            bucket = self._buckets.get(provider)
            if bucket is None:
                bucket = self._buckets[provider] = TokenBucket.from_policy(
                    self._policy(provider).cloud_rate, self.clock)
        if bucket.try_acquire():
            return 0.0
        return max((1.0 - bucket.available()) / bucket.rate, 0.001)

    def buckets(self) -> dict[str, TokenBucket]:
        """Core's own buckets, by provider (metrics: the time calls waited on them)."""
        with self._buckets_lock:
            return dict(self._buckets)

    # --- routed: a node's pool and interfaces -----------------------------------------

    def node_inventory(self, provider: str, node: NodeContext) -> Inventory | None:
        """``podnet_node_inventory``, checked; None when the provider gave none."""
        answer = self._call(provider, "podnet_node_inventory", provider=provider, node=node)
        return None if answer is None else check_inventory(provider, answer)

    def pool_grow(self, provider: str, node: NodeContext, interface: CloudInterface | None,
                  count: int, subnet: str | None) -> list[PoolEntry]:
        """``podnet_pool_grow``: the entries added, checked (none when no answer)."""
        answer = self._call(provider, "podnet_pool_grow", provider=provider, node=node,
                            interface=interface, count=count, subnet=subnet)
        return check_entries(provider, "pool_grow", answer)

    def pool_shrink(self, provider: str, node: NodeContext, entries: Sequence[PoolEntry]
                    ) -> Sequence[str] | None:
        """``podnet_pool_shrink``: the addresses now gone."""
        answer = self._call(provider, "podnet_pool_shrink", provider=provider, node=node,
                            entries=entries)
        return cast("Sequence[str] | None", answer)

    def interface_create(self, provider: str, node: NodeContext, subnet: str | None,
                         ip_count: int) -> CloudInterface | None:
        """``podnet_interface_create``: the interface made, or None."""
        answer = self._call(provider, "podnet_interface_create", provider=provider,
                            node=node, subnet=subnet, ip_count=ip_count)
        return cast("CloudInterface | None", answer)

    def interface_dispose(self, provider: str, node: NodeContext, interface: CloudInterface
                          ) -> bool | None:
        """``podnet_interface_dispose``: True once the interface is gone."""
        answer = self._call(provider, "podnet_interface_dispose", provider=provider,
                            node=node, interface=interface)
        return cast("bool | None", answer)

    def node_check(self, provider: str, node: NodeContext) -> tuple[NodeFinding, ...]:
        """``podnet_node_check``: its findings, checked, each once (none when no
        plugin checks the provider's nodes)."""
        answer = self._call(provider, "podnet_node_check", provider=provider, node=node)
        return check_findings(provider, answer)

    def node_removed(self, provider: str, node: str) -> None:
        """``podnet_node_removed``, a notification: each plugin it reaches on its own, as
        transition listeners are, so one that raises does not keep the others from
        hearing it."""
        kwargs = {"provider": provider, "node": node}
        for impl in self.providers.hook(provider, "podnet_node_removed").get_hookimpls():
            try:
                impl.function(**{k: v for k, v in kwargs.items() if k in impl.argnames})
            except Exception:
                log.exception("podnet_node_removed(%s, %s) of plugin %s failed",
                              provider, node, impl.plugin_name)

    # --- routed: the networks declared as objects ----------------------------------------

    def subnet_parameters(self, provider: str, subnet: SubnetInfo) -> SubnetRealization | None:
        """``podnet_subnet_parameters``: what the provider realized for ``subnet`` (None:
        the parameters are accepted as they are). An InvalidRequest names the parameter;
        anything else it raised is classified as every provider error is."""
        answer = self._call(provider, "podnet_subnet_parameters", provider=provider,
                            subnet=subnet)
        if answer is not None and not isinstance(answer, SubnetRealization):
            raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} answered "
                                f"podnet_subnet_parameters with {type(answer).__name__}, "
                                "not a SubnetRealization")
        return answer

    def networks_changed(self, provider: str, networks: Networks) -> None:
        """``podnet_networks_changed``, a notification: traced and counted as every call;
        what a plugin raises is logged, never the caller's failure (the set stays
        published; a fenced replica's NotLeader still stops it)."""
        try:
            self._call(provider, "podnet_networks_changed", provider=provider,
                       networks=networks)
        except NotLeader:
            raise
        except Exception:
            log.exception("podnet_networks_changed(%s, revision %d) failed", provider,
                          networks.revision)

    def config_networks(self, provider: str) -> Networks | None:
        """``podnet_config_networks``: the networks the provider's config section declares
        (the migration to objects), or None."""
        answer = self._call(provider, "podnet_config_networks", provider=provider)
        return cast("Networks | None", answer)

    # --- routed: NetworkPolicy -------------------------------------------------------------

    def network_policy(self, provider: str, key: str, policy: ResolvedPolicy | None
                       ) -> PolicyRealization:
        """``podnet_network_policy``: program policy ``key`` for ``provider``'s pods as
        ``policy`` says (None: remove it). What the provider answered; no answer is
        programmed, as the hook says."""
        answer = self._call(provider, "podnet_network_policy", provider=provider, key=key,
                            policy=policy)
        if answer is None:
            return PolicyRealization(programmed=True)
        if not isinstance(answer, PolicyRealization):
            raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} answered "
                                f"podnet_network_policy with {type(answer).__name__}, "
                                "not a PolicyRealization")
        return answer

    def network_policy_keys(self, provider: str) -> frozenset[str] | None:
        """``podnet_network_policy_keys``: the policies ``provider`` has something
        programmed for; None when it enforces none."""
        answer = self._call(provider, "podnet_network_policy_keys", provider=provider)
        if answer is None:
            return None
        if isinstance(answer, str | bytes) or not isinstance(answer, Collection) or not all(
                isinstance(k, str) for k in answer):
            raise ProviderError(ErrorKind.FATAL, f"provider {provider!r} answered "
                                "podnet_network_policy_keys with "
                                f"{type(answer).__name__}, not a collection of keys")
        return frozenset(answer)

    # --- routed: one pod network ------------------------------------------------------

    def address_space(self, provider: str, node: NodeContext) -> AddressSpace | None:
        """``podnet_address_space``: what a pool provider serves on ``node``, checked;
        None when it does not say (it serves plain requests only)."""
        answer = self._call(provider, "podnet_address_space", provider=provider, node=node)
        return check_address_space(provider, answer)

    def allocate(self, provider: str, context: AllocateContext) -> Allocation | None:
        """``podnet_allocate``: the allocation, checked against the record's requests;
        None when the provider did not allocate."""
        answer = self._call(provider, "podnet_allocate", context=context)
        if answer is None:
            return None
        return check_allocation(provider, answer, context.pod_network.spec.requests)

    def route(self, provider: str, context: PodNetworkContext) -> RouteResult | None:
        """``podnet_route``."""
        return cast("RouteResult | None", self._call(provider, "podnet_route", context=context))

    def verify(self, provider: str, context: PodNetworkContext) -> VerifyResult | None:
        """``podnet_verify``."""
        return cast("VerifyResult | None",
                    self._call(provider, "podnet_verify", context=context))

    def release(self, provider: str, context: PodNetworkContext) -> ReleaseResult | None:
        """``podnet_release``."""
        return cast("ReleaseResult | None",
                    self._call(provider, "podnet_release", context=context))

    def hold_address(self, provider: str, context: PodNetworkContext) -> bool | None:
        """``podnet_hold_address``: True holds, False releases, None leaves it to core."""
        return cast("bool | None",
                    self._call(provider, "podnet_hold_address", context=context))

    def sweep(self, provider: str, owners: Collection[str], remove: Collection[str]
              ) -> Sequence[str] | None:
        """``podnet_sweep``: what of the provider's no owner claims now. A provider that
        implements no sweep is not called (a call nobody answers would count as the
        provider answering, and hide a cloud that stopped)."""
        if not self.providers.hook(provider, "podnet_sweep").get_hookimpls():
            return None
        answer = self._call(provider, "podnet_sweep", provider=provider, owners=owners,
                            remove=remove)
        return cast("Sequence[str] | None", answer)

    # --- routed: the dataplane on a node (the node agent's calls) -----------------------

    def plug(self, context: PlugContext) -> PlugResult:
        """``podnet_plug`` of the record's provider: the interface made; a provider that
        made none is an error the runtime retries."""
        provider = context.pod_network.spec.provider
        answer = self._call(provider, "podnet_plug", context=context)
        if not isinstance(answer, PlugResult):
            raise ProviderError(ErrorKind.TRANSIENT,
                                f"provider {provider!r} plugged no interface "
                                f"({context.if_name} of {context.pod_network.key})")
        return answer

    def unplug(self, context: UnplugContext) -> None:
        """``podnet_unplug`` of ``context.provider``."""
        self._call(context.provider, "podnet_unplug", context=context)

    def check_plug(self, context: PlugContext) -> CheckResult | None:
        """``podnet_check_plug`` of the record's provider (None: it does not check)."""
        return cast("CheckResult | None", self._call(
            context.pod_network.spec.provider, "podnet_check_plug", context=context))

    def plugs(self, provider: str, node: str) -> list[Plug]:
        """``podnet_plugs``: what ``provider``'s dataplane has plugged on this host."""
        answer = self._call(provider, "podnet_plugs", provider=provider, node=node)
        return list(cast("Sequence[Plug] | None", answer) or ())

    # --- broadcasts -------------------------------------------------------------------

    def select_provider(self, node: NodeInfo) -> str | None:
        """``podnet_select_provider``: the provider a plugin claims ``node`` for, when
        that is a provider core knows."""
        chosen = self.claim(node)
        if chosen is not None and chosen in self.providers:
            return str(chosen)
        return None

    def claim(self, node: NodeInfo) -> object:
        """What a plugin answered ``podnet_select_provider`` for ``node``, as it is (a
        name core may not know; None: no plugin claims it)."""
        chosen: object = self._select_provider(node=node)
        return chosen

    def select_networks(self, pod: PodInfo, node: NodeInfo) -> list[NetworkAttachment]:
        """``podnet_select_networks``: every plugin's attachments for the pod, in order."""
        answers: list[Sequence[NetworkAttachment] | None] = (
            self._select_networks(pod=pod, node=node))
        return [attachment for answer in answers for attachment in answer or ()]

    def transition_listened(self) -> bool:
        """Whether any plugin listens to ``podnet_transition`` now (one may register at
        any time): the event is built only then."""
        return bool(self._transition.get_hookimpls())

    def notify_transition(self, event: TransitionEvent) -> None:
        """``podnet_transition`` to every listener, each on its own: one that raises must
        not keep the event from the others (a plain hook call stops at the first error)."""
        for impl in self._transition.get_hookimpls():
            try:
                impl.function(**({"event": event} if "event" in impl.argnames else {}))
            except Exception:
                log.exception("podnet_transition listener %s failed", impl.plugin_name)
