# podnet's image: the controller (`podnet run`), the node agent (`podnet node`) and the
# CNI plugin (`podnet-cni`, a static executable built here from cni/podnet-cni.c with
# Debian's musl-tools, which the agent's init step `podnet install-cni` copies onto the
# host) in one image, on Debian's Python.
#
# Who runs as what (deploy/chart sets it per container):
#   controller   uid 65532 (this image's USER), no capabilities, read-only root
#   install-cni  uid 0, no capabilities (the host's CNI directories belong to root)
#   node agent   uid 0, privileged (netlink and network namespaces: NET_ADMIN, SYS_ADMIN)
#
#   docker build -t podnet:0.9.0 .                       # every provider's SDK
#   docker build --build-arg EXTRAS=ecs -t podnet:0.9.0 .  # one provider's only
ARG BASE=debian:bookworm-slim
# the build stage's base: the C toolchain (musl-tools) stays out of the image
ARG BUILD_BASE=debian:bookworm-slim

FROM ${BUILD_BASE} AS build
# (a base that has them already, like one made with debootstrap --include, skips apt);
# python3-openvswitch for OVSDB's C JSON parser, which pip's `ovs` lacks
RUN { python3 -c "import ensurepip" && command -v musl-gcc \
      && ls /usr/lib/python3/dist-packages/ovs/_json.*.so; } >/dev/null 2>&1 || { \
    apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv musl-tools python3-openvswitch \
 && rm -rf /var/lib/apt/lists/*; }
COPY . /src
ARG EXTRAS=all
# e.g. "--no-index --find-links /src/wheelhouse": install from wheels made beforehand
# (`pip wheel -w wheelhouse '.[all]'`), for a builder that cannot reach an index
ARG PIP_ARGS=""
# a virtualenv on Debian's python3: the runtime stage has the same interpreter path
# (scripts/ovs-json-parser.sh: Debian's C parser into the venv's `ovs`, when the extras
# bring it)
RUN python3 -m venv /opt/podnet \
 && /opt/podnet/bin/pip install --no-cache-dir ${PIP_ARGS} "/src[${EXTRAS}]" \
 && bash /src/scripts/ovs-json-parser.sh /opt/podnet/bin/python \
 && /opt/podnet/bin/pip uninstall -y pip \
 && bash /src/scripts/build-cni.sh /opt/podnet/bin \
 && /opt/podnet/bin/podnet --version \
 && CNI_COMMAND=VERSION /opt/podnet/bin/podnet-cni

FROM ${BASE}
COPY --from=build /opt/podnet /opt/podnet
# nft: the node agent enforces NetworkPolicy in nftables (nft -j -f -); with the OVN
# extra, the shared libraries of the C JSON parser the build stage gave `ovs` (Debian's
# python3-openvswitch depends on them)
RUN parser=$(ls /opt/podnet/lib/python3*/site-packages/ovs/_json.*.so 2>/dev/null || true); \
    { command -v python3 && command -v nft \
      && { [ -z "$parser" ] || ! ldd "$parser" | grep -q "not found"; }; } >/dev/null \
 || { apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
      nftables ${parser:+python3-openvswitch} \
 && rm -rf /var/lib/apt/lists/*; }
ENV PATH=/opt/podnet/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["podnet"]
CMD ["--help"]
