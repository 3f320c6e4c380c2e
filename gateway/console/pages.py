"""The console's pages that only read: health, conversations, usage, settings, pairing,
approvals, feedback and the audit log. Each reads through the core's own stores."""

from __future__ import annotations

import csv
import datetime as dt
import io
import time

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.console import conversations, health
from gateway.console.access import Admin
from gateway.console.context import ROOT, Console
from gateway.errors import ConfigError
from gateway.feedback.store import FeedbackStore
from gateway.settings.scoped import BUDGET_KEYS, KEYS, ScopedSettings, parse_scope
from gateway.spend.usage import Totals, UsageLedger, day_of

USAGE_BY = ("user", "workspace", "model", "session", "day")
TEXT_FILTER = 200
WAITING_SHOWN = 200


async def home(console: Console, request: Request, admin: Admin) -> Response:
    return RedirectResponse(f"{ROOT}/health", status_code=303)


async def health_page(console: Console, request: Request, admin: Admin) -> Response:
    found = await health.read(console.redis, console.platforms, console.settings.mcp_config)
    turns = await conversations.running(console.redis)
    return console.render(request, admin, "health.html", health=found, running=turns, rate=None)


def _search(request: Request) -> tuple[conversations.Search, str]:
    values = {
        name: request.query_params.get(name, "").strip()
        for name in ("platform", "workspace", "channel", "user", "text")
    }
    too_long = [name for name, value in values.items() if len(value) > TEXT_FILTER]
    if too_long:
        return conversations.Search(), f"{too_long[0]} is at most {TEXT_FILTER} characters"
    return conversations.Search(**values), ""


async def conversations_page(console: Console, request: Request, admin: Admin) -> Response:
    search, error = _search(request)
    found = await conversations.listing(console.redis, search)
    return console.render(
        request,
        admin,
        "conversations.html",
        search=search,
        listing=found,
        error=error,
        limit=conversations.LISTED,
        scanned=conversations.SEARCH_SESSIONS,
    )


def session_key(text: str) -> str | None:
    """A session key as given in a request: `platform:workspace:channel[:thread]`."""
    parts = text.split(":")
    if not 3 <= len(parts) <= 4 or any(not p or not p.isprintable() for p in parts):
        return None
    return text if len(text) <= 400 else None


async def conversation_page(console: Console, request: Request, admin: Admin) -> Response:
    key = session_key(request.query_params.get("key", ""))
    before_text = request.query_params.get("before", "")
    if key is None or (before_text and not before_text.isdigit()):
        return console.render(
            request, admin, "error.html", status=400, message="No such conversation key."
        )
    found = await _conversation(console, key, int(before_text) if before_text else None)
    if not found.exists:
        return console.render(
            request, admin, "error.html", status=404, message=f"No conversation {key}."
        )
    return console.render(request, admin, "conversation.html", talk=found, page=conversations.PAGE)


async def _conversation(
    console: Console, key: str, before: int | None
) -> conversations.Conversation:
    ingest = console.ingest
    return await conversations.conversation(
        console.redis, ingest.sessions, ingest.approvals, key, before
    )


def _since(request: Request) -> tuple[str, str]:
    given = request.query_params.get("since", "")
    if not given:
        return day_of(dt.datetime.now(dt.UTC))[:8] + "01", ""
    try:
        return dt.date.fromisoformat(given).isoformat(), ""
    except ValueError:
        return day_of(dt.datetime.now(dt.UTC))[:8] + "01", "since must be a day as YYYY-MM-DD"


async def usage_page(console: Console, request: Request, admin: Admin) -> Response:
    by = request.query_params.get("by", "user")
    since, error = _since(request)
    if by not in USAGE_BY:
        by, error = "user", f"by is one of {', '.join(USAGE_BY)}"
    ledger = UsageLedger(console.redis)
    days = await ledger.by_day("model", since)  # every call counts for its model
    rows = days if by == "day" else await ledger.by(by, since)
    chart = {
        "days": list(days),
        "tokens": [t.prompt + t.completion for t in days.values()],
        "cost": [round(t.cost, 6) for t in days.values()],
    }
    return console.render(
        request,
        admin,
        "usage.html",
        by=by,
        since=since,
        rows=rows,
        error=error,
        kinds=USAGE_BY,
        chart=chart,
    )


