"""What the conversation pages show. A conversation made by real turns (Ingest, a Worker,
the loopback model) shows its messages escaped, its tool calls and results, its
attachments, its summaries, and its `/btw` side answers apart from the history; the
list is searched by key parts, user and text; a long conversation shows its newest page."""

from __future__ import annotations

import asyncio
import json

import httpx
from redis.asyncio import Redis

from gateway.console.conversations import PAGE, Search, listing
from gateway.inbound.ingest import Ingest
from gateway.messages import Attachment
from gateway.state.keys import Keys
from tests.fakes.llm_server import FakeLLM
from tests.gateway.console.conftest import ORIGIN, TOKEN, build
from tests.support.conversation import assistant_entry, conversation, user_entry
from tests.support.helpers import inbound
from tests.support.helpers import settings as make_settings


async def _signed_in(client: httpx.AsyncClient) -> None:
    done = await client.post("/admin/signin", data={"token": TOKEN}, headers=ORIGIN)
    assert done.status_code == 303


async def test_a_conversation_made_by_real_turns_shows_every_kind_of_entry(
    redis_url: str, llm: FakeLLM
) -> None:
    async with conversation(redis_url, llm, GATEWAY_ADMIN_TOKEN=TOKEN) as talk:
        await talk.say("<script>document.title='owned'</script> hi")
        await talk.ingest.receive(
            inbound(
                "see this", channel="C1", attachments=[Attachment(kind="file", name="plan.txt")]
            )
        )
        await talk.idle()
        await talk.send("/btw what did I say first?")
        async with asyncio.timeout(20):
            while not await talk.redis.llen(Keys.side_answers(talk.key)):
                await asyncio.sleep(0.02)
        steps = [
            assistant_entry(
                "", "s1", tool_calls=[{"id": "c1", "name": "files__read", "arguments": '{"p": 1}'}]
            ),
            {
                "id": "s2",
                "role": "tool",
                "tool_call_id": "c1",
                "name": "files__read",
                "text": "contents <b>",
                "outcome": "ok",
            },
        ]
        await talk.redis.rpush(Keys.history(talk.key), *[json.dumps(e) for e in steps])
        summary = {
            "first_index": 0,
            "last_index": 1,
            "summary": "They said <hello>.",
            "model": "openai/compress-model",
            "fallback": False,
        }
        await talk.redis.rpush(Keys.segments(talk.key), json.dumps(summary))
        client, _ = build(talk.redis, talk.settings)
        async with client:
            await _signed_in(client)
            page = (await client.get(f"/admin/conversation?key={talk.key}")).text
    assert "&lt;script&gt;document.title=&#39;owned&#39;&lt;/script&gt; hi" in page
    assert "<script>document" not in page
    assert "fake reply to: &lt;script&gt;" in page
    assert "📎 plan.txt" in page
    assert 'class="entry step"' in page and "files__read({&#34;p&#34;: 1})" in page
    assert 'class="entry tool"' in page and "contents &lt;b&gt;" in page
    assert "They said &lt;hello&gt;." in page
    side = page[page.index("/btw side answers") :]
    assert "what did I say first?" in side and "fake reply to" in side


async def test_the_list_is_searched_by_key_parts_user_and_text(redis_client: Redis) -> None:
    ingest = Ingest(
        make_settings("redis://unused", GATEWAY_ALLOWED_USERS="test:U1,test:U2"), redis_client
    )
    await ingest.receive(inbound("about invoices", channel="C1", user="U1", name="Alice"))
    await ingest.receive(inbound("about lunch", channel="C2", user="U2", name="Bob"))
    await ingest.receive(inbound("lunch again", channel="C3", user="U1", name="Alice"))

    async def keys(**search: str) -> list[str]:
        return sorted(row.key for row in (await listing(redis_client, Search(**search))).rows)

    assert await keys() == ["test:W:C1", "test:W:C2", "test:W:C3"]
    assert await keys(channel="c2") == ["test:W:C2"]
    assert await keys(platform="slack") == []
    assert await keys(user="alice") == ["test:W:C1", "test:W:C3"]
    assert await keys(text="LUNCH") == ["test:W:C2", "test:W:C3"]
    assert await keys(user="U1", text="lunch") == ["test:W:C3"]


async def test_a_long_conversation_shows_its_newest_page_and_pages_back(
    redis_url: str, redis_client: Redis
) -> None:
    key = "test:W:C9"
    entries = [user_entry(f"message number {i}", f"e{i}") for i in range(PAGE + 50)]
    await redis_client.rpush(Keys.history(key), *[json.dumps(e) for e in entries])
    await redis_client.zadd(Keys.session_index(key), {key: 1.0})
    client, _ = build(redis_client, make_settings(redis_url, GATEWAY_ADMIN_TOKEN=TOKEN))
    async with client:
        await _signed_in(client)
        newest = (await client.get(f"/admin/conversation?key={key}")).text
        older = (await client.get(f"/admin/conversation?key={key}&before=50")).text
        missing = await client.get("/admin/conversation?key=test:W:nothing")
    assert f"message number {PAGE + 49}<" in newest and "message number 49<" not in newest
    assert "before=50" in newest
    assert "message number 49<" in older and "message number 50<" not in older
    assert missing.status_code == 404
