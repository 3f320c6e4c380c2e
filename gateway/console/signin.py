"""The sign-in and sign-out routes: the token form, the cookie, the lock's answer."""

from __future__ import annotations

import logging

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
    response = RedirectResponse(f"{ROOT}/", status_code=303)
    response.set_cookie(
        COOKIE,
        result.cookie,
        max_age=SESSION_TTL,
        path=ROOT,
        httponly=True,
        samesite="lax",
        secure=is_https(request),
    )
    return response


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
