#!/usr/bin/env bash
# Give a virtualenv's `ovs` package (the OVN provider's OVSDB library, from pip) Open
# vSwitch's C JSON parser, `ovs._json`, taken from Debian's python3-openvswitch.
#
#   bash scripts/ovs-json-parser.sh VENV_PYTHON
#
# Why: pip's `ovs` builds the extension only against Open vSwitch's development files,
# which Debian does not package, so it installs without it and `ovs.json` falls back to
# a lexer in pure Python: most of the OVN provider's CPU at a burst of ports goes there.
# Debian's build of the same module links the library in statically; it needs only the
# shared libraries python3-openvswitch depends on. Its interface (ovs._json.Parser: feed,
# is_done, finish) is the one every `ovs` release's ovs.json calls.
#
# Nothing to do (exit 0) when the venv has no `ovs` package (no OVN extra). Exit 1, with
# the reason, when the module is missing or not built for the venv's Python (it is
# Debian's python3's ABI): the venv works on, slower; tests/test_ovn_json_parser.py fails.
set -euo pipefail
python=${1:?usage: ovs-json-parser.sh VENV_PYTHON}
debian_dir=${OVS_DEBIAN_DIR:-/usr/lib/python3/dist-packages/ovs}

read -r target suffix < <("$python" - <<'EOF'
import importlib.machinery
import importlib.util
import os

spec = importlib.util.find_spec("ovs")
target = os.path.dirname(spec.origin) if spec and spec.origin else "-"
print(target, importlib.machinery.EXTENSION_SUFFIXES[0])
EOF
)
if [ "$target" = - ]; then
  exit 0
fi
module="$debian_dir/_json$suffix"
if [ ! -f "$module" ]; then
  echo "ovs-json-parser: no $module (Debian's python3-openvswitch, built for this" \
       "Python's ABI, $suffix): ovs.json stays in pure Python" >&2
  exit 1
fi
cp "$module" "$target/"
if ! "$python" -c 'import ovs.json, sys; sys.exit(ovs.json.PARSER != ovs.json.PARSER_C)'; then
  echo "ovs-json-parser: $target/_json$suffix does not load in $python" >&2
  rm -f "$target/_json$suffix"
  exit 1
fi
echo "ovs-json-parser: ovs.json parses with Open vSwitch's C parser ($module)"
