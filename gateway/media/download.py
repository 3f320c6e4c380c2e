"""Fetching one attachment's bytes: streamed, never more than the limit held.

The size limit is enforced while reading (a declared `Content-Length` over it
is refused before the body is read), so a 30 MB file costs at most the limit
in memory. Each read may wait `timeout` seconds (a stalled download ends
there) and the whole fetch `deadline` seconds (a slow trickle ends there).
Every failure is a MediaError whose text the user can read: no URL, no header.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from gateway.errors import DownloadFailed, DownloadTimeout, MediaTooLarge
from gateway.ports import Download

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

CHUNK = 64 * 1024
MAX_REDIRECTS = 5


def megabytes(limit: int) -> str:
    """`limit` bytes as the user reads it: "20 MB", "1.5 MB"."""
    value = limit / 1_000_000
    return f"{value:.0f} MB" if value >= 10 or value == int(value) else f"{value:.1f} MB"


def over_limit(limit: int) -> MediaTooLarge:
    return MediaTooLarge(f"over the {megabytes(limit)} limit")


class Downloader:
    """Downloads over one shared HTTP client (its connections reused across files).

    The client is made at the first download: httpx, with its HTTP/1 and HTTP/2
    stacks, holds 7 MB in a worker, and most workers' turns carry no files.
    """

    def __init__(self, timeout: float, deadline: float) -> None:
        self.timeout, self.deadline = timeout, deadline
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=True,  # a cross-origin redirect drops the Authorization header
                max_redirects=MAX_REDIRECTS,
                headers={"Accept-Encoding": "identity"},  # the limit counts the bytes as sent
            )
        return self._client

    async def fetch(self, download: Download, limit: int) -> bytes:
        """The file's bytes, at most `limit` of them (MediaTooLarge past it)."""
        scheme = urlsplit(download.url).scheme.lower()
        if scheme == "file" and download.local:
            return await asyncio.to_thread(_read_local, download.url, limit)
        if scheme not in ("http", "https"):
            raise DownloadFailed("its address cannot be downloaded")
        try:
            async with asyncio.timeout(self.deadline):
                return await self._stream(download, limit)
        except TimeoutError:
            raise DownloadTimeout("the download took too long") from None

    async def _stream(self, download: Download, limit: int) -> bytes:
        client = self.client
        import httpx  # loaded with the client

        try:
            async with client.stream(
                "GET", download.url, headers=dict(download.headers)
            ) as response:
                _check_status(response.status_code)
                declared = response.headers.get("Content-Length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise over_limit(limit)
                return await _read_body(response, limit)
        except httpx.TimeoutException:
            raise DownloadTimeout("the download stalled") from None
        except httpx.TooManyRedirects:
            raise DownloadFailed("the download was redirected too many times") from None
        except httpx.HTTPError as exc:
            # The exception's text names the URL, which may carry a signed token.
            log.info("a download failed: %s", type(exc).__name__)
            raise DownloadFailed("the file could not be reached") from None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


async def _read_body(response: httpx.Response, limit: int) -> bytes:
    body = bytearray()
    async for chunk in response.aiter_raw(CHUNK):
        if len(body) + len(chunk) > limit:
            raise over_limit(limit)
        body += chunk
    return bytes(body)


def _check_status(status: int) -> None:
    if status < 400:
        return
    if status in (404, 410):
        raise DownloadFailed("not found (the link may have expired)")
    if status in (401, 403):
        raise DownloadFailed("access to the file was refused")
    raise DownloadFailed(f"the download failed (HTTP {status})")


def _read_local(url: str, limit: int) -> bytes:
    path = Path(unquote(urlsplit(url).path))
    try:
        with path.open("rb") as file:
            data = file.read(limit + 1)
    except OSError:
        raise DownloadFailed("the file could not be opened") from None
    if len(data) > limit:
        raise over_limit(limit)
    return data
