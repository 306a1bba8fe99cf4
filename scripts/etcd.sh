#!/usr/bin/env bash
# Builds a real etcd once from the Go module proxy and prints its path.
#
#   scripts/etcd.sh        -> $CACHE/etcd-v<scripts/etcd-release>/etcd
#
# The real tier's one etcd under every kube-apiserver of a control plane.
# Kubernetes 1.34+ is validated against etcd 3.6, and 1.37 refuses watches
# that need etcd's progress notify (bookmarks, `sendInitialEvents` — what a
# kubelet's informers send) with an ERROR event on an etcd without it, such
# as Debian's 3.4.23. etcd's own `server/main.go` is the binary's main
# package; it builds in a small module of ours that requires it (its go.mod
# replaces point at sibling folders, which `go install pkg@version` refuses).
#
# Cached outside the work tree ($MVP_CACHE_DIR, default ~/.cache/mvp-envoy);
# about a minute the first time. Uses Go at /usr/local/go (the polyglot
# kind's) or any go on PATH.
set -euo pipefail

VERSION=$(tr -d '[:space:]' < "$(dirname "$0")/etcd-release")
CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
OUT=$CACHE/etcd-v$VERSION
BIN=$OUT/etcd

log() { printf '==> %s\n' "$*" >&2; }
built() { [ -x "$BIN" ] && "$BIN" --version 2>/dev/null | grep -qx "etcd Version: $VERSION"; }
if built; then echo "$BIN"; exit 0; fi

export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "no Go toolchain (expected /usr/local/go)" >&2; exit 1; }

# One build at a time (two test binaries may ask at once).
mkdir -p "$CACHE"
exec 9>"$CACHE/etcd-v$VERSION.lock"
flock 9
if built; then echo "$BIN"; exit 0; fi

log "building etcd v$VERSION from Go modules (once; cached in $OUT)"
work=$(mktemp -d "${TMPDIR:-/tmp}/mvp-etcd-$VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init mvp-etcd-build >/dev/null 2>&1
go get "go.etcd.io/etcd/server/v3@v$VERSION" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@v$VERSION"
mkdir -p "$OUT"
CGO_ENABLED=0 go build -trimpath -o "$BIN.tmp" go.etcd.io/etcd/server/v3
mv "$BIN.tmp" "$BIN"
built || { echo "the etcd built does not report v$VERSION" >&2; exit 1; }
log "etcd v$VERSION built"
echo "$BIN"
