#!/usr/bin/env bash
# redis-server's time per call of the gateway's Lua script (INFO commandstats usec_per_call),
# with the windows of compare.sh's (c)/(d): two limits of two windows each, every call allowed
# and committed. Starts a redis-server of its own; min of ROUNDS runs of N pipelined calls.
#
#   benches/script.sh                      # the script in src/store/lua, as the gateway loads it
#   SCRIPT=/tmp/variant.lua benches/script.sh   # another version, e.g. one cut short to time a step
#   MERGED=20 benches/script.sh            # each call carries 20 requests of the same two
#                                          # identities, as the gateway merges a hot key's
#                                          # requests (µs per request = per call / MERGED)
#   MERGED=20 DISTINCT=1 benches/script.sh # the same with two identities of its own per request
#   ALGORITHM=sliding_log MERGED=20 benches/script.sh   # one sliding_log window of LIMIT
#                                          # (default 100) per minute instead: a log fills at
#                                          # LIMIT admissions, and then every request is denied
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-15000}
ROUNDS=${ROUNDS:-3}
MERGED=${MERGED:-1}
DISTINCT=${DISTINCT:-0}
ALGORITHM=${ALGORITHM:-cells}
LIMIT=${LIMIT:-100}
NO_GATEWAY=1
source benches/common.sh
ensure_tools redis-server
start_redis
if [ -z "${SCRIPT:-}" ]; then
  # The parts in the order `SCRIPT` includes them (src/store/script.rs).
  SCRIPT=$WORK/script.lua
  for part in $(grep -o 'lua/[a-z_]*\.lua' src/store/script.rs); do
    cat "src/store/$part"
  done > "$SCRIPT"
fi
for _ in $(seq "$ROUNDS"); do
  python3 - "$REDIS_PORT" "$SCRIPT" "$N" "$MERGED" "$DISTINCT" "$ALGORITHM" "$LIMIT" <<'PY'
import re, socket, struct, sys
port, path, n, merged, distinct = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]),
                                   int(sys.argv[4]), sys.argv[5] == "1")
algorithm, limit = sys.argv[6], int(sys.argv[7])
s = socket.create_connection(("127.0.0.1", port))
def command(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out
pending = b""
def reply():  # one status, error, integer or bulk reply (all this script and INFO answer)
    global pending
    while True:
        if pending[:1] in (b"+", b"-", b":") and b"\r\n" in pending:
            line, pending = pending.split(b"\r\n", 1)
            return line
        if pending[:1] == b"$" and b"\r\n" in pending:
            head, rest = pending.split(b"\r\n", 1)
            size = int(head[1:])
            if len(rest) >= size + 2:
                pending = rest[size + 2:]
                return rest[:size]
        pending += s.recv(65536)
def call(*args):
    s.sendall(command(*args))
    return reply()
sha = call("SCRIPT", "LOAD", open(path).read()).decode()
# Per window: algorithm, group, shadow, limit, per (µs), interval (µs), burst, cost, max_delay,
# key (in KEYS, from 1), slot (the window's place in its key).
windows = [(1, 0, 0, 10_000_000, 60e6, 6, 10_000_000, 1, 0, 1, 0),
           (1, 0, 0, 1_000_000_000, 86400e6, 86.4, 1_000_000_000, 1, 0, 1, 1),
           (3, 1, 0, 1_000_000, 60e6, 60, 1_000_000, 1, 0, 2, 0),
           (3, 1, 0, 2_000_000, 3600e6, 1800, 2_000_000, 1, 0, 2, 1)]
keys = ["rl:per-key:{cG1WZePM2WzGBpqJX6QAHA}", "rl:per-ip:{iPSj_s-zlTgy2-1l7ei1lw}"]
if algorithm == "sliding_log":  # one window, a sorted set of its own
    windows = [(5, 0, 0, limit, 60e6, 60e6 / limit, limit, 1, 0, 1, 0)]
    keys = ["rl:log:{cG1WZePM2WzGBpqJX6QAHA}:0"]
elif algorithm != "cells":
    sys.exit("ALGORITHM is cells or sliding_log")
if distinct:  # each request its own two keys: a window's key index moves on by two a request
    parameters = b"".join(struct.pack("<11d", *w[:9], w[9] + len(keys) * r, w[10])
                          for r in range(merged) for w in windows)
    keys = [k.replace("}", "%d}" % r) for r in range(merged) for k in keys]
else:
    parameters = b"".join(struct.pack("<11d", *w) for w in windows) * merged
counts = struct.pack("<d", len(windows)) * merged
one = command("EVALSHA", sha, str(len(keys)), *keys, "", parameters, counts)
first = call("EVALSHA", sha, str(len(keys)), *keys, "", parameters, counts)
if first.startswith(b"-"):
    sys.exit("the script failed: %s" % first.decode(errors="replace"))
call("CONFIG", "RESETSTAT")
done = 0
while done < n:
    batch = min(20, n - done)
    s.sendall(one * batch)
    for _ in range(batch):
        reply()
    done += batch
stats = call("INFO", "commandstats").decode()
print(re.search(r"cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)", stats).group(1))
PY
done | sort -n | head -1 | awk -v n="$N" -v m="$MERGED" -v s="$(basename "$SCRIPT")" -v a="$ALGORITHM" '{ printf "%s µs of redis-server time per script call of %d request(s), %.1f µs per request (%s, %s, min of runs of %d calls)\n", $1, m, $1 / m, s, a, n }'
