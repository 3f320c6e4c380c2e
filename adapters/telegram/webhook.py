"""`POST /telegram/webhook`: Telegram pushes updates here when a webhook is set.

Telegram sends the secret given to setWebhook in `X-Telegram-Bot-Api-Secret-Token`;
a request without the right one is answered 401 before its body is read, so
it changes nothing. A body that is not an update is answered 400 (Telegram
does not retry 4xx) and logged in one short line. Anything else is converted
and handed to ingest; a failure there is a 5xx, so Telegram delivers the update
again later (ingest dedupes on `update_id`).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from telegram import Update

from gateway.errors import GatewayError
from gateway.model import Inbound

if TYPE_CHECKING:
    from gateway.ingest import Ingest

log = logging.getLogger(__name__)

PATH = "/telegram/webhook"
SECRET_HEADER = "x-telegram-bot-api-secret-token"
MAX_BODY = 1024 * 1024  # updates are a few kilobytes; anything this big is not one

Convert = Callable[[Update], Inbound | None]


def webhook_route(secret: str, ingest: Ingest, convert: Callable[[], Convert | None]) -> Route:
    """The route; `convert()` gives the update converter once startup learned the bot's ids."""
    expected = secret.encode()

    async def endpoint(request: Request) -> Response:
        given = request.headers.get(SECRET_HEADER, "").encode()
        if not hmac.compare_digest(given, expected):
            return PlainTextResponse("unauthorized", status_code=401)
        converter = convert()
        if converter is None:
            return PlainTextResponse("starting", status_code=503)
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            return PlainTextResponse("expected application/json", status_code=415)
        body = await request.body()
        if len(body) > MAX_BODY:
            return PlainTextResponse("too large", status_code=413)
        update = _parse(body)
        if update is None:
            return PlainTextResponse("malformed update", status_code=400)
        inbound = converter(update)
        if inbound is not None:
            try:
                await ingest.receive(inbound)
            except (GatewayError, RedisError) as exc:
                # Telegram delivers the update again later; ingest dedupes it then.
                log.warning("telegram webhook: update %s not stored (%s), answered 503",
                            update.update_id, exc)
                return PlainTextResponse("try again", status_code=503)
        return JSONResponse({"ok": True})

    return Route(PATH, endpoint, methods=["POST"])


def _parse(body: bytes) -> Update | None:
    try:
        data: Any = json.loads(body)
        if not isinstance(data, dict) or not isinstance(data.get("update_id"), int):
            raise ValueError("no update_id")
        return Update.de_json(data, None)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("telegram webhook: malformed update (%s: %s), answered 400",
                    type(exc).__name__, str(exc)[:80])
        return None
