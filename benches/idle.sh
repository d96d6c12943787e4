#!/usr/bin/env bash
# Memory per idle keep-alive connection, ours beside nginx in the same run.
#
#   benches/idle.sh                 N=5000 connections, plain and TLS
#   N=19000 MODES=plain benches/idle.sh
#
# Each server runs one worker (one process for nginx: master_process off) in front of the same
# echo upstream. For each mode (plain HTTP/1.1, TLS 1.3 with ALPN http/1.1) and each server,
# benches/idle_client.py opens N connections one after another, sends one GET on each and reads
# its answer, then leaves them all idle and reads the server's RSS: (after - before) / N is
# what one idle connection costs, including what the kernel does not hold (socket buffers are
# the kernel's and not in RSS, for both). Then every connection sends one more GET and must be
# answered. In plain mode a third server runs beside them, the floor: examples/idle_floor, the
# least a tokio server holds per connection (a task, its socket, nothing else), below which no
# tokio server can go. N is bounded by the hard limit of open files (`ulimit -Hn`), which the script
# raises the soft limit to, for the servers and the client.
#
# BIN: the binary (default: this tree's release build). FLOOR: the floor's binary (default:
# examples/idle_floor, built for release). MODES: "plain tls" (default).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
ensure_tools nginx openssl

N=${N:-5000}
MODES=${MODES:-plain tls}
[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "N is \"$N\": expected a whole number of connections" >&2; exit 1; }
for mode in $MODES; do
  case $mode in plain | tls) ;; *) echo "MODES has \"$mode\": expected plain and/or tls" >&2; exit 1 ;; esac
done
HARD=$(ulimit -Hn)
if [ "$HARD" != unlimited ] && [ $((N + 200)) -gt "$HARD" ]; then
  echo "N=$N connections need $((N + 200)) open files per process; the hard limit here is $HARD" >&2
  exit 1
fi
ulimit -n "$HARD"
if [ -z "${FLOOR:-}" ]; then
  cargo build --release --locked --quiet --example idle_floor
  FLOOR=target/release/examples/idle_floor
fi

UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!)
bench_certificate
wait_port "$UPSTREAM_PORT"

# start_servers: a fresh gateway and a fresh nginx, each with a plain and a TLS listener: each
# mode measures processes that have held no connections before (memory freed by an earlier
# mode's connections would be reused and hide what the next mode's cost).
start_servers() {
  OURS_PORT=$(free_port); OURS_TLS_PORT=$(free_port)
  NGINX_PORT=$(free_port); NGINX_TLS_PORT=$(free_port)
  cat > "$WORK/ours.toml" <<TOML
[server]
listen = ["127.0.0.1:$OURS_PORT"]
workers = 1
max_connections = $((N + 100))
idle_timeout = "600s"
[[server.tls]]
listen = "127.0.0.1:$OURS_TLS_PORT"
certs = [{ cert = "bench.pem", key = "bench.key" }]
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
[[routes]]
name = "default"
upstream = "echo"
TOML
  RUST_LOG=warn "$BIN" --config "$WORK/ours.toml" >"$WORK/ours.log" 2>&1 & PIDS+=($!); OURS_PID=$!

  mkdir -p "$WORK/nginx"
  cat > "$WORK/nginx.conf" <<CONF
master_process off;
daemon off;
worker_processes 1;
worker_rlimit_nofile $HARD;
pid $WORK/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections $((2 * N + 1000)); }
http {
  access_log off;
  keepalive_timeout 600s;
  keepalive_requests 100000;
  client_body_temp_path $WORK/nginx;
  proxy_temp_path $WORK/nginx;
  fastcgi_temp_path $WORK/nginx;
  uwsgi_temp_path $WORK/nginx;
  scgi_temp_path $WORK/nginx;
  upstream echo { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    listen 127.0.0.1:$NGINX_TLS_PORT ssl;
    ssl_certificate $WORK/bench.pem;
    ssl_certificate_key $WORK/bench.key;
    location / {
      proxy_pass http://echo;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
CONF
  nginx -c "$WORK/nginx.conf" -p "$WORK" 2>"$WORK/nginx/stderr.log" & PIDS+=($!); NGINX_PID=$!
  for port in "$OURS_PORT" "$OURS_TLS_PORT" "$NGINX_PORT" "$NGINX_TLS_PORT"; do
    wait_port "$port"
  done
}

# stop_servers: stops the gateway and nginx of the last start_servers.
stop_servers() {
  kill "$OURS_PID" "$NGINX_PID"
  wait "$OURS_PID" "$NGINX_PID" 2>/dev/null || true
}

# measure LABEL PORT TLS PID: one client run; prints the row and sets PER (bytes/connection).
measure() {
  local out
  out=$(python3 benches/idle_client.py "$2" "$3" "$N" "$4") || {
    echo "$1: the client failed; the servers' logs:" >&2
    tail -n 5 "$WORK/nginx/error.log" "$WORK/ours.log" >&2
    exit 1
  }
  read -r PER before after secs <<<"$out"
  printf '%-34s %10s %12s %12s %10s\n' "$1" "$PER" "$before" "$after" "$secs"
}

echo "$N idle keep-alive connections, one request each; bytes of RSS per connection"
printf '%-34s %10s %12s %12s %10s\n' server "B/conn" "RSS before kB" "RSS after kB" "open s"
for mode in $MODES; do
  start_servers
  if [ "$mode" = plain ]; then tls=0; ours_port=$OURS_PORT; nginx_port=$NGINX_PORT
  else tls=1; ours_port=$OURS_TLS_PORT; nginx_port=$NGINX_TLS_PORT; fi
  measure "nginx, $mode" "$nginx_port" "$tls" "$NGINX_PID"; nginx_per=$PER
  measure "ratelimit-proxy, $mode" "$ours_port" "$tls" "$OURS_PID"; ours_per=$PER
  if [ "$mode" = plain ]; then
    FLOOR_PORT=$(free_port)
    "$FLOOR" "127.0.0.1:$FLOOR_PORT" & PIDS+=($!); FLOOR_PID=$!
    wait_port "$FLOOR_PORT"
    measure "floor: a bare tokio server, plain" "$FLOOR_PORT" 0 "$FLOOR_PID"
    kill "$FLOOR_PID"; wait "$FLOOR_PID" 2>/dev/null || true
  fi
  awk -v o="$ours_per" -v n="$nginx_per" -v m="$mode" \
    'BEGIN { printf "%-34s %10s\n", "ratio, " m " (ours / nginx)", (n > 0 ? sprintf("%.2fx", o / n) : "n/a") }'
  stop_servers
done
echo "every idle connection answered its next request"
