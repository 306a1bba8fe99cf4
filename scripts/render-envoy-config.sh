#!/usr/bin/env bash
# Re-renders envoy/envoy.yaml for the docker-compose topology.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet --locked -p mvp-ext-proc -- envoy-config \
  --apiserver v130=http://apiserver-v130:6443 \
  --apiserver v133=http://apiserver-v133:6443 \
  --apiserver v137=http://apiserver-v137:6443 \
  --listen 0.0.0.0:8443 \
  --admin 0.0.0.0:9901 \
  --wasm /usr/local/lib/mvp/mvp_wasm_filter.wasm \
  --ext-proc ext-proc:18000 \
  --output envoy/envoy.yaml
echo "wrote envoy/envoy.yaml" >&2
