#!/usr/bin/env bash
# Side by side with nginx in one run (issue 8): the same echo upstream, nginx 1.x as a
# keep-alive reverse proxy with `limit_req` (a per-IP zone whose limit is never hit), and
# ratelimit-proxy configured equivalently; each driven by the same wrk load, alternating runs.
# Prints requests/s, p50, p99, CPU µs per request of the proxy process(es), peak RSS, the echo
# upstream's CPU µs per request (it shares the cores, so it bounds req/s too), the machine's
# idle CPU µs per request (with wrk, the upstream and the proxy on two cores, req/s is two
# cores over the sum of all four), the time the hypervisor gave the cores to other guests per
# request (`steal`: a round run beside a noisy neighbour), and the ours/nginx ratios: over all
# rounds, and the median of each round's own.
#
# Scenarios: (a) proxy only, (b) edge layer on, (c) edge + two memory-store limits, (s) (c) with
# one of them settled by a response header (`charge`, SETTLED_LIMITS in common.sh), (d) the same
# two limits in Redis, (h) the two limits approximate (leases synced to the same Redis every
# 100 ms; per-key a fixed_window, see APPROXIMATE_LIMITS in common.sh), (e) a flood where 9 requests in 10 are denied (nginx: limit_req on the
# key, status 429), (f) p99 latency at a fixed rate of half nginx's peak (oha -q) against
# direct-to-upstream, (g) HTTPS keep-alive (nginx ssl vs our TLS listener, same certificate).
# Two controls bound what any proxy can reach here: `floor`, nginx answering 429 from its
# config (the cheapest answer, to set (e)'s denial against), and in (f) the upstream measured
# against itself (the added p99 of no proxy at all: the machine's own noise).
#
#   benches/compare.sh                      # 50 connections, 10 s per run, 2 rounds
#   CONNS=100 DURATION=20s ROUNDS=3 benches/compare.sh
#   WORKERS=2 benches/compare.sh            # two nginx workers against two of ours (default 1)
#   ROUNDS=0 RATE=20000 benches/compare.sh  # only (f), at a given rate
#   F_ROUNDS=5 benches/compare.sh           # (f) in 5 alternating rounds, medians (default 3; 0 skips (f))
#   F_PROBES=paired benches/compare.sh      # (f) only with the paired probe, which sends the
#                                           # direct requests in the same run (default: oha, then
#                                           # the paired probe)
#   SCENARIOS="nginx c" ROUNDS=12 DURATION=4s F_ROUNDS=0 benches/compare.sh
#                                           # only these runs (of ALL_SCENARIOS below), so
#                                           # more rounds of them fit: more pairs
#                                           # run back to back, and more of them undisturbed
#   ECHO_THREADS=1 benches/compare.sh       # the echo upstream on one runtime thread (default: one
#                                           # per core, whose workers wake and preempt each other
#                                           # and the proxy on a 2-core machine)
#   QUIET_STEAL=1 benches/compare.sh        # the "quiet rounds" ratios take the rounds whose two
#                                           # runs each had at most this much steal, µs a request
#                                           # (default 0.5)
#   NGINX_FIELDS=same benches/compare.sh    # nginx also sets X-Forwarded-Proto/-Host and keeps or
#                                           # mints X-Request-Id, as ours does (see common.sh); the
#                                           # targets are judged without
#
#   SESSIONS=shared benches/compare.sh      # both proxies in this script's session, beside wrk and
#                                           # the upstream (nginx with `daemon off`), instead of
#                                           # each leading a session of its own (see below)
#
# Each proxy leads a session of its own, nginx by daemonizing and ours under `setsid`, so that
# the kernel's autogroup scheduling treats them alike (own_session in common.sh).
# Everything stays on 127.0.0.1 and stops by itself. nginx, wrk and redis-server come from apt
# and oha from `cargo install` when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-50}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
# Rounds of (f), each against its own direct-to-upstream run.
F_ROUNDS=${F_ROUNDS:-3}
[[ $F_ROUNDS =~ ^[0-9]+$ ]] || { echo "F_ROUNDS is \"$F_ROUNDS\": expected a whole number of rounds (0 skips (f))" >&2; exit 1; }
# How (f) measures: oha against each target and separately against the upstream, and the
# paired probe, which sends both in one run (examples/paired_latency).
F_PROBES=${F_PROBES:-oha paired}
for probe in $F_PROBES; do
  case $probe in
    oha | paired) ;;
    *) echo "F_PROBES has \"$probe\": expected oha, paired, or both (\"oha paired\")" >&2; exit 1 ;;
  esac
