# Shared by the load scripts (sourced, not run): tools from apt when missing, a release build,
# a scratch directory and background processes cleaned up on exit, and /proc readings.
# Everything stays on 127.0.0.1.

# ensure_tools TOOL[:PACKAGE]...: installs each missing tool from apt (from PACKAGE when its
# package is named otherwise, e.g. h2load:nghttp2-client).
ensure_tools() {
  for spec in "$@"; do
    local tool=${spec%%:*} package=${spec#*:}
    if ! command -v "$tool" >/dev/null; then
      echo "installing $tool (apt: $package)" >&2
      (apt-get update -qq && apt-get install -y -qq "$package") >/dev/null
    fi
  done
}
# The scripts find free ports and read oha's JSON with it; a slim image (the Dockerfile's build
# stage) has none.
ensure_tools python3

# The binary under test: this tree's release build, or BIN when given (e.g. the profile-guided
# build of benches/pgo.sh, target/pgo/ratelimit-proxy), which is then used as it is. Scripts
# that run no gateway (script.sh) set NO_GATEWAY=1 and build nothing.
if [ -z "${NO_GATEWAY:-}" ]; then
  if [ -z "${BIN:-}" ]; then
    cargo build --release --quiet
    BIN=target/release/ratelimit-proxy
  fi
  [ -x "$BIN" ] || { echo "BIN is \"$BIN\": expected an executable ratelimit-proxy" >&2; exit 1; }
fi
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT

# ensure_oha: oha from `cargo install` when missing (a few minutes the first time).
ensure_oha() {
  if ! command -v oha >/dev/null; then
    echo "installing oha (cargo install, a few minutes)" >&2
    cargo install oha --locked --quiet
  fi
}

# oha_at_rate RATE DURATION CONNS URL: one oha run at a fixed rate (latency-corrected, with the
# load's `x-api-key`); prints "requests req/s p50_ms p99_ms". Fails when an answer was not 2xx
# or a request failed: a 429 is answered faster than a proxied request, and such a run measures
# something else. (oha counts the requests still in flight when the time is up as "aborted due
# to deadline"; those are not failures.)
oha_at_rate() {
  oha -z "$2" -q "$1" -c "$3" --no-tui --latency-correction --output-format json \
    -H "x-api-key: bench" "$4" 2>/dev/null | python3 -c 'import json, sys
d = json.load(sys.stdin); p = d["latencyPercentiles"]
codes = d["statusCodeDistribution"]; n = sum(codes.values())
bad = {code: count for code, count in codes.items() if not code.startswith("2")}
failed = {e: n for e, n in d.get("errorDistribution", {}).items() if e != "aborted due to deadline"}
if bad or failed:
    sys.exit("oha %s: answers not 2xx %s, failed requests %s" % (sys.argv[1], bad, failed))
print(n, d["summary"]["requestsPerSec"], "%.3f %.3f" % (p["p50"] * 1000, p["p99"] * 1000))' "$4" \
    || { echo "oha run of $4 failed" >&2; exit 1; }
}

# ensure_probe: the paired latency probe (examples/paired_latency), built for release unless
# PROBE names one.
ensure_probe() {
  if [ -z "${PROBE:-}" ]; then
    cargo build --release --locked --quiet --example paired_latency
    PROBE=target/release/examples/paired_latency
  fi
  [ -x "$PROBE" ] || { echo "PROBE is \"$PROBE\": expected an executable paired_latency" >&2; exit 1; }
}

# seconds DURATION: wrk's and oha's duration ("8s", "2m", "8") in whole seconds.
seconds() {
  case $1 in
    *[0-9]s) echo "${1%s}" ;;
    *[0-9]m) echo $(( ${1%m} * 60 )) ;;
    *[0-9]) echo "$1" ;;
    *) echo "duration \"$1\": expected seconds or minutes, e.g. 8s or 2m" >&2; exit 1 ;;
  esac
}

# The paired probe's unmeasured first seconds, and how many of its requests to the proxy are
# paired with one to DIRECT_URL: named here, so that what a run sends can be counted.
PROBE_WARMUP_SECONDS=1
PROBE_DIRECT_EVERY=10
# paired_at_rate RATE DURATION CONNS URL DIRECT_URL: one run of the paired probe at a fixed
# rate (with the load's `x-api-key`), one request in PROBE_DIRECT_EVERY paired with
# DIRECT_URL at the same instant; prints "p50_ms p99_ms direct_p99_ms added_p99_ms
# paired_p50_ms paired_p99_ms".
paired_at_rate() {
  local line; line=$("$PROBE" --rate "$1" --seconds "$(seconds "$2")" --connections "$3" \
    --warmup-seconds "$PROBE_WARMUP_SECONDS" --direct-every "$PROBE_DIRECT_EVERY" \
    -H "x-api-key: bench" "$4" "$5") || { echo "paired probe of $4 failed" >&2; exit 1; }
  awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    print f["target_p50_ms"], f["target_p99_ms"], f["direct_p99_ms"], f["added_p99_ms"],
      f["paired_added_p50_ms"], f["paired_added_p99_ms"] }' <<<"$line"
}

