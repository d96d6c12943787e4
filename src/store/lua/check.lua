-- The one call a request makes: every window of every limit, checked together and committed
-- all-or-nothing (see groups_to_commit in src/store/mod.rs).
--
-- KEYS: one per window. ARGV[1]: now in µs, or '' for the server's TIME (tests pass it to
-- compare with the Rust algorithms). ARGV[2]: nine little-endian doubles per window, all whole
-- numbers: algorithm (1 token_bucket, 2 gcra, 3 sliding_window, 4 fixed_window, 5
-- sliding_log), group, shadow (0/1), limit, per (µs), interval (µs per token), burst, cost,
-- max_delay (µs).
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
local windows = #KEYS

if windows == 0 then
  return ''
end
local parameters = ARGV[2]
if #parameters ~= 8 * WINDOW_NUMBERS * windows then
  return redis.error_reply('ERR window parameters of ' .. #parameters .. ' bytes for '
    .. windows .. ' windows')
end
-- p: every window's numbers in a row, a window's starting after `at = 9 * (i - 1)`. One
-- unpack into a table built at its size (a window at a time cost twice as much: nine
-- assignments each and a table regrown on the way).
local p = { struct.unpack('<' .. string.rep('d', WINDOW_NUMBERS * windows), parameters) }

-- One read for every window (a sliding log's sorted set reads as false here). The reply is
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
  local input
  if algorithm == SLIDING_LOG then
    input = KEYS[i]
  else
    input = values[i] and tonumber(values[i])
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

if enforced_allow then
  for i = 1, windows do
    local at = WINDOW_NUMBERS * (i - 1)
    if group_allows[p[at + GROUP]] then
      -- Whole again after the reset: the key goes with it (rounded up to whole ms).
      local ttl_ms = math.max(math.ceil(ttls[i] / 1000), 1)
      if p[at + ALGORITHM] == SLIDING_LOG then
        commit_sliding_log(KEYS[i], now, p, at)
        redis.call('PEXPIRE', KEYS[i], ttl_ms)
      else
        redis.call('SET', KEYS[i], states[i], 'PX', ttl_ms)
      end
    end
  end
end
return struct.pack('<' .. string.rep('d', 4 * windows), unpack(reply))
