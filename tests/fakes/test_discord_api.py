"""The fake Discord's command registration and interaction endpoints, driven by the real
discord.py: what they take, and the errors Discord answers what it refuses with."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import discord
import pytest
from discord.http import HTTPClient

from tests.fakes.discord_api import FakeDiscord

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"


@pytest.fixture
async def http(fake_discord: FakeDiscord) -> AsyncIterator[HTTPClient]:
    client = HTTPClient(asyncio.get_running_loop())
    await client.static_login(fake_discord.token)
    yield client
    await client.close()


@pytest.fixture
async def webhooks() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def command(name: str = "ask", **fields: Any) -> dict[str, Any]:
    return {"name": name, "description": "Ask something", "type": 1, **fields}


async def refused(call: Any) -> tuple[int, int]:
    with pytest.raises(discord.HTTPException) as caught:
        await call
    return caught.value.status, caught.value.code


async def test_a_bulk_overwrite_returns_the_commands_with_ids_kept_by_name(
    fake_discord: FakeDiscord, http: HTTPClient
) -> None:
    app = fake_discord.application_id
    first = await http.bulk_upsert_global_commands(
        app, [command("ask", integration_types=[0, 1], contexts=[0, 1, 2])]
    )
    again = await http.bulk_upsert_global_commands(app, [command("ask"), command("other")])
    in_guild = await http.bulk_upsert_guild_commands(app, GUILD, [command("ask")])
    assert first[0]["id"] and first[0]["application_id"] == app
    assert first[0]["integration_types"] == [0, 1] and first[0]["contexts"] == [0, 1, 2]
    assert again[0]["id"] == first[0]["id"] and again[1]["id"] != first[0]["id"]
    assert [c["name"] for c in fake_discord.commands["global"]] == ["ask", "other"]
    assert in_guild[0]["guild_id"] == GUILD and fake_discord.commands[GUILD] == in_guild


@pytest.mark.parametrize(
    "body",
    [
        [command("Ask")],  # upper case
        [command("a" * 33)],
        [command("two words")],
        [command(description="")],
        [command(description="d" * 101)],
        [command(integration_types=[2])],
        [command(integration_types=[])],
        [command(contexts=[3])],
        [command(contexts=["0"])],
        [command("ask"), command("ask")],
        [command(options=[{"name": f"o{i}", "type": 3, "description": "x"} for i in range(26)])],
    ],
)
async def test_a_command_discord_would_refuse_is_an_invalid_form_body(
    fake_discord: FakeDiscord, http: HTTPClient, body: list[dict[str, Any]]
) -> None:
    app = fake_discord.application_id
    assert await refused(http.bulk_upsert_global_commands(app, body)) == (400, 50035)
    assert await refused(http.bulk_upsert_guild_commands(app, GUILD, body)) == (400, 50035)
    assert "global" not in fake_discord.commands and GUILD not in fake_discord.commands


async def test_more_than_a_hundred_commands_reach_the_limit(
    fake_discord: FakeDiscord, http: HTTPClient
) -> None:
    app = fake_discord.application_id
    hundred = [command(f"c{i}") for i in range(100)]
    assert len(await http.bulk_upsert_global_commands(app, hundred)) == 100
    too_many = [*hundred, command("c100")]
    assert await refused(http.bulk_upsert_global_commands(app, too_many)) == (400, 30032)
    assert len(fake_discord.commands["global"]) == 100


async def test_a_command_is_offered_only_where_its_registration_allows(
    fake_discord: FakeDiscord, http: HTTPClient
) -> None:
    app, alice = fake_discord.application_id, fake_discord.user("42")
    await http.bulk_upsert_global_commands(
        app, [command("anywhere", integration_types=[0, 1], contexts=[0, 1, 2]), command("plain")]
    )
    await http.bulk_upsert_guild_commands(app, GUILD, [command("here")])
    used = fake_discord.invoke("anywhere", CHANNEL, alice, context=2, user_install=True)
    assert used["authorizing_integration_owners"] == {"1": "42"} and used["context"] == 2
    assert "guild_id" not in used and used["data"]["name"] == "anywhere"
    in_guild = fake_discord.invoke("here", CHANNEL, alice, guild_id=GUILD)
    assert in_guild["data"]["guild_id"] == GUILD
    assert in_guild["authorizing_integration_owners"] == {"0": GUILD}
    for name, where in (
        ("plain", {"context": 0, "guild_id": GUILD, "user_install": True}),
        ("here", {"context": 2, "user_install": True}),
        ("missing", {"guild_id": GUILD}),
    ):
        with pytest.raises(AssertionError, match="offers no"):
            fake_discord.invoke(name, CHANNEL, alice, **where)


async def test_an_unknown_or_expired_interaction_is_refused_as_discord_does(
    fake_discord: FakeDiscord, webhooks: aiohttp.ClientSession
) -> None:
    async def answer(interaction: dict[str, Any], token: str | None = None) -> tuple[int, Any]:
        token = token or interaction["token"]
        url = f"{fake_discord.api_url}/interactions/{interaction['id']}/{token}/callback"
        async with webhooks.post(url, json={"type": 5}) as response:
            return response.status, (await response.json()).get("code")

    stale, fresh = (fake_discord.interaction(CHANNEL, "q", fake_discord.user("42")) for _ in "ab")
    assert await answer(stale, "itoken-unknown") == (404, 10062)
    fake_discord.expire(stale["token"])
    assert await answer(stale) == (404, 10062)
    assert (await answer(fresh))[0] == 200
    assert await answer(fresh) == (400, 40060)  # acknowledged already
    followup = discord.Webhook.partial(
        int(fake_discord.application_id), fresh["token"], session=webhooks
    )
    sent = await followup.send("the answer", wait=True)
    assert fake_discord.messages[str(sent.id)]["interaction_token"] == fresh["token"]
    fake_discord.expire(fresh["token"])
    for late in (followup.send("too late", wait=True), followup.edit_message(sent.id, content="x")):
        assert await refused(late) == (401, 50027)
    assert fake_discord.messages[str(sent.id)]["content"] == "the answer"


async def test_components_discord_would_refuse_are_an_invalid_form_body(
    fake_discord: FakeDiscord, http: HTTPClient
) -> None:
    button = {"type": 2, "style": 2, "label": "ok", "custom_id": "f:up"}
    fine = await http.request(
        discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=CHANNEL),
        json={"content": "hi", "components": [{"type": 1, "components": [button]}]},
    )
    assert fake_discord.messages[fine["id"]]["components"][0]["components"] == [button]
    for rows in (
        [button],  # a button outside an action row
        [{"type": 1, "components": [button] * 6}],
        [{"type": 1, "components": [{**button, "custom_id": "x" * 101}]}],
        [{"type": 1, "components": [{**button, "label": None}]}],
        [{"type": 1, "components": [{**button, "style": 9}]}],
    ):
        route = discord.http.Route("POST", "/channels/{channel_id}/messages", channel_id=CHANNEL)
        call = http.request(route, json={"content": "hi", "components": rows})
        assert await refused(call) == (400, 50035)
    assert len(fake_discord.messages) == 1


async def test_a_user_install_alone_gets_five_follow_ups_a_guild_install_more(
    fake_discord: FakeDiscord, webhooks: aiohttp.ClientSession
) -> None:
    alice = fake_discord.user("42")
    for user_install, allowed in ((True, 5), (False, 7)):
        interaction = fake_discord.interaction(
            CHANNEL, "q", alice, guild_id=GUILD, user_install=user_install
        )
        fake_discord.callbacks[interaction["token"]] = {"type": 5}
        followup = discord.Webhook.partial(
            int(fake_discord.application_id), interaction["token"], session=webhooks
        )
        for _ in range(allowed):
            await followup.send("part", wait=True)
        if user_install:
            assert await refused(followup.send("one too many", wait=True)) == (400, 40094)
