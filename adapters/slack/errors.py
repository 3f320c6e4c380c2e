"""slack_sdk's errors as the core's (gateway/errors.py): `core_error`, as on every platform.

A refused Web API call (`SlackApiError`) is named by its method, read from the
response's URL, and never carries the token.
"""

from __future__ import annotations

from slack_sdk.errors import SlackApiError

from adapters.retry_after import retry_after_seconds
from gateway.errors import MessageRejected, PlatformError, RateLimited, StreamRefused

# What Slack answers for a message it will not take as it is: the core sends it otherwise.
REJECTED = frozenset(
    {"msg_too_long", "no_text", "invalid_blocks", "invalid_arguments", "rich_text_too_long"}
)


# chat.startStream / appendStream / stopStream refusals that hold for the whole channel (its
# type, the app's scopes or token, the workspace's policy): its next replies are edited in
# place without asking again. Documented on the methods' pages, or on every Web API method.
STREAM_REFUSED_HERE = frozenset(
    {
        "method_not_supported_for_channel_type",
        "channel_type_not_supported",
        "missing_scope",
        "not_allowed_token_type",
        "no_permission",
        "access_denied",
        "feature_not_enabled",
        "team_not_allowed",
        "team_access_not_granted",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_locked",
        "restricted_action_non_threadable_channel",
        "ekm_access_denied",
        "enterprise_is_restricted",
        "messages_tab_disabled",
        "not_in_channel",
        "unknown_method",
        "method_deprecated",
        # The reply's key goes with a stream as its metadata (chat.startStream's page lists
        # these refusals of it): a workspace refusing it gets its replies edited in place.
        "invalid_metadata_format",
        "invalid_metadata_schema",
        "metadata_must_be_sent_from_app",
        "metadata_too_large",
    }
)
# Refusals of this reply's stream only: it expired or was stopped (by its reader, or a run
# that died), it is edited already, or its content was refused (a stream takes less than a
# message does). The reply goes on edited in place; the next one streams again.
STREAM_REFUSED_NOW = frozenset(
    {
        "message_not_in_streaming_state",
        "streaming_state_conflict",
        "stopped_by_user",
        "message_not_found",
        "message_not_owned_by_app",
        "streaming_mode_mismatch",
        "cannot_provide_both_markdown_text_and_chunks",
        "markdown_text_or_chunks_required",
        "markdown_text_required",
        "missing_recipient_user_id",
        "missing_recipient_team_id",
        "user_not_found",
        "msg_too_long",
        "msg_blocks_too_long",
        "msg_blocks_too_many",
        "no_text",
        "invalid_chunks",
        "invalid_blocks",
        "invalid_blocks_format",
        "invalid_arguments",
    }
)


def api_error(exc: SlackApiError) -> str:
    """Slack's error code of a refused call ("" when its answer had none)."""
    response = exc.response
    return str(response.get("error", "unknown_error")) if isinstance(response.data, dict) else ""


def stream_error(exc: SlackApiError) -> PlatformError:
    """The core's error for a refused streaming call: StreamRefused for a refusal of the
    surface (`for_channel` as above), else as `core_error` says."""
    error = api_error(exc)
    if error == "rate_limited":  # the streaming methods' documented spelling of it
        return RateLimited(retry_after_seconds(exc.response.headers.get("Retry-After")))
    if error in STREAM_REFUSED_HERE or error in STREAM_REFUSED_NOW:
        return StreamRefused(error, for_channel=error in STREAM_REFUSED_HERE)
    return core_error(exc)


# Refusals of a message's blocks: the reply goes without its feedback buttons instead.
BLOCKS_REFUSED = frozenset({"invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long"})


class BlocksRefused(MessageRejected):
    """Slack refused a message's blocks (the feedback buttons, where it does not take
    them): the message is sent again without them."""


def post_error(exc: SlackApiError) -> PlatformError:
    """A reply's post or edit refused: BlocksRefused for its blocks; StreamRefused for an
    edit of a message still streaming (`streaming_state_conflict`, as other Slack clients
    report it: chat.update's reference page does not list it); else `core_error`'s."""
    error = api_error(exc)
    if error in BLOCKS_REFUSED:
        return BlocksRefused(f"Slack refused {api_method(exc)}: {error}")
    if error == "streaming_state_conflict":
        return StreamRefused(error, for_channel=False)
    return core_error(exc)


def core_error(exc: SlackApiError) -> PlatformError:
    """The core's error for a refused Web API call: RateLimited, MessageRejected or else
    PlatformError."""
    response = exc.response
    method = api_method(exc)
    error = api_error(exc)
    if response.status_code == 429 or error == "ratelimited":
        return RateLimited(retry_after_seconds(response.headers.get("Retry-After")))
    if error in REJECTED:
        return MessageRejected(f"Slack refused {method}: {error}")
    return PlatformError(f"Slack {method} failed: {error or response.status_code}")


def api_method(exc: SlackApiError) -> str:
    """The Web API method the refused call was to (`chat.postMessage`), from its URL."""
    url = str(getattr(exc.response, "api_url", "") or "")
    return url.rstrip("/").rpartition("/")[2] or "Web API call"
