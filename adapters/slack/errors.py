"""slack_sdk's errors as the core's (gateway/errors.py): `core_error`, as on every platform.

A refused Web API call (`SlackApiError`) is named by its method, read from the
response's URL, and never carries the token.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError

from adapters.retry_after import retry_after_seconds
from gateway.errors import MessageRejected, PlatformError, RateLimited

# What Slack answers for a message it will not take as it is: the core sends it otherwise.
REJECTED = frozenset(
    {"msg_too_long", "no_text", "invalid_blocks", "invalid_arguments", "rich_text_too_long"}
)


def core_error(exc: SlackApiError) -> PlatformError:
    """The core's error for a refused Web API call: RateLimited, MessageRejected or else
    PlatformError."""
    response = exc.response
    method = api_method(exc)
    error = str(response.get("error", "unknown_error")) if isinstance(response.data, dict) else ""
    if response.status_code == 429 or error == "ratelimited":
        return RateLimited(retry_after_seconds(response.headers.get("Retry-After")))
    if error in REJECTED:
        return MessageRejected(f"Slack refused {method}: {error}")
    return PlatformError(f"Slack {method} failed: {error or response.status_code}")


def api_method(exc: SlackApiError) -> str:
    """The Web API method the refused call was to (`chat.postMessage`), from its URL."""
    url = str(getattr(exc.response, "api_url", "") or "")
    return url.rstrip("/").rpartition("/")[2] or "Web API call"
