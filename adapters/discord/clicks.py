"""Clicks on approval buttons (component interactions): decided by the core, then answered.

A component interaction whose custom_id is ours is answered either way: a deferred
update when the click counted (the message stays as it is until the sender edits it),
an ephemeral refusal, which only the clicker sees, when it did not. Other interactions
(the `/btw` command, components that are not ours) are left to the gateway client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import discord
from redis.exceptions import RedisError

from adapters.buttons import is_approval_payload, refusal_text
from adapters.discord.inbound import to_decision
from gateway.errors import GatewayError
from gateway.inbound.ingest import Ingest

log = logging.getLogger(__name__)


class Clicks:
    """Hands a component interaction's Decision to the core and answers the interaction."""

    def __init__(self, ingest: Ingest) -> None:
        self.ingest = ingest

    async def handle(self, interaction: discord.Interaction) -> None:
        """Every interaction may pass here; only clicks on our approval buttons are taken."""
        data: Mapping[str, Any] = interaction.data or {}
        custom_id = data.get("custom_id")
        if interaction.type != discord.InteractionType.component or not is_approval_payload(
            custom_id
        ):
            return
        user = interaction.user
        decision = to_decision(
            interaction_id=str(interaction.id),
            custom_id=custom_id,
            channel_id=str(interaction.channel_id),
            guild_id=str(interaction.guild_id) if interaction.guild_id else None,
            user={"id": str(user.id), "bot": user.bot},
        )
        if decision is None:
            return
        try:
            refusal = refusal_text(await self.ingest.decide(decision))
        except (GatewayError, RedisError) as exc:
            log.error("could not decide approval click %s: %s", interaction.id, exc)
            return
        await self._answer(interaction, refusal)

    async def _answer(self, interaction: discord.Interaction, refusal: str | None) -> None:
        try:
            if refusal is None:
                await interaction.response.defer()  # a deferred update: the message stays
            else:
                await interaction.response.send_message(refusal, ephemeral=True)
        except discord.HTTPException as exc:
            log.warning("could not answer click %s: %s %s", interaction.id, exc.status, exc.text)
