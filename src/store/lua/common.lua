-- Shared by every algorithm. Redis runs Lua 5.1, whose numbers are doubles: every quantity
-- here is a whole number of microseconds or requests below 2^53, so the arithmetic is exact
-- (the gateway refuses configurations that could leave that range).
local floor = math.floor

local function int(n)
  return string.format('%.0f', n)
end

-- A reply for one window: allowed, remaining, reset, wait (retry_after when denied, the delay
-- when allowed), then what to store and for how long (allowed only).
local function allow(remaining, reset, delay, state, ttl)
  return { true, remaining, reset, delay, state, ttl }
end

local function deny(remaining, reset, retry_after)
  return { false, remaining, reset, retry_after }
end

-- The string value of a cell, split on ':' into numbers; nil when absent or foreign.
local function cell(key, fields)
  local stored = redis.call('GET', key)
  if not stored then
    return nil
  end
  local values = {}
  for part in string.gmatch(stored, '[^:]+') do
    values[#values + 1] = tonumber(part)
  end
  if #values ~= fields then
    return nil
  end
  return values
end
