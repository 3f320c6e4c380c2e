"""Assistant threads over `POST /slack/events`: suggested prompts when a thread opens, by
scope, and the thread's title from its first message, once.

The real pieces: the gateway's web app with the Slack routes, slack-bolt, the settings
by scope and the ingest on a real Redis, slack-sdk talking to the loopback fake.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.slack.assistant import PROMPTS_HEADING
from gateway.inbound.ingest import Ingest
from gateway.settings.env import Settings, load_settings
from gateway.settings.prompts import DEFAULT_PROMPTS
from gateway.settings.scoped import ScopedSettings
from tests.fakes.slack_api import BOT_TOKEN, BOT_USER_ID, TEAM_ID, FakeSlack
from tests.support.cli_runs import ROOT
from tests.support.slack_helpers import (
    SIGNING_SECRET,
    event_body,
    json_bytes,
    message,
    new_ts,
    serving,
    signed_headers,
)

DM = "D0ASSIST"
SETTINGS_SET = "assistant.threads.setSuggestedPrompts"
SET_TITLE = "assistant.threads.setTitle"
DEFAULTS = [{"title": p.title, "message": p.message} for p in DEFAULT_PROMPTS]


@dataclass
class Web:
    """`gateway web`'s app, its platform (whose assistant threads' calls a test waits
    for) and the settings by scope an operator changes."""

    http: httpx.AsyncClient
    platform: SlackPlatform
    scoped: ScopedSettings

    async def deliver(self, body: dict[str, Any], retry: int | None = None) -> httpx.Response:
        raw = json_bytes(body)
        response = await self.http.post(
            "/slack/events", content=raw, headers=signed_headers(raw, retry=retry)
        )
        assert response.status_code == 200, response.text
        return response

    async def event(self, event: dict[str, Any]) -> dict[str, Any]:
        """Deliver `event`; the body delivered (to deliver it again)."""
        body = event_body(event)
        await self.deliver(body)
        return body

    async def settled(self) -> None:
        await self.platform.assistant_threads.settled()


def settings_for(slack: FakeSlack, redis_url: str) -> Settings:
    return load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
    )


@contextlib.asynccontextmanager
async def web_process(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    settings = settings_for(slack, redis_url)
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    platform.validate("http")
    async with serving(platform, Ingest(settings, redis), redis, "http://gateway") as http:
        yield Web(http, platform, ScopedSettings(redis, settings))
        await platform.assistant_threads.settled()


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    slack.assistant_enabled = True
    async with web_process(slack, redis_url) as app:
        yield app


def thread_started(
    thread_ts: str, *, viewing: str | None = None, kind: str = "assistant_thread_started"
) -> dict[str, Any]:
    """Slack's event when someone opens a new assistant thread (`viewing`: the channel
    they are looking at)."""
    context = {"channel_id": viewing, "team_id": TEAM_ID} if viewing else {}
    return {
        "type": kind,
        "assistant_thread": {
            "user_id": "U1",
            "context": context,
            "channel_id": DM,
            "thread_ts": thread_ts,
        },
        "event_ts": new_ts(),
    }


def opened(slack: FakeSlack) -> str:
    """A new assistant thread Slack opened in the app's DM; its ts."""
    thread_ts = new_ts()
    slack.open_assistant_thread(DM, thread_ts)
    return thread_ts


def in_thread(text: str, thread_ts: str) -> dict[str, Any]:
    return message(text, channel=DM, channel_type="im", thread_ts=thread_ts)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_new_thread_is_offered_the_built_in_prompts(web: Web, slack: FakeSlack) -> None:
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))
    await web.settled()
    assert slack.suggested[(DM, thread_ts)] == {"title": PROMPTS_HEADING, "prompts": DEFAULTS}
    (call,) = slack.calls_to(SETTINGS_SET)
    assert call.token == BOT_TOKEN


