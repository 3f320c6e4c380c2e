"""discord.py's errors as the core's (gateway/errors.py): `core_error`, as on every platform.

The text never holds a request's URL: a webhook's carries the interaction token.
"""

from __future__ import annotations

import discord

from adapters.retry_after import retry_after_seconds
from gateway.errors import MessageRejected, PlatformError, RateLimited

REJECTED_CODES = frozenset({50006, 50035})  # empty message, invalid form body


def core_error(exc: discord.DiscordException) -> PlatformError:
    """The core's error for a failed Discord call: RateLimited (a wait discord.py would not
    sleep, or a 429), MessageRejected (a message Discord will not take) or else
    PlatformError."""
    if isinstance(exc, discord.RateLimited):
        return RateLimited(exc.retry_after)
    if isinstance(exc, discord.LoginFailure):
        return PlatformError("Discord refused DISCORD_BOT_TOKEN (401)")
    if not isinstance(exc, discord.HTTPException):
        return PlatformError(f"Discord call failed: {type(exc).__name__}")
    if exc.status == 429:
        return RateLimited(retry_after_seconds(exc.response.headers.get("Retry-After")))
    detail = f"Discord {exc.status} (code {exc.code}): {exc.text or exc.response.reason}"
    if exc.status == 400 and exc.code in REJECTED_CODES:
        return MessageRejected(detail)
    return PlatformError(detail)
