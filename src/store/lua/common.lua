-- Shared by every algorithm. Redis runs Lua 5.1, whose numbers are doubles: every quantity
-- here is a whole number of microseconds or requests below 2^53, so the arithmetic is exact
-- (the gateway refuses configurations that could leave that range).
--
-- Each window's state is one integer below 2^53, which Redis stores inside the key's object
-- (no separate string): the smallest a key can be.
local floor = math.floor

local function int(n)
  return string.format('%.0f', n)
end

-- A reply for one window: allowed, remaining, reset, wait (retry_after when denied, the delay
-- when allowed), then the state to store and for how long (allowed only).
local function allow(remaining, reset, delay, state, ttl)
  return { true, remaining, reset, delay, state, ttl }
end

local function deny(remaining, reset, retry_after)
  return { false, remaining, reset, retry_after }
end

-- The stored integer (`value` as MGET read it), or nil when the key is absent or holds
-- something else.
local function stored(value)
  if not value then
    return nil
  end
  return tonumber(value)
end

-- Splits a stored integer into fields of the given bit widths (most significant first).
local function unpack_fields(value, widths)
  local fields = {}
  for i = #widths, 1, -1 do
    local base = 2 ^ widths[i]
    fields[i] = value % base
    value = floor(value / base)
  end
  return fields
end

local function pack_fields(fields, widths)
  local value = 0
  for i = 1, #widths do
    value = value * 2 ^ widths[i] + fields[i]
  end
  return value
end
