"""Write deploy/'s plain manifests from the Helm chart in deploy/chart/ (its defaults, in
kube-system), rendered by Helm's own engine (the Helm SDK behind helm-python-sdk), the
CRDs from their one source, sim/crds/ (the package's copy, which the emulator serves), into
the chart's crds/ and deploy/crds/, each copy headed by a comment saying so, and the
chart's values.schema.json from scripts/chart_schema.py (its pool policies from podnet's
own model).

The copies stay in git: `helm install deploy/chart` and `kubectl apply -f deploy/crds/`
work from a checkout, with no step before.

    .venv/bin/python scripts/render_deploy.py          # rewrite deploy/*.yaml, the CRD
                                                       # copies, the values schema
    .venv/bin/python scripts/render_deploy.py --check  # exit 1 when they differ

tests/test_chart.py fails when deploy/ is not what this writes.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CRDS = ROOT / "sim" / "crds"  # edit the CRDs here
CHART = DEPLOY / "chart"
NAMESPACE = "kube-system"
HEADER = ("# Rendered from deploy/chart with its default values by scripts/render_deploy.py:"
          " edit the chart, then run that.\n")
CRD_HEADER = ("# Generated from sim/crds/{name} by scripts/render_deploy.py: edit that file,"
              " then run that.\n")


def _chart_schema() -> ModuleType:
    """scripts/chart_schema.py, found beside this file however this one was loaded."""
    spec = importlib.util.spec_from_file_location("chart_schema",
                                                  Path(__file__).with_name("chart_schema.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def values_schema_text() -> str:
    return json.dumps(_chart_schema().values_schema(), indent=2) + "\n"


def render(values: dict[str, object] | None = None, *, namespace: str = NAMESPACE
           ) -> dict[str, str]:
    """Template file name (``deployment.yaml``) -> its rendered text, empty ones left out."""
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    out = chart.render(values, name="podnet", namespace=namespace, is_install=True)
    return {Path(path).name: text for path, text in sorted(out.items())
            if Path(path).suffix == ".yaml" and text.strip()}


def expected_files() -> dict[Path, str]:
    """Every file of deploy/ the chart and sim/crds/ make, with its text; the values
    schema first (the chart renders with it)."""
    files = {CHART / "values.schema.json": values_schema_text()}
    files.update({DEPLOY / name: HEADER + text.lstrip("\n") for name, text in render().items()})
    for crd in sorted(CRDS.glob("*.yaml")):
        copy = CRD_HEADER.format(name=crd.name) + crd.read_text()
        files[CHART / "crds" / crd.name] = files[DEPLOY / "crds" / crd.name] = copy
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say what differs")
    args = parser.parse_args(argv)
    schema = CHART / "values.schema.json"
    if not args.check and (not schema.exists() or schema.read_text() != values_schema_text()):
        # first: the chart renders with its schema, and the old one may refuse new values
        schema.write_text(values_schema_text())
        print(f"wrote {schema.relative_to(ROOT)}")
    stale = [path for path, text in expected_files().items()
             if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} differs from what the chart and sim/crds make",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(expected_files()[path])
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
