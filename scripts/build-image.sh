#!/usr/bin/env bash
# Build podnet's image without a daemon, from Debian alone: a base made with debootstrap
# (Debian's Python in it), the Dockerfile built on it by buildah, the wheels made first
# by the host's pip (the builder installs from them, reaching no index), written as an
# OCI archive that `ctr image import` (or any registry push) takes.
#
#   sudo bash scripts/build-image.sh OUT_DIR [EXTRAS]
#
# Needs root and Debian's debootstrap and buildah (apt-get install debootstrap buildah).
# Not part of `make test`: it takes minutes (the README's "Install on a cluster" says
# how long); the image's contents are the Dockerfile's.
set -euo pipefail
out=${1:?usage: build-image.sh OUT_DIR [EXTRAS]}
extras=${2:-all}
suite=${SUITE:-bookworm}
here=$(cd "$(dirname "$0")/.." && pwd)
version=$(cd "$here" && python3 -c 'import tomllib; print(tomllib.load(open("pyproject.toml","rb"))["project"]["version"])')
mkdir -p "$out"
out=$(cd "$out" && pwd)
# the host's pip makes the wheels (the venv's, when `make` made one)
python=${PYTHON:-$here/.venv/bin/python}
[ -x "$python" ] || python=python3
buildah=(buildah --root "$out/storage" --runroot "$out/run" --storage-driver vfs)

if [ ! -f "$out/base.tar" ]; then
  debootstrap --variant=minbase --include=python3,python3-venv,nftables "$suite" "$out/rootfs"
  tar -C "$out/rootfs" -c . >"$out/base.tar"
  rm -rf "$out/rootfs"
fi
base=$("${buildah[@]}" from scratch)
trap '"${buildah[@]}" rm "$base" >/dev/null 2>&1 || true' EXIT
"${buildah[@]}" add "$base" "$out/base.tar" /
"${buildah[@]}" commit -q "$base" podnet-base >/dev/null

rm -rf "$out/context"
mkdir -p "$out/context"
git -C "$here" archive HEAD | tar -x -C "$out/context"
# podnet's own build (setuptools, wheel) too: the builder builds /src from them
"$python" -m pip wheel -q -w "$out/context/wheelhouse" "$out/context[$extras]" setuptools wheel
"${buildah[@]}" bud --isolation chroot --layers=false \
  --build-arg BASE=localhost/podnet-base --build-arg EXTRAS="$extras" \
  --build-arg "PIP_ARGS=--no-index --find-links /src/wheelhouse" \
  -t "podnet:$version" "$out/context"
"${buildah[@]}" push -q "localhost/podnet:$version" "oci-archive:$out/podnet-$version.tar:podnet:$version"
echo "wrote $out/podnet-$version.tar (ctr -n k8s.io image import $out/podnet-$version.tar)"
