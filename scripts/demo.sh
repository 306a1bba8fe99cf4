#!/usr/bin/env bash
# Brings up the demo on loopback: fake kube-apiservers of Kubernetes v1.30,
# v1.33 and v1.37, mvp-ext-proc, and Envoy with the mvp wasm filter in front
# of them. Prints what to try, then runs until Ctrl-C.
#   scripts/demo.sh           run until Ctrl-C
#   scripts/demo.sh --smoke   start, check the front door routes, stop (used by scripts/test.sh)
# Ports can be moved with MVP_DEMO_PORT_BASE (default 8400): front door
# BASE+43, Envoy admin BASE+1, mvp-ext-proc gRPC BASE+10 and metrics BASE+90,
# apiservers BASE+30, BASE+33, BASE+37.
set -euo pipefail
cd "$(dirname "$0")/.."
SMOKE=false
[ "${1:-}" = "--smoke" ] && SMOKE=true

scripts/bootstrap.sh
scripts/build.sh >&2

BASE=${MVP_DEMO_PORT_BASE:-8400}
FRONT=$((BASE + 43)) ADMIN=$((BASE + 1)) GRPC=$((BASE + 10)) METRICS=$((BASE + 90))
DEMO=.tools/demo
mkdir -p "$DEMO"
ENVOY=$(ls .tools/venv/lib/python3*/site-packages/envoy/_bin/envoy)
WASM=$PWD/target/wasm32-wasip1/wasm/mvp_wasm_filter.wasm
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

APISERVER_FLAGS=()
for spec in v130:v1.30:30 v133:v1.33:33 v137:v1.37:37; do
  IFS=: read -r name release off <<<"$spec"
  port=$((BASE + off))
  target/debug/fake-apiserver --name "$name" --release "$release" --listen "127.0.0.1:$port" >"$DEMO/$name.log" 2>&1 &
  PIDS+=($!)
  APISERVER_FLAGS+=(--apiserver "$name=http://127.0.0.1:$port")
done

target/debug/mvp-ext-proc serve "${APISERVER_FLAGS[@]}" --grpc-listen "127.0.0.1:$GRPC" \
  --metrics-listen "127.0.0.1:$METRICS" >"$DEMO/mvp-ext-proc.log" 2>&1 &
PIDS+=($!)
target/debug/mvp-ext-proc envoy-config "${APISERVER_FLAGS[@]}" --listen "127.0.0.1:$FRONT" \
  --admin "127.0.0.1:$ADMIN" --wasm "$WASM" --ext-proc "127.0.0.1:$GRPC" --output "$DEMO/envoy.yaml"
"$ENVOY" -c "$DEMO/envoy.yaml" --concurrency 2 --disable-hot-restart >"$DEMO/envoy.log" 2>&1 &
PIDS+=($!)

# Ready when Envoy's refresher holds the table mvp-ext-proc built with all
# three apiservers healthy (bounded: 30 s).
ready=false
for _ in $(seq 1 300); do
  table=$(curl -sf "127.0.0.1:$METRICS/table" || true)
  version=$(printf '%s' "$table" | python3 -c 'import json,sys
try:
    t=json.load(sys.stdin); print(t["version"] if all(a["healthy"] for a in t["apiservers"]) else "")
except Exception: print("")')
  published=$(curl -sf "127.0.0.1:$ADMIN/stats?filter=mvp.refresher.table_version" | awk '{print $2}' || true)
  if [ -n "$version" ] && [ "$version" = "$published" ]; then ready=true; break; fi
  sleep 0.1
done
$ready || { echo "demo did not become ready; logs in $DEMO/" >&2; tail -n 20 "$DEMO"/*.log >&2; exit 1; }

cat > "$DEMO/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: mvp-demo, cluster: {server: "http://127.0.0.1:$FRONT"}}]
contexts: [{name: mvp-demo, context: {cluster: mvp-demo, user: demo}}]
users: [{name: demo, user: {}}]
current-context: mvp-demo
KC

if $SMOKE; then
  check() { # path expected-server
    got=$(curl -s -o /dev/null -w '%{http_code} ' -D - "127.0.0.1:$FRONT$1" | tr -d '\r' | awk 'tolower($1)=="x-fake-apiserver:"{print $2}')
    [ "$got" = "$2" ] || { echo "smoke: $1 served by '$got', want $2" >&2; exit 1; }
  }
  for _ in 1 2 3; do
    check /apis/lifecycle.k8s.io/v1alpha1/evictionrequests v137
    check /apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas v130
  done
  echo "demo smoke: ok (v1.37-only and v1.30-only APIs each reached their server)"
  exit 0
fi

cat <<TRY

mvp-envoy demo is up. Front door: http://127.0.0.1:$FRONT  (apiservers v1.30, v1.33, v1.37 behind it)

  # a v1.37-only API: always answered by v137
  curl -s http://127.0.0.1:$FRONT/apis/lifecycle.k8s.io/v1alpha1/namespaces/default/evictionrequests -D - -o /dev/null | grep x-fake-apiserver
  # a v1.30-only API: always answered by v130
  curl -s http://127.0.0.1:$FRONT/apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas -D - -o /dev/null | grep x-fake-apiserver
  # an API nobody serves: the apiserver's own 404 Status
  curl -s http://127.0.0.1:$FRONT/apis/example.com/v1/widgets
  # the same through kubectl (pre-installed, and 1.37)
  kubectl --kubeconfig $DEMO/kubeconfig get --raw /apis/lifecycle.k8s.io/v1alpha1/evictionrequests
  .tools/venv/bin/kubectl --kubeconfig $DEMO/kubeconfig get --raw /apis/flowcontrol.apiserver.k8s.io/v1beta3/flowschemas
  # routing table and apiserver health, metrics, Envoy's view
  curl -s http://127.0.0.1:$METRICS/table
  curl -s http://127.0.0.1:$METRICS/metrics
  curl -s "http://127.0.0.1:$ADMIN/stats?filter=wasmcustom"
  # stop one apiserver and watch its APIs turn into 503 Status while shared ones fail over
  kill ${PIDS[2]}

Logs: $DEMO/*.log   Ctrl-C stops everything.
TRY
wait
