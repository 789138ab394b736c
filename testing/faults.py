"""The test kit's faults and witnesses: what a provider hook or the API server does wrong
on purpose, and what records that it happened.

:class:`FaultInjector` is a pluggy wrapper around the provider's hooks: it raises
:class:`Crash` (the process dies) or a provider error just before a hook runs or just
after it returned, when the cloud did the work but the controller never learnt of it.
:class:`LossyCluster` does the same to the API server: a write is committed and its
answer lost, or the controller dies right after it. :class:`HookRecorder` records every
hook call (pluggy's call monitoring) and every transition event (as a listener);
:class:`WriteCounter` counts the writes; :class:`TickingClock` is a fake clock that runs
a callback as it passes given moments.
"""


from __future__ import annotations

import builtins
from collections import Counter
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

import attrs
import pluggy

from podnet.core.clock import FakeClock
from podnet.core.cluster.port import (
    ApiError,
    Cluster,
    Kind,
    Obj,
    Propagation,
)
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import TransitionEvent

__all__ = [
    "EFFECT_HOOKS",
    "PROVIDER_HOOKS",
    "Crash",
    "FaultInjector",
    "HookCall",
    "HookRecorder",
    "LossyCluster",
    "TickingClock",
    "WriteCounter",
    "hook_name",
]

#: hooks that change something in the cloud or dataplane: the ones crashes are injected at
EFFECT_HOOKS: tuple[str, ...] = (
    "podnet_allocate",
    "podnet_route",
    "podnet_release",
    "podnet_pool_grow",
    "podnet_pool_shrink",
    "podnet_interface_create",
    "podnet_interface_dispose",
)
#: the hooks of a provider's cloud or dataplane work (counted in ``stats.provider_calls``)
PROVIDER_HOOKS: tuple[str, ...] = (*EFFECT_HOOKS, "podnet_node_inventory", "podnet_verify")

Moment = Literal["before", "after"]


def hook_name(hook: str) -> str:
    """``allocate`` or ``podnet_allocate`` -> ``podnet_allocate``."""
    return hook if hook.startswith("podnet_") else f"podnet_{hook}"


class Crash(BaseException):
    """The controller process dies here.

    A BaseException, so no ``except Exception`` in the engine swallows it: it unwinds
    the reconcile as a SIGKILL would end it, and :class:`World` restarts the engine.
    """


# --- hook-call recording ---------------------------------------------------------------


@attrs.define
class HookCall:
    name: str
    kwargs: dict[str, Any]
    result: Any = None
    error: BaseException | None = None
    done: bool = False

    def __iter__(self) -> Iterator[Any]:
        # ``name, kwargs = call``
        return iter((self.name, self.kwargs))


class _TransitionListener:
    """Hears ``podnet_transition`` as a listener plugin: the engine hands events to each
    listener on its own, past pluggy's call monitoring."""

    def __init__(self, recorder: HookRecorder) -> None:
        self.recorder = recorder

    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        call = HookCall("podnet_transition", {"event": event}, done=True)
        self.recorder.append(call)


