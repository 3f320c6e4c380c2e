"""Each workspace's token where workers use one: replies, thinking signals, file downloads;
kept per process, and dropped at once when Slack calls it dead. Installs go through the
OAuth flow against the fake Slack, into a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.slack.files import WorkspaceFileSource
from adapters.slack.platform import SlackPlatform
from adapters.slack.sender import SlackSender
from gateway.errors import ConfigError, DownloadFailed, PlatformError, StreamRefused
from gateway.messages import Address, Attachment
from gateway.ports import WorkspaceFiles
from gateway.settings.env import load_settings
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack
from tests.support.slack_helpers import InstallsApp, installs_app, many_workspaces


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[InstallsApp]:
    async with installs_app(slack, redis_url) as app:
        yield app


@pytest.fixture
async def sender(web: InstallsApp) -> AsyncIterator[SlackSender]:
    sender = web.platform.sender()
    yield sender
    await sender.aclose()


def address(workspace: str, channel: str = "C1") -> Address:
    return Address(platform="slack", workspace=workspace, channel=channel, reply_to="100.1")


def tokens_of(slack: FakeSlack, method: str) -> list[str | None]:
    return [call.token for call in slack.calls_to(method)]


async def test_the_sender_posts_and_reacts_with_each_workspaces_own_token(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender
) -> None:
    two = await web.install(slack, "T0002")
    three = await web.install(slack, "T0003")
    await sender.send(address("T0002"), "to two", final=True)
    await sender.send(address("T0003"), "to three", final=True)
    await sender.thinking(address("T0003"), True)
    assert tokens_of(slack, "chat.postMessage") == [two.bot_token, three.bot_token]
    assert tokens_of(slack, "reactions.add") == [three.bot_token]
    # Every workspace's calls go through the sender's one session.
    calls = slack.calls_to("chat.postMessage") + slack.calls_to("reactions.add")
    assert len({call.peer for call in calls}) == 1


async def test_a_workspace_without_an_installation_gets_nothing_sent(
    slack: FakeSlack, sender: SlackSender
) -> None:
    with pytest.raises(PlatformError, match="not installed in workspace T0009"):
        await sender.send(address("T0009"), "anyone?", final=True)
    assert slack.calls_to("chat.postMessage") == []


async def test_a_token_slack_calls_dead_is_dropped_and_the_reinstalled_one_is_used_next(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender
) -> None:
    first = await web.install(slack, "T0002")
    await sender.send(address("T0002"), "before", final=True)
    slack.uninstall("T0002")
    second = await web.install(slack, "T0002")  # the store holds the new token at once
    # This process still holds the old one (for a minute)...
    with pytest.raises(PlatformError, match="invalid_auth"):
        await sender.send(address("T0002"), "with the old token", final=True)
    # ...until Slack refused it: the next call reads the store again.
    await sender.send(address("T0002"), "with the new token", final=True)
    assert tokens_of(slack, "chat.postMessage") == [
        first.bot_token,
        first.bot_token,
        second.bot_token,
    ]


async def test_a_stream_goes_out_with_its_workspaces_token_and_a_dead_one_is_dropped(
    web: InstallsApp, slack: FakeSlack, sender: SlackSender
) -> None:
    first = await web.install(slack, "T0002")
    live = sender.open_live(address("T0002").model_copy(update={"thread": "100.0"}), recipient="U1")
    await live.show("hello there ", [])
    slack.uninstall("T0002")
    second = await web.install(slack, "T0002")
    with pytest.raises(PlatformError, match="invalid_auth") as caught:
        await live.show("hello there again ", [])
    assert not isinstance(caught.value, StreamRefused)  # a token's death is no refusal
    await live.close("hello there again, bye", [], feedback=False)
    assert tokens_of(slack, "chat.startStream") == [first.bot_token]
    assert tokens_of(slack, "chat.appendStream") == [first.bot_token]
    assert tokens_of(slack, "chat.stopStream") == [second.bot_token]
    assert slack.messages[str(live.message_id)].text == "hello there again, bye"


async def test_files_are_fetched_with_the_sessions_workspace_token(
    web: InstallsApp, slack: FakeSlack
) -> None:
    two = await web.install(slack, "T0002")
    source = web.platform.file_source()
    assert isinstance(source, WorkspaceFiles)
    file = Attachment(kind="file", url=f"{slack.url}/files-pri/T0002-F1/a.txt", name="a.txt")
    download = await source.in_workspace("T0002").locate(file)
    assert download.headers == {"Authorization": f"Bearer {two.bot_token}"}
    with pytest.raises(DownloadFailed, match="no longer installed"):
        await source.in_workspace("T0003").locate(file)
    elsewhere = Attachment(kind="file", url="https://example.com/a.txt", name="a.txt")
    with pytest.raises(DownloadFailed):
        await source.in_workspace("T0002").locate(elsewhere)


def test_one_workspace_keeps_its_own_sender_and_file_source(
    slack: FakeSlack, redis_url: str
) -> None:
    settings = load_settings(
        _env_file=None, SLACK_BOT_TOKEN=BOT_TOKEN, SLACK_SIGNING_SECRET="s", REDIS_URL=redis_url
    )
    platform = SlackPlatform(settings, None)  # type: ignore[arg-type]
    sender = platform.sender()
    assert isinstance(sender, SlackSender) and sender.workspaces is None
    assert not isinstance(platform.file_source(), WorkspaceFileSource)


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"SLACK_BOT_TOKEN": BOT_TOKEN}, "SLACK_BOT_TOKEN and SLACK_CLIENT_ID are both set"),
        ({"SLACK_CLIENT_SECRET": None}, "SLACK_CLIENT_SECRET is required"),
        ({"SLACK_SIGNING_SECRET": None}, "SLACK_SIGNING_SECRET is required"),
        ({"GATEWAY_SECRET_KEY": None}, "GATEWAY_SECRET_KEY is required"),
    ],
)
def test_many_workspaces_need_their_settings_and_no_bot_token(
    slack: FakeSlack, changes: dict[str, str | None], named: str
) -> None:
    values: dict[str, str | None] = {**many_workspaces(slack.api_url), **changes}
    settings = load_settings(_env_file=None, **{k: v for k, v in values.items() if v is not None})
    platform = SlackPlatform(settings, None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=f"^{named}") as refused:
        platform.validate("http")
    assert "\n" not in str(refused.value)


def test_many_workspaces_are_not_served_over_socket_mode(slack: FakeSlack) -> None:
    settings = load_settings(
        _env_file=None, SLACK_APP_TOKEN="xapp-1", **many_workspaces(slack.api_url)
    )
    with pytest.raises(ConfigError, match="runs over HTTP"):
        SlackPlatform(settings, None).validate("connect")  # type: ignore[arg-type]


def test_a_malformed_secret_key_is_refused_without_quoting_it(slack: FakeSlack) -> None:
    with pytest.raises(ConfigError, match=r"^GATEWAY_SECRET_KEY: ") as refused:
        load_settings(
            _env_file=None, **many_workspaces(slack.api_url, GATEWAY_SECRET_KEY="short-key")
        )
    assert "short-key" not in str(refused.value)
