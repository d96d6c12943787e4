#!/usr/bin/env bash
# Two builds of ratelimit-proxy back to back on one scenario: this tree's release build (A)
# and another binary (B), each a proxy of its own with the same config, loaded in turn with
# the same wrk run, ROUNDS times. On this shared machine a change of a few µs per request
# shows here when compare.sh, which runs each scenario once per round minutes apart, hides it.
#
#   benches/ab.sh /tmp/old-build/ratelimit-proxy d      # (d): two Redis limits (default)
#   ROUNDS=7 DURATION=5s benches/ab.sh /tmp/old a       # (a) proxy only; c: 2 memory limits
#   BIN=target/pgo/ratelimit-proxy benches/ab.sh target/release/ratelimit-proxy c
#                                                       # A is BIN instead of this tree's build
#
# Prints, per round, each build's req/s and CPU µs per request (utime+stime from /proc; and
# utime alone, the user-space part), then the medians. Build B with e.g. `git worktree add
# /tmp/old <commit> && cd /tmp/old && cargo build --release`.
#
#   RATE=5000 benches/ab.sh /tmp/old d   # oha at a fixed 5000 req/s instead of wrk's saturating
#                                         # load: also p50 and p99 (ms, latency-corrected), and
#                                         # for (d) redis-server's CPU per request
set -euo pipefail
cd "$(dirname "$0")/.."
OTHER=${1:?usage: benches/ab.sh OTHER_BINARY [a|c|d]}
SCENARIO=${2:-d}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8s}
CONNS=${CONNS:-50}
WORKERS=${WORKERS:-1}
RATE=${RATE:-}
[ -x "$OTHER" ] || { echo "$OTHER is not an executable" >&2; exit 1; }

source benches/common.sh
ensure_tools wrk
[ -z "$RATE" ] || ensure_oha

UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 & PIDS+=($!)
# As compare.sh's (a), (c) and (d): (c) and (d) with the edge layer on.
case $SCENARIO in
  a|c|d) scenario_config "$SCENARIO"; STORE=$SCENARIO_TABLES; ROUTE=$SCENARIO_ROUTE ;;
  *) echo "unknown scenario $SCENARIO: expected a, c or d" >&2; exit 1 ;;
esac

# start NAME BINARY: a proxy with the scenario's config; sets PORT and PID.
start() {
  PORT=$(free_port)
  proxy_toml "$PORT" "$STORE" "$ROUTE" > "$WORK/$1.toml"
  # In a session of its own, as compare.sh starts ours (own_session in common.sh).
  RUST_LOG=warn setsid "$2" --config "$WORK/$1.toml" >"$WORK/$1.log" 2>&1 &
  PID=$!; PIDS+=($PID)
  wait_port "$PORT"
  own_session "$PID"
}
start A "$BIN"; A_PORT=$PORT; A_PID=$PID
start B "$OTHER"; B_PORT=$PORT; B_PID=$PID

# measure PORT PID: "req/s cpu_us p50_ms p99_ms redis_us user_us" of one run after a 2 s warm-up:
# wrk's saturating load, or with RATE oha at that rate (latencies and redis_us "-" when not
# measured); user_us is the user-space part of cpu_us.
measure() {
  local url="http://127.0.0.1:$1/bench"
  wrk -t1 -c"$CONNS" -d2s -H "x-api-key: bench" "$url" >/dev/null
  local before; before=$(cpu_ticks "$2")
  local user_before; user_before=$(user_ticks "$2")
  local redis_before=0; [ "$SCENARIO" = d ] && redis_before=$(cpu_ticks "$REDIS_PID")
  if [ -z "$RATE" ]; then
    wrk -t1 -c"$CONNS" -d"$DURATION" -H "x-api-key: bench" "$url" >"$WORK/run.txt"
    awk '/requests in/ {print $1} /Requests\/sec/ {print $2} END {print "- -"}' "$WORK/run.txt" | tr '\n' ' ' >"$WORK/run.fields"
  else
    oha_at_rate "$RATE" "$DURATION" "$CONNS" "$url" >"$WORK/run.fields"
  fi
  local after; after=$(cpu_ticks "$2")
  local user_after; user_after=$(user_ticks "$2")
  local redis_ticks=-1; [ "$SCENARIO" = d ] && redis_ticks=$(( $(cpu_ticks "$REDIS_PID") - redis_before ))
  awk -v t=$((after - before)) -v u=$((user_after - user_before)) -v r="$redis_ticks" -v hz="$(getconf CLK_TCK)" '
    { n = $1; rps = $2; p50 = $3; p99 = $4 }
    END { if (n == 0) exit 1
          printf "%.0f %.1f %s %s %s %.1f\n", rps, t / hz * 1e6 / n, p50, p99, (r < 0) ? "-" : sprintf("%.1f", r / hz * 1e6 / n), u / hz * 1e6 / n }' "$WORK/run.fields"
}

if [ -z "$RATE" ]; then
  echo "scenario ($SCENARIO), wrk -t1 -c$CONNS -d$DURATION, $ROUNDS rounds, workers = $WORKERS"
else
  echo "scenario ($SCENARIO), oha -q$RATE -c$CONNS -z$DURATION (latency-corrected), $ROUNDS rounds, workers = $WORKERS"
fi
echo "A = $BIN, B = $OTHER"
echo "columns: req/s, proxy CPU µs/req, its user-space part, p50 ms, p99 ms, redis-server CPU µs/req"
A_CPU=(); B_CPU=(); A_USER=(); B_USER=(); A_P99=(); B_P99=()
for round in $(seq "$ROUNDS"); do
  read -r b_rps b_cpu b_p50 b_p99 b_redis b_user < <(measure "$B_PORT" "$B_PID")
  read -r a_rps a_cpu a_p50 a_p99 a_redis a_user < <(measure "$A_PORT" "$A_PID")
  printf 'round %d: A %6s %6s %5s %6s %6s %6s   B %6s %6s %5s %6s %6s %6s\n' "$round" \
    "$a_rps" "$a_cpu" "$a_user" "$a_p50" "$a_p99" "$a_redis" "$b_rps" "$b_cpu" "$b_user" "$b_p50" "$b_p99" "$b_redis"
  A_CPU+=("$a_cpu"); B_CPU+=("$b_cpu"); A_USER+=("$a_user"); B_USER+=("$b_user"); A_P99+=("$a_p99"); B_P99+=("$b_p99")
done
# medians LABEL A B: A's and B's medians (each a space-separated list) and their ratio.
medians() {
  local a b; a=$(median $2); b=$(median $3)  # unquoted: the lists split into their numbers
  echo "median $1: A $a, B $b (A/B $(awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'))"
}
medians "CPU µs/req" "${A_CPU[*]}" "${B_CPU[*]}"
medians "user-space CPU µs/req" "${A_USER[*]}" "${B_USER[*]}"
if [ -n "$RATE" ]; then
  echo "median p99 ms: A $(median "${A_P99[@]}"), B $(median "${B_P99[@]}")"
fi
