-- Settling a reservation (src/limit/settle.rs, mirrored function for function): every window
-- of the call adjusted by one amount, a debt (charged now, into the current window, with no
-- check: the window may go over its limit) or a refund (given back only where the reservation
-- still counts), on the keys and in the encodings the check script writes (common.lua and each
-- algorithm's file). Everything is checked before anything is written: a malformed call
-- changes nothing.
--
-- KEYS: as check.lua's, each once. ARGV[1]: now in µs, or '' for the server's TIME. ARGV[2]:
-- 'debt' or 'refund'. ARGV[3]: the units, a whole number. ARGV[4]: how long this call may wait
-- between being written and running (µs): the reservation's earliest time is that much
-- earlier again. ARGV[5]: eleven little-endian doubles per window, as check.lua's (group,
-- shadow, cost and max_delay unused). ARGV[6]: three little-endian doubles per window: how
-- long before this call was written the reservation's check was sent, and its reply came
-- (µs), and the window's reset right after the reservation (µs). The reservation was made
-- between now - since_sent - ARGV[4] and now - since_reply, in Redis' time.
-- Reply: a little-endian double per window, 1 when it was adjusted, 0 when not (a refund
-- where the reservation no longer counts, a log already holding all it may).
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

-- A whole number in [0, 2^53), or nil.
local function whole(n)
  if type(n) == 'number' and n >= 0 and n < 2 ^ 53 and n % 1 == 0 then
    return n
  end
  return nil
end

local kind, units, widen = ARGV[2], whole(tonumber(ARGV[3] or '')), whole(tonumber(ARGV[4] or ''))
if kind ~= 'debt' and kind ~= 'refund' then
  return redis.error_reply('ERR adjustment ' .. tostring(kind) .. ', not debt or refund')
end
if not whole(now) or not units or not widen then
  return redis.error_reply('ERR now, units and wait must be whole numbers below 2^53')
end
local debt = kind == 'debt'

local parameters, reservations = ARGV[5] or '', ARGV[6] or ''
local WINDOW_BYTES, RESERVATION_BYTES = 8 * WINDOW_NUMBERS, 8 * 3
if #parameters % WINDOW_BYTES ~= 0 then
  return redis.error_reply('ERR window parameters of ' .. #parameters
    .. ' bytes, not a multiple of ' .. WINDOW_BYTES)
end
local windows = #parameters / WINDOW_BYTES
if #reservations ~= RESERVATION_BYTES * windows then
  return redis.error_reply('ERR reservations of ' .. #reservations .. ' bytes for '
    .. windows .. ' windows')
end
if windows == 0 then
  return ''
end

