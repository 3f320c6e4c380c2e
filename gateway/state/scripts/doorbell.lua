-- The doorbell of the job streams: each script that adds a job publishes its
-- stream's name on this channel (`Keys.JOBS_CHANNEL`), in the same step. A worker
-- listens on the channel and reads the streams it names, so that it waits for
-- jobs on one connection however many streams there are (gateway/state/jobs.py).
local JOBS_CHANNEL = 'gw:jobs'

local function ring(stream)
  redis.call('PUBLISH', JOBS_CHANNEL, stream)
end
