"""The conversation as plain text: what `/btw` and the summariser read instead of raw messages.

A side question's model and the compression model both see the history
rendered to plain text, newest last, never replayed as provider messages (an
assistant tool-call entry would trip a request that declares no tools):

    EARLIER CONVERSATION (summary): - Alice asked for the deploy log …
    [... 12 earlier messages omitted ...]
    USER (Alice): can you check the deploy log?
    ASSISTANT [called tools: read_file]
    TOOL RESULT (read_file): deploy finished in 41s …
    ASSISTANT: The deploy finished in 41 seconds.
    ASSISTANT (still writing, in progress): Looking at the

Each message is capped and the whole kept within `max_chars` characters, newest first. One
escaping for every part: a message's continuation lines are indented and a
name (a speaker's, a tool's) is kept on one line, so no text can forge a line
of its own. `/btw` passes the summary and the reply still being written; the
summariser passes neither. Everything here is pure: no Redis, no model client.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from gateway.media.items import MediaItem

PLACEHOLDER: Final = "(no earlier conversation)"
CUT: Final = "…"
SUMMARY_LABEL: Final = "EARLIER CONVERSATION (summary)"
SUMMARY_SHARE: Final = 0.5  # of `max_chars`, at most, for the summary

# Text-bearing content blocks across the chat and Responses API shapes.
_TEXT_BLOCKS: Final = frozenset({"text", "input_text", "output_text"})
# Continuation lines of a message are indented, so no message can forge a
# `USER:` line or a delimiter line of its own.
_INDENT: Final = "  "


def render_transcript(
    entries: Iterable[object] | None,
    *,
    message_cap: int = 2000,
    max_chars: int = 24000,
    live_reply: str | None = None,
    summary: str | None = None,
    media: Mapping[str, Mapping[int, MediaItem]] | None = None,
) -> str:
    """The conversation as plain text, newest last.

    System messages are skipped and malformed entries ignored. Each message is
    capped at `message_cap` characters; the oldest messages are dropped until the
    whole fits `max_chars`, behind a marker line saying how many were left out. A
    non-empty `live_reply` (the reply still being streamed) is always kept, last.
    A non-empty `summary` (of the conversation before `entries`) always opens it,
    cut to at most half of `max_chars`, so it never crowds out the newest messages.
    `media` (the session's processed attachments, by entry id and index) shows an
    image by name, a voice message by its transcript, a document by name.
    """
    blocks = _render_entries(entries or (), message_cap, media or {})
    live = (
        _clip(f"ASSISTANT (still writing, in progress): {_indented(live_reply)}", message_cap)
        if live_reply and live_reply.strip()
        else None
    )
    earlier = (
        _clip(f"{SUMMARY_LABEL}: {_indented(summary.strip())}", int(max_chars * SUMMARY_SHARE))
        if summary and summary.strip()
        else None
    )
    if not blocks and live is None and earlier is None:
        return PLACEHOLDER
    if earlier is None:
        return _fit(blocks, live, max_chars)
    rest = _fit(blocks, live, max(0, max_chars - len(earlier) - 1))
    return f"{earlier}\n{rest}" if rest else earlier


# -- rendering one entry ----------------------------------------------------------


def _render_entries(
    entries: Iterable[object], message_cap: int, media: Mapping[str, Mapping[int, MediaItem]]
) -> list[str]:
    tool_names: dict[str, str] = {}
    blocks: list[str] = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        block = _render_entry(entry, tool_names, media.get(str(entry.get("id")), {}))
        if block:
            blocks.append(_clip(block, message_cap))
    return blocks


def _render_entry(
    entry: Mapping[object, object], tool_names: dict[str, str], items: Mapping[int, MediaItem]
) -> str | None:
    """One entry as text, or None when it is not shown (system) or not well-formed."""
    role = entry.get("role")
    text = _text_of(entry.get("text", entry.get("content")))
    if not isinstance(role, str) or text is None:
        return None
    if role == "user":
        return _render_user(entry, text, items)
    if role == "assistant":
        return _render_assistant(entry, text, tool_names)
    if role == "tool":
        return _render_tool(entry, text, tool_names)
    return None  # system, developer, or a role we do not know


def _render_user(
    entry: Mapping[object, object], text: str, items: Mapping[int, MediaItem]
) -> str | None:
    speaker = entry.get("speaker")
    name = speaker.get("name") if isinstance(speaker, Mapping) else None
    label = f"USER ({_one_line(name)})" if isinstance(name, str) and name.strip() else "USER"
    body = " ".join(part for part in (text.strip(), _attachments(entry, items)) if part)
    return f"{label}: {_indented(body)}" if body else None


def _render_assistant(
    entry: Mapping[object, object], text: str, tool_names: dict[str, str]
) -> str | None:
    lines = [f"ASSISTANT: {_indented(text.strip())}"] if text.strip() else []
    called = _tool_calls(entry.get("tool_calls"), tool_names)
    if called:
        lines.append(f"ASSISTANT [called tools: {', '.join(map(_one_line, called))}]")
    return "\n".join(lines) or None


def _render_tool(entry: Mapping[object, object], text: str, tool_names: dict[str, str]) -> str:
    call_id = entry.get("tool_call_id")
    name = tool_names.get(call_id) if isinstance(call_id, str) else None
    if name is None and isinstance(entry.get("name"), str):
        name = str(entry["name"])
    label = f"TOOL RESULT ({_one_line(name)})" if name else "TOOL RESULT"
    return f"{label}: {_indented(text.strip()) or '(empty)'}"


def _text_of(content: object) -> str | None:
    """The text of a content value: a string, the text blocks of a list, or None if malformed."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") in _TEXT_BLOCKS:
            block_text = block.get("text")
            if isinstance(block_text, str):
                parts.append(block_text)
    return "\n".join(part for part in parts if part)