done
# The wrk runs of each round, in order.
ALL_SCENARIOS="nginx a b c s d h nginx-flood e floor nginx-tls g"
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
for scenario in $SCENARIOS; do
  case " $ALL_SCENARIOS " in
    *" $scenario "*) ;;
    *) echo "SCENARIOS has \"$scenario\": expected names among $ALL_SCENARIOS" >&2; exit 1 ;;
  esac
done
# nginx's worker_processes and our [server] workers: the same number of serving threads.
WORKERS=${WORKERS:-1}
# Steal, µs a request, up to which a run counts as undisturbed (the quiet-round ratios).
QUIET_STEAL=${QUIET_STEAL:-0.5}
[[ $QUIET_STEAL =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "QUIET_STEAL is \"$QUIET_STEAL\": expected µs of steal a request, e.g. 0.5" >&2; exit 1; }
# Whose session the proxies run in (own_session in common.sh).
SESSIONS=${SESSIONS:-own}
case $SESSIONS in
  own) NGINX_DAEMON=on; OURS_START=(setsid) ;;
  shared) NGINX_DAEMON=off; OURS_START=() ;;
  *) echo "SESSIONS is \"$SESSIONS\": expected own or shared" >&2; exit 1 ;;
esac

source benches/common.sh
ensure_tools nginx wrk redis-server
ensure_oha
[ "$F_ROUNDS" -eq 0 ] || ensure_probe
NGINX=$(command -v nginx)

UPSTREAM_PORT=$(free_port)
# The echo upstream's runtime threads: tokio's default (one per core) unless ECHO_THREADS is set.
ECHO_ENV=()
if [ -n "${ECHO_THREADS:-}" ]; then
  [[ $ECHO_THREADS =~ ^[1-9][0-9]*$ ]] || { echo "ECHO_THREADS is \"$ECHO_THREADS\": expected a whole number of threads, 1 or more" >&2; exit 1; }
  ECHO_ENV=(TOKIO_WORKER_THREADS="$ECHO_THREADS")
fi
env "${ECHO_ENV[@]}" "$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!); UPSTREAM_PID=$!
start_redis
bench_certificate

# --- nginx: WORKERS workers, upstream keep-alive, limit_req per IP that is never reached; a second
# location limits per API key for the flood; an ssl listener for HTTPS ---
NGINX_PORT=$(free_port)
NGINX_TLS_PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat > "$WORK/nginx.conf" <<CONF
worker_processes $WORKERS;
daemon $NGINX_DAEMON;
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
  limit_req_zone \$http_x_api_key zone=perkey:10m rate=1r/m;
  limit_req_status 429;
  $NGINX_HTTP
  upstream echo { server 127.0.0.1:$UPSTREAM_PORT; keepalive 64; }
  server {
    listen 127.0.0.1:$NGINX_PORT;
    listen 127.0.0.1:$NGINX_TLS_PORT ssl;
    ssl_certificate $WORK/bench.pem;
    ssl_certificate_key $WORK/bench.key;
    location / {
      limit_req zone=perip burst=1000000 nodelay;
      proxy_pass http://echo;
      $NGINX_PROXY
    }
    location /flood {
      limit_req zone=perkey;
      proxy_pass http://echo;
      $NGINX_PROXY
    }
    location /floor {
      return 429 '{"title":"Too Many Requests","status":429}';
    }
  }
}
CONF
if [ "$NGINX_DAEMON" = on ]; then
  "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null
