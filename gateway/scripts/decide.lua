-- KEYS: approvals seen due queued stream meta sessions
-- ARGV: approval_id platform user status session now dedupe_ttl
-- Settle a pending approval and enqueue the turn that continues it, in one step.
-- `status` is approved or declined for a click by `user`, timeout when the
-- deadline passed (no user). Only a pending approval of this platform is
-- settled; only its asker may click (anyone else: "not yours", nothing
-- changes); a click that comes after the deadline settles it as timed out and
-- is told "closed". A click is deduped on its event (`seen`): a retried
-- delivery gets the first delivery's verdict and changes nothing.
-- The continuation turn follows enqueue_turn.lua's rule (no second job while a
-- live one is queued). Returns the verdict: approved, declined, timeout,
-- not yours or closed.
local approvals, seen, due, queued = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local stream, meta, sessions = KEYS[5], KEYS[6], KEYS[7]
local id, platform, user, status = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local session, now, dedupe_ttl = ARGV[5], ARGV[6], ARGV[7]
local click = status ~= 'timeout'

-- The same rule as enqueue_turn.lua: keep this in step with it.
local function enqueue_turn()
  local marker = redis.call('GET', queued)
  if marker then
    local marker_stream, marker_job = string.match(marker, '^(%S+) (%S+)$')
    if marker_job and #redis.call('XRANGE', marker_stream, marker_job, marker_job) > 0 then
      return
    end
    redis.call('DEL', queued)
    if tonumber(redis.call('HGET', meta, 'owed') or '0') > 0 then
      redis.call('HINCRBY', meta, 'owed', -1)
    end
  end
  local job = redis.call('XADD', stream, '*', 'kind', 'turn', 'session', session, 'payload', '')
  redis.call('SET', queued, stream .. ' ' .. job)
  redis.call('HINCRBY', meta, 'owed', 1)
  redis.call('ZADD', sessions, now, session)
end

local function settle()
  local raw = redis.call('HGET', approvals, id)
  if not raw or redis.call('HGET', approvals, id .. ':status') ~= 'pending' then
    return 'closed'
  end
  local record = cjson.decode(raw)
  if record.platform ~= platform then return 'closed' end
  local expired = tonumber(record.deadline) <= tonumber(now)
  local verdict = status
  if not click then
    if not expired then return 'closed' end
  elseif record.asker ~= user then
    return 'not yours'
  elseif expired then
    status, verdict = 'timeout', 'closed'
  end
  redis.call('HSET', approvals, id .. ':status', status)
  redis.call('ZREM', due, session .. ' ' .. id)
  enqueue_turn()
  return verdict
end

if click then
  local earlier = redis.call('GET', seen)
  if earlier then return earlier end
end
local verdict = settle()
if click then redis.call('SET', seen, verdict, 'EX', dedupe_ttl) end
return verdict
