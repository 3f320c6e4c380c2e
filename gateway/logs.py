"""Logging set-up: text or JSON lines on stderr, with every configured secret masked;
`one_line`, an error as a log line can carry it; and `Outage`, a loop's failures said once."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable

# Libraries that log request URLs at INFO: Telegram's URLs carry the bot token.
_QUIET = (
    "httpx",
    "httpcore",
    "urllib3",
    "aiohttp.access",
    "LiteLLM",
    "litellm",
    "discord.gateway",
    "discord.client",
    "discord.http",
    "slack_bolt",
    "slack_sdk",
)


class RedactSecrets(logging.Filter):
    """Replaces every known secret value in a record's final text with `***`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        super().__init__()
        self.secrets = sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        text = record.getMessage()
        masked = self.redact(text)
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = self.redact(formatted)
        if masked != text:
            record.msg, record.args = masked, None
        return True

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body = {
            "at": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            body["error"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(body, ensure_ascii=False)


def setup(level: str, fmt: str, secrets: Iterable[str]) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RedactSecrets(secrets))
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _QUIET:
        logging.getLogger(name).setLevel(max(logging.WARNING, root.level))


def one_line(error: BaseException, limit: int = 80) -> str:
    """`error` for a log line about a refused request: its type and a short prefix of its
    text on one line (pydantic's and the SDKs' messages span several, and quote the input)."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:limit]}"


class Outage:
    """A loop's failures as an operator wants them: one warning when they start, a debug
    line for each attempt while they go on, and one line when the loop works again (a
    worker would otherwise log every half second through a failover). The phrases say
    what failed and what is tried (a subscription: "lost Redis", "subscribing again")."""

    def __init__(
        self,
        logger: logging.Logger,
        what: str,
        *,
        failing: str = "failed",
        retrying: str = "trying again",
        still: str = "still failing",
        back: str = "works again after",
    ) -> None:
        self.log, self.what = logger, what
        self.failing, self.retrying, self.still, self.back = failing, retrying, still, back
        self.since: float | None = None

    def failed(self, error: BaseException) -> None:
        if self.since is None:
            self.since = time.monotonic()
            self.log.warning("%s %s (%s); %s", self.what, self.failing, error, self.retrying)
        else:
            self.log.debug("%s: %s (%s)", self.what, self.still, error)

    def worked(self) -> None:
        if self.since is not None:
            elapsed = time.monotonic() - self.since
            self.log.info("%s %s %.1f s", self.what, self.back, elapsed)
            self.since = None
