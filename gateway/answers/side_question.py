"""/btw side questions: the one-shot prompt around the transcript, and the answer's opening.

A side question is answered by one tools-less call to the side model, from
the conversation rendered by `gateway.context.transcript` (the newest summary and the
messages after it, the way a main turn sees it, plus the reply still being
written). The history the summary stands for is not read. Everything here is
pure: no Redis, no model client. The worker reads the snapshot, calls
`transcript.render_transcript` and `build_side_messages`, and sends the answer
opened by `answer_marker`.
"""

from __future__ import annotations

from typing import Final

from gateway.context.transcript import CUT
from gateway.errors import BudgetExceeded, ModelError

TRANSCRIPT_OPEN: Final = "===== CONVERSATION TRANSCRIPT (read-only snapshot) ====="
TRANSCRIPT_CLOSE: Final = "===== END OF TRANSCRIPT ====="
MARKER_QUOTE_CHARS: Final = 60

SIDE_SYSTEM_PROMPT: Final = """\
You are the same assistant that is taking part in the conversation transcribed \
below. Someone in that conversation has asked you a quick side question about it, \
"by the way", while the main conversation carries on without you.

- Answer only the side question. Do not continue, redo, finish or critique the \
main task, and do not start new work on it.
- Use the transcript as your primary source. It is a snapshot taken when the \
question was asked: it may miss the very latest activity, and a reply marked as \
still being written is incomplete.
- When the transcript does not hold the answer, say so plainly instead of guessing.
- Be concise: a few sentences, or a short list when that is clearer."""


def build_side_messages(transcript: str, question: str) -> list[dict[str, str]]:
    """The messages of the one-shot side call: the instructions, then the snapshot and question."""
    user_part = f"{TRANSCRIPT_OPEN}\n{transcript}\n{TRANSCRIPT_CLOSE}\n\nSide question: {question}"
    return [
        {"role": "system", "content": SIDE_SYSTEM_PROMPT},
        {"role": "user", "content": user_part},
    ]


def answer_marker(question: str) -> str:
    """The one-line opening of a side answer, quoting the start of its question."""
    one_line = " ".join(question.split())
    if len(one_line) > MARKER_QUOTE_CHARS:
        one_line = one_line[: MARKER_QUOTE_CHARS - 1].rstrip() + CUT
    return f"> btw: “{one_line}”"


def failure_text(error: ModelError) -> str:
    """The side answer's place when the call failed, or was refused by a budget."""
    if isinstance(error, BudgetExceeded):
        return f"⚠️ {error.user_text}"
    return f"⚠️ The side question failed: {error.user_text} ({error})."
