"""What the fake Discord checks of the bodies it is sent, as Discord documents it.

Application commands (bulk overwrite, `PUT /applications/{id}/commands` and the guild
variant): at most 100 chat-input commands a scope; a name of 1 to 32 lower-case
letters, digits, `-` or `_`, unique; a description of 1 to 100 characters; at most 25
options; `integration_types` among 0 (GUILD_INSTALL) and 1 (USER_INSTALL), `contexts`
among 0 (GUILD), 1 (BOT_DM) and 2 (PRIVATE_CHANNEL). Discord honours the last two for
global commands only; a guild's commands are its members' (guild install, guild
context). Message components: at most 5 action rows of at most 5 buttons, each with a
style from 1 to 5, a label or an emoji (a label up to 80 characters), and a custom_id
of 1 to 100 characters unless it is a link.

Each check answers what Discord answers: None when the body is fine, else the error.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

MAX_COMMANDS = 100
MAX_OPTIONS = 25
GUILD_INSTALL, USER_INSTALL = 0, 1
GUILD_CONTEXT, BOT_DM_CONTEXT, PRIVATE_CHANNEL_CONTEXT = 0, 1, 2
INTEGRATION_TYPES = frozenset({GUILD_INSTALL, USER_INSTALL})
CONTEXTS = frozenset({GUILD_CONTEXT, BOT_DM_CONTEXT, PRIVATE_CHANNEL_CONTEXT})
_NAME = re.compile(r"[-_a-z0-9]{1,32}")
LINK_STYLE = 5


class Refusal(Exception):
    """A body Discord refuses: its HTTP status, JSON error code and message."""

    def __init__(self, status: int, code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def invalid_form(field: str, why: str) -> Refusal:
    return Refusal(400, 50035, f"Invalid Form Body: {field}: {why}")


def check_commands(body: Any) -> None:
    """Raise the Refusal Discord answers a bulk overwrite of these commands with."""
    if not isinstance(body, list):
        raise invalid_form("body", "Must be an array of application commands.")
    chat_inputs = [c for c in body if isinstance(c, Mapping) and c.get("type", 1) == 1]
    if len(chat_inputs) > MAX_COMMANDS:
        raise Refusal(
            400, 30032, f"Maximum number of application commands reached ({MAX_COMMANDS})"
        )
    names: set[str] = set()
    for index, command in enumerate(body):
        _check_command(f"{index}", command)
        if command["name"] in names:
            raise invalid_form(f"{index}.name", "Application command names must be unique")
        names.add(command["name"])


def _check_command(at: str, command: Any) -> None:
    if not isinstance(command, Mapping):
        raise invalid_form(at, "Must be an object.")
    name, description = command.get("name"), command.get("description")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise invalid_form(f"{at}.name", "Command name is invalid")
    if not isinstance(description, str) or not 1 <= len(description) <= 100:
        raise invalid_form(f"{at}.description", "Must be between 1 and 100 in length.")
    options = command.get("options") or []
    if len(options) > MAX_OPTIONS:
        raise invalid_form(f"{at}.options", f"Must be {MAX_OPTIONS} or fewer in length.")
    for field, allowed in (("integration_types", INTEGRATION_TYPES), ("contexts", CONTEXTS)):
        _check_members(f"{at}.{field}", command.get(field), allowed)


def _check_members(at: str, values: Any, allowed: frozenset[int]) -> None:
    if values is None:
        return
    if not isinstance(values, list) or not values:
        raise invalid_form(at, "Must be a non-empty array.")
    for value in values:
        if type(value) is not int or value not in allowed:
            raise invalid_form(at, f"Value {value!r} is not a valid enum value.")


def usable(
    command: Mapping[str, Any], *, guild_scoped: bool, context: int, user_install: bool
) -> bool:
    """Whether Discord offers this registered command where a user invokes it: in
    `context`, through a user install (`user_install`) or the guild's."""
    if guild_scoped:  # a guild's commands: its members, as the guild installed them
        return context == GUILD_CONTEXT and not user_install
    installs = command.get("integration_types") or [GUILD_INSTALL]
    contexts = command.get("contexts") or sorted(CONTEXTS)
    wanted = USER_INSTALL if user_install else GUILD_INSTALL
    return wanted in installs and context in contexts


def check_components(components: Any) -> None:
    """Raise the Refusal Discord answers a message with these components with."""
    if components is None:
        return
    if not isinstance(components, list) or len(components) > 5:
        raise invalid_form("components", "Must be 5 or fewer in length.")
    for row_index, row in enumerate(components):
        at = f"components.{row_index}"
        if not isinstance(row, Mapping) or row.get("type") != 1:
            raise invalid_form(f"{at}.type", "Top-level components must be action rows.")
        _check_buttons(at, row.get("components"))


def _check_buttons(at: str, buttons: Any) -> None:
    if not isinstance(buttons, Sequence) or not 1 <= len(buttons) <= 5:
        raise invalid_form(f"{at}.components", "Must be between 1 and 5 in length.")
    for index, button in enumerate(buttons):
        where = f"{at}.components.{index}"
        if not isinstance(button, Mapping) or button.get("type") != 2:
            raise invalid_form(f"{where}.type", "Only buttons are modelled by this fake.")
        style, label = button.get("style"), button.get("label")
        if style not in range(1, 6):
            raise invalid_form(f"{where}.style", "Value must be one of (1, 2, 3, 4, 5, 6).")
        if not label and not button.get("emoji"):
            raise invalid_form(where, "A button needs a label or an emoji.")
        if label is not None and len(label) > 80:
            raise invalid_form(f"{where}.label", "Must be 80 or fewer in length.")
        custom_id = button.get("custom_id")
        if style != LINK_STYLE and (
            not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 100
        ):
            raise invalid_form(f"{where}.custom_id", "Must be between 1 and 100 in length.")
