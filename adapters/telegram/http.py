"""`POST /telegram/webhook`: Telegram pushes updates here when a webhook is set.

Telegram sends the secret given to setWebhook in `X-Telegram-Bot-Api-Secret-Token`;
a request without the right one is answered 401 before its body is read, so
it changes nothing. The body is bounded by the app's `BodyLimit` (413 past it).

Telegram retries every answer that is not 2xx, and holds the bot's later
updates back while it does. So an update that carries the right secret but is
malformed (not UTF-8 JSON, nested deeper than any real update, an object of
the wrong type where a message belongs) is acknowledged with 200 and dropped,
with one short log line: a retry would bring the same bytes back. A well-formed
update is converted and handed to ingest (a callback query, a click on an
approval button, to `Clicks`); a failure there is a 503, so Telegram delivers
it again later (ingest dedupes on `update_id`, a click on its query id).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from telegram import Update

from adapters.fields import SHAPE_ERRORS
from adapters.telegram.clicks import Clicks
from gateway.errors import GatewayError, MalformedRequest
from gateway.http.limits import json_body
from gateway.logs import one_line
from gateway.messages import Inbound

if TYPE_CHECKING:
    from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)

PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"

Convert = Callable[[Update], Inbound | None]


def webhook_route(
    secret: str,
    ingest: Ingest,
    convert: Callable[[], Convert | None],
    clicks: Callable[[], Clicks | None],
) -> Route:
    """The route; `convert()` and `clicks()` give the update converter and the click
    handler once startup learned the bot's ids."""
    expected = secret.encode()

    async def endpoint(request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "").encode("latin-1")
        if not hmac.compare_digest(given, expected):
            return PlainTextResponse("unauthorized", status_code=401)
        converter, on_click = convert(), clicks()
        if converter is None or on_click is None:
            return PlainTextResponse("starting", status_code=503)
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            log.warning("telegram webhook: body of type %r refused with 415", media_type[:40])
            return PlainTextResponse("expected application/json", status_code=415)
        try:
            update = _update(await request.body())
            if update.callback_query is not None:
                return await _click(on_click, update)
            inbound = _convert(update, converter)
        except MalformedRequest as exc:
            log.warning("telegram webhook: malformed update acknowledged and dropped (%s)", exc)
            return JSONResponse({"ok": True})
        return await _receive(ingest, inbound)

    return Route(PATH, endpoint, methods=["POST"])


def _update(body: bytes) -> Update:
    data: Any = json_body(body)
    update_id = data.get("update_id") if isinstance(data, dict) else None
    if type(update_id) is not int:  # bool is an int to isinstance()
        raise MalformedRequest("no integer update_id")
    try:
        return Update.de_json(data, None)
    except SHAPE_ERRORS as exc:
        raise MalformedRequest(f"update {update_id}: {one_line(exc)}") from None


def _convert(update: Update, converter: Convert) -> Inbound | None:
    """The Inbound of `update` (None when the update is not a message for the bot)."""
    try:
        return converter(update)
    except SHAPE_ERRORS as exc:
        raise MalformedRequest(f"update {update.update_id}: {one_line(exc)}") from None


async def _click(clicks: Clicks, update: Update) -> Response:
    try:
        await clicks.handle(update)
    except (GatewayError, RedisError) as exc:
        return _not_stored("click", update.update_id, exc)
    except SHAPE_ERRORS as exc:
        raise MalformedRequest(f"update {update.update_id}: {one_line(exc)}") from None
    return JSONResponse({"ok": True})


async def _receive(ingest: Ingest, inbound: Inbound | None) -> Response:
    if inbound is not None:
        try:
            await ingest.receive(inbound)
        except (GatewayError, RedisError) as exc:
            return _not_stored("update", inbound.event_id, exc)
    return JSONResponse({"ok": True})


def _not_stored(what: str, ident: object, exc: Exception) -> Response:
    """A 503: Telegram delivers the update again later, and ingest dedupes it then."""
    log.warning("telegram webhook: %s %s not stored (%s), answered 503", what, ident, exc)
    return PlainTextResponse("try again", status_code=503)
