#!/usr/bin/env bash
# What clients see while the gateway's Redis fails, for each on_error, and how long until
# limits are exact again (docs/design/failure-modes.md). A gateway in front of the echo upstream
# with three routes whose limits say allow, deny and local (fallback_instances = 2), each
# loaded at RATE requests/s, and each fault in turn for FAULT_S seconds:
#   kill    redis-server killed (SIGKILL), started again on its port FAULT_S later
#   stop    SIGSTOP, then SIGCONT (a hung host)
#   pause   CLIENT PAUSE ... ALL
#   sleep   DEBUG SLEEP
# Per fault and route it prints the answers during the fault by status, the slowest answer
# from the fault's start on, and how long after the fault ended the first answer decided by
# Redis came (its RateLimit-Policy has the whole limit, not the local share).
#
#   benches/faults.sh                  # this tree's debug build: the times measured are the
#                                      # store's timeout and breaker, not CPU
#   BIN=target/release/ratelimit-proxy TIMEOUT=20ms FAULTS="stop kill" benches/faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
RATE=${RATE:-100}
FAULT_S=${FAULT_S:-3}
FAULTS=${FAULTS:-kill stop pause sleep}
TIMEOUT=${TIMEOUT:-}
if [ -z "${BIN:-}" ]; then
  cargo build --quiet
  BIN=target/debug/ratelimit-proxy
fi
source benches/common.sh
ensure_tools redis-server redis-cli:redis-tools
# Started (and started again after `kill`) by the load below, which stops it at the end.
REDIS_PORT=$(free_port)
UPSTREAM_PORT=$(free_port)
"$BIN" echo --listen "127.0.0.1:$UPSTREAM_PORT" >/dev/null 2>&1 &
PIDS+=($!)
wait_port "$UPSTREAM_PORT"
PORT=$(free_port)
TIMEOUT_LINE=${TIMEOUT:+timeout = \"$TIMEOUT\"}
{
  printf '[server]\nlisten = ["127.0.0.1:%s"]\n' "$PORT"
  printf '[store]\nbackend = "redis"\nurl = "redis://127.0.0.1:%s/0"\nfallback_instances = 2\n%s\n' "$REDIS_PORT" "$TIMEOUT_LINE"
  printf '[[upstreams]]\nname = "echo"\nservers = ["http://127.0.0.1:%s"]\n' "$UPSTREAM_PORT"
  for mode in allow deny local; do
    printf '[[routes]]\nname = "%s"\npath_prefix = "/%s"\nupstream = "echo"\nlimits = ["%s"]\n' "$mode" "$mode" "$mode"
    printf '[[limits]]\nname = "%s"\nkey = ["header:x-api-key"]\nrates = [{ limit = 1000000, per = "1h" }]\non_error = "%s"\n' "$mode" "$mode"
  done
} > "$WORK/gw.toml"
"$BIN" --config "$WORK/gw.toml" 2>"$WORK/gateway.log" &
PIDS+=($!)
wait_port "$PORT"
python3 - "$PORT" "$REDIS_PORT" "$RATE" "$FAULT_S" "$WORK" $FAULTS <<'PY'
import http.client, subprocess, sys, threading, time
port, redis_port, rate, fault_s, work = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]),
                                         float(sys.argv[4]), sys.argv[5])
faults = sys.argv[6:]
routes = ["allow", "deny", "local"]
whole = "q=1000000"
answers = {route: [] for route in routes}  # (sent, took, status, decided by redis)
stop = threading.Event()

def load(route, lane, lanes):
    connection = None
    pause = lanes / rate
    n = 0
    while not stop.is_set():
        sent = time.monotonic()
        try:
            if connection is None:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            connection.request("GET", "/%s" % route, headers={"x-api-key": "k%d" % lane})
            response = connection.getresponse()
            response.read()
            policy = response.getheader("ratelimit-policy") or ""
            answers[route].append((sent, time.monotonic() - sent, response.status, whole in policy))
        except (OSError, http.client.HTTPException):
            connection = None
            answers[route].append((sent, time.monotonic() - sent, 0, False))
        n += 1
        time.sleep(max(0.0, sent + pause - time.monotonic()))

def redis_cli(*args):
    return subprocess.run(["redis-cli", "-p", str(redis_port)] + list(args), capture_output=True)

def redis_pid():
    out = redis_cli("INFO", "server").stdout.decode()
    return int(next(l for l in out.splitlines() if l.startswith("process_id:")).split(":")[1])

def start_redis():
    subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--enable-debug-command", "local"],
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        if redis_cli("PING").stdout.strip() == b"PONG":
            return
        time.sleep(0.02)
    sys.exit("redis-server did not come back")

def fault(name):
    """Starts the fault; returns what ends it."""
    if name == "kill":
        pid = redis_pid()
        subprocess.run(["kill", "-KILL", str(pid)])
        return start_redis
    if name == "stop":
        pid = redis_pid()
        subprocess.run(["kill", "-STOP", str(pid)])
        return lambda: subprocess.run(["kill", "-CONT", str(pid)])
    if name == "pause":
        redis_cli("CLIENT", "PAUSE", str(int(fault_s * 1000)), "ALL")
        return lambda: None
    if name == "sleep":
        subprocess.Popen(["redis-cli", "-p", str(redis_port), "DEBUG", "SLEEP", str(fault_s)],
                         stdout=subprocess.DEVNULL)
        return lambda: None
    sys.exit("unknown fault %s" % name)

start_redis()
lanes = 4
threads = [threading.Thread(target=load, args=(r, l, lanes), daemon=True)
           for r in routes for l in range(lanes)]
for t in threads:
    t.start()
time.sleep(2)
print("%-6s %-6s %-34s %12s %14s" % ("fault", "route", "answers during the fault", "slowest", "exact again"))
for name in faults:
    start = time.monotonic()
    end_fault = fault(name)
    time.sleep(fault_s)
    end_fault()
    ended = time.monotonic()
    time.sleep(4)
    for route in routes:
        seen = [a for a in answers[route] if a[0] >= start]
        during = [a for a in seen if a[0] < ended]
        counts = {}
        for a in during:
            counts[a[2]] = counts.get(a[2], 0) + 1
        decided = [a for a in seen if a[0] >= ended and a[3]]
        back = "%.2f s" % (decided[0][0] + decided[0][1] - ended) if decided else "never"
        slowest = max((a[1] for a in seen), default=0) * 1000
        text = " ".join("%s:%d" % (code or "failed", n) for code, n in sorted(counts.items()))
        print("%-6s %-6s %-34s %9.0f ms %14s" % (name, route, text, slowest, back))
    time.sleep(1)
stop.set()
redis_cli("SHUTDOWN", "NOSAVE")
PY
