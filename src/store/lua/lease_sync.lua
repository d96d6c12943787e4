-- The lease sync of approximate limits (src/store/lease_sync.rs): one call per gateway every
-- sync interval, for every identity it touched. It works on the window keys the exact script
-- writes (same layout and encodings as fixed_window.lua and sliding_window.lua), so exact and
-- approximate calls of one limit share one count. For each identity's window it subtracts
-- what the gateway gives back (from the window the lease was granted in, if that window's
-- count still exists), then leases it a share of what is left, adding the lease to the count:
--   share = ceil((remaining + keep) / instances), granted = min(max(share - keep, 0), remaining)
-- `keep` being the unused lease the gateway kept (it is in the count already), `remaining`
-- the limit minus the count (sliding_window: minus the weighted estimate), never below 0. So
-- the count never exceeds the limit because of a lease.
--
-- It also records the gateway as live: ZADD of its id at now in the instances' set, entries
-- older than ARGV[3] µs removed; `instances` is what is left (at least 1). On a cluster only
-- the node holding that set does so (ARGV[2] set); the others are told the count (ARGV[5]).
--
-- The keys, K: KEYS followed by ARGV[6..]. On one node every key is in KEYS. On a cluster
-- (Redis >= 7.0) the call is EVALSHA of this text behind `#!lua flags=allow-cross-slot-keys`
-- with no KEYS and every key in ARGV[6..]: all of them on the node called, in any of its
-- slots (declared keys of several slots are refused with CROSSSLOT even with that flag; a key
-- the node does not hold fails the whole call before it writes, since every key is read first).
-- K[1]: the instances' sorted set when ARGV[2] is not '', then the identity keys, each once.
-- ARGV[1]: now in µs, or '' for the server's TIME. ARGV[2]: the gateway's instance id, or ''
-- (another node holds the set). ARGV[3]: how long an instance counts as live (µs). ARGV[4]:
-- nine little-endian doubles per identity window: algorithm (3 sliding_window, 4
-- fixed_window), key (index in K), slot, limit, per (µs), window (index the lease was granted
-- in), give, keep, want (0/1). ARGV[5]: the instances to share among when ARGV[2] is ''.
-- Reply: two doubles (now µs, instances), then four per identity window: granted, window
-- index, previous count, current count (after the grant).
if redis.replicate_commands then
  redis.replicate_commands()
end

local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end
local live_for = tonumber(ARGV[3])
local entries = ARGV[4] or ''
local NUMBERS = 9
local ENTRY_BYTES = 8 * NUMBERS
if #entries % ENTRY_BYTES ~= 0 then
  return redis.error_reply('ERR lease entries of ' .. #entries .. ' bytes, not a multiple of '
    .. ENTRY_BYTES)
end

