"""MessageCompiler: what a main turn sends to the model.

Full mode: the system prompt, the session's history (its compressed view),
and one `<system-reminder>` block of dynamic context on the last user message.
The history part is a pure function of the stored entries, so it is identical
from one turn to the next and a provider's prompt cache over it stays warm.

Delta mode, for a provider that keeps the conversation on its side: the
system prompt, only the entries after the cursor (the id of the last entry
the provider has seen), and the reminder block.

What users write (their texts, names and file names) reaches the model with
its reminder tags escaped (`reminders.escape_tags`), so the gateway's block is
the only one in a request; a name sits on one line, as it shares a line the
gateway writes (the speaker prefix, the reminder's "This reply goes to ...").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.context import reminders
from gateway.context.media_parts import MediaView, inline
from gateway.errors import ContextMismatch
from gateway.state.session import Entry

Message = dict[str, Any]
Mode = Literal["full", "delta"]


@dataclass(frozen=True, slots=True)
class ReplyTarget:
    """Who the reply goes to, and where."""

    speaker_name: str
    speaker_id: str
    place: str  # "Slack channel C1, thread 1712.33" ...


@dataclass(frozen=True, slots=True)
class TurnContext:
    """Everything a turn's request is built from."""

    session_key: str
    entries: Sequence[Entry]
    target: ReplyTarget | None
    injections: Sequence[str] = ()
    group: bool = False
    segments: Sequence[dict[str, Any]] = ()
    cursor: str | None = None
    media: MediaView = field(default_factory=MediaView)


@dataclass(frozen=True, slots=True)
class CompiledRequest:
    messages: list[Message]
    mode: Mode
    reminder: str | None = None


class MessageCompiler:
    """Builds main-turn requests for one session."""

    def __init__(self, session_key: str, system_prompt: str) -> None:
        self.session_key = session_key
        self.system_prompt = system_prompt

    def compile(self, context: TurnContext) -> CompiledRequest:
        if context.session_key != self.session_key:
            raise ContextMismatch(
                f"compiler for {self.session_key!r} was given the context of "
                f"{context.session_key!r}"
            )
        mode: Mode = "full"
        delta = self.delta_entries(context)
        if delta is None:
            history = self.history_view(context)
        else:
            mode, history = "delta", self._messages(delta, context.group, context.media)
        block = reminders.combine(self.reminder_texts(context))
        messages = [{"role": "system", "content": self.system_prompt}, *history]
        if block is not None:
            messages = reminders.append_block(messages, block)
        return CompiledRequest(messages, mode, block)

    def history_view(self, context: TurnContext) -> list[Message]:
        """The history as provider messages, compression segments applied.

        The last segment's summary stands for everything up to its last entry
        (each summary is written on top of the one before, so it covers every
        earlier segment too), as one user-role message: several providers
        reject a system message in the middle of a conversation.
        """
        segment, entries = split_view(context.entries, context.segments)
        messages = [summary_message(segment)] if segment is not None else []
        return messages + self._messages(entries, context.group, context.media)

    def delta_entries(self, context: TurnContext) -> Sequence[Entry] | None:
        """The entries after the cursor, for a provider that holds the rest; None for full mode.

        The cursor is an entry id checked against the current view: when that
        entry is not in it (compressed away, or another conversation since a
        reset), the provider's state cannot be trusted and the turn goes in full.
        """
        if context.cursor is None:
            return None
        _, entries = split_view(context.entries, context.segments)
        position = _position(entries, context.cursor)
        return None if position is None else entries[position + 1 :]

    @staticmethod
    def _messages(entries: Sequence[Entry], group: bool, media: MediaView) -> list[Message]:
        """The entries as provider messages, each tool call followed by its results.

        Providers refuse a tool call without its result right after it. A loop
        interrupted between the two (a crash, a reset, a turn given up) left a
        call without one: it gets a result that says so. A user message that
        came while a loop waited is placed after that loop's results.
        """
        calls = {
            call.get("id")
            for entry in entries
            if entry.get("role") == "assistant"
            for call in entry.get("tool_calls") or ()
        }
        results = {
            entry.get("tool_call_id"): entry
            for entry in entries
            if entry.get("role") == "tool" and entry.get("tool_call_id") in calls
        }
        messages: list[Message] = []
        for entry in entries:
            if entry.get("tool_call_id") in results and entry.get("role") == "tool":
                continue  # placed right after its call below
            message = entry_message(entry, group, media)
            if message is None:
                continue
            messages.append(message)
            for call in message.get("tool_calls") or ():
                result = results.get(call["id"])
                answer = entry_message(result, group) if result is not None else None
                messages.append(
                    answer or {"role": "tool", "tool_call_id": call["id"], "content": NO_RESULT}
                )
        return messages

    def reminder_texts(self, context: TurnContext) -> list[str]:
        texts: list[str] = []
        if context.target is not None:
            target = context.target
            texts.append(
                f"This reply goes to {inline(target.speaker_name)} (id {target.speaker_id}) "
                f"in {target.place}."
            )
        texts.extend(context.injections)
        return texts


