"""Discord's attachment host (its CDN), as part of the fake Discord, on the same server.

    file = fake.cdn.add("photo.png", data, "image/png")         # an attachment object
    voice = fake.cdn.add("voice-message.ogg", data, "audio/ogg", voice=True)
    fake.cdn.requests                                           # every path fetched

Attachments are served at their URL to anyone, as Discord's signed CDN links are.
A voice message's attachment carries `duration_secs` and `waveform`; the message
holding it needs the IS_VOICE_MESSAGE flag (`VOICE_MESSAGE_FLAG`).
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.fakes.server import CallLog, LoopbackServer

VOICE_MESSAGE_FLAG = 1 << 13


class DiscordCdn:
    """The attachments of one fake Discord, served on its server."""

    def __init__(self, server: LoopbackServer, new_id: Callable[[], str]) -> None:
        self.server, self.new_id = server, new_id
        self.requests: CallLog[str] = CallLog()
        self._stored: dict[str, tuple[bytes, str]] = {}

    def add(
        self, filename: str, data: bytes, content_type: str, *, voice: bool = False
    ) -> dict[str, Any]:
        """Store a file; returns its attachment object as a MESSAGE_CREATE carries it."""
        attachment_id = self.new_id()
        self._stored[attachment_id] = (data, content_type)
        url = f"{self.server.url}/attachments/{attachment_id}/{quote(filename)}?ex=1&hm=ab"
        attachment: dict[str, Any] = {
            "id": attachment_id,
            "filename": filename,
            "size": len(data),
            "url": url,
            "proxy_url": url,
            "content_type": content_type,
        }
        if voice:
            attachment |= {"duration_secs": 2.5, "waveform": base64.b64encode(b"\1" * 8).decode()}
        return attachment

    def install(self, app: web.Application) -> None:
        app.router.add_get("/attachments/{id}/{filename}", self._file)

    async def _file(self, request: web.Request) -> web.Response:
        self.requests.record(request.path)
        stored = self._stored.get(request.match_info["id"])
        if stored is None:
            raise web.HTTPNotFound()
        return web.Response(body=stored[0], content_type=stored[1])
