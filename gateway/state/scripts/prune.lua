-- KEYS: sessions channel meta history inbox live replies injections turn_injections segments compressing side lease queued approvals media side_answers
-- ARGV: session cutoff
-- Remove an idle session: every part of it, and its place in the index and its
-- channel's set. Everything that made it a candidate is checked again here, in
-- the same step as the delete, so a session that came alive since it was found
-- (a message, a turn, a job) is left as it is. Returns 1 removed, 0 kept (or
-- already gone).
local sessions, channel, meta, history, inbox = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local live, replies, injections, turn_injections = KEYS[6], KEYS[7], KEYS[8], KEYS[9]
local segments, compressing, side, lease, queued = KEYS[10], KEYS[11], KEYS[12], KEYS[13], KEYS[14]
local approvals = KEYS[15]
local media = KEYS[16]
local side_answers = KEYS[17]
local session, cutoff = ARGV[1], tonumber(ARGV[2])

local score = redis.call('ZSCORE', sessions, session)
if score and tonumber(score) > cutoff then return 0 end
-- A reset writes `updated` without touching the index.
if tonumber(redis.call('HGET', meta, 'updated') or '0') > cutoff then return 0 end
-- A turn running, a turn queued, a compression running.
if redis.call('EXISTS', lease, queued, compressing) > 0 then return 0 end
-- Jobs not yet completed, messages not yet claimed or not yet answered.
if tonumber(redis.call('HGET', meta, 'owed') or '0') > 0 then return 0 end
if redis.call('LLEN', inbox) > 0 then return 0 end
if redis.call('LLEN', history) > tonumber(redis.call('HGET', meta, 'answered') or '0') then
  return 0
end
local removed = redis.call('ZREM', sessions, session)
removed = removed + redis.call('DEL', meta, history, inbox, live, replies, injections,
                               turn_injections, segments, compressing, side, approvals, media,
                               side_answers)
redis.call('ZREM', channel, session)
if removed > 0 then return 1 end
return 0