local K = {}
for i = 1, #KEYS do
  K[#K + 1] = KEYS[i]
end
for i = 6, #ARGV do
  K[#K + 1] = ARGV[i]
end
local records = ARGV[2] ~= ''
local first_identity = records and 2 or 1

-- Each key's numbers (expiry and state per slot), all read before anything is written.
local slots, dirty = {}, {}
local floor = math.floor
for k = first_identity, #K do
  local numbers = {}
  local value = redis.call('GET', K[k])
  if value then
    for i = 1, floor(#value / 8) do
      numbers[i] = struct.unpack('<d', value, 8 * i - 7)
    end
  end
  slots[k] = numbers
end

local instances
if records then
  redis.call('ZADD', K[1], now, ARGV[2])
  redis.call('ZREMRANGEBYSCORE', K[1], '-inf', now - live_for)
  redis.call('PEXPIRE', K[1], math.max(math.ceil(live_for / 1000), 1))
  instances = math.max(redis.call('ZCARD', K[1]), 1)
else
  instances = math.max(tonumber(ARGV[5]) or 1, 1)
end

local SLIDING, FIXED = 3, 4
-- As fixed_window.lua and sliding_window.lua store them.
local FIXED_TAGS, FIXED_COUNTS = 2 ^ 20, 2 ^ 33
local SLIDING_TAGS, SLIDING_COUNTS = 2 ^ 7, 2 ^ 23


-- The previous and current counts of window `index` (fixed_window: 0 and the count).
local function counts(algorithm, state, index)
  if not state then
    return 0, 0
  end
  if algorithm == FIXED then
    if floor(state / FIXED_COUNTS) % FIXED_TAGS == index % FIXED_TAGS then
      return 0, state % FIXED_COUNTS
    end
    return 0, 0
  end
  local both = state % (SLIDING_COUNTS * SLIDING_COUNTS)
  local tag = floor(state / (SLIDING_COUNTS * SLIDING_COUNTS)) % SLIDING_TAGS
  if tag == index % SLIDING_TAGS then
    return floor(both / SLIDING_COUNTS), both % SLIDING_COUNTS
  elseif tag == (index - 1) % SLIDING_TAGS then
    return both % SLIDING_COUNTS, 0
  end
  return 0, 0
end

-- What is left of the limit at `elapsed` into window `index`; the state to store and its
-- lifetime (µs), as the exact scripts write them.
local function remaining_of(algorithm, prev, curr, limit, per, elapsed)
  if algorithm == FIXED then
    return math.max(limit - curr, 0)
  end
  return math.max(floor((limit * per - prev * (per - elapsed) - curr * per) / per), 0)
end

local function state_of(algorithm, prev, curr, index, per, elapsed)
  if algorithm == FIXED then
    return (index % FIXED_TAGS) * FIXED_COUNTS + curr, per - elapsed
  end
  return ((index % SLIDING_TAGS) * SLIDING_COUNTS + prev) * SLIDING_COUNTS + curr,
    2 * per - elapsed
end

local reply = { struct.pack('<dd', now, instances) }
for at = 1, #entries, ENTRY_BYTES do
  local algorithm, k, slot, limit, per, window, give, keep, want =
    struct.unpack('<ddddddddd', entries, at)
  if (algorithm ~= FIXED and algorithm ~= SLIDING) or not K[k] or k < first_identity then
    return redis.error_reply('ERR lease entry at byte ' .. at .. ' is malformed')
  end
  local index = floor(now / per)
  local elapsed = now - index * per
  local numbers = slots[k]
  local expires, state = numbers[2 * slot + 1], numbers[2 * slot + 2]
  if not expires or expires <= now or state ~= state then
    state = nil
  end
  local prev, curr = counts(algorithm, state, index)
  local changed = false
  if give > 0 and window == index then
    curr, changed = math.max(curr - give, 0), true
  elseif give > 0 and algorithm == SLIDING and window == index - 1 then
    prev, changed = math.max(prev - give, 0), true
  end
  local granted = 0
  if want == 1 then
    local remaining = remaining_of(algorithm, prev, curr, limit, per, elapsed)
    local held = 0
    if window == index then
      held = keep
    end
    local share = math.ceil((remaining + held) / instances)
    granted = math.min(math.max(share - held, 0), remaining)
    if granted > 0 then
      curr, changed = curr + granted, true
    end
  end
  if changed then
    local value, ttl = state_of(algorithm, prev, curr, index, per, elapsed)
    for i = #numbers + 1, 2 * slot do
      numbers[i] = 0
    end
    numbers[2 * slot + 1] = now + 1000 * math.max(math.ceil(ttl / 1000), 1)
    numbers[2 * slot + 2] = value
    dirty[k] = true
  end
  reply[#reply + 1] = struct.pack('<dddd', granted, index, prev, curr)
end

for k in pairs(dirty) do
  local numbers = slots[k]
  local longest = 1
  local packed = {}
  for i = 1, #numbers do
    packed[i] = struct.pack('<d', numbers[i])
    if i % 2 == 1 and numbers[i] - now > longest * 1000 then
      longest = math.ceil((numbers[i] - now) / 1000)
    end
  end
  redis.call('SET', K[k], table.concat(packed), 'PX', longest)
end
return table.concat(reply)
