"""Meta-tests of the provider guide (docs/writing-a-provider.md) and of test coverage of
the hooks: the guide documents every hook the contract declares, in the contract's order
and with the contract's firstresult setting, and names the real policy fields, error kinds
and test-kit entry points; every hook is exercised by some test."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

import podnet.hookspecs as hookspecs
from podnet.core.errors import ErrorKind
from podnet.core.plugin import DISABLE_ENV
from podnet.core.policy import PoolPolicy

ROOT = Path(__file__).resolve().parent.parent
GUIDE_PATH = ROOT / "docs" / "writing-a-provider.md"
GUIDE = GUIDE_PATH.read_text(encoding="utf-8")
TESTS = Path(__file__).resolve().parent
#: files that name every hook by construction, so they prove nothing about coverage
NOT_COVERAGE = {"test_guide.py", "test_hookspecs.py"}


def _hooks() -> dict[str, Callable[..., Any]]:
    """The hookspecs, in the order the contract declares them (its calling order)."""
    found = [
        (obj.__code__.co_firstlineno, name, obj)
        for name, obj in vars(hookspecs).items()
        if name.startswith("podnet_") and inspect.isfunction(obj)
    ]
    return {name: obj for _, name, obj in sorted(found)}


HOOKS = _hooks()
HOOK_NAMES = list(HOOKS)
#: headings of the guide, in order
HEADINGS = [m.group(1) for m in re.finditer(r"^#{1,6}\s+(.*)$", GUIDE, re.MULTILINE)]


def _firstresult(name: str) -> bool:
    opts = getattr(HOOKS[name], f"{hookspecs.PROJECT}_spec")
    return bool(opts["firstresult"])


def test_the_contract_is_read() -> None:
    assert len(HOOK_NAMES) >= 15
    assert HOOK_NAMES[0] == "podnet_register_provider"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_is_documented_in_the_guide(name: str) -> None:
    in_heading = any(f"`{name}`" in heading for heading in HEADINGS)
    in_code_span = f"`{name}`" in GUIDE
    assert in_heading or in_code_span, f"{name} is not documented in {GUIDE_PATH.name}"
    # and it has a section of its own, with its signature
    assert in_heading, f"{name} has no heading in {GUIDE_PATH.name}"
    assert re.search(rf"def {name}\(", GUIDE), f"{name}'s signature is not shown"


def test_hook_sections_follow_the_contracts_calling_order() -> None:
    sections = [h.strip("` ") for h in HEADINGS if re.fullmatch(r"`podnet_\w+`", h.strip())]
    assert sections == HOOK_NAMES


def test_guide_names_no_hook_the_contract_lacks() -> None:
    named = set(re.findall(r"`(podnet_[a-z_]+)`", GUIDE))
    named |= set(re.findall(r"def (podnet_[a-z_]+)\(", GUIDE))
    assert named - set(HOOKS) == set(), "the guide names hooks that do not exist"


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_the_hook_table_states_firstresult_as_the_contract_does(name: str) -> None:
    row = re.search(rf"^\|\s*\d+\s*\|\s*`{name}`\s*\|\s*([^|]+)\|", GUIDE, re.MULTILINE)
    assert row is not None, f"{name} is missing from the table of hooks"
    says_first = row.group(1).strip().startswith("yes")
    assert says_first is _firstresult(name), f"{name}: firstresult is {_firstresult(name)}"


@pytest.mark.parametrize("kind", list(ErrorKind))
def test_every_error_kind_is_explained(kind: ErrorKind) -> None:
    assert re.search(rf"^\|\s*`{kind.value}`\s*\|", GUIDE, re.MULTILINE), kind


@pytest.mark.parametrize("field", attrs.fields(PoolPolicy), ids=lambda f: f.name)
def test_every_policy_field_is_listed_with_its_default(field: attrs.Attribute[Any]) -> None:
    row = re.search(rf"^\|\s*`{field.name}`\s*\|\s*([^|]+)\|", GUIDE, re.MULTILINE)
    assert row is not None, f"PoolPolicy.{field.name} is missing from the policy table"
    assert row.group(1).strip().strip("`") == repr(field.default), field.name


def test_packaging_and_kit_names_are_the_real_ones() -> None:
    from podnet.testing import chaos, conformance, plugin

    for name in (hookspecs.ENTRY_POINT_GROUP, DISABLE_ENV, chaos.EXAMPLES_ENV,
                 "make_chaos_machine", "chaos_settings", "ProviderConformance",
                 'pytest_plugins = ["podnet.testing"]'):
        assert name in GUIDE, name
    assert callable(chaos.make_chaos_machine) and callable(chaos.chaos_settings)
    base = conformance.ProviderConformance
    for member in ("provider_name", "provider_plugin", "cloud_addresses", "error_samples",
                   "crash_hooks"):
        assert f"`{member}`" in GUIDE or f"def {member}" in GUIDE, member
        declared = hasattr(base, member) or member in base.__annotations__
        assert member == "provider_plugin" or declared, member
    for fixture in plugin.__all__:
        assert f"`{fixture}`" in GUIDE, f"kit fixture {fixture} is not named in the guide"


# --- every hook is exercised by a test (a textual check, as datasette does) ---------------


def _test_sources() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(TESTS.glob("test_*.py"))
            if p.name not in NOT_COVERAGE}


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_every_hook_is_exercised_by_some_test(name: str) -> None:
    users = [f for f, text in _test_sources().items() if re.search(rf"\b{name}\b", text)]
    assert users, f"no test under tests/ names {name}"
