"""TelegramFileSource against the fake Bot API: getFile, the file URL beside
TELEGRAM_API_URL, and the bot token kept out of reprs, errors, logs and notices."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from adapters.telegram import TelegramPlatform
from adapters.telegram.client import file_base_url
from adapters.telegram.files import TelegramFileSource
from gateway.errors import DownloadFailed
from gateway.media.download import Downloader
from gateway.messages import Attachment
from gateway.settings.env import load_settings
from tests.fakes.llm_server import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.support.harness import start_workers, texts
from tests.support.helpers import inbound
from tests.support.media_files import png


@pytest.fixture
async def source(
    fake_telegram: FakeTelegram, redis_client: aioredis.Redis
) -> AsyncIterator[TelegramFileSource]:
    settings = load_settings(
        TELEGRAM_BOT_TOKEN=fake_telegram.token, TELEGRAM_API_URL=fake_telegram.base_url
    )
    telegram = TelegramPlatform(settings, redis_client)
    sender = telegram.sender()
    try:
        yield telegram.file_source()  # over the sender's client, closed with it
    finally:
        await sender.aclose()


def photo(file_id: str) -> Attachment:
    return Attachment(kind="image", name="photo.jpg", mime_type="image/jpeg", file_id=file_id)


def test_the_file_url_sits_beside_the_api_url() -> None:
    assert file_base_url("https://api.telegram.org/bot") == "https://api.telegram.org/file/bot"
    assert file_base_url("http://127.0.0.1:8081/bot") == "http://127.0.0.1:8081/file/bot"
    assert file_base_url("https://bot.example.com/tg/bot{token}") == (
        "https://bot.example.com/tg/file/bot{token}"
    )


async def test_a_file_is_located_and_downloaded_from_the_file_url(
    fake_telegram: FakeTelegram, source: TelegramFileSource
) -> None:
    data = png()
    download = await source.locate(photo(fake_telegram.add_file(data)))
    assert download.url == f"{fake_telegram.url}/file/bot{fake_telegram.token}/photos/file_0.jpg"
    assert fake_telegram.token not in repr(download) and fake_telegram.token not in repr(source)
    downloader = Downloader(timeout=5, deadline=10)
    try:
        assert await downloader.fetch(download, 1_000_000) == data
    finally:
        await downloader.aclose()


@pytest.mark.parametrize(
    ("status", "description", "reason"),
    [
        (400, "Bad Request: file is too big", "over the 20 MB Telegram lets bots download"),
        (400, "Bad Request: invalid file_id", "Telegram could not find it (it may have expired)"),
        (403, "Forbidden: bot was blocked", "Telegram refused access to it"),
        (502, "Bad Gateway", "Telegram could not be reached to fetch it"),
    ],
)
async def test_every_getfile_failure_is_a_short_reason(
    fake_telegram: FakeTelegram,
    source: TelegramFileSource,
    caplog: pytest.LogCaptureFixture,
    status: int,
    description: str,
    reason: str,
) -> None:
    caplog.set_level(logging.DEBUG, logger="adapters")
    fake_telegram.fail_next("getFile", status=status, description=description)
    with pytest.raises(DownloadFailed) as failed:
        await source.locate(photo(fake_telegram.add_file(b"x")))
    assert str(failed.value) == reason
    assert fake_telegram.token not in caplog.text


async def test_an_attachment_without_a_file_id_is_refused_without_a_call(
    fake_telegram: FakeTelegram, source: TelegramFileSource
) -> None:
    with pytest.raises(DownloadFailed, match="no file id"):
        await source.locate(Attachment(kind="image", name="photo.jpg"))
    assert fake_telegram.calls_to("getFile") == []


async def test_a_failed_download_tells_the_user_without_the_token(
    redis_url: str,
    llm: FakeLLM,
    fake_telegram: FakeTelegram,
    source: TelegramFileSource,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through a worker's turn: the file is gone from the file URL after getFile named it."""
    caplog.set_level(logging.DEBUG, logger="gateway")
    caplog.set_level(logging.DEBUG, logger="adapters")
    caplog.set_level(logging.INFO)
    file_id = fake_telegram.add_file(png())
    fake_telegram.expire(file_id)  # getFile still names its path; the file URL answers 404
    async with start_workers(redis_url, llm, 1, sources={"test": source}) as h:
        await h.ingest.receive(inbound("look at this", attachments=(photo(file_id),)))
        await h.idle("test:W:C1")
        notice, answer = texts(h.sender)
        assert notice == "⚠️ photo.jpg: not found (the link may have expired)"
        assert answer.startswith("fake reply to: look at this")
    assert fake_telegram.downloads == ["photos/file_0.jpg"]
    assert fake_telegram.token not in caplog.text and fake_telegram.token not in str(
        h.sender.messages
    )
