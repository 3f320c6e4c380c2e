"""The gateway on a real Redis Cluster (three primaries, a replica each; tests/support/clusters.py).

The suite's own tests of every Lua script, of the core's worker flows and of the
Telegram adapter end to end run here again, against the cluster, with the keys
named for 16 shards: a script, transaction or command whose keys spread over
slots fails with CROSSSLOT. Then every script is checked to have run here.

One file, so that `--dist loadfile` starts one cluster in one test process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from importlib import resources

import pytest
import redis
import redis.asyncio as aioredis
from slack_sdk.oauth.installation_store import Bot, Installation

from adapters.slack.installations import RedisInstallationStore
from gateway.errors import LayoutMismatch
from gateway.feedback.store import FeedbackStore, FeedbackVerdict, Reply
from gateway.state import keys, shards
from gateway.state.cipher import TokenCipher
from gateway.state.jobs import SWEEP_STREAMS, JobQueue
from gateway.state.keys import Keys
from gateway.state.scripts import load
from tests.adapters.flows.test_telegram_e2e import (  # noqa: F401  (run here again)
    test_btw_in_a_topic_is_a_reply_in_the_topic_and_stays_out_of_history,
    test_group_message_needs_a_mention,
    test_private_message_is_answered,
    test_the_same_update_twice_gets_one_reply,
    web,
)
from tests.gateway.approvals.test_store import (  # noqa: F401  (run here again)
    store,
    test_a_due_approval_times_out_and_its_turn_is_enqueued,
    test_close_removes_the_record_and_its_lookup,
    test_ingest_finds_the_session_from_the_approval_id,
    test_opening_the_same_call_twice_gives_one_id_and_one_record,
    test_the_asker_approves_and_the_continuation_turn_is_enqueued,
)
from tests.gateway.conftest import harness, two_workers  # noqa: F401  (their fixtures)
from tests.gateway.context.test_compression import (  # noqa: F401  (run here again)
    test_the_lock_lets_one_of_two_compressors_through,
)
from tests.gateway.delivery.test_pacing import (  # noqa: F401  (run here again)
    test_pacing_paces_final_sends_across_streams,
    test_send_pacing_is_shared_between_workers,
)
from tests.gateway.inbound.test_pairing import (  # noqa: F401  (run here again)
    test_an_approved_code_lets_its_user_in_once,
    test_wrong_codes_lock_approval_even_for_a_right_one,
)
from tests.gateway.inbound.test_rate_limit import (  # noqa: F401  (run here again)
    test_the_limiter_names_the_rate_and_the_wait,
)
from tests.gateway.settings.test_scoped import (  # noqa: F401  (run here again)
    scoped,
    test_another_process_change_is_seen_once_its_version_is,
    test_the_most_specific_scope_that_sets_a_key_wins,
)
from tests.gateway.spend.test_budgets import (  # noqa: F401  (run here again)
    test_a_used_up_budget_refuses_with_which_and_when,
    test_holds_in_flight_count_and_are_let_go_of,
    test_the_calls_usage_write_settles_its_hold_and_no_other_does,
)
from tests.gateway.state.test_console_jobs import (  # noqa: F401  (run here again)
    test_a_live_runs_jobs_stay_and_an_ended_ones_move_with_the_queued_marker,
    test_a_run_that_ends_with_nothing_owed_leaves_nothing,
)
from tests.gateway.state.test_lease import (  # noqa: F401  (run here again)
    test_a_kept_lease_outlives_its_ttl,
    test_a_key_taken_by_another_owner_is_found_lost,
)
from tests.gateway.state.test_retention import (  # noqa: F401  (run here again)
    deployment,
    test_an_idle_session_is_removed_with_every_key_and_its_index_entries,
    test_gateway_sessions_prune_says_how_many_it_removed,
)
from tests.gateway.state.test_scripts import *  # noqa: F403  (every script's tests, run here again)
from tests.gateway.test_worker import *  # noqa: F403  (the core's flows, run here again)
from tests.support.clusters import Cluster, cluster_shards
from tests.support.slack_helpers import SECRET_KEY


@pytest.fixture(autouse=True)
def sixteen_shards() -> Iterator[None]:
    with cluster_shards(16):
        yield


@pytest.fixture
def redis_url(redis_cluster: Cluster) -> str:
    """The cluster, emptied before the test."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture
async def redis_client(redis_url: str, redis_cluster: Cluster) -> AsyncIterator[aioredis.Redis]:
    client = redis_cluster.client()
    yield client  # type: ignore[misc]
    await client.aclose()


def test_the_shards_spread_over_the_primaries(redis_cluster: Cluster) -> None:
    """16 shards' slots in their own sixteenths: five or six on each of three primaries."""
    with redis_cluster.node(redis_cluster.primaries[0]) as node:
        ranges = node.execute_command("CLUSTER SLOTS")
    owners = []
    for tag in shards.tags():
        slot = redis.crc.key_slot(f"{{{tag}}}".encode())
        owners += [served[2][1] for served in ranges if served[0] <= slot <= served[1]]
    assert sorted(owners.count(port) for port in set(owners)) == [5, 5, 6]


