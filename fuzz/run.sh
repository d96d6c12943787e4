#!/usr/bin/env bash
# Builds every fuzz target once, then runs each in turn for SECS seconds (default 60) from its
# committed seeds (fuzz/corpus/<target>) and a scratch corpus outside the repository
# (CORPUS_DIR, default $TMPDIR/ratelimit-proxy-fuzz/<target>), where what a run finds is kept
# for the next one. Prints each target's executions and any failing input; exits 1 if one
# failed. Failing inputs are left in fuzz/artifacts/<target>/ (ignored by git).
#
#   fuzz/run.sh                       # every target, 60 s each
#   SECS=300 fuzz/run.sh resp_reply   # one target, 5 min
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz --locked`).
set -euo pipefail
cd "$(dirname "$0")"

secs=${SECS:-60}
scratch=${CORPUS_DIR:-${TMPDIR:-/tmp}/ratelimit-proxy-fuzz}
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo +nightly fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
# Built before any runs, so that `fuzz run` below finds them built and each runs its time.
if [ $# -gt 0 ]; then
  for target in "${targets[@]}"; do cargo +nightly fuzz build "$target"; done
else
  cargo +nightly fuzz build
fi
failed=0
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  log="$scratch/$target.log"
  # The scratch corpus comes first: libFuzzer writes new inputs to the first directory.
  if cargo +nightly fuzz run "$target" "$scratch/$target" "corpus/$target" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf '%-16s %-6s %12s executions in %ss  (log: %s)\n' \
    "$target" "$status" "${runs:-?}" "$secs" "$log"
  if [ "$status" = FAILED ]; then
    grep -E "panicked at|^SUMMARY|Test unit written to|ERROR: libFuzzer" "$log" | head -20 || tail -20 "$log"
  fi
done
exit "$failed"
