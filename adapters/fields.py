"""The checks of the identifiers a platform event carries, made before it becomes an Inbound.

Every id an event carries ends up in a session key, in Redis key names and in
the address a reply is sent to. Converted blindly, a `null` becomes "None", a
list "[1, 2]" and `true` "True": a conversation of its own, answered by the
model. So each adapter's inbound module lists the ids (and texts) it reads
with the form its platform documents for them, and drops an event whose
fields do not fit, with one log line that names the field but never its value
(the value is the sender's, and may be anything).

    fields = (("message.chat.id", chat_id, integer(-2**63, 2**63 - 1)),
              ("message.text", text, optional(is_text)))
    if invalid(PLATFORM, fields):
        return None

`SHAPE_ERRORS` are what a parser raises on a delivery of the wrong shape.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping

log = logging.getLogger(__name__)

Check = Callable[[object], bool]
Field = tuple[str, object, Check]  # (its name in the payload, its value, the check)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SNOWFLAKE_LIMIT = 2**64  # Discord's ids are unsigned 64-bit integers
# What an SDK's parser (bolt's request, python-telegram-bot's de_json) or a converter
# raises on a field of the wrong type: a malformed delivery, answered 400 or dropped.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
_DIGITS = re.compile(r"[0-9]{1,20}")


def is_text(value: object) -> bool:
    return isinstance(value, str)


def is_mapping(value: object) -> bool:
    return isinstance(value, Mapping)


def integer(low: int, high: int) -> Check:
    """An int within [low, high]; not a bool, which Python counts as an int."""

    def check(value: object) -> bool:
        return type(value) is int and low <= value <= high

    return check


def pattern(regex: str) -> Check:
    """A string matching `regex` as a whole, in ASCII (`\\d` is not any script's digit)."""
    compiled = re.compile(regex, re.ASCII)

    def check(value: object) -> bool:
        return isinstance(value, str) and compiled.fullmatch(value) is not None

    return check


def one_of(*choices: str) -> Check:
    """One of `choices` (compared by equality: a str enum member counts as its value)."""

    def check(value: object) -> bool:
        return isinstance(value, str) and any(value == choice for choice in choices)

    return check


def optional(check: Check) -> Check:
    """Absent (None), or passing `check`."""

    def optional_check(value: object) -> bool:
        return value is None or check(value)

    return optional_check


def snowflake(value: object) -> bool:
    """A Discord id: an int, or a string of ASCII digits, below 2^64."""
    if type(value) is int:
        return 0 <= value < SNOWFLAKE_LIMIT
    return (
        isinstance(value, str)
        and _DIGITS.fullmatch(value) is not None
        and int(value) < SNOWFLAKE_LIMIT
    )


def first_invalid(fields: Iterable[Field]) -> str | None:
    """The name of the first field that fails its check, None when every one passes."""
    return next((name for name, value, check in fields if not check(value)), None)


def invalid(platform: str, fields: Iterable[Field]) -> bool:
    """Whether a field fails its check; if so, says which in one log line."""
    name = first_invalid(fields)
    if name is None:
        return False
    log.warning(
        "%s: event dropped, its %s is missing or not of the platform's form", platform, name
    )
    return True
