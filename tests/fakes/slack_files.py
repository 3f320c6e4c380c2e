"""Slack's file host, as part of the fake Slack (its own origin, as SLACK_API_URL's host).

    file = slack.files.add("photo.png", data, "image/png")   # a `files` entry of an event
    slack.files.requests                                     # every fetch, with its token

A file is served at its private URLs (`/files-pri/<team>-<id>/<name>`, and
`/download/<name>` for `url_private_download`) to a request that carries the bot
token in `Authorization: Bearer`. Anything else is what Slack answers then: a
redirect to its sign-in page, an HTML page with status 200. `scope_granted =
False` answers the sign-in page to every fetch (an app without `files:read`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web

from tests.fakes.server import CallLog, LoopbackServer

SIGN_IN_PAGE = (
    "<!DOCTYPE html><html lang='en-US'><head><title>Slack</title></head>"
    "<body><h1>Sign in to your workspace</h1></body></html>"
)


@dataclass(frozen=True)
class FileFetch:
    """One request for a file: its path and the bearer token it carried (None: none)."""

    path: str
    token: str | None


@dataclass
class _Stored:
    data: bytes
    mimetype: str


class SlackFileHost:
    """The files of one fake Slack, served on its server."""

    def __init__(self, server: LoopbackServer, team_id: str, token: str) -> None:
        self.server, self.team_id, self.token = server, team_id, token
        self.scope_granted = True
        self.requests: CallLog[FileFetch] = CallLog()
        self._stored: dict[str, _Stored] = {}
        self._ids = itertools.count(1)

    def add(self, name: str, data: bytes, mimetype: str, **fields: Any) -> dict[str, Any]:
        """Store a file; returns its object as a message event's `files` carry it
        (`fields` add to it or replace its values)."""
        file_id = f"F{next(self._ids):08d}"
        self._stored[file_id] = _Stored(data, mimetype)
        base = f"{self.server.url}/files-pri/{self.team_id}-{file_id}"
        return {
            "id": file_id,
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": name.rpartition(".")[2],
            "size": len(data),
            "mode": "hosted",
            "url_private": f"{base}/{quote(name)}",
            "url_private_download": f"{base}/download/{quote(name)}",
            **fields,
        }

    def install(self, app: web.Application) -> None:
        app.router.add_get("/files-pri/{key}/{tail:.*}", self._file)
        app.router.add_get("/signin", self._sign_in)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
        self.requests.record(FileFetch(request.path, token))
        stored = self._stored.get(request.match_info["key"].rpartition("-")[2])
        if stored is None:
            raise web.HTTPNotFound()
        if token != self.token or not self.scope_granted:
            raise web.HTTPFound(f"/signin?redir={quote(request.path, safe='')}")
        return web.Response(body=stored.data, content_type=stored.mimetype)

    async def _sign_in(self, request: web.Request) -> web.Response:
        return web.Response(text=SIGN_IN_PAGE, content_type="text/html")
