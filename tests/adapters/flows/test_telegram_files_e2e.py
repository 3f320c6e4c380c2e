"""Files from Telegram, end to end: `gateway web` + `gateway worker` as subprocesses, the
real python-telegram-bot asking the fake Bot API's getFile and downloading from its file
URL, litellm sending the result to the fake model (a vision model, whisper)."""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fakes.llm_server import FakeLLM, default_reply
from tests.fakes.telegram_api import FakeTelegram, Message
from tests.support.media_files import pdf, png
from tests.support.redis_servers import free_port
from tests.support.telegram_helpers import (
    ALICE,
    SECRET,
    Gateway,
    environment,
    gateway,
)

pytestmark = pytest.mark.timeout(150)

CHAT = ALICE["id"]
_ids = itertools.count(1)


@pytest.fixture
async def web(
    tmp_path: Path, redis_url: str, llm: FakeLLM, fake_telegram: FakeTelegram
) -> AsyncIterator[Gateway]:
    env = environment(
        redis_url,
        llm,
        fake_telegram,
        free_port(),
        GATEWAY_MODEL="openai/gpt-4o",
        GATEWAY_TRANSCRIPTION_MODEL="openai/whisper-1",
        GATEWAY_ALBUM_WAIT="2",
    )
    async with gateway(tmp_path, env, "web", "worker") as processes:
        yield processes


def file_message(caption: str | None = None, **media: Any) -> dict[str, Any]:
    """An update whose message carries a file (photo, voice, document...) and a caption."""
    number = next(_ids)
    body: dict[str, Any] = {
        "message_id": 100 + number,
        "date": 1700000000,
        "from": ALICE,
        "chat": {"id": CHAT, "type": "private", "first_name": "Alice"},
        **media,
    }
    if caption is not None:
        body["caption"] = caption
    return {"update_id": number, "message": body}


def photo(file_id: str, size: int) -> list[dict[str, Any]]:
    """The sizes Telegram offers of one photo: a thumbnail and the photo itself."""
    return [
        {"file_id": "thumb-" + file_id, "file_unique_id": "t", "width": 90, "height": 90},
        {"file_id": file_id, "file_unique_id": "p", "width": 800, "height": 600, "file_size": size},
    ]


async def deliver(web: Gateway, update: dict[str, Any]) -> None:
    headers = {"content-type": "application/json", "X-Telegram-Bot-Api-Secret-Token": SECRET}
    async with httpx.AsyncClient() as client:
        response = await client.post(web.webhook_url, content=json.dumps(update), headers=headers)
    assert response.status_code == 200


async def replies(fake_telegram: FakeTelegram, llm: FakeLLM) -> list[Message]:
    """The bot's messages in the chat once every answer the model gave is on screen whole
    (an answer still being streamed into its message does not count)."""

    def done() -> bool:
        answers = [default_reply(r) for r in llm.requests_for("gpt-4o")]
        shown = [m.text for m in fake_telegram.messages_in(CHAT)]
        return bool(answers) and all(answer in shown for answer in answers)

    await fake_telegram.wait_for(done, within=60)
    return fake_telegram.messages_in(CHAT)


def user_messages(request: dict[str, Any]) -> list[str]:
    """The text of each user message (the text part of a message with images)."""
    contents = [m["content"] for m in request["messages"] if m["role"] == "user"]
    return [c if isinstance(c, str) else c[0]["text"] for c in contents]


async def test_a_photo_reaches_a_vision_model_as_an_image(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    data = png(1200, 900)
    file_id = fake_telegram.add_file(data)
    await deliver(web, file_message("what is this?", photo=photo(file_id, len(data))))
    await replies(fake_telegram, llm)
    [request] = llm.requests_for("gpt-4o")
    [image] = llm.image_parts(request)
    assert image.startswith("data:image/")
    assert user_messages(request)[-1].startswith("what is this?\n[image: photo.jpg]\n")
    assert [c.params["file_id"] for c in fake_telegram.calls_to("getFile")] == [file_id]
    assert fake_telegram.downloads == ["photos/file_0.jpg"]
    assert fake_telegram.token not in web.output()


async def test_a_voice_note_is_transcribed_and_answered(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    llm.transcript = "remind me to call the plumber"
    audio = b"OggS" + bytes(3000)
    voice = {"file_id": fake_telegram.add_file(audio, "voice", ".oga"), "file_unique_id": "v"}
    await deliver(web, file_message(voice=voice | {"duration": 2, "mime_type": "audio/ogg"}))
    await replies(fake_telegram, llm)
    [heard] = llm.transcriptions
    assert (heard.model, heard.filename, heard.audio) == ("whisper-1", "voice.ogg", audio)
    content = user_messages(llm.requests_for("gpt-4o")[-1])[-1]
    assert "[voice message, transcribed]: remind me to call the plumber" in content


async def test_a_pdf_documents_text_reaches_the_model(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    data = pdf("Quarterly revenue grew 12 percent")
    document = {
        "file_id": fake_telegram.add_file(data, "documents", ".pdf"),
        "file_unique_id": "d",
        "file_name": "q3.pdf",
        "mime_type": "application/pdf",
        "file_size": len(data),
    }
    await deliver(web, file_message("summarise", document=document))
    await replies(fake_telegram, llm)
    content = user_messages(llm.requests_for("gpt-4o")[-1])[-1]
    assert "summarise\n[file: q3.pdf]\nQuarterly revenue grew 12 percent" in content


async def test_an_album_of_two_photos_is_one_message_with_two_images(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    pictures = [png(300, 200, (200, 0, 0)), png(300, 200, (0, 0, 200))]
    for index, data in enumerate(pictures):
        caption = "compare these" if index == 0 else None
        media = {"photo": photo(fake_telegram.add_file(data), len(data)), "media_group_id": "4242"}
        await deliver(web, file_message(caption, **media))
    await replies(fake_telegram, llm)
    [request] = llm.requests_for("gpt-4o")
    assert len(llm.image_parts(request)) == 2
    [content] = user_messages(request)
    assert content.startswith("compare these\n[image: photo.jpg]\n[image: photo.jpg]\n")
    assert len([m for m in fake_telegram.messages_in(CHAT) if "fake reply" in m.text]) == 1


async def test_a_file_telegram_will_not_give_gets_one_notice_and_the_caption_is_answered(
    web: Gateway, fake_telegram: FakeTelegram, llm: FakeLLM
) -> None:
    fake_telegram.fail_next("getFile", status=400, description="Bad Request: file is too big")
    data = png()
    await deliver(
        web, file_message("here is the scan", photo=photo(fake_telegram.add_file(data), 1000))
    )
    messages = await replies(fake_telegram, llm)
    notice, answer = [m.text for m in messages]
    assert notice == "⚠️ photo.jpg: over the 20 MB Telegram lets bots download"
    assert answer.startswith("fake reply to: here is the scan")
    assert llm.image_parts(llm.requests_for("gpt-4o")[-1]) == []
    assert fake_telegram.downloads == []
    assert fake_telegram.token not in web.output()
