-- The one call a request makes: every window of every limit, checked together and committed
-- all-or-nothing (see groups_to_commit in src/store/mod.rs).
--
-- KEYS: one per window. ARGV[1]: now in µs, or '' for the server's TIME (tests pass it to
-- compare with the Rust algorithms). Then one argument per window, nine whole numbers
-- separated by spaces: algorithm (1 token_bucket, 2 gcra, 3 sliding_window, 4 fixed_window,
-- 5 sliding_log), group, shadow (0/1), limit, per (µs), interval (µs per token), burst, cost,
-- max_delay (µs).
-- Reply: one string of 4 little-endian doubles per window (Redis's `struct` library): allowed
-- (0/1), remaining, reset (µs), wait (µs). One argument and one string instead of 9 and 4
-- values a window: the gateway's Redis client spends more per element than per byte.
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

if #KEYS == 0 then
  return ''
end
-- One read for every window (a sliding log's sorted set reads as nil here).
local values = redis.call('MGET', unpack(KEYS))
local windows, results, group_allows = {}, {}, {}
local WINDOW = '^(%d) (%d+) ([01]) (%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$'
for i = 1, #KEYS do
  local algorithm, group, shadow, limit, per, interval, burst, cost, max_delay =
    string.match(ARGV[i + 1], WINDOW)
  if not algorithm then
    return redis.error_reply('ERR malformed window argument ' .. i)
  end
  local w = {
    algorithm = tonumber(algorithm),
    group = group,
    shadow = shadow == '1',
    limit = tonumber(limit),
    per = tonumber(per),
    interval = tonumber(interval),
    burst = tonumber(burst),
    cost = tonumber(cost),
    max_delay = tonumber(max_delay),
  }
  local input = values[i]
  if w.algorithm == SLIDING_LOG then
    input = KEYS[i]
  end
  local result = checks[w.algorithm](input, now, w)
  windows[i], results[i] = w, result
  group_allows[w.group] = (group_allows[w.group] ~= false) and result[1]
end

local enforced_allow = true
for i = 1, #KEYS do
  if not windows[i].shadow and not group_allows[windows[i].group] then
    enforced_allow = false
  end
end

local reply = {}
for i = 1, #KEYS do
  local w, result = windows[i], results[i]
  if enforced_allow and group_allows[w.group] then
    -- Whole again after the reset: the key goes with it (rounded up to whole ms).
    local ttl_ms = math.max(math.ceil(result[6] / 1000), 1)
    if w.algorithm == SLIDING_LOG then
      commit_sliding_log(KEYS[i], now, w)
      redis.call('PEXPIRE', KEYS[i], ttl_ms)
    else
      redis.call('SET', KEYS[i], result[5], 'PX', ttl_ms)
    end
  end
  local at = 4 * (i - 1)
  reply[at + 1], reply[at + 2] = result[1] and 1 or 0, result[2]
  reply[at + 3], reply[at + 4] = result[3], result[4]
end
return struct.pack('<' .. string.rep('d', #reply), unpack(reply))
