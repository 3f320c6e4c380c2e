"""A reply's message through Slack's streaming methods: chat.startStream, then
chat.appendStream with what is new, then chat.stopStream (`SlackStream`, the core's
`LiveMessage`).

Slack holds the text appended so far and renders it as Markdown itself, so what goes
out is `safe_markdown` of the reply, never mrkdwn; each call carries only what Slack
does not hold yet. The text shown while the reply streams stops before its last word when
that word could still become a mention or a link (`@he…`, `[x](javascript:…`), so it is
defused, whole, before any of it goes out; a word of plain letters goes out at once (the
reply's first word starts the stream).

Every call sends `chunks` (markdown text and `task_update` chunks for the reply's tool
steps), never `markdown_text`: Slack refuses both in one call, and refuses a stream
opened with one and continued with the other (`streaming_mode_mismatch`), and the
steps can only travel as chunks. Each markdown chunk holds at most MARKDOWN_LIMIT
characters (counted in UTF-16 units, as Slack's limits are), a longer delta going over
several calls.

A final text that does not extend what Slack holds (the safe form of the text changed
behind the stream) is written by stopping the stream and then chat.update, the whole
text in a `markdown` block.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Iterator, Sequence
from typing import Any, Protocol

from adapters.slack.blocks import feedback_block, markdown_blocks
from adapters.slack.errors import BLOCKS_REFUSED
from adapters.slack.render import no_pings, safe_markdown, to_mrkdwn
from gateway.errors import StreamRefused
from gateway.messages import Address
from gateway.ports import Step

log = logging.getLogger(__name__)

MARKDOWN_LIMIT = 12_000  # one markdown_text's limit (chat.startStream, appendStream, stopStream)
TITLE_LIMIT = 256  # a task's title, as long as Slack shows it
STREAM_MECHANISM = "stream"


class StreamCalls(Protocol):
    """The Web API calls a stream makes: a streaming method with the address's token,
    a refusal of the surface raised as StreamRefused (`SlackSender.stream_call`)."""

    def __call__(self, api_method: str, address: Address, **kwargs: Any) -> Awaitable[Any]: ...


def is_dm(address: Address) -> bool:
    """A direct message with the app: Slack streams there without naming a recipient."""
    return address.channel.startswith("D")


class SlackStream:
    """One message of a reply, streamed to `recipient` (the asker) at `address`.

    `metadata` (the reply's key, as `SlackSender.send` gives a post) goes with the stream
    from its start, so that a re-run finds a message its predecessor left streaming.
    `interval` is the least time between two calls: chat.appendStream is Tier 4 (100+
    a minute, per workspace and shared by every reply streaming there), and Slack
    animates the text it appends, so an append every `interval` seconds reads as smooth
    as an edit twice as often.
    """

    refresh: float | None = None  # a stream lives on between calls

    def __init__(
        self,
        call: StreamCalls,
        address: Address,
        recipient: str,
        *,
        interval: float,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.message_id: str | None = None
        self.interval = interval
        self._call, self._address, self._recipient = call, address, recipient
        self._metadata = metadata
        self._sent = ""  # the markdown Slack holds
        self._steps: dict[str, Step] = {}  # each step as Slack shows it
        self._stopped = False

    async def show(self, markdown: str, steps: Sequence[Step]) -> None:
        safe = safe_markdown(markdown)
        held = _before_last_word(safe)
        delta = held[len(self._sent) :] if held.startswith(self._sent) else ""
        await self._write(delta, self._changed(steps))

    async def close(self, markdown: str, steps: Sequence[Step], *, feedback: bool) -> str:
        safe = safe_markdown(markdown)
        changed = self._changed(steps)
        extends = safe.startswith(self._sent)
        if not self._stopped:
            delta = safe[len(self._sent) :] if extends else ""
            pieces = list(_pieces(delta, MARKDOWN_LIMIT))
            await self._write("".join(pieces[:-1]), [])
            last = pieces[-1] if pieces else ""
            blocks = [feedback_block()] if feedback and extends else None
            await self._stop(last, changed, blocks)
        if not extends:
            await self._rewrite(markdown, safe, feedback)
        assert self.message_id is not None
        return self.message_id

    async def _write(self, delta: str, steps: list[Step]) -> None:
        """Start the stream, or append to it: `delta` in as many calls as it takes, the
        steps with its first."""
        pieces = list(_pieces(delta, MARKDOWN_LIMIT)) or [""]
        for index, piece in enumerate(pieces):
            sent_steps = steps if index == 0 else []
            chunks = _text(piece) + self._tasks(sent_steps)
            if not chunks:
                return
            if self.message_id is None:
                await self._start(chunks)
            else:
                await self._call(
                    "chat.appendStream",
                    self._address,
                    channel=self._address.channel,
                    ts=self.message_id,
                    chunks=chunks,
                )
            self._shown(piece, sent_steps)

    async def _start(self, chunks: list[dict[str, Any]]) -> None:
        if not is_dm(self._address) and not self._recipient:
            # Slack streams into a channel only to a named reader: refused without asking.
            raise StreamRefused("missing_recipient_user_id", for_channel=False)
        address = self._address
        started = await self._call(
            "chat.startStream",
            address,
            channel=address.channel,
            thread_ts=address.thread,
            recipient_user_id=self._recipient or None,
            recipient_team_id=address.workspace if self._recipient else None,
            task_display_mode="timeline",
            chunks=chunks or None,
            metadata=self._metadata,
        )
        self.message_id = str(started["ts"])

    async def _stop(
        self, piece: str, steps: list[Step], blocks: list[dict[str, Any]] | None
    ) -> None:
        if self.message_id is None:  # closed before it was ever shown: started with it all
            await self._write(piece, steps)
            piece, steps = "", []
        if self.message_id is None:
            await self._start([])
        assert self.message_id is not None
        stop = functools.partial(
            self._call,
            "chat.stopStream",
            self._address,
            channel=self._address.channel,
            ts=self.message_id,
            chunks=(_text(piece) + self._tasks(steps)) or None,
            metadata=self._metadata,
        )
        try:
            await stop(blocks=blocks)
        except StreamRefused as exc:
            if not blocks or exc.code not in BLOCKS_REFUSED:
                raise
            log.warning(
                "%s: %s; the reply ends without its feedback buttons", self._address.chat_key, exc
            )
            await stop()
        self._shown(piece, steps)
        self._stopped = True

    async def _rewrite(self, markdown: str, safe: str, feedback: bool) -> None:
        """The stopped message edited to the whole final text (`safe`, what Slack renders;
        `markdown`'s mrkdwn, what notifications show)."""
        blocks = markdown_blocks(safe) + ([feedback_block()] if feedback else [])
        assert self.message_id is not None
        await self._call(
            "chat.update",
            self._address,
            channel=self._address.channel,
            ts=self.message_id,
            text=to_mrkdwn(markdown) or " ",
            blocks=blocks,
        )
        self._sent = safe

    def _changed(self, steps: Sequence[Step]) -> list[Step]:
        """The steps Slack does not show as they are now."""
        return [step for step in steps if self._steps.get(step.id) != step]

    def _tasks(self, steps: list[Step]) -> list[dict[str, Any]]:
        return [_task(step, self._steps.get(step.id)) for step in steps]

    def _shown(self, piece: str, steps: list[Step]) -> None:
        """What a call Slack took holds: `piece` appended, `steps` as they are."""
        self._sent += piece
        for step in steps:
            self._steps[step.id] = step


def _task(step: Step, shown: Step | None) -> dict[str, Any]:
    """A step as a task_update chunk; its `details` only when they changed (Slack adds the
    details it is sent to what the task shows)."""
    task: dict[str, Any] = {
        "type": "task_update",
        "id": step.id,
        "title": no_pings(step.title)[:TITLE_LIMIT] or step.id,
        "status": step.state,
    }
    if step.details and (shown is None or shown.details != step.details):
        task["details"] = no_pings(step.details)
    return task


def _text(piece: str) -> list[dict[str, Any]]:
    return [{"type": "markdown_text", "text": piece}] if piece else []


# What a word still being written needs to become a mention, a link or an entity: a last
# word without any of these is sent as it is (the first words of a reply show at once).
_MAY_GROW_UNSAFE = frozenset("@<>[]()!#:&|^")


def _before_last_word(text: str) -> str:
    """`text` up to its last word and the spaces before it: what no later text changes;
    the last word too when nothing that follows it can make it a mention or a link."""
    kept = text.rstrip()
    cut = max(kept.rfind(" "), kept.rfind("\n"), kept.rfind("\t"))
    if not _MAY_GROW_UNSAFE.intersection(kept[cut + 1 :]):
        return kept
    return kept[: cut + 1] if cut >= 0 else ""


def _pieces(text: str, limit: int) -> Iterator[str]:
    """`text` in pieces of at most `limit` UTF-16 units, cut between characters."""
    start, size = 0, 0
    for index, char in enumerate(text):
        width = 2 if ord(char) > 0xFFFF else 1
        if size + width > limit:
            yield text[start:index]
            start, size = index, 0
        size += width
    if start < len(text):
        yield text[start:]
