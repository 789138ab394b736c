"""The base install carries no provider SDK: each comes with its extra, and a provider
whose SDK is missing is one line naming the extra.

Each case runs in a fresh interpreter (what is imported is the question). "Absent" is
made by a finder in front of ``sys.meta_path`` that refuses the SDKs' names, as an
install without the extras would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from podnet.core.errors import MissingExtra
from podnet.core.plugin import BUILTIN_EXTRAS, missing_extra

ROOT = Path(__file__).resolve().parent.parent
SDK_MODULES = sorted({m for _, modules in BUILTIN_EXTRAS.values() for m in modules})

# refuses every SDK module, and records who asked for one
BLOCKER = textwrap.dedent("""
    import sys
    SDKS = set(sys.argv[1].split(","))
    asked = []

    class NoSdk:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in SDKS:
                asked.append(name)
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    if sys.argv[2] == "block":
        sys.meta_path.insert(0, NoSdk())
    sys.argv[1:] = sys.argv[3:]
""")

# the base path: the version, and the engine on the reference provider
BASE_PATH = textwrap.dedent("""
    import contextlib, io, json
    from podnet.app.cli import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["--version"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
    from podnet.sim.memory import InMemoryCluster
    from podnet.core.engine import Engine, EngineOptions
    from podnet.core.plugin import load_plugins, new_plugin_manager, skipped_providers
    pm = new_plugin_manager()
    load_plugins(pm, builtins=["reference"], entry_points=False)
    engine = Engine(InMemoryCluster(), pm, options=EngineOptions(default_provider="reference"))
    all_pm = new_plugin_manager()
    load_plugins(all_pm, entry_points=False)
    error = ""
    try:
        Engine(InMemoryCluster(), all_pm, options=EngineOptions(default_provider="bbc"))
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in SDKS)
    print(json.dumps({"version": out.getvalue().strip(), "loaded": loaded, "asked": asked,
                      "skipped": sorted(skipped_providers(all_pm)), "error": error}))
""")


def _python(code: str, mode: str, *args: str, cwd: Path | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCKER + code, ",".join(SDK_MODULES), mode,
                           *args], capture_output=True, text=True, timeout=60, cwd=cwd)


def test_every_extra_is_declared_and_installed_here() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert {extra for extra, _ in BUILTIN_EXTRAS.values()} | {"all"} <= set(extras)
    base = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    sdk_dists = [d for extra, _ in BUILTIN_EXTRAS.values() for d in extras[extra]]
    assert not set(sdk_dists) & set(base), "an SDK is a base dependency"
    # the dev venv installs all of them, so the providers' tests run
    for name in BUILTIN_EXTRAS:
        assert missing_extra(name) is None, name


def test_the_base_path_imports_no_sdk_even_when_all_are_installed() -> None:
    run = _python(BASE_PATH, "allow")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["version"].startswith("podnet ")
    assert report["version"] != "podnet 0+unknown"
    # only the engine on all providers may have imported some; the base part none: run
    # the base part alone
    base_only = BASE_PATH.split("all_pm =")[0] + (
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in SDKS)))\n")
    alone = _python(base_only, "allow")
    assert alone.returncode == 0, alone.stderr
    assert json.loads(alone.stdout) == []


def test_without_the_sdks_the_base_path_works_and_a_named_provider_names_its_extra() -> None:
    run = _python(BASE_PATH, "block")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["loaded"] == []
    assert report["version"].startswith("podnet ")
    assert report["skipped"] == ["bbc", "ecs", "ovn"]
    assert report["error"] == (
        "MissingExtra: config defaultProvider: provider 'bbc' needs the Python package "
        "'baidubce', which is not installed: pip install 'podnet[bbc]'")


@pytest.mark.parametrize("argv, extra", [
    (["run", "--provider", "ecs"], "ecs"),
    (["node", "--node", "n1", "--provider", "ovn"], "ovn"),
    (["demo", "--provider", "bbc"], "bbc"),
    (["demo"], "bbc"),
])
def test_the_cli_says_which_extra_in_one_line_and_exits_2(argv: list[str], extra: str,
                                                          tmp_path: Path) -> None:
    code = "import sys\nfrom podnet.app.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    run = _python(code, "block", *argv, cwd=tmp_path)
    assert run.returncode == 2, (run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"podnet {argv[0]}: ")
    assert f"pip install 'podnet[{extra}]'" in lines[0]


def test_a_config_naming_a_provider_without_its_sdk_stops_run_before_it_connects(
        tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("defaultProvider: reference\nnetworks: {overlay: {provider: ovn}}\n")
    code = "import sys\nfrom podnet.app.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    # a kubeconfig that does not exist: connecting would fail differently
    run = _python(code, "block", "run", "--config", str(config), "--kubeconfig",
                  str(tmp_path / "missing"), cwd=tmp_path)
    assert run.returncode == 2, run.stderr
    assert run.stderr.strip() == (
        "podnet run: config networks.overlay.provider: provider 'ovn' needs the Python "
        "package 'ovsdbapp', which is not installed: pip install 'podnet[ovn]'")


def test_missing_extra_is_a_config_error_naming_provider_and_extra() -> None:
    from podnet.core.errors import ConfigError

    exc = MissingExtra("providers.ecs", "ecs", "alibabacloud_ecs20140526", "ecs")
    assert isinstance(exc, ConfigError)
    assert exc.key == "providers.ecs"
    assert (exc.provider, exc.extra) == ("ecs", "ecs")


def test_plugins_lists_a_provider_without_its_sdk_with_the_extra(tmp_path: Path) -> None:
    code = "import sys\nfrom podnet.app.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    run = _python(code, "block", "plugins", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = {line.split("│")[1].strip(): line for line in run.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip()}
    assert "reference" in rows and "builtin" in rows["reference"]
    for name in ("bbc", "ecs", "ovn"):
        assert "not installed" in rows[name] and f"pip install 'podnet[{name}]'" in rows[name]
