#!/usr/bin/env bash
# The upgrade soak (RELIABILITY.md): three apiservers upgraded v1.30 -> v1.33
# -> v1.37 under load, through mvp-envoy and a plain round-robin Envoy side by
# side on loopback; prints the tables. Release builds, Envoy 1.40.
#   scripts/soak.sh                                   8 clients per front door, 5 s shutdown delay, 3000 requests per phase
#   scripts/soak.sh --clients 4 --settle 500 --shutdown-delay 2s
#   scripts/soak.sh --logs /tmp/soak-logs             keep every process's log
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh --release
MVP_BIN_DIR=$PWD/target/release exec target/release/soak "$@"
