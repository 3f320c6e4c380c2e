"""What the summariser is asked, and what a summary that failed leaves in its place."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gateway.context.transcript import render_transcript
from gateway.state.session import Entry

SUMMARY_INSTRUCTIONS = """\
You compress the older part of a chat conversation into a summary that an \
assistant will read in its place. Write the updated summary of everything so \
far: the summary you are given (if any) plus the new part of the conversation.

Keep, exactly as written: the names of people, projects, files and things; \
every decision and who made it; numbers, amounts, dates, versions and ids; \
open questions and requests not yet answered; errors and failures and what \
was done about them. Drop greetings, small talk and repetition. Do not \
invent anything and do not answer anyone. Write short Markdown bullet points, \
grouped by topic, in the conversation's language."""


def summary_request(
    previous: dict[str, Any] | None, entries: Sequence[Entry], max_chars: int = 48_000
) -> list[dict[str, str]]:
    """The summariser's messages: the instructions, the summary so far, the new part.

    The transcript keeps within `max_chars` characters (its newest part, with a
    marker for what was left out), so the request fits the summariser.
    """
    transcript = render_transcript(entries, message_cap=4000, max_chars=max_chars)
    earlier = str(previous.get("summary", "")).strip() if previous else ""
    body = (
        f"Summary so far:\n{earlier or '(none: this is the start of the conversation)'}\n\n"
        f"New part of the conversation:\n{transcript}\n\nWrite the updated summary."
    )
    return [{"role": "system", "content": SUMMARY_INSTRUCTIONS}, {"role": "user", "content": body}]


def fallback_summary(previous: dict[str, Any] | None, dropped: int) -> str:
    """The text of a fallback segment: the last good summary, and what was left out."""
    note = (
        f"({dropped} earlier messages of this conversation were left out to stay within "
        "the model's context window; they could not be summarised.)"
    )
    earlier = str(previous.get("summary", "")).strip() if previous else ""
    return f"{earlier}\n\n{note}" if earlier else note
