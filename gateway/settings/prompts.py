"""Suggested prompts: the few questions a new conversation offers, as one click each.

Slack shows them when someone opens a new assistant thread (up to four). The
setting `suggested_prompts` sets them by scope; an operator types either form:

- `Title|Message;Title|Message` (a title, `|`, the message it sends; `;` between
  prompts), or
- a JSON list: `[{"title": "...", "message": "..."}]` (for a message that holds `;`
  or `|`), or
- `none`: no prompts at all.

It is stored as the JSON list (or `none`). A title is at most TITLE_CHARS
characters and a message MESSAGE_CHARS, both on one line; unset, the built-in
DEFAULT_PROMPTS are offered.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_PROMPTS = 4  # Slack shows at most four
TITLE_CHARS = 75
MESSAGE_CHARS = 500
NO_PROMPTS = "none"
FORMS = (
    "`Title|Message;Title|Message`, a JSON list of {title, message}, or `none`, "
    f"with 1 to {MAX_PROMPTS} prompts, titles up to {TITLE_CHARS} characters and "
    f"messages up to {MESSAGE_CHARS}"
)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One suggestion: the button's `title`, and the `message` a click sends."""

    title: str
    message: str


# A click sends its message at once, so each is a whole request.
DEFAULT_PROMPTS = (
    Prompt("What can you do?", "What can you help me with, and which tools can you use?"),
    Prompt("Draft a message", "Help me draft a message: ask me what it is about and for whom."),
    Prompt("Brainstorm ideas", "Help me brainstorm ideas: ask me about the topic first."),
    Prompt("Explain simply", "Explain the next thing I send you simply, with an example."),
)


def parse_prompts(text: str) -> str:
    """The stored form of a typed value (its JSON list, or `none`); ValueError names the
    forms when it is not one of them."""
    text = text.strip()
    if text.lower() == NO_PROMPTS:
        return NO_PROMPTS
    prompts = _from_json(text) if text.startswith("[") else _from_pairs(text)
    if not 1 <= len(prompts) <= MAX_PROMPTS:
        raise ValueError(f"must be {FORMS} (got {len(prompts)} prompts)")
    return json.dumps([{"title": p.title, "message": p.message} for p in prompts])


def stored_prompts(stored: str | None) -> tuple[Prompt, ...]:
    """The prompts a stored value holds: the defaults when unset, none for `none`."""
    if stored is None:
        return DEFAULT_PROMPTS
    if stored == NO_PROMPTS:
        return ()
    return tuple(Prompt(item["title"], item["message"]) for item in json.loads(stored))


def _from_pairs(text: str) -> list[Prompt]:
    prompts = []
    for pair in text.split(";"):
        if not pair.strip():
            continue
        title, bar, message = pair.partition("|")
        if not bar:
            raise ValueError(
                f"must be {FORMS}: {pair.strip()!r} has no `|` between title and message"
            )
        prompts.append(_prompt(title, message))
    return prompts


def _from_json(text: str) -> list[Prompt]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"must be {FORMS}: not valid JSON ({exc.msg})") from None
    if not isinstance(items, list) or not all(
        isinstance(item, dict)
        and isinstance(item.get("title"), str)
        and isinstance(item.get("message"), str)
        for item in items
    ):
        raise ValueError(f"must be {FORMS}: each item an object with a title and a message")
    return [_prompt(item["title"], item["message"]) for item in items]


def _prompt(title: str, message: str) -> Prompt:
    title, message = " ".join(title.split()), " ".join(message.split())
    if not title or len(title) > TITLE_CHARS:
        raise ValueError(f"a prompt's title must be 1 to {TITLE_CHARS} characters (got {title!r})")
    if not message or len(message) > MESSAGE_CHARS:
        raise ValueError(
            f"a prompt's message must be 1 to {MESSAGE_CHARS} characters (title {title!r})"
        )
    return Prompt(title, message)
