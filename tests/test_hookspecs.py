"""Meta-tests of the provider contract: every hook is a typed, documented, versioned spec."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
import typing
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import podnet.hookspecs as hookspecs
from podnet.core.clock import FakeClock
from podnet.core.fence import Fence
from podnet.core.gateway import ProviderGateway
from podnet.core.plugin import MisroutedCall, Providers, new_plugin_manager
from podnet.core.tracing import Tracing
from podnet.hookspecs.models import NodeInfo
from podnet.hookspecs.policy import PoolPolicy
from podnet.hookspecs.types import NodeContext
from podnet.plugins.reference.provider import ReferenceCloud, ReferenceProvider

SPEC_ATTR = f"{hookspecs.PROJECT}_spec"
IMPL_ATTR = f"{hookspecs.PROJECT}_impl"

#: hooks a pool provider may leave to core's defaults or to listeners
OPTIONAL_FOR_REFERENCE = frozenset(
    {
        "podnet_select_provider",
        "podnet_select_networks",
        "podnet_hold_address",
        "podnet_sweep",
        "podnet_node_removed",
        "podnet_cloud_limiter",
        "podnet_transition",
        "podnet_networks_changed",
        "podnet_subnet_parameters",
        "podnet_config_networks",
        # the reference dataplane is enforced by the node agent (Enforcement.NODE)
        "podnet_network_policy",
        "podnet_network_policy_keys",
    }
)

#: hooks the reference provider must implement, whatever the dynamic list says
REFERENCE_MUST_IMPLEMENT = frozenset(
    f"podnet_{name}"
    for name in (
        "register_provider", "configure", "node_inventory", "pool_grow", "pool_shrink",
        "interface_create", "interface_dispose", "node_check", "address_space", "allocate",
        "route", "verify", "unknown_machines",
        "release", "classify_error", "plug", "unplug", "check_plug", "plugs",
    )
)

#: per-provider hooks that are notifications: every implementation they are routed to is
#: called (the provider's plugin and those that declare no provider), none answers
NOTIFICATIONS_PER_PROVIDER = frozenset({"podnet_configure", "podnet_node_removed",
                                        "podnet_unplug", "podnet_networks_changed"})


def _hook_functions() -> dict[str, Callable[..., Any]]:
    return {
        name: obj
        for name, obj in vars(hookspecs).items()
        if name.startswith("podnet_") and inspect.isfunction(obj)
    }


HOOKS = _hook_functions()
HOOK_NAMES = sorted(HOOKS)


def _spec(name: str) -> dict[str, Any]:
    opts = getattr(HOOKS[name], SPEC_ATTR, None)
    assert isinstance(opts, dict), f"{name} is not a hookspec"
    return opts


def test_the_contract_has_the_design_hooks() -> None:
    assert len(HOOK_NAMES) >= 15
    assert {"podnet_allocate", "podnet_register_provider", "podnet_transition"} <= set(HOOKS)


def test_every_podnet_function_is_registered_as_a_hookspec() -> None:
    pm = new_plugin_manager()
    for name in HOOK_NAMES:
        caller = getattr(pm.hook, name, None)
        assert caller is not None, name
        assert caller.spec is not None, name
        assert caller.spec.function is HOOKS[name]
    registered = {name for name in dir(pm.hook) if name.startswith("podnet_")}
    assert registered == set(HOOK_NAMES)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_has_the_spec_marker(name: str) -> None:
    opts = _spec(name)
    assert {"firstresult", "historic"} <= set(opts)
    assert opts["historic"] is False
    assert not hasattr(HOOKS[name], IMPL_ATTR)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_docstring_says_when_it_was_added(name: str) -> None:
    doc = inspect.getdoc(HOOKS[name])
    assert doc, f"{name} has no docstring"
    assert ".. versionadded::" in doc
    # the directive names a version
    line = next(x for x in doc.splitlines() if ".. versionadded::" in x)
    assert line.split("::", 1)[1].strip(), f"{name}: versionadded without a version"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_is_fully_annotated(name: str) -> None:
    func = HOOKS[name]
    signature = inspect.signature(func)
    for param in signature.parameters.values():
        assert param.annotation is not inspect.Parameter.empty, f"{name}({param.name})"
        assert param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, f"{name}({param.name})"
        assert param.default is inspect.Parameter.empty, f"{name}({param.name})"
    assert signature.return_annotation is not inspect.Signature.empty, name
    # the annotations resolve (no typo hiding behind ``from __future__ import annotations``)
    hints = typing.get_type_hints(func, vars(hookspecs))
    assert set(hints) == {*signature.parameters, "return"}


def _per_provider(name: str) -> bool:
    params = inspect.signature(HOOKS[name]).parameters
    return "provider" in params or "context" in params


PER_PROVIDER = [n for n in HOOK_NAMES if _per_provider(n)]


def test_per_provider_hooks_are_found() -> None:
    assert {"podnet_allocate", "podnet_classify_error", "podnet_configure"} <= set(PER_PROVIDER)
    assert "podnet_register_provider" not in PER_PROVIDER
    assert "podnet_transition" not in PER_PROVIDER
    assert set(PER_PROVIDER) >= NOTIFICATIONS_PER_PROVIDER


@pytest.mark.parametrize("name", PER_PROVIDER)
def test_per_provider_hook_is_firstresult(name: str) -> None:
    firstresult = _spec(name)["firstresult"]
    if name in NOTIFICATIONS_PER_PROVIDER:
        assert firstresult is False, f"{name} must reach every implementation routed to"
    else:
        assert firstresult is True, f"{name} is answered by one provider"


@pytest.mark.parametrize(
    "name", ["podnet_register_provider", "podnet_select_networks", "podnet_transition"]
)
def test_collecting_hooks_are_not_firstresult(name: str) -> None:
    assert _spec(name)["firstresult"] is False


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_hook_docstring_says_whether_it_is_routed_or_broadcast(name: str) -> None:
    doc = " ".join((inspect.getdoc(HOOKS[name]) or "").split())
    if name in PER_PROVIDER:
        assert "Routed (since 0.3.0): called on" in doc, name
        # a hook older than routing says when it became routed; a newer one always was
        added = re.search(r"\.\. versionadded:: 0\.(\d+)\.", doc)
        assert (".. versionchanged:: 0.3.0 routed" in doc
                or (added is not None and int(added.group(1)) >= 3)), name
        assert "Broadcast" not in doc, name
    else:
        assert "Broadcast (since 0.1.0): every plugin" in doc, name
        assert "Routed" not in doc, name


def test_module_docstring_lists_every_hook() -> None:
    doc = hookspecs.__doc__
    assert doc
    missing = [name for name in HOOK_NAMES if f"``{name}``" not in doc]
    assert missing == []


def _reference_impls() -> dict[str, dict[str, Any]]:
    return {
        name: getattr(getattr(ReferenceProvider, name), IMPL_ATTR)
        for name in dir(ReferenceProvider)
        if hasattr(getattr(ReferenceProvider, name), IMPL_ATTR)
    }


def test_reference_implements_every_required_hook() -> None:
    impls = set(_reference_impls())
    required = set(HOOK_NAMES) - OPTIONAL_FOR_REFERENCE
    assert set(HOOK_NAMES) >= OPTIONAL_FOR_REFERENCE, "an optional hook no longer exists"
    assert sorted(required - impls) == []
    assert sorted(REFERENCE_MUST_IMPLEMENT - impls) == []
    # the explicit list and the dynamic one agree: a new hook must be implemented or
    # declared optional here
    assert required == REFERENCE_MUST_IMPLEMENT


def test_reference_implements_only_known_hooks() -> None:
    impls = _reference_impls()
    assert set(impls) <= set(HOOK_NAMES)
    pm = new_plugin_manager()
    provider = ReferenceProvider(ReferenceCloud())
    pm.register(provider, name="reference")
    pm.check_pending()
    callers = {h.name for h in pm.get_hookcallers(provider) or ()}
    assert callers == set(impls)


@pytest.mark.parametrize("name", sorted(REFERENCE_MUST_IMPLEMENT))
def test_reference_impl_takes_the_spec_arguments(name: str) -> None:
    spec_params = list(inspect.signature(HOOKS[name]).parameters)
    impl_params = list(inspect.signature(getattr(ReferenceProvider, name)).parameters)
    assert impl_params[0] == "self"
    assert impl_params[1:] == spec_params


# --- routing as data ------------------------------------------------------------------------


def test_every_hook_declares_its_routing() -> None:
    assert set(hookspecs.ROUTING) == set(HOOK_NAMES)
    for name, entry in hookspecs.ROUTING.items():
        assert entry.hook == name
        routed = entry.routing is hookspecs.Routing.ROUTED
        # the data agrees with the signature: a routed hook names its provider
        assert routed == _per_provider(name), name
        if routed:
            head = entry.by.split(".")[0]
            assert head in inspect.signature(HOOKS[name]).parameters, name
        else:
            assert entry.answers, name


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_the_routing_sentence_is_written_from_the_data(name: str) -> None:
    doc = " ".join((inspect.getdoc(HOOKS[name]) or "").split())
    assert hookspecs.ROUTING[name].sentence() in doc


def _providers() -> Providers:
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(ReferenceCloud()), name="reference")
    return Providers(pm)


@pytest.mark.parametrize("name", ["podnet_select_provider", "podnet_transition",
                                  "podnet_register_provider", "podnet_select_networks"])
def test_a_broadcast_hook_is_refused_routed(name: str) -> None:
    with pytest.raises(MisroutedCall, match=f"{name} is a broadcast hook"):
        _providers().hook("reference", name)


@pytest.mark.parametrize("name", ["podnet_allocate", "podnet_configure", "podnet_unplug"])
def test_a_routed_hook_is_refused_broadcast(name: str) -> None:
    with pytest.raises(MisroutedCall, match=f"{name} is a routed hook"):
        _providers().broadcast(name)


def test_a_name_that_is_no_hook_is_refused() -> None:
    with pytest.raises(MisroutedCall, match="podnet_nothing is no hook"):
        _providers().hook("reference", "podnet_nothing")


def test_the_gateway_refuses_a_call_routed_to_another_provider_than_it_names() -> None:
    cloud = ReferenceCloud()
    pm = new_plugin_manager()
    pm.register(ReferenceProvider(cloud), name="reference")
    gateway = ProviderGateway(
        Providers(pm), policy=lambda _name: PoolPolicy(), clock=FakeClock(),
        fence=Fence(open_forever=True), tracing=Tracing(), calls=Counter())
    node = NodeContext(node=NodeInfo(name="n", uid="u", pod_cidr="10.64.0.0/24"))
    assert gateway.address_space("reference", node) is not None
    with pytest.raises(MisroutedCall, match="names provider 'other'"):
        gateway._call("reference", "podnet_address_space", provider="other", node=node)
    assert gateway.calls["reference.address_space"] == 1
    assert gateway.select_provider(NodeInfo(name="n", uid="u")) in (None, "reference")


# --- the contract's version ------------------------------------------------------------------


def test_the_contract_version_is_the_package_version() -> None:
    assert importlib.metadata.version("podnet") == hookspecs.CONTRACT_VERSION
    doc = hookspecs.__doc__ or ""
    assert f"- {hookspecs.CONTRACT_VERSION}:" in doc  # the changelog says what changed


def test_no_hook_is_newer_than_the_contract() -> None:
    current = tuple(int(p) for p in hookspecs.CONTRACT_VERSION.split("."))
    for name in HOOK_NAMES:
        for version in re.findall(r"\.\. version(?:added|changed):: (\d+\.\d+\.\d+)",
                                  HOOKS[name].__doc__ or ""):
            assert tuple(int(p) for p in version.split(".")) <= current, (name, version)