def _tool_calls(calls: object, tool_names: dict[str, str]) -> list[str]:
    """The names of an assistant entry's tool calls (both entry and OpenAI shapes)."""
    if not isinstance(calls, list):
        return []
    names: list[str] = []
    for call in calls:
        if not isinstance(call, Mapping):
            continue
        function = call.get("function")
        name = function.get("name") if isinstance(function, Mapping) else call.get("name")
        if not isinstance(name, str) or not name:
            continue
        names.append(name)
        call_id = call.get("id")
        if isinstance(call_id, str):
            tool_names[call_id] = name
    return names


def _attachments(entry: Mapping[object, object], items: Mapping[int, MediaItem]) -> str:
    attachments = entry.get("attachments")
    if not isinstance(attachments, list):
        return ""
    shown = [_media_label(items[i]) for i in range(len(attachments)) if i in items]
    labels = [
        _one_line(str(item.get("name") or item.get("kind") or "file"))
        for i, item in enumerate(attachments)
        if isinstance(item, Mapping) and i not in items
    ]
    if labels:
        shown.append(f"[attached: {', '.join(labels)}]")
    return " ".join(shown)


def _media_label(item: MediaItem) -> str:
    """A processed attachment in a transcript: images and documents by name, a voice
    message by what was said."""
    name = _one_line(item.name)
    if item.kind == "voice" and item.text:
        return f"[voice message, transcribed]: {item.text}"
    if item.kind == "image":
        return f"[image: {name}]"
    return f"[voice message: {name}]" if item.kind == "voice" else f"[file: {name}]"


def _indented(text: str | None) -> str:
    r"""`text` with every continuation line indented.

    Every boundary `str.splitlines` knows (`\r`, `\v`, `\f`, `\x1c`-`\x1e`, `\x85`,
    U+2028, U+2029, not only `\n`) becomes a newline and an indent: a tokenizer or a
    renderer may start a line at any of them, and a message must not start one of its own.
    """
    return ("\n" + _INDENT).join((text or "").splitlines())


def _one_line(name: str) -> str:
    """A name (a speaker's, a tool's) on one line, its line breaks turned into spaces:
    a label is not indented, so a break in it would start a line of its own."""
    return " ".join(name.splitlines())


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` characters, the cut shown by a trailing "…"."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(CUT))] + CUT


# -- fitting within max_chars -------------------------------------------------------


def _omitted(count: int) -> str:
    noun = "message" if count == 1 else "messages"
    return f"[... {count} earlier {noun} omitted ...]"


def _fit(blocks: list[str], live: str | None, max_chars: int) -> str:
    """The newest blocks (and the live reply) that fit `max_chars`, marked if any were cut."""
    tail = [live] if live is not None else []
    whole = "\n".join(blocks + tail)
    if len(whole) <= max_chars:
        return whole
    # Reserve the longest marker this many blocks could need, so adding it never
    # pushes the result over `max_chars`.
    room = max(0, max_chars - len(_omitted(len(blocks))) - 1)
    if tail:
        tail[0] = _clip(tail[0], room)
        room = max(0, room - len(tail[0]) - 1)
    kept: list[str] = []
    for block in reversed(blocks):
        if len(block) + 1 > room:
            if not kept and not tail and room > len(CUT):
                kept.append(_clip(block, room - 1))  # the newest message, cut to what fits
            break
        kept.append(block)
        room -= len(block) + 1
    kept.reverse()
    dropped = len(blocks) - len(kept)
    head = [_omitted(dropped)] if dropped else []
    return "\n".join(head + kept + tail)