NO_RESULT = "[no result: the call was interrupted, and may or may not have taken effect]"
SUMMARY_HEADER = "[Summary of the earlier conversation, standing in for its first {count} messages]"


def split_view(
    entries: Sequence[Entry], segments: Sequence[dict[str, Any]]
) -> tuple[dict[str, Any] | None, Sequence[Entry]]:
    """The segment that stands for the oldest part, and the entries after it.

    `entries` may be the whole history or only its part after the last
    segment (what a turn loads); entries up to the segment's last one are
    dropped either way.
    """
    if not segments:
        return None, entries
    segment = segments[-1]
    position = _position(entries, str(segment.get("last_id", "")))
    return segment, entries if position is None else entries[position + 1 :]


def summary_message(segment: dict[str, Any]) -> Message:
    """A segment as it appears in the view: one user message marked as a summary."""
    count = int(segment.get("last_index", -1)) + 1
    header = SUMMARY_HEADER.format(count=count)
    return {"role": "user", "content": f"{header}\n\n{segment.get('summary', '')}"}


def _position(entries: Sequence[Entry], entry_id: str) -> int | None:
    # From the end: the entry looked for (a cursor, a segment's end) is usually recent.
    for index in range(len(entries) - 1, -1, -1):
        if entries[index].get("id") == entry_id:
            return index
    return None


def entry_message(entry: Entry, group: bool, media: MediaView | None = None) -> Message | None:
    """One history entry as a provider message; None for an entry that is not one.

    Without `media`, a user entry's attachments appear as labels (what token
    counts and summaries read); with it, as `gateway.context.media_parts` renders them.
    """
    role = entry.get("role")
    text = entry.get("text")
    if role == "user":
        return {"role": "user", "content": _user_content(entry, group, media or MediaView())}
    if role == "assistant":
        message: Message = {"role": "assistant", "content": text if isinstance(text, str) else ""}
        if entry.get("tool_calls"):
            message["tool_calls"] = [_tool_call(call) for call in entry["tool_calls"]]
        return message
    if role == "tool":
        return {
            "role": "tool",
            "tool_call_id": entry.get("tool_call_id", ""),
            "content": text if isinstance(text, str) else "",
        }
    return None


def _user_content(entry: Entry, group: bool, media: MediaView) -> str | list[Any]:
    """A user entry's text, its attachments after it; with images, multimodal parts."""
    text = entry.get("text")
    if isinstance(text, list):
        return [_escaped_part(part) for part in text]
    blocks, images = media.render(entry)
    body = "\n".join([reminders.escape_tags(str(text or "")), *blocks])
    speaker = (entry.get("speaker") or {}).get("name")
    body = f"{inline(str(speaker))}: {body}" if group and speaker else body
    return [{"type": "text", "text": body}, *images] if images else body


def _escaped_part(part: Any) -> Any:
    """A part of multimodal user content, its text (if any) with the reminder tags escaped."""
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return {**part, "text": reminders.escape_tags(part["text"])}
    return part


def _tool_call(call: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call.get("id", ""),
        "type": "function",
        "function": {"name": call.get("name", ""), "arguments": call.get("arguments", "{}")},
    }
