-- KEYS: lease meta history live replies turn_injections injections sessions
-- ARGV: token epoch answered length entry now turn_id session ...
-- Record a turn once and release its lease. Returns
--   1 recorded;
--   0 lost: another holder has the lease, or it expired and the history moved
--     since the claim (someone else claimed): nothing written, the job stays
--     pending and a re-run of the turn records it;
--   2 superseded: a reset or another run of the turn already moved past it:
--     nothing to record, the job is done.
-- A lease that expired with nobody taking it is no loss: nothing else could
-- have written, so the turn records as if it still held it.
-- Further arguments are meta field/value pairs set in the same step.
local lease, meta, history, live, replies = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local turn_injections, injections, sessions = KEYS[6], KEYS[7], KEYS[8]
local token, epoch, answered, length = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local entry, now, turn_id, session = ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local holder = redis.call('GET', lease)
if holder and holder ~= token then return 0 end
if (redis.call('HGET', meta, 'epoch') or '0') ~= epoch
    or (redis.call('HGET', meta, 'answered') or '0') ~= answered then
  if holder then redis.call('DEL', lease) end
  return 2
end
if not holder and redis.call('LLEN', history) ~= tonumber(length) then return 0 end
if entry ~= '' then redis.call('RPUSH', history, entry) end
redis.call('HSET', meta, 'answered', redis.call('LLEN', history), 'updated', now)
redis.call('HINCRBY', meta, 'turns', 1)
redis.call('HDEL', meta, 'loop')
redis.call('ZADD', sessions, now, session)
if #ARGV > 8 then redis.call('HSET', meta, unpack(ARGV, 9)) end
redis.call('HDEL', replies, turn_id)
if entry == '' then
  -- No reply was recorded: the turn's injections go back, ahead of newer ones.
  local taken = redis.call('LRANGE', turn_injections, 0, -1)
  for i = #taken, 1, -1 do redis.call('LPUSH', injections, taken[i]) end
end
redis.call('DEL', lease, live, turn_injections)
return 1
