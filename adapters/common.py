"""What every adapter does the same way: id checks, Retry-After, attachments, mentions, logs.

The checks of the identifiers a platform event carries, made before it becomes an Inbound:

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

And the small translations the three adapters would otherwise each write: an
approval button's payload, a Retry-After value in seconds, a file as an
`Attachment`, the text without the bot's mentions, an SDK's chatty loggers kept
quiet, and how often a connection's health report is renewed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta

from gateway.inbound.ingest import CLOSED_TEXT, NOT_YOURS_TEXT, Verdict
from gateway.messages import Attachment
from gateway.state.health import REPORT_TTL

log = logging.getLogger(__name__)

Check = Callable[[object], bool]
Field = tuple[str, object, Check]  # (its name in the payload, its value, the check)

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
SNOWFLAKE_LIMIT = 2**64  # Discord's ids are unsigned 64-bit integers
# What an SDK's parser (bolt's request, python-telegram-bot's de_json) or a converter
# raises on a field of the wrong type: a malformed delivery, answered 400 or dropped.
SHAPE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)
_DIGITS = re.compile(r"[0-9]{1,20}")
_SPACES = re.compile(r"[ \t]{2,}")
# A connection renews its health report this often: three chances within the report's life.
RENEW_INTERVAL = REPORT_TTL / 3


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


def refusal_text(verdict: Verdict) -> str | None:
    """What the clicker is told, briefly and to them alone; None when the click counted."""
    return {Verdict.NOT_YOURS: NOT_YOURS_TEXT, Verdict.CLOSED: CLOSED_TEXT}.get(verdict)


def retry_after_seconds(value: object, default: float = 1.0) -> float:
    """A Retry-After in seconds: a header's text, a number or a timedelta; `default` when
    it is absent or unreadable."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if not isinstance(value, str | int | float) or isinstance(value, bool):
        return default
    try:
        return float(value)
    except ValueError:
        return default


def attachment(
    *,
    url: object,
    name: object,
    mime_type: object,
    size: object = None,
    file_id: object = None,
    voice: bool = False,
) -> Attachment:
    """A file the platform describes, as the core's Attachment: "voice" when the platform
    marks it so (`voice`) or its type is audio, "image" when its type says so, else "file".

    The values are the platform's JSON as it came: one of the wrong type is left out
    (the file is still named), never turned into a conversion error.
    """
    mime = _text(mime_type)
    kind = "file"
    if voice or (mime or "").lower().startswith("audio/"):
        kind = "voice"
    elif (mime or "").lower().startswith("image/"):
        kind = "image"
    declared = size if type(size) is int and size >= 0 else None
    return Attachment(
        kind=kind,
        url=_text(url),
        name=_text(name),
        mime_type=mime,
        size=declared,
        file_id=_text(file_id),
    )


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def strip_mentions(text: str, mention: re.Pattern[str], *, replacement: str = " ") -> str:
    """`text` without the bot's own mentions, runs of spaces left by them collapsed."""
    return _SPACES.sub(" ", mention.sub(replacement, text)).strip()


def quiet_loggers(names: Iterable[str], level: int) -> None:
    """Keep an SDK's loggers at `level` or above (they print URLs with tokens, or payloads);
    a level set on one on purpose is left alone."""
    for name in names:
        library = logging.getLogger(name)
        if library.level == logging.NOTSET:
            library.setLevel(level)
