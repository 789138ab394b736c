"""The plugin manager: built-in providers, entry-point plugins, and the registry of providers.

Built-in plugins are named here by module path and imported lazily, so core's own import
graph stays free of providers (import-linter checks it); third-party plugins come from the
``podnet.plugins`` entry-point group. ``PODNET_DISABLE_PLUGINS`` (comma-separated plugin
names) blocks any of them before it is imported.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import logging
import os
import sys
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import pluggy

import podnet.hookspecs as hookspecs
from podnet.core.errors import ConfigError, MissingExtra
from podnet.core.version import podnet_version
from podnet.hookspecs.routing import ROUTING, Routing
from podnet.hookspecs.types import ProviderInfo

log = logging.getLogger(__name__)

DISABLE_ENV = "PODNET_DISABLE_PLUGINS"

#: Built-in plugins: name -> module exposing hook implementations (module-level or a
#: ``plugin`` attribute). Only those whose module exists are loaded.
BUILTIN_PLUGINS: dict[str, str] = {
    "reference": "podnet.plugins.reference.provider",
    "bbc": "podnet.plugins.bbc.provider",
    "ecs": "podnet.plugins.ecs.provider",
    "ovn": "podnet.plugins.ovn.provider",
}

#: What a built-in provider needs beyond the base install: the extra that brings it
#: (``pip install 'podnet[<extra>]'``) and the top-level modules it imports from there.
#: They are looked up, not imported, before the provider's module is.
BUILTIN_EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "bbc": ("bbc", ("baidubce",)),
    "ecs": ("ecs", ("alibabacloud_ecs20140526", "alibabacloud_tea_openapi", "Tea",
                    "alibabacloud_credentials")),
    "ovn": ("ovn", ("ovsdbapp", "ovs")),
}

#: per plugin manager: the built-in providers skipped for a missing SDK, as the error a
#: configuration naming one of them gets
_SKIPPED: weakref.WeakKeyDictionary[pluggy.PluginManager, dict[str, MissingExtra]] = (
    weakref.WeakKeyDictionary())


def missing_extra(name: str, key: str = "providers") -> MissingExtra | None:
    """The error for built-in provider ``name`` when a module of its extra is not
    installed, else None (also for a name that needs no extra)."""
    extra, modules = BUILTIN_EXTRAS.get(name, (name, ()))
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # a finder that refuses the name: absent all the same
            found = False
        if not found:
            return MissingExtra(key, name, module, extra)
    return None


def skipped_providers(pm: pluggy.PluginManager) -> dict[str, MissingExtra]:
    """The built-in providers :func:`load_plugins` left out of ``pm`` for a missing SDK."""
    return dict(_SKIPPED.get(pm, {}))


def require_installed(pm: pluggy.PluginManager,
                      named: Iterable[tuple[str, str | None]]) -> None:
    """Raise :class:`MissingExtra` for the first provider of ``named`` (config key,
    provider name) that :func:`load_plugins` left out of ``pm`` for a missing SDK: the
    check a command makes before it connects anywhere."""
    skipped = _SKIPPED.get(pm, {})
    for key, name in named:
        missing = skipped.get(name) if name is not None else None
        if missing is not None:
            raise MissingExtra(key, missing.provider, missing.module, missing.extra)


@attrs.frozen
class PluginRecord:
    name: str
    version: str
    source: str  # "builtin" | "entrypoint" | "registered"
    hooks: tuple[str, ...]


def disabled_plugins(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    raw = (environ if environ is not None else os.environ).get(DISABLE_ENV, "")
    return frozenset(p.strip() for p in raw.split(",") if p.strip())


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def _plugin_object(module: Any) -> Any:
    return getattr(module, "plugin", module)


def load_plugins(
    pm: pluggy.PluginManager,
    *,
    builtins: Iterable[str] | None = None,
    entry_points: bool = True,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Register built-in plugins (all, or those named) and entry-point plugins.

    Of all built-ins, one whose SDK is not installed is left out (a configuration naming
    it gets :class:`MissingExtra`, see :meth:`Providers.require`); one named in
    ``builtins`` must be installed: :class:`MissingExtra` now."""
    blocked = disabled_plugins(environ)
    for name in blocked:
        pm.set_blocked(name)
    names = BUILTIN_PLUGINS if builtins is None else list(builtins)
    for name in names:
        if name in blocked or pm.has_plugin(name):
            continue
        module_path = BUILTIN_PLUGINS.get(name)
        if module_path is None:
            raise ConfigError("providers", f"no built-in provider named {name!r}")
        missing = missing_extra(name, "--provider" if builtins is not None else "providers")
        if missing is not None:
            if builtins is not None:
                raise missing
            _SKIPPED.setdefault(pm, {})[name] = missing
            continue
        try:
            module = importlib.import_module(module_path)
        except ModuleNotFoundError as exc:
            # A provider package still empty is not an error; a broken import inside is.
            if exc.name == module_path:
                continue
            raise
        pm.register(_plugin_object(module), name=name)
    if entry_points:
        # pluggy skips blocked names and records each plugin's distribution (its version).
        pm.load_setuptools_entrypoints(hookspecs.ENTRY_POINT_GROUP)


