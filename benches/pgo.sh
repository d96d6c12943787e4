#!/usr/bin/env bash
# A profile-guided release build (PGO): builds ratelimit-proxy instrumented, runs it under
# loads on loopback (the echo upstream; (a) proxy only, (c) edge + two memory limits with GETs
# and JSON POSTs, a limit that denies, (d) the two limits in a redis-server of its own, (g)
# HTTPS keep-alive over HTTP/1.1 and HTTP/2; wrk -c50 or h2load for a few seconds each), and
# builds it again with the counts, so that LLVM lays out and inlines the request path by what
# ran. Writes target/pgo/ratelimit-proxy. The Dockerfile ships this build.
#
#   benches/pgo.sh                                   # ~15 min on 2 cores: two full builds
#   BIN=target/pgo/ratelimit-proxy benches/compare.sh   # compare it with nginx (or ab.sh,
#                                                       # callgrind.sh, load.sh the same way)
#   TRAIN=10s benches/pgo.sh                         # longer training runs (default 4s)
#
# Code the training does not run (upgrades, the admin API, config loading, error paths) is
# built as cold: smaller, and slower than in the plain release build. Needs the llvm-tools
# component (added with rustup when missing); wrk, redis-server, openssl, h2load and python3
# (from apt when missing).
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
ensure_tools wrk redis-server openssl h2load:nghttp2-client
# Every training process writes its own counts here (a process killed by a signal it does not
# handle writes none: the proxy and the echo stop on SIGTERM and exit).
export LLVM_PROFILE_FILE="$PROFILES/%p.profraw"

UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!); ECHO_PID=$!
bench_certificate
wait_port "$UPSTREAM_PORT"

# The loads, each for TRAIN against one proxy's plain PORT and TLS port TLS_PORT, printing
# one line of its rate. GETs carry the key the limits use; the POSTs a small JSON body. A load
# whose answers are not what it trains (errors where 2xx was meant, or no denials) fails the
# build rather than profile the wrong path.
cat > "$WORK/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"order": 1234, "items": ["a", "b", "c"]}'
wrk.headers["Content-Type"] = "application/json"
LUA
wrk_load() { # ok|denied URL [wrk options]
  local expect=$1 url=$2; shift 2
  wrk -t1 -c50 -d"$TRAIN" -H "x-api-key: bench" "$@" "$url" |
    awk -v expect="$expect" '/Requests\/sec/ && $2 > 0 {rate = $2} /Non-2xx or 3xx responses/ {other = $NF}
      END { if (!rate) exit 1
            if (expect == "ok" && other) {print other " answers not 2xx" > "/dev/stderr"; exit 1}
            if (expect == "denied" && !other) {print "no request denied" > "/dev/stderr"; exit 1}
            print rate " req/s" }'
}
get() { wrk_load ok "http://127.0.0.1:$1/bench"; }
denied_get() { wrk_load denied "http://127.0.0.1:$1/bench"; }
post() { wrk_load ok "http://127.0.0.1:$1/orders" -s "$WORK/post.lua"; }
https_get() { wrk_load ok "https://127.0.0.1:$2/bench"; }
h2_get() { # HTTP/2 over TLS (ALPN), 10 connections of 10 streams; h2load checks no certificate
  h2load -D "${TRAIN%s}" -c10 -m10 -H "x-api-key: bench" "https://127.0.0.1:$2/bench" |
    awk '/^finished in/ {rate = $4} /^requests:/ {failed = $10 + $12} /^status codes:/ {other = $5 + $7 + $9}
      END { if (rate + 0 == 0 || failed || other) {
              print "h2load: " rate + 0 " req/s, " failed + 0 " failed or errored, " other + 0 " not 2xx" > "/dev/stderr"; exit 1 }
            print rate " req/s" }'
}

# train NAME TABLES ROUTE LOAD...: one proxy with these [server]-level tables and route keys,
# each LOAD in turn, then stopped so that it writes its counts.
train() {
  local name=$1 tables=$2 route=$3 port tls_port; shift 3
  port=$(free_port); tls_port=$(free_port)
  local tls="[[server.tls]]
listen = \"127.0.0.1:$tls_port\"
certs = [{ cert = \"bench.pem\", key = \"bench.key\" }]"
  WORKERS=1 proxy_toml "$port" "$tls"$'\n'"$tables" "$route" > "$WORK/$name.toml"
  RUST_LOG=warn "$BIN" --config "$WORK/$name.toml" >"$WORK/$name.log" 2>&1 & PIDS+=($!)
  local pid=$!
  wait_port "$port"
  for load in "$@"; do
    local rate
    rate=$("$load" "$port" "$tls_port") || { echo "the $name proxy's $load load failed" >&2; exit 1; }
    echo "   $name, $load: $rate"
  done
  kill -TERM "$pid"
  wait "$pid" || { echo "the $name proxy did not exit cleanly: $(tail -3 "$WORK/$name.log")" >&2; exit 1; }
}
echo "== training (wrk -t1 -c50, h2load -c10 -m10; $TRAIN each)"
scenario_config a; train a "$SCENARIO_TABLES" "$SCENARIO_ROUTE" get
scenario_config c; train c "$SCENARIO_TABLES" "$SCENARIO_ROUTE" get post
scenario_config denial; train denial "$SCENARIO_TABLES" "$SCENARIO_ROUTE" denied_get
scenario_config d; train d "$SCENARIO_TABLES" "$SCENARIO_ROUTE" get  # a redis-server of its own
scenario_config a; train g "$SCENARIO_TABLES" "$SCENARIO_ROUTE" https_get h2_get
kill -TERM "$ECHO_PID"
wait "$ECHO_PID" || true
ls "$PROFILES"/*.profraw >/dev/null 2>&1 || { echo "no profile was written to $PROFILES" >&2; exit 1; }
"$PROFDATA" merge -o "$OUT/merged.profdata" "$PROFILES"/*.profraw

echo "== build with the profile ($OUT/use)"
RUSTFLAGS="-Cprofile-use=$PWD/$OUT/merged.profdata" CARGO_TARGET_DIR=$OUT/use \
  cargo build --release --locked --quiet
cp "$OUT/use/release/ratelimit-proxy" "$OUT/ratelimit-proxy"
echo "wrote $OUT/ratelimit-proxy"
