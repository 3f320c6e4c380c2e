-- KEYS: approvals due lookup
-- ARGV: pointer approval_id record deadline session lookup_ttl_s
-- Record a pending approval, once per tool call: a re-run of the same turn that
-- asks again finds the pointer (`for:<turn id>:<call id>`) and gets the first
-- id back, with no second record. Also enters the approval in the due index
-- (scored by deadline) and the lookup a click finds its session by. Returns
-- the approval id in force.
local approvals, due, lookup = KEYS[1], KEYS[2], KEYS[3]
local pointer, id, record, deadline = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local session, lookup_ttl = ARGV[5], ARGV[6]

local existing = redis.call('HGET', approvals, pointer)
if existing then return existing end
redis.call('HSET', approvals, pointer, id, id, record, id .. ':status', 'pending')
redis.call('ZADD', due, deadline, session .. ' ' .. id)
redis.call('SET', lookup, session, 'EX', lookup_ttl)
return id
