"""Slack files: where the bot token may go, and files shared in Slack reaching the model
through `gateway web` and `gateway worker` (the fake Slack's file host, the fake model)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.slack.files import FOREIGN, NO_ADDRESS, SlackFileSource
from gateway.errors import DownloadFailed
from gateway.media.documents import SIGN_IN_PAGE
from gateway.messages import Attachment
from tests.fakes.llm_server import FakeLLM
from tests.fakes.slack_api import BOT_TOKEN, FakeSlack, Message
from tests.support.media_files import png
from tests.support.redis_servers import free_port
from tests.support.slack_helpers import (
    Processes,
    environment,
    event_body,
    gateway,
    json_bytes,
    mention,
    signed_headers,
)

pytestmark = pytest.mark.timeout(150)

API = "http://127.0.0.1:8123/api/"
SOURCE = SlackFileSource(BOT_TOKEN, API)


def located(url: str | None, source: SlackFileSource = SOURCE) -> Any:
    return source.locate(Attachment(kind="image", url=url, name="a.png"))


@pytest.mark.parametrize(
    "url",
    [
        "https://files.slack.com/files-pri/T1-F1/download/a.png",
        "https://FILES.slack.com:443/files-pri/T1-F1/a.png",
        "http://127.0.0.1:8123/files-pri/T1-F1/a.png",  # SLACK_API_URL's own origin
    ],
)
async def test_the_token_goes_with_a_file_on_slacks_hosts(url: str) -> None:
    download = await located(url)
    assert download.url == url
    assert download.headers == {"Authorization": f"Bearer {BOT_TOKEN}"}


@pytest.mark.parametrize(
    "url",
    [
        "http://files.slack.com/files-pri/T1-F1/a.png",  # the token in clear text
        "https://files.slack.com.example.net/a.png",
        "https://example.net/files.slack.com/a.png",
        "https://files.slack.com@example.net/a.png",
        "https://user:pass@files.slack.com/a.png",
        "https://files.slack.com:8443/a.png",
        "https://files.slack.com:99999/a.png",
        "http://127.0.0.1:8124/files-pri/T1-F1/a.png",  # another port: another origin
        "https://127.0.0.1:8123/a.png",
        "ftp://files.slack.com/a.png",
        "file:///etc/passwd",
        "javascript:alert(1)",
    ],
)
async def test_a_file_anywhere_else_is_refused_before_any_request(url: str) -> None:
    with pytest.raises(DownloadFailed) as refused:
        await located(url)
    assert str(refused.value) == FOREIGN and BOT_TOKEN not in str(refused.value)


async def test_a_file_without_an_address_is_named_as_not_shared() -> None:
    with pytest.raises(DownloadFailed, match=NO_ADDRESS.split("(")[0].strip()):
        await located(None)


async def test_govslack_files_are_on_the_file_host_of_its_api() -> None:
    source = SlackFileSource(BOT_TOKEN, "https://slack-gov.com/api/")
    url = "https://files.slack-gov.com/files-pri/T1-F1/a.png"
    assert (await located(url, source)).headers["Authorization"] == f"Bearer {BOT_TOKEN}"
    with pytest.raises(DownloadFailed):
        await located("https://files.example.com/a.png", source)


# -- through gateway web and gateway worker ---------------------------------------------


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, slack: FakeSlack
) -> AsyncIterator[Processes]:
    env = environment(
        redis_url, llm.api_base, slack.api_url, free_port(), GATEWAY_MODEL="openai/gpt-4o"
    )
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


@pytest.fixture
def elsewhere() -> Iterator[FakeSlack]:
    """Another host that serves files to the bot token: it must never be asked."""
    with FakeSlack() as fake:
        yield fake


async def share(web: Processes, text: str, *files: dict[str, Any]) -> dict[str, Any]:
    event = {**mention(text), "files": list(files)}
    body = json_bytes(event_body(event))
    async with httpx.AsyncClient() as client:
        response = await client.post(web.events_url, content=body, headers=signed_headers(body))
    assert response.status_code == 200
    return event


def thread(slack: FakeSlack, event: dict[str, Any], count: int) -> list[Message]:
    """The bot's messages in the event's thread, once there are `count` of them."""
    slack.wait_for(lambda: len(slack.thread_messages("C1", event["ts"])) >= count, timeout=60)
    return sorted(slack.thread_messages("C1", event["ts"]), key=lambda m: m.ts)


async def test_a_png_shared_in_slack_reaches_a_vision_model_fetched_with_the_bot_token(
    web: Processes, slack: FakeSlack, llm: FakeLLM
) -> None:
    file = slack.files.add("plan.png", png(800, 600), "image/png")
    event = await share(web, "what does this show?", file)
    [reply] = thread(slack, event, 1)
    slack.wait_for(lambda: "fake reply to: Ada: what does this show?" in reply.text, timeout=30)
    [request] = llm.requests_for("gpt-4o")
    [data_url] = llm.image_parts(request)
    assert data_url.startswith("data:image/jpeg;base64,")
    [fetch] = slack.files.requests
    assert fetch.path.endswith(f"{file['id']}/download/plan.png")  # url_private_download
    assert fetch.token == BOT_TOKEN


async def test_a_login_page_and_a_foreign_address_get_one_notice_each_and_the_text_is_answered(
    web: Processes, slack: FakeSlack, elsewhere: FakeSlack, llm: FakeLLM
) -> None:
    slack.files.scope_granted = False  # an app without files:read gets the sign-in page
    hidden = slack.files.add("shot.png", png(), "image/png")
    notes = slack.files.add("notes.txt", b"the plan", "text/plain")
    forged = elsewhere.files.add("forged.png", png(), "image/png")
    event = await share(web, "what do these show?", hidden, notes, forged)
    notice, reply = thread(slack, event, 2)
    slack.wait_for(lambda: "fake reply to: Ada: what do these show?" in reply.text, timeout=30)
    assert notice.text.splitlines() == [
        "⚠️ shot.png: not an image that can be read",
        f"⚠️ notes.txt: {SIGN_IN_PAGE}",
        f"⚠️ forged.png: {FOREIGN}",
    ]
    assert [f.token for f in slack.files.requests] == [BOT_TOKEN] * 2  # then the sign-in page
    assert elsewhere.files.requests == []  # the token never went there
    [request] = llm.requests_for("gpt-4o")
    assert llm.image_parts(request) == []
    assert "Sign in" not in json.dumps(request["messages"])  # the page never reaches the model
    assert BOT_TOKEN not in "\n".join(web.output().splitlines())
