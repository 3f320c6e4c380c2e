"""Files through a real worker turn: loopback file host, real Redis, litellm to the fake model."""

from __future__ import annotations

import base64
import io
import time
from collections.abc import AsyncIterator

import pytest
from PIL import Image

from gateway.delivery.pacing import SendPacing
from gateway.messages import Attachment
from gateway.state.keys import Keys
from tests.fakes.files import FakeFiles
from tests.fakes.llm_server import FakeLLM
from tests.support.harness import Harness, start_workers, texts
from tests.support.helpers import inbound
from tests.support.media_files import bomb_png_header, pdf, png, truncated_jpeg

KEY = "test:W:C1"


@pytest.fixture
async def vision(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    values = {"GATEWAY_MODEL": "openai/gpt-4o", "GATEWAY_IMAGE_TURNS": 2}
    async with start_workers(redis_url, llm, 1, **values) as h:
        yield h


@pytest.fixture
async def voice(redis_url: str, llm: FakeLLM) -> AsyncIterator[Harness]:
    values = {"GATEWAY_TRANSCRIPTION_MODEL": "openai/whisper-1"}
    async with start_workers(redis_url, llm, 1, **values) as h:
        yield h


def image(url: str, name: str = "photo.png") -> Attachment:
    return Attachment(kind="image", url=url, name=name, mime_type="image/png")


def last_user_content(request: dict[str, object]) -> object:
    messages = request["messages"]
    assert isinstance(messages, list)
    return [m for m in messages if m["role"] == "user"][-1]["content"]


async def test_a_png_reaches_a_vision_model_as_an_image_part(
    vision: Harness, files: FakeFiles
) -> None:
    url = files.add("photo.png", png(2400, 1200), content_type="image/png")
    await vision.ingest.receive(inbound("what is this?", attachments=(image(url),)))
    await vision.idle(KEY)
    request = vision.llm.requests_for("gpt-4o")[-1]
    [data_url] = vision.llm.image_parts(request)
    assert data_url.startswith("data:image/jpeg;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(data_url.partition(",")[2])))
    assert decoded.size == (1568, 784)
    content = last_user_content(request)
    assert isinstance(content, list)
    assert content[0]["text"].startswith("what is this?\n[image: photo.png]")
    assert "<system-reminder>" in content[0]["text"]  # the reminder stays on the text part
    assert texts(vision.sender)[-1].startswith("fake reply to")


async def test_an_image_from_an_older_turn_is_sent_by_name(
    vision: Harness, files: FakeFiles
) -> None:
    url = files.add("old.png", png(), content_type="image/png")
    await vision.ingest.receive(inbound("look", attachments=(image(url, "old.png"),)))
    await vision.idle(KEY)
    for text in ("second", "third"):
        await vision.ingest.receive(inbound(text))
        await vision.idle(KEY)
    requests = vision.llm.requests_for("gpt-4o")
    assert len(vision.llm.image_parts(requests[1])) == 1  # within the last two user turns
    assert vision.llm.image_parts(requests[2]) == []
    first = next(m for m in requests[2]["messages"] if m["role"] == "user")
    assert first["content"] == "look\n[image: old.png]"
    assert len(files.requests) == 1  # downloaded once, read from Redis after


async def test_a_model_that_cannot_see_gets_the_name_and_the_user_is_told_once(
    harness: Harness, files: FakeFiles
) -> None:
    url = files.add("photo.png", png(), content_type="image/png")
    for text in ("see this", "and this"):
        await harness.ingest.receive(inbound(text, attachments=(image(url),)))
        await harness.idle(KEY)
    requests = harness.llm.requests_for("main-model")
    assert harness.llm.image_parts(requests[0]) == []
    content = last_user_content(requests[0])
    assert isinstance(content, str)
    assert content.startswith("see this\n[image: photo.png]")
    assert "cannot see images" in content  # the turn's reminder says so
    notices = [t for t in texts(harness.sender) if "cannot see images" in t]
    assert len(notices) == 1


async def test_a_voice_note_is_transcribed_and_answered(voice: Harness, files: FakeFiles) -> None:
    voice.llm.transcript = "please book the meeting room"
    url = files.add("note.ogg", b"OggS" + b"\1" * 2000, content_type="audio/ogg")
    note = Attachment(kind="voice", url=url, name="note.ogg", mime_type="audio/ogg")
    await voice.ingest.receive(inbound("", attachments=(note,)))
    await voice.idle(KEY)
    [heard] = voice.llm.transcriptions
    assert (heard.model, heard.filename, len(heard.audio)) == ("whisper-1", "note.ogg", 2004)
    content = last_user_content(voice.llm.requests_for("main-model")[-1])
    assert "[voice message, transcribed]: please book the meeting room" in str(content)
    heard, answer = texts(voice.sender)  # the user sees what was heard, then the answer
    assert heard == "🎤 note.ogg: “please book the meeting room”"
    assert answer.startswith("fake reply to")


async def test_a_long_transcript_is_quoted_back_cut_and_never_twice(
    voice: Harness, files: FakeFiles
) -> None:
    voice.llm.transcript = "word " * 100
    url = files.add("long.ogg", b"OggS" + b"\1" * 500, content_type="audio/ogg")
    note = Attachment(kind="voice", url=url, name="long.ogg", mime_type="audio/ogg")
    await voice.ingest.receive(inbound("", attachments=(note,)))
    await voice.idle(KEY)
    await voice.ingest.receive(inbound("and then?"))
    await voice.idle(KEY)
    heard = [t for t in texts(voice.sender) if t.startswith("🎤")]
    assert len(heard) == 1  # the next turn reads the stored transcript and quotes nothing
    quote = heard[0].removeprefix("🎤 long.ogg: “").removesuffix("”")
    assert len(quote) == 200 and quote.endswith("…") and "\n" not in quote


async def test_a_pdfs_text_reaches_the_model(harness: Harness, files: FakeFiles) -> None:
    url = files.add("report.pdf", pdf("Revenue grew 12 percent"), content_type="application/pdf")
    doc = Attachment(kind="file", url=url, name="report.pdf", mime_type="application/pdf")
    await harness.ingest.receive(inbound("summarise", attachments=(doc,)))
    await harness.idle(KEY)
    content = last_user_content(harness.llm.requests_for("main-model")[-1])
    assert "summarise\n[file: report.pdf]\nRevenue grew 12 percent" in str(content)


async def test_every_failed_file_gets_one_line_and_the_rest_is_still_answered(
    redis_url: str, llm: FakeLLM, files: FakeFiles
) -> None:
    values = {"GATEWAY_MEDIA_FILE_BYTES": 20_000_000, "GATEWAY_DOWNLOAD_TIMEOUT": 0.5}
    attachments = (
        image(files.add("big.png", b"\0" * 30_000_000, declare_length=False), "big.png"),
        image(files.add("bomb.png", bomb_png_header()), "bomb.png"),
        image(files.add("cut.jpg", truncated_jpeg(), content_type="image/jpeg"), "cut.jpg"),
        Attachment(kind="file", url=files.add("scan.pdf", b"just text"), name="scan.pdf"),
        image(f"{files.url}/files/missing.png", "missing.png"),
        image(files.add("stuck.png", png(900, 900), stall_after=0), "stuck.png"),
        Attachment(kind="file", url=files.add("notes.md", b"# kept"), name="notes.md"),
    )
    async with start_workers(redis_url, llm, 1, **values) as h:
        await h.ingest.receive(inbound("here are my files", attachments=attachments))
        await h.idle(KEY, timeout=30)
        notice, answer = texts(h.sender)
        assert notice.splitlines() == [
            "⚠️ big.png: over the 20 MB limit",
            "⚠️ bomb.png: 20000×20000 pixels, over the limit of 50,000,000 pixels",
            "⚠️ cut.jpg: a damaged or truncated image",
            "⚠️ scan.pdf: not a PDF",
            "⚠️ missing.png: not found (the link may have expired)",
            "⚠️ stuck.png: the download stalled",
        ]
        assert answer.startswith("fake reply to: here are my files")
        content = str(last_user_content(llm.requests_for("main-model")[-1]))
        assert "[file: notes.md]\n# kept" in content
        assert "[file: scan.pdf, not used: not a PDF]" in content
        metrics = await h.metrics()
        assert metrics["downloads|too_large"] == "1"
        assert metrics["downloads|timeout"] == "1"
        assert metrics["downloads|ok"] == "4"


async def test_the_notice_about_failed_files_keeps_the_chats_send_pacing(
    harness: Harness, files: FakeFiles
) -> None:
    harness.sender.chat_interval = 0.05  # a platform that limits sends per chat
    harness.sender.rate_limit_next = [0.3]  # and answers the notice "wait 0.3 s" at first
    message = inbound("here", attachments=(image(f"{files.url}/files/gone.png", "gone.png"),))
    banned_at = time.monotonic()
    await SendPacing(harness.sessions.redis).ban(message.reply.chat_key, 0.5)
    await harness.ingest.receive(message)
    await harness.idle(KEY)
    notice, answer = texts(harness.sender)
    assert notice == "⚠️ gone.png: not found (the link may have expired)"
    assert answer.startswith("fake reply to: here")
    refused, sent = [c for c in harness.sender.calls if c.op in ("429", "send")][:2]
    assert refused.at - banned_at >= 0.49  # nothing went out while another worker's ban held
    assert (sent.op, sent.text) == ("send", notice)
    assert sent.at - refused.at >= 0.29  # sent again once the platform's wait was over


async def test_reset_removes_the_sessions_stored_files(harness: Harness, files: FakeFiles) -> None:
    url = files.add("photo.png", png(), content_type="image/png")
    await harness.ingest.receive(inbound("keep", attachments=(image(url),)))
    await harness.idle(KEY)
    redis = harness.sessions.redis
    assert await redis.exists(Keys.media(KEY))
    assert 0 < await redis.ttl(Keys.media(KEY)) <= 7 * 86_400
    await harness.sessions.reset(KEY)
    assert not await redis.exists(Keys.media(KEY))


async def test_btw_reads_images_and_documents_by_name_and_a_voice_note_by_its_words(
    voice: Harness, files: FakeFiles
) -> None:
    voice.llm.transcript = "the budget is due friday"
    attachments = (
        image(files.add("chart.png", png(), content_type="image/png"), "chart.png"),
        Attachment(kind="file", url=files.add("plan.md", b"# secret plan"), name="plan.md"),
        Attachment(kind="voice", url=files.add("v.ogg", b"OggS1234"), name="v.ogg"),
    )
    await voice.ingest.receive(inbound("context", attachments=attachments))
    await voice.idle(KEY)
    await voice.ingest.receive(inbound("/btw what did I send?"))
    [side] = await voice.llm.await_requests(1, model="side-model")
    prompt = str(side["messages"])
    assert "[image: chart.png] [file: plan.md]" in prompt
    assert "[voice message, transcribed]: the budget is due friday" in prompt
    assert "secret plan" not in prompt  # a document is named, not replayed


async def test_status_counts_the_files_a_conversation_keeps(
    harness: Harness, files: FakeFiles
) -> None:
    attachments = (
        image(files.add("a.png", png(), content_type="image/png"), "a.png"),
        image(files.add("b.png", png(), content_type="image/png"), "b.png"),
        Attachment(kind="file", url=files.add("r.pdf", pdf("report")), name="r.pdf"),
    )
    await harness.ingest.receive(inbound("see these", attachments=attachments))
    await harness.idle(KEY)
    await harness.ingest.receive(inbound("/status"))
    await harness.idle(KEY)
    status = texts(harness.sender)[-1]
    assert "Files kept: 1 document, 2 images." in status.splitlines()