class HookRecorder(list[HookCall]):
    """Every hook call made through a plugin manager, in order (pluggy call monitoring),
    and every ``podnet_transition`` event (as a listener plugin). A list of
    :class:`HookCall`, each unpacking as ``(hook name, kwargs)``."""

    LISTENER_NAME = "podnet-testing-recorder"

    def __init__(self) -> None:
        super().__init__()
        self._open: list[HookCall] = []

    @property
    def calls(self) -> list[HookCall]:
        return self

    def attach(self, pm: pluggy.PluginManager) -> Callable[[], None]:
        """Start recording ``pm``'s hook calls; returns the function that stops it."""
        listener = _TransitionListener(self)
        pm.register(listener, name=self.LISTENER_NAME)
        undo_monitoring = pm.add_hookcall_monitoring(self._before, self._after)

        def undo() -> None:
            undo_monitoring()
            pm.unregister(listener)

        return undo

    def _before(self, hook_name: str, _impls: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        if hook_name == "podnet_transition":
            return  # the listener records it, however the engine delivers it
        call = HookCall(hook_name, dict(kwargs))
        self.append(call)
        self._open.append(call)

    def _after(self, outcome: Any, hook_name: str, _impls: Sequence[Any],
               _kwargs: Mapping[str, Any]) -> None:
        if hook_name == "podnet_transition":
            return
        # calls do not nest in practice, but a stack keeps the pairing right if they do
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i].name == hook_name:
                call = self._open.pop(i)
                call.error = outcome.exception
                if call.error is None:
                    call.result = outcome.get_result()
                call.done = True
                break

    def clear(self) -> None:
        super().clear()
        self._open.clear()

    def names(self) -> list[str]:
        return [c.name for c in self]

    def of(self, hook: str) -> list[HookCall]:
        name = hook_name(hook)
        return [c for c in self if c.name == name]

    def provider_calls(self) -> list[str]:
        """Names of calls to hooks that reach the provider's cloud or dataplane."""
        return [c.name for c in self if c.name in PROVIDER_HOOKS]

    def transitions(self, machine: str | None = None, *, ok: bool | None = None
                    ) -> list[TransitionEvent]:
        """The ``podnet_transition`` events broadcast, optionally of one machine."""
        out = []
        for call in self.of("podnet_transition"):
            event: TransitionEvent = call.kwargs["event"]
            if machine is not None and event.machine != machine:
                continue
            if ok is not None and event.ok is not ok:
                continue
            out.append(event)
        return out


# --- fault injection -------------------------------------------------------------------


@attrs.define
class _Planned:
    hook: str
    when: Moment
    make: Callable[[], BaseException]
    skip: int
    times: int