else
  "$NGINX" -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null &
fi
wait_port "$NGINX_PORT"
PIDS+=("$(cat "$WORK/nginx.pid")")  # stopping the master stops its worker
NGINX_PIDS=$(pgrep -f "nginx.*$WORK/nginx.conf" | tr '\n' ' ')
NGINX_PIDS="$NGINX_PIDS $(pgrep -P "$(cat "$WORK/nginx.pid")" | tr '\n' ' ')"

# --- ours ---
# NAME EXTRA_TOML ROUTE_TOML LIMITS_TOML: starts a proxy, sets OURS_PORT and OURS_PID. Not in a
# subshell, so that PIDS (what cleanup stops) sees it.
ours() {
  local port; port=$(free_port)
  cat > "$WORK/$1.toml" <<TOML
[server]
listen = ["127.0.0.1:$port"]
workers = $WORKERS
$2
[[upstreams]]
name = "echo"
servers = ["http://127.0.0.1:$UPSTREAM_PORT"]
$3
[[routes]]
name = "default"
upstream = "echo"
$4
TOML
  RUST_LOG=warn "${OURS_START[@]}" "$BIN" --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  PIDS+=($!)
  OURS_PORT=$port; OURS_PID=$!
}
# (e): /flood counts per API key, 1 a minute, like nginx's perkey zone.
FLOOD='[[routes]]
name = "flood"
path_prefix = "/flood"
upstream = "echo"
limits = ["flood"]
[[limits]]
name = "flood"
key = ["header:x-api-key"]
rates = [{ limit = 1, per = "1m" }]'
TLS_PORT=$(free_port)
ours a "[[server.tls]]
listen = \"127.0.0.1:$TLS_PORT\"
certs = [{ cert = \"bench.pem\", key = \"bench.key\" }]" "" ""
A_PORT=$OURS_PORT; A_PID=$OURS_PID
ours b "$EDGE" "" ""
B_PORT=$OURS_PORT; B_PID=$OURS_PID
ours c "$EDGE
$MEMORY_STORE" "$FLOOD" "$TWO_LIMITS"
C_PORT=$OURS_PORT; C_PID=$OURS_PID
ours s "$EDGE
$MEMORY_STORE" "" "$SETTLED_LIMITS"
S_PORT=$OURS_PORT; S_PID=$OURS_PID
ours d "$EDGE
$(redis_store "$REDIS_PORT")" "" "$TWO_LIMITS"
D_PORT=$OURS_PORT; D_PID=$OURS_PID
# (h) keys its Redis state under a prefix of its own: (d)'s per-ip windows are the same.
ours h "$EDGE
$(redis_store "$REDIS_PORT")
key_prefix = \"h:\"" "" "$APPROXIMATE_LIMITS"
H_PORT=$OURS_PORT; H_PID=$OURS_PID
for port in "$A_PORT" "$B_PORT" "$C_PORT" "$S_PORT" "$D_PORT" "$H_PORT" "$TLS_PORT" "$NGINX_TLS_PORT"; do wait_port "$port"; done
[ "$SESSIONS" = shared ] || own_session "$A_PID" "$B_PID" "$C_PID" "$S_PID" "$D_PID" "$H_PID" "$(cat "$WORK/nginx.pid")"

# (e)'s load: 1 request in 10 with a fresh key (allowed), 9 with one flooding key (denied).
cat > "$WORK/flood.lua" <<'LUA'
local n = 0
request = function()
  n = n + 1
  local key = (n % 10 == 0) and ("fresh-" .. n .. "-" .. math.random(1e9)) or "flooder"
  return wrk.format("GET", "/flood", { ["x-api-key"] = key })
end
LUA

# run NAME URL PIDS... [-- wrk args]: one wrk run; prints "req/s p50 p99 cpu_us rss_kb
# upstream_cpu_us idle_us steal_us user_us": CPU per request of PIDS, of the echo upstream that
# shares the cores, the machine's idle CPU time per request (cores no process had work for),
# its stolen time (cores the hypervisor ran another guest on: a disturbed round), and the
# user-space part of PIDS' CPU per request
run() {
  local name=$1 url=$2; shift 2
  local pids=() extra=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do pids+=("$1"); shift; done
  [ $# -gt 0 ] && shift && extra=("$@")
  wrk -t1 -c"$CONNS" -d2s -H "x-api-key: bench" "${extra[@]}" "$url" >/dev/null
  local before user_before upstream_before idle_before steal_before; before=$(cpu_ticks "${pids[@]}"); user_before=$(user_ticks "${pids[@]}"); upstream_before=$(cpu_ticks "$UPSTREAM_PID"); idle_before=$(idle_ticks); steal_before=$(steal_ticks)
  wrk -t1 -c"$CONNS" -d"$DURATION" --latency -H "x-api-key: bench" "${extra[@]}" "$url" >"$WORK/$name.txt"
  local after user_after upstream_after idle_after steal_after; after=$(cpu_ticks "${pids[@]}"); user_after=$(user_ticks "${pids[@]}"); upstream_after=$(cpu_ticks "$UPSTREAM_PID"); idle_after=$(idle_ticks); steal_after=$(steal_ticks)
  local requests; requests=$(awk '/requests in/ {print $1}' "$WORK/$name.txt")
  awk -v t=$((after - before)) -v user=$((user_after - user_before)) -v u=$((upstream_after - upstream_before)) -v hz="$(getconf CLK_TCK)" \
    -v i=$((idle_after - idle_before)) -v s=$((steal_after - steal_before)) -v n="$requests" -v rss="$(peak_rss_kb "${pids[@]}")" '
    /Requests\/sec/ {rps=$2} $1=="50%" {p50=$2} $1=="99%" {p99=$2}
    END { printf "%s %s %s %.1f %d %.1f %.1f %.1f %.1f\n", rps, p50, p99, t / hz * 1e6 / n, rss, u / hz * 1e6 / n, i / hz * 1e6 / n, s / hz * 1e6 / n, user / hz * 1e6 / n }' "$WORK/$name.txt"
}

echo "wrk -t1 -c$CONNS -d$DURATION, $ROUNDS alternating rounds, $(nproc) cores shared with wrk and the upstream, NGINX_FIELDS=${NGINX_FIELDS:-minimal}, ECHO_THREADS=${ECHO_THREADS:-default}, SESSIONS=$SESSIONS"
printf '%-30s %10s %9s %9s %11s %6s %10s %10s %6s %6s\n' scenario "req/s" p50 p99 "CPU µs/req" "user" "RSS kB" "upstream" "idle" "steal"
declare -A CPU USER RPS ROUND_CPU ROUND_RPS ROUND_STEAL
for round in $(seq "$ROUNDS"); do
  for scenario in $SCENARIOS; do
    note=""
    case $scenario in
      nginx) line=$(run "$scenario-$round" "http://127.0.0.1:$NGINX_PORT/bench" $NGINX_PIDS); label="nginx limit_req" ;;
      a) line=$(run "$scenario-$round" "http://127.0.0.1:$A_PORT/bench" "$A_PID"); label="(a) ours, proxy only" ;;
      b) line=$(run "$scenario-$round" "http://127.0.0.1:$B_PORT/bench" "$B_PID"); label="(b) ours, edge layer" ;;
      c) line=$(run "$scenario-$round" "http://127.0.0.1:$C_PORT/bench" "$C_PID"); label="(c) ours, edge + 2 limits" ;;
      s) line=$(run "$scenario-$round" "http://127.0.0.1:$S_PORT/bench" "$S_PID"); label="(s) ours, (c), 1 settled" ;;
      d) redis_before=$(cpu_ticks "$REDIS_PID")
         line=$(run "$scenario-$round" "http://127.0.0.1:$D_PORT/bench" "$D_PID"); label="(d) ours, 2 Redis limits"
         requests=$(awk '/requests in/ {print $1}' "$WORK/$scenario-$round.txt")
         note=$(awk -v t=$(( $(cpu_ticks "$REDIS_PID") - redis_before )) -v hz="$(getconf CLK_TCK)" -v n="$requests" \
           'BEGIN { printf "+ redis-server %.1f µs/req", t / hz * 1e6 / n }') ;;
      h) redis_before=$(cpu_ticks "$REDIS_PID")
         line=$(run "$scenario-$round" "http://127.0.0.1:$H_PORT/bench" "$H_PID"); label="(h) ours, 2 approximate Redis limits"
         requests=$(awk '/requests in/ {print $1}' "$WORK/$scenario-$round.txt")
         note=$(awk -v t=$(( $(cpu_ticks "$REDIS_PID") - redis_before )) -v hz="$(getconf CLK_TCK)" -v n="$requests" \
           'BEGIN { printf "+ redis-server %.2f µs/req", t / hz * 1e6 / n }') ;;
      nginx-flood) line=$(run "$scenario-$round" "http://127.0.0.1:$NGINX_PORT/flood" $NGINX_PIDS -- -s "$WORK/flood.lua"); label="nginx flood 90% denied" ;;
      e) line=$(run "$scenario-$round" "http://127.0.0.1:$C_PORT/flood" "$C_PID" -- -s "$WORK/flood.lua"); label="(e) ours, flood 90% denied" ;;
      floor) line=$(run "$scenario-$round" "http://127.0.0.1:$NGINX_PORT/floor" $NGINX_PIDS); label="floor: nginx return 429" ;;
      nginx-tls) line=$(run "$scenario-$round" "https://127.0.0.1:$NGINX_TLS_PORT/bench" $NGINX_PIDS); label="nginx https keep-alive" ;;
      g) line=$(run "$scenario-$round" "https://127.0.0.1:$TLS_PORT/bench" "$A_PID"); label="(g) ours, https keep-alive" ;;
    esac
    read -r rps p50 p99 cpu rss upstream idle steal user <<<"$line"
    printf '%-30s %10s %9s %9s %11s %6s %10s %10s %6s %6s   (round %s) %s\n' "$label" "$rps" "$p50" "$p99" "$cpu" "$user" "$rss" "$upstream" "$idle" "$steal" "$round" "$note"
    CPU[$scenario]=$(awk -v a="${CPU[$scenario]:-0}" -v b="$cpu" 'BEGIN{print a + b}')
    USER[$scenario]=$(awk -v a="${USER[$scenario]:-0}" -v b="$user" 'BEGIN{print a + b}')
    ROUND_CPU[$scenario,$round]=$cpu; ROUND_RPS[$scenario,$round]=$rps; ROUND_STEAL[$scenario,$round]=$steal
    RPS[$scenario]=$(awk -v a="${RPS[$scenario]:-0}" -v b="$rps" 'BEGIN{print a + b}')
  done
