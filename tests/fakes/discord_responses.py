"""The fake Discord's answers: JSON as discord.py reads it, Discord's error bodies, a
stored message as the API shows it."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.fakes import discord_rules
from tests.fakes.discord_rules import Refusal

# Fields the fake keeps on a stored message for itself, never sent.
BOOKKEEPING = frozenset({"allowed_mentions", "edits", "interaction_token"})


def public(message: dict[str, Any]) -> dict[str, Any]:
    """A stored message as the API returns it, without the fake's bookkeeping."""
    return {k: v for k, v in message.items() if k not in BOOKKEEPING}


def components_refused(components: Any) -> web.Response | None:
    try:
        discord_rules.check_components(components)
    except Refusal as refusal:
        return error(refusal.status, refusal.code, refusal.message)
    return None


def too_long() -> web.Response:
    return error(400, 50035, "Invalid Form Body: content: Must be 2000 or fewer in length.")


def error(status: int, code: int, message: str) -> web.Response:
    return json_response({"code": code, "message": message}, status=status)


def json_response(
    data: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    # Exactly `application/json`, no charset: discord.py parses a body as JSON only then.
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )
