"""The plugin manager: registration, validation, built-ins, entry points, providers."""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pluggy
import pytest

import podnet.plugins.reference.provider as reference
from podnet.core import plugin as plugin_mod
from podnet.core.errors import ConfigError, ErrorKind
from podnet.core.models import NodeInfo
from podnet.core.plugin import (
    DISABLE_ENV,
    Providers,
    disabled_plugins,
    load_plugins,
    new_plugin_manager,
    plugin_records,
)
from podnet.hookspecs import ENTRY_POINT_GROUP, hookimpl
from podnet.hookspecs.types import Inventory, NodeContext, ProviderInfo, TransitionEvent
from podnet.plugins.reference.provider import (
    ReferenceCloud,
    ReferenceCloudError,
    ReferenceProvider,
)


@pytest.fixture(autouse=True)
def _no_ambient_disable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DISABLE_ENV, raising=False)


def _impl_names(obj: object) -> set[str]:
    """The hooks ``obj`` implements, read from pluggy's marker on its attributes."""
    return {
        name
        for name in dir(obj)
        if name.startswith("podnet_") and hasattr(getattr(obj, name), "podnet_impl")
    }


class Listener:
    """A small valid plugin: declares a provider and listens to transitions."""

    __version__ = "9.8.7"

    def __init__(self) -> None:
        self.events: list[TransitionEvent] = []

    @hookimpl
    def podnet_register_provider(self) -> ProviderInfo:
        return ProviderInfo(name="listener", version=self.__version__)

    @hookimpl
    def podnet_transition(self, event: TransitionEvent) -> None:
        self.events.append(event)

    @hookimpl
    def podnet_classify_error(self, provider: str, error: BaseException) -> ErrorKind | None:
        return ErrorKind.FATAL if provider == "listener" else None


class Misspelled:
    @hookimpl
    def podnet_allocat(self, context: object) -> None:
        return None


class Unversioned:
    @hookimpl
    def podnet_register_provider(self) -> None:
        return None


# --- registration and validation ---------------------------------------------------------


def test_new_plugin_manager_knows_every_hookspec() -> None:
    pm = new_plugin_manager()
    assert pm.project_name == "podnet"
    names = {name for name in dir(pm.hook) if name.startswith("podnet_")}
    assert {"podnet_allocate", "podnet_register_provider", "podnet_transition"} <= names
    assert pm.list_name_plugin() == []


def test_valid_plugin_registers_and_passes_check_pending() -> None:
    pm = new_plugin_manager()
    listener = Listener()
    assert pm.register(listener, name="listener") == "listener"
    pm.check_pending()
    assert pm.get_plugin("listener") is listener
    hooks = {h.name for h in pm.get_hookcallers(listener) or ()}
    assert hooks == {"podnet_register_provider", "podnet_transition", "podnet_classify_error"}

    event = TransitionEvent(machine="pod_network", trigger="allocate", source="pending",
                            dest="allocated", object_key="ns/p", provider="listener", ok=True)
    assert pm.hook.podnet_transition(event=event) == []
    assert listener.events == [event]


def test_misspelled_hook_fails_check_pending() -> None:
    pm = new_plugin_manager()
    pm.register(Misspelled(), name="typo")
    with pytest.raises(pluggy.PluginValidationError, match="podnet_allocat"):
        pm.check_pending()


def test_providers_refuses_a_plugin_with_a_misspelled_hook() -> None:
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(), name="reference")
    pm.register(Misspelled(), name="typo")
    with pytest.raises(pluggy.PluginValidationError):
        Providers(pm)


def test_hookimpl_with_argument_unknown_to_spec_is_refused_at_register() -> None:
    class BadArgs:
        @hookimpl
        def podnet_classify_error(self, provider: str, error: BaseException,
                                  extra: int) -> None:
            return None

    pm = new_plugin_manager()
    with pytest.raises(pluggy.PluginValidationError, match="extra"):
        pm.register(BadArgs(), name="bad")


# --- built-in plugins and the disable list -----------------------------------------------


def test_load_plugins_registers_the_reference_builtin() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"])
    assert pm.get_plugin("reference") is reference.plugin
    builtins = {name for name, _ in pm.list_name_plugin()} & set(plugin_mod.BUILTIN_PLUGINS)
    assert builtins == {"reference"}
    pm.check_pending()


