"""The Block Kit blocks the bot's messages carry: an approval request's text and its two
buttons; a reply's text, and the feedback buttons under a reply's last message
(`context_actions` holding a `feedback_buttons` element, whose clicks come back with
FEEDBACK_BLOCK, FEEDBACK_ACTION and the value "up" or "down").

A reply carries blocks only where it has the buttons (or was a stream, whose text is in
blocks): elsewhere its `text` alone shows, as it always did. Where they go, the text goes
in them too (Slack shows a message's blocks instead of its `text`, which stays what
notifications show).
"""

from __future__ import annotations

from typing import Any

from adapters.buttons import (
    APPROVE_LABEL,
    DECLINE_LABEL,
    FEEDBACK_ACTION,
    FEEDBACK_BLOCK,
    FEEDBACK_DOWN,
    FEEDBACK_DOWN_LABEL,
    FEEDBACK_UP,
    FEEDBACK_UP_LABEL,
)
from adapters.slack.inbound import APPROVE_ACTION, DECLINE_ACTION

SECTION_MAX = 3000  # a section block's text limit
MARKDOWN_MAX = 12_000  # a markdown block's text limit


def approval_blocks(mrkdwn: str, approval_id: str | None) -> list[dict[str, Any]]:
    """The request as a section, and (while it is open) its two buttons; each button's
    value is the approval id, which is all a click needs to find its session."""
    text = mrkdwn if len(mrkdwn) <= SECTION_MAX else mrkdwn[: SECTION_MAX - 1] + "…"
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": text or " "}}
    ]
    if approval_id is not None:
        buttons = [
            _button(APPROVE_ACTION, APPROVE_LABEL, "primary", approval_id),
            _button(DECLINE_ACTION, DECLINE_LABEL, "danger", approval_id),
        ]
        blocks.append({"type": "actions", "block_id": "gw_approval", "elements": buttons})
    return blocks


def _button(action_id: str, label: str, style: str, value: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action_id,
        "text": {"type": "plain_text", "text": label},
        "style": style,
        "value": value,
    }


def reply_blocks(mrkdwn: str, feedback: bool) -> list[dict[str, Any]]:
    """A reply message's text in sections (as its `text` renders), the feedback buttons
    under it when `feedback`."""
    return section_blocks(mrkdwn) + ([feedback_block()] if feedback else [])


def feedback_block() -> dict[str, Any]:
    """The thumbs up and down under a reply."""
    return {
        "type": "context_actions",
        "block_id": FEEDBACK_BLOCK,
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION,
                "positive_button": _feedback_button(FEEDBACK_UP_LABEL, FEEDBACK_UP, "Good"),
                "negative_button": _feedback_button(FEEDBACK_DOWN_LABEL, FEEDBACK_DOWN, "Bad"),
            }
        ],
    }


def _feedback_button(label: str, value: str, spoken: str) -> dict[str, Any]:
    return {
        "text": {"type": "plain_text", "text": label},
        "accessibility_label": f"{spoken} answer",
        "value": value,
    }


def markdown_blocks(markdown: str) -> list[dict[str, Any]]:
    """`markdown` (already safe: `render.safe_markdown`) in a markdown block, which Slack
    renders itself."""
    text = markdown if len(markdown) <= MARKDOWN_MAX else markdown[: MARKDOWN_MAX - 1] + "…"
    return [{"type": "markdown", "text": text or " "}]


def section_blocks(mrkdwn: str) -> list[dict[str, Any]]:
    """`mrkdwn` in sections of at most SECTION_MAX characters, cut between lines; a
    code block cut in two is closed before the cut and opened again after it."""
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": part}}
        for part in _sections(mrkdwn or " ")
    ]


def _sections(mrkdwn: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    size, in_code = 0, False
    for line in _short_lines(mrkdwn, SECTION_MAX - 8):
        if current and size + len(line) + 1 > SECTION_MAX - 4:
            parts.append("\n".join([*current, "```"] if in_code else current))
            current, size = (["```"], 4) if in_code else ([], 0)
        current.append(line)
        size += len(line) + 1
        if line.strip().startswith("```"):
            in_code = not in_code
    parts.append("\n".join(current))
    return parts


def _short_lines(text: str, limit: int) -> list[str]:
    """`text`'s lines, each longer than `limit` cut in pieces."""
    lines: list[str] = []
    for line in text.split("\n"):
        lines.extend(line[i : i + limit] for i in range(0, len(line), limit))
        if not line:
            lines.append("")
    return lines
