"""`POST /slack/events`: the signature checked, then the body checked, then bolt.

bolt parses a body before it verifies the signature, and assumes every object
in it is the type Slack sends: an unsigned body nested 100,000 levels deep, or
a list where it expects an object, used to end in a 500. Here the request is
verified first, on its raw bytes (Slack's v0 scheme, five minutes of replay
window), so nothing unsigned is ever parsed, nor even decoded; then the body must be strict
UTF-8 of the type it says it is (a JSON object, or a form whose `payload` is
one), within the depth limit. Only then does bolt see it, with its own
signature check still on. Each refusal is one log line, without the body.

Slack retries a delivery that gets no 2xx three times, then stops, so a
malformed delivery is answered 4xx; a delivery Redis could not take stays a 5xx.

In many workspaces, `GET /slack/install` and `GET /slack/oauth_redirect` run
bolt's OAuth flow (adapters/slack/oauth.py); neither reads a body.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from urllib.parse import parse_qs

from slack_bolt.adapter.starlette.async_handler import to_async_bolt_request, to_starlette_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from adapters.fields import SHAPE_ERRORS
from gateway.errors import MalformedRequest
from gateway.http.limits import json_body
from gateway.logs import one_line

log = logging.getLogger(__name__)

PATH = "/slack/events"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
REPLAY_WINDOW = 5 * 60  # seconds, as Slack documents and bolt checks


def events_route(app: AsyncApp, signing_secret: str) -> Route:
    """The route every event, slash command and interaction is posted to."""
    secret = signing_secret.encode()

    async def events(request: Request) -> Response:
        body = await request.body()  # bounded by BodyLimit before it gets here
        if not _signed(secret, body, request):
            log.info("slack: unsigned or stale request refused with 401")
            return PlainTextResponse("invalid signature", status_code=401)
        media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if media_type not in (JSON, FORM):
            log.warning("slack: signed request of type %r refused with 415", media_type[:40])
            return PlainTextResponse("unsupported media type", status_code=415)
        try:
            _check(body, media_type)
        except MalformedRequest as exc:
            log.warning("slack: malformed %s request refused with 400: %s", media_type, exc)
            return PlainTextResponse("malformed request", status_code=400)
        return await _dispatch(app, request, body)

    return Route(PATH, events, methods=["POST"])


def oauth_routes(flow: AsyncOAuthFlow) -> list[Route]:
    """The install link, and where Slack sends the installer back."""

    async def install(request: Request) -> Response:
        return to_starlette_response(await flow.handle_installation(_bodiless(request)))

    async def redirect(request: Request) -> Response:
        response = await flow.handle_callback(_bodiless(request))
        if response.status >= 400:
            log.warning("slack: an install was refused (%d)", response.status)
        return to_starlette_response(response)

    return [
        Route(flow.install_path, install, methods=["GET"]),
        Route(flow.redirect_uri_path, redirect, methods=["GET"]),
    ]


def _bodiless(request: Request) -> AsyncBoltRequest:
    return to_async_bolt_request(request, b"")


def _signed(secret: bytes, body: bytes, request: Request) -> bool:
    """Slack's v0 signature, `v0=HMAC-SHA256(secret, "v0:<timestamp>:<body>")`, over the raw
    bytes (slack-sdk's verifier decodes the body as UTF-8 first, and raises when it is not)."""
    timestamp = request.headers.get("x-slack-request-timestamp", "")
    signature = request.headers.get("x-slack-signature", "")
    if not (timestamp.isascii() and timestamp.isdigit()):
        return False
    if abs(time.time() - int(timestamp)) > REPLAY_WINDOW:
        return False
    base = b"v0:" + timestamp.encode() + b":" + body
    expected = "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode("latin-1"))


def _check(body: bytes, media_type: str) -> None:
    """Raise MalformedRequest unless bolt can read `body` as the object it expects."""
    if media_type == JSON:
        _must_be_object(json_body(body))
        return
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedRequest("body is not UTF-8") from None
    if text.startswith("{"):  # bolt reads any body that looks like JSON as JSON
        raise MalformedRequest("a JSON body sent as a form")
    payload = parse_qs(text).get("payload")
    if payload:
        _must_be_object(json_body(payload[0].encode()))


def _must_be_object(value: object) -> None:
    if not isinstance(value, dict):
        raise MalformedRequest(f"a JSON {type(value).__name__} where an object belongs")


async def _dispatch(app: AsyncApp, request: Request, body: bytes) -> Response:
    # bolt reads its routing fields (team, user, event type...) in the request's
    # constructor and again in its error handler, assuming each is the type Slack sends:
    # what that raises on a signed body of another shape ends here, not in a 500.
    try:
        return to_starlette_response(await app.async_dispatch(to_async_bolt_request(request, body)))
    except SHAPE_ERRORS as exc:
        log.warning("slack: request of the wrong shape refused with 400 (%s)", one_line(exc))
        return PlainTextResponse("malformed request", status_code=400)
