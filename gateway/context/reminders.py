"""`<system-reminder>` blocks: wrap, combine, extract.

A turn's dynamic context (who the reply goes to, queued injections) travels as
one block appended to the last user message, so the stable prefix of the
conversation (and any provider prompt cache over it) is never disturbed.

The block's form: the opening tag, a newline, the texts joined by one blank
line, a newline, the closing tag. It follows the text it is appended to after
one blank line.

Only the gateway writes these tags: what users write reaches the model through
`escape_tags`, so no message can close the block early or open one of its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

OPEN = "<system-reminder>"
CLOSE = "</system-reminder>"
_BLOCK = re.compile(r"<system-reminder>\n?(.*?)\n?</system-reminder>", re.DOTALL)
# The `<` of anything a model could take for the tag: any case, spaces, `/`, `_` for `-`.
_TAG_START = re.compile(r"<(?=\s*/?\s*system[\s_-]*reminder)", re.IGNORECASE)
ESCAPED_LT = "&lt;"


def escape_tags(text: str) -> str:
    """`text` (written by a user) with the `<` of every reminder tag escaped as `&lt;`.

    A user who writes `</system-reminder>` and then instructions would otherwise
    close the gateway's block, or open one of their own, and speak as system
    context. The escape keeps the words readable, to the model and to anyone
    reading a request (`&lt;/system-reminder>`: a model reads an HTML entity as
    a quoted character, not markup), and touches no other `<` (code, arrows).
    """
    return _TAG_START.sub(ESCAPED_LT, text)


def extract(text: str) -> list[str]:
    """The pieces of an ephemeral text, unwrapped when it is already wrapped.

    A text counts as wrapped when, trimmed, it starts with an opening tag or
    ends with a closing tag; then every block is unwrapped and the text before,
    between and after the blocks is kept, each piece trimmed. A text that only
    carries a block somewhere in its middle is a text like any other.
    """
    stripped = text.strip()
    if not stripped:
        return []
    if not (stripped.startswith(OPEN) or stripped.endswith(CLOSE)):
        return [stripped]
    pieces: list[str] = []
    position = 0
    for match in _BLOCK.finditer(stripped):
        pieces.append(stripped[position : match.start()])
        pieces.append(match.group(1))
        position = match.end()
    pieces.append(stripped[position:])
    return [piece.strip() for piece in pieces if piece.strip()]


def combine(texts: Iterable[str]) -> str | None:
    """One block holding every non-empty text, or None when nothing is left."""
    pieces = [piece for text in texts for piece in extract(text)]
    if not pieces:
        return None
    return f"{OPEN}\n" + "\n\n".join(pieces) + f"\n{CLOSE}"


def append_block(messages: list[dict[str, Any]], block: str) -> list[dict[str, Any]]:
    """A copy of `messages` with `block` appended to the last user message.

    String content gets the block after a blank line; multimodal content gets it
    on its last text part, or as a new text part when it has none; with no user
    message at all, the block becomes a new user message.
    """
    result = list(messages)
    for index in range(len(result) - 1, -1, -1):
        if result[index].get("role") == "user":
            result[index] = _with_block(result[index], block)
            return result
    result.append({"role": "user", "content": block})
    return result


def _with_block(message: dict[str, Any], block: str) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": _append_to_parts(content, block)}
    text = content if isinstance(content, str) else ""
    return {**message, "content": f"{text}\n\n{block}" if text else block}


def _append_to_parts(parts: list[Any], block: str) -> list[Any]:
    updated = list(parts)
    for index in range(len(updated) - 1, -1, -1):
        part = updated[index]
        if isinstance(part, dict) and part.get("type") == "text":
            text = str(part.get("text", ""))
            updated[index] = {**part, "text": f"{text}\n\n{block}" if text else block}
            return updated
    updated.append({"type": "text", "text": block})
    return updated
