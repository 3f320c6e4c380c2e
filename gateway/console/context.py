"""What every console page works with: the stores, the templates, and the sign-in gate.

`Console.page` and `Console.change` wrap each handler: without a sign-in a page is
the sign-in page (the event streams answer 401), and a change also needs its
sign-in's CSRF token and a request from the console's own origin.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from redis.asyncio import Redis
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from gateway.console.access import Access, Admin, csrf_matches
from gateway.console.audit import AuditLog
from gateway.inbound.ingest import Ingest
from gateway.ports import OperatorSignIn
from gateway.settings.env import Settings

log = logging.getLogger(__name__)

HERE = Path(__file__).parent
ROOT = "/admin"
COOKIE = "gw_admin"
MAX_FIELDS = 20
Page = Callable[["Console", Request, Admin], Awaitable[Response]]
Change = Callable[["Console", Request, Admin, FormData], Awaitable[Response]]
Handler = Callable[[Request], Awaitable[Response]]


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["root"] = ROOT
    env.filters["when"] = when
    return env


def when(at: object) -> str:
    """A time (epoch seconds) as the pages show it, in UTC."""
    try:
        moment = dt.datetime.fromtimestamp(float(cast(float, at)), dt.UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return ""
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def address(request: Request) -> str:
    """Where a request came from (uvicorn puts a trusted proxy's X-Forwarded-For here)."""
    return request.client.host if request.client else "unknown"


def is_https(request: Request) -> bool:
    """Over HTTPS, or behind a proxy uvicorn trusts (FORWARDED_ALLOW_IPS) that said so."""
    return request.url.scheme == "https"


def same_origin(request: Request) -> bool:
    """A change comes from the console's own pages: its Origin (or, without one, its
    Referer) names this host. A browser always sends one of them with a form's POST."""
    given = request.headers.get("origin") or request.headers.get("referer")
    if not given:
        return False
    found = urlsplit(given)
    return (found.netloc or "") == request.headers.get("host", "")


@dataclass
class Console:
    settings: Settings
    redis: Redis
    ingest: Ingest
    access: Access
    audit: AuditLog
    jinja: Environment
    platforms: Sequence[str]  # the job streams' platform names
    sign_ins: Mapping[str, OperatorSignIn]  # "Sign in with <platform>", by platform

    def render(
        self, request: Request, admin: Admin | None, name: str, status: int = 200, **values: Any
    ) -> HTMLResponse:
        body = self.jinja.get_template(name).render(
            admin=admin,
            path=request.url.path,
            query=request.query_params,
            sign_ins=sorted(self.sign_ins),
            **values,
        )
        return HTMLResponse(body, status_code=status)

    def page(self, handler: Page) -> Handler:
        async def guarded(request: Request) -> Response:
            admin = await self.access.admin(request.cookies.get(COOKIE))
            if admin is None:
                return self._sign_in_first(request)
            return await handler(self, request, admin)

        return guarded

    def stream(self, handler: Page) -> Handler:
        async def guarded(request: Request) -> Response:
            admin = await self.access.admin(request.cookies.get(COOKIE))
            if admin is None:
                return PlainTextResponse("sign in first", status_code=401)
            return await handler(self, request, admin)

        return guarded

    def change(self, handler: Change) -> Handler:
        async def guarded(request: Request) -> Response:
            admin = await self.access.admin(request.cookies.get(COOKIE))
            if admin is None:
                return self._sign_in_first(request)
            form = await request.form(max_files=0, max_fields=MAX_FIELDS)
            token = request.headers.get("x-csrf-token") or form.get("csrf")
            if not same_origin(request) or not csrf_matches(admin, _text(token)):
                log.warning("console: a change without its CSRF token from %s", address(request))
                return self.render(
                    request,
                    admin,
                    "error.html",
                    status=403,
                    message="This form has expired or did not come from the console. "
                    "Reload the page and try again.",
                )
            try:
                return await handler(self, request, admin, form)
            except FormError as exc:
                return self.render(request, admin, "error.html", status=400, message=str(exc))

        return guarded

    def _sign_in_first(self, request: Request) -> Response:
        if request.method == "GET":
            return self.render(request, None, "signin.html", status=401, error="")
        return RedirectResponse(f"{ROOT}/signin", status_code=303)

    async def record(
        self, request: Request, admin: Admin, action: str, target: str, detail: str = ""
    ) -> None:
        await self.audit.record(admin.who, action, target, address(request), detail)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


class FormError(ValueError):
    """A form field the console cannot take; its text is what the operator reads."""


def field(form: FormData, name: str, limit: int = 200) -> str:
    """A form field as text, trimmed; '' when missing; FormError past `limit` characters."""
    value = form.get(name)
    text = value.strip() if isinstance(value, str) else ""
    if len(text) > limit:
        raise FormError(f"{name} is at most {limit} characters")
    return text
