"""Slack events -> Inbound: sessions, threads, what is ignored, who is external."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlencode

import httpx
import pytest
from redis.asyncio import Redis

from adapters.slack import SlackPlatform
from adapters.slack.inbound import BotIdentity, btw_inbound, session_thread, to_inbound
from gateway.http.app import create_app
from gateway.inbound.ingest import Ingest
from gateway.messages import Attachment
from gateway.settings.env import load_settings
from gateway.state.keys import Keys
from tests.fakes.slack_api import TEAM_ID, FakeSlack
from tests.support.slack_helpers import (
    BOT_TOKEN,
    SIGNING_SECRET,
    event_body,
    events_app,
    json_bytes,
    signed_headers,
)
from tests.support.slack_helpers import mention as slack_mention
from tests.support.slack_helpers import message as slack_message

BOT = BotIdentity(user_id="UBOT", bot_id="BBOT", team_id="T1")


def body(event: dict[str, Any], event_id: str = "Ev1") -> dict[str, Any]:
    return {"type": "event_callback", "team_id": "T1", "event_id": event_id, "event": event}


def mention(**extra: Any) -> dict[str, Any]:
    event = {
        "type": "app_mention",
        "user": "U1",
        "channel": "C1",
        "ts": "100.1",
        "text": "<@UBOT> what is up?",
    }
    return {**event, **extra}


def message(**extra: Any) -> dict[str, Any]:
    event = {
        "type": "message",
        "channel_type": "channel",
        "user": "U1",
        "channel": "C1",
        "ts": "200.1",
        "text": "hello",
    }
    return {**event, **extra}


def test_a_top_level_mention_starts_a_thread_under_itself() -> None:
    inbound = to_inbound(body(mention()), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.text == "what is up?"
    assert inbound.mentions_bot and not inbound.is_dm and not inbound.follows_thread
    assert inbound.reply.thread == "100.1" and inbound.reply.reply_to == "100.1"
    assert inbound.side_reply.thread == "100.1" and inbound.side_reply.side
    assert inbound.speaker.name == "Ada" and inbound.speaker.id == "U1"
    assert inbound.event_id == "Ev1" and inbound.message_id == "100.1"


def test_a_mention_inside_a_thread_belongs_to_that_thread() -> None:
    inbound = to_inbound(body(mention(ts="150.2", thread_ts="100.1")), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.follows_thread
    assert inbound.reply.thread == "100.1" and inbound.reply.reply_to == "150.2"


def test_a_thread_follow_up_without_mention_is_passed_on_for_the_core_to_decide() -> None:
    inbound = to_inbound(body(message(ts="150.3", thread_ts="100.1", text="and then?")), BOT, "Ada")
    assert inbound is not None
    assert inbound.follows_thread and not inbound.mentions_bot
    assert inbound.session_key == "slack:T1:C1:100.1"


def test_the_message_copy_of_a_channel_mention_is_dropped() -> None:
    # Slack sends both app_mention and message for one mention, under two event ids.
    copy = message(ts="150.3", thread_ts="100.1", text="<@UBOT> again")
    assert to_inbound(body(copy, "Ev2"), BOT, "Ada") is None


def test_top_level_channel_chatter_is_dropped() -> None:
    assert to_inbound(body(message()), BOT, "Ada") is None


def test_a_dm_is_one_session_and_replies_at_top_level() -> None:
    inbound = to_inbound(body(message(channel="D1", channel_type="im", ts="300.1")), BOT, "Ada")
    assert inbound is not None
    assert inbound.is_dm and inbound.session_key == "slack:T1:D1"
    assert inbound.reply.thread is None and inbound.reply.reply_to == "300.1"
    assert inbound.side_reply.thread == "300.1"


def test_a_dm_thread_is_its_own_session() -> None:
    event = message(channel="D1", channel_type="im", ts="300.5", thread_ts="300.1")
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None
    assert inbound.session_key == "slack:T1:D1:300.1" and inbound.reply.thread == "300.1"


def test_a_mention_in_a_dm_is_kept_with_the_mention_stripped() -> None:
    event = message(channel="D1", channel_type="im", text="<@UBOT|gateway>  hi  there")
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None and inbound.text == "hi there" and inbound.mentions_bot


@pytest.mark.parametrize(
    "event",
    [
        message(thread_ts="100.1", subtype="bot_message", bot_id="B2"),
        message(thread_ts="100.1", bot_id="B2"),
        message(thread_ts="100.1", user="UBOT"),
        mention(user="UBOT"),
        message(thread_ts="100.1", subtype="message_changed"),
        message(thread_ts="100.1", subtype="message_deleted"),
        message(thread_ts="100.1", subtype="channel_join"),
        message(channel="D1", channel_type="im", subtype="bot_message", bot_id="B2"),
        {"type": "reaction_added", "user": "U1", "item": {}},
        message(thread_ts="100.1", user=None),
    ],
)
def test_what_is_not_a_person_writing_is_ignored(event: dict[str, Any]) -> None:
    assert to_inbound(body(event), BOT, "Ada") is None


@pytest.mark.parametrize("subtype", ["thread_broadcast", "file_share"])
def test_person_subtypes_are_kept(subtype: str) -> None:
    event = message(
        thread_ts="100.1",
        ts="150.9",
        subtype=subtype,
        files=[{"name": "a.png", "mimetype": "image/png", "url_private": "https://f/a"}],
    )
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None
    assert inbound.attachments[0].kind == "image" and inbound.attachments[0].name == "a.png"


def shared(*files: dict[str, Any]) -> tuple[Attachment, ...]:
    event = message(thread_ts="100.1", subtype="file_share", files=list(files))
    inbound = to_inbound(body(event), BOT, "Ada")
    assert inbound is not None
    return inbound.attachments


def test_a_file_keeps_its_declared_size_and_id_and_its_download_url_is_preferred() -> None:
    [png] = shared(
        {
            "id": "F0A1B2C3D",
            "name": "plan.png",
            "mimetype": "image/png",
            "size": 48213,
            "url_private": "https://files.slack.com/files-pri/T1-F0A1B2C3D/plan.png",
            "url_private_download": "https://files.slack.com/files-pri/T1-F0A1B2C3D/download/plan.png",
        }
    )
    assert (png.kind, png.size, png.file_id) == ("image", 48213, "F0A1B2C3D")
    assert png.url == "https://files.slack.com/files-pri/T1-F0A1B2C3D/download/plan.png"
    [older] = shared({"name": "a.txt", "url_private": "https://files.slack.com/a"})
    assert (older.kind, older.url, older.size) == ("file", "https://files.slack.com/a", None)


def test_audio_files_and_slack_audio_clips_are_voice() -> None:
    clip, upload, video = shared(
        {"name": "Audio Clip", "subtype": "slack_audio", "mimetype": "video/mp4"},
        {"name": "memo.m4a", "mimetype": "audio/mp4"},
        {"name": "demo.mp4", "subtype": "slack_video", "mimetype": "video/mp4"},
    )
    assert (clip.kind, upload.kind, video.kind) == ("voice", "voice", "file")


def test_deleted_and_hidden_files_are_named_without_an_address() -> None:
    url = "https://files.slack.com/files-pri/T1-F1/x.png"
    deleted, hidden = shared(
        {"id": "F1", "mode": "tombstone", "name": "x.png", "url_private": url},
        {"id": "F2", "mode": "hidden_by_limit", "title": "old.pdf", "url_private": url},
    )
    assert (deleted.name, deleted.url) == ("x.png", None)
    assert (hidden.name, hidden.url) == ("old.pdf", None)


def test_file_fields_of_the_wrong_type_are_left_out_and_the_message_kept() -> None:
    odd = {"name": 5, "mimetype": ["image/png"], "size": "big", "id": True, "url_private": 7}
    [kept] = shared(odd, "not a file")  # type: ignore[arg-type]
    assert kept == Attachment(kind="file")
    assert shared() == ()


def test_native_btw_targets_the_latest_session_and_answers_under_the_quote() -> None:
    command = {
        "team_id": "T1",
        "channel_id": "C1",
        "user_id": "U1",
        "text": " what did we decide? ",
        "trigger_id": "trig-1",
        "command": "/btw",
    }
    inbound = btw_inbound(command, "slack:T1:C1:100.1", "400.1", "Ada")
    assert inbound.session_key == "slack:T1:C1:100.1"
    assert inbound.text == "/btw what did we decide?"
    assert inbound.event_id == "trig-1"
    assert inbound.side_reply.thread == "400.1" and inbound.side_reply.side
    assert inbound.mentions_bot and not inbound.is_dm


def test_native_btw_in_a_dm() -> None:
    command = {"team_id": "T1", "channel_id": "D1", "user_id": "U1", "text": "q", "trigger_id": "t"}
    inbound = btw_inbound(command, "slack:T1:D1", "400.2", "Ada")
    assert inbound.is_dm and inbound.thread is None and inbound.session_key == "slack:T1:D1"


def test_session_thread() -> None:
    assert session_thread("slack:T1:C1:100.1") == "100.1"
    assert session_thread("slack:T1:D1") is None


# -- Slack Connect: who belongs to the installing organisation ------------------------


def installed(
    event: dict[str, Any],
    *,
    team_id: str = "T1",
    enterprise_id: str | None = None,
    home_enterprise: str | None = None,
) -> dict[str, Any]:
    """An envelope as Slack sends it to the installation in T1 (`authorizations`), where
    `team_id` / `enterprise_id` name the team the event came from."""
    envelope = {
        **body(event),
        "team_id": team_id,
        "is_ext_shared_channel": True,
        "authorizations": [
            {
                "enterprise_id": home_enterprise,
                "team_id": "T1",
                "user_id": "UBOT",
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
    }
    if enterprise_id is not None:
        envelope["enterprise_id"] = enterprise_id
    return envelope


def test_a_member_of_the_installing_workspace_is_not_external() -> None:
    for envelope in (
        body(mention()),
        body(mention(team="T1")),
        installed(mention(team="T1", user_team="T1")),
    ):
        inbound = to_inbound(envelope, BOT, "Ada")
        assert inbound is not None and not inbound.speaker.external


@pytest.mark.parametrize(
    "envelope",
    [
        # A message in a shared channel: the envelope names the author's team.
        installed(message(thread_ts="100.1", team="T2"), team_id="T2", enterprise_id="E2"),
        # A mention: the event keeps the installing team and names the author's in user_team,
        installed(mention(team="T1", user_team="T2", source_team="T2")),
        # or, for a member of another Enterprise Grid organisation, that organisation.
        installed(mention(team="T1", user_team="E2", source_team="E2")),
        # A Slack Connect DM.
        installed(message(channel="D1", channel_type="im", team="T2"), team_id="T2"),
    ],
)
def test_a_member_of_another_organisation_is_external(envelope: dict[str, Any]) -> None:
    inbound = to_inbound(envelope, BOT, "Eve")
    assert inbound is not None and inbound.speaker.external


def test_a_member_of_another_workspace_of_the_same_grid_organisation_is_not_external() -> None:
    sibling = installed(
        message(thread_ts="100.1", team="T3"),
        team_id="T3",
        enterprise_id="E1",
        home_enterprise="E1",
    )
    grid_mention = installed(mention(team="T1", user_team="E1"), home_enterprise="E1")
    for envelope in (sibling, grid_mention):
        inbound = to_inbound(envelope, BOT, "Ada")
        assert inbound is not None and not inbound.speaker.external


def test_a_shared_channel_keeps_one_session_whoever_writes() -> None:
    # The envelope's team_id is the author's team: the session is named by the installation.
    guest = to_inbound(
        installed(message(ts="150.3", thread_ts="100.1", team="T2"), team_id="T2"), BOT, "Eve"
    )
    member = to_inbound(installed(message(ts="150.4", thread_ts="100.1", team="T1")), BOT, "Ada")
    assert guest is not None and member is not None
    assert guest.session_key == member.session_key == "slack:T1:C1:100.1"
    assert guest.reply.workspace == "T1"


def test_native_btw_from_another_organisation_is_external() -> None:
    command = {"team_id": "T2", "channel_id": "C1", "user_id": "U7", "text": "q", "trigger_id": "t"}
    assert btw_inbound(command, "slack:T1:C1:100.1", "400.3", "Eve").speaker.external
    own = {**command, "team_id": "T1", "user_id": "U1"}
    assert not btw_inbound(own, "slack:T1:C1:100.1", "400.4", "Ada").speaker.external


# -- through the real bolt app: `POST /slack/events` into the real Ingest ---------------

GUEST, GUEST_TEAM = "U0GUEST", "T0GUEST"


@dataclass
class Web:
    http: httpx.AsyncClient
    redis: Redis

    async def post(self, body: bytes, content_type: str = "application/json") -> int:
        headers = signed_headers(body, content_type=content_type)
        response = await self.http.post("/slack/events", content=body, headers=headers)
        return response.status_code

    async def event(self, event: dict[str, Any], **envelope: Any) -> int:
        return await self.post(json_bytes({**event_body(event), **envelope}))

    async def guest_event(self, event: dict[str, Any]) -> int:
        """An event from GUEST, a member of another organisation, in a shared channel."""
        shared = {"is_ext_shared_channel": True}
        if event["type"] == "message":  # the envelope names the author's team
            return await self.event({**event, "team": GUEST_TEAM}, team_id=GUEST_TEAM, **shared)
        return await self.event(
            {**event, "user_team": GUEST_TEAM, "source_team": GUEST_TEAM}, **shared
        )

    async def jobs(self) -> list[dict[str, Any]]:
        entries = cast(
            list[tuple[str, dict[str, str]]], await self.redis.xrange(Keys.jobs("slack", 0))
        )
        return [
            {**fields, "payload": json.loads(fields.get("payload") or "{}")}
            for _, fields in entries
        ]


@pytest.fixture
async def web(slack: FakeSlack, redis_url: str) -> AsyncIterator[Web]:
    slack.add_user(GUEST, "Eve")
    async with events_app(slack, redis_url) as app:
        yield Web(app.http, app.redis)


async def session_texts(redis: Redis) -> list[str]:
    """Every user message written into any session."""
    texts = []
    for key in await redis.keys("*inbox*"):
        texts += [json.loads(entry)["text"] for entry in await redis.lrange(key, 0, -1)]
    return texts


async def test_a_guest_from_another_organisation_gets_one_refusal_and_no_turn(web: Web) -> None:
    assert await web.guest_event(slack_mention("what is our plan?", user=GUEST)) == 200
    assert (
        await web.guest_event(slack_message("hello?", user=GUEST, channel="D9", channel_type="im"))
        == 200
    )
    jobs = await web.jobs()
    assert [job["kind"] for job in jobs] == ["notice"]
    assert f"slack:{GUEST}" in jobs[0]["payload"]["text"]
    assert await session_texts(web.redis) == []


async def test_reset_and_stop_from_a_guest_leave_the_conversation_alone(web: Web) -> None:
    thread = slack_mention("remember 42")
    await web.event(thread)
    for command in ("/reset", "/stop"):
        await web.guest_event(slack_mention(command, user=GUEST, thread_ts=thread["ts"]))
    jobs = await web.jobs()
    assert [job["kind"] for job in jobs] == ["turn", "notice"]
    session = f"slack:{TEAM_ID}:C1:{thread['ts']}"
    assert await web.redis.hget(Keys.meta(session), "epoch") is None
    assert await session_texts(web.redis) == ["remember 42"]


async def test_native_btw_from_a_guest_reaches_no_model(web: Web, slack: FakeSlack) -> None:
    await web.guest_event(
        slack_message("hi from outside", user=GUEST, channel="D9", channel_type="im")
    )
    form = {
        "team_id": GUEST_TEAM,
        "channel_id": "D9",
        "channel_name": "directmessage",
        "user_id": GUEST,
        "command": "/btw",
        "text": "what did we say?",
        "trigger_id": "trig.guest",
        "api_app_id": "A0001",
    }
    assert await web.post(urlencode(form).encode(), "application/x-www-form-urlencoded") == 200
    assert not slack.calls_to("chat.postMessage")
    assert [job["kind"] for job in await web.jobs()] == ["notice"]


async def test_slack_allow_external_lets_a_guest_in(slack: FakeSlack, redis_url: str) -> None:
    slack.add_user(GUEST, "Eve")
    settings = load_settings(
        _env_file=None,
        REDIS_URL=redis_url,
        SLACK_BOT_TOKEN=BOT_TOKEN,
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.api_url,
        SLACK_ALLOW_EXTERNAL="1",
    )
    redis = Redis.from_url(redis_url, decode_responses=True)
    platform = SlackPlatform(settings, redis)
    app = create_app(redis, Ingest(settings, redis), [platform], ["slack"])
    await platform.startup()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as http:
        web = Web(http, redis)
        thread = slack_mention("a plan, please", user=GUEST)
        await web.guest_event(thread)
        jobs = await web.jobs()
    await redis.aclose()
    assert [job["kind"] for job in jobs] == ["turn"]
    assert jobs[0]["session"] == f"slack:{TEAM_ID}:C1:{thread['ts']}"
