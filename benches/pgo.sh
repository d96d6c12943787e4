#!/usr/bin/env bash
# A profile-guided release build (PGO): builds ratelimit-proxy instrumented, runs it under
# compare.sh's loads on loopback (the echo upstream; (a) proxy only, (c) edge + two memory
# limits, a limit that denies, (d) the two limits in a redis-server of its own, (g) HTTPS
# keep-alive; wrk -c50 for a few seconds each), and builds it again with the counts, so that
# LLVM lays out and inlines the request path by what ran. Writes target/pgo/ratelimit-proxy.
#
#   benches/pgo.sh                                   # ~15 min on 2 cores: two full builds
#   BIN=target/pgo/ratelimit-proxy benches/compare.sh   # compare it with nginx (or ab.sh,
#                                                       # callgrind.sh, load.sh the same way)
#   TRAIN=10s benches/pgo.sh                         # longer training runs (default 4s)
#
# Code the training does not run (HTTP/2, upgrades, the admin API, config loading) is built as
# cold: smaller, and slower than in the plain release build. The plain `cargo build --release`
# (and the Dockerfile) stay as they are. Needs the llvm-tools component (added with rustup
# when missing), wrk and redis-server (from apt when missing), openssl.
set -euo pipefail
cd "$(dirname "$0")/.."
TRAIN=${TRAIN:-4s}
[[ $TRAIN =~ ^[1-9][0-9]*s$ ]] || { echo "TRAIN is \"$TRAIN\": expected whole seconds, e.g. 4s" >&2; exit 1; }
OUT=target/pgo
PROFILES=$PWD/$OUT/profiles

profdata() {
  find "$(rustc --print sysroot)/lib/rustlib" -name llvm-profdata -type f 2>/dev/null | head -1
}
if [ -z "$(profdata)" ]; then
  echo "adding the llvm-tools component (rustup)" >&2
  rustup component add llvm-tools >/dev/null
fi
PROFDATA=$(profdata)
[ -n "$PROFDATA" ] || { echo "llvm-profdata not found after adding llvm-tools" >&2; exit 1; }

rm -rf "$PROFILES" "$OUT/build-scripts"
mkdir -p "$PROFILES" "$OUT/build-scripts"
echo "== instrumented build ($OUT/gen)"
# Build scripts and proc macros are instrumented too and write their counts while building:
# into a directory of their own, kept out of the merge.
RUSTFLAGS="-Cprofile-generate=$PWD/$OUT/build-scripts" CARGO_TARGET_DIR=$OUT/gen \
  cargo build --release --locked --quiet
BIN=$OUT/gen/release/ratelimit-proxy
source benches/common.sh
ensure_tools wrk redis-server openssl
# Every training process writes its own counts here (a process killed by a signal it does not
# handle writes none: the proxy and the echo stop on SIGTERM and exit).
export LLVM_PROFILE_FILE="$PROFILES/%p.profraw"

UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!); ECHO_PID=$!
bench_certificate
wait_port "$UPSTREAM_PORT"

# train NAME SCHEME TABLES ROUTE: one proxy with these [server]-level tables and route keys,
# loaded by wrk for TRAIN, then stopped so that it writes its counts.
train() {
  local port tls_port; port=$(free_port); tls_port=$(free_port)
  local tls="[[server.tls]]
listen = \"127.0.0.1:$tls_port\"
certs = [{ cert = \"bench.pem\", key = \"bench.key\" }]"
  WORKERS=1 proxy_toml "$port" "$tls"$'\n'"$3" "$4" > "$WORK/$1.toml"
  RUST_LOG=warn "$BIN" --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 & PIDS+=($!)
  local pid=$!
  wait_port "$port"
  [ "$2" = https ] && port=$tls_port
  wrk -t1 -c50 -d"$TRAIN" -H "x-api-key: bench" "$2://127.0.0.1:$port/bench" | awk -v n="$1" '/Requests\/sec/ {print "   " n ": " $2 " req/s"}'
  kill -TERM "$pid"
  wait "$pid" || { echo "the $1 proxy did not exit cleanly: $(tail -3 "$WORK/$1.log")" >&2; exit 1; }
}
echo "== training (wrk -t1 -c50 -d$TRAIN each)"
for scenario in a c denial d; do
  scenario_config "$scenario"  # d starts a redis-server of its own
  train "$scenario" http "$SCENARIO_TABLES" "$SCENARIO_ROUTE"
done
scenario_config a
train g https "$SCENARIO_TABLES" "$SCENARIO_ROUTE"
kill -TERM "$ECHO_PID"
wait "$ECHO_PID" || true
ls "$PROFILES"/*.profraw >/dev/null 2>&1 || { echo "no profile was written to $PROFILES" >&2; exit 1; }
"$PROFDATA" merge -o "$OUT/merged.profdata" "$PROFILES"/*.profraw

echo "== build with the profile ($OUT/use)"
RUSTFLAGS="-Cprofile-use=$PWD/$OUT/merged.profdata" CARGO_TARGET_DIR=$OUT/use \
  cargo build --release --locked --quiet
cp "$OUT/use/release/ratelimit-proxy" "$OUT/ratelimit-proxy"
echo "wrote $OUT/ratelimit-proxy"
