"""Discord: the gateway connection on discord.py, replies over the REST API.

`PLATFORM` is what `adapters.load("discord")` returns. Inside this package
`import discord` is discord.py (imports are absolute).
"""

from __future__ import annotations

from adapters.discord.platform import DiscordPlatform

PLATFORM = DiscordPlatform

__all__ = ["PLATFORM", "DiscordPlatform"]
