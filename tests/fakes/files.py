"""A loopback file host: what a platform's file URLs look like to the worker.

    files = FakeFiles(); await files.serve()
    url = files.add("photo.png", data, content_type="image/png",
                    require={"Authorization": "Bearer xoxb-test"})

Each file can demand a header (Slack's bot token), answer a status instead of
its bytes, lie about its content type, leave out its length (sent chunked),
stall after some bytes until the test ends, or trickle its bytes slowly. It
records each request's path and headers, counts the bytes it sent, and the most
requests it answered at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Mapping

from aiohttp import web

from tests.fakes.server import CallLog, LoopbackServer

CHUNK = 64 * 1024


@dataclasses.dataclass
class Served:
    data: bytes
    content_type: str = "application/octet-stream"
    require: Mapping[str, str] = dataclasses.field(default_factory=dict)
    status: int = 200
    declare_length: bool = True
    stall_after: int | None = None  # bytes sent before the stall
    trickle: float | None = None  # seconds between 1 KB pieces
    sent: int = 0


@dataclasses.dataclass(frozen=True)
class FileRequest:
    path: str
    headers: dict[str, str]


class FakeFiles(LoopbackServer):
    thread_name = "fake-files"

    def __init__(self) -> None:
        super().__init__()
        self.files: dict[str, Served] = {}
        self.requests: CallLog[FileRequest] = CallLog()
        self.active = self.most_active = 0  # requests being answered now; the most at once
        self._release = asyncio.Event()

    def add(self, name: str, data: bytes, **options: object) -> str:
        """Serve `data` at /files/<name>; returns its URL."""
        self.files[name] = Served(data, **options)  # type: ignore[arg-type]
        return f"{self.url}/files/{name}"

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/files/{name}", self._file)
        return app

    async def _before_close(self) -> None:
        self._release.set()

    async def _file(self, request: web.Request) -> web.StreamResponse:
        self.requests.record(FileRequest(request.path, dict(request.headers)))
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            return await self._answer(request)
        finally:
            self.active -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        served = self.files.get(request.match_info["name"])
        if served is None:
            raise web.HTTPNotFound()
        for header, value in served.require.items():
            if request.headers.get(header) != value:
                raise web.HTTPForbidden()
        if served.status != 200:
            return web.Response(status=served.status, text="no")
        response = web.StreamResponse(headers={"Content-Type": served.content_type})
        if served.declare_length:
            response.content_length = len(served.data)
        else:
            response.enable_chunked_encoding()
        await response.prepare(request)
        with contextlib.suppress(ConnectionResetError):
            await self._send(response, served)
        return response

    async def _send(self, response: web.StreamResponse, served: Served) -> None:
        size = 1024 if served.trickle is not None else CHUNK
        for start in range(0, len(served.data), size):
            if served.stall_after is not None and served.sent >= served.stall_after:
                await self._release.wait()
                return
            if served.trickle is not None:
                await asyncio.sleep(served.trickle)
            piece = served.data[start : start + size]
            await response.write(piece)
            served.sent += len(piece)
        await response.write_eof()
