-- KEYS: pacing
-- ARGV: wait_ms
-- Nothing goes to this chat, from any worker, for `wait_ms` (a platform's 429).
local pacing, wait = KEYS[1], tonumber(ARGV[1])
local now_parts = redis.call('TIME')
local now = now_parts[1] * 1000 + math.floor(now_parts[2] / 1000)
local next_at = tonumber(redis.call('GET', pacing) or '0')
if now + wait > next_at then redis.call('SET', pacing, now + wait, 'PX', wait + 1000) end
return 1
