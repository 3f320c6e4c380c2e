"""A tool call's outcome as the text the model reads next.

Every failure is a result, not an exception: the model reads what went wrong
and can try again differently, and the turn goes on. `outcome` is the one word
metrics count by.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal, get_args

# The last three are the tool loop's: stopped by /stop, cut off by a dead worker,
# not run because the asker declined (or never answered).
ToolOutcome = Literal[
    "ok",
    "error",
    "timeout",
    "unavailable",
    "invalid",
    "unknown",
    "cancelled",
    "interrupted",
    "declined",
]
OUTCOMES: tuple[ToolOutcome, ...] = get_args(ToolOutcome)


@dataclass(frozen=True)
class ToolResult:
    """What a call produced (`text`, for the model) and how it went (`outcome`)."""

    text: str
    outcome: ToolOutcome


def parse_arguments(raw: str) -> dict[str, Any] | str:
    """The model's JSON arguments as an object, or the reason they are not one.

    An empty string is taken as no arguments: some models send "" for a tool
    without parameters.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"the arguments are not valid JSON ({exc.msg} at character {exc.pos})"
    if not isinstance(value, dict):
        return f"the arguments must be a JSON object, not {type(value).__name__}"
    return value


def capped(text: str, limit: int) -> str:
    """The first `limit` characters of text, then a marker saying how many more were cut."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    return f"{text[:limit]}\n[… {cut} more characters cut]"
