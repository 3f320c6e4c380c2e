-- KEYS: lock segments meta
-- ARGV: token epoch replace segment history_start
-- Store a compression segment while this token holds the session's compression
-- lock in the same epoch; `replace` = '1' swaps out the newest segment.
local lock, segments, meta = KEYS[1], KEYS[2], KEYS[3]
local token, epoch, replace, segment, start = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if redis.call('GET', lock) ~= token then return 0 end
if (redis.call('HGET', meta, 'epoch') or '0') ~= epoch then return 0 end
if replace == '1' then redis.call('RPOP', segments) end
redis.call('RPUSH', segments, segment)
redis.call('HSET', meta, 'history_start', start)
return 1
