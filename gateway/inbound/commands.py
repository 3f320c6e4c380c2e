"""Chat commands: parsing, and the texts the bot answers them with."""

from __future__ import annotations

import re
from dataclasses import dataclass

NAMES = frozenset({"btw", "reset", "new", "stop", "status", "usage", "config", "help", "approve"})
_COMMAND = re.compile(r"^\s*([/!])([A-Za-z]+)(?:@[\w.-]+)?(?=\s|$)\s*(.*)\Z", re.DOTALL)

HELP_TEXT = (
    "Commands:\n"
    "• `/btw <question>` (or `!btw <question>`): ask a side question about this conversation; "
    "the answer comes as a side message and stays out of the conversation\n"
    "• `/reset` (or `/new`): start a fresh conversation\n"
    "• `/stop`: stop the reply being written\n"
    "• `/status`: model, conversation size, queued messages\n"
    "• `/usage`: your tokens and cost today and this month, and this conversation's\n"
    "• `/config`: the settings here; admins change the channel's with "
    "`/config set KEY VALUE` and `/config unset KEY`\n"
    "• `/approve CODE`: (admins, in a direct message) let in whoever was given this "
    "pairing code\n"
    "• `/help`: this list"
)
# The commands a platform's menu offers (`/new` is `/reset`'s other name, and
# `/approve` is for the few admins: neither is listed).
MENU = (
    ("btw", "Ask a side question about this conversation"),
    ("reset", "Start a fresh conversation"),
    ("stop", "Stop the answer being written"),
    ("status", "Model, conversation size, queued messages"),
    ("usage", "Your tokens and cost, and this conversation's"),
    ("config", "The settings here (admins can change the channel's)"),
    ("help", "The commands"),
)
BTW_USAGE = "Usage: /btw <question> — ask a side question about this conversation."
APPROVE_USAGE = "Usage: /approve CODE — let in whoever was given this pairing code."


@dataclass(frozen=True, slots=True)
class Command:
    name: str
    argument: str


def parse(text: str) -> Command | None:
    """The command in `text`, or None. `!` works only for `!btw` (it is the form for threads)."""
    match = _COMMAND.match(text)
    if not match:
        return None
    sigil, name, argument = match.groups()
    name = name.lower()
    if name not in NAMES or (sigil == "!" and name != "btw"):
        return None
    return Command("reset" if name == "new" else name, argument.strip())
