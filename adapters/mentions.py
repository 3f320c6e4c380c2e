"""A message's text without the bot's own mentions."""

from __future__ import annotations

import re

_SPACES = re.compile(r"[ \t]{2,}")


def strip_mentions(text: str, mention: re.Pattern[str], *, replacement: str = " ") -> str:
    """`text` without the bot's own mentions, runs of spaces left by them collapsed."""
    return _SPACES.sub(" ", mention.sub(replacement, text)).strip()