async def test_an_empty_cluster_takes_the_layout_and_a_wrong_count_is_refused(
    redis_client: aioredis.Redis,
) -> None:
    await keys.ensure_layout(redis_client)
    assert await keys.stored_layout(redis_client) == keys.Layout(keys.LAYOUT_VERSION, 16)
    with cluster_shards(8), pytest.raises(LayoutMismatch, match="16 job shards"):
        await keys.ensure_layout(redis_client)


async def test_a_worker_reads_a_job_of_any_shard_from_its_doorbell(
    redis_client: aioredis.Redis,
) -> None:
    queue = JobQueue(redis_client, ["test"])
    await queue.ensure_groups()
    listening = asyncio.create_task(queue.listen())
    try:
        await asyncio.wait_for(queue.listening.wait(), 10)
        assert await queue.read(count=10, block_ms=100) == []  # the first look: nothing
        stream = Keys.jobs("test", 11)
        enqueue = load("enqueue").bind(redis_client)
        session = _session_in(11)
        keys = {
            "stream": stream,
            "meta": Keys.meta(session),
            "side_in_flight": Keys.side_in_flight(session),
            "sessions": Keys.session_index(session),
        }
        args = {"kind": "notice", "session": session, "payload": "", "side_limit": ""}
        started = time.monotonic()
        await enqueue(keys=keys, args=args | {"since": 0, "now": time.time()})
        (job,) = await queue.read(count=10, block_ms=5000)
        assert job.stream == stream and job.fresh and time.monotonic() - started < 2
    finally:
        listening.cancel()


def _session_in(shard: int) -> str:
    """A session key of shard `shard`."""
    number = 0
    while shards.shard_of(f"test:W:C{number}") != shard:
        number += 1
    return f"test:W:C{number}"


def test_a_reclaim_round_looks_at_a_bounded_number_of_streams() -> None:
    queue = JobQueue(aioredis.Redis(), ["test", "other"])  # no command is sent
    rounds = [queue.round_streams() for _ in range(4)]
    assert all(len(streams) == SWEEP_STREAMS for streams in rounds)
    assert len({stream for streams in rounds for stream in streams}) == 32  # all, in 4


async def test_a_feedback_click_is_recorded_with_its_log_and_counter(
    redis_client: aioredis.Redis,
) -> None:
    feedback = FeedbackStore(redis_client)
    reply = Reply("test", "W", "C1", "m1", "test:W:C1", "turn-1", "echo")
    await feedback.register(reply)
    verdict = await feedback.record("test", "C1", "m1", "U1", "up")
    assert verdict == FeedbackVerdict.RECORDED
    assert await redis_client.zcard(Keys.FEEDBACK_LOG) == 1


def test_every_script_ran_on_the_cluster(redis_cluster: Cluster) -> None:
    """Each script (not the snippets others use) was loaded by a call from the tests
    above: none is left that no test ran on the cluster."""
    names = sorted(
        path.name.removesuffix(".lua")
        for path in resources.files("gateway.state.scripts").iterdir()
        if path.name.endswith(".lua") and path.read_text().startswith("-- KEYS:")
    )
    shas = {name: _sha(load(name).source) for name in names}
    ran: set[str] = set()
    for port in redis_cluster.current_primaries():
        with redis_cluster.node(port) as node:
            found = node.script_exists(*shas.values())
        ran |= {name for name, exists in zip(shas, found, strict=True) if exists}
    if not ran:
        pytest.skip("runs after this module's script tests")
    missing = sorted(set(names) - ran)
    assert not missing, f"not run on the cluster: {', '.join(missing)}"


def _sha(source: str) -> str:
    import hashlib

    return hashlib.sha1(source.encode()).hexdigest()  # how Redis names a script


async def test_slacks_installation_store_rotates_a_token_on_one_slot(
    redis_client: aioredis.Redis,
) -> None:
    """An owner's records and the WATCH of a rotation are single-slot (CROSSSLOT if not);
    the owners' set, in another slot, is written in a step of its own."""
    installs = RedisInstallationStore(redis_client, TokenCipher(SECRET_KEY))  # type: ignore[arg-type]
    installation = Installation(
        team_id="T0009",
        bot_token="xoxe.xoxb-old",
        bot_user_id="UB9",
        bot_refresh_token="xoxe-1-old",
        bot_token_expires_in=43_200,
        user_id="U9",
        user_token="xoxp-user",
    )
    await installs.async_save(installation)
    assert await installs.owners() == ["team:T0009"]
    bot = await installs.async_find_bot(enterprise_id=None, team_id="T0009")
    assert bot is not None
    fresh = Bot(**{**bot.to_dict_for_copying(), "bot_token": "xoxe.xoxb-new"})
    fresh.bot_refresh_token = "xoxe-1-new"
    assert await installs.save_refreshed("team:T0009", "xoxe-1-old", fresh)
    assert not await installs.save_refreshed("team:T0009", "xoxe-1-old", fresh)  # used already
    latest = await installs.async_find_installation(enterprise_id=None, team_id="T0009")
    mine = await installs.async_find_installation(enterprise_id=None, team_id="T0009", user_id="U9")
    assert latest is not None and latest.bot_token == "xoxe.xoxb-new"
    assert mine is not None and mine.bot_token == "xoxe.xoxb-new"
    await installs.async_delete_bot(enterprise_id=None, team_id="T0009")
    assert await installs.owners() == []
    assert await installs.async_find_bot(enterprise_id=None, team_id="T0009") is None
