"""The Web API client every Slack part builds: on SLACK_API_URL, without rate-limit retries.

The core does the pacing (the send pacing, coalescing on 429), so no slack-sdk
retry handler for rate limits is installed. The sender, the bolt app and the
per-workspace clients (`workspaces.py`) all build theirs here.
"""

from __future__ import annotations

from slack_sdk.web.async_client import AsyncWebClient


def web_client(token: str | None, base_url: str) -> AsyncWebClient:
    """An AsyncWebClient on `SLACK_API_URL`; without a token when each call's workspace
    gives its own."""
    return AsyncWebClient(token=token, base_url=_with_slash(base_url))


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"
