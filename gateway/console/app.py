"""The console's routes under `/admin`, and the headers every answer of it carries.

Mounted by `gateway web` only when GATEWAY_ADMIN_TOKEN is set; otherwise `/admin`
does not exist. The Content-Security-Policy allows scripts and styles from the
console's own files only (no inline script can run, whatever a page shows), and
no page may be framed.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from redis.asyncio import Redis
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.console import changes, live, pages, signin
from gateway.console.access import Access
from gateway.console.audit import AuditLog
from gateway.console.context import HERE, ROOT, Console, templates
from gateway.inbound.ingest import Ingest
from gateway.platform import Platform
from gateway.settings.env import Settings

POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
    )
)
HEADERS = [
    (b"content-security-policy", POLICY.encode()),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=()"),
]


class SecurityHeaders:
    """Adds HEADERS to every answer under the console, and no-store to its pages."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = scope["path"].startswith(f"{ROOT}/static/")

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.extend(HEADERS)
                if not static:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def console_routes(
    settings: Settings,
    redis: Redis,
    ingest: Ingest,
    names: Sequence[str],
    platforms: Sequence[Platform] = (),
) -> list[BaseRoute]:
    """`/admin` and everything under it (with "Sign in with <platform>" for each of
    `platforms` that offers it); none when no admin token is configured. `names` are the
    job streams' platforms."""
    if settings.admin_token is None:
        return []
    console = Console(
        settings,
        redis,
        ingest,
        Access(redis, settings.admin_token.get_secret_value()),
        AuditLog(redis),
        templates(),
        tuple(names),
        {s.platform: s for p in platforms if (s := p.operator_sign_in()) is not None},
    )
    page, change, stream = console.page, console.change, console.stream
    routes = [
        Route("/", page(pages.home)),
        Route("/signin", partial(signin.sign_in_page, console), methods=["GET"]),
        Route("/signin", partial(signin.sign_in, console), methods=["POST"]),
        Route("/signout", partial(signin.sign_out, console), methods=["POST"]),
        Route("/signin/{platform}", partial(signin.platform_start, console)),
        Route("/signin/{platform}/callback", partial(signin.platform_callback, console)),
        Route("/health", page(pages.health_page)),
        Route("/conversations", page(pages.conversations_page)),
        Route("/conversation", page(pages.conversation_page)),
        Route("/conversation/reset", change(changes.reset), methods=["POST"]),
        Route("/conversation/stop", change(changes.stop), methods=["POST"]),
        Route("/usage", page(pages.usage_page)),
        Route("/usage.csv", page(pages.usage_csv)),
        Route("/settings", page(pages.settings_page), methods=["GET"]),
        Route("/settings", change(changes.setting), methods=["POST"]),
        Route("/pairing", page(pages.pairing_page), methods=["GET"]),
        Route("/pairing/approve", change(changes.approve), methods=["POST"]),
        Route("/pairing/revoke", change(changes.revoke), methods=["POST"]),
        Route("/approvals", page(pages.approvals_page)),
        Route("/feedback", page(pages.feedback_page)),
        Route("/audit", page(pages.audit_page)),
        Route("/events/health", stream(live.health_events)),
        Route("/events/conversation", stream(live.conversation_events)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return [Mount(ROOT, routes=routes, middleware=[Middleware(SecurityHeaders)])]
