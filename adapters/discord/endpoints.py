"""Where discord.py connects: Discord, or the hosts DISCORD_API_URL / DISCORD_GATEWAY_URL name.

discord.py has no per-client option for either. It builds every REST URL from
the class attribute `discord.http.Route.BASE` (webhook calls included) and
opens the gateway at `DiscordWebSocket.DEFAULT_GATEWAY` whenever it does not
take the URL from `GET /gateway/bot` (a fixed shard count, a session that was
invalidated). Setting both class attributes once at startup is therefore the
only way to point it elsewhere; a process talks to one Discord, so that is safe.

A file of its own, not part of `sender.py` or `connection.py`: the setting is
process-wide and serves both (REST for the sender, the websocket for the
connection), and `platform.py` applies it once, before either is built.
"""

from __future__ import annotations

import yarl
from discord.gateway import DiscordWebSocket
from discord.http import Route

from gateway.errors import ConfigError

DISCORD_API = "https://discord.com/api/v10"
DISCORD_GATEWAY = "wss://gateway.discord.gg/"


def apply(api_url: str | None, gateway_url: str | None) -> None:
    """Point discord.py's REST and gateway URLs at the given hosts (None: Discord's own)."""
    Route.BASE = _checked(api_url, ("http", "https"), "DISCORD_API_URL") or DISCORD_API
    gateway = _checked(gateway_url, ("ws", "wss"), "DISCORD_GATEWAY_URL") or DISCORD_GATEWAY
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway)


def _checked(url: str | None, schemes: tuple[str, ...], name: str) -> str | None:
    if not url:
        return None
    parsed = yarl.URL(url)
    if parsed.scheme not in schemes or not parsed.host:
        raise ConfigError(f"{name} must be a {' or '.join(s + '://' for s in schemes)} URL")
    return url.rstrip("/")
