-- KEYS: codes pending
-- ARGV: user code ttl_ms max_pending
-- A stranger asks to pair. Expired codes go first; then the user's own pending code
-- is returned when there is one (asking again does not make a new one), else `code`
-- is kept for `ttl_ms` when fewer than `max_pending` of the user's platform wait.
-- Returns the code, or false at the cap. `codes`: code -> user; `pending`: code by expiry.
local codes, pending = KEYS[1], KEYS[2]
local user, code, ttl, max_pending = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now_parts = redis.call('TIME')
local now = now_parts[1] * 1000 + math.floor(now_parts[2] / 1000)

for _, old in ipairs(redis.call('ZRANGEBYSCORE', pending, '-inf', now)) do
  redis.call('HDEL', codes, old)
  redis.call('ZREM', pending, old)
end
local platform = string.match(user, '^[^:]*:')
local waiting = 0
for _, other in ipairs(redis.call('ZRANGE', pending, 0, -1)) do
  local holder = redis.call('HGET', codes, other)
  if holder == user then return other end
  if holder and string.sub(holder, 1, #platform) == platform then waiting = waiting + 1 end
end
if waiting >= max_pending or redis.call('HEXISTS', codes, code) == 1 then return false end
redis.call('HSET', codes, code, user)
redis.call('ZADD', pending, now + ttl, code)
return code
