"""Write sim/openapi-v1.32.json: the OpenAPI (swagger 2.0) definitions of the built-in
kinds the API emulator serves, and of every type they reach, for Kubernetes v1.32 (the
version the emulator reports).

    .venv/bin/python scripts/gen_builtin_openapi.py          # rewrite the file
    .venv/bin/python scripts/gen_builtin_openapi.py --check  # exit 1 when it differs

The source is kubernetes-validate (a test-only dependency), which ships JSON schemas
generated from upstream's ``api/openapi-spec/swagger.json`` per release; its per-version
``_definitions.json`` keeps upstream's definition names, descriptions, ``required`` lists
and ``x-kubernetes-*`` extensions. This script turns them back into swagger's shape (one
type per field, ``#/definitions/`` references, upstream's ``int-or-string`` and quantity
string types) and keeps only what the served kinds reach, so the emulator itself needs no
test package at run time. tests/test_apiserver_builtin_validation.py fails when the file
is not what this writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from podnet.sim.openapi import refs

VERSION = "v1.32.0"
OUT = Path(__file__).resolve().parent.parent / "sim" / "openapi-v1.32.json"

#: the served built-in kinds (and the meta types a server's document always has)
ROOTS = (
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Secret",
    "io.k8s.api.core.v1.ServiceAccount",
    "io.k8s.api.core.v1.Service",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.apps.v1.StatefulSet",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent",
)

#: list kinds of the served roots that have one upstream
LISTS = tuple(f"{r}List" for r in ROOTS if not r.startswith("io.k8s.apimachinery"))

#: upstream's swagger gives these as plain strings (the JSON-schema copy says oneOf)
SCALARS: dict[str, dict[str, Any]] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string"},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {
        "type": "string",
        "format": "int-or-string",
    },
}


def source_definitions() -> dict[str, Any]:
    import kubernetes_validate

    base = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    doc = json.loads((base / f"{VERSION}-local" / "_definitions.json").read_text())
    return dict(doc["$defs"])


def _swagger(node: Any, top: bool = False) -> Any:
    if isinstance(node, list):
        return [_swagger(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref":
            out[key] = "#/definitions/" + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            kept = [t for t in value if t != "null"]
            if len(kept) == 1:
                out[key] = kept[0]
        elif key == "properties":
            out[key] = {name: _swagger(prop) for name, prop in value.items()}
        else:
            out[key] = _swagger(value)
    return out


def definitions(source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trimmed swagger definitions, by upstream name."""
    defs = source if source is not None else source_definitions()
    wanted = [*ROOTS, *(name for name in LISTS if name in defs)]
    seen: set[str] = set()
    while wanted:
        name = wanted.pop()
        if name in seen:
            continue
        seen.add(name)
        wanted.extend(refs(defs[name]))
    out: dict[str, Any] = {}
    for name in sorted(seen):
        if name in SCALARS:
            out[name] = dict(SCALARS[name])
            continue
        converted = _swagger(defs[name])
        if "x-kubernetes-group-version-kind" in converted:
            # the JSON-schema copy pins apiVersion and kind with an enum; upstream does not
            for key in ("apiVersion", "kind"):
                converted.get("properties", {}).get(key, {}).pop("enum", None)
        out[name] = converted
    return out


def render(source: dict[str, Any] | None = None) -> str:
    """The file's text: one definition a line, so a regeneration diffs by type."""
    defs = definitions(source)
    lines = [
        f"{json.dumps(name)}: {json.dumps(body, sort_keys=True, separators=(',', ':'))}"
        for name, body in defs.items()
    ]
    head = json.dumps({"kubernetesVersion": VERSION})[:-1]
    return head + ', "definitions": {\n' + ",\n".join(lines) + "\n}}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT.name} is not what {Path(__file__).name} writes: run it", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
