"""`/config` through the worker and each platform's real sender against its fake: an
admin of the place changes the channel's settings, anyone else is refused and nothing
changes (Slack: users.info; Telegram: getChatMember; Discord: the guild's roles and the
member's; the console's user administers it)."""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest

from adapters.console import ConsoleSender
from adapters.discord.sender import DiscordSender
from adapters.slack.client import web_client
from adapters.slack.sender import SlackSender
from adapters.telegram.client import BotClient
from adapters.telegram.sender import TelegramSender
from gateway.answers.config_command import REFUSED
from gateway.messages import Inbound
from gateway.ports import Sender
from gateway.settings.scoped import ScopedSettings
from tests.fakes.discord_api import FakeDiscord, FakeGuild
from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from tests.support.harness import Harness, start_workers
from tests.support.helpers import inbound, settings
from tests.support.redis_servers import client_for

GUILD, CHANNEL = "1200000000000000001", "1300000000000000001"
SET = "Set `model` for this channel to `openai/chosen`."


def located(message: Inbound, workspace: str) -> Inbound:
    """`message` in another workspace (a Discord guild's id, a Slack team)."""
    reply = message.reply.model_copy(update={"workspace": workspace})
    return message.model_copy(update={"workspace": workspace, "reply": reply})


def plain(text: str) -> str:
    """A reply's words, whatever the platform's rendering made of its Markdown."""
    return text.replace("`", "").replace("*", "")


async def say(h: Harness, message: Inbound) -> None:
    await h.ingest.receive(message)
    await h.idle(message.session_key)


async def channel_settings(redis_url: str, scope: str) -> dict[str, str]:
    client = client_for(redis_url)
    try:
        store = ScopedSettings(client, settings(redis_url))
        await store.load()
        return store.at(scope)
    finally:
        await client.aclose()


async def admin_and_stranger(
    redis_url: str,
    llm: FakeLLM,
    sender: Sender,
    admin: Callable[[str], Inbound],
    stranger: Callable[[str], Inbound],
    replies: Callable[[], list[str]],
    allowed: str = "",
) -> None:
    """The stranger is refused, the admin sets and unsets, and `/config` shows it."""
    first = admin("")
    scope = f"{first.platform}:{first.workspace}:{first.channel}"
    async with start_workers(
        redis_url, llm, 1, senders={first.platform: sender}, GATEWAY_ALLOWED_USERS=allowed
    ) as h:
        await say(h, stranger("/config set model openai/chosen"))
        assert plain(replies()[-1]) == plain(REFUSED)
        assert await channel_settings(redis_url, scope) == {}
        await say(h, admin("/config set model openai/chosen"))
        assert plain(replies()[-1]) == plain(SET)
        assert await channel_settings(redis_url, scope) == {"model": "openai/chosen"}
        await say(h, stranger("/config"))
        assert "model: openai/chosen (set for the channel)" in plain(replies()[-1])
        await say(h, stranger("/config unset model"))
        assert plain(replies()[-1]) == plain(REFUSED)
        assert await channel_settings(redis_url, scope) == {"model": "openai/chosen"}
        await say(h, admin("/config unset model"))
        assert await channel_settings(redis_url, scope) == {}


async def test_slack_workspace_admins_and_owners_change_a_channel_and_members_do_not(
    slack: FakeSlack, redis_url: str, llm: FakeLLM
) -> None:
    slack.add_user("UADMIN", "Ada", admin=True)
    slack.add_user("UOWNER", "Olu", owner=True)
    slack.add_user("UMEMBER", "Mo")
    sender = SlackSender(web_client("xoxb-test-token", slack.api_url), edit_interval=0)

    def where(user: str) -> Callable[[str], Inbound]:
        def said(text: str) -> Inbound:
            message = inbound(
                text, platform="slack", channel="C1", user=user, dm=False, mentions_bot=True
            )
            return located(message, "T1")

        return said

    def replies() -> list[str]:
        return [m.text for m in slack.messages.values()]

    await admin_and_stranger(redis_url, llm, sender, where("UADMIN"), where("UMEMBER"), replies)
    await admin_and_stranger(redis_url, llm, sender, where("UOWNER"), where("UMEMBER"), replies)
    await sender.aclose()


