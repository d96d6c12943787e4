-- The one call a request makes: every window of every limit, checked together and committed
-- all-or-nothing (see groups_to_commit in src/store/mod.rs).
--
-- KEYS: one per limit identity (its windows' states side by side, see common.lua), and one
-- per sliding-log window (a sorted set). ARGV[1]: now in µs, or '' for the server's TIME
-- (tests pass it to compare with the Rust algorithms). ARGV[2]: eleven little-endian doubles
-- per window, all whole numbers: algorithm (1 token_bucket, 2 gcra, 3 sliding_window, 4
-- fixed_window, 5 sliding_log), group, shadow (0/1), limit, per (µs), interval (µs per token),
-- burst, cost, max_delay (µs), key (its index in KEYS), slot (its place in the key's string).
-- The windows of one key are adjacent and share a group.
-- Reply: one string of 4 little-endian doubles per window (Redis's `struct` library): allowed
-- (0/1), remaining, reset (µs), wait (µs). Binary numbers both ways: the gateway's Redis
-- client spends more per element than per byte, and neither side formats or parses text.
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

local checks = { check_token_bucket, check_gcra, check_sliding_window, check_fixed_window,
  check_sliding_log }
local SLIDING_LOG = 5
-- A limit has at most 256 windows (the gateway's config refuses more).
local MAX_SLOTS = 256
local parameters = ARGV[2]
local WINDOW_BYTES = 8 * WINDOW_NUMBERS
if #parameters % WINDOW_BYTES ~= 0 then
  return redis.error_reply('ERR window parameters of ' .. #parameters
    .. ' bytes, not a multiple of ' .. WINDOW_BYTES)
end
local windows = #parameters / WINDOW_BYTES
if windows == 0 then
  return ''
end
-- p: every window's numbers in a row, a window's starting after `at = 11 * (i - 1)`. One
-- unpack into a table built at its size (a window at a time cost twice as much: an
-- assignment per number and a table regrown on the way).
local p = { struct.unpack('<' .. string.rep('d', WINDOW_NUMBERS * windows), parameters) }

-- A window's state in its key's string: none when the slot is past the string's end, has
-- expired, or is not a number (a string someone else wrote).
local function slot_state(value, slot)
  if not value or #value < 16 * (slot + 1) then
    return nil
  end
  local expires, state = struct.unpack('<dd', value, 16 * slot + 1)
  if expires > now and state == state then
    return state
  end
  return nil
end

-- One read for every key (a sliding log's sorted set reads as false here). The reply is
-- filled as the windows are checked; states and ttls wait for the all-or-nothing decision.
local values = redis.call('MGET', unpack(KEYS))
-- Tables made at their final size (Lua 5.1 has no table.new; a constructor of unpacked
-- values sizes the array once), so filling them never regrows them.
local reply = { unpack(p, 1, 4 * windows) }
local states, ttls, group_allows = { unpack(p, 1, windows) }, { unpack(p, 1, windows) }, {}
for i = 1, windows do
  local at = WINDOW_NUMBERS * (i - 1)
  local algorithm = p[at + ALGORITHM]
  local check = checks[algorithm]
  if not check then
    return redis.error_reply('ERR unknown algorithm ' .. algorithm .. ' in window ' .. i)
  end
  local key, slot = p[at + KEY], p[at + SLOT]
  if not KEYS[key] then
    return redis.error_reply('ERR window ' .. i .. ' names key ' .. key .. ' of ' .. #KEYS)
  end
  if slot < 0 or slot >= MAX_SLOTS or slot % 1 ~= 0 then
    return redis.error_reply('ERR window ' .. i .. ' has slot ' .. slot)
  end
  local input
  if algorithm == SLIDING_LOG then
    input = KEYS[key]
  else
    input = slot_state(values[key], slot)
  end
  local allowed, remaining, reset, wait, state, ttl = check(input, now, p, at)
  local group = p[at + GROUP]
  group_allows[group] = (group_allows[group] ~= false) and allowed
  local r = 4 * (i - 1)
  reply[r + 1], reply[r + 2], reply[r + 3], reply[r + 4] = allowed and 1 or 0, remaining, reset,
    wait
  states[i], ttls[i] = state, ttl
end

local enforced_allow = true
for i = 1, windows do
  local at = WINDOW_NUMBERS * (i - 1)
  if p[at + SHADOW] == 0 and not group_allows[p[at + GROUP]] then
    enforced_allow = false
  end
end

-- Whole again after the reset: the state goes with it (rounded up to whole ms).
local function ttl_ms(i)
  return math.max(math.ceil(ttls[i] / 1000), 1)
end

-- Writes the key of windows first..last: each slot's expiry and state, a slot no window names
-- zero (expired). The key lives as long as its longest-lived window. `out` is scratch space.
local function write_key(out, first, last)
  local count, longest = 0, 1
  for i = first, last do
    local slot = p[WINDOW_NUMBERS * (i - 1) + SLOT]
    if slot >= count then
      count = slot + 1
    end
  end
  for k = 1, 2 * count do
    out[k] = 0
  end
  for i = first, last do
    local at, ttl = WINDOW_NUMBERS * (i - 1), ttl_ms(i)
    local slot = p[at + SLOT]
    out[2 * slot + 1], out[2 * slot + 2] = now + 1000 * ttl, states[i]
    if ttl > longest then
      longest = ttl
    end
  end
  local value = struct.pack('<' .. string.rep('d', 2 * count), unpack(out, 1, 2 * count))
  redis.call('SET', KEYS[p[WINDOW_NUMBERS * (first - 1) + KEY]], value, 'PX', longest)
end

if enforced_allow then
  local out = { unpack(p, 1, 2 * windows) }
  local first = 1
  while first <= windows do
    -- The windows of one key are adjacent and share a group; a log's key is its own.
    local at = WINDOW_NUMBERS * (first - 1)
    local key, last = p[at + KEY], first
    while last < windows and p[WINDOW_NUMBERS * last + KEY] == key do
      last = last + 1
    end
    if group_allows[p[at + GROUP]] then
      if p[at + ALGORITHM] == SLIDING_LOG then
        commit_sliding_log(KEYS[key], now, p, at)
        redis.call('PEXPIRE', KEYS[key], ttl_ms(first))
      else
        write_key(out, first, last)
      end
    end
    first = last + 1
  end
end
return struct.pack('<' .. string.rep('d', 4 * windows), unpack(reply))
