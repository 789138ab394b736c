#!/usr/bin/env bash
# mypy cannot follow setuptools' package-dir mapping of an editable install, so it checks
# a tree of symlinks laid out as the installed package is.
set -euo pipefail
venv=${1:-.venv}
root=.typecheck/podnet
mkdir -p "$root"
for pair in app:app core:core hookspecs:hookspecs linux:linux node:node plugins:plugins sim:sim testing:testing; do
  ln -sfn "../../${pair%%:*}" "$root/${pair##*:}"
done
cd .typecheck
"../$venv/bin/mypy" --config-file ../pyproject.toml --explicit-package-bases podnet