def test_load_plugins_twice_registers_once() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={})
    load_plugins(pm, builtins=["reference"], environ={})
    assert [name for name, _ in pm.list_name_plugin()] == ["reference"]


def test_load_plugins_unknown_builtin_is_a_config_error() -> None:
    pm = new_plugin_manager()
    with pytest.raises(ConfigError, match="nope") as info:
        load_plugins(pm, builtins=["nope"], environ={})
    assert info.value.key == "providers"


def test_all_builtins_skip_empty_provider_packages() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, entry_points=False, environ={})
    names = {name for name, _ in pm.list_name_plugin()}
    assert "reference" in names
    assert names <= set(plugin_mod.BUILTIN_PLUGINS)
    for name in plugin_mod.BUILTIN_PLUGINS.keys() - names:
        # only a provider whose module does not exist yet may be missing
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(plugin_mod.BUILTIN_PLUGINS[name])


@pytest.mark.parametrize("value", ["reference", " other , reference ,", "reference,reference"])
def test_disable_env_blocks_the_builtin(value: str) -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={DISABLE_ENV: value})
    assert pm.get_plugin("reference") is None
    assert pm.is_blocked("reference")
    assert pm.get_plugins() == set()
    # a blocked name stays blocked for a late registration as well
    assert pm.register(ReferenceProvider(), name="reference") is None
    assert pm.get_plugin("reference") is None


def test_disable_env_other_names_do_not_block() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={DISABLE_ENV: "referenc,bbc"})
    assert pm.get_plugin("reference") is reference.plugin
    assert not pm.is_blocked("reference")


def test_disable_env_is_read_from_the_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DISABLE_ENV, "reference")
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"])
    assert pm.get_plugin("reference") is None


def test_disabled_plugins_parsing() -> None:
    assert disabled_plugins({}) == frozenset()
    assert disabled_plugins({DISABLE_ENV: ""}) == frozenset()
    assert disabled_plugins({DISABLE_ENV: " a, ,b ,"}) == frozenset({"a", "b"})


# --- plugin records ----------------------------------------------------------------------


def test_plugin_records_lists_name_version_source_and_hooks() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={})
    pm.register(Listener(), name="listener")
    pm.register(Unversioned(), name="unversioned")
    records = {r.name: r for r in plugin_records(pm)}
    assert [r.name for r in plugin_records(pm)] == ["listener", "reference", "unversioned"]

    ref = records["reference"]
    assert ref.source == "builtin"
    assert ref.version == reference.__version__
    assert ref.hooks == tuple(sorted(_impl_names(ReferenceProvider)))
    for hook in ("podnet_register_provider", "podnet_allocate", "podnet_route",
                 "podnet_release", "podnet_classify_error", "podnet_pool_grow"):
        assert hook in ref.hooks

    listener = records["listener"]
    assert listener.source == "registered"
    assert listener.version == "9.8.7"
    assert listener.hooks == (
        "podnet_classify_error", "podnet_register_provider", "podnet_transition"
    )

    unversioned = records["unversioned"]
    assert unversioned.source == "registered"
    assert unversioned.version == importlib.metadata.version("podnet")
    assert unversioned.hooks == ("podnet_register_provider",)


def test_plugin_records_skips_blocked_names() -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={DISABLE_ENV: "reference"})
    pm.register(Listener(), name="listener")
    assert [r.name for r in plugin_records(pm)] == ["listener"]


# --- providers ---------------------------------------------------------------------------


def _two_providers() -> tuple[pluggy.PluginManager, ReferenceProvider, ReferenceProvider]:
    pm = new_plugin_manager()
    a = ReferenceProvider(ReferenceCloud(), name="a")
    b = ReferenceProvider(ReferenceCloud(), name="b")
    pm.register(a, name="plugin-a")
    pm.register(b, name="plugin-b")
    return pm, a, b


