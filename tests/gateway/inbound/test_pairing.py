"""Pairing: codes against a real Redis, the access check at ingest, `gateway users`."""

from __future__ import annotations

import asyncio
import json
import subprocess

import redis.asyncio as aioredis

from gateway.inbound.ingest import Ingest, Receipt
from gateway.inbound.pairing import ALPHABET, CODE_LENGTH, MAX_FAILURES, Pairing
from gateway.state.keys import Keys
from tests.support.cli_runs import clean_env, gateway
from tests.support.helpers import inbound, settings


async def test_a_stranger_asking_again_gets_the_same_code(redis_client: aioredis.Redis) -> None:
    pairing = Pairing(redis_client)
    code = await pairing.request("telegram:1")
    assert code is not None and len(code) == CODE_LENGTH and set(code) <= set(ALPHABET)
    assert await pairing.request("telegram:1") == code
    assert await pairing.request("telegram:2") not in (None, code)


async def test_at_most_three_codes_wait_per_platform(redis_client: aioredis.Redis) -> None:
    pairing = Pairing(redis_client)
    codes = [await pairing.request(f"telegram:{i}") for i in range(4)]
    assert None not in codes[:3] and codes[3] is None
    assert await pairing.request("discord:9") is not None
    assert codes[0] is not None and (await pairing.approve(codes[0]))[0] == "approved"
    assert await pairing.request("telegram:3") is not None  # an approval frees a place


async def test_an_approved_code_lets_its_user_in_once(redis_client: aioredis.Redis) -> None:
    pairing = Pairing(redis_client)
    code = await pairing.request("discord:42")
    assert code is not None
    assert await pairing.approve(code.lower()[:4] + "-" + code[4:]) == ("approved", "discord:42")
    assert await pairing.is_paired("discord:42")
    assert await pairing.approve(code) == ("unknown", "")
    assert await pairing.paired() == ["discord:42"]


async def test_an_expired_code_is_refused_and_frees_its_place(
    redis_client: aioredis.Redis,
) -> None:
    pairing = Pairing(redis_client, code_ttl=0.1)
    codes = [await pairing.request(f"telegram:{i}") for i in range(3)]
    assert await pairing.request("telegram:3") is None
    await asyncio.sleep(0.15)
    assert codes[0] is not None and await pairing.approve(codes[0]) == ("unknown", "")
    assert not await pairing.is_paired("telegram:0")
    assert await pairing.request("telegram:3") is not None


async def test_revoking_a_user_shuts_them_out(redis_client: aioredis.Redis) -> None:
    pairing = Pairing(redis_client)
    code = await pairing.request("telegram:5")
    assert code is not None
    await pairing.approve(code)
    assert await pairing.revoke("telegram:5")
    assert not await pairing.is_paired("telegram:5")
    assert not await pairing.revoke("telegram:5")


async def test_wrong_codes_lock_approval_even_for_a_right_one(
    redis_client: aioredis.Redis,
) -> None:
    pairing = Pairing(redis_client)
    code = await pairing.request("telegram:7")
    assert code is not None
    for _ in range(MAX_FAILURES):
        assert await pairing.approve("WRONG234") == ("unknown", "")
    status, seconds = await pairing.approve(code)
    assert status == "locked" and int(seconds) > 0
    assert not await pairing.is_paired("telegram:7")
    await redis_client.delete(Keys.PAIRING_FAILURES)  # the window is over
    assert await pairing.approve(code) == ("approved", "telegram:7")


async def _notices(redis: aioredis.Redis, platform: str) -> list[str]:
    entries = await redis.xrange(Keys.jobs(platform, 0))
    return [json.loads(f["payload"])["text"] for _, f in entries if f["kind"] == "notice"]


async def test_a_paired_stranger_is_let_in_by_the_access_check(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url, GATEWAY_PAIRING=True), redis_client)
    assert await ingest.receive(inbound("hi", platform="telegram", user="99")) == Receipt.REFUSED
    (notice,) = await _notices(redis_client, "telegram")
    code = await Pairing(redis_client).request("telegram:99")
    assert code is not None and f"`{code}`" in notice and "gateway users approve" in notice
    await Pairing(redis_client).approve(code)
    assert await ingest.receive(inbound("hi", platform="telegram", user="99")) == Receipt.QUEUED
    await Pairing(redis_client).revoke("telegram:99")
    assert await ingest.receive(inbound("hi", platform="telegram", user="99")) == Receipt.REFUSED


