"""Limits on what one HTTP request to `gateway web` may carry, enforced before any route parses it.

`BodyLimit` wraps the whole app, so every route gets it: a `Content-Length`
over the limit is answered 413 at once, without reading a byte of the body;
a body without one (chunked) is counted while it arrives and cut off at the
limit, so the server never holds more than the limit for one request.

`json_body` is the one way a route turns an accepted body into JSON: strict
UTF-8, no NaN or Infinity, and a bounded nesting depth, so that a body that
parses cannot later exhaust the recursion limit of whatever walks it (an SDK's
deserializer, `json.dumps` into Redis).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import MalformedRequest
from gateway.logs import one_line

log = logging.getLogger(__name__)

# Slack's event, command and interactivity payloads are a few kilobytes (a message
# is at most 40,000 characters), Telegram's updates smaller still: 1 MiB leaves
# room for any real delivery while an unauthenticated caller cannot make a
# process hold more than that per request.
MAX_BODY = 1024 * 1024
# Real payloads nest about a dozen levels (Slack's rich-text blocks are the
# deepest); Python's own recursion limit is 1,000 frames.
MAX_DEPTH = 64


class BodyLimit:
    """ASGI middleware: read each request body up to `max_bytes`, refuse it with 413 beyond."""

    def __init__(self, app: ASGIApp, max_bytes: int = MAX_BODY) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is None or declared > self.max_bytes:
            await self._refuse(scope, send, declared)
            return
        try:
            body = await self._read(receive)
        except _ClientGone:
            return
        if body is None:
            await self._refuse(scope, send, declared)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the limit."""
        parts: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    async def _refuse(self, scope: Scope, send: Send, declared: int | None) -> None:
        bad_length = declared is None
        status = 400 if bad_length else 413
        reason = b"bad content-length" if bad_length else b"request body too large"
        log.warning(
            "%s %s refused with %d: %s",
            scope.get("method"),
            scope.get("path"),
            status,
            reason.decode(),
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"text/plain; charset=utf-8"),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": reason})


class _ClientGone(Exception):
    """The client disconnected before its body was complete: there is no one to answer."""


def _content_length(scope: Scope) -> int | None:
    """The declared length (0 when there is none, as for a chunked body), None when invalid."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return 0


def _replay(body: bytes, receive: Receive) -> Receive:
    """A `receive` that hands the app the body already read, then the client's later messages."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def json_body(body: bytes, *, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of `body`; MalformedRequest when it is not strict UTF-8 JSON within bounds."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("body is not UTF-8") from None
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except RecursionError:
        raise MalformedRequest("JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers of more digits than Python parses
        raise MalformedRequest(f"not JSON: {one_line(exc, 60)}") from None
    if _depth_over(value, max_depth):
        raise MalformedRequest(f"JSON nested deeper than {max_depth} levels")
    return value


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth_over(value: Any, max_depth: int) -> bool:
    """True when `value` nests deeper than `max_depth` (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
