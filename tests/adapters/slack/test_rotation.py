"""Token rotation in many workspaces: the fake Slack issues bot tokens that expire in seconds
(and refresh tokens good once); bolt's authorize and the workers' sender get a refreshed token
before the old one expires, refreshed once however many processes need it at that moment,
and saved sealed. Installs go through the OAuth flow, into a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator

import pytest
from slack_sdk.oauth.installation_store import Bot

from adapters.slack.platform import SlackPlatform
from adapters.slack.rotation import Rotation
from adapters.slack.sender import SlackSender
from gateway.errors import PlatformError
from gateway.messages import Address
from gateway.state.keys import Keys
from tests.fakes.slack_api import CLIENT_SECRET, FakeSlack, Install
from tests.support.slack_helpers import (
    SECRET_KEY,
    InstallsApp,
    installed_event,
    installs_app,
    many_platform,
    team_mention,
)

LIFETIME = 10  # seconds an installed bot token lives
ROTATION = Rotation(margin=7.0, poll=0.02)  # refreshed 7 s before it expires
OWNER = "team:T0002"


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[InstallsApp]:
    async with installs_app(slack, redis_url, ROTATION) as app:
        yield app


@pytest.fixture
async def sender(web: InstallsApp) -> AsyncIterator[SlackSender]:
    sender = web.platform.sender()
    yield sender
    await sender.aclose()


@contextlib.asynccontextmanager
async def worker(slack: FakeSlack, redis_url: str) -> AsyncIterator[SlackPlatform]:
    """Another process's platform (a worker's) over the same Redis."""
    platform = many_platform(slack, redis_url, ROTATION)
    try:
        yield platform
    finally:
        await platform.redis.aclose()


async def install_expiring(web: InstallsApp, slack: FakeSlack) -> Install:
    """T0002 installed with a token of LIFETIME seconds; its refreshed tokens live ten
    minutes, so one refresh is all a test needs."""
    slack.token_lifetime = LIFETIME
    await web.install(slack, "T0002")
    slack.token_lifetime = 600
    return slack.current_install("T0002")


async def refresh_point(web: InstallsApp) -> float:
    """When the stored token is due for its refresh (epoch seconds)."""
    bot = await stored_bot(web)
    assert bot is not None and bot.bot_token_expires_at is not None
    return bot.bot_token_expires_at - ROTATION.margin


async def stored_bot(web: InstallsApp) -> Bot | None:
    return await web.platform.installations().async_find_bot(enterprise_id=None, team_id="T0002")


async def until(moment: float) -> None:
    """Until the clock has passed `moment`."""
    while time.time() <= moment:
        await asyncio.sleep(0.05)


def address(channel: str = "C2") -> Address:
    return Address(platform="slack", workspace="T0002", channel=channel, reply_to="100.1")


def post_tokens(slack: FakeSlack) -> list[str | None]:
    return [call.token for call in slack.answered("chat.postMessage")]


async def raw_values(web: InstallsApp) -> str:
    found = [str(await web.redis.get(key)) async for key in web.redis.scan_iter("gw:*slack:*")]
    return "\n".join(found)


async def test_a_post_past_the_refresh_point_goes_out_with_a_new_token_before_the_old_expires(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender
) -> None:
    first = await install_expiring(web, slack)
    await until(await refresh_point(web))
    await sender.send(address(), "after the refresh point", final=True)
    refreshed_at = time.time()
    assert [c.error for c in slack.refreshes()] == [None], "no refresh before the post"
    new = slack.current_install("T0002")
    assert new.bot_token != first.bot_token
    assert post_tokens(slack) == [new.bot_token]
    assert refreshed_at < slack.expiries[first.bot_token]  # before the old one expired
    # Past the old token's expiry the new one goes on working, refreshed once in all.
    await until(slack.expiries[first.bot_token])
    await sender.send(address(), "after the old token expired", final=True)
    assert post_tokens(slack) == [new.bot_token, new.bot_token]
    assert [c.error for c in slack.refreshes()] == [None]
    assert [c for c in slack.calls if c.error == "token_expired"] == []
    # Stored sealed, as the install's were.
    bot = await stored_bot(web)
    assert bot is not None and bot.bot_token == new.bot_token
    assert bot.bot_refresh_token == new.refresh_token
    stored = await raw_values(web)
    assert new.bot_token not in stored and str(new.refresh_token) not in stored


async def test_two_processes_past_the_refresh_point_make_one_refresh_and_share_its_token(
    web: InstallsApp, slack: FakeSlack, redis_url: str
) -> None:
    """Two web processes authorizing an event each and a worker posting, all at once,
    while Slack takes half a second to answer a refresh."""
    first = await install_expiring(web, slack)
    slack.refresh_latency = 0.5
    async with (
        installs_app(slack, redis_url, ROTATION) as other,
        worker(slack, redis_url) as w,
        contextlib.aclosing(w.sender()) as worker_sender,
    ):
        await until(await refresh_point(web))
        tested = len(slack.calls_to("auth.test"))
        one = team_mention("from the first process", first, channel="C2")
        two = team_mention("from the second process", first, channel="C3")
        answers = await asyncio.gather(
            web.post_event(installed_event(one, first)),
            other.post_event(installed_event(two, first)),
            worker_sender.send(address("C4"), "from a worker", final=True),
        )
    assert [a.status_code for a in answers[:2]] == [200, 200]
    refreshes = slack.refreshes()
    assert len(refreshes) == 1, f"{len(refreshes)} refreshes: {[c.error for c in refreshes]}"
    assert refreshes[0].error is None
    new = slack.current_install("T0002")
    assert new.bot_token != first.bot_token
    assert post_tokens(slack) == [new.bot_token]
    assert {c.token for c in slack.calls_to("auth.test")[tested:]} == {new.bot_token}
    for event in (one, two):
        inbox = Keys.inbox(f"slack:T0002:{event['channel']}:{event['ts']}")
        assert await web.redis.llen(inbox) == 1
    bot = await stored_bot(web)
    assert bot is not None and bot.bot_token == new.bot_token
    installation = await web.platform.installations().async_find_installation(
        enterprise_id=None, team_id="T0002"
    )
    assert installation is not None and installation.bot_refresh_token == new.refresh_token


async def test_a_refused_refresh_is_one_line_without_a_secret_and_is_not_tried_again_at_once(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender, caplog: pytest.LogCaptureFixture
) -> None:
    first = await install_expiring(web, slack)
    slack.fail_next("oauth.v2.access", "invalid_refresh_token")
    await until(await refresh_point(web))
    with caplog.at_level(logging.INFO, logger="adapters.slack.rotation"):
        # The token has not expired yet: the posts still go out with it.
        await sender.send(address(), "while the old token works", final=True)
        await sender.send(address(), "again, within the pause", final=True)
        assert post_tokens(slack) == [first.bot_token, first.bot_token]
        await until(slack.expiries[first.bot_token])
        with pytest.raises(PlatformError, match=r"expired and could not be refreshed") as raised:
            await sender.send(address(), "once it has expired", final=True)
    assert "(invalid_refresh_token)" in str(raised.value)
    assert [c.error for c in slack.refreshes()] == ["invalid_refresh_token"]
    assert len(post_tokens(slack)) == 2
    lines = [r.getMessage() for r in caplog.records if r.name == "adapters.slack.rotation"]
    assert lines == [
        f"slack: the bot token of {OWNER} could not be refreshed (invalid_refresh_token)"
    ]
    for secret in (first.bot_token, str(first.refresh_token), CLIENT_SECRET, SECRET_KEY):
        assert secret not in caplog.text and secret not in str(raised.value)


async def test_an_install_during_a_refresh_keeps_the_new_installs_tokens(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender
) -> None:
    """The workspace installs the app again while a refresh waits for Slack's answer: the
    refreshed tokens are not written over the new install's."""
    first = await install_expiring(web, slack)
    slack.refresh_gate = threading.Event()
    await until(await refresh_point(web))
    posting = asyncio.create_task(sender.send(address(), "meanwhile", final=True))
    await asyncio.to_thread(slack.wait_for, lambda: len(slack.refreshes()) == 1, 30)
    again = await web.install(slack, "T0002")
    slack.refresh_gate.set()
    await posting
    assert [c.error for c in slack.refreshes()] == [None]
    assert again.bot_token not in (first.bot_token, slack.current_install("T0002").bot_token)
    bot = await stored_bot(web)
    assert bot is not None and bot.bot_token == again.bot_token
    assert bot.bot_refresh_token == again.refresh_token
    assert post_tokens(slack) == [again.bot_token]
