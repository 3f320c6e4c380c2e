-- KEYS: codes pending paired failures
-- ARGV: code max_failures window_ms
-- The operator approves a pairing code: its user joins `paired` and the code is
-- spent. A wrong or expired code counts a failure; after `max_failures` in a
-- window every code is refused until the window ends, so codes cannot be guessed.
-- Returns {'approved', user}, {'unknown'} or {'locked', ms left}.
local codes, pending, paired, failures = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local code, max_failures, window = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_parts = redis.call('TIME')
local now = now_parts[1] * 1000 + math.floor(now_parts[2] / 1000)

if tonumber(redis.call('GET', failures) or '0') >= max_failures then
  return {'locked', redis.call('PTTL', failures)}
end
local user = redis.call('HGET', codes, code)
local expires = tonumber(redis.call('ZSCORE', pending, code) or '0')
if not user or expires <= now then
  redis.call('HDEL', codes, code)
  redis.call('ZREM', pending, code)
  if redis.call('INCR', failures) == 1 then redis.call('PEXPIRE', failures, window) end
  return {'unknown'}
end
redis.call('HDEL', codes, code)
redis.call('ZREM', pending, code)
redis.call('HSET', paired, user, now)
return {'approved', user}