async def test_the_prompts_come_from_the_viewed_channel_else_the_workspace(
    web: Web, slack: FakeSlack
) -> None:
    await web.scoped.set(f"slack:{TEAM_ID}", "suggested_prompts", "Plan|Plan my week;Help|Help me")
    await web.scoped.set(
        f"slack:{TEAM_ID}:C0SUPPORT",
        "suggested_prompts",
        json.dumps([{"title": "Triage", "message": "Triage this ticket; then reply"}]),
    )
    in_support, elsewhere, in_general = opened(slack), opened(slack), opened(slack)
    await web.event(thread_started(in_support, viewing="C0SUPPORT"))
    await web.event(thread_started(elsewhere))
    await web.event(thread_started(in_general, viewing="C0GENERAL"))
    await web.settled()
    workspace = [
        {"title": "Plan", "message": "Plan my week"},
        {"title": "Help", "message": "Help me"},
    ]
    assert slack.suggested[(DM, in_support)]["prompts"] == [
        {"title": "Triage", "message": "Triage this ticket; then reply"}
    ]
    assert slack.suggested[(DM, elsewhere)]["prompts"] == workspace
    assert slack.suggested[(DM, in_general)]["prompts"] == workspace


async def test_none_offers_no_prompts(web: Web, slack: FakeSlack) -> None:
    await web.scoped.set(f"slack:{TEAM_ID}", "suggested_prompts", "none")
    await web.event(thread_started(opened(slack)))
    await web.settled()
    assert slack.calls_to(SETTINGS_SET) == []


async def test_a_setting_changed_by_another_process_is_used_at_the_next_thread(
    web: Web, slack: FakeSlack
) -> None:
    first = opened(slack)
    await web.event(thread_started(first))
    await web.settled()
    await web.scoped.set("slack", "suggested_prompts", "Only|the one")
    second = opened(slack)
    await web.event(thread_started(second))
    await web.settled()
    assert slack.suggested[(DM, first)]["prompts"] == DEFAULTS
    assert slack.suggested[(DM, second)]["prompts"] == [{"title": "Only", "message": "the one"}]


async def test_moving_to_another_channel_offers_its_prompts_until_the_first_message(
    web: Web, slack: FakeSlack
) -> None:
    await web.scoped.set(f"slack:{TEAM_ID}:C0SALES", "suggested_prompts", "Deal|Sum up the deal")
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts, viewing="C0GENERAL"))
    await web.settled()
    moved = thread_started(thread_ts, viewing="C0SALES", kind="assistant_thread_context_changed")
    await web.event(moved)
    await web.settled()
    assert slack.suggested[(DM, thread_ts)]["prompts"] == [
        {"title": "Deal", "message": "Sum up the deal"}
    ]
    await web.event(in_thread("hello", thread_ts))
    await web.settled()
    back = thread_started(thread_ts, viewing="C0GENERAL", kind="assistant_thread_context_changed")
    await web.event(back)
    await web.settled()
    assert len(slack.calls_to(SETTINGS_SET)) == 2  # not offered again once the thread is used


async def test_the_ack_does_not_wait_for_slack(web: Web, slack: FakeSlack) -> None:
    thread_ts = opened(slack)
    slack.assistant_gate = threading.Event()
    try:
        await web.event(thread_started(thread_ts))  # answered 200 while the call is held
        await slack.until(lambda: slack.calls_to(SETTINGS_SET))
        assert (DM, thread_ts) not in slack.suggested
    finally:
        slack.assistant_gate.set()
    await web.settled()
    assert slack.suggested[(DM, thread_ts)]["prompts"] == DEFAULTS


async def test_the_first_message_titles_the_thread_once(
    web: Web, slack: FakeSlack, redis_url: str
) -> None:
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))
    await web.settled()
    first = await web.event(
        in_thread(
            f"<@{BOT_USER_ID}>  plan our offsite\nwith <@U2> in <#C0GENERAL|general> "
            "<https://example.com/agenda|the agenda> <!here>",
            thread_ts,
        )
    )
    await web.settled()
    assert slack.titles[(DM, thread_ts)] == "plan our offsite with in #general the agenda"
    await web.deliver(first, retry=1)  # Slack delivering it again
    async with web_process(slack, redis_url) as other:  # or to another web process
        await other.deliver(first, retry=2)
    await web.event(in_thread("and the budget?", thread_ts))
    await web.settled()
    assert len(slack.calls_to(SET_TITLE)) == 1
    assert slack.titles[(DM, thread_ts)].startswith("plan our offsite")


async def test_a_long_first_message_is_cut_to_one_short_line(web: Web, slack: FakeSlack) -> None:
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))
    await web.settled()
    await web.event(in_thread("word " * 40, thread_ts))
    await web.settled()
    title = slack.titles[(DM, thread_ts)]
    assert len(title) <= 60 and title.endswith("…") and "\n" not in title


