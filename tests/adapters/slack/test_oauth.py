"""Installs into many workspaces: bolt's OAuth flow served by `gateway web`'s app, the real
slack-sdk exchanging codes with the fake Slack, installations in a real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest
from slack_sdk.oauth.installation_store import Installation

from adapters.slack.installations import RedisInstallationStore
from adapters.slack.workspaces import NotInstalled
from gateway.state.cipher import TokenCipher, WrongSecretKey
from gateway.state.keys import Keys
from tests.fakes.slack_api import CLIENT_ID, FakeSlack
from tests.support.slack_helpers import (
    OTHER_SECRET_KEY,
    SECRET_KEY,
    InstallsApp,
    installed_event,
    installs_app,
    message,
    team_mention,
)


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[InstallsApp]:
    async with installs_app(slack, redis_url) as app:
        yield app


def store(web: InstallsApp) -> RedisInstallationStore:
    return web.platform.installations()


async def raw_values(web: InstallsApp) -> str:
    """Every value in Redis, as one text (to look for a token in it)."""
    found = []
    async for key in web.redis.scan_iter("*"):
        kind = await web.redis.type(key)
        if kind == "string":
            found.append(str(await web.redis.get(key)))
        elif kind == "set":
            found.extend(await web.redis.smembers(key))
        elif kind == "hash":
            found.extend((await web.redis.hgetall(key)).values())
    return "\n".join(found)


async def test_install_redirects_to_slacks_authorize_page_with_the_apps_scopes(
    web: InstallsApp, slack: FakeSlack
) -> None:
    location, state = await web.start_install()
    url = urlsplit(location)
    assert f"{url.scheme}://{url.netloc}" == slack.url and url.path == "/oauth/v2/authorize"
    query = parse_qs(url.query)
    assert query["client_id"] == [CLIENT_ID]
    scopes = query["scope"][0].split(",")
    for scope in ("app_mentions:read", "chat:write", "im:history", "files:read", "users:read"):
        assert scope in scopes
    assert len(state) >= 20


async def test_an_install_stores_the_workspace_with_its_token_unreadable_in_redis(
    web: InstallsApp, slack: FakeSlack
) -> None:
    install = await web.install(slack, "T0002", team_name="Two")
    bot = await store(web).async_find_bot(enterprise_id=None, team_id="T0002")
    assert bot is not None
    assert (bot.bot_token, bot.bot_user_id) == (install.bot_token, "UBT0002")
    assert await web.platform.workspaces.token("T0002") == install.bot_token
    assert await store(web).owners() == ["team:T0002"]
    stored = await raw_values(web)
    assert "T0002" in stored  # the records are there, and readable around the token
    assert install.bot_token not in stored
    assert "secret" not in stored


async def test_two_workspaces_each_keep_their_own_token(web: InstallsApp, slack: FakeSlack) -> None:
    two = await web.install(slack, "T0002")
    three = await web.install(slack, "T0003")
    assert two.bot_token != three.bot_token
    assert await web.platform.workspaces.token("T0002") == two.bot_token
    assert await web.platform.workspaces.token("T0003") == three.bot_token
    with pytest.raises(NotInstalled):
        await web.platform.workspaces.token("T0004")


async def test_a_used_state_is_refused_and_exchanges_no_code(
    web: InstallsApp, slack: FakeSlack
) -> None:
    _, state = await web.start_install()
    first = await web.finish_install(slack.consent("T0002"), state)
    assert first.status_code == 200
    again = await web.finish_install(slack.consent("T0003"), state)
    assert again.status_code >= 400
    assert len(slack.calls_to("oauth.v2.access")) == 1
    assert await store(web).owners() == ["team:T0002"]


async def test_a_missing_or_unknown_state_is_refused(web: InstallsApp, slack: FakeSlack) -> None:
    await web.start_install()  # the browser holds a state cookie
    missing = await web.finish_install(slack.consent("T0002"), None)
    unknown = await web.finish_install(slack.consent("T0002"), "not-a-state-we-issued")
    assert (missing.status_code >= 400, unknown.status_code >= 400) == (True, True)
    assert slack.calls_to("oauth.v2.access") == []
    assert await store(web).owners() == []


async def test_an_expired_state_is_refused(web: InstallsApp, slack: FakeSlack) -> None:
    _, state = await web.start_install()
    [key] = [k async for k in web.redis.scan_iter("gw:oauth_state:*")]
    assert 0 < await web.redis.ttl(key) <= 600
    await web.redis.pexpire(key, 1)
    while await web.redis.exists(key):  # until Redis has let it go
        await asyncio.sleep(0.005)
    response = await web.finish_install(slack.consent("T0002"), state)
    assert response.status_code >= 400
    assert slack.calls_to("oauth.v2.access") == []
    assert await store(web).owners() == []


@pytest.mark.parametrize(("error", "status"), [("invalid_code", 200), ("internal_error", 500)])
async def test_a_failed_code_exchange_shows_an_error_page_and_stores_nothing(
    web: InstallsApp, slack: FakeSlack, error: str, status: int
) -> None:
    _, state = await web.start_install()
    slack.fail_next("oauth.v2.access", error, status=status)
    response = await web.finish_install(slack.consent("T0002"), state)
    assert response.status_code >= 400
    assert "text/html" in response.headers["content-type"]
    assert len(slack.calls_to("oauth.v2.access")) == 1
    assert await store(web).owners() == []
    assert [k async for k in web.redis.scan_iter(Keys.installations_match("slack"))] == []


async def test_app_uninstalled_removes_that_workspace_only(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    three = await web.install(slack, "T0003")
    uninstalled = installed_event({"type": "app_uninstalled"}, two)
    assert (await web.post_event(uninstalled)).status_code == 200
    assert await store(web).owners() == ["team:T0003"]
    assert await store(web).async_find_installation(enterprise_id=None, team_id="T0002") is None
    web.platform.workspaces.forget("T0002")
    with pytest.raises(NotInstalled):
        await web.platform.workspaces.token("T0002")
    assert await web.platform.workspaces.token("T0003") == three.bot_token


async def test_tokens_revoked_for_the_bot_removes_the_bot(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    revoked = installed_event(
        {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": [two.bot_user_id]}}, two
    )
    assert (await web.post_event(revoked)).status_code == 200
    assert await store(web).owners() == []
    assert await store(web).async_find_bot(enterprise_id=None, team_id="T0002") is None


async def sessions_of(web: InstallsApp, team_id: str) -> list[str]:
    """The inboxes a workspace's messages were written to."""
    return [key async for key in web.redis.scan_iter(f"gw:{{*}}:slack:{team_id}:*:inbox")]


