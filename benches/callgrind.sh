#!/usr/bin/env bash
# User-space instructions per proxied request, counted by callgrind: repeatable on this shared
# machine where CPU-time measurements move by ±10 µs. Starts the echo upstream and the proxy
# (under valgrind) on loopback, sends 200 warm-up requests on one keep-alive connection, zeroes
# the counters, sends N more, dumps, and divides. Kernel time is not counted.
#
#   benches/callgrind.sh                     # (a) proxy only, 2000 requests
#   SCENARIO=d N=3000 benches/callgrind.sh   # compare.sh's scenarios by name: a, b (edge layer),
#                                            # c (edge + two memory limits), s (c, one settled), d (the same limits in
#                                            # a redis-server of its own), denial (one limit, 429)
#   BIN=/tmp/other-build SCENARIO=c benches/callgrind.sh   # the same for another build
#   N=5000 EXTRA='[edge]\nrate = "1000000/s"' benches/callgrind.sh   # tables after [server]
#   ROUTE='limits = ["flood"]\n[[limits]]\nname = "flood"\nkey = ["header:x-api-key"]\nrates = [{ limit = 1, per = "1h" }]' \
#     STATUS=429 benches/callgrind.sh           # keys of the route, then more tables
#   SCENARIO=nginx benches/callgrind.sh      # nginx (one process, compare.sh's (a) config) under the
#                                            # same load, for its count beside ours
#   NGINX_FIELDS=same SCENARIO=nginx benches/callgrind.sh   # nginx also setting the fields ours sets
#                                            # (X-Forwarded-Proto/-Host, X-Request-Id; common.sh)
#   SCENARIO=echo benches/callgrind.sh       # the echo upstream alone, sent the fields ours forwards
#                                            # (X-Forwarded-For/-Proto/-Host, X-Request-Id); with
#                                            # NGINX_FIELDS=minimal, only nginx's X-Forwarded-For
#   CONNS=50 SCENARIO=d benches/callgrind.sh  # N requests spread over 50 connections at once:
#                                            # what a worker spends per request under concurrent
#                                            # load (e.g. Redis calls merged), not one at a time
#   CACHE=1 CONNS=50 SCENARIO=c benches/callgrind.sh   # also simulate this machine's caches
#                                            # (L1i and L1d 32 KiB, L2 512 KiB a core, as the last
#                                            # level) and print misses per request: code that does
#                                            # not fit L1i is fetched again on every request
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-2000}
SCENARIO=${SCENARIO:-}
EXTRA=${EXTRA:-}
ROUTE=${ROUTE:-}
STATUS=${STATUS:-200}
CONNS=${CONNS:-1}
CACHE=${CACHE:-}

source benches/common.sh
ensure_tools valgrind

# Fields each request carries besides x-api-key, as "name: value" lines.
FIELDS=""
if [ "$SCENARIO" = echo ]; then
  FIELDS=$'x-forwarded-for: 127.0.0.1'
  if [ "${NGINX_FIELDS:-}" != minimal ]; then
    FIELDS+=$'\nx-forwarded-proto: http\nx-forwarded-host: 127.0.0.1:8080\nx-request-id: 0123456789abcdef0123456789abcdef'
  fi
elif [ -n "$SCENARIO" ] && [ "$SCENARIO" != nginx ]; then
  scenario_config "$SCENARIO" || { echo "unknown scenario $SCENARIO: expected a, b, c, d or denial" >&2; exit 1; }
  EXTRA=$SCENARIO_TABLES; ROUTE=$SCENARIO_ROUTE
  if [ "$SCENARIO" = denial ]; then STATUS=429; fi
fi

VALGRIND=(valgrind --tool=callgrind --compress-strings=no --compress-pos=no --callgrind-out-file="$WORK/cg.out")
[ -z "$CACHE" ] || VALGRIND+=(--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64)

UPSTREAM_PORT=$(free_port)
PROXY_PORT=$(free_port)
# The proxies' upstream (for SCENARIO=echo, the echo under valgrind below is measured instead).
if [ "$SCENARIO" != echo ]; then
  "$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!)