-- p: every window's numbers in a row, as check.lua's; a window at a time (a settle is rarer
-- than a check, and this holds no more than eleven values on Lua's C stack at once).
local p, earliest, latest, resets = {}, {}, {}, {}
local SLIDING_LOG, MAX_SLOTS = 5, 256
for i = 1, windows do
  local numbers = { struct.unpack('<' .. string.rep('d', WINDOW_NUMBERS), parameters,
    WINDOW_BYTES * (i - 1) + 1) }
  for k = 1, WINDOW_NUMBERS do
    p[#p + 1] = numbers[k]
  end
  local at = WINDOW_NUMBERS * (i - 1)
  local algorithm, key, slot = p[at + ALGORITHM], p[at + KEY], p[at + SLOT]
  if algorithm < 1 or algorithm > SLIDING_LOG or algorithm % 1 ~= 0 then
    return redis.error_reply('ERR unknown algorithm ' .. algorithm .. ' in window ' .. i)
  end
  if not KEYS[key] then
    return redis.error_reply('ERR window ' .. i .. ' names key ' .. key .. ' of ' .. #KEYS)
  end
  if not whole(slot) or slot >= MAX_SLOTS then
    return redis.error_reply('ERR window ' .. i .. ' has slot ' .. slot)
  end
  if not whole(p[at + LIMIT]) or not whole(p[at + BURST]) or not whole(p[at + PER])
    or not whole(p[at + INTERVAL]) or p[at + PER] < 1 or p[at + INTERVAL] < 1 then
    return redis.error_reply('ERR window ' .. i .. ' has a malformed rate')
  end
  local since_sent, since_reply, reset =
    struct.unpack('<ddd', reservations, RESERVATION_BYTES * (i - 1) + 1)
  if not whole(since_sent) or not whole(since_reply) or not whole(reset) then
    return redis.error_reply('ERR window ' .. i .. ' has a malformed reservation')
  end
  if since_reply > since_sent then
    return redis.error_reply('ERR window ' .. i .. ': its reservation was answered before it was sent')
  end
  earliest[i] = math.max(now - since_sent - widen, 0)
  latest[i] = math.max(now - since_reply, 0)
  resets[i] = reset
end

-- As fixed_window.lua and sliding_window.lua store them; the largest counts the Rust stores
-- keep too (FIXED_COUNT_MAX, SLIDING_COUNT_MAX in settle.rs).
local FIXED_TAGS, FIXED_COUNTS = 2 ^ 20, 2 ^ 33
local SLIDING_TAGS, SLIDING_COUNTS = 2 ^ 7, 2 ^ 23
-- A debt makes a bucket wait at most this long (µs, about 35 years): the checks' answers
-- (retry_after in µs) must stay below 2^53, or the gateway would read them as malformed.
local LONGEST_DEBT = 2 ^ 50
-- A sliding log holds at most this many times its limit (LOG_DEBT_LIMITS in settle.rs).
local LOG_DEBT_LIMITS = 2

-- The calendar window (index of `per`) window i's reservation was made in, if certain.
local function reserved_window(i, per)
  local index = floor(earliest[i] / per)
  if floor(latest[i] / per) == index then
    return index
  end
  return nil
end

-- Whether a bucket still holds window i's reservation: it has not refilled it yet.
local function bucket_holds(i)
  return now < earliest[i] + resets[i]
end

-- Each returns the window's new state and how long it is kept (µs), or nil when the window
-- does not change. `state` is nil when the window has none (never written, or expired).

-- token_bucket: stored as the time the bucket is full again (token_bucket.lua).
local function settle_token_bucket(full_at, i, at)
  local interval = p[at + INTERVAL]
  local capacity = interval * p[at + BURST]
  local credit = capacity
  if full_at then
    credit = capacity - math.max(full_at - now, 0)
  end
  if debt then
    credit = math.max(credit - interval * units, capacity - LONGEST_DEBT)
  elseif full_at and bucket_holds(i) then
    credit = math.min(credit + interval * units, capacity)
  else
    return nil
  end
  local reset = capacity - credit
  return now + reset, reset
end

-- gcra: the theoretical arrival time moves by the units, never before now (gcra.lua).
local function settle_gcra(tat, i, at)
  local interval = p[at + INTERVAL]
  local start = now
  if tat then
    start = math.max(tat, now)
  end
  if debt then
    start = math.min(start + interval * units, now + LONGEST_DEBT)
  elseif tat and bucket_holds(i) then
    start = math.max(start - interval * units, now)
  else
    return nil
  end
  return start, start - now
end

-- fixed_window: tag * 2^33 + count of the current window (fixed_window.lua).
local function settle_fixed_window(state, i, at)
  local per = p[at + PER]
  local index = floor(now / per)
  local tag = index % FIXED_TAGS
  local current = state and floor(state / FIXED_COUNTS) % FIXED_TAGS == tag
  local count = 0
  if current then
    count = state % FIXED_COUNTS
  end
  if debt then
    count = math.min(count + units, FIXED_COUNTS - 1)
  elseif current and reserved_window(i, per) == index then
    count = math.max(count - units, 0)
  else
    return nil
  end
  return tag * FIXED_COUNTS + count, (index + 1) * per - now
end

-- sliding_window: (tag * 2^23 + previous) * 2^23 + current (sliding_window.lua). A debt goes
-- into the current count, a refund into the count the reservation went into.
local function settle_sliding_window(state, i, at)
  local per = p[at + PER]
  local index = floor(now / per)
  local tag = index % SLIDING_TAGS
  local prev, curr = 0, 0
  if state then
    local counts = state % (SLIDING_COUNTS * SLIDING_COUNTS)
    local stored_tag = floor(state / (SLIDING_COUNTS * SLIDING_COUNTS)) % SLIDING_TAGS
    if stored_tag == tag then
      prev, curr = floor(counts / SLIDING_COUNTS), counts % SLIDING_COUNTS
    elseif stored_tag == (index - 1) % SLIDING_TAGS then
      prev = counts % SLIDING_COUNTS
    end
  end
  local window = reserved_window(i, per)
  if debt then
    curr = math.min(curr + units, SLIDING_COUNTS - 1)
  elseif state and window == index then
    curr = math.max(curr - units, 0)
  elseif state and window and window + 1 == index then
    prev = math.max(prev - units, 0)
  else
    return nil
  end
  return (tag * SLIDING_COUNTS + prev) * SLIDING_COUNTS + curr, 2 * per - (now - index * per)
end

local settle_cells = { settle_token_bucket, settle_gcra, settle_sliding_window,
  settle_fixed_window }

-- Members a debt adds to a log at `now`, `count` of them, in ZADDs of at most this many (Lua's
-- C stack holds about 8000 values).
local ZADD_CHUNK = 1000

-- Adds `count` entries at `now` to the log `key`, members `now:s<n>`: unique among this
-- script's own (a refund may have removed some of `now`, so n is tried until ZADD NX takes
-- it) and never the check script's `now:<n>`.
local function add_log_entries(key, count, first)
  local n, stamp = first, int(now)
  while count > 0 do
    local entries = {}
    for k = 1, math.min(count, ZADD_CHUNK) do
      entries[2 * k - 1], entries[2 * k] = now, stamp .. ':s' .. n
      n = n + 1
    end
    count = count - redis.call('ZADD', key, 'NX', unpack(entries))
  end
end

-- sliding_log: a sorted set of admission times (sliding_log.lua). A debt adds entries at now
-- (up to LOG_DEBT_LIMITS times the limit in all); a refund removes up to that many of the
-- reservation's own entries, newest first. True when it added or removed any.
local function settle_sliding_log(key, i, at)
  local per, limit = p[at + PER], p[at + LIMIT]
  -- A key of another type (written by someone else) reads as an empty log: a debt replaces
  -- it, as a check's commit would; a refund leaves it.
  local expired = redis.pcall('ZREMRANGEBYSCORE', key, '-inf', int(now - per))
  if type(expired) == 'table' then
    if not debt then
      return false
    end
    redis.call('DEL', key)
  end
  if not debt then
    local entries = redis.call('ZREVRANGEBYSCORE', key, int(latest[i]), int(earliest[i]),
      'LIMIT', 0, int(units))
    for first = 1, #entries, ZADD_CHUNK do
      redis.call('ZREM', key, unpack(entries, first, math.min(first + ZADD_CHUNK - 1, #entries)))
    end
    return #entries > 0
  end
  local live = redis.call('ZCARD', key)
  local count = math.min(units, math.max(limit * LOG_DEBT_LIMITS - live, 0))
  if count > 0 then
    add_log_entries(key, count, live + 1)
  end
  -- Kept a window past its newest entry (now), never less than it was.
  local ttl = math.max(math.ceil(per / 1000), 1)
  local kept = redis.call('PTTL', key)
  if kept > ttl then
    ttl = kept
  end
  if live + count > 0 then
    redis.call('PEXPIRE', key, ttl)
  end
  return count > 0
end

-- The cell keys' numbers (expiry and state per slot, as common.lua lays them out), read once;
-- a value that is not such a string (someone else's) reads as no state and is replaced by a
-- debt, as a check's commit would.
local values = redis.call('MGET', unpack(KEYS))
local slots, dirty, is_dirty = {}, {}, {}
local function numbers_of(key)
  local numbers = slots[key]
  if numbers then
    return numbers
  end
  numbers = {}
  local value = values[key]
  if value and #value % 16 == 0 then
    numbers = { struct.unpack('<' .. string.rep('d', #value / 8), value) }
    numbers[#numbers] = nil -- struct.unpack's last value is the next position
  end
  -- A slot no script wrote (an expiry that is not a number, or further off than any window
  -- and debt) is expired: the key's lifetime is never set from it.
  for k = 1, #numbers, 2 do
    if not (numbers[k] <= now + 4 * LONGEST_DEBT) then
      numbers[k], numbers[k + 1] = 0, 0
    end
  end
  slots[key] = numbers
  return numbers
end

local reply = {}
for i = 1, windows do
  local at = WINDOW_NUMBERS * (i - 1)
  local algorithm, key = p[at + ALGORITHM], p[at + KEY]
  local changed = false
  if algorithm == SLIDING_LOG then
    changed = settle_sliding_log(KEYS[key], i, at)
  else
    local numbers, slot = numbers_of(key), p[at + SLOT]
    local expires, state = numbers[2 * slot + 1], numbers[2 * slot + 2]
    if not (expires and expires > now) or state ~= state then
      state = nil
    end
    local settled, ttl = settle_cells[algorithm](state, i, at)
    if settled then
      for k = #numbers + 1, 2 * slot do
        numbers[k] = 0
      end
      numbers[2 * slot + 1] = now + 1000 * math.max(math.ceil(ttl / 1000), 1)
      numbers[2 * slot + 2] = settled
      if not is_dirty[key] then
        is_dirty[key], dirty[#dirty + 1] = true, key
      end
      changed = true
    end
  end
  reply[i] = changed and 1 or 0
end

-- Each changed key kept as long as its longest-lived slot (rounded up to whole ms), so a
-- slot this call did not touch keeps its own expiry.
for d = 1, #dirty do
  local key = dirty[d]
  local numbers, longest = slots[key], 1
  for k = 1, #numbers, 2 do
    local left = math.ceil((numbers[k] - now) / 1000)
    if left > longest then
      longest = left
    end
  end
  local value = struct.pack('<' .. string.rep('d', #numbers), unpack(numbers))
  redis.call('SET', KEYS[key], value, 'PX', longest)
end
return struct.pack('<' .. string.rep('d', windows), unpack(reply))
