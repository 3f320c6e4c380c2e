-- KEYS: version
-- ARGV: value
-- A shard's copy of the settings' version raised to `value`, never lowered (copies
-- written out of order keep the newest). Returns the copy's version.
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
local value = tonumber(ARGV[1])
if value > current then
  redis.call('SET', KEYS[1], ARGV[1])
  return value
end
return current
