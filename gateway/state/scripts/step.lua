-- KEYS: lease meta history
-- ARGV: token epoch answered length loop ...
-- Record entries of a running tool loop (the further arguments: the assistant's
-- tool calls, each tool's result) as they happen, so a re-run after a crash
-- resumes from them instead of calling again. Fenced like the finish script:
-- only while this token holds the lease, in the turn's epoch, with the
-- `answered` mark where the claim found it and the history as long as the turn
-- last saw it. `loop` is the turn id
-- while the loop is open (the claim then leaves new messages in the inbox, for
-- the next turn: a tool call and its results stay together), or '' to close it.
-- Returns the history's new length, or -1 when fenced off (nothing written).
local lease, meta, history = KEYS[1], KEYS[2], KEYS[3]
local token, epoch, answered, length, loop = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]

if redis.call('GET', lease) ~= token then return -1 end
if (redis.call('HGET', meta, 'epoch') or '0') ~= epoch
    or (redis.call('HGET', meta, 'answered') or '0') ~= answered
    or redis.call('LLEN', history) ~= tonumber(length) then
  return -1
end
for i = 6, #ARGV do redis.call('RPUSH', history, ARGV[i]) end
if loop == '' then
  redis.call('HDEL', meta, 'loop')
else
  redis.call('HSET', meta, 'loop', loop)
end
return redis.call('LLEN', history)
