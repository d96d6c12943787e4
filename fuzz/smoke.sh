#!/usr/bin/env bash
# CI's fuzz smoke run: builds every fuzz target with libFuzzer's coverage instrumentation on
# the stable toolchain (no cargo-fuzz, no nightly, no sanitizer: the crate forbids unsafe code,
# so what a sanitizer would add is small beside what debug assertions and overflow checks
# catch), then runs each for SECS seconds (default 10) from its committed seeds. Exits 1 if a
# target fails; the failing input is written to fuzz/artifacts/<target>/.
#
# Measured on a 2-core machine: the build takes ~3 minutes from nothing, the runs SECS each.
# fuzz/run.sh is the longer, optimised run with cargo-fuzz and AddressSanitizer.
set -euo pipefail
cd "$(dirname "$0")"

secs=${SECS:-10}
host=$(rustc -vV | sed -n 's/^host: //p')
# What `cargo fuzz build --sanitizer none` passes, plus the checks of a debug build. --target
# keeps these flags off build scripts and proc macros.
export RUSTFLAGS="--cfg fuzzing -Cpasses=sancov-module \
 -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters \
 -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares \
 -Cdebug-assertions -Coverflow-checks"
export CARGO_TARGET_DIR=${SMOKE_TARGET_DIR:-target/smoke}

echo "== building the fuzz targets"
cargo build --locked --bins --target "$host"

bins="$CARGO_TARGET_DIR/$host/debug"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0
for seeds in corpus/*/; do
  target=$(basename "$seeds")
  mkdir -p "$scratch/$target" "artifacts/$target"
  log="$scratch/$target.log"
  # The scratch corpus comes first: libFuzzer writes what it finds there, not into the seeds.
  if "$bins/$target" "$scratch/$target" "$seeds" -max_total_time="$secs" -timeout=10 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="artifacts/$target/" \
      >"$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  printf '%-18s %-6s %10s executions in %ss\n' "$target" "$status" "${runs:-?}" "$secs"
  if [ "$status" = FAILED ]; then
    grep -E "panicked at|^SUMMARY|Test unit written to|ERROR: libFuzzer" "$log" | head -20 ||
      tail -20 "$log"
  fi
done
exit "$failed"
