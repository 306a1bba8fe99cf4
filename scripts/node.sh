#!/usr/bin/env bash
# What a Kubernetes node of the tests' control plane needs on this machine
# (integration/src/harness/node.rs runs one): containerd, runc and the CNI
# plugins from Debian; kubelet, kube-scheduler and kube-proxy of the newest release
# (scripts/kube-releases' first), built with its kube-apiserver from Go
# modules in one `go build` (scripts/kube-release.sh); and a pause image
# built locally from kube's own source (build/pause/linux/pause.c in the
# k8s.io/kubernetes module, compiled static, FROM scratch) — no registry is
# reachable here. Prints the folder holding them.
# Needs a running Docker engine (scripts/docker.sh start) for the pause
# image; idempotent, cached outside the work tree.
set -euo pipefail
cd "$(dirname "$0")/.."

CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
RELEASE=$(head -n1 scripts/kube-releases)
PAUSE=registry.k8s.io/pause:3.10
log() { printf '==> %s\n' "$*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi

if ! command -v containerd >/dev/null || ! command -v runc >/dev/null || [ ! -x /usr/lib/cni/bridge ]; then
  log "installing containerd, runc and the CNI plugins from Debian"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends containerd runc containernetworking-plugins >/dev/null
fi

out=$(scripts/kube-release.sh "$RELEASE" kubelet kube-scheduler kube-proxy)

if ! docker image inspect "$PAUSE" >/dev/null 2>&1; then
  start=$(date +%s)
  export PATH=/usr/local/go/bin:$PATH
  src=$(cd "$(mktemp -d)" && go mod download -json "k8s.io/kubernetes@v$RELEASE" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  ctx=$(mktemp -d "${TMPDIR:-/tmp}/mvp-pause.XXXXXX")
  gcc -Os -static -DVERSION="v3.10-mvp" -o "$ctx/pause" "$src/build/pause/linux/pause.c"
  strip "$ctx/pause"
  printf 'FROM scratch\nCOPY pause /pause\nUSER 65535:65535\nENTRYPOINT ["/pause"]\n' > "$ctx/Dockerfile"
  docker build -q -t "$PAUSE" "$ctx" >/dev/null
  rm -rf "$ctx"
  log "pause image $PAUSE built from kube v$RELEASE's pause.c in $(( $(date +%s) - start )) s"
fi
echo "$out"
