#!/usr/bin/env bash
# Builds every binary the demo and the tests run: the native workspace
# (mvp-ext-proc, fake-apiserver), the routing filter in both builds (the
# .wasm, and the native .so — always a release build, as the .wasm is
# always the wasm profile) and the benchmark's routing-floor module.
#   scripts/build.sh             debug binaries (what the tests run)
#   scripts/build.sh --release   release binaries (the benchmark and the soak)
set -euo pipefail
cd "$(dirname "$0")/.."
profile=()
[[ "${1:-}" == --release ]] && profile=(--release)
cargo build --locked "${profile[@]}" --workspace --bins
cargo build --locked -p mvp-wasm-filter -p bench-routing-floor --target wasm32-wasip1 --profile wasm
cargo build --locked --release -p mvp-native-filter