done
if [ "$ROUNDS" -gt 0 ]; then
# What the ratios compare: a label, our scenario, nginx's.
COMPARISONS=("(a) proxy only|a|nginx" "(b) edge layer|b|nginx" "(c) edge + 2 limits|c|nginx"
  "(s) (c) with 1 settled|s|nginx" "(s) settled vs (c) (target ≤ 1.05)|s|c"
  "(d) 2 Redis limits vs nginx (a)|d|nginx" "(h) 2 approximate Redis limits vs nginx (a)|h|nginx" "(e) flood vs nginx flood|e|nginx-flood" "(g) https keep-alive|g|nginx-tls")
# section HEADING FN: FN LABEL OURS THEIRS for each comparison, under HEADING; nothing at all
# when no comparison had both its scenarios run (e.g. SCENARIOS="c floor").
section() {
  local lines="" comparison label ours theirs line
  for comparison in "${COMPARISONS[@]}"; do
    IFS='|' read -r label ours theirs <<<"$comparison"
    line=$("$2" "$label" "$ours" "$theirs")
    [ -z "$line" ] || lines+="$line"$'\n'
  done
  [ -z "$lines" ] || printf '\n%s\n%s' "$1" "$lines"
}
# Also the median of the rounds' own ratios (each round's pair ran back to back): one
# disturbed run moves a sum by a fifth on this shared machine, the median by a round.
# And over the quiet rounds alone: those whose two runs each had at most QUIET_STEAL µs of
# steal a request. Another guest on the host moved nginx's own cost by half between rounds
# of one run; a round it disturbed says little about either proxy.
ratio() { # LABEL OURS THEIRS; nothing when either was not run
  [ -n "${CPU[$2]:-}" ] && [ -n "${CPU[$3]:-}" ] || return 0
  local cpu_ratios=() rps_ratios=() quiet=0 quiet_cpu=(0 0) quiet_rps=(0 0)
  for round in $(seq "$ROUNDS"); do
    cpu_ratios+=("$(awk -v a="${ROUND_CPU[$2,$round]}" -v b="${ROUND_CPU[$3,$round]}" 'BEGIN { print a / b }')")
    rps_ratios+=("$(awk -v a="${ROUND_RPS[$2,$round]}" -v b="${ROUND_RPS[$3,$round]}" 'BEGIN { print a / b }')")
    if awk -v a="${ROUND_STEAL[$2,$round]}" -v b="${ROUND_STEAL[$3,$round]}" -v q="$QUIET_STEAL" 'BEGIN { exit !(a <= q && b <= q) }'; then
      quiet=$((quiet + 1))
      quiet_cpu=("$(awk -v a="${quiet_cpu[0]}" -v b="${ROUND_CPU[$2,$round]}" 'BEGIN { print a + b }')"
        "$(awk -v a="${quiet_cpu[1]}" -v b="${ROUND_CPU[$3,$round]}" 'BEGIN { print a + b }')")
      quiet_rps=("$(awk -v a="${quiet_rps[0]}" -v b="${ROUND_RPS[$2,$round]}" 'BEGIN { print a + b }')"
        "$(awk -v a="${quiet_rps[1]}" -v b="${ROUND_RPS[$3,$round]}" 'BEGIN { print a + b }')")
    fi
  done
  awk -v s="$1" -v oc="${CPU[$2]}" -v nc="${CPU[$3]}" -v orps="${RPS[$2]}" -v nrps="${RPS[$3]}" \
    -v mc="$(median "${cpu_ratios[@]}")" -v mr="$(median "${rps_ratios[@]}")" \
    -v quiet="$quiet" -v rounds="$ROUNDS" -v qoc="${quiet_cpu[0]}" -v qnc="${quiet_cpu[1]}" -v qor="${quiet_rps[0]}" -v qnr="${quiet_rps[1]}" \
    'BEGIN {
      printf "%-34s CPU µs/req %.2f×   req/s %.2f×   (median round: %.2f×, %.2f×)", s, oc / nc, orps / nrps, mc, mr
      if (quiet > 0) printf "   quiet rounds (%d of %d): %.2f×, %.2f×\n", quiet, rounds, qoc / qnc, qor / qnr
      else printf "   quiet rounds: none of %d\n", rounds
    }'
}
section "ratios over all rounds (ours / nginx): CPU per request (lower is better), req/s (higher is better)" ratio
# Where a difference lies: the user-space part of CPU per request (what the code does) and the
# kernel's (system calls and the loopback network stack, which cost nginx about the same).
user_kernel() { # LABEL OURS THEIRS; nothing when either was not run
  [ -n "${CPU[$2]:-}" ] && [ -n "${CPU[$3]:-}" ] || return 0
  awk -v s="$1" -v oc="${CPU[$2]}" -v nc="${CPU[$3]}" -v ou="${USER[$2]}" -v nu="${USER[$3]}" -v r="$ROUNDS" '
    function times(a, b) { return b > 0 ? sprintf("%.2f×", a / b) : "n/a" }
    BEGIN {
      printf "%-34s user %5.1f vs %5.1f (%s)   kernel %5.1f vs %5.1f (%s)\n", s, ou / r, nu / r, times(ou, nu),
        (oc - ou) / r, (nc - nu) / r, times(oc - ou, nc - nu) }'
}
section "user-space and kernel CPU µs per request over all rounds: ours vs nginx (ours / nginx)" user_kernel
# A denied request's cost: the flood mixes 10% allowed (each like (c)) and 90% denied.
if [ -n "${CPU[e]:-}" ] && [ -n "${CPU[c]:-}" ]; then
  awk -v e="${CPU[e]}" -v c="${CPU[c]}" -v rounds="$ROUNDS" 'BEGIN {
    denied = (e - 0.1 * c) / 0.9
    printf "(e) a denied request costs ~%.1f µs of CPU, %.2f× an allowed one of (c) (target ≤ 0.33)\n", denied / rounds, denied / c }'
