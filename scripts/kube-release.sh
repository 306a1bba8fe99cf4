#!/usr/bin/env bash
# Builds real Kubernetes binaries of a current release from the Go module
# proxy — kube-apiserver and kube-controller-manager, and any other
# components named — once, and prints the folder that holds them.
#
#   scripts/kube-release.sh 1.37.2      -> $CACHE/kube-v1.37.2/{kube-apiserver,kube-controller-manager}
#   scripts/kube-release.sh 1.37.2 kubelet kube-scheduler
#                                       -> the same, and kubelet and kube-scheduler beside them
# The components are one `go build` of one module: they share its compiled
# packages (a component added later reuses Go's build cache).
#
# k8s.io/kubernetes is a module whose go.mod points every k8s.io/* staging
# module at ./staging — replaces a dependency's go.mod cannot carry. So the
# build runs in a small module of ours that requires k8s.io/kubernetes at the
# release and replaces each staging module with its published v0.X.Y (the
# same source, cut from the same tag). The version variables are set by
# -ldflags as kubernetes' hack/lib/version.sh does: /version, the binary
# version behind --emulated-version and the identity Lease all read them.
#
# Cached outside the work tree ($MVP_CACHE_DIR, default ~/.cache/mvp-envoy),
# so a fresh clone on the same machine reuses the binaries; the Go module and
# build caches (~/go) are reused across releases. Uses Go at /usr/local/go
# (the polyglot kind's) or any go on PATH of at least the release's version.
set -euo pipefail

VERSION=${1:?usage: scripts/kube-release.sh VERSION [COMPONENT...] (e.g. 1.37.2 kubelet)}
shift
case "$VERSION" in 1.[0-9]*.[0-9]*) ;; *) echo "not a release: $VERSION" >&2; exit 2 ;; esac
MINOR=${VERSION#1.}; MINOR=${MINOR%%.*}
PATCH=${VERSION##*.}
CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
OUT=$CACHE/kube-v$VERSION
COMPONENTS="kube-apiserver kube-controller-manager"
for c in "$@"; do
  case " $COMPONENTS " in *" $c "*) ;; *) COMPONENTS="$COMPONENTS $c" ;; esac
done

log() { printf '==> %s\n' "$*" >&2; }

done_already() {
  for c in $COMPONENTS; do
    [ -x "$OUT/$c" ] && "$OUT/$c" --version 2>/dev/null | grep -qx "Kubernetes v$VERSION" || return 1
  done
}
if done_already; then echo "$OUT"; exit 0; fi

export PATH=/usr/local/go/bin:$PATH
command -v go >/dev/null || { echo "no Go toolchain (expected /usr/local/go)" >&2; exit 1; }

# One build of one release at a time (two test binaries may ask at once).
mkdir -p "$CACHE"
exec 9>"$CACHE/kube-v$VERSION.lock"
flock 9
if done_already; then echo "$OUT"; exit 0; fi

start=$(date +%s)
log "building $COMPONENTS v$VERSION from Go modules (once; cached in $OUT)"
work=$(mktemp -d "${TMPDIR:-/tmp}/mvp-kube-$VERSION.XXXXXX")
trap 'rm -rf "$work"' EXIT
cd "$work"

# Kubernetes' own go.mod names its staging modules; replace each with its
# published release.
go mod download -json "k8s.io/kubernetes@v$VERSION" > kubernetes.json
kmod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' kubernetes.json)
goversion=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kmod")
staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*#\1#p' "$kmod")
[ -n "$staging" ] || { echo "no staging replaces found in $kmod" >&2; exit 1; }
{
  echo "module mvp-envoy.local/kube-build"
  echo
  echo "go $goversion"
  echo
  sed -n 's/^godebug .*/&/p' "$kmod"
  echo "require k8s.io/kubernetes v$VERSION"
  echo
  echo "replace ("
  for m in $staging; do echo "	$m => $m v0.$MINOR.$PATCH"; done
  echo ")"
} > go.mod
{
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for c in $COMPONENTS; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
  printf ')\n'
} > tools.go
GOFLAGS=-mod=mod go mod tidy >&2

pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=v$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
# client-go's copy is what some code paths report (the kubectl version skew).
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=v$VERSION"
ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$MINOR"
mkdir -p "$OUT" "$work/out"
packages=""
for c in $COMPONENTS; do packages="$packages k8s.io/kubernetes/cmd/$c"; done
# shellcheck disable=SC2086
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/out/" $packages >&2
for c in $COMPONENTS; do mv "$work/out/$c" "$OUT/$c"; done
done_already || { echo "built binaries do not report v$VERSION: $("$OUT/kube-apiserver" --version)" >&2; exit 1; }
log "built $COMPONENTS $("$OUT/kube-apiserver" --version) in $(( $(date +%s) - start )) s"
echo "$OUT"
