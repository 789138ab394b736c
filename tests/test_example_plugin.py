"""The example third-party provider (examples/podnet-static-pool), installed as a user would.

The distribution is installed with pip into a temporary ``--target`` folder that goes on
the ``PYTHONPATH`` of subprocesses only: this test never changes the environment it runs
in. It is installed from a copy of the example, so pip's in-tree build leaves nothing
behind in the repository either.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from podnet.core.plugin import DISABLE_ENV

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "podnet-static-pool"
NAME = "static-pool"
VERSION = "0.2.0"
HOOKS = sorted(
    f"podnet_{h}" for h in (
        "address_space", "allocate", "classify_error", "configure", "node_inventory", "pool_grow",
        "pool_shrink", "register_provider", "release", "route", "verify",
    )
)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding the installed example distribution (and nothing else)."""
    work = tmp_path_factory.mktemp("static-pool")
    source = work / "source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns(
        "build", "*.egg-info", "__pycache__", ".pytest_cache"))
    target = work / "site"
    run = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q",
         "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (target / "podnet_static_pool" / "py.typed").exists()
    return target


def _env(site: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH")) if p)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def _run(site: Path, *args: str, timeout: float = 120,
         env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=_env(site, env or {}),
                          capture_output=True, text=True, timeout=timeout, check=False)


def _table_rows(output: str) -> dict[str, list[str]]:
    """The rows of ``podnet plugins``' table by plugin name: each cell's text, joined over
    the lines a long cell wraps onto."""
    rows: dict[str, list[list[str]]] = {}
    current: list[list[str]] | None = None
    for line in output.splitlines():
        cells = [c.strip() for c in re.split(r"[│|]", line)[1:-1]]
        if len(cells) != 4 or cells[0] == "name":
            continue
        if cells[0]:
            current = rows[cells[0]] = [[c] for c in cells]
        elif current is not None:
            for parts, cell in zip(current, cells, strict=True):
                if cell:
                    parts.append(cell)
    return {name: [" ".join(parts) for parts in cells] for name, cells in rows.items()}


def test_installed_example_is_imported_from_the_target_folder(site: Path) -> None:
    run = _run(site, "-c", "import podnet_static_pool as m; print(m.__file__, m.__version__)")
    assert run.returncode == 0, run.stderr
    path, version = run.stdout.split()
    assert Path(path).is_relative_to(site)
    assert version == VERSION


def test_podnet_plugins_lists_the_example_with_its_version_and_hooks(site: Path) -> None:
    run = _run(site, "-m", "podnet.app.cli", "plugins")
    assert run.returncode == 0, run.stderr
    rows = _table_rows(run.stdout)
    assert NAME in rows, run.stdout
    _name, version, source, hooks = rows[NAME]
    assert version == VERSION
    assert source == "entrypoint"
    assert sorted(f"podnet_{h.strip()}" for h in hooks.replace(" ", "").split(",")) == HOOKS
    assert "reference" in rows  # the built-ins are still there

    # the same through the API the command uses
    code = ("import json; from podnet.core.plugin import load_plugins, new_plugin_manager, "
            "plugin_records; pm = new_plugin_manager(); load_plugins(pm); "
            "print(json.dumps([[r.name, r.version, r.source, list(r.hooks)] "
            "for r in plugin_records(pm)]))")
    api = _run(site, "-c", code)
    assert api.returncode == 0, api.stderr
    records = {r[0]: r for r in json.loads(api.stdout)}
    assert records[NAME] == [NAME, VERSION, "entrypoint", HOOKS]


def test_disable_env_hides_the_example(site: Path) -> None:
    run = _run(site, "-m", "podnet.app.cli", "plugins", env={DISABLE_ENV: NAME})
    assert run.returncode == 0, run.stderr
    rows = _table_rows(run.stdout)
    assert NAME not in rows and NAME not in run.stdout
    assert "reference" in rows


def test_the_examples_own_tests_pass_against_the_installed_distribution(site: Path) -> None:
    if importlib.util.find_spec("podnet.testing.conformance") is None:
        pytest.skip("podnet.testing.conformance does not exist yet: the example's "
                    "conformance tests cannot run")
    run = _run(site, "-m", "pytest", "-q", "examples/podnet-static-pool/tests",
               "-p", "no:cacheprovider", timeout=900)
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    summary = run.stdout.strip().splitlines()[-1]
    assert re.search(r"\b\d+ passed\b", summary), summary
    assert not re.search(r"\b(failed|errors?)\b", summary), summary


def _podnet_imports(path: Path) -> list[str]:
    import ast

    tree = ast.parse(path.read_text("utf-8"), filename=str(path))
    found = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names]
    found += [node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and node.level == 0]
    return [name for name in found if name == "podnet" or name.startswith("podnet.")]


def test_the_examples_import_the_provider_contract_only() -> None:
    """One door: an example provider imports podnet.hookspecs (and podnet.linux), nothing
    of core or the application; its tests may use the test kit too."""
    sources = [p for p in (ROOT / "examples").rglob("*.py")]
    assert sources
    outside = []
    for path in sources:
        allowed = ("podnet.hookspecs", "podnet.linux")
        if "tests" in path.relative_to(ROOT / "examples").parts:
            allowed += ("podnet.testing",)
            # the engine-driven smoke test runs podnet's own engine, as section 12 of the
            # guide shows a provider author doing
            allowed += ("podnet.app.demo", "podnet.core", "podnet.sim.memory")
        outside += [f"{path.relative_to(ROOT)}: {name}" for name in _podnet_imports(path)
                    if not name.startswith(allowed)]
    assert outside == []


def test_no_provider_example_or_guide_checks_the_name_it_is_called_for() -> None:
    """Routing is the gateway's: a hook never compares the provider it is called for with
    its own name."""
    check = re.compile(r"\bprovider\s*!=\s*(self\.)?(name|NAME)\b|"
                       r"\b(self\.)?(name|NAME)\s*!=\s*provider\b|"
                       r"spec\.provider\s*!=\s*(self\.)?(name|NAME)\b")
    found = []
    for folder, pattern in (("plugins", "*.py"), ("examples", "*.py"), ("docs", "*.md")):
        for path in (ROOT / folder).rglob(pattern):
            for number, line in enumerate(path.read_text("utf-8").splitlines(), 1):
                if check.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []
