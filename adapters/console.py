"""The console: one local user on standard input, replies on standard output.

A main reply is printed once, complete, as `bot: ...`; a side answer as
`btw: ...`. At the end of input the console waits for every reply still owed.
"""

from __future__ import annotations

import asyncio
import getpass
import itertools
import sys
import uuid
from typing import TextIO

from gateway.ingest import Ingest
from gateway.model import Address, Inbound, Speaker
from gateway.ports import Limits
from gateway.session import SessionStore

PLATFORM = "console"
_ADDRESS = Address(platform=PLATFORM, workspace="local", channel="console")


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

    async def send(self, address: Address, markdown: str, *, final: bool) -> str:
        if final:
            self._print(address, markdown)
        return str(next(self._ids))

    async def edit(self, address: Address, message_id: str, markdown: str, *, final: bool) -> None:
        if final:
            self._print(address, markdown)

    async def thinking(self, address: Address, on: bool) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def _print(self, address: Address, text: str) -> None:
        prefix = "btw: " if address.side else "bot: "
        self.out.write(f"{prefix}{text}\n")
        self.out.flush()


def to_inbound(line: str, number: int, user: str) -> Inbound:
    return Inbound(
        platform=PLATFORM,
        workspace="local",
        channel="console",
        message_id=str(number),
        event_id=uuid.uuid4().hex,
        speaker=Speaker(id="local", name=user),
        text=line,
        is_dm=True,
        reply=_ADDRESS.model_copy(update={"reply_to": str(number)}),
        side_reply=_ADDRESS.model_copy(update={"reply_to": str(number), "side": True}),
    )


async def run(ingest: Ingest, stdin: TextIO | None = None, poll: float = 0.05) -> None:
    """Feed standard input to the gateway, then wait until no reply is owed."""
    source = stdin or sys.stdin
    user = _user_name()
    loop = asyncio.get_running_loop()
    session_key = to_inbound("", 0, user).session_key
    for number in itertools.count(1):
        line = await loop.run_in_executor(None, source.readline)
        if not line:
            break
        if line.strip():
            await ingest.receive(to_inbound(line.rstrip("\n"), number, user))
    sessions = SessionStore(ingest.redis)
    while await sessions.owed(session_key) > 0:
        await asyncio.sleep(poll)


def _user_name() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "local user"
