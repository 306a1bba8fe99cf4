#!/usr/bin/env bash
# Builds every binary the demo and the tests run: the native workspace
# (mvp-ext-proc, fake-apiserver) and the wasm filter.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked --workspace --bins
cargo build --locked -p mvp-wasm-filter --target wasm32-wasip1 --profile wasm
