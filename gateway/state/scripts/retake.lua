-- KEYS: lease meta
-- ARGV: token ttl_ms epoch answered
-- Take a turn's lease again when it expired with nobody taking it: a holder whose
-- event loop stalled past the TTL goes on instead of leaving its turn to a re-run.
-- Only when nothing could have written since its claim: no holder now, the meta's
-- `claimant` is still this token (every claim writes its own), and the epoch and
-- the `answered` mark are the claim's (finish.lua's rule for an expired lease).
-- A lease this token already took again (two renewals of one holder found it expired
-- at once: the heartbeat's and the one asked before a new message) is simply extended.
-- 1 taken (or held), 0 not.
local lease, meta = KEYS[1], KEYS[2]
local token, ttl_ms, epoch, answered = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local holder = redis.call('GET', lease)
if holder == token then
  redis.call('PEXPIRE', lease, ttl_ms)
  return 1
end
if holder then return 0 end
if redis.call('HGET', meta, 'claimant') ~= token
    or (redis.call('HGET', meta, 'epoch') or '0') ~= epoch
    or (redis.call('HGET', meta, 'answered') or '0') ~= answered then
  return 0
end
redis.call('SET', lease, token, 'PX', ttl_ms)
return 1
