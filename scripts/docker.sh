#!/usr/bin/env bash
# A Docker engine and Docker Compose on this machine, from Debian's packages
# and the Go module proxy (no image registry is needed, none is used).
#
#   scripts/docker.sh start   installs what is missing; starts dockerd if no
#                             engine answers (as root: overlay2 or vfs), and
#                             says so on stdout ("started"); an engine that
#                             answers already is left alone ("running")
#   scripts/docker.sh stop    stops the dockerd `start` started (its pid
#                             file), nothing else
#
# Compose and buildx (Compose builds with BuildKit through it; the Docker
# CLI's classic builder would build every stage of the Dockerfile, its
# toolchain image included) are built from the Go module proxy once —
# github.com/docker/compose/v5 and github.com/docker/buildx (`go install`
# refuses their exclude directives; `go build` in a copy of the downloaded
# module builds them, ~1 and ~1.5 min) — and cached outside the work tree
# ($MVP_CACHE_DIR, default ~/.cache/mvp-envoy), then linked as the engine
# CLI's plugins (~/.docker/cli-plugins/).
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
COMPOSE_VERSION=5.6.0
BUILDX_VERSION=0.38.2
PIDFILE=$CACHE/dockerd.pid
LOG=$CACHE/dockerd.log
log() { printf '==> %s\n' "$*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
mkdir -p "$CACHE"

engine_answers() { docker info >/dev/null 2>&1; }

install_engine() {
  if ! command -v dockerd >/dev/null; then
    log "installing Docker's engine from Debian (docker.io)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends docker.io >/dev/null
  fi
}

# go_plugin MODULE VERSION PACKAGE NAME [LDFLAGS]: builds PACKAGE of
# MODULE@VERSION into the cache once, links it as the CLI plugin NAME.
go_plugin() {
  local module=$1 version=$2 package=$3 name=$4 ldflags=${5:-}
  local out=$CACHE/$name-v$version/$name
  if [ ! -x "$out" ]; then
    local start; start=$(date +%s)
    log "building $name v$version from Go modules (once; cached in $(dirname "$out"))"
    export PATH=/usr/local/go/bin:$PATH
    local work; work=$(mktemp -d "${TMPDIR:-/tmp}/mvp-$name.XXXXXX")
    local dir
    dir=$(cd "$work" && go mod download -json "$module@v$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] || { echo "could not download $module@v$version" >&2; exit 1; }
    cp -r "$dir" "$work/src" && chmod -R u+w "$work/src"
    mkdir -p "$(dirname "$out")"
    (cd "$work/src" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$package" >&2)
    mv "$out.tmp" "$out"
    rm -rf "$work"
    log "built $name in $(( $(date +%s) - start )) s"
  fi
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$out" "$HOME/.docker/cli-plugins/$name"
}

install_plugins() {
  go_plugin github.com/docker/compose/v5 "$COMPOSE_VERSION" ./cmd docker-compose
  # Compose asks buildx its version (0.17 at least).
  go_plugin github.com/docker/buildx "$BUILDX_VERSION" ./cmd/buildx docker-buildx \
    "-X github.com/docker/buildx/version.Version=v$BUILDX_VERSION -X github.com/docker/buildx/version.Package=github.com/docker/buildx"
}

start() {
  install_engine
  install_plugins
  if engine_answers; then echo running; return; fi
  local start; start=$(date +%s)
  # overlay2 where the kernel takes it (this machine kind's does), else vfs.
  $SUDO sh -c "nohup dockerd --host unix:///var/run/docker.sock >'$LOG' 2>&1 & echo \$! >'$PIDFILE'"
  for _ in $(seq 1 120); do
    if engine_answers; then
      log "dockerd started in $(( $(date +%s) - start )) s (storage: $(docker info --format '{{.Driver}}'))"
      echo started
      return
    fi
    sleep 0.5
  done
  echo "dockerd did not answer within 60 s; its log ($LOG):" >&2
  tail -20 "$LOG" >&2
  exit 1
}

stop() {
  [ -f "$PIDFILE" ] || return 0
  local pid; pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    $SUDO kill "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  fi
  rm -f "$PIDFILE"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: scripts/docker.sh start|stop" >&2; exit 2 ;;
esac