fi
printf '[server]\nlisten = ["127.0.0.1:%s"]\n%b\n[[upstreams]]\nname = "echo"\nservers = ["http://127.0.0.1:%s"]\n[[routes]]\nname = "default"\nupstream = "echo"\n%b\n' \
  "$PROXY_PORT" "$EXTRA" "$UPSTREAM_PORT" "$ROUTE" > "$WORK/gw.toml"
if [ "$SCENARIO" = echo ]; then
  "${VALGRIND[@]}" "$BIN" echo --listen "127.0.0.1:$PROXY_PORT" >/dev/null 2>"$WORK/valgrind.log" & PROXY_PID=$!; PIDS+=($PROXY_PID)
elif [ "$SCENARIO" = nginx ]; then
  ensure_tools nginx
  mkdir -p "$WORK/nginx"
  cat > "$WORK/nginx.conf" <<CONF
master_process off; daemon off; worker_processes 1; pid $WORK/nginx.pid; error_log $WORK/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off; client_body_temp_path $WORK/nginx; proxy_temp_path $WORK/nginx;
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=1000000r/s;
  $NGINX_HTTP
  upstream echo { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$PROXY_PORT;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://echo;
      $NGINX_PROXY
    }
  }
}
CONF
  "${VALGRIND[@]}" nginx -c "$WORK/nginx.conf" -p "$WORK" >/dev/null 2>"$WORK/valgrind.log" & PROXY_PID=$!; PIDS+=($PROXY_PID)
else
  RUST_LOG=warn "${VALGRIND[@]}" "$BIN" --config "$WORK/gw.toml" >/dev/null 2>"$WORK/valgrind.log" & PROXY_PID=$!; PIDS+=($PROXY_PID)
fi
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT") 2>/dev/null && break; sleep 0.1; done

requests() { # N: keep-alive GETs on CONNS connections at once, each must answer $STATUS (after the first)
  python3 - "$PROXY_PORT" "$1" "$STATUS" "$CONNS" "$FIELDS" <<'PY'
import http.client, sys, threading
port, n, expected, conns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
fields = dict(line.split(": ", 1) for line in sys.argv[5].splitlines())
failures = []
def send(count):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    for _ in range(count):
        connection.request("GET", "/bench", headers={"x-api-key": "bench", **fields})
        response = connection.getresponse()
        response.read()
        if response.status not in (expected, 200):
            failures.append(response.status)
threads = [threading.Thread(target=send, args=(n // conns + (i < n % conns),)) for i in range(conns)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
assert not failures, failures[:5]
PY
}
requests 200
callgrind_control -z "$PROXY_PID" >/dev/null 2>&1
requests "$N"
callgrind_control -d "$PROXY_PID" >/dev/null 2>&1
sleep 1
dump=$(ls "$WORK"/cg.out.* | sort -t. -k3 -n | tail -1)
instructions=$(awk '/^(summary|totals):/ {print $2; exit}' "$dump")
cp "$dump" target/callgrind.out  # for `callgrind_annotate target/callgrind.out`
[ "$SCENARIO" = nginx ] && BIN=nginx
echo "$((instructions / N)) user-space instructions per request ($N requests, $(basename "$BIN")${SCENARIO:+, scenario $SCENARIO})"
if [ -n "$CACHE" ]; then
  awk -v n="$N" '/^events:/ { for (i = 2; i <= NF; i++) name[i] = $i }
    /^(summary|totals):/ { for (i = 2; i <= NF; i++) v[name[i]] = $i; exit }
    END { printf "per request: L1i misses %.0f, L1d misses %.0f (reads) + %.0f (writes), L2 misses %.1f (code) + %.1f + %.1f\n",
      v["I1mr"] / n, v["D1mr"] / n, v["D1mw"] / n, v["ILmr"] / n, v["DLmr"] / n, v["DLmw"] / n }' "$dump"
fi