def plugin_records(pm: pluggy.PluginManager) -> list[PluginRecord]:
    """Every registered plugin with its version and the hooks it implements."""
    dists = {id(plugin): dist for plugin, dist in pm.list_plugin_distinfo()}
    out = []
    for name, plugin in pm.list_name_plugin():
        if plugin is None:
            continue
        hooks = tuple(sorted(h.name for h in pm.get_hookcallers(plugin) or ()))
        dist = dists.get(id(plugin))
        if dist is not None:
            version, source = dist.version, "entrypoint"
        else:
            version = _version_of(plugin)
            source = "builtin" if name in BUILTIN_PLUGINS else "registered"
        out.append(PluginRecord(name=name, version=version, source=source, hooks=hooks))
    return sorted(out, key=lambda r: r.name)


def _version_of(plugin: Any) -> str:
    # a module plugin carries __version__ itself; an instance's module does
    module = sys.modules.get(getattr(type(plugin), "__module__", ""), None)
    for holder in (plugin, module):
        version = getattr(holder, "__version__", None)
        if isinstance(version, str):
            return version
    return podnet_version()


#: pluggy's own hook executor, as a fresh manager holds it: a manager holding another one
#: has a monitor (``add_hookcall_monitoring``: the test kit's fault injector, pluggy's
#: tracing), and every call then goes through pluggy
_PLAIN_HOOKEXEC: Any = getattr(pluggy.PluginManager("podnet-probe"), "_inner_hookexec", None)


class DirectHook:
    """Calls a hook as pluggy does, without pluggy's general path where it has nothing to
    do: a hook no plugin implements answers at once (None for a ``firstresult`` hook, else
    an empty list), one plain implementation is called directly. Any other case (wrappers,
    several implementations, a monitor on the manager, an argument the hookspec declares
    missing from the call, a historic hook or defaults in the hookspec) goes through the
    hook caller, so the hookspec's contract holds either way.

    pluggy's path costs about ten Python calls a hook call, four times per pod network on
    the warm path (allocate, route and two broadcasts most deployments leave unimplemented).

    The implementations are read again whenever the caller's list changed (a plugin
    registered or unregistered later takes part from its next call), compared item by item
    with what the plan was made from.
    """

    __slots__ = ("_caller", "_firstresult", "_plan", "_pm", "_source", "_spec_args")

    def __init__(self, pm: pluggy.PluginManager, caller: pluggy.HookCaller) -> None:
        self._pm = pm
        self._caller = caller
        spec = caller.spec
        self._firstresult = bool(spec is not None and spec.opts.get("firstresult"))
        # the list pluggy adds and removes implementations in (a subset caller filters
        # its original's); None: not found, every call goes through the caller
        source = getattr(getattr(caller, "_orig", caller), "_hookimpls", None)
        plain = (spec is not None and not spec.kwargdefaults and not caller.is_historic()
                 and isinstance(source, list) and _PLAIN_HOOKEXEC is not None)
        self._source: list[Any] | None = source if plain else None
        self._spec_args: frozenset[str] = frozenset(spec.argnames) if spec is not None else (
            frozenset())
        #: (the source list's items the plan was made from, the implementation's function
        #: and argument names, or None: no implementation, or False: through the caller)
        self._plan: tuple[list[Any], Any, tuple[str, ...]] | None = None

    def _replan(self, source: list[Any]) -> tuple[list[Any], Any, tuple[str, ...]]:
        seen = list(source)
        impls = self._caller.get_hookimpls()
        function: Any = False
        argnames: tuple[str, ...] = ()
        if not impls:
            function = None
        elif len(impls) == 1:
            impl = impls[0]
            if not (impl.wrapper or impl.hookwrapper or impl.kwargnames):
                function, argnames = impl.function, tuple(impl.argnames)
        plan = (seen, function, argnames)
        self._plan = plan  # one tuple: another thread reads a whole plan or the last one
        return plan

    def __call__(self, **kwargs: object) -> Any:
        source = self._source
        if (source is None or self._pm._inner_hookexec is not _PLAIN_HOOKEXEC
                or not kwargs.keys() >= self._spec_args):
            return self._caller(**kwargs)
        plan = self._plan
        if plan is None or plan[0] != source:
            plan = self._replan(source)
        function = plan[1]
        if function is None:
            return None if self._firstresult else []
        if function is False:
            return self._caller(**kwargs)
        answer = function(*map(kwargs.__getitem__, plan[2]))
        if self._firstresult:
            return answer
        return [] if answer is None else [answer]


