#!/usr/bin/env bash
# Side by side with nginx in one run (issue 8): the same echo upstream, nginx 1.x as a
# keep-alive reverse proxy with `limit_req` (a per-IP zone whose limit is never hit), and
# ratelimit-proxy configured equivalently; each driven by the same wrk load, alternating runs.
# Prints requests/s, p50, p99, CPU µs per request of the proxy process(es), peak RSS, and the
# ours/nginx ratios. Scenarios: (a) proxy only, (b) edge layer on, (c) two memory-store limits.
#
#   benches/compare.sh                      # 50 connections, 10 s per run, 2 rounds
#   CONNS=100 DURATION=20s ROUNDS=3 benches/compare.sh
#
# Everything stays on 127.0.0.1 and stops by itself. nginx and wrk come from apt when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-50}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}

source benches/common.sh
ensure_tools nginx wrk
NGINX=$(command -v nginx)

UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!)

# --- nginx: one worker, upstream keep-alive, limit_req per IP that is never reached ---
NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx.conf" <<CONF
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx;
  proxy_temp_path $WORK/nginx;
  fastcgi_temp_path $WORK/nginx;
  uwsgi_temp_path $WORK/nginx;
  scgi_temp_path $WORK/nginx;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  upstream echo { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF
"$NGINX" -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null
wait_port "$NGINX_PORT"
PIDS+=("$(cat "$WORK/nginx.pid")")  # stopping the master stops its worker
NGINX_PIDS=$(pgrep -f "nginx.*$WORK/nginx.conf" | tr '\n' ' ')
NGINX_PIDS="$NGINX_PIDS $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"

# --- ours: (a) plain, (b) with the edge layer, (c) edge + two memory-store limits ---
ours() { # NAME EXTRA_TOML -> starts a proxy, prints "PORT PID"
  local port; port=$(free_port)
  cat > "$WORK/$1.toml" <<TOML
[server]
listen = ["127.0.0.1:$port"]
$2
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
[[routes]]
name = "default"
upstream = "echo"
$3
TOML
  RUST_LOG=warn "$BIN" --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  echo "$port $!"
}
LIMITS='[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 100000000, per = "1m" }, { limit = 1000000000, per = "1d" }]
[[limits]]
name = "per-ip"
key = ["ip", "route"]
algorithm = "sliding_window"
rates = [{ limit = 100000000, per = "1m" }, { limit = 1000000000, per = "1h" }]'
read -r A_PORT A_PID < <(ours a "" "")
read -r B_PORT B_PID < <(ours b '[edge]
rate = "1000000/s"' "")
read -r C_PORT C_PID < <(ours c '[edge]
rate = "1000000/s"
[store]
hash_secret = "bench"' "limits = [\"per-key\", \"per-ip\"]
$LIMITS")
wait_port "$A_PORT"; wait_port "$B_PORT"; wait_port "$C_PORT"

# run NAME PORT PIDS...: one wrk run; prints "req/s p50 p99 cpu_us rss_kb"
run() {
  local name=$1 port=$2; shift 2
  wrk -t1 -c"$CONNS" -d2s -H "x-api-key: bench" "http://127.0.0.1:$port/bench" >/dev/null
  local before; before=$(cpu_ticks "$@")
  wrk -t1 -c"$CONNS" -d"$DURATION" --latency -H "x-api-key: bench" "http://127.0.0.1:$port/bench" >"$WORK/$name.txt"
  local after; after=$(cpu_ticks "$@")
  local requests; requests=$(awk '/requests in/ {print $1}' "$WORK/$name.txt")
  awk -v t=$((after - before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" -v rss="$(peak_rss_kb "$@")" '
    /Requests\/sec/ {rps=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2}
    END { printf "%s %s %s %.1f %d\n", rps, p50, p99, t / hz * 1e6 / n, rss }' "$WORK/$name.txt"
}

echo "wrk -t1 -c$CONNS -d$DURATION, $ROUNDS alternating rounds, $(nproc) cores shared with wrk and the upstream"
printf '%-26s %10s %9s %9s %11s %10s\n' scenario "req/s" p50 p99 "CPU µs/req" "RSS kB"
declare -A CPU RPS
for round in $(seq "$ROUNDS"); do
  for scenario in nginx a b c; do
    case $scenario in
      nginx) line=$(run "nginx-$round" "$NGINX_PORT" $NGINX_PIDS); label="nginx limit_req" ;;
      a) line=$(run "a-$round" "$A_PORT" "$A_PID"); label="(a) ours, proxy only" ;;
      b) line=$(run "b-$round" "$B_PORT" "$B_PID"); label="(b) ours, edge layer" ;;
      c) line=$(run "c-$round" "$C_PORT" "$C_PID"); label="(c) ours, edge + 2 limits" ;;
    esac
    read -r rps p50 p99 cpu rss <<<"$line"
    printf '%-26s %10s %9s %9s %11s %10s   (round %s)\n' "$label" "$rps" "$p50" "$p99" "$cpu" "$rss" "$round"
    CPU[$scenario]=$(awk -v a="${CPU[$scenario]:-0}" -v b="$cpu" 'BEGIN{print a + b}')
    RPS[$scenario]=$(awk -v a="${RPS[$scenario]:-0}" -v b="$rps" 'BEGIN{print a + b}')
  done
done
echo
echo "ratios over all rounds (ours / nginx): CPU per request (lower is better), req/s (higher is better)"
for scenario in a b c; do
  awk -v s="$scenario" -v oc="${CPU[$scenario]}" -v nc="${CPU[nginx]}" -v orps="${RPS[$scenario]}" -v nrps="${RPS[nginx]}" \
    'BEGIN { printf "(%s) CPU µs/req %.2f×   req/s %.2f×\n", s, oc / nc, orps / nrps }'
done
