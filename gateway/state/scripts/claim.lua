-- KEYS: lease queued inbox history meta segments injections turn_injections replies album settings_version
-- ARGV: token ttl_ms hold
-- Take a session's lease (or keep it: the same token renews) and move the inbox
-- into the history. With work past the `answered` mark, also read everything the
-- turn starts from: the snapshot, its injections and its reply's platform ids.
-- While a tool loop is open (meta `loop`: a run died or waits for an approval
-- between a tool call and its result), the inbox stays where it is: the loop is
-- finished first, and what came meanwhile is the next turn's.
-- While an album's items are still arriving (the `album` key, set by ingest.lua),
-- nothing is taken: the answer is {2, milliseconds left}, unless `hold` is empty.
-- A claim also answers the version of the settings by scope (gateway/settings/scoped.py), so
-- the turn knows whether its process must reload them, at no extra round trip.
local lease, queued, inbox, history, meta = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local segments, injections, turn_injections, replies = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local token, ttl_ms, hold = ARGV[1], ARGV[2], ARGV[3]

local holder = redis.call('GET', lease)
if holder and holder ~= token then return {0} end
if hold ~= '' then
  local gathering = redis.call('PTTL', KEYS[10])
  if gathering > 0 then return {2, gathering} end
end
redis.call('SET', lease, token, 'PX', ttl_ms)
redis.call('HSET', meta, 'claimant', token)  -- whose claim was last (retake.lua)
redis.call('DEL', queued)
local loop_open = redis.call('HGET', meta, 'loop')
while not loop_open do
  local entry = redis.call('LPOP', inbox)
  if not entry then break end
  redis.call('RPUSH', history, entry)
end
local answered = tonumber(redis.call('HGET', meta, 'answered') or '0')
local length = redis.call('LLEN', history)
local epoch = redis.call('HGET', meta, 'epoch') or '0'
local settings = redis.call('GET', KEYS[11]) or '0'
if length <= answered then return {1, answered, length, epoch, settings} end
-- The injections become this turn's; a re-run of the same turn sees them again.
if redis.call('EXISTS', turn_injections) == 0 and redis.call('EXISTS', injections) == 1 then
  redis.call('RENAME', injections, turn_injections)
end
local start = tonumber(redis.call('HGET', meta, 'history_start') or '0')
local turn_id = epoch .. '.' .. answered
local claimed = {1, answered, length, epoch, settings, redis.call('HGETALL', meta),
                 redis.call('LRANGE', segments, -2, -1), redis.call('LRANGE', history, start, -1),
                 redis.call('LRANGE', turn_injections, 0, -1),
                 redis.call('HGET', replies, turn_id) or ''}
-- Which turn was last started: the meta read above still has the one before, so a
-- claim of a turn already started (a re-run) knows it (`Claim.rerun`).
redis.call('HSET', meta, 'started', turn_id)
return claimed
