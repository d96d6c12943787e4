-- The one call a batch of requests makes: every window of every request, each request's
-- windows checked together and committed all-or-nothing (see groups_to_commit in
-- src/store/mod.rs), the requests in order, each seeing the states the ones before it left:
-- as if each were a call of its own at the same `now`. A key many requests share (a hot API
-- key, one client's flood) is read once and written once for the whole batch.
--
-- KEYS: each once: one per limit identity (its windows' states side by side, see common.lua),
-- and one per sliding-log window (a sorted set). ARGV[1]: now in µs, or '' for the server's
-- TIME (tests pass it to compare with the Rust algorithms). ARGV[2]: eleven little-endian
-- doubles per window, every request's windows in turn, all whole numbers: algorithm (1
-- token_bucket, 2 gcra, 3 sliding_window, 4 fixed_window, 5 sliding_log), group, shadow (0/1),
-- limit, per (µs), interval (µs per token), burst, cost, max_delay (µs), key (its index in
-- KEYS), slot (its place in the key's string). Within a request the windows of one key are
-- adjacent and share a group. ARGV[3]: a little-endian double per request, how many of the
-- windows are its.
-- ARGV[4]: 'peek' to check and write nothing (the admin endpoints' read of an identity).
-- Reply: one string of 4 little-endian doubles per window (Redis's `struct` library): allowed
-- (0/1), remaining, reset (µs), wait (µs). Binary numbers both ways: the gateway's Redis
-- client spends more per element than per byte, and neither side formats or parses text.
if redis.replicate_commands then
  redis.replicate_commands()
end

local peek = ARGV[4] == 'peek'
local now
if ARGV[1] ~= '' then
  now = tonumber(ARGV[1])
else
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000000 + tonumber(time[2])
end

local checks = { check_token_bucket, check_gcra, check_sliding_window, check_fixed_window,
  check_sliding_log }
local SLIDING_LOG = 5
-- A limit has at most 256 windows (the gateway's config refuses more), and so has a call (the
-- gateway starts another): every window's numbers are unpacked at once, and Redis's Lua holds
-- about 8000 values on its C stack.
local MAX_SLOTS = 256
local parameters, window_counts = ARGV[2], ARGV[3] or ''
local WINDOW_BYTES = 8 * WINDOW_NUMBERS
if #parameters % WINDOW_BYTES ~= 0 then
  return redis.error_reply('ERR window parameters of ' .. #parameters
    .. ' bytes, not a multiple of ' .. WINDOW_BYTES)
end
if #window_counts % 8 ~= 0 then
  return redis.error_reply('ERR window counts of ' .. #window_counts
    .. ' bytes, not a multiple of 8')
end
local windows, requests = #parameters / WINDOW_BYTES, #window_counts / 8
if windows == 0 then
  return ''
end
-- p: every window's numbers in a row, a window's starting after `at = 11 * (i - 1)`. One
-- unpack into a table built at its size (a window at a time cost twice as much: an
-- assignment per number and a table regrown on the way).
local p = { struct.unpack('<' .. string.rep('d', WINDOW_NUMBERS * windows), parameters) }

-- Everything is checked before anything is written: a malformed call changes nothing.
local counts = {}
local counted = 0
for r = 1, requests do
  local count = struct.unpack('<d', window_counts, 8 * r - 7)
  counts[r] = count
  if count < 1 or count % 1 ~= 0 then
    return redis.error_reply('ERR request ' .. r .. ' has ' .. count .. ' windows')
  end
  counted = counted + count
end
if counted ~= windows then
  return redis.error_reply('ERR the requests have ' .. counted .. ' windows, the parameters '
    .. windows)
end
for i = 1, windows do
  local at = WINDOW_NUMBERS * (i - 1)
  local algorithm = p[at + ALGORITHM]
  if not checks[algorithm] then
    return redis.error_reply('ERR unknown algorithm ' .. algorithm .. ' in window ' .. i)
  end
  local key, slot = p[at + KEY], p[at + SLOT]
  if not KEYS[key] then
    return redis.error_reply('ERR window ' .. i .. ' names key ' .. key .. ' of ' .. #KEYS)
  end
  if slot < 0 or slot >= MAX_SLOTS or slot % 1 ~= 0 then
    return redis.error_reply('ERR window ' .. i .. ' has slot ' .. slot)
  end
end

-- One read for every key (a sliding log's sorted set reads as false here). A window reads its
-- state from that string until a request commits the key; from then on, from the numbers that
-- request left (`committed`), which are written once, at the end.
local values = redis.call('MGET', unpack(KEYS))
local committed = {}

-- A window's state: none when its slot is past the key's numbers, has expired, or is not a
-- number (a string someone else wrote).
local function slot_state(key, slot)
  local expires, state
  local numbers = committed[key]
  if numbers then
    expires, state = numbers[2 * slot + 1], numbers[2 * slot + 2]
  else
    local value = values[key]
    if not value or #value < 16 * (slot + 1) then
      return nil
    end
    expires, state = struct.unpack('<dd', value, 16 * slot + 1)
  end
  if expires and expires > now and state == state then
    return state
  end
  return nil
end

-- Tables made at their final size (Lua 5.1 has no table.new; a constructor of unpacked
-- values sizes the array once), so filling them never regrows them.
local reply = { unpack(p, 1, 4 * windows) }
local states, ttls = { unpack(p, 1, windows) }, { unpack(p, 1, windows) }

-- Whole again after the reset: the state goes with it (rounded up to whole ms).
local function ttl_ms(i)
  return math.max(math.ceil(ttls[i] / 1000), 1)
end

-- Cell keys to write at the end, in the order they were first committed, and how long each
-- lives: as long as the longest-lived window of the last request that committed it.
local dirty, key_ttls = {}, {}

-- Commits windows first..last of one key: each slot's expiry and state, a slot no window names
-- zero (expired).
local function commit_key(key, first, last)
  local count, longest = 0, 1
  for i = first, last do
    local slot = p[WINDOW_NUMBERS * (i - 1) + SLOT]
    if slot >= count then
      count = slot + 1
    end
  end
  -- A key already committed in this call is rewritten in place: a hot key's requests
  -- would otherwise make a table each.
  local numbers = committed[key]
  if not numbers or #numbers ~= 2 * count then
    numbers = { unpack(p, 1, 2 * count) }
  end
  for k = 1, 2 * count do
    numbers[k] = 0
  end
  for i = first, last do
    local at, ttl = WINDOW_NUMBERS * (i - 1), ttl_ms(i)
    local slot = p[at + SLOT]
    numbers[2 * slot + 1], numbers[2 * slot + 2] = now + 1000 * ttl, states[i]
    if ttl > longest then
      longest = ttl
    end
  end
  if not key_ttls[key] then
    dirty[#dirty + 1] = key
  end
  committed[key], key_ttls[key] = numbers, longest
end

-- Each request: its windows first..last checked, then committed when every enforced group
-- allows. (One loop at the top level: its variables stay in registers, not upvalues.)
local first = 1
for r = 1, requests do
  local last = first + counts[r] - 1
  local group_allows = {}
  for i = first, last do
    local at = WINDOW_NUMBERS * (i - 1)
    local algorithm, key = p[at + ALGORITHM], p[at + KEY]
    local input
    if algorithm == SLIDING_LOG then
      input = KEYS[key]
    else
      input = slot_state(key, p[at + SLOT])
    end
    local allowed, remaining, reset, wait, state, ttl = checks[algorithm](input, now, p, at)
    local group = p[at + GROUP]
    group_allows[group] = (group_allows[group] ~= false) and allowed
    local at_reply = 4 * (i - 1)
    reply[at_reply + 1], reply[at_reply + 2], reply[at_reply + 3], reply[at_reply + 4] =
      allowed and 1 or 0, remaining, reset, wait
    states[i], ttls[i] = state, ttl
  end
  local enforced_allow = true
  for i = first, last do
    local at = WINDOW_NUMBERS * (i - 1)
    if p[at + SHADOW] == 0 and not group_allows[p[at + GROUP]] then
      enforced_allow = false
    end
  end
  local start = first
  while enforced_allow and not peek and start <= last do
    local at = WINDOW_NUMBERS * (start - 1)
    local key, stop = p[at + KEY], start
    while stop < last and p[WINDOW_NUMBERS * stop + KEY] == key do
      stop = stop + 1
    end
    if group_allows[p[at + GROUP]] then
      if p[at + ALGORITHM] == SLIDING_LOG then
        -- A log's key is its own window's; written with the call's other entries at the end.
        commit_sliding_log(KEYS[key], p, at)
      else
        commit_key(key, start, stop)
      end
    end
    start = stop + 1
  end
  first = last + 1
end

write_sliding_logs(now)
for d = 1, #dirty do
  local key = dirty[d]
  local numbers = committed[key]
  local value = struct.pack('<' .. string.rep('d', #numbers), unpack(numbers))
  redis.call('SET', KEYS[key], value, 'PX', key_ttls[key])
end
return struct.pack('<' .. string.rep('d', 4 * windows), unpack(reply))
