"""The console's approval prompt: printed with `approve? [y/n]`, answered by the next y/n line."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from adapters import console
from gateway.approvals.store import Status
from gateway.inbound.ingest import Ingest
from gateway.messages import Address
from gateway.state.keys import Keys
from tests.support.cli_runs import run_console
from tests.support.helpers import settings

ADDRESS = Address(platform="console", workspace="local", channel="console")


async def _until(condition: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not await condition():
            await asyncio.sleep(0.01)


async def _typed(ingest: Ingest, text: str) -> asyncio.Task[None]:
    """`console.run` reading `text` from a pipe, as if typed."""
    read, write = os.pipe()
    os.write(write, text.encode())
    os.close(write)
    task = asyncio.create_task(console.run(ingest, stdin=read))
    task.add_done_callback(lambda _: os.close(read))
    return task


async def _open(ingest: Ingest) -> str:
    return await ingest.approvals.open(
        console.SESSION_KEY, "0.0", "c1", "files__delete", "{}", console.USER_ID, ADDRESS, 600
    )


async def test_the_prompt_shows_the_request_and_asks_for_y_or_n() -> None:
    out = io.StringIO()
    sender = console.ConsoleSender(out)
    message_id = await sender.ask_approval(ADDRESS, "Run `files__delete`?", "a" * 16)
    await sender.settle_approval(ADDRESS, message_id, "Declined.")
    assert out.getvalue() == "bot: Run `files__delete`?\napprove? [y/n]\nbot: Declined.\n"


def test_yes_and_no_in_any_case_are_answers_and_nothing_else_is() -> None:
    assert [console.answer(w) for w in ("y", " YES ", "n", "No")] == [True, True, False, False]
    assert [console.answer(w) for w in ("yes please", "", "ok")] == [None, None, None]


async def test_a_y_line_approves_the_pending_request_and_the_next_line_is_a_message(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    approval_id = await _open(ingest)
    task = await _typed(ingest, "y\nthanks\n")

    async def settled() -> bool:
        approval = await ingest.approvals.by_id(console.SESSION_KEY, approval_id)
        inbox = await ingest.sessions.inbox(console.SESSION_KEY)
        return approval is not None and approval.status == Status.APPROVED and len(inbox) == 1

    await _until(settled)
    task.cancel()
    inbox = await ingest.sessions.inbox(console.SESSION_KEY)
    assert [entry["text"] for entry in inbox] == ["thanks"]
    jobs = await redis_client.xrange(Keys.jobs("console", 0))
    assert [fields["kind"] for _, fields in jobs] == ["turn"]  # one, shared by both


async def test_without_a_pending_request_y_is_a_message(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    task = await _typed(ingest, "n\n")

    async def received() -> bool:
        return len(await ingest.sessions.inbox(console.SESSION_KEY)) == 1

    await _until(received)
    task.cancel()


def test_attach_names_a_path_quoted_when_it_has_spaces_and_the_rest_is_text() -> None:
    assert console.parse_attach("/attach notes.txt what is in it?") == (
        "notes.txt",
        "what is in it?",
    )
    assert console.parse_attach('/attach "my notes.txt"  read this ') == (
        "my notes.txt",
        "read this",
    )
    assert console.parse_attach("/attach 'a b/c.pdf'") == ("a b/c.pdf", "")
    assert console.parse_attach("attach notes.txt") is None
    assert console.parse_attach("/attachment x") is None


def test_an_attach_line_without_a_path_or_a_closing_quote_is_refused() -> None:
    for line in ("/attach", "/attach   ", '/attach "no end.txt hello'):
        try:
            console.parse_attach(line)
        except console.AttachRefused as refused:
            assert "/attach PATH [text]" in str(refused)
        else:
            raise AssertionError(f"{line!r} was not refused")


def test_an_attached_file_has_a_file_url_its_size_and_a_kind_by_its_type(tmp_path: Path) -> None:
    (tmp_path / "chart.png").write_bytes(b"\x89PNG" + bytes(96))
    (tmp_path / "memo.ogg").write_bytes(b"OggS")
    (tmp_path / "plan notes.md").write_text("# plan")
    found = {
        name: console.local_attachment(str(tmp_path / name))
        for name in ("chart.png", "memo.ogg", "plan notes.md")
    }
    assert [a.kind for a in found.values()] == ["image", "voice", "file"]
    chart = found["chart.png"]
    assert (chart.size, chart.mime_type) == (100, "image/png")
    assert chart.url == (tmp_path / "chart.png").as_uri()
    assert str(found["plan notes.md"].url).endswith("/plan%20notes.md")


async def test_a_missing_file_is_refused_in_one_line_and_nothing_is_sent(
    redis_url: str, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    ingest = Ingest(settings(redis_url), redis_client)
    out = io.StringIO()
    read, write = os.pipe()
    missing = tmp_path / "missing.pdf"
    os.write(write, f"/attach {missing} summarise\n/attach {tmp_path}\n".encode())
    os.close(write)
    try:
        await asyncio.wait_for(console.run(ingest, stdin=read, out=out), 10)
    finally:
        os.close(read)
    assert out.getvalue().splitlines() == [
        f"bot: Cannot attach {missing}: no such file.",
        f"bot: Cannot attach {tmp_path}: not a file this user can read.",
    ]
    assert await ingest.sessions.inbox(console.SESSION_KEY) == []
    assert await redis_client.xlen(Keys.jobs("console", 0)) == 0


def test_an_attached_documents_text_reaches_the_echo_model(tmp_path: Path) -> None:
    """`gateway run --console` on a fresh machine: the whole path, without any account."""
    notes = tmp_path / "meeting notes.txt"
    notes.write_text("The launch moved to Thursday.\n")
    result = run_console(tmp_path, f'/attach "{notes}" when is the launch?\n')
    assert result.returncode == 0, result.stderr
    [reply] = [line for line in result.stdout.splitlines() if line.startswith("bot: ")]
    assert "You said: when is the launch?" in reply
    assert "[file: meeting notes.txt] The launch moved to Thursday." in reply
