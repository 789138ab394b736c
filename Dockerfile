# podnet's image: the controller (`podnet run`), the node agent (`podnet node`) and the
# CNI plugin (`podnet-cni`, which the agent's init step `podnet install-cni` copies onto
# the host) in one image, on Debian's Python.
#
# Who runs as what (deploy/chart sets it per container):
#   controller   uid 65532 (this image's USER), no capabilities, read-only root
#   install-cni  uid 0, no capabilities (the host's CNI directories belong to root)
#   node agent   uid 0, privileged (netlink and network namespaces: NET_ADMIN, SYS_ADMIN)
#
#   docker build -t podnet:0.8.0 .                       # every provider's SDK
#   docker build --build-arg EXTRAS=ecs -t podnet:0.8.0 .  # one provider's only
ARG BASE=debian:bookworm-slim

FROM ${BASE} AS build
# (a base that has them already, like one made with debootstrap --include, skips apt)
RUN python3 -c "import ensurepip" 2>/dev/null || { apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*; }
COPY . /src
ARG EXTRAS=all
# e.g. "--no-index --find-links /src/wheelhouse": install from wheels made beforehand
# (`pip wheel -w wheelhouse '.[all]'`), for a builder that cannot reach an index
ARG PIP_ARGS=""
# a virtualenv on Debian's python3: the runtime stage has the same interpreter path
RUN python3 -m venv /opt/podnet \
 && /opt/podnet/bin/pip install --no-cache-dir ${PIP_ARGS} "/src[${EXTRAS}]" \
 && /opt/podnet/bin/pip uninstall -y pip \
 && /opt/podnet/bin/podnet --version

FROM ${BASE}
# nft: the node agent enforces NetworkPolicy in nftables (nft -j -f -)
RUN { command -v python3 && command -v nft; } >/dev/null || { apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 \
      nftables \
 && rm -rf /var/lib/apt/lists/*; }
COPY --from=build /opt/podnet /opt/podnet
ENV PATH=/opt/podnet/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["podnet"]
CMD ["--help"]