async def test_without_pairing_a_paired_user_is_still_a_stranger(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    await redis_client.hset(Keys.PAIRED, "telegram:99", "1")
    ingest = Ingest(settings(redis_url), redis_client)
    assert await ingest.receive(inbound("hi", platform="telegram", user="99")) == Receipt.REFUSED
    (notice,) = await _notices(redis_client, "telegram")
    assert "GATEWAY_ALLOWED_USERS" in notice


async def test_the_operator_approves_lists_and_revokes_from_the_command_line(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    code = await Pairing(redis_client).request("discord:123")
    assert code is not None

    def users(*args: str) -> subprocess.CompletedProcess[str]:
        env = clean_env(REDIS_URL=redis_url)
        return subprocess.run(
            gateway("users", *args), capture_output=True, text=True, timeout=60, env=env
        )

    listed = users("list", "--json")
    assert json.loads(listed.stdout) == {"paired": [], "pending": {code: "discord:123"}}
    wrong = users("approve", "ZZZZ2222")
    assert wrong.returncode == 1 and "no such pending code" in wrong.stderr
    approved = users("approve", code)
    assert approved.returncode == 0 and approved.stdout.strip() == "approved discord:123"
    assert users("revoke", "discord:123").returncode == 0
    assert not await Pairing(redis_client).is_paired("discord:123")
    missing = users("approve")
    assert missing.returncode == 2 and "needs a CODE" in missing.stderr


async def test_an_admin_approves_a_code_in_a_dm_and_nobody_else_can(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    admin = "telegram:42"  # named by the operator in GATEWAY_ALLOWED_USERS
    values = {"GATEWAY_PAIRING": True, "GATEWAY_ALLOWED_USERS": admin}
    ingest = Ingest(settings(redis_url, **values), redis_client)
    stranger = await Pairing(redis_client).request("discord:99")
    paired = await Pairing(redis_client).request("telegram:7")
    assert stranger is not None and paired is not None
    await Pairing(redis_client).approve(paired)

    async def approve(text: str, user: str = "42", dm: bool = True) -> str:
        message = inbound(text, platform="telegram", user=user, dm=dm, mentions_bot=True)
        outcome = await ingest.receive(message)
        assert outcome == Receipt.COMMAND
        return (await _notices(redis_client, "telegram"))[-1]

    # A paired user may talk to the bot, but not let others in; nor may anyone in a group.
    assert "Only the bot's admins" in await approve(f"/approve {stranger}", user="7")
    assert "direct message" in await approve(f"/approve {stranger}", dm=False)
    assert not await Pairing(redis_client).is_paired("discord:99")
    assert "Usage: /approve CODE" in await approve("/approve")
    assert "No such pending code" in await approve("/approve ZZZZ2222")
    lowercase = stranger.lower()[:4] + "-" + stranger.lower()[4:]  # as a person types it
    assert await approve(f"/approve {lowercase}") == "Approved: `discord:99` may use the bot now."
    assert await Pairing(redis_client).is_paired("discord:99")


async def test_wrong_codes_in_chat_lock_approving_like_the_command_line(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    values = {"GATEWAY_PAIRING": True, "GATEWAY_ALLOWED_USERS": "telegram:42"}
    ingest = Ingest(settings(redis_url, **values), redis_client)
    code = await Pairing(redis_client).request("discord:99")
    for attempt in range(MAX_FAILURES + 1):
        guess = code if attempt == MAX_FAILURES else f"WRONG{attempt:03d}"
        await ingest.receive(inbound(f"/approve {guess}", platform="telegram", user="42"))
    last = (await _notices(redis_client, "telegram"))[-1]
    assert last.startswith("Too many wrong codes; approving is locked for ")
    assert not await Pairing(redis_client).is_paired("discord:99")
