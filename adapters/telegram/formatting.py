"""How a text goes to Telegram: as HTML, and again as plain text when Telegram cannot
parse the HTML ("can't parse entities"), for every call that carries one (a message,
an edit, a draft)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from telegram.constants import ParseMode
from telegram.error import BadRequest, TelegramError

from adapters.telegram.errors import core_error
from adapters.telegram.render import render, utf16_length, visible_text
from gateway.errors import PlatformError

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_LENGTH = 4096  # UTF-16 code units of the text after entity parsing


async def with_fallback(
    markdown: str,
    call: Callable[[str, str | None], Awaitable[T]],
    *,
    errors: Callable[[TelegramError], PlatformError] = core_error,
    empty: str = "…",
) -> T:
    """`call(text, parse_mode)` with `markdown` as HTML; when Telegram cannot parse it,
    with the same text as plain text. `errors` makes the core's error of a failure;
    `empty` is sent for a blank text."""
    rendered = render(markdown) if markdown.strip() else empty
    try:
        return await call(rendered, ParseMode.HTML)
    except BadRequest as exc:
        if "can't parse entities" not in exc.message.lower():
            raise errors(exc) from None
        log.warning("Telegram refused the formatting (%s); sending plain text", exc.message)
    except TelegramError as exc:
        raise errors(exc) from None
    try:
        return await call(plain(markdown, rendered), None)
    except TelegramError as exc:
        raise errors(exc) from None


def plain(markdown: str, rendered: str) -> str:
    """The Markdown source when it fits (nothing lost), else the visible text (it always fits)."""
    if markdown.strip() and utf16_length(markdown) <= MAX_LENGTH:
        return markdown
    return visible_text(rendered)