class MisroutedCall(LookupError):
    """Core called a hook other than as its hookspec declares (routed or broadcast): a
    bug in core, refused before any plugin is called."""


def _check_routing(name: str, wanted: Routing, how: str) -> None:
    entry = ROUTING.get(name)
    if entry is None:
        raise MisroutedCall(f"{name} is no hook of the provider contract (called {how})")
    if entry.routing is not wanted:
        raise MisroutedCall(f"{name} is a {entry.routing} hook: it cannot be {how}")


class Providers:
    """The providers the registered plugins declare, by name, and the routes to them.

    A provider's hooks reach the plugin that declared it and the plugins that declare no
    provider (hook wrappers, listeners), never another provider's plugin: see
    :meth:`hook`.
    """

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.pm = pm
        pm.check_pending()
        #: broadcast hook name -> its caller, its routing checked once
        self._broadcasts: dict[str, pluggy.HookCaller] = {}
        self.infos: dict[str, ProviderInfo] = {}
        #: provider name -> the plugin that declared it
        self.plugins: dict[str, object] = {}
        self._routes: dict[tuple[str, str], pluggy.HookCaller] = {}
        self._direct: dict[tuple[str, str], DirectHook] = {}
        # each plugin asked on its own (in pluggy's calling order), so that core knows
        # which plugin declared which provider
        asked = [impl.plugin
                 for impl in reversed(self.broadcast("podnet_register_provider").get_hookimpls())
                 if not (impl.wrapper or impl.hookwrapper)]
        for plugin in asked:
            alone = pm.subset_hook_caller("podnet_register_provider",
                                          remove_plugins=[p for p in asked if p is not plugin])
            declared: list[ProviderInfo | None] = alone()
            for info in declared:
                if info is None:
                    continue
                if info.name in self.infos:
                    raise ConfigError("providers",
                                      f"two plugins declare provider {info.name!r}")
                self.infos[info.name] = info
                self.plugins[info.name] = plugin

    def __contains__(self, name: object) -> bool:
        return name in self.infos

    def __getitem__(self, name: str) -> ProviderInfo:
        return self.require(name, "provider")

    def require(self, name: str, key: str) -> ProviderInfo:
        """The provider named at config key ``key``; a ConfigError naming the key if none."""
        try:
            return self.infos[name]
        except KeyError:
            skipped = _SKIPPED.get(self.pm, {}).get(name)
            if skipped is not None:
                raise MissingExtra(key, skipped.provider, skipped.module,
                                   skipped.extra) from None
            known = ", ".join(sorted(self.infos)) or "none"
            raise ConfigError(key, f"unknown provider {name!r} (known: {known})") from None

    def names(self) -> list[str]:
        return sorted(self.infos)

    def hook(self, provider: str, name: str) -> pluggy.HookCaller:
        """Hook ``name`` as it reaches ``provider``: its own plugin, and the plugins that
        declare no provider (the test kit's fault injector, a ``podnet_hold_address``
        policy plugin), never another provider's plugin. A name no plugin declared
        reaches no provider at all. Routing is what keeps one provider from answering
        for another: a provider needs no check of the name it is called for.

        :raise MisroutedCall: ``name`` is not a routed hook (:data:`ROUTING`)."""
        route = self._routes.get((provider, name))
        if route is None:
            _check_routing(name, Routing.ROUTED, f"routed to provider {provider!r}")
            mine = self.plugins.get(provider)
            others = [p for p in self.plugins.values() if p is not mine]
            # a proxy: plugins registered later (a listener, the fault injector) take part
            route = self.pm.subset_hook_caller(name, remove_plugins=others)
            self._routes[(provider, name)] = route
        return route

    def direct(self, provider: str, name: str) -> DirectHook:
        """:meth:`hook`, called through a :class:`DirectHook` (the same answers)."""
        direct = self._direct.get((provider, name))
        if direct is None:
            direct = self._direct[(provider, name)] = DirectHook(self.pm,
                                                                 self.hook(provider, name))
        return direct

    def broadcast(self, name: str) -> pluggy.HookCaller:
        """Hook ``name`` as it reaches every plugin.

        :raise MisroutedCall: ``name`` is not a broadcast hook (:data:`ROUTING`)."""
        caller = self._broadcasts.get(name)
        if caller is None:
            _check_routing(name, Routing.BROADCAST, "broadcast to every plugin")
            # pluggy keeps one caller per hook name: plugins registered later join it
            caller = self._broadcasts[name] = getattr(self.pm.hook, name)
        return caller

    def configure(self, provider: str, config: Mapping[str, Any]) -> None:
        self.require(provider, f"providers.{provider}")
        self.hook(provider, "podnet_configure")(provider=provider, config=config)
