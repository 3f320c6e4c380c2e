"""The console: one local user on standard input, replies on standard output.

A main reply is printed once, complete, as `bot: ...`; a side answer as `btw:
...`. An approval request is printed with `approve? [y/n]`; while one is
pending, an input line that is y or n (yes, no) is the console user's click on
it, and any other line a message as usual. At the end of input the console waits
for the replies still owed: the jobs on its own stream (`gateway run` gives each
run one) and on the streams of other console runs (gateway/state/console_jobs.py: what
a run that is gone left is taken over and answered here), not a count an earlier
run left in the session. A stop (Ctrl-C) ends the reading after the line being
sent: a line the console took is never dropped halfway.

`/attach PATH [text]` sends a local file with the text (a path with spaces in
quotes): the worker reads it through `LocalFileSource`, as it reads any
platform's files, so the media path can be tried without an account. A path
that is not a readable file is answered with one line, and nothing is sent.
"""

from __future__ import annotations

import asyncio
import codecs
import concurrent.futures
import contextlib
import getpass
import itertools
import mimetypes
import os
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TextIO

from gateway.errors import DownloadFailed
from gateway.inbound.ingest import Ingest
from gateway.messages import Address, Attachment, Decision, Inbound, Speaker
from gateway.ports import Download, Limits
from gateway.state.console_jobs import ConsoleJobs

PLATFORM = "console"
_ADDRESS = Address(platform=PLATFORM, workspace="local", channel="console")
SESSION_KEY = "console:local:console"
USER_ID = "local"  # the one console user, who asked for every tool the console runs
PROMPT = "approve? [y/n]"
_ANSWERS = {"y": True, "yes": True, "n": False, "no": False}
ATTACH = "/attach"
ATTACH_USAGE = "Usage: /attach PATH [text] (quote a path that has spaces)"


class AttachRefused(ValueError):
    """A `/attach` line that names no readable file; its text is the line the user reads."""


class ConsoleSender:
    """Prints final texts only: a terminal cannot edit what it printed."""

    platform = PLATFORM

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._ids = itertools.count(1)

    def limits(self, address: Address) -> Limits:
        return Limits(max_length=1_000_000, edit_interval=float("inf"))

    def measure(self, markdown: str) -> int:
        return len(markdown)

    async def send(
        self,
        address: Address,
        markdown: str,
        *,
        final: bool,
        key: str | None = None,
        feedback: bool = False,
    ) -> str:
        if final:
            self._print(address, markdown)
        return str(next(self._ids))

    async def edit(
        self,
        address: Address,
        message_id: str,
        markdown: str,
        *,
        final: bool,
        feedback: bool = False,
    ) -> None:
        if final:
            self._print(address, markdown)

    async def thinking(self, address: Address, on: bool) -> None:
        return None

    async def is_admin(self, address: Address, user_id: str, *, dm: bool) -> bool:
        """The console's one user runs the gateway: they administer it."""
        return True

    async def ask_approval(self, address: Address, markdown: str, approval_id: str) -> str:
        """The request, then a line asking for y or n (the next such input line decides)."""
        self._print(address, f"{markdown}\n{PROMPT}")
        return str(next(self._ids))

    async def settle_approval(self, address: Address, message_id: str, markdown: str) -> None:
        self._print(address, markdown)

    async def aclose(self) -> None:
        return None

    def _print(self, address: Address, text: str) -> None:
        prefix = "btw: " if address.side else "bot: "
        self.out.write(f"{prefix}{text}\n")
        self.out.flush()


class LocalFileSource:
    """The console's files are on this machine: the `file://` path its user named."""

    async def locate(self, attachment: Attachment) -> Download:
        if not attachment.url or not attachment.url.startswith("file://"):
            raise DownloadFailed("a console file is named by a file:// path")
        return Download(attachment.url, local=True)


def to_inbound(
    line: str, number: int, user: str, attachments: tuple[Attachment, ...] = ()
) -> Inbound:
    return Inbound(
        platform=PLATFORM,
        workspace="local",
        channel="console",
        message_id=str(number),
        event_id=uuid.uuid4().hex,
        speaker=Speaker(id=USER_ID, name=user),
        text=line,
        is_dm=True,
        attachments=attachments,
        reply=_ADDRESS.model_copy(update={"reply_to": str(number)}),
        side_reply=_ADDRESS.model_copy(update={"reply_to": str(number), "side": True}),
    )


async def run(
    ingest: Ingest,
    stdin: int | None = None,
    poll: float = 0.05,
    out: TextIO | None = None,
    *,
    stop: asyncio.Event | None = None,
    jobs: ConsoleJobs | None = None,
) -> None:
    """Feed standard input (a file descriptor) to the gateway, then wait for the replies
    still owed; return early once `stop` is set."""
    stop = stop or asyncio.Event()
    stream = ingest.sessions.stream(PLATFORM, SESSION_KEY)
    jobs = jobs or ConsoleJobs(ingest.redis, SESSION_KEY, stream)
    user = _user_name()
    number = 0
    async for line in _lines(sys.stdin.fileno() if stdin is None else stdin, stop):
        number += 1
        if not line.strip() or await _answered(ingest, line):
            continue
        try:
            inbound = message(line, number, user)
        except AttachRefused as refused:
            (out or sys.stdout).write(f"bot: {refused}\n")
            continue
        await ingest.receive(inbound)
    while not stop.is_set() and not await jobs.settled():  # a job leaves as it completes
        await _wait(stop, poll)


