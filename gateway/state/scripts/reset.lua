-- KEYS: meta history inbox live replies injections turn_injections segments compressing approvals media side_answers
-- ARGV: now
-- Start a fresh conversation: a new epoch, which fences every write of a turn
-- still running, and every part of the session gone. The jobs still owed stay
-- counted: they complete as usual. Processed attachments (`media`) go with the rest.
local meta = KEYS[1]
local epoch = redis.call('HINCRBY', meta, 'epoch', 1)
local owed = redis.call('HGET', meta, 'owed') or '0'
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
redis.call('HSET', meta, 'epoch', epoch, 'owed', owed, 'updated', ARGV[1])
return epoch
