"""What an approval button carries back when clicked, and what a refused click is told.

Every platform's sender posts the same two buttons and every platform's click handling
reads the same payload back, so its form is defined once here.
"""

from __future__ import annotations

import re

from adapters.fields import pattern
from gateway.feedback.store import DOWN, UP
from gateway.inbound.ingest import CLOSED_TEXT, NOT_YOURS_TEXT, Verdict

APPROVE_LABEL, DECLINE_LABEL = "Approve", "Decline"
# `a:<approval id>:y|n`: 20 bytes, within Telegram's 64-byte callback_data and Discord's
# 100-character custom_id. The approval id is url-safe base64 (gateway/approvals/store.py).
APPROVAL_ID = pattern(r"[A-Za-z0-9_-]{8,43}")
_APPROVAL_PAYLOAD = re.compile(r"a:([A-Za-z0-9_-]{8,43}):([yn])", re.ASCII)


def approval_payload(approval_id: str, approve: bool) -> str:
    """What an Approve or Decline button carries back when clicked."""
    return f"a:{approval_id}:{'y' if approve else 'n'}"


def is_approval_payload(value: object) -> bool:
    """Whether `value` looks like our button's payload at all (its `a:` prefix)."""
    return isinstance(value, str) and value.startswith("a:")


def parse_approval_payload(value: object) -> tuple[str, bool] | None:
    """(approval id, approve) from a button's payload; None when it is not of our form."""
    if not isinstance(value, str):
        return None
    found = _APPROVAL_PAYLOAD.fullmatch(value)
    return (found[1], found[2] == "y") if found else None


def valid_approval_payload(value: object) -> bool:
    """Whether `value` is an approval button's payload (a field check)."""
    return parse_approval_payload(value) is not None


def refusal_text(verdict: Verdict) -> str | None:
    """What the clicker is told, briefly and to them alone; None when the click counted."""
    return {Verdict.NOT_YOURS: NOT_YOURS_TEXT, Verdict.CLOSED: CLOSED_TEXT}.get(verdict)


# Feedback buttons under a reply's last message: `f:up` / `f:down` (Telegram's callback_data,
# Discord's custom_id); Slack's feedback_buttons element carries the value alone, in the
# `context_actions` block FEEDBACK_BLOCK, action FEEDBACK_ACTION. The reply they are under
# is the message the click comes from: the payload needs nothing else.
FEEDBACK_UP, FEEDBACK_DOWN = UP, DOWN
FEEDBACK_VALUES = (FEEDBACK_UP, FEEDBACK_DOWN)
FEEDBACK_UP_LABEL, FEEDBACK_DOWN_LABEL = "👍", "👎"
FEEDBACK_BLOCK, FEEDBACK_ACTION = "gw_feedback", "gw_feedback"


def feedback_payload(value: str) -> str:
    """What a feedback button carries back when clicked (`value` one of FEEDBACK_VALUES)."""
    assert value in FEEDBACK_VALUES
    return f"f:{value}"


def parse_feedback_payload(value: object) -> str | None:
    """The feedback value of a button's payload; None when it is not of our form."""
    if isinstance(value, str) and value.startswith("f:") and value[2:] in FEEDBACK_VALUES:
        return value[2:]
    return None


def valid_feedback_payload(value: object) -> bool:
    """Whether `value` is a feedback button's payload (a field check)."""
    return parse_feedback_payload(value) is not None