@pytest.mark.parametrize("removal", ["tokens_revoked", "app_uninstalled"])
async def test_after_the_bot_is_revoked_its_workspace_is_no_longer_taken(
    web: InstallsApp, slack: FakeSlack, removal: str
) -> None:
    """bolt's authorize reads the installation before the bot: once the bot is gone,
    neither may hold its token, or the next message is answered with it."""
    two = await web.install(slack, "T0002")
    three = await web.install(slack, "T0003")
    tokens = {"oauth": [], "bot": [two.bot_user_id]}
    event = {"type": removal, **({"tokens": tokens} if removal == "tokens_revoked" else {})}
    assert (await web.post_event(installed_event(event, two))).status_code == 200
    ignored = installed_event(team_mention("anyone there?", two), two)
    await web.post_event(ignored)
    taken = installed_event(team_mention("still here?", three), three)
    assert (await web.post_event(taken)).status_code == 200
    assert await sessions_of(web, "T0003") != []
    assert await sessions_of(web, "T0002") == []
    found = await store(web).async_find_installation(enterprise_id=None, team_id="T0002")
    assert found is None or found.bot_token is None
    again = await web.install(slack, "T0002")  # installing again brings it back
    await web.post_event(installed_event(team_mention("back?", again), again))
    assert await sessions_of(web, "T0002") != []


