"""Each Lua script against a real Redis, one test per fence it enforces."""

from __future__ import annotations

import json

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from gateway.state.counters import BUMP, Counters
from gateway.state.keys import DEDUPE_TTL, Keys
from gateway.state.scripts import load
from gateway.state.session import Claim, Finish, SessionStore
from tests.support.helpers import inbound

KEY = "test:W:C1"


@pytest.fixture
def sessions(redis_client: aioredis.Redis) -> SessionStore:
    return SessionStore(redis_client)


async def _claimed(sessions: SessionStore, token: str = "t1") -> Claim:
    await sessions.append_user(inbound("hello"))
    claim = await sessions.claim(KEY, token, 30)
    assert claim.ok and claim.has_work
    return claim


def test_every_script_names_its_keys_and_arguments() -> None:
    for name in (
        "ingest",
        "first_delivery",
        "enqueue",
        "claim",
        "finish",
        "renew",
        "release",
        "reset",
        "complete",
        "reply_state",
        "store_segment",
        "pace_acquire",
        "pace_ban",
        "prune",
        "step",
        "enqueue_turn",
        "approval_open",
        "decide",
        "rate_limit",
        "pairing_request",
        "pairing_approve",
        "retake",
    ):
        script = load(name)
        assert script.keys and script.args, name


async def test_a_script_refuses_keys_out_of_its_names(redis_client: aioredis.Redis) -> None:
    release = load("release").bind(redis_client)
    with pytest.raises(TypeError, match="missing"):
        await release(keys={"lock": "x"}, args={"token": "t"})


async def test_a_claim_knows_a_turn_claimed_before_as_a_rerun(sessions: SessionStore) -> None:
    first = await _claimed(sessions)
    assert not first.rerun
    await sessions.redis.delete(Keys.lease(KEY))  # its run died; the lease expired
    again = await sessions.claim(KEY, "t2", 30)
    assert again.turn_id == first.turn_id and again.rerun
    entry = {"id": "a1", "role": "assistant", "text": "hi"}
    assert await sessions.finish(KEY, "t2", again, entry) is Finish.RECORDED
    await sessions.append_user(inbound("next"))
    following = await sessions.claim(KEY, "t3", 30)
    assert following.has_work and following.turn_id != first.turn_id and not following.rerun


