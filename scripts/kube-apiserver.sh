#!/usr/bin/env bash
# Builds a real kube-apiserver once and prints its path (the real tier's etcd:
# scripts/etcd.sh).
# Kubernetes v1.20.2 is the newest kube-apiserver the reachable registries
# carry: Debian bookworm's source package `kubernetes`, built with Debian's
# Go. The binary is cached outside the work tree ($MVP_CACHE_DIR, default
# ~/.cache/mvp-envoy), so a fresh clone on the same machine reuses it; the
# first build takes about 7-10 minutes on 2 cores.
#   scripts/kube-apiserver.sh        build if needed, print the binary's path
set -euo pipefail

VERSION=1.20.2
DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
OUT=$CACHE/kube-apiserver-v$VERSION
BIN=$OUT/kube-apiserver

log() { printf '==> %s\n' "$*" >&2; }
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
apt_install() {
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

if [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -q "v$VERSION"; then
  echo "$BIN"
  exit 0
fi

log "building kube-apiserver v$VERSION from Debian's source package (once; cached in $OUT)"
# Source packages: deb-src next to deb in Debian's sources.
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ] && ! grep -q "deb-src" "$src"; then
  $SUDO sed -i 's/^Types: deb$/Types: deb deb-src/' "$src"
fi
$SUDO apt-get update -qq
apt_install golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev

work=$(mktemp -d "${TMPDIR:-/tmp}/mvp-kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -qq "kubernetes=$DEB_VERSION" >/dev/null 2>&1 || apt-get source "kubernetes=$DEB_VERSION"
cd "$(find . -maxdepth 1 -type d -name 'kubernetes-*' | head -n 1)"

# v1.20.2 vendors modern-go/reflect2 v1.0.1, whose map iteration breaks on
# Go >= 1.18: the apiserver then dies at random ("unexpected fault address")
# while encoding lists. Debian's reflect2 1.0.2 fixes it.
rsync -a --delete --exclude go.mod --exclude '*_test.go' \
  /usr/share/gocode/src/github.com/modern-go/reflect2/ vendor/github.com/modern-go/reflect2/

export GOPATH=$PWD/.go PATH=/usr/lib/go/bin:$PATH CGO_ENABLED=0 HOME=$PWD/.home GOPROXY=off GOFLAGS=-mod=vendor
mkdir -p .go/src/k8s.io "$HOME"
ln -sfn ../../.. .go/src/k8s.io/kubernetes
make WHAT=cmd/kube-apiserver >&2

mkdir -p "$OUT"
install -m 0755 _output/bin/kube-apiserver "$BIN.tmp"
mv "$BIN.tmp" "$BIN"
log "built $("$BIN" --version)"
echo "$BIN"