async def test_a_user_token_revoked_alone_removes_only_that_token(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    installed = await store(web).async_find_installation(enterprise_id=None, team_id="T0002")
    assert installed is not None
    with_user = installed.to_dict_for_copying() | {"user_id": "U9", "user_token": "xoxp-user-9"}
    await store(web).async_save(Installation(**with_user))
    revoked = installed_event(
        {"type": "tokens_revoked", "tokens": {"oauth": ["U9"], "bot": []}}, two
    )
    assert (await web.post_event(revoked)).status_code == 200
    latest = await store(web).async_find_installation(enterprise_id=None, team_id="T0002")
    assert latest is not None and latest.user_token is None
    assert latest.bot_token == two.bot_token
    mine = await store(web).async_find_installation(
        enterprise_id=None, team_id="T0002", user_id="U9"
    )
    assert mine is None
    assert await store(web).owners() == ["team:T0002"]
    await web.post_event(installed_event(team_mention("still answered?", two), two))
    assert await sessions_of(web, "T0002") != []
    assert "xoxp-user-9" not in await raw_values(web)


async def test_a_message_from_an_installed_workspace_is_taken_with_its_bot_identity(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    event = team_mention("hello there", two)
    assert (await web.post_event(installed_event(event, two))).status_code == 200
    session = Keys.inbox(f"slack:T0002:C1:{event['ts']}")
    [entry] = await web.redis.lrange(session, 0, -1)
    assert "hello there" in entry and "UBT0002" not in entry  # the mention is stripped
    # The bot's own message in that workspace (its user there) is not taken for a user's.
    own = message("my own reply", user=two.bot_user_id, thread_ts=event["ts"])
    assert (await web.post_event(installed_event(own, two))).status_code == 200
    person = message("a person again", user="U2", thread_ts=event["ts"])
    assert (await web.post_event(installed_event(person, two))).status_code == 200
    texts = " ".join(await web.redis.lrange(session, 0, -1))
    assert "a person again" in texts and "my own reply" not in texts


async def test_an_org_wide_install_serves_its_workspaces(
    web: InstallsApp, slack: FakeSlack
) -> None:
    org = await web.install(slack, "E0001", enterprise_id="E0001", org_wide=True)
    assert await store(web).owners() == ["org:E0001"]
    event = team_mention("from a workspace of the org", org)
    body = installed_event(event, org, team_id="T0009")
    assert (await web.post_event(body)).status_code == 200
    assert await web.redis.llen(Keys.inbox(f"slack:T0009:C1:{event['ts']}")) == 1
    assert await web.platform.workspaces.token("T0009") == org.bot_token


async def test_a_new_key_listed_before_the_old_opens_the_tokens_and_seals_them_anew(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    new_only = RedisInstallationStore(web.redis, TokenCipher(OTHER_SECRET_KEY))
    with pytest.raises(WrongSecretKey, match=r"^GATEWAY_SECRET_KEY does not decrypt"):
        await new_only.check_key()
    rotating = RedisInstallationStore(web.redis, TokenCipher(f"{OTHER_SECRET_KEY},{SECRET_KEY}"))
    bot = await rotating.async_find_bot(enterprise_id=None, team_id="T0002")
    assert bot is not None and bot.bot_token == two.bot_token
    # Checked once with both keys (as every start does), each record opens with the new
    # key alone: the bot, the latest installation and the installer's.
    assert await rotating.check_key() == 1
    assert await new_only.check_key() == 1
    found = await new_only.async_find_bot(enterprise_id=None, team_id="T0002")
    assert found is not None and found.bot_token == two.bot_token
    mine = await new_only.async_find_installation(enterprise_id=None, team_id="T0002", user_id="U1")
    assert mine is not None and mine.bot_token == two.bot_token
    assert two.bot_token not in await raw_values(web)


async def test_rotating_tokens_and_a_users_token_are_kept_sealed_and_come_back_whole(
    web: InstallsApp,
) -> None:
    installation = Installation(
        enterprise_id="E0001",
        team_id="T0005",
        bot_token="xoxe.xoxb-rotating-bot",
        bot_user_id="UBT0005",
        bot_refresh_token="xoxe-1-bot-refresh",
        bot_token_expires_in=43_200,
        user_id="U5",
        user_token="xoxe.xoxp-user",
        user_refresh_token="xoxe-1-user-refresh",
        user_token_expires_in=43_200,
    )
    await store(web).async_save(installation)
    found = await store(web).async_find_installation(
        enterprise_id="E0001", team_id="T0005", user_id="U5"
    )
    assert found is not None
    assert found.to_dict() == installation.to_dict()
    bot = await store(web).async_find_bot(enterprise_id="E0001", team_id="T0005")
    assert bot is not None and bot.bot_refresh_token == "xoxe-1-bot-refresh"
    assert bot.bot_token_expires_at == installation.bot_token_expires_at
    stored = await raw_values(web)
    for secret in ("rotating-bot", "bot-refresh", "xoxp-user", "user-refresh"):
        assert secret not in stored
