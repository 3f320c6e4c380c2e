"""The gateway connection: a discord.py AutoShardedClient that feeds the core's Ingest.

It asks for the guilds, guild messages, DMs and the privileged message content
intents; reconnecting and resuming are discord.py's. Messages become Inbound
through `adapters.discord.inbound`. An application command (`adapters.discord.commands`)
is deferred at once (Discord allows 3 s) and handed to the core as its typed form,
whose answer is the interaction's follow-up: through the interaction's webhook, it
reaches the user where the bot is no member too. A click on an approval button is
handed to `adapters.discord.clicks`. With auto-thread
on, a mention in a channel by someone allowed to use the bot opens a thread from
the message, and that thread is the session.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import discord
from discord import app_commands

from adapters.discord.clicks import Clicks
from adapters.discord.commands import NAMES, application_commands
from adapters.discord.inbound import interaction_inbound, payload_of, to_inbound
from adapters.discord.sender import quiet_library_logs
from gateway.errors import GatewayError
from gateway.inbound.ingest import Ingest
from gateway.messages import Inbound

log = logging.getLogger(__name__)

THREAD_NAME_LENGTH = 90
# No message cache (the gateway looks nothing up), no member lists, no pings by default.
_CLIENT_OPTIONS: dict[str, Any] = {
    "max_messages": None,
    "chunk_guilds_at_startup": False,
    "member_cache_flags": discord.MemberCacheFlags.none(),
    "allowed_mentions": discord.AllowedMentions.none(),
}
StateListener = Callable[[], Awaitable[None]]


def intents() -> discord.Intents:
    """What the gateway asks Discord for; message content is privileged (developer portal)."""
    wanted = discord.Intents.none()
    wanted.guilds = True
    wanted.guild_messages = True
    wanted.dm_messages = True
    wanted.message_content = True
    return wanted


class GatewayClient(discord.AutoShardedClient):
    """One process's shards of the bot, handing every message for the bot to `ingest`."""

    def __init__(
        self,
        ingest: Ingest,
        *,
        auto_thread: bool,
        command_guilds: Sequence[int],
        shard_count: int | None,
        shard_ids: Sequence[int] | None,
        pin_gateway: bool,
        on_state: StateListener,
    ) -> None:
        # The gateway never joins voice; without this discord.py warns that voice is off.
        discord.VoiceClient.warn_nacl = discord.VoiceClient.warn_dave = False
        quiet_library_logs()
        if shard_ids is not None:  # discord.py takes the list only when there is one
            super().__init__(
                intents=intents(),
                shard_count=shard_count,
                shard_ids=list(shard_ids),
                **_CLIENT_OPTIONS,
            )
        else:
            super().__init__(intents=intents(), shard_count=shard_count, **_CLIENT_OPTIONS)
        self.ingest = ingest
        self.clicks = Clicks(ingest)
        self.auto_thread = auto_thread
        self.command_guilds = [discord.Object(id=g) for g in command_guilds]
        self.connected: set[int] = set()
        self._pin_gateway = pin_gateway
        self._on_state = on_state
        self._no_thread_channels: set[int] = set()
        self.tree = app_commands.CommandTree(self)
        for command in application_commands(self.on_command):
            self.tree.add_command(command, guilds=self.command_guilds)

    async def setup_hook(self) -> None:
        """Before the shards connect: settle the shard count, register the commands."""
        if self._pin_gateway and self.shard_count is None:
            # Without a shard count discord.py connects to the URL /gateway/bot names;
            # with one it uses DEFAULT_GATEWAY, which DISCORD_GATEWAY_URL has set.
            self.shard_count, _, _ = await self.http.get_bot_gateway()
        await self.register_commands()

    async def register_commands(self) -> None:
        """Overwrite the bot's commands with ours: globally, or per guild (instant)."""
        scopes: list[discord.Object | None] = list(self.command_guilds) or [None]
        names = ", ".join(f"/{name}" for name in NAMES)
        for guild in scopes:
            where = f"in guild {guild.id}" if guild else "globally"
            try:
                await self.tree.sync(guild=guild)
            except discord.HTTPException as exc:
                log.warning(
                    "could not register %s %s: %s %s (invite the bot with the "
                    "applications.commands scope)",
                    names,
                    where,
                    exc.status,
                    exc.text,
                )
            else:
                log.info("registered %s %s", names, where)

    # connection state --------------------------------------------------

    async def on_shard_ready(self, shard_id: int) -> None:
        await self._shard_state(shard_id, up=True)

    async def on_shard_resumed(self, shard_id: int) -> None:
        await self._shard_state(shard_id, up=True)

    async def on_shard_disconnect(self, shard_id: int) -> None:
        await self._shard_state(shard_id, up=False)

    async def _shard_state(self, shard_id: int, *, up: bool) -> None:
        if up:
            self.connected.add(shard_id)
        else:
            self.connected.discard(shard_id)
        log.info("shard %s %s", shard_id, "connected" if up else "disconnected")
        await self._on_state()

    def state(self) -> tuple[bool, str]:
        """(all shards connected, a short detail for /healthz)."""
        wanted = list(self.shard_ids or range(self.shard_count or 1))
        up = [s for s in wanted if s in self.connected]
        total = self.shard_count or len(wanted)
        detail = f"{len(up)} of {len(wanted)} shards connected (shards {_ids(wanted)} of {total})"
        return len(up) == len(wanted), detail

    # messages ----------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        if self.user is None:
            return
        role = message.guild.self_role if message.guild else None
        facts: dict[str, Any] = {
            "bot_id": str(self.user.id),
            "bot_role_id": str(role.id) if role else None,
        }
        payload = payload_of(message)
        in_thread = isinstance(message.channel, discord.Thread)
        inbound = to_inbound(payload, in_thread=in_thread, **facts)
        if inbound is not None and self._opens_thread(message, inbound):
            thread_id = await self._start_thread(message, inbound)
            if thread_id is not None:
                inbound = to_inbound(payload, in_thread=False, session_channel=thread_id, **facts)
        if inbound is not None:
            await self._receive(inbound)

    def _opens_thread(self, message: discord.Message, inbound: Inbound) -> bool:
        """Whether this mention gets a thread of its own.

        Commands (`@bot /reset`, `@bot !btw q`) act on the channel's conversation. A
        stranger gets none: a thread is public and named after their text, so access is
        decided first, and their refusal is answered in the channel.
        """
        return (
            self.auto_thread
            and inbound.mentions_bot
            and self.ingest.access.allowed(inbound)
            and isinstance(message.channel, discord.TextChannel)
            and not inbound.text.startswith(("/", "!"))
        )

    async def _start_thread(self, message: discord.Message, inbound: Inbound) -> str | None:
        name = (inbound.text.splitlines() or [""])[0][:THREAD_NAME_LENGTH].strip()
        try:
            thread = await message.create_thread(name=name or f"Chat with {inbound.speaker.name}")
        except discord.HTTPException as exc:
            self._thread_refused(message.channel.id, exc)
            return None
        return str(thread.id)

    def _thread_refused(self, channel_id: int, exc: discord.HTTPException) -> None:
        if channel_id in self._no_thread_channels:
            return
        self._no_thread_channels.add(channel_id)
        why = (
            f"Discord answered {exc.status} {exc.text}"
            if not isinstance(exc, discord.Forbidden)
            else "the bot lacks the Create Public Threads permission there"
        )
        log.warning(
            "DISCORD_AUTO_THREAD: cannot open a thread in channel %s (%s); "
            "replying in the channel instead",
            channel_id,
            why,
        )

    # application commands ------------------------------------------------

    async def on_command(self, interaction: discord.Interaction, text: str) -> None:
        """Defer at once (Discord's 3 s deadline), then hand the typed form to the core.

        The conversion comes first, so an interaction whose ids are malformed is neither
        deferred nor answered; it takes no time worth counting against the deadline.
        No command starts a conversation's turn: each is answered by the core itself
        (or its side job), always as this interaction's follow-up, so the answer needs
        no bot in the channel.
        """
        user = interaction.user
        inbound = interaction_inbound(
            interaction_id=str(interaction.id),
            token=interaction.token,
            channel_id=str(interaction.channel_id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            user={
                "id": str(user.id),
                "username": user.name,
                "global_name": user.global_name,
                "bot": user.bot,
            },
            text=text,
            context=_context(interaction),
        )
        if inbound is None:
            return
        try:
            await interaction.response.defer(thinking=True)
        except discord.HTTPException as exc:
            log.warning(
                "could not defer %s interaction %s: %s %s",
                text.split()[0],
                interaction.id,
                exc.status,
                exc.text,
            )
            return
        await self._receive(inbound)

    # approval clicks -------------------------------------------------------

    async def on_interaction(self, interaction: discord.Interaction) -> None:
        """discord.py's hook for every interaction: clicks go to `clicks.py`."""
        await self.clicks.handle(interaction)

    async def _receive(self, inbound: Inbound) -> None:
        try:
            outcome = await self.ingest.receive(inbound)
        except GatewayError as exc:
            log.error(
                "could not take message %s in %s: %s", inbound.message_id, inbound.session_key, exc
            )
            return
        log.debug("message %s in %s: %s", inbound.message_id, inbound.session_key, outcome)


def _context(interaction: discord.Interaction) -> int | None:
    """Discord's context of the interaction (0 a server, 1 the bot's DM, 2 another
    private channel), as the payload's `context` field carried it."""
    if interaction.context.guild:
        return 0
    if interaction.context.dm_channel:
        return 1
    return 2 if interaction.context.private_channel else None


def _ids(shards: Sequence[int]) -> str:
    return ",".join(str(s) for s in shards)