@pytest.mark.parametrize("status", ["administrator", "creator"])
async def test_telegram_group_administrators_change_a_group_and_members_do_not(
    fake_telegram: FakeTelegram, redis_url: str, llm: FakeLLM, status: str
) -> None:
    group = -1001
    fake_telegram.member_status[(group, 5)] = status
    sender = TelegramSender(
        BotClient.build(fake_telegram.token, fake_telegram.base_url),
        edit_interval=0,
        group_edit_interval=0,
    )

    def where(user: str) -> Callable[[str], Inbound]:
        def said(text: str) -> Inbound:
            return inbound(
                text,
                platform="telegram",
                channel=str(group),
                user=user,
                dm=False,
                mentions_bot=True,
            )

        return said

    def replies() -> list[str]:
        return [m.text for m in fake_telegram.messages_in(group)]

    allowed = "telegram:5,telegram:6"
    try:
        await admin_and_stranger(redis_url, llm, sender, where("5"), where("6"), replies, allowed)
    finally:
        await sender.aclose()


async def test_a_telegram_user_administers_their_private_chat(
    fake_telegram: FakeTelegram, redis_url: str, llm: FakeLLM
) -> None:
    sender = TelegramSender(
        BotClient.build(fake_telegram.token, fake_telegram.base_url),
        edit_interval=0,
        group_edit_interval=0,
    )
    message = inbound("/config set model openai/chosen", platform="telegram", channel="6", user="6")
    try:
        async with start_workers(
            redis_url, llm, 1, senders={"telegram": sender}, GATEWAY_ALLOWED_USERS="telegram:6"
        ) as h:
            await say(h, message)
            assert [plain(m.text) for m in fake_telegram.messages_in(6)] == [plain(SET)]
            assert fake_telegram.calls_to("getChatMember") == []
    finally:
        await sender.aclose()


@pytest.fixture
def discord_guilds() -> tuple[FakeGuild, ...]:
    """The guild, where member 2000 holds a role that may manage it."""
    return (FakeGuild(GUILD, channels=(CHANNEL,), managers=("2000",)),)


async def test_discord_members_with_manage_server_change_a_channel_and_others_do_not(
    fake_discord: FakeDiscord, redis_url: str, llm: FakeLLM
) -> None:
    sender = DiscordSender(fake_discord.token, edit_interval=0)

    def where(user: str) -> Callable[[str], Inbound]:
        def said(text: str) -> Inbound:
            message = inbound(
                text, platform="discord", channel=CHANNEL, user=user, dm=False, mentions_bot=True
            )
            return located(message, GUILD)

        return said

    def replies() -> list[str]:
        return [m["content"] for m in fake_discord.channel_messages(CHANNEL)]

    allowed = "discord:2000,discord:3000,discord:1"
    try:
        await admin_and_stranger(
            redis_url, llm, sender, where("2000"), where("3000"), replies, allowed
        )
        # The guild's owner may, with no role at all.
        await admin_and_stranger(
            redis_url, llm, sender, where("1"), where("3000"), replies, allowed
        )
    finally:
        await sender.aclose()


async def test_the_console_user_administers_the_console(redis_url: str, llm: FakeLLM) -> None:
    out = io.StringIO()
    sender = ConsoleSender(out)
    message = inbound("/config set model openai/chosen", platform="console", channel="console")
    async with start_workers(redis_url, llm, 1, senders={"console": sender}) as h:
        await say(h, message)
    assert SET in out.getvalue()
    assert await channel_settings(redis_url, "console:W:console") == {"model": "openai/chosen"}
