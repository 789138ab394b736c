#!/usr/bin/env bash
# Build podnet's image without a daemon, from Debian alone: a base made with debootstrap
# (Debian's Python in it; the build stage's also musl-tools, for the static CNI plugin),
# the Dockerfile built on it by buildah, the wheels made first
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

# two bases: the image's, and the build stage's with the C toolchain, which the image
# does not carry
for kind in base build-base; do
  if [ ! -f "$out/$kind.tar" ]; then
    # python3-openvswitch: the C JSON parser of OVSDB (the build stage gives it to the
    # venv's `ovs`) and, in the image, the shared libraries it needs
    include=python3,python3-venv,nftables,python3-openvswitch
    [ "$kind" = build-base ] && include=$include,musl-tools
    debootstrap --variant=minbase --include="$include" "$suite" "$out/rootfs"
    tar -C "$out/rootfs" -c . >"$out/$kind.tar"
    rm -rf "$out/rootfs"
  fi
done
containers=()
trap 'for c in "${containers[@]}"; do "${buildah[@]}" rm "$c" >/dev/null 2>&1 || true; done' EXIT
for kind in base build-base; do
  container=$("${buildah[@]}" from scratch)
  containers+=("$container")
  "${buildah[@]}" add "$container" "$out/$kind.tar" /
  "${buildah[@]}" commit -q "$container" "podnet-$kind" >/dev/null
done

rm -rf "$out/context"
mkdir -p "$out/context"
git -C "$here" archive HEAD | tar -x -C "$out/context"
# podnet's own build (setuptools, wheel) too: the builder builds /src from them
"$python" -m pip wheel -q -w "$out/context/wheelhouse" "$out/context[$extras]" setuptools wheel
"${buildah[@]}" bud --isolation chroot --layers=false \
  --build-arg BASE=localhost/podnet-base --build-arg BUILD_BASE=localhost/podnet-build-base \
  --build-arg EXTRAS="$extras" \
  --build-arg "PIP_ARGS=--no-index --find-links /src/wheelhouse" \
  -t "podnet:$version" "$out/context"
"${buildah[@]}" push -q "localhost/podnet:$version" "oci-archive:$out/podnet-$version.tar:podnet:$version"
echo "wrote $out/podnet-$version.tar (ctr -n k8s.io image import $out/podnet-$version.tar)"
