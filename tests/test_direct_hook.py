"""DirectHook: a hook called without pluggy's general path answers exactly as pluggy does.

pluggy's own call is the reference: each case calls the hook both ways and compares. The
direct path is taken only where pluggy has nothing to do (no implementation, one plain
one); wrappers, several implementations and a monitor on the manager (the fault
injector's) go through pluggy, and plugins registered or unregistered later take part
from the next call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pluggy
import pytest

from podnet.core.plugin import DirectHook, new_plugin_manager
from podnet.core.policy import PoolPolicy
from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import NodeInfo, PodInfo
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider
from podnet.testing.harness import EngineRig

POLICY = PoolPolicy(min_idle=1, max_idle=4, batch_size=4, max_batch_size=8, reuse_cooldown=0.0)
NODE = NodeInfo(name="n1", uid="n1-uid")


class Claims:
    def __init__(self, answer: str | None) -> None:
        self.answer = answer
        self.asked: list[NodeInfo] = []

    @hookimpl
    def podnet_select_provider(self, node: NodeInfo) -> str | None:
        self.asked.append(node)
        return self.answer


class Networks:
    @hookimpl
    def podnet_select_networks(self, node: NodeInfo) -> list[str]:  # a subset of the args
        return [f"net-of-{node.name}"]


class Wrapper:
    def __init__(self) -> None:
        self.seen: list[object] = []

    @hookimpl(wrapper=True)
    def podnet_select_provider(self, node: NodeInfo) -> Iterator[None]:
        answer = yield
        self.seen.append(answer)
        return answer


def _pod() -> PodInfo:
    return PodInfo(namespace="ns", name="p", uid="u1", node_name="n1")


def both(pm: pluggy.PluginManager, name: str, **kwargs: Any) -> tuple[Any, Any]:
    caller = getattr(pm.hook, name)
    return DirectHook(pm, caller)(**kwargs), caller(**kwargs)


def test_no_implementation_answers_as_pluggy() -> None:
    pm = new_plugin_manager()
    assert both(pm, "podnet_select_provider", node=NODE) == (None, None)
    assert both(pm, "podnet_select_networks", pod=_pod(), node=NODE) == ([], [])


def test_one_implementation_answers_as_pluggy() -> None:
    pm = new_plugin_manager()
    pm.register(Claims("reference"))
    pm.register(Networks())
    assert both(pm, "podnet_select_provider", node=NODE) == ("reference", "reference")
    assert both(pm, "podnet_select_networks", pod=_pod(), node=NODE) == (
        [["net-of-n1"]], [["net-of-n1"]])


def test_none_answer_of_a_list_hook_is_left_out_as_pluggy_does() -> None:
    pm = new_plugin_manager()

    class Nothing:
        @hookimpl
        def podnet_select_networks(self, pod: PodInfo, node: NodeInfo) -> None:
            return None

    pm.register(Nothing())
    assert both(pm, "podnet_select_networks", pod=_pod(), node=NODE) == ([], [])


def _count_pluggy_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the hooks called through pluggy's HookCaller from now on."""
    through_pluggy: list[str] = []
    original = pluggy.HookCaller.__call__

    def counted(self: pluggy.HookCaller, **kwargs: object) -> Any:
        through_pluggy.append(self.name)
        return original(self, **kwargs)

    monkeypatch.setattr(pluggy.HookCaller, "__call__", counted)
    return through_pluggy


def test_one_implementation_is_called_without_pluggy(monkeypatch: pytest.MonkeyPatch) -> None:
    pm = new_plugin_manager()
    claims = Claims("reference")
    pm.register(claims)
    through_pluggy = _count_pluggy_calls(monkeypatch)
    direct = DirectHook(pm, pm.hook.podnet_select_provider)
    assert direct(node=NODE) == "reference"
    assert claims.asked == [NODE]
    assert through_pluggy == []


def test_plugins_registered_and_unregistered_later_take_part() -> None:
    pm = new_plugin_manager()
    direct = DirectHook(pm, pm.hook.podnet_select_provider)
    assert direct(node=NODE) is None
    first = Claims("first")
    pm.register(first)
    assert direct(node=NODE) == "first"
    second = Claims("second")
    pm.register(second)  # two: pluggy's path, the last registered first
    assert direct(node=NODE) == pm.hook.podnet_select_provider(node=NODE) == "second"
    pm.unregister(second)
    assert direct(node=NODE) == "first"
    pm.unregister(first)
    assert direct(node=NODE) is None


def test_a_wrapper_runs() -> None:
    pm = new_plugin_manager()
    pm.register(Claims("reference"))
    wrapper = Wrapper()
    pm.register(wrapper)
    assert DirectHook(pm, pm.hook.podnet_select_provider)(node=NODE) == "reference"
    assert wrapper.seen == ["reference"]


def test_a_monitor_sees_every_call() -> None:
    pm = new_plugin_manager()
    pm.register(Claims("reference"))
    direct = DirectHook(pm, pm.hook.podnet_select_provider)
    assert direct(node=NODE) == "reference"  # planned before the monitor came
    seen: list[str] = []
    undo = pm.add_hookcall_monitoring(lambda name, _impls, _kw: seen.append(name),
                                      lambda *_: None)
    assert direct(node=NODE) == "reference"
    assert seen == ["podnet_select_provider"]
    undo()
    assert direct(node=NODE) == "reference"
    assert seen == ["podnet_select_provider"]


def test_an_exception_propagates_as_raised() -> None:
    pm = new_plugin_manager()

    class Failing:
        @hookimpl
        def podnet_select_provider(self, node: NodeInfo) -> str:
            raise KeyError("boom")

    pm.register(Failing())
    with pytest.raises(KeyError, match="boom"):
        DirectHook(pm, pm.hook.podnet_select_provider)(node=NODE)


def test_a_missing_argument_goes_through_pluggy() -> None:
    pm = new_plugin_manager()
    pm.register(Networks())
    direct = DirectHook(pm, pm.hook.podnet_select_networks)
    with pytest.warns(UserWarning, match="pod"):
        assert direct(node=NODE) == [["net-of-n1"]]


def test_the_warm_path_calls_provider_hooks_without_pluggy(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod network allocated and routed: its provider's hooks and the broadcasts no
    plugin implements never enter pluggy's hook call."""
    cloud = ReferenceCloud(seed=0)
    rig = EngineRig([("reference", ReferenceProvider(cloud, policy=POLICY))])
    node = rig.node(0)
    rig.settle()
    through_pluggy = _count_pluggy_calls(monkeypatch)
    rig.pod("p1", node)
    rig.settle()
    assert rig.record("p1")["status"]["phase"] == "Routed"
    assert not {"podnet_allocate", "podnet_route", "podnet_select_provider",
                "podnet_select_networks"} & set(through_pluggy)