async def test_a_dm_thread_slack_did_not_open_as_an_assistant_thread_is_not_titled(
    web: Web, slack: FakeSlack
) -> None:
    await web.event(message("top level", channel=DM, channel_type="im"))
    await web.event(in_thread("a reply in an ordinary DM thread", new_ts()))
    await web.settled()
    assert slack.calls_to(SET_TITLE) == []


@pytest.mark.parametrize(
    ("refusal", "logged"),
    [
        ({"error": "ratelimited", "retry_after": 30}, "ratelimited"),
        ({"error": "service_unavailable", "status": 503}, "service_unavailable"),
        ({"error": "missing_scope"}, "missing_scope"),
    ],
    ids=["429", "slack-down", "missing-scope"],
)
async def test_a_refused_prompts_call_is_one_log_line_and_no_retry(
    web: Web,
    slack: FakeSlack,
    caplog: pytest.LogCaptureFixture,
    refusal: dict[str, Any],
    logged: str,
) -> None:
    caplog.set_level(logging.INFO)
    slack.fail_next(SETTINGS_SET, **refusal)
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))  # acknowledged (200) all the same
    await web.settled()
    assert len(slack.calls_to(SETTINGS_SET)) == 1
    assert warnings(caplog) == [f"slack: {SETTINGS_SET} failed: {logged}"]
    # The thread still works: its first message is taken in and titles it.
    await web.event(in_thread("hello there", thread_ts))
    await web.settled()
    assert slack.titles[(DM, thread_ts)] == "hello there"


async def test_a_refused_title_is_one_log_line_and_not_tried_again(
    web: Web, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))
    await web.settled()
    slack.fail_next(SET_TITLE, "ratelimited", retry_after=30)
    await web.event(in_thread("first", thread_ts))
    await web.event(in_thread("second", thread_ts))
    await web.settled()
    assert len(slack.calls_to(SET_TITLE)) == 1
    assert warnings(caplog) == [f"slack: {SET_TITLE} failed: ratelimited"]


async def test_without_the_assistant_scope_each_thread_is_one_log_line(
    web: Web, slack: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    slack.assistant_enabled = False  # the app lacks assistant:write
    thread_ts = opened(slack)
    await web.event(thread_started(thread_ts))
    await web.event(in_thread("hi", thread_ts))
    await web.settled()
    assert [c.error for c in slack.calls_to(SETTINGS_SET) + slack.calls_to(SET_TITLE)] == [
        "missing_scope",
        "missing_scope",
    ]
    assert warnings(caplog) == [
        f"slack: {SETTINGS_SET} failed: missing_scope",
        f"slack: {SET_TITLE} failed: missing_scope",
    ]


async def test_a_malformed_thread_event_is_acknowledged_and_dropped(
    web: Web, slack: FakeSlack
) -> None:
    event = thread_started(new_ts())
    event["assistant_thread"]["thread_ts"] = ["not", "a", "ts"]
    await web.event(event)
    await web.event({"type": "assistant_thread_started", "assistant_thread": "nope"})
    await web.settled()
    assert slack.calls_to(SETTINGS_SET) == []


def home_opened(tab: str, channel: str = DM) -> dict[str, Any]:
    """Someone opening the app's DM (the agent experience's entry)."""
    return {"type": "app_home_opened", "user": "U1", "channel": channel, "tab": tab}


async def test_the_agent_experience_s_dm_gets_its_scope_s_prompts_without_a_thread(
    web: Web, slack: FakeSlack
) -> None:
    await web.scoped.set(f"slack:{TEAM_ID}:{DM}", "suggested_prompts", "Mine|My own prompt")
    await web.event(home_opened("messages"))
    await web.event(home_opened("home"))  # the Home tab: nothing to suggest
    await web.settled()
    (call,) = slack.calls_to(SETTINGS_SET)
    assert "thread_ts" not in call.args  # with one, Slack drops an agent app's call
    assert slack.suggested[(DM, "")]["prompts"] == [{"title": "Mine", "message": "My own prompt"}]


def test_the_manifest_asks_for_what_assistant_threads_need() -> None:
    manifest = yaml.safe_load((ROOT / "docs" / "slack-manifest.yaml").read_text())
    events = manifest["settings"]["event_subscriptions"]["bot_events"]
    assert {"assistant_thread_started", "assistant_thread_context_changed", "message.im"} <= set(
        events
    )
    assert {"assistant:write", "im:history"} <= set(manifest["oauth_config"]["scopes"]["bot"])
    assert "assistant_view" in manifest["features"]