def test_providers_collects_provider_infos() -> None:
    pm, _, _ = _two_providers()
    pm.register(Listener(), name="listener")
    pm.register(Unversioned(), name="unversioned")  # returns None: only listens
    providers = Providers(pm)
    assert providers.names() == ["a", "b", "listener"]
    assert "a" in providers
    assert "nope" not in providers
    info = providers["b"]
    assert isinstance(info, ProviderInfo)
    assert info.name == "b"
    assert info.version == reference.__version__
    assert info.uses_node_pool and info.manages_interfaces
    assert providers["listener"].version == "9.8.7"


def test_providers_refuses_two_plugins_declaring_the_same_name() -> None:
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud(), name="same"), name="one")
    pm.register(ReferenceProvider(ReferenceCloud(), name="same"), name="two")
    with pytest.raises(ConfigError, match="'same'") as info:
        Providers(pm)
    assert info.value.key == "providers"


def test_unknown_provider_lists_known_names() -> None:
    pm, _, _ = _two_providers()
    providers = Providers(pm)
    with pytest.raises(ConfigError) as info:
        providers["nope"]
    message = str(info.value)
    assert "'nope'" in message
    assert "known: a, b" in message
    assert info.value.key == "provider"


def test_unknown_provider_with_no_provider_at_all() -> None:
    providers = Providers(new_plugin_manager())
    assert providers.names() == []
    with pytest.raises(ConfigError, match="known: none"):
        providers["nope"]


def test_configure_reaches_only_the_named_provider() -> None:
    pm, a, b = _two_providers()
    providers = Providers(pm)
    providers.configure("b", {"latency_ms": 0, "max_interfaces": 7})
    assert b.cloud.max_interfaces == 7
    assert a.cloud.max_interfaces == ReferenceCloud().max_interfaces
    with pytest.raises(ConfigError, match="'nope'"):
        providers.configure("nope", {})
    with pytest.raises(ConfigError) as info:
        providers.configure("a", {"bogus": 1})
    assert info.value.key == "providers.a.bogus"


# --- routing: the provider named answers, the others are never asked ---------------------


def test_providers_know_which_plugin_declared_each_provider() -> None:
    pm, a, b = _two_providers()
    listener = Listener()
    pm.register(listener, name="listener")
    pm.register(Unversioned(), name="unversioned")
    assert Providers(pm).plugins == {"a": a, "b": b, "listener": listener}


def test_classify_error_is_answered_by_the_named_provider_only() -> None:
    pm, _, _ = _two_providers()
    providers = Providers(pm)

    def classify(provider: str, error: BaseException) -> object:
        return providers.hook(provider, "podnet_classify_error")(provider=provider, error=error)

    error = ReferenceCloudError("Throttling", "x")
    assert classify("b", error) is ErrorKind.THROTTLED
    assert classify("a", error) is ErrorKind.THROTTLED
    assert classify("nope", error) is None
    # not the provider's own error type: nobody claims it
    assert classify("b", ValueError("x")) is None


def test_firstresult_hook_calls_only_the_named_providers_cloud() -> None:
    pm, a, b = _two_providers()
    providers = Providers(pm)
    node = NodeContext(node=NodeInfo(name="n1", uid="u1", pod_cidr="10.0.0.0/24"))

    def inventory_of(provider: str) -> object:
        return providers.hook(provider, "podnet_node_inventory")(provider=provider, node=node)

    inventory = inventory_of("b")
    assert isinstance(inventory, Inventory)  # a single answer, not a list
    assert [itf.id for itf in inventory.interfaces] == ["eth0"]
    assert b.cloud.calls["Describe"] == 1
    assert sum(a.cloud.calls.values()) == 0
    assert "n1" in b.cloud.nodes and "n1" not in a.cloud.nodes

    assert inventory_of("a") is not None
    assert a.cloud.calls["Describe"] == 1
    assert b.cloud.calls["Describe"] == 1

    assert inventory_of("nope") is None
    assert a.cloud.calls["Describe"] == 1
    assert b.cloud.calls["Describe"] == 1


