"""The sign-in lock, kept in Redis so every `gateway web` shares it: an address that tried
too often is refused even with the right token, others are not; wrong tokens from
many addresses lock everyone; a right token clears its address's count."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from gateway.console.access import ADDRESS_ATTEMPTS, ANYWHERE_FAILURES, Access, clean_name
from gateway.console.audit import AuditLog
from gateway.state.keys import Keys
from tests.gateway.console.conftest import ORIGIN, TOKEN, Console, build


async def test_an_address_is_locked_after_repeated_failures_on_every_web_process(
    console: Console, redis_client: Redis
) -> None:
    for _ in range(ADDRESS_ATTEMPTS):
        wrong = await console.client.post("/admin/signin", data={"token": "nope"}, headers=ORIGIN)
        assert wrong.status_code == 401 and "Wrong token" in wrong.text
    locked = await console.client.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
    assert locked.status_code == 429 and "locked for" in locked.text
    assert "set-cookie" not in locked.headers
    other_process, _ = build(redis_client, console.settings)  # a second `gateway web`
    async with other_process:
        again = await other_process.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
        assert again.status_code == 429
    elsewhere, _ = build(redis_client, console.settings, address="10.0.0.9")
    async with elsewhere:
        ok = await elsewhere.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
        assert ok.status_code == 303
    refused = [e for e in await AuditLog(redis_client).recent() if e.action == "sign-in refused"]
    assert len(refused) == ADDRESS_ATTEMPTS and refused[0].address == "127.0.0.1"


async def test_parallel_guesses_cannot_outrun_the_lock(redis_client: Redis) -> None:
    access = Access(redis_client, TOKEN)
    guesses = [access.sign_in(f"guess-{i}", "x", "10.1.1.1") for i in range(30)]
    results = await asyncio.gather(*guesses)
    assert sum(1 for r in results if not r.locked_for) == ADDRESS_ATTEMPTS
    assert int(await redis_client.get(Keys.admin_failures("*")) or 0) == ADDRESS_ATTEMPTS


async def test_many_addresses_failing_lock_everyone(redis_client: Redis) -> None:
    access = Access(redis_client, TOKEN)
    for i in range(ANYWHERE_FAILURES):
        await access.sign_in("wrong", "x", f"10.2.{i // ADDRESS_ATTEMPTS}.{i}")
    found = await access.sign_in(TOKEN, "x", "10.9.9.9")
    assert found.cookie is None and found.locked_for > 0


async def test_a_right_token_clears_its_address_and_the_cookie_is_not_stored(
    redis_client: Redis,
) -> None:
    access = Access(redis_client, TOKEN)
    for _ in range(ADDRESS_ATTEMPTS - 1):
        assert (await access.sign_in("wrong", "x", "10.3.3.3")).cookie is None
    signed = await access.sign_in(f"  {TOKEN} ", "x", "10.3.3.3")
    assert signed.cookie is not None
    assert await redis_client.exists(Keys.admin_failures("10.3.3.3")) == 0
    stored = [k async for k in redis_client.scan_iter(match="gw:admin:session:*")]
    assert len(stored) == 1 and signed.cookie not in stored[0]
    admin = await access.admin(signed.cookie)
    assert admin is not None and admin.address == "10.3.3.3"
    await access.sign_out(signed.cookie)
    assert await access.admin(signed.cookie) is None


def test_a_name_for_the_audit_log_is_checked() -> None:
    assert clean_name("  Dana   K ") == "Dana K"
    assert clean_name("") == "admin"
    assert clean_name("x" * 65) is None
    assert clean_name("bell\x07") is None
