-- KEYS: lease meta live replies
-- ARGV: token epoch turn_id live_text live_ttl_s reply_ids
-- What a running turn shows so far. Its text (for /btw snapshots) is written only
-- while this token holds the lease in the turn's epoch, so a turn still streaming
-- after a /reset or after losing its lease leaves no trace in the session. The
-- platform ids of its messages are kept whenever the epoch is the turn's, lease
-- or not: they are what lets a re-run of the turn edit those messages instead of
-- posting again. An empty value leaves that part as it is. Returns 1 when
-- everything asked was written, 0 when something was fenced off.
local lease, meta, live, replies = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, epoch, turn_id = ARGV[1], ARGV[2], ARGV[3]
local text, ttl, ids = ARGV[4], ARGV[5], ARGV[6]
if (redis.call('HGET', meta, 'epoch') or '0') ~= epoch then return 0 end
if ids ~= '' then redis.call('HSET', replies, turn_id, ids) end
if text == '' then return 1 end
if redis.call('GET', lease) ~= token then return 0 end
redis.call('SET', live, text, 'EX', ttl)
return 1
