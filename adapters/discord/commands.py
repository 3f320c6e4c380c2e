"""The chat commands as Discord application commands: /btw, /stop, /reset, /status, /usage.

Each one is the typed command in another form: its handler gets the command's text
(`/stop`, `/btw <question>`), which the connection hands to Ingest exactly as a typed
message, so access, rate limits and the answer are the same. They are offered where
the app is installed to a server or to a user's own account (integration types 0 and
1), and used in servers, the bot's DMs and other private channels (contexts 0, 1, 2):
a user who installed the app to their account can ask `/btw` in any server or group
DM, the bot a member there or not. Discord honours both only for global commands:
guild-scoped ones (DISCORD_COMMAND_GUILDS) reach that guild's members alone.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import discord
from discord import app_commands

from gateway.inbound.commands import MENU

CommandHandler = Callable[[discord.Interaction, str], Awaitable[None]]
AppCommand = app_commands.Command[Any, ..., None]
# The commands that answer anywhere from what the core holds; `/config` (admins, who are
# checked against the guild's roles) and `/help` stay typed commands.
NAMES = ("btw", "stop", "reset", "status", "usage")
BTW_DESCRIPTION = "Ask a side question about this conversation (kept out of its history)"
_DESCRIPTIONS = dict(MENU) | {"btw": BTW_DESCRIPTION}


def application_commands(handler: CommandHandler) -> list[AppCommand]:
    """The five commands, each calling `handler(interaction, text of the typed command)`."""
    return [btw_command(handler), *(_plain_command(name, handler) for name in NAMES[1:])]


def btw_command(handler: CommandHandler) -> AppCommand:
    """`/btw question`: the question becomes `/btw <question>`."""

    @app_commands.describe(question="What you want to know about this conversation")
    async def btw(interaction: discord.Interaction, question: str) -> None:
        await handler(interaction, f"/btw {question}".strip())

    return _command("btw", btw)


def _plain_command(name: str, handler: CommandHandler) -> AppCommand:
    async def run(interaction: discord.Interaction) -> None:
        await handler(interaction, f"/{name}")

    return _command(name, run)


def _command(name: str, callback: Callable[..., Coroutine[Any, Any, None]]) -> AppCommand:
    # discord.py reads the decorators' marks off the callback when the Command is made.
    callback = app_commands.allowed_installs(guilds=True, users=True)(callback)
    callback = app_commands.allowed_contexts(guilds=True, dms=True, private_channels=True)(callback)
    return app_commands.Command(name=name, callback=callback, description=_DESCRIPTIONS[name])
