#!/usr/bin/env bash
# libFuzzer over what takes outside input (fuzz/: request classification, the
# filter's table decode, certificate subjects, discovery parse + merge,
# ext_proc messages), on the stable toolchain (cargo fuzz --sanitizer none;
# release with debug assertions, so overflows are crashes too).
#   scripts/fuzz.sh --smoke            every target 5 s (the test suite runs this)
#   scripts/fuzz.sh classify 600       one target for 600 s
#   scripts/fuzz.sh --all 300          every target for 300 s
# Seeds: fuzz/corpus/<target> (committed, from the real fixtures). What the
# fuzzer finds goes to ~/.cache/mvp-envoy/fuzz/ (the build too, so a fresh
# clone reuses it); a crash fails the run and names its reproducer:
#   cargo fuzz run --sanitizer none -O -a <target> <crash file>
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE=${MVP_CACHE:-$HOME/.cache/mvp-envoy}/fuzz
TARGETS=(classify table_decode subject discovery_merge ext_proc_message)
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked --version 0.13.2
case "${1:-}" in
  --smoke) seconds=5; targets=("${TARGETS[@]}") ;;
  --all) seconds=${2:?seconds}; targets=("${TARGETS[@]}") ;;
  "" | -h | --help) sed -n 2,13p "$0"; exit 2 ;;
  *) seconds=${2:?seconds}; targets=("$1") ;;
esac
flags=(--sanitizer none -O -a --target-dir "$CACHE/target")
mkdir -p "$CACHE"
if ! (cd fuzz && cargo fuzz build "${flags[@]}") >"$CACHE/build.log" 2>&1; then
  tail -30 "$CACHE/build.log"; exit 1
fi
status=0
for t in "${targets[@]}"; do
  mkdir -p "$CACHE/corpus/$t" "$CACHE/artifacts/$t"
  log="$CACHE/$t.log"
  if (cd fuzz && cargo fuzz run "${flags[@]}" "$t" "$CACHE/corpus/$t" "corpus/$t" -- \
        -max_total_time="$seconds" -artifact_prefix="$CACHE/artifacts/$t/" -print_final_stats=1) >"$log" 2>&1; then
    runs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
    cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+')
    printf '%-18s %12s executions in %4ss, coverage %s, 0 crashes\n' "$t" "${runs:-?}" "$seconds" "${cov:-?}"
  else
    echo "$t: CRASH — $(grep -m1 -E 'panicked at|ERROR: libFuzzer' "$log" || true)"
    grep -E 'Test unit written to' "$log" || true
    status=1
  fi
done
exit $status
