"""The Web API client every Slack part builds: on SLACK_API_URL, without rate-limit retries.

The core does the pacing (the send pacing, coalescing on 429), so no slack-sdk
retry handler for rate limits is installed. The sender, the bolt app and the
per-workspace clients (`workspaces.py`) all build theirs here.
"""

from __future__ import annotations

import aiohttp
from slack_sdk.web.async_client import AsyncWebClient


def web_client(token: str | None, base_url: str) -> AsyncWebClient:
    """An AsyncWebClient on `SLACK_API_URL`; without a token when each call's workspace
    gives its own."""
    return AsyncWebClient(token=token, base_url=_with_slash(base_url))


class SharedSession:
    """One aiohttp session, its keep-alive connections shared by the clients it is
    attached to (slack-sdk opens a session, and a TCP connection, per request of a client
    without one). Made in the running loop at the first attach; after `aclose`, a client
    falls back to slack-sdk's session per request."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def attach(self, client: AsyncWebClient) -> None:
        """`client`'s calls go through the shared session (a client that has one keeps it)."""
        if client.session is not None or self._closed:
            return
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=client.timeout)
            self._session = aiohttp.ClientSession(timeout=timeout)
        client.session = self._session

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            await self._session.close()


def _with_slash(url: str) -> str:
    return url if url.endswith("/") else url + "/"
