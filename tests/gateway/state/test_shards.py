"""The job shards: a channel's sessions in one shard, each shard's slot in its own range."""

from __future__ import annotations

import pytest
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from gateway.state import shards
from gateway.state.keys import Keys
from gateway.state.scripts import load
from tests.support.clusters import cluster_shards


def test_every_session_of_a_channel_is_in_the_channels_shard() -> None:
    channel = "slack:T1:C42"
    found = {shards.shard_of(f"{channel}:{thread}", 16) for thread in range(50)}
    assert found == {shards.shard_of(channel, 16)}
    assert len({shards.shard_of(f"slack:T1:C{n}", 16) for n in range(200)}) == 16


@pytest.mark.parametrize("count", [1, 3, 16, 64])
def test_each_shards_slot_is_in_its_own_share_of_the_slots(count: int) -> None:
    for shard, tag in enumerate(shards.tags(count)):
        low = shard * REDIS_CLUSTER_HASH_SLOTS // count
        assert (
            low <= key_slot(f"{{{tag}}}".encode()) < (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // count
        )


def test_a_sessions_keys_and_its_job_stream_share_one_slot() -> None:
    session, other = "telegram:bot:-100123:7", "telegram:bot:-100999"
    with cluster_shards(16):
        names = [*Keys.all_parts(session), Keys.session_jobs(session, "telegram")]
        names += [Keys.session_index(session), Keys.settings_version(session)]
        names += [Keys.channel_sessions("telegram:bot:-100123")]
        elsewhere = Keys.meta(other)
    assert len({key_slot(name.encode()) for name in names}) == 1
    assert key_slot(elsewhere.encode()) != key_slot(names[0].encode())


def test_a_count_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="between 1 and 1024"):
        shards.configure(0)


def test_the_doorbell_rings_on_the_channel_workers_listen_to() -> None:
    source = load("enqueue").source
    assert f"local JOBS_CHANNEL = '{Keys.JOBS_CHANNEL}'" in source
