#!/usr/bin/env bash
# Brings up the demo on loopback: fake kube-apiservers of Kubernetes v1.30,
# v1.33 and v1.37, mvp-ext-proc, and Envoy with the mvp routing filter (the build
# envoy-config picks by default: native where the Envoy loads it) in front
# of them (the test harness's topology; integration/src/bin/demo.rs). Prints
# what to try, then runs until Ctrl-C.
#   scripts/demo.sh           run until Ctrl-C
#   scripts/demo.sh --smoke   start, check the front door routes, stop (used by scripts/test.sh)
# Ports move with MVP_DEMO_PORT_BASE (default 8400).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh
scripts/build.sh >&2
exec "${CARGO_TARGET_DIR:-target}/debug/demo" "$@"