# median N...: the median of the numbers given.
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2}'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
# CPU ticks (utime+stime) of the given processes together, e.g. nginx's master and worker.
cpu_ticks() { stat_ticks '$14 + $15' "$@"; }
# The user-space part of those ticks (utime): the rest is the kernel's, system calls and the
# network stack they run (on loopback also the peer's receive path).
user_ticks() { stat_ticks '$14' "$@"; }
# stat_ticks AWK_EXPR PID...: AWK_EXPR of /proc/PID/stat's fields, summed over the processes.
stat_ticks() {
  local expr=$1 total=0; shift
  for p in "$@"; do total=$((total + $(awk "{print $expr}" "/proc/$p/stat"))); done
  echo $total
}
# Idle (and I/O wait) ticks of the whole machine, in USER_HZ.
idle_ticks() { awk '/^cpu / {print $5 + $6}' /proc/stat; }
# CPU time the hypervisor gave other guests while this one had work (a noisy neighbour).
steal_ticks() { awk '/^cpu / {print $9}' /proc/stat; }
# own_session PID...: fails unless each process leads a session of its own. The load scripts
# start our proxies with `setsid`, as nginx's daemon mode (and a service manager) starts nginx:
# with the kernel's autogroup scheduling (kernel.sched_autogroup_enabled, on here) a session is
# one scheduling group, and a proxy left in the script's session shares one group with wrk and
# the echo upstream, which then preempt it about ten times as often as they do the daemon nginx
# (docs/PERFORMANCE.md, "Limits of the measurements").
own_session() {
  for p in "$@"; do
    [ "$(ps -o sid= -p "$p" | tr -d ' ')" = "$p" ] || { echo "process $p does not lead a session of its own (setsid forked?)" >&2; exit 1; }
  done
}
peak_rss_kb() { local total=0; for p in "$@"; do total=$((total + $(awk '/VmHWM/ {print $2}' "/proc/$p/status"))); done; echo $total; }

# A self-signed ECDSA P-256 certificate for bench.test: $WORK/bench.pem and $WORK/bench.key.
bench_certificate() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -subj "/CN=bench.test" -addext "subjectAltName=DNS:bench.test" \
    -keyout "$WORK/bench.key" -out "$WORK/bench.pem" 2>/dev/null
}

# proxy_toml PORT TABLES ROUTE: a proxy's config: one listener on 127.0.0.1:PORT, WORKERS
# workers (default 1), the [server]-level TABLES, the echo upstream on UPSTREAM_PORT, and one
# route to it, "default", with ROUTE's keys (then any tables ROUTE adds).
proxy_toml() {
  printf '[server]\nlisten = ["127.0.0.1:%s"]\nworkers = %s\n%s\n[[upstreams]]\nname = "echo"\nservers = ["http://127.0.0.1:%s"]\n[[routes]]\nname = "default"\nupstream = "echo"\n%s\n' \
    "$1" "${WORKERS:-1}" "$2" "$UPSTREAM_PORT" "$3"
}

# A redis-server of the script's own on a free port: sets REDIS_PORT and REDIS_PID.
start_redis() {
  REDIS_PORT=$(free_port)
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no >/dev/null 2>&1 &
  REDIS_PID=$!; PIDS+=($REDIS_PID)
  wait_port "$REDIS_PORT"
}

# nginx's proxying, as the issue sets it: HTTP/1.1 keep-alive to the upstream, Host kept,
# X-Forwarded-For extended. NGINX_HTTP goes in `http {}`, NGINX_PROXY in each proxying
# `location`. NGINX_FIELDS=same also has nginx do by hand the rest of what ratelimit-proxy does
# to every proxied request (DESIGN §1): set X-Forwarded-Proto and -Host, keep the client's
# X-Request-Id or mint one (32 hex digits, as ours; nginx's `$request_id` draws them from
# OpenSSL), and return that id to the client, on a 429 too. The targets are judged with the
# default; `same` shows what equal work costs nginx.
NGINX_HTTP='map $http_x_request_id $kept_request_id { "" $request_id; default $http_x_request_id; }'
NGINX_PROXY='proxy_http_version 1.1; proxy_set_header Connection "";
      proxy_set_header Host $host; proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;'
