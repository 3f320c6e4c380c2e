-- KEYS: pacing
-- ARGV: interval_ms
-- Take a send slot for a chat: 0 when granted, else the milliseconds to wait.
-- Time is the server's, so every worker shares one clock.
local pacing, interval = KEYS[1], tonumber(ARGV[1])
local now_parts = redis.call('TIME')
local now = now_parts[1] * 1000 + math.floor(now_parts[2] / 1000)
local next_at = tonumber(redis.call('GET', pacing) or '0')
if now < next_at then return next_at - now end
if interval > 0 then redis.call('SET', pacing, now + interval, 'PX', interval + 1000) end
return 0