fi
# The least any answer costs here: one read and one write of a constant, with no parse worth
# the name and no limiter. Its kernel part is what a denial cannot go under on this machine.
if [ -n "${CPU[floor]:-}" ] && [ -n "${CPU[c]:-}" ]; then
  awk -v f="${CPU[floor]}" -v fu="${USER[floor]}" -v c="${CPU[c]}" -v rounds="$ROUNDS" 'BEGIN {
    printf "floor: nginx return 429 costs ~%.1f µs (user %.1f, kernel %.1f), %.2f× an allowed one of (c); its kernel part alone %.2f×\n",
      f / rounds, fu / rounds, (f - fu) / rounds, f / c, (f - fu) / c }'
fi
fi

[ "$F_ROUNDS" -gt 0 ] || exit 0
# (f) latency at a fixed rate: half of nginx's peak, the same for everyone, oha -q.
if [ -z "${RATE:-}" ]; then
  [ -n "${RPS[nginx]:-}" ] || { echo "(f) runs at half nginx's peak: give SCENARIOS nginx, or RATE" >&2; exit 1; }
  RATE=$(awk -v r="${RPS[nginx]}" -v n="$ROUNDS" 'BEGIN { printf "%d", r / n / 2 }')
fi
# Also at a moderate rate every proxy here sustains, where added latency is not queueing.
# F_ROUNDS alternating rounds: each round runs direct-to-upstream, then every target; a
# target's added p99 is its p99 less that round's direct p99, and the median over rounds is
# printed. One sample's p99 moved by milliseconds with what else ran on this shared machine.
# The control is the upstream itself: whatever added p99 it shows, no proxy added.
F_TARGETS=("control: no proxy|$UPSTREAM_PORT" "nginx limit_req|$NGINX_PORT" "(a) proxy only|$A_PORT" "(b) edge layer|$B_PORT"
  "(c) edge + 2 limits|$C_PORT" "(d) 2 Redis limits|$D_PORT")
