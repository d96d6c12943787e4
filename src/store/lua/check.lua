-- The one call a request makes: every window of every limit, checked together and committed
-- all-or-nothing (see groups_to_commit in src/store/mod.rs).
--
-- KEYS: one per window. ARGV[1]: now in µs, or '' for the server's TIME (tests pass it to
-- compare with the Rust algorithms). Then 9 per window: algorithm (1 token_bucket, 2 gcra,
-- 3 sliding_window, 4 fixed_window, 5 sliding_log), group, shadow (0/1), limit, per (µs),
-- interval (µs per token), burst, cost, max_delay (µs).
-- Reply: 4 integers per window: allowed (0/1), remaining, reset (µs), wait (µs).
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
  return {}
end
-- One read for every window (a sliding log's sorted set reads as nil here).
local values = redis.call('MGET', unpack(KEYS))
local windows, results, group_allows = {}, {}, {}
for i = 1, #KEYS do
  local a = 1 + (i - 1) * 9
  local w = {
    algorithm = tonumber(ARGV[a + 1]),
    group = ARGV[a + 2],
    shadow = ARGV[a + 3] == '1',
    limit = tonumber(ARGV[a + 4]),
    per = tonumber(ARGV[a + 5]),
    interval = tonumber(ARGV[a + 6]),
    burst = tonumber(ARGV[a + 7]),
    cost = tonumber(ARGV[a + 8]),
    max_delay = tonumber(ARGV[a + 9]),
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
  reply[#reply + 1] = result[1] and 1 or 0
  reply[#reply + 1] = result[2]
  reply[#reply + 1] = result[3]
  reply[#reply + 1] = result[4]
end
return reply