def message(line: str, number: int, user: str) -> Inbound:
    """The Inbound of an input line; a `/attach` line's carries the file (AttachRefused
    when it names none)."""
    named = parse_attach(line)
    if named is None:
        return to_inbound(line, number, user)
    path, text = named
    return to_inbound(text, number, user, (local_attachment(path),))


def parse_attach(line: str) -> tuple[str, str] | None:
    """(path, text) of `/attach PATH [text]`; None for any other line. A path with spaces
    is quoted ("..." or '...')."""
    command, _, rest = line.strip().partition(" ")
    if command != ATTACH:
        return None
    rest = rest.strip()
    if rest[:1] in ("'", '"'):
        end = rest.find(rest[0], 1)
        if end < 0:
            raise AttachRefused(f"The path's closing quote is missing. {ATTACH_USAGE}")
        path, text = rest[1:end], rest[end + 1 :]
    else:
        path, _, text = rest.partition(" ")
    if not path:
        raise AttachRefused(ATTACH_USAGE)
    return path, text.strip()


def local_attachment(path_text: str) -> Attachment:
    """The file at `path_text` as an Attachment: a `file://` URL, its size, and its kind by
    its type (an image, audio as a voice message to transcribe, any other file)."""
    try:
        path = Path(path_text).expanduser().resolve(strict=True)
        size = path.stat().st_size
    except (OSError, RuntimeError):
        raise AttachRefused(f"Cannot attach {path_text}: no such file.") from None
    if not path.is_file() or not os.access(path, os.R_OK):
        raise AttachRefused(f"Cannot attach {path_text}: not a file this user can read.")
    mime = mimetypes.guess_type(path.name)[0]
    major = (mime or "").partition("/")[0]
    kind = {"image": "image", "audio": "voice"}.get(major, "file")
    return Attachment(kind=kind, url=path.as_uri(), name=path.name, mime_type=mime, size=size)


def answer(line: str) -> bool | None:
    """True for y/yes, False for n/no (any case, spaces around), None for anything else."""
    return _ANSWERS.get(line.strip().lower())


async def _answered(ingest: Ingest, line: str) -> bool:
    """Whether `line` was a y/n answer to a pending approval request (and is settled)."""
    approve = answer(line)
    if approve is None:
        return False
    pending = await ingest.approvals.pending(SESSION_KEY)
    if not pending:
        return False
    decision = Decision(
        platform=PLATFORM,
        approval_id=pending[0],
        user_id=USER_ID,
        approve=approve,
        event_id=uuid.uuid4().hex,
        address=_ADDRESS,
    )
    await ingest.decide(decision)
    return True


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


async def _lines(fd: int, stop: asyncio.Event) -> AsyncIterator[str]:
    """The lines read from `fd` (without their newline), up to the end of input or
    `stop` (a line taken as it comes is still given).

    A daemon thread reads them: a read that waits for the next Enter cannot be
    cancelled, and a stop (Ctrl-C) must wait neither for it nor for that thread.
    It reads the descriptor itself, not `sys.stdin`, whose buffer lock a thread
    left reading would hold while the interpreter shuts down. It stays at most
    one read ahead of the lines taken.
    """
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue(maxsize=1)

    def hand_over(line: str | None) -> bool:
        try:
            asyncio.run_coroutine_threadsafe(lines.put(line), loop).result()
        except (RuntimeError, concurrent.futures.CancelledError):
            return False  # the run is over
        return True

    threading.Thread(
        target=_read_lines, args=(fd, hand_over), name="console-input", daemon=True
    ).start()
    stopped = asyncio.ensure_future(stop.wait())
    taking: asyncio.Future[str | None] | None = None
    try:
        while True:
            taking = asyncio.ensure_future(lines.get())
            await asyncio.wait({taking, stopped}, return_when=asyncio.FIRST_COMPLETED)
            line = taking.result() if taking.done() else None
            if line is None:
                return
            yield line
    finally:
        stopped.cancel()
        if taking is not None:
            taking.cancel()


def _read_lines(fd: int, hand_over: Callable[[str | None], bool]) -> None:
    decoder = codecs.getincrementaldecoder(_encoding())(errors="replace")
    pending = ""
    while chunk := _read(fd):
        *complete, pending = (pending + decoder.decode(chunk)).split("\n")
        for line in complete:
            if not hand_over(line):
                return
    pending += decoder.decode(b"", final=True)
    if not pending or hand_over(pending):
        hand_over(None)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # the terminal went away: that is the end of input
        return b""


def _encoding() -> str:
    return (sys.stdin.encoding if sys.stdin is not None else None) or "utf-8"


def _user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local user"
