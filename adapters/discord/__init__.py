"""Discord: the gateway connection on discord.py, replies over the REST API.

    platform.py    DiscordPlatform, what the CLI loads: settings, shards, health
    inbound.py     a message, the /btw interaction or a click -> Inbound / Decision (pure)
    clicks.py      approval clicks (component interactions): decided, then answered
    render.py      Markdown -> Discord's Markdown, and its length
    sender.py      DiscordSender: REST messages, edits, typing, interaction follow-ups
    errors.py      discord.py's errors as the core's (`core_error`), as on every platform
    connection.py  the gateway websocket client (discord.py's AutoShardedClient)
    endpoints.py   where discord.py connects (DISCORD_API_URL / DISCORD_GATEWAY_URL)

Discord sends the gateway nothing over HTTP, so there is no `http.py`. Inside
this package `import discord` is discord.py (imports are absolute).
"""

from __future__ import annotations

from adapters.discord.platform import DiscordPlatform

__all__ = ["DiscordPlatform"]