def test_a_later_registered_provider_does_not_shadow_an_earlier_one() -> None:
    """Whatever the call order, the answer comes from the provider named in the call."""
    pm = new_plugin_manager()
    first = ReferenceProvider(ReferenceCloud(), name="first")
    last = ReferenceProvider(ReferenceCloud(), name="last")
    pm.register(first, name="first")
    pm.register(last, name="last")  # pluggy calls this one first
    node = NodeContext(node=NodeInfo(name="n", uid="u", pod_cidr="10.1.0.0/24"))
    entries = Providers(pm).hook("first", "podnet_pool_grow")(
        provider="first", node=node, interface=None, count=2, subnet=None)
    assert [e.address for e in entries] == ["10.1.0.2", "10.1.0.3"]
    assert first.cloud.all_addresses() == {"10.1.0.2": "n", "10.1.0.3": "n"}
    assert last.cloud.all_addresses() == {}


def test_a_routed_hook_keeps_the_plugins_that_declare_no_provider() -> None:
    """Hook wrappers and plugins that declare no provider take part in every provider's
    calls, including those registered after the route was first used."""
    pm, _, _ = _two_providers()
    providers = Providers(pm)
    seen: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def podnet_node_inventory(self, provider: str) -> Iterator[None]:
            seen.append(provider)
            return (yield)

    node = NodeContext(node=NodeInfo(name="n1", uid="u1", pod_cidr="10.0.0.0/24"))
    route = providers.hook("a", "podnet_node_inventory")
    assert route(provider="a", node=node) is not None
    pm.register(Wrapper(), name="wrapper")
    assert route(provider="a", node=node) is not None
    assert providers.hook("b", "podnet_node_inventory")(provider="b", node=node) is not None
    assert seen == ["a", "b"]


def test_register_provider_collects_every_answer() -> None:
    pm, _, _ = _two_providers()
    infos = pm.hook.podnet_register_provider()
    assert sorted(info.name for info in infos) == ["a", "b"]


# --- entry-point discovery ---------------------------------------------------------------

_ENTRY_MODULE = '''
"""A third-party plugin, discovered through its entry point."""

from podnet.hookspecs import hookimpl
from podnet.hookspecs.types import ProviderInfo

__version__ = "0.0.0-module"  # the distribution's version must win over this


@hookimpl
def podnet_register_provider():
    return ProviderInfo(name="{provider}", version="{version}")


@hookimpl
def podnet_classify_error(provider, error):
    return "fatal" if provider == "{provider}" else None
'''


@pytest.fixture
def entrypoint_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A dist-info on sys.path that declares a ``podnet.plugins`` entry point; its name."""
    plugin_name = "thirdparty"
    module = f"podnet_test_thirdparty_{tmp_path.name.replace('-', '_')}"
    version = "3.1.4"
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(_ENTRY_MODULE).format(provider=plugin_name, version=version)
    )
    dist_info = tmp_path / f"podnet_test_thirdparty-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: podnet-test-thirdparty\nVersion: {version}\n"
    )
    (dist_info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\n{plugin_name} = {module}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield plugin_name
    sys.modules.pop(module, None)


def test_entry_point_fixture_is_visible_to_importlib_metadata(entrypoint_dist: str) -> None:
    eps = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    assert entrypoint_dist in eps.names


def test_entry_point_plugin_is_loaded_with_its_distribution_version(
    entrypoint_dist: str,
) -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={})
    pm.check_pending()
    plugin = pm.get_plugin(entrypoint_dist)
    assert plugin is not None
    records = {r.name: r for r in plugin_records(pm)}
    assert set(records) == {"reference", entrypoint_dist}
    record = records[entrypoint_dist]
    assert record.version == "3.1.4"
    assert record.source == "entrypoint"
    assert record.hooks == ("podnet_classify_error", "podnet_register_provider")
    assert records["reference"].source == "builtin"
    assert Providers(pm).names() == ["reference", entrypoint_dist]


def test_entry_points_can_be_switched_off(entrypoint_dist: str) -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=[], entry_points=False, environ={})
    assert pm.get_plugin(entrypoint_dist) is None
    assert plugin_records(pm) == []


@pytest.mark.parametrize("value", ["thirdparty", "reference,thirdparty"])
def test_disable_env_blocks_an_entry_point_plugin(entrypoint_dist: str, value: str) -> None:
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], environ={DISABLE_ENV: value})
    assert pm.get_plugin(entrypoint_dist) is None
    assert pm.is_blocked(entrypoint_dist)
    names = [r.name for r in plugin_records(pm)]
    assert entrypoint_dist not in names
    assert ("reference" in names) is ("reference" not in value)
