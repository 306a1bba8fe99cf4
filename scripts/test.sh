#!/usr/bin/env bash
# Runs every test: lints that keep panics out of the filter, unit and
# property tests, and the end-to-end tests with real Envoy, mvp-ext-proc,
# fake apiservers, real kube-apiservers and real clients on loopback.
# Installs what it needs; the real kube-apiservers are built once and cached
# outside the work tree (scripts/kube-apiserver.sh, v1.20: ~8 minutes the
# first time; scripts/kube-release.sh, each current release (scripts/kube-releases):
# ~8 minutes the first, ~4 each further one with Go's module cache warm),
# as is the fuzz build (scripts/fuzz.sh: ~6 minutes the first time).
set -euo pipefail
cd "$(dirname "$0")/.."
# CI builds a fresh clone once: incremental state would only take disk (see [profile.dev] in Cargo.toml).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
# Cargo's build outside the work tree, like the kube builds: a fresh clone on
# a machine that ran this before rebuilds the workspace's own crates, not
# their dependencies. The tests find the binaries by CARGO_TARGET_DIR
# (integration/src/harness/tools.rs); scripts/demo.sh and images.sh too.
CACHE=${MVP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mvp-envoy}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$CACHE/target}

scripts/bootstrap.sh
scripts/build.sh
MVP_KUBE_APISERVER=$(scripts/kube-apiserver.sh)
export MVP_KUBE_APISERVER
# The real tier's etcd (scripts/etcd-release), from Go modules.
scripts/etcd.sh >/dev/null
# Current releases for the real tier, from Go modules (scripts/kube-releases);
# the newest with its kubelet, kube-scheduler and kube-proxy too
# (scripts/node.sh: the install paths' node), in the same build.
node_components="kubelet kube-scheduler kube-proxy"
while read -r release; do
  # shellcheck disable=SC2086
  scripts/kube-release.sh "$release" $node_components >/dev/null
  node_components=""
done < scripts/kube-releases

# The install paths run for real (integration/tests/install_*.rs): a Docker
# engine (started here if none runs, and stopped again at the end), Compose
# and buildx, and the project's images built from its Dockerfile on local
# bases (scripts/images.sh: no registry is reachable); a node's parts for
# the kubeadm static pod under a real kubelet (scripts/node.sh: containerd,
# the kubelet, a pause image from kube's source).
step_start=$(date +%s)
engine=$(scripts/docker.sh start)
if [ "$engine" = started ]; then trap 'scripts/docker.sh stop' EXIT; fi
scripts/images.sh
MVP_KUBE_NODE_BIN=$(scripts/node.sh)
export MVP_DOCKER=1 MVP_KUBE_NODE_BIN
echo "==> install paths ready in $(( $(date +%s) - step_start )) s" >&2

echo "==> clippy (the filter denies unwrap/expect/panic/indexing)" >&2
cargo clippy --locked -p mvp-wasm-filter -p mvp-filter-core -p mvp-routing -p bench-routing-floor --target wasm32-wasip1 --profile wasm -- -D warnings
cargo clippy --locked --workspace --all-targets -- -D warnings

echo "==> demo smoke (the README's demo command, on other ports)" >&2
MVP_DEMO_PORT_BASE=${MVP_DEMO_PORT_BASE:-18400} scripts/demo.sh --smoke

echo "==> tests" >&2
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked --workspace --no-fail-fast
else
  cargo test --locked --workspace --no-fail-fast
fi

echo "==> the native filter build: Envoy loads libmvp_native_filter.so and the end-to-end suites run on it" >&2
# Every end-to-end suite, fake and real apiservers and the real rolling
# upgrade, again on the native build (the .wasm ran them above); not
# deployment (it checks the rendered compose config only).
MVP_FILTER=native cargo test --locked -p integration -p mvp-soak --no-fail-fast \
  --test routing --test routing_old_servers --test faults --test tls --test tls_streams --test spoofing \
  --test operators --test kubectl --test python_client --test discovery --test openapi --test peer_discovery --test adversarial --test rapid_reset --test shared_fate --test upstream_http2 --test plaintext_http1 --test control_channel --test scale_watches --test big_list \
  --test membership --test membership_faults --test membership_tls --test replicas \
  --test real_apiservers --test real_controllers --test real_down --test real_restart --test real_kube_mvp --test real_membership --test real_skew --test real_readiness \
  --test real_upgrade

echo "==> fuzz smoke (libFuzzer, every target 5 s; scripts/fuzz.sh runs them long)" >&2
scripts/fuzz.sh --smoke
