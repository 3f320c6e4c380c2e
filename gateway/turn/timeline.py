"""A tool call as a step on the reply's timeline: its title (the tool and a short, safe
summary of its arguments) and its state as the call goes.

The summary is what a chat may show of a call: argument names and short values, cut at
`SUMMARY_MAX` characters; a value under a name that looks like a credential (`token`,
`password`, `api_key`, …) shows as `•••`, and so does a value that looks like one
(a bearer token, a long unbroken string of letters and digits).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from gateway.models import ToolCall
from gateway.ports import Step
from gateway.tools import ToolResult

SUMMARY_MAX = 80  # characters of a call's argument summary
VALUE_MAX = 24  # characters of one argument's value in it
MASK = "•••"
_SECRET_NAME = re.compile(
    r"pass|secret|token|api.?key|auth|cookie|credential|session|private|signature", re.I
)
_SECRET_VALUE = re.compile(r"(?:bearer\s+\S+|[A-Za-z0-9_\-+/=.]{32,})", re.I)


def pending(call: ToolCall) -> Step:
    return Step(call.id, title(call), "pending")


def running(call: ToolCall) -> Step:
    return Step(call.id, title(call), "in_progress")


def finished(call: ToolCall, result: ToolResult) -> Step:
    """`complete` for a call that ran and answered; `error` for every other outcome
    (failed, timed out, refused, declined, cancelled), with the outcome as its detail."""
    if result.outcome == "ok":
        return Step(call.id, title(call), "complete")
    return Step(call.id, title(call), "error", result.outcome)


def title(call: ToolCall) -> str:
    """`server__tool` and its arguments' summary, e.g. `search__web (query: "weather")`."""
    summary = summarize(call.arguments)
    return f"{call.name} ({summary})" if summary else call.name


def summarize(arguments: object) -> str:
    """The arguments, short and safe to show: `name: value` pairs, credentials masked."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ""
    if not isinstance(arguments, Mapping):
        return ""
    parts = [f"{name}: {_value(str(name), value)}" for name, value in arguments.items()]
    summary = ", ".join(parts)
    return summary if len(summary) <= SUMMARY_MAX else summary[: SUMMARY_MAX - 1] + "…"


def _value(name: str, value: Any) -> str:
    if _SECRET_NAME.search(name):
        return MASK
    if isinstance(value, str):
        if _SECRET_VALUE.search(value):
            return MASK
        text = " ".join(value.split())
        cut = text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 1] + "…"
        return json.dumps(cut, ensure_ascii=False)
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return "[…]" if isinstance(value, list) else "{…}"
