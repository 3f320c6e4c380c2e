"""The sign-in and sign-out routes: the token form, the cookie, the lock's answer, and
"Sign in with <platform>" (OpenID Connect) where a platform offers it."""

from __future__ import annotations

import logging
import secrets

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.console.access import SESSION_TTL, clean_name, csrf_matches
from gateway.console.context import (
    COOKIE,
    MAX_FIELDS,
    ROOT,
    Console,
    FormError,
    address,
    field,
    is_https,
    same_origin,
)
from gateway.errors import PlatformError

log = logging.getLogger(__name__)


async def sign_in_page(console: Console, request: Request) -> Response:
    admin = await console.access.admin(request.cookies.get(COOKIE))
    if admin is not None:
        return RedirectResponse(f"{ROOT}/", status_code=303)
    return console.render(request, None, "signin.html", error="")


async def sign_in(console: Console, request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=MAX_FIELDS)
    where = address(request)
    if not same_origin(request):
        return console.render(
            request, None, "signin.html", status=403, error="Sign in from the console's own page."
        )
    try:
        who = clean_name(field(form, "name", 100))
        token = field(form, "token", 1000)
    except FormError:
        who = None
    if who is None:
        return console.render(
            request,
            None,
            "signin.html",
            status=400,
            error="A name is at most 64 printable characters.",
        )
    result = await console.access.sign_in(token, who, where)
    if result.locked_for:
        log.warning("console: sign-in locked for %s", where)
        return console.render(
            request,
            None,
            "signin.html",
            status=429,
            error=f"Too many attempts: signing in is locked for {result.locked_for} s.",
        )
    if result.cookie is None:
        await console.audit.record(who, "sign-in refused", "", where, "wrong token")
        return console.render(request, None, "signin.html", status=401, error="Wrong token.")
    await console.audit.record(who, "sign-in", "", where)
    return _signed_in(request, result.cookie)


async def sign_out(console: Console, request: Request) -> Response:
    cookie = request.cookies.get(COOKIE)
    admin = await console.access.admin(cookie)
    response = RedirectResponse(f"{ROOT}/signin", status_code=303)
    if admin is None or cookie is None:
        return response
    form = await request.form(max_files=0, max_fields=MAX_FIELDS)
    if not same_origin(request) or not csrf_matches(admin, _text(form.get("csrf"))):
        return console.render(
            request, admin, "error.html", status=403, message="Reload and try again."
        )
    await console.access.sign_out(cookie)
    await console.audit.record(admin.who, "sign-out", "", address(request))
    response.delete_cookie(COOKIE, path=ROOT)
    return response


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _redirect_uri(request: Request, platform: str) -> str:
    """Where the platform sends the operator back: this console's callback, on the scheme
    and host the browser used (uvicorn's, behind a trusted proxy)."""
    return str(request.url.replace(path=f"{ROOT}/signin/{platform}/callback", query=""))


async def platform_start(console: Console, request: Request) -> Response:
    """ "Sign in with <platform>": to the platform's page, with a one-time state and nonce."""
    platform = request.path_params["platform"]
    sign_in = console.sign_ins.get(platform)
    if sign_in is None:
        return console.render(request, None, "signin.html", status=404, error="No such sign-in.")
    nonce = secrets.token_urlsafe(24)
    state = await console.access.new_state(nonce)
    url = sign_in.authorize_url(state, nonce, _redirect_uri(request, platform))
    return RedirectResponse(url, status_code=303)


async def platform_callback(console: Console, request: Request) -> Response:
    """The platform's redirect: its state checked once, its code exchanged, then a sign-in
    for a workspace admin (or a user GATEWAY_ADMIN_USERS names), nobody else."""
    platform = request.path_params["platform"]
    sign_in = console.sign_ins.get(platform)
    where = address(request)
    nonce = await console.access.take_state(request.query_params.get("state", ""))
    code = request.query_params.get("code", "")
    if sign_in is None or nonce is None or not code or len(code) > 500:
        return _refused(console, request, 400, "This sign-in has expired or was not started here.")
    try:
        operator = await sign_in.identify(code, nonce, _redirect_uri(request, platform))
    except PlatformError as exc:
        log.warning("console: %s sign-in failed: %s", platform, exc)
        return _refused(console, request, 502, f"{platform} could not be asked; try again.")
    if operator is None:
        return _refused(console, request, 401, f"{platform} did not sign you in.")
    who = f"{operator.name} ({operator.user_key})"
    if not operator.admin:
        await console.audit.record(who, "sign-in refused", "", where, f"not a {platform} admin")
        return _refused(
            console,
            request,
            403,
            f"{operator.user_key} is not an admin of its workspace, nor named in "
            "GATEWAY_ADMIN_USERS.",
        )
    await console.audit.record(who, "sign-in", "", where, f"with {platform}")
    return _signed_in(request, await console.access.start(who, where))


def _refused(console: Console, request: Request, status: int, error: str) -> Response:
    return console.render(request, None, "signin.html", status=status, error=error)


def _signed_in(request: Request, cookie: str) -> Response:
    response = RedirectResponse(f"{ROOT}/", status_code=303)
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=SESSION_TTL,
        path=ROOT,
        httponly=True,
        samesite="lax",
        secure=is_https(request),
    )
    return response
