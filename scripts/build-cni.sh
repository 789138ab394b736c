#!/usr/bin/env bash
# Build the CNI plugin from cni/podnet-cni.c: one static executable (musl), written as
# OUT_DIR/podnet-cni and, the same file under its IPAM name, OUT_DIR/podnet-ipam.
#
#   bash scripts/build-cni.sh OUT_DIR
#
# Needs Debian's musl-tools (musl-gcc) and nothing downloaded. Does nothing when both
# files are executables built after the source, this script and pyproject.toml (the
# version); anything else there under those names (an older podnet's Python console
# scripts) is replaced. Files are written beside their target and renamed: a runtime or
# a test running the old file never sees half a new one.
set -euo pipefail
out=${1:?usage: build-cni.sh OUT_DIR}
here=$(cd "$(dirname "$0")/.." && pwd)
src=$here/cni/podnet-cni.c
cc=${MUSL_GCC:-musl-gcc}

elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }
fresh() {
  elf "$1" && [ "$1" -nt "$src" ] && [ "$1" -nt "$here/pyproject.toml" ] && [ "$1" -nt "$0" ]
}
if fresh "$out/podnet-cni" && fresh "$out/podnet-ipam"; then
  exit 0
fi
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "build-cni.sh: $cc not found: install musl-tools (apt-get install musl-tools)" >&2
  exit 1
fi
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$here/pyproject.toml" | head -n 1)
mkdir -p "$out"
tmp=$out/.podnet-cni.$$.tmp
trap 'rm -f "$tmp" "$tmp.ipam"' EXIT
"$cc" -static -Os -s -std=c99 -Wall -Wextra -Werror -DPODNET_VERSION="\"$version\"" \
  -o "$tmp" "$src"
chmod 755 "$tmp"
# one file under two names; a copy where the file system has no hard links
ln -f "$tmp" "$tmp.ipam" 2>/dev/null || cp -p "$tmp" "$tmp.ipam"
mv -f "$tmp.ipam" "$out/podnet-ipam"
mv -f "$tmp" "$out/podnet-cni"
