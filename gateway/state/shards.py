"""Job shards: which hash tag each session's keys and its job stream share.

A Redis Cluster runs a script only when every key it names hashes to one slot,
and a key's slot is that of its hash tag (the part between its first `{` and
`}`). A session's scripts touch its own keys together with the job stream its
turns go to, so both carry one tag: that of the session's shard. Sessions are
spread over a fixed number of shards (GATEWAY_JOB_SHARDS, 16 unless set) by a
hash of their channel (`platform:workspace:channel`), so that a channel's
index of sessions lives beside them too.

Each shard's tag is chosen so that its slot falls in its own 1/N of the 16384
slots: a cluster whose primaries hold contiguous ranges of slots (as
`redis-cli --cluster create` and CLUSTER ADDSLOTSRANGE make them) gets an
even share of the shards on each primary.

The count is fixed for the life of a deployment: another count names other
keys, and `gateway migrate` moves the data from one to the other. The process
sets it once, at start (`configure`), before any key is named.
"""

from __future__ import annotations

import zlib
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

DEFAULT_SHARDS = 16
MAX_SHARDS = 1024

_count = DEFAULT_SHARDS


def configure(count: int) -> None:
    """The deployment's shard count, set once at start (GATEWAY_JOB_SHARDS)."""
    global _count
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the shard count must be between 1 and {MAX_SHARDS}, not {count}")
    _count = count


def count() -> int:
    return _count


def shard_of(session_key: str, shards: int | None = None) -> int:
    """The shard of a session (or of a channel: the same for all its sessions)."""
    channel = ":".join(session_key.split(":", 3)[:3])
    return zlib.crc32(channel.encode()) % (shards or _count)


def tag(shard: int, shards: int | None = None) -> str:
    """The hash tag of shard `shard` (without its braces)."""
    return _tags(shards or _count)[shard]


def session_tag(session_key: str, shards: int | None = None) -> str:
    n = shards or _count
    return tag(shard_of(session_key, n), n)


def tags(shards: int | None = None) -> tuple[str, ...]:
    """Every shard's tag, in shard order."""
    return _tags(shards or _count)


@cache
def _tags(shards: int) -> tuple[str, ...]:
    found = []
    for shard in range(shards):
        low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
        high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
        attempt = 0
        while not low <= key_slot(f"s{shard}.{attempt}".encode()) < high:
            attempt += 1
        found.append(f"s{shard}.{attempt}")
    return tuple(found)