async def test_finish_records_once_for_the_holder(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    entry = {"id": "a1", "role": "assistant", "text": "hi"}
    assert await sessions.finish(KEY, "t1", claim, entry) is Finish.RECORDED
    assert await sessions.finish(KEY, "t1", claim, entry) is Finish.SUPERSEDED
    assert [e["role"] for e in await sessions.history(KEY)] == ["user", "assistant"]


async def test_finish_on_a_stolen_lease_writes_nothing(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    await sessions.redis.set(Keys.lease(KEY), "thief")
    outcome = await sessions.finish(KEY, "t1", claim, {"id": "a", "role": "assistant"})
    assert outcome is Finish.LOST
    assert len(await sessions.history(KEY)) == 1


async def test_finish_on_an_expired_lease_records_when_nothing_moved(
    sessions: SessionStore,
) -> None:
    claim = await _claimed(sessions)
    await sessions.redis.delete(Keys.lease(KEY))
    outcome = await sessions.finish(KEY, "t1", claim, {"id": "a", "role": "assistant"})
    assert outcome is Finish.RECORDED


async def test_finish_on_an_expired_lease_after_another_claim_writes_nothing(
    sessions: SessionStore,
) -> None:
    claim = await _claimed(sessions)
    await sessions.redis.delete(Keys.lease(KEY))
    await sessions.append_user(inbound("more"))
    assert (await sessions.claim(KEY, "t2", 30)).ok  # moves the new message into history
    await sessions.redis.delete(Keys.lease(KEY))
    outcome = await sessions.finish(KEY, "t1", claim, {"id": "a", "role": "assistant"})
    assert outcome is Finish.LOST


@pytest.mark.parametrize(
    ("moved", "taken"),
    [
        ("nothing", True),
        ("taken again already", True),  # by this holder's other renewal, just before
        ("held by another", False),
        ("claimed by another", False),
        ("reset", False),
        ("answered", False),
    ],
)
async def test_retake_takes_an_expired_lease_only_when_nothing_moved(
    sessions: SessionStore, moved: str, taken: bool
) -> None:
    claim = await _claimed(sessions)
    redis, lease, meta = sessions.redis, Keys.lease(KEY), Keys.meta(KEY)
    await redis.delete(lease)  # expired
    if moved == "taken again already":
        await redis.set(lease, "t1", px=500)
    elif moved == "held by another":
        await redis.set(lease, "t2")
    elif moved == "claimed by another":
        assert (await sessions.claim(KEY, "t2", 30)).ok
        await redis.delete(lease)  # and that run's lease ran out too
    elif moved == "reset":
        await sessions.reset(KEY)
    elif moved == "answered":
        await redis.hset(meta, "answered", claim.length)
    retake = load("retake").bind(redis)
    args = {"token": "t1", "ttl_ms": 30_000, "epoch": claim.epoch, "answered": claim.answered}
    assert await retake(keys={"lease": lease, "meta": meta}, args=args) == int(taken)
    assert (await redis.get(lease) == "t1") is taken
    if taken:
        assert await redis.pttl(lease) > 1_000  # a full TTL from now


async def test_finish_after_a_reset_is_superseded(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    await sessions.reset(KEY)
    outcome = await sessions.finish(KEY, "t1", claim, {"id": "a", "role": "assistant"})
    assert outcome is Finish.SUPERSEDED
    assert await sessions.history(KEY) == []


async def test_finish_without_a_reply_gives_injections_back(sessions: SessionStore) -> None:
    await sessions.inject(KEY, "old")
    claim = await _claimed(sessions)
    await sessions.inject(KEY, "new")
    assert await sessions.finish(KEY, "t1", claim, None) is Finish.RECORDED
    assert await sessions.redis.lrange(Keys.injections(KEY), 0, -1) == ["old", "new"]


async def test_a_running_turns_text_is_fenced_by_lease_and_epoch(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    assert await sessions.show_progress(KEY, "t1", claim, text="so far")
    await sessions.reset(KEY)
    assert not await sessions.show_progress(KEY, "t1", claim, text="after reset", ids=["9"])
    assert await sessions.live(KEY) is None
    assert await sessions.redis.hlen(Keys.replies(KEY)) == 0


async def test_reply_ids_are_kept_after_the_lease_is_lost(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    await sessions.redis.set(Keys.lease(KEY), "thief")
    await sessions.show_progress(KEY, "t1", claim, text="late", ids=["7"])
    assert json.loads(await sessions.redis.hget(Keys.replies(KEY), "0.0")) == ["7"]
    assert await sessions.live(KEY) is None


async def test_ingest_marks_the_thread_as_taken_part_in(sessions: SessionStore) -> None:
    await sessions.append_user(inbound("first", dm=False))
    assert await sessions.participated(KEY)


async def test_ingest_does_not_wait_on_a_marker_whose_job_is_gone(sessions: SessionStore) -> None:
    first = inbound("hello")
    _, job = await sessions.append_user(first)
    assert job is not None
    await sessions.redis.delete(sessions.stream("test", KEY))  # a console's stream, at its exit
    _, second_job = await sessions.append_user(inbound("again"))
    assert second_job is not None
    assert await sessions.owed(KEY) == 1


async def test_complete_counts_a_job_once(redis_client: aioredis.Redis) -> None:
    sessions = SessionStore(redis_client)
    await redis_client.xgroup_create(
        sessions.stream("test", KEY), "gw-workers", id="0", mkstream=True
    )
    _, job_id = await sessions.append_user(inbound("hello"))
    await redis_client.xreadgroup("gw-workers", "w", {sessions.stream("test", KEY): ">"})
    complete = load("complete").bind(redis_client)
    keys = {
        "stream": sessions.stream("test", KEY),
        "meta": Keys.meta(KEY),
        "side_in_flight": Keys.side_in_flight(KEY),
    }
    args = {"group": "gw-workers", "job": str(job_id)}
    assert await complete(keys=keys, args=args) == 1
    assert await complete(keys=keys, args=args) == 0
    assert await sessions.owed(KEY) == 0


def _call(call_id: str) -> dict[str, object]:
    return {"id": call_id, "name": "srv__lookup", "arguments": "{}"}


async def _stepped(sessions: SessionStore, claim: Claim) -> int:
    """A tool loop opened by the holder: its call recorded, no result yet."""
    step = {"id": "s1", "role": "assistant", "text": "", "tool_calls": [_call("c1")]}
    length = await sessions.record_steps(KEY, "t1", claim, claim.length, [step], loop_open=True)
    assert length == claim.length + 1
    return length


async def test_steps_are_recorded_in_order_for_the_holder(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    length = await _stepped(sessions, claim)
    result = {"id": "r1", "role": "tool", "tool_call_id": "c1", "text": "found"}
    assert await sessions.record_steps(KEY, "t1", claim, length, [result], loop_open=True) == 3
    assert [e["id"] for e in (await sessions.history(KEY))[1:]] == ["s1", "r1"]


async def test_a_step_on_a_stolen_or_expired_lease_writes_nothing(sessions: SessionStore) -> None:
    claim = await _claimed(sessions)
    await sessions.redis.set(Keys.lease(KEY), "thief")
    step = {"id": "s1", "role": "assistant", "tool_calls": [_call("c1")]}
    assert await sessions.record_steps(KEY, "t1", claim, 1, [step], loop_open=True) is None
    await sessions.redis.delete(Keys.lease(KEY))
    assert await sessions.record_steps(KEY, "t1", claim, 1, [step], loop_open=True) is None
    assert len(await sessions.history(KEY)) == 1


async def test_a_step_after_a_reset_or_from_a_stale_length_writes_nothing(
    sessions: SessionStore,
) -> None:
    claim = await _claimed(sessions)
    step = {"id": "s1", "role": "assistant", "tool_calls": [_call("c1")]}
    assert await sessions.record_steps(KEY, "t1", claim, 0, [step], loop_open=True) is None
    await sessions.redis.hset(Keys.meta(KEY), "epoch", "7")
    assert await sessions.record_steps(KEY, "t1", claim, 1, [step], loop_open=True) is None
    assert len(await sessions.history(KEY)) == 1


async def test_an_open_loop_keeps_new_messages_in_the_inbox_until_it_is_recorded(
    sessions: SessionStore,
) -> None:
    claim = await _claimed(sessions)
    length = await _stepped(sessions, claim)
    await sessions.append_user(inbound("meanwhile"))
    await sessions.redis.delete(Keys.lease(KEY))  # the worker died mid-loop
    again = await sessions.claim(KEY, "t2", 30)
    assert again.turn_id == claim.turn_id and again.length == length
    assert [e["text"] for e in await sessions.inbox(KEY)] == ["meanwhile"]
    entry = {"id": "a1", "role": "assistant", "text": "done"}
    assert await sessions.finish(KEY, "t2", again, entry, length=length) is Finish.RECORDED
    after = await sessions.claim(KEY, "t3", 30)
    assert after.has_work and after.view is not None
    assert after.view.entries[-1]["text"] == "meanwhile"


async def test_a_turn_without_a_message_is_enqueued_once_while_its_job_lives(
    sessions: SessionStore,
) -> None:
    first = await sessions.enqueue_turn(KEY, "test")
    assert first is not None
    assert await sessions.enqueue_turn(KEY, "test") is None
    assert await sessions.owed(KEY) == 1
    await sessions.redis.xdel(sessions.stream("test", KEY), first)  # its job is gone
    again = await sessions.enqueue_turn(KEY, "test")
    assert again is not None and again != first
    assert await sessions.owed(KEY) == 1


async def test_claim_answers_the_settings_version_with_and_without_work(
    sessions: SessionStore, redis_client: aioredis.Redis
) -> None:
    assert (await sessions.claim(KEY, "t1", 30)).settings_version == 0  # none ever set
    await redis_client.set(Keys.settings_version(KEY), 7)
    idle = await sessions.claim(KEY, "t1", 30)
    assert idle.ok and not idle.has_work and idle.settings_version == 7
    await redis_client.incr(Keys.settings_version(KEY))
    claim = await _claimed(sessions)
    assert claim.view is not None and claim.settings_version == 8


async def test_ingest_gives_an_early_job_the_settings_version_it_arrived_under(
    sessions: SessionStore, redis_client: aioredis.Redis
) -> None:
    await redis_client.set(Keys.settings_version(KEY), 4)
    message = inbound("hello")
    await sessions.append_user(message)
    [[_, [[_, fields]]]] = await redis_client.xread({sessions.stream("test", KEY): "0"})
    payload = json.loads(fields["payload"])
    assert payload["base"] == "0.0" and payload["settings"] == 4


async def test_counters_are_added_and_kept_alive_in_one_step(
    redis_client: aioredis.Redis,
) -> None:
    bump = BUMP.bind(redis_client)
    await redis_client.hset("c:a", "held", "1.5")
    counters = Counters()
    counters.hincrby("c:a", "tokens", 9_007_199_254_740_993)  # past a double's integers
    counters.hincrbyfloat("c:a", "held", -0.25)
    counters.hincrbyfloat("c:b", "usd", 1e-05)
    counters.expire("c:a", 120)
    counters.hincrby("c:a", "tokens", 1)
    await counters.write(bump)
    assert await redis_client.hgetall("c:a") == {"tokens": "9007199254740994", "held": "1.25"}
    assert float(await redis_client.hget("c:b", "usd") or 0) == pytest.approx(1e-05)
    assert 0 < await redis_client.ttl("c:a") <= 120 and await redis_client.ttl("c:b") == -1


async def test_a_counter_on_a_damaged_key_fails_alone_and_is_reported(
    redis_client: aioredis.Redis,
) -> None:
    """As in a MULTI, the writes around a refused one are made (a hold is still let go
    of when one usage key is damaged), and the caller hears of the refusal."""
    await redis_client.set("c:string", "not a hash")
    counters = Counters()
    counters.hincrby("c:first", "n", 1)
    counters.hincrby("c:string", "n", 1)
    counters.hincrbyfloat("c:last", "held", -2.0)
    with pytest.raises(ResponseError, match="WRONGTYPE"):
        await counters.write(BUMP.bind(redis_client))
    assert await redis_client.hget("c:first", "n") == "1"
    assert await redis_client.hget("c:last", "held") == "-2"


async def test_a_script_of_any_keys_refuses_keys_by_name(redis_client: aioredis.Redis) -> None:
    with pytest.raises(TypeError, match="a list of keys"):
        await BUMP.bind(redis_client)(keys={"a": "b"}, args={"ops": "[]"})


async def test_one_dedupe_rule_for_a_look_a_mark_and_the_ingest_step(
    sessions: SessionStore,
) -> None:
    first = inbound("hello", event_id="E1")
    assert await sessions.first_delivery(first, mark=False)
    assert await sessions.first_delivery(first, mark=False)  # a look marks nothing
    assert (await sessions.append_user(first))[0]  # the ingest step marks it
    assert not await sessions.first_delivery(first, mark=False)
    assert not await sessions.first_delivery(first)
    second = inbound("again", event_id="E2")
    assert await sessions.first_delivery(second)
    assert not await sessions.first_delivery(second)  # marked by the first call
    assert not (await sessions.append_user(second))[0]  # the ingest step sees the same mark
    assert 0 < await sessions.redis.ttl(Keys.seen(KEY, "E2")) <= DEDUPE_TTL
