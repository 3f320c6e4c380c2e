-- KEYS: approvals
-- ARGV: pointer approval_id record
-- Record a pending approval, once per tool call: a re-run of the same turn that
-- asks again finds the pointer (`for:<turn id>:<call id>`) and gets the first
-- id back, with no second record. Its deadline's entry in the due index and the
-- lookup a click finds its session by are written before, in other slots
-- (gateway/approvals/store.py). Returns the approval id in force.
local approvals = KEYS[1]
local pointer, id, record = ARGV[1], ARGV[2], ARGV[3]

local existing = redis.call('HGET', approvals, pointer)
if existing then return existing end
redis.call('HSET', approvals, pointer, id, id, record, id .. ':status', 'pending')
return id
