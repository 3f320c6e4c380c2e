"""The approval store and decide.lua against a real Redis: one test per fence."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest
import redis.asyncio as aioredis

from gateway.approvals.store import Approval, ApprovalStore, Status
from gateway.inbound.ingest import Ingest, Verdict
from gateway.messages import Address, Decision
from gateway.state.keys import Keys
from gateway.state.session import SessionStore
from tests.support.helpers import inbound, settings

KEY = "test:W:C1"
ADDRESS = Address(platform="test", workspace="W", channel="C1")


@pytest.fixture
def sessions(redis_client: aioredis.Redis) -> SessionStore:
    return SessionStore(redis_client)


@pytest.fixture
def store(redis_client: aioredis.Redis, sessions: SessionStore) -> ApprovalStore:
    return ApprovalStore(redis_client, sessions)


async def _open(store: ApprovalStore, call_id: str = "call-1", timeout: float = 600) -> str:
    arguments = '{"path": "/tmp/x"}'
    return await store.open(KEY, "0.0", call_id, "files__delete", arguments, "U1", ADDRESS, timeout)


def _click(approval_id: str, user: str = "U1", approve: bool = True, event: str = "") -> Decision:
    return Decision(
        platform="test",
        approval_id=approval_id,
        user_id=user,
        approve=approve,
        event_id=event or f"click-{time.monotonic_ns()}",
        address=ADDRESS,
    )


async def _turn_jobs(redis: aioredis.Redis) -> list[dict[str, str]]:
    entries = cast(
        list[tuple[str, dict[str, str]]], await redis.xrange(Keys.session_jobs(KEY, "test"))
    )
    return [fields for _, fields in entries if fields["kind"] == "turn"]


async def _approval(store: ApprovalStore) -> Approval:
    found = await store.get(KEY, "0.0", "call-1")
    assert found is not None
    return found


async def test_an_opened_approval_is_pending_with_everything_its_turn_needs(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    await store.set_message(KEY, approval_id, "m-7")
    approval = await _approval(store)
    assert approval.approval_id == approval_id and len(approval_id) == 16
    assert (approval.tool, approval.arguments, approval.asker) == (
        "files__delete",
        '{"path": "/tmp/x"}',
        "U1",
    )
    assert (approval.status, approval.message_id, approval.address) == (
        Status.PENDING,
        "m-7",
        ADDRESS,
    )
    assert approval.deadline == pytest.approx(time.time() + 600, abs=5)
    assert await store.session_of(approval_id) == KEY
    assert await redis_client.zscore(Keys.APPROVALS_DUE, f"{KEY} {approval_id}") is not None
    assert await store.waiting(10) == [(KEY, approval_id)]


async def test_opening_the_same_call_twice_gives_one_id_and_one_record(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    first, second = await _open(store), await _open(store)
    assert first == second
    assert await redis_client.zcard(Keys.APPROVALS_DUE) == 1
    assert await _open(store, call_id="call-2") != first


async def test_the_asker_approves_and_the_continuation_turn_is_enqueued(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    assert await store.decide(_click(approval_id), KEY) == Verdict.APPROVED
    assert (await _approval(store)).status == Status.APPROVED
    assert [job["session"] for job in await _turn_jobs(redis_client)] == [KEY]
    assert await redis_client.zcard(Keys.APPROVALS_DUE) == 0


async def test_the_asker_declines(store: ApprovalStore, redis_client: aioredis.Redis) -> None:
    approval_id = await _open(store)
    assert await store.decide(_click(approval_id, approve=False), KEY) == Verdict.DECLINED
    assert (await _approval(store)).status == Status.DECLINED
    assert len(await _turn_jobs(redis_client)) == 1


async def test_someone_else_clicking_changes_nothing(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    assert await store.decide(_click(approval_id, user="U2"), KEY) == Verdict.NOT_YOURS
    assert (await _approval(store)).status == Status.PENDING
    assert await _turn_jobs(redis_client) == []
    assert await redis_client.zcard(Keys.APPROVALS_DUE) == 1


async def test_a_second_click_finds_it_closed(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    await store.decide(_click(approval_id), KEY)
    assert await store.decide(_click(approval_id, approve=False), KEY) == Verdict.CLOSED
    assert (await _approval(store)).status == Status.APPROVED
    assert len(await _turn_jobs(redis_client)) == 1


async def test_a_retried_delivery_of_a_click_gets_the_same_verdict_and_changes_nothing(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    click = _click(approval_id, event="E1")
    assert await store.decide(click, KEY) == Verdict.APPROVED
    await redis_client.xtrim(
        Keys.session_jobs(KEY, "test"), maxlen=0
    )  # the job ran; a second would show
    await redis_client.delete(Keys.queued(KEY))
    assert await store.decide(click, KEY) == Verdict.APPROVED
    assert await _turn_jobs(redis_client) == []


async def test_a_click_on_another_platform_is_closed(store: ApprovalStore) -> None:
    approval_id = await _open(store)
    click = _click(approval_id).model_copy(update={"platform": "slack"})
    assert await store.decide(click, KEY) == Verdict.CLOSED
    assert (await _approval(store)).status == Status.PENDING


async def test_no_second_turn_job_while_one_is_queued(
    store: ApprovalStore, sessions: SessionStore, redis_client: aioredis.Redis
) -> None:
    await sessions.append_user(inbound("hello"))  # its turn job is queued
    approval_id = await _open(store)
    assert await store.decide(_click(approval_id), KEY) == Verdict.APPROVED
    assert len(await _turn_jobs(redis_client)) == 1
    assert await sessions.owed(KEY) == 1


async def test_a_due_approval_times_out_and_its_turn_is_enqueued(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store, timeout=30)
    assert await store.expire_due(time.time()) == []  # not yet due
    assert await store.expire_due(time.time() + 31) == [KEY]
    assert (await _approval(store)).status == Status.TIMEOUT
    assert len(await _turn_jobs(redis_client)) == 1
    assert await redis_client.zcard(Keys.APPROVALS_DUE) == 0
    assert await store.decide(_click(approval_id), KEY) == Verdict.CLOSED


async def test_a_decided_approval_is_not_timed_out(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store, timeout=30)
    await store.decide(_click(approval_id, approve=False), KEY)
    await redis_client.zadd(Keys.APPROVALS_DUE, {f"{KEY} {approval_id}": 0})  # as if raced
    assert await store.expire_due(time.time()) == []
    assert (await _approval(store)).status == Status.DECLINED
    assert await redis_client.zcard(Keys.APPROVALS_DUE) == 0


async def test_a_click_after_the_deadline_is_closed_and_settles_it_as_timed_out(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store, timeout=0.001)
    deadline = (await _approval(store)).deadline
    while time.time() <= deadline:  # a click within the millisecond would be in time
        await asyncio.sleep(0.001)
    assert await store.decide(_click(approval_id), KEY) == Verdict.CLOSED
    assert (await _approval(store)).status == Status.TIMEOUT
    assert len(await _turn_jobs(redis_client)) == 1


async def test_close_removes_the_record_and_its_lookup(
    store: ApprovalStore, redis_client: aioredis.Redis
) -> None:
    approval_id = await _open(store)
    await store.decide(_click(approval_id), KEY)
    await store.close(KEY, approval_id)
    assert await store.get(KEY, "0.0", "call-1") is None
    assert await store.session_of(approval_id) is None
    assert await redis_client.exists(Keys.approvals(KEY)) == 0


async def test_a_reset_drops_the_sessions_approvals(
    store: ApprovalStore, sessions: SessionStore
) -> None:
    approval_id = await _open(store)
    await sessions.reset(KEY)
    assert await store.get(KEY, "0.0", "call-1") is None
    assert await store.decide(_click(approval_id), KEY) == Verdict.CLOSED
    assert await store.expire_due(time.time() + 3600) == []  # its due entry is skipped


# -- Ingest.decide ------------------------------------------------------------------


async def _ingest_with_approval(redis_url: str, redis: aioredis.Redis, **env: Any) -> Ingest:
    ingest = Ingest(settings(redis_url, **env), redis)
    await ingest.approvals.open(KEY, "0.0", "call-1", "t", "{}", "U1", ADDRESS, 600)
    return ingest


async def test_ingest_finds_the_session_from_the_approval_id(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = await _ingest_with_approval(redis_url, redis_client)
    approval = await ingest.approvals.get(KEY, "0.0", "call-1")
    assert approval is not None
    assert await ingest.decide(_click(approval.approval_id)) == Verdict.APPROVED
    assert len(await _turn_jobs(redis_client)) == 1


async def test_ingest_tells_a_stranger_not_yours_and_changes_nothing(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    # The asker is no longer allowed either: only the access rule can refuse here.
    ingest = await _ingest_with_approval(redis_url, redis_client, GATEWAY_ALLOWED_USERS="test:U9")
    approval = await ingest.approvals.get(KEY, "0.0", "call-1")
    assert approval is not None
    assert await ingest.decide(_click(approval.approval_id)) == Verdict.NOT_YOURS
    assert (await ingest.approvals.get(KEY, "0.0", "call-1")) == approval
    assert await _turn_jobs(redis_client) == []


async def test_ingest_finds_an_unknown_approval_closed(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    assert await ingest.decide(_click("A" * 16)) == Verdict.CLOSED
