"""End to end in many workspaces: `gateway web` and `gateway worker` as subprocesses, installs
through the OAuth redirect as a browser and Slack make them, signed events from two
workspaces, each answered with its own workspace's token; and the start-up refusals."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import BOT_TOKEN, CLIENT_SECRET, Call, FakeSlack, Install, Message
from tests.support import processes
from tests.support.redis_servers import free_port
from tests.support.slack_helpers import (
    OTHER_SECRET_KEY,
    SECRET_KEY,
    Processes,
    gateway,
    installed_event,
    installs_app,
    json_bytes,
    many_workspaces,
    signed_headers,
    team_mention,
)

pytestmark = pytest.mark.timeout(150)


def environment(redis_url: str, llm: FakeLLM, slack: FakeSlack, **extra: str) -> dict[str, str]:
    return processes.environment(
        redis_url,
        llm.api_base,
        free_port(),
        SLACK_EDIT_INTERVAL="0.2",
        **many_workspaces(slack.api_url, **extra),
    )


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> AsyncIterator[Processes]:
    async with gateway(tmp_path, environment(redis_url, llm, slack), "web", "worker") as running:
        yield running


async def install(web: Processes, slack: FakeSlack, team_id: str) -> Install:
    """An installer's browser through `/slack/install`, Slack's page, and back."""
    async with httpx.AsyncClient() as browser:
        started = await browser.get(web.url("/slack/install"))
        assert started.status_code == 302
        location = started.headers["location"]
        assert (await browser.get(location)).status_code == 200
        state = parse_qs(urlsplit(location).query)["state"][0]
        # bolt's state cookie is Secure: a browser sends it back over the TLS a real
        # deployment has; here it is handed back by hand.
        cookie = started.headers["set-cookie"].split(";", 1)[0]
        finished = await browser.get(
            web.url("/slack/oauth_redirect"),
            params={"code": slack.consent(team_id), "state": state},
            headers={"cookie": cookie},
        )
    assert finished.status_code == 200, finished.text
    return next(i for i in slack.installs.values() if i.team_id == team_id)


async def deliver(web: Processes, body: dict[str, Any]) -> httpx.Response:
    raw = json_bytes(body)
    async with httpx.AsyncClient() as client:
        return await client.post(web.events_url, content=raw, headers=signed_headers(raw))


def replies(slack: FakeSlack, channel: str, thread: str, contains: str) -> list[Message]:
    return [m for m in slack.thread_messages(channel, thread) if contains in m.text]


POSTS = ("chat.postMessage", "chat.startStream")  # a reply's first call: a post, or a stream's


def posts_to(slack: FakeSlack, channel: str) -> list[Call]:
    """The calls that started a reply in `channel` (answered or not)."""
    return slack.calls.where(lambda c: c.method in POSTS and c.args.get("channel") == channel)


def posted_with(slack: FakeSlack, channel: str) -> set[str | None]:
    """The tokens of the replies posted (or streamed) into `channel`."""
    return {c.token for c in posts_to(slack, channel) if c.error is None}


async def test_two_workspaces_are_each_answered_with_their_own_token(
    web: Processes, slack: FakeSlack
) -> None:
    two = await install(web, slack, "T0002")
    three = await install(web, slack, "T0003")
    first = team_mention("hello from two", two, channel="C2")
    second = team_mention("hello from three", three, channel="C3")
    assert (await deliver(web, installed_event(first, two))).status_code == 200
    assert (await deliver(web, installed_event(second, three))).status_code == 200
    slack.wait_for(lambda: bool(replies(slack, "C2", first["ts"], "hello from two")), 30)
    slack.wait_for(lambda: bool(replies(slack, "C3", second["ts"], "hello from three")), 30)
    assert posted_with(slack, "C2") == {two.bot_token}
    assert posted_with(slack, "C3") == {three.bot_token}
    assert BOT_TOKEN not in {c.token for c in slack.calls}
    logs = web.output()
    for secret in (two.bot_token, three.bot_token, CLIENT_SECRET, SECRET_KEY):
        assert secret not in logs


@pytest.mark.parametrize("removal", ["app_uninstalled", "tokens_revoked"])
async def test_after_an_uninstall_only_the_other_workspace_is_answered(
    web: Processes, slack: FakeSlack, llm: FakeLLM, removal: str
) -> None:
    """Neither the model nor Slack hears of the removed workspace's next message, though
    bolt knows its token from the message before (its authorize keeps each token's
    auth.test answer)."""
    two = await install(web, slack, "T0002")
    three = await install(web, slack, "T0003")
    before = team_mention("hello before", two, channel="C2")
    await deliver(web, installed_event(before, two))
    slack.wait_for(lambda: bool(replies(slack, "C2", before["ts"], "hello before")), 30)
    slack.uninstall("T0002")
    event: dict[str, Any] = {"type": removal}
    if removal == "tokens_revoked":
        event["tokens"] = {"oauth": [], "bot": [two.bot_user_id]}
    assert (await deliver(web, installed_event(event, two))).status_code == 200
    ignored = team_mention("anyone there?", two, channel="C2")
    answered = team_mention("still here?", three, channel="C3")
    await deliver(web, installed_event(ignored, two))
    await deliver(web, installed_event(answered, three))
    slack.wait_for(lambda: bool(replies(slack, "C3", answered["ts"], "still here?")), 30)
    assert slack.thread_messages("C2", ignored["ts"]) == []
    assert len(posts_to(slack, "C2")) == 1  # the reply before: nothing tried since
    assert not [r for r in llm.requests if "anyone there?" in str(r)]


async def test_doctor_counts_the_installed_workspaces_and_shows_no_token(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> None:
    async with installs_app(slack, redis_url) as app:
        two = await app.install(slack, "T0002")
        three = await app.install(slack, "T0003")
    result = run_gateway(tmp_path, environment(redis_url, llm, slack), "doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    [slack_line] = [line for line in result.stdout.splitlines() if " slack " in line]
    assert slack_line.startswith("ok") and "installed in 2 workspace(s)" in slack_line
    for token in (two.bot_token, three.bot_token):
        assert token not in result.stdout + result.stderr


async def test_another_secret_key_stops_gateway_web_with_one_line_and_no_token(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> None:
    async with installs_app(slack, redis_url) as app:
        two = await app.install(slack, "T0002")
    env = environment(redis_url, llm, slack, GATEWAY_SECRET_KEY=OTHER_SECRET_KEY)
    result = run_gateway(tmp_path, env, "web")
    assert result.returncode != 0
    assert one_line(result.stderr).startswith("gateway: GATEWAY_SECRET_KEY ")
    for secret in (two.bot_token, OTHER_SECRET_KEY, SECRET_KEY):
        assert secret not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"GATEWAY_SECRET_KEY": "not-a-fernet-key"}, "GATEWAY_SECRET_KEY"),
        ({"SLACK_BOT_TOKEN": BOT_TOKEN}, "SLACK_BOT_TOKEN and SLACK_CLIENT_ID"),
        ({"SLACK_CLIENT_SECRET": None}, "SLACK_CLIENT_SECRET"),
    ],
)
def test_gateway_web_refuses_a_wrong_configuration_with_one_line(
    tmp_path: Path,
    redis_url: str,
    llm: FakeLLM,
    slack: FakeSlack,
    changes: dict[str, str | None],
    named: str,
) -> None:
    """`None` leaves the variable out."""
    env = environment(redis_url, llm, slack)
    for name, value in changes.items():
        if value is None:
            del env[name]
        else:
            env[name] = value
    result = run_gateway(tmp_path, env, "web")
    assert result.returncode == 2
    assert one_line(result.stderr).startswith(f"gateway: {named}")
    for secret in (BOT_TOKEN, "not-a-fernet-key", SECRET_KEY, CLIENT_SECRET):
        assert secret not in result.stdout + result.stderr


def run_gateway(
    workdir: Path, env: dict[str, str], command: str
) -> subprocess.CompletedProcess[str]:
    """`gateway <command>`, expected to end by itself (a refusal, or doctor's report)."""
    return subprocess.run(
        [sys.executable, "-m", "gateway.cli", command],
        env=env,
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def one_line(stderr: str) -> str:
    """The only line on stderr."""
    [line] = stderr.strip().splitlines()
    return line
