#!/usr/bin/env bash
# Re-renders envoy/envoy.yaml from docker-compose.yml (the one description of
# that topology), through the test that keeps the two in sync.
set -euo pipefail
cd "$(dirname "$0")/.."
MVP_UPDATE_GOLDEN=1 cargo test --quiet --locked -p integration --test deployment compose_topology_matches_the_rendered_envoy_config
echo "wrote envoy/envoy.yaml" >&2
