#!/usr/bin/env bash
# Load test on loopback: starts the echo upstream, the proxy in front of it (plain, with the
# edge layer and two limits in memory or in Redis, and over HTTPS with keep-alive and with a full handshake per
# request), drives each with wrk (same connections and duration), and prints requests/s, p50,
# p99 and the proxy's CPU microseconds per request (utime+stime from /proc/PID/stat).
#
#   benches/load.sh                       # defaults: 50 connections, 10 s, 1 wrk thread
#   CONNS=100 DURATION=20s benches/load.sh
#
# Everything stays on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-50}
DURATION=${DURATION:-10s}
THREADS=${THREADS:-1}
WARMUP=${WARMUP:-2s}

source benches/common.sh
ensure_tools wrk redis-server

UPSTREAM_PORT=$(free_port)
PROXY_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!)
TLS_PORT=$(free_port)
bench_certificate
cat > "$WORK/gw.toml" <<TOML
[server]
listen = ["127.0.0.1:$PROXY_PORT"]
[[server.tls]]
listen = "127.0.0.1:$TLS_PORT"
certs = [{ cert = "bench.pem", key = "bench.key" }]
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
[[routes]]
name = "default"
upstream = "echo"
TOML
LIMITS_PORT=$(free_port)
# The same route behind the edge layer and two memory-store limits of two windows each, with
# limits the load never reaches: the cost of admission on the allowed path.
cat > "$WORK/limits.toml" <<TOML
[server]
listen = ["127.0.0.1:$LIMITS_PORT"]
[edge]
rate = "1000000/s"
[store]
hash_secret = "bench"
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
[[routes]]
name = "default"
upstream = "echo"
$TWO_LIMITS
TOML
# The same two limits in Redis (one EVALSHA per request), on a redis-server of its own.
start_redis
REDIS_PROXY_PORT=$(free_port)
sed -e "s/^listen = .*/listen = [\"127.0.0.1:$REDIS_PROXY_PORT\"]/" \
    -e "s|^hash_secret = .*|hash_secret = \"bench\"\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:$REDIS_PORT/0\"\ntimeout = \"100ms\"|" \
    "$WORK/limits.toml" > "$WORK/redis.toml"
RUST_LOG=warn setsid "$BIN" --config "$WORK/redis.toml" >"$WORK/redis-proxy.log" 2>&1 & REDIS_PROXY_PID=$!; PIDS+=($REDIS_PROXY_PID)
RUST_LOG=warn setsid "$BIN" --config "$WORK/gw.toml" >"$WORK/proxy.log" 2>&1 & PROXY_PID=$!; PIDS+=($PROXY_PID)
RUST_LOG=warn setsid "$BIN" --config "$WORK/limits.toml" >"$WORK/limits.log" 2>&1 & LIMITS_PID=$!; PIDS+=($LIMITS_PID)
wait_port "$UPSTREAM_PORT"; wait_port "$PROXY_PORT"; wait_port "$LIMITS_PORT"; wait_port "$TLS_PORT"
wait_port "$REDIS_PROXY_PORT"
# Each proxy in a session of its own, as compare.sh starts them (own_session in common.sh).
own_session "$REDIS_PROXY_PID" "$PROXY_PID" "$LIMITS_PID"