case ${NGINX_FIELDS:-minimal} in
  minimal) ;;
  same) NGINX_PROXY+='
      proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Request-Id $kept_request_id; add_header X-Request-Id $kept_request_id always;' ;;
  *) echo "NGINX_FIELDS is \"$NGINX_FIELDS\": expected minimal or same" >&2; exit 1 ;;
esac

# The two limits of two windows each that the limit scenarios put on the route, high enough
# that the load never reaches them (and within what the Redis store counts exactly): the cost
# of admission on the allowed path. Every load comes from 127.0.0.1, so the per-IP windows
# must hold all of one compare.sh run through (c): ~2.5M requests in ~25 min with (f). An
# hour's window can count at most ~2.5M exactly in Redis (limit × µs below 2^53), and 2M an
# hour was reached, so the second window is 15 minutes. Goes right after a [[routes]] table.
TWO_LIMITS='limits = ["per-key", "per-ip"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 10000000, per = "1m" }, { limit = 1000000000, per = "1d" }]
[[limits]]
name = "per-ip"
key = ["ip", "route"]
algorithm = "sliding_window"
rates = [{ limit = 1000000, per = "1m" }, { limit = 8000000, per = "15m" }]'

# (s): TWO_LIMITS with per-key settled by the answer's Content-Length (the echo upstream sends
# ~180 bytes): each request reserves 200 and settles below that, so every answer goes through
# the settle path and its store write. One window, high enough for a whole run at ~180 a request.
SETTLED_LIMITS='limits = ["per-key", "per-ip"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
rates = [{ limit = 4000000000, per = "1m" }]
charge = { reserve = 200, settle = "header:content-length" }
[[limits]]
name = "per-ip"
key = ["ip", "route"]
algorithm = "sliding_window"
rates = [{ limit = 1000000, per = "1m" }, { limit = 8000000, per = "15m" }]'

# (h): TWO_LIMITS approximate (issue 35), each decided from leases synced to Redis every
# 100 ms. per-key is a fixed_window here: approximate needs counts that add up (token_bucket,
# TWO_LIMITS' default, is refused), with the same windows and limits.
APPROXIMATE_LIMITS='limits = ["per-key", "per-ip"]
[[limits]]
name = "per-key"
key = ["header:x-api-key"]
algorithm = "fixed_window"
rates = [{ limit = 10000000, per = "1m" }, { limit = 1000000000, per = "1d" }]
consistency = "approximate"
[[limits]]
name = "per-ip"
key = ["ip", "route"]
algorithm = "sliding_window"
rates = [{ limit = 1000000, per = "1m" }, { limit = 8000000, per = "15m" }]
consistency = "approximate"'

# The configs of compare.sh's scenarios, shared by the scripts that run them.
EDGE=$'[edge]\nrate = "1000000/s"'
MEMORY_STORE=$'[store]\nhash_secret = "bench"'
# redis_store PORT: the [store] table for the redis-server on PORT.
redis_store() {
  printf '[store]\nhash_secret = "bench"\nbackend = "redis"\nurl = "redis://127.0.0.1:%s/0"\ntimeout = "100ms"' "$1"
}
# One limit of one request an hour per API key: every request after the first is denied.
DENYING_LIMIT=$'limits = ["flood"]\n[[limits]]\nname = "flood"\nkey = ["header:x-api-key"]\nrates = [{ limit = 1, per = "1h" }]'

# scenario_config NAME: sets SCENARIO_TABLES (after [server]) and SCENARIO_ROUTE (keys of the
# route, then more tables) for a (proxy only), b (edge layer), c (edge + two memory limits),
# s (c with one of them settled by a response header),
# d (the same limits in a redis-server of the script's own, started here) or denial (one
# limit that denies); fails for any other name.
scenario_config() {
  case $1 in
    a) SCENARIO_TABLES=""; SCENARIO_ROUTE="" ;;
    b) SCENARIO_TABLES=$EDGE; SCENARIO_ROUTE="" ;;
    c) SCENARIO_TABLES=$EDGE$'\n'$MEMORY_STORE; SCENARIO_ROUTE=$TWO_LIMITS ;;
    s) SCENARIO_TABLES=$EDGE$'\n'$MEMORY_STORE; SCENARIO_ROUTE=$SETTLED_LIMITS ;;
    d) ensure_tools redis-server; start_redis
       SCENARIO_TABLES=$EDGE$'\n'$(redis_store "$REDIS_PORT"); SCENARIO_ROUTE=$TWO_LIMITS ;;
    denial) SCENARIO_TABLES=""; SCENARIO_ROUTE=$DENYING_LIMIT ;;
    *) return 1 ;;
  esac
}
