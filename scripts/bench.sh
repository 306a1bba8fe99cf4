#!/usr/bin/env bash
# Runs the front-door benchmark (BENCHMARKS.md): release builds, Envoy 1.40,
# wrk and h2load, every variant side by side in one run on loopback.
#   scripts/bench.sh                 full run -> bench/results.json and a table on stdout
#   scripts/bench.sh --smoke         a short run that only checks every variant produces numbers
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh --release
# The kube-mvp and scale parts run real kube-apiservers of the newest
# release on a real etcd (each built once, cached outside the work tree).
scripts/kube-apiserver.sh >/dev/null
scripts/kube-release.sh "$(head -n1 scripts/kube-releases)" >/dev/null
scripts/etcd.sh >/dev/null
# Where cargo built it: the cache when CARGO_TARGET_DIR says so (as
# scripts/test.sh sets it), else the work tree.
release=$(cd "${CARGO_TARGET_DIR:-target}" && pwd)/release
MVP_BIN_DIR=$release exec "$release/bench" "$@"