class FaultInjector:
    """Raises planned exceptions at the provider's hook boundaries.

    Registered as a pluggy ``wrapper=True`` plugin, so it works for any provider: a fault
    ``before`` a hook means the call never reached the cloud; ``after`` means the cloud
    did the work and the controller never heard back (a lost response, or with
    :class:`Crash` a process killed between the cloud call and the record write).
    """

    NAME = "podnet-testing-faults"

    def __init__(self) -> None:
        self._planned: list[_Planned] = []
        #: faults raised so far: (hook, moment, exception)
        self.fired: list[tuple[str, Moment, BaseException]] = []
        #: calls seen per hook (``after`` counts only calls the provider answered)
        self.calls: Counter[str] = Counter()

    def install(self, pm: pluggy.PluginManager) -> FaultInjector:
        if not pm.is_registered(self):
            pm.register(self, name=self.NAME)
        return self

    def crash(self, hook: str, when: Moment = "after", nth: int = 1) -> None:
        """Kill the controller at the ``nth`` next call of ``hook``."""
        self.fail(hook, Crash, when=when, nth=nth)

    def fail(self, hook: str, exc: BaseException | Callable[[], BaseException],
             when: Moment = "before", times: int = 1, nth: int = 1) -> None:
        """Raise ``exc`` (or what the factory makes) at ``times`` calls of ``hook``, from
        its ``nth`` next call on."""
        make: Callable[[], BaseException] = (lambda: exc) if isinstance(exc, BaseException) \
            else exc
        self._planned.append(_Planned(hook_name(hook), when, make, max(0, nth - 1), times))

    def clear(self) -> None:
        self._planned.clear()

    @property
    def armed(self) -> bool:
        return bool(self._planned)

    def _take(self, hook: str, when: Moment) -> BaseException | None:
        for planned in self._planned:
            if planned.hook != hook or planned.when != when:
                continue
            if planned.skip > 0:
                planned.skip -= 1
                return None
            planned.times -= 1
            if planned.times <= 0:
                self._planned.remove(planned)
            exc = planned.make()
            self.fired.append((hook, when, exc))
            return exc
        return None

    def _around(self, hook: str) -> Generator[None, Any, Any]:
        fault = self._take(hook, "before")
        if fault is not None:
            raise fault
        result = yield
        if result is None:
            return None  # not the provider in charge: it did nothing
        self.calls[hook] += 1
        fault = self._take(hook, "after")
        if fault is not None:
            raise fault
        return result

    @hookimpl(wrapper=True)
    def podnet_allocate(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_allocate"))

    @hookimpl(wrapper=True)
    def podnet_route(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_route"))

    @hookimpl(wrapper=True)
    def podnet_release(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_release"))

    @hookimpl(wrapper=True)
    def podnet_verify(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_verify"))

    @hookimpl(wrapper=True)
    def podnet_node_inventory(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_node_inventory"))

    @hookimpl(wrapper=True)
    def podnet_pool_grow(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_pool_grow"))

    @hookimpl(wrapper=True)
    def podnet_pool_shrink(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_pool_shrink"))

    @hookimpl(wrapper=True)
    def podnet_interface_create(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_interface_create"))

    @hookimpl(wrapper=True)
    def podnet_interface_dispose(self) -> Generator[None, Any, Any]:
        return (yield from self._around("podnet_interface_dispose"))


# --- lost answers from the API server ---------------------------------------------------


@attrs.define
class _Loss:
    op: str
    kind: Kind | None
    times: int
    crash: bool


class LossyCluster:
    """The API server as the engine sees it, losing answers on request: a planned write
    is committed, then the client gets a 500 (a timeout after the server applied it), or
    the controller dies (:class:`Crash`) before it hears back. Everything else goes
    straight to the cluster underneath."""

    def __init__(self, cluster: Cluster) -> None:
        self.inner = cluster
        self._planned: builtins.list[_Loss] = []
        #: answers lost so far: (operation, plural)
        self.lost: builtins.list[tuple[str, str]] = []

    def lose_next(self, op: str, kind: Kind | None = None, times: int = 1) -> None:
        """Lose the answers of the next ``times`` successful ``op`` calls on ``kind``."""
        self._planned.append(_Loss(op, kind, times, crash=False))

    def crash_after(self, op: str, kind: Kind | None = None) -> None:
        """Kill the controller right after the next successful ``op`` on ``kind``."""
        self._planned.append(_Loss(op, kind, 1, crash=True))

    def clear(self) -> None:
        self._planned.clear()

    def _answer(self, op: str, kind: Kind) -> None:
        for loss in self._planned:
            if loss.op == op and (loss.kind is None or loss.kind == kind):
                loss.times -= 1
                if loss.times <= 0:
                    self._planned.remove(loss)
                self.lost.append((op, kind.plural))
                if loss.crash:
                    raise Crash(f"died after {op} {kind.plural} was committed")
                raise ApiError(f"lost answer: {op} {kind.plural} was applied, the client "
                               "timed out")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # reads and watches: untouched

    def as_cluster(self) -> Cluster:
        """This proxy, typed as the port it stands in for (reads go through __getattr__)."""
        return cast(Cluster, self)

    def create(self, kind: Kind, obj: Obj) -> Obj:
        created = self.inner.create(kind, obj)
        self._answer("create", kind)
        return created

    def update(self, kind: Kind, obj: Obj) -> Obj:
        updated = self.inner.update(kind, obj)
        self._answer("update", kind)
        return updated

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        updated = self.inner.update_status(kind, obj)
        self._answer("update_status", kind)
        return updated

    def patch(self, kind: Kind, name: str, patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
              namespace: str | None = None,
              patch_type: Literal["merge", "json", "strategic"] = "merge",
              subresource: Literal["status"] | None = None) -> Obj:
        patched = self.inner.patch(kind, name, patch, namespace, patch_type, subresource)
        self._answer("patch", kind)
        return patched

    def delete(self, kind: Kind, name: str, namespace: str | None = None,
               uid: str | None = None, grace_period_seconds: int | None = None,
               propagation_policy: Propagation | None = None) -> None:
        self.inner.delete(kind, name, namespace, uid, grace_period_seconds,
                          propagation_policy)
        self._answer("delete", kind)

    def emit_event(self, involved: Obj, reason: str, message: str,
                   type: Literal["Normal", "Warning"] = "Normal") -> None:
        self.inner.emit_event(involved, reason, message, type)


class WriteCounter:
    """One replica's view of the API server: every write it sends is counted (by
    ``verb.plural``, ``events`` for Events) before it goes on to the cluster underneath;
    reads and watches pass untouched. Under an engine's :class:`~podnet.core.fence.FencedCluster`
    it counts the writes that got past the fence: what left the replica."""

    def __init__(self, inner: Cluster) -> None:
        self.inner = inner
        self.writes: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def as_cluster(self) -> Cluster:
        return cast(Cluster, self)

    def total(self) -> int:
        return sum(self.writes.values())

    def create(self, kind: Kind, obj: Obj) -> Obj:
        self.writes[f"create.{kind.plural}"] += 1
        return self.inner.create(kind, obj)

    def update(self, kind: Kind, obj: Obj) -> Obj:
        self.writes[f"update.{kind.plural}"] += 1
        return self.inner.update(kind, obj)

    def update_status(self, kind: Kind, obj: Obj) -> Obj:
        self.writes[f"status.{kind.plural}"] += 1
        return self.inner.update_status(kind, obj)

    def patch(self, kind: Kind, name: str, patch: Mapping[str, Any] | builtins.list[dict[str, Any]],
              namespace: str | None = None,
              patch_type: Literal["merge", "json", "strategic"] = "merge",
              subresource: Literal["status"] | None = None) -> Obj:
        self.writes[f"patch.{kind.plural}"] += 1
        return self.inner.patch(kind, name, patch, namespace, patch_type, subresource)

    def delete(self, kind: Kind, name: str, namespace: str | None = None,
               uid: str | None = None, grace_period_seconds: int | None = None,
               propagation_policy: Propagation | None = None) -> None:
        self.writes[f"delete.{kind.plural}"] += 1
        self.inner.delete(kind, name, namespace, uid, grace_period_seconds,
                          propagation_policy)

    def emit_event(self, involved: Obj, reason: str, message: str,
                   type: Literal["Normal", "Warning"] = "Normal") -> None:
        self.writes["events"] += 1
        self.inner.emit_event(involved, reason, message, type)


@attrs.define(eq=False)
class _Ticker:
    due: float
    period: float
    fn: Callable[[], None]
    live: bool = True


class TickingClock(FakeClock):
    """A :class:`FakeClock` that runs callbacks every ``period`` seconds of fake time as
    it moves: a background loop (an elector renewing its Lease every retry period) on the
    fake clock. ``advance`` stops at each due time, runs what is due, and goes on; a
    callback must not move the clock itself."""

    def __init__(self) -> None:
        super().__init__()
        self._tickers: builtins.list[_Ticker] = []
        self._in_tick = False

    def every(self, period: float, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn`` each ``period`` seconds from now on; returns what cancels it."""
        if period <= 0:
            raise ValueError("a period must be positive")
        ticker = _Ticker(self.monotonic() + period, period, fn)
        self._tickers.append(ticker)

        def cancel() -> None:
            ticker.live = False
            if ticker in self._tickers:
                self._tickers.remove(ticker)

        return cancel

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        target = self.monotonic() + seconds
        while self._tickers and not self._in_tick:
            ticker = min(self._tickers, key=lambda t: t.due)
            if ticker.due > target:
                break
            super().advance(max(0.0, ticker.due - self.monotonic()))
            ticker.due += ticker.period
            self._in_tick = True
            try:
                ticker.fn()
            finally:
                self._in_tick = False
        super().advance(max(0.0, target - self.monotonic()))
