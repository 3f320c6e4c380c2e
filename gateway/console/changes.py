"""The console's changes: reset a conversation, stop its turn, set or unset a setting,
approve a pairing code, revoke a paired user. Each is validated here with a clear
message, made through the core's own function, and written to the audit log."""

from __future__ import annotations

from urllib.parse import urlencode

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from gateway.console import pages
from gateway.console.access import Admin
from gateway.console.context import ROOT, Console, field
from gateway.errors import ConfigError
from gateway.settings.scoped import ScopedSettings, parse_scope, shorten, validate_key

SHOWN = 80  # characters of a setting's value the audit log keeps


def _to_conversation(key: str, note: str) -> Response:
    query = urlencode({"key": key, "note": note})
    return RedirectResponse(f"{ROOT}/conversation?{query}", status_code=303)


async def reset(console: Console, request: Request, admin: Admin, form: FormData) -> Response:
    key = pages.session_key(field(form, "key", 400))
    if key is None:
        return console.render(
            request, admin, "error.html", status=400, message="No such conversation key."
        )
    await console.ingest.reset(key)
    await console.record(request, admin, "reset", key)
    return _to_conversation(key, "Started a fresh conversation.")


async def stop(console: Console, request: Request, admin: Admin, form: FormData) -> Response:
    key = pages.session_key(field(form, "key", 400))
    if key is None:
        return console.render(
            request, admin, "error.html", status=400, message="No such conversation key."
        )
    running = await console.ingest.stop(key)
    await console.record(request, admin, "stop", key, "running" if running else "nothing running")
    return _to_conversation(key, "Stopping the reply." if running else "Nothing is running.")


async def setting(console: Console, request: Request, admin: Admin, form: FormData) -> Response:
    action = field(form, "action")
    try:
        scope = parse_scope(field(form, "scope"))
        key = field(form, "key")
        validate_key(key)
        if action not in ("set", "unset"):
            raise ConfigError("choose set or unset")
        scoped = ScopedSettings(console.redis, console.settings)
        await scoped.load()
        if action == "set":
            stored = await scoped.set(scope, key, field(form, "value", 20_000))
            detail = f"{key} = {shorten(stored, SHOWN)}"
        else:
            removed = await scoped.unset(scope, key)
            detail = f"{key} unset" if removed else f"{key} was not set"
    except ConfigError as exc:
        scope_text = field(form, "scope")
        return await pages.settings_at(console, request, admin, scope_text, str(exc), 400)
    await console.record(request, admin, "setting", scope, detail)
    return RedirectResponse(f"{ROOT}/settings?{urlencode({'scope': scope})}", status_code=303)


async def approve(console: Console, request: Request, admin: Admin, form: FormData) -> Response:
    code = field(form, "code", 40)
    if not code:
        return await _pairing_with(console, request, admin, "Give the code the user was sent.", 400)
    status, detail = await console.ingest.access.pairing.approve(code)
    await console.record(
        request, admin, "pairing approve", detail if status == "approved" else code, status
    )
    if status == "locked":
        return await _pairing_with(
            console,
            request,
            admin,
            f"Too many wrong codes; approving is locked for {detail} s.",
            429,
        )
    if status != "approved":
        return await _pairing_with(
            console, request, admin, "No such pending code (or it expired).", 400
        )
    return RedirectResponse(
        f"{ROOT}/pairing?{urlencode({'note': f'Approved {detail}.'})}", status_code=303
    )


async def revoke(console: Console, request: Request, admin: Admin, form: FormData) -> Response:
    user = field(form, "user", 200)
    if ":" not in user:
        return await _pairing_with(console, request, admin, "A user is platform:id.", 400)
    revoked = await console.ingest.access.pairing.revoke(user)
    await console.record(
        request, admin, "pairing revoke", user, "revoked" if revoked else "not paired"
    )
    if not revoked:
        return await _pairing_with(console, request, admin, f"{user} is not a paired user.", 400)
    return RedirectResponse(
        f"{ROOT}/pairing?{urlencode({'note': f'Revoked {user}.'})}", status_code=303
    )


async def _pairing_with(
    console: Console, request: Request, admin: Admin, error: str, status: int
) -> Response:
    pairing = console.ingest.access.pairing
    return console.render(
        request,
        admin,
        "pairing.html",
        status=status,
        paired=await pairing.paired(),
        pending=sorted((await pairing.pending()).items()),
        on=console.settings.pairing,
        error=error,
    )