# oha_rounds RATE: (f) with oha, one target after another.
oha_rounds() {
  local rate=$1
  echo
  echo "(f) p50/p99 at a fixed $rate req/s, oha -c$CONNS -z$DURATION (latency-corrected), $F_ROUNDS alternating rounds: medians; added = median of (p99 − the round's direct p99), then each round's"
  declare -A F50=() F99=() FADDED=()
  for _ in $(seq "$F_ROUNDS"); do
    read -r _ _ direct50 direct99 < <(oha_at_rate "$rate" "$DURATION" "$CONNS" "http://127.0.0.1:$UPSTREAM_PORT/bench")
    F50[direct]+=" $direct50"; F99[direct]+=" $direct99"
    for target in "${F_TARGETS[@]}"; do
      read -r _ _ p50 p99 < <(oha_at_rate "$rate" "$DURATION" "$CONNS" "http://127.0.0.1:${target#*|}/bench")
      F50[${target%|*}]+=" $p50"; F99[${target%|*}]+=" $p99"
      FADDED[${target%|*}]+=" $(awk -v a="$p99" -v b="$direct99" 'BEGIN { printf "%.3f", a - b }')"
    done
  done
  # shellcheck disable=SC2086 # the lists split into their numbers
  printf '%-30s %9.3f ms %9.3f ms\n' "direct to upstream" "$(median ${F50[direct]})" "$(median ${F99[direct]})"
  for target in "${F_TARGETS[@]}"; do
    name=${target%|*}
    # shellcheck disable=SC2086
    printf '%-30s %9.3f ms %9.3f ms   added p99 %.3f ms (%s)\n' "$name" "$(median ${F50[$name]})" \
      "$(median ${F99[$name]})" "$(median ${FADDED[$name]})" "$(echo ${FADDED[$name]} | sed 's/ / \/ /g')"
  done
}

