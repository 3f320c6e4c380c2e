"""The gateway's one error tree.

    GatewayError
     ├── ConfigError              a setting is missing or contradicts another
     ├── StoreUnavailable         Redis does not answer
     ├── LayoutMismatch           Redis holds keys of another layout (`gateway migrate`)
     ├── MalformedRequest         an HTTP request body is not what its route accepts
     ├── ContextMismatch          a compiler was handed another session's context
     ├── LeaseLost                a turn's session lease expired under it (left for a re-run)
     ├── ToolServerUnavailable    an MCP server is down or its connection dropped
     ├── MediaError               a shared file cannot reach the model (its text is the reason)
     │    ├── DownloadFailed      the platform answered 404, 403, 5xx, or could not be reached
     │    ├── DownloadTimeout     the download stalled, or outran its deadline
     │    ├── MediaTooLarge       over a limit: bytes, files per message, pixels
     │    └── UnreadableMedia     not what it claims to be (a truncated image, not a PDF)
     ├── PlatformError            a platform API refused or failed a call
     │    ├── RateLimited         the platform asked us to wait (retry_after seconds)
     │    ├── MessageRejected     the platform refused the content (formatting, length)
     │    └── StreamRefused       the platform refused its streaming surface: edit in place
     └── ModelError               the model call failed for good
          ├── ModelTimeout
          │    └── ModelStalled   the stream went silent for the idle timeout
          ├── ModelRateLimited    the provider asked us to wait (retry_after seconds, when it said)
          ├── ModelUnavailable    connection refused, 5xx
          │    └── ModelProcessLost   the worker's model process died, or ended a call unanswered
          ├── ModelRejected       4xx other than 429: bad request, auth, unknown model
          ├── ModelBadResponse    an answer of a shape the gateway cannot read (no choices, …)
          ├── BudgetExceeded      a user's or workspace's budget is used up; no call is made
          └── ProviderStateLost   a stateful provider no longer holds the conversation

Callers catch the narrowest class they can act on. Every message is written so
that it can be shown to a user or an operator as it is: none carries a secret.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""


class ConfigError(GatewayError):
    """A setting is missing, malformed, or contradicts another one."""


class StoreUnavailable(GatewayError):
    """Redis cannot be reached."""


class LayoutMismatch(GatewayError):
    """Redis holds keys of another layout or shard count than this process names."""


class MalformedRequest(GatewayError):
    """An HTTP request body is not what its route accepts (not UTF-8, not JSON, too deep)."""


class ContextMismatch(GatewayError):
    """A compiler was given the context of a conversation it was not built for."""


class LeaseLost(GatewayError):
    """A turn lost its session's lease mid-way; its job is left for another run."""


class ToolServerUnavailable(GatewayError):
    """An MCP server cannot take a call now (down, restarting, or it died during the call).

    `gateway.tools` turns it into a tool result the model reads; it never reaches a turn.
    """


class MediaError(GatewayError):
    """A shared file could not be used. Its text is the reason, as the user reads it after
    the file's name ("photo.png: over the 20 MB limit"): no URL, no header, no secret."""


class DownloadFailed(MediaError):
    """The file's host refused it (404, 403, 5xx) or could not be reached."""


class DownloadTimeout(MediaError):
    """The download sent nothing for the read timeout, or took longer than its deadline."""


class MediaTooLarge(MediaError):
    """Over a limit: the file's bytes, a message's files, an image's pixels."""


class UnreadableMedia(MediaError):
    """The file is not what it claims to be, or is damaged (a truncated image, not a PDF)."""


class PlatformError(GatewayError):
    """A platform API call failed."""


class RateLimited(PlatformError):
    """The platform asked us to wait before the next call."""

    def __init__(self, retry_after: float, message: str = "") -> None:
        self.retry_after = max(0.0, float(retry_after))
        super().__init__(message or f"rate limited, retry after {self.retry_after:.1f}s")


class MessageRejected(PlatformError):
    """The platform refused the message's content (for example its formatting)."""


class StreamRefused(PlatformError):
    """The platform refused its own streaming surface for this reply (a method the channel,
    the workspace or the client does not allow, a stream that expired): the reply goes on
    edited in place. `for_channel` says the refusal holds for the whole channel for a
    while (a channel type, a missing scope, a policy), so the next reply there starts
    edited in place without asking again; `code` is the platform's error code."""

    def __init__(self, code: str, *, for_channel: bool) -> None:
        self.code, self.for_channel = code, for_channel
        super().__init__(f"streaming refused: {code}")


class ModelError(GatewayError):
    """A model call failed for good (after any retries)."""

    user_text = "the model failed"


class BudgetExceeded(ModelError):
    """A user's or workspace's budget is used up: the call is not made. Its text says
    which budget, and when it resets."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.user_text = text


class ModelTimeout(ModelError):
    user_text = "the model took too long to answer"


class ModelStalled(ModelTimeout):
    """A streamed answer sent nothing for the idle timeout.

    Before any text is shown it is retried like any timeout; after, the turn
    keeps the text shown and says it was cut off.
    """

    user_text = "the model stopped responding"


class ModelRateLimited(ModelError):
    """The provider answered 429; `retry_after` is the wait it asked for (None: it did not say)."""

    user_text = "the model provider is rate limiting us"

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ModelUnavailable(ModelError):
    user_text = "the model provider could not be reached"


class ModelProcessLost(ModelUnavailable):
    """The worker's model process died, or ended a call without its answer. A
    ModelUnavailable to every caller that acts on one, with its own text: the user is
    not told that the provider failed."""

    user_text = "the model call was interrupted"


class ModelRejected(ModelError):
    user_text = "the model provider refused the request"


class ModelBadResponse(ModelError):
    user_text = "the model provider sent an answer I could not read"


class ProviderStateLost(ModelError):
    user_text = "the model provider lost the conversation state"
