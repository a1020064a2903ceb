#!/usr/bin/env bash
# Builds the Pulse images on a Docker engine that cannot pull anything: a minimal Debian base
# made here with debootstrap and `docker import`ed (made once, kept while the image exists),
# the runtime layer of deploy/docker/Dockerfile on it, one image per binary from binaries built
# on this machine (debug info stripped from the copy), and PostgreSQL and NATS images from
# Debian's packages. Prints nothing secret; needs root (debootstrap) only for the first base.
#
# Images: <prefix>/<binary>:<tag> (the names compose.yaml and the Helm chart use, with
# PULSE_IMAGE_REGISTRY=<prefix>), <prefix>/postgres:15, <prefix>/nats:2.9.
#
# Usage: deploy/docker/build-local-images.sh [--tag TAG] [--profile debug|release] [--no-deps]
#   --no-deps  skip the PostgreSQL and NATS images
# Environment: CARGO_TARGET_DIR (binaries; default ~/.cache/pulse-target), DEBIAN_MIRROR
# (default: the Debian mirror apt uses here), PULSE_IMAGE_PREFIX (default pulse-local).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tag=dev
profile=debug
deps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --no-deps) deps=0; shift ;;
    *) echo "build-local-images: unknown argument $1" >&2; exit 2 ;;
  esac
done
prefix="${PULSE_IMAGE_PREFIX:-pulse-local}"
target_dir="${CARGO_TARGET_DIR:-$HOME/.cache/pulse-target}"
base="$prefix/debian:bookworm-minbase"
runtime="$prefix/runtime:$tag"
binaries=(pulse-gateway pulse-patrol-scheduler pulse-model-runner pulse-action-broker
  pulse-verifier pulse-agent-relay pulse-connector pulse-agent pulsectl)

log() { echo "build-local-images: $*" >&2; }
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
# The legacy builder's deprecation notice is noise here; real errors still reach stderr.
build() { docker build --quiet "$@" 2> >(grep -v -i -E 'deprecated|buildx|docs.docker.com|^ *$' >&2) >/dev/null; }

debian_mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  local mirror
  mirror="$(grep -rhoE 'https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null |
    tr -d ' ' | grep -v security | head -n1 || true)"
  echo "${mirror:-http://deb.debian.org/debian}"
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if ! have_image "$base"; then
  mirror="$(debian_mirror)"
  log "making the Debian base $base with debootstrap from $mirror"
  command -v debootstrap >/dev/null || { log "debootstrap is missing (apt-get install debootstrap)"; exit 1; }
  debootstrap --variant=minbase --include=ca-certificates,busybox-static bookworm \
    "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  tar -C "$work/rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi

log "building $runtime"
build -f "$here/local/runtime.Dockerfile" --build-arg "BASE_IMAGE=$base" -t "$runtime" "$here"

for binary in "${binaries[@]}"; do
  source="$target_dir/$profile/$binary"
  [ -x "$source" ] || { log "$source is missing: run cargo build --workspace --bins first"; exit 1; }
  context="$work/$binary"
  mkdir -p "$context/bin"
  objcopy --strip-debug "$source" "$context/bin/$binary"
  ln -s "$binary" "$context/bin/pulse-entrypoint"
  log "building $prefix/$binary:$tag"
  build -f "$here/local/service.Dockerfile" --build-arg "RUNTIME_IMAGE=$runtime" \
    --build-arg "BINARY=$binary" -t "$prefix/$binary:$tag" "$context"
  rm -rf "$context"
done

if [ "$deps" = 1 ]; then
  # The builder's cache keeps the package installs: an unchanged image rebuilds in seconds,
  # without the network.
  log "building $prefix/postgres:15 from Debian's postgresql-15"
  build --network host -f "$here/local/postgres.Dockerfile" --build-arg "BASE_IMAGE=$base" \
    -t "$prefix/postgres:15" "$here/local"
  log "building $prefix/nats:2.9 from Debian's nats-server"
  build --network host -f "$here/local/nats.Dockerfile" --build-arg "BASE_IMAGE=$base" \
    -t "$prefix/nats:2.9" "$here/local"
fi
log "done: ${binaries[*]/#/$prefix/} (tag $tag)"