# paired_rounds RATE: (f) with the paired probe: each target's run also sends one request in
# PROBE_DIRECT_EVERY straight to the upstream at the same instants, so the direct p99 it is
# measured against shares the run's stalls (examples/paired_latency). "paired" is the p50 and
# p99 of the pairs' own differences, where a stall that delayed both requests of a pair
# cancels. Each run's steal (µs a request) is printed after its added p99; "quiet" takes the
# median over the runs with at most QUIET_STEAL, where the hypervisor did not take the cores
# away mid-run.
paired_rounds() {
  local rate=$1 requests hz; hz=$(getconf CLK_TCK)
  # Every request the probe sends, its warm-up and the direct ones included.
  requests=$(( rate * ($(seconds "$DURATION") + PROBE_WARMUP_SECONDS) * (PROBE_DIRECT_EVERY + 1) / PROBE_DIRECT_EVERY ))
  echo
  echo "(f) paired: p50/p99 at a fixed $rate req/s over $CONNS connections for $DURATION, 1 in $PROBE_DIRECT_EVERY also direct, $F_ROUNDS alternating rounds: medians; added p99 = median of (p99 − the run's direct p99), then each run's with its steal, µs a request"
  declare -A F50=() F99=() FADDED=() FRUNS=() FQUIET=() FPAIR50=() FPAIR99=()
  for _ in $(seq "$F_ROUNDS"); do
    for target in "${F_TARGETS[@]}"; do
      local name=${target%|*} p50 p99 added pair50 pair99 steal_before steal
      steal_before=$(steal_ticks)
      read -r p50 p99 _ added pair50 pair99 < <(paired_at_rate "$rate" "$DURATION" "$CONNS" \
        "http://127.0.0.1:${target#*|}/bench" "http://127.0.0.1:$UPSTREAM_PORT/bench")
      steal=$(awk -v t=$(( $(steal_ticks) - steal_before )) -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }')
      F50[$name]+=" $p50"; F99[$name]+=" $p99"; FADDED[$name]+=" $added"
      FRUNS[$name]+=" / $added ($steal)"
      FPAIR50[$name]+=" $pair50"; FPAIR99[$name]+=" $pair99"
      if awk -v s="$steal" -v q="$QUIET_STEAL" 'BEGIN { exit !(s <= q) }'; then FQUIET[$name]+=" $added"; fi
    done
  done
  for target in "${F_TARGETS[@]}"; do
    name=${target%|*}
    local quiet="quiet runs: none"
    # shellcheck disable=SC2086 # the lists split into their numbers
    [ -z "${FQUIET[$name]:-}" ] || quiet="quiet runs ($(echo ${FQUIET[$name]} | wc -w)): $(median ${FQUIET[$name]})"
    # shellcheck disable=SC2086
    printf '%-30s %9.3f ms %9.3f ms   added p99 %.3f ms (%s)   %s   paired p50 %.3f ms, p99 %.3f ms\n' "$name" \
      "$(median ${F50[$name]})" "$(median ${F99[$name]})" "$(median ${FADDED[$name]})" \
      "${FRUNS[$name]# / }" "$quiet" "$(median ${FPAIR50[$name]})" "$(median ${FPAIR99[$name]})"
  done
}

for rate in "$RATE" ${EXTRA_RATES-5000}; do
  for probe in $F_PROBES; do "${probe}_rounds" "$rate"; done
done