async def usage_csv(console: Console, request: Request, admin: Admin) -> Response:
    by = request.query_params.get("by", "user")
    since, error = _since(request)
    if by not in USAGE_BY or error:
        return Response(error or "by is not known", status_code=400, media_type="text/plain")
    ledger = UsageLedger(console.redis)
    rows = await (ledger.by_day("model", since) if by == "day" else ledger.by(by, since))
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([by, "calls", "prompt_tokens", "completion_tokens", "cost_usd", "unpriced"])
    for name, totals in rows.items():
        writer.writerow([_cell(name), *_numbers(totals)])
    headers = {"content-disposition": f'attachment; filename="usage-{by}-since-{since}.csv"'}
    return Response(out.getvalue(), media_type="text/csv", headers=headers)


def _cell(text: str) -> str:
    """A spreadsheet runs a cell that opens with = + - @ as a formula: such a name is quoted."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def _numbers(totals: Totals) -> list[str]:
    return [
        str(totals.calls),
        str(totals.prompt),
        str(totals.completion),
        "" if totals.unpriced == totals.calls else f"{totals.cost:.6f}",  # unknown is not 0
        str(totals.unpriced),
    ]


async def settings_page(console: Console, request: Request, admin: Admin) -> Response:
    return await settings_at(console, request, admin, request.query_params.get("scope", ""))


async def settings_at(
    console: Console,
    request: Request,
    admin: Admin,
    scope_text: str,
    error: str = "",
    status: int = 200,
) -> Response:
    """The settings page at a scope as typed (its error shown when it is not one)."""
    scope = ""
    if scope_text:
        try:
            scope = parse_scope(scope_text)
        except ConfigError as exc:
            error, status = str(exc), 400
    scoped = ScopedSettings(console.redis, console.settings)
    await scoped.load()
    effective = scoped.resolve(scope) if scope else None
    return console.render(
        request,
        admin,
        "settings.html",
        status=status,
        scope=scope,
        keys=KEYS,
        budget_keys=BUDGET_KEYS,
        effective=effective,
        own=scoped.at(scope) if scope else {},
        error=error,
        rates={
            "per user": console.settings.rate_user_text or "none",
            "per conversation": console.settings.rate_conversation_text or "none",
        },
    )


async def pairing_page(console: Console, request: Request, admin: Admin) -> Response:
    pairing = console.ingest.access.pairing
    return console.render(
        request,
        admin,
        "pairing.html",
        paired=await pairing.paired(),
        pending=sorted((await pairing.pending()).items()),
        on=console.settings.pairing,
    )


async def approvals_page(console: Console, request: Request, admin: Admin) -> Response:
    waiting = []
    for session, approval_id in await console.ingest.approvals.waiting(WAITING_SHOWN):
        found = await console.ingest.approvals.by_id(session, approval_id)
        if found is not None:
            waiting.append(found)
    return console.render(
        request,
        admin,
        "approvals.html",
        waiting=waiting,
        now=time.time(),
        timeout=console.settings.confirm_timeout,
    )


async def feedback_page(console: Console, request: Request, admin: Admin) -> Response:
    since, error = _since(request)
    start = dt.datetime.fromisoformat(since).replace(tzinfo=dt.UTC)
    votes = [v for v in await FeedbackStore(console.redis).since(start) if v.value == "down"]
    return console.render(
        request, admin, "feedback.html", votes=votes[:500], since=since, error=error
    )


async def audit_page(console: Console, request: Request, admin: Admin) -> Response:
    return console.render(request, admin, "audit.html", entries=await console.audit.recent())
