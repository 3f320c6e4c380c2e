"""python-telegram-bot's errors as the core's (gateway/errors.py): `core_error`, as on
every platform, and the delay a `RetryAfter` asks for.

A file's download has its own reasons for the user (`files.py`, as MediaError).
"""

from __future__ import annotations

import warnings

from telegram.error import BadRequest, RetryAfter, TelegramError
from telegram.warnings import PTBDeprecationWarning

from adapters import retry_after
from gateway.errors import MessageRejected, PlatformError, RateLimited


def core_error(exc: TelegramError) -> PlatformError:
    """The core's error for a failed Bot API call: RateLimited (the flood limit),
    MessageRejected (a message Telegram will not take) or else PlatformError."""
    if isinstance(exc, RetryAfter):
        return RateLimited(retry_after_seconds(exc))
    if isinstance(exc, BadRequest):
        return MessageRejected(f"Telegram refused the message: {exc.message}")
    return PlatformError(f"Telegram API call failed: {type(exc).__name__}: {exc.message}")


def retry_after_seconds(error: RetryAfter) -> float:
    """The delay of a RetryAfter, read the same way whether PTB_TIMEDELTA is on or not."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = error.retry_after
    return retry_after.retry_after_seconds(value)