# run NAME URL PID [wrk args]: one wrk run; prints a table row. PID is the process whose CPU
# is charged.
run() {
  local name=$1 url=$2 pid=$3; shift 3
  wrk -t"$THREADS" -c"$CONNS" -d"$WARMUP" "$@" "$url" >/dev/null
  local before; before=$(cpu_ticks "$pid")
  local redis_before; redis_before=$(cpu_ticks "$REDIS_PID")
  wrk -t"$THREADS" -c"$CONNS" -d"$DURATION" --latency "$@" "$url" >"$WORK/$name.txt"
  local after; after=$(cpu_ticks "$pid")
  REDIS_TICKS=$(( $(cpu_ticks "$REDIS_PID") - redis_before ))
  local requests rps p50 p99 errors
  requests=$(awk '/requests in/ {print $1}' "$WORK/$name.txt")
  rps=$(awk '/Requests\/sec/ {print $2}' "$WORK/$name.txt")
  p50=$(awk '$1=="50%" {print $2}' "$WORK/$name.txt")
  p99=$(awk '$1=="99%" {print $2}' "$WORK/$name.txt")
  errors=$(awk '/Non-2xx|Socket errors/ {printf "%s ", $0}' "$WORK/$name.txt")
  local hz; hz=$(getconf CLK_TCK)
  local cpu_us; cpu_us=$(awk -v t=$((after - before)) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
  local rss; rss="$(peak_rss_kb "$pid") kB"
  printf '%-26s %12s %10s %10s %14s %12s  %s\n' "$name" "$rps" "$p50" "$p99" "$cpu_us" "$rss" "$errors"
  REDIS_US_PER_REQ=$(awk -v t="$REDIS_TICKS" -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
}

echo "wrk -t$THREADS -c$CONNS -d$DURATION on $(nproc) cores; CPU µs/req is of the named process"
printf '%-26s %12s %10s %10s %14s %12s\n' scenario "req/s" p50 p99 "CPU µs/req" "peak RSS"
run direct-to-upstream "http://127.0.0.1:$UPSTREAM_PORT/bench" "${PIDS[0]}"
run proxy "http://127.0.0.1:$PROXY_PORT/bench" "$PROXY_PID"
run proxy+edge+2-limits "http://127.0.0.1:$LIMITS_PORT/bench" "$LIMITS_PID" -H "x-api-key: bench-key"
run proxy+edge+2-redis-limits "http://127.0.0.1:$REDIS_PROXY_PORT/bench" "$REDIS_PROXY_PID" -H "x-api-key: bench-key"
echo "  (redis-server itself: $REDIS_US_PER_REQ CPU µs/req on top)"
run https-keep-alive "https://127.0.0.1:$TLS_PORT/bench" "$PROXY_PID"
# A new connection, and so a full TLS handshake, for every request.
run https-handshake-per-req "https://127.0.0.1:$TLS_PORT/bench" "$PROXY_PID" -H "Connection: close"

# Redis memory per key: MEMORY USAGE of every key the Redis scenario wrote, plus 1000 more
# identities of each algorithm written by one request each (keys and values of real length;
# 100 per hour, so the keys live long enough to be measured: a key vanishes once its window is
# whole again).
MEMORY_PORT=$(free_port)
cat > "$WORK/memory.toml" <<TOML
[server]
listen = ["127.0.0.1:$MEMORY_PORT"]
[store]
hash_secret = "bench"
backend = "redis"
url = "redis://127.0.0.1:$REDIS_PORT/0"
timeout = "100ms"
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
[[routes]]
name = "algorithms"
upstream = "echo"
limits = ["token_bucket", "gcra", "sliding_window", "fixed_window"]
TOML
for algorithm in token_bucket gcra sliding_window fixed_window; do
  printf '[[limits]]\nname = "%s"\nkey = ["header:x-api-key"]\nalgorithm = "%s"\nrates = [{ limit = 100, per = "1h" }]\n' \
    "$algorithm" "$algorithm" >> "$WORK/memory.toml"
done
RUST_LOG=warn setsid "$BIN" --config "$WORK/memory.toml" >"$WORK/memory-proxy.log" 2>&1 & MEMORY_PID=$!; PIDS+=($MEMORY_PID)
wait_port "$MEMORY_PORT"
own_session "$MEMORY_PID"
for i in $(seq 1000); do
  curl -s -o /dev/null -H "x-api-key: tenant-$i-0123456789abcdef" "http://127.0.0.1:$MEMORY_PORT/algorithms/x"
done
echo
echo "Redis MEMORY USAGE per key (bytes; the expiry adds a dict entry of ~24 bytes outside it):"
for pattern in 'rl:per-key:*' 'rl:per-ip:*' 'rl:token_bucket:*' 'rl:gcra:*' 'rl:sliding_window:*' 'rl:fixed_window:*'; do
  redis-cli -p "$REDIS_PORT" --scan --pattern "$pattern" | awk "NR <= 200" | while read -r key; do
    redis-cli -p "$REDIS_PORT" MEMORY USAGE "$key" SAMPLES 0
  done | awk -v p="$pattern" '{ s += $1; n++ } END { if (n) printf "  %-22s %4d keys, mean %.0f bytes\n", p, n, s / n }'
done
echo "  used_memory per key overall: $(redis-cli -p "$REDIS_PORT" INFO memory | awk -F: '/^used_memory:/ {m=$2} END {print m}' | tr -d '\r') bytes / $(redis-cli -p "$REDIS_PORT" DBSIZE) keys"
